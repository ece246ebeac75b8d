/*
 * store_query_agg.c: the `fallbacks` and `coverage` aggregates and the
 * `quarantine` rows (store_agg.h); the `gaps` walk is store_query_gaps.c.
 *
 * Runs on a query thread with a read-only store. Each function holds one
 * read transaction, so the rollups and the receipts it reads agree (the
 * writer updates both in one transaction), and arms a progress handler that
 * interrupts SQLite at the deadline. Sums are exact: SQLite adds 64-bit
 * signed integers and fails on overflow, so every sum of counter values is
 * carried here in 128 bits, and u64 extremes (stored as bit patterns) are
 * compared here as unsigned.
 *
 * Time ranges: a rollup covers one day (rollups_day) or one hour (rollups)
 * of received_at. Days wholly inside [since, until) are read from the day
 * rollups, the whole hours around them from the hour rollups, and the
 * partial hours at either end from the receipts (a rowid range found
 * through the chunks), so an answer never depends on where the range cuts
 * a day or an hour, and an unbounded query reads one row per key and day.
 * The rollups cover the receipts below tail_from (migrations/0007); the
 * tail above it, at most about a chunk, is always read from the receipts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_agg.h"
#include "store_internal.h"
#include "store_sqlite.h"
#include "store_rollup.h"
#include "store_row.h"
#include "store_tail.h"

#define ADD(...)                                                               \
    n += (size_t)snprintf(sql + n, n < cap ? cap - n : 0, __VA_ARGS__)

/* The key filters, which rollups and receipts name alike. */
static size_t
add_filters(char *sql, size_t cap, size_t n, const struct store_filter *f)
{
    if (f->plan)
        ADD(" AND plan_id = (SELECT id FROM strings WHERE value = :plan)");
    if (f->graph)
        ADD(" AND graph_id = (SELECT id FROM strings WHERE value = :graph)");
    if (f->model)
        ADD(" AND model_id = (SELECT id FROM strings WHERE value = :model)");
    if (f->source)
        ADD(" AND source_id = (SELECT id FROM strings WHERE value = "
            ":source)");
    if (f->requested >= 0)
        ADD(" AND requested_backend = :requested");
    if (f->executed >= 0)
        ADD(" AND executed_backend = :executed");
    return n;
}

static void
bind_filters(sqlite3_stmt *st, const struct store_filter *f)
{
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
}

/* The column of a string key. */
static const char *const key_cols[STORE_GROUP_COUNT] = {
    [STORE_GROUP_PLAN] = "plan_id",
    [STORE_GROUP_GRAPH] = "graph_id",
    [STORE_GROUP_MODEL] = "model_id",
    [STORE_GROUP_SOURCE] = "source_id",
};

/* The three key columns of a group (k1, k2, k3 of store_agg.h). */
static size_t
add_keys(char *sql, size_t cap, size_t n, int group_by)
{
    const char *col = key_cols[store_group_key(group_by)];

    if (store_group_has_backends(group_by))
        ADD("requested_backend, executed_backend, %s", col ? col : "0");
    else
        ADD("%s, 0, 0", col ? col : "0");
    return n;
}

/* The bucket of a time column (in units of unit ms) as SQL: the start, in
 * unix ms, of the bucket of f->every it falls in; 0 without buckets.
 * every is a whole number of hours (query_agg.c checks), so an hour or a
 * day rollup row falls in one bucket. */
static const char *
bucket_sql(char *buf, size_t cap, const struct store_filter *f, const char *col,
           long long unit)
{
    if (f->every == 0)
        return "0";
    snprintf(buf, cap, "(%s * %lld / %llu * %llu)", col, unit,
             (unsigned long long)f->every, (unsigned long long)f->every);
    return buf;
}

static uint64_t
key_hash(int64_t k1, int64_t k2, int64_t k3, int64_t b)
{
    uint64_t h = (uint64_t)k1 * 0x9e3779b97f4a7c15ull;

    h ^= (uint64_t)k2 + 0x7f4a7c159e3779b9ull + (h << 6) + (h >> 2);
    h ^= (uint64_t)k3 * 0xff51afd7ed558ccdull + (h << 6) + (h >> 2);
    h ^= (uint64_t)b * 0xc2b2ae3d27d4eb4full + (h << 6) + (h >> 2);
    return h ^ (h >> 29);
}

