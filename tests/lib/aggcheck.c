/*
 * aggcheck.c: rollups against a scan (aggcheck.h).
 */
#include "aggcheck.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "store_agg.h"

/* Orders groups by key and bucket, so that two answers pair up. */
static int
by_key(const void *pa, const void *pb)
{
    const struct store_agg_group *a = pa, *b = pb;

    if (a->k1 != b->k1)
        return a->k1 < b->k1 ? -1 : 1;
    if (a->k2 != b->k2)
        return a->k2 < b->k2 ? -1 : 1;
    if (a->k3 != b->k3)
        return a->k3 < b->k3 ? -1 : 1;
    if (a->bucket != b->bucket)
        return a->bucket < b->bucket ? -1 : 1;
    return 0;
}

/* One query against the scan: the same groups with the same figures. */
static void
same_as_scan(struct store *s, const struct store_filter *f, int group_by,
             unsigned flags, size_t r)
{
    struct store_agg a = { 0 }, b = { 0 };
    struct proto_err err;
    size_t i;
    int ra, rb;

    ra = store_query_agg(s, f, group_by, flags, 0, &a, &err);
    ck_assert_msg(ra == 0 || ra == PROTO_EOVERLOADED, "range %zu, group %d: %s",
                  r, group_by, err.message);
    rb = store_query_agg(s, f, group_by, flags | STORE_AGG_SCAN, 0, &b, &err);
    ck_assert_msg(rb == ra, "range %zu, group %d: %d, the scan %d: %s", r,
                  group_by, ra, rb, err.message);
    /* Past STORE_AGG_GROUPS_MAX groups (a store of many sources grouped
     * by source) both refuse alike. */
    if (ra != 0) {
        store_agg_free(&a);
        store_agg_free(&b);
        return;
    }
    ck_assert_msg(a.n == b.n,
                  "range %zu, group %d, every %llu: %zu groups, "
                  "the scan %zu",
                  r, group_by, (unsigned long long)f->every, a.n, b.n);
    /* Sorted alike (thousands of groups: not a search of one in the
     * other for each), the n groups pair up when each key is in both. */
    if (a.n > 0) {
        qsort(a.groups, a.n, sizeof(*a.groups), by_key);
        qsort(b.groups, b.n, sizeof(*b.groups), by_key);
    }
    /* Each passing ck_assert costs Check a write(2) (its last-passed
     * mark), and a store's answer has thousands of groups: the figures
     * are compared plainly, and a difference fails with its message. */
    for (i = 0; i < a.n; i++) {
        const struct store_agg_group *x = &a.groups[i], *y = &b.groups[i];

        if (by_key(x, y) != 0)
            ck_abort_msg("range %zu, group %d, every %llu: a group the scan "
                         "lacks (or has twice)",
                         r, group_by, (unsigned long long)f->every);
        if (f->every != 0 && x->bucket % (int64_t)f->every != 0)
            ck_abort_msg("range %zu, group %d, every %llu: bucket %lld is "
                         "not a multiple of every",
                         r, group_by, (unsigned long long)f->every,
                         (long long)x->bucket);
        if (x->receipts != y->receipts || x->fallback != y->fallback ||
            x->clean != y->clean || x->unproven != y->unproven ||
            x->schema3 != y->schema3)
            ck_abort_msg("range %zu, group %d, every %llu: counts differ "
                         "from the scan (%llu receipts, the scan %llu)",
                         r, group_by, (unsigned long long)f->every,
                         (unsigned long long)x->receipts,
                         (unsigned long long)y->receipts);
        if (memcmp(x->c, y->c, sizeof(x->c)) != 0)
            ck_abort_msg("range %zu, group %d, every %llu: counters differ "
                         "from the scan",
                         r, group_by, (unsigned long long)f->every);
    }
    store_agg_free(&a);
    store_agg_free(&b);
}

/* The name of the first group of a query by key (plan, graph or model),
 * copied into buf; empty when there is none. */
static void
first_name(struct store *s, const struct store_filter *base, int key, char *buf,
           size_t cap)
{
    struct store_filter f = *base;
    struct store_agg a = { 0 };
    struct proto_err err;

    f.every = 0;
    buf[0] = '\0';
    ck_assert_int_eq(store_query_agg(s, &f, key, 0, 0, &a, &err), 0);
    if (a.n > 0 && a.groups[0].name != NULL && a.groups[0].name_len < cap) {
        memcpy(buf, a.groups[0].name, a.groups[0].name_len);
        buf[a.groups[0].name_len] = '\0';
    }
    store_agg_free(&a);
}

