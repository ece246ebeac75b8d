/*
 * store_plan.c: the write side of plans and retained values (migrations
 * 0003 and 0016, the values' log for the relay).
 *
 * Writer thread only, inside the transaction of a write job: the caller is
 * a job's own apply (writer.h, dispatch_plan.c), between
 * store_write_begin() and store_write_end(), so a plan's lookup and its
 * insert, or a
 * retention's plan lookup and its inserts, see one snapshot and commit
 * together with the job's dedupe record. Plans are registered once per
 * deployment, not once per token, so the statements are prepared per call
 * instead of being kept beside store.c's hot ones; struct store stays
 * private to store.c.
 */
#include "store_plan.h"

#include <stdlib.h>
#include <string.h>

#include "store_internal.h"
#include "store_sqlite.h"

/* An empty string must still bind a non-NULL pointer, or SQLite would bind
 * NULL instead of a zero-length blob. */
static void
bind_str(sqlite3_stmt *st, int i, struct proto_str v)
{
    sqlite3_bind_blob(st, i, v.len ? v.ptr : "", (int)v.len, SQLITE_STATIC);
}

static int
prepare(struct store *s, const char *sql, sqlite3_stmt **st,
        struct proto_err *err)
{
    int rc = sqlite3_prepare_v2(store_db(s), sql, -1, st, NULL);

    if (rc != SQLITE_OK) {
        *st = NULL;
        return store_fail(s, rc, err, "prepare a plan statement");
    }
    return 0;
}

int
store_sqlite_plan_get(struct store *s, const struct store_plan_key *k,
                      int64_t *id, void **canonical, size_t *len,
                      struct proto_err *err)
{
    sqlite3_stmt *st;
    int rc;

    *id = 0;
    *canonical = NULL;
    *len = 0;
    if ((rc = prepare(s,
                      "SELECT id, canonical FROM plans WHERE "
                      "prepared_plan_id = ?1 AND graph_hash = ?2",
                      &st, err)))
        return rc;
    bind_str(st, 1, k->plan);
    bind_str(st, 2, k->graph);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        size_t n = (size_t)sqlite3_column_bytes(st, 1);
        const void *p = sqlite3_column_blob(st, 1);

        *canonical = malloc(n ? n : 1);
        if (*canonical == NULL) {
            sqlite3_finalize(st);
            return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        }
        if (n > 0)
            memcpy(*canonical, p, n);
        *len = n;
        *id = sqlite3_column_int64(st, 0);
        rc = SQLITE_DONE;
    }
    if (rc != SQLITE_DONE) {
        rc = store_fail(s, rc, err, "look up a plan");
        free(*canonical);
        *canonical = NULL;
        *id = 0;
        sqlite3_finalize(st);
        return rc;
    }
    sqlite3_finalize(st);
    return 0;
}

int
store_sqlite_plan_put(struct store *s, const struct store_plan_new *p,
                      int64_t *id, struct proto_err *err)
{
    sqlite3_stmt *st;
    int rc;

    *id = 0;
    if ((rc = prepare(s,
                      "INSERT INTO plans (prepared_plan_id, graph_hash, "
                      "registered_at, source, node_count, value_count, "
                      "canonical) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                      &st, err)))
        return rc;
    bind_str(st, 1, p->key.plan);
    bind_str(st, 2, p->key.graph);
    sqlite3_bind_int64(st, 3, p->registered_at);
    bind_str(st, 4, p->source);
    sqlite3_bind_int64(st, 5, (int64_t)p->nodes);
    sqlite3_bind_int64(st, 6, (int64_t)p->values);
    sqlite3_bind_blob(st, 7, p->len ? p->canonical : "", (int)p->len,
                      SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) {
        rc = store_fail(s, rc, err, "store a plan");
        sqlite3_finalize(st);
        return rc;
    }
    sqlite3_finalize(st);
    *id = sqlite3_last_insert_rowid(store_db(s));
    return 0;
}

int
store_sqlite_plan_retain(struct store *s, int64_t plan_id,
                         struct proto_str value_id, int64_t retained_at,
                         const void *value, size_t len, struct proto_err *err)
{
    sqlite3_stmt *st;
    int rc;

    /* OR IGNORE: the first retention of a value keeps its time, and the
     * bytes cannot differ because the plan cannot change. */
    if ((rc = prepare(s,
                      "INSERT OR IGNORE INTO retained_values (plan_id, "
                      "value_id, retained_at, value) VALUES (?1, ?2, ?3, ?4)",
                      &st, err)))
        return rc;
    sqlite3_bind_int64(st, 1, plan_id);
    bind_str(st, 2, value_id);
    sqlite3_bind_int64(st, 3, retained_at);
    sqlite3_bind_blob(st, 4, len ? value : "", (int)len, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) {
        rc = store_fail(s, rc, err, "store a retained value");
        sqlite3_finalize(st);
        return rc;
    }
    sqlite3_finalize(st);
    if (sqlite3_changes(store_db(s)) == 0)
        return 0; /* retained before: logged then */
    /* A new value: its place in the relay's "retention" stream
     * (migration 0016), in the same transaction. */
    if ((rc = prepare(s,
                      "INSERT INTO retained_log (plan_id, value_id) VALUES "
                      "(?1, ?2)",
                      &st, err)))
        return rc;
    sqlite3_bind_int64(st, 1, plan_id);
    bind_str(st, 2, value_id);
    rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) {
        rc = store_fail(s, rc, err, "log a retained value");
        sqlite3_finalize(st);
        return rc;
    }
    sqlite3_finalize(st);
    return 0;
}
