/*
 * check_store.c: unit tests of the SQLite store (daemon/store.c): pragmas,
 * migrations from an empty file and from every earlier version against the
 * golden schema, refusal of a newer database, inserts with u64 values kept
 * bit for bit, dedupe, and quarantine eviction.
 *
 * The golden schema tests/data/schema.sql is what the sqlite3 shell prints
 * for a database migrated by this build. After adding a migration,
 * regenerate it from the repository's top directory with:
 *
 *   build/daemon/receiptd --socket /tmp/r.sock --db /tmp/r.db &  (then stop it)
 *   sqlite3 /tmp/r.db "SELECT sql || ';' FROM sqlite_schema
 *       WHERE sql IS NOT NULL ORDER BY name" > tests/data/schema.sql
 *
 * and review the diff: it is the schema change the migration makes.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "store.h"
#include "envelope.h"
#include "store_agg.h"
#include "store_internal.h"
#include "store_tail.h"
#include "e2e_util.h"

static char dir[512];
static char path[600];

static void
setup(void)
{
    snprintf(dir, sizeof(dir), "%s/check_store-XXXXXX", TEST_BINARY_DIR);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/t.db", dir);
}

static void
teardown(void)
{
    e2e_rmtree(dir);
}

/* The schema as the regeneration command above prints it. */
static char *
dump_schema(sqlite3 *db)
{
    sqlite3_stmt *st;
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);

    ck_assert_int_eq(sqlite3_prepare_v2(db,
                                        "SELECT sql || ';' FROM sqlite_schema "
                                        "WHERE sql IS NOT NULL ORDER BY name",
                                        -1, &st, NULL),
                     SQLITE_OK);
    out[0] = '\0';
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *s = (const char *)sqlite3_column_text(st, 0);
        size_t l = strlen(s);
        ck_assert_uint_lt(n + l + 2, cap);
        memcpy(out + n, s, l);
        n += l;
        out[n++] = '\n';
        out[n] = '\0';
    }
    sqlite3_finalize(st);
    return out;
}

static char *
golden(void)
{
    FILE *f = fopen(TEST_DATA_DIR "/schema.sql", "rb");
    char *buf = calloc(1, 1 << 16);
    size_t n;

    ck_assert_ptr_nonnull(f);
    n = fread(buf, 1, (1 << 16) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Compares line by line and names the first line that differs: the whole
 * schema is too long for one Check message. */
static void
assert_golden(struct store *s)
{
    char *got = dump_schema(store_db(s)), *want = golden();
    const char *g = got, *w = want;
    int line = 1;

    while (*g != '\0' && *w != '\0') {
        size_t gl = strcspn(g, "\n"), wl = strcspn(w, "\n");
        ck_assert_msg(gl == wl && memcmp(g, w, gl) == 0,
                      "schema differs from tests/data/schema.sql at line %d:"
                      " got \"%.*s\", want \"%.*s\"",
                      line, (int)(gl > 200 ? 200 : gl), g,
                      (int)(wl > 200 ? 200 : wl), w);
        g += gl + (g[gl] == '\n');
        w += wl + (w[wl] == '\n');
        line++;
    }
    ck_assert_msg(*g == '\0' && *w == '\0',
                  "schema and tests/data/schema.sql differ in length after "
                  "line %d (%s is longer)",
                  line, *g != '\0' ? "the schema" : "the golden file");
    free(got);
    free(want);
}

START_TEST(test_store_migrates_empty_file_to_golden_schema)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct proto_err err;
    struct store *s;
    int v;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    ck_assert_int_eq(store_user_version(s, &v, &err), 0);
    ck_assert_int_eq(v, store_schema_version());
    ck_assert_int_ge(v, 2);
    assert_golden(s);
    store_free(s);
    /* opening again is a no-op */
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    assert_golden(s);
    store_free(s);
}
END_TEST

START_TEST(test_store_migrates_from_every_earlier_version)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct proto_err err;
    struct store *s;
    int v;

    o.max_version = _i;
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    ck_assert_int_eq(store_user_version(s, &v, &err), 0);
    ck_assert_int_eq(v, _i);
    store_free(s);
    o.max_version = 0;
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    ck_assert_int_eq(store_user_version(s, &v, &err), 0);
    ck_assert_int_eq(v, store_schema_version());
    assert_golden(s);
    store_free(s);
}
END_TEST

START_TEST(test_store_refuses_newer_database)
{
    struct proto_err err;
    struct store_opts o = { 0 };
    struct store *s = (struct store *)1;
    sqlite3 *db;
    char sql[64];

    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    snprintf(sql, sizeof(sql), "PRAGMA user_version = %d",
             store_schema_version() + 1);
    ck_assert_int_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    ck_assert_int_eq(store_open(path, &o, &s, &err), PROTO_EUNAVAILABLE);
    ck_assert_ptr_null(s);
    ck_assert_ptr_nonnull(strstr(err.message, "newer receiptd"));
    o.readonly = 1;
    ck_assert_int_eq(store_open(path, &o, &s, &err), PROTO_EUNAVAILABLE);
}
END_TEST

static int
pragma_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    int v = -1;

    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return v;
}

