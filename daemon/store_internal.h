/*
 * store_internal.h: what store.c shares with the other store_*.c files.
 * Nothing outside the store includes this.
 */
#ifndef RECEIPTD_DAEMON_STORE_INTERNAL_H
#define RECEIPTD_DAEMON_STORE_INTERNAL_H

#include <sqlite3.h>

#include "store.h"

/* received_at .. counter_coverage: the columns before the counters. */
#define STORE_RECEIPT_FIXED_COLS 13

/* Records an SQLite failure in err (text copied at once) and returns its
 * PROTO_E* code; marks the transaction broken when it cannot continue. */
int store_fail(struct store *s, int rc, struct proto_err *err,
               const char *what);

/* sqlite3_exec() with store_fail() on error. */
int store_exec(struct store *s, const char *sql, struct proto_err *err,
               const char *what);

sqlite3 *store_db(struct store *s);
const char *store_path(struct store *s);
/* Where the progress handler of a query finds its deadline. */
uint64_t *store_deadline(struct store *s);

/*
 * Bounds the statements run on s until store_deadline_disarm(): past
 * deadline_ms (store_now_ms() clock; 0 = none) SQLite interrupts the
 * running statement, which then fails with SQLITE_INTERRUPT. Query
 * connections only.
 */
void store_deadline_arm(struct store *s, uint64_t deadline_ms);
void store_deadline_disarm(struct store *s);

/* Binds a named parameter when the statement has it (queries build their
 * SQL from the filters that are set). p is borrowed until the statement is
 * reset. */
void store_bind_blob(sqlite3_stmt *st, const char *name, const char *p,
                     size_t n);
void store_bind_i64(sqlite3_stmt *st, const char *name, int64_t v);

/* Unix milliseconds beyond INT64_MAX cannot be stored: clamp, so a
 * comparison stays meaningful instead of wrapping negative. */
int64_t store_clamp_i64(uint64_t v);

/* The SQL of the `receipts` query for the filters set in f, into sql; the
 * length it needs (>= cap: cut). Named parameters as store_query_receipts
 * binds them. For the tests of its query plan as well. */
size_t store_query_receipts_sql(char *sql, size_t cap,
                                const struct store_filter *f);

/*
 * The loop of a query of rows: steps st (prepared on s, its parameters
 * bound, its SQL asking for limit + 1 rows) under the deadline, calls
 * one_cb(st, cb, arg) for each of the first limit rows and sets
 * *truncated when there was one more; finalizes st. Returns 0, one_cb's
 * non-zero return, or an error as store_fail.
 */
typedef int (*store_row_fn)(sqlite3_stmt *st, void *cb, void *arg);
int store_query_rows(struct store *s, sqlite3_stmt *st, uint32_t limit,
                     uint64_t deadline_ms, store_row_fn one_cb, void *cb,
                     void *arg, int *truncated, struct proto_err *err);

/* A text or blob column as a borrowed string ("" for NULL), valid until
 * the next step or reset of st. */
void store_column_str(sqlite3_stmt *st, int col, struct proto_str *out);

/* LEB128: seven bits a byte, low first; at most 10 bytes for a u64.
 * store_varint_get returns the byte after v, NULL when cut at end.
 * Inline: the rollup figures read and write hundreds a row. */
static inline const unsigned char *
store_varint_get(const unsigned char *p, const unsigned char *end, uint64_t *v)
{
    unsigned shift = 0;

    *v = 0;
    while (p < end && shift < 64) {
        *v |= (uint64_t)(*p & 0x7f) << shift;
        if (!(*p++ & 0x80))
            return p;
        shift += 7;
    }
    return NULL;
}

