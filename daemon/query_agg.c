/*
 * query_agg.c: runs and encodes the `fallbacks` (grouped), `coverage`,
 * `gaps` and `quarantine` query kinds (query_agg.h).
 *
 * Runs on a libuv threadpool thread with a borrowed read-only store, like
 * the rest of a query's execution in query.c. Groups come unordered from
 * the store and are sorted here, so an answer is the same however the
 * rollups were laid out: fallbacks by most fallbacks first, coverage by
 * group name. Rows are counted against the limit as they are packed; the
 * rows array is packed into a side buffer because its length is known only
 * at the end.
 */
#include "query_agg.h"

#include <stdlib.h>
#include <string.h>

#include "envelope.h"
#include "mpobj.h"
#include "query_kind.h"
#include "receipt.h"
#include "reply.h"
#include "server.h"
#include "store_agg.h"

/* The most rows a series answer packs (`every`): a group's buckets are
 * sent whole or not at all. */
#define QUERY_AGG_SERIES_ROWS_MAX 100000

static const char *const group_names[STORE_GROUP_COUNT] = {
    [STORE_GROUP_NONE] = "none",         [STORE_GROUP_PLAN] = "plan",
    [STORE_GROUP_GRAPH] = "graph",       [STORE_GROUP_MODEL] = "model",
    [STORE_GROUP_BACKENDS] = "backends", [STORE_GROUP_SOURCE] = "source",
};

/* The receipt field that names a group's key, as section 9 asks. */
static const char *const group_fields[STORE_GROUP_COUNT] = {
    [STORE_GROUP_PLAN] = "prepared_plan_id",
    [STORE_GROUP_GRAPH] = "graph_hash",
    [STORE_GROUP_MODEL] = "model_instance_id",
    [STORE_GROUP_SOURCE] = "source",
};

static int
one_group(const char *name, size_t len)
{
    int i;

    for (i = 0; i < STORE_GROUP_COUNT; i++)
        if (strlen(group_names[i]) == len &&
            memcmp(group_names[i], name, len) == 0)
            return i;
    return -1;
}

/* A key, or two joined by a comma: a string key and backends, in either
 * order (the answer is the same). */
int
query_agg_group_from_name(const char *name, size_t len)
{
    const char *comma = memchr(name, ',', len);
    int a, b;

    if (comma == NULL)
        return one_group(name, len);
    a = one_group(name, (size_t)(comma - name));
    b = one_group(comma + 1, len - (size_t)(comma - name) - 1);
    if (a == STORE_GROUP_BACKENDS) {
        a = b;
        b = STORE_GROUP_BACKENDS;
    }
    if (b != STORE_GROUP_BACKENDS || a < 0 ||
        !store_group_valid(a | STORE_GROUP_AND_BACKENDS))
        return -1;
    return a | STORE_GROUP_AND_BACKENDS;
}

static int
pack_key(msgpack_packer *pk, const char *k)
{
    return envelope_pack_cstr(pk, k) != 0;
}

static int
pack_str(msgpack_packer *pk, const char *p, size_t n)
{
    return msgpack_pack_str(pk, n) != 0 || msgpack_pack_str_body(pk, p, n) != 0;
}

static int
kv_str(msgpack_packer *pk, const char *k, const char *p, size_t n)
{
    return pack_key(pk, k) || pack_str(pk, p, n);
}

static int
kv_uint(msgpack_packer *pk, const char *k, uint64_t v)
{
    return pack_key(pk, k) || msgpack_pack_uint64(pk, v) != 0;
}

static int
kv_double(msgpack_packer *pk, const char *k, double v)
{
    return pack_key(pk, k) || msgpack_pack_double(pk, v) != 0;
}

static const char *
backend(int64_t b)
{
    const char *n = receipt_backend_name((int)b);

    return n ? n : "unknown";
}

/* Packs the key fields of g: none to three map entries (see nkeys): the
 * string key's, then the backends'. */
static int
nkeys(int group_by)
{
    return store_group_named(group_by) + 2 * store_group_has_backends(group_by);
}

static int
pack_group_keys(msgpack_packer *pk, int group_by,
                const struct store_agg_group *g)
{
    if (store_group_named(group_by) &&
        kv_str(pk, group_fields[store_group_key(group_by)],
               g->name ? g->name : "", g->name_len))
        return 1;
    if (store_group_has_backends(group_by)) {
        const char *r = backend(g->k1), *e = backend(g->k2);
        return kv_str(pk, "requested_backend", r, strlen(r)) ||
               kv_str(pk, "executed_backend", e, strlen(e));
    }
    return 0;
}

