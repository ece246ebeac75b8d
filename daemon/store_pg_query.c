/*
 * store_pg_query.c: the PostgreSQL backend's queries (store_pg.h), each
 * in one read transaction of a query thread's read-only connection,
 * bounded by statement_timeout from the deadline. Results come in
 * PostgreSQL's binary format, so integers and arrays are read exactly.
 *
 * The aggregates read whole hours from rollup_hours and the sums not
 * merged into it yet (rollup_pending, in the same statement: one snapshot
 * counts each receipt once) and the receipts of the partial hours at the
 * edges of the range from receipts, as the SQLite store does, and add
 * them up here, in C.
 */
#include "store_pg.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOUR_MS INT64_C(3600000)

/* Query parameters: text values, each NUL-terminated in its own slot. */
struct params {
    const char *v[16];
    int len[16], fmt[16];
    char num[16][24];
    int n;
};

static int
param_str(struct params *pa, const char *p, size_t n)
{
    pa->v[pa->n] = p != NULL ? p : "";
    pa->len[pa->n] = (int)n;
    pa->fmt[pa->n] = 1;
    return ++pa->n;
}

static int
param_i64(struct params *pa, int64_t v)
{
    snprintf(pa->num[pa->n], sizeof(pa->num[0]), "%" PRId64, v);
    pa->v[pa->n] = pa->num[pa->n];
    pa->len[pa->n] = 0;
    pa->fmt[pa->n] = 0;
    return ++pa->n;
}

/* BEGIN with a statement_timeout from deadline_ms (0 = none). */
static int
read_begin(struct store_pg *p, uint64_t deadline_ms, struct proto_err *err)
{
    char sql[80];
    uint64_t now = store_now_ms();
    int rc;

    if ((rc = store_pg_begin(p, err)))
        return rc;
    if (deadline_ms == 0)
        return 0;
    if (now >= deadline_ms)
        return proto_err_set(err, PROTO_EOVERLOADED, NULL,
                             "the query ran past query_timeout_ms; narrow it "
                             "with filters or a time range");
    snprintf(sql, sizeof(sql), "SET LOCAL statement_timeout = %" PRIu64,
             deadline_ms - now);
    return store_pg_exec(p, sql, err, "set the query's deadline");
}

static void
read_end(struct store_pg *p)
{
    PQclear(PQexec(p->pc, "COMMIT"));
    p->broken = 0;
}

/* Runs sql with pa, binary results; NULL with err set on failure. */
static PGresult *
run(struct store_pg *p, const char *sql, struct params *pa,
    struct proto_err *err)
{
    PGresult *r =
        PQexecParams(p->pc, sql, pa->n, NULL, pa->v, pa->len, pa->fmt, 1);

    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        store_pg_fail(p, r, err, "run a query");
        PQclear(r);
        return NULL;
    }
    return r;
}

/* A bigint[] in the binary array format into v[0, max), the rest 0. */
void
store_pg_get_i64s(PGresult *r, int row, int col, uint64_t *v, unsigned max)
{
    const char *b = PQgetvalue(r, row, col);
    int len = PQgetlength(r, row, col), n, i;

    memset(v, 0, max * sizeof(*v));
    if (PQgetisnull(r, row, col) || len < 12 || store_pg_i32(b) != 1 ||
        len < 20)
        return;
    n = store_pg_i32(b + 12);
    b += 20;
    len -= 20;
    for (i = 0; i < n && len >= 4; i++) {
        int el = store_pg_i32(b);

        b += 4;
        len -= 4;
        if (el == 8 && len >= 8 && (unsigned)i < max)
            v[i] = (uint64_t)store_pg_i64(b);
        if (el > 0) {
            b += el;
            len -= el;
        }
    }
}

static struct proto_str
get_str(PGresult *r, int row, int col)
{
    struct proto_str s = { PQgetvalue(r, row, col),
                           (size_t)PQgetlength(r, row, col) };
    return s;
}

/*
 * The loop of a query of rows: runs sql (asking for limit + 1 rows) in a
 * read transaction under the deadline, calls one(r, i, cb, arg) for each
 * of the first limit rows and sets *truncated when there was one more.
 * Returns 0, one's non-zero return, or an error.
 */
typedef int (*pg_row_fn)(PGresult *r, int i, void *cb, void *arg);

static int
query_rows(struct store_pg *p, const char *sql, struct params *pa,
           uint32_t limit, uint64_t deadline_ms, pg_row_fn one, void *cb,
           void *arg, int *truncated, struct proto_err *err)
{
    PGresult *r = NULL;
    int rc, i, rows;

    *truncated = 0;
    if ((rc = read_begin(p, deadline_ms, err)))
        goto out;
    if ((r = run(p, sql, pa, err)) == NULL) {
        rc = err->code;
        goto out;
    }
    rows = PQntuples(r);
    for (i = 0; i < rows && rc == 0; i++) {
        if ((uint32_t)i == limit) {
            *truncated = 1;
            break;
        }
        rc = one(r, i, cb, arg);
    }
out:
    PQclear(r);
    read_end(p);
    return rc;
}

/* ---- receipts ---- */

