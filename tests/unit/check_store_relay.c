/*
 * check_store_relay.c: daemon/store_relay.c on a real SQLite file: the
 * node's cursor (never back, survives a reopen), the read past it (id
 * order, bounded, the producer's source and seq), the backlog, and the
 * center's per-origin mark and its cut, a relayed write never a duplicate
 * of the producer's (source, seq) records, its seq recorded for `gaps`
 * where new; the plans stream, and the retention stream (retained values
 * in the order first retained, migration 0016 logging older ones).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "envelope.h"
#include "store.h"
#include "store_agg.h"
#include "store_plan.h"
#include "store_prune.h"
#include "store_relay.h"
#include "e2e_util.h"

static char dir[512];
static char path[600];

static void
setup(void)
{
    snprintf(dir, sizeof(dir), "%s/check_store_relay-XXXXXX", TEST_BINARY_DIR);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/t.db", dir);
}

static void
teardown(void)
{
    e2e_rmtree(dir);
}

static void
make_receipt(struct receipt *r, const char *plan)
{
    memset(r, 0, sizeof(*r));
    r->schema_version = 3;
    r->requested_backend = RECEIPT_BACKEND_CUDA;
    r->executed_backend = RECEIPT_BACKEND_CUDA;
    r->model_instance_id = (struct proto_str){ "model", 5 };
    r->prepared_plan_id = (struct proto_str){ plan, strlen(plan) };
    r->graph_hash = (struct proto_str){ "", 0 };
    r->tuning_profile = (struct proto_str){ "", 0 };
    r->stop_reason = (struct proto_str){ "", 0 };
    r->counter_coverage = 1;
    r->counters[0] = 7;
}

/* Stores n receipts, the i-th with plan "p-<i>", from source src with
 * seqs 1..n (relayed: kept in the rows, recorded where new, never a
 * duplicate). */
static void
put(struct store *s, const char *src, unsigned from, unsigned n, int relayed)
{
    struct proto_err err;
    struct store_write w;
    struct receipt r;
    char plan[32];
    unsigned i;

    ck_assert_int_eq(store_begin(s, &err), 0);
    for (i = from; i < from + n; i++) {
        snprintf(plan, sizeof(plan), "p-%u", i);
        make_receipt(&r, plan);
        memset(&w, 0, sizeof(w));
        w.op = PROTO_OP_RECEIPT;
        w.source = src;
        w.source_len = strlen(src);
        w.has_seq = 1;
        w.seq = i;
        w.relayed = relayed;
        w.received_at = 1700000000000 + i;
        w.receipts = &r;
        w.n_receipts = 1;
        ck_assert_int_eq(store_apply(s, &w, &err), 0);
        ck_assert_int_eq(w.duplicate, 0);
    }
    ck_assert_int_eq(store_commit(s, &err), 0);
}

START_TEST(test_store_relay_cursor_never_goes_back)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct proto_err err;
    struct store *s;
    uint64_t v;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    ck_assert_int_eq(store_relay_cursor_get(s, STORE_RELAY_RECEIPTS, &v, &err),
                     0);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(store_begin(s, &err), 0);
    ck_assert_int_eq(store_relay_cursor_set(s, STORE_RELAY_RECEIPTS, 40, &err),
                     0);
    /* A late acknowledgement of an older batch leaves it. */
    ck_assert_int_eq(store_relay_cursor_set(s, STORE_RELAY_RECEIPTS, 30, &err),
                     0);
    ck_assert_int_eq(store_commit(s, &err), 0);
    ck_assert_int_eq(store_relay_cursor_get(s, STORE_RELAY_RECEIPTS, &v, &err),
                     0);
    ck_assert_uint_eq(v, 40);
    /* Rolled back: not moved. */
    ck_assert_int_eq(store_begin(s, &err), 0);
    ck_assert_int_eq(store_relay_cursor_set(s, STORE_RELAY_RECEIPTS, 90, &err),
                     0);
    store_rollback(s);
    store_free(s);
    /* It is on disk. */
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    ck_assert_int_eq(store_relay_cursor_get(s, STORE_RELAY_RECEIPTS, &v, &err),
                     0);
    ck_assert_uint_eq(v, 40);
    store_free(s);
}
END_TEST

