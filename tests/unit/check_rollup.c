/*
 * check_rollup.c: unit tests of the rollups (daemon/store_rollup.c) through
 * the store API: after any sequence of writes, savepoints released or
 * rolled back, commits and rollbacks, the rollup-based aggregates equal a
 * full scan of the receipts (store_query_agg with and without
 * STORE_AGG_SCAN), including jobs with more keys than are summed in memory
 * and transactions with more keys than are held until COMMIT.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "aggcheck.h"
#include "envelope.h"
#include "store.h"
#include "store_agg.h"
#include "store_internal.h"
#include "store_prune.h"
#include "store_rollup.h"

static char path[256];
static struct store_shared *shared;

static void
setup(void)
{
    snprintf(path, sizeof(path), "%s/check_rollup-%ld.db", TEST_BINARY_DIR,
             (long)getpid());
    unlink(path);
}

static void
teardown(void)
{
    char p[300];

    /* A test that failed while it held the fold lets it go. */
    store_rollup_test_hold(0);
    store_shared_unref(shared);
    shared = NULL;
    unlink(path);
    snprintf(p, sizeof(p), "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof(p), "%s-shm", path);
    unlink(p);
}

static char names[6000][16];
static const char *const models[] = { "m-0", "m-1", "m-2", "m-3", "m-4" };
static const char *const graphs[] = { "g-0", "g-1", "g-2" };

/* store_opts.rollup_chunks of the test: every test runs with each, with
 * and without a registry of the writer's sums for the queries. */
static const uint32_t spans[] = { 1, 3, 1, 3 };
static uint32_t span = 1;

/* The loop tests' index: its span, and a registry from the second half on.
 *
 * Under AddressSanitizer the four-variant tests run variants 1 and 2 only
 * (one span each, one with a registry and one without): there a test's
 * time goes to page faults in the allocator's fresh mappings for the
 * scans' group tables (about 4x the plain build). Each span and each
 * registry state still runs under the sanitizer; the two pairings left
 * out run in the plain build, which runs all four. */
#ifdef __SANITIZE_ADDRESS__
#define VARIANT_FIRST 1
#define VARIANT_END   3
#else
#define VARIANT_FIRST 0
#define VARIANT_END   4
#endif

static void
variant(int i)
{
    span = spans[i];
    store_shared_unref(shared);
    shared = i >= 2 ? store_shared_new() : NULL;
}

/* A job of n receipts whose keys start at key0; each receipt has its own
 * key when spread, else they share a few. Times cover two days. */
static void
job(struct store *s, int key0, int n, int spread, int64_t at)
{
    struct receipt *rs = calloc((size_t)n, sizeof(*rs));
    struct store_write w;
    struct proto_err err;
    int i, b;

    ck_assert_ptr_nonnull(rs);
    for (i = 0; i < n; i++) {
        struct receipt *r = &rs[i];
        int k = key0 + (spread ? i : i % 3);

        r->schema_version = (uint16_t)(i % 2 ? 3 : 2);
        r->requested_backend = RECEIPT_BACKEND_CUDA;
        r->executed_backend =
            (uint8_t)(i % 5 ? RECEIPT_BACKEND_CUDA : RECEIPT_BACKEND_CPU);
        /* A plan fixes its graph and model, and the three are different
         * strings, so a sum filed under the wrong one is seen. */
        r->prepared_plan_id.ptr = names[k % 6000];
        r->prepared_plan_id.len = strlen(names[k % 6000]);
        r->model_instance_id.ptr = models[k % 5];
        r->model_instance_id.len = strlen(models[k % 5]);
        r->graph_hash.ptr = graphs[k % 3];
        r->graph_hash.len = strlen(graphs[k % 3]);
        r->tuning_profile.ptr = r->stop_reason.ptr = "";
        r->counter_coverage = 0x3ffffffu ^ ((uint64_t)i * 2654435761u);
        for (b = 0; b < RECEIPT_NCOUNTERS; b++)
            r->counters[b] =
                b % 3 == 0 ? UINT64_MAX - (uint64_t)i : (uint64_t)(i * b);
    }
    memset(&w, 0, sizeof(w));
    w.op = PROTO_OP_RECEIPTS;
    w.source = "src";
    w.source_len = 3;
    w.received_at = at;
    w.receipts = rs;
    w.n_receipts = (size_t)n;
    ck_assert_int_eq(store_apply(s, &w, &err), 0);
    free(rs);
}