/* The filters of f as SQL conditions on receipts r, their values in pa. */
static size_t
where(char *sql, size_t cap, size_t n, const struct store_filter *f,
      struct params *pa)
{
#define ADD(...)                                                               \
    n += (size_t)snprintf(sql + n, n < cap ? cap - n : 0, __VA_ARGS__)
    ADD(" WHERE true");
    if (f->plan)
        ADD(" AND r.plan = convert_from($%d::bytea, 'UTF8')",
            param_str(pa, f->plan, f->plan_len));
    if (f->graph)
        ADD(" AND r.graph = convert_from($%d::bytea, 'UTF8')",
            param_str(pa, f->graph, f->graph_len));
    if (f->model)
        ADD(" AND r.model = convert_from($%d::bytea, 'UTF8')",
            param_str(pa, f->model, f->model_len));
    if (f->source)
        ADD(" AND r.source = convert_from($%d::bytea, 'UTF8')",
            param_str(pa, f->source, f->source_len));
    if (f->requested >= 0)
        ADD(" AND r.requested_backend = $%d::smallint",
            param_i64(pa, f->requested));
    if (f->executed >= 0)
        ADD(" AND r.executed_backend = $%d::smallint",
            param_i64(pa, f->executed));
    return n;
#undef ADD
}

static int
receipt_row(PGresult *r, int i, void *cb, void *arg)
{
    struct store_row row;

    memset(&row, 0, sizeof(row));
    row.receipt_id = store_pg_i64(PQgetvalue(r, i, 0));
    row.received_at = store_pg_i64(PQgetvalue(r, i, 1));
    row.source = get_str(r, i, 2);
    row.has_seq = !PQgetisnull(r, i, 3);
    row.seq = row.has_seq ? (uint64_t)store_pg_i64(PQgetvalue(r, i, 3)) : 0;
    row.status = store_pg_i16(PQgetvalue(r, i, 4));
    row.r.schema_version = (uint16_t)store_pg_i16(PQgetvalue(r, i, 5));
    row.r.requested_backend = (uint8_t)store_pg_i16(PQgetvalue(r, i, 6));
    row.r.executed_backend = (uint8_t)store_pg_i16(PQgetvalue(r, i, 7));
    row.r.model_instance_id = get_str(r, i, 8);
    row.r.prepared_plan_id = get_str(r, i, 9);
    row.r.graph_hash = get_str(r, i, 10);
    row.r.tuning_profile = get_str(r, i, 11);
    row.r.stop_reason = get_str(r, i, 12);
    row.r.counter_coverage = (uint64_t)store_pg_i64(PQgetvalue(r, i, 13));
    store_pg_get_i64s(r, i, 14, row.r.counters, RECEIPT_NCOUNTERS);
    store_pg_get_i64s(r, i, 15, row.r.artifacts, RECEIPT_NARTIFACTS);
    if (!PQgetisnull(r, i, 16)) {
        row.r.extra = PQgetvalue(r, i, 16);
        row.r.extra_len = (size_t)PQgetlength(r, i, 16);
    }
    return ((store_row_cb)cb)(arg, &row);
}

int
store_pg_query_receipts(struct store *s, const struct store_filter *f,
                        uint64_t deadline_ms, store_row_cb cb, void *arg,
                        int *truncated, struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    struct params pa = { 0 };
    char sql[1536];
    size_t n;

    n = (size_t)snprintf(
        sql, sizeof(sql),
        "SELECT r.id, r.received_at, r.source, r.seq, r.status, "
        "r.schema_version, r.requested_backend, r.executed_backend, r.model, "
        "r.plan, r.graph, r.tuning, r.stop_reason, r.counter_coverage, "
        "r.counters, r.artifacts, r.extra FROM receipts r");
    n = where(sql, sizeof(sql), n, f, &pa);
#define ADD(...)                                                               \
    n += (size_t)snprintf(sql + n, n < sizeof(sql) ? sizeof(sql) - n : 0,      \
                          __VA_ARGS__)
    if (f->status >= 0)
        ADD(" AND r.status = $%d::smallint", param_i64(&pa, f->status));
    if (f->has_since)
        ADD(" AND r.received_at >= $%d::bigint",
            param_i64(&pa, store_pg_clamp(f->since)));
    if (f->has_until)
        ADD(" AND r.received_at < $%d::bigint",
            param_i64(&pa, store_pg_clamp(f->until)));
    if (f->has_before_id)
        ADD(" AND r.id < $%d::bigint",
            param_i64(&pa, store_pg_clamp(f->before_id)));
    if (f->has_after_id)
        ADD(" AND r.id > $%d::bigint",
            param_i64(&pa, store_pg_clamp(f->after_id)));
    /* The receipts a node relayed ('' for those sent here directly).
     * After an id without an origin, the center's own: relayed rows keep
     * their node's ids, so one id cursor spans one origin. */
    if (f->origin)
        ADD(" AND r.origin = convert_from($%d::bytea, 'UTF8')",
            param_str(&pa, f->origin, f->origin_len));
    else if (f->has_after_id)
        ADD(" AND r.origin = ''");
    /* Newest first, or oldest first after an id. */
    ADD(" ORDER BY r.id %s LIMIT %u", f->has_after_id ? "ASC" : "DESC",
        f->limit + 1);
#undef ADD
    return query_rows(p, sql, &pa, f->limit, deadline_ms, receipt_row, cb, arg,
                      truncated, err);
}

/* The first column of sql's first row (a bigint, binary), dflt when
 * there is none or it is NULL. */
static int
one_i64(struct store_pg *p, const char *sql, struct params *pa, int64_t dflt,
        int64_t *v, struct proto_err *err)
{
    PGresult *r = run(p, sql, pa, err);

    if (r == NULL)
        return err->code;
    *v = PQntuples(r) > 0 && !PQgetisnull(r, 0, 0)
             ? store_pg_i64(PQgetvalue(r, 0, 0))
             : dflt;
    PQclear(r);
    return 0;
}

