/*
 * vfs_fault_preload.c: vfs_fault.c as an LD_PRELOAD library, so that the
 * real daemon process loses its power at a chosen sync point.
 *
 * On the process's first sqlite3_open_v2() (interposed here; registering
 * earlier, in a constructor, would initialise SQLite before the program
 * could configure it) the fault VFS becomes the default. Environment:
 *   RECEIPTD_CUT_AT_SYNC=K   at the K-th xSync of a database, WAL or
 *                            journal: write the state the disk would hold
 *                            after a power cut (unsynced writes dropped,
 *                            or garbled) and _exit(RECEIPTD_CUT_EXIT)
 *                            at once; absent or 0: never.
 *   RECEIPTD_CUT_GARBLE=S    garble with seed S instead of dropping.
 *   RECEIPTD_FAULT_OP=OP     with RECEIPTD_FAULT_NTH=N: the N-th OP (read,
 *                            write, sync or truncate) fails with
 *                            RECEIPTD_FAULT_CODE (an SQLite code; default
 *                            the op's SQLITE_IOERR_*). A failed sync loses
 *                            the file's unsynced writes at the cut, as
 *                            Linux does after an fsync error.
 *   RECEIPTD_CUT_AT_EXIT=1   at exit, cut the power (drop what was never
 *                            synced, and what a failed sync lost).
 *   RECEIPTD_SYNC_COUNT=FILE at exit, write "SYNCS FIRED": the number of
 *                            sync points and 1 when the fault fired.
 *
 * Thread: the cut happens on the thread that syncs (the daemon's writer);
 * the other threads are stopped by _exit(), and every I/O they attempt in
 * between fails because the VFS is already dead.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "vfs_fault.h"

#define RECEIPTD_CUT_EXIT 99

typedef int (*open_v2_fn)(const char *, sqlite3 **, int, const char *);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static unsigned garble_seed;

static void
cut_cb(void)
{
    /* The process is about to vanish: no connection will touch the
     * files again, so restoring them with plain POSIX calls is safe. */
    vfs_fault_restore(garble_seed != 0, garble_seed);
    _exit(RECEIPTD_CUT_EXIT);
}

static void
write_count_cb(void)
{
    const char *path = getenv("RECEIPTD_SYNC_COUNT");
    struct vfs_fault_stats st;
    FILE *f;

    if (path == NULL || (f = fopen(path, "w")) == NULL)
        return;
    vfs_fault_stats(&st);
    fprintf(f, "%lu %d\n", st.ops[VFS_FAULT_SYNC], vfs_fault_fired());
    fclose(f);
}

/* Runs after the daemon's main() has closed its connections. */
static void
cut_at_exit_cb(void)
{
    vfs_fault_restore(0, 0);
}

static void
arm_fault(const char *op, const char *nth, const char *code)
{
    static const char *const names[VFS_FAULT_NOPS] = { "read", "write", "sync",
                                                       "truncate" };
    static const int codes[VFS_FAULT_NOPS] = { SQLITE_IOERR_READ,
                                               SQLITE_IOERR_WRITE,
                                               SQLITE_IOERR_FSYNC,
                                               SQLITE_IOERR_TRUNCATE };
    int i;

    for (i = 0; i < VFS_FAULT_NOPS; i++)
        if (strcmp(op, names[i]) == 0) {
            vfs_fault_sticky_sync_loss(1);
            vfs_fault_inject(i, strtoul(nth, NULL, 10),
                             code != NULL ? atoi(code) : codes[i]);
            return;
        }
}

static void
setup(void)
{
    const char *k = getenv("RECEIPTD_CUT_AT_SYNC");
    const char *g = getenv("RECEIPTD_CUT_GARBLE");

    vfs_fault_reset();
    if (vfs_fault_register(1) != SQLITE_OK)
        return;
    garble_seed = g != NULL ? (unsigned)strtoul(g, NULL, 10) : 0;
    if (k != NULL && strtoul(k, NULL, 10) > 0) {
        vfs_fault_on_cut(cut_cb);
        vfs_fault_cut_at_sync(strtoul(k, NULL, 10));
    }
    if (getenv("RECEIPTD_FAULT_OP") != NULL &&
        getenv("RECEIPTD_FAULT_NTH") != NULL)
        arm_fault(getenv("RECEIPTD_FAULT_OP"), getenv("RECEIPTD_FAULT_NTH"),
                  getenv("RECEIPTD_FAULT_CODE"));
    /* atexit runs in reverse: the count is written before the cut, which
     * forgets nothing it needs. */
    if (getenv("RECEIPTD_CUT_AT_EXIT") != NULL)
        atexit(cut_at_exit_cb);
    atexit(write_count_cb);
}

int
sqlite3_open_v2(const char *filename, sqlite3 **db, int flags, const char *vfs)
{
    open_v2_fn real =
        (open_v2_fn)(uintptr_t)dlsym(RTLD_NEXT, "sqlite3_open_v2");

    pthread_once(&once, setup);
    if (real == NULL)
        return SQLITE_ERROR;
    return real(filename, db, flags, vfs);
}
