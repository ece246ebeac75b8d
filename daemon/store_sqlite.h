/*
 * store_sqlite.h: the SQLite backend's operations (store_ops.h), defined
 * in store.c and the other store_*.c files and listed in store_sqlite.c's
 * table. Each does what the function of store.h (store_plan.h,
 * store_prune.h, store_agg.h) without "sqlite_" in its name says. Nothing
 * outside the store includes this.
 */
#ifndef RECEIPTD_DAEMON_STORE_SQLITE_H
#define RECEIPTD_DAEMON_STORE_SQLITE_H

#include "store_ops.h"

int store_sqlite_open(const char *path, const struct store_opts *opts,
                      struct store **out, struct proto_err *err);
void store_sqlite_free(struct store *s);
int store_sqlite_user_version(struct store *s, int *version,
                              struct proto_err *err);
const char *store_sqlite_path(struct store *s);
int store_sqlite_begin(struct store *s, struct proto_err *err);
int store_sqlite_commit(struct store *s, struct proto_err *err);
void store_sqlite_rollback(struct store *s);
int store_sqlite_savepoint(struct store *s, struct proto_err *err);
int store_sqlite_savepoint_release(struct store *s, struct proto_err *err);
void store_sqlite_savepoint_rollback(struct store *s);
int store_sqlite_txn_broken(struct store *s);
int store_sqlite_apply(struct store *s, struct store_write *w,
                       struct proto_err *err);
int store_sqlite_write_begin(struct store *s, struct store_write *w,
                             int64_t *source_id, struct proto_err *err);
int store_sqlite_write_end(struct store *s, struct store_write *w,
                           int64_t source_id, struct proto_err *err);
int store_sqlite_plan_get(struct store *s, const struct store_plan_key *k,
                          int64_t *id, void **canonical, size_t *len,
                          struct proto_err *err);
int store_sqlite_plan_put(struct store *s, const struct store_plan_new *p,
                          int64_t *id, struct proto_err *err);
int store_sqlite_plan_retain(struct store *s, int64_t plan_id,
                             struct proto_str value_id, int64_t retained_at,
                             const void *value, size_t len,
                             struct proto_err *err);
int store_sqlite_relay_origin_get(struct store *s, const char *origin,
                                  size_t len, const char *stream,
                                  uint64_t *committed, struct proto_err *err);
int store_sqlite_relay_origin_set(struct store *s, const char *origin,
                                  size_t len, const char *stream,
                                  uint64_t committed, struct proto_err *err);
int store_sqlite_relay_range_add(struct store *s, const char *origin,
                                 size_t len, int64_t first_id, int64_t last_id,
                                 uint64_t origin_first, uint64_t origin_last,
                                 struct proto_err *err);
int store_sqlite_prune(struct store *s, int64_t cutoff_ms, uint32_t max_rows,
                       struct store_prune_result *out, struct proto_err *err);
int store_sqlite_prune_newest(struct store *s, int64_t *ms,
                              struct proto_err *err);
int store_sqlite_query_receipts(struct store *s, const struct store_filter *f,
                                uint64_t deadline_ms, store_row_cb cb,
                                void *arg, int *truncated,
                                struct proto_err *err);
int store_sqlite_last_receipt_id(struct store *s, const struct store_filter *f,
                                 uint64_t deadline_ms, uint64_t *id,
                                 struct proto_err *err);
int store_sqlite_query_stats(struct store *s, uint64_t deadline_ms,
                             struct store_stats *st, struct proto_err *err);
int store_sqlite_query_agg(struct store *s, const struct store_filter *f,
                           int group_by, unsigned flags, uint64_t deadline_ms,
                           struct store_agg *out, struct proto_err *err);
int store_sqlite_query_gaps(struct store *s, const struct store_filter *f,
                            const struct store_gap_select *sel,
                            uint64_t deadline_ms, store_gap_cb cb, void *arg,
                            int *truncated, struct proto_err *err);
int store_sqlite_query_quarantine(struct store *s, const struct store_filter *f,
                                  int has_id, uint64_t id, int with_raw,
                                  uint64_t deadline_ms, store_qrow_cb cb,
                                  void *arg, int *truncated,
                                  struct proto_err *err);
int store_sqlite_query_plans(struct store *s, const struct store_filter *f,
                             uint64_t deadline_ms, store_plan_row_cb cb,
                             void *arg, int *truncated, struct proto_err *err);
int store_sqlite_query_retained(struct store *s, const struct store_filter *f,
                                uint64_t deadline_ms, store_retained_row_cb cb,
                                void *arg, int *truncated,
                                struct proto_err *err);
int store_sqlite_plan_readback(struct store *s, const struct store_plan_key *k,
                               struct proto_str value_id, uint64_t deadline_ms,
                               int *plan_found, void **value, size_t *len,
                               struct proto_err *err);
int store_sqlite_plan_counts(struct store *s, uint64_t *plans,
                             uint64_t *retained, struct proto_err *err);
int store_sqlite_query_prunes(struct store *s, const struct store_filter *f,
                              uint64_t deadline_ms,
                              struct store_prune_rec **out, size_t *nout,
                              int *truncated, struct proto_err *err);
int store_sqlite_wal_frames(const struct store *s);
int store_sqlite_wal_length(const struct store *s);
int store_sqlite_wal_restart_due(const struct store *s);
int store_sqlite_checkpoint(struct store *s, struct proto_err *err);
int store_sqlite_ceiling_take(struct store *s);
void store_sqlite_ceiling_let_go(struct store *s);
int store_sqlite_checkpoint_final(struct store *s, struct proto_err *err);
int store_sqlite_file_check(struct store *s, struct proto_err *err);
int store_sqlite_sync_pipelined(const struct store *s);
int store_sqlite_wal_sync(struct store *s, struct proto_err *err);
int store_sqlite_wal_rewrite(struct store *s, struct proto_err *err);
int store_sqlite_db_sync_owed(const struct store *s);
int store_sqlite_db_sync(struct store *s, struct proto_err *err);
int store_sqlite_merge_idle(struct store *s, unsigned keys,
                            struct proto_err *err);
int store_sqlite_merge_pending(const struct store *s);

#endif