int
store_pg_last_receipt_id(struct store *s, const struct store_filter *f,
                         uint64_t deadline_ms, uint64_t *id,
                         struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    struct params pa = { 0 };
    int64_t v = 0;
    int rc;

    /* Relayed rows keep their node's ids: one origin's ids at a time. */
    if ((rc = read_begin(p, deadline_ms, err)) == 0) {
        char sql[128];

        snprintf(sql, sizeof(sql),
                 "SELECT max(id) FROM receipts WHERE origin = "
                 "convert_from($%d::bytea, 'UTF8')",
                 param_str(&pa, f->origin ? f->origin : "",
                           f->origin ? f->origin_len : 0));
        rc = one_i64(p, sql, &pa, 0, &v, err);
    }
    read_end(p);
    *id = v > 0 ? (uint64_t)v : 0;
    return rc;
}

int
store_pg_query_stats(struct store *s, uint64_t deadline_ms,
                     struct store_stats *st, struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    struct params pa = { 0 };
    int64_t v[4];
    int rc;

    memset(st, 0, sizeof(*st));
    if ((rc = read_begin(p, deadline_ms, err)) ||
        (rc = one_i64(p, "SELECT max(id) FROM receipts WHERE origin = ''", &pa,
                      0, &v[0], err)) ||
        (rc = one_i64(p, "SELECT count(*) FROM quarantine", &pa, 0, &v[1],
                      err)) ||
        (rc = one_i64(p, "SELECT sum(length(raw))::bigint FROM quarantine", &pa,
                      0, &v[2], err)) ||
        (rc = one_i64(p, "SELECT pg_database_size(current_database())", &pa, 0,
                      &v[3], err)))
        goto out;
    st->last_receipt_id = (uint64_t)v[0];
    st->quarantined = (uint64_t)v[1];
    st->quarantine_bytes = (uint64_t)v[2];
    st->size_bytes = (uint64_t)v[3];
out:
    read_end(p);
    return rc;
}

/* ---- fallbacks and coverage ---- */

/* The groups of one query, found by their key's string. */
struct names {
    size_t *slots; /* index into the store_agg's groups, or SIZE_MAX */
    size_t nslots;
};

static uint64_t
name_hash(const char *p, size_t n, int64_t k1, int64_t k2)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)k1 * 31 ^ (uint64_t)k2;
    size_t i;

    for (i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

static int
names_grow(struct names *nm, const struct store_agg *a)
{
    size_t nslots = nm->nslots ? nm->nslots * 2 : 64, i;
    size_t *slots = malloc(nslots * sizeof(*slots));

    if (slots == NULL)
        return -1;
    for (i = 0; i < nslots; i++)
        slots[i] = SIZE_MAX;
    for (i = 0; i < a->n; i++) {
        const struct store_agg_group *g = &a->groups[i];
        size_t j = name_hash(g->name ? g->name : "", g->name_len, g->k1,
                             g->k2 ^ g->bucket * 31) &
                   (nslots - 1);

        while (slots[j] != SIZE_MAX)
            j = (j + 1) & (nslots - 1);
        slots[j] = i;
    }
    free(nm->slots);
    nm->slots = slots;
    nm->nslots = nslots;
    return 0;
}

/* The group named (name, k1, k2) of bucket b, made when new. */
static struct store_agg_group *
group(struct store_agg *a, struct names *nm, int named, struct proto_str name,
      int64_t k1, int64_t k2, int64_t b, struct proto_err *err)
{
    struct store_agg_group *g;
    size_t j;

    if ((a->n + 1) * 2 > nm->nslots && names_grow(nm, a) != 0)
        goto nomem;
    j = name_hash(name.ptr, name.len, k1, k2 ^ b * 31) & (nm->nslots - 1);
    while (nm->slots[j] != SIZE_MAX) {
        g = &a->groups[nm->slots[j]];
        if (g->k1 == k1 && g->k2 == k2 && g->bucket == b &&
            g->name_len == name.len &&
            (name.len == 0 || memcmp(g->name, name.ptr, name.len) == 0))
            return g;
        j = (j + 1) & (nm->nslots - 1);
    }
    if (a->n >= STORE_AGG_GROUPS_MAX) {
        proto_err_set(err, PROTO_EOVERLOADED, NULL,
                      "more than %d groups (one per bucket with every); "
                      "narrow the filters, group by something coarser or "
                      "take a larger every",
                      STORE_AGG_GROUPS_MAX);
        return NULL;
    }
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        struct store_agg_group *ng = realloc(a->groups, cap * sizeof(*ng));

        if (ng == NULL)
            goto nomem;
        a->groups = ng;
        a->cap = cap;
    }
    g = &a->groups[a->n];
    memset(g, 0, sizeof(*g));
    g->k1 = k1;
    g->k2 = k2;
    g->bucket = b;
    if (named) {
        if ((g->name = malloc(name.len + 1)) == NULL)
            goto nomem;
        memcpy(g->name, name.ptr, name.len);
        g->name[name.len] = '\0';
        g->name_len = name.len;
    }
    nm->slots[j] = a->n++;
    return g;
nomem:
    proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    return NULL;
}

static const char *const group_cols[STORE_GROUP_COUNT] = {
    [STORE_GROUP_NONE] = "''",       [STORE_GROUP_PLAN] = "r.plan",
    [STORE_GROUP_GRAPH] = "r.graph", [STORE_GROUP_MODEL] = "r.model",
    [STORE_GROUP_BACKENDS] = "''",   [STORE_GROUP_SOURCE] = "r.source",
};

/* Reads a numeric in binary form (base 10000 digits) as an unsigned
 * 128-bit integer; a NULL or a negative or fractional one is 0. */
