/*
 * vfs_fault.c: the power-cut and error-injection VFS of vfs_fault.h.
 *
 * Design: writes go through to the real file at once and an undo log keeps
 * the bytes they replaced, rather than holding writes back in a buffer. Reads,
 * file sizes, locks and the memory-mapped -shm file then need no emulation at
 * all, and "cut the power" is exact: after the last connection closes, the
 * undo log played backwards turns every tracked file back into what it held
 * at its last successful xSync, byte for byte.
 *
 * Invariants: every undo record belongs to a tracked file and holds the full
 * old contents of its range (zeros past the end of the file, which is what a
 * hole reads back as); records are kept in the order the writes happened; an
 * xSync of a file removes that file's records, except sticky ones (a failed
 * sync under the fsyncgate model); `durable_size` is a file's size at its
 * last sync. Once the power is cut, no call touches a tracked file.
 *
 * Thread: all state is global, guarded by `mu`.
 */
#include "vfs_fault.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

struct tracked {
    char *path;
    sqlite3_int64 durable_size;
};

struct undo {
    size_t file; /* index into files[] */
    sqlite3_int64 off;
    size_t len;
    unsigned char *old;
    int sticky;
};

struct ffile {
    sqlite3_file base;
    sqlite3_file *real; /* points just past this struct */
    long tracked;       /* index into files[], or -1 */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static sqlite3_vfs *real_vfs;
static sqlite3_vfs fault_vfs;
static int registered;

static struct tracked *files;
static size_t nfiles, capfiles;
static struct undo *log_;
static size_t nlog, caplog;

static int dead;
static unsigned long cut_at;
static int inj_op = -1;
static unsigned long inj_nth;
static int inj_code;
static int inj_fired;
static int sticky_mode;
static void (*on_cut)(void);
static struct vfs_fault_stats stats;

/* A small generator of its own, so garbling does not depend on libc's
 * rand() state that the code under test might also use. */
static uint64_t rng_state;

static uint32_t
rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static void
forget_log_for(size_t file, int keep_sticky)
{
    size_t i, j = 0;

    for (i = 0; i < nlog; i++) {
        if (log_[i].file == file && !(keep_sticky && log_[i].sticky)) {
            free(log_[i].old);
            continue;
        }
        log_[j++] = log_[i];
    }
    nlog = j;
}

/*
 * A range lost to a failed sync is rewritten by SQLite (a later commit
 * writes the same WAL frames or pages again), and a successful sync of the
 * rewrite makes it durable: a sticky record covered by a later write of the
 * same file is dropped. SQLite writes whole pages and frames at the same
 * offsets, so full coverage is the case that matters; partial overlaps keep
 * the record, which errs on the side of losing data.
 */
static void
drop_rewritten_sticky(size_t file)
{
    size_t i, j;
    sqlite3_int64 end;

    for (i = 0; i < nlog; i++) {
        if (log_[i].file != file || !log_[i].sticky)
            continue;
        end = log_[i].off + (sqlite3_int64)log_[i].len;
        for (j = i + 1; j < nlog; j++)
            if (log_[j].file == file && !log_[j].sticky &&
                log_[j].off <= log_[i].off &&
                log_[j].off + (sqlite3_int64)log_[j].len >= end) {
                log_[i].sticky = 0;
                break;
            }
    }
}

static void
forget_all(void)
{
    size_t i;

    for (i = 0; i < nlog; i++)
        free(log_[i].old);
    free(log_);
    log_ = NULL;
    nlog = caplog = 0;
    for (i = 0; i < nfiles; i++)
        free(files[i].path);
    free(files);
    files = NULL;
    nfiles = capfiles = 0;
}

static sqlite3_int64
disk_size(const char *path)
{
    struct stat st;

    if (stat(path, &st) != 0)
        return 0;
    return (sqlite3_int64)st.st_size;
}

/* Finds or adds the tracked record for path; -1 when out of memory. A file
 * seen for the first time counts as durable as it stands on disk. */
static long
track(const char *path)
{
    size_t i;
    struct tracked *n;

    for (i = 0; i < nfiles; i++)
        if (strcmp(files[i].path, path) == 0)
            return (long)i;
    if (nfiles == capfiles) {
        size_t cap = capfiles ? capfiles * 2 : 8;
        n = realloc(files, cap * sizeof(*n));
        if (n == NULL)
            return -1;
        files = n;
        capfiles = cap;
    }
    files[nfiles].path = strdup(path);
    if (files[nfiles].path == NULL)
        return -1;
    files[nfiles].durable_size = disk_size(path);
    return (long)nfiles++;
}

/*
 * Counts a call of op and decides its fate: 0 to go ahead, or the SQLite
 * error to return instead (the power is off, or the injection fires here).
 */
static int
gate(int op, int dead_code)
{
    unsigned long n;

    if (dead)
        return dead_code;
    n = ++stats.ops[op];
    if (op == inj_op && n == inj_nth) {
        inj_fired = 1;
        stats.injected++;
        return inj_code;
    }
    return 0;
}

/* Saves the bytes in [off, off + len) before they are overwritten. */
static int
save_undo(struct ffile *f, sqlite3_int64 off, size_t len)
{
    struct undo *u;
    unsigned char *old;
    int rc;

    if (nlog == caplog) {
        size_t cap = caplog ? caplog * 2 : 64;
        u = realloc(log_, cap * sizeof(*u));
        if (u == NULL)
            return SQLITE_IOERR_NOMEM;
        log_ = u;
        caplog = cap;
    }
    old = calloc(1, len ? len : 1);
    if (old == NULL)
        return SQLITE_IOERR_NOMEM;
    /* A short read fills the rest with zeros, which is what the range past
     * the end of the file holds. */
    rc = f->real->pMethods->xRead(f->real, old, (int)len, off);
    if (rc != SQLITE_OK && rc != SQLITE_IOERR_SHORT_READ) {
        free(old);
        return rc;
    }
    u = &log_[nlog++];
    u->file = (size_t)f->tracked;
    u->off = off;
    u->len = len;
    u->old = old;
    u->sticky = 0;
    return SQLITE_OK;
}

static int
f_close(sqlite3_file *file)
{
    struct ffile *f = (struct ffile *)file;
    int rc = SQLITE_OK;

    if (f->real->pMethods != NULL)
        rc = f->real->pMethods->xClose(f->real);
    return rc;
}

static int
f_read(sqlite3_file *file, void *buf, int amt, sqlite3_int64 off)
{
    struct ffile *f = (struct ffile *)file;
    int rc = 0;

    if (f->tracked >= 0) {
        pthread_mutex_lock(&mu);
        rc = gate(VFS_FAULT_READ, SQLITE_IOERR_READ);
        pthread_mutex_unlock(&mu);
    }
    if (rc != 0)
        return rc;
    return f->real->pMethods->xRead(f->real, buf, amt, off);
}

static int
f_write(sqlite3_file *file, const void *buf, int amt, sqlite3_int64 off)
{
    struct ffile *f = (struct ffile *)file;
    int rc;

    if (f->tracked < 0)
        return f->real->pMethods->xWrite(f->real, buf, amt, off);
    pthread_mutex_lock(&mu);
    rc = gate(VFS_FAULT_WRITE, SQLITE_IOERR_WRITE);
    if (rc == 0)
        rc = save_undo(f, off, (size_t)amt);
    if (rc == 0)
        rc = f->real->pMethods->xWrite(f->real, buf, amt, off);
    pthread_mutex_unlock(&mu);
    return rc;
}

static int
f_truncate(sqlite3_file *file, sqlite3_int64 size)
{
    struct ffile *f = (struct ffile *)file;
    sqlite3_int64 cur = 0;
    int rc;

    if (f->tracked < 0)
        return f->real->pMethods->xTruncate(f->real, size);
    pthread_mutex_lock(&mu);
    rc = gate(VFS_FAULT_TRUNCATE, SQLITE_IOERR_TRUNCATE);
    if (rc == 0)
        rc = f->real->pMethods->xFileSize(f->real, &cur);
    /* The bytes cut off are kept so that a truncate that never reached the
     * disk can be undone. */
    if (rc == 0 && cur > size)
        rc = save_undo(f, size, (size_t)(cur - size));
    if (rc == 0)
        rc = f->real->pMethods->xTruncate(f->real, size);
    pthread_mutex_unlock(&mu);
    return rc;
}

static int
f_sync(sqlite3_file *file, int flags)
{
    struct ffile *f = (struct ffile *)file;
    sqlite3_int64 size = 0;
    size_t i;
    int rc;

    if (f->tracked < 0)
        return f->real->pMethods->xSync(f->real, flags);
    pthread_mutex_lock(&mu);
    if (!dead && cut_at != 0 && stats.ops[VFS_FAULT_SYNC] + 1 == cut_at) {
        void (*cb)(void) = on_cut;

        stats.ops[VFS_FAULT_SYNC]++;
        dead = 1;
        pthread_mutex_unlock(&mu);
        if (cb != NULL)
            cb();
        return SQLITE_IOERR_FSYNC;
    }
    rc = gate(VFS_FAULT_SYNC, SQLITE_IOERR_FSYNC);
    if (rc != 0) {
        /* After a failed fsync Linux marks the dirty pages clean: the data
         * may never reach the disk, whatever later syncs report. */
        if (!dead && sticky_mode)
            for (i = 0; i < nlog; i++)
                if (log_[i].file == (size_t)f->tracked)
                    log_[i].sticky = 1;
        pthread_mutex_unlock(&mu);
        return rc;
    }
    /* The real fsync is skipped: durability is what the undo log says it
     * is, and the tests run several thousand sync points. */
    (void)flags;
    drop_rewritten_sticky((size_t)f->tracked);
    forget_log_for((size_t)f->tracked, 1);
    if (f->real->pMethods->xFileSize(f->real, &size) == SQLITE_OK)
        files[f->tracked].durable_size = size;
    pthread_mutex_unlock(&mu);
    return SQLITE_OK;
}

static int
f_file_size(sqlite3_file *file, sqlite3_int64 *size)
{
    struct ffile *f = (struct ffile *)file;

    return f->real->pMethods->xFileSize(f->real, size);
}

static int
f_lock(sqlite3_file *file, int level)
{
    struct ffile *f = (struct ffile *)file;

    return f->real->pMethods->xLock(f->real, level);
}

static int
f_unlock(sqlite3_file *file, int level)
{
    struct ffile *f = (struct ffile *)file;

    return f->real->pMethods->xUnlock(f->real, level);
}

static int
f_check_reserved(sqlite3_file *file, int *out)
{
    struct ffile *f = (struct ffile *)file;

    return f->real->pMethods->xCheckReservedLock(f->real, out);
}

static int
f_file_control(sqlite3_file *file, int op, void *arg)
{
    struct ffile *f = (struct ffile *)file;

    return f->real->pMethods->xFileControl(f->real, op, arg);
}

static int
f_sector_size(sqlite3_file *file)
{
    struct ffile *f = (struct ffile *)file;

    return f->real->pMethods->xSectorSize(f->real);
}

static int
f_device_characteristics(sqlite3_file *file)
{
    struct ffile *f = (struct ffile *)file;

    return f->real->pMethods->xDeviceCharacteristics(f->real);
}

static int
f_shm_map(sqlite3_file *file, int pg, int pgsz, int extend, void volatile **p)
{
    struct ffile *f = (struct ffile *)file;

    return f->real->pMethods->xShmMap(f->real, pg, pgsz, extend, p);
}

static int
f_shm_lock(sqlite3_file *file, int offset, int n, int flags)
{
    struct ffile *f = (struct ffile *)file;

    return f->real->pMethods->xShmLock(f->real, offset, n, flags);
}

static void
f_shm_barrier(sqlite3_file *file)
{
    struct ffile *f = (struct ffile *)file;

    f->real->pMethods->xShmBarrier(f->real);
}

static int
f_shm_unmap(sqlite3_file *file, int delete_flag)
{
    struct ffile *f = (struct ffile *)file;

    return f->real->pMethods->xShmUnmap(f->real, delete_flag);
}

static int
f_fetch(sqlite3_file *file, sqlite3_int64 off, int amt, void **pp)
{
    struct ffile *f = (struct ffile *)file;

    /* Reads through a memory map would bypass the read counter and the
     * dead check; refusing the map makes SQLite use xRead instead. */
    (void)f;
    (void)off;
    (void)amt;
    *pp = NULL;
    return SQLITE_OK;
}

static int
f_unfetch(sqlite3_file *file, sqlite3_int64 off, void *p)
{
    (void)file;
    (void)off;
    (void)p;
    return SQLITE_OK;
}

static const sqlite3_io_methods fault_methods = {
    3,
    f_close,
    f_read,
    f_write,
    f_truncate,
    f_sync,
    f_file_size,
    f_lock,
    f_unlock,
    f_check_reserved,
    f_file_control,
    f_sector_size,
    f_device_characteristics,
    f_shm_map,
    f_shm_lock,
    f_shm_barrier,
    f_shm_unmap,
    f_fetch,
    f_unfetch,
};

static int
v_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags,
       int *out_flags)
{
    struct ffile *f = (struct ffile *)file;
    int rc;

    (void)vfs;
    memset(f, 0, sizeof(*f));
    f->real = (sqlite3_file *)(f + 1);
    f->tracked = -1;
    if (name != NULL && (flags & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_WAL |
                                  SQLITE_OPEN_MAIN_JOURNAL)) != 0) {
        pthread_mutex_lock(&mu);
        f->tracked = track(name);
        pthread_mutex_unlock(&mu);
        if (f->tracked < 0)
            return SQLITE_NOMEM;
    }
    rc = real_vfs->xOpen(real_vfs, name, f->real, flags, out_flags);
    /* SQLite calls xClose whenever pMethods is set, even after a failed
     * open, so the wrapper's methods are installed only with the real
     * file's. */
    if (f->real->pMethods != NULL)
        file->pMethods = &fault_methods;
    return rc;
}