START_TEST(test_store_sets_and_checks_durability_pragmas)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct proto_err err;
    struct store *s;
    sqlite3_stmt *st;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    ck_assert_int_eq(pragma_int(store_db(s), "PRAGMA synchronous"), 2);
    ck_assert_int_eq(pragma_int(store_db(s), "PRAGMA foreign_keys"), 1);
    ck_assert_int_eq(
        sqlite3_prepare_v2(store_db(s), "PRAGMA journal_mode", -1, &st, NULL),
        SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_str_eq((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    store_free(s);
    /* An in-memory database cannot be WAL: refused, not run without. */
    ck_assert_int_eq(store_open(":memory:", &o, &s, &err), PROTO_EUNAVAILABLE);
    ck_assert_ptr_nonnull(strstr(err.message, "journal_mode"));
}
END_TEST

static void
make_receipt(struct receipt *r, const char *plan, uint64_t big)
{
    int i;

    memset(r, 0, sizeof(*r));
    r->schema_version = 3;
    r->requested_backend = RECEIPT_BACKEND_CUDA;
    r->executed_backend = RECEIPT_BACKEND_CPU;
    r->model_instance_id = (struct proto_str){ "model", 5 };
    r->prepared_plan_id = (struct proto_str){ plan, strlen(plan) };
    r->graph_hash = (struct proto_str){ "", 0 };
    r->tuning_profile = (struct proto_str){ "tp", 2 };
    r->stop_reason = (struct proto_str){ "eos", 3 };
    r->counter_coverage = UINT64_MAX;
    for (i = 0; i < RECEIPT_NCOUNTERS; i++)
        r->counters[i] = big - (uint64_t)i;
    for (i = 0; i < RECEIPT_NARTIFACTS; i++)
        r->artifacts[i] = (uint64_t)i;
}

struct collect {
    int n;
    int64_t ids[8];
    uint64_t c0, cov;
    char plan[32];
};

static int
collect_cb(void *arg, const struct store_row *row)
{
    struct collect *c = arg;

    if (c->n == 0) {
        c->c0 = row->r.counters[0];
        c->cov = row->r.counter_coverage;
        snprintf(c->plan, sizeof(c->plan), "%.*s",
                 (int)row->r.prepared_plan_id.len, row->r.prepared_plan_id.ptr);
    }
    if (c->n < 8)
        c->ids[c->n] = row->receipt_id;
    c->n++;
    return 0;
}

START_TEST(test_store_insert_keeps_u64_and_dedupes_seq)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct store_opts ro = { .readonly = 1 };
    struct store_filter f = {
        .requested = -1, .executed = -1, .status = -1, .limit = 10
    };
    struct store_write w;
    struct proto_err err;
    struct collect c = { 0 };
    struct receipt r;
    struct store *s, *q;
    int64_t first;
    int trunc;

    make_receipt(&r, "plan-1", UINT64_MAX);
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    memset(&w, 0, sizeof(w));
    w.op = PROTO_OP_RECEIPT;
    w.source = "src";
    w.source_len = 3;
    w.has_seq = 1;
    w.seq = UINT64_MAX;
    w.received_at = 1700000000000;
    w.receipts = &r;
    w.n_receipts = 1;
    ck_assert_int_eq(store_begin(s, &err), 0);
    ck_assert_int_eq(store_apply(s, &w, &err), 0);
    ck_assert_int_eq(w.duplicate, 0);
    ck_assert_int_eq(w.status, RECEIPT_STATUS_FALLBACK);
    first = w.receipt_id;
    ck_assert_int_eq(store_commit(s, &err), 0);
    /* the same (source, seq) again, in a later transaction */
    ck_assert_int_eq(store_begin(s, &err), 0);
    ck_assert_int_eq(store_apply(s, &w, &err), 0);
    ck_assert_int_eq(w.duplicate, 1);
    ck_assert_int_eq(w.receipt_id, first);
    /* no source: no idempotency, stored again */
    w.source_len = 0;
    w.source = "";
    ck_assert_int_eq(store_apply(s, &w, &err), 0);
    ck_assert_int_eq(w.duplicate, 0);
    ck_assert_int_gt(w.receipt_id, first);
    ck_assert_int_eq(store_commit(s, &err), 0);

    ck_assert_int_eq(store_open(path, &ro, &q, &err), 0);
    ck_assert_int_eq(
        store_query_receipts(q, &f, 0, collect_cb, &c, &trunc, &err), 0);
    ck_assert_int_eq(c.n, 2);
    ck_assert_int_eq(trunc, 0);
    ck_assert_uint_eq(c.c0, UINT64_MAX);
    ck_assert_uint_eq(c.cov, UINT64_MAX);
    ck_assert_str_eq(c.plan, "plan-1");
    ck_assert_int_eq(c.ids[1], first);
    /* the source filter */
    memset(&c, 0, sizeof(c));
    f.source = "src";
    f.source_len = 3;
    ck_assert_int_eq(
        store_query_receipts(q, &f, 0, collect_cb, &c, &trunc, &err), 0);
    ck_assert_int_eq(c.n, 1);
    store_free(q);
    store_free(s);
}
END_TEST

START_TEST(test_store_rolled_back_insert_leaves_nothing)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct store_opts ro = { .readonly = 1 };
    struct store_filter f = {
        .requested = -1, .executed = -1, .status = -1, .limit = 10
    };
    struct store_write w;
    struct proto_err err;
    struct collect c = { 0 };
    struct receipt r;
    struct store *s, *q;
    int trunc;

    make_receipt(&r, "plan-new", 5);
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    memset(&w, 0, sizeof(w));
    w.op = PROTO_OP_RECEIPT;
    w.source = "src";
    w.source_len = 3;
    w.has_seq = 1;
    w.seq = 1;
    w.receipts = &r;
    w.n_receipts = 1;
    ck_assert_int_eq(store_begin(s, &err), 0);
    ck_assert_int_eq(store_apply(s, &w, &err), 0);
    store_rollback(s);
    /* The string cache must not keep ids of rolled-back strings: the next
     * insert would point at a row that does not exist. */
    ck_assert_int_eq(store_begin(s, &err), 0);
    ck_assert_int_eq(store_apply(s, &w, &err), 0);
    ck_assert_int_eq(w.duplicate, 0);
    ck_assert_int_eq(store_commit(s, &err), 0);
    ck_assert_int_eq(store_open(path, &ro, &q, &err), 0);
    ck_assert_int_eq(
        store_query_receipts(q, &f, 0, collect_cb, &c, &trunc, &err), 0);
    ck_assert_int_eq(c.n, 1);
    ck_assert_str_eq(c.plan, "plan-new");
    store_free(q);
    store_free(s);
}
END_TEST

/* Rows that follow the newest id go in without their ids (store.c
 * insert_rows): they must still get exactly the ids the writer gave, after
 * a rolled-back group too, whose ids the next group skips or reuses. */
struct id_check {
    int n, bad;
    int64_t first[2]; /* batch 'a', batch 'c' */
};

static int
id_check_cb(void *arg, const struct store_row *row)
{
    struct id_check *x = arg;
    const char *p = row->r.prepared_plan_id.ptr;
    int which = p[0] == 'c', k = atoi(p + 1);

    x->n++;
    if ((p[0] != 'a' && p[0] != 'c') || row->receipt_id != x->first[which] + k)
        x->bad++;
    return 0;
}

static int
id_batch(struct store *s, char prefix, struct receipt *r, char names[][16],
         int n, int64_t *first, int commit)
{
    struct store_write w;
    struct proto_err err;
    int i;

    for (i = 0; i < n; i++) {
        snprintf(names[i], 16, "%c%d", prefix, i);
        make_receipt(&r[i], names[i], (uint64_t)i);
    }
    memset(&w, 0, sizeof(w));
    w.op = PROTO_OP_RECEIPTS;
    w.receipts = r;
    w.n_receipts = (size_t)n;
    if (store_begin(s, &err) != 0 || store_apply(s, &w, &err) != 0)
        return -1;
    *first = w.receipt_id;
    if (!commit) {
        store_rollback(s);
        return 0;
    }
    return store_commit(s, &err);
}

START_TEST(test_store_appended_rows_keep_the_writers_ids)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct store_opts ro = { .readonly = 1 };
    struct store_filter f = {
        .requested = -1, .executed = -1, .status = -1, .limit = 200
    };
    static struct receipt r[40];
    static char names[40][16];
    struct id_check x = { 0 };
    struct proto_err err;
    struct store *s, *q;
    int64_t dropped;
    int trunc;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    ck_assert_int_eq(id_batch(s, 'a', r, names, 40, &x.first[0], 1), 0);
    ck_assert_int_eq(id_batch(s, 'b', r, names, 10, &dropped, 0), 0);
    ck_assert_int_eq(id_batch(s, 'c', r, names, 40, &x.first[1], 1), 0);
    ck_assert_int_gt(x.first[1], x.first[0] + 39);
    ck_assert_int_eq(store_open(path, &ro, &q, &err), 0);
    ck_assert_int_eq(
        store_query_receipts(q, &f, 0, id_check_cb, &x, &trunc, &err), 0);
    ck_assert_int_eq(x.n, 80);
    ck_assert_int_eq(x.bad, 0);
    store_free(q);
    store_free(s);
}
END_TEST

struct extras {
    int n, with_extra, bad;
    uint64_t seqs;
};

static int
extras_cb(void *arg, const struct store_row *row)
{
    struct extras *x = arg;
    char want[16];

    x->n++;
    if (row->has_seq && row->seq < 64)
        x->seqs |= (uint64_t)1 << row->seq;
    if (row->r.extra != NULL) {
        x->with_extra++;
        /* The producer's unknown key, as a one-entry msgpack map. */
        snprintf(want, sizeof(want), "\x81\xa1k\xa4%04d",
                 (int)row->seq % 10000);
        if (row->r.extra_len != 8 || memcmp(row->r.extra, want, 8) != 0)
            x->bad++;
    }
    return 0;
}