static unsigned __int128
get_numeric(const char *b, int len)
{
    unsigned __int128 v = 0;
    int ndigits, weight, sign, i;

    if (len < 8)
        return 0;
    ndigits = store_pg_i16(b);
    weight = store_pg_i16(b + 2);
    sign = (uint16_t)store_pg_i16(b + 4);
    if (sign != 0 || len < 8 + 2 * ndigits)
        return 0;
    for (i = 0; i <= weight; i++)
        v = v * 10000 +
            (unsigned)(i < ndigits ? (uint16_t)store_pg_i16(b + 8 + 2 * i) : 0);
    return v;
}

/* A numeric[] in binary form into v[0, max) and which elements were not
 * NULL into has. */
void
store_pg_get_numerics(PGresult *r, int row, int col, unsigned __int128 *v,
                      int *has, unsigned max)
{
    const char *b = PQgetvalue(r, row, col);
    int len = PQgetlength(r, row, col), n, i;

    memset(v, 0, max * sizeof(*v));
    memset(has, 0, max * sizeof(*has));
    if (PQgetisnull(r, row, col) || len < 20 || store_pg_i32(b) != 1)
        return;
    n = store_pg_i32(b + 12);
    b += 20;
    len -= 20;
    for (i = 0; i < n && len >= 4; i++) {
        int el = store_pg_i32(b);

        b += 4;
        len -= 4;
        if (el >= 0 && el <= len && (unsigned)i < max) {
            v[i] = get_numeric(b, el);
            has[i] = 1;
        }
        if (el > 0) {
            b += el;
            len -= el;
        }
    }
}

/* The group of row i of r (its key's string, requested and executed
 * backends, and its bucket in the last column). A named group's k1 (k3
 * in a pair, whose k1 and k2 are the backends) is its name's hash, the
 * same in every query, so that two answers can be matched group by
 * group. */
static struct store_agg_group *
row_group(PGresult *r, int i, int named, int backends, struct store_agg *a,
          struct names *nm, struct proto_err *err)
{
    struct proto_str name = get_str(r, i, 0);
    int64_t k1 = store_pg_i16(PQgetvalue(r, i, 1));
    int64_t k2 = store_pg_i16(PQgetvalue(r, i, 2));
    int64_t b = store_pg_i64(PQgetvalue(r, i, PQnfields(r) - 1));
    int64_t h = named ? (int64_t)(name_hash(name.ptr, name.len, 0, 0) >> 1) : 0;
    struct store_agg_group *g;

    if (named && !backends)
        k1 = h;
    if ((g = group(a, nm, named, name, k1, k2, b, err)) != NULL && backends)
        g->k3 = h;
    return g;
}

/* Adds rollup rows (group key, k1, k2, receipts, fallback, clean,
 * unproven, measured, sum, min, max, schema3, and a pending row's sums
 * blob instead of the four arrays) to a. */
static int
add_rollups(PGresult *r, int named, int backends, unsigned flags,
            struct store_agg *a, struct names *nm, struct proto_err *err)
{
    int i, rows = PQntuples(r);

    for (i = 0; i < rows; i++) {
        struct store_agg_group *g =
            row_group(r, i, named, backends, a, nm, err);
        uint64_t measured[RECEIPT_NCOUNTERS];
        unsigned __int128 sum[RECEIPT_NCOUNTERS], mn[RECEIPT_NCOUNTERS],
            mx[RECEIPT_NCOUNTERS];
        int has[RECEIPT_NCOUNTERS];
        unsigned b;

        if (g == NULL)
            return err->code;
        g->receipts += (uint64_t)store_pg_i64(PQgetvalue(r, i, 3));
        g->fallback += (uint64_t)store_pg_i64(PQgetvalue(r, i, 4));
        g->clean += (uint64_t)store_pg_i64(PQgetvalue(r, i, 5));
        g->unproven += (uint64_t)store_pg_i64(PQgetvalue(r, i, 6));
        g->schema3 += (uint64_t)store_pg_i64(PQgetvalue(r, i, 11));
        if (!(flags & STORE_AGG_COUNTERS))
            continue;
        if (!PQgetisnull(r, i, 12)) { /* a pending row's blob */
            if (store_pg_sums_add(PQgetvalue(r, i, 12), PQgetlength(r, i, 12),
                                  g->c) != 0)
                return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                                     "a pending rollup row's sums are "
                                     "malformed");
            continue;
        }
        store_pg_get_i64s(r, i, 7, measured, RECEIPT_NCOUNTERS);
        store_pg_get_numerics(r, i, 8, sum, has, RECEIPT_NCOUNTERS);
        store_pg_get_numerics(r, i, 9, mn, has, RECEIPT_NCOUNTERS);
        store_pg_get_numerics(r, i, 10, mx, has, RECEIPT_NCOUNTERS);
        for (b = 0; b < RECEIPT_NCOUNTERS; b++) {
            struct store_agg_counter c;

            if (measured[b] == 0)
                continue;
            c.measured = measured[b];
            c.sum_lo = (uint64_t)sum[b];
            c.sum_hi = (uint64_t)(sum[b] >> 64);
            c.min = (uint64_t)mn[b];
            c.max = (uint64_t)mx[b];
            store_agg_counter_merge(&g->c[b], &c);
        }
    }
    return 0;
}

/* Adds receipt rows (group key, k1, k2, status, coverage, counters,
 * schema version). */
static int
add_receipts(PGresult *r, int named, int backends, unsigned flags,
             struct store_agg *a, struct names *nm, struct proto_err *err)
{
    int i, rows = PQntuples(r);

