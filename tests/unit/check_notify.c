/*
 * check_notify.c: systemd readiness, watchdog and socket activation
 * (daemon/notify.c), without systemd.
 *
 * Messages: the test binds an AF_UNIX datagram socket, points NOTIFY_SOCKET
 * at it and reads what each function sent. Socket activation: once with
 * LISTEN_FDS set by hand in a forked child, and once through systemd's own
 * systemd-socket-activate, which runs this binary again with --activated
 * (see activated_main) on a Unix and a TCP socket.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "notify.h"
#include "skip.h"

/* ---- sd_notify messages. ---- */

static int
bind_notify_socket(char *path, size_t len)
{
    struct sockaddr_un sa;
    int fd;

    snprintf(path, len, "%s/check_notify_%ld.sock", TEST_BINARY_DIR,
             (long)getpid());
    unlink(path);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    ck_assert_uint_lt(strlen(path), sizeof(sa.sun_path));
    strcpy(sa.sun_path, path);
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(setenv("NOTIFY_SOCKET", path, 1), 0);
    return fd;
}

/* Reads one datagram (waiting at most 5 s) into buf as a string. */
static void
read_datagram(int fd, char *buf, size_t len)
{
    struct pollfd pfd = { fd, POLLIN, 0 };
    ssize_t n;

    ck_assert_int_eq(poll(&pfd, 1, 5000), 1);
    n = recv(fd, buf, len - 1, 0);
    ck_assert_int_ge(n, 0);
    buf[n] = '\0';
}

enum msg_case {
    M_READY,
    M_STATUS,
    M_STATUS_NEWLINE,
    M_STATUS_LONG,
    M_STOPPING,
    M_WATCHDOG,
    M_RELOADING,
    M_EXTEND,
    M_COUNT
};

static int
send_case(int i)
{
    char long_text[400];

    switch (i) {
    case M_READY:
        return notify_ready();
    case M_STATUS:
        return notify_status("%u receipts/s, queue %u, %u store errors", 1250u,
                             3u, 0u);
    case M_STATUS_NEWLINE:
        return notify_status("line one\nREADY=1\r\nend");
    case M_STATUS_LONG:
        memset(long_text, 'x', sizeof(long_text) - 1);
        long_text[sizeof(long_text) - 1] = '\0';
        return notify_status("%s", long_text);
    case M_STOPPING:
        return notify_stopping();
    case M_WATCHDOG:
        return notify_watchdog_ping();
    case M_RELOADING:
        return notify_reloading();
    case M_EXTEND:
        return notify_extend_timeout(90000000u);
    }
    return -1;
}

START_TEST(test_notify_sends_each_message)
{
    char path[256], got[1024], want[1024];
    int fd = bind_notify_socket(path, sizeof(path));
    unsigned long long usec;
    int consumed = 0;

    ck_assert_int_eq(send_case(_i), 1);
    read_datagram(fd, got, sizeof(got));
    switch (_i) {
    case M_READY:
        ck_assert_str_eq(got, "READY=1");
        break;
    case M_STATUS:
        ck_assert_str_eq(got,
                         "STATUS=1250 receipts/s, queue 3, 0 store errors");
        break;
    case M_STATUS_NEWLINE:
        /* A newline would have smuggled in a READY=1 assignment. */
        ck_assert_str_eq(got, "STATUS=line one READY=1  end");
        break;
    case M_STATUS_LONG:
        memset(want, 'x', 200);
        want[200] = '\0';
        ck_assert_str_eq(got + strlen("STATUS="), want);
        break;
    case M_STOPPING:
        ck_assert_str_eq(got, "STOPPING=1");
        break;
    case M_WATCHDOG:
        ck_assert_str_eq(got, "WATCHDOG=1");
        break;
    case M_RELOADING:
        ck_assert_int_eq(
            sscanf(got, "RELOADING=1\nMONOTONIC_USEC=%llu%n", &usec, &consumed),
            1);
        ck_assert_uint_eq((size_t)consumed, strlen(got));
        ck_assert_uint_gt(usec, 0);
        break;
    case M_EXTEND:
        ck_assert_str_eq(got, "EXTEND_TIMEOUT_USEC=90000000");
        break;
    }
    close(fd);
    unlink(path);
}
END_TEST

START_TEST(test_notify_without_socket_is_a_no_op)
{
    unsetenv("NOTIFY_SOCKET");
    ck_assert_int_eq(send_case(_i), 0);
}
END_TEST

