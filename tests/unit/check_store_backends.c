/*
 * check_store_backends.c: both store backends (daemon/store_ops.h) answer
 * every query kind the same. The same writes go to an SQLite store and to
 * a PostgreSQL one on a private cluster (tests/lib/pg_cluster.h), then
 * each kind (receipts with its filters, fallbacks and coverage for every
 * grouping and time range, gaps, quarantine, stats) is asked of both and
 * the answers compared. Also the PostgreSQL backend's own promises: its
 * rollups equal a scan (with their sums pending, merged, or both, from
 * two instances), a (source, seq) is stored once, several instances
 * migrate once, a resent batch of the same rows fails whole, retention
 * drops whole days.
 *
 * The whole binary reports SKIP where PostgreSQL 15 is not installed (a
 * failure when RECEIPTD_CI is set).
 */
#include <check.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "aggcheck.h"
#include "envelope.h"
#include "pg_cluster.h"
#include "skip.h"
#include "store.h"
#include "store_agg.h"
#include "store_prune.h"
#include "store_relay.h"

#define DAY  INT64_C(86400000)
#define HOUR INT64_C(3600000)
/* 2026-11-01T00:00:00Z */
#define T0 INT64_C(1793491200000)

static struct pg_scratch cluster;
static char sqlite_path[300];

static void
cluster_up(void)
{
    pg_scratch_up(&cluster, "pgcheck");
}

static void
cluster_down(void)
{
    pg_scratch_down(&cluster);
}

/* A fresh database for one test: its conninfo into out. */
static void
fresh_db(const char *name, char *out, size_t cap)
{
    pg_cluster_database(cluster.conninfo, name, out, cap);
}

static struct store *
open_store(int backend, const char *where, int readonly)
{
    struct store_opts o = { .backend = backend,
                            .readonly = readonly,
                            .quarantine_max_bytes = 1 << 20,
                            .chunk_receipts = 16 };
    struct proto_err err;
    struct store *s;

    ck_assert_msg(store_open(where, &o, &s, &err) == 0, "open %s: %s", where,
                  err.message);
    return s;
}

/* ---- the writes both stores get ---- */

static const char *const plans[] = { "p0", "p1", "p2", "plan-three" };
static const char *const models[] = { "m0", "m1", "m2" };

static void
mk_receipt(struct receipt *r, int i)
{
    int b;

    memset(r, 0, sizeof(*r));
    r->schema_version = (uint16_t)(i % 3 ? 3 : 2);
    r->requested_backend = RECEIPT_BACKEND_CUDA;
    r->executed_backend = (uint8_t)(i % 4 == 1   ? RECEIPT_BACKEND_CPU
                                    : i % 7 == 3 ? RECEIPT_BACKEND_UNKNOWN
                                                 : RECEIPT_BACKEND_CUDA);
    r->prepared_plan_id.ptr = plans[i % 4];
    r->prepared_plan_id.len = strlen(plans[i % 4]);
    r->model_instance_id.ptr = models[i % 3];
    r->model_instance_id.len = 2;
    r->graph_hash.ptr = i % 2 ? "g1" : "";
    r->graph_hash.len = i % 2 ? 2 : 0;
    r->tuning_profile.ptr = "t";
    r->tuning_profile.len = 1;
    r->stop_reason.ptr = i % 5 ? "eos" : "max_tokens";
    r->stop_reason.len = strlen(r->stop_reason.ptr);
    r->counter_coverage = (0x3ffffffu ^ ((uint64_t)i * 2654435761u)) &
                          (i % 6 ? 0x3ffffffu : 0x1u);
    for (b = 0; b < RECEIPT_NCOUNTERS; b++)
        r->counters[b] =
            b % 3 == 0 ? UINT64_MAX - (uint64_t)i : (uint64_t)(i * (b + 1));
    r->artifacts[0] = (uint64_t)i;
    r->artifacts[3] = 7;
}

/* One `receipt` write with a seq into the open group; expect: 0 new, 1
 * a duplicate, 2 a conflict (the seq was another payload). */
static void
one(struct store *s, const char *source, uint64_t seq, int i, int64_t at,
    int expect)
{
    struct receipt r;
    struct store_write w;
    struct proto_err err;

    mk_receipt(&r, i);
    memset(&w, 0, sizeof(w));
    w.op = PROTO_OP_RECEIPT;
    w.source = source;
    w.source_len = strlen(source);
    w.has_seq = 1;
    w.seq = seq;
    w.received_at = at;
    w.receipts = &r;
    w.n_receipts = 1;
    w.payload_hash = (uint32_t)(i + 1);
    ck_assert_int_eq(store_apply(s, &w, &err), 0);
    ck_assert_int_eq(w.duplicate, expect == 1);
    ck_assert_int_eq(w.conflict, expect == 2);
    free(w.dup_outcome);
}

/* The same history for any store: singles with seqs and gaps, batches
 * without, over three days with partial hours at every edge, a resend,
 * a quarantined payload. */