/* Rebuilds the index with room for twice the groups. */
static int
grow(struct store_agg *a)
{
    size_t cap = a->cap ? a->cap * 2 : 16, nslots = cap * 2, i;
    struct store_agg_group *g;
    size_t *slots;

    g = realloc(a->groups, cap * sizeof(*g));
    if (g == NULL)
        return -1;
    a->groups = g;
    slots = malloc(nslots * sizeof(*slots));
    if (slots == NULL)
        return -1;
    for (i = 0; i < nslots; i++)
        slots[i] = SIZE_MAX;
    for (i = 0; i < a->n; i++) {
        size_t j =
            key_hash(g[i].k1, g[i].k2, g[i].k3, g[i].bucket) & (nslots - 1);
        while (slots[j] != SIZE_MAX)
            j = (j + 1) & (nslots - 1);
        slots[j] = i;
    }
    free(a->slots);
    a->slots = slots;
    a->nslots = nslots;
    a->cap = cap;
    return 0;
}

/* The group of (k1, k2, k3) and bucket b, made when new; NULL with err
 * set on failure. */
static struct store_agg_group *
group(struct store_agg *a, int64_t k1, int64_t k2, int64_t k3, int64_t b,
      struct proto_err *err)
{
    struct store_agg_group *g;
    size_t j;

    if (a->n == a->cap) {
        if (a->n >= STORE_AGG_GROUPS_MAX) {
            proto_err_set(err, PROTO_EOVERLOADED, NULL,
                          "more than %d groups (one per bucket with every); "
                          "narrow the filters, group by something coarser or "
                          "take a larger every",
                          STORE_AGG_GROUPS_MAX);
            return NULL;
        }
        if (grow(a) != 0) {
            proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
            return NULL;
        }
    }
    j = key_hash(k1, k2, k3, b) & (a->nslots - 1);
    while (a->slots[j] != SIZE_MAX) {
        g = &a->groups[a->slots[j]];
        if (g->k1 == k1 && g->k2 == k2 && g->k3 == k3 && g->bucket == b)
            return g;
        j = (j + 1) & (a->nslots - 1);
    }
    g = &a->groups[a->n];
    memset(g, 0, sizeof(*g));
    g->k1 = k1;
    g->k2 = k2;
    g->k3 = k3;
    g->bucket = b;
    a->slots[j] = a->n++;
    return g;
}

void
store_agg_free(struct store_agg *a)
{
    size_t i;

    if (a == NULL)
        return;
    for (i = 0; i < a->n; i++)
        free(a->groups[i].name);
    free(a->groups);
    free(a->slots);
    memset(a, 0, sizeof(*a));
}

/* Runs a prepared statement, handing each row to one of the readers. A
 * row is the group's three key columns, the reader's columns (from
 * KEY_COLS), and its bucket last. */
enum reader { READ_COUNTS, READ_ROLLUP, READ_RECEIPT, READ_STATUS };
#define KEY_COLS 3

static int
read_rows(struct store *s, sqlite3_stmt *st, enum reader how,
          struct store_agg *a, struct proto_err *err)
{
    struct store_agg_group *g;
    int rc, i, last = sqlite3_column_count(st) - 1;

    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        g = group(a, sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
                  sqlite3_column_int64(st, 2), sqlite3_column_int64(st, last),
                  err);
        if (g == NULL)
            return err ? err->code : PROTO_ENOMEM;
        if (how == READ_COUNTS) {
            g->receipts += (uint64_t)sqlite3_column_int64(st, KEY_COLS);
            g->fallback += (uint64_t)sqlite3_column_int64(st, KEY_COLS + 1);
            g->clean += (uint64_t)sqlite3_column_int64(st, KEY_COLS + 2);
            g->unproven += (uint64_t)sqlite3_column_int64(st, KEY_COLS + 3);
            g->schema3 += (uint64_t)sqlite3_column_int64(st, KEY_COLS + 4);
        } else if (how == READ_STATUS) {
            int status = sqlite3_column_int(st, KEY_COLS);

            g->receipts++;
            g->fallback += status == RECEIPT_STATUS_FALLBACK;
            g->clean += status == RECEIPT_STATUS_CLEAN;
            g->unproven += status == RECEIPT_STATUS_UNPROVEN;
            g->schema3 += sqlite3_column_int(st, KEY_COLS + 1) == 3;
        } else if (how == READ_ROLLUP) {
            store_rollup_read(st, KEY_COLS, g);
        } else {
            int status = sqlite3_column_int(st, KEY_COLS);
            unsigned schema = (unsigned)sqlite3_column_int(st, KEY_COLS + 1);
            uint64_t bits = (uint64_t)sqlite3_column_int64(st, KEY_COLS + 2) &
                            receipt_meaningful_bits(schema);

            g->receipts++;
            g->fallback += status == RECEIPT_STATUS_FALLBACK;
            g->clean += status == RECEIPT_STATUS_CLEAN;
            g->unproven += status == RECEIPT_STATUS_UNPROVEN;
            g->schema3 += schema == 3;
            if (bits != 0) {
                struct receipt r;

                store_counters_column(st, KEY_COLS + 3, &r);
                for (i = 0; i < RECEIPT_NCOUNTERS; i++)
                    if (bits >> i & 1)
                        store_agg_counter_add(&g->c[i], r.counters[i]);
            }
        }
    }
    if (rc != SQLITE_DONE)
        return store_fail(s, rc, err, "run a query");
    return 0;
}

