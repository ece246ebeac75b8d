/*
 * store_ops.c: the functions the daemon calls on a store, each passed to
 * the operation of the same name of the store's backend (store_ops.h).
 * Optional operations a backend leaves NULL answer "nothing to do" here,
 * so that their callers (the writer's quiet moments) need no test of the
 * backend. Any thread: a store is used by one thread at a time.
 */
#include "store_ops.h"

#include <stddef.h>

#include "error.h"

static const struct store_ops *const backends[] = {
    [STORE_BACKEND_SQLITE] = &store_sqlite_ops,
    [STORE_BACKEND_POSTGRESQL] = &store_pg_ops,
};

static const struct store_ops *
ops(const struct store *s)
{
    return ((const struct store_base *)(const void *)s)->ops;
}

int
store_open(const char *where, const struct store_opts *opts, struct store **out,
           struct proto_err *err)
{
    unsigned b = opts != NULL ? (unsigned)opts->backend : 0;

    *out = NULL;
    if (b >= sizeof(backends) / sizeof(backends[0]) || backends[b] == NULL)
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "this receiptd was built without that store "
                             "backend");
    return backends[b]->open(where, opts, out, err);
}

void
store_free(struct store *s)
{
    if (s != NULL)
        ops(s)->free(s);
}

int
store_has_wal(const struct store *s)
{
    return ops(s)->checkpoint != NULL;
}

const char *
store_backend_name(const struct store *s)
{
    return ops(s)->name;
}

int
store_user_version(struct store *s, int *version, struct proto_err *err)
{
    return ops(s)->user_version(s, version, err);
}

const char *
store_path(struct store *s)
{
    return ops(s)->path(s);
}

int
store_begin(struct store *s, struct proto_err *err)
{
    return ops(s)->begin(s, err);
}

int
store_commit(struct store *s, struct proto_err *err)
{
    return ops(s)->commit(s, err);
}

void
store_rollback(struct store *s)
{
    ops(s)->rollback(s);
}

int
store_savepoint(struct store *s, struct proto_err *err)
{
    return ops(s)->savepoint(s, err);
}

int
store_savepoint_release(struct store *s, struct proto_err *err)
{
    return ops(s)->savepoint_release(s, err);
}

void
store_savepoint_rollback(struct store *s)
{
    ops(s)->savepoint_rollback(s);
}

int
store_txn_broken(struct store *s)
{
    return ops(s)->txn_broken(s);
}

int
store_apply(struct store *s, struct store_write *w, struct proto_err *err)
{
    return ops(s)->apply(s, w, err);
}

int
store_write_begin(struct store *s, struct store_write *w, int64_t *source_id,
                  struct proto_err *err)
{
    return ops(s)->write_begin(s, w, source_id, err);
}

int
store_write_end(struct store *s, struct store_write *w, int64_t source_id,
                struct proto_err *err)
{
    return ops(s)->write_end(s, w, source_id, err);
}

int
store_plan_get(struct store *s, const struct store_plan_key *k, int64_t *id,
               void **canonical, size_t *len, struct proto_err *err)
{
    return ops(s)->plan_get(s, k, id, canonical, len, err);
}

int
store_plan_put(struct store *s, const struct store_plan_new *p, int64_t *id,
               struct proto_err *err)
{
    return ops(s)->plan_put(s, p, id, err);
}

int
store_plan_retain(struct store *s, int64_t plan_id, struct proto_str value_id,
                  int64_t retained_at, const void *value, size_t len,
                  struct proto_err *err)
{
    return ops(s)->plan_retain(s, plan_id, value_id, retained_at, value, len,
                               err);
}

int
store_prune(struct store *s, int64_t cutoff_ms, uint32_t max_rows,
            struct store_prune_result *out, struct proto_err *err)
{
    return ops(s)->prune(s, cutoff_ms, max_rows, out, err);
}

int
store_prune_newest(struct store *s, int64_t *ms, struct proto_err *err)
{
    return ops(s)->prune_newest(s, ms, err);
}

int
store_query_receipts(struct store *s, const struct store_filter *f,
                     uint64_t deadline_ms, store_row_cb cb, void *arg,
                     int *truncated, struct proto_err *err)
{
    return ops(s)->query_receipts(s, f, deadline_ms, cb, arg, truncated, err);
}

int
store_query_stats(struct store *s, uint64_t deadline_ms, struct store_stats *st,
                  struct proto_err *err)
{
    return ops(s)->query_stats(s, deadline_ms, st, err);
}

int
store_last_receipt_id(struct store *s, const struct store_filter *f,
                      uint64_t deadline_ms, uint64_t *id, struct proto_err *err)
{
    return ops(s)->last_receipt_id(s, f, deadline_ms, id, err);
}

int
store_query_agg(struct store *s, const struct store_filter *f, int group_by,
                unsigned flags, uint64_t deadline_ms, struct store_agg *out,
                struct proto_err *err)
{
    return ops(s)->query_agg(s, f, group_by, flags, deadline_ms, out, err);
}

int
store_query_gaps(struct store *s, const struct store_filter *f,
                 const struct store_gap_select *sel, uint64_t deadline_ms,
                 store_gap_cb cb, void *arg, int *truncated,
                 struct proto_err *err)
{
    return ops(s)->query_gaps(s, f, sel, deadline_ms, cb, arg, truncated, err);
}

