/*
 * store_relay.c: the relay's cursor on a node and the high-water marks of
 * the origins on a center (store_relay.h, migrations 0013 and 0016), on
 * SQLite. A
 * node's store is SQLite; a center's functions are the SQLite backend's
 * operations (store_sqlite_relay_*, store_ops.h), PostgreSQL's are in
 * store_pg.c.
 *
 * Statements are prepared per call: a cursor moves once per acknowledged
 * batch and an origin's mark once per relayed batch, so the cost is per
 * batch, never per receipt. store_relay_read runs on the relay's own
 * read-only connection, off the loop and the writer.
 */
#include "store_relay.h"

#include <stdlib.h>
#include <string.h>

#include "store_internal.h"
#include "store_sqlite.h"
#include "store_row.h"

static int
prepare(struct store *s, const char *sql, sqlite3_stmt **st,
        struct proto_err *err)
{
    int rc;

    /* Every function here starts with a statement: a store of another
     * backend stops at this one (a node relays from SQLite only; a
     * center's operations are reached through store_ops.h). */
    if (strcmp(store_backend_name(s), "sqlite") != 0) {
        *st = NULL;
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "a node relays from an SQLite store, not %s",
                             store_backend_name(s));
    }
    rc = sqlite3_prepare_v2(store_db(s), sql, -1, st, NULL);
    if (rc != SQLITE_OK) {
        *st = NULL;
        return store_fail(s, rc, err, "prepare a relay statement");
    }
    return 0;
}

/* Steps the cached st to its end (a write, or a read of one value into
 * *v when v is set and a row came), then resets it. */
static int
finish_cached(struct store *s, sqlite3_stmt *st, int64_t *v,
              struct proto_err *err, const char *what)
{
    int rc = sqlite3_step(st);

    if (rc == SQLITE_ROW) {
        if (v != NULL)
            *v = sqlite3_column_int64(st, 0);
        rc = sqlite3_step(st);
    }
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? 0 : store_fail(s, rc, err, what);
}

/* finish_cached for a statement of its own, which it then finalizes. */
static int
finish(struct store *s, sqlite3_stmt *st, int64_t *v, struct proto_err *err,
       const char *what)
{
    int rc = finish_cached(s, st, v, err, what);

    sqlite3_finalize(st);
    return rc;
}

int
store_relay_cursor_get(struct store *s, const char *stream, uint64_t *acked,
                       struct proto_err *err)
{
    sqlite3_stmt *st;
    int64_t v = 0;
    int rc;

    if ((rc = prepare(s, "SELECT acked_id FROM relay_cursor WHERE stream = ?",
                      &st, err)))
        return rc;
    sqlite3_bind_text(st, 1, stream, -1, SQLITE_STATIC);
    rc = finish(s, st, &v, err, "read the relay cursor");
    *acked = rc == 0 && v > 0 ? (uint64_t)v : 0;
    return rc;
}

int
store_relay_cursor_set(struct store *s, const char *stream, uint64_t acked,
                       struct proto_err *err)
{
    sqlite3_stmt *st;
    int rc;

    if ((rc = prepare(s,
                      "INSERT INTO relay_cursor (stream, acked_id) VALUES "
                      "(?1, ?2) ON CONFLICT (stream) DO UPDATE SET acked_id "
                      "= max(acked_id, excluded.acked_id)",
                      &st, err)))
        return rc;
    sqlite3_bind_text(st, 1, stream, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, store_clamp_i64(acked));
    return finish(s, st, NULL, err, "advance the relay cursor");
}

/*
 * The relay's reads keep their statements prepared for the connection's
 * life (a read of a batch used to prepare six joins' worth of SQL each
 * time), and the interned strings they name by id: a batch of a
 * thousand receipts names a few dozen strings, which each row joined
 * again. A string's id never changes its value: committed strings are
 * never deleted, and the relay reads committed rows only. The table is
 * cleared, between rows, once it holds RELAY_STR_MAX strings or
 * RELAY_STR_BYTES bytes, so it is bounded by those plus one row's.
 */
enum {
    RS_RECEIPTS,
    RS_PLANS,
    RS_RETAINED,
    RS_STRING,
    /* A center's, on its writer's store: once a batch each. */
    RS_ORIGIN_GET,
    RS_ORIGIN_SET,
    RS_RANGE_ADD,
    RS_COUNT
};