    for (i = 0; i < rows; i++) {
        struct store_agg_group *g =
            row_group(r, i, named, backends, a, nm, err);
        uint64_t counters[RECEIPT_NCOUNTERS], coverage;
        int status;
        unsigned b;

        if (g == NULL)
            return err->code;
        status = store_pg_i16(PQgetvalue(r, i, 3));
        g->receipts++;
        g->fallback += status == RECEIPT_STATUS_FALLBACK;
        g->clean += status == RECEIPT_STATUS_CLEAN;
        g->unproven += status == RECEIPT_STATUS_UNPROVEN;
        g->schema3 += store_pg_i16(PQgetvalue(r, i, 6)) == 3;
        if (!(flags & STORE_AGG_COUNTERS))
            continue;
        coverage = (uint64_t)store_pg_i64(PQgetvalue(r, i, 4)) &
                   receipt_meaningful_bits(
                       (unsigned)store_pg_i16(PQgetvalue(r, i, 6)));
        store_pg_get_i64s(r, i, 5, counters, RECEIPT_NCOUNTERS);
        for (b = 0; b < RECEIPT_NCOUNTERS; b++)
            if (coverage >> b & 1)
                store_agg_counter_add(&g->c[b], counters[b]);
    }
    return 0;
}

int
store_pg_query_agg(struct store *s, const struct store_filter *f, int group_by,
                   unsigned flags, uint64_t deadline_ms, struct store_agg *out,
                   struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    struct names nm = { NULL, 0 };
    struct params pa = { 0 };
    int named = store_group_named(group_by);
    int backends = store_group_has_backends(group_by);
    int64_t since = f->has_since ? store_pg_clamp(f->since) : INT64_MIN;
    int64_t until = f->has_until ? store_pg_clamp(f->until) : INT64_MAX;
    int64_t h0, h1; /* whole hours [h0, h1) come from the rollups */
    char sql[4096], base[1024], kk[128], hb[96], rb[96];
    PGresult *r = NULL;
    size_t n;
    int rc, np;

    if (!store_group_valid(group_by))
        return proto_err_set(err, PROTO_EINVALID, "group_by",
                             "no such grouping");
    /* The first whole hour at or after since, the last before until. */
    h0 = since == INT64_MIN
             ? INT64_MIN / HOUR_MS
             : (since >= 0 ? (since + HOUR_MS - 1) / HOUR_MS : since / HOUR_MS);
    h1 = until == INT64_MAX
             ? INT64_MAX / HOUR_MS
             : (until >= 0 ? until / HOUR_MS : (until - HOUR_MS + 1) / HOUR_MS);
    if (flags & STORE_AGG_SCAN || h0 >= h1)
        h0 = h1 = 0; /* every receipt from the rows */
    snprintf(kk, sizeof(kk), "%s, %s, %s",
             group_cols[store_group_key(group_by)],
             backends ? "r.requested_backend" : "0::smallint",
             backends ? "r.executed_backend" : "0::smallint");
    /* The bucket of a row, last: the start of its bucket of f->every in
     * unix ms (a whole number of hours, so an hour row falls in one). */
    if (f->every != 0) {
        snprintf(hb, sizeof(hb), "r.hour * %lld / %llu * %llu",
                 (long long)HOUR_MS, (unsigned long long)f->every,
                 (unsigned long long)f->every);
        snprintf(rb, sizeof(rb), "r.received_at / %llu * %llu",
                 (unsigned long long)f->every, (unsigned long long)f->every);
    } else {
        strcpy(hb, "0::bigint");
        strcpy(rb, "0::bigint");
    }
    n = where(base, sizeof(base), 0, f, &pa);
    (void)n;
    np = pa.n;
    if ((rc = read_begin(p, deadline_ms, err)))
        goto out;
    if (h0 < h1) {
        /* The merged rows and the pending ones in one statement: one
         * snapshot, in which a merge's rows are in one table or the
         * other. */
        snprintf(sql, sizeof(sql),
                 "SELECT %s, r.receipts, r.fallback, r.clean, r.unproven, "
                 "r.measured, r.sum, r.min, r.max, r.schema3, NULL::bytea, "
                 "%s FROM rollup_hours r%s AND r.hour >= $%d::bigint AND "
                 "r.hour < $%d::bigint UNION ALL SELECT %s, r.receipts, "
                 "r.fallback, r.clean, r.unproven, NULL::bigint[], "
                 "NULL::numeric[], NULL::numeric[], NULL::numeric[], "
                 "r.schema3, r.sums, %s FROM rollup_pending r%s AND r.hour >= "
                 "$%d::bigint AND r.hour < $%d::bigint",
                 kk, hb, base, np + 1, np + 2, kk, hb, base, np + 1, np + 2);
        param_i64(&pa, h0);
        param_i64(&pa, h1);
        if ((r = run(p, sql, &pa, err)) == NULL ||
            (rc = add_rollups(r, named, backends, flags, out, &nm, err)))
            goto fail;
        PQclear(r);
        r = NULL;
    }
    /* The receipts outside [h0, h1): all of them when no hour is whole. */
    pa.n = np;
    snprintf(sql, sizeof(sql),
             "SELECT %s, r.status, r.counter_coverage, r.counters, "
             "r.schema_version, %s FROM "
             "receipts r%s AND r.received_at >= $%d::bigint AND "
             "r.received_at < $%d::bigint AND (r.received_at < $%d::bigint OR "
             "r.received_at >= $%d::bigint)",
             kk, rb, base, np + 1, np + 2, np + 3, np + 4);
    param_i64(&pa, since);
    param_i64(&pa, until);
    param_i64(&pa, h0 < h1 ? h0 * HOUR_MS : INT64_MAX);
    param_i64(&pa, h0 < h1 ? h1 * HOUR_MS : INT64_MIN);
    if ((r = run(p, sql, &pa, err)) == NULL ||
        (rc = add_receipts(r, named, backends, flags, out, &nm, err)))
        goto fail;
    goto out;
fail:
    rc = err->code ? err->code : PROTO_EUNAVAILABLE;
out:
    PQclear(r);
    free(nm.slots);
    read_end(p);
    return rc;
}