/* Byte order of the group's name, then of its backends' names. Groups
 * with one name have the same k1 and k2 unless they are backends (a
 * pair's), so this orders every grouping. */
static int
cmp_names(const struct store_agg_group *a, const struct store_agg_group *b)
{
    size_t n;
    int c = 0;

    if (a->name != NULL && b->name != NULL) {
        n = a->name_len < b->name_len ? a->name_len : b->name_len;
        c = memcmp(a->name, b->name, n);
        if (c == 0)
            c = (a->name_len > b->name_len) - (a->name_len < b->name_len);
    }
    if (c == 0 && a->k1 != b->k1)
        c = strcmp(backend(a->k1), backend(b->k1));
    if (c == 0 && a->k2 != b->k2)
        c = strcmp(backend(a->k2), backend(b->k2));
    return c;
}

static int
by_name_cb(const void *pa, const void *pb)
{
    return cmp_names(pa, pb);
}

static int
by_fallbacks_cb(const void *pa, const void *pb)
{
    const struct store_agg_group *a = pa, *b = pb;

    if (a->fallback != b->fallback)
        return a->fallback > b->fallback ? -1 : 1;
    if (a->receipts != b->receipts)
        return a->receipts > b->receipts ? -1 : 1;
    return cmp_names(a, b);
}

/* The result map around rows packed into rb. */
static int
pack_result(msgpack_packer *pk, const msgpack_sbuffer *rb, uint32_t nrows,
            int truncated, struct proto_err *err)
{
    if (reply_rows(pk, rb, nrows, truncated) != 0)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    return 0;
}

/* The same with "total": the object packed into tb. */
static int
pack_result_total(msgpack_packer *pk, const msgpack_sbuffer *rb, uint32_t nrows,
                  int truncated, const msgpack_sbuffer *tb,
                  struct proto_err *err)
{
    if (reply_rows_and(pk, rb, nrows, truncated, "total", tb) != 0)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    return 0;
}

/* The fallback figures of g: 5 map entries. */
static int
pack_fallback_figures(msgpack_packer *pk, const struct store_agg_group *g)
{
    return kv_uint(pk, "receipts", g->receipts) ||
           kv_uint(pk, "fallback", g->fallback) ||
           kv_uint(pk, "unproven", g->unproven) ||
           kv_uint(pk, "clean", g->clean) ||
           kv_double(pk, "fallback_rate",
                     g->receipts ? (double)g->fallback / (double)g->receipts
                                 : 0.0);
}

static int
selected(const struct query_agg_select *sel, const struct store_agg_group *g)
{
    if (sel == NULL)
        return 1;
    if (sel->only_fallbacks && g->fallback == 0)
        return 0;
    return !sel->has_min_rate ||
           (g->receipts > 0 &&
            (double)g->fallback / (double)g->receipts >= sel->min_rate);
}

/* ---- series (`every`) ---- */

/* The buckets of f's window: the first one's start (f->since rounded down
 * to a multiple of f->every) and how many; 0 when the window is empty. */
static uint32_t
buckets_of(const struct store_filter *f, int64_t *first)
{
    uint64_t b0 = f->since / f->every * f->every, b1;

    *first = (int64_t)b0;
    if (f->until <= f->since)
        return 0;
    b1 = (f->until - 1) / f->every * f->every;
    return (uint32_t)((b1 - b0) / f->every + 1);
}

/* One group's buckets: groups[first, first + n) of the sorted store_agg,
 * and their figures added up. */
struct series {
    size_t first, n;
    struct store_agg_group sum; /* counts only; names borrowed */
};

/* Same key, whatever the bucket. */
static int
same_series(const struct store_agg_group *a, const struct store_agg_group *b)
{
    return a->k1 == b->k1 && a->k2 == b->k2 && cmp_names(a, b) == 0;
}

static int
by_series_cb(const void *pa, const void *pb)
{
    const struct store_agg_group *a = pa, *b = pb;
    int c = cmp_names(a, b);

    if (c == 0 && a->k1 != b->k1)
        c = a->k1 < b->k1 ? -1 : 1;
    if (c == 0 && a->k2 != b->k2)
        c = a->k2 < b->k2 ? -1 : 1;
    if (c == 0 && a->bucket != b->bucket)
        c = a->bucket < b->bucket ? -1 : 1;
    return c;
}

static int
series_by_fallbacks_cb(const void *pa, const void *pb)
{
    const struct series *a = pa, *b = pb;

    return by_fallbacks_cb(&a->sum, &b->sum);
}

/* Sorts a's groups by key and bucket and returns its series (by name;
 * *n of them), or NULL with *n = 0 when there are none or memory ran
 * out (*oom set). */
