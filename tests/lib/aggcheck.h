/*
 * aggcheck.h: the rollup-based answers of fallbacks and coverage (counts,
 * sums, min, max; by each key, and filtered by plan, graph, model) equal a
 * full scan of the receipts, for each of
 * n time ranges. Check assertions; for the store's unit tests.
 */
#ifndef RECEIPTD_TESTS_AGGCHECK_H
#define RECEIPTD_TESTS_AGGCHECK_H

#include <stddef.h>
#include <stdint.h>

struct store;

struct aggcheck_range {
    int has_since, has_until;
    uint64_t since, until;
};

void aggcheck_equal_scan(struct store *s, const struct aggcheck_range *r,
                         size_t n);

#endif
