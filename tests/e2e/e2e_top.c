/*
 * e2e_top.c: `receiptctl top` in a real pseudo-terminal (openpty) against
 * the real daemon: the view shows the daemon's figures and the fallback
 * rate per backend pair, q and Ctrl-C quit with the terminal restored
 * (the alternate screen left, the line discipline's modes as before), a
 * daemon that goes away ends it with an error after the restore, and
 * without a terminal it refuses to start.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/wait.h>

#include "e2e_util.h"
#include "skip.h"

#define T   5000
#define CTL TEST_BINARY_DIR "/client/receiptctl"

/* xterm's "leave the alternate screen" (rmcup), which endwin() sends. */
#define RMCUP "\033[?1049l"

static struct e2e_daemon d;

static void
setup(void)
{
    ck_assert_int_eq(e2e_start(&d, NULL), 0);
}

static void
teardown(void)
{
    e2e_stop_clean(&d);
}

struct top {
    pid_t pid;
    int master, slave;
    struct termios before;
    char *out; /* everything the program wrote, NUL-terminated */
    size_t len, cap;
};

static void
top_start(struct top *t)
{
    struct winsize ws = { .ws_row = 30, .ws_col = 100 };

    memset(t, 0, sizeof(*t));
    ck_assert_int_eq(openpty(&t->master, &t->slave, NULL, NULL, &ws), 0);
    ck_assert_int_eq(tcgetattr(t->slave, &t->before), 0);
    t->pid = fork();
    ck_assert_int_ge(t->pid, 0);
    if (t->pid == 0) {
        const char *argv[] = { "receiptctl", "top", NULL };

        setsid();
        ioctl(t->slave, TIOCSCTTY, 0);
        dup2(t->slave, 0);
        dup2(t->slave, 1);
        dup2(t->slave, 2);
        close(t->master);
        close(t->slave);
        setenv("TERM", "xterm", 1);
        setenv("RECEIPTD_SOCKET", d.sock, 1);
        execv(CTL, (char *const *)argv);
        _exit(127);
    }
    t->cap = 1 << 16;
    t->out = malloc(t->cap);
    ck_assert_ptr_nonnull(t->out);
    t->out[0] = '\0';
}

/* Reads what the program wrote for up to ms, or until want appears in it
 * (want NULL: the whole time, or until the terminal's other side is
 * gone). Returns 1 when want was seen. */
static int
top_read(struct top *t, const char *want, long ms)
{
    long deadline = e2e_now_ms() + ms;

    while (e2e_now_ms() < deadline) {
        struct pollfd p = { t->master, POLLIN, 0 };
        ssize_t n;

        if (want != NULL && strstr(t->out, want) != NULL)
            return 1;
        if (poll(&p, 1, 50) <= 0)
            continue;
        if (t->cap - t->len < 4096) {
            t->cap *= 2;
            t->out = realloc(t->out, t->cap);
            ck_assert_ptr_nonnull(t->out);
        }
        n = read(t->master, t->out + t->len, t->cap - t->len - 1);
        if (n <= 0)
            break; /* EIO: the program closed the terminal */
        t->len += (size_t)n;
        t->out[t->len] = '\0';
    }
    return want != NULL && strstr(t->out, want) != NULL;
}

/* Waits up to ms for the exit; the exit status, or -1 (then killed). */
static int
top_wait(struct top *t, long ms)
{
    long deadline = e2e_now_ms() + ms;
    int st;

    while (e2e_now_ms() < deadline) {
        if (waitpid(t->pid, &st, WNOHANG) == t->pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        top_read(t, NULL, 50);
    }
    kill(t->pid, SIGKILL);
    waitpid(t->pid, &st, 0);
    return -1;
}

/* The terminal is as it was: canonical input, echo and signals on. */
static void
top_check_restored(struct top *t)
{
    struct termios now;

    top_read(t, NULL, 100);
    ck_assert_msg(strstr(t->out, RMCUP) != NULL,
                  "the alternate screen was not left");
    ck_assert_int_eq(tcgetattr(t->slave, &now), 0);
    ck_assert_uint_eq(now.c_lflag & (ICANON | ECHO | ISIG),
                      t->before.c_lflag & (ICANON | ECHO | ISIG));
    ck_assert(now.c_lflag & ICANON);
    ck_assert(now.c_lflag & ECHO);
}

static void
top_free(struct top *t)
{
    close(t->master);
    close(t->slave);
    free(t->out);
}

static void
send_receipts(void)
{
    struct e2e_receipt fb = { .schema = 3,
                              .plan = "p",
                              .graph = "g",
                              .model = "m",
                              .requested = "cuda",
                              .executed = "cpu",
                              .coverage = 1 };
    struct e2e_receipt ok = fb;
    int fd = e2e_connect(&d), i;
    uint64_t seq = 1;

    ok.executed = "cuda";
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "node-top"), 0);
    for (i = 0; i < 4; i++)
        ck_assert_int_eq(e2e_send_receipt(fd, seq++, &fb), 0);
    for (i = 0; i < 12; i++)
        ck_assert_int_eq(e2e_send_receipt(fd, seq++, &ok), 0);
    close(fd);
}

