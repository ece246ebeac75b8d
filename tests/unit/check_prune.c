/*
 * check_prune.c: unit tests of retention pruning (daemon/store_prune.c)
 * through the store API: receipts written across hours and days at known
 * times, pruned with a cutoff inside a bucket, leave rollups whose
 * fallbacks and coverage answers equal a full scan of the remaining
 * receipts; the batch bound holds; each batch is recorded; dedupe records
 * of pruned receipts survive.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "aggcheck.h"
#include "envelope.h"
#include "store.h"
#include "store_agg.h"
#include "store_internal.h"
#include "store_prune.h"

#define HOUR 3600000LL
#define DAY  86400000LL

static char path[256];

static void
setup(void)
{
    snprintf(path, sizeof(path), "%s/check_prune-%ld.db", TEST_BINARY_DIR,
             (long)getpid());
    unlink(path);
}

static void
teardown(void)
{
    char p[300];

    unlink(path);
    snprintf(p, sizeof(p), "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof(p), "%s-shm", path);
    unlink(p);
}

static struct store *
open_rw(void)
{
    /* Small chunks: the fill spans many, and a tail is left over. */
    struct store_opts o = { .quarantine_max_bytes = 1 << 20,
                            .chunk_receipts = 64 };
    struct proto_err err;
    struct store *s;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    return s;
}

/* One write of n receipts at time at, with seq, over three plans. */
static void
put(struct store *s, int64_t at, uint64_t seq, int n)
{
    static const char *plans[] = { "p-a", "p-b", "p-c" };
    struct receipt rs[16];
    struct store_write w;
    struct proto_err err;
    int i, b;

    ck_assert_int_le(n, 16);
    memset(rs, 0, sizeof(rs));
    for (i = 0; i < n; i++) {
        struct receipt *r = &rs[i];
        uint64_t x = (uint64_t)at / 1000 + (uint64_t)i * 7919u;

        r->schema_version = (uint16_t)(i % 2 ? 3 : 2);
        r->requested_backend = RECEIPT_BACKEND_CUDA;
        r->executed_backend =
            (uint8_t)(x % 5 ? RECEIPT_BACKEND_CUDA : RECEIPT_BACKEND_CPU);
        r->prepared_plan_id.ptr = plans[x % 3];
        r->prepared_plan_id.len = 3;
        r->model_instance_id.ptr = "m";
        r->model_instance_id.len = 1;
        r->graph_hash.ptr = "g";
        r->graph_hash.len = 1;
        r->tuning_profile.ptr = r->stop_reason.ptr = "";
        r->counter_coverage = 0x3ffffffu ^ (x * 2654435761u);
        /* Values near UINT64_MAX make the 128-bit sums carry, and values
         * that fall with time put each bucket's extremes at its edges. */
        for (b = 0; b < RECEIPT_NCOUNTERS; b++)
            r->counters[b] = b % 3 == 0 ? UINT64_MAX - x : x * (uint64_t)b;
    }
    memset(&w, 0, sizeof(w));
    w.op = PROTO_OP_RECEIPTS;
    w.source = "src";
    w.source_len = 3;
    w.has_seq = 1;
    w.seq = seq;
    w.outcome = "\x80";
    w.outcome_len = 1;
    w.received_at = at;
    w.receipts = rs;
    w.n_receipts = (size_t)n;
    ck_assert_int_eq(store_apply(s, &w, &err), 0);
    ck_assert_int_eq(w.duplicate, 0);
}

/* Every 20 minutes over three days from day 10, 4 receipts a write. */
static int
fill(struct store *s)
{
    struct proto_err err;
    int64_t at;
    int n = 0;

    ck_assert_int_eq(store_begin(s, &err), 0);
    for (at = 10 * DAY + 1234; at < 13 * DAY; at += HOUR / 3) {
        put(s, at, (uint64_t)n + 1, 4);
        n++;
    }
    ck_assert_int_eq(store_commit(s, &err), 0);
    return n * 4;
}