static void
fill(struct store *s)
{
    static const struct store_quarantine_item q = {
        "\x81\xa1x\x01", 4, "receipt", PROTO_EINVALID, "body.x", "bad x"
    };
    struct receipt rs[25];
    struct store_write w;
    struct proto_err err;
    int g, i, k = 0;

    for (g = 0; g < 12; g++) {
        int64_t at = T0 + g * 6 * HOUR + g * 7 * 60000 + 1234;

        ck_assert_int_eq(store_begin(s, &err), 0);
        for (i = 0; i < 6; i++, k++) {
            uint64_t seq = (uint64_t)k + 1;

            if (seq == 7 || seq == 8 || seq == 30)
                continue; /* gaps */
            one(s, "node-a", seq, k, at + i * 1000, 0);
        }
        if (g == 0) /* a resend inside the group that stored it */
            one(s, "node-a", 2, 1, at + 9000, 1);
        one(s, "node-b", 100 + (uint64_t)g * 2, g, at + 500, 0);
        for (i = 0; i < 25; i++)
            mk_receipt(&rs[i], g * 25 + i);
        memset(&w, 0, sizeof(w));
        w.op = PROTO_OP_RECEIPTS;
        w.source = g % 2 ? "batcher" : "";
        w.source_len = strlen(w.source);
        w.received_at = at + 2 * HOUR + 59 * 60000;
        w.receipts = rs;
        w.n_receipts = 25;
        ck_assert_int_eq(store_apply(s, &w, &err), 0);
        ck_assert_int_eq(store_commit(s, &err), 0);
    }
    /* A resend of a stored seq: a duplicate, stored once. */
    ck_assert_int_eq(store_begin(s, &err), 0);
    one(s, "node-a", 5, 4, T0 + 80 * HOUR, 1);
    one(s, "node-a", 6, 99, T0 + 80 * HOUR, 2); /* another payload */
    memset(&w, 0, sizeof(w));
    w.op = -1;
    w.source = "node-a";
    w.source_len = 6;
    w.received_at = T0 + 80 * HOUR;
    w.quarantine = &q;
    w.n_quarantine = 1;
    ck_assert_int_eq(store_apply(s, &w, &err), 0);
    ck_assert_int_eq(store_commit(s, &err), 0);
}

/* ---- answers as text, to compare ---- */

struct text {
    char *p;
    size_t len, cap;
};

static void
add(struct text *t, const char *fmt, ...)
{
    va_list ap;
    int n;

    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        /* Called for every field of every row: no passing ck_assert, each
         * of which costs Check a write(2). */
        if (n < 0)
            ck_abort_msg("vsnprintf failed");
        if (t->len + (size_t)n < t->cap)
            break;
        t->cap = (t->cap + (size_t)n + 1) * 2;
        if ((t->p = realloc(t->p, t->cap)) == NULL)
            ck_abort_msg("out of memory");
    }
    t->len += (size_t)n;
}

static int
row_cb(void *arg, const struct store_row *row)
{
    struct text *t = arg;
    int b;

    add(t, "%lld %lld %.*s %d:%llu %d s%u %u>%u %.*s %.*s %.*s %.*s %.*s %llx",
        (long long)row->receipt_id, (long long)row->received_at,
        (int)row->source.len, row->source.ptr, row->has_seq,
        (unsigned long long)row->seq, row->status, row->r.schema_version,
        row->r.requested_backend, row->r.executed_backend,
        (int)row->r.model_instance_id.len, row->r.model_instance_id.ptr,
        (int)row->r.prepared_plan_id.len, row->r.prepared_plan_id.ptr,
        (int)row->r.graph_hash.len, row->r.graph_hash.ptr,
        (int)row->r.tuning_profile.len, row->r.tuning_profile.ptr,
        (int)row->r.stop_reason.len, row->r.stop_reason.ptr,
        (unsigned long long)row->r.counter_coverage);
    for (b = 0; b < RECEIPT_NCOUNTERS; b++)
        add(t, " %llu", (unsigned long long)row->r.counters[b]);
    for (b = 0; b < RECEIPT_NARTIFACTS; b++)
        add(t, " a%llu", (unsigned long long)row->r.artifacts[b]);
    add(t, " x%zu\n", row->r.extra_len);
    return 0;
}

static struct store_filter
filter(void)
{
    struct store_filter f;

    memset(&f, 0, sizeof(f));
    f.requested = f.executed = f.status = -1;
    f.limit = 1000;
    return f;
}

static char *
receipts_text(struct store *s, const struct store_filter *f)
{
    struct text t = { NULL, 0, 0 };
    struct proto_err err;
    int truncated = -1;

    add(&t, "");
    ck_assert_msg(store_query_receipts(s, f, 0, row_cb, &t, &truncated, &err) ==
                      0,
                  "%s", err.message);
    add(&t, "truncated %d\n", truncated);
    return t.p;
}

static int
cmp_groups(const void *a, const void *b)
{
    const struct store_agg_group *x = a, *y = b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = n ? memcmp(x->name, y->name, n) : 0;

    if (c)
        return c;
    if (x->name_len != y->name_len)
        return x->name_len < y->name_len ? -1 : 1;
    /* Named alike, a store's groups differ in k1 and k2 only as backends
     * (a pair's), which both stores key alike. */
    if (x->k1 != y->k1)
        return x->k1 < y->k1 ? -1 : 1;
    if (x->k2 != y->k2)
        return x->k2 < y->k2 ? -1 : 1;
    return (x->bucket > y->bucket) - (x->bucket < y->bucket);
}

static char *
agg_text(struct store *s, const struct store_filter *f, int group_by,
         unsigned flags)
{
    struct store_agg a = { 0 };
    struct text t = { NULL, 0, 0 };
    struct proto_err err;
    size_t i;
    int b, backends = store_group_has_backends(group_by);

    add(&t, "");
    ck_assert_msg(store_query_agg(s, f, group_by, flags, 0, &a, &err) == 0,
                  "%s", err.message);
    if (a.n > 0)
        qsort(a.groups, a.n, sizeof(*a.groups), cmp_groups);
    for (i = 0; i < a.n; i++) {
        const struct store_agg_group *g = &a.groups[i];

        add(&t, "[%.*s|%lld|%lld|%lld] %llu %llu %llu %llu %llu",
            (int)g->name_len, g->name ? g->name : "",
            backends || !g->name ? (long long)g->k1 : 0LL,
            backends || !g->name ? (long long)g->k2 : 0LL, (long long)g->bucket,
            (unsigned long long)g->receipts, (unsigned long long)g->fallback,
            (unsigned long long)g->clean, (unsigned long long)g->unproven,
            (unsigned long long)g->schema3);
        for (b = 0; b < RECEIPT_NCOUNTERS; b++)
            add(&t, " %llu/%llx:%llx/%llu/%llu",
                (unsigned long long)g->c[b].measured,
                (unsigned long long)g->c[b].sum_hi,
                (unsigned long long)g->c[b].sum_lo,
                (unsigned long long)(g->c[b].measured ? g->c[b].min : 0),
                (unsigned long long)(g->c[b].measured ? g->c[b].max : 0));
        add(&t, "\n");
    }
    store_agg_free(&a);
    return t.p;
}

