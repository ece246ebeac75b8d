/*
 * store_internal.h: what store.c shares with the other store_*.c files.
 * Nothing outside the store includes this.
 */
#ifndef RECEIPTD_DAEMON_STORE_INTERNAL_H
#define RECEIPTD_DAEMON_STORE_INTERNAL_H

#include <sqlite3.h>

#include "store.h"
#include "varint.h"

/* received_at .. counter_coverage: the columns before the counters. */
#define STORE_RECEIPT_FIXED_COLS 13

/* Records an SQLite failure in err (text copied at once) and returns its
 * PROTO_E* code; marks the transaction broken when it cannot continue. */
/* Receipts were deleted (a prune): the newest id may have gone, so the
 * writer gives ids explicitly again (store.c insert_rows). */
void store_rows_deleted(struct store *s);

int store_fail(struct store *s, int rc, struct proto_err *err,
               const char *what);

/* sqlite3_exec() with store_fail() on error. */
int store_exec(struct store *s, const char *sql, struct proto_err *err,
               const char *what);

sqlite3 *store_db(struct store *s);
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

/* store_opts.shared of s, NULL when it has none (borrowed). */
struct store_shared *store_shared_of(struct store *s);

/* The seq runs' statements (store_seq.c), made on first use. */
struct store_seq **store_seqs(struct store *s);

/* The relay's reads' statements and strings (store_relay.c), made on
 * first use and freed with the store (store_relay_cache_free, which
 * takes NULL). */
struct store_relay_cache;
struct store_relay_cache **store_relay_cache_of(struct store *s);
void store_relay_cache_free(struct store_relay_cache *c);

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

#endif