/* Single receipts outside a savepoint wait in the store for one INSERT
 * of many: the writes after them see their seqs, a savepoint rolled back
 * after them keeps them, their unknown keys are copied (the caller's are
 * gone by then), and a rollback drops them. */
START_TEST(test_store_single_receipts_wait_for_one_insert)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct store_opts ro = { .readonly = 1 };
    struct store_filter f = {
        .requested = -1, .executed = -1, .status = -1, .limit = 1000
    };
    struct store_write w;
    struct proto_err err;
    struct extras x = { 0 };
    struct receipt r, two[2];
    struct store *s, *q;
    char extra[16];
    int64_t id5 = 0;
    int trunc, i;

    make_receipt(&r, "plan-1", 7);
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    memset(&w, 0, sizeof(w));
    w.op = PROTO_OP_RECEIPT;
    w.source = "src";
    w.source_len = 3;
    w.has_seq = 1;
    w.received_at = 1700000000000;
    w.receipts = &r;
    w.n_receipts = 1;
    /* Rolled back with rows waiting: nothing of them stays. */
    ck_assert_int_eq(store_begin(s, &err), 0);
    for (i = 1; i <= 40; i++) {
        w.seq = 1000 + (uint64_t)i;
        ck_assert_int_eq(store_apply(s, &w, &err), 0);
    }
    store_rollback(s);

    ck_assert_int_eq(store_begin(s, &err), 0);
    for (i = 1; i <= 50; i++) {
        w.seq = (uint64_t)i;
        snprintf(extra, sizeof(extra), "\x81\xa1k\xa4%04d", i);
        r.extra = i % 2 ? extra : NULL;
        r.extra_len = i % 2 ? 8 : 0;
        ck_assert_int_eq(store_apply(s, &w, &err), 0);
        ck_assert_int_eq(w.duplicate, 0);
        if (i == 5)
            id5 = w.receipt_id;
        memset(extra, 'x', sizeof(extra));
        if (i == 20) {
            /* A resend in the same transaction, rows still waiting. */
            w.seq = 5;
            ck_assert_int_eq(store_apply(s, &w, &err), 0);
            ck_assert_int_eq(w.duplicate, 1);
            ck_assert_int_eq(w.receipt_id, id5);
        }
        if (i == 30) {
            /* A job refused in its savepoint, and a batch between them. */
            struct store_write b = w;

            ck_assert_int_eq(store_savepoint(s, &err), 0);
            w.seq = 61;
            ck_assert_int_eq(store_apply(s, &w, &err), 0);
            store_savepoint_rollback(s);
            two[0] = two[1] = r;
            two[0].extra = two[1].extra = NULL;
            b.op = PROTO_OP_RECEIPTS;
            b.seq = 60;
            b.receipts = two;
            b.n_receipts = 2;
            ck_assert_int_eq(store_apply(s, &b, &err), 0);
        }
    }
    r.extra = NULL;
    ck_assert_int_eq(store_commit(s, &err), 0);
    store_free(s);

    ck_assert_int_eq(store_open(path, &ro, &q, &err), 0);
    ck_assert_int_eq(
        store_query_receipts(q, &f, 0, extras_cb, &x, &trunc, &err), 0);
    store_free(q);
    ck_assert_int_eq(x.n, 52);
    ck_assert_int_eq(x.with_extra, 25);
    ck_assert_int_eq(x.bad, 0);
    /* seqs 1..50 and the batch's 60; not 61, nor the rolled-back ones */
    ck_assert_uint_eq(x.seqs, ((((uint64_t)1 << 51) - 1) & ~(uint64_t)1) |
                                  (uint64_t)1 << 60);
}
END_TEST

START_TEST(test_store_quarantine_evicts_oldest_and_counts)
{
    struct store_opts o = { .quarantine_max_bytes = 100 };
    struct store_opts ro = { .readonly = 1 };
    struct store_quarantine_item qi = { 0 };
    struct store_stats st;
    struct store_write w;
    struct proto_err err;
    struct store *s, *q;
    char raw[200];
    int i;

    memset(raw, 'r', sizeof(raw));
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    memset(&w, 0, sizeof(w));
    w.op = -1;
    w.source = "";
    w.quarantine = &qi;
    w.n_quarantine = 1;
    qi.raw = raw;
    qi.op = "receipt";
    qi.code = PROTO_EINVALID;
    qi.path = "counters.decode_steps";
    qi.message = "bad";
    for (i = 0; i < 3; i++) {
        qi.len = 40;
        ck_assert_int_eq(store_begin(s, &err), 0);
        ck_assert_int_eq(store_apply(s, &w, &err), 0);
        ck_assert_uint_eq(w.evicted, i == 2 ? 1 : 0);
        ck_assert_int_eq(store_commit(s, &err), 0);
    }
    /* larger than the whole bound: not kept, counted */
    qi.len = 200;
    ck_assert_int_eq(store_begin(s, &err), 0);
    ck_assert_int_eq(store_apply(s, &w, &err), 0);
    ck_assert_int_eq(store_commit(s, &err), 0);

    ck_assert_int_eq(store_open(path, &ro, &q, &err), 0);
    ck_assert_int_eq(store_query_stats(q, 0, &st, &err), 0);
    ck_assert_uint_eq(st.quarantined, 2);
    ck_assert_uint_eq(st.quarantine_bytes, 80);
    ck_assert_uint_eq(st.quarantine_evictions, 2);
    ck_assert_uint_gt(st.size_bytes, 0);
    store_free(q);
    store_free(s);
}
END_TEST

/* The one integer an SQL statement yields. */
static int64_t
scalar_of(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    int64_t v;

    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* One quarantine-only write of raw from src at time t, replaying row
 * replay_of (0: none) whose body was body. */
static void
put_refused(struct store *s, const char *src, const char *raw,
            uint64_t replay_of, const char *body, int64_t t, int code)
{
    struct store_quarantine_item qi = { raw,  strlen(raw), "receipt",
                                        code, "field",     "refused" };
    struct store_write w;
    struct proto_err err;

    memset(&w, 0, sizeof(w));
    w.op = -1;
    w.source = src;
    w.source_len = strlen(src);
    w.received_at = t;
    w.quarantine = &qi;
    w.n_quarantine = 1;
    w.replay_of = replay_of;
    w.replay_body = body;
    w.replay_body_len = body ? strlen(body) : 0;
    ck_assert_int_eq(store_begin(s, &err), 0);
    ck_assert_int_eq(store_apply(s, &w, &err), 0);
    ck_assert_int_eq(store_commit(s, &err), 0);
    ck_assert_uint_eq(w.evicted, 0);
}

/* The quarantine holds rows rows, and its byte counter says bytes. */
static void
assert_quarantine(sqlite3 *db, int64_t rows, int64_t bytes)
{
    ck_assert_int_eq(scalar_of(db, "SELECT count(*) FROM quarantine"), rows);
    ck_assert_int_eq(scalar_of(db, "SELECT value FROM counters WHERE name = "
                                   "'quarantine_bytes'"),
                     bytes);
}

/*
 * A replay refused again updates its row (code, bytes, attempts + 1,
 * last_attempt_at; the first time stays) and the byte count follows, only
 * while the row still holds the replayed bytes from the same source; a row
 * that is gone or differs leaves a new row, as any refusal does.
 */
START_TEST(test_store_quarantine_replay_updates_its_row)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct store *s;
    struct proto_err err;
    sqlite3 *db;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    db = store_db(s);
    put_refused(s, "src", "abcdef", 0, NULL, 1000, PROTO_EUNSUPPORTED_SCHEMA);
    ck_assert_int_eq(
        scalar_of(db, "SELECT attempts FROM quarantine WHERE id = 1"), 1);
    ck_assert_int_eq(scalar_of(db, "SELECT last_attempt_at IS NULL FROM "
                                   "quarantine WHERE id = 1"),
                     1);

    put_refused(s, "src", "abcdef", 1, "abcdef", 2000, PROTO_EINVALID);
    assert_quarantine(db, 1, 6);
    ck_assert_int_eq(scalar_of(db, "SELECT attempts * 10000000 + "
                                   "last_attempt_at * 1000 + received_at / "
                                   "1000 FROM quarantine WHERE id = 1"),
                     2 * 10000000 + 2000 * 1000 + 1);
    ck_assert_int_eq(scalar_of(db, "SELECT code = 'invalid' FROM quarantine "
                                   "WHERE id = 1"),
                     1);

    /* A batch whose items were partly accepted keeps what is still
     * refused, in the same row. */
    put_refused(s, "src", "abc", 1, "abcdef", 3000, PROTO_EINVALID);
    assert_quarantine(db, 1, 3);
    ck_assert_int_eq(scalar_of(db, "SELECT attempts * 100 + size FROM "
                                   "quarantine WHERE raw = CAST('abc' AS "
                                   "BLOB)"),
                     303);

    /* The row no longer holds those bytes; another source's replay; a
     * row that is gone: three new rows. */
    put_refused(s, "src", "abcdef", 1, "abcdef", 4000, PROTO_EINVALID);
    put_refused(s, "other", "abc", 1, "abc", 5000, PROTO_EINVALID);
    put_refused(s, "src", "xyz", 99, "xyz", 6000, PROTO_EINVALID);
    assert_quarantine(db, 4, 3 + 6 + 3 + 3);
    ck_assert_int_eq(scalar_of(db, "SELECT sum(attempts) FROM quarantine"), 6);
    ck_assert_int_eq(scalar_of(db, "SELECT sum(size) FROM quarantine"),
                     3 + 6 + 3 + 3);
    store_free(s);
}
END_TEST

