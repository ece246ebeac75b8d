/*
 * e2e_prune.c: retention end to end with the real receiptd. Receive times
 * are the daemon's clock, so the test runs it with a one-second retention
 * age, small batches and short quiet moments, writes receipts, and watches
 * them disappear in batches while new writes are still acknowledged
 * promptly; then checks the `prunes` records, the stats counters, and that
 * a resend of a pruned (source, seq) is still answered as a duplicate.
 */
#include <check.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "e2e_util.h"

#define T     10000 /* ms to wait for any reply */
#define N     60    /* receipts written before pruning starts */
#define BATCH 7

static uint64_t
mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void
expect_ok(int fd, uint64_t id, struct e2e_reply *rep)
{
    ck_assert_int_eq(e2e_recv(fd, T, rep), 0);
    ck_assert_msg(rep->r.ok, "id %llu: %s at %s: %s", (unsigned long long)id,
                  proto_code_name(rep->r.err.code), rep->r.err.path,
                  rep->r.err.message);
    ck_assert_uint_eq(rep->r.id, id);
}

static void
send_receipt(int fd, uint64_t id, uint64_t seq, struct e2e_reply *rep)
{
    struct e2e_receipt r = { .schema = 3,
                             .plan = "plan-p",
                             .graph = "g",
                             .model = "m",
                             .requested = "cuda",
                             .executed = "cuda",
                             .coverage = 0x3,
                             .decode_steps = seq,
                             .fallback_count = 0 };
    size_t len;
    char *body = e2e_receipt_bytes(&r, &len);

    ck_assert_ptr_nonnull(body);
    ck_assert_int_eq(e2e_request(fd, PROTO_OP_RECEIPT, id, 1, seq, body, len),
                     0);
    free(body);
    expect_ok(fd, id, rep);
}

/* {kind, limit, source?} */
static void
query(int fd, uint64_t id, const char *kind, const char *source,
      struct e2e_reply *rep)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, source ? 3 : 2);
    envelope_pack_cstr(&pk, "kind");
    envelope_pack_cstr(&pk, kind);
    envelope_pack_cstr(&pk, "limit");
    msgpack_pack_uint64(&pk, 1000);
    if (source != NULL) {
        envelope_pack_cstr(&pk, "source");
        envelope_pack_cstr(&pk, source);
    }
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_QUERY, id, 0, 0, sb.data, sb.size), 0);
    msgpack_sbuffer_destroy(&sb);
    expect_ok(fd, id, rep);
}

static uint32_t
count_rows(int fd, uint64_t id, const char *kind, const char *source)
{
    struct e2e_reply rep;
    const msgpack_object *rows;
    uint32_t n;

    query(fd, id, kind, source, &rep);
    rows = e2e_get(rep.r.result, "rows");
    ck_assert_ptr_nonnull(rows);
    ck_assert_int_eq(rows->type, MSGPACK_OBJECT_ARRAY);
    n = rows->via.array.size;
    e2e_reply_free(&rep);
    return n;
}

