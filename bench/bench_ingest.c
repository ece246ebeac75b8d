/*
 * bench_ingest.c: a load generator for receiptd, and the in-process
 * ceiling it is measured against, in one run.
 *
 *   bench_ingest [--connections 16] [--batch 100] [--total 200000]
 *                [--pipeline 4] [--idle 1000] [--daemon PATH]
 *
 * 1. Ceiling: decode the same batches and insert them into the same schema
 *    through the store module directly (one process, one transaction per
 *    batch, WAL and synchronous=FULL as in the daemon).
 * 2. Throughput: start the real daemon on a temporary directory, open N
 *    connections, each says hello with its own source and keeps `pipeline`
 *    `receipts` frames (each `batch` receipts, with a seq) in flight.
 *    Durable receipts/s is counted from acknowledgements, which the daemon
 *    sends only after COMMIT. Acknowledgement latency p50/p99 per frame.
 * 3. Half load: the same at half the measured rate, paced, for p99.
 * 4. Idle: a fresh daemon with `idle` connections that said hello; its
 *    VmRSS and VmHWM from /proc.
 *
 * A benchmark asserts nothing; it prints figures. Single-threaded.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <msgpack.h>

#include "envelope.h"
#include "frame.h"
#include "receipt.h"
#include "store.h"

#ifndef BENCH_BINARY_DIR
#define BENCH_BINARY_DIR "."
#endif

static int opt_conns = 16, opt_batch = 100, opt_pipeline = 4, opt_idle = 1000;
static long opt_total = 200000;
static const char *opt_daemon = BENCH_BINARY_DIR "/daemon/receiptd";
static char tmpdir[256];

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
die(const char *what)
{
    fprintf(stderr, "bench_ingest: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void
kstr(msgpack_packer *pk, const char *k, const char *v)
{
    envelope_pack_cstr(pk, k);
    envelope_pack_cstr(pk, v);
}

static void
kuint(msgpack_packer *pk, const char *k, uint64_t v)
{
    envelope_pack_cstr(pk, k);
    msgpack_pack_uint64(pk, v);
}

/* One schema-3 receipt in map form, with fleet-like variety. */
static void
pack_receipt(msgpack_packer *pk, unsigned i)
{
    static const char *const backends[] = { "cuda", "cpu", "wgpu-vulkan",
                                            "metal" };
    char plan[32], model[32], graph[32];
    int k;

    snprintf(plan, sizeof(plan), "plan-%u", i % 50);
    snprintf(model, sizeof(model), "model-%u", i % 10);
    snprintf(graph, sizeof(graph), "%016x", (i % 50) * 2654435761u);
    msgpack_pack_map(pk, 12);
    kuint(pk, "schema_version", 3);
    kstr(pk, "requested_backend", backends[i % 4]);
    kstr(pk, "executed_backend", backends[(i % 97 == 0) ? 1 : i % 4]);
    kstr(pk, "model_instance_id", model);
    kstr(pk, "prepared_plan_id", plan);
    kstr(pk, "graph_hash", graph);
    kstr(pk, "tuning_profile", "default");
    kstr(pk, "stop_reason", i % 3 ? "eos" : "max_tokens");
    kuint(pk, "counter_coverage", 0x3ffffff);
    envelope_pack_cstr(pk, "counters");
    msgpack_pack_map(pk, 23);
    for (k = 0; k < 23; k++)
        kuint(pk, receipt_counters[k].field, (uint64_t)i * 31u + (unsigned)k);
    envelope_pack_cstr(pk, "latency");
    msgpack_pack_map(pk, 3);
    for (k = 23; k < 26; k++)
        kuint(pk, receipt_counters[k].field, 1000u + (unsigned)k);
    envelope_pack_cstr(pk, "artifacts");
    msgpack_pack_map(pk, 4);
    for (k = 0; k < 4; k++)
        kuint(pk, receipt_artifact_names[k], (uint64_t)k);
}