static struct series *
series_of(struct store_agg *a, size_t *n, int *oom)
{
    struct series *sr;
    size_t i;

    *n = 0;
    *oom = 0;
    if (a->n == 0)
        return NULL;
    qsort(a->groups, a->n, sizeof(*a->groups), by_series_cb);
    if ((sr = calloc(a->n, sizeof(*sr))) == NULL) {
        *oom = 1;
        return NULL;
    }
    for (i = 0; i < a->n; i++) {
        const struct store_agg_group *g = &a->groups[i];
        struct series *cur = &sr[*n - (*n > 0)];

        if (*n == 0 || !same_series(&a->groups[cur->first], g)) {
            cur = &sr[(*n)++];
            cur->first = i;
            cur->sum.k1 = g->k1;
            cur->sum.k2 = g->k2;
            cur->sum.k3 = g->k3;
            cur->sum.name = g->name;
            cur->sum.name_len = g->name_len;
        }
        cur->n++;
        cur->sum.receipts += g->receipts;
        cur->sum.fallback += g->fallback;
        cur->sum.clean += g->clean;
        cur->sum.unproven += g->unproven;
        cur->sum.schema3 += g->schema3;
    }
    return sr;
}

/* The group of bucket b in series sr (advancing *at through its sorted
 * groups), or an empty one named as the series in *empty. */
static const struct store_agg_group *
series_at(const struct store_agg *a, const struct series *sr, size_t *at,
          int64_t b, struct store_agg_group *empty)
{
    while (*at < sr->n && a->groups[sr->first + *at].bucket < b)
        (*at)++;
    if (*at < sr->n && a->groups[sr->first + *at].bucket == b)
        return &a->groups[sr->first + *at];
    memset(empty, 0, sizeof(*empty));
    empty->k1 = sr->sum.k1;
    empty->k2 = sr->sum.k2;
    empty->k3 = sr->sum.k3;
    empty->name = sr->sum.name;
    empty->name_len = sr->sum.name_len;
    empty->bucket = b;
    return empty;
}

/* Adds every group of a to the per-bucket totals tot[nb] (from first). */
static void
bucket_totals(const struct store_agg *a, const struct store_filter *f,
              int64_t first, uint32_t nb, int counters,
              struct store_agg_group *tot)
{
    size_t i;
    int bit;

    for (i = 0; i < a->n; i++) {
        const struct store_agg_group *g = &a->groups[i];
        int64_t k = (g->bucket - first) / (int64_t)f->every;
        struct store_agg_group *t;

        if (g->bucket < first || k >= (int64_t)nb)
            continue;
        t = &tot[k];
        t->receipts += g->receipts;
        t->fallback += g->fallback;
        t->clean += g->clean;
        t->unproven += g->unproven;
        t->schema3 += g->schema3;
        if (counters)
            for (bit = 0; bit < RECEIPT_NCOUNTERS; bit++)
                store_agg_counter_merge(&t->c[bit], &g->c[bit]);
    }
}

static int
kv_bucket(msgpack_packer *pk, int64_t b)
{
    return pack_key(pk, "bucket") || msgpack_pack_int64(pk, b) != 0;
}

/* `fallbacks` with every: per selected group, most fallbacks first, one
 * row per bucket (empty ones included); f->limit counts groups, and rows
 * stop at QUERY_AGG_SERIES_ROWS_MAX. total: one map per bucket. */
static int
fallbacks_series(struct store_agg *a, const struct store_filter *f,
                 int group_by, const struct query_agg_select *sel,
                 msgpack_packer *pk, struct proto_err *err)
{
    struct store_agg_group empty, *tot = NULL;
    struct series *sr;
    msgpack_sbuffer rb, tb;
    msgpack_packer rpk, tpk;
    uint32_t nrows = 0, listed = 0, nb, k;
    int64_t first;
    size_t ns, i;
    int oom, failed = 0, truncated = 0, rc;

    nb = buckets_of(f, &first);
    sr = series_of(a, &ns, &oom);
    if (oom || (tot = calloc(nb ? nb : 1, sizeof(*tot))) == NULL) {
        free(sr);
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    }
    if (ns > 0)
        qsort(sr, ns, sizeof(*sr), series_by_fallbacks_cb);
    bucket_totals(a, f, first, nb, 0, tot);
    msgpack_sbuffer_init(&rb);
    msgpack_packer_init(&rpk, &rb, msgpack_sbuffer_write);
    for (i = 0; i < ns && !failed; i++) {
        size_t at = 0;

        if (!selected(sel, &sr[i].sum))
            continue;
        if (listed == f->limit ||
            (uint64_t)nrows + nb > QUERY_AGG_SERIES_ROWS_MAX) {
            truncated = 1;
            break;
        }
        for (k = 0; k < nb && !failed; k++) {
            int64_t b = first + (int64_t)k * (int64_t)f->every;
            const struct store_agg_group *g =
                series_at(a, &sr[i], &at, b, &empty);

            failed = msgpack_pack_map(&rpk, 6 + nkeys(group_by)) != 0 ||
                     pack_group_keys(&rpk, group_by, g) || kv_bucket(&rpk, b) ||
                     pack_fallback_figures(&rpk, g);
            nrows++;
        }
        listed++;
    }
    msgpack_sbuffer_init(&tb);
    msgpack_packer_init(&tpk, &tb, msgpack_sbuffer_write);
    failed = failed || msgpack_pack_array(&tpk, nb) != 0;
    for (k = 0; k < nb && !failed; k++)
        failed = msgpack_pack_map(&tpk, 6) != 0 ||
                 kv_bucket(&tpk, first + (int64_t)k * (int64_t)f->every) ||
                 pack_fallback_figures(&tpk, &tot[k]);
    if (failed)
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    else
        rc = pack_result_total(pk, &rb, nrows, truncated, &tb, err);
    msgpack_sbuffer_destroy(&tb);
    msgpack_sbuffer_destroy(&rb);
    free(tot);
    free(sr);
    return rc;
}

