/*
 * aggcheck.c: rollups against a scan (aggcheck.h).
 */
#include "aggcheck.h"

#include <check.h>
#include <string.h>

#include "store.h"
#include "store_agg.h"

void
aggcheck_equal_scan(struct store *s, const struct aggcheck_range *ranges,
                    size_t n)
{
    /* Series (`every`): hours, hours that are not a day's divisor, a day
     * (day rollups), two days. */
    static const uint64_t everys[] = { 0, 3600000, 5 * 3600000, 86400000,
                                       2 * 86400000 };
    size_t r, i, j, e;
    int counters;

    /* With the counters (coverage: rollup figures, receipts' blobs) and
     * without (fallbacks: the counts SQL adds up), as one total and as
     * series of buckets. */
    for (e = 0; e < sizeof(everys) / sizeof(everys[0]); e++)
        for (counters = 0; counters < 2; counters++)
            for (r = 0; r < n; r++) {
                unsigned flags = counters ? STORE_AGG_COUNTERS : 0;
                struct store_agg a = { 0 }, b = { 0 };
                struct store_filter f;
                struct proto_err err;

                memset(&f, 0, sizeof(f));
                f.requested = f.executed = f.status = -1;
                f.limit = 100;
                f.has_since = ranges[r].has_since;
                f.has_until = ranges[r].has_until;
                f.since = ranges[r].since;
                f.until = ranges[r].until;
                f.every = everys[e];
                ck_assert_int_eq(store_query_agg(s, &f, STORE_GROUP_PLAN, flags,
                                                 0, &a, &err),
                                 0);
                ck_assert_int_eq(store_query_agg(s, &f, STORE_GROUP_PLAN,
                                                 flags | STORE_AGG_SCAN, 0, &b,
                                                 &err),
                                 0);
                ck_assert_uint_eq(a.n, b.n);
                for (i = 0; i < a.n; i++) {
                    for (j = 0;
                         j < b.n && (b.groups[j].k1 != a.groups[i].k1 ||
                                     b.groups[j].bucket != a.groups[i].bucket);
                         j++)
                        ;
                    ck_assert_uint_lt(j, b.n);
                    if (f.every != 0)
                        ck_assert_int_eq(a.groups[i].bucket % (int64_t)f.every,
                                         0);
                    ck_assert_uint_eq(a.groups[i].receipts,
                                      b.groups[j].receipts);
                    ck_assert_uint_eq(a.groups[i].fallback,
                                      b.groups[j].fallback);
                    ck_assert_uint_eq(a.groups[i].clean, b.groups[j].clean);
                    ck_assert_uint_eq(a.groups[i].unproven,
                                      b.groups[j].unproven);
                    ck_assert_uint_eq(a.groups[i].schema3, b.groups[j].schema3);
                    ck_assert_msg(memcmp(a.groups[i].c, b.groups[j].c,
                                         sizeof(a.groups[i].c)) == 0,
                                  "range %zu, every %llu: counters differ from "
                                  "the scan",
                                  r, (unsigned long long)f.every);
                }
                store_agg_free(&a);
                store_agg_free(&b);
            }
}
