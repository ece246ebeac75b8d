/*
 * store_seq.h: the seqs of `receipt` writes as runs (migrations/0009).
 *
 * A single receipt's (source, seq) record is what its row says. It waits
 * with the tail in memory (store_tail.c) and reaches the store with the
 * chunk: one `seq_runs` row per source and chunk, whose entries hold each
 * seq with its receipt id, fallback status and payload hash, sorted by
 * seq. A lookup (only for a seq at or below the source's high-water mark,
 * store.c) reads the run whose range holds the seq; `gaps` walks a
 * source's runs in seq order. Writes with another op, and batches, keep
 * their record in the `dedupe` table.
 *
 * Seqs are kept as the store keeps them everywhere: the bit pattern of the
 * u64 as a signed integer, runs ordered by that.
 */
#ifndef RECEIPTD_DAEMON_STORE_SEQ_H
#define RECEIPTD_DAEMON_STORE_SEQ_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct store;

/* One `receipt` write's record. */
struct store_seq_entry {
    int64_t source_id; /* 0 = free slot, in the tail's table */
    int64_t seq;       /* the bit pattern of the u64, as stored */
    int64_t receipt_id;
    int status;
    uint32_t hash; /* of the payload; 0 = not known */
};

/* The entries blob: a format byte, then per entry the seq's distance from
 * the previous one (the run's lo for the first), (receipt id - chunk) << 2
 * | status, both LEB128, and the hash, 4 bytes little-endian. */
#define STORE_SEQ_FORMAT    1
#define STORE_SEQ_ENTRY_MAX (10 + 10 + 4)

/* Cursor over the entries of one run. */
struct store_seq_run {
    const unsigned char *p, *end;
    int64_t chunk;
    int64_t seq; /* the last entry's */
    int first;
};

/* Starts a cursor over a run's entries blob; -1 when the format is not
 * one this build reads. */
int store_seq_run_init(struct store_seq_run *c, const void *blob, size_t len,
                       int64_t chunk, int64_t lo);
/* The next entry into e (source_id left alone): 1, 0 at the end, -1 when
 * the blob is cut or corrupt. */
int store_seq_run_next(struct store_seq_run *c, struct store_seq_entry *e);

/* Writes one run per source of entries e[0..n), sorted by (source, seq),
 * for the chunk that starts at chunk. Inside the writer's transaction. */
int store_seq_write(struct store *s, int64_t chunk,
                    const struct store_seq_entry *const *e, size_t n,
                    struct proto_err *err);

/* Looks (source, seq) up in the runs: 1 found (e filled), 0 not. */
int store_seq_find(struct store *s, int64_t source_id, uint64_t seq,
                   struct store_seq_entry *e, struct proto_err *err);

/* The highest seq below 2^63 the runs hold for a source into *max, -1
 * when none. */
int store_seq_max(struct store *s, int64_t source_id, int64_t *max,
                  struct proto_err *err);

/* The prepared statements (made on first use, on s's connection). */
struct store_seq;
void store_seq_free(struct store_seq *q);

#endif