struct seen {
    unsigned n;
    int64_t ids[64];
    uint64_t seqs[64];
    char first_plan[16];
    char source[16];
};

static int
seen_cb(void *arg, const struct store_row *row)
{
    struct seen *c = arg;

    if (c->n == 0) {
        snprintf(c->first_plan, sizeof(c->first_plan), "%.*s",
                 (int)row->r.prepared_plan_id.len, row->r.prepared_plan_id.ptr);
        snprintf(c->source, sizeof(c->source), "%.*s", (int)row->source.len,
                 row->source.ptr);
    }
    ck_assert(row->has_seq);
    c->ids[c->n] = row->receipt_id;
    c->seqs[c->n] = row->seq;
    c->n++;
    return 0;
}

START_TEST(test_store_relay_read_past_cursor_in_id_order)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct store_opts ro = { .readonly = 1 };
    struct store_relay_backlog bl;
    struct proto_err err;
    struct seen c;
    struct store *s, *q;
    sqlite3 *db;
    uint64_t last;
    unsigned i;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    put(s, "prod", 1, 30, 0);
    ck_assert_int_eq(store_open(path, &ro, &q, &err), 0);

    memset(&c, 0, sizeof(c));
    ck_assert_int_eq(
        store_relay_read(q, 10, 8, SIZE_MAX, seen_cb, &c, &last, &err), 0);
    ck_assert_uint_eq(c.n, 8);
    ck_assert_uint_eq(last, 18);
    ck_assert_str_eq(c.first_plan, "p-11");
    ck_assert_str_eq(c.source, "prod");
    for (i = 0; i < c.n; i++) {
        ck_assert_int_eq(c.ids[i], 11 + (int64_t)i);
        ck_assert_uint_eq(c.seqs[i], 11 + i);
    }
    /* A byte bound stops the read, but never before one row. */
    memset(&c, 0, sizeof(c));
    ck_assert_int_eq(store_relay_read(q, 0, 30, 1, seen_cb, &c, &last, &err),
                     0);
    ck_assert_uint_eq(c.n, 1);
    ck_assert_uint_eq(last, 1);
    /* Nothing past the end. */
    memset(&c, 0, sizeof(c));
    ck_assert_int_eq(
        store_relay_read(q, 30, 8, SIZE_MAX, seen_cb, &c, &last, &err), 0);
    ck_assert_uint_eq(c.n, 0);
    ck_assert_uint_eq(last, 30);

    ck_assert_int_eq(
        store_relay_backlog(q, 25, STORE_RELAY_COUNT_MAX, &bl, &err), 0);
    ck_assert_uint_eq(bl.records, 5);
    ck_assert_uint_eq(bl.last_id, 30);
    ck_assert_int_eq(bl.oldest_at, 1700000000000 + 26);
    ck_assert_int_eq(
        store_relay_backlog(q, 30, STORE_RELAY_COUNT_MAX, &bl, &err), 0);
    ck_assert_uint_eq(bl.records, 0);
    ck_assert_int_eq(bl.oldest_at, INT64_MIN);
    store_free(s);
    /* A skipped id: counted up to count_max rows, the ids' difference
     * above. */
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, "DELETE FROM receipts WHERE id = 28",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    ck_assert_int_eq(store_relay_backlog(q, 25, 5, &bl, &err), 0);
    ck_assert_uint_eq(bl.records, 4);
    ck_assert_int_eq(store_relay_backlog(q, 25, 4, &bl, &err), 0);
    ck_assert_uint_eq(bl.records, 5);
    store_free(q);
}
END_TEST

struct gaps {
    unsigned n;
    uint64_t first, last, received, missing;
};

static int
gaps_cb(void *arg, const struct store_gap *g)
{
    struct gaps *x = arg;

    x->n++;
    x->first = g->first_seq;
    x->last = g->last_seq;
    x->received = g->received;
    x->missing = g->missing;
    return 0;
}

/* The center: an origin's mark rises only, per origin and stream, and a
 * relayed write keeps the producer's seq and records it where it is new,
 * so the same (source, seq) relayed from two nodes is two receipts and
 * one record: `gaps` counts it once. */