#define RELAY_STR_SLOTS 8192 /* a power of two, twice RELAY_STR_MAX */
#define RELAY_STR_MAX   4096
#define RELAY_STR_BYTES (4u << 20)

struct relay_str {
    int64_t id; /* 0: free (string ids start at 1) */
    size_t len;
    char *val;
};

struct store_relay_cache {
    sqlite3_stmt *st[RS_COUNT];
    struct relay_str *strs; /* RELAY_STR_SLOTS */
    size_t n_strs, str_bytes;
};

static const char *const relay_sql[RS_COUNT] = {
    /* The columns of store_query_receipts_sql's rows, strings by id. */
    [RS_RECEIPTS] =
        "SELECT id, received_at, source_id, seq, status, schema_version, "
        "requested_backend, executed_backend, model_id, plan_id, graph_id, "
        "tuning_id, stop_reason_id, counter_coverage, counters, extra FROM "
        "receipts WHERE id > ?1 ORDER BY id LIMIT ?2",
    [RS_PLANS] = "SELECT id, registered_at, source, canonical FROM plans "
                 "WHERE id > ?1 ORDER BY id LIMIT ?2",
    /* Each row of the log is a rowid step and two primary key seeks. */
    [RS_RETAINED] =
        "SELECT l.id, l.plan_id, v.retained_at, p.prepared_plan_id, "
        "p.graph_hash, v.value_id, v.value FROM retained_log l JOIN "
        "retained_values v ON v.plan_id = l.plan_id AND v.value_id = "
        "l.value_id JOIN plans p ON p.id = l.plan_id WHERE l.id > ?1 ORDER "
        "BY l.id LIMIT ?2",
    [RS_STRING] = "SELECT value FROM strings WHERE id = ?1",
    [RS_ORIGIN_GET] = "SELECT committed_id FROM relay_origins WHERE origin = "
                      "?1 AND stream = ?2",
    [RS_ORIGIN_SET] = "INSERT INTO relay_origins (origin, stream, "
                      "committed_id) VALUES (?1, ?2, ?3) ON CONFLICT "
                      "(origin, stream) DO UPDATE SET committed_id = "
                      "max(committed_id, excluded.committed_id)",
    [RS_RANGE_ADD] = "INSERT INTO relay_ranges (first_id, last_id, origin, "
                     "origin_first, origin_last) VALUES (?1, ?2, ?3, ?4, ?5)",
};

static void
strs_clear(struct store_relay_cache *c)
{
    size_t i;

    for (i = 0; i < RELAY_STR_SLOTS && c->n_strs > 0; i++)
        if (c->strs[i].id != 0) {
            free(c->strs[i].val);
            c->strs[i].id = 0;
            c->n_strs--;
        }
    c->n_strs = 0;
    c->str_bytes = 0;
}

void
store_relay_cache_free(struct store_relay_cache *c)
{
    int i;

    if (c == NULL)
        return;
    for (i = 0; i < RS_COUNT; i++)
        sqlite3_finalize(c->st[i]);
    if (c->strs != NULL)
        strs_clear(c);
    free(c->strs);
    free(c);
}

/* The statement k of s's relay statements, prepared on first use and
 * kept; reset it when done with it. */
static int
cached_stmt(struct store *s, int k, sqlite3_stmt **out, struct proto_err *err)
{
    struct store_relay_cache **cp = store_relay_cache_of(s), *c = *cp;
    int rc;

    *out = NULL;
    if (c == NULL) {
        /* Reports a store of another backend. */
        if (strcmp(store_backend_name(s), "sqlite") != 0)
            return prepare(s, relay_sql[k], out, err);
        if ((c = calloc(1, sizeof(*c))) == NULL ||
            (c->strs = calloc(RELAY_STR_SLOTS, sizeof(*c->strs))) == NULL) {
            free(c);
            return proto_err_set(err, PROTO_ENOMEM, NULL,
                                 "out of memory for the relay's statements");
        }
        *cp = c;
    }
    if (c->st[k] == NULL) {
        rc = sqlite3_prepare_v3(store_db(s), relay_sql[k], -1,
                                SQLITE_PREPARE_PERSISTENT, &c->st[k], NULL);
        if (rc != SQLITE_OK) {
            c->st[k] = NULL;
            return store_fail(s, rc, err, "prepare a relay statement");
        }
    }
    *out = c->st[k];
    return 0;
}

