/*
 * relwork.h: the write workload of the reliability tests, and the check of
 * what survived it.
 *
 * The workload does what the daemon's store does: open the database (through
 * the default VFS, which a test may have replaced with vfs_fault.h's), set WAL
 * and synchronous=FULL, apply the project's migrations/ in order, then commit
 * receipts in transactions (BEGIN IMMEDIATE, inserts into the real receipts
 * and dedupe tables, COMMIT), recording which transactions were
 * acknowledged, meaning COMMIT returned SQLITE_OK. The check reopens the file
 * with the real unix VFS and compares the rows with that record.
 *
 * Thread: single-threaded; one struct relwork per run.
 */
#ifndef RECEIPTD_TESTS_RELWORK_H
#define RECEIPTD_TESTS_RELWORK_H

#include <stddef.h>

/* Per transaction, in relwork.state[]. */
enum relwork_tx {
    RELWORK_NEVER = 0, /* not begun */
    RELWORK_TRIED = 1, /* begun, never acknowledged: may or may not exist */
    RELWORK_ACKED = 2  /* acknowledged: must exist exactly once */
};

struct relwork {
    /* Set by the caller. */
    const char *path;      /* database file; borrowed */
    int synchronous;       /* 2 = FULL (the daemon's); 1 = NORMAL (control) */
    int ack_before_commit; /* control: acknowledge before COMMIT */
    int retry_commit;      /* control: after a failed COMMIT, retry it and
                              acknowledge when the retry succeeds or finds
                              no transaction left (the fsyncgate bug) */
    int autocheckpoint;    /* wal_autocheckpoint pages; 0 = SQLite's */
    int ntx;               /* transactions, at most RELWORK_MAX_TX */
    int per_tx;            /* receipts per transaction */
    int attempts;          /* tries per transaction (and for the open and
                              migrations) before giving up; 1 = stop at the
                              first error, as after a power cut */
    int reopen_every;      /* close and reopen the database after every
                              this many transactions (0 = never): the close
                              checkpoints and deletes the WAL */
    int use_store;         /* drive daemon/store.h (store_open, one
                              store_apply per receipt in a savepoint, as the
                              writer does) instead of hand-written SQL; only
                              when built with RELWORK_WITH_STORE */

    /* Filled by relwork_run(). */
    unsigned char state[256];
    int failures;          /* transactions that failed (then retried) */
    int completed;         /* 1 when every transaction was acknowledged */
    char first_error[256]; /* SQLite's text of the first failure */
};

#define RELWORK_MAX_TX 256

/* The outcome of relwork_check(). */
struct relwork_result {
    int opened;       /* the database could be opened */
    int integrity_ok; /* PRAGMA integrity_check said "ok" */
    char integrity[256];
    long rows;           /* receipt rows found */
    long missing_acked;  /* acknowledged receipts absent */
    long missing_dedupe; /* acknowledged receipts without a dedupe row */
    long unexpected;     /* rows of transactions never begun */
    long duplicates;     /* (source, seq) found more than once */
    long corrupt;        /* rows whose payload is not what was written */
};

/* True when this build can drive the daemon's store (RELWORK_WITH_STORE). */
int relwork_have_store(void);

/*
 * Runs the workload described by w. Returns 0 when every transaction was
 * acknowledged, 1 when it stopped early (an error after w->attempts tries);
 * w->state says what was acknowledged either way. The database is closed on
 * return (sqlite3_close_v2 after finalizing every statement).
 */
int relwork_run(struct relwork *w);

/*
 * Opens w->path with the real "unix" VFS (read-write, so SQLite may recover
 * the WAL and checkpoint it on close, as after a reboot) and fills *res.
 * Returns 0 when every acknowledged receipt is present exactly once with its
 * payload, nothing unexpected is there and integrity_check is ok; -1 otherwise.
 */
int relwork_check(const struct relwork *w, struct relwork_result *res);

/* One line describing res, for failure messages. */
void relwork_describe(const struct relwork_result *res, char *buf, size_t len);

#endif
