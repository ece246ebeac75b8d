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
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <roaring/roaring.h>

#include "store_internal.h"
#include "store_sqlite.h"
#include "store_row.h"
#include "store_tail.h"

static const char *const dict_cols[5] = { "model_id", "plan_id", "graph_id",
                                          "tuning_id", "stop_reason_id" };

/* The key filters of f that postings answer, by kind. */
struct keyset {
    int n;
    int kind[STORE_KIND_COUNT];
    int64_t value[STORE_KIND_COUNT];
};

/* The order in which kinds drive a walk over the postings: the most
 * selective first, so that a rare value visits only the chunks it is in. */
static const int drive_order[] = { STORE_KIND_GRAPH,    STORE_KIND_PLAN,
                                   STORE_KIND_SOURCE,   STORE_KIND_MODEL,
                                   STORE_KIND_STATUS,   STORE_KIND_EXECUTED,
                                   STORE_KIND_REQUESTED };

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
    ADD(", r.counter_coverage, r.counters, r.extra FROM receipts r JOIN "
        "strings src ON src.id = r.source_id");
    for (i = 0; i < 5; i++)
        ADD(" JOIN strings d%d ON d%d.id = r.%s", i, i, dict_cols[i]);
    /* A rowid range (the tail, or the chunks of a time window), or one id
     * of a posting. */
    ADD(" WHERE r.id >= :idlo AND r.id < :idhi");
    if (f->plan)
        ADD(" AND r.plan_id = :plan");
    if (f->graph)
        ADD(" AND r.graph_id = :graph");
    if (f->model)
        ADD(" AND r.model_id = :model");
    if (f->source)
        ADD(" AND r.source_id = :source");
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
    /* The batch of relay_ranges that holds the row: one seek each. */
    if (f->origin)
        ADD(" AND EXISTS (SELECT 1 FROM relay_ranges g WHERE g.first_id = "
            "(SELECT max(first_id) FROM relay_ranges WHERE first_id <= r.id) "
            "AND g.last_id >= r.id AND g.origin = :origin)");
    ADD(" ORDER BY r.id %s LIMIT :limit", f->has_after_id ? "ASC" : "DESC");
#undef ADD
    return n;
}

/* One query's state: the page so far and the statements it reuses. */
struct page {
    struct store *s;
    const struct store_filter *f;
    struct keyset keys;
    uint64_t deadline_ms;
    store_row_cb cb;
    void *arg;
    uint32_t got;
    int truncated;
    sqlite3_stmt *rows;  /* store_query_receipts_sql */
    sqlite3_stmt *probe; /* one posting of a chunk */
    sqlite3_stmt *at;    /* the received_at of one receipt */
};

