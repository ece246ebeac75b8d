/*
 * e2e_follow.c: `receipts` after an id and `receipts --follow` against the
 * real daemon (docs/protocol.md "Following new receipts"): rows pushed in
 * id order with filters, both by hand on the wire and through receiptctl
 * (JSON lines, Ctrl-C); after_id pages forward across chunks and
 * postings; a follower that reads nothing is cut off with the reason while
 * ingest keeps its pace; followers resume across a daemon restart with
 * --after-id and miss nothing; and on a PostgreSQL store (tagged pg:
 * SKIP without PostgreSQL 15, a failure when RECEIPTD_CI is set), rows of
 * this instance and of another instance on the same database.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e_util.h"
#include "op.h"
#include "pg_cluster.h"
#include "skip.h"

#define T   10000
#define CTL TEST_BINARY_DIR "/client/receiptctl"

static struct e2e_daemon d;

static void
teardown(void)
{
    e2e_stop_clean(&d);
}

static const struct e2e_receipt rec_cpu = {
    .schema = 3,
    .plan = "plan-a",
    .graph = "g",
    .model = "m",
    .requested = "cuda",
    .executed = "cpu",
    .coverage = 0x41,
    .decode_steps = 12,
    .fallback_count = 1,
};

static const struct e2e_receipt rec_cuda = {
    .schema = 3,
    .plan = "plan-b",
    .graph = "g",
    .model = "m",
    .requested = "cuda",
    .executed = "cuda",
    .coverage = 0x41,
    .decode_steps = 7,
    .fallback_count = 0,
};

/* Receipt i of a stream: every third runs on cuda, the others fell back
 * to the cpu. */
static const struct e2e_receipt *
nth(uint64_t i)
{
    return i % 3 == 0 ? &rec_cuda : &rec_cpu;
}

/* Sends receipts [from, to) of the stream as batches of n, each with a
 * seq, and checks every reply. */
static void
send_stream(int fd, uint64_t from, uint64_t to, unsigned n)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct e2e_reply rep;
    uint64_t i, sent = 0, got = 0;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (i = from; i < to; i += n) {
        uint64_t j, end = i + n < to ? i + n : to;

        sb.size = 0;
        msgpack_pack_array(&pk, (uint32_t)(end - i));
        for (j = i; j < end; j++)
            ck_assert_int_eq(e2e_pack_receipt(&pk, nth(j)), 0);
        ck_assert_int_eq(
            e2e_request(fd, PROTO_OP_RECEIPTS, i, 1, i, sb.data, sb.size), 0);
        sent++;
        /* At most four batches in flight. */
        while (sent - got > 4) {
            ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
            ck_assert_msg(rep.r.ok, "%s", rep.r.err.message);
            e2e_reply_free(&rep);
            got++;
        }
    }
    while (got < sent) {
        ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
        ck_assert_msg(rep.r.ok, "%s", rep.r.err.message);
        e2e_reply_free(&rep);
        got++;
    }
    msgpack_sbuffer_destroy(&sb);
}

/* A producer connection with its hello. */
static int
producer(const char *source)
{
    int fd = e2e_connect(&d);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, source), 0);
    return fd;
}

/* Sends a `receipts` query: follow when asked, after_id when has_after,
 * executed when not NULL, limit when not 0. */
static void
send_query(int fd, uint64_t id, int follow, int has_after, uint64_t after,
           const char *executed, uint32_t limit)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1 + (follow != 0) + (has_after != 0) +
                              (executed != NULL) + (limit != 0));
    envelope_pack_cstr(&pk, "kind");
    envelope_pack_cstr(&pk, "receipts");
    if (follow) {
        envelope_pack_cstr(&pk, "follow");
        msgpack_pack_true(&pk);
    }
    if (has_after) {
        envelope_pack_cstr(&pk, "after_id");
        msgpack_pack_uint64(&pk, after);
    }
    if (executed != NULL) {
        envelope_pack_cstr(&pk, "executed");
        envelope_pack_cstr(&pk, executed);
    }
    if (limit != 0) {
        envelope_pack_cstr(&pk, "limit");
        msgpack_pack_uint32(&pk, limit);
    }
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_QUERY, id, 0, 0, sb.data, sb.size), 0);
    msgpack_sbuffer_destroy(&sb);
}