/*
 * Every filter of the `receipts` query a page can be asked by alone, and
 * the pairs its indexes serve, read newest first straight off an index:
 * EXPLAIN QUERY PLAN shows no temporary B-tree for the ORDER BY. A sort
 * would read every match of the filter for each page (a whole source or
 * plan; see migrations/0006). A time window is not here: it still sorts
 * (docs/plan.md).
 */
START_TEST(test_store_receipts_pages_need_no_sort)
{
    static const struct {
        const char *name;
        int plan, graph, model, source, status, backend, before;
    } cases[] = {
        { "no filter", 0, 0, 0, 0, 0, 0, 0 },
        { "plan", 1, 0, 0, 0, 0, 0, 0 },
        { "plan + graph", 1, 1, 0, 0, 0, 0, 0 },
        { "graph", 0, 1, 0, 0, 0, 0, 0 },
        { "model", 0, 0, 1, 0, 0, 0, 0 },
        { "source", 0, 0, 0, 1, 0, 0, 0 },
        { "source, next page", 0, 0, 0, 1, 0, 0, 1 },
        { "plan, next page", 1, 0, 0, 0, 0, 0, 1 },
        { "status", 0, 0, 0, 0, 1, 0, 0 },
        { "backends", 0, 0, 0, 0, 0, 1, 0 },
        { "source + plan", 1, 0, 0, 1, 0, 0, 0 },
        { "source + status", 0, 0, 0, 1, 1, 0, 0 },
        { "plan + backends", 1, 0, 0, 0, 0, 1, 0 },
    };
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct proto_err err;
    struct store *s;
    char sql[4096], eqp[4200], plan[2048];
    size_t i, n;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct store_filter f = {
            .requested = -1, .executed = -1, .status = -1, .limit = 100
        };
        sqlite3_stmt *st;

        if (cases[i].plan)
            f.plan = "p", f.plan_len = 1;
        if (cases[i].graph)
            f.graph = "g", f.graph_len = 1;
        if (cases[i].model)
            f.model = "m", f.model_len = 1;
        if (cases[i].source)
            f.source = "s", f.source_len = 1;
        if (cases[i].status)
            f.status = 1;
        if (cases[i].backend)
            f.requested = 1, f.executed = 2;
        if (cases[i].before)
            f.has_before_id = 1, f.before_id = 1000;
        ck_assert_uint_lt(store_query_receipts_sql(sql, sizeof(sql), &f),
                          sizeof(sql));
        snprintf(eqp, sizeof(eqp), "EXPLAIN QUERY PLAN %s", sql);
        ck_assert_int_eq(sqlite3_prepare_v2(store_db(s), eqp, -1, &st, NULL),
                         SQLITE_OK);
        n = 0;
        plan[0] = '\0';
        while (sqlite3_step(st) == SQLITE_ROW)
            n += (size_t)snprintf(plan + n,
                                  n < sizeof(plan) ? sizeof(plan) - n : 0,
                                  "%s; ", sqlite3_column_text(st, 3));
        sqlite3_finalize(st);
        ck_assert_msg(n > 0 && n < sizeof(plan), "%s: no query plan",
                      cases[i].name);
        ck_assert_msg(strstr(plan, "TEMP B-TREE") == NULL,
                      "%s: pages sort their matches: %s", cases[i].name, plan);
    }
    store_free(s);
}
END_TEST

/* ---- a `receipt` write's dedupe record waits with the tail ---- */

/* Every source, as the `gaps` kind lists them without options. */
static const struct store_gap_select nosel;

struct gapseen {
    uint64_t first, last, received, missing;
    int sources;
};

static int
gap_cb(void *arg, const struct store_gap *g)
{
    struct gapseen *x = arg;

    x->sources++;
    x->first = g->first_seq;
    x->last = g->last_seq;
    x->received = g->received;
    x->missing = g->missing;
    return 0;
}

/* One `receipt` write of plan-1 with seq from source src; returns its
 * receipt id, or the first one's when it is a duplicate (*dup set). */
static int64_t
put_single_from(struct store *s, const char *src, uint64_t seq, int *dup)
{
    struct store_write w;
    struct proto_err err;
    struct receipt r;

    make_receipt(&r, "plan-1", 7);
    memset(&w, 0, sizeof(w));
    w.op = PROTO_OP_RECEIPT;
    w.source = src;
    w.source_len = strlen(src);
    w.has_seq = 1;
    w.seq = seq;
    w.received_at = 1700000000000 + (int64_t)seq;
    w.receipts = &r;
    w.n_receipts = 1;
    ck_assert_int_eq(store_begin(s, &err), 0);
    ck_assert_int_eq(store_apply(s, &w, &err), 0);
    ck_assert_int_eq(store_commit(s, &err), 0);
    *dup = w.duplicate;
    return w.receipt_id;
}

static int64_t
put_single(struct store *s, uint64_t seq, int *dup)
{
    return put_single_from(s, "src", seq, dup);
}

/*
 * Seqs 0..99 and UINT64_MAX as single receipts, with chunks of 64: the
 * first chunk's records are in the dedupe table, the rest wait with the
 * tail. A restart forgets nothing: every seq is a duplicate with its first
 * receipt id, before and after the next chunk is written, and `gaps` sees
 * the tail's seqs as well as the table's.
 */