/* Checks that every row read is the one put() stored: plan "p-<seq>",
 * source "prod", ids in order; stops after stop_after rows (0: never). */
struct strings_seen {
    uint64_t next;
    unsigned stop_after, n;
};

static int
strings_cb(void *arg, const struct store_row *row)
{
    struct strings_seen *c = arg;
    char plan[32];

    snprintf(plan, sizeof(plan), "p-%llu", (unsigned long long)row->seq);
    ck_assert_int_eq(row->receipt_id, (int64_t)c->next);
    ck_assert_uint_eq(row->seq, c->next);
    ck_assert_uint_eq(row->r.prepared_plan_id.len, strlen(plan));
    ck_assert(memcmp(row->r.prepared_plan_id.ptr, plan, strlen(plan)) == 0);
    ck_assert_uint_eq(row->source.len, 4);
    ck_assert(memcmp(row->source.ptr, "prod", 4) == 0);
    ck_assert_uint_eq(row->r.model_instance_id.len, 5);
    ck_assert(memcmp(row->r.model_instance_id.ptr, "model", 5) == 0);
    ck_assert_uint_eq(row->r.graph_hash.len, 0);
    c->next++;
    c->n++;
    return c->stop_after != 0 && c->n == c->stop_after ? 1 : 0;
}

/* The relay's reads keep their statements and the strings they name from
 * one batch to the next: more strings than the table holds (it is
 * cleared between rows), every row's strings still its own, and neither
 * a whole read nor one its callback stops holds the WAL afterwards. */
START_TEST(test_store_relay_read_strings_past_the_cache)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct store_opts ro = { .readonly = 1 };
    struct strings_seen c = { .next = 1 };
    struct proto_err err;
    struct store *s, *q;
    uint64_t last = 0;
    unsigned i;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    for (i = 0; i < 6; i++)
        put(s, "prod", 1 + i * 1000, 1000, 0);
    ck_assert_int_eq(store_open(path, &ro, &q, &err), 0);
    while (c.next <= 6010) {
        ck_assert_int_eq(store_relay_read(q, last, 700, SIZE_MAX, strings_cb,
                                          &c, &last, &err),
                         0);
        ck_assert_uint_eq(last, c.next - 1);
        /* More is committed between reads: a later batch sees it, and
         * the read before it holds no snapshot that would keep those
         * frames in the WAL (the whole of it is copied back). */
        if (c.next == 701) {
            put(s, "prod", 6001, 10, 0);
            ck_assert_int_eq(store_checkpoint_final(s, &err), 0);
        }
    }
    ck_assert_uint_eq(c.n, 6010);
    /* Stopped by its callback: the statement is let go of all the same. */
    memset(&c, 0, sizeof(c));
    c.next = 1;
    c.stop_after = 3;
    ck_assert_int_eq(
        store_relay_read(q, 0, 700, SIZE_MAX, strings_cb, &c, &last, &err), 1);
    ck_assert_uint_eq(last, 2);
    put(s, "prod", 6011, 1, 0);
    ck_assert_int_eq(store_checkpoint_final(s, &err), 0);
    store_free(q);
    store_free(s);
}
END_TEST