static int
gap_cb(void *arg, const struct store_gap *g)
{
    struct text *t = arg;
    size_t i;

    add(t, "%.*s %llu..%llu got %llu missing %llu last %d:%lld",
        (int)g->source.len, g->source.ptr, (unsigned long long)g->first_seq,
        (unsigned long long)g->last_seq, (unsigned long long)g->received,
        (unsigned long long)g->missing, g->has_last_received,
        (long long)(g->has_last_received ? g->last_received_at : 0));
    for (i = 0; i < g->n_ranges; i++)
        add(t, " [%llu,%llu]", (unsigned long long)g->ranges[i][0],
            (unsigned long long)g->ranges[i][1]);
    add(t, " %d\n", g->ranges_truncated);
    return 0;
}

static char *
gaps_text(struct store *s, const struct store_filter *f,
          const struct store_gap_select *sel)
{
    struct text t = { NULL, 0, 0 };
    struct proto_err err;
    int truncated = -1;

    add(&t, "");
    ck_assert_msg(
        store_query_gaps(s, f, sel, 0, gap_cb, &t, &truncated, &err) == 0, "%s",
        err.message);
    add(&t, "truncated %d\n", truncated);
    return t.p;
}

static int
qrow_cb(void *arg, const struct store_qrow *q)
{
    struct text *t = arg;

    add(t, "%lld %lld %.*s %.*s %.*s %.*s %.*s %llu %llu %zu\n",
        (long long)q->id, (long long)q->received_at, (int)q->source.len,
        q->source.ptr, (int)q->op.len, q->op.ptr, (int)q->code.len, q->code.ptr,
        (int)q->path.len, q->path.ptr, (int)q->message.len, q->message.ptr,
        (unsigned long long)q->size, (unsigned long long)q->attempts,
        q->raw_len);
    return 0;
}

static char *
quarantine_text(struct store *s)
{
    struct store_filter f = filter();
    struct text t = { NULL, 0, 0 };
    struct proto_err err;
    int truncated = -1;

    add(&t, "");
    ck_assert_msg(store_query_quarantine(s, &f, 0, 0, 1, 0, qrow_cb, &t,
                                         &truncated, &err) == 0,
                  "%s", err.message);
    return t.p;
}

static void
same(char *a, char *b, const char *what)
{
    ck_assert_msg(strcmp(a, b) == 0, "%s differ:\nsqlite:\n%s\npostgresql:\n%s",
                  what, a, b);
    free(a);
    free(b);
}

/* ---- tests ---- */

START_TEST(test_backends_answer_every_kind_the_same)
{
    static const int64_t windows[][2] = {
        { 0, 0 },                                   /* everything */
        { T0 + 5 * HOUR + 17, T0 + 40 * HOUR + 9 }, /* whole hours, edges */
        { T0 + 6 * HOUR + 60000, T0 + 6 * HOUR + 3000000 }, /* inside one */
        { T0 + DAY, 0 },
    };
    char pg[700], what[160];
    struct store *w, *a, *b;
    size_t i, e, k;

    snprintf(sqlite_path, sizeof(sqlite_path), "%s/same.db", cluster.base);
    fresh_db("same", pg, sizeof(pg));
    w = open_store(STORE_BACKEND_SQLITE, sqlite_path, 0);
    fill(w);
    store_free(w);
    w = open_store(STORE_BACKEND_POSTGRESQL, pg, 0);
    fill(w);
    store_free(w);
    a = open_store(STORE_BACKEND_SQLITE, sqlite_path, 1);
    b = open_store(STORE_BACKEND_POSTGRESQL, pg, 1);

    /* receipts, filter by filter */
    for (i = 0; i < 10; i++) {
        struct store_filter f = filter();

        switch (i) {
        case 1:
            f.plan = "p1";
            f.plan_len = 2;
            break;
        case 2:
            f.source = "node-b";
            f.source_len = 6;
            break;
        case 3:
            f.executed = RECEIPT_BACKEND_CPU;
            f.graph = "g1";
            f.graph_len = 2;
            break;
        case 4:
            f.status = RECEIPT_STATUS_FALLBACK;
            f.model = "m2";
            f.model_len = 2;
            break;
        case 5:
            f.has_since = f.has_until = 1;
            f.since = (uint64_t)windows[1][0];
            f.until = (uint64_t)windows[1][1];
            break;
        case 6:
            f.has_before_id = 1;
            f.before_id = 100;
            f.limit = 7;
            break;
        case 7:
            f.limit = 1;
            f.requested = RECEIPT_BACKEND_CUDA;
            break;
        case 8:
            f.source = "";
            f.source_len = 0;
            break;
        case 9: /* a node that relayed nothing here */
            f.origin = "node-x";
            f.origin_len = 6;
            break;
        }
        snprintf(what, sizeof(what), "receipts (filter %zu)", i);
        same(receipts_text(a, &f), receipts_text(b, &f), what);
    }
    /* fallbacks and coverage: every grouping (each key, and each string
     * key with backends), every window, as one total and as series of
     * hours and of days */
    for (e = 0; e < 3; e++)
        for (i = 0; i < sizeof(windows) / sizeof(windows[0]); i++)
            for (k = 0; k < 2 * STORE_GROUP_COUNT; k++) {
                struct store_filter f = filter();
                int gb = k < STORE_GROUP_COUNT ? (int)k
                                               : (int)(k - STORE_GROUP_COUNT) |
                                                     STORE_GROUP_AND_BACKENDS;

                if (!store_group_valid(gb))
                    continue;

                f.every = e == 0 ? 0 : e == 1 ? HOUR : DAY;

                f.has_since = windows[i][0] != 0;
                f.since = (uint64_t)windows[i][0];
                f.has_until = windows[i][1] != 0;
                f.until = (uint64_t)windows[i][1];
                if (store_group_key(gb) == STORE_GROUP_MODEL) {
                    f.plan = "p2";
                    f.plan_len = 2;
                }
                snprintf(what, sizeof(what),
                         "coverage (window %zu, group %d, every %llu)", i, gb,
                         (unsigned long long)f.every);
                same(agg_text(a, &f, gb, STORE_AGG_COUNTERS),
                     agg_text(b, &f, gb, STORE_AGG_COUNTERS), what);
                snprintf(what, sizeof(what),
                         "fallbacks (window %zu, group %d, every %llu)", i, gb,
                         (unsigned long long)f.every);
                same(agg_text(a, &f, gb, 0), agg_text(b, &f, gb, 0), what);
            }
    /* gaps */
    {
        struct store_filter f = filter();
        struct store_gap_select sel = { 0 };

        same(gaps_text(a, &f, &sel), gaps_text(b, &f, &sel), "gaps");
        sel.only_missing = 1;
        f.limit = 1;
        same(gaps_text(a, &f, &sel), gaps_text(b, &f, &sel),
             "gaps (only missing, limit 1)");
        f.source = "node-b";
        f.source_len = 6;
        same(gaps_text(a, &f, &sel), gaps_text(b, &f, &sel),
             "gaps (one source)");
    }
    same(quarantine_text(a), quarantine_text(b), "quarantine");
    {
        struct store_stats sa, sb;
        struct proto_err err;

        ck_assert_int_eq(store_query_stats(a, 0, &sa, &err), 0);
        ck_assert_int_eq(store_query_stats(b, 0, &sb, &err), 0);
        ck_assert_uint_eq(sa.last_receipt_id, sb.last_receipt_id);
        ck_assert_uint_eq(sa.quarantined, sb.quarantined);
        ck_assert_uint_eq(sa.quarantine_bytes, sb.quarantine_bytes);
        ck_assert_uint_gt(sb.size_bytes, 0);
    }
    store_free(a);
    store_free(b);
}
END_TEST