static int
run_sql(struct store *s, const char *sql, const struct store_filter *f,
        int64_t lo, int64_t hi, int64_t tail,
        const struct store_rollup_merge *m, enum reader how,
        struct store_agg *a, struct proto_err *err)
{
    sqlite3_stmt *st;
    int rc;

    rc = sqlite3_prepare_v2(store_db(s), sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "prepare a query");
    bind_filters(st, f);
    store_bind_i64(st, ":lo", lo);
    store_bind_i64(st, ":hi", hi);
    store_bind_i64(st, ":tail", tail);
    if (m != NULL) {
        store_bind_i64(st, ":rfrom", m->from);
        store_bind_i64(st, ":rend", m->end);
        store_bind_i64(st, ":m1", m->key.plan_id);
        store_bind_i64(st, ":m2", m->key.graph_id);
        store_bind_i64(st, ":m3", m->key.model_id);
        store_bind_i64(st, ":m4", m->key.requested);
        store_bind_i64(st, ":m5", m->key.executed);
        store_bind_i64(st, ":m6", m->key.source_id);
        store_bind_i64(st, ":m7", m->key.received_at / STORE_BUCKET_MS);
    }
    rc = read_rows(s, st, how, a, err);
    sqlite3_finalize(st);
    return rc;
}

/* Which receipts from_receipts() reads. */
enum part {
    PART_ALL,      /* every receipt (STORE_AGG_SCAN) */
    PART_CHUNKED,  /* those below tail_from, which the rollups cover */
    PART_TAIL,     /* those at or above it, which they do not */
    PART_UNMERGED, /* those of the chunks below it that the rollups do not
                    * hold yet: of the ones being merged, those past the
                    * merge's key (migrations/0008), and every one of the
                    * chunks waiting to be sealed (rollup_end) */
    PART_RANGE     /* the ids [m->from, tail) (chunks an edge reads) */
};

/* Receipts with lo <= received_at < hi (no bounds when !bounded). */
static int
from_receipts(struct store *s, const struct store_filter *f, int group_by,
              unsigned flags, enum part part, int bounded, int64_t lo,
              int64_t hi, int64_t tail, const struct store_rollup_merge *m,
              struct store_agg *a, struct proto_err *err)
{
    char sql[4096], bb[96];
    size_t n = 0, cap = sizeof(sql);
    const char *b = bucket_sql(bb, sizeof(bb), f, "received_at", 1);

    /* Rows are added up here, not by GROUP BY: SQLite would sort them in
     * a temporary B-tree first, which took twice as long as reading them
     * (50,000 receipts of an edge: 37 against 9 ms of CPU). */
    ADD("SELECT ");
    n = add_keys(sql, cap, n, group_by);
    if (flags & STORE_AGG_COUNTERS)
        ADD(", status, schema_version, counter_coverage, counters");
    else
        ADD(", status, schema_version");
    ADD(", %s FROM receipts WHERE 1", b);
    if (part == PART_TAIL)
        ADD(" AND id >= :tail");
    if (part == PART_RANGE)
        ADD(" AND id >= :rfrom AND id < :tail");
    if (part == PART_UNMERGED) {
        ADD(" AND id >= :rfrom AND id < :tail");
        if (m->has_key)
            ADD(" AND (id >= :rend OR (plan_id, graph_id, model_id, "
                "requested_backend, executed_backend, source_id, received_at "
                "/ %d) > (:m1, :m2, :m3, :m4, :m5, :m6, :m7))",
                STORE_BUCKET_MS);
    }
    /* An edge is at most an hour of receipts, and the chunks whose times
     * reach into it are one id range (received_at follows the clock), so
     * it is read as a rowid range whatever the other filters. Chunks end
     * below tail_from. */
    if (part == PART_CHUNKED)
        ADD(" AND id >= (SELECT coalesce(min(first_id), 0) FROM chunks "
            "WHERE last_at >= :lo AND first_at < :hi) AND id < (SELECT "
            "coalesce(max(end_id), 0) FROM chunks WHERE last_at >= :lo AND "
            "first_at < :hi)");
    n = add_filters(sql, cap, n, f);
    if (bounded)
        ADD(" AND received_at >= :lo AND received_at < :hi");
    if (n >= cap)
        return proto_err_set(err, PROTO_EINVALID, NULL, "query too long");
    return run_sql(s, sql, f, lo, hi, tail, m,
                   flags & STORE_AGG_COUNTERS ? READ_RECEIPT : READ_STATUS, a,
                   err);
}

