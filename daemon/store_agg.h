/*
 * store_agg.h: the aggregate read side of the store: the `fallbacks` and
 * `coverage` groups (from the per-day and per-hour rollups kept by
 * store_rollup.c, with the partial hours at the edges of a time range read
 * from the receipts themselves), the `gaps` walk over recorded seqs, and the
 * `quarantine` rows. Like store.h it never sees msgpack: query_agg.c encodes.
 *
 * Every function runs on a query thread with a read-only store, inside one
 * read transaction so that rollups and receipts agree, and is bounded in
 * time by deadline_ms (CLOCK_MONOTONIC; PROTO_EOVERLOADED when it passes).
 */
#ifndef RECEIPTD_DAEMON_STORE_AGG_H
#define RECEIPTD_DAEMON_STORE_AGG_H

#include <stddef.h>
#include <stdint.h>

#include "receipt_types.h"
#include "store.h"

/* What groups are made of (the `group_by` of PROTOCOL section 9). */
enum store_group {
    STORE_GROUP_NONE,
    STORE_GROUP_PLAN,
    STORE_GROUP_GRAPH,
    STORE_GROUP_MODEL,
    STORE_GROUP_BACKENDS,
    STORE_GROUP_SOURCE,
    STORE_GROUP_COUNT
};

/* Or'ed onto plan, graph, model or source: groups by that key and the
 * backends at once (`group_by` "plan,backends"). A group_by is a single
 * key of enum store_group or such a pair. */
#define STORE_GROUP_AND_BACKENDS 0x10

/* The string key of group_by (plan, graph, model, source), or none or
 * backends alone. */
static inline int
store_group_key(int group_by)
{
    return group_by & ~STORE_GROUP_AND_BACKENDS;
}

/* Whether group_by groups by the backends (alone or in a pair). */
static inline int
store_group_has_backends(int group_by)
{
    return store_group_key(group_by) == STORE_GROUP_BACKENDS ||
           (group_by & STORE_GROUP_AND_BACKENDS) != 0;
}

/* Whether group_by groups by a string key (alone or in a pair). */
static inline int
store_group_named(int group_by)
{
    int k = store_group_key(group_by);

    return k != STORE_GROUP_NONE && k != STORE_GROUP_BACKENDS;
}

/* Whether group_by is a key or a pair store_query_agg() knows. */
static inline int
store_group_valid(int group_by)
{
    int k = store_group_key(group_by);

    if (group_by < 0 || k >= STORE_GROUP_COUNT)
        return 0;
    return !(group_by & STORE_GROUP_AND_BACKENDS) ||
           store_group_named(group_by);
}

/* The most groups one query may build: a group holds every counter's
 * figures (about 1 KiB), so this bounds a query's memory near 18 MiB, well
 * inside the daemon's memory goal even with a few queries at once. */
#define STORE_AGG_GROUPS_MAX 16384

/* One counter over a set of receipts; min and max mean something only when
 * measured > 0. The sum is exact: 128 bits in two words. */
struct store_agg_counter {
    uint64_t measured;
    uint64_t sum_lo, sum_hi;
    uint64_t min, max;
};

struct store_agg_group {
    /* The group's key: a string id (plan, graph, model, source), or the
     * requested and executed backends; 0 for STORE_GROUP_NONE. In a pair
     * (STORE_GROUP_AND_BACKENDS), k1 and k2 are the backends and k3 the
     * string's id; k3 is 0 otherwise. PostgreSQL keys a string by its
     * name: there k1 (k3 in a pair) is only a hash of it. */
    int64_t k1, k2, k3;
    /* With f->every, the start of the group's bucket (unix ms, a multiple
     * of every); else 0. A bucketed group is one group per bucket. */
    int64_t bucket;
    char *name; /* owned: the key's string; NULL for backends and none */
    size_t name_len;
    uint64_t receipts, fallback, clean, unproven;
    /* Of receipts, those whose schema has every counter (schema 3): the
     * others are "not applicable" for the counters their schema lacks. */
    uint64_t schema3;
    struct store_agg_counter c[RECEIPT_NCOUNTERS];
};

/* A set of groups; zero it before the first use. */
struct store_agg {
    struct store_agg_group *groups; /* n of them, in no particular order */
    size_t n, cap;
    size_t *slots; /* open-addressing index into groups, nslots entries */
    size_t nslots;
};

/* `every` is a whole number of hours: the finest rollup level, so that a
 * series reads rollup rows for every bucket and receipts only at the
 * window's two edges. */
