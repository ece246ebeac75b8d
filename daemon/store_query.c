/*
 * store_query.c: the read side of the store, one function per query kind.
 *
 * Runs on a query thread with a read-only connection (never the writer's).
 * Each query is bounded in rows (the caller's limit, plus one row to learn
 * whether more matched) and in time: a progress handler interrupts SQLite
 * once the deadline passes. Strings are stored as blobs, so filters bind
 * blobs too (SQLite never compares a text equal to a blob).
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "store_internal.h"

static const char *const dict_cols[5] = { "model_id", "plan_id", "graph_id",
                                          "tuning_id", "stop_reason_id" };

size_t
store_query_receipts_sql(char *sql, size_t cap, const struct store_filter *f)
{
    size_t n;
    int i;

#define ADD(...)                                                               \
    n += (size_t)snprintf(sql + n, n < cap ? cap - n : 0, __VA_ARGS__)
    n = 0;
    ADD("SELECT r.id, r.received_at, src.value, r.seq, r.status, "
        "r.schema_version, r.requested_backend, r.executed_backend");
    for (i = 0; i < 5; i++)
        ADD(", d%d.value", i);
    ADD(", r.counter_coverage");
    for (i = 0; i < RECEIPT_NCOUNTERS; i++)
        ADD(", r.%s", receipt_counters[i].field);
    for (i = 0; i < RECEIPT_NARTIFACTS; i++)
        ADD(", r.%s", receipt_artifact_names[i]);
    ADD(", r.extra FROM receipts r JOIN strings src ON src.id = r.source_id");
    for (i = 0; i < 5; i++)
        ADD(" JOIN strings d%d ON d%d.id = r.%s", i, i, dict_cols[i]);
    ADD(" WHERE 1");
    if (f->plan)
        ADD(" AND r.plan_id = (SELECT id FROM strings WHERE value = :plan)");
    if (f->graph)
        ADD(" AND r.graph_id = (SELECT id FROM strings WHERE value = :graph)");
    if (f->model)
        ADD(" AND r.model_id = (SELECT id FROM strings WHERE value = :model)");
    if (f->source)
        ADD(" AND r.source_id = (SELECT id FROM strings WHERE value = "
            ":source)");
    if (f->requested >= 0)
        ADD(" AND r.requested_backend = :requested");
    if (f->executed >= 0)
        ADD(" AND r.executed_backend = :executed");
    if (f->status >= 0)
        ADD(" AND r.status = :status");
    if (f->has_since)
        ADD(" AND r.received_at >= :since");
    if (f->has_until)
        ADD(" AND r.received_at < :until");
    if (f->has_before_id)
        ADD(" AND r.id < :before");
    ADD(" ORDER BY r.id DESC LIMIT :limit");
#undef ADD
    return n;
}

int
store_query_receipts(struct store *s, const struct store_filter *f,
                     uint64_t deadline_ms, store_row_cb cb, void *arg,
                     int *truncated, struct proto_err *err)
{
    struct proto_str *strs[5];
    struct store_row row;
    sqlite3_stmt *st = NULL;
    char sql[4096];
    uint32_t got = 0;
    int rc, i, col;

    *truncated = 0;
    if (store_query_receipts_sql(sql, sizeof(sql), f) >= sizeof(sql))
        return proto_err_set(err, PROTO_EINVALID, NULL, "query too long");
    rc = sqlite3_prepare_v2(store_db(s), sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "prepare a query");
    if (f->plan)
        store_bind_blob(st, ":plan", f->plan, f->plan_len);
    if (f->graph)
        store_bind_blob(st, ":graph", f->graph, f->graph_len);
    if (f->model)
        store_bind_blob(st, ":model", f->model, f->model_len);
    if (f->source)
        store_bind_blob(st, ":source", f->source, f->source_len);
    store_bind_i64(st, ":requested", f->requested);
    store_bind_i64(st, ":executed", f->executed);
    store_bind_i64(st, ":status", f->status);
    store_bind_i64(st, ":since", store_clamp_i64(f->since));
    store_bind_i64(st, ":until", store_clamp_i64(f->until));
    store_bind_i64(st, ":before", store_clamp_i64(f->before_id));
    store_bind_i64(st, ":limit", (int64_t)f->limit + 1);

    store_deadline_arm(s, deadline_ms);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (got == f->limit) {
            *truncated = 1;
            rc = SQLITE_DONE;
            break;
        }
        memset(&row, 0, sizeof(row));
        row.receipt_id = sqlite3_column_int64(st, 0);
        row.received_at = sqlite3_column_int64(st, 1);
        store_column_str(st, 2, &row.source);
        row.has_seq = sqlite3_column_type(st, 3) != SQLITE_NULL;
        row.seq = (uint64_t)sqlite3_column_int64(st, 3);
        row.status = sqlite3_column_int(st, 4);
        row.r.schema_version = (uint16_t)sqlite3_column_int(st, 5);
        row.r.requested_backend = (uint8_t)sqlite3_column_int(st, 6);
        row.r.executed_backend = (uint8_t)sqlite3_column_int(st, 7);
        strs[0] = &row.r.model_instance_id;
        strs[1] = &row.r.prepared_plan_id;
        strs[2] = &row.r.graph_hash;
        strs[3] = &row.r.tuning_profile;
        strs[4] = &row.r.stop_reason;
        for (i = 0; i < 5; i++)
            store_column_str(st, 8 + i, strs[i]);
        row.r.counter_coverage = (uint64_t)sqlite3_column_int64(st, 13);
        col = 14;
        for (i = 0; i < RECEIPT_NCOUNTERS; i++)
            row.r.counters[i] = (uint64_t)sqlite3_column_int64(st, col++);
        for (i = 0; i < RECEIPT_NARTIFACTS; i++)
            row.r.artifacts[i] = (uint64_t)sqlite3_column_int64(st, col++);
        if (sqlite3_column_type(st, col) == SQLITE_BLOB) {
            /* Borrowed for the callback only; the row must not be freed
             * with receipt_clear(). */
            row.r.extra = (char *)sqlite3_column_blob(st, col);
            row.r.extra_len = (size_t)sqlite3_column_bytes(st, col);
        }
        got++;
        if ((rc = cb(arg, &row)) != 0) {
            store_deadline_disarm(s);
            sqlite3_finalize(st);
            return rc;
        }
    }
    if (rc != SQLITE_DONE) {
        rc = store_fail(s, rc, err, "run a query");
        store_deadline_disarm(s);
        sqlite3_finalize(st);
        return rc;
    }
    store_deadline_disarm(s);
    sqlite3_finalize(st);
    return 0;
}