/* A batch body: an array of opt_batch receipts. */
static void
make_batch(msgpack_sbuffer *sb, unsigned seed)
{
    msgpack_packer pk;
    int i;

    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, (size_t)opt_batch);
    for (i = 0; i < opt_batch; i++)
        pack_receipt(&pk, seed + (unsigned)i);
}

/* ---- 1. in-process ceiling ---- */

/*
 * Decodes and inserts opt_total receipts in batches of opt_batch,
 * committing every `group` batches. group 1 is the literal ceiling (one
 * transaction per batch, as a producer without the daemon would do); a
 * large group is the store's own limit with fsyncs amortised, which is
 * what the daemon's group commit competes with.
 */
static double
ceiling(const char *name, long group)
{
    struct store_opts o = { .quarantine_max_bytes = 256u << 20 };
    struct proto_err err;
    struct store *s;
    msgpack_sbuffer body;
    struct receipt *rs = calloc((size_t)opt_batch, sizeof(*rs));
    char db[300];
    long batches = opt_total / opt_batch, b;
    double t0, dt;
    int i;

    snprintf(db, sizeof(db), "%s/%s.db", tmpdir, name);
    if (store_open(db, &o, &s, &err) != 0) {
        fprintf(stderr, "ceiling: %s\n", err.message);
        exit(1);
    }
    make_batch(&body, 0);
    t0 = now_s();
    for (b = 0; b < batches; b++) {
        struct store_write w;
        msgpack_unpacked up;
        size_t off = 0;

        /* Decode as the daemon does: bounded check, unpack, validate. */
        msgpack_unpacked_init(&up);
        if (msgpack_unpack_next(&up, body.data, body.size, &off) !=
            MSGPACK_UNPACK_SUCCESS)
            exit(1);
        for (i = 0; i < opt_batch; i++)
            if (receipt_decode(&up.data.via.array.ptr[i], &rs[i], &err) != 0) {
                fprintf(stderr, "ceiling: decode: %s\n", err.message);
                exit(1);
            }
        memset(&w, 0, sizeof(w));
        w.op = PROTO_OP_RECEIPTS;
        w.source = "bench-ceiling";
        w.source_len = strlen(w.source);
        w.has_seq = 1;
        w.seq = (uint64_t)b;
        w.received_at = 1700000000000;
        w.receipts = rs;
        w.n_receipts = (size_t)opt_batch;
        w.outcome = "\x82";
        w.outcome_len = 1;
        if ((b % group == 0 && store_begin(s, &err) != 0) ||
            store_apply(s, &w, &err) != 0 ||
            ((b % group == group - 1 || b == batches - 1) &&
             store_commit(s, &err) != 0)) {
            fprintf(stderr, "ceiling: %s\n", err.message);
            exit(1);
        }
        for (i = 0; i < opt_batch; i++)
            receipt_clear(&rs[i]);
        msgpack_unpacked_destroy(&up);
    }
    dt = now_s() - t0;
    store_free(s);
    msgpack_sbuffer_destroy(&body);
    free(rs);
    return (double)(batches * opt_batch) / dt;
}

/* ---- the daemon ---- */

static pid_t
start_daemon(const char *name)
{
    char sock[300], db[300], log[300];
    pid_t pid;
    int i, fd;

    snprintf(sock, sizeof(sock), "%s/%s.sock", tmpdir, name);
    snprintf(db, sizeof(db), "%s/%s.db", tmpdir, name);
    snprintf(log, sizeof(log), "%s/%s.log", tmpdir, name);
    pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0)
            dup2(fd, 2);
        execl(opt_daemon, opt_daemon, "--socket", sock, "--db", db,
              "--max-connections", "4096", (char *)NULL);
        _exit(127);
    }
    for (i = 0; i < 500; i++) {
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof(sa));
        sa.sun_family = AF_UNIX;
        memcpy(sa.sun_path, sock, strlen(sock) + 1);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            close(fd);
            return pid;
        }
        close(fd);
        usleep(10000);
    }
    fprintf(stderr, "bench_ingest: the daemon did not start (see %s)\n", log);
    exit(1);
}

static void
stop_daemon(pid_t pid)
{
    int st;

    kill(pid, SIGTERM);
    waitpid(pid, &st, 0);
}