/* The rollups' answer equals a scan of the receipts, over all time and
 * over windows whose whole hours the rollups answer. */
static void
assert_rollups_equal_scan(void)
{
    static const struct aggcheck_range ranges[] = {
        { 0, 0, 0, 0 },
        { 1, 1, 86400000 + 3600000 + 7, 3 * 86400000 + 5 },
        { 1, 0, 10 * 3600000 + 5, 0 },
        { 0, 1, 0, 11 * 3600000 + 2 },
    };
    struct store_opts o = { .readonly = 1, .shared = shared };
    struct proto_err err;
    struct store *s;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    aggcheck_equal_scan(s, ranges, sizeof(ranges) / sizeof(ranges[0]));
    store_free(s);
}

/* With a registry, queries read the writer's sums not merged yet from it,
 * not only from the rows. */
static void
assert_views_answered(void)
{
    uint64_t hits, misses;

    store_shared_counts(shared, &hits, &misses);
    if (shared != NULL)
        ck_assert_uint_gt(hits, 0);
}

/* One integer from the store's file, through a connection of its own. */
static int64_t
scalar(const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    int64_t v;

    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* Whether a chunk's sums are being merged into the rollups (0008). */
static int
merging(void)
{
    return scalar("SELECT rollup_from < (SELECT value FROM counters WHERE "
                  "name = 'tail_from') FROM rollup_merge") != 0;
}

static struct store *
open_rw(void)
{
    /* Small chunks: commits turn the tail into chunks, whose rollups are
     * then read back and merged, and rollbacks reload the tail. */
    struct store_opts o = { .quarantine_max_bytes = 1 << 20,
                            .chunk_receipts = 100,
                            .rollup_chunks = span,
                            .shared = shared };
    struct proto_err err;
    struct store *s;
    int i;

    for (i = 0; i < 6000; i++)
        snprintf(names[i], sizeof(names[i]), "k-%d", i);
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    return s;
}

/* Jobs released, one rolled back, in one transaction; then a rolled-back
 * transaction; then a plain one without savepoints. */
START_TEST(test_rollup_follows_savepoints_and_rollbacks)
{
    const int64_t day = 86400000;
    struct proto_err err;
    struct store *s = (variant(_i), open_rw());

    ck_assert_int_eq(store_begin(s, &err), 0);
    ck_assert_int_eq(store_savepoint(s, &err), 0);
    job(s, 0, 50, 0, day + 5);
    ck_assert_int_eq(store_savepoint_release(s, &err), 0);
    ck_assert_int_eq(store_savepoint(s, &err), 0);
    job(s, 1, 50, 0, day + 7); /* shares keys with the first */
    store_savepoint_rollback(s);
    ck_assert_int_eq(store_savepoint(s, &err), 0);
    job(s, 2, 300, 1, 2 * day + 3600000 * 5); /* more keys than a job holds */
    ck_assert_int_eq(store_savepoint_release(s, &err), 0);
    ck_assert_int_eq(store_savepoint(s, &err), 0);
    job(s, 3, 300, 1, 2 * day); /* early write, then rolled back */
    store_savepoint_rollback(s);
    ck_assert_int_eq(store_commit(s, &err), 0);

    ck_assert_int_eq(store_begin(s, &err), 0);
    job(s, 0, 30, 0, day + 9);
    store_rollback(s);

    ck_assert_int_eq(store_begin(s, &err), 0);
    job(s, 0, 30, 0, day + 11);
    job(s, 5, 30, 1, day + 12);
    ck_assert_int_eq(store_commit(s, &err), 0);
    store_free(s);
    assert_rollups_equal_scan();
}
END_TEST

/* More keys in one transaction than are held until COMMIT. */
START_TEST(test_rollup_survives_a_transaction_with_many_keys)
{
    struct proto_err err;
    struct store *s = (variant(_i), open_rw());
    int i;

    ck_assert_int_eq(store_begin(s, &err), 0);
    for (i = 0; i < 100; i++) {
        ck_assert_int_eq(store_savepoint(s, &err), 0);
        job(s, i * 50, 50, 1, 1000 + i);
        ck_assert_int_eq(store_savepoint_release(s, &err), 0);
    }
    /* Again over the same keys, so that flushed rows are read back. */
    for (i = 0; i < 100; i++) {
        ck_assert_int_eq(store_savepoint(s, &err), 0);
        job(s, i * 50, 50, 1, 2000 + i);
        if (i % 7 == 0)
            store_savepoint_rollback(s);
        else
            ck_assert_int_eq(store_savepoint_release(s, &err), 0);
    }
    ck_assert_int_eq(store_commit(s, &err), 0);
    store_free(s);
    assert_rollups_equal_scan();
}
END_TEST

/* More keys in the tail than the rollups hold in memory (8192): the tail
 * becomes a chunk early, inside the transaction, even inside a job; a job
 * rolled back after that reloads the tail from its rows. */
START_TEST(test_rollup_full_tail_becomes_a_chunk_early)
{
    const int64_t hour = 3600000;
    struct store_opts o = { .quarantine_max_bytes = 1 << 20,
                            .chunk_receipts = 1000000,
                            .rollup_chunks = spans[_i],
                            .shared = (variant(_i), shared) };
    struct proto_err err;
    struct store *s;
    sqlite3 *db;
    sqlite3_stmt *st;
    int i, chunks;

    for (i = 0; i < 6000; i++)
        snprintf(names[i], sizeof(names[i]), "k-%d", i);
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    ck_assert_int_eq(store_begin(s, &err), 0);
    /* 6000 keys in one hour, then 6000 more in the next. */
    job(s, 0, 3000, 1, 10 * hour);
    job(s, 3000, 3000, 1, 10 * hour + 5);
    job(s, 0, 3000, 1, 11 * hour);
    ck_assert_int_eq(store_savepoint(s, &err), 0);
    job(s, 3000, 3000, 1, 11 * hour + 5); /* the early chunk is in here */
    store_savepoint_rollback(s);
    job(s, 3000, 2000, 1, 11 * hour + 7);
    ck_assert_int_eq(store_commit(s, &err), 0);
    store_free(s);

    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM chunks", -1, &st, NULL),
        SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    chunks = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    ck_assert_int_ge(chunks, 1);
    assert_rollups_equal_scan();
}
END_TEST

/* A chunk's sums reach the rollups over several commits, a slice each
 * (migrations/0008): at every step in between, across a restart, a
 * rolled-back transaction and a rolled-back savepoint, the rollups and
 * the receipts of the chunk not merged yet answer like a scan. */
START_TEST(test_rollup_merge_spans_commits_restarts_and_rollbacks)
{
    const int64_t hour = 3600000;
    struct proto_err err;
    struct store *s = (variant(_i), open_rw());
    int i, steps = 0, seen_merging = 0;

    /* 400 keys over two hours: one chunk of 400, merged 64 keys a step. */
    ck_assert_int_eq(store_begin(s, &err), 0);
    job(s, 0, 200, 1, 10 * hour + 5);
    job(s, 200, 200, 1, 11 * hour + 5);
    ck_assert_int_eq(store_commit(s, &err), 0);
    for (i = 0; i < 40 && (i == 0 || merging()); i++) {
        seen_merging |= merging();
        assert_rollups_equal_scan();
        if (i == 2) {
            /* A restart in the middle rebuilds what is left from rows. */
            store_free(s);
            s = open_rw();
        } else if (i == 3) {
            /* A step rolled back: the next one redoes it. */
            ck_assert_int_eq(store_begin(s, &err), 0);
            job(s, 7, 5, 0, 11 * hour + 9);
            store_rollback(s);
        } else if (i == 4) {
            ck_assert_int_eq(store_begin(s, &err), 0);
            ck_assert_int_eq(store_savepoint(s, &err), 0);
            job(s, 9, 5, 0, 11 * hour + 10);
            store_savepoint_rollback(s);
            ck_assert_int_eq(store_commit(s, &err), 0);
        }
        /* Few receipts, old keys: the merge goes on, the tail stays. */
        ck_assert_int_eq(store_begin(s, &err), 0);
        job(s, i % 50, 3, 0, 11 * hour + 20 + i);
        ck_assert_int_eq(store_commit(s, &err), 0);
        steps++;
    }
    /* Chunks that wait to be sealed with others are sealed and merged by
     * a quiet writer. */
    for (i = 0; i < 1000 && store_merge_idle(s, 64, &err) > 0; i++)
        ;
    store_free(s);
    ck_assert(seen_merging);
    ck_assert_int_gt(steps, 3);
    ck_assert(!merging());
    assert_rollups_equal_scan();
    /* Merged: the rollups hold every receipt below tail_from, and the
     * hour before the newest went into its day. */
    ck_assert_int_eq(scalar("SELECT sum(receipts) FROM rollups"),
                     scalar("SELECT count(*) FROM receipts WHERE id < "
                            "(SELECT value FROM counters WHERE name = "
                            "'tail_from')"));
    ck_assert_int_eq(scalar("SELECT plan_id IS NULL FROM rollup_merge"), 1);
    ck_assert_int_eq(scalar("SELECT value FROM counters WHERE name = "
                            "'days_from'"),
                     11);
}
END_TEST

/* Chunks whose sums wait to be sealed span at a time: at every commit,
 * across restarts, rolled-back transactions and savepoints, and a prune,
 * the rollups with the waiting chunks read from their rows answer like a
 * scan; a quiet writer seals and merges what waits. */
START_TEST(test_rollup_chunks_wait_to_be_sealed_together)
{
    const int64_t hour = 3600000;
    struct store_opts o = { .quarantine_max_bytes = 1 << 20,
                            .chunk_receipts = 20,
                            .rollup_chunks = 3,
                            .shared = (variant(_i), shared) };
    struct proto_err err;
    struct store *s;
    int i, waited = 0;

    for (i = 0; i < 6000; i++)
        snprintf(names[i], sizeof(names[i]), "k-%d", i);
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    for (i = 0; i < 60; i++) {
        ck_assert_int_eq(store_begin(s, &err), 0);
        job(s, i % 40, 7, i % 3 == 0, 10 * hour + (int64_t)i * 120000);
        if (i % 11 == 5) {
            ck_assert_int_eq(store_savepoint(s, &err), 0);
            job(s, 3, 30, 1, 10 * hour + (int64_t)i * 120000 + 1);
            store_savepoint_rollback(s);
        }
        if (i % 13 == 7) {
            job(s, 5, 25, 1, 10 * hour + (int64_t)i * 120000 + 2);
            store_rollback(s);
        } else {
            ck_assert_int_eq(store_commit(s, &err), 0);
        }
        if (i % 17 == 9) {
            store_free(s);
            ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
        }
        waited |= scalar("SELECT coalesce((SELECT value FROM counters WHERE "
                         "name = 'rollup_end'), 1) < coalesce((SELECT value "
                         "FROM counters WHERE name = 'tail_from'), 1)") != 0;
        assert_rollups_equal_scan();
    }
    ck_assert(waited);
    /* Pruning merges everything below the tail first. */
    {
        struct store_prune_result r;

        ck_assert_int_eq(store_prune(s, 10 * hour + 30 * 120000, 100, &r, &err),
                         0);
        ck_assert_int_gt(r.rows, 0);
        assert_rollups_equal_scan();
    }
    for (i = 0; i < 1000 && store_merge_idle(s, 16, &err) > 0; i++)
        assert_rollups_equal_scan();
    ck_assert_int_eq(store_merge_pending(s), 0);
    store_free(s);
    assert_rollups_equal_scan();
    assert_views_answered();
    ck_assert_int_eq(scalar("SELECT rollup_from FROM rollup_merge"),
                     scalar("SELECT value FROM counters WHERE name = "
                            "'tail_from'"));
    ck_assert_int_eq(scalar("SELECT value FROM counters WHERE name = "
                            "'rollup_end'"),
                     scalar("SELECT value FROM counters WHERE name = "
                            "'tail_from'"));
}
END_TEST

/* Chunks written while the last seal is still being merged wait with
 * keys on both sides of the merge's position: a query reads them whole
 * from their rows, and the sealed ones only past that key. */
START_TEST(test_rollup_chunks_wait_while_a_merge_is_under_way)
{
    const int64_t hour = 3600000;
    struct store_opts o = { .quarantine_max_bytes = 1 << 20,
                            .chunk_receipts = 20,
                            .rollup_chunks = 2,
                            .shared = (variant(_i), shared) };
    struct proto_err err;
    struct store *s;
    int i, both = 0;

    for (i = 0; i < 6000; i++)
        snprintf(names[i], sizeof(names[i]), "k-%d", i);
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    /* Two chunks of 300 keys each: sealed together, a part merged. */
    ck_assert_int_eq(store_begin(s, &err), 0);
    job(s, 0, 300, 1, 10 * hour + 1);
    ck_assert_int_eq(store_commit(s, &err), 0);
    ck_assert_int_eq(store_begin(s, &err), 0);
    job(s, 300, 300, 1, 10 * hour + 2);
    ck_assert_int_eq(store_commit(s, &err), 0);
    for (i = 0; i < 12; i++) {
        /* Chunks of keys the merge has passed and keys it has not. */
        ck_assert_int_eq(store_begin(s, &err), 0);
        job(s, i * 37 % 600, 20, 1, 10 * hour + 3 + i);
        ck_assert_int_eq(store_commit(s, &err), 0);
        both |= merging() &&
                scalar("SELECT plan_id IS NOT NULL FROM rollup_merge") &&
                scalar("SELECT (SELECT value FROM counters WHERE name = "
                       "'rollup_end') < (SELECT value FROM counters WHERE "
                       "name = 'tail_from')");
        assert_rollups_equal_scan();
        if (i == 5) {
            store_free(s);
            ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
            assert_rollups_equal_scan();
        }
    }
    ck_assert(both);
    store_free(s);
    assert_views_answered();
}
END_TEST

/* Migration 0012 fills the schema-3 counts of existing rollup rows from
 * the receipts each covers, whatever the merge left: a store written by
 * this build, mid-merge with chunks waiting, turned back into a schema-11
 * one (the column dropped; without rollup_end where every chunk was
 * sealed as written, as before it existed), migrated again. */
START_TEST(test_rollup_migration_counts_schema3_exactly)
{
    const int64_t hour = 3600000;
    struct store_opts o = { .quarantine_max_bytes = 1 << 20,
                            .chunk_receipts = 20,
                            .rollup_chunks = _i ? 2 : 1 };
    struct proto_err err;
    struct store *s;
    sqlite3 *db;
    int i;

    for (i = 0; i < 6000; i++)
        snprintf(names[i], sizeof(names[i]), "k-%d", i);
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    for (i = 0; i < 30; i++) {
        ck_assert_int_eq(store_begin(s, &err), 0);
        /* Over 33 hours (whole days reach the day rollups); keys shared
         * by schema-2 and schema-3 receipts, and jobs of many keys. */
        job(s, i * 37 % 600, i % 4 == 0 ? 300 : 9, i % 4 == 0,
            10 * hour + (int64_t)i * 4000000);
        ck_assert_int_eq(store_commit(s, &err), 0);
    }
    store_free(s);
    ck_assert(merging());
    ck_assert_int_gt(scalar("SELECT count(*) FROM rollups WHERE schema3 > 0 "
                            "AND schema3 < receipts"),
                     0);
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db,
                                  "ALTER TABLE rollups DROP COLUMN schema3; "
                                  "ALTER TABLE rollups_day DROP COLUMN "
                                  "schema3; PRAGMA user_version = 11",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    if (_i == 0)
        ck_assert_int_eq(sqlite3_exec(db,
                                      "DELETE FROM counters WHERE name = "
                                      "'rollup_end'",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
    sqlite3_close(db);
    /* Only 0012 runs again: the later migrations' tables are there. */
    o.max_version = 12;
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    store_free(s);
    ck_assert_int_eq(scalar("PRAGMA user_version"), 12);
    ck_assert_int_gt(scalar("SELECT count(*) FROM rollups_day"), 0);
    assert_rollups_equal_scan();
    /* The day rows hold the hour rows below days_from, schema 3 too (the
     * day rows past the queries' whole days are read when days end). */
    ck_assert_int_eq(scalar("SELECT coalesce(sum(schema3), 0) FROM "
                            "rollups_day"),
                     scalar("SELECT coalesce(sum(schema3), 0) FROM rollups "
                            "WHERE bucket < (SELECT value FROM counters "
                            "WHERE name = 'days_from')"));
}
END_TEST

/* The edges of a window read the chunks that lie inside them from their
 * sums (migrations/0014) when the grouping allows: a minute's write every
 * minute of an hour, chunks of two minutes, windows cut inside the hour;
 * a rolled-back chunk takes its sums with it. */
START_TEST(test_rollup_edges_read_chunk_sums)
{
    const int64_t hour = 3600000, h0 = 30 * hour, min = 60000;
    /* Not static: const variables are no constant expressions (gcc folds
     * them only when optimizing, so the sanitizer build refused it). */
    const struct aggcheck_range ranges[] = {
        { 1, 1, h0 + 7 * min + 3, h0 + 51 * min },
        { 1, 1, h0 + 59 * min, h0 + 3 * hour + 17 * min },
        { 1, 0, h0 + 20 * min + 1, 0 },
        { 0, 1, 0, h0 + 2 * hour + 40 * min },
        { 1, 1, h0 + 5 * min, h0 + 6 * min },
    };
    struct store_opts o = { .readonly = 1, .shared = shared };
    struct proto_err err;
    struct store *s = (variant(_i), open_rw());
    int64_t rows;
    int i;

    for (i = 0; i < 180; i++) {
        ck_assert_int_eq(store_begin(s, &err), 0);
        job(s, i % 4, 50, 0, h0 + i * min + i % 7);
        if (i % 23 == 5) {
            job(s, 9, 120, 0, h0 + i * min + 30000); /* a chunk, then gone */
            store_rollback(s);
            continue;
        }
        ck_assert_int_eq(store_commit(s, &err), 0);
    }
    store_free(s);
    rows = scalar("SELECT count(*) FROM chunk_sums");
    ck_assert_int_gt(rows, 30);
    ck_assert_int_eq(rows, scalar("SELECT count(*) FROM chunks"));
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    aggcheck_equal_scan(s, ranges, sizeof(ranges) / sizeof(ranges[0]));
    store_free(s);
    if (_i != 0)
        return;
    /* Migration 0017 drops the rows of 0014's encoding (no plan): the
     * chunks are read from their rows, and the answers stay exact. */
    {
        sqlite3 *db;

        ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
        ck_assert_int_eq(
            sqlite3_exec(db, "PRAGMA user_version = 16", NULL, NULL, NULL),
            SQLITE_OK);
        sqlite3_close(db);
    }
    s = open_rw();
    store_free(s);
    ck_assert_int_ge(scalar("PRAGMA user_version"), 17);
    ck_assert_int_eq(scalar("SELECT count(*) FROM chunk_sums"), 0);
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    aggcheck_equal_scan(s, ranges, sizeof(ranges) / sizeof(ranges[0]));
    store_free(s);
}
END_TEST

static int
count_cb(void *arg, const struct store_rollup_key *k,
         const struct store_agg_group *g)
{
    (void)k;
    *(uint64_t *)arg += g->receipts;
    return 0;
}

/* The receipts the published sums hold for a query that saw m: -1 when
 * they do not tile what it saw (it would read the rows). */
static int64_t
view_receipts(const struct store_rollup_merge *m)
{
    struct store_rollup_view *v[STORE_ROLLUP_VIEWS_MAX];
    uint64_t n_receipts = 0;
    int n;

    if (!store_rollup_views(shared, m, v, &n))
        return -1;
    ck_assert_int_eq(store_rollup_views_walk(v, n, m, count_cb, &n_receipts),
                     0);
    store_rollup_views_release(v, n);
    return (int64_t)n_receipts;
}

/* The read-write store with span 8 and a registry, and a reader on the
 * same file (*r) that reads it. */
static struct store *
open_with_reader(struct store **r)
{
    struct store_opts ro = { .readonly = 1 };
    struct proto_err err;
    struct store *s;

    span = 8;
    shared = store_shared_new();
    ro.shared = shared;
    s = open_rw();
    ck_assert_int_eq(store_open(path, &ro, r, &err), 0);
    return s;
}

/* n receipts of the same 40 keys at ms, committed. */
static void
commit_receipts(struct store *s, int n, int64_t ms)
{
    struct proto_err err;

    ck_assert_int_eq(store_begin(s, &err), 0);
    job(s, 0, n, 0, ms);
    ck_assert_int_eq(store_commit(s, &err), 0);
}

/* The chunks waiting are published as one view of their sums added per
 * key, replaced with every chunk; a query whose snapshot is a chunk behind
 * still reads the one before, one two chunks behind reads the rows. */
START_TEST(test_rollup_query_a_chunk_behind_reads_the_view_before)
{
    struct store_rollup_merge m1, m2, m3;
    struct proto_err err;
    struct store *r, *s = open_with_reader(&r);

    /* Chunks of 100 receipts, their keys the same 40 in each. */
    commit_receipts(s, 100, 3600000 + 1);
    ck_assert_int_eq(sqlite3_exec(store_db(r), "BEGIN", NULL, NULL, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(store_rollup_merge_state(r, &m1, &err), 0);
    ck_assert_int_lt(m1.end, m1.tail); /* the chunk waits */
    ck_assert_int_eq(view_receipts(&m1), 100);

    commit_receipts(s, 100, 3600000 + 2);
    ck_assert_int_eq(view_receipts(&m1), 100); /* a chunk behind */
    ck_assert_int_eq(sqlite3_exec(store_db(r), "COMMIT", NULL, NULL, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(store_rollup_merge_state(r, &m2, &err), 0);
    ck_assert_int_eq(view_receipts(&m2), 200);

    commit_receipts(s, 100, 3600000 + 3);
    ck_assert_int_eq(view_receipts(&m1), -1); /* two behind: the rows */
    ck_assert_int_eq(view_receipts(&m2), 200);
    ck_assert_int_eq(store_rollup_merge_state(r, &m3, &err), 0);
    ck_assert_int_eq(view_receipts(&m3), 300);
    ck_assert_int_eq(m3.end, m1.end); /* all three still wait */
    store_free(r);
    store_free(s);
    assert_rollups_equal_scan();
}
END_TEST

/* A chunk's sums are added to the waiting ones off the writer's thread:
 * until that fold ends, the waiting view as it was and the chunk's own are
 * published, and a query sees every receipt through them; the next chunk
 * waits for the fold. The hold applies to the second chunk's fold only:
 * the first one's thread may not have started it yet (CI under
 * AddressSanitizer hung here for 120 s when the hold caught it). */
START_TEST(test_rollup_query_while_a_fold_is_under_way)
{
    struct store_rollup_merge m1, m2, m3;
    struct proto_err err;
    struct store *r, *s = open_with_reader(&r);

    commit_receipts(s, 100, 3600000 + 1);
    ck_assert_int_eq(store_rollup_merge_state(r, &m1, &err), 0);
    ck_assert_int_eq(view_receipts(&m1), 100);

    store_rollup_test_hold(1);
    commit_receipts(s, 100, 3600000 + 2);
    ck_assert_int_eq(store_rollup_merge_state(r, &m2, &err), 0);
    ck_assert_int_gt(m2.tail, m1.tail);
    /* The fold is held: these come from the views published beside it. */
    ck_assert_int_eq(view_receipts(&m2), 200);
    ck_assert_int_eq(view_receipts(&m1), 100);
    /* A commit with no chunk publishes nothing else. */
    commit_receipts(s, 10, 3600000 + 3);
    ck_assert_int_eq(view_receipts(&m2), 200);
    store_rollup_test_hold(0);

    /* The next chunk waits for the fold, then adds its own. */
    commit_receipts(s, 90, 3600000 + 4);
    ck_assert_int_eq(store_rollup_merge_state(r, &m3, &err), 0);
    ck_assert_int_eq(view_receipts(&m3), 300);
    ck_assert_int_eq(view_receipts(&m2), 200);
    ck_assert_int_eq(m3.end, m1.end); /* all three still wait */
    store_free(r);
    store_free(s);
    assert_rollups_equal_scan();
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("rollup");
    TCase *tc;

    tc = tcase_create("savepoints");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_rollup_follows_savepoints_and_rollbacks,
                        VARIANT_FIRST, VARIANT_END);
    suite_add_tcase(s, tc);
    tc = tcase_create("many_keys");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_rollup_survives_a_transaction_with_many_keys,
                        0, 2);
    suite_add_tcase(s, tc);
    tc = tcase_create("full_tail");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_rollup_full_tail_becomes_a_chunk_early,
                        VARIANT_FIRST, VARIANT_END);
    suite_add_tcase(s, tc);
    tc = tcase_create("merge");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc,
                        test_rollup_merge_spans_commits_restarts_and_rollbacks,
                        VARIANT_FIRST, VARIANT_END);
    suite_add_tcase(s, tc);
    tc = tcase_create("wait");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_rollup_chunks_wait_to_be_sealed_together, 2,
                        4);
    tcase_add_loop_test(tc, test_rollup_chunks_wait_while_a_merge_is_under_way,
                        2, 4);
    tcase_add_loop_test(tc, test_rollup_migration_counts_schema3_exactly, 0, 2);
    suite_add_tcase(s, tc);
    tc = tcase_create("chunk_sums");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_rollup_edges_read_chunk_sums, VARIANT_FIRST,
                        VARIANT_END);
    tcase_add_test(tc, test_rollup_query_a_chunk_behind_reads_the_view_before);
    tcase_add_test(tc, test_rollup_query_while_a_fold_is_under_way);
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
