/*
 * store_row.h: the receipts row's `counters` column (store_row.c), for
 * the other store files. Since migration 0010 a receipt's 26 counters and
 * 4 artifact fields are one blob, not 30 columns: the row costs SQLite a
 * third of the binds and record work (docs/ingest.md has the figures).
 *
 * The blob: a byte n (the counters stored, 26), n LEB128 values by
 * coverage bit, a byte m (the artifact fields, 4), m LEB128 values. A
 * reader takes what it knows and ignores what a later version appends;
 * what is missing reads as 0.
 */
#ifndef RECEIPTD_DAEMON_STORE_ROW_H
#define RECEIPTD_DAEMON_STORE_ROW_H

#include "store_internal.h"

#define STORE_COUNTERS_MAX (2 + (RECEIPT_NCOUNTERS + RECEIPT_NARTIFACTS) * 10)

/* r's counters and artifacts into out; returns the blob's length. */
size_t store_counters_pack(const struct receipt *r,
                           unsigned char out[STORE_COUNTERS_MAX]);

/* Column col of st (the blob) into r->counters and r->artifacts; NULL or
 * a cut blob leaves what it lacks 0. */
void store_counters_column(sqlite3_stmt *st, int col, struct receipt *r);

/* receiptd_pack_counters(c0, ..., c29) on db, for migration 0010's copy
 * of the old columns. */
int store_counters_sql_function(sqlite3 *db);

#endif