/* Rollups of table (rollups, rollups_day) with lo <= bucket < hi. */
static int
from_rollups(struct store *s, const char *table, const struct store_filter *f,
             int group_by, unsigned flags, int64_t lo, int64_t hi,
             struct store_agg *a, struct proto_err *err)
{
    char sql[16384], bb[96];
    size_t n = 0, cap = sizeof(sql);
    const char *b = bucket_sql(bb, sizeof(bb), f, "bucket",
                               strcmp(table, "rollups") == 0 ? STORE_BUCKET_MS
                                                             : STORE_DAY_MS);

    ADD("SELECT ");
    n = add_keys(sql, cap, n, group_by);
    ADD(", ");
    if (flags & STORE_AGG_COUNTERS) {
        if (n < cap)
            n += store_rollup_columns(sql + n, cap - n, "");
        ADD(", %s FROM %s WHERE bucket >= :lo AND bucket < :hi", b, table);
    } else {
        /* Added up here, as from_receipts' rows. */
        ADD("receipts, fallback, clean, unproven, schema3, %s FROM "
            "%s WHERE bucket >= :lo AND bucket < :hi",
            b, table);
    }
    n = add_filters(sql, cap, n, f);
    if (n >= cap)
        return proto_err_set(err, PROTO_EINVALID, NULL, "query too long");
    return run_sql(s, sql, f, lo, hi, 0, NULL,
                   flags & STORE_AGG_COUNTERS ? READ_ROLLUP : READ_COUNTS, a,
                   err);
}

/* Looks up the string of every group's key. */
static int
names(struct store *s, int group_by, struct store_agg *a, struct proto_err *err)
{
    sqlite3_stmt *st;
    size_t i;
    int rc;

    if (!store_group_named(group_by))
        return 0;
    rc = sqlite3_prepare_v2(
        store_db(s), "SELECT value FROM strings WHERE id = ?1", -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "prepare a query");
    for (i = 0; i < a->n; i++) {
        struct store_agg_group *g = &a->groups[i];
        const void *p = "";
        size_t len = 0;

        sqlite3_bind_int64(st, 1,
                           group_by & STORE_GROUP_AND_BACKENDS ? g->k3 : g->k1);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            len = (size_t)sqlite3_column_bytes(st, 0);
            p = sqlite3_column_blob(st, 0);
            rc = SQLITE_DONE;
        }
        if (rc == SQLITE_DONE) {
            g->name = malloc(len + 1);
            if (g->name == NULL) {
                sqlite3_finalize(st);
                return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
            }
            memcpy(g->name, p ? p : "", len);
            g->name[len] = '\0';
            g->name_len = len;
        }
        sqlite3_reset(st);
        if (rc != SQLITE_DONE) {
            rc = store_fail(s, rc, err, "run a query");
            sqlite3_finalize(st);
            return rc;
        }
    }
    sqlite3_finalize(st);
    return 0;
}

/* What a walk over the writer's published sums adds to. */
struct walk {
    struct store_agg *a;
    int group_by;
    unsigned flags;
    int64_t every;  /* buckets of that many ms; 0 = none */
    int64_t ids[4]; /* plan, graph, model, source; 0 = any */
    int requested, executed;
    int64_t lo, hi; /* hour buckets' starts */
    struct proto_err *err;
};

static int
walk_cb(void *arg, const struct store_rollup_key *k,
        const struct store_agg_group *src)
{
    struct walk *w = arg;
    struct store_agg_group *g;
    int64_t k1 = 0, k2 = 0, id = 0;
    int i;

    if ((w->ids[0] && k->plan_id != w->ids[0]) ||
        (w->ids[1] && k->graph_id != w->ids[1]) ||
        (w->ids[2] && k->model_id != w->ids[2]) ||
        (w->ids[3] && k->source_id != w->ids[3]) ||
        (w->requested >= 0 && k->requested != w->requested) ||
        (w->executed >= 0 && k->executed != w->executed) ||
        k->received_at < w->lo || k->received_at >= w->hi)
        return 0;
    switch (store_group_key(w->group_by)) {
    case STORE_GROUP_PLAN:
        id = k->plan_id;
        break;
    case STORE_GROUP_GRAPH:
        id = k->graph_id;
        break;
    case STORE_GROUP_MODEL:
        id = k->model_id;
        break;
    case STORE_GROUP_SOURCE:
        id = k->source_id;
        break;
    default:
        break;
    }
    if (store_group_has_backends(w->group_by)) {
        k1 = k->requested;
        k2 = k->executed;
    } else {
        k1 = id;
        id = 0;
    }
    if ((g = group(w->a, k1, k2, id,
                   w->every ? k->received_at / w->every * w->every : 0,
                   w->err)) == NULL)
        return w->err->code ? w->err->code : PROTO_ENOMEM;
    g->receipts += src->receipts;
    g->fallback += src->fallback;
    g->clean += src->clean;
    g->unproven += src->unproven;
    g->schema3 += src->schema3;
    if (w->flags & STORE_AGG_COUNTERS)
        for (i = 0; i < RECEIPT_NCOUNTERS; i++)
            store_agg_counter_merge(&g->c[i], &src->c[i]);
    return 0;
}