/* The statement k of s's relay reads, its parameters bound to after and
 * max; reset it when done with it. */
static int
relay_stmt(struct store *s, int k, uint64_t after, uint32_t max,
           sqlite3_stmt **out, struct proto_err *err)
{
    int rc = cached_stmt(s, k, out, err);

    if (rc == 0 && k != RS_STRING) {
        sqlite3_bind_int64(*out, 1, store_clamp_i64(after));
        sqlite3_bind_int64(*out, 2, max);
    }
    return rc;
}

/* The value of string id into *out, from the table or the store; valid
 * until strs_clear. Inside the read of a batch, so the string is as
 * committed as the row that names it. */
static int
relay_string(struct store *s, int64_t id, struct proto_str *out,
             struct proto_err *err)
{
    struct store_relay_cache *c = *store_relay_cache_of(s);
    size_t i = ((uint64_t)id * 0x9e3779b97f4a7c15ull) >> 51; /* 13 bits */
    struct relay_str *e;
    sqlite3_stmt *st;
    const void *p;
    int rc;

    for (;; i = (i + 1) & (RELAY_STR_SLOTS - 1)) {
        e = &c->strs[i];
        if (e->id == id) {
            out->ptr = e->val;
            out->len = e->len;
            return 0;
        }
        if (e->id == 0)
            break;
    }
    if ((rc = relay_stmt(s, RS_STRING, 0, 0, &st, err)))
        return rc;
    sqlite3_bind_int64(st, 1, id);
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        rc = rc == SQLITE_DONE
                 ? proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                                 "string %lld is missing", (long long)id)
                 : store_fail(s, rc, err, "read a string");
        sqlite3_reset(st);
        return rc;
    }
    p = sqlite3_column_blob(st, 0);
    e->len = (size_t)sqlite3_column_bytes(st, 0);
    /* One byte more: an empty string has no blob. */
    if ((e->val = malloc(e->len + 1)) == NULL) {
        sqlite3_reset(st);
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "out of memory for a string");
    }
    if (e->len > 0)
        memcpy(e->val, p, e->len);
    e->val[e->len] = '\0';
    e->id = id;
    c->n_strs++;
    c->str_bytes += e->len;
    sqlite3_reset(st);
    out->ptr = e->val;
    out->len = e->len;
    return 0;
}

/* The row at st as store_query_receipts hands it over (store_query.c's
 * emit), its strings from relay_string; *bytes gets its stored bytes
 * (counters and unknown keys). */
static int
row_of(struct store *s, sqlite3_stmt *st, struct store_row *row, size_t *bytes,
       struct proto_err *err)
{
    struct store_relay_cache *c = *store_relay_cache_of(s);
    struct proto_str *strs[6];
    int i, rc;

    /* Between rows, never inside one: the row's strings stay. */
    if (c->n_strs + 6 > RELAY_STR_MAX || c->str_bytes > RELAY_STR_BYTES)
        strs_clear(c);
    memset(row, 0, sizeof(*row));
    row->receipt_id = sqlite3_column_int64(st, 0);
    row->received_at = sqlite3_column_int64(st, 1);
    row->has_seq = sqlite3_column_type(st, 3) != SQLITE_NULL;
    row->seq = (uint64_t)sqlite3_column_int64(st, 3);
    row->status = sqlite3_column_int(st, 4);
    row->r.schema_version = (uint16_t)sqlite3_column_int(st, 5);
    row->r.requested_backend = (uint8_t)sqlite3_column_int(st, 6);
    row->r.executed_backend = (uint8_t)sqlite3_column_int(st, 7);
    strs[0] = &row->source;
    strs[1] = &row->r.model_instance_id;
    strs[2] = &row->r.prepared_plan_id;
    strs[3] = &row->r.graph_hash;
    strs[4] = &row->r.tuning_profile;
    strs[5] = &row->r.stop_reason;
    for (i = 0; i < 6; i++)
        if ((rc = relay_string(s, sqlite3_column_int64(st, i == 0 ? 2 : 7 + i),
                               strs[i], err)))
            return rc;
    row->r.counter_coverage = (uint64_t)sqlite3_column_int64(st, 13);
    store_counters_column(st, 14, &row->r);
    if (sqlite3_column_type(st, 15) == SQLITE_BLOB) {
        /* Borrowed for the callback only. */
        row->r.extra = (char *)sqlite3_column_blob(st, 15);
        row->r.extra_len = (size_t)sqlite3_column_bytes(st, 15);
    }
    *bytes = (size_t)sqlite3_column_bytes(st, 14) + row->r.extra_len;
    return 0;
}

