/*
 * store_tail.h: the tail and its chunks (store_tail.c), for the other
 * store files. Nothing outside the store includes this.
 */
#ifndef RECEIPTD_DAEMON_STORE_TAIL_H
#define RECEIPTD_DAEMON_STORE_TAIL_H

#include "store_internal.h"
#include "store_rollup.h"

/*
 * The tail and its chunks (store_tail.c, migrations/0007). Keys of the
 * postings, by kind; the values are string ids, statuses and backends.
 */
enum store_kind {
    STORE_KIND_PLAN = 1,
    STORE_KIND_GRAPH,
    STORE_KIND_MODEL,
    STORE_KIND_SOURCE,
    STORE_KIND_STATUS,
    STORE_KIND_REQUESTED,
    STORE_KIND_EXECUTED,
    STORE_KIND_COUNT
};

/* Receipts in the tail before it becomes a chunk: writes amortise each
 * key's posting and rollup rows over this many receipts, and a query reads
 * at most about this many rows of the tail directly. */
#define STORE_CHUNK_RECEIPTS 16384

struct store_tail;

/*
 * Loads the tail of a read-write store: builds the chunks and postings a
 * migration left to build (in transactions of their own, reporting through
 * o->migrating), then reads the tail rows into memory. No transaction may
 * be open. On success *out is the caller's (store_tail_free).
 */
int store_tail_open(struct store *s, const struct store_opts *o,
                    struct store_tail **out, struct proto_err *err);
void store_tail_free(struct store_tail *t);

/* Forgets the memory and reads it again from the tail rows, inside or
 * outside a transaction: after every rollback. */
int store_tail_reload(struct store *s, struct store_tail *t,
                      struct proto_err *err);

/* The id for the next receipt (each call takes one). */
int64_t store_tail_next_id(struct store_tail *t);

/* Adds the receipt whose row was just written: its posting keys, indexed
 * by enum store_kind, and its rollup key and figures. May write the tail
 * as a chunk first. Inside the writer's transaction. */
int store_tail_add(struct store *s, struct store_tail *t, int64_t id,
                   int64_t received_at, const int64_t keys[STORE_KIND_COUNT],
                   const struct store_rollup_key *rk, const struct receipt *r,
                   struct proto_err *err);

/*
 * The records of the tail's `receipt` writes (source, seq, receipt id,
 * status, payload hash): held here and written with the chunk as seq runs
 * (store_seq.c), so a lookup that misses the dedupe table and the runs
 * asks store_tail_seq_get() too (*out NULL: not in the tail; -1 when out
 * of memory). store_tail_seq_add keeps the first record of a (source,
 * seq) and ignores the empty source (no hello); is_new says the seq is
 * above its source's mark, so no record of it can be there and none is
 * looked for. A reload rebuilds the records from the rows, which hold no
 * hash (0: not known). store_tail_seq_max is the highest seq below 2^63
 * the tail holds for a source, -1 when none (a scan: rare).
 */
struct store_seq_entry;
int store_tail_seq_add(struct store_tail *t, int64_t source_id, uint64_t seq,
                       int64_t receipt_id, int status, uint32_t hash,
                       int is_new, struct proto_err *err);
int store_tail_seq_get(struct store_tail *t, int64_t source_id, uint64_t seq,
                       const struct store_seq_entry **out,
                       struct proto_err *err);
int64_t store_tail_seq_max(const struct store_tail *t, int64_t source_id);

/* Whether the tail is long enough to become a chunk. */
int store_tail_due(const struct store_tail *t);

/* Whether the tail holds a receipt received before cutoff_ms. */
int store_tail_holds_before(const struct store_tail *t, int64_t cutoff_ms);

/* The writer's tail; NULL on a read-only store. */
struct store_tail *store_tail_of(struct store *s);

/* Writes the tail as a chunk (no-op when empty), inside the writer's
 * transaction. */
int store_tail_flush(struct store *s, struct store_tail *t,
                     struct proto_err *err);

#endif
