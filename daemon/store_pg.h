/*
 * store_pg.h: what the PostgreSQL backend's files (store_pg.c: the
 * connection, migrations and writes; store_pg_query.c: the queries) share.
 * Nothing outside the store includes this; the daemon reaches the backend
 * through store_ops.h with store_opts.backend = STORE_BACKEND_POSTGRESQL.
 *
 * A struct store_pg is one libpq connection used by one thread at a time,
 * like SQLite's: the writer's (read-write) or a query thread's (read-only,
 * default_transaction_read_only). A connection PostgreSQL lost is
 * reconnected (PQreset) before the next transaction.
 */
#ifndef RECEIPTD_DAEMON_STORE_PG_H
#define RECEIPTD_DAEMON_STORE_PG_H

#include <libpq-fe.h>

#include "store_ops.h"

struct store_agg_counter;

/* The newest schema version of migrations/pg/ this binary knows. */
int store_pg_schema_version(void);

struct store_pg_row; /* a receipt of the open group (store_pg.c) */

/* A (source, seq) record of the open group; strings in the arena. */
struct store_pg_rec {
    size_t source, source_len, outcome, outcome_len;
    uint64_t seq;
    int64_t receipt_id;
    int op, status, has_outcome;
    uint32_t hash;
};

/* A source's highest recorded seq, as far as this instance knows. */
struct store_pg_hwm {
    char *source; /* owned; NULL: a free slot */
    size_t len;
    int known; /* read from dedupe */
    int has;   /* the source has a recorded seq: seq */
    uint64_t seq;
};

/* A growing buffer of COPY tuples. */
struct store_pg_buf {
    unsigned char *p;
    size_t len, cap;
};

struct store_pg {
    struct store_base base; /* first: store_ops.h */
    PGconn *pc;
    char *where; /* "PostgreSQL database D on H", for messages */
    int readonly;
    int broken; /* the transaction cannot go on */
    int in_txn;
    uint64_t quarantine_max;
    /* Ids of receipts sent to this instance (origin ''), next_id: the
     * block last drawn from the sequence receipt_ids, at id_start, with
     * [id_next, id_end) left; ids_locked once this transaction holds the
     * ids' lock and has checked the block is still the newest drawn. */
    int64_t id_start, id_next, id_end;
    int ids_locked;
    /* The group's receipts, as COPY (FORMAT binary) tuples waiting for
     * the commit, and their rollup keys and figures; its (source, seq)
     * records likewise. */
    struct store_pg_buf copy, seqs_copy;
    /* The (source, seq) records of relayed receipts (store_write.relayed),
     * which go into dedupe only where it has none (seq_staging). */
    struct store_pg_buf relay_seqs;
    size_t n_relay_seqs;
    struct store_pg_row *rows;
    size_t n_rows, cap_rows;
    struct store_pg_rec *recs;
    size_t n_recs, cap_recs;
    char *arena; /* the rows' and records' strings, NUL-terminated */
    size_t arena_len, arena_cap;
    /* What the open savepoint restores. */
    struct {
        size_t copy, seqs_copy, relay_seqs, n_relay_seqs, rows, recs, arena;
    } sp;
    /* Each source's highest recorded seq (store_pg.c pg_write_begin),
     * open addressing in n_hwm_slots (a power of two). */
    struct store_pg_hwm *hwm;
    size_t n_hwm, n_hwm_slots;
    /* The rollup_hours row type's id (the merge's upsert parameter). */
    uint32_t rollup_oid;
    /* Groups that appended rollup sums since the last merge (store_pg.c
     * pg_merge); 1 at open, for what an earlier run left pending. */
    unsigned pending_groups;
    uint64_t appended_ms; /* store_now_ms() of the last of them */
    /* Days (received_at / 86400000) whose partition exists. */
    int64_t *days;
    size_t n_days, cap_days;
};

static inline struct store_pg *
store_pg_of(struct store *s)
{
    return (struct store_pg *)(void *)s;
}

/*
 * Records a failed libpq call in err (PostgreSQL's message copied at
 * once; PROTO_EOVERLOADED for a statement cancelled by statement_timeout,
 * PROTO_EUNAVAILABLE otherwise) and marks the transaction broken. r may
 * be NULL (a connection failure). Returns the code.
 */