/* ---- gaps ---- */

struct gap_src {
    char *source;
    size_t len;
    uint64_t first, last, received, missing;
    int has_last_received;
    int64_t last_received_at;
};

static int
cmp_gaps(const void *a, const void *b)
{
    const struct gap_src *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c;

    if (x->missing != y->missing)
        return x->missing > y->missing ? -1 : 1;
    if ((c = memcmp(x->source, y->source, n)) != 0)
        return c;
    return (x->len > y->len) - (x->len < y->len);
}

int
store_pg_query_gaps(struct store *s, const struct store_filter *f,
                    const struct store_gap_select *sel, uint64_t deadline_ms,
                    store_gap_cb cb, void *arg, int *truncated,
                    struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    struct params pa = { 0 };
    struct gap_src *src = NULL;
    uint64_t(*ranges)[2] = NULL;
    char sql[1024];
    PGresult *r = NULL;
    int rc, i, rows, kept = 0, listed;

    *truncated = 0;
    if ((rc = read_begin(p, deadline_ms, err)))
        goto out;
    /* Every (source, seq) written here is in dedupe; a source's newest
     * receipt comes from the (source, id) index. */
    snprintf(sql, sizeof(sql),
             "SELECT d.source, min(d.seq), max(d.seq), count(*), (SELECT "
             "max(received_at) FROM receipts r WHERE r.source = d.source) FROM "
             "dedupe d%s GROUP BY d.source",
             f->source ? " WHERE d.source = convert_from($1::bytea, 'UTF8')"
                       : "");
    if (f->source)
        param_str(&pa, f->source, f->source_len);
    if ((r = run(p, sql, &pa, err)) == NULL) {
        rc = err->code;
        goto out;
    }
    rows = PQntuples(r);
    if (rows > 0 && (src = calloc((size_t)rows, sizeof(*src))) == NULL) {
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        goto out;
    }
    for (i = 0; i < rows; i++) {
        struct gap_src *g = &src[kept];
        struct proto_str name = get_str(r, i, 0);

        g->first = (uint64_t)store_pg_i64(PQgetvalue(r, i, 1));
        g->last = (uint64_t)store_pg_i64(PQgetvalue(r, i, 2));
        g->received = (uint64_t)store_pg_i64(PQgetvalue(r, i, 3));
        g->missing = g->last - g->first + 1 - g->received;
        g->has_last_received = !PQgetisnull(r, i, 4);
        if (g->has_last_received)
            g->last_received_at = store_pg_i64(PQgetvalue(r, i, 4));
        if (sel->only_missing && g->missing == 0)
            continue;
        if (sel->has_quiet_before && g->has_last_received &&
            g->last_received_at >= sel->quiet_before)
            continue;
        if ((g->source = malloc(name.len + 1)) == NULL) {
            rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
            goto out;
        }
        memcpy(g->source, name.ptr, name.len);
        g->source[name.len] = '\0';
        g->len = name.len;
        kept++;
    }
    PQclear(r);
    r = NULL;
    if (kept > 0)
        qsort(src, (size_t)kept, sizeof(*src), cmp_gaps);
    listed = kept;
    if ((uint32_t)listed > f->limit) {
        *truncated = 1;
        listed = (int)f->limit;
    }
    if ((ranges = calloc(f->limit + 1, sizeof(*ranges))) == NULL) {
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        goto out;
    }
    for (i = 0; i < listed && rc == 0; i++) {
        struct gap_src *g = &src[i];
        struct store_gap gap;
        int j, nr = 0;

        memset(&gap, 0, sizeof(gap));
        if (g->missing > 0) {
            pa.n = 0;
            param_str(&pa, g->source, g->len);
            snprintf(sql, sizeof(sql),
                     "SELECT seq + 1, next - 1 FROM (SELECT seq, lead(seq) "
                     "OVER (ORDER BY seq) AS next FROM dedupe WHERE source = "
                     "convert_from($1::bytea, 'UTF8')) t WHERE next > seq + 1 "
                     "ORDER BY seq LIMIT %u",
                     f->limit + 1);
            if ((r = run(p, sql, &pa, err)) == NULL) {
                rc = err->code;
                goto out;
            }
            nr = PQntuples(r);
            for (j = 0; j < nr && (uint32_t)j < f->limit; j++) {
                ranges[j][0] = (uint64_t)store_pg_i64(PQgetvalue(r, j, 0));
                ranges[j][1] = (uint64_t)store_pg_i64(PQgetvalue(r, j, 1));
            }
            PQclear(r);
            r = NULL;
        }
        gap.source.ptr = g->source;
        gap.source.len = g->len;
        gap.first_seq = g->first;
        gap.last_seq = g->last;
        gap.received = g->received;
        gap.missing = g->missing;
        gap.ranges = (const uint64_t(*)[2])ranges;
        gap.n_ranges = (uint32_t)nr > f->limit ? f->limit : (size_t)nr;
        gap.ranges_truncated = (uint32_t)nr > f->limit;
        if (gap.ranges_truncated)
            *truncated = 1;
        gap.has_last_received = g->has_last_received;
        gap.last_received_at = g->last_received_at;
        rc = cb(arg, &gap);
    }
out:
    PQclear(r);
    for (i = 0; i < kept; i++)
        free(src[i].source);
    free(src);
    free(ranges);
    read_end(p);
    return rc;
}

/* ---- quarantine, plans, retention records ---- */

