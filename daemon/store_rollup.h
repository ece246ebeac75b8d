/*
 * store_rollup.h: the rollups (store_rollup.c), for the other store
 * files: the writer's sums per key, the merge of a chunk's sums into the
 * rollup rows, and the figures blob. Nothing outside the store includes
 * this.
 */
#ifndef RECEIPTD_DAEMON_STORE_ROLLUP_H
#define RECEIPTD_DAEMON_STORE_ROLLUP_H

#include "store_internal.h"

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
 * The writer's sums per key (store_rollup.c): the tail's; those of the
 * chunks written since the last seal, which wait to be sealed together
 * (store_opts.rollup_chunks at a time); and the sealed ones while they are
 * merged into the rollup rows a slice per commit (migrations/0008). *rup
 * holds the prepared statements and the sums, made on first use (free
 * with store_rollup_free); NULL is a no-op for all but the functions that
 * take rup.
 *
 * store_rollup_add adds a tail receipt; store_rollup_full tells that no
 * new key fits (the tail must become a chunk first). store_rollup_chunk
 * moves the tail's sums, now the chunk [first_id, end_id), to the waiting
 * ones, and seals those when rollup_chunks chunks wait (after merging
 * what was left of the last seal). store_rollup_merge_step merges the
 * next slice, sized to what the tail took since the last one;
 * store_rollup_merge_keys merges up to keys more (INT_MAX: the rest).
 * store_rollup_seal_waiting seals the waiting chunks when no merge is
 * under way (a quiet writer); store_rollup_seal_all merges everything
 * below the tail (pruning). store_rollup_discard_all empties them all
 * (rollback: the tail reloads them, store_tail_reload).
 */
int store_rollup_add(struct store *s, struct store_rollup **rup,
                     const struct store_rollup_key *k, const struct receipt *r,
                     struct proto_err *err);
int store_rollup_full(const struct store_rollup *ru);

/* Asks the CPU ahead for the tail's sums that store_rollup_add will
 * touch for receipts r[0..n) under keys k[0..n) (at most
 * STORE_ROLLUP_PREFETCH_MAX are looked at); changes nothing. */
#define STORE_ROLLUP_PREFETCH_MAX 64
void store_rollup_prefetch(const struct store_rollup *ru,
                           const struct store_rollup_key *k,
                           const struct receipt *const *r, size_t n);
int store_rollup_chunk(struct store *s, struct store_rollup *ru,
                       int64_t first_id, int64_t end_id, struct proto_err *err);
int store_rollup_merge_step(struct store *s, struct store_rollup *ru,
                            struct proto_err *err);
int store_rollup_merge_keys(struct store *s, struct store_rollup *ru, int keys,
                            struct proto_err *err);
int store_rollup_merging(const struct store_rollup *ru);
int store_rollup_waiting(const struct store_rollup *ru);
int store_rollup_seal_waiting(struct store *s, struct store_rollup *ru,
                              struct proto_err *err);
int store_rollup_seal_all(struct store *s, struct store_rollup *ru,
                          struct proto_err *err);
void store_rollup_discard_all(struct store_rollup *ru);
void store_rollup_free(struct store_rollup *ru);

/* How far the merge of the sealed sums is (the rollup_merge row and the
 * rollup_end counter): the rollups cover the receipts below from, and
 * those of [from, end) whose key is at most key (none when !has_key);
 * those of [end, tail) are in no rollup yet, and the tail's neither.
 * from <= end <= tail; from is the end on a store without the row. */
struct store_rollup_merge {
    int64_t from, end, tail;
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
void store_rollup_resealed(struct store_rollup *ru,
                           const struct store_rollup_merge *m);
/* And the chunks waiting to be sealed: rewait starts them empty,
 * add_waiting adds a receipt of them, rewaited makes them the ids
 * [first_id, end_id) of that many chunks. */
int store_rollup_rewait(struct store *s, struct store_rollup **rup,
                        struct proto_err *err);
int store_rollup_add_waiting(struct store_rollup *ru,
                             const struct store_rollup_key *k,
                             const struct receipt *r, struct proto_err *err);
int store_rollup_rewaited(struct store_rollup *ru, int64_t first_id,
                          int64_t end_id, int chunks, struct proto_err *err);

/* The chunks whose sums are sealed together (store_opts.rollup_chunks). */
int store_rollup_span(struct store *s);

/*
 * The sums the rollups do not hold yet, for queries (store_opts.shared):
 * after each commit the writer publishes views of them (immutable,
 * reference-counted) that tile [rollup_from, tail_from) of the committed
 * store. store_rollup_publish publishes what changed (after a COMMIT);
 * store_rollup_reloaded publishes what a reload rebuilt (ru may be
 * NULL: nothing).
 *
 * store_rollup_views takes references to the published views that tile
 * [m->from, m->tail) for a query whose read transaction saw m, into v (at
 * least STORE_ROLLUP_VIEWS_MAX entries); 1 when they do, 0 when they do
 * not (the writer has moved on more than a chunk, or sh is NULL: the
 * query reads the receipts instead). store_rollup_views_walk calls cb for every
 * key and its sums that the rollups of m do not hold (a hour bucket start in
 * k->received_at); a non-zero return from cb stops the walk and is
 * returned. Release the references with store_rollup_views_release.
 */
/* The sealed sums, and the waiting ones before and after the last chunk. */
#define STORE_ROLLUP_VIEWS_MAX 3
struct store_rollup_view;
void store_rollup_publish(struct store_rollup *ru);
void store_rollup_reloaded(struct store *s, struct store_rollup *ru);
int store_rollup_views(struct store_shared *sh,
                       const struct store_rollup_merge *m,
                       struct store_rollup_view **v, int *n);
void store_rollup_views_release(struct store_rollup_view **v, int n);
typedef int (*store_rollup_walk_cb)(void *arg, const struct store_rollup_key *k,
                                    const struct store_agg_group *g);
int store_rollup_views_walk(struct store_rollup_view *const *v, int n,
                            const struct store_rollup_merge *m,
                            store_rollup_walk_cb cb, void *arg);

/*
 * The row of chunk_sums (migrations/0014, 0017) a chunk gets as it is
 * written (store_rollup_chunk): its receipts summed per plan, graph, model,
 * requested and executed backend and hour. store_rollup_chunk_sums_walk
 * calls cb for each entry of such a row, the keys and counts from `sums`
 * and the counters' figures from `figures` (NULL: none, for `fallbacks`;
 * k holds all but source_id, which is 0, and the hour's start in
 * received_at); a non-zero return
 * stops the walk and is returned. A malformed row ends the walk early.
 */
int store_rollup_chunk_sums_walk(const void *sums, size_t len,
                                 const void *figures, size_t flen,
                                 store_rollup_walk_cb cb, void *arg);

/* The writer's rollup sums (store.c owns them). */
struct store_rollup **store_rollups(struct store *s);

/* Tests only: while on, a fold of a chunk's sums into the waiting ones
 * (which runs off the writer's thread) handed over while it was on waits
 * (process-wide). A fold handed over before is not held, however late its
 * thread starts it: the next chunk would wait for it. */
void store_rollup_test_hold(int on);

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