START_TEST(test_store_relay_origin_mark_and_relayed_writes)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct store_opts ro = { .readonly = 1 };
    struct proto_err err;
    struct seen c;
    struct store *s, *q;
    uint64_t v, last;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    ck_assert_int_eq(
        store_relay_origin_get(s, "node-a", 6, STORE_RELAY_RECEIPTS, &v, &err),
        0);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(store_begin(s, &err), 0);
    ck_assert_int_eq(
        store_relay_origin_set(s, "node-a", 6, STORE_RELAY_RECEIPTS, 12, &err),
        0);
    ck_assert_int_eq(
        store_relay_origin_set(s, "node-a", 6, STORE_RELAY_RECEIPTS, 5, &err),
        0);
    ck_assert_int_eq(store_relay_range_add(s, "node-a", 6, 1, 12, 1, 12, &err),
                     0);
    ck_assert_int_eq(store_commit(s, &err), 0);
    ck_assert_int_eq(
        store_relay_origin_get(s, "node-a", 6, STORE_RELAY_RECEIPTS, &v, &err),
        0);
    ck_assert_uint_eq(v, 12);
    ck_assert_int_eq(
        store_relay_origin_get(s, "node-b", 6, STORE_RELAY_RECEIPTS, &v, &err),
        0);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(store_relay_origin_get(s, "node-a", 6, "plans", &v, &err),
                     0);
    ck_assert_uint_eq(v, 0);

    /* Two nodes' producers under one name and seqs: all stored. */
    put(s, "prod", 1, 4, 1);
    put(s, "prod", 1, 4, 1);
    ck_assert_int_eq(store_open(path, &ro, &q, &err), 0);
    memset(&c, 0, sizeof(c));
    ck_assert_int_eq(
        store_relay_read(q, 0, 64, SIZE_MAX, seen_cb, &c, &last, &err), 0);
    ck_assert_uint_eq(c.n, 8);
    ck_assert_uint_eq(c.seqs[4], 1);
    {
        struct store_filter f = {
            .requested = -1, .executed = -1, .status = -1, .limit = 10
        };
        struct store_gap_select sel = { 0 };
        struct gaps g = { 0 };
        int truncated;

        ck_assert_int_eq(
            store_query_gaps(q, &f, &sel, 0, gaps_cb, &g, &truncated, &err), 0);
        ck_assert_uint_eq(g.n, 1);
        ck_assert_uint_eq(g.first, 1);
        ck_assert_uint_eq(g.last, 4);
        ck_assert_uint_eq(g.received, 4);
        ck_assert_uint_eq(g.missing, 0);
    }
    store_free(q);
    store_free(s);
}
END_TEST

/* A node that relays prunes nothing the center has not acknowledged. */
START_TEST(test_store_relay_retention_waits_for_cursor)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20,
                            .chunk_receipts = 4,
                            .relay_wait = 1 };
    struct store_opts ro = { .readonly = 1 };
    struct store_prune_result pr;
    struct proto_err err;
    struct seen c;
    struct store *s, *q;
    uint64_t last;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    put(s, "prod", 1, 30, 0);
    /* Everything is due, nothing acknowledged. */
    ck_assert_int_eq(store_prune(s, 1800000000000, 1000, &pr, &err), 0);
    ck_assert_uint_eq(pr.rows, 0);
    ck_assert_int_eq(store_begin(s, &err), 0);
    ck_assert_int_eq(store_relay_cursor_set(s, STORE_RELAY_RECEIPTS, 10, &err),
                     0);
    ck_assert_int_eq(store_commit(s, &err), 0);
    ck_assert_int_eq(store_prune(s, 1800000000000, 1000, &pr, &err), 0);
    ck_assert_uint_eq(pr.rows, 10);
    ck_assert_int_eq(store_prune(s, 1800000000000, 1000, &pr, &err), 0);
    ck_assert_uint_eq(pr.rows, 0);
    ck_assert_int_eq(store_open(path, &ro, &q, &err), 0);
    memset(&c, 0, sizeof(c));
    ck_assert_int_eq(
        store_relay_read(q, 0, 64, SIZE_MAX, seen_cb, &c, &last, &err), 0);
    ck_assert_uint_eq(c.n, 20);
    ck_assert_int_eq(c.ids[0], 11);
    store_free(q);
    store_free(s);
    /* Without relay_wait the same store prunes the rest. */
    o.relay_wait = 0;
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    ck_assert_int_eq(store_prune(s, 1800000000000, 1000, &pr, &err), 0);
    ck_assert_uint_eq(pr.rows, 20);
    store_free(s);
}
END_TEST

/* store.relay_retention = "drop": retention takes what is due past the
 * cursor too, and each prune record counts those it took there. */