static int
connect_to(const char *name)
{
    struct sockaddr_un sa;
    char path[512];
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(path, sizeof(path), "%s/%s.sock", tmpdir, name);
    if (strlen(path) >= sizeof(sa.sun_path)) {
        fprintf(stderr, "bench_ingest: %s is too long for a socket\n", path);
        exit(1);
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        die("connect");
    return fd;
}

static long
proc_kb(pid_t pid, const char *field)
{
    char path[64], line[256];
    long v = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, field, strlen(field)) == 0)
            v = strtol(line + strlen(field), NULL, 10);
    fclose(f);
    return v;
}

/* ---- 2, 3. load ---- */

struct bconn {
    int fd;
    uint64_t seq;
    long sent, acked; /* frames */
    double *t_sent;   /* by frame id */
    char *out;
    size_t out_len, out_off, out_cap;
    unsigned char in[1 << 16];
    size_t in_len;
};

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void
append(struct bconn *c, const void *p, size_t n)
{
    if (c->out_len + n > c->out_cap) {
        c->out_cap = (c->out_len + n) * 2;
        c->out = realloc(c->out, c->out_cap);
        if (c->out == NULL)
            die("realloc");
    }
    memcpy(c->out + c->out_len, p, n);
    c->out_len += n;
}

static void
queue_frame(struct bconn *c, long id, const msgpack_sbuffer *body)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    unsigned char hdr[4];

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    envelope_request(&pk, PROTO_OP_RECEIPTS, (uint64_t)id, 1, c->seq++, 1);
    frame_put_header(hdr, (uint32_t)(sb.size + body->size));
    append(c, hdr, 4);
    append(c, sb.data, sb.size);
    append(c, body->data, body->size);
    msgpack_sbuffer_destroy(&sb);
}

/*
 * Sends frames_per_conn frames on each connection, at most opt_pipeline in
 * flight each; with rate > 0 (receipts/s, all connections together) frames
 * are paced. Returns durable receipts/s; fills p50/p99 in ms.
 */