START_TEST(test_notify_sequence_in_order)
{
    char path[256], got[256];
    int fd = bind_notify_socket(path, sizeof(path));

    /* The order a daemon's life sends them in. */
    ck_assert_int_eq(notify_status("opening the store"), 1);
    ck_assert_int_eq(notify_ready(), 1);
    ck_assert_int_eq(notify_watchdog_ping(), 1);
    ck_assert_int_eq(notify_stopping(), 1);
    read_datagram(fd, got, sizeof(got));
    ck_assert_str_eq(got, "STATUS=opening the store");
    read_datagram(fd, got, sizeof(got));
    ck_assert_str_eq(got, "READY=1");
    read_datagram(fd, got, sizeof(got));
    ck_assert_str_eq(got, "WATCHDOG=1");
    read_datagram(fd, got, sizeof(got));
    ck_assert_str_eq(got, "STOPPING=1");
    close(fd);
    unlink(path);
}
END_TEST

/* ---- The watchdog. ---- */

START_TEST(test_notify_watchdog_usec_from_environment)
{
    char pid[32];

    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    ck_assert_uint_eq(notify_watchdog_usec(), 0);

    snprintf(pid, sizeof(pid), "%ld", (long)getpid());
    setenv("WATCHDOG_USEC", "30000000", 1);
    setenv("WATCHDOG_PID", pid, 1);
    ck_assert_uint_eq(notify_watchdog_usec(), 30000000u);

    /* Meant for another process (a parent that forked us). */
    snprintf(pid, sizeof(pid), "%ld", (long)getpid() + 1);
    setenv("WATCHDOG_PID", pid, 1);
    ck_assert_uint_eq(notify_watchdog_usec(), 0);

    unsetenv("WATCHDOG_PID");
    setenv("WATCHDOG_USEC", "not-a-number", 1);
    ck_assert_uint_eq(notify_watchdog_usec(), 0);
}
END_TEST

/* One writer's life as seen by the timer that pings: (progress counter,
 * work waiting) at each tick, and whether a ping is earned. */
static const struct tick {
    unsigned long long progress;
    int busy;
    int due;
} ticks[] = {
    { 0, 0, 1 },  /* start, idle */
    { 0, 0, 1 },  /* still idle: healthy */
    { 0, 1, 0 },  /* work arrived, nothing committed since last tick */
    { 5, 1, 1 },  /* committing */
    { 9, 1, 1 },  /* committing */
    { 9, 1, 0 },  /* stuck disk: work waits, no progress */
    { 9, 1, 0 },  /* still stuck: systemd will act */
    { 10, 1, 1 }, /* recovered */
    { 10, 0, 1 }, /* drained, idle */
};

START_TEST(test_notify_watchdog_gate_follows_progress)
{
    struct notify_watchdog w;
    size_t i;

    notify_watchdog_init(&w);
    for (i = 0; i < sizeof(ticks) / sizeof(ticks[0]); i++)
        ck_assert_msg(notify_watchdog_due(&w, ticks[i].progress,
                                          ticks[i].busy) == ticks[i].due,
                      "tick %zu", i);

    /* The first tick has nothing to compare with: busy or not, it pings. */
    notify_watchdog_init(&w);
    ck_assert_int_eq(notify_watchdog_due(&w, 42, 1), 1);
    ck_assert_int_eq(notify_watchdog_due(&w, 42, 1), 0);
}
END_TEST

/* ---- Socket activation by hand. ---- */

static int
listen_unix(const char *path, int type)
{
    struct sockaddr_un sa;
    int fd = socket(AF_UNIX, type, 0);

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa.sun_path))
        return -1;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    unlink(path);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        return -1;
    if (type == SOCK_STREAM && listen(fd, 4) < 0)
        return -1;
    return fd;
}

static int
listen_tcp(int do_listen, unsigned short *port)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        return -1;
    if (do_listen && listen(fd, 4) < 0)
        return -1;
    if (port != NULL) {
        getsockname(fd, (struct sockaddr *)&sa, &len);
        *port = ntohs(sa.sin_port);
    }
    return fd;
}

enum act_case {
    A_UNIX_AND_TCP,
    A_NONE,
    A_OTHER_PID,
    A_DATAGRAM,
    A_UNLISTENED_TCP,
    A_TOO_MANY,
    A_COUNT
};

static const char *const act_want[A_COUNT] = {
    [A_UNIX_AND_TCP] = "rc=0 n=2 3:unix:ingest 4:tcp:remote env=gone",
    [A_NONE] = "rc=0 n=0 env=gone",
    [A_OTHER_PID] = "rc=0 n=0 env=gone",
    [A_DATAGRAM] = "rc=-1 n=0 inherited fd 4 (remote) is not a listening Unix "
                   "or TCP stream socket; closed=1",
    [A_UNLISTENED_TCP] = "rc=-1 n=0 inherited fd 4 (remote) is not a listening "
                         "Unix or TCP stream socket; closed=1",
    [A_TOO_MANY] = "rc=-1 n=0 systemd passed 2 sockets, at most 1 are "
                   "supported; closed=1",
};