int store_pg_fail(struct store_pg *p, PGresult *r, struct proto_err *err,
                  const char *what);

/* Makes sure the connection is up (PQreset when PostgreSQL dropped it).
 * Returns 0 or PROTO_EUNAVAILABLE. */
int store_pg_ready(struct store_pg *p, struct proto_err *err);

/* BEGIN, on a new connection when the server dropped the one held (a
 * restart notices only at the first command). Returns 0 or the error. */
int store_pg_begin(struct store_pg *p, struct proto_err *err);

/* Runs sql (no parameters), expecting no rows. */
int store_pg_exec(struct store_pg *p, const char *sql, struct proto_err *err,
                  const char *what);

/* A unix time or id from a filter as a bigint: beyond INT64_MAX is
 * clamped, so a comparison stays meaningful. */
static inline int64_t
store_pg_clamp(uint64_t v)
{
    return v > INT64_MAX ? INT64_MAX : (int64_t)v;
}

/* Big-endian integers of binary results and COPY tuples. */
int64_t store_pg_i64(const char *p);
int32_t store_pg_i32(const char *p);
int16_t store_pg_i16(const char *p);
/* Binary arrays of a result: a bigint[] into v[0, max) (the rest 0); a
 * numeric[] into v[0, max), has[k] saying element k was not NULL
 * (store_pg_query.c). */
void store_pg_get_i64s(PGresult *r, int row, int col, uint64_t *v,
                       unsigned max);
/* Adds a rollup_pending row's sums blob (b, len) to c[RECEIPT_NCOUNTERS];
 * -1 for a malformed one (store_pg.c). */
int store_pg_sums_add(const char *b, int len, struct store_agg_counter *c);
void store_pg_get_numerics(PGresult *r, int row, int col, unsigned __int128 *v,
                           int *has, unsigned max);

/* The operations of store_pg_query.c. */
int store_pg_query_receipts(struct store *s, const struct store_filter *f,
                            uint64_t deadline_ms, store_row_cb cb, void *arg,
                            int *truncated, struct proto_err *err);
int store_pg_last_receipt_id(struct store *s, const struct store_filter *f,
                             uint64_t deadline_ms, uint64_t *id,
                             struct proto_err *err);
int store_pg_query_stats(struct store *s, uint64_t deadline_ms,
                         struct store_stats *st, struct proto_err *err);
int store_pg_query_agg(struct store *s, const struct store_filter *f,
                       int group_by, unsigned flags, uint64_t deadline_ms,
                       struct store_agg *out, struct proto_err *err);
int store_pg_query_gaps(struct store *s, const struct store_filter *f,
                        const struct store_gap_select *sel,
                        uint64_t deadline_ms, store_gap_cb cb, void *arg,
                        int *truncated, struct proto_err *err);
int store_pg_query_quarantine(struct store *s, const struct store_filter *f,
                              int has_id, uint64_t id, int with_raw,
                              uint64_t deadline_ms, store_qrow_cb cb, void *arg,
                              int *truncated, struct proto_err *err);
int store_pg_query_plans(struct store *s, const struct store_filter *f,
                         uint64_t deadline_ms, store_plan_row_cb cb, void *arg,
                         int *truncated, struct proto_err *err);
int store_pg_query_retained(struct store *s, const struct store_filter *f,
                            uint64_t deadline_ms, store_retained_row_cb cb,
                            void *arg, int *truncated, struct proto_err *err);
int store_pg_plan_readback(struct store *s, const struct store_plan_key *k,
                           struct proto_str value_id, uint64_t deadline_ms,
                           int *plan_found, void **value, size_t *len,
                           struct proto_err *err);
int store_pg_plan_counts(struct store *s, uint64_t *plans, uint64_t *retained,
                         struct proto_err *err);
int store_pg_query_prunes(struct store *s, const struct store_filter *f,
                          uint64_t deadline_ms, struct store_prune_rec **out,
                          size_t *n, int *truncated, struct proto_err *err);

#endif