static int
v_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
    size_t i;

    (void)vfs;
    pthread_mutex_lock(&mu);
    if (dead) {
        pthread_mutex_unlock(&mu);
        return SQLITE_IOERR_DELETE;
    }
    /* A deleted file's pending writes do not matter any more; a file of the
     * same name created later starts empty. */
    for (i = 0; i < nfiles; i++)
        if (strcmp(files[i].path, name) == 0) {
            forget_log_for(i, 0);
            files[i].durable_size = 0;
        }
    pthread_mutex_unlock(&mu);
    return real_vfs->xDelete(real_vfs, name, sync_dir);
}

static int
v_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
    (void)vfs;
    return real_vfs->xAccess(real_vfs, name, flags, out);
}

static int
v_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
    (void)vfs;
    return real_vfs->xFullPathname(real_vfs, name, n, out);
}

static int
v_randomness(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    return real_vfs->xRandomness(real_vfs, n, out);
}

static int
v_sleep(sqlite3_vfs *vfs, int us)
{
    (void)vfs;
    return real_vfs->xSleep(real_vfs, us);
}

static int
v_current_time(sqlite3_vfs *vfs, double *out)
{
    (void)vfs;
    return real_vfs->xCurrentTime(real_vfs, out);
}

static int
v_get_last_error(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    return real_vfs->xGetLastError(real_vfs, n, out);
}

