/*
 * sqlite_open_spy.c: an LD_PRELOAD library for tests that logs every
 * sqlite3_open_v2() of a process (its flags and file name) to the file
 * named by RECEIPTD_OPEN_LOG, then calls the real function. Used by
 * e2e_writer_only.c to assert that the daemon opens its database
 * read-write exactly once, from the writer, and every other connection
 * read-only (Debian's SQLite 3.40 can corrupt a WAL when two connections
 * write or checkpoint).
 *
 * Thread: any; each line is one write(2) on an O_APPEND descriptor, so
 * lines from concurrent opens do not interleave.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

typedef int (*open_v2_fn)(const char *, sqlite3 **, int, const char *);

int
sqlite3_open_v2(const char *filename, sqlite3 **db, int flags, const char *vfs)
{
    open_v2_fn real =
        (open_v2_fn)(uintptr_t)dlsym(RTLD_NEXT, "sqlite3_open_v2");
    const char *log = getenv("RECEIPTD_OPEN_LOG");
    char line[1200];
    int fd, n;

    if (log != NULL &&
        (fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) >=
            0) {
        n = snprintf(line, sizeof(line), "%s %d %s\n",
                     (flags & SQLITE_OPEN_READWRITE) ? "rw" : "ro", flags,
                     filename ? filename : "");
        if (n > 0 && (size_t)n < sizeof(line)) {
            ssize_t w = write(fd, line, (size_t)n);
            (void)w;
        }
        close(fd);
    }
    if (real == NULL)
        return SQLITE_ERROR;
    return real(filename, db, flags, vfs);
}