static int
scalar(struct store *s, const char *sql, int64_t *v, struct proto_err *err)
{
    sqlite3_stmt *st;
    int rc;

    *v = 0;
    rc = sqlite3_prepare_v2(store_db(s), sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "prepare a query");
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *v = sqlite3_column_int64(st, 0);
        rc = SQLITE_DONE;
    }
    if (rc != SQLITE_DONE) {
        rc = store_fail(s, rc, err, "run a query");
        sqlite3_finalize(st);
        return rc;
    }
    sqlite3_finalize(st);
    return 0;
}

static uint64_t
file_size(const char *path, const char *suffix)
{
    char buf[4096];
    struct stat sb;

    if ((size_t)snprintf(buf, sizeof(buf), "%s%s", path, suffix) >= sizeof(buf))
        return 0;
    if (stat(buf, &sb) != 0)
        return 0;
    return (uint64_t)sb.st_size;
}

int
store_query_stats(struct store *s, uint64_t deadline_ms, struct store_stats *st,
                  struct proto_err *err)
{
    int64_t v;
    int rc;

    memset(st, 0, sizeof(*st));
    store_deadline_arm(s, deadline_ms);
    /* One read transaction, so the figures agree with each other. */
    if ((rc = store_exec(s, "BEGIN", err, "begin a read")))
        goto out;
    if ((rc = scalar(s, "SELECT coalesce(max(id), 0) FROM receipts", &v, err)))
        goto end;
    st->last_receipt_id = (uint64_t)v;
    if ((rc = scalar(s, "SELECT count(*) FROM quarantine", &v, err)))
        goto end;
    st->quarantined = (uint64_t)v;
    if ((rc = scalar(s,
                     "SELECT value FROM counters WHERE name = "
                     "'quarantine_bytes'",
                     &v, err)))
        goto end;
    st->quarantine_bytes = (uint64_t)v;
    if ((rc = scalar(s,
                     "SELECT value FROM counters WHERE name = "
                     "'quarantine_evictions'",
                     &v, err)))
        goto end;
    st->quarantine_evictions = (uint64_t)v;
    st->size_bytes =
        file_size(store_path(s), "") + file_size(store_path(s), "-wal");
end:
    sqlite3_exec(store_db(s), "COMMIT", NULL, NULL, NULL);
out:
    store_deadline_disarm(s);
    return rc;
}
