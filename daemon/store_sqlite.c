/*
 * store_sqlite.c: the table of the SQLite backend (store_ops.h): the
 * node's embedded store, and the default.
 */
#include "store_sqlite.h"

const struct store_ops store_sqlite_ops = {
    .name = "sqlite",
    .open = store_sqlite_open,
    .free = store_sqlite_free,
    .user_version = store_sqlite_user_version,
    .path = store_sqlite_path,
    .begin = store_sqlite_begin,
    .commit = store_sqlite_commit,
    .rollback = store_sqlite_rollback,
    .savepoint = store_sqlite_savepoint,
    .savepoint_release = store_sqlite_savepoint_release,
    .savepoint_rollback = store_sqlite_savepoint_rollback,
    .txn_broken = store_sqlite_txn_broken,
    .apply = store_sqlite_apply,
    .write_begin = store_sqlite_write_begin,
    .write_end = store_sqlite_write_end,
    .plan_get = store_sqlite_plan_get,
    .plan_put = store_sqlite_plan_put,
    .plan_retain = store_sqlite_plan_retain,
    .prune = store_sqlite_prune,
    .prune_newest = store_sqlite_prune_newest,
    .query_receipts = store_sqlite_query_receipts,
    .query_stats = store_sqlite_query_stats,
    .query_agg = store_sqlite_query_agg,
    .query_gaps = store_sqlite_query_gaps,
    .query_quarantine = store_sqlite_query_quarantine,
    .query_plans = store_sqlite_query_plans,
    .query_retained = store_sqlite_query_retained,
    .plan_readback = store_sqlite_plan_readback,
    .plan_counts = store_sqlite_plan_counts,
    .query_prunes = store_sqlite_query_prunes,
    .wal_frames = store_sqlite_wal_frames,
    .checkpoint = store_sqlite_checkpoint,
    .checkpoint_final = store_sqlite_checkpoint_final,
    .file_check = store_sqlite_file_check,
    .merge_idle = store_sqlite_merge_idle,
    .merge_pending = store_sqlite_merge_pending,
};
