/*
 * log.c: stderr logging, with sd-daemon priority prefixes ("<4>") when
 * stderr is the journal and plain text ("warning: ") otherwise.
 *
 * Each message is formatted into one stack buffer and written with a single
 * write(2), so lines from the loop and the writer thread never interleave
 * within a line. The level is a relaxed atomic read so any thread may log.
 * Whether stderr is the journal is decided once, at the first message (or
 * log_init()): systemd sets JOURNAL_STREAM to the device and inode of the
 * stream it connected, and stderr is the journal only when they match
 * (a child whose stderr was redirected inherits the variable too).
 */
#include "log.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>
#include <sys/stat.h>

#define LOG_LINE_MAX 1024

static atomic_int level = LOG_INFO;
static atomic_int journal = -1; /* -1: not decided yet */

int
log_stderr_is_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    char tail;

    if (js == NULL || sscanf(js, "%llu:%llu%c", &dev, &ino, &tail) != 2 ||
        fstat(STDERR_FILENO, &st) != 0)
        return 0;
    return (unsigned long long)st.st_dev == dev &&
           (unsigned long long)st.st_ino == ino;
}

void
log_init(void)
{
    atomic_store(&journal, log_stderr_is_journal());
}

static const char *
plain_prefix(int lvl)
{
    switch (lvl) {
    case LOG_EMERG:
    case LOG_ALERT:
    case LOG_CRIT:
    case LOG_ERR:
        return "error: ";
    case LOG_WARNING:
        return "warning: ";
    case LOG_DEBUG:
        return "debug: ";
    default:
        return "";
    }
}

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

    if (atomic_load_explicit(&journal, memory_order_relaxed) < 0)
        log_init();
    if (atomic_load_explicit(&journal, memory_order_relaxed))
        n = snprintf(line, sizeof(line), "<%d>", lvl);
    else
        n = snprintf(line, sizeof(line), "%s", plain_prefix(lvl));
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
log_at(int lvl, const char *fmt, ...)
{
    LOG_BODY(lvl, 0);
}

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
