/*
 * store_query_plan.c: the read side of plans and retained values: the
 * `plans` and `retained` query kinds, the lookup of a readback, and the
 * counts of the `stats` query.
 *
 * Runs on a query thread with a read-only connection (never the
 * writer's), bounded in rows (the caller's limit plus one, to learn
 * whether more matched) and in time, like store_query.c: a progress
 * handler interrupts SQLite once the deadline passes. Keys are stored as
 * blobs, so filters bind blobs too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"
#include "store_sqlite.h"
#include "store_plan.h"

/* Binds the filters that the SQL names and the limit plus one. */
static void
bind_filter(sqlite3_stmt *st, const struct store_filter *f)
{
    if (f->plan)
        store_bind_blob(st, ":plan", f->plan, f->plan_len);
    if (f->graph)
        store_bind_blob(st, ":graph", f->graph, f->graph_len);
    if (f->source)
        store_bind_blob(st, ":source", f->source, f->source_len);
    store_bind_i64(st, ":since", store_clamp_i64(f->since));
    store_bind_i64(st, ":until", store_clamp_i64(f->until));
    store_bind_i64(st, ":limit", (int64_t)f->limit + 1);
}

static int
plan_row_cb(sqlite3_stmt *st, void *cb, void *arg)
{
    struct store_plan_row row;

    memset(&row, 0, sizeof(row));
    store_column_str(st, 0, &row.plan);
    store_column_str(st, 1, &row.graph);
    row.registered_at = sqlite3_column_int64(st, 2);
    store_column_str(st, 3, &row.source);
    row.nodes = (uint64_t)sqlite3_column_int64(st, 4);
    row.values = (uint64_t)sqlite3_column_int64(st, 5);
    row.retained = (uint64_t)sqlite3_column_int64(st, 6);
    return (*(store_plan_row_cb *)cb)(arg, &row);
}

int
store_sqlite_query_plans(struct store *s, const struct store_filter *f,
                         uint64_t deadline_ms, store_plan_row_cb cb, void *arg,
                         int *truncated, struct proto_err *err)
{
    sqlite3_stmt *st = NULL;
    char sql[1024];
    size_t n = 0;
    int rc;

#define ADD(...)                                                               \
    n += (size_t)snprintf(sql + n, n < sizeof(sql) ? sizeof(sql) - n : 0,      \
                          __VA_ARGS__)
    ADD("SELECT p.prepared_plan_id, p.graph_hash, p.registered_at, "
        "p.source, p.node_count, p.value_count, (SELECT count(*) FROM "
        "retained_values r WHERE r.plan_id = p.id) FROM plans p WHERE 1");
    if (f->plan)
        ADD(" AND p.prepared_plan_id = :plan");
    if (f->graph)
        ADD(" AND p.graph_hash = :graph");
    if (f->source)
        ADD(" AND p.source = :source");
    if (f->has_since)
        ADD(" AND p.registered_at >= :since");
    if (f->has_until)
        ADD(" AND p.registered_at < :until");
    ADD(" ORDER BY p.id DESC LIMIT :limit");
#undef ADD
    if (n >= sizeof(sql))
        return proto_err_set(err, PROTO_EINVALID, NULL, "query too long");
    rc = sqlite3_prepare_v2(store_db(s), sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "prepare a query");
    bind_filter(st, f);
    return store_query_rows(s, st, f->limit, deadline_ms, plan_row_cb, &cb, arg,
                            truncated, err);
}

static int
retained_row_cb(sqlite3_stmt *st, void *cb, void *arg)
{
    struct store_retained_row row;

    memset(&row, 0, sizeof(row));
    store_column_str(st, 0, &row.plan);
    store_column_str(st, 1, &row.graph);
    store_column_str(st, 2, &row.value_id);
    row.retained_at = sqlite3_column_int64(st, 3);
    row.value = sqlite3_column_blob(st, 4);
    row.len = (size_t)sqlite3_column_bytes(st, 4);
    return (*(store_retained_row_cb *)cb)(arg, &row);
}