START_TEST(test_store_relay_retention_drop_counts_undelivered)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20,
                            .chunk_receipts = 4,
                            .relay_drop = 1 };
    struct store_opts ro = { .readonly = 1 };
    struct store_prune_result pr;
    struct store_prune_rec *recs;
    struct store_filter f;
    struct proto_err err;
    struct store *s, *q;
    size_t n;
    int truncated;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    put(s, "prod", 1, 30, 0);
    ck_assert_int_eq(store_begin(s, &err), 0);
    ck_assert_int_eq(store_relay_cursor_set(s, STORE_RELAY_RECEIPTS, 10, &err),
                     0);
    ck_assert_int_eq(store_commit(s, &err), 0);
    /* Ids 1..8: all acknowledged. */
    ck_assert_int_eq(store_prune(s, 1800000000000, 8, &pr, &err), 0);
    ck_assert_uint_eq(pr.rows, 8);
    ck_assert_uint_eq(pr.undelivered, 0);
    /* Ids 9..20: 11..20 were not. */
    ck_assert_int_eq(store_prune(s, 1800000000000, 12, &pr, &err), 0);
    ck_assert_uint_eq(pr.rows, 12);
    ck_assert_uint_eq(pr.undelivered, 10);
    ck_assert_int_eq(store_prune(s, 1800000000000, 1000, &pr, &err), 0);
    ck_assert_uint_eq(pr.rows, 10);
    ck_assert_uint_eq(pr.undelivered, 10);
    ck_assert_int_eq(store_prune(s, 1800000000000, 1000, &pr, &err), 0);
    ck_assert_uint_eq(pr.rows, 0);
    /* The prunes query shows them, newest first. */
    ck_assert_int_eq(store_open(path, &ro, &q, &err), 0);
    memset(&f, 0, sizeof(f));
    f.limit = 10;
    ck_assert_int_eq(store_query_prunes(q, &f, 0, &recs, &n, &truncated, &err),
                     0);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(recs[0].rows, 10);
    ck_assert_int_eq(recs[0].undelivered, 10);
    ck_assert_int_eq(recs[1].rows, 12);
    ck_assert_int_eq(recs[1].undelivered, 10);
    ck_assert_int_eq(recs[2].rows, 8);
    ck_assert_int_eq(recs[2].undelivered, 0);
    free(recs);
    store_free(q);
    store_free(s);
}
END_TEST

static int
plan_cb(void *arg, const struct store_relay_plan *p)
{
    struct seen *c = arg;

    ck_assert_uint_eq(p->len, 3);
    ck_assert_int_eq(memcmp(p->canonical, "\x81\xa1x", 3), 0);
    snprintf(c->source, sizeof(c->source), "%.*s", (int)p->source.len,
             p->source.ptr);
    c->ids[c->n++] = p->id;
    return 0;
}

/* The plans stream: rows past the cursor in id order, and its own
 * newest id. */
START_TEST(test_store_relay_reads_plans)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct store_plan_new np;
    struct proto_err err;
    struct seen c;
    struct store *s;
    uint64_t last, newest;
    int64_t id;
    char plan[24];
    int i;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    ck_assert_int_eq(store_begin(s, &err), 0);
    for (i = 0; i < 5; i++) {
        snprintf(plan, sizeof(plan), "plan-%d", i);
        memset(&np, 0, sizeof(np));
        np.key.plan = (struct proto_str){ plan, strlen(plan) };
        np.key.graph = (struct proto_str){ "g", 1 };
        np.registered_at = 1700000000000 + i;
        np.source = (struct proto_str){ "planner", 7 };
        np.canonical = "\x81\xa1x";
        np.len = 3;
        ck_assert_int_eq(store_plan_put(s, &np, &id, &err), 0);
    }
    ck_assert_int_eq(store_commit(s, &err), 0);
    memset(&c, 0, sizeof(c));
    ck_assert_int_eq(
        store_relay_read_plans(s, 2, 2, SIZE_MAX, plan_cb, &c, &last, &err), 0);
    ck_assert_uint_eq(c.n, 2);
    ck_assert_int_eq(c.ids[0], 3);
    ck_assert_uint_eq(last, 4);
    ck_assert_str_eq(c.source, "planner");
    ck_assert_int_eq(store_relay_last_id(s, STORE_RELAY_PLANS, &newest, &err),
                     0);
    ck_assert_uint_eq(newest, 5);
    ck_assert_int_eq(
        store_relay_last_id(s, STORE_RELAY_RECEIPTS, &newest, &err), 0);
    ck_assert_uint_eq(newest, 0);
    store_free(s);
}
END_TEST

