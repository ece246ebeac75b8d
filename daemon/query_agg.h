/*
 * query_agg.h: the `fallbacks` (grouped), `coverage`, `gaps` and
 * `quarantine` kinds of the `query` op (PROTOCOL section 9): what query.c's
 * kind table calls to run them on a query thread and pack their result map
 * ({"rows": [...], "truncated": bool}) into the reply.
 */
#ifndef RECEIPTD_DAEMON_QUERY_AGG_H
#define RECEIPTD_DAEMON_QUERY_AGG_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "error.h"
#include "store.h"
#include "store_agg.h"

/* The enum store_group of a `group_by` name ("plan", "graph", "model",
 * "backends", "source", "none"), or -1. name is borrowed. */
int query_agg_group_from_name(const char *name, size_t len);

/* Which groups `fallbacks` lists (all when zeroed or NULL). */
struct query_agg_select {
    int only_fallbacks; /* only groups with a fallback */
    int has_min_rate;
    double min_rate; /* only groups whose fallback_rate is at least this */
};

/*
 * Each runs one kind with the borrowed read-only store s and filter f, and
 * packs the whole result map into pk. Returns 0, or a negative PROTO_E*
 * code with err set (nothing useful is in pk then).
 *
 * query_agg_fallbacks: per group of group_by (not STORE_GROUP_NONE: the
 * fallback receipts themselves are `receipts` rows, which query.c packs)
 * that sel selects, receipts, fallback, unproven, clean and fallback_rate,
 * most fallbacks first; "total" is the same figures over every group f
 * matched, whatever sel and f->limit left out. query_agg_coverage: per
 * group (by name) and counter (by bit), the coverage row of section 9;
 * grouped, "total" is the rows of every group merged, one per counter.
 * Both honour f->limit in rows.
 */
int query_agg_fallbacks(struct store *s, const struct store_filter *f,
                        int group_by, const struct query_agg_select *sel,
                        uint64_t deadline_ms, msgpack_packer *pk,
                        struct proto_err *err);
int query_agg_coverage(struct store *s, const struct store_filter *f,
                       int group_by, uint64_t deadline_ms, msgpack_packer *pk,
                       struct proto_err *err);

/* Per source with recorded seqs that sel selects, most missing seqs
 * first: source, first_seq, last_seq, received, missing (the missing seq
 * ranges [[from, to], ...], at most f->limit per source), missing_seqs
 * (how many seqs those ranges hold, all of them), missing_truncated and
 * last_received_at (nil when no receipt of the source is stored);
 * truncated is true when any source's ranges or the list of sources was
 * cut. */
int query_agg_gaps(struct store *s, const struct store_filter *f,
                   const struct store_gap_select *sel, uint64_t deadline_ms,
                   msgpack_packer *pk, struct proto_err *err);

/* Quarantined payloads newest first: id, time, source, op, code, path,
 * message, size, and with with_raw the payload as a bin `raw`; has_id
 * selects the one row with that id. */
int query_agg_quarantine(struct store *s, const struct store_filter *f,
                         int has_id, uint64_t id, int with_raw,
                         uint64_t deadline_ms, msgpack_packer *pk,
                         struct proto_err *err);

#endif