/* Sets w up for a walk over sums of the hours [lo, hi): 0, 1 when a
 * filter's string is one the store never saw (nothing matches), or an
 * error. */
static int
walk_init(struct store *s, const struct store_filter *f, int group_by,
          unsigned flags, int64_t lo, int64_t hi, struct store_agg *a,
          struct walk *w, struct proto_err *err)
{
    const char *names[4] = { f->plan, f->graph, f->model, f->source };
    size_t lens[4] = { f->plan_len, f->graph_len, f->model_len, f->source_len };
    int i, rc;

    memset(w, 0, sizeof(*w));
    w->a = a;
    w->group_by = group_by;
    w->flags = flags;
    w->every = (int64_t)f->every;
    w->requested = f->requested;
    w->executed = f->executed;
    w->lo = lo;
    w->hi = hi;
    w->err = err;
    for (i = 0; i < 4; i++) {
        if (names[i] == NULL)
            continue;
        if ((rc = store_string_id(s, names[i], lens[i], &w->ids[i], err)))
            return rc;
        if (w->ids[i] == 0)
            return 1;
    }
    return 0;
}

/* Whether the chunks' sums (plan, graph, model, backends, hour) can
 * answer f grouped by group_by: all but a source's filter or grouping
 * (thousands of sources would make a chunk's sums as large as its view,
 * so a source's edges read the rows). */
static int
sums_answer(const struct store_filter *f, int group_by)
{
    return !f->source && store_group_key(group_by) != STORE_GROUP_SOURCE;
}

/*
 * The receipts below tail_from with lo <= received_at < hi: an edge of a
 * window, inside one hour, or a whole window (by_chunks). When the query's
 * filters and grouping are on plan, graph, model and backends only (not on
 * the source), the chunks that lie wholly inside [lo, hi) and have sums
 * (migrations/0014, 0017) are read from those,
 * and only the others' rows are read (as one rowid range per run of them); else
 * every chunk whose times reach into [lo, hi) is read from its rows.
 */
static int
edge(struct store *s, const struct store_filter *f, int group_by,
     unsigned flags, int64_t lo, int64_t hi, struct store_agg *a,
     struct proto_err *err)
{
    struct store_rollup_merge run;
    int64_t run_from = -1, run_end = -1;
    sqlite3_stmt *st;
    struct walk w;
    int rc;

    if (!sums_answer(f, group_by))
        return from_receipts(s, f, group_by, flags, PART_CHUNKED, 1, lo, hi, 0,
                             NULL, a, err);
    /* The chunk lies inside [lo, hi): every sum of it counts. */
    if ((rc = walk_init(s, f, group_by, flags, INT64_MIN, INT64_MAX, a, &w,
                        err)) != 0)
        return rc < 0 ? rc : 0;
    /* The figures only for the counters (a column that mostly lies in
     * overflow pages, which the keys and counts before it do not). */
    rc = sqlite3_prepare_v2(
        store_db(s),
        flags & STORE_AGG_COUNTERS
            ? "SELECT c.first_id, c.end_id, c.first_at >= ?1 AND c.last_at "
              "< ?2 AND cs.sums IS NOT NULL, cs.sums, cs.figures FROM chunks "
              "c LEFT JOIN chunk_sums cs ON cs.chunk = c.first_id WHERE "
              "c.last_at >= ?1 AND c.first_at < ?2 ORDER BY c.first_id"
            : "SELECT c.first_id, c.end_id, c.first_at >= ?1 AND c.last_at "
              "< ?2 AND cs.sums IS NOT NULL, cs.sums FROM chunks c LEFT JOIN "
              "chunk_sums cs ON cs.chunk = c.first_id WHERE c.last_at >= ?1 "
              "AND c.first_at < ?2 ORDER BY c.first_id",
        -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "prepare a query");
    sqlite3_bind_int64(st, 1, lo);
    sqlite3_bind_int64(st, 2, hi);
    memset(&run, 0, sizeof(run));
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t first = sqlite3_column_int64(st, 0);
        int64_t end = sqlite3_column_int64(st, 1);

