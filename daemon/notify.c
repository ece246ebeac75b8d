/*
 * notify.c: sd_notify messages, the watchdog gate and inherited sockets
 * (notify.h). Main thread only.
 *
 * The message functions never unset NOTIFY_SOCKET: the daemon sends
 * STATUS= lines and watchdog pings for as long as it runs. They send on a
 * non-blocking socket of their own (libsystemd's sd_notify blocks when the
 * manager's queue is full, which would stall the event loop): periodic
 * messages are dropped then and counted, the others wait a bounded time.
 * Inherited sockets are taken exactly once: sd_listen_fds() removes LISTEN_*
 * from the environment, so a second call (or a child) finds none.
 */
#include "notify.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

/* systemd shows one line of status; longer ones only clutter the journal. */
#define STATUS_MAX 200

/* How long a message that must arrive (READY=1, STOPPING=1, RELOADING=1,
 * EXTEND_TIMEOUT_USEC=) may wait for room in a manager's full queue. */
#define NOTIFY_MUST_WAIT_MS 1000

/*
 * Our own non-blocking datagram socket to $NOTIFY_SOCKET (sd_notify's is
 * blocking: a manager that stops reading would stall the loop). Opened at
 * the first message; a path ("/...") or an abstract name ("@..."), the
 * two forms systemd 252 uses. Another form, or no socket, falls back to
 * sd_notify() (fallback).
 */
static struct {
    int fd; /* 0: not opened yet (fd 0 is never ours); -1: fallback */
    struct sockaddr_un sa;
    socklen_t salen;
    uint64_t dropped;
} nfy;

/* 1: our socket is ready; 0: no NOTIFY_SOCKET; -1: use sd_notify(). */
static int
nfy_open(void)
{
    const char *e;
    size_t n;
    int fd;

    if (nfy.fd > 0)
        return 1;
    if (nfy.fd < 0)
        return -1;
    e = getenv("NOTIFY_SOCKET");
    if (e == NULL || e[0] == '\0')
        return 0;
    n = strlen(e);
    if ((e[0] != '/' && e[0] != '@') || n >= sizeof(nfy.sa.sun_path)) {
        nfy.fd = -1;
        return -1;
    }
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        nfy.fd = -1;
        return -1;
    }
    if (fd == 0) {
        /* 0 means "not opened" here; keep the socket off it. */
        int fd2 = fcntl(fd, F_DUPFD_CLOEXEC, 1);

        close(fd);
        if (fd2 < 0) {
            nfy.fd = -1;
            return -1;
        }
        fd = fd2;
    }
    memset(&nfy.sa, 0, sizeof(nfy.sa));
    nfy.sa.sun_family = AF_UNIX;
    memcpy(nfy.sa.sun_path, e, n);
    if (e[0] == '@')
        nfy.sa.sun_path[0] = '\0';
    /* An abstract name's length is exact: no terminating NUL. */
    nfy.salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
                            (e[0] == '/' ? 1 : 0));
    nfy.fd = fd;
    return 1;
}

/*
 * Sends text to the manager. A periodic message (may_drop: STATUS=,
 * WATCHDOG=1) that finds the manager's queue full is dropped and counted,
 * never waited for: the next one follows within its period. Any other
 * waits for room at most NOTIFY_MUST_WAIT_MS. Returns as notify_ready().
 */
static int
nfy_send(const char *text, int may_drop)
{
    size_t len = strlen(text);
    struct pollfd p;
    ssize_t n;
    int rc = nfy_open(), waited = 0;

    if (rc == 0)
        return 0;
    if (rc < 0)
        return sd_notify(0, text);
    for (;;) {
        n = sendto(nfy.fd, text, len, MSG_NOSIGNAL,
                   (const struct sockaddr *)&nfy.sa, nfy.salen);
        if (n >= 0)
            return 1;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        if (may_drop || waited) {
            nfy.dropped++;
            return -EAGAIN;
        }
        p.fd = nfy.fd;
        p.events = POLLOUT;
        p.revents = 0;
        if (poll(&p, 1, NOTIFY_MUST_WAIT_MS) < 0 && errno != EINTR)
            return -errno;
        waited = 1;
    }
}

uint64_t
notify_dropped(void)
{
    return nfy.dropped;
}

