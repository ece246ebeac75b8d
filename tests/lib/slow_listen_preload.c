/*
 * slow_listen_preload.c: an LD_PRELOAD library for e2e_metrics that makes
 * every listen() on an IPv4 or IPv6 socket sleep first, for
 * RECEIPTD_TEST_SLOW_LISTEN_MS milliseconds: the window between two
 * listeners that a loaded machine can open. A daemon that binds its Unix
 * socket before its HTTP listener then accepts on the Unix socket while
 * /metrics still refuses; one that binds the Unix socket last does not.
 * Unix sockets are left alone.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

typedef int (*listen_fn)(int, int);

int
listen(int fd, int backlog)
{
    listen_fn real = (listen_fn)dlsym(RTLD_NEXT, "listen");
    const char *ms = getenv("RECEIPTD_TEST_SLOW_LISTEN_MS");
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    if (ms != NULL && getsockname(fd, (struct sockaddr *)&ss, &len) == 0 &&
        (ss.ss_family == AF_INET || ss.ss_family == AF_INET6)) {
        long v = atol(ms);
        struct timespec ts = { v / 1000, (v % 1000) * 1000000L };

        nanosleep(&ts, NULL);
    }
    return real(fd, backlog);
}
