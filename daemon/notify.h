/*
 * notify.h: the daemon's side of systemd's service protocol, as thin
 * functions over libsystemd's sd-daemon: readiness, status lines, stopping
 * and reloading, the watchdog, and sockets inherited through socket
 * activation.
 *
 * Every notify_* message function is a no-op returning 0 when the daemon
 * does not run under systemd (no NOTIFY_SOCKET), so callers never test for
 * it. Main thread only: sd_notify reads the environment, and the watchdog
 * gate keeps state.
 */
#ifndef RECEIPTD_DAEMON_NOTIFY_H
#define RECEIPTD_DAEMON_NOTIFY_H

#include <stddef.h>
#include <stdint.h>

#define NOTIFY_ERR_MAX 256

/* The most inherited sockets notify_listen_fds() accepts. */
#define NOTIFY_FDS_MAX 16

/*
 * READY=1: the store is open, migrated and writable and every listener is
 * up. Returns 1 when sent, 0 without NOTIFY_SOCKET, a negative errno when
 * sending failed (the daemon logs it and carries on).
 */
int notify_ready(void);

/*
 * STATUS=<text>, the one-line state `systemctl status` shows: printf-style.
 * Newlines in the text are replaced by spaces (one would start a new
 * assignment). Text longer than 200 bytes is cut. Returns as notify_ready().
 */
int notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * Periodic messages (STATUS=, WATCHDOG=1) dropped since start because the
 * manager's queue was full: they are never waited for, so a manager that
 * stops reading cannot stall the loop. READY=1, STOPPING=1, RELOADING=1
 * and EXTEND_TIMEOUT_USEC= wait up to 1 s for room, then count here too
 * and return -EAGAIN.
 */
uint64_t notify_dropped(void);

/* STOPPING=1: shutdown has begun. Returns as notify_ready(). */
int notify_stopping(void);

/*
 * RELOADING=1 with MONOTONIC_USEC= (SIGHUP received, configuration being
 * re-read); send notify_ready() once the reload is done, whether it was
 * accepted or rejected. Returns as notify_ready().
 */
int notify_reloading(void);

/*
 * EXTEND_TIMEOUT_USEC=usec: asks for more time before the start (or stop)
 * is declared failed, e.g. during a long migration. Returns as
 * notify_ready().
 */
int notify_extend_timeout(uint64_t usec);

/*
 * The watchdog interval systemd expects pings within (WatchdogSec=), in
 * microseconds, or 0 when the watchdog is off. Ping every half of it.
 */
uint64_t notify_watchdog_usec(void);

/* WATCHDOG=1. Returns as notify_ready(). */
int notify_watchdog_ping(void);

/*
 * The watchdog gate: a ping is earned only while the writer thread makes
 * progress. The caller passes the writer's progress counter (anything that
 * grows with each commit, or each loop turn of the writer) and whether the
 * writer has work waiting. notify_watchdog_due() returns 1 (ping now) when
 * the writer is idle or the counter moved since the previous call, and 0
 * when work waits and nothing moved: a stuck disk then misses pings and
 * systemd restarts the daemon. Embedded; zero it (or call _init) first.
 */
struct notify_watchdog {
    uint64_t last_progress;
    int primed; /* last_progress holds a value */
};

void notify_watchdog_init(struct notify_watchdog *w);
int notify_watchdog_due(struct notify_watchdog *w, uint64_t progress, int busy);

enum notify_fd_kind {
    NOTIFY_FD_UNIX = 1, /* listening AF_UNIX SOCK_STREAM */
    NOTIFY_FD_TCP = 2,  /* listening AF_INET or AF_INET6 SOCK_STREAM */
};

struct notify_fd {
    int fd;
    enum notify_fd_kind kind;
    char name[64]; /* FileDescriptorName= of the socket unit, or "" */
};

/*
 * Socket activation: the listening sockets systemd passed (LISTEN_FDS for
 * this pid), classified. Fills out[0..*n) and returns 0; *n is 0 when the
 * daemon was not socket-activated (it binds its own sockets then). The
 * LISTEN_* variables are removed from the environment so children do not
 * see them; the fds are close-on-exec and now belong to the caller (hand
 * them to uv_pipe_open / uv_tcp_open). Returns -1 with a reason in err
 * when an inherited fd is not a listening Unix or TCP stream socket, or
 * there are more than max; every inherited fd is closed then.
 */
int notify_listen_fds(struct notify_fd *out, size_t max, size_t *n,
                      char err[NOTIFY_ERR_MAX]);

#endif