START_TEST(test_e2e_prune_removes_old_receipts_in_batches)
{
    static const char *const flags[] = { "--retention-age-s",
                                         "1",
                                         "--prune-batch",
                                         "7",
                                         "--prune-idle-ms",
                                         "20",
                                         NULL };
    struct e2e_daemon d;
    struct e2e_reply rep;
    const msgpack_object *rows, *st;
    uint64_t id = 1, seq, t0, worst = 0, sum = 0, prev_id = UINT64_MAX;
    uint32_t left, i, counts_seen = 0, last_left = N + 1;
    int fd, fresh, status;

    ck_assert_int_eq(e2e_start(&d, flags), 0);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "node-p"), 0);
    for (seq = 1; seq <= N; seq++) {
        send_receipt(fd, id++, seq, &rep);
        e2e_reply_free(&rep);
    }
    fresh = e2e_connect(&d);
    ck_assert_int_ge(fresh, 0);
    ck_assert_int_eq(e2e_hello(fresh, "node-fresh"), 0);

    /* While the old receipts go, a new write each round is acknowledged
     * well within a second: pruning never holds the queue. */
    t0 = mono_ms();
    for (;;) {
        uint64_t s0 = mono_ms(), dt;

        send_receipt(fresh, id, id, &rep);
        id++;
        e2e_reply_free(&rep);
        dt = mono_ms() - s0;
        if (dt > worst)
            worst = dt;
        left = count_rows(fd, id++, "receipts", "node-p");
        if (left != last_left) {
            counts_seen++;
            last_left = left;
        }
        if (left == 0)
            break;
        ck_assert_msg(mono_ms() - t0 < 30000,
                      "%u receipts still there after 30 s", left);
        usleep(30000);
    }
    ck_assert_msg(worst < 1000, "a write waited %llu ms during pruning",
                  (unsigned long long)worst);
    /* Seen whole, then gone (the records below show the batches; how
     * many intermediate counts a poll catches depends on the machine). */
    ck_assert_uint_ge(counts_seen, 2);

    /* Records: newest first, at most a batch each, oldest <= newest <
     * cutoff. */
    query(fd, id++, "prunes", NULL, &rep);
    rows = e2e_get(rep.r.result, "rows");
    ck_assert_ptr_nonnull(rows);
    ck_assert_uint_ge(rows->via.array.size, (N + BATCH - 1) / BATCH);
    for (i = 0; i < rows->via.array.size; i++) {
        const msgpack_object *r = &rows->via.array.ptr[i];
        uint64_t n = e2e_get_uint(r, "rows");

        ck_assert_uint_lt(e2e_get_uint(r, "id"), prev_id);
        prev_id = e2e_get_uint(r, "id");
        ck_assert_uint_ge(n, 1);
        ck_assert_uint_le(n, BATCH);
        ck_assert_uint_le(e2e_get_uint(r, "oldest_received_at"),
                          e2e_get_uint(r, "newest_received_at"));
        ck_assert_uint_lt(e2e_get_uint(r, "newest_received_at"),
                          e2e_get_uint(r, "cutoff_at"));
        ck_assert_uint_ge(e2e_get_uint(r, "pruned_at"),
                          e2e_get_uint(r, "cutoff_at"));
        sum += n;
    }
    ck_assert_uint_ge(sum, N);
    e2e_reply_free(&rep);

    /* The stats counters cover at least what the records show (fresh
     * receipts may age and go between the two queries). */
    query(fd, id++, "stats", NULL, &rep);
    rows = e2e_get(rep.r.result, "rows");
    ck_assert_ptr_nonnull(rows);
    st = &rows->via.array.ptr[0];
    ck_assert_uint_ge(e2e_get_uint(st, "pruned"), sum);
    ck_assert_uint_ge(e2e_get_uint(st, "prune_runs"), (N + BATCH - 1) / BATCH);
    ck_assert_uint_eq(e2e_get_uint(st, "prune_failures"), 0);
    e2e_reply_free(&rep);

    /* A resend of a pruned seq is still a duplicate, not a new row. */
    send_receipt(fd, id++, 1, &rep);
    ck_assert_ptr_nonnull(e2e_get(rep.r.result, "duplicate"));
    e2e_reply_free(&rep);
    ck_assert_uint_eq(count_rows(fd, id++, "receipts", "node-p"), 0);

    close(fresh);
    close(fd);
    ck_assert_int_eq(e2e_stop(&d, SIGTERM, 10000, &status), 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    e2e_cleanup(&d);
}
END_TEST

/* Without a retention age nothing is pruned, however idle the writer. */
START_TEST(test_e2e_prune_off_by_default)
{
    static const char *const flags[] = { "--prune-idle-ms", "10", NULL };
    struct e2e_daemon d;
    struct e2e_reply rep;
    uint64_t seq;
    int fd, status;

    ck_assert_int_eq(e2e_start(&d, flags), 0);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "node-k"), 0);
    for (seq = 1; seq <= 5; seq++) {
        send_receipt(fd, seq, seq, &rep);
        e2e_reply_free(&rep);
    }
    usleep(1500000);
    ck_assert_uint_eq(count_rows(fd, 100, "receipts", "node-k"), 5);
    ck_assert_uint_eq(count_rows(fd, 101, "prunes", NULL), 0);
    close(fd);
    ck_assert_int_eq(e2e_stop(&d, SIGTERM, 10000, &status), 0);
    e2e_cleanup(&d);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("e2e_prune");
    TCase *tc;

    tc = tcase_create("batches");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_e2e_prune_removes_old_receipts_in_batches);
    suite_add_tcase(s, tc);
    tc = tcase_create("off");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_e2e_prune_off_by_default);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