int
store_query_quarantine(struct store *s, const struct store_filter *f,
                       int has_id, uint64_t id, int with_raw,
                       uint64_t deadline_ms, store_qrow_cb cb, void *arg,
                       int *truncated, struct proto_err *err)
{
    return ops(s)->query_quarantine(s, f, has_id, id, with_raw, deadline_ms, cb,
                                    arg, truncated, err);
}

int
store_query_plans(struct store *s, const struct store_filter *f,
                  uint64_t deadline_ms, store_plan_row_cb cb, void *arg,
                  int *truncated, struct proto_err *err)
{
    return ops(s)->query_plans(s, f, deadline_ms, cb, arg, truncated, err);
}

int
store_query_retained(struct store *s, const struct store_filter *f,
                     uint64_t deadline_ms, store_retained_row_cb cb, void *arg,
                     int *truncated, struct proto_err *err)
{
    return ops(s)->query_retained(s, f, deadline_ms, cb, arg, truncated, err);
}

int
store_plan_readback(struct store *s, const struct store_plan_key *k,
                    struct proto_str value_id, uint64_t deadline_ms,
                    int *plan_found, void **value, size_t *len,
                    struct proto_err *err)
{
    return ops(s)->plan_readback(s, k, value_id, deadline_ms, plan_found, value,
                                 len, err);
}

int
store_plan_counts(struct store *s, uint64_t *plans, uint64_t *retained,
                  struct proto_err *err)
{
    return ops(s)->plan_counts(s, plans, retained, err);
}

int
store_query_prunes(struct store *s, const struct store_filter *f,
                   uint64_t deadline_ms, struct store_prune_rec **out,
                   size_t *n, int *truncated, struct proto_err *err)
{
    return ops(s)->query_prunes(s, f, deadline_ms, out, n, truncated, err);
}

int
store_wal_frames(const struct store *s)
{
    if (ops(s)->wal_frames == NULL)
        return 0;
    return ops(s)->wal_frames(s);
}

int
store_wal_length(const struct store *s)
{
    if (ops(s)->wal_length == NULL)
        return 0;
    return ops(s)->wal_length(s);
}

int
store_wal_restart_due(const struct store *s)
{
    return ops(s)->wal_restart_due != NULL && ops(s)->wal_restart_due(s);
}

int
store_checkpoint(struct store *s, struct proto_err *err)
{
    if (ops(s)->checkpoint == NULL)
        return 0;
    return ops(s)->checkpoint(s, err);
}

int
store_ceiling_take(struct store *s)
{
    if (ops(s)->ceiling_take == NULL)
        return -1;
    return ops(s)->ceiling_take(s);
}

void
store_ceiling_let_go(struct store *s)
{
    if (ops(s)->ceiling_let_go != NULL)
        ops(s)->ceiling_let_go(s);
}

int
store_checkpoint_final(struct store *s, struct proto_err *err)
{
    if (ops(s)->checkpoint_final == NULL)
        return 0;
    return ops(s)->checkpoint_final(s, err);
}

int
store_file_check(struct store *s, struct proto_err *err)
{
    if (ops(s)->file_check == NULL)
        return 0;
    return ops(s)->file_check(s, err);
}

int
store_sync_pipelined(const struct store *s)
{
    return ops(s)->sync_pipelined != NULL && ops(s)->sync_pipelined(s);
}

int
store_wal_sync(struct store *s, struct proto_err *err)
{
    if (ops(s)->wal_sync == NULL)
        return 0;
    return ops(s)->wal_sync(s, err);
}

int
store_wal_rewrite(struct store *s, struct proto_err *err)
{
    if (ops(s)->wal_rewrite == NULL)
        return 0;
    return ops(s)->wal_rewrite(s, err);
}

int
store_db_sync_owed(const struct store *s)
{
    return ops(s)->db_sync_owed != NULL && ops(s)->db_sync_owed(s);
}

int
store_db_sync(struct store *s, struct proto_err *err)
{
    if (ops(s)->db_sync == NULL)
        return 0;
    return ops(s)->db_sync(s, err);
}

int
store_merge_idle(struct store *s, unsigned keys, struct proto_err *err)
{
    if (ops(s)->merge_idle == NULL)
        return 0;
    return ops(s)->merge_idle(s, keys, err);
}

int
store_merge_pending(const struct store *s)
{
    if (ops(s)->merge_pending == NULL)
        return 0;
    return ops(s)->merge_pending(s);
}

int
store_relay_origin_get(struct store *s, const char *origin, size_t len,
                       const char *stream, uint64_t *committed,
                       struct proto_err *err)
{
    return ops(s)->relay_origin_get(s, origin, len, stream, committed, err);
}

int
store_relay_origin_set(struct store *s, const char *origin, size_t len,
                       const char *stream, uint64_t committed,
                       struct proto_err *err)
{
    return ops(s)->relay_origin_set(s, origin, len, stream, committed, err);
}

int
store_relay_range_add(struct store *s, const char *origin, size_t len,
                      int64_t first_id, int64_t last_id, uint64_t origin_first,
                      uint64_t origin_last, struct proto_err *err)
{
    if (ops(s)->relay_range_add == NULL)
        return 0;
    return ops(s)->relay_range_add(s, origin, len, first_id, last_id,
                                   origin_first, origin_last, err);
}
