/*
 * check_histo.c: daemon/histo.c: a duration lands in the first bucket
 * whose bound holds it, the snapshot is cumulative with +Inf equal to the
 * count, and a reader on another thread sees the counts only grow while
 * one thread adds (the adds are a load and a store, not locked).
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "histo.h"
#include "skip.h"

START_TEST(test_histo_buckets_by_inclusive_bound)
{
    struct histo h;
    struct histo_snap s;

    histo_init(&h);
    histo_observe(&h, 0);
    histo_observe(&h, 500);      /* the first bound holds it */
    histo_observe(&h, 501);      /* the second */
    histo_observe(&h, 10000000); /* the last bound */
    histo_observe(&h, 10000001); /* +Inf */
    histo_read(&h, &s);
    ck_assert_uint_eq(s.cumulative[0], 2);
    ck_assert_uint_eq(s.cumulative[1], 3);
    ck_assert_uint_eq(s.cumulative[HISTO_NBOUNDS - 2], 3);
    ck_assert_uint_eq(s.cumulative[HISTO_NBOUNDS - 1], 4);
    ck_assert_uint_eq(s.cumulative[HISTO_NBOUNDS], 5);
    ck_assert_uint_eq(s.count, 5);
    ck_assert_uint_eq(s.sum_us, 0 + 500 + 501 + 10000000 + 10000001ull);
}
END_TEST

#define ADDS 2000000

struct race {
    struct histo h;
    atomic_int done;
};

static void *
adder(void *arg)
{
    struct race *r = arg;
    uint64_t i;

    for (i = 0; i < ADDS; i++)
        histo_observe(&r->h, i % 3 == 0 ? 400 : 2000);
    atomic_store(&r->done, 1);
    return NULL;
}

START_TEST(test_histo_read_while_one_thread_adds)
{
    static struct race r;
    struct histo_snap s;
    uint64_t last = 0;
    pthread_t t;

    histo_init(&r.h);
    atomic_init(&r.done, 0);
    ck_assert_int_eq(pthread_create(&t, NULL, adder, &r), 0);
    do {
        histo_read(&r.h, &s);
        ck_assert_uint_ge(s.count, last);
        last = s.count;
    } while (!atomic_load(&r.done));
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    histo_read(&r.h, &s);
    /* Nothing lost: every add of the one adder is in the totals. */
    ck_assert_uint_eq(s.count, ADDS);
    ck_assert_uint_eq(s.cumulative[0], (ADDS + 2) / 3);
    ck_assert_uint_eq(s.sum_us, (uint64_t)(ADDS + 2) / 3 * 400 +
                                    (uint64_t)(ADDS - (ADDS + 2) / 3) * 2000);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("histo");
    TCase *tc = tcase_create("histo");

    tcase_add_test(tc, test_histo_buckets_by_inclusive_bound);
    tcase_add_test(tc, test_histo_read_while_one_thread_adds);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(suite());
    int status;

    srunner_run_all(sr, CK_NORMAL);
    status = skip_status(sr);
    srunner_free(sr);
    return status;
}
