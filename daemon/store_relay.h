/*
 * store_relay.h: the store's part of the fleet's relay (docs/fleet.md,
 * migration 0013), in plain types.
 *
 * A node keeps one cursor per stream (relay_cursor): the highest id the
 * center acknowledged after its COMMIT. The relay reads what lies past it
 * with a read-only connection of its own, and the writer advances it in
 * a transaction of its own once a batch was acknowledged.
 *
 * A center keeps, per origin (a node's name) and stream, the highest id
 * of that node it committed (relay_origins), updated in the same
 * transaction as the rows, and which of its own receipt ids a batch of
 * an origin became (relay_ranges).
 */
#ifndef RECEIPTD_DAEMON_STORE_RELAY_H
#define RECEIPTD_DAEMON_STORE_RELAY_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "store.h"

/* The streams a node relays (docs/fleet.md): receipts by id, plans by
 * their row id, retained values by their row id in retained_log
 * (migration 0016). */
#define STORE_RELAY_RECEIPTS  "receipts"
#define STORE_RELAY_PLANS     "plans"
#define STORE_RELAY_RETENTION "retention"

/* ---- The node. ---- */

/* The cursor of stream (borrowed, NUL-terminated) into *acked: 0 when the
 * stream was never acknowledged. Any connection. Returns 0 or the store's
 * error code. */
int store_relay_cursor_get(struct store *s, const char *stream, uint64_t *acked,
                           struct proto_err *err);

/* Moves the cursor of stream to acked, never back (a lower value leaves
 * it). Inside the caller's transaction (the writer's). Returns 0 or the
 * store's error code. */
int store_relay_cursor_set(struct store *s, const char *stream, uint64_t acked,
                           struct proto_err *err);

/*
 * Reads the receipts with id > after, in id order: at most max rows, and
 * no more once the rows passed so far hold max_bytes of counters and
 * unknown keys (at least one row is always read). cb gets each row
 * (borrowed for the call, as store_query_receipts gives them); a non-zero
 * return stops the read with that code. *last is the id of the last row
 * read (after when none). For a read-only store; the caller holds no
 * transaction (the read is one). Returns 0, the callback's code or the
 * store's error code.
 */
int store_relay_read(struct store *s, uint64_t after, uint32_t max,
                     size_t max_bytes, store_row_cb cb, void *arg,
                     uint64_t *last, struct proto_err *err);

/* A registered plan as the relay sends it; borrowed for the callback. */
struct store_relay_plan {
    int64_t id;
    int64_t registered_at;
    struct proto_str source;
    const void *canonical; /* msgpack, plan_encode_canonical */
    size_t len;
};

typedef int (*store_relay_plan_cb)(void *arg, const struct store_relay_plan *p);

/* store_relay_read for the plans past after, in row id order. */
int store_relay_read_plans(struct store *s, uint64_t after, uint32_t max,
                           size_t max_bytes, store_relay_plan_cb cb, void *arg,
                           uint64_t *last, struct proto_err *err);

/* A retained value as the relay sends it, under its plan's key (how a
 * center knows the plan); borrowed for the callback. */
struct store_relay_retained {
    int64_t id;      /* its row in retained_log */
    int64_t plan_id; /* this store's plan row */
    int64_t retained_at;
    struct proto_str plan, graph; /* prepared_plan_id, graph_hash */
    struct proto_str value_id;
    const void *value; /* msgpack RetainedCompletionValue */
    size_t len;
};

typedef int (*store_relay_retained_cb)(void *arg,
                                       const struct store_relay_retained *v);

/* store_relay_read for the retained values past after, in the order they
 * were first retained (retained_log's id). */
int store_relay_read_retained(struct store *s, uint64_t after, uint32_t max,
                              size_t max_bytes, store_relay_retained_cb cb,
                              void *arg, uint64_t *last, struct proto_err *err);

/* The newest id of stream (STORE_RELAY_RECEIPTS, _PLANS or _RETENTION)
 * into *id, 0 when none. */
int store_relay_last_id(struct store *s, const char *stream, uint64_t *id,
                        struct proto_err *err);

/* What waits past a cursor. */
struct store_relay_backlog {
    uint64_t records;  /* receipts with id > the cursor */
    uint64_t last_id;  /* the newest receipt id, 0 when none */
    int64_t oldest_at; /* received_at of the first past the cursor;
                          INT64_MIN when none waits */
};

/* Fills *b for the cursor after: two lookups by id, and a count of the
 * rows past the cursor while the ids say at most count_max wait (above,
 * records is the difference of the ids: the count would read every row).
 * Any connection. The relay thread counts up to STORE_RELAY_COUNT_MAX
 * rows (about 10 ms here when they are not in SQLite's cache); ids are
 * rarely skipped (a rolled-back group), so the difference is close. */
#define STORE_RELAY_COUNT_MAX 100000
int store_relay_backlog(struct store *s, uint64_t after, uint64_t count_max,
                        struct store_relay_backlog *b, struct proto_err *err);

/* Whether retention waits for the relay on s (store_opts.relay_wait):
 * store_prune then removes no receipt above the cursor of "receipts" (none
 * while it was never acknowledged). Plans and retained values are never
 * pruned, so their streams need no such wait. */
int store_relay_waits(const struct store *s);

/* Whether retention prunes past the cursor anyway (store_opts.relay_drop,
 * "drop"): store_prune then counts the receipts it removed above the
 * cursor of "receipts" in its result and prunes record (undelivered). */
int store_relay_drops(const struct store *s);

/* ---- The center. ---- */

/* The highest id of origin (len bytes, borrowed) committed in stream, 0
 * when none. Any connection; the writer's inside its transaction. */
int store_relay_origin_get(struct store *s, const char *origin, size_t len,
                           const char *stream, uint64_t *committed,
                           struct proto_err *err);

/* Sets it (raises only), inside the caller's transaction. */
int store_relay_origin_set(struct store *s, const char *origin, size_t len,
                           const char *stream, uint64_t committed,
                           struct proto_err *err);

/* Records that this store's receipts [first_id, last_id] are origin's
 * [origin_first, origin_last], inside the caller's transaction. */
int store_relay_range_add(struct store *s, const char *origin, size_t len,
                          int64_t first_id, int64_t last_id,
                          uint64_t origin_first, uint64_t origin_last,
                          struct proto_err *err);

#endif
