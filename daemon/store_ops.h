/*
 * store_ops.h: what a store backend must do. The daemon calls the
 * functions of store.h, store_plan.h, store_prune.h and store_agg.h; each
 * of them calls the operation of the same name in the table of the
 * backend the store was opened with (store_ops.c). Each operation's
 * contract is its function's in those headers.
 *
 * Backends: SQLite (store.c and the other store_*.c files, the node's
 * embedded store and the default) and PostgreSQL (store_pg*.c, the
 * central tier; docs/fleet.md).
 *
 * Every backend's connection begins with a struct store_base, so that a
 * struct store * of either backend finds its table; store_open() chooses
 * the backend from store_opts.backend.
 */
#ifndef RECEIPTD_DAEMON_STORE_OPS_H
#define RECEIPTD_DAEMON_STORE_OPS_H

#include "store.h"
#include "store_agg.h"
#include "store_plan.h"
#include "store_prune.h"
#include "store_relay.h"

struct store_ops {
    const char *name; /* "sqlite", "postgresql": for messages */

    /* The connection. where is a file path (SQLite) or a libpq conninfo
     * (PostgreSQL), borrowed. */
    int (*open)(const char *where, const struct store_opts *opts,
                struct store **out, struct proto_err *err);
    void (*free)(struct store *s);
    int (*user_version)(struct store *s, int *version, struct proto_err *err);
    const char *(*path)(struct store *s);

    /* The writer's transactions. */
    int (*begin)(struct store *s, struct proto_err *err);
    int (*commit)(struct store *s, struct proto_err *err);
    void (*rollback)(struct store *s);
    int (*savepoint)(struct store *s, struct proto_err *err);
    int (*savepoint_release)(struct store *s, struct proto_err *err);
    void (*savepoint_rollback)(struct store *s);
    int (*txn_broken)(struct store *s);

    /* Writes, in the writer's transaction. */
    int (*apply)(struct store *s, struct store_write *w, struct proto_err *err);
    int (*write_begin)(struct store *s, struct store_write *w,
                       int64_t *source_id, struct proto_err *err);
    int (*write_end)(struct store *s, struct store_write *w, int64_t source_id,
                     struct proto_err *err);
    int (*plan_get)(struct store *s, const struct store_plan_key *k,
                    int64_t *id, void **canonical, size_t *len,
                    struct proto_err *err);
    int (*plan_put)(struct store *s, const struct store_plan_new *p,
                    int64_t *id, struct proto_err *err);
    int (*plan_retain)(struct store *s, int64_t plan_id,
                       struct proto_str value_id, int64_t retained_at,
                       const void *value, size_t len, struct proto_err *err);

    /* A center's side of the relay (store_relay.h), in the writer's
     * transaction. origin_get also takes whatever lock keeps two
     * instances from storing one origin's batch at once (PostgreSQL: the
     * mark's row, until COMMIT). range_add is optional: a backend that
     * keeps each row under its origin (PostgreSQL) leaves it NULL. */
    int (*relay_origin_get)(struct store *s, const char *origin, size_t len,
                            const char *stream, uint64_t *committed,
                            struct proto_err *err);
    int (*relay_origin_set)(struct store *s, const char *origin, size_t len,
                            const char *stream, uint64_t committed,
                            struct proto_err *err);
    int (*relay_range_add)(struct store *s, const char *origin, size_t len,
                           int64_t first_id, int64_t last_id,
                           uint64_t origin_first, uint64_t origin_last,
                           struct proto_err *err);

    /* Retention, on the writer's store. */
    int (*prune)(struct store *s, int64_t cutoff_ms, uint32_t max_rows,
                 struct store_prune_result *out, struct proto_err *err);
    int (*prune_newest)(struct store *s, int64_t *ms, struct proto_err *err);

    /* Queries, on a query thread's read-only store. */
    int (*query_receipts)(struct store *s, const struct store_filter *f,
                          uint64_t deadline_ms, store_row_cb cb, void *arg,
                          int *truncated, struct proto_err *err);
    int (*query_stats)(struct store *s, uint64_t deadline_ms,
                       struct store_stats *st, struct proto_err *err);
    int (*last_receipt_id)(struct store *s, const struct store_filter *f,
                           uint64_t deadline_ms, uint64_t *id,
                           struct proto_err *err);
    int (*query_agg)(struct store *s, const struct store_filter *f,
                     int group_by, unsigned flags, uint64_t deadline_ms,
                     struct store_agg *out, struct proto_err *err);
    int (*query_gaps)(struct store *s, const struct store_filter *f,
                      const struct store_gap_select *sel, uint64_t deadline_ms,
                      store_gap_cb cb, void *arg, int *truncated,
                      struct proto_err *err);
    int (*query_quarantine)(struct store *s, const struct store_filter *f,
                            int has_id, uint64_t id, int with_raw,
                            uint64_t deadline_ms, store_qrow_cb cb, void *arg,
                            int *truncated, struct proto_err *err);
    int (*query_plans)(struct store *s, const struct store_filter *f,
                       uint64_t deadline_ms, store_plan_row_cb cb, void *arg,
                       int *truncated, struct proto_err *err);
    int (*query_retained)(struct store *s, const struct store_filter *f,
                          uint64_t deadline_ms, store_retained_row_cb cb,
                          void *arg, int *truncated, struct proto_err *err);
    int (*plan_readback)(struct store *s, const struct store_plan_key *k,
                         struct proto_str value_id, uint64_t deadline_ms,
                         int *plan_found, void **value, size_t *len,
                         struct proto_err *err);
    int (*plan_counts)(struct store *s, uint64_t *plans, uint64_t *retained,
                       struct proto_err *err);
    int (*query_prunes)(struct store *s, const struct store_filter *f,
                        uint64_t deadline_ms, struct store_prune_rec **out,
                        size_t *n, int *truncated, struct proto_err *err);

    /*
     * Optional: SQLite's file, WAL and rollup merge. A backend without
     * them leaves these NULL, and the functions of store.h then answer
     * "nothing to do": no WAL frames, checkpoints and the file check
     * succeed at once, no merge is pending.
     */
    int (*wal_frames)(const struct store *s);
    int (*wal_length)(const struct store *s);
    int (*wal_restart_due)(const struct store *s);
    int (*checkpoint)(struct store *s, struct proto_err *err);
    int (*checkpoint_final)(struct store *s, struct proto_err *err);
    /* The ceiling (store.h store_ceiling_take); NULL: never held. */
    int (*ceiling_take)(struct store *s);
    void (*ceiling_let_go)(struct store *s);
    int (*file_check)(struct store *s, struct proto_err *err);
    /* Pipelined durability (store.h store_wal_sync); NULL: every COMMIT
     * is durable when it returns. */
    int (*sync_pipelined)(const struct store *s);
    int (*wal_sync)(struct store *s, struct proto_err *err);
    int (*wal_rewrite)(struct store *s, struct proto_err *err);
    /* A checkpoint's sync of the database left to the syncer (store.h
     * store_db_sync); NULL: checkpoints sync their own copy. */
    int (*db_sync_owed)(const struct store *s);
    int (*db_sync)(struct store *s, struct proto_err *err);
    int (*merge_idle)(struct store *s, unsigned keys, struct proto_err *err);
    int (*merge_pending)(const struct store *s);
};

/* The first member of every backend's connection. */
struct store_base {
    const struct store_ops *ops;
};

/* The backends (store_sqlite.c, store_pg.c). */
extern const struct store_ops store_sqlite_ops;
extern const struct store_ops store_pg_ops;

#endif