static double
load(const char *name, long frames_per_conn, double rate, double *p50,
     double *p99)
{
    struct bconn *cs = calloc((size_t)opt_conns, sizeof(*cs));
    struct pollfd *pfd = calloc((size_t)opt_conns, sizeof(*pfd));
    long total_frames = frames_per_conn * opt_conns, done = 0, nlat = 0;
    double *lat = calloc((size_t)total_frames, sizeof(double));
    double t0, interval = rate > 0 ? opt_batch / rate : 0, next_send;
    msgpack_sbuffer body;
    long scheduled = 0;
    int i;

    make_batch(&body, 7);
    for (i = 0; i < opt_conns; i++) {
        struct bconn *c = &cs[i];
        msgpack_sbuffer sb;
        msgpack_packer pk;
        char src[64];
        unsigned char hdr[4];

        c->fd = connect_to(name);
        c->t_sent = calloc((size_t)frames_per_conn + 1, sizeof(double));
        /* hello, answered before the first receipt goes out */
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        envelope_request(&pk, PROTO_OP_HELLO, 0, 0, 0, 1);
        snprintf(src, sizeof(src), "bench/%s/%d/%ld", name, i, (long)getpid());
        msgpack_pack_map(&pk, 2);
        kuint(&pk, "protocol", 1);
        kstr(&pk, "source", src);
        frame_put_header(hdr, (uint32_t)sb.size);
        if (write(c->fd, hdr, 4) != 4 ||
            write(c->fd, sb.data, sb.size) != (ssize_t)sb.size)
            die("hello");
        msgpack_sbuffer_destroy(&sb);
        fcntl(c->fd, F_SETFL, O_NONBLOCK);
        c->acked = -1; /* the hello reply comes first */
    }
    t0 = now_s();
    next_send = t0;
    while (done < total_frames) {
        double now = now_s();
        int timeout = 50;

        /* Queue new frames: as many as the pipeline allows, or as the
         * pacing allows at this moment. */
        for (i = 0; i < opt_conns; i++) {
            struct bconn *c = &cs[(scheduled + i) % opt_conns];
            while (c->sent < frames_per_conn &&
                   c->sent - (c->acked < 0 ? 0 : c->acked) < opt_pipeline &&
                   c->acked >= 0 && (rate <= 0 || now >= next_send)) {
                c->sent++;
                c->t_sent[c->sent] = now_s();
                queue_frame(c, c->sent, &body);
                scheduled++;
                if (rate > 0) {
                    next_send += interval;
                    break;
                }
            }
        }
        if (rate > 0) {
            double wait = (next_send - now_s()) * 1000.0;
            timeout = wait < 0 ? 0 : wait > 50 ? 50 : (int)wait;
        }
        for (i = 0; i < opt_conns; i++) {
            pfd[i].fd = cs[i].fd;
            pfd[i].events =
                POLLIN | (cs[i].out_off < cs[i].out_len ? POLLOUT : 0);
        }
        if (poll(pfd, (nfds_t)opt_conns, timeout) < 0 && errno != EINTR)
            die("poll");
        for (i = 0; i < opt_conns; i++) {
            struct bconn *c = &cs[i];
            ssize_t n;
            if (pfd[i].revents & POLLOUT) {
                n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
                if (n > 0) {
                    c->out_off += (size_t)n;
                    if (c->out_off == c->out_len)
                        c->out_off = c->out_len = 0;
                }
            }
            if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            n = read(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len);
            if (n == 0) {
                fprintf(stderr, "bench_ingest: the daemon closed a "
                                "connection\n");
                exit(1);
            }
            if (n < 0)
                continue;
            c->in_len += (size_t)n;
            for (;;) {
                uint32_t flen;
                struct envelope_reply r;
                struct proto_err err;
                msgpack_unpacked up;
                size_t off = 0;
                if (c->in_len < 4)
                    break;
                flen = (uint32_t)c->in[0] << 24 | (uint32_t)c->in[1] << 16 |
                       (uint32_t)c->in[2] << 8 | c->in[3];
                if (c->in_len < 4 + flen)
                    break;
                msgpack_unpacked_init(&up);
                if (msgpack_unpack_next(&up, (char *)c->in + 4, flen, &off) !=
                        MSGPACK_UNPACK_SUCCESS ||
                    envelope_reply_decode(&up.data, &r, &err) != 0 || !r.ok) {
                    fprintf(stderr, "bench_ingest: a request failed: %s\n",
                            r.err.message);
                    exit(1);
                }
                msgpack_unpacked_destroy(&up);
                if (c->acked < 0) {
                    c->acked = 0;
                } else {
                    c->acked++;
                    lat[nlat++] = (now_s() - c->t_sent[r.id]) * 1000.0;
                    done++;
                }
                memmove(c->in, c->in + 4 + flen, c->in_len - 4 - flen);
                c->in_len -= 4 + flen;
            }
        }
    }
    {
        double dt = now_s() - t0;
        qsort(lat, (size_t)nlat, sizeof(double), cmp_double);
        *p50 = lat[nlat / 2];
        *p99 = lat[(size_t)((double)nlat * 0.99)];
        for (i = 0; i < opt_conns; i++) {
            close(cs[i].fd);
            free(cs[i].t_sent);
            free(cs[i].out);
        }
        free(cs);
        free(pfd);
        free(lat);
        msgpack_sbuffer_destroy(&body);
        return (double)(total_frames * opt_batch) / dt;
    }
}

/* ---- 4. idle connections ---- */