/* What the retention stream gave: "plan/value_id@retained_at=value" per
 * row, and the log ids. */
struct rseen {
    unsigned n;
    int64_t ids[16];
    char rows[16][64];
};

static int
retained_cb(void *arg, const struct store_relay_retained *v)
{
    struct rseen *c = arg;

    ck_assert_uint_lt(c->n, 16);
    ck_assert_uint_eq(v->graph.len, 1);
    ck_assert_int_eq(v->graph.ptr[0], 'g');
    snprintf(c->rows[c->n], sizeof(c->rows[0]), "%.*s/%.*s@%lld=%.*s",
             (int)v->plan.len, v->plan.ptr, (int)v->value_id.len,
             v->value_id.ptr, (long long)(v->retained_at - 1700000000000),
             (int)v->len, (const char *)v->value);
    c->ids[c->n++] = v->id;
    return 0;
}

/* Registers plan "plan-<i>" (graph "g") in the open transaction. */
static int64_t
plan_put(struct store *s, int i)
{
    struct store_plan_new np;
    struct proto_err err;
    char plan[16];
    int64_t id;

    snprintf(plan, sizeof(plan), "plan-%d", i);
    memset(&np, 0, sizeof(np));
    np.key.plan = (struct proto_str){ plan, strlen(plan) };
    np.key.graph = (struct proto_str){ "g", 1 };
    np.registered_at = 1700000000000;
    np.source = (struct proto_str){ "planner", 7 };
    np.canonical = "\x81\xa1x";
    np.len = 3;
    ck_assert_int_eq(store_plan_put(s, &np, &id, &err), 0);
    return id;
}

static void
retain(struct store *s, int64_t plan, const char *value_id, int64_t at)
{
    struct proto_err err;
    char value[16];

    snprintf(value, sizeof(value), "v-%s", value_id);
    ck_assert_int_eq(
        store_plan_retain(s, plan,
                          (struct proto_str){ value_id, strlen(value_id) },
                          1700000000000 + at, value, strlen(value), &err),
        0);
}

/* The retention stream: values in the order first retained, whatever
 * their plan and value_id (the table's key order), a value retained
 * again not logged twice, its own cursor and newest id. */
START_TEST(test_store_relay_reads_retained_in_commit_order)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct store_opts ro = { .readonly = 1 };
    struct proto_err err;
    struct rseen c;
    struct store *s, *q;
    uint64_t last, newest;
    int64_t p0, p1;

    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    ck_assert_int_eq(store_begin(s, &err), 0);
    p0 = plan_put(s, 0);
    p1 = plan_put(s, 1);
    retain(s, p1, "z", 1);
    retain(s, p0, "m", 2);
    ck_assert_int_eq(store_commit(s, &err), 0);
    ck_assert_int_eq(store_begin(s, &err), 0);
    retain(s, p0, "a", 3);
    retain(s, p1, "z", 4); /* again: kept as it was, not logged */
    ck_assert_int_eq(store_commit(s, &err), 0);
    /* Rolled back: neither the value nor its place in the log. */
    ck_assert_int_eq(store_begin(s, &err), 0);
    retain(s, p0, "b", 5);
    store_rollback(s);
    ck_assert_int_eq(store_begin(s, &err), 0);
    retain(s, p1, "c", 6);
    ck_assert_int_eq(store_commit(s, &err), 0);

    ck_assert_int_eq(store_open(path, &ro, &q, &err), 0);
    memset(&c, 0, sizeof(c));
    ck_assert_int_eq(store_relay_read_retained(q, 0, 16, SIZE_MAX, retained_cb,
                                               &c, &last, &err),
                     0);
    ck_assert_uint_eq(c.n, 4);
    ck_assert_str_eq(c.rows[0], "plan-1/z@1=v-z");
    ck_assert_str_eq(c.rows[1], "plan-0/m@2=v-m");
    ck_assert_str_eq(c.rows[2], "plan-0/a@3=v-a");
    ck_assert_str_eq(c.rows[3], "plan-1/c@6=v-c");
    ck_assert_int_lt(c.ids[0], c.ids[1]);
    ck_assert_int_lt(c.ids[1], c.ids[2]);
    ck_assert_int_lt(c.ids[2], c.ids[3]);
    ck_assert_uint_eq(last, (uint64_t)c.ids[3]);
    /* Past a cursor, at most max. */
    memset(&c, 0, sizeof(c));
    ck_assert_int_eq(store_relay_read_retained(q, 2, 1, SIZE_MAX, retained_cb,
                                               &c, &last, &err),
                     0);
    ck_assert_uint_eq(c.n, 1);
    ck_assert_str_eq(c.rows[0], "plan-0/a@3=v-a");
    ck_assert_uint_eq(last, 3);
    ck_assert_int_eq(
        store_relay_last_id(q, STORE_RELAY_RETENTION, &newest, &err), 0);
    ck_assert_uint_eq(newest, 4);
    store_free(q);
    /* Its own cursor. */
    ck_assert_int_eq(store_begin(s, &err), 0);
    ck_assert_int_eq(store_relay_cursor_set(s, STORE_RELAY_RETENTION, 3, &err),
                     0);
    ck_assert_int_eq(store_commit(s, &err), 0);
    ck_assert_int_eq(
        store_relay_cursor_get(s, STORE_RELAY_RETENTION, &newest, &err), 0);
    ck_assert_uint_eq(newest, 3);
    ck_assert_int_eq(
        store_relay_cursor_get(s, STORE_RELAY_PLANS, &newest, &err), 0);
    ck_assert_uint_eq(newest, 0);
    store_free(s);
}
END_TEST