/* PostgreSQL's rollups (whole hours) and a scan of its receipts agree. */
START_TEST(test_pg_rollups_equal_scan)
{
    static const struct aggcheck_range ranges[] = {
        { 0, 0, 0, 0 },
        { 1, 1, T0 + HOUR + 7, T0 + 2 * DAY + 5 },
        { 1, 0, T0 + 10 * HOUR + 5, 0 },
        { 0, 1, 0, T0 + 11 * HOUR + 2 },
    };
    char pg[700];
    struct store *s;

    fresh_db("rollups", pg, sizeof(pg));
    s = open_store(STORE_BACKEND_POSTGRESQL, pg, 0);
    fill(s);
    store_free(s);
    s = open_store(STORE_BACKEND_POSTGRESQL, pg, 1);
    aggcheck_equal_scan(s, ranges, sizeof(ranges) / sizeof(ranges[0]));
    store_free(s);
}
END_TEST

static int64_t
scalar(const char *conninfo, const char *sql)
{
    PGconn *pc = PQconnectdb(conninfo);
    PGresult *r;
    int64_t v;

    ck_assert_msg(PQstatus(pc) == CONNECTION_OK, "%s", PQerrorMessage(pc));
    r = PQexec(pc, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql,
                  PQerrorMessage(pc));
    v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    PQfinish(pc);
    return v;
}

struct opener {
    const char *conninfo;
    int rc;
};

static void *
open_thread(void *arg)
{
    struct opener *o = arg;
    struct store_opts opts = { .backend = STORE_BACKEND_POSTGRESQL };
    struct proto_err err;
    struct store *s;

    o->rc = store_open(o->conninfo, &opts, &s, &err);
    if (o->rc == 0)
        store_free(s);
    return NULL;
}

/* Instances starting together on an empty database migrate it once: the
 * others wait for the advisory lock, then find nothing to do. */
START_TEST(test_pg_instances_migrate_once)
{
    struct opener o[4];
    pthread_t t[4];
    char pg[700];
    int i;

    fresh_db("together", pg, sizeof(pg));
    for (i = 0; i < 4; i++) {
        o[i].conninfo = pg;
        o[i].rc = -1;
        ck_assert_int_eq(pthread_create(&t[i], NULL, open_thread, &o[i]), 0);
    }
    for (i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(o[i].rc, 0);
    }
    ck_assert_int_eq(
        scalar(pg, "SELECT count(*) FROM receiptd_migrations"),
        scalar(pg, "SELECT max(version) FROM receiptd_migrations"));
    ck_assert_int_ge(scalar(pg, "SELECT count(*) FROM receiptd_migrations"), 1);
}
END_TEST

/* (origin, id, received_at) is unique: the same rows committed twice (a
 * bug in a relay's cut) fail the second batch whole instead of storing a
 * row twice. */
START_TEST(test_pg_same_rows_twice_fail_whole)
{
    char pg[700];
    struct store *s;
    PGconn *pc;
    PGresult *r;

    fresh_db("twice", pg, sizeof(pg));
    s = open_store(STORE_BACKEND_POSTGRESQL, pg, 0);
    fill(s);
    store_free(s);
    pc = PQconnectdb(pg);
    ck_assert_int_eq(PQstatus(pc), CONNECTION_OK);
    r = PQexec(pc, "INSERT INTO receipts SELECT * FROM receipts WHERE id < 50");
    ck_assert_int_eq(PQresultStatus(r), PGRES_FATAL_ERROR);
    ck_assert_str_eq(PQresultErrorField(r, PG_DIAG_SQLSTATE), "23505");
    PQclear(r);
    PQfinish(pc);
    ck_assert_int_eq(scalar(pg, "SELECT count(*) - count(DISTINCT (origin, "
                                "id)) FROM receipts"),
                     0);
    /* 12 groups of 6 singles but 3 gaps, 1 more, 25 in a batch. */
    ck_assert_int_eq(scalar(pg, "SELECT count(*) FROM receipts"),
                     12 * (6 + 1 + 25) - 3);
    /* The resend is not a row. */
    ck_assert_int_eq(scalar(pg, "SELECT count(*) FROM receipts WHERE source "
                                "= 'node-a' AND seq = 5"),
                     1);
}
END_TEST

