/*
 * histo.c: the lock-free duration histogram of histo.h. Written by one
 * thread at a time (the writer's commits, the loop's answers), read by
 * any.
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
    atomic_init(&h->sum_us, 0);
}

/* Adds n to a word that only the adding thread writes. */
static void
bump(_Atomic uint64_t *w, uint64_t n)
{
    atomic_store_explicit(w, atomic_load_explicit(w, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

void
histo_observe(struct histo *h, uint64_t us)
{
    int i = 0;

    while (i < HISTO_NBOUNDS && us > histo_bounds_us[i])
        i++;
    /* One thread adds, so a load and a store are enough: a locked add
     * (x86's read-modify-write) a word cost the loop about a tenth of a
     * microsecond a single receipt's answer. Readers still see each word
     * whole. */
    bump(&h->bucket[i], 1);
    bump(&h->sum_us, us);
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
    /* The count is the buckets' total, so +Inf equals it. */
    out->count = run;
    out->sum_us = atomic_load_explicit(&h->sum_us, memory_order_relaxed);
}