int
notify_ready(void)
{
    return nfy_send("READY=1", 0);
}

int
notify_status(const char *fmt, ...)
{
    char text[sizeof("STATUS=") + STATUS_MAX];
    va_list ap;
    char *p;

    memcpy(text, "STATUS=", sizeof("STATUS=") - 1);
    va_start(ap, fmt);
    vsnprintf(text + sizeof("STATUS=") - 1, STATUS_MAX + 1, fmt, ap);
    va_end(ap);
    for (p = text; *p != '\0'; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return nfy_send(text, 1);
}

int
notify_stopping(void)
{
    return nfy_send("STOPPING=1", 0);
}

int
notify_reloading(void)
{
    char text[64];
    uint64_t usec;

    /* systemd 253 and later match the reload to this timestamp
     * (Type=notify-reload); older ones ignore it. */
    usec = mono_us();
    snprintf(text, sizeof(text), "RELOADING=1\nMONOTONIC_USEC=%" PRIu64, usec);
    return nfy_send(text, 0);
}

int
notify_extend_timeout(uint64_t usec)
{
    char text[64];

    snprintf(text, sizeof(text), "EXTEND_TIMEOUT_USEC=%" PRIu64, usec);
    return nfy_send(text, 0);
}

uint64_t
notify_watchdog_usec(void)
{
    uint64_t usec = 0;

    if (sd_watchdog_enabled(0, &usec) <= 0)
        return 0;
    return usec;
}

int
notify_watchdog_ping(void)
{
    /* Earned (notify_watchdog_due), and periodic: a manager that does not
     * read its queue would not see it either. */
    return nfy_send("WATCHDOG=1", 1);
}

void
notify_watchdog_init(struct notify_watchdog *w)
{
    memset(w, 0, sizeof(*w));
}

int
notify_watchdog_due(struct notify_watchdog *w, uint64_t progress, int busy)
{
    int moved = !w->primed || progress != w->last_progress;

    w->last_progress = progress;
    w->primed = 1;
    /* An idle writer is healthy; a busy one must show it is moving. The
     * first call has nothing to compare with and counts as moving. */
    return !busy || moved;
}

static void
close_from(int first, int count)
{
    int i;

    for (i = 0; i < count; i++)
        close(first + i);
}

int
notify_listen_fds(struct notify_fd *out, size_t max, size_t *n,
                  char err[NOTIFY_ERR_MAX])
{
    char **names = NULL;
    int count, i;
    int rc = 0;

    *n = 0;
    count = sd_listen_fds_with_names(1, &names);
    if (count < 0) {
        snprintf(err, NOTIFY_ERR_MAX,
                 "cannot read the sockets passed by systemd: %s",
                 strerror(-count));
        return -1;
    }
    if (count == 0)
        return 0;
    if ((size_t)count > max) {
        snprintf(err, NOTIFY_ERR_MAX,
                 "systemd passed %d sockets, at most %zu are supported", count,
                 max);
        rc = -1;
        goto out;
    }
    for (i = 0; i < count; i++) {
        int fd = SD_LISTEN_FDS_START + i;
        struct notify_fd *o = &out[i];

        o->fd = fd;
        snprintf(o->name, sizeof(o->name), "%s",
                 names != NULL && names[i] != NULL ? names[i] : "");
        if (sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) > 0) {
            o->kind = NOTIFY_FD_UNIX;
        } else if (sd_is_socket_inet(fd, AF_UNSPEC, SOCK_STREAM, 1, 0) > 0) {
            o->kind = NOTIFY_FD_TCP;
        } else {
            /* A datagram socket or a FIFO in the socket unit is a
             * packaging mistake; refusing to start says so plainly. */
            snprintf(err, NOTIFY_ERR_MAX,
                     "inherited fd %d (%s) is not a listening Unix or TCP "
                     "stream socket",
                     fd, o->name[0] != '\0' ? o->name : "unnamed");
            rc = -1;
            goto out;
        }
    }
    *n = (size_t)count;
out:
    if (rc < 0)
        close_from(SD_LISTEN_FDS_START, count);
    if (names != NULL) {
        for (i = 0; i < count; i++)
            free(names[i]);
        free(names);
    }
    return rc;
}