int
store_relay_read(struct store *s, uint64_t after, uint32_t max,
                 size_t max_bytes, store_row_cb cb, void *arg, uint64_t *last,
                 struct proto_err *err)
{
    struct store_row row;
    sqlite3_stmt *st;
    size_t bytes = 0, n;
    int rc;

    *last = after;
    if ((rc = relay_stmt(s, RS_RECEIPTS, after, max, &st, err)))
        return rc;
    /* The strings are read while st is stepping, so in its read
     * transaction: they see what the rows do. */
    while (bytes < max_bytes && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if ((rc = row_of(s, st, &row, &n, err)) != 0)
            goto out;
        bytes += n;
        if ((rc = cb(arg, &row)) != 0)
            goto out;
        *last = (uint64_t)row.receipt_id;
    }
    if (bytes >= max_bytes)
        rc = SQLITE_DONE;
    rc = rc == SQLITE_DONE ? 0
                           : store_fail(s, rc, err, "read receipts to relay");
out:
    /* Ends the read transaction: the WAL is let go of. */
    sqlite3_reset(st);
    return rc;
}

int
store_relay_read_plans(struct store *s, uint64_t after, uint32_t max,
                       size_t max_bytes, store_relay_plan_cb cb, void *arg,
                       uint64_t *last, struct proto_err *err)
{
    struct store_relay_plan p;
    sqlite3_stmt *st;
    size_t bytes = 0;
    int rc;

    *last = after;
    if ((rc = relay_stmt(s, RS_PLANS, after, max, &st, err)))
        return rc;
    while (bytes < max_bytes && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        p.id = sqlite3_column_int64(st, 0);
        p.registered_at = sqlite3_column_int64(st, 1);
        store_column_str(st, 2, &p.source);
        p.canonical = sqlite3_column_blob(st, 3);
        p.len = (size_t)sqlite3_column_bytes(st, 3);
        bytes += p.len;
        if ((rc = cb(arg, &p)) != 0) {
            sqlite3_reset(st);
            return rc;
        }
        *last = (uint64_t)p.id;
    }
    if (bytes >= max_bytes)
        rc = SQLITE_DONE;
    if (rc != SQLITE_DONE) {
        rc = store_fail(s, rc, err, "read plans to relay");
        sqlite3_reset(st);
        return rc;
    }
    sqlite3_reset(st);
    return 0;
}

int
store_relay_read_retained(struct store *s, uint64_t after, uint32_t max,
                          size_t max_bytes, store_relay_retained_cb cb,
                          void *arg, uint64_t *last, struct proto_err *err)
{
    struct store_relay_retained v;
    sqlite3_stmt *st;
    size_t bytes = 0;
    int rc;

    *last = after;
    if ((rc = relay_stmt(s, RS_RETAINED, after, max, &st, err)))
        return rc;
    while (bytes < max_bytes && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        v.id = sqlite3_column_int64(st, 0);
        v.plan_id = sqlite3_column_int64(st, 1);
        v.retained_at = sqlite3_column_int64(st, 2);
        store_column_str(st, 3, &v.plan);
        store_column_str(st, 4, &v.graph);
        store_column_str(st, 5, &v.value_id);
        v.value = sqlite3_column_blob(st, 6);
        v.len = (size_t)sqlite3_column_bytes(st, 6);
        bytes += v.len;
        if ((rc = cb(arg, &v)) != 0) {
            sqlite3_reset(st);
            return rc;
        }
        *last = (uint64_t)v.id;
    }
    if (bytes >= max_bytes)
        rc = SQLITE_DONE;
    if (rc != SQLITE_DONE) {
        rc = store_fail(s, rc, err, "read retained values to relay");
        sqlite3_reset(st);
        return rc;
    }
    sqlite3_reset(st);
    return 0;
}

int
store_relay_last_id(struct store *s, const char *stream, uint64_t *id,
                    struct proto_err *err)
{
    sqlite3_stmt *st;
    int64_t v = 0;
    int rc;