        if (sqlite3_column_int(st, 2)) {
            int fig = flags & STORE_AGG_COUNTERS;

            rc = store_rollup_chunk_sums_walk(
                sqlite3_column_blob(st, 3), (size_t)sqlite3_column_bytes(st, 3),
                fig ? sqlite3_column_blob(st, 4) : NULL,
                fig ? (size_t)sqlite3_column_bytes(st, 4) : 0, walk_cb, &w);
            if (rc != 0)
                break;
            continue;
        }
        /* Rows: chunks without sums next to each other are one range. */
        if (run_end == first) {
            run_end = end;
            continue;
        }
        if (run_from >= 0) {
            run.from = run_from;
            if ((rc = from_receipts(s, f, group_by, flags, PART_RANGE, 1, lo,
                                    hi, run_end, &run, a, err)) != 0)
                break;
        }
        run_from = first;
        run_end = end;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE && rc != 0)
        return rc < 0 ? rc : store_fail(s, rc, err, "run a query");
    if (run_from < 0)
        return 0;
    run.from = run_from;
    return from_receipts(s, f, group_by, flags, PART_RANGE, 1, lo, hi, run_end,
                         &run, a, err);
}

/* The most chunks a window is read from by their sums rather than from
 * the rollups: about 1,000 sums rows cost what a week of hour rows of
 * 200 keys does. And the most bytes of sums (with the counters, of sums
 * and figures) it reads so: about 1 us a key's figures. A chunk's sums
 * hold a key per plan, graph and model: where plans do not fix their
 * graph and model, or at a rate of many chunks an hour with many keys
 * each, the hour rows are fewer. */
#define BY_CHUNKS_MAX       1024
#define BY_CHUNKS_BYTES_MAX (16 << 20)

/*
 * A window [lo, hi) below tail_from read from the chunks' sums alone
 * (and the rows of the chunks at its ends) when they can answer f and
 * the window holds at most BY_CHUNKS_MAX chunks, every one wholly inside
 * it with sums, of at most BY_CHUNKS_BYTES_MAX bytes in all: 1 when done,
 * 0 when the rollups must answer, or an error.
 * A recent window at a low rate has a few chunks but a row per key and
 * hour in the rollups.
 */
static int
by_chunks(struct store *s, const struct store_filter *f, int group_by,
          unsigned flags, int64_t lo, int64_t hi, struct store_agg *a,
          struct proto_err *err)
{
    sqlite3_stmt *st;
    int64_t n = 0, missing = 0, bytes = 0;
    int rc;

    if (!sums_answer(f, group_by))
        return 0;
    /* length() of a blob reads its size, not its overflow pages. */
    rc = sqlite3_prepare_v2(
        store_db(s),
        flags & STORE_AGG_COUNTERS
            ? "SELECT count(*), coalesce(sum(cs.chunk IS NULL AND c.first_at "
              ">= ?1 AND c.last_at < ?2), 0), coalesce(sum(length(cs.sums) + "
              "length(cs.figures)), 0) FROM chunks c LEFT JOIN chunk_sums cs "
              "ON cs.chunk = c.first_id WHERE c.last_at >= ?1 AND c.first_at "
              "< ?2"
            : "SELECT count(*), coalesce(sum(cs.chunk IS NULL AND c.first_at "
              ">= ?1 AND c.last_at < ?2), 0), coalesce(sum(length(cs.sums)), "
              "0) FROM chunks c LEFT JOIN chunk_sums cs ON cs.chunk = "
              "c.first_id WHERE c.last_at >= ?1 AND c.first_at < ?2",
        -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "prepare a query");
    sqlite3_bind_int64(st, 1, lo);
    sqlite3_bind_int64(st, 2, hi);
    if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        n = sqlite3_column_int64(st, 0);
        missing = sqlite3_column_int64(st, 1);
        bytes = sqlite3_column_int64(st, 2);
        rc = SQLITE_DONE;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return store_fail(s, rc, err, "run a query");
    if (n > BY_CHUNKS_MAX || missing > 0 || bytes > BY_CHUNKS_BYTES_MAX)
        return 0;
    return (rc = edge(s, f, group_by, flags, lo, hi, a, err)) ? rc : 1;
}

/* [lo, hi) from hour rollups, and receipts for the partial hours (all
 * below tail_from). */