/* Two instances on one database: a seq one of them stored after the
 * other read its source's marks is still stored once. The second's group
 * fails whole on dedupe's key; its next look finds the duplicate. */
START_TEST(test_pg_two_writers_store_a_seq_once)
{
    struct proto_err err;
    struct receipt r;
    struct store_write w;
    struct store *a, *b;
    char pg[700];

    fresh_db("two", pg, sizeof(pg));
    a = open_store(STORE_BACKEND_POSTGRESQL, pg, 0);
    b = open_store(STORE_BACKEND_POSTGRESQL, pg, 0);
    /* Both learn node-a's highest seq: 1. */
    ck_assert_int_eq(store_begin(a, &err), 0);
    one(a, "node-a", 1, 0, T0, 0);
    ck_assert_int_eq(store_commit(a, &err), 0);
    ck_assert_int_eq(store_begin(b, &err), 0);
    one(b, "node-a", 1, 0, T0, 1);
    ck_assert_int_eq(store_commit(b, &err), 0);
    /* a stores seq 2; b, whose mark says 1, tries it too. */
    ck_assert_int_eq(store_begin(a, &err), 0);
    one(a, "node-a", 2, 1, T0 + 1, 0);
    ck_assert_int_eq(store_commit(a, &err), 0);
    ck_assert_int_eq(store_begin(b, &err), 0);
    one(b, "node-a", 2, 1, T0 + 2, 0);
    ck_assert_int_ne(store_commit(b, &err), 0);
    ck_assert(store_txn_broken(b));
    store_rollback(b);
    /* As the writer does after a failed group: look again. */
    ck_assert_int_eq(store_begin(b, &err), 0);
    mk_receipt(&r, 1);
    memset(&w, 0, sizeof(w));
    w.op = PROTO_OP_RECEIPT;
    w.source = "node-a";
    w.source_len = 6;
    w.has_seq = 1;
    w.seq = 2;
    w.payload_hash = 2;
    ck_assert_int_eq(store_apply(b, &w, &err), 0);
    ck_assert_int_eq(w.duplicate, 1);
    store_rollback(b);
    ck_assert_int_eq(scalar(pg, "SELECT count(*) FROM receipts WHERE seq = 2"),
                     1);
    store_free(a);
    store_free(b);
}
END_TEST

/* One group of n batch receipts (no seq) from source at at, committed. */
static void
batch_group(struct store *s, const char *source, int i0, int n, int64_t at)
{
    struct receipt rs[40];
    struct store_write w;
    struct proto_err err;
    int i;

    ck_assert_int_le(n, 40);
    for (i = 0; i < n; i++)
        mk_receipt(&rs[i], i0 + i);
    ck_assert_int_eq(store_begin(s, &err), 0);
    memset(&w, 0, sizeof(w));
    w.op = PROTO_OP_RECEIPTS;
    w.source = source;
    w.source_len = strlen(source);
    w.received_at = at;
    w.receipts = rs;
    w.n_receipts = (uint32_t)n;
    ck_assert_int_eq(store_apply(s, &w, &err), 0);
    ck_assert_int_eq(store_commit(s, &err), 0);
}

/* One group of n receipts, each from a source of its own ("s" and its
 * number from i0), at at. */
static void
sources_group(struct store *s, int i0, int n, int64_t at)
{
    struct proto_err err;
    struct store_write w;
    struct receipt r;
    char src[16];
    int i;

    ck_assert_int_eq(store_begin(s, &err), 0);
    for (i = 0; i < n; i++) {
        mk_receipt(&r, i0 + i);
        snprintf(src, sizeof(src), "s%05d", i0 + i);
        memset(&w, 0, sizeof(w));
        w.op = PROTO_OP_RECEIPTS;
        w.source = src;
        w.source_len = strlen(src);
        w.received_at = at;
        w.receipts = &r;
        w.n_receipts = 1;
        ck_assert_int_eq(store_apply(s, &w, &err), 0);
    }
    ck_assert_int_eq(store_commit(s, &err), 0);
}

/* Receipts the rollups count (merged and pending) less the stored ones. */
#define ROLLUP_SURPLUS                                                         \
    "SELECT (SELECT coalesce(sum(receipts), 0) FROM rollup_hours) + "          \
    "(SELECT coalesce(sum(receipts), 0) FROM rollup_pending) - "               \
    "(SELECT count(*) FROM receipts)"

/* Retention drops whole days: the partitions before the cutoff, their
 * hours' rollups, a record in prunes. */
START_TEST(test_pg_prune_drops_whole_days)
{
    struct store_prune_result res;
    struct proto_err err;
    char pg[700];
    struct store *s;
    int64_t before, day0;

    fresh_db("prune", pg, sizeof(pg));
    s = open_store(STORE_BACKEND_POSTGRESQL, pg, 0);
    fill(s);
    before = scalar(pg, "SELECT count(*) FROM receipts");
    day0 = scalar(pg, "SELECT count(*) FROM receipts WHERE received_at < "
                      "1793577600000");
    ck_assert_int_gt(day0, 0);
    /* The first day's sums both merged (a quiet moment) and pending (a
     * group since): the prune drops both with their day. */
    usleep(1100 * 1000);
    ck_assert_int_eq(store_merge_idle(s, STORE_MERGE_IDLE_KEYS, &err), 0);
    batch_group(s, "batcher", 500, 5, T0 + 3 * HOUR + 17);
    day0 += 5;
    before += 5;
    ck_assert_int_gt(scalar(pg, "SELECT count(*) FROM rollup_pending WHERE "
                                "hour < 498216"),
                     0);
    ck_assert_int_gt(scalar(pg, "SELECT count(*) FROM rollup_hours WHERE "
                                "hour < 498216"),
                     0);
    /* A cutoff inside the second day drops only the first. */
    ck_assert_int_eq(store_prune(s, T0 + DAY + 5 * HOUR, 1000, &res, &err), 0);
    ck_assert_uint_eq(res.rows, (uint64_t)day0);
    ck_assert_int_eq(scalar(pg, "SELECT count(*) FROM receipts"),
                     before - day0);
    ck_assert_int_eq(scalar(pg, "SELECT count(*) FROM rollup_hours WHERE "
                                "hour < 498216"),
                     0);
    ck_assert_int_eq(scalar(pg, "SELECT count(*) FROM rollup_pending WHERE "
                                "hour < 498216"),
                     0);
    ck_assert_int_gt(scalar(pg, "SELECT count(*) FROM rollup_hours WHERE "
                                "hour >= 498216"),
                     0);
    ck_assert_int_eq(scalar(pg, "SELECT count(*) FROM prunes"), 1);
    ck_assert_int_eq(store_prune(s, T0 + DAY + 5 * HOUR, 1000, &res, &err), 0);
    ck_assert_uint_eq(res.rows, 0);
    store_free(s);
}
END_TEST