/* Runs in the forked child: sets up fds 3 and 4 and LISTEN_*, calls
 * notify_listen_fds, and describes what it saw on out. */
static void
activation_child(int which, FILE *out, const char *dir)
{
    struct notify_fd fds[NOTIFY_FDS_MAX];
    char err[NOTIFY_ERR_MAX] = "", path[256], pid[32];
    size_t n = 99, i, max = NOTIFY_FDS_MAX;
    int a, b, rc;

    snprintf(path, sizeof(path), "%s/check_notify_act_%ld.sock", dir,
             (long)getpid());
    a = listen_unix(path, SOCK_STREAM);
    if (which == A_DATAGRAM) {
        char dpath[300];

        snprintf(dpath, sizeof(dpath), "%s.dgram", path);
        b = listen_unix(dpath, SOCK_DGRAM);
        unlink(dpath);
    } else {
        b = listen_tcp(which != A_UNLISTENED_TCP, NULL);
    }
    unlink(path);
    if (a < 0 || b < 0) {
        fprintf(out, "setup failed: %s", strerror(errno));
        return;
    }
    /* Move them out of the way first: socket() may have returned 3 or 4. */
    a = fcntl(a, F_DUPFD, 100);
    b = fcntl(b, F_DUPFD, 100);
    if (dup2(a, 3) != 3 || dup2(b, 4) != 4) {
        fprintf(out, "dup2 failed");
        return;
    }
    close(a);
    close(b);
    snprintf(pid, sizeof(pid), "%ld",
             (long)getpid() + (which == A_OTHER_PID ? 1 : 0));
    if (which != A_NONE) {
        setenv("LISTEN_PID", pid, 1);
        setenv("LISTEN_FDS", "2", 1);
        setenv("LISTEN_FDNAMES", "ingest:remote", 1);
    }
    if (which == A_TOO_MANY)
        max = 1;
    rc = notify_listen_fds(fds, max, &n, err);
    fprintf(out, "rc=%d n=%zu", rc, n);
    for (i = 0; rc == 0 && i < n; i++)
        fprintf(out, " %d:%s:%s", fds[i].fd,
                fds[i].kind == NOTIFY_FD_UNIX  ? "unix"
                : fds[i].kind == NOTIFY_FD_TCP ? "tcp"
                                               : "?",
                fds[i].name);
    if (rc == 0)
        fprintf(out, " env=%s",
                getenv("LISTEN_FDS") == NULL && getenv("LISTEN_PID") == NULL
                    ? "gone"
                    : "kept");
    else
        fprintf(out, " %s; closed=%d", err,
                fcntl(3, F_GETFD) < 0 && fcntl(4, F_GETFD) < 0);
}

START_TEST(test_notify_listen_fds_by_hand)
{
    char buf[512];
    int pfd[2], status;
    ssize_t n;
    pid_t child;

    ck_assert_int_eq(pipe(pfd), 0);
    child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        FILE *out;
        int w = fcntl(pfd[1], F_DUPFD, 200);

        close(pfd[0]);
        close(pfd[1]);
        out = fdopen(w, "w");
        if (out == NULL)
            _exit(2);
        activation_child(_i, out, TEST_BINARY_DIR);
        fclose(out);
        _exit(0);
    }
    close(pfd[1]);
    n = read(pfd[0], buf, sizeof(buf) - 1);
    ck_assert_int_ge(n, 0);
    buf[n] = '\0';
    close(pfd[0]);
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_str_eq(buf, act_want[_i]);
}
END_TEST

/* ---- Socket activation through systemd-socket-activate. ---- */

/*
 * The program systemd-socket-activate starts: takes the inherited sockets,
 * answers one connection on each with what it saw, and exits.
 */
static int
activated_main(void)
{
    struct notify_fd fds[NOTIFY_FDS_MAX];
    char err[NOTIFY_ERR_MAX] = "", line[256];
    size_t n = 0, i;
    int len;

    if (notify_listen_fds(fds, NOTIFY_FDS_MAX, &n, err) < 0) {
        fprintf(stderr, "activated: %s\n", err);
        return 1;
    }
    for (i = 0; i < n; i++) {
        int c = accept(fds[i].fd, NULL, NULL);

        if (c < 0)
            return 1;
        len = snprintf(
            line, sizeof(line), "fd=%d kind=%s name=%s n=%zu\n", fds[i].fd,
            fds[i].kind == NOTIFY_FD_UNIX ? "unix" : "tcp", fds[i].name, n);
        if (write(c, line, (size_t)len) != len)
            return 1;
        close(c);
    }
    return n == 2 ? 0 : 1;
}