static int
hours(struct store *s, const struct store_filter *f, int group_by,
      unsigned flags, int64_t lo, int64_t hi, struct store_agg *a,
      struct proto_err *err)
{
    const int64_t H = STORE_BUCKET_MS;
    int64_t fb, eb;
    int rc;

    if (lo >= hi)
        return 0;
    /* Whole hours [fb, eb); fb rounds up, eb down. */
    fb = lo / H + (lo % H != 0);
    eb = hi / H;
    if (fb >= eb)
        return edge(s, f, group_by, flags, lo, hi, a, err);
    if ((rc = from_rollups(s, "rollups", f, group_by, flags, fb, eb, a, err)))
        return rc;
    if (lo < fb * H && (rc = edge(s, f, group_by, flags, lo, fb * H, a, err)))
        return rc;
    if (eb * H < hi && (rc = edge(s, f, group_by, flags, eb * H, hi, a, err)))
        return rc;
    return 0;
}

/*
 * The hour buckets [lo, hi) of the receipts of m the rollups do not hold,
 * from the sums the writer published for this snapshot: 1 when it had
 * them, 0 when the rows must be read instead, or an error.
 */
static int
from_views(struct store *s, const struct store_filter *f, int group_by,
           unsigned flags, int64_t lo, int64_t hi,
           const struct store_rollup_merge *m, struct store_agg *a,
           struct proto_err *err)
{
    struct store_rollup_view *v[STORE_ROLLUP_VIEWS_MAX];
    struct walk w;
    int n, rc;

    if ((rc = walk_init(s, f, group_by, flags, lo, hi, a, &w, err)) != 0)
        return rc;
    if (!store_rollup_views(store_shared_of(s), m, v, &n))
        return 0;
    rc = store_rollup_views_walk(v, n, m, walk_cb, &w);
    store_rollup_views_release(v, n);
    return rc == 0 ? 1 : rc;
}

static int
agg(struct store *s, const struct store_filter *f, int group_by, unsigned flags,
    struct store_agg *a, struct proto_err *err)
{
    const int64_t D = STORE_DAY_MS, H = STORE_BUCKET_MS;
    struct store_rollup_merge m;
    int64_t lo = f->has_since ? store_clamp_i64(f->since) : 0;
    int64_t hi = f->has_until ? store_clamp_i64(f->until) : INT64_MAX;
    int64_t fd, ed, tail, days_from = 0;
    int bounded = f->has_since || f->has_until, rc;

    if (lo >= hi)
        return 0;
    if (flags & STORE_AGG_SCAN)
        return from_receipts(s, f, group_by, flags, PART_ALL, bounded, lo, hi,
                             0, NULL, a, err);
    /* The rollups and the edges cover the receipts below tail_from; the
     * tail, at most about a chunk, is read as it is. */
    if ((rc = store_counter(s, "tail_from", 1, &tail, err)) ||
        (rc = from_receipts(s, f, group_by, flags, PART_TAIL, bounded, lo, hi,
                            tail, NULL, a, err)) ||
        (rc = store_rollup_merge_state(s, &m, err)))
        return rc;
    /* A window of few chunks: from their sums. */
    if (bounded && (rc = by_chunks(s, f, group_by, flags, lo, hi, a, err)))
        return rc < 0 ? rc : 0;
    /* While chunks' sums are merged into the rollups or wait to be, what
     * the rollups do not hold yet of them is read from their rows, for the
     * whole hours of the range: those that the rollups answer (the partial
     * hours at the edges come from the receipts anyway). */
    if (m.from < tail) {
        int64_t wlo = bounded ? (lo / H + (lo % H != 0)) * H : 0;
        int64_t whi = bounded ? hi / H * H : INT64_MAX;

        /* From the sums the writer published when it has them for this
         * read's snapshot, else from the rows. */
        if (wlo < whi &&
            (rc = from_views(s, f, group_by, flags, wlo, whi, &m, a, err)) == 0)
            rc = from_receipts(s, f, group_by, flags, PART_UNMERGED, bounded,
                               wlo, whi, tail, &m, a, err);
        if (rc < 0)
            return rc;
    }
    /* Whole days [fd, ed) from the day rollups, the hours around them from
     * the hour rollups, the rest from the receipts. The day rollups hold
     * the hours below days_from (store_rollup.c): a day past it is read
     * from its hours. */
    if ((rc = store_counter(s, "days_from", 0, &days_from, err)))
        return rc;
    /* A day rollup row falls in one bucket only when the buckets are whole
     * days; else the window (a bounded number of buckets) is read from
     * the hours. */
    if (f->every % D != 0)
        return hours(s, f, group_by, flags, lo, hi, a, err);
    fd = lo / D + (lo % D != 0);
    ed = hi / D;
    if (ed > days_from * STORE_BUCKET_MS / D)
        ed = days_from * STORE_BUCKET_MS / D;
    if (fd >= ed)
        return hours(s, f, group_by, flags, lo, hi, a, err);
    if ((rc = from_rollups(s, "rollups_day", f, group_by, flags, fd, ed, a,
                           err)) ||
        (rc = hours(s, f, group_by, flags, lo, fd * D, a, err)) ||
        (rc = hours(s, f, group_by, flags, ed * D, hi, a, err)))
        return rc;
    return 0;
}