START_TEST(test_store_tail_keeps_receipt_seqs_across_restarts)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20,
                            .chunk_receipts = 64 };
    struct store_opts ro = { .readonly = 1 };
    struct store_filter f = {
        .requested = -1, .executed = -1, .status = -1, .limit = 10
    };
    int64_t ids[101];
    struct gapseen g;
    struct proto_err err;
    struct store *s, *q;
    int dup, trunc, round;
    uint64_t seq;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    for (seq = 0; seq < 100; seq++) {
        ids[seq] = put_single(s, seq, &dup);
        ck_assert_int_eq(dup, 0);
    }
    ids[100] = put_single(s, UINT64_MAX, &dup);
    ck_assert_int_eq(dup, 0);
    store_free(s);
    for (round = 0; round < 2; round++) {
        ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
        for (seq = 0; seq < 100; seq++) {
            ck_assert_int_eq(put_single(s, seq, &dup), ids[seq]);
            ck_assert_int_eq(dup, 1);
        }
        ck_assert_int_eq(put_single(s, UINT64_MAX, &dup), ids[100]);
        ck_assert_int_eq(dup, 1);
        /* A gap (100..149 missing), then a new seq; the second round
         * writes enough for the tail to become a chunk. */
        put_single(s, 150 + (uint64_t)round * 100, &dup);
        ck_assert_int_eq(dup, 0);
        if (round == 1)
            for (seq = 300; seq < 400; seq++)
                put_single(s, seq, &dup);
        store_free(s);
    }
    ck_assert_int_eq(store_open(path, &ro, &q, &err), 0);
    memset(&g, 0, sizeof(g));
    f.source = "src";
    f.source_len = 3;
    ck_assert_int_eq(
        store_query_gaps(q, &f, &nosel, 0, gap_cb, &g, &trunc, &err), 0);
    ck_assert_int_eq(g.sources, 1);
    ck_assert_uint_eq(g.first, 0);
    ck_assert_uint_eq(g.last, UINT64_MAX);
    /* 0..99, 150, 250, 300..399 and UINT64_MAX. */
    ck_assert_uint_eq(g.received, 100 + 2 + 100 + 1);
    store_free(q);
}
END_TEST

/*
 * Within one tail, without a restart: seqs above their source's mark are
 * only appended to the tail's records, and a resend of one (or a seq
 * below the mark that is new) makes the records' index catch up, across
 * its growth: 1,500 new seqs, a resend of every seventh, 200 new seqs
 * below the mark from a second source (descending), 300 more above it,
 * then resends of all of them; after a restart the same again.
 */
START_TEST(test_store_tail_finds_resends_without_a_restart)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20,
                            .chunk_receipts = 100000 };
    static int64_t ids[1500], other[2500];
    struct proto_err err;
    struct store *s;
    uint64_t seq;
    int dup, round;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    for (seq = 0; seq < 1500; seq++) {
        ids[seq] = put_single(s, seq, &dup);
        ck_assert_int_eq(dup, 0);
    }
    for (seq = 0; seq < 1500; seq += 7) {
        ck_assert_int_eq(put_single(s, seq, &dup), ids[seq]);
        ck_assert_int_eq(dup, 1);
    }
    other[2400] = put_single_from(s, "other", 2400, &dup);
    for (seq = 2399; seq >= 2200; seq--) {
        other[seq] = put_single_from(s, "other", seq, &dup);
        ck_assert_int_eq(dup, 0);
    }
    for (seq = 1500; seq < 1800; seq++) {
        other[seq - 1500] = put_single_from(s, "other", 2401 + seq, &dup);
        ck_assert_int_eq(dup, 0);
    }
    for (round = 0; round < 2; round++) {
        for (seq = 0; seq < 1500; seq += 3) {
            ck_assert_int_eq(put_single(s, seq, &dup), ids[seq]);
            ck_assert_int_eq(dup, 1);
        }
        for (seq = 2200; seq <= 2400; seq++) {
            ck_assert_int_eq(put_single_from(s, "other", seq, &dup),
                             other[seq]);
            ck_assert_int_eq(dup, 1);
        }
        for (seq = 1500; seq < 1800; seq++) {
            ck_assert_int_eq(put_single_from(s, "other", 2401 + seq, &dup),
                             other[seq - 1500]);
            ck_assert_int_eq(dup, 1);
        }
        store_free(s);
        ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    }
    store_free(s);
}
END_TEST

/* The figures `gaps` gives the source name (g->sources: how many it
 * listed). */
static void
source_gaps(const char *dbpath, const char *name, struct gapseen *g)
{
    struct store_opts ro = { .readonly = 1 };
    struct store_filter f = {
        .requested = -1, .executed = -1, .status = -1, .limit = 10
    };
    struct proto_err err;
    struct store *q;
    int trunc;

    memset(g, 0, sizeof(*g));
    f.source = name;
    f.source_len = strlen(name);
    ck_assert_int_eq(store_open(dbpath, &ro, &q, &err), 0);
    ck_assert_int_eq(
        store_query_gaps(q, &f, &nosel, 0, gap_cb, g, &trunc, &err), 0);
    store_free(q);
}

/*
 * A chunk's seq records reach the table in (source, seq) order whatever
 * order they came in: 3 sources in order, 2 with a few seqs swapped, 2
 * descending (a sort of their own), then a chunk with 150 sources (more
 * than are grouped, one sort of all). Once each is a chunk, every seq is
 * found again with its first receipt, before and after a restart, and
 * `gaps` sees no gap in any source.
 */
START_TEST(test_store_chunk_orders_seqs_of_any_arrival)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20,
                            .chunk_receipts = 1000 };
    static int64_t ids[7][140], many[150][7];
    struct proto_err err;
    struct store *s;
    char src[32];
    int dup, k, i, round;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    /* 7 x 140 = 980 records, interleaved by source. */
    for (i = 0; i < 140; i++)
        for (k = 0; k < 7; k++) {
            uint64_t seq = k < 3   ? (uint64_t)i
                           : k < 5 ? (uint64_t)(i % 10 == 3   ? i + 1
                                                : i % 10 == 4 ? i - 1
                                                              : i)
                                   : (uint64_t)(139 - i);

            snprintf(src, sizeof(src), "arrival-%d", k);
            ids[k][seq] = put_single_from(s, src, seq, &dup);
            ck_assert_int_eq(dup, 0);
        }
    /* 150 sources x 7 seqs, each source's descending: the next chunk. */
    for (k = 0; k < 150; k++)
        for (i = 0; i < 7; i++) {
            snprintf(src, sizeof(src), "many-%d", k);
            many[k][i] = put_single_from(s, src, (uint64_t)(6 - i), &dup);
            ck_assert_int_eq(dup, 0);
        }
    for (round = 0; round < 2; round++) {
        struct gapseen g;

        for (k = 0; k < 7; k++)
            for (i = 0; i < 140; i++) {
                snprintf(src, sizeof(src), "arrival-%d", k);
                ck_assert_int_eq(put_single_from(s, src, (uint64_t)i, &dup),
                                 ids[k][i]);
                ck_assert_int_eq(dup, 1);
            }
        for (k = 0; k < 150; k++)
            for (i = 0; i < 7; i++) {
                snprintf(src, sizeof(src), "many-%d", k);
                ck_assert_int_eq(
                    put_single_from(s, src, (uint64_t)(6 - i), &dup),
                    many[k][i]);
                ck_assert_int_eq(dup, 1);
            }
        store_free(s);
        source_gaps(path, "arrival-4", &g);
        ck_assert_int_eq(g.sources, 1);
        ck_assert_uint_eq(g.first, 0);
        ck_assert_uint_eq(g.last, 139);
        ck_assert_uint_eq(g.received, 140);
        ck_assert_uint_eq(g.missing, 0);
        source_gaps(path, "many-149", &g);
        ck_assert_uint_eq(g.last, 6);
        ck_assert_uint_eq(g.received, 7);
        ck_assert_uint_eq(g.missing, 0);
        ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    }
    store_free(s);
}
END_TEST