int
store_sqlite_query_retained(struct store *s, const struct store_filter *f,
                            uint64_t deadline_ms, store_retained_row_cb cb,
                            void *arg, int *truncated, struct proto_err *err)
{
    sqlite3_stmt *st = NULL;
    int rc;

    *truncated = 0;
    if (f->plan == NULL)
        return proto_err_set(err, PROTO_EINVALID, "plan",
                             "the retained query needs a plan");
    rc = sqlite3_prepare_v2(
        store_db(s),
        f->graph ? "SELECT p.prepared_plan_id, p.graph_hash, r.value_id, "
                   "r.retained_at, r.value FROM retained_values r JOIN plans "
                   "p ON p.id = r.plan_id WHERE p.prepared_plan_id = :plan "
                   "AND p.graph_hash = :graph ORDER BY p.id, r.value_id "
                   "LIMIT :limit"
                 : "SELECT p.prepared_plan_id, p.graph_hash, r.value_id, "
                   "r.retained_at, r.value FROM retained_values r JOIN plans "
                   "p ON p.id = r.plan_id WHERE p.prepared_plan_id = :plan "
                   "ORDER BY p.id, r.value_id LIMIT :limit",
        -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "prepare a query");
    bind_filter(st, f);
    return store_query_rows(s, st, f->limit, deadline_ms, retained_row_cb, &cb,
                            arg, truncated, err);
}

int
store_sqlite_plan_readback(struct store *s, const struct store_plan_key *k,
                           struct proto_str value_id, uint64_t deadline_ms,
                           int *plan_found, void **value, size_t *len,
                           struct proto_err *err)
{
    sqlite3_stmt *st = NULL;
    int rc;

    *plan_found = 0;
    *value = NULL;
    *len = 0;
    rc = sqlite3_prepare_v2(store_db(s),
                            "SELECT r.value FROM plans p LEFT JOIN "
                            "retained_values r ON r.plan_id = p.id AND "
                            "r.value_id = :value WHERE p.prepared_plan_id = "
                            ":plan AND p.graph_hash = :graph",
                            -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "prepare a query");
    store_bind_blob(st, ":plan", k->plan.ptr, k->plan.len);
    store_bind_blob(st, ":graph", k->graph.ptr, k->graph.len);
    store_bind_blob(st, ":value", value_id.ptr, value_id.len);
    store_deadline_arm(s, deadline_ms);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *plan_found = 1;
        if (sqlite3_column_type(st, 0) == SQLITE_BLOB) {
            size_t n = (size_t)sqlite3_column_bytes(st, 0);

            *value = malloc(n ? n : 1);
            if (*value == NULL) {
                rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
                goto out;
            }
            if (n > 0)
                memcpy(*value, sqlite3_column_blob(st, 0), n);
            *len = n;
        }
        rc = SQLITE_DONE;
    }
    rc = rc == SQLITE_DONE ? 0 : store_fail(s, rc, err, "look up a value");
out:
    store_deadline_disarm(s);
    sqlite3_finalize(st);
    return rc;
}

static int
count(struct store *s, const char *sql, uint64_t *out, struct proto_err *err)
{
    sqlite3_stmt *st;
    int rc;

    *out = 0;
    rc = sqlite3_prepare_v2(store_db(s), sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "prepare a query");
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *out = (uint64_t)sqlite3_column_int64(st, 0);
        rc = SQLITE_DONE;
    }
    rc = rc == SQLITE_DONE ? 0 : store_fail(s, rc, err, "count plans");
    sqlite3_finalize(st);
    return rc;
}

int
store_sqlite_plan_counts(struct store *s, uint64_t *plans, uint64_t *retained,
                         struct proto_err *err)
{
    int rc;

    if ((rc = count(s, "SELECT count(*) FROM plans", plans, err)))
        return rc;
    return count(s, "SELECT count(*) FROM retained_values", retained, err);
}