/* The rows of an ok reply. */
static const msgpack_object *
rows_of(const struct e2e_reply *rep)
{
    const msgpack_object *rows;

    ck_assert_msg(rep->r.ok, "%s: %s", rep->r.err.path, rep->r.err.message);
    rows = e2e_get(rep->r.result, "rows");
    ck_assert_ptr_nonnull(rows);
    ck_assert_int_eq(rows->type, MSGPACK_OBJECT_ARRAY);
    return rows;
}

/* Reads follow frames of request id until n rows came, checking that ids
 * rise, every row matches executed (when not NULL) and last_id is the
 * cursor; *last gets the last id. */
static void
read_follow(int fd, uint64_t id, uint64_t n, const char *executed,
            uint64_t *last)
{
    struct e2e_reply rep;
    uint64_t got = 0, prev = *last;
    uint32_t i;

    while (got < n) {
        const msgpack_object *rows;

        ck_assert_msg(e2e_recv(fd, T, &rep) == 0,
                      "no follow frame after %" PRIu64 " of %" PRIu64 " rows",
                      got, n);
        ck_assert_uint_eq(rep.r.id, id);
        rows = rows_of(&rep);
        for (i = 0; i < rows->via.array.size; i++) {
            const msgpack_object *row = &rows->via.array.ptr[i];
            uint64_t rid = e2e_get_uint(row, "receipt_id");

            ck_assert_uint_gt(rid, prev);
            prev = rid;
            if (executed != NULL)
                ck_assert(e2e_get_str_eq(row, "executed_backend", executed));
            got++;
        }
        ck_assert_uint_ge(e2e_get_uint(rep.r.result, "last_id"), prev);
        e2e_reply_free(&rep);
    }
    ck_assert_uint_eq(got, n);
    *last = prev;
}

/* ---- receiptctl in the background ---- */

struct ctl {
    pid_t pid;
    int out; /* its stdout, a pipe */
    int err; /* its stderr, a memfd */
    char buf[1 << 16];
    size_t len;
};

