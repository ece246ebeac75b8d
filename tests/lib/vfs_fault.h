/*
 * vfs_fault.h: a test-only SQLite VFS that can cut the power and inject I/O
 * errors.
 *
 * It wraps the default VFS (unix). Files opened as a main database, a WAL or
 * a rollback journal are "tracked": every write and truncate goes through to
 * the real file, but before it happens the bytes it replaces are saved in an
 * undo log, and an xSync of a file forgets that file's undo records (they are
 * now durable). Cutting the power therefore means: stop all further I/O
 * (every read, write, sync, truncate and delete fails), and later, once every
 * connection is closed, play the undo log backwards so each file holds
 * exactly what it held at its last successful sync (the real fsync is
 * skipped: the undo log, not the disk cache, decides durability). In garble
 * mode the unsynced ranges are instead left in a random mix of old bytes, new
 * bytes, torn halves and random bytes, as a disk that lost power mid-write
 * would.
 *
 * The -shm file is memory-mapped and never durable; its methods are passed
 * through unchanged. Temporary files are passed through and not counted.
 *
 * Thread: the state is global and guarded by a mutex, so connections on any
 * thread may use the VFS; the control functions are meant for the test's
 * main thread.
 */
#ifndef RECEIPTD_TESTS_VFS_FAULT_H
#define RECEIPTD_TESTS_VFS_FAULT_H

#define VFS_FAULT_NAME "fault"

/* The I/O operations that can be counted and failed on tracked files. */
enum vfs_fault_op {
    VFS_FAULT_READ,
    VFS_FAULT_WRITE,
    VFS_FAULT_SYNC,
    VFS_FAULT_TRUNCATE,
    VFS_FAULT_NOPS
};

/* Counters of one run, reset by vfs_fault_reset(). */
struct vfs_fault_stats {
    unsigned long ops[VFS_FAULT_NOPS]; /* calls seen on tracked files */
    unsigned long injected;            /* errors returned by injection */
    unsigned long undo_records;        /* unsynced writes undone/garbled */
    unsigned long long undo_bytes;
    unsigned long garbled;     /* records left as torn or random bytes */
    unsigned long sticky_lost; /* records lost to a failed sync */
};

/*
 * Registers the VFS under VFS_FAULT_NAME, wrapping the VFS that is the
 * default at the time of the first call; with make_default it also becomes
 * the default, so code that opens databases without naming a VFS (the
 * daemon's store) uses it. Idempotent. Returns SQLITE_OK or an SQLite code.
 */
int vfs_fault_register(int make_default);

/* Unregisters the VFS (the wrapped VFS becomes the default again) and frees
 * every tracked-file record. */
void vfs_fault_unregister(void);

/*
 * Starts a run: forgets tracked files and the undo log, zeroes the counters,
 * disarms the power cut and the injection, and powers on. Call with no
 * connection open on a tracked file.
 */
void vfs_fault_reset(void);

/* Arms a power cut at the k-th xSync on a tracked file (1-based): that sync
 * does not happen and returns SQLITE_IOERR_FSYNC. k == 0 disarms. */
void vfs_fault_cut_at_sync(unsigned long k);

/*
 * Sets a function called right after an armed cut happens (the k-th
 * xSync), on the thread that hit it, with no lock held; NULL for none. The
 * preloaded variant (vfs_fault_preload.c) restores the files and exits the
 * process there, so a whole daemon loses its power.
 */
void vfs_fault_on_cut(void (*cb)(void));

/* Cuts the power now. */
void vfs_fault_cut_now(void);

/* True once the power is cut. */
int vfs_fault_is_dead(void);

/*
 * Arms a one-shot error: the nth call (1-based, counted from the last reset)
 * of op on a tracked file returns code (for example SQLITE_IOERR_WRITE or
 * SQLITE_FULL) without doing anything. nth == 0 disarms.
 */
void vfs_fault_inject(int op, unsigned long nth, int code);

/* True when the armed injection has fired. */
int vfs_fault_fired(void);

/*
 * With on, a failed xSync (injected) behaves as Linux does after an fsync
 * error: the file's unsynced writes are lost at the next power cut even if a
 * later xSync of that file succeeds ("fsyncgate"). Off by default.
 */
void vfs_fault_sticky_sync_loss(int on);

/*
 * Writes the state the disk would hold after the power cut: plays the undo
 * log backwards (garble == 0), or leaves each unsynced range old, new, torn
 * or random as chosen by a generator seeded with seed (garble != 0). Cuts the
 * power first if it is still on. Call only after every connection that uses
 * a tracked file is closed: it opens the files with plain POSIX calls.
 * Returns 0, or -1 with errno set. The undo log is empty afterwards.
 */
int vfs_fault_restore(int garble, unsigned seed);

/* Copies the counters of the current run into *st. */
void vfs_fault_stats(struct vfs_fault_stats *st);

#endif
