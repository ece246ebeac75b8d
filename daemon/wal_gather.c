/*
 * wal_gather.c: the WAL frames of a commit in one write (wal_gather.h).
 */
#include "wal_gather.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#define WAL_HEADER_BYTES 32
#define FRAME_HEADER     24

struct gather {
    sqlite3_io_methods m; /* f->pMethods while installed: first member */
    const sqlite3_io_methods *orig;
    pthread_mutex_t mu;
    unsigned char *buf;
    size_t len;
    sqlite3_int64 off;    /* the file offset of buf[0] */
    sqlite3_int64 commit; /* the offset of the commit frame's page; -1 */
};

static struct gather *
gather_of(sqlite3_file *f)
{
    return (struct gather *)(void *)((char *)(uintptr_t)f->pMethods -
                                     offsetof(struct gather, m));
}

/* Writes what the buffer holds; with g->mu held. */
static int
flush(sqlite3_file *f, struct gather *g)
{
    int rc;

    if (g->len == 0)
        return SQLITE_OK;
    rc = g->orig->xWrite(f, g->buf, (int)g->len, g->off);
    g->len = 0;
    g->commit = -1;
    return rc;
}

/* A frame header whose "database size after commit" is not 0. */
static int
is_commit_header(const void *p, int n, sqlite3_int64 off)
{
    const unsigned char *h = p;

    return n == FRAME_HEADER && off >= WAL_HEADER_BYTES &&
           (h[4] | h[5] | h[6] | h[7]) != 0;
}

static int
g_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 off)
{
    struct gather *g = gather_of(f);
    int rc = SQLITE_OK;

    pthread_mutex_lock(&g->mu);
    if (g->len > 0 && (off != g->off + (sqlite3_int64)g->len ||
                       g->len + (size_t)n > WAL_GATHER_BYTES))
        rc = flush(f, g);
    if (rc == SQLITE_OK && (size_t)n > WAL_GATHER_BYTES) {
        rc = g->orig->xWrite(f, p, n, off);
    } else if (rc == SQLITE_OK) {
        if (g->len == 0)
            g->off = off;
        memcpy(g->buf + g->len, p, (size_t)n);
        g->len += (size_t)n;
        if (is_commit_header(p, n, off))
            g->commit = off + FRAME_HEADER;
        else if (off == g->commit)
            rc = flush(f, g); /* the commit frame is whole */
    }
    pthread_mutex_unlock(&g->mu);
    return rc;
}

/* The methods that see the file as it is: what the buffer holds first. */
static int
g_read(sqlite3_file *f, void *p, int n, sqlite3_int64 off)
{
    struct gather *g = gather_of(f);
    int rc;

    pthread_mutex_lock(&g->mu);
    if ((rc = flush(f, g)) == SQLITE_OK)
        rc = g->orig->xRead(f, p, n, off);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

static int
g_sync(sqlite3_file *f, int flags)
{
    struct gather *g = gather_of(f);
    int rc;

    pthread_mutex_lock(&g->mu);
    rc = flush(f, g);
    pthread_mutex_unlock(&g->mu);
    /* Not under the mutex: the writer's next frames go on meanwhile. */
    return rc == SQLITE_OK ? g->orig->xSync(f, flags) : rc;
}

static int
g_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    struct gather *g = gather_of(f);
    int rc;

    pthread_mutex_lock(&g->mu);
    if ((rc = flush(f, g)) == SQLITE_OK)
        rc = g->orig->xTruncate(f, size);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

static int
g_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
    struct gather *g = gather_of(f);
    int rc;

    pthread_mutex_lock(&g->mu);
    if ((rc = flush(f, g)) == SQLITE_OK)
        rc = g->orig->xFileSize(f, size);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

static int
g_close(sqlite3_file *f)
{
    struct gather *g = gather_of(f);
    int rc;

    pthread_mutex_lock(&g->mu);
    rc = flush(f, g);
    pthread_mutex_unlock(&g->mu);
    f->pMethods = g->orig;
    pthread_mutex_destroy(&g->mu);
    free(g->buf);
    free(g);
    /* The file is closed whatever the last write did. */
    return f->pMethods->xClose(f) == SQLITE_OK ? rc : SQLITE_IOERR_CLOSE;
}

int
wal_gather_install(sqlite3_file *f)
{
    struct gather *g;

    if (f == NULL || f->pMethods == NULL || wal_gather_installed(f))
        return -1;
    if ((g = calloc(1, sizeof(*g))) == NULL)
        return -1;
    if ((g->buf = malloc(WAL_GATHER_BYTES)) == NULL ||
        pthread_mutex_init(&g->mu, NULL) != 0) {
        free(g->buf);
        free(g);
        return -1;
    }
    g->orig = f->pMethods;
    g->m = *f->pMethods;
    g->m.xClose = g_close;
    g->m.xRead = g_read;
    g->m.xWrite = g_write;
    g->m.xTruncate = g_truncate;
    g->m.xSync = g_sync;
    g->m.xFileSize = g_file_size;
    g->commit = -1;
    f->pMethods = &g->m;
    return 0;
}

int
wal_gather_installed(const sqlite3_file *f)
{
    return f != NULL && f->pMethods != NULL && f->pMethods->xWrite == g_write;
}