/*
 * A group's sums are appended to rollup_pending and merged into
 * rollup_hours later (migrations/pg/0003): the aggregates equal a scan of
 * the receipts with every sum pending, with every sum merged, and with
 * the same keys and hours in both tables at once; two instances append,
 * either merges both's rows; a merge another instance holds the lock of
 * waits, and leaves the rows pending meanwhile.
 */
START_TEST(test_pg_pending_and_merged_rollups_equal_scan)
{
    static const struct aggcheck_range ranges[] = {
        { 0, 0, 0, 0 },
        { 1, 1, T0 + HOUR + 7, T0 + 2 * DAY + 5 },
        { 1, 0, T0 + 10 * HOUR + 5, 0 },
        { 0, 1, 0, T0 + 11 * HOUR + 2 },
    };
    struct proto_err err;
    char pg[700];
    struct store *a, *b, *q;
    PGconn *lk;
    PGresult *r;
    int64_t pending;
    int g;

    fresh_db("pending", pg, sizeof(pg));
    a = open_store(STORE_BACKEND_POSTGRESQL, pg, 0);
    b = open_store(STORE_BACKEND_POSTGRESQL, pg, 0);
    q = open_store(STORE_BACKEND_POSTGRESQL, pg, 1);
    /* All pending: a few groups, no merge yet. */
    for (g = 0; g < 3; g++)
        batch_group(b, "batcher", 5000 + g * 40, 40, T0 + g * 7 * HOUR + 123);
    ck_assert_int_eq(scalar(pg, "SELECT count(*) FROM rollup_hours"), 0);
    ck_assert_int_gt(scalar(pg, "SELECT count(*) FROM rollup_pending"), 0);
    ck_assert_int_eq(scalar(pg, ROLLUP_SURPLUS), 0);
    aggcheck_equal_scan(q, ranges, sizeof(ranges) / sizeof(ranges[0]));

    /* 13 groups more: the first 8 and b's merged at the 9th's begin, the
     * rest pending. */
    fill(a);
    ck_assert_int_gt(scalar(pg, "SELECT count(*) FROM rollup_hours"), 0);
    ck_assert_int_gt(scalar(pg, "SELECT count(*) FROM rollup_pending"), 0);
    ck_assert_int_eq(scalar(pg, ROLLUP_SURPLUS), 0);
    aggcheck_equal_scan(q, ranges, sizeof(ranges) / sizeof(ranges[0]));

    /* All merged, in a quiet moment (a second after a's last group). */
    ck_assert_int_eq(store_merge_pending(a), 1);
    usleep(1100 * 1000);
    ck_assert_int_eq(store_merge_idle(a, STORE_MERGE_IDLE_KEYS, &err), 0);
    ck_assert_int_eq(store_merge_pending(a), 0);
    ck_assert_int_eq(scalar(pg, "SELECT count(*) FROM rollup_pending"), 0);
    ck_assert_int_gt(scalar(pg, "SELECT count(*) FROM rollup_hours"), 0);
    ck_assert_int_eq(scalar(pg, ROLLUP_SURPLUS), 0);
    aggcheck_equal_scan(q, ranges, sizeof(ranges) / sizeof(ranges[0]));

    /* Both: the other instance appends to the same keys and hours as
     * fill's batches (merged), its last groups pending. */
    for (g = 0; g < 12; g++)
        batch_group(b, g % 2 ? "batcher" : "", 1000 + g * 40, 40,
                    T0 + g * 6 * HOUR + g * 7 * 60000 + 1234 + 2 * HOUR +
                        59 * 60000 + 17);
    ck_assert_int_gt(scalar(pg, "SELECT count(*) FROM rollup_pending p "
                                "JOIN rollup_hours h USING (hour, plan, "
                                "graph, model, source, requested_backend, "
                                "executed_backend)"),
                     0);
    ck_assert_int_eq(scalar(pg, ROLLUP_SURPLUS), 0);
    aggcheck_equal_scan(q, ranges, sizeof(ranges) / sizeof(ranges[0]));

    /* While another session holds the merge's lock, b's merge (quiet)
     * leaves its rows pending and asks again; then it merges them. */
    usleep(1100 * 1000);
    lk = PQconnectdb(pg);
    ck_assert_int_eq(PQstatus(lk), CONNECTION_OK);
    r = PQexec(lk, "SELECT pg_advisory_lock(1919119478)"); /* LOCK_MERGE */
    ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
    PQclear(r);
    pending = scalar(pg, "SELECT count(*) FROM rollup_pending");
    ck_assert_int_gt(pending, 0);
    ck_assert_int_eq(store_merge_idle(b, STORE_MERGE_IDLE_KEYS, &err), 1);
    ck_assert_int_eq(scalar(pg, "SELECT count(*) FROM rollup_pending"),
                     pending);
    ck_assert_int_eq(store_merge_pending(b), 1);
    r = PQexec(lk, "SELECT pg_advisory_unlock(1919119478)");
    ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
    PQclear(r);
    PQfinish(lk);
    /* a appended nothing since its merge: it has nothing to do. */
    ck_assert_int_eq(store_merge_pending(a), 0);
    ck_assert_int_eq(store_merge_idle(b, STORE_MERGE_IDLE_KEYS, &err), 0);
    ck_assert_int_eq(scalar(pg, "SELECT count(*) FROM rollup_pending"), 0);
    ck_assert_int_eq(scalar(pg, ROLLUP_SURPLUS), 0);
    aggcheck_equal_scan(q, ranges, sizeof(ranges) / sizeof(ranges[0]));

    /* Under load: the begin after 8 groups merges what is pending, here
     * 17,600 keys (a source each): five rounds of rows, the keys upserted
     * when the map could not take another round, and at the end. */
    for (g = 0; g < 8; g++)
        sources_group(a, g * 2200, 2200, T0 + 30 * HOUR + g);
    ck_assert_int_eq(scalar(pg, "SELECT count(*) FROM rollup_hours WHERE "
                                "source LIKE 's%'"),
                     0);
    ck_assert_int_eq(scalar(pg, "SELECT count(*) FROM rollup_pending"), 17600);
    ck_assert_int_eq(scalar(pg, ROLLUP_SURPLUS), 0);
    batch_group(a, "batcher", 4000, 1, T0 + 30 * HOUR + 99);
    ck_assert_int_eq(scalar(pg, "SELECT count(*) FROM rollup_hours WHERE "
                                "source LIKE 's%'"),
                     17600);
    ck_assert_int_eq(scalar(pg, "SELECT count(*) FROM rollup_pending"), 1);
    ck_assert_int_eq(scalar(pg, ROLLUP_SURPLUS), 0);
    aggcheck_equal_scan(q, ranges, sizeof(ranges) / sizeof(ranges[0]));
    store_free(q);
    store_free(a);
    store_free(b);
}
END_TEST