int
store_sqlite_query_agg(struct store *s, const struct store_filter *f,
                       int group_by, unsigned flags, uint64_t deadline_ms,
                       struct store_agg *out, struct proto_err *err)
{
    int rc;

    if (!store_group_valid(group_by))
        return proto_err_set(err, PROTO_EINVALID, "group_by", "unknown group");
    store_deadline_arm(s, deadline_ms);
    if ((rc = store_exec(s, "BEGIN", err, "begin a read")) == 0) {
        rc = agg(s, f, group_by, flags, out, err);
        if (rc == 0)
            rc = names(s, group_by, out, err);
        sqlite3_exec(store_db(s), "COMMIT", NULL, NULL, NULL);
    }
    store_deadline_disarm(s);
    return rc;
}

/* ---- quarantine ---- */

static void
column_text(sqlite3_stmt *st, int col, struct proto_str *out)
{
    out->ptr = (const char *)sqlite3_column_blob(st, col);
    out->len = (size_t)sqlite3_column_bytes(st, col);
    if (out->ptr == NULL)
        out->ptr = "";
}

struct qrow_ctx {
    store_qrow_cb cb;
    int with_raw;
};

static int
qrow_cb(sqlite3_stmt *st, void *ctx, void *arg)
{
    const struct qrow_ctx *qc = ctx;
    struct store_qrow q;

    memset(&q, 0, sizeof(q));
    q.id = sqlite3_column_int64(st, 0);
    q.received_at = sqlite3_column_int64(st, 1);
    column_text(st, 2, &q.source);
    column_text(st, 3, &q.op);
    column_text(st, 4, &q.code);
    column_text(st, 5, &q.path);
    column_text(st, 6, &q.message);
    q.size = (uint64_t)sqlite3_column_int64(st, 7);
    q.attempts = (uint64_t)sqlite3_column_int64(st, 8);
    q.last_attempt_at = sqlite3_column_int64(st, 9);
    if (qc->with_raw) {
        q.raw = sqlite3_column_blob(st, 10);
        q.raw_len = (size_t)sqlite3_column_bytes(st, 10);
        if (q.raw == NULL)
            q.raw = "";
    }
    return qc->cb(arg, &q);
}

int
store_sqlite_query_quarantine(struct store *s, const struct store_filter *f,
                              int has_id, uint64_t id, int with_raw,
                              uint64_t deadline_ms, store_qrow_cb cb, void *arg,
                              int *truncated, struct proto_err *err)
{
    char sql[1024];
    size_t n = 0, cap = sizeof(sql);
    struct qrow_ctx qc;
    sqlite3_stmt *st;
    int rc;

    *truncated = 0;
    ADD("SELECT q.id, q.received_at, src.value, q.op, q.code, q.path, "
        "q.message, q.size, q.attempts, coalesce(q.last_attempt_at, "
        "q.received_at)%s FROM quarantine q JOIN strings src ON src.id = "
        "q.source_id WHERE 1",
        with_raw ? ", q.raw" : "");
    if (has_id)
        ADD(" AND q.id = :id");
    if (f->source)
        ADD(" AND q.source_id = (SELECT id FROM strings WHERE value = "
            ":source)");
    if (f->has_since)
        ADD(" AND q.received_at >= :since");
    if (f->has_until)
        ADD(" AND q.received_at < :until");
    ADD(" ORDER BY q.id DESC LIMIT :limit");
    if (n >= cap)
        return proto_err_set(err, PROTO_EINVALID, NULL, "query too long");
    rc = sqlite3_prepare_v2(store_db(s), sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "prepare a query");
    store_bind_i64(st, ":id", store_clamp_i64(id));
    if (f->source)
        store_bind_blob(st, ":source", f->source, f->source_len);
    store_bind_i64(st, ":since", store_clamp_i64(f->since));
    store_bind_i64(st, ":until", store_clamp_i64(f->until));
    store_bind_i64(st, ":limit", (int64_t)f->limit + 1);
    qc.cb = cb;
    qc.with_raw = with_raw;
    return store_query_rows(s, st, f->limit, deadline_ms, qrow_cb, &qc, arg,
                            truncated, err);
}
#undef ADD