static void
idle(long *rss, long *hwm, long *rss_before)
{
    pid_t pid = start_daemon("idle");
    int *fds = calloc((size_t)opt_idle, sizeof(int));
    msgpack_sbuffer sb;
    msgpack_packer pk;
    unsigned char hdr[4], buf[256];
    int i;

    usleep(100000);
    *rss_before = proc_kb(pid, "VmRSS:");
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    envelope_request(&pk, PROTO_OP_HELLO, 1, 0, 0, 1);
    msgpack_pack_map(&pk, 2);
    kuint(&pk, "protocol", 1);
    kstr(&pk, "source", "idle");
    frame_put_header(hdr, (uint32_t)sb.size);
    for (i = 0; i < opt_idle; i++) {
        fds[i] = connect_to("idle");
        if (write(fds[i], hdr, 4) != 4 ||
            write(fds[i], sb.data, sb.size) != (ssize_t)sb.size)
            die("hello");
    }
    /* Every connection is accepted and has been answered. */
    for (i = 0; i < opt_idle; i++)
        if (read(fds[i], buf, sizeof(buf)) <= 0)
            die("hello reply");
    usleep(200000);
    *rss = proc_kb(pid, "VmRSS:");
    *hwm = proc_kb(pid, "VmHWM:");
    for (i = 0; i < opt_idle; i++)
        close(fds[i]);
    free(fds);
    msgpack_sbuffer_destroy(&sb);
    stop_daemon(pid);
}

int
main(int argc, char **argv)
{
    struct rlimit rl;
    double ceil_rate, ceil_group, rate, got, half, p50, p99, hp50, hp99;
    long frames, rss, hwm, rss0, peak;
    pid_t pid;
    int i;
    char cmd[300];

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--connections") == 0)
            opt_conns = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--batch") == 0)
            opt_batch = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--total") == 0)
            opt_total = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--pipeline") == 0)
            opt_pipeline = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--idle") == 0)
            opt_idle = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--daemon") == 0)
            opt_daemon = argv[i + 1];
        else {
            fprintf(stderr, "usage: bench_ingest [--connections N] [--batch "
                            "N] [--total N] [--pipeline N] [--idle N] "
                            "[--daemon PATH]\n");
            return 2;
        }
    }
    if (opt_conns < 1 || opt_batch < 1 || opt_pipeline < 1 ||
        opt_total < (long)opt_conns * opt_batch) {
        fprintf(stderr, "bench_ingest: bad parameters\n");
        return 2;
    }
    /* Idle connections need descriptors on both sides; the daemon
     * inherits this limit. */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGPIPE, SIG_IGN);
    snprintf(tmpdir, sizeof(tmpdir), "%s/bench-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(tmpdir) == NULL)
        die("mkdtemp");

    printf("receiptd ingest benchmark: %d connections, batch %d, pipeline "
           "%d, %ld receipts\n",
           opt_conns, opt_batch, opt_pipeline, opt_total);
    ceil_rate = ceiling("ceiling1", 1);
    printf("in-process ceiling:   %10.0f receipts/s (decode + insert, one "
           "transaction per batch)\n",
           ceil_rate);
    ceil_group =
        ceiling("ceilingN", 20000 / opt_batch > 0 ? 20000 / opt_batch : 1);
    printf("in-process, grouped:  %10.0f receipts/s (decode + insert, one "
           "transaction per 20000 receipts)\n",
           ceil_group);

    frames = opt_total / opt_batch / opt_conns;
    pid = start_daemon("load");
    rate = load("load", frames, 0, &p50, &p99);
    peak = proc_kb(pid, "VmHWM:");
    printf("daemon, full load:    %10.0f durable receipts/s, ack p50 %.2f "
           "ms, p99 %.2f ms\n",
           rate, p50, p99);
    printf("ratio daemon/ceiling: %10.2f (per-batch ceiling), %.2f (grouped)\n",
           rate / ceil_rate, rate / ceil_group);
    half = rate / 2;
    got = load("load", frames / 2 > 0 ? frames / 2 : 1, half, &hp50, &hp99);
    printf("daemon, half load:    %10.0f receipts/s offered, %.0f achieved, "
           "ack p50 %.2f ms, p99 %.2f ms\n",
           half, got, hp50, hp99);
    printf("daemon peak RSS under load: %ld KiB\n", peak);
    stop_daemon(pid);

    idle(&rss, &hwm, &rss0);
    printf("idle: %d connections: VmRSS %ld KiB (%ld KiB before), VmHWM %ld "
           "KiB\n",
           opt_idle, rss, rss0, hwm);

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_ingest: could not remove %s\n", tmpdir);
    return 0;
}