static inline unsigned char *
store_varint_put(unsigned char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

/* The seq runs' statements (store_seq.c), made on first use. */
struct store_seq **store_seqs(struct store *s);

/* Rollups (store_rollup.c): one row per key and hour of received_at. */
#define STORE_BUCKET_MS 3600000
/* And in rollups_day, one row per key and day. */
#define STORE_DAY_MS 86400000
#define STORE_LEVELS 2

struct store_rollup;
struct store_agg_group;

struct store_rollup_key {
    int64_t plan_id, graph_id, model_id, source_id;
    int requested, executed;
    int64_t received_at;
};

/*
 * The writer's sums per key (store_rollup.c): the tail's, and the last
 * chunk's while they are merged into the rollup rows a slice per commit
 * (migrations/0008). *rup holds the prepared statements and the sums,
 * made on first use (free with store_rollup_free); NULL is a no-op for
 * all but the functions that take rup.
 *
 * store_rollup_add adds a tail receipt; store_rollup_full tells that no
 * new key fits (the tail must become a chunk first). store_rollup_seal
 * makes the tail's sums the chunk [first_id, end_id) to merge, after
 * merging what was left of the last one. store_rollup_merge_step merges
 * the next slice, sized to what the tail took since the last one;
 * store_rollup_merge_keys merges up to keys more (INT_MAX: the rest).
 * store_rollup_discard_all empties both (rollback: the tail reloads them,
 * store_tail_reload).
 */
int store_rollup_add(struct store *s, struct store_rollup **rup,
                     const struct store_rollup_key *k, const struct receipt *r,
                     struct proto_err *err);
int store_rollup_full(const struct store_rollup *ru);
int store_rollup_seal(struct store *s, struct store_rollup *ru,
                      int64_t first_id, int64_t end_id, struct proto_err *err);
int store_rollup_merge_step(struct store *s, struct store_rollup *ru,
                            struct proto_err *err);
int store_rollup_merge_keys(struct store *s, struct store_rollup *ru, int keys,
                            struct proto_err *err);
int store_rollup_merging(const struct store_rollup *ru);
void store_rollup_discard_all(struct store_rollup *ru);
void store_rollup_free(struct store_rollup *ru);

/* How far the merge of a chunk's sums is (the rollup_merge row): the
 * rollups cover the receipts below from, and those of [from, tail_from)
 * whose key is at most key (none when !has_key). from is INT64_MAX on a
 * store without the row. */
struct store_rollup_merge {
    int64_t from;
    int has_key;
    struct store_rollup_key key; /* received_at: the bucket's start */
};
int store_rollup_merge_state(struct store *s, struct store_rollup_merge *m,
                             struct proto_err *err);
/* Whether a receipt's key k (received_at its own) comes after last. */
int store_rollup_key_after(const struct store_rollup_key *k,
                           const struct store_rollup_key *last);
/* Rebuilding the merge from the rows (store_tail_reload): reseal starts
 * the chunk [first_id, end_id) empty, add_sealed adds a receipt not yet
 * merged, resealed puts them in key order. */
int store_rollup_reseal(struct store *s, struct store_rollup **rup,
                        int64_t first_id, int64_t end_id,
                        struct proto_err *err);
int store_rollup_add_sealed(struct store_rollup *ru,
                            const struct store_rollup_key *k,
                            const struct receipt *r, struct proto_err *err);
void store_rollup_resealed(struct store_rollup *ru);

/* The writer's rollup sums (store.c owns them). */
struct store_rollup **store_rollups(struct store *s);

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

/* The first column of sql's first row as an integer, dflt when there is
 * none; param (len bytes, bound as a blob or a text) is ?1 when not NULL.
 * what names the step in an error. Any connection, the caller's
 * transaction. */
int store_one_int(struct store *s, const char *sql, const char *param,
                  size_t len, int as_blob, int64_t dflt, int64_t *v,
                  struct proto_err *err, const char *what);

/* Sets (or makes) a row of the counters table; the writer's store only,
 * in its transaction. */
int store_counter_set(struct store *s, const char *name, int64_t v,
                      struct proto_err *err);

/* The id of string p (n bytes) in `strings`, 0 when it has none; on any
 * connection, in the caller's transaction. */
int store_string_id(struct store *s, const char *p, size_t n, int64_t *id,
                    struct proto_err *err);

/* A row of the counters table (tail_from, days_from, id_floor, ...), or
 * dflt when it has none; in the caller's transaction, on any connection. */
int store_counter(struct store *s, const char *name, int64_t dflt, int64_t *v,
                  struct proto_err *err);

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
 * asks store_tail_seq_get() too (NULL: not in the tail). store_tail_seq_add
 * keeps the first record of a (source, seq) and ignores the empty source
 * (no hello); a reload rebuilds the records from the rows, which hold no
 * hash (0: not known). store_tail_seq_max is the highest seq below 2^63
 * the tail holds for a source, -1 when none (a scan: rare).
 */
struct store_seq_entry;
int store_tail_seq_add(struct store_tail *t, int64_t source_id, uint64_t seq,
                       int64_t receipt_id, int status, uint32_t hash,
                       struct proto_err *err);
const struct store_seq_entry *
store_tail_seq_get(const struct store_tail *t, int64_t source_id, uint64_t seq);
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

/* The rollup figure columns, each name after prefix ("r."), in the order
 * store_rollup_read() expects; returns the length as snprintf does. */
size_t store_rollup_columns(char *sql, size_t cap, const char *prefix);

/* Adds the figures at columns col.. of st to g. */
void store_rollup_read(sqlite3_stmt *st, int col, struct store_agg_group *g);

/* The largest figures blob: a mask and five varints per counter. */
#define STORE_ROLLUP_FIGURES_MAX (4 + RECEIPT_NCOUNTERS * 5 * 10)

/* Encodes the counters of g as the figures blob into out; its length. */
size_t store_rollup_figures(const struct store_agg_group *g,
                            unsigned char out[STORE_ROLLUP_FIGURES_MAX]);

/* Binds the figure columns of g (store_rollup_columns' order) from
 * parameter col on; buf holds the blob until the statement is reset. */
void store_rollup_bind(sqlite3_stmt *st, int col,
                       const struct store_agg_group *g,
                       unsigned char buf[STORE_ROLLUP_FIGURES_MAX]);

#endif
