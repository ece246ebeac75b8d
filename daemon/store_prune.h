/*
 * store_prune.h: retention pruning of old receipts (daemon/store_prune.c).
 */
#ifndef RECEIPTD_DAEMON_STORE_PRUNE_H
#define RECEIPTD_DAEMON_STORE_PRUNE_H

#include <stdint.h>

#include "error.h"
#include "store.h"

/* The largest batch store_prune() accepts: it holds one small record per
 * row in memory for the length of the transaction. */
#define STORE_PRUNE_MAX_ROWS 100000

struct store_prune_result {
    uint64_t rows;  /* receipts removed, 0 when none was due */
    int64_t oldest; /* received_at of the oldest removed (rows > 0) */
    int64_t newest; /* received_at of the newest removed (rows > 0) */
    int more;       /* rows == max_rows: more receipts may be due */
};

/* In one transaction of its own, deletes at most max_rows (1 ..
 * STORE_PRUNE_MAX_ROWS) receipts with received_at < cutoff_ms, oldest
 * first; rewrites every hour and day rollup row those receipts counted in
 * from the receipts that remain in its bucket (deleting rows left empty),
 * so the rollups stay exactly the sum of the stored receipts; and, when at
 * least one receipt was removed, adds a row to `prunes` (time, cutoff,
 * rows, oldest and newest received_at). Dedupe records are kept. Must be
 * called on the writer's read-write store with no transaction open. out
 * is caller-owned and always filled. Returns 0, PROTO_EINVALID for a bad
 * max_rows, PROTO_ENOMEM, or the store's error code; on error nothing
 * changed. */
int store_prune(struct store *s, int64_t cutoff_ms, uint32_t max_rows,
                struct store_prune_result *out, struct proto_err *err);

#endif