static int
connect_retry(int family, const char *path, unsigned short port)
{
    int i;

    /* systemd-socket-activate binds right after it starts; give it up to
     * ten seconds on a loaded machine. */
    for (i = 0; i < 200; i++) {
        int fd = socket(family, SOCK_STREAM, 0);
        int rc;

        if (family == AF_UNIX) {
            struct sockaddr_un sa;

            memset(&sa, 0, sizeof(sa));
            sa.sun_family = AF_UNIX;
            if (strlen(path) >= sizeof(sa.sun_path))
                return -1;
            memcpy(sa.sun_path, path, strlen(path) + 1);
            rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
        } else {
            struct sockaddr_in sa;

            memset(&sa, 0, sizeof(sa));
            sa.sin_family = AF_INET;
            sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            sa.sin_port = htons(port);
            rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
        }
        if (rc == 0)
            return fd;
        close(fd);
        usleep(50000);
    }
    return -1;
}

static void
read_all(int fd, char *buf, size_t len)
{
    size_t have = 0;
    ssize_t n;

    while (have < len - 1 && (n = read(fd, buf + have, len - 1 - have)) > 0)
        have += (size_t)n;
    buf[have] = '\0';
}

START_TEST(test_notify_listen_fds_under_systemd_socket_activate)
{
    const char *tool = "/usr/bin/systemd-socket-activate";
    char self[512], sock[256], tcp[64], got[256], want[256];
    unsigned short port = 0;
    ssize_t len;
    int fd, probe, status;
    pid_t child;

    if (access(tool, X_OK) != 0)
        skip_now("%s not installed (Debian package systemd)", tool);
    len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    ck_assert_int_gt(len, 0);
    self[len] = '\0';
    snprintf(sock, sizeof(sock), "%s/check_notify_sa_%ld.sock", TEST_BINARY_DIR,
             (long)getpid());
    unlink(sock);
    /* A free port: bound here, released, then handed to the tool. */
    probe = listen_tcp(1, &port);
    ck_assert_int_ge(probe, 0);
    close(probe);
    snprintf(tcp, sizeof(tcp), "127.0.0.1:%u", port);

    child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        execl(tool, tool, "-l", sock, "-l", tcp, "--fdname=ingest:remote", self,
              "--activated", (char *)NULL);
        _exit(127);
    }
    fd = connect_retry(AF_UNIX, sock, 0);
    ck_assert_msg(fd >= 0, "cannot connect to %s", sock);
    read_all(fd, got, sizeof(got));
    close(fd);
    ck_assert_str_eq(got, "fd=3 kind=unix name=ingest n=2\n");

    fd = connect_retry(AF_INET, NULL, port);
    ck_assert_msg(fd >= 0, "cannot connect to %s", tcp);
    read_all(fd, got, sizeof(got));
    close(fd);
    snprintf(want, sizeof(want), "fd=4 kind=tcp name=remote n=2\n");
    ck_assert_str_eq(got, want);

    ck_assert_int_eq(waitpid(child, &status, 0), child);
    unlink(sock);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "activated program: status %d", status);
}
END_TEST

static Suite *
notify_suite(void)
{
    Suite *s = suite_create("notify");
    TCase *tc;

    tc = tcase_create("messages");
    tcase_add_loop_test(tc, test_notify_sends_each_message, 0, M_COUNT);
    tcase_add_test(tc, test_notify_sequence_in_order);
    suite_add_tcase(s, tc);

    tc = tcase_create("no_socket");
    tcase_add_loop_test(tc, test_notify_without_socket_is_a_no_op, 0, M_COUNT);
    suite_add_tcase(s, tc);

    tc = tcase_create("watchdog");
    tcase_add_test(tc, test_notify_watchdog_usec_from_environment);
    tcase_add_test(tc, test_notify_watchdog_gate_follows_progress);
    suite_add_tcase(s, tc);

    tc = tcase_create("listen_fds");
    tcase_add_loop_test(tc, test_notify_listen_fds_by_hand, 0, A_COUNT);
    suite_add_tcase(s, tc);

    tc = tcase_create("socket_activate");
    tcase_set_tags(tc, "socket_activate");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_notify_listen_fds_under_systemd_socket_activate);
    suite_add_tcase(s, tc);
    return s;
}

int
main(int argc, char **argv)
{
    SRunner *sr;
    int status;

    if (argc > 1 && strcmp(argv[1], "--activated") == 0)
        return activated_main();
    sr = srunner_create(notify_suite());
    srunner_run_all(sr, CK_NORMAL);
    status = skip_status(sr);
    srunner_free(sr);
    return status;
}
