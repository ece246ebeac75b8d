/*
 * store_prune.h: retention pruning of old receipts (daemon/store_prune.c).
 */
#ifndef RECEIPTD_DAEMON_STORE_PRUNE_H
#define RECEIPTD_DAEMON_STORE_PRUNE_H

#include <stdint.h>

#include "error.h"
#include "store.h"

/* The largest batch store_prune() accepts: it holds one small record per
 * row, and up to one rollup sum (about 1 KiB) per row, in memory for the
 * length of the transaction. */
#define STORE_PRUNE_MAX_ROWS 10000

struct store_prune_result {
    uint64_t rows;  /* receipts removed, 0 when none was due */
    int64_t oldest; /* received_at of the oldest removed (rows > 0) */
    int64_t newest; /* received_at of the newest removed (rows > 0) */
    int more;       /* rows == max_rows: more receipts may be due */
    /* Of rows, those past the relay's cursor (store_opts.relay_drop):
     * not acknowledged by the center when they were pruned. */
    uint64_t undelivered;
};

/* In one transaction of its own, deletes at most max_rows (1 ..
 * STORE_PRUNE_MAX_ROWS) receipts with received_at < cutoff_ms, oldest
 * first; rewrites every hour and day rollup row those receipts counted in
 * from the receipts that remain in its bucket (deleting rows left empty),
 * so the rollups stay exactly the sum of the stored receipts; and, when at
 * least one receipt was removed, adds a row to `prunes` (time, cutoff,
 * rows, oldest and newest received_at, and with store_opts.relay_drop
 * how many of them were past the relay's cursor: undelivered). Dedupe records
 * are kept. Must be called on the writer's read-write store with no transaction
 * open. out is caller-owned and always filled. Returns 0, PROTO_EINVALID for a
 * bad max_rows, PROTO_ENOMEM, or the store's error code; on error nothing
 * changed. */
int store_prune(struct store *s, int64_t cutoff_ms, uint32_t max_rows,
                struct store_prune_result *out, struct proto_err *err);

/* The received_at of the newest stored receipt (by id, the order they
 * were stored in) into *ms, or INT64_MIN when the store holds none. For
 * the writer's cutoff, which never goes past it minus the retention age.
 * Writer thread, no transaction needed. Returns 0 or the store's error. */
int store_prune_newest(struct store *s, int64_t *ms, struct proto_err *err);

/* One record of the `prunes` table (unix milliseconds but id and rows). */
struct store_prune_rec {
    int64_t id, pruned_at, cutoff, rows, oldest, newest;
    int64_t undelivered; /* rows the center had not acknowledged */
};

/*
 * The `prunes` query (daemon/store_query_prune.c): reads the prune records
 * with f->since <= pruned_at < f->until (when set), newest first, at most
 * f->limit (1..10000), into *out (allocated; the caller frees it, also when
 * *n is 0) and sets *truncated when more matched. Any store connection (a
 * query thread's read-only one); bounded by deadline_ms (store_now_ms()
 * clock, 0 = none). Returns 0, PROTO_EINVALID for a bad limit, PROTO_ENOMEM,
 * or the store's error code (*out is NULL then).
 */
int store_query_prunes(struct store *s, const struct store_filter *f,
                       uint64_t deadline_ms, struct store_prune_rec **out,
                       size_t *n, int *truncated, struct proto_err *err);

#endif