static int
quarantine_row(PGresult *r, int i, void *cb, void *arg)
{
    struct store_qrow q;
    char code[16];
    const char *name;

    memset(&q, 0, sizeof(q));
    q.id = store_pg_i64(PQgetvalue(r, i, 0));
    q.received_at = store_pg_i64(PQgetvalue(r, i, 1));
    q.source = get_str(r, i, 2);
    q.op = get_str(r, i, 3);
    name = proto_code_name(store_pg_i32(PQgetvalue(r, i, 4)));
    snprintf(code, sizeof(code), "%s", name ? name : "");
    q.code.ptr = code;
    q.code.len = strlen(code);
    q.path = get_str(r, i, 5);
    q.message = get_str(r, i, 6);
    q.size = (uint64_t)store_pg_i64(PQgetvalue(r, i, 7));
    q.attempts = (uint64_t)store_pg_i64(PQgetvalue(r, i, 8));
    q.last_attempt_at = store_pg_i64(PQgetvalue(r, i, 9));
    /* NULL unless the query asked for the bytes. */
    if (!PQgetisnull(r, i, 10)) {
        q.raw = PQgetvalue(r, i, 10);
        q.raw_len = (size_t)PQgetlength(r, i, 10);
    }
    return ((store_qrow_cb)cb)(arg, &q);
}

int
store_pg_query_quarantine(struct store *s, const struct store_filter *f,
                          int has_id, uint64_t id, int with_raw,
                          uint64_t deadline_ms, store_qrow_cb cb, void *arg,
                          int *truncated, struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    struct params pa = { 0 };
    char sql[1024];
    size_t n;

    n = (size_t)snprintf(sql, sizeof(sql),
                         "SELECT id, received_at, source, op, code, path, "
                         "message, length(raw)::bigint, attempts, "
                         "last_attempt_at, %s FROM quarantine WHERE true",
                         with_raw ? "raw" : "NULL::bytea");
#define ADD(...)                                                               \
    n += (size_t)snprintf(sql + n, n < sizeof(sql) ? sizeof(sql) - n : 0,      \
                          __VA_ARGS__)
    if (has_id)
        ADD(" AND id = $%d::bigint", param_i64(&pa, store_pg_clamp(id)));
    if (f->source)
        ADD(" AND source = convert_from($%d::bytea, 'UTF8')",
            param_str(&pa, f->source, f->source_len));
    if (f->has_since)
        ADD(" AND received_at >= $%d::bigint",
            param_i64(&pa, store_pg_clamp(f->since)));
    if (f->has_until)
        ADD(" AND received_at < $%d::bigint",
            param_i64(&pa, store_pg_clamp(f->until)));
    ADD(" ORDER BY id DESC LIMIT %u", f->limit + 1);
#undef ADD
    return query_rows(p, sql, &pa, f->limit, deadline_ms, quarantine_row, cb,
                      arg, truncated, err);
}

static int
plan_row(PGresult *r, int i, void *cb, void *arg)
{
    struct store_plan_row pr;

    pr.plan = get_str(r, i, 0);
    pr.graph = get_str(r, i, 1);
    pr.source = get_str(r, i, 2);
    pr.registered_at = store_pg_i64(PQgetvalue(r, i, 3));
    pr.nodes = (uint64_t)store_pg_i64(PQgetvalue(r, i, 4));
    pr.values = (uint64_t)store_pg_i64(PQgetvalue(r, i, 5));
    pr.retained = (uint64_t)store_pg_i64(PQgetvalue(r, i, 6));
    return ((store_plan_row_cb)cb)(arg, &pr);
}

int
store_pg_query_plans(struct store *s, const struct store_filter *f,
                     uint64_t deadline_ms, store_plan_row_cb cb, void *arg,
                     int *truncated, struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    struct params pa = { 0 };
    char sql[1024];
    size_t n;

    n = (size_t)snprintf(sql, sizeof(sql),
                         "SELECT p.plan, p.graph, p.source, p.registered_at, "
                         "p.nodes, p.nvalues, (SELECT count(*) FROM retained "
                         "v WHERE v.plan_id = p.id) FROM plans p WHERE true");
#define ADD(...)                                                               \
    n += (size_t)snprintf(sql + n, n < sizeof(sql) ? sizeof(sql) - n : 0,      \
                          __VA_ARGS__)
    if (f->plan)
        ADD(" AND p.plan = convert_from($%d::bytea, 'UTF8')",
            param_str(&pa, f->plan, f->plan_len));
    if (f->graph)
        ADD(" AND p.graph = convert_from($%d::bytea, 'UTF8')",
            param_str(&pa, f->graph, f->graph_len));
    if (f->source)
        ADD(" AND p.source = convert_from($%d::bytea, 'UTF8')",
            param_str(&pa, f->source, f->source_len));
    if (f->has_since)
        ADD(" AND p.registered_at >= $%d::bigint",
            param_i64(&pa, store_pg_clamp(f->since)));
    if (f->has_until)
        ADD(" AND p.registered_at < $%d::bigint",
            param_i64(&pa, store_pg_clamp(f->until)));
    ADD(" ORDER BY p.id DESC LIMIT %u", f->limit + 1);
#undef ADD
    return query_rows(p, sql, &pa, f->limit, deadline_ms, plan_row, cb, arg,
                      truncated, err);
}

static int
retained_row(PGresult *r, int i, void *cb, void *arg)
{
    struct store_retained_row v;

    v.plan = get_str(r, i, 0);
    v.graph = get_str(r, i, 1);
    v.value_id = get_str(r, i, 2);
    v.retained_at = store_pg_i64(PQgetvalue(r, i, 3));
    v.value = PQgetvalue(r, i, 4);
    v.len = (size_t)PQgetlength(r, i, 4);
    return ((store_retained_row_cb)cb)(arg, &v);
}