int
query_agg_fallbacks(struct store *s, const struct store_filter *f, int group_by,
                    const struct query_agg_select *sel, uint64_t deadline_ms,
                    msgpack_packer *pk, struct proto_err *err)
{
    struct store_agg a = { 0 };
    struct store_agg_group total = { 0 };
    msgpack_sbuffer rb, tb;
    msgpack_packer rpk, tpk;
    uint32_t nrows = 0;
    size_t i;
    int rc, failed = 0, truncated = 0;

    rc = store_query_agg(s, f, group_by, 0, deadline_ms, &a, err);
    if (rc != 0 || f->every != 0) {
        if (rc == 0)
            rc = fallbacks_series(&a, f, group_by, sel, pk, err);
        store_agg_free(&a);
        return rc;
    }
    /* No groups means no array: qsort must not be handed NULL. */
    if (a.n > 0)
        qsort(a.groups, a.n, sizeof(*a.groups), by_fallbacks_cb);
    msgpack_sbuffer_init(&rb);
    msgpack_packer_init(&rpk, &rb, msgpack_sbuffer_write);
    for (i = 0; i < a.n && !failed; i++) {
        const struct store_agg_group *g = &a.groups[i];

        total.receipts += g->receipts;
        total.fallback += g->fallback;
        total.unproven += g->unproven;
        total.clean += g->clean;
        if (!selected(sel, g))
            continue;
        if (nrows == f->limit) {
            truncated = 1;
            continue;
        }
        failed = msgpack_pack_map(&rpk, 5 + nkeys(group_by)) != 0 ||
                 pack_group_keys(&rpk, group_by, g) ||
                 pack_fallback_figures(&rpk, g);
        nrows++;
    }
    msgpack_sbuffer_init(&tb);
    msgpack_packer_init(&tpk, &tb, msgpack_sbuffer_write);
    if (failed || msgpack_pack_map(&tpk, 5) != 0 ||
        pack_fallback_figures(&tpk, &total))
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    else
        rc = pack_result_total(pk, &rb, nrows, truncated, &tb, err);
    msgpack_sbuffer_destroy(&tb);
    msgpack_sbuffer_destroy(&rb);
    store_agg_free(&a);
    return rc;
}