static int64_t
scalar(struct store *s, const char *sql)
{
    sqlite3_stmt *st;
    int64_t v;

    ck_assert_int_eq(sqlite3_prepare_v2(store_db(s), sql, -1, &st, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* The rollup-based answers (fallbacks and coverage: counts, sums, min,
 * max) equal a full scan, for the whole store and for ranges that start
 * and end inside hours and days. */
static void
assert_rollups_equal_scan(struct store *s)
{
    static const struct aggcheck_range ranges[] = {
        { 0, 0, 0, 0 },
        { 1, 0, 10 * DAY, 0 },
        { 1, 1, 10 * DAY + 5 * HOUR + 17, 12 * DAY + 3 * HOUR + 5 },
        { 1, 1, 11 * DAY, 13 * DAY },
        { 0, 1, 0, 11 * DAY + HOUR / 2 },
    };

    aggcheck_equal_scan(s, ranges, sizeof(ranges) / sizeof(ranges[0]));
    /* No rollup row outlives its receipts, and both levels add up. */
    ck_assert_int_eq(scalar(s, "SELECT count(*) FROM rollups "
                               "WHERE receipts = 0"),
                     0);
    ck_assert_int_eq(scalar(s, "SELECT count(*) FROM rollups_day "
                               "WHERE receipts = 0"),
                     0);
    /* The rollups cover the receipts below rollup_from, and those of the
     * chunks being merged (below rollup_end) up to the key rollup_merge
     * names (migrations/0007 and 0008). */
    ck_assert_int_eq(
        scalar(s, "SELECT coalesce(sum(receipts), 0) FROM rollups"),
        scalar(s,
               "SELECT count(*) FROM receipts r, rollup_merge m WHERE "
               "r.id < m.rollup_from OR (r.id < (SELECT value FROM counters "
               "WHERE name = 'rollup_end') AND m.plan_id IS NOT NULL AND "
               "(r.plan_id, r.graph_id, r.model_id, r.requested_backend, "
               "r.executed_backend, r.source_id, r.received_at / 3600000) <= "
               "(m.plan_id, m.graph_id, m.model_id, m.requested_backend, "
               "m.executed_backend, m.source_id, m.bucket))"));
    /* The day rollups hold the hours below days_from. */
    ck_assert_int_eq(scalar(s, "SELECT coalesce(sum(receipts), 0) FROM "
                               "rollups_day"),
                     scalar(s, "SELECT coalesce(sum(receipts), 0) FROM "
                               "rollups WHERE bucket < (SELECT value FROM "
                               "counters WHERE name = 'days_from')"));
}

/* A cutoff in the middle of an hour (and of a day): the remaining half of
 * both buckets still answers exactly; the records say what went. */
START_TEST(test_prune_cuts_a_bucket_in_half_and_keeps_rollups_exact)
{
    const int64_t cutoff = 11 * DAY + 7 * HOUR + HOUR / 2;
    struct store_prune_result r;
    struct proto_err err;
    struct store *s = open_rw();
    int64_t due, total = fill(s), left;

    assert_rollups_equal_scan(s);
    due = scalar(s, "SELECT count(*) FROM receipts WHERE received_at < "
                    "11 * 86400000 + 7 * 3600000 + 1800000");
    ck_assert_int_gt(due, 0);
    ck_assert_int_eq(store_prune(s, cutoff, STORE_PRUNE_MAX_ROWS, &r, &err), 0);
    ck_assert_uint_eq(r.rows, (uint64_t)due);
    ck_assert_int_eq(r.more, 0);
    ck_assert_int_eq(r.oldest, 10 * DAY + 1234);
    ck_assert_int_lt(r.newest, cutoff);
    ck_assert_int_ge(r.newest, cutoff - HOUR / 3);
    left = scalar(s, "SELECT count(*) FROM receipts");
    ck_assert_int_eq(left, total - due);
    ck_assert_int_eq(
        scalar(s, "SELECT min(received_at) FROM receipts") >= cutoff, 1);
    /* The hour of the cutoff has receipts on both sides of it. */
    ck_assert_int_gt(scalar(s, "SELECT receipts FROM rollups WHERE bucket = "
                               "(11 * 24 + 7) LIMIT 1"),
                     0);
    assert_rollups_equal_scan(s);

    ck_assert_int_eq(scalar(s, "SELECT count(*) FROM prunes"), 1);
    ck_assert_int_eq(scalar(s, "SELECT rows FROM prunes"), due);
    ck_assert_int_eq(scalar(s, "SELECT cutoff FROM prunes"), cutoff);
    ck_assert_int_eq(scalar(s, "SELECT oldest FROM prunes"), r.oldest);
    ck_assert_int_eq(scalar(s, "SELECT newest FROM prunes"), r.newest);
    /* Unix milliseconds, like received_at: within a minute of now. */
    ck_assert_int_lt(llabs(scalar(s, "SELECT pruned_at FROM prunes") -
                           (int64_t)time(NULL) * 1000),
                     60000);

    /* Nothing more is due: no change, no record. */
    ck_assert_int_eq(store_prune(s, cutoff, 1000, &r, &err), 0);
    ck_assert_uint_eq(r.rows, 0);
    ck_assert_int_eq(scalar(s, "SELECT count(*) FROM prunes"), 1);
    store_free(s);
}
END_TEST

/* A prune that takes part of a chunk lying inside a window's partial
 * hour: the chunk's sums (migrations/0014) no longer hold, and its edge is
 * read from the receipts left. A write a minute for three hours, chunks of
 * 16 minutes, batches of 37 receipts that end inside chunks. */
START_TEST(test_prune_inside_a_chunk_drops_its_sums)
{
    const int64_t t0 = 20 * DAY + 7000, min = 60000;
    const int64_t cutoff = 20 * DAY + HOUR + 25 * min + 30000;
    static const struct aggcheck_range ranges[] = {
        { 1, 1, 20 * DAY + HOUR + 2 * min, 20 * DAY + HOUR + 58 * min },
        { 1, 0, 20 * DAY + 5 * min, 0 },
        { 0, 0, 0, 0 },
    };
    struct store_prune_result r;
    struct proto_err err;
    struct store *s = open_rw();
    int i;

    for (i = 0; i < 180; i++) {
        ck_assert_int_eq(store_begin(s, &err), 0);
        put(s, t0 + i * min, (uint64_t)i + 1, 4);
        ck_assert_int_eq(store_commit(s, &err), 0);
    }
    ck_assert_int_gt(scalar(s, "SELECT count(*) FROM chunk_sums"), 5);
    aggcheck_equal_scan(s, ranges, sizeof(ranges) / sizeof(ranges[0]));
    do {
        ck_assert_int_eq(store_prune(s, cutoff, 37, &r, &err), 0);
        aggcheck_equal_scan(s, ranges, sizeof(ranges) / sizeof(ranges[0]));
    } while (r.more);
    ck_assert_int_eq(scalar(s, "SELECT count(*) FROM chunk_sums WHERE chunk "
                               "<= (SELECT min(id) FROM receipts)"),
                     0);
    store_free(s);
}
END_TEST

/* At most max_rows a batch, oldest first; batches until none is due. */
START_TEST(test_prune_respects_max_rows)
{
    const int64_t cutoff = 12 * DAY + 2 * HOUR;
    struct store_prune_result r;
    struct proto_err err;
    struct store *s = open_rw();
    int64_t due, prev_newest = 0, removed = 0;
    int batches = 0;

    fill(s);
    due = scalar(s, "SELECT count(*) FROM receipts WHERE received_at < "
                    "12 * 86400000 + 2 * 3600000");
    do {
        int64_t before = scalar(s, "SELECT count(*) FROM receipts");

        ck_assert_int_eq(store_prune(s, cutoff, 37, &r, &err), 0);
        ck_assert_uint_le(r.rows, 37);
        ck_assert_int_eq(before - scalar(s, "SELECT count(*) FROM receipts"),
                         (int64_t)r.rows);
        if (r.rows > 0) {
            ck_assert_int_ge(r.oldest, prev_newest);
            prev_newest = r.newest;
            batches++;
        }
        removed += (int64_t)r.rows;
        ck_assert_int_eq(r.more, r.rows == 37);
        if (batches % 5 == 0)
            assert_rollups_equal_scan(s);
    } while (r.rows > 0);
    ck_assert_int_eq(removed, due);
    ck_assert_int_eq(batches, (int)((due + 36) / 37));
    ck_assert_int_eq(scalar(s, "SELECT count(*) FROM prunes"), batches);
    ck_assert_int_eq(scalar(s, "SELECT sum(rows) FROM prunes"), due);
    assert_rollups_equal_scan(s);

    ck_assert_int_eq(store_prune(s, cutoff, 0, &r, &err), PROTO_EINVALID);
    ck_assert_int_eq(store_prune(s, cutoff, STORE_PRUNE_MAX_ROWS + 1, &r, &err),
                     PROTO_EINVALID);
    store_free(s);
}
END_TEST

/* A resend of a pruned (source, seq) is still a duplicate. */
START_TEST(test_prune_keeps_dedupe_records)
{
    struct store_prune_result r;
    struct store_write w;
    struct receipt rc;
    struct proto_err err;
    struct store *s = open_rw();

    fill(s);
    ck_assert_int_eq(store_prune(s, 14 * DAY, STORE_PRUNE_MAX_ROWS, &r, &err),
                     0);
    ck_assert_int_eq(scalar(s, "SELECT count(*) FROM receipts"), 0);
    ck_assert_int_eq(scalar(s, "SELECT count(*) FROM rollups"), 0);
    ck_assert_int_eq(scalar(s, "SELECT count(*) FROM rollups_day"), 0);
    ck_assert_int_gt(scalar(s, "SELECT count(*) FROM dedupe"), 0);

    memset(&rc, 0, sizeof(rc));
    rc.schema_version = 3;
    rc.prepared_plan_id.ptr = rc.model_instance_id.ptr = "x";
    rc.prepared_plan_id.len = rc.model_instance_id.len = 1;
    rc.graph_hash.ptr = rc.tuning_profile.ptr = rc.stop_reason.ptr = "";
    memset(&w, 0, sizeof(w));
    w.op = PROTO_OP_RECEIPTS;
    w.source = "src";
    w.source_len = 3;
    w.has_seq = 1;
    w.seq = 1;
    w.outcome = "\x80";
    w.outcome_len = 1;
    w.received_at = 20 * DAY;
    w.receipts = &rc;
    w.n_receipts = 1;
    ck_assert_int_eq(store_begin(s, &err), 0);
    ck_assert_int_eq(store_apply(s, &w, &err), 0);
    ck_assert_int_eq(store_commit(s, &err), 0);
    ck_assert_int_eq(w.duplicate, 1);
    free(w.dup_outcome);
    ck_assert_int_eq(scalar(s, "SELECT count(*) FROM receipts"), 0);
    store_free(s);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("prune");
    TCase *tc;

    tc = tcase_create("half_bucket");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc,
                   test_prune_cuts_a_bucket_in_half_and_keeps_rollups_exact);
    suite_add_tcase(s, tc);
    tc = tcase_create("max_rows");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_prune_respects_max_rows);
    tcase_add_test(tc, test_prune_inside_a_chunk_drops_its_sums);
    suite_add_tcase(s, tc);
    tc = tcase_create("dedupe");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_prune_keeps_dedupe_records);
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