#define STORE_EVERY_UNIT_MS 3600000ull
/* The most buckets a series may have (the window over every). */
#define STORE_EVERY_BUCKETS_MAX 2000

/* Flags of store_query_agg(). */
#define STORE_AGG_COUNTERS 0x1 /* fill c[]; fallbacks need only the counts */
#define STORE_AGG_SCAN     0x2 /* ignore the rollups: read every receipt */

/*
 * Aggregates the receipts that match f (plan, graph, model, source,
 * requested, executed, since, until; status, before_id and limit are
 * ignored) into groups of group_by, adding to out. Whole days inside
 * [since, until) come from the day rollups, whole hours around them from
 * the hour rollups, the partial hours at either edge from the receipts (an
 * index range scan of only those), so the figures are exact for any range;
 * STORE_AGG_SCAN computes the same from the receipts alone (tests and the
 * benchmark compare the two). With f->every each group is split into
 * buckets of that many ms (g->bucket; only buckets with receipts have a
 * group: the caller fills in the empty ones). Group names are looked
 * up at the end. Returns 0, PROTO_EOVERLOADED (deadline, or more than
 * STORE_AGG_GROUPS_MAX groups), PROTO_ENOMEM or PROTO_EUNAVAILABLE; on
 * failure out may hold partial groups and must still be freed.
 */
int store_query_agg(struct store *s, const struct store_filter *f, int group_by,
                    unsigned flags, uint64_t deadline_ms, struct store_agg *out,
                    struct proto_err *err);

/* Frees what a holds and zeroes it. NULL is a no-op. */
void store_agg_free(struct store_agg *a);

/* Adds one measured value to c. */
void store_agg_counter_add(struct store_agg_counter *c, uint64_t v);

/* Adds the figures of o to c. */
void store_agg_counter_merge(struct store_agg_counter *c,
                             const struct store_agg_counter *o);

/* One source of the `gaps` query, valid during the callback only. */
struct store_gap {
    struct proto_str source; /* borrowed */
    uint64_t first_seq, last_seq, received;
    uint64_t missing;            /* seqs in between never received */
    const uint64_t (*ranges)[2]; /* the first n_ranges missing [from, to] */
    size_t n_ranges;
    int ranges_truncated; /* more ranges than f->limit */
    /* When the source's newest stored receipt arrived (unix ms); none when
     * no receipt of it is stored (plans only, or all pruned). */
    int has_last_received;
    int64_t last_received_at;
};

typedef int (*store_gap_cb)(void *arg, const struct store_gap *g);

/* Which sources `gaps` lists (all of them when zeroed). */
struct store_gap_select {
    int only_missing; /* only those with missing seqs */
    int has_quiet_before;
    int64_t quiet_before; /* only those with no receipt since (unix ms) */
};

/*
 * Walks the recorded seqs (the dedupe table, the seq runs and the tail:
 * every committed write that carried a source and a seq) of each source
 * in unsigned order (f->source alone when set; the other filters do not
 * apply: a seq has no receive time of its own), keeps those sel selects,
 * and calls cb for at most f->limit of them, most missing seqs first (then
 * by source), each with at most f->limit missing ranges: a source with
 * gaps is never left out for one without. Every source is walked once,
 * and the ones listed with gaps a second time for their ranges; memory
 * holds one summary per source, not its seqs. *truncated is set when
 * sources or ranges were left out. Returns 0, cb's non-zero return, or an
 * error as store_query_agg.
 */
int store_query_gaps(struct store *s, const struct store_filter *f,
                     const struct store_gap_select *sel, uint64_t deadline_ms,
                     store_gap_cb cb, void *arg, int *truncated,
                     struct proto_err *err);

/* One quarantined payload, valid during the callback only. */
struct store_qrow {
    int64_t id, received_at;
    struct proto_str source, op, code, path, message; /* borrowed */
    uint64_t size;
    uint64_t attempts;       /* refusals the row stands for, 1 and up */
    int64_t last_attempt_at; /* the latest; received_at when only one */
    const void *raw;         /* borrowed; NULL unless asked for */
    size_t raw_len;
};

typedef int (*store_qrow_cb)(void *arg, const struct store_qrow *q);

/*
 * Quarantined payloads, newest first, filtered by f->source, f->since and
 * f->until, at most f->limit; with has_id only the row with that id. The
 * raw bytes are read only when with_raw. *truncated as for receipts.
 */
int store_query_quarantine(struct store *s, const struct store_filter *f,
                           int has_id, uint64_t id, int with_raw,
                           uint64_t deadline_ms, store_qrow_cb cb, void *arg,
                           int *truncated, struct proto_err *err);

#endif
