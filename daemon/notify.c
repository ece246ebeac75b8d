/*
 * notify.c: sd_notify messages, the watchdog gate and inherited sockets
 * (notify.h). Main thread only.
 *
 * The message functions never unset NOTIFY_SOCKET: the daemon sends
 * STATUS= lines and watchdog pings for as long as it runs. Inherited
 * sockets are taken exactly once: sd_listen_fds() removes LISTEN_* from the
 * environment, so a second call (or a child) finds none.
 */
#include "notify.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

/* systemd shows one line of status; longer ones only clutter the journal. */
#define STATUS_MAX 200

int
notify_ready(void)
{
    return sd_notify(0, "READY=1");
}

int
notify_status(const char *fmt, ...)
{
    char text[STATUS_MAX + 1];
    va_list ap;
    char *p;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    for (p = text; *p != '\0'; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return sd_notifyf(0, "STATUS=%s", text);
}

int
notify_stopping(void)
{
    return sd_notify(0, "STOPPING=1");
}

int
notify_reloading(void)
{
    struct timespec ts;
    uint64_t usec;

    /* systemd 253 and later match the reload to this timestamp
     * (Type=notify-reload); older ones ignore it. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    usec = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
    return sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%" PRIu64, usec);
}

int
notify_extend_timeout(uint64_t usec)
{
    return sd_notifyf(0, "EXTEND_TIMEOUT_USEC=%" PRIu64, usec);
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
    return sd_notify(0, "WATCHDOG=1");
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