static int
v_current_time64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
    (void)vfs;
    return real_vfs->xCurrentTimeInt64(real_vfs, out);
}

int
vfs_fault_register(int make_default)
{
    if (!registered) {
        real_vfs = sqlite3_vfs_find(NULL);
        if (real_vfs == NULL)
            return SQLITE_ERROR;
        memset(&fault_vfs, 0, sizeof(fault_vfs));
        fault_vfs.iVersion = 2;
        fault_vfs.szOsFile = (int)sizeof(struct ffile) + real_vfs->szOsFile;
        fault_vfs.mxPathname = real_vfs->mxPathname;
        fault_vfs.zName = VFS_FAULT_NAME;
        fault_vfs.xOpen = v_open;
        fault_vfs.xDelete = v_delete;
        fault_vfs.xAccess = v_access;
        fault_vfs.xFullPathname = v_full_pathname;
        fault_vfs.xRandomness = v_randomness;
        fault_vfs.xSleep = v_sleep;
        fault_vfs.xCurrentTime = v_current_time;
        fault_vfs.xGetLastError = v_get_last_error;
        fault_vfs.xCurrentTimeInt64 = v_current_time64;
        registered = 1;
    }
    return sqlite3_vfs_register(&fault_vfs, make_default);
}

void
vfs_fault_unregister(void)
{
    if (registered) {
        sqlite3_vfs_unregister(&fault_vfs);
        registered = 0;
    }
    pthread_mutex_lock(&mu);
    forget_all();
    pthread_mutex_unlock(&mu);
}