/* Migration 0016 logs the values a store held before it, in the order
 * they were retained (not the table's key order). */
START_TEST(test_store_relay_migration_logs_old_retained_values)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20,
                            .max_version = 13 };
    struct proto_err err;
    struct rseen c;
    struct store *s;
    sqlite3 *db;
    uint64_t last;

    /* The schema before 0016 (a store opened so migrates no further,
     * and writes nothing), then rows as a daemon of then stored them:
     * no log. */
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    store_free(s);
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(
        sqlite3_exec(db,
                     "INSERT INTO plans VALUES "
                     "(1, 'plan-0', 'g', 1700000000000, 'planner', 1, 1, 'x'), "
                     "(2, 'plan-1', 'g', 1700000000000, 'planner', 1, 1, 'x'); "
                     "INSERT INTO retained_values VALUES "
                     "(1, 'b', 1700000000030, 'v-b'), "
                     "(2, 'a', 1700000000010, 'v-a'), "
                     "(1, 'a', 1700000000020, 'v-a')",
                     NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    o.max_version = 0;
    ck_assert_int_eq(store_open(path, &o, &s, &err), 0);
    ck_assert_int_eq(store_begin(s, &err), 0);
    retain(s, 1, "c", 5); /* after the migration: logged after them */
    ck_assert_int_eq(store_commit(s, &err), 0);
    memset(&c, 0, sizeof(c));
    ck_assert_int_eq(store_relay_read_retained(s, 0, 16, SIZE_MAX, retained_cb,
                                               &c, &last, &err),
                     0);
    ck_assert_uint_eq(c.n, 4);
    ck_assert_str_eq(c.rows[0], "plan-1/a@10=v-a");
    ck_assert_str_eq(c.rows[1], "plan-0/a@20=v-a");
    ck_assert_str_eq(c.rows[2], "plan-0/b@30=v-b");
    ck_assert_str_eq(c.rows[3], "plan-0/c@5=v-c");
    store_free(s);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("store_relay");
    TCase *tc = tcase_create("relay");
    SRunner *sr;
    int failed;

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_store_relay_cursor_never_goes_back);
    tcase_add_test(tc, test_store_relay_read_past_cursor_in_id_order);
    tcase_add_test(tc, test_store_relay_read_strings_past_the_cache);
    tcase_add_test(tc, test_store_relay_origin_mark_and_relayed_writes);
    tcase_add_test(tc, test_store_relay_retention_waits_for_cursor);
    tcase_add_test(tc, test_store_relay_retention_drop_counts_undelivered);
    tcase_add_test(tc, test_store_relay_reads_plans);
    tcase_add_test(tc, test_store_relay_reads_retained_in_commit_order);
    tcase_add_test(tc, test_store_relay_migration_logs_old_retained_values);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