static void
ctl_start(struct ctl *c, const char *const *args)
{
    const char *argv[24];
    int p[2], i;

    argv[0] = "receiptctl";
    argv[1] = "--socket";
    argv[2] = d.sock;
    for (i = 0; args[i] != NULL; i++)
        argv[3 + i] = args[i];
    argv[3 + i] = NULL;
    memset(c, 0, sizeof(*c));
    ck_assert_int_eq(pipe(p), 0);
    c->err = memfd_create("ctl-err", 0);
    ck_assert_int_ge(c->err, 0);
    c->pid = fork();
    ck_assert_int_ge(c->pid, 0);
    if (c->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(p[1], STDOUT_FILENO);
        dup2(c->err, STDERR_FILENO);
        close(p[0]);
        execv(CTL, (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    c->out = p[0];
}

/* The next line of its stdout (NUL-terminated in c->buf's copy line),
 * within timeout_ms; 0 or -1. */
static int
ctl_line(struct ctl *c, char *line, size_t cap, int timeout_ms)
{
    long until = e2e_now_ms() + timeout_ms;

    for (;;) {
        char *nl = memchr(c->buf, '\n', c->len);
        struct pollfd pf = { .fd = c->out, .events = POLLIN };
        ssize_t n;

        if (nl != NULL) {
            size_t l = (size_t)(nl - c->buf);

            snprintf(line, cap, "%.*s", (int)l, c->buf);
            memmove(c->buf, nl + 1, c->len - l - 1);
            c->len -= l + 1;
            return 0;
        }
        if (e2e_now_ms() >= until || c->len == sizeof(c->buf))
            return -1;
        if (poll(&pf, 1, (int)(until - e2e_now_ms())) <= 0)
            continue;
        n = read(c->out, c->buf + c->len, sizeof(c->buf) - c->len);
        if (n <= 0)
            return -1;
        c->len += (size_t)n;
    }
}

/* Waits for the exit (sending sig first when not 0); its status, and its
 * stderr into err. */
static int
ctl_wait(struct ctl *c, int sig, char *err, size_t cap)
{
    long until = e2e_now_ms() + T;
    int st = 0;
    ssize_t n;

    if (sig != 0)
        kill(c->pid, sig);
    while (waitpid(c->pid, &st, WNOHANG) == 0) {
        ck_assert_msg(e2e_now_ms() < until, "receiptctl did not exit");
        usleep(10000);
    }
    n = pread(c->err, err, cap - 1, 0);
    err[n > 0 ? n : 0] = '\0';
    close(c->out);
    close(c->err);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The number after key in a JSON line ("receipt_id":N), or UINT64_MAX. */
static uint64_t
json_uint(const char *line, const char *key)
{
    char pat[64];
    const char *p;

    snprintf(pat, sizeof(pat), "\"%s\":", key);
    p = strstr(line, pat);
    return p ? strtoull(p + strlen(pat), NULL, 10) : UINT64_MAX;
}

/* ---- the cases ---- */

START_TEST(test_follow_in_order_with_filters)
{
    const char *args[] = { "receipts", "--follow", "--executed", "cpu",
                           "--format", "json",     NULL };
    struct e2e_reply rep;
    struct ctl ctl;
    char line[8192], err[1024];
    uint64_t last = 0, prev = 0, i, n = 3000, cpu = 0;
    int fol, pro, rc;

    /* Small chunks: the rows a follow reads move from the tail into
     * chunks between its pages. */
    const char *extra[] = { "--chunk-receipts", "100", NULL };

    ck_assert_int_eq(e2e_start(&d, extra), 0);
    pro = producer("p1");
    /* Written before the follows began: not theirs. */
    send_stream(pro, 0, 30, 10);
    fol = e2e_connect(&d);
    ck_assert_int_ge(fol, 0);
    send_query(fol, 7, 1, 0, 0, "cpu", 0);
    ck_assert_int_eq(e2e_recv(fol, T, &rep), 0);
    ck_assert_uint_eq(rows_of(&rep)->via.array.size, 0);
    last = e2e_get_uint(rep.r.result, "last_id");
    ck_assert_uint_eq(last, 30);
    e2e_reply_free(&rep);
    ctl_start(&ctl, args);
    /* receiptctl has its first reply once stats counts two followers. */
    for (i = 0; i < 500 && e2e_stat(pro, 900 + i, "followers") != 2; i++)
        usleep(10000);
    ck_assert_uint_eq(e2e_stat(pro, 1, "followers"), 2);

    send_stream(pro, 30, 30 + n, 100);
    for (i = 30; i < 30 + n; i++)
        cpu += nth(i) == &rec_cpu;
    read_follow(fol, 7, cpu, "cpu", &last);
    ck_assert_uint_le(last, 30 + n);
    /* The same rows through receiptctl, as JSON lines. */
    for (i = 0; i < cpu; i++) {
        uint64_t id;

        ck_assert_msg(ctl_line(&ctl, line, sizeof(line), T) == 0,
                      "receiptctl printed %" PRIu64 " of %" PRIu64 " lines", i,
                      cpu);
        id = json_uint(line, "receipt_id");
        ck_assert_uint_gt(id, prev);
        ck_assert_uint_gt(id, 30);
        ck_assert_ptr_nonnull(strstr(line, "\"executed_backend\":\"cpu\""));
        prev = id;
    }
    ck_assert_uint_eq(prev, last);
    /* How long a receipt takes from its acknowledgement to the follower
     * (reported, not asserted: a figure of this machine). */
    {
        long t0, worst = 0, sum = 0;

        for (i = 0; i < 20; i++) {
            uint64_t at = 30 + n + i * 3 + 1; /* a cpu receipt */

            send_stream(pro, at, at + 1, 1);
            t0 = e2e_now_ms();
            read_follow(fol, 7, 1, "cpu", &last);
            ck_assert_uint_eq(last, 30 + n + 1 + i);
            sum += e2e_now_ms() - t0;
            worst = e2e_now_ms() - t0 > worst ? e2e_now_ms() - t0 : worst;
        }
        fprintf(stderr,
                "e2e_follow: acknowledged to pushed: mean %.1f ms, worst %ld "
                "ms over 20 receipts\n",
                (double)sum / 20.0, worst);
    }
    /* Ctrl-C ends it cleanly. */
    rc = ctl_wait(&ctl, SIGINT, err, sizeof(err));
    ck_assert_msg(rc == 0, "receiptctl exited %d: %s", rc, err);
    ck_assert_uint_eq(e2e_stat(pro, 2, "followers_total"), 2);
    close(fol);
    close(pro);
}
END_TEST

START_TEST(test_after_id_pages_forward)
{
    const char *extra[] = { "--chunk-receipts", "64", NULL };
    const char *ctl_args[] = { "receiptctl", "--socket", NULL,       "receipts",
                               "--after-id", "100",      "--limit",  "3",
                               "--executed", "cuda",     "--format", "jsonl",
                               NULL };
    struct e2e_reply rep;
    const msgpack_object *rows;
    char *out = NULL, *err = NULL, *p;
    uint64_t after, want, id, n;
    uint32_t i;
    int fd, pro, rc, k;

    ck_assert_int_eq(e2e_start(&d, extra), 0);
    pro = producer("p1");
    /* ids 1..1000, over many chunks and their postings, and a tail. */
    send_stream(pro, 0, 1000, 100);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    /* Every id above 100, oldest first, a page at a time. */
    for (after = 100, k = 0; after < 1000; k++) {
        send_query(fd, 10 + (uint64_t)k, 0, 1, after, NULL, 128);
        ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
        rows = rows_of(&rep);
        n = 1000 - after < 128 ? 1000 - after : 128;
        ck_assert_uint_eq(rows->via.array.size, n);
        for (i = 0; i < rows->via.array.size; i++)
            ck_assert_uint_eq(
                e2e_get_uint(&rows->via.array.ptr[i], "receipt_id"),
                after + 1 + i);
        ck_assert(e2e_get(rep.r.result, "truncated")->via.boolean ==
                  (after + 128 < 1000));
        after += n;
        e2e_reply_free(&rep);
    }
    /* With a key filter (the postings of each chunk, oldest first). */
    for (after = 0, want = 0, k = 0; after < 1000; k++) {
        send_query(fd, 100 + (uint64_t)k, 0, 1, after, "cuda", 50);
        ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
        rows = rows_of(&rep);
        for (i = 0; i < rows->via.array.size; i++) {
            id = e2e_get_uint(&rows->via.array.ptr[i], "receipt_id");
            /* Receipt i of the stream (0-based) is id i + 1. */
            ck_assert_uint_eq(id, want + 1);
            ck_assert(e2e_get_str_eq(&rows->via.array.ptr[i],
                                     "executed_backend", "cuda"));
            want += 3;
            after = id;
        }
        if (!e2e_get(rep.r.result, "truncated")->via.boolean)
            after = 1000;
        e2e_reply_free(&rep);
    }
    ck_assert_uint_eq(want, 1002);
    /* receiptctl: the same, and the way on. */
    ctl_args[2] = d.sock;
    rc = e2e_run(CTL, ctl_args, NULL, NULL, &out, &err);
    ck_assert_msg(rc == 0, "%d: %s", rc, err);
    for (p = out, want = 103; *p != '\0'; p = strchr(p, '\n') + 1, want += 3)
        ck_assert_uint_eq(json_uint(p, "receipt_id"), want);
    ck_assert_uint_eq(want, 112);
    ck_assert_msg(strstr(err, "--after-id 109") != NULL, "%s", err);
    free(out);
    free(err);
    close(fd);
    close(pro);
}
END_TEST

/* Ingest of n receipts in batches of 500: its duration in ms. */
static long
timed_ingest(int pro, uint64_t from, uint64_t n)
{
    long t0 = e2e_now_ms();

    send_stream(pro, from, from + n, 500);
    return e2e_now_ms() - t0;
}

START_TEST(test_slow_follower_cut_off)
{
    const char *extra[] = { "--max-unsent-bytes", "64KiB", NULL };
    struct e2e_reply rep;
    uint64_t last = 0, n = 40000, rows = 0;
    long base_ms, slow_ms;
    int fol, pro, rcvbuf = 4096, ended = 0;

    ck_assert_int_eq(e2e_start(&d, extra), 0);
    pro = producer("p1");
    /* The pace without a follower, in this run. */
    base_ms = timed_ingest(pro, 0, n);
    fol = e2e_connect(&d);
    ck_assert_int_ge(fol, 0);
    setsockopt(fol, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    send_query(fol, 5, 1, 0, 0, NULL, 0);
    ck_assert_int_eq(e2e_recv(fol, T, &rep), 0);
    last = e2e_get_uint(rep.r.result, "last_id");
    ck_assert_uint_eq(last, n);
    e2e_reply_free(&rep);
    /* The follower reads nothing now: ingest keeps its pace. */
    slow_ms = timed_ingest(pro, n, n);
    fprintf(stderr,
            "e2e_follow: %" PRIu64 " receipts in %ld ms without a follower, "
            "%ld ms with one that reads nothing (ratio %.2f)\n",
            n, base_ms, slow_ms, (double)slow_ms / (double)(base_ms + 1));
    ck_assert_msg(slow_ms < 3 * base_ms + 2000,
                  "ingest slowed from %ld to %ld ms", base_ms, slow_ms);
    ck_assert_uint_eq(e2e_stat(pro, 1, "followers_cut_off"), 1);
    ck_assert_uint_eq(e2e_stat(pro, 2, "followers"), 0);
    ck_assert_uint_eq(e2e_stat(pro, 3, "accepted"), 2 * n);
    /* Now it reads: the rows it was sent, in order, then why it ends. */
    while (!ended) {
        ck_assert_int_eq(e2e_recv(fol, T, &rep), 0);
        ck_assert_uint_eq(rep.r.id, 5);
        if (!rep.r.ok) {
            ck_assert_int_eq(rep.r.err.code, PROTO_EOVERLOADED);
            ck_assert_str_eq(rep.r.err.path, "follow");
            ck_assert_ptr_nonnull(strstr(rep.r.err.message, "too slowly"));
            ck_assert_ptr_nonnull(strstr(rep.r.err.message, "after_id"));
            ended = 1;
        } else {
            const msgpack_object *r = rows_of(&rep);
            uint32_t i;

            for (i = 0; i < r->via.array.size; i++, rows++) {
                uint64_t id = e2e_get_uint(&r->via.array.ptr[i], "receipt_id");
                ck_assert_uint_eq(id, last + 1);
                last = id;
            }
        }
        e2e_reply_free(&rep);
    }
    ck_assert_uint_gt(rows, 0);
    ck_assert_uint_lt(rows, n);
    ck_assert_int_eq(e2e_wait_closed(fol, T), 1);
    close(fol);
    close(pro);
}
END_TEST

/* The "--after-id N" receiptctl's last line of stderr names. */
static uint64_t
resume_id(const char *err)
{
    const char *p = strstr(err, "--after-id ");

    ck_assert_msg(p != NULL, "no resume hint in: %s", err);
    return strtoull(p + strlen("--after-id "), NULL, 10);
}

START_TEST(test_follow_resumes_across_restart)
{
    const char *args1[] = { "receipts", "--follow", "--format", "jsonl", NULL };
    char after[32], line[8192], err[1024];
    const char *args2[] = { "receipts", "--follow", "--after-id", after,
                            "--format", "jsonl",    NULL };
    static unsigned char seen[400];
    struct ctl ctl;
    uint64_t i, id, prev = 0, resume, got = 0;
    int pro, rc;

    memset(seen, 0, sizeof(seen));
    ck_assert_int_eq(e2e_start(&d, NULL), 0);
    pro = producer("p1");
    ctl_start(&ctl, args1);
    for (i = 0; i < 500 && e2e_stat(pro, 900 + i, "followers") != 1; i++)
        usleep(10000);
    send_stream(pro, 0, 100, 10);
    for (i = 0; i < 100; i++, got++) {
        ck_assert_int_eq(ctl_line(&ctl, line, sizeof(line), T), 0);
        id = json_uint(line, "receipt_id");
        ck_assert_uint_gt(id, prev);
        ck_assert_uint_lt(id, sizeof(seen));
        seen[id]++;
        prev = id;
    }
    close(pro);
    /* The daemon stops: receiptctl says why and where to resume. */
    ck_assert_int_eq(e2e_stop(&d, SIGTERM, T, NULL), 0);
    rc = ctl_wait(&ctl, 0, err, sizeof(err));
    ck_assert_msg(rc == 1, "receiptctl exited %d: %s", rc, err);
    ck_assert_ptr_nonnull(strstr(err, "stopping"));
    resume = resume_id(err);
    ck_assert_uint_eq(resume, prev);

    /* Back, with receipts written before the follower returns. */
    ck_assert_int_eq(e2e_restart(&d, NULL), 0);
    pro = producer("p1");
    send_stream(pro, 100, 150, 10);
    snprintf(after, sizeof(after), "%" PRIu64, resume);
    ctl_start(&ctl, args2);
    send_stream(pro, 150, 200, 10);
    for (i = 0; i < 100; i++, got++) {
        ck_assert_msg(ctl_line(&ctl, line, sizeof(line), T) == 0,
                      "line %" PRIu64 " of the second follow", i);
        id = json_uint(line, "receipt_id");
        ck_assert_uint_gt(id, prev);
        ck_assert_uint_lt(id, sizeof(seen));
        seen[id]++;
        prev = id;
    }
    rc = ctl_wait(&ctl, SIGTERM, err, sizeof(err));
    ck_assert_msg(rc == 0, "receiptctl exited %d: %s", rc, err);
    /* Every receipt once, none twice, none missed. */
    for (i = 1; i <= 200; i++)
        ck_assert_msg(seen[i] == 1, "receipt %" PRIu64 " seen %d times", i,
                      seen[i]);
    ck_assert_uint_eq(got, 200);
    close(pro);
}
END_TEST

/*
 * A SIGTERM that comes after receiptctl checked its stop flag and before it
 * waits for the next page (lib/signal_before_wait_preload.c raises it just
 * then) still ends the follow, with 0. Before the handler woke the wait
 * through a pipe, receiptctl went on waiting for a page that never came:
 * CI once saw test_follow_resumes_across_restart's SIGTERM land there.
 */
START_TEST(test_follow_stops_on_a_signal_before_its_wait)
{
    const char *args[] = { "receipts", "--follow", "--format", "jsonl", NULL };
    char err[1024];
    struct ctl ctl;
    int rc;

    ck_assert_int_eq(e2e_start(&d, NULL), 0);
    e2e_preload("signal_before_wait_preload", NULL);
    setenv("RECEIPTD_TEST_SIGNAL_BEFORE_WAIT", "1", 1);
    ctl_start(&ctl, args);
    e2e_preload_end();
    unsetenv("RECEIPTD_TEST_SIGNAL_BEFORE_WAIT");
    rc = ctl_wait(&ctl, 0, err, sizeof(err));
    ck_assert_msg(rc == 0, "receiptctl exited %d: %s", rc, err);
}
END_TEST

START_TEST(test_follow_limit_and_refusals)
{
    const char *extra[] = { "--max-followers", "1", NULL };
    struct e2e_reply rep;
    int a, b;

    ck_assert_int_eq(e2e_start(&d, extra), 0);
    a = e2e_connect(&d);
    b = e2e_connect(&d);
    ck_assert_int_ge(a, 0);
    ck_assert_int_ge(b, 0);
    send_query(a, 1, 1, 0, 0, NULL, 0);
    ck_assert_int_eq(e2e_recv(a, T, &rep), 0);
    ck_assert(rep.r.ok);
    e2e_reply_free(&rep);
    /* Over limits.max_followers: refused, and said so. */
    send_query(b, 2, 1, 0, 0, NULL, 0);
    ck_assert_int_eq(e2e_recv(b, T, &rep), 0);
    ck_assert(!rep.r.ok);
    ck_assert_int_eq(rep.r.err.code, PROTO_EOVERLOADED);
    ck_assert_ptr_nonnull(strstr(rep.r.err.message, "max_followers"));
    e2e_reply_free(&rep);
    /* A second follow on a following connection. */
    send_query(a, 3, 1, 0, 0, NULL, 0);
    ck_assert_int_eq(e2e_recv(a, T, &rep), 0);
    ck_assert(!rep.r.ok);
    ck_assert_str_eq(rep.r.err.path, "follow");
    e2e_reply_free(&rep);
    /* The follower leaves: its place is free again. */
    close(a);
    usleep(200000);
    send_query(b, 4, 1, 0, 0, NULL, 0);
    ck_assert_int_eq(e2e_recv(b, T, &rep), 0);
    ck_assert_msg(rep.r.ok, "%s", rep.r.err.message);
    e2e_reply_free(&rep);
    close(b);
}
END_TEST

START_TEST(test_followers_leave_under_load)
{
    struct e2e_reply rep;
    int fol[8], pro, k, j;
    uint64_t seq = 0;

    ck_assert_int_eq(e2e_start(&d, NULL), 0);
    pro = producer("p1");
    /* Followers that leave at every moment: before their first reply,
     * while a page is read for them, with pages unread. */
    for (k = 0; k < 30; k++) {
        for (j = 0; j < 8; j++) {
            fol[j] = e2e_connect(&d);
            ck_assert_int_ge(fol[j], 0);
            send_query(fol[j], 1, 1, j % 2, 0, NULL, 50);
        }
        if (k % 3 == 0) {
            ck_assert_int_eq(e2e_recv(fol[k % 8], T, &rep), 0);
            e2e_reply_free(&rep);
        }
        send_stream(pro, seq, seq + 200, 100);
        seq += 200;
        for (j = 0; j < 8; j++)
            close(fol[j]);
    }
    for (k = 0; k < 200 && e2e_stat(pro, 1000 + (uint64_t)k, "followers") != 0;
         k++)
        usleep(10000);
    ck_assert_uint_eq(e2e_stat(pro, 1, "followers"), 0);
    ck_assert_uint_eq(e2e_stat(pro, 2, "followers_total"), 240);
    ck_assert_uint_eq(e2e_stat(pro, 3, "accepted"), seq);
    close(pro);
}
END_TEST

/* ---- PostgreSQL ---- */

static struct pg_scratch pg;
static char pg_db[700];

static void
cluster_up(void)
{
    pg_scratch_up(&pg, "e2e-follow-pg");
}

static void
cluster_down(void)
{
    pg_scratch_down(&pg);
}

START_TEST(test_follow_on_postgresql)
{
    const char *extra[3] = { "--pg", pg_db, NULL };
    struct e2e_daemon d2;
    struct e2e_reply rep;
    char name[32];
    uint64_t last, i, cpu = 0, t0;
    int fol, pro, pro2;

    snprintf(name, sizeof(name), "follow_%ld", (long)getpid());
    pg_cluster_database(pg.conninfo, name, pg_db, sizeof(pg_db));
    ck_assert_int_eq(e2e_start(&d, extra), 0);
    pro = producer("p1");
    send_stream(pro, 0, 20, 10);
    /* From the start: the backlog first, then new rows as committed. */
    fol = e2e_connect(&d);
    ck_assert_int_ge(fol, 0);
    send_query(fol, 9, 1, 1, 0, "cpu", 4);
    ck_assert_int_eq(e2e_recv(fol, T, &rep), 0);
    ck_assert_uint_eq(rows_of(&rep)->via.array.size, 4);
    ck_assert(e2e_get(rep.r.result, "truncated")->via.boolean);
    e2e_reply_free(&rep);
    for (i = 0; i < 20; i++)
        cpu += nth(i) == &rec_cpu;
    last = 0;
    read_follow(fol, 9, cpu - 4, "cpu", &last);
    send_stream(pro, 20, 320, 50);
    for (i = 20, cpu = 0; i < 320; i++)
        cpu += nth(i) == &rec_cpu;
    read_follow(fol, 9, cpu, "cpu", &last);

    /* Another instance on the same database commits: this one's writer
     * never sees it, and the follower gets it within its look each
     * second. */
    memset(&d2, 0, sizeof(d2));
    ck_assert_int_eq(e2e_start(&d2, extra), 0);
    pro2 = e2e_connect(&d2);
    ck_assert_int_ge(pro2, 0);
    ck_assert_int_eq(e2e_hello(pro2, "p2"), 0);
    t0 = (uint64_t)e2e_now_ms();
    send_stream(pro2, 0, 30, 10);
    for (i = 0, cpu = 0; i < 30; i++)
        cpu += nth(i) == &rec_cpu;
    read_follow(fol, 9, cpu, "cpu", &last);
    ck_assert_uint_lt((uint64_t)e2e_now_ms() - t0, 5000);
    close(pro2);
    e2e_stop_clean(&d2);
    close(fol);
    close(pro);
}
END_TEST

/* Sends a `receipts` follow query with origin, after_id 0. */
static void
send_origin_follow(int fd, uint64_t id, const char *origin)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    envelope_pack_cstr(&pk, "kind");
    envelope_pack_cstr(&pk, "receipts");
    envelope_pack_cstr(&pk, "follow");
    msgpack_pack_true(&pk);
    envelope_pack_cstr(&pk, "after_id");
    msgpack_pack_uint64(&pk, 0);
    envelope_pack_cstr(&pk, "origin");
    envelope_pack_cstr(&pk, origin);
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_QUERY, id, 0, 0, sb.data, sb.size), 0);
    msgpack_sbuffer_destroy(&sb);
}

#define TOKEN "test"
#define TOKEN_HASH                                                             \
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

START_TEST(test_follow_relayed_at_a_postgresql_center)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char conf[300], tok[300], host[64], name[32];
    const char *cflags[] = { "--config", conf,  "--tcp", host,
                             "--pg",     pg_db, NULL };
    const char *nflags[] = {
        "--upstream", host, "--upstream-token-file", tok, "--upstream-name",
        "node-a",     NULL
    };
    struct e2e_daemon node;
    struct e2e_reply rep;
    uint64_t last = 0, own_last = 0;
    int port, fol, own, pro, cpro;

    snprintf(name, sizeof(name), "follow_relay_%ld", (long)getpid());
    pg_cluster_database(pg.conninfo, name, pg_db, sizeof(pg_db));
    snprintf(conf, sizeof(conf), "%s/e2e-follow-%d.conf", tmp, (int)getpid());
    snprintf(tok, sizeof(tok), "%s/e2e-follow-%d.token", tmp, (int)getpid());
    ck_assert_int_eq(e2e_write_file(tok, TOKEN "\n"), 0);
    ck_assert_int_eq(e2e_write_file(conf,
                                    "listen: { tcp_plaintext = true; };\n"
                                    "access: { tokens = ( { name = \"nodes\"; "
                                    "sha256 = \"" TOKEN_HASH "\"; } ); };\n"),
                     0);
    port = e2e_free_port();
    ck_assert_int_gt(port, 0);
    snprintf(host, sizeof(host), "127.0.0.1:%d", port);
    /* d is the center, on PostgreSQL; node relays to it. */
    ck_assert_int_eq(e2e_start(&d, cflags), 0);
    memset(&node, 0, sizeof(node));
    ck_assert_int_eq(e2e_start(&node, nflags), 0);
    /* One follower of the node's relayed receipts, one of the center's
     * own: relayed rows keep the node's ids, so each cursor is one
     * origin's. */
    fol = e2e_connect(&d);
    own = e2e_connect(&d);
    ck_assert_int_ge(fol, 0);
    ck_assert_int_ge(own, 0);
    send_origin_follow(fol, 3, "node-a");
    ck_assert_int_eq(e2e_recv(fol, T, &rep), 0);
    ck_assert_uint_eq(rows_of(&rep)->via.array.size, 0);
    e2e_reply_free(&rep);
    send_query(own, 4, 1, 1, 0, NULL, 0);
    ck_assert_int_eq(e2e_recv(own, T, &rep), 0);
    ck_assert_uint_eq(rows_of(&rep)->via.array.size, 0);
    e2e_reply_free(&rep);
    /* Receipts to the node (relayed) and to the center itself. */
    pro = e2e_connect(&node);
    ck_assert_int_ge(pro, 0);
    ck_assert_int_eq(e2e_hello(pro, "p1"), 0);
    cpro = producer("p2");
    send_stream(pro, 0, 300, 50);
    send_stream(cpro, 0, 40, 10);
    read_follow(fol, 3, 300, NULL, &last);
    ck_assert_uint_eq(last, 300); /* the node's ids */
    read_follow(own, 4, 40, NULL, &own_last);
    send_stream(pro, 300, 400, 50);
    read_follow(fol, 3, 100, NULL, &last);
    ck_assert_uint_eq(last, 400);
    close(pro);
    close(cpro);
    close(fol);
    close(own);
    e2e_stop_clean(&node);
    unlink(conf);
    unlink(tok);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("e2e_follow");
    TCase *tc = tcase_create("follow");
    TCase *tc_pg = tcase_create("pg");

    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_follow_in_order_with_filters);
    tcase_add_test(tc, test_after_id_pages_forward);
    tcase_add_test(tc, test_slow_follower_cut_off);
    tcase_add_test(tc, test_follow_resumes_across_restart);
    tcase_add_test(tc, test_follow_stops_on_a_signal_before_its_wait);
    tcase_add_test(tc, test_follow_limit_and_refusals);
    tcase_add_test(tc, test_followers_leave_under_load);
    suite_add_tcase(s, tc);

    tcase_set_tags(tc_pg, "pg");
    tcase_add_unchecked_fixture(tc_pg, cluster_up, cluster_down);
    tcase_add_checked_fixture(tc_pg, NULL, teardown);
    tcase_set_timeout(tc_pg, 180);
    tcase_add_test(tc_pg, test_follow_on_postgresql);
    tcase_add_test(tc_pg, test_follow_relayed_at_a_postgresql_center);
    suite_add_tcase(s, tc_pg);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(suite());
    int rc;

    srunner_run_all(sr, CK_NORMAL);
    rc = skip_status(sr);
    srunner_free(sr);
    return rc;
}