    if ((rc = prepare(s,
                      strcmp(stream, STORE_RELAY_PLANS) == 0
                          ? "SELECT max(id) FROM plans"
                      : strcmp(stream, STORE_RELAY_RETENTION) == 0
                          ? "SELECT max(id) FROM retained_log"
                          : "SELECT max(id) FROM receipts",
                      &st, err)))
        return rc;
    rc = finish(s, st, &v, err, "read the newest id");
    *id = rc == 0 && v > 0 ? (uint64_t)v : 0;
    return rc;
}

int
store_relay_backlog(struct store *s, uint64_t after, uint64_t count_max,
                    struct store_relay_backlog *b, struct proto_err *err)
{
    sqlite3_stmt *st;
    int64_t v;
    int rc;

    b->records = 0;
    b->last_id = 0;
    b->oldest_at = INT64_MIN;
    if ((rc = store_exec(s, "BEGIN", err, "begin a read")))
        return rc;
    v = 0;
    if ((rc = prepare(s, "SELECT max(id) FROM receipts", &st, err)) ||
        (rc = finish(s, st, &v, err, "read the newest receipt id")))
        goto out;
    b->last_id = v > 0 ? (uint64_t)v : 0;
    if (b->last_id <= after)
        goto out;
    v = INT64_MIN;
    if ((rc = prepare(s,
                      "SELECT received_at FROM receipts WHERE id > ? ORDER "
                      "BY id LIMIT 1",
                      &st, err)))
        goto out;
    sqlite3_bind_int64(st, 1, store_clamp_i64(after));
    if ((rc = finish(s, st, &v, err, "read the oldest undelivered receipt")))
        goto out;
    b->oldest_at = v;
    /* Ids are assigned in order and rarely skipped (a rolled-back group),
     * so past count_max the difference stands for the count, which would
     * read every row waiting. */
    if (b->last_id - after > count_max) {
        b->records = b->last_id - after;
        goto out;
    }
    v = 0;
    if ((rc = prepare(s, "SELECT count(*) FROM receipts WHERE id > ?", &st,
                      err)))
        goto out;
    sqlite3_bind_int64(st, 1, store_clamp_i64(after));
    if ((rc = finish(s, st, &v, err, "count the undelivered receipts")))
        goto out;
    b->records = v > 0 ? (uint64_t)v : 0;
out:
    /* A read transaction: nothing to keep, nothing that can fail. */
    sqlite3_exec(store_db(s), "COMMIT", NULL, NULL, NULL);
    return rc;
}

int
store_sqlite_relay_origin_get(struct store *s, const char *origin, size_t len,
                              const char *stream, uint64_t *committed,
                              struct proto_err *err)
{
    sqlite3_stmt *st;
    int64_t v = 0;
    int rc;

    if ((rc = cached_stmt(s, RS_ORIGIN_GET, &st, err)))
        return rc;
    sqlite3_bind_blob(st, 1, origin, (int)len, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, stream, -1, SQLITE_STATIC);
    rc = finish_cached(s, st, &v, err, "read an origin's relayed mark");
    *committed = rc == 0 && v > 0 ? (uint64_t)v : 0;
    return rc;
}

int
store_sqlite_relay_origin_set(struct store *s, const char *origin, size_t len,
                              const char *stream, uint64_t committed,
                              struct proto_err *err)
{
    sqlite3_stmt *st;
    int rc;

    if ((rc = cached_stmt(s, RS_ORIGIN_SET, &st, err)))
        return rc;
    sqlite3_bind_blob(st, 1, origin, (int)len, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, stream, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, store_clamp_i64(committed));
    return finish_cached(s, st, NULL, err, "record an origin's relayed mark");
}

int
store_sqlite_relay_range_add(struct store *s, const char *origin, size_t len,
                             int64_t first_id, int64_t last_id,
                             uint64_t origin_first, uint64_t origin_last,
                             struct proto_err *err)
{
    sqlite3_stmt *st;
    int rc;

    if ((rc = cached_stmt(s, RS_RANGE_ADD, &st, err)))
        return rc;
    sqlite3_bind_int64(st, 1, first_id);
    sqlite3_bind_int64(st, 2, last_id);
    sqlite3_bind_blob(st, 3, origin, (int)len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, store_clamp_i64(origin_first));
    sqlite3_bind_int64(st, 5, store_clamp_i64(origin_last));
    return finish_cached(s, st, NULL, err, "record a relayed range");
}
