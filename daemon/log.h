/*
 * log.h: the daemon's one logging API (OpenBSD's log.c): messages go to
 * stderr, with sd-daemon priority prefixes ("<3>", "<4>", "<6>", "<7>")
 * when stderr is the journal (JOURNAL_STREAM names it), so journald keeps
 * the levels, and as plain text ("error: ", "warning: ", "debug: ", none
 * for info) on a terminal or a file. The level is checked before anything
 * is formatted. Safe from any thread (each message is one write to
 * stderr); never from a signal handler.
 */
#ifndef RECEIPTD_DAEMON_LOG_H
#define RECEIPTD_DAEMON_LOG_H

#include <stdarg.h>

/* Sets the most verbose level written (LOG_ERR..LOG_DEBUG of syslog.h). */
void log_set_level(int level);

/* Decides again whether stderr is the journal (done by the first message
 * otherwise): after stderr was redirected. */
void log_init(void);

/* True when JOURNAL_STREAM names stderr's device and inode. */
int log_stderr_is_journal(void);

/* A message at level (LOG_ERR..LOG_DEBUG), as given. */
void log_at(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* True when a message at level would be written. */
int log_enabled(int level);

/* A warning with ": " and strerror(errno) appended. */
/* An error the daemon survives but an operator must act on (<3>). */
void log_errx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A warning as given. */
void log_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* An error (with errno text for fatal), then exit(1). */
void fatal(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));
void fatalx(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));

#endif