/* A 128-bit sum in decimal; buf holds at least 40 bytes. */
static size_t
u128_decimal(unsigned __int128 v, char *buf)
{
    char tmp[40];
    size_t n = 0, i;

    do {
        tmp[n++] = (char)('0' + (int)(v % 10));
        v /= 10;
    } while (v != 0);
    for (i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    buf[n] = '\0';
    return n;
}

/* One coverage row; with_bucket adds g's bucket. */
static int
pack_coverage_row(msgpack_packer *pk, int group_by,
                  const struct store_agg_group *g, int bit, int with_bucket)
{
    const struct store_agg_counter *c = &g->c[bit];
    unsigned __int128 sum =
        (unsigned __int128)c->sum_hi << 64 | (unsigned __int128)c->sum_lo;
    const char *name = receipt_counters[bit].path;
    char dec[48];
    size_t n;

    /* Receipts of a schema without this counter are neither measured nor
     * unknown for it: the counters of bits 10 and up are schema 3's. */
    uint64_t na = bit < RECEIPT_NCOUNTERS_V2 ? 0 : g->receipts - g->schema3;
    uint64_t applicable = g->receipts - na;

    if (msgpack_pack_map(pk, 11 + nkeys(group_by) + (with_bucket != 0)) != 0 ||
        pack_group_keys(pk, group_by, g) ||
        (with_bucket && kv_bucket(pk, g->bucket)) ||
        kv_str(pk, "counter", name, strlen(name)) ||
        kv_uint(pk, "bit", (uint64_t)bit) ||
        kv_uint(pk, "receipts", g->receipts) ||
        kv_uint(pk, "measured", c->measured) ||
        kv_uint(pk, "unknown", applicable - c->measured) ||
        kv_uint(pk, "not_applicable", na) ||
        kv_double(pk, "coverage",
                  applicable ? (double)c->measured / (double)applicable
                             : 0.0) ||
        pack_key(pk, "sum"))
        return -1;
    /* A sum past 2^64 - 1 is exact as a decimal string; msgpack has no
     * larger integer. */
    if (c->sum_hi == 0) {
        if (msgpack_pack_uint64(pk, c->sum_lo) != 0)
            return -1;
    } else {
        n = u128_decimal(sum, dec);
        if (pack_str(pk, dec, n))
            return -1;
    }
    /* An unknown counter is not a zero: with nothing measured there is no
     * minimum, maximum or mean at all. */
    if (c->measured == 0)
        return pack_key(pk, "min") || msgpack_pack_nil(pk) != 0 ||
               pack_key(pk, "max") || msgpack_pack_nil(pk) != 0 ||
               pack_key(pk, "mean") || msgpack_pack_nil(pk) != 0;
    return kv_uint(pk, "min", c->min) || kv_uint(pk, "max", c->max) ||
           kv_double(pk, "mean", (double)sum / (double)c->measured);
}

/* `coverage` with every: per group (by name) and counter, one row per
 * bucket (empty ones included); f->limit counts (group, counter) series,
 * and rows stop at QUERY_AGG_SERIES_ROWS_MAX. Grouped, total holds the
 * same for every group merged. */
static int
coverage_series(struct store_agg *a, const struct store_filter *f, int group_by,
                msgpack_packer *pk, struct proto_err *err)
{
    struct store_agg_group empty, *tot = NULL;
    struct series *sr;
    msgpack_sbuffer rb, tb;
    msgpack_packer rpk, tpk;
    uint32_t nrows = 0, listed = 0, nb, k;
    int64_t first;
    size_t ns, i;
    int oom, failed = 0, truncated = 0, rc, bit;

    nb = buckets_of(f, &first);
    sr = series_of(a, &ns, &oom);
    if (oom || (tot = calloc(nb ? nb : 1, sizeof(*tot))) == NULL) {
        free(sr);
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    }
    msgpack_sbuffer_init(&rb);
    msgpack_packer_init(&rpk, &rb, msgpack_sbuffer_write);
    for (i = 0; i < ns && !failed && !truncated; i++)
        for (bit = 0; bit < RECEIPT_NCOUNTERS && !failed; bit++) {
            size_t at = 0;

            if (listed == f->limit ||
                (uint64_t)nrows + nb > QUERY_AGG_SERIES_ROWS_MAX) {
                truncated = 1;
                break;
            }
            for (k = 0; k < nb && !failed; k++) {
                const struct store_agg_group *g =
                    series_at(a, &sr[i], &at,
                              first + (int64_t)k * (int64_t)f->every, &empty);

                failed = pack_coverage_row(&rpk, group_by, g, bit, 1);
                nrows++;
            }
            listed++;
        }
    if (failed) {
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    } else if (group_by == STORE_GROUP_NONE) {
        rc = pack_result(pk, &rb, nrows, truncated, err);
    } else {
        bucket_totals(a, f, first, nb, 1, tot);
        msgpack_sbuffer_init(&tb);
        msgpack_packer_init(&tpk, &tb, msgpack_sbuffer_write);
        failed =
            msgpack_pack_array(&tpk, (uint32_t)RECEIPT_NCOUNTERS * nb) != 0;
        for (bit = 0; bit < RECEIPT_NCOUNTERS && !failed; bit++)
            for (k = 0; k < nb && !failed; k++) {
                tot[k].bucket = first + (int64_t)k * (int64_t)f->every;
                failed =
                    pack_coverage_row(&tpk, STORE_GROUP_NONE, &tot[k], bit, 1);
            }
        rc = failed ? proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory")
                    : pack_result_total(pk, &rb, nrows, truncated, &tb, err);
        msgpack_sbuffer_destroy(&tb);
    }
    msgpack_sbuffer_destroy(&rb);
    free(tot);
    free(sr);
    return rc;
}

int
query_agg_coverage(struct store *s, const struct store_filter *f, int group_by,
                   uint64_t deadline_ms, msgpack_packer *pk,
                   struct proto_err *err)
{
    struct store_agg a = { 0 };
    msgpack_sbuffer rb;
    msgpack_packer rpk;
    uint32_t nrows = 0;
    int rc, failed = 0, truncated = 0, bit;
    size_t i;

    rc = store_query_agg(s, f, group_by, STORE_AGG_COUNTERS, deadline_ms, &a,
                         err);
    if (rc != 0 || f->every != 0) {
        if (rc == 0)
            rc = coverage_series(&a, f, group_by, pk, err);
        store_agg_free(&a);
        return rc;
    }
    if (a.n > 0)
        qsort(a.groups, a.n, sizeof(*a.groups), by_name_cb);
    msgpack_sbuffer_init(&rb);
    msgpack_packer_init(&rpk, &rb, msgpack_sbuffer_write);
    for (i = 0; i < a.n && !truncated && !failed; i++)
        for (bit = 0; bit < RECEIPT_NCOUNTERS && !failed; bit++) {
            if (nrows == f->limit) {
                truncated = 1;
                break;
            }
            failed = pack_coverage_row(&rpk, group_by, &a.groups[i], bit, 0);
            nrows++;
        }
    if (failed) {
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    } else if (group_by == STORE_GROUP_NONE) {
        rc = pack_result(pk, &rb, nrows, truncated, err);
    } else {
        /* Every group merged: the rows an ungrouped query would give. */
        struct store_agg_group total = { 0 };
        msgpack_sbuffer tb;
        msgpack_packer tpk;

        for (i = 0; i < a.n; i++) {
            total.receipts += a.groups[i].receipts;
            total.schema3 += a.groups[i].schema3;
            for (bit = 0; bit < RECEIPT_NCOUNTERS; bit++)
                store_agg_counter_merge(&total.c[bit], &a.groups[i].c[bit]);
        }
        msgpack_sbuffer_init(&tb);
        msgpack_packer_init(&tpk, &tb, msgpack_sbuffer_write);
        failed = msgpack_pack_array(&tpk, RECEIPT_NCOUNTERS) != 0;
        for (bit = 0; bit < RECEIPT_NCOUNTERS && !failed; bit++)
            failed = pack_coverage_row(&tpk, STORE_GROUP_NONE, &total, bit, 0);
        rc = failed ? proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory")
                    : pack_result_total(pk, &rb, nrows, truncated, &tb, err);
        msgpack_sbuffer_destroy(&tb);
    }
    msgpack_sbuffer_destroy(&rb);
    store_agg_free(&a);
    return rc;
}

struct rows {
    msgpack_packer pk;
    uint32_t n;
};

static int
gap_cb(void *arg, const struct store_gap *g)
{
    struct rows *rs = arg;
    msgpack_packer *pk = &rs->pk;
    size_t i;

    if (msgpack_pack_map(pk, 8) != 0 ||
        kv_str(pk, "source", g->source.ptr, g->source.len) ||
        kv_uint(pk, "first_seq", g->first_seq) ||
        kv_uint(pk, "last_seq", g->last_seq) ||
        kv_uint(pk, "received", g->received) || pack_key(pk, "missing") ||
        msgpack_pack_array(pk, (uint32_t)g->n_ranges) != 0)
        return PROTO_ENOMEM;
    for (i = 0; i < g->n_ranges; i++)
        if (msgpack_pack_array(pk, 2) != 0 ||
            msgpack_pack_uint64(pk, g->ranges[i][0]) != 0 ||
            msgpack_pack_uint64(pk, g->ranges[i][1]) != 0)
            return PROTO_ENOMEM;
    if (kv_uint(pk, "missing_seqs", g->missing) ||
        pack_key(pk, "missing_truncated") ||
        (g->ranges_truncated ? msgpack_pack_true(pk)
                             : msgpack_pack_false(pk)) != 0 ||
        pack_key(pk, "last_received_at") ||
        (g->has_last_received
             ? msgpack_pack_uint64(pk, (uint64_t)g->last_received_at)
             : msgpack_pack_nil(pk)) != 0)
        return PROTO_ENOMEM;
    rs->n++;
    return 0;
}

int
query_agg_gaps(struct store *s, const struct store_filter *f,
               const struct store_gap_select *sel, uint64_t deadline_ms,
               msgpack_packer *pk, struct proto_err *err)
{
    msgpack_sbuffer rb;
    struct rows rs = { 0 };
    int truncated = 0, rc;

    msgpack_sbuffer_init(&rb);
    msgpack_packer_init(&rs.pk, &rb, msgpack_sbuffer_write);
    rc = store_query_gaps(s, f, sel, deadline_ms, gap_cb, &rs, &truncated, err);
    if (rc == PROTO_ENOMEM)
        proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    if (rc == 0)
        rc = pack_result(pk, &rb, rs.n, truncated, err);
    msgpack_sbuffer_destroy(&rb);
    return rc;
}

static int
qrow_cb(void *arg, const struct store_qrow *q)
{
    struct rows *rs = arg;
    msgpack_packer *pk = &rs->pk;

    if (msgpack_pack_map(pk, q->raw ? 11 : 10) != 0 ||
        kv_uint(pk, "id", (uint64_t)q->id) ||
        kv_uint(pk, "time", (uint64_t)q->received_at) ||
        kv_str(pk, "source", q->source.ptr, q->source.len) ||
        kv_str(pk, "op", q->op.ptr, q->op.len) ||
        kv_str(pk, "code", q->code.ptr, q->code.len) ||
        kv_str(pk, "path", q->path.ptr, q->path.len) ||
        kv_str(pk, "message", q->message.ptr, q->message.len) ||
        kv_uint(pk, "size", q->size) || kv_uint(pk, "attempts", q->attempts) ||
        kv_uint(pk, "last_attempt_at", (uint64_t)q->last_attempt_at))
        return PROTO_ENOMEM;
    /* The payload as sent, so `receiptctl quarantine replay` can resend it
     * byte for byte. */
    if (q->raw != NULL &&
        (pack_key(pk, "raw") || msgpack_pack_bin(pk, q->raw_len) != 0 ||
         msgpack_pack_bin_body(pk, q->raw, q->raw_len) != 0))
        return PROTO_ENOMEM;
    rs->n++;
    return 0;
}

int
query_agg_quarantine(struct store *s, const struct store_filter *f, int has_id,
                     uint64_t id, int with_raw, uint64_t deadline_ms,
                     msgpack_packer *pk, struct proto_err *err)
{
    msgpack_sbuffer rb;
    struct rows rs = { 0 };
    int truncated = 0, rc;

    msgpack_sbuffer_init(&rb);
    msgpack_packer_init(&rs.pk, &rb, msgpack_sbuffer_write);
    rc = store_query_quarantine(s, f, has_id, id, with_raw, deadline_ms,
                                qrow_cb, &rs, &truncated, err);
    if (rc == PROTO_ENOMEM)
        proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    if (rc == 0)
        rc = pack_result(pk, &rb, rs.n, truncated, err);
    msgpack_sbuffer_destroy(&rb);
    return rc;
}

/* ---- the kinds (query_kind.h) ---- */

/* `every`: a whole number of hours, with since; until defaults to now;
 * at most STORE_EVERY_BUCKETS_MAX buckets. */
static int
parse_every(struct query_args *a, const msgpack_object *body,
            struct proto_err *err)
{
    struct store_filter *f = &a->f;
    uint64_t every = 0, b0, b1;
    int has = 0, rc;

    if ((rc = query_opt_uint(body, "every", &has, &every, err)) || !has)
        return rc;
    if (every == 0 || every % STORE_EVERY_UNIT_MS != 0 ||
        every > (uint64_t)INT64_MAX / 2)
        return proto_err_set(err, PROTO_EINVALID, "every",
                             "every %llu ms is not a whole number of hours "
                             "(3600000 ms each: the finest rollups)",
                             (unsigned long long)every);
    if (!f->has_since)
        return proto_err_set(err, PROTO_EINVALID, "since",
                             "every needs since: where the series starts");
    if (!f->has_until) {
        f->has_until = 1;
        f->until = server_now_unix_ms();
    }
    if (f->since > (uint64_t)INT64_MAX || f->until > (uint64_t)INT64_MAX)
        return proto_err_set(err, PROTO_EINVALID, "since",
                             "since and until past 2^63 - 1 with every");
    if (f->until > f->since) {
        b0 = f->since / every;
        b1 = (f->until - 1) / every;
        if (b1 - b0 + 1 > STORE_EVERY_BUCKETS_MAX)
            return proto_err_set(
                err, PROTO_EINVALID, "every",
                "every %llu ms makes %llu buckets between since and until; "
                "at most %d (a larger every or a shorter window)",
                (unsigned long long)every, (unsigned long long)(b1 - b0 + 1),
                STORE_EVERY_BUCKETS_MAX);
    }
    f->every = every;
    return 0;
}

static int
parse_grouped(struct query_args *a, const msgpack_object *body, int dflt,
              struct proto_err *err)
{
    int rc;

    if ((rc = query_parse_common(a, body, err)) ||
        (rc = query_opt_enum(body, "group_by", query_agg_group_from_name,
                             "plan, graph, model, backends, source, none, or "
                             "plan, graph, model or source with backends "
                             "(\"plan,backends\")",
                             &a->group_by, err)))
        return rc;
    if (a->group_by < 0)
        a->group_by = dflt;
    return parse_every(a, body, err);
}

static int
parse_fallbacks(struct query_args *a, const msgpack_object *body,
                struct proto_err *err)
{
    const msgpack_object *o;
    int rc;

    if ((rc = parse_grouped(a, body, STORE_GROUP_PLAN, err)) ||
        (rc = query_opt_bool(body, "only_fallbacks", &a->only_fallbacks, err)))
        return rc;
    if (a->f.every != 0 && a->group_by == STORE_GROUP_NONE)
        return proto_err_set(err, PROTO_EINVALID, "every",
                             "every applies to groups, not to group_by none "
                             "(whose rows are the fallback receipts)");
    o = mpobj_map_get(body, "min_rate", NULL);
    if (o == NULL || o->type == MSGPACK_OBJECT_NIL)
        return 0;
    if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)
        a->min_rate = o->via.f64;
    else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= 1)
        a->min_rate = (double)o->via.u64;
    else
        a->min_rate = -1;
    if (!(a->min_rate >= 0 && a->min_rate <= 1))
        return proto_err_set(err, PROTO_EINVALID, "min_rate",
                             "expected min_rate as a number from 0 to 1 (a "
                             "fallback rate: 0.01 is 1%%)");
    a->has_min_rate = 1;
    return 0;
}