void
vfs_fault_reset(void)
{
    pthread_mutex_lock(&mu);
    forget_all();
    dead = 0;
    cut_at = 0;
    inj_op = -1;
    inj_nth = 0;
    inj_code = 0;
    inj_fired = 0;
    sticky_mode = 0;
    on_cut = NULL;
    memset(&stats, 0, sizeof(stats));
    pthread_mutex_unlock(&mu);
}

void
vfs_fault_cut_at_sync(unsigned long k)
{
    pthread_mutex_lock(&mu);
    cut_at = k;
    pthread_mutex_unlock(&mu);
}

void
vfs_fault_on_cut(void (*cb)(void))
{
    pthread_mutex_lock(&mu);
    on_cut = cb;
    pthread_mutex_unlock(&mu);
}

void
vfs_fault_cut_now(void)
{
    pthread_mutex_lock(&mu);
    dead = 1;
    pthread_mutex_unlock(&mu);
}

int
vfs_fault_is_dead(void)
{
    int d;

    pthread_mutex_lock(&mu);
    d = dead;
    pthread_mutex_unlock(&mu);
    return d;
}

void
vfs_fault_inject(int op, unsigned long nth, int code)
{
    pthread_mutex_lock(&mu);
    inj_op = nth ? op : -1;
    inj_nth = nth;
    inj_code = code;
    inj_fired = 0;
    pthread_mutex_unlock(&mu);
}

