/*
 * log.c: stderr logging with sd-daemon priority prefixes.
 *
 * Each message is formatted into one stack buffer and written with a single
 * write(2), so lines from the loop and the writer thread never interleave
 * within a line. The level is a relaxed atomic read so any thread may log.
 */
#include "log.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#define LOG_LINE_MAX 1024

static atomic_int level = LOG_INFO;

void
log_set_level(int lvl)
{
    atomic_store_explicit(&level, lvl, memory_order_relaxed);
}

int
log_enabled(int lvl)
{
    return lvl <= atomic_load_explicit(&level, memory_order_relaxed);
}

static void
vlog(int lvl, int with_errno, const char *fmt, va_list ap)
{
    char line[LOG_LINE_MAX];
    int saved = errno;
    int n, m;
    ssize_t w;

    n = snprintf(line, sizeof(line), "<%d>", lvl);
    m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    if (m < 0)
        m = 0;
    n += m;
    if ((size_t)n >= sizeof(line) - 1)
        n = (int)sizeof(line) - 2;
    if (with_errno) {
        m = snprintf(line + n, sizeof(line) - (size_t)n, ": %s",
                     strerror(saved));
        n += m;
        if ((size_t)n >= sizeof(line) - 1)
            n = (int)sizeof(line) - 2;
    }
    line[n++] = '\n';
    /* A failed write to stderr has nowhere to be reported. */
    w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
    errno = saved;
}

#define LOG_BODY(lvl, with_errno)                                              \
    do {                                                                       \
        va_list ap;                                                            \
        if (!log_enabled(lvl))                                                 \
            return;                                                            \
        va_start(ap, fmt);                                                     \
        vlog(lvl, with_errno, fmt, ap);                                        \
        va_end(ap);                                                            \
    } while (0)

void
log_errx(const char *fmt, ...)
{
    LOG_BODY(LOG_ERR, 0);
}

void
log_warn(const char *fmt, ...)
{
    LOG_BODY(LOG_WARNING, 1);
}

void
log_warnx(const char *fmt, ...)
{
    LOG_BODY(LOG_WARNING, 0);
}

void
log_info(const char *fmt, ...)
{
    LOG_BODY(LOG_INFO, 0);
}

void
log_debug(const char *fmt, ...)
{
    LOG_BODY(LOG_DEBUG, 0);
}

void
fatal(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vlog(LOG_ERR, 1, fmt, ap);
    va_end(ap);
    exit(1);
}

void
fatalx(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vlog(LOG_ERR, 0, fmt, ap);
    va_end(ap);
    exit(1);
}