static int
parse_coverage(struct query_args *a, const msgpack_object *body,
               struct proto_err *err)
{
    return parse_grouped(a, body, STORE_GROUP_NONE, err);
}

static int
parse_quarantine(struct query_args *a, const msgpack_object *body,
                 struct proto_err *err)
{
    int rc;

    if ((rc = query_parse_common(a, body, err)) ||
        (rc = query_opt_uint(body, "id", &a->has_qid, &a->qid, err)))
        return rc;
    return query_opt_bool(body, "raw", &a->raw, err);
}

static int
parse_gaps(struct query_args *a, const msgpack_object *body,
           struct proto_err *err)
{
    int rc;

    if ((rc = query_parse_common(a, body, err)) ||
        (rc = query_opt_uint(body, "quiet_for", &a->has_quiet_for,
                             &a->quiet_for, err)))
        return rc;
    return query_opt_bool(body, "only_missing", &a->only_missing, err);
}

static int
run_fallbacks(struct query_args *a, struct store *s, msgpack_packer *pk,
              struct proto_err *err)
{
    /* Without groups the answer is the fallback receipts themselves, as
     * rows of the `receipts` kind. */
    if (a->group_by == STORE_GROUP_NONE) {
        a->f.status = RECEIPT_STATUS_FALLBACK;
        return query_run_receipts(a, s, pk, err);
    }
    struct query_agg_select sel = { a->only_fallbacks, a->has_min_rate,
                                    a->min_rate };