/* Resolves f's key filters; *none when a string is unknown (no match). */
static int
resolve(struct store *s, const struct store_filter *f, struct keyset *ks,
        int *none, struct proto_err *err)
{
    int64_t v[STORE_KIND_COUNT] = { 0 };
    int set[STORE_KIND_COUNT] = { 0 };
    size_t i;
    int rc;

    *none = 0;
    ks->n = 0;
#define STR(kind, field)                                                       \
    if (f->field != NULL) {                                                    \
        if ((rc =                                                              \
                 store_string_id(s, f->field, f->field##_len, &v[kind], err))) \
            return rc;                                                         \
        if (v[kind] == 0)                                                      \
            *none = 1;                                                         \
        set[kind] = 1;                                                         \
    }
    STR(STORE_KIND_PLAN, plan)
    STR(STORE_KIND_GRAPH, graph)
    STR(STORE_KIND_MODEL, model)
    STR(STORE_KIND_SOURCE, source)
#undef STR
    if (f->status >= 0)
        v[STORE_KIND_STATUS] = f->status, set[STORE_KIND_STATUS] = 1;
    if (f->requested >= 0)
        v[STORE_KIND_REQUESTED] = f->requested, set[STORE_KIND_REQUESTED] = 1;
    if (f->executed >= 0)
        v[STORE_KIND_EXECUTED] = f->executed, set[STORE_KIND_EXECUTED] = 1;
    for (i = 0; i < sizeof(drive_order) / sizeof(drive_order[0]); i++)
        if (set[drive_order[i]]) {
            ks->kind[ks->n] = drive_order[i];
            ks->value[ks->n++] = v[drive_order[i]];
        }
    return 0;
}

static void
bind_keys(sqlite3_stmt *st, const struct keyset *ks)
{
    static const char *const names[STORE_KIND_COUNT] = {
        [STORE_KIND_PLAN] = ":plan",
        [STORE_KIND_GRAPH] = ":graph",
        [STORE_KIND_MODEL] = ":model",
        [STORE_KIND_SOURCE] = ":source",
        [STORE_KIND_STATUS] = ":status",
        [STORE_KIND_REQUESTED] = ":requested",
        [STORE_KIND_EXECUTED] = ":executed",
    };
    int i;

    for (i = 0; i < ks->n; i++)
        store_bind_i64(st, names[ks->kind[i]], ks->value[i]);
}

/* Hands the row at st to the callback; sets truncated on the row past the
 * limit. Returns 0, 1 when the page is full, or the callback's code. */
static int
emit(struct page *p, sqlite3_stmt *st)
{
    struct proto_str *strs[5];
    struct store_row row;
    int i, col;

    if (p->got == p->f->limit) {
        p->truncated = 1;
        return 1;
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
    store_counters_column(st, 14, &row.r);
    col = 15;
    if (sqlite3_column_type(st, col) == SQLITE_BLOB) {
        /* Borrowed for the callback only; the row must not be freed
         * with receipt_clear(). */
        row.r.extra = (char *)sqlite3_column_blob(st, col);
        row.r.extra_len = (size_t)sqlite3_column_bytes(st, col);
    }
    p->got++;
    return p->cb(p->arg, &row);
}

/* The rows of [lo, hi) that match every filter, newest first (oldest
 * first after an id). Returns 0, 1 when the page is full, or a negative
 * code. */
static int
range(struct page *p, int64_t lo, int64_t hi, struct proto_err *err)
{
    sqlite3_stmt *st = p->rows;
    int rc, done = 0;

    if (p->f->has_before_id && (uint64_t)hi > p->f->before_id)
        hi = store_clamp_i64(p->f->before_id);
    if (p->f->has_after_id && (uint64_t)lo <= p->f->after_id)
        lo = p->f->after_id >= (uint64_t)INT64_MAX
                 ? INT64_MAX
                 : (int64_t)p->f->after_id + 1;
    if (lo >= hi)
        return 0;
    sqlite3_reset(st);
    store_bind_i64(st, ":idlo", lo);
    store_bind_i64(st, ":idhi", hi);
    store_bind_i64(st, ":limit", (int64_t)(p->f->limit - p->got) + 1);
    while (!done && (rc = sqlite3_step(st)) == SQLITE_ROW)
        done = emit(p, st);
    sqlite3_reset(st);
    if (done)
        return done;
    return rc == SQLITE_DONE ? 0 : store_fail(p->s, rc, err, "run a query");
}

/* Reads the posting of (kind, value) in a chunk: NULL when it has none
 * (*rc 0) or on an error (*rc set). */
static roaring_bitmap_t *
posting(struct page *p, int kind, int64_t value, int64_t chunk, int *rc,
        struct proto_err *err)
{
    sqlite3_stmt *st = p->probe;
    roaring_bitmap_t *b = NULL;
    int r;

    *rc = 0;
    sqlite3_bind_int(st, 1, kind);
    sqlite3_bind_int64(st, 2, value);
    sqlite3_bind_int64(st, 3, chunk);
    r = sqlite3_step(st);
    if (r == SQLITE_ROW) {
        b = roaring_bitmap_portable_deserialize_safe(
            sqlite3_column_blob(st, 0), (size_t)sqlite3_column_bytes(st, 0));
        if (b == NULL)
            *rc = proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                                "a posting of chunk %lld is damaged",
                                (long long)chunk);
    } else if (r != SQLITE_DONE) {
        *rc = store_fail(p->s, r, err, "read a posting");
    }
    sqlite3_reset(st);
    return b;
}

/* One chunk as walk_postings() reads it. */
struct chunk_row {
    int64_t first, first_at, last_at;
    int ordered;
};

/* received_at of receipt id; 1 when it is gone (pruned). */
static int
received_at(struct page *p, int64_t id, int64_t *at, struct proto_err *err)
{
    sqlite3_stmt *st = p->at;
    int rc;

    sqlite3_bind_int64(st, 1, id);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *at = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    if (rc == SQLITE_ROW)
        return 0;
    return rc == SQLITE_DONE ? 1 : store_fail(p->s, rc, err, "run a query");
}

/* The first of ids[lo, hi) (offsets from first) received at or after t,
 * by bisection: the chunk keeps received_at in id order. 1 when an id
 * was pruned (the caller then checks every id). */
static int
bisect(struct page *p, int64_t first, const uint32_t *ids, uint64_t lo,
       uint64_t hi, int64_t t, uint64_t *out, struct proto_err *err)
{
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int64_t at = 0;
        int rc = received_at(p, first + ids[mid], &at, err);

        if (rc != 0)
            return rc;
        if (at < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    *out = lo;
    return 0;
}

/* The matches in one chunk: the driver's posting b (taken) intersected
 * with the others', each id then read and checked for the time window.
 * In a chunk whose received_at is in id order, a window's edges inside it
 * are found by bisection first, so that only ids inside it are read. */
static int
chunk(struct page *p, const struct chunk_row *c, roaring_bitmap_t *b,
      struct proto_err *err)
{
    const struct store_filter *f = p->f;
    int64_t first = c->first;
    uint32_t *ids = NULL;
    uint64_t n, i, lo, hi;
    int k, rc = 0;

    for (k = 1; k < p->keys.n && !roaring_bitmap_is_empty(b); k++) {
        roaring_bitmap_t *o =
            posting(p, p->keys.kind[k], p->keys.value[k], first, &rc, err);
        if (rc != 0)
            goto out;
        if (o == NULL) {
            roaring_bitmap_clear(b);
            break;
        }
        roaring_bitmap_and_inplace(b, o);
        roaring_bitmap_free(o);
    }
    n = roaring_bitmap_get_cardinality(b);
    if (n == 0)
        goto out;
    ids = malloc(n * sizeof(*ids));
    if (ids == NULL) {
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        goto out;
    }
    roaring_bitmap_to_uint32_array(b, ids);
    lo = 0;
    hi = n;
    if (c->ordered && f->has_until && c->last_at >= store_clamp_i64(f->until))
        rc = bisect(p, first, ids, 0, n, store_clamp_i64(f->until), &hi, err);
    if (rc == 0 && c->ordered && f->has_since &&
        c->first_at < store_clamp_i64(f->since))
        rc = bisect(p, first, ids, 0, hi, store_clamp_i64(f->since), &lo, err);
    if (rc == 1) {
        lo = 0;
        hi = n;
        rc = 0;
    }
    for (i = 0; i < hi - lo && rc == 0; i++) {
        /* Newest first, or oldest first after an id. */
        int64_t id = first + ids[f->has_after_id ? lo + i : hi - 1 - i];

        /* Each id is a range of one: the same statement checks the time
         * window, and skips an id whose receipt was pruned. */
        rc = range(p, id, id + 1, err);
        if (rc == 0 && store_now_ms() > p->deadline_ms && p->deadline_ms)
            rc = store_fail(p->s, SQLITE_INTERRUPT, err, "run a query");
    }
out:
    free(ids);
    roaring_bitmap_free(b);
    return rc;
}

/* Walks the chunks that hold the first key's value, newest first (oldest
 * first after an id, from the chunk that holds it): each chunk's posting
 * of it is one primary-key lookup (migrations/0008). */
static int
walk_postings(struct page *p, int64_t below, struct proto_err *err)
{
    const struct store_filter *f = p->f;
    sqlite3_stmt *st;
    char sql[512];
    int rc, r = 0;

    snprintf(sql, sizeof(sql),
             "SELECT c.first_id, p.ids, c.first_at, c.last_at, c.ordered "
             "FROM chunks c CROSS JOIN postings p ON p.chunk = c.first_id "
             "AND p.kind = ?1 AND p.value = ?2 WHERE c.first_id < ?3%s%s%s "
             "ORDER BY c.first_id %s",
             f->has_since ? " AND c.last_at >= ?4" : "",
             f->has_until ? " AND c.first_at < ?5" : "",
             f->has_after_id ? " AND c.end_id > ?6" : "",
             f->has_after_id ? "ASC" : "DESC");
    rc = sqlite3_prepare_v2(store_db(p->s), sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(p->s, rc, err, "prepare a query");
    sqlite3_bind_int(st, 1, p->keys.kind[0]);
    sqlite3_bind_int64(st, 2, p->keys.value[0]);
    sqlite3_bind_int64(st, 3, below);
    if (f->has_since)
        sqlite3_bind_int64(st, 4, store_clamp_i64(f->since));
    if (f->has_until)
        sqlite3_bind_int64(st, 5, store_clamp_i64(f->until));
    if (f->has_after_id)
        sqlite3_bind_int64(st, 6, store_clamp_i64(f->after_id) + 1);
    while (r == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        roaring_bitmap_t *b = roaring_bitmap_portable_deserialize_safe(
            sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1));

        if (b == NULL)
            r = proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                              "a posting of chunk %lld is damaged",
                              (long long)sqlite3_column_int64(st, 0));
        else {
            struct chunk_row c = { sqlite3_column_int64(st, 0),
                                   sqlite3_column_int64(st, 2),
                                   sqlite3_column_int64(st, 3),
                                   sqlite3_column_int(st, 4) };

            r = chunk(p, &c, b, err);
        }
    }
    if (r == 0 && rc != SQLITE_DONE && rc != SQLITE_ROW)
        r = store_fail(p->s, rc, err, "run a query");
    sqlite3_finalize(st);
    return r;
}

/* Without key filters: the chunks of the time window are one id range. */
static int
walk_range(struct page *p, int64_t below, struct proto_err *err)
{
    const struct store_filter *f = p->f;
    sqlite3_stmt *st;
    int64_t lo = 0, hi = 0;
    int rc;

    rc = sqlite3_prepare_v2(
        store_db(p->s),
        "SELECT coalesce(min(first_id), 0), coalesce(max(end_id), 0) FROM "
        "chunks WHERE first_id < ?1 AND last_at >= ?2 AND first_at < ?3",
        -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(p->s, rc, err, "prepare a query");
    sqlite3_bind_int64(st, 1, below);
    sqlite3_bind_int64(st, 2, f->has_since ? store_clamp_i64(f->since) : 0);
    sqlite3_bind_int64(st, 3,
                       f->has_until ? store_clamp_i64(f->until) : INT64_MAX);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        lo = sqlite3_column_int64(st, 0);
        hi = sqlite3_column_int64(st, 1);
        rc = SQLITE_DONE;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return store_fail(p->s, rc, err, "run a query");
    return range(p, lo, hi < below ? hi : below, err);
}

/*
 * The newest matches: first the tail (a rowid range of at most about a
 * chunk), then the chunks below it, newest first, through the postings of
 * the key filters, or as one id range when only time bounds the query.
 * After an id, the oldest matches: the chunks first, then the tail.
 */
static int
page(struct page *p, struct proto_err *err)
{
    int64_t tail;
    int none, rc;

    if ((rc = resolve(p->s, p->f, &p->keys, &none, err)) || none)
        return rc;
    if ((rc = store_counter(p->s, "tail_from", 1, &tail, err)))
        return rc;
    if (p->f->has_before_id && p->f->before_id <= (uint64_t)tail)
        tail = store_clamp_i64(p->f->before_id);
    bind_keys(p->rows, &p->keys);
    if (p->f->has_since)
        store_bind_i64(p->rows, ":since", store_clamp_i64(p->f->since));
    if (p->f->has_until)
        store_bind_i64(p->rows, ":until", store_clamp_i64(p->f->until));
    if (p->f->origin)
        store_bind_blob(p->rows, ":origin", p->f->origin, p->f->origin_len);
    if (p->f->has_after_id) {
        rc = p->keys.n == 0 ? walk_range(p, tail, err)
                            : walk_postings(p, tail, err);
        return rc != 0 ? rc : range(p, tail, INT64_MAX, err);
    }
    if ((rc = range(p, tail, INT64_MAX, err)) != 0)
        return rc;
    if (p->keys.n == 0)
        return walk_range(p, tail, err);
    return walk_postings(p, tail, err);
}

int
store_sqlite_query_receipts(struct store *s, const struct store_filter *f,
                            uint64_t deadline_ms, store_row_cb cb, void *arg,
                            int *truncated, struct proto_err *err)
{
    struct page p = {
        .s = s, .f = f, .deadline_ms = deadline_ms, .cb = cb, .arg = arg
    };
    char sql[4096];
    int rc;

    *truncated = 0;
    if (store_query_receipts_sql(sql, sizeof(sql), f) >= sizeof(sql))
        return proto_err_set(err, PROTO_EINVALID, NULL, "query too long");
    rc = sqlite3_prepare_v2(store_db(s), sql, -1, &p.rows, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "prepare a query");
    rc = sqlite3_prepare_v2(store_db(s),
                            "SELECT ids FROM postings WHERE kind = ?1 AND "
                            "value = ?2 AND chunk = ?3",
                            -1, &p.probe, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(
            store_db(s), "SELECT received_at FROM receipts WHERE id = ?1", -1,
            &p.at, NULL);
    if (rc != SQLITE_OK) {
        rc = store_fail(s, rc, err, "prepare a query");
        sqlite3_finalize(p.rows);
        sqlite3_finalize(p.probe);
        sqlite3_finalize(p.at);
        return rc;
    }
    store_deadline_arm(s, deadline_ms);
    /* One read transaction: the tail, the chunks and the postings agree. */
    if ((rc = store_exec(s, "BEGIN", err, "begin a read")) == 0) {
        rc = page(&p, err);
        sqlite3_exec(store_db(s), "COMMIT", NULL, NULL, NULL);
    }
    store_deadline_disarm(s);
    sqlite3_finalize(p.rows);
    sqlite3_finalize(p.probe);
    sqlite3_finalize(p.at);
    if (rc == 1)
        rc = 0;
    *truncated = p.truncated;
    return rc;
}

int
store_sqlite_last_receipt_id(struct store *s, const struct store_filter *f,
                             uint64_t deadline_ms, uint64_t *id,
                             struct proto_err *err)
{
    int64_t v = 0;
    int rc;

    /* One id space: relayed rows take this store's ids. */
    (void)f;
    store_deadline_arm(s, deadline_ms);
    rc = store_one_int(s, "SELECT coalesce(max(id), 0) FROM receipts", NULL, 0,
                       0, 0, &v, err, "run a query");
    store_deadline_disarm(s);
    *id = v > 0 ? (uint64_t)v : 0;
    return rc;
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
store_sqlite_query_stats(struct store *s, uint64_t deadline_ms,
                         struct store_stats *st, struct proto_err *err)
{
    int64_t v;
    int rc;

    memset(st, 0, sizeof(*st));
    store_deadline_arm(s, deadline_ms);
    /* One read transaction, so the figures agree with each other. */
    if ((rc = store_exec(s, "BEGIN", err, "begin a read")))
        goto out;
    if ((rc = store_one_int(s, "SELECT coalesce(max(id), 0) FROM receipts",
                            NULL, 0, 0, 0, &v, err, "run a query")))
        goto end;
    st->last_receipt_id = (uint64_t)v;
    if ((rc = store_one_int(s, "SELECT count(*) FROM quarantine", NULL, 0, 0, 0,
                            &v, err, "run a query")))
        goto end;
    st->quarantined = (uint64_t)v;
    if ((rc = store_counter(s, "quarantine_bytes", 0, &v, err)))
        goto end;
    st->quarantine_bytes = (uint64_t)v;
    if ((rc = store_counter(s, "quarantine_evictions", 0, &v, err)))
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

int
store_query_rows(struct store *s, sqlite3_stmt *st, uint32_t limit,
                 uint64_t deadline_ms, store_row_fn one_cb, void *cb, void *arg,
                 int *truncated, struct proto_err *err)
{
    uint32_t got = 0;
    int rc;

    *truncated = 0;
    store_deadline_arm(s, deadline_ms);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (got == limit) {
            *truncated = 1;
            rc = SQLITE_DONE;
            break;
        }
        got++;
        if ((rc = one_cb(st, cb, arg)) != 0) {
            store_deadline_disarm(s);
            sqlite3_finalize(st);
            return rc;
        }
    }
    if (rc != SQLITE_DONE)
        rc = store_fail(s, rc, err, "run a query");
    else
        rc = 0;
    store_deadline_disarm(s);
    sqlite3_finalize(st);
    return rc;
}
