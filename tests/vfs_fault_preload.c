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
 *   RECEIPTD_SYNC_COUNT=FILE at exit, write the number of sync points.
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
    fprintf(f, "%lu\n", st.ops[VFS_FAULT_SYNC]);
    fclose(f);
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