/* Filters on plan, graph and model (a name the range holds), which the
 * chunks' sums answer (migrations/0017) as the rows do: a coverage total,
 * an hourly series by backends, and fallbacks by plan. */
static void
filters_equal_scan(struct store *s, const struct store_filter *base, size_t r)
{
    static const int keys[] = { STORE_GROUP_PLAN, STORE_GROUP_GRAPH,
                                STORE_GROUP_MODEL };
    static const struct {
        int group_by;
        unsigned flags;
        uint64_t every;
    } asks[] = {
        { STORE_GROUP_NONE, STORE_AGG_COUNTERS, 0 },
        { STORE_GROUP_BACKENDS, 0, 3600000 },
        { STORE_GROUP_PLAN, 0, 0 },
    };
    char name[256];
    size_t k, i;

    for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        struct store_filter f = *base;

        first_name(s, base, keys[k], name, sizeof(name));
        if (name[0] == '\0')
            continue;
        if (keys[k] == STORE_GROUP_PLAN) {
            f.plan = name;
            f.plan_len = strlen(name);
        } else if (keys[k] == STORE_GROUP_GRAPH) {
            f.graph = name;
            f.graph_len = strlen(name);
        } else {
            f.model = name;
            f.model_len = strlen(name);
        }
        for (i = 0; i < sizeof(asks) / sizeof(asks[0]); i++) {
            f.every = asks[i].every;
            same_as_scan(s, &f, asks[i].group_by, asks[i].flags, r);
        }
    }
}

void
aggcheck_equal_scan(struct store *s, const struct aggcheck_range *ranges,
                    size_t n)
{
    /* Series (`every`): hours, hours that are not a day's divisor, a day
     * (day rollups), two days. */
    static const uint64_t everys[] = { 0, 3600000, 5 * 3600000, 86400000,
                                       2 * 86400000 };
    /* By what chunks' sums answer (migrations/0014, 0017): plan, nothing,
     * graph, model, backends, and pairs of each kind (a string key with
     * backends); by source (the edges read rows). */
    static const int groups[] = {
        STORE_GROUP_PLAN,
        STORE_GROUP_NONE,
        STORE_GROUP_GRAPH,
        STORE_GROUP_MODEL,
        STORE_GROUP_BACKENDS,
        STORE_GROUP_SOURCE,
        STORE_GROUP_PLAN | STORE_GROUP_AND_BACKENDS,
        STORE_GROUP_GRAPH | STORE_GROUP_AND_BACKENDS,
        STORE_GROUP_MODEL | STORE_GROUP_AND_BACKENDS,
    };
    size_t r, e, g;
    int counters;

    /* With the counters (coverage: rollup figures, receipts' blobs) and
     * without (fallbacks: the counts), as one total and as series. */
    for (e = 0; e < sizeof(everys) / sizeof(everys[0]); e++)
        for (g = 0; g < sizeof(groups) / sizeof(groups[0]); g++)
            for (counters = 0; counters < 2; counters++)
                for (r = 0; r < n; r++) {
                    struct store_filter f;

                    /* Other groupings: one total and hourly series. */
                    if (g > 0 && e > 1)
                        continue;
                    memset(&f, 0, sizeof(f));
                    f.requested = f.executed = f.status = -1;
                    f.limit = 100;
                    f.has_since = ranges[r].has_since;
                    f.has_until = ranges[r].has_until;
                    f.since = ranges[r].since;
                    f.until = ranges[r].until;
                    f.every = everys[e];
                    same_as_scan(s, &f, groups[g],
                                 counters ? STORE_AGG_COUNTERS : 0, r);
                    /* A backend filter on the sums' key. */
                    if (g == 1 && counters == 0) {
                        f.executed = RECEIPT_BACKEND_CPU;
                        same_as_scan(s, &f, STORE_GROUP_NONE, 0, r);
                        f.executed = -1;
                    }
                    /* Filters on the sums' string keys. */
                    if (g == 0 && e == 0 && counters == 0)
                        filters_equal_scan(s, &f, r);
                }
}