    return query_agg_fallbacks(s, &a->f, a->group_by, &sel, a->deadline_ms, pk,
                               err);
}

static int
run_coverage(struct query_args *a, struct store *s, msgpack_packer *pk,
             struct proto_err *err)
{
    return query_agg_coverage(s, &a->f, a->group_by, a->deadline_ms, pk, err);
}

static int
run_gaps(struct query_args *a, struct store *s, msgpack_packer *pk,
         struct proto_err *err)
{
    struct store_gap_select sel = { a->only_missing, a->has_quiet_for, 0 };
    uint64_t now = server_now_unix_ms();

    /* Quiet since before now - quiet_for, on the daemon's clock: the one
     * that stamped every receive time. */
    if (a->has_quiet_for)
        sel.quiet_before =
            a->quiet_for < now ? (int64_t)(now - a->quiet_for) : INT64_MIN;
    return query_agg_gaps(s, &a->f, &sel, a->deadline_ms, pk, err);
}

static int
run_quarantine(struct query_args *a, struct store *s, msgpack_packer *pk,
               struct proto_err *err)
{
    return query_agg_quarantine(s, &a->f, a->has_qid, a->qid, a->raw,
                                a->deadline_ms, pk, err);
}

const struct query_kind query_kind_fallbacks = { "fallbacks", parse_fallbacks,
                                                 run_fallbacks };
const struct query_kind query_kind_coverage = { "coverage", parse_coverage,
                                                run_coverage };
const struct query_kind query_kind_gaps = { "gaps", parse_gaps, run_gaps };
const struct query_kind query_kind_quarantine = { "quarantine",
                                                  parse_quarantine,
                                                  run_quarantine };