/*
 * A source's high-water mark, read after a restart, counts the seqs the
 * tail holds: once another source's receipts turn that tail into a chunk,
 * a resend of those seqs must still be looked up (and found) in the
 * dedupe table, though nothing newer came from the source meanwhile.
 */
START_TEST(test_store_seq_mark_counts_the_tail)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20,
                            .chunk_receipts = 64 };
    struct proto_err err;
    struct store *s;
    int64_t ids[100];
    uint64_t seq;
    int dup;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    for (seq = 0; seq < 100; seq++)
        ids[seq] = put_single(s, seq, &dup);
    store_free(s);
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    ck_assert_int_eq(put_single(s, 0, &dup), ids[0]);
    ck_assert_int_eq(dup, 1);
    for (seq = 0; seq < 70; seq++)
        put_single_from(s, "other", seq, &dup);
    for (seq = 64; seq < 100; seq++) {
        ck_assert_int_eq(put_single(s, seq, &dup), ids[seq]);
        ck_assert_int_eq(dup, 1);
    }
    store_free(s);
}
END_TEST

/* The figures `gaps` gives source "src" (and how many sources it lists). */
static void
gaps_of(const char *dbpath, struct gapseen *g)
{
    source_gaps(dbpath, "src", g);
}

/*
 * The first walk counts a run that nothing else falls inside from its
 * header; a seq of the dedupe table inside a run's range makes it read
 * the run after all: seqs 1, 2, 4, 5 in one run (a chunk of 4) and 3 in
 * the table are 5 received, none missing; without the 3, one missing.
 */
START_TEST(test_store_gaps_run_with_a_table_seq_inside)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20,
                            .chunk_receipts = 4 };
    static const uint64_t seqs[] = { 1, 2, 4, 5 };
    struct gapseen g;
    struct proto_err err;
    struct store *s;
    sqlite3 *db;
    size_t i;
    int dup;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    for (i = 0; i < 4; i++)
        put_single(s, seqs[i], &dup);
    store_free(s);
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(scalar_of(db, "SELECT count(*) FROM seq_runs WHERE lo = "
                                   "1 AND hi = 5 AND n = 4"),
                     1);
    sqlite3_close(db);
    gaps_of(path, &g);
    ck_assert_int_eq(g.sources, 1);
    ck_assert(g.received == 4 && g.missing == 1 && g.first == 1 && g.last == 5);

    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(
        sqlite3_exec(db,
                     "INSERT INTO dedupe (source_id, seq, op, receipt_id, "
                     "status) SELECT id, 3, 3, NULL, NULL FROM strings WHERE "
                     "value = CAST('src' AS BLOB)",
                     NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    gaps_of(path, &g);
    ck_assert(g.received == 5 && g.missing == 0 && g.first == 1 && g.last == 5);
}
END_TEST

/*
 * Seq runs that overlap (store_seq.c): a source whose seqs do not rise
 * (odd seqs in the first chunks, even ones later, and some above 2^63),
 * one `receipt` record in the dedupe table as stores before migration
 * 0009 wrote them, and seqs still in the tail. Every resend finds its
 * first receipt, and `gaps` merges all three in unsigned order.
 */
START_TEST(test_store_seq_runs_overlap)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20,
                            .chunk_receipts = 32 };
    struct store_opts ro = { .readonly = 1 };
    struct store_filter f = {
        .requested = -1, .executed = -1, .status = -1, .limit = 10
    };
    static int64_t ids[300];
    int64_t big[3], old_id;
    struct gapseen g;
    struct proto_err err;
    struct store *s, *q;
    sqlite3 *db;
    int dup, trunc, i;
    uint64_t seq;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    for (seq = 1; seq < 200; seq += 2)
        ids[seq] = put_single(s, seq, &dup);
    for (i = 0; i < 3; i++)
        big[i] = put_single(s, UINT64_MAX - 2 * (uint64_t)i, &dup);
    for (seq = 0; seq < 200; seq += 2)
        ids[seq] = put_single(s, seq, &dup);
    /* 200 .. 209 stay in the tail (203 receipts, chunks of 32). */
    for (seq = 200; seq < 210; seq++)
        ids[seq] = put_single(s, seq, &dup);
    store_free(s);
    /* A `receipt` record written the old way (op 2, PROTO_OP_RECEIPT):
     * seq 250, in dedupe only. */
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(
        sqlite3_exec(db,
                     "INSERT INTO dedupe (source_id, seq, op, receipt_id, "
                     "status) SELECT id, 250, 2, 7, 1 FROM strings WHERE "
                     "value = CAST('src' AS BLOB)",
                     NULL, NULL, NULL),
        SQLITE_OK);
    ck_assert_int_eq(sqlite3_changes(db), 1);
    ck_assert_int_gt(scalar_of(db, "SELECT count(*) FROM seq_runs"), 2);
    /* Runs overlap: some run's range holds another's lowest seq. */
    ck_assert_int_gt(scalar_of(db, "SELECT count(*) FROM seq_runs a JOIN "
                                   "seq_runs b ON a.source_id = b.source_id "
                                   "AND a.chunk <> b.chunk AND b.lo > a.lo "
                                   "AND b.lo < a.hi"),
                     0);
    sqlite3_close(db);
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    for (seq = 0; seq < 210; seq++) {
        ck_assert_int_eq(put_single(s, seq, &dup), ids[seq]);
        ck_assert_int_eq(dup, 1);
    }
    for (i = 0; i < 3; i++) {
        ck_assert_int_eq(put_single(s, UINT64_MAX - 2 * (uint64_t)i, &dup),
                         big[i]);
        ck_assert_int_eq(dup, 1);
    }
    old_id = put_single(s, 250, &dup);
    ck_assert_int_eq(dup, 1);
    ck_assert_int_eq(old_id, 7);
    /* Seqs between the runs were never written. */
    put_single(s, UINT64_MAX - 1, &dup);
    ck_assert_int_eq(dup, 0);
    store_free(s);

    ck_assert_int_eq(store_open(path, &ro, &q, &err), 0);
    memset(&g, 0, sizeof(g));
    f.source = "src";
    f.source_len = 3;
    ck_assert_int_eq(
        store_query_gaps(q, &f, &nosel, 0, gap_cb, &g, &trunc, &err), 0);
    ck_assert_int_eq(g.sources, 1);
    ck_assert_uint_eq(g.first, 0);
    ck_assert_uint_eq(g.last, UINT64_MAX);
    /* 0..209, 250, and UINT64_MAX - 4, - 2, - 1 and UINT64_MAX: missing
     * 210..249, 251..UINT64_MAX - 5 and UINT64_MAX - 3. */
    ck_assert_uint_eq(g.received, 210 + 1 + 4);
    ck_assert_uint_eq(g.missing, 40 + (UINT64_MAX - 5 - 251 + 1) + 1);
    store_free(q);
}
END_TEST

/* ---- a seq names one write: a differing resend is a conflict ---- */

/* One write of op (`receipt` or a one-item `receipts`) from "src" with
 * seq and payload hash; its outputs in *w. */
static void
put_hashed(struct store *s, int op, uint64_t seq, uint32_t hash,
           struct store_write *w)
{
    static const char raw[] = "the payload";
    static struct store_quarantine_item q;
    struct proto_err err;
    static struct receipt r;