/* ---- the relay at a center ---- */

/*
 * One relayed batch of origin into s, in a transaction of its own, as
 * dispatch_relay.c stores it: the origin's mark read, the records above
 * it stored (node ids from_id.., the producer's source, seqs from seq0 or
 * all seq0), the mark raised, the range recorded. Returns the stored.
 */
static unsigned
relay_batch(struct store *s, const char *origin, uint64_t from_id, unsigned n,
            const char *source, uint64_t seq0, int same_seq)
{
    struct proto_err err;
    struct store_write w;
    struct receipt r;
    uint64_t mark, id;
    int64_t first = 0, last = 0;
    unsigned i, stored = 0;

    ck_assert_int_eq(store_begin(s, &err), 0);
    ck_assert_int_eq(store_relay_origin_get(s, origin, strlen(origin),
                                            STORE_RELAY_RECEIPTS, &mark, &err),
                     0);
    for (i = 0; i < n; i++) {
        id = from_id + i;
        if (id <= mark)
            continue;
        mk_receipt(&r, (int)id);
        memset(&w, 0, sizeof(w));
        w.op = PROTO_OP_RECEIPT;
        w.source = source;
        w.source_len = strlen(source);
        w.has_seq = 1;
        w.seq = same_seq ? seq0 : seq0 + i;
        w.relayed = 1;
        w.origin = origin;
        w.origin_len = strlen(origin);
        w.origin_id = id;
        w.received_at = T0 + (int64_t)id * 61000;
        w.receipts = &r;
        w.n_receipts = 1;
        ck_assert_msg(store_apply(s, &w, &err) == 0, "%s", err.message);
        ck_assert_int_eq(w.duplicate, 0);
        if (stored++ == 0)
            first = w.receipt_id;
        last = w.receipt_id;
        mark = id;
    }
    if (stored > 0) {
        ck_assert_int_eq(store_relay_origin_set(s, origin, strlen(origin),
                                                STORE_RELAY_RECEIPTS, mark,
                                                &err),
                         0);
        ck_assert_int_eq(store_relay_range_add(s, origin, strlen(origin), first,
                                               last, mark - stored + 1, mark,
                                               &err),
                         0);
    }
    ck_assert_msg(store_commit(s, &err) == 0, "%s", err.message);
    return stored;
}

static unsigned
count_lines(const char *t)
{
    unsigned n = 0;

    for (; *t; t++)
        n += *t == '\n';
    return n;
}

/* The receipts relayed by origin (NULL: all) on the read store q. */
static unsigned
relayed_rows(struct store *q, const char *origin)
{
    struct store_filter f = filter();
    char *t;
    unsigned n;

    if (origin != NULL) {
        f.origin = origin;
        f.origin_len = strlen(origin);
    }
    t = receipts_text(q, &f);
    n = count_lines(t) - 1; /* the "truncated" line */
    free(t);
    return n;
}

/* Relayed batches, the same on both backends: resends cut by the
 * origin's mark, two nodes carrying one producer source (both nodes'
 * receipts stored, each seq recorded once, by the first origin), a
 * batch's rows sharing one seq, then the producer's seq sent to the
 * center itself: a duplicate. `gaps` is empty, by origin counts. */