int
vfs_fault_fired(void)
{
    int r;

    pthread_mutex_lock(&mu);
    r = inj_fired;
    pthread_mutex_unlock(&mu);
    return r;
}

void
vfs_fault_sticky_sync_loss(int on)
{
    pthread_mutex_lock(&mu);
    sticky_mode = on;
    pthread_mutex_unlock(&mu);
}

void
vfs_fault_stats(struct vfs_fault_stats *st)
{
    pthread_mutex_lock(&mu);
    *st = stats;
    pthread_mutex_unlock(&mu);
}

static int
pwrite_all(int fd, const unsigned char *p, size_t len, off_t off)
{
    ssize_t n;

    while (len > 0) {
        n = pwrite(fd, p, len, off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
        off += n;
    }
    return 0;
}

/* Garbles one unsynced range in place: the disk may have kept the new
 * bytes, the old ones, a torn mix of both, or noise. */
static int
garble(int fd, const struct undo *u)
{
    unsigned char *buf;
    size_t i, cut;
    int rc = 0;

    switch (rng() % 4) {
    case 0: /* the write never reached the platter */
        return pwrite_all(fd, u->old, u->len, u->off);
    case 1: /* the write did reach it */
        return 0;
    case 2: /* torn: the head of the range is new, the tail old */
        cut = u->len ? rng() % u->len : 0;
        stats.garbled++;
        return pwrite_all(fd, u->old + cut, u->len - cut, u->off + (off_t)cut);
    default: /* noise */
        buf = malloc(u->len ? u->len : 1);
        if (buf == NULL)
            return -1;
        for (i = 0; i < u->len; i++)
            buf[i] = (unsigned char)rng();
        rc = pwrite_all(fd, buf, u->len, u->off);
        free(buf);
        stats.garbled++;
        return rc;
    }
}

int
vfs_fault_restore(int garble_mode, unsigned seed)
{
    size_t fi, i;
    int fd, rc = 0, saved;
    struct stat st;

    pthread_mutex_lock(&mu);
    dead = 1;
    rng_state = ((uint64_t)seed << 1) | 1;
    for (fi = 0; fi < nfiles && rc == 0; fi++) {
        fd = open(files[fi].path, O_RDWR);
        if (fd < 0) {
            if (errno == ENOENT)
                continue;
            rc = -1;
            break;
        }
        /* Backwards, so that each range ends with the bytes it held before
         * its first unsynced write. */
        for (i = nlog; i-- > 0 && rc == 0;) {
            if (log_[i].file != fi)
                continue;
            stats.undo_records++;
            stats.undo_bytes += log_[i].len;
            if (log_[i].sticky)
                stats.sticky_lost++;
            if (garble_mode && !log_[i].sticky)
                rc = garble(fd, &log_[i]);
            else
                rc = pwrite_all(fd, log_[i].old, log_[i].len, log_[i].off);
        }
        /* The size: in drop mode what the last sync saw; a garbled file
         * may also keep its unsynced length, as a journaling file system
         * may have committed the size but not the data. */
        if (rc == 0 && fstat(fd, &st) == 0 &&
            (sqlite3_int64)st.st_size != files[fi].durable_size &&
            (!garble_mode || rng() % 2 == 0))
            rc = ftruncate(fd, (off_t)files[fi].durable_size);
        saved = errno;
        close(fd);
        errno = saved;
    }
    for (i = 0; i < nlog; i++)
        free(log_[i].old);
    nlog = 0;
    pthread_mutex_unlock(&mu);
    return rc;
}
