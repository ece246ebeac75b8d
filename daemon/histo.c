/*
 * histo.c: the lock-free duration histogram of histo.h. Written by one
 * thread (the writer), read by the loop and the query threads.
 */
#include "histo.h"

const uint64_t histo_bounds_us[HISTO_NBOUNDS] = {
    500,    1000,   2500,   5000,    10000,   25000,   50000,
    100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000,
};

void
histo_init(struct histo *h)
{
    int i;

    for (i = 0; i <= HISTO_NBOUNDS; i++)
        atomic_init(&h->bucket[i], 0);
    atomic_init(&h->count, 0);
    atomic_init(&h->sum_us, 0);
}

void
histo_observe(struct histo *h, uint64_t us)
{
    int i = 0;

    while (i < HISTO_NBOUNDS && us > histo_bounds_us[i])
        i++;
    atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
}

void
histo_read(struct histo *h, struct histo_snap *out)
{
    uint64_t run = 0;
    int i;

    for (i = 0; i <= HISTO_NBOUNDS; i++) {
        run += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
        out->cumulative[i] = run;
    }
    /* The +Inf bucket must equal the count; the buckets were read after
     * any observation they hold was counted, so use their total. */
    out->count = run;
    out->sum_us = atomic_load_explicit(&h->sum_us, memory_order_relaxed);
}