static char *
relay_history(int backend, const char *where)
{
    struct store *s = open_store(backend, where, 0), *q;
    struct store_filter f = filter();
    struct store_gap_select sel = { 0 };
    struct proto_err err;
    uint64_t mark;
    char *gaps, *agg;
    struct text t = { NULL, 0, 0 };

    ck_assert_uint_eq(relay_batch(s, "node-a", 1, 5, "prod", 1, 0), 5);
    ck_assert_uint_eq(relay_batch(s, "node-a", 1, 5, "prod", 1, 0), 0);
    ck_assert_uint_eq(relay_batch(s, "node-a", 4, 5, "prod", 4, 0), 3);
    ck_assert_uint_eq(relay_batch(s, "node-b", 1, 3, "prod", 7, 0), 3);
    ck_assert_uint_eq(relay_batch(s, "node-b", 4, 3, "batch-src", 3, 1), 3);
    ck_assert_int_eq(store_relay_origin_get(s, "node-a", 6,
                                            STORE_RELAY_RECEIPTS, &mark, &err),
                     0);
    ck_assert_uint_eq(mark, 8);
    ck_assert_int_eq(store_relay_origin_get(s, "node-b", 6,
                                            STORE_RELAY_RECEIPTS, &mark, &err),
                     0);
    ck_assert_uint_eq(mark, 6);
    /* The producer sends seq 9 to the center itself: node-b relayed it. */
    ck_assert_int_eq(store_begin(s, &err), 0);
    one(s, "prod", 9, 0, T0, 1);
    one(s, "prod", 10, 0, T0 + 1, 0);
    ck_assert_int_eq(store_commit(s, &err), 0);

    q = open_store(backend, where, 1);
    ck_assert_uint_eq(relayed_rows(q, NULL), 15);
    ck_assert_uint_eq(relayed_rows(q, "node-a"), 8);
    ck_assert_uint_eq(relayed_rows(q, "node-b"), 6);
    ck_assert_uint_eq(relayed_rows(q, "node-c"), 0);
    gaps = gaps_text(q, &f, &sel);
    ck_assert_msg(strstr(gaps, "prod 1..10 got 10 missing 0 ") != NULL, "%s",
                  gaps);
    ck_assert_msg(strstr(gaps, "batch-src 3..3 got 1 missing 0 ") != NULL, "%s",
                  gaps);
    agg = agg_text(q, &f, STORE_GROUP_SOURCE, 0);
    add(&t, "%s---\n%s", gaps, agg);
    free(gaps);
    free(agg);
    store_free(q);
    store_free(s);
    return t.p;
}

START_TEST(test_backends_store_relayed_batches_the_same)
{
    char pg[700], lite[300];

    snprintf(lite, sizeof(lite), "%s/relayed.db", cluster.base);
    fresh_db("relayed", pg, sizeof(pg));
    same(relay_history(STORE_BACKEND_SQLITE, lite),
         relay_history(STORE_BACKEND_POSTGRESQL, pg), "relayed batches");
    /* PostgreSQL keeps the node's ids under its name, and the first
     * node's id of a seq in dedupe (node-a's 7 and 8, not node-b's). */
    ck_assert_int_eq(scalar(pg, "SELECT count(*) FROM receipts WHERE origin "
                                "= 'node-a' AND id BETWEEN 1 AND 8"),
                     8);
    ck_assert_int_eq(scalar(pg, "SELECT count(*) FROM dedupe WHERE source = "
                                "'prod' AND seq IN (7, 8) AND receipt_id = "
                                "seq"),
                     2);
    ck_assert_int_eq(scalar(pg, "SELECT count(*) FROM dedupe WHERE source = "
                                "'batch-src'"),
                     1);
}
END_TEST

struct mark_wait {
    struct store *s;
    uint64_t mark;
    int done;
};

static void *
mark_thread(void *arg)
{
    struct mark_wait *m = arg;
    struct proto_err err;

    ck_assert_int_eq(store_begin(m->s, &err), 0);
    ck_assert_int_eq(store_relay_origin_get(m->s, "node-x", 6,
                                            STORE_RELAY_RECEIPTS, &m->mark,
                                            &err),
                     0);
    __atomic_store_n(&m->done, 1, __ATOMIC_SEQ_CST);
    store_rollback(m->s);
    return NULL;
}

/* Two instances given one origin's batch (a node that failed over while
 * the first held it): the second waits for the first's COMMIT at the
 * origin's mark, then reads the mark raised, so it stores nothing twice. */
START_TEST(test_pg_origin_mark_waits_for_the_other_instance)
{
    struct mark_wait m = { NULL, 0, 0 };
    struct proto_err err;
    struct store *a;
    struct store_write w;
    struct receipt r;
    uint64_t mark;
    pthread_t t;
    char pg[700];

    fresh_db("marks", pg, sizeof(pg));
    a = open_store(STORE_BACKEND_POSTGRESQL, pg, 0);
    m.s = open_store(STORE_BACKEND_POSTGRESQL, pg, 0);
    ck_assert_int_eq(store_begin(a, &err), 0);
    ck_assert_int_eq(store_relay_origin_get(a, "node-x", 6,
                                            STORE_RELAY_RECEIPTS, &mark, &err),
                     0);
    ck_assert_uint_eq(mark, 0);
    mk_receipt(&r, 1);
    memset(&w, 0, sizeof(w));
    w.op = PROTO_OP_RECEIPT;
    w.source = "prod";
    w.source_len = 4;
    w.relayed = 1;
    w.origin = "node-x";
    w.origin_len = 6;
    w.origin_id = 1;
    w.received_at = T0;
    w.receipts = &r;
    w.n_receipts = 1;
    ck_assert_int_eq(store_apply(a, &w, &err), 0);
    ck_assert_int_eq(
        store_relay_origin_set(a, "node-x", 6, STORE_RELAY_RECEIPTS, 1, &err),
        0);
    ck_assert_int_eq(pthread_create(&t, NULL, mark_thread, &m), 0);
    usleep(400 * 1000);
    ck_assert_int_eq(__atomic_load_n(&m.done, __ATOMIC_SEQ_CST), 0);
    ck_assert_int_eq(store_commit(a, &err), 0);
    pthread_join(t, NULL);
    ck_assert_int_eq(m.done, 1);
    ck_assert_uint_eq(m.mark, 1);
    store_free(m.s);
    store_free(a);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("store_backends");
    TCase *tc = tcase_create("pg");

    tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_backends_answer_every_kind_the_same);
    tcase_add_test(tc, test_pg_rollups_equal_scan);
    tcase_add_test(tc, test_pg_instances_migrate_once);
    tcase_add_test(tc, test_pg_same_rows_twice_fail_whole);
    tcase_add_test(tc, test_pg_two_writers_store_a_seq_once);
    tcase_add_test(tc, test_pg_prune_drops_whole_days);
    tcase_add_test(tc, test_pg_pending_and_merged_rollups_equal_scan);
    tcase_add_test(tc, test_backends_store_relayed_batches_the_same);
    tcase_add_test(tc, test_pg_origin_mark_waits_for_the_other_instance);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(suite());
    int rc;

    srunner_run_all(sr, CK_NORMAL);
    rc = skip_status(sr);
    srunner_free(sr);
    return rc;
}