    make_receipt(&r, "plan-1", 7);
    memset(w, 0, sizeof(*w));
    q = (struct store_quarantine_item){ raw,       strlen(raw),
                                        "receipt", PROTO_ECONFLICT,
                                        "seq",     "reused" };
    w->op = op;
    w->source = "src";
    w->source_len = 3;
    w->has_seq = 1;
    w->seq = seq;
    w->received_at = 1700000000000;
    w->receipts = &r;
    w->n_receipts = 1;
    w->payload_hash = hash;
    w->conflict_q = &q;
    if (op == PROTO_OP_RECEIPTS) {
        w->outcome = "\x80";
        w->outcome_len = 1;
    }
    ck_assert_int_eq(store_begin(s, &err), 0);
    ck_assert_int_eq(store_apply(s, w, &err), 0);
    ck_assert_int_eq(store_commit(s, &err), 0);
    /* A duplicate batch's first outcome is the caller's to free. */
    ck_assert(w->duplicate || w->dup_outcome == NULL);
    free(w->dup_outcome);
    w->dup_outcome = NULL;
}

/* The quarantine rows of conflicts put_hashed() kept. */
static int64_t
conflicts_kept(void)
{
    sqlite3 *db;
    int64_t n;

    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    n = scalar_of(db, "SELECT count(*) FROM quarantine WHERE code = "
                      "'conflict' AND path = 'seq' AND raw = CAST('the "
                      "payload' AS BLOB)");
    sqlite3_close(db);
    return n;
}

/*
 * A resend with the first payload's hash is a duplicate; another hash, or
 * another op, is a conflict that stores nothing but the payload in
 * quarantine: while the seq is in the tail, once it is in a seq run (a
 * chunk of 8), after a restart, and for a `receipts` batch's record in
 * the dedupe table. A hash not known (0) on either side compares equal.
 */
START_TEST(test_store_seq_conflicts)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20,
                            .chunk_receipts = 8 };
    struct store_write w;
    struct proto_err err;
    struct store *s;
    int64_t first;
    uint64_t seq;
    int round;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    put_hashed(s, PROTO_OP_RECEIPT, 1, 0xaaaa, &w);
    first = w.receipt_id;
    put_hashed(s, PROTO_OP_RECEIPTS, 100, 0xbbbb, &w);
    ck_assert_int_eq(w.duplicate, 0);
    for (round = 0; round < 3; round++) {
        /* 0: seq 1 in the tail; 1: in a run; 2: the same after a restart. */
        put_hashed(s, PROTO_OP_RECEIPT, 1, 0xaaaa, &w);
        ck_assert_int_eq(w.duplicate, 1);
        ck_assert_int_eq(w.conflict, 0);
        ck_assert_int_eq(w.receipt_id, first);
        put_hashed(s, PROTO_OP_RECEIPT, 1, 0, &w);
        ck_assert_int_eq(w.duplicate, 1);
        put_hashed(s, PROTO_OP_RECEIPT, 1, 0xcccc, &w);
        ck_assert_int_eq(w.duplicate, 0);
        ck_assert_int_eq(w.conflict, 1);
        ck_assert_int_eq(w.conflict_op, PROTO_OP_RECEIPT);
        /* Another op under a `receipt`'s seq. */
        put_hashed(s, PROTO_OP_RECEIPTS, 1, 0xaaaa, &w);
        ck_assert_int_eq(w.conflict, 1);
        ck_assert_int_eq(w.conflict_op, PROTO_OP_RECEIPT);
        /* And under a batch's. */
        put_hashed(s, PROTO_OP_RECEIPTS, 100, 0xbbbb, &w);
        ck_assert_int_eq(w.duplicate, 1);
        put_hashed(s, PROTO_OP_RECEIPTS, 100, 0xdddd, &w);
        ck_assert_int_eq(w.conflict, 1);
        ck_assert_int_eq(w.conflict_op, PROTO_OP_RECEIPTS);
        put_hashed(s, PROTO_OP_RECEIPT, 100, 0xbbbb, &w);
        ck_assert_int_eq(w.conflict, 1);
        ck_assert_int_eq(w.conflict_op, PROTO_OP_RECEIPTS);
        if (round == 0)
            for (seq = 2; seq < 12; seq++)
                put_hashed(s, PROTO_OP_RECEIPT, seq, 0x1000 + (uint32_t)seq,
                           &w);
        if (round == 1) {
            store_free(s);
            ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
        }
    }
    store_free(s);
    ck_assert_int_eq(conflicts_kept(), 3 * 4);
    /* Nothing of a conflicting write was stored: 1 + 1 + 10 rows. */
    {
        sqlite3 *db;

        ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
        ck_assert_int_eq(scalar_of(db, "SELECT count(*) FROM receipts"), 12);
        sqlite3_close(db);
    }
}
END_TEST

/* ---- the receipts query against the plain SQL of the old layout ---- */

struct ids {
    int64_t v[4096];
    size_t n;
};

static int
ids_cb(void *arg, const struct store_row *row)
{
    struct ids *x = arg;

    ck_assert_uint_lt(x->n, 4096);
    x->v[x->n++] = row->receipt_id;
    return 0;
}

/* What the receipts query answered before migrations/0007: the filters as
 * a WHERE clause over the table, newest first. The oracle. */
static void
oracle(sqlite3 *db, const struct store_filter *f, uint32_t limit,
       struct ids *out)
{
    char sql[2048];
    size_t n = 0;
    sqlite3_stmt *st;

#define ADD(...) n += (size_t)snprintf(sql + n, sizeof(sql) - n, __VA_ARGS__)
    ADD("SELECT id FROM receipts WHERE 1");
    if (f->plan)
        ADD(" AND plan_id = (SELECT id FROM strings WHERE value = "
            "CAST('%s' AS BLOB))",
            f->plan);
    if (f->graph)
        ADD(" AND graph_id = (SELECT id FROM strings WHERE value = "
            "CAST('%s' AS BLOB))",
            f->graph);
    if (f->model)
        ADD(" AND model_id = (SELECT id FROM strings WHERE value = "
            "CAST('%s' AS BLOB))",
            f->model);
    if (f->source)
        ADD(" AND source_id = (SELECT id FROM strings WHERE value = "
            "CAST('%s' AS BLOB))",
            f->source);
    if (f->requested >= 0)
        ADD(" AND requested_backend = %d", f->requested);
    if (f->executed >= 0)
        ADD(" AND executed_backend = %d", f->executed);
    if (f->status >= 0)
        ADD(" AND status = %d", f->status);
    if (f->has_since)
        ADD(" AND received_at >= %llu", (unsigned long long)f->since);
    if (f->has_until)
        ADD(" AND received_at < %llu", (unsigned long long)f->until);
    if (f->has_before_id)
        ADD(" AND id < %llu", (unsigned long long)f->before_id);
    ADD(" ORDER BY id DESC LIMIT %u", limit);
#undef ADD
    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    out->n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        ck_assert_uint_lt(out->n, 4096);
        out->v[out->n++] = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
}

/*
 * 3,330 receipts over many small chunks and a tail, written in jobs with a
 * rolled-back job and a rolled-back transaction among them, some stamped
 * by a clock that steps back: every filter alone, every pair, with and
 * without a time window, paged with before_id to the end, gives exactly
 * the ids the old layout's SQL gives.
 */