/* The view shows the figures and, within two refreshes of the receipts,
 * cuda -> cpu at 100% and cuda -> cuda at 0%; q quits cleanly. */
START_TEST(test_top_shows_the_daemon_and_quits_on_q)
{
    struct top t;

    top_start(&t);
    ck_assert_msg(top_read(&t, "receipts/s", T), "no view:\n%s", t.out);
    ck_assert(top_read(&t, "(no receipts in the last minute)", T));
    send_receipts();
    ck_assert_msg(top_read(&t, "100.00%", T), "no fallback rate:\n%s", t.out);
    ck_assert(top_read(&t, "0.00%", T));
    ck_assert(top_read(&t, "store ok", T));
    ck_assert_msg(top_read(&t, "ack ms", T), "no ack latency:\n%s", t.out);
    {
        /* Every receipt's answer was timed. */
        int fd = e2e_connect(&d);

        ck_assert_int_ge(fd, 0);
        ck_assert_uint_ge(e2e_stat(fd, 1, "acks"), 16);
        close(fd);
    }
    ck_assert_int_eq(write(t.master, "q", 1), 1);
    ck_assert_int_eq(top_wait(&t, T), 0);
    top_check_restored(&t);
    top_free(&t);
}
END_TEST

/* Ctrl-C, as the terminal's line discipline sends it (SIGINT to the
 * foreground process group), quits cleanly too. */
START_TEST(test_top_quits_on_ctrl_c)
{
    struct top t;

    top_start(&t);
    ck_assert(top_read(&t, "receipts/s", T));
    ck_assert_int_eq(write(t.master, "\003", 1), 1);
    ck_assert_int_eq(top_wait(&t, T), 0);
    top_check_restored(&t);
    top_free(&t);
}
END_TEST

/* The daemon goes away: top ends with the connection's error, printed
 * after the terminal was restored. */
START_TEST(test_top_ends_when_the_daemon_stops)
{
    struct top t;
    char *rm;

    top_start(&t);
    ck_assert(top_read(&t, "receipts/s", T));
    e2e_stop_clean(&d);
    ck_assert_int_eq(top_wait(&t, T), 3);
    top_check_restored(&t);
    rm = strstr(t.out, RMCUP);
    ck_assert_ptr_nonnull(strstr(rm, "receiptctl: top: "));
    top_free(&t);
}
END_TEST

/* Without a terminal (a script, cron): refused, exit 2, nothing drawn. */
START_TEST(test_top_needs_a_terminal)
{
    const char *argv[] = { "receiptctl", "top", NULL };
    char *out = NULL, *err = NULL;

    ck_assert_int_eq(e2e_run(CTL, argv, NULL, d.sock, &out, &err), 2);
    ck_assert_ptr_nonnull(strstr(err, "needs a terminal"));
    ck_assert_str_eq(out, "");
    free(out);
    free(err);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("e2e_top");
    TCase *tc = tcase_create("pty");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_top_shows_the_daemon_and_quits_on_q);
    tcase_add_test(tc, test_top_quits_on_ctrl_c);
    tcase_add_test(tc, test_top_ends_when_the_daemon_stops);
    tcase_add_test(tc, test_top_needs_a_terminal);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(suite());
    int status;

    srunner_run_all(sr, CK_NORMAL);
    status = skip_status(sr);
    srunner_free(sr);
    return status;
}