int
store_pg_query_retained(struct store *s, const struct store_filter *f,
                        uint64_t deadline_ms, store_retained_row_cb cb,
                        void *arg, int *truncated, struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    struct params pa = { 0 };
    char sql[1024];

    param_str(&pa, f->plan, f->plan_len);
    if (f->graph)
        param_str(&pa, f->graph, f->graph_len);
    snprintf(sql, sizeof(sql),
             "SELECT p.plan, p.graph, v.value_id, v.retained_at, v.value FROM "
             "retained v JOIN plans p ON p.id = v.plan_id WHERE p.plan = "
             "convert_from($1::bytea, 'UTF8')%s ORDER BY p.plan, p.graph, "
             "convert_to(v.value_id, 'UTF8') LIMIT %u",
             f->graph ? " AND p.graph = convert_from($2::bytea, 'UTF8')" : "",
             f->limit + 1);
    return query_rows(p, sql, &pa, f->limit, deadline_ms, retained_row, cb, arg,
                      truncated, err);
}

int
store_pg_plan_readback(struct store *s, const struct store_plan_key *k,
                       struct proto_str value_id, uint64_t deadline_ms,
                       int *plan_found, void **value, size_t *len,
                       struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    struct params pa = { 0 };
    PGresult *r = NULL;
    int rc;

    *plan_found = 0;
    *value = NULL;
    *len = 0;
    param_str(&pa, k->plan.ptr, k->plan.len);
    param_str(&pa, k->graph.ptr, k->graph.len);
    param_str(&pa, value_id.ptr, value_id.len);
    if ((rc = read_begin(p, deadline_ms, err)))
        goto out;
    r = run(p,
            "SELECT p.id, v.value FROM plans p LEFT JOIN retained v ON "
            "v.plan_id = p.id AND v.value_id = convert_from($3::bytea, "
            "'UTF8') WHERE p.plan = convert_from($1::bytea, 'UTF8') AND "
            "p.graph = convert_from($2::bytea, 'UTF8')",
            &pa, err);
    if (r == NULL) {
        rc = err->code;
        goto out;
    }
    if (PQntuples(r) > 0) {
        *plan_found = 1;
        if (!PQgetisnull(r, 0, 1)) {
            size_t n = (size_t)PQgetlength(r, 0, 1);

            if ((*value = malloc(n ? n : 1)) == NULL) {
                rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
                goto out;
            }
            memcpy(*value, PQgetvalue(r, 0, 1), n);
            *len = n;
        }
    }
out:
    PQclear(r);
    read_end(p);
    return rc;
}

int
store_pg_plan_counts(struct store *s, uint64_t *plans, uint64_t *retained,
                     struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    struct params pa = { 0 };
    int64_t a = 0, b = 0;
    int rc;

    if ((rc = read_begin(p, 0, err)) == 0 &&
        (rc = one_i64(p, "SELECT count(*) FROM plans", &pa, 0, &a, err)) == 0)
        rc = one_i64(p, "SELECT count(*) FROM retained", &pa, 0, &b, err);
    read_end(p);
    *plans = (uint64_t)a;
    *retained = (uint64_t)b;
    return rc;
}

int
store_pg_query_prunes(struct store *s, const struct store_filter *f,
                      uint64_t deadline_ms, struct store_prune_rec **out,
                      size_t *nout, int *truncated, struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    struct params pa = { 0 };
    char sql[512];
    PGresult *r = NULL;
    size_t n;
    int rc, i, rows;

    *out = NULL;
    *nout = 0;
    *truncated = 0;
    if (f->limit < 1 || f->limit > 10000)
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "limit must be 1 to 10000");
    n = (size_t)snprintf(sql, sizeof(sql),
                         "SELECT id, pruned_at, cutoff, rows, oldest, newest "
                         "FROM prunes WHERE true");
    if (f->has_since)
        n += (size_t)snprintf(sql + n, sizeof(sql) - n,
                              " AND pruned_at >= $%d::bigint",
                              param_i64(&pa, store_pg_clamp(f->since)));
    if (f->has_until)
        n += (size_t)snprintf(sql + n, sizeof(sql) - n,
                              " AND pruned_at < $%d::bigint",
                              param_i64(&pa, store_pg_clamp(f->until)));
    snprintf(sql + n, sizeof(sql) - n, " ORDER BY id DESC LIMIT %u",
             f->limit + 1);
    if ((rc = read_begin(p, deadline_ms, err)))
        goto out;
    if ((r = run(p, sql, &pa, err)) == NULL) {
        rc = err->code;
        goto out;
    }
    rows = PQntuples(r);
    if ((uint32_t)rows > f->limit) {
        *truncated = 1;
        rows = (int)f->limit;
    }
    if ((*out = calloc(rows > 0 ? (size_t)rows : 1, sizeof(**out))) == NULL) {
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        goto out;
    }
    for (i = 0; i < rows; i++) {
        struct store_prune_rec *e = &(*out)[i];

        e->id = store_pg_i64(PQgetvalue(r, i, 0));
        e->pruned_at = store_pg_i64(PQgetvalue(r, i, 1));
        e->cutoff = store_pg_i64(PQgetvalue(r, i, 2));
        e->rows = store_pg_i64(PQgetvalue(r, i, 3));
        e->oldest = store_pg_i64(PQgetvalue(r, i, 4));
        e->newest = store_pg_i64(PQgetvalue(r, i, 5));
        e->undelivered = 0; /* a center relays to no one */
    }
    *nout = (size_t)rows;
out:
    PQclear(r);
    read_end(p);
    return rc;
}
