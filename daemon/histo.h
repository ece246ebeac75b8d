/*
 * histo.h: a fixed-bucket histogram of durations that one thread adds to
 * and any thread reads, without locks: each bucket and the sum are
 * relaxed atomics, and the count is the buckets' total. A reader may see
 * an observation in its bucket and not yet in the sum (or the reverse)
 * for an instant; Prometheus tolerates that, and no figure is ever lost.
 *
 * The bounds are fixed (HISTO_BOUNDS_US): the writer's commit durations,
 * from half a millisecond to ten seconds, the range an fsync on anything
 * from NVMe to a dying disk lands in.
 */
#ifndef RECEIPTD_DAEMON_HISTO_H
#define RECEIPTD_DAEMON_HISTO_H

#include <stdatomic.h>
#include <stdint.h>

/* Upper bounds (inclusive) in microseconds; one more bucket is +Inf. */
#define HISTO_NBOUNDS 14
extern const uint64_t histo_bounds_us[HISTO_NBOUNDS];

struct histo {
    _Atomic uint64_t bucket[HISTO_NBOUNDS + 1]; /* not cumulative */
    _Atomic uint64_t sum_us;
};

/* A copy for a reader: cumulative counts as Prometheus wants them. */
struct histo_snap {
    uint64_t cumulative[HISTO_NBOUNDS + 1]; /* the last is +Inf = count */
    uint64_t count, sum_us;
};

/* Zeroes h (embedded object; no _close needed). */
void histo_init(struct histo *h);

/* Adds one duration. One thread at a time: each word is a load and a
 * store, so two threads adding at once could lose one. */
void histo_observe(struct histo *h, uint64_t us);

/* Copies h; any thread, any time. */
void histo_read(struct histo *h, struct histo_snap *out);

#endif
