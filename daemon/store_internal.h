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

#endif