START_TEST(test_store_pages_match_the_old_query)
{
    static const char *const plans[] = { "p0", "p1", "p2", "p3", "p4", "p5" };
    static const char *const models[] = { "m0", "m1", "m2" };
    static const char *const sources[] = { "s0", "s1", "s2", "s3" };
    struct store_opts o = { .quarantine_max_bytes = 1 << 20,
                            .chunk_receipts = 128 };
    struct store_opts ro = { .readonly = 1 };
    struct receipt rs[10];
    struct proto_err err;
    struct store *s, *q;
    struct ids got, want;
    sqlite3 *db;
    int job, i, a, b, w, trunc;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    for (job = 0; job < 333; job++) {
        struct store_write wr;
        /* Time goes forward a second a job, and steps back a minute now
         * and then. */
        int64_t at = 1700000000000 + job * 1000 - (job % 97 == 0 ? 60000 : 0);

        if (job % 6 == 0)
            ck_assert_int_eq(store_begin(s, &err), 0);
        memset(rs, 0, sizeof(rs));
        for (i = 0; i < 10; i++) {
            unsigned x = (unsigned)(job * 10 + i) * 2654435761u >> 7;
            struct receipt *r = &rs[i];

            r->schema_version = 2;
            r->requested_backend = (uint8_t)(x % 3);
            r->executed_backend = (uint8_t)(x % 17 ? x % 3 : (x + 1) % 3);
            r->prepared_plan_id.ptr = plans[x % 6];
            r->prepared_plan_id.len = 2;
            r->graph_hash.ptr = plans[(x / 6) % 2 ? x % 6 : 0];
            r->graph_hash.len = 2;
            r->model_instance_id.ptr = models[(x / 3) % 3];
            r->model_instance_id.len = 2;
            r->tuning_profile.ptr = r->stop_reason.ptr = "";
            r->counter_coverage = x % 5 ? 0x7f : 0x3f;
        }
        memset(&wr, 0, sizeof(wr));
        wr.op = PROTO_OP_RECEIPTS;
        wr.source = sources[job % 4];
        wr.source_len = 2;
        wr.received_at = at;
        wr.receipts = rs;
        wr.n_receipts = 10;
        ck_assert_int_eq(store_savepoint(s, &err), 0);
        ck_assert_int_eq(store_apply(s, &wr, &err), 0);
        if (job % 23 == 5)
            store_savepoint_rollback(s);
        else
            ck_assert_int_eq(store_savepoint_release(s, &err), 0);
        if (job % 6 == 5) {
            if (job == 89)
                store_rollback(s);
            else
                ck_assert_int_eq(store_commit(s, &err), 0);
        }
    }
    /* The last jobs stay in the tail. */
    ck_assert_int_eq(store_commit(s, &err), 0);
    store_free(s);

    ck_assert_int_eq(store_open(path, &ro, &q, &err), 0);
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    /* There are chunks, postings and a tail to read. */
    {
        sqlite3_stmt *st;
        ck_assert_int_eq(
            sqlite3_prepare_v2(db,
                               "SELECT (SELECT count(*) FROM chunks), (SELECT "
                               "count(*) FROM receipts WHERE id >= (SELECT "
                               "value FROM counters WHERE name = "
                               "'tail_from'))",
                               -1, &st, NULL),
            SQLITE_OK);
        ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
        ck_assert_int_gt(sqlite3_column_int(st, 0), 10);
        ck_assert_int_gt(sqlite3_column_int(st, 1), 0);
        sqlite3_finalize(st);
    }
    /* Filters 0..7: none, plan, graph, model, source, status, requested,
     * executed; every pair (a < b), each with three time windows. */
    for (a = 0; a < 8; a++)
        for (b = a; b < 8; b++)
            for (w = 0; w < 4; w++) {
                struct store_filter f = {
                    .requested = -1, .executed = -1, .status = -1, .limit = 37
                };
                int k, pages = 0;

                for (k = 0; k < 2; k++) {
                    switch (k ? b : a) {
                    case 1:
                        f.plan = "p3", f.plan_len = 2;
                        break;
                    case 2:
                        f.graph = "p0", f.graph_len = 2;
                        break;
                    case 3:
                        f.model = "m1", f.model_len = 2;
                        break;
                    case 4:
                        f.source = "s2", f.source_len = 2;
                        break;
                    case 5:
                        f.status = RECEIPT_STATUS_FALLBACK;
                        break;
                    case 6:
                        f.requested = 1;
                        break;
                    case 7:
                        f.executed = 2;
                        break;
                    }
                }
                if (w == 1)
                    f.has_since = 1, f.since = 1700000100000;
                /* Edges on receipts' own times, inside chunks with a
                 * clock step (jobs 97, 194) and without. */
                if (w == 2) {
                    f.has_since = 1, f.since = 1700000050000;
                    f.has_until = 1, f.until = 1700000200000;
                }
                if (w == 3) {
                    f.has_since = 1, f.since = 1700000150000;
                    f.has_until = 1, f.until = 1700000250000;
                }
                /* Page to the end with before_id. */
                for (;;) {
                    got.n = 0;
                    ck_assert_int_eq(store_query_receipts(q, &f, 0, ids_cb,
                                                          &got, &trunc, &err),
                                     0);
                    oracle(db, &f, f.limit + 1, &want);
                    ck_assert_int_eq(trunc, want.n > f.limit);
                    if (want.n > f.limit)
                        want.n = f.limit;
                    ck_assert_msg(got.n == want.n &&
                                      memcmp(got.v, want.v,
                                             got.n * sizeof(got.v[0])) == 0,
                                  "filters %d+%d window %d page %d: %zu ids, "
                                  "the old query %zu",
                                  a, b, w, pages, got.n, want.n);
                    if (!trunc)
                        break;
                    f.has_before_id = 1;
                    f.before_id = (uint64_t)got.v[got.n - 1];
                    pages++;
                }
            }
    sqlite3_close(db);
    store_free(q);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("store");
    TCase *tc;

#define ADD(name, fn)                                                          \
    do {                                                                       \
        tc = tcase_create(name);                                               \
        tcase_add_checked_fixture(tc, setup, teardown);                        \
        tcase_set_timeout(tc, 30);                                             \
        tcase_add_test(tc, fn);                                                \
        suite_add_tcase(s, tc);                                                \
    } while (0)
    ADD("migrate_empty", test_store_migrates_empty_file_to_golden_schema);
    ADD("newer", test_store_refuses_newer_database);
    ADD("pragmas", test_store_sets_and_checks_durability_pragmas);
    ADD("insert_dedupe", test_store_insert_keeps_u64_and_dedupes_seq);
    ADD("rollback", test_store_rolled_back_insert_leaves_nothing);
    ADD("append_ids", test_store_appended_rows_keep_the_writers_ids);
    ADD("single_rows_wait", test_store_single_receipts_wait_for_one_insert);
    ADD("quarantine", test_store_quarantine_evicts_oldest_and_counts);
    ADD("quarantine_replay", test_store_quarantine_replay_updates_its_row);
    ADD("pages_no_sort", test_store_receipts_pages_need_no_sort);
    ADD("pages_match_old_query", test_store_pages_match_the_old_query);
    ADD("tail_seqs", test_store_tail_keeps_receipt_seqs_across_restarts);
    ADD("seq_mark_tail", test_store_seq_mark_counts_the_tail);
    ADD("seq_tail_resends", test_store_tail_finds_resends_without_a_restart);
    ADD("chunk_seq_order", test_store_chunk_orders_seqs_of_any_arrival);
    ADD("seq_runs_overlap", test_store_seq_runs_overlap);
    ADD("gaps_run_with_table_seq", test_store_gaps_run_with_a_table_seq_inside);
    ADD("seq_conflicts", test_store_seq_conflicts);
#undef ADD
    tc = tcase_create("migrate_earlier");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_store_migrates_from_every_earlier_version, 1,
                        store_schema_version());
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
