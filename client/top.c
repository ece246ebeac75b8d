/*
 * top.c: `receiptctl top`, a full-screen view of the daemon refreshed each
 * second, on ncurses.
 *
 * Each second it asks `stats` and `fallbacks` grouped by backends over the
 * last minute on one connection, and shows the rates between two `stats`
 * answers: receipts, frames and quarantined payloads per second, the mean
 * commit time, the writes' mean time from queued to answered and the
 * writer's CPU per receipt over that second, the
 * writer's queue, the connections, and the fallback rate per backend pair.
 *
 * The terminal is restored on every way out: q, Ctrl-C (SIGINT), SIGTERM,
 * SIGHUP, and an error (the message is printed after endwin(), on a
 * usable terminal). Single-threaded; the signal handlers only set a flag.
 */
#include "top.h"

#include <curses.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "clock.h"
#include "envelope.h"
#include "mpobj.h"
#include "net.h"

#define TOP_PAIRS_MAX 16

static volatile sig_atomic_t stop_signal;

static void
stop_cb(int sig)
{
    stop_signal = sig;
}

/* The figures of one `stats` answer that top shows. */
struct sample {
    uint64_t at_ms; /* monotonic, when the answer came */
    uint64_t accepted, frames, quarantined, groups, writer_cpu_us;
    uint64_t connections, refused, pending_writes, pending_bytes, uptime_ms;
    uint64_t acks;
    double commit_mean_ms, ack_mean_ms;
    int failing;
    char last_error[160];
};

struct pair {
    char requested[24], executed[24];
    uint64_t receipts, fallback;
};

struct query {
    const char *kind;
    uint64_t since;
};

static int
pack_cb(msgpack_packer *pk, const void *arg)
{
    const struct query *q = arg;

    if (q->since == 0)
        return msgpack_pack_map(pk, 1) != 0 ||
               cli_pack_str(pk, "kind", q->kind) != 0;
    return msgpack_pack_map(pk, 4) != 0 ||
           cli_pack_str(pk, "kind", q->kind) != 0 ||
           cli_pack_str(pk, "group_by", "backends") != 0 ||
           cli_pack_u64(pk, "since", q->since) != 0 ||
           cli_pack_u64(pk, "limit", TOP_PAIRS_MAX) != 0;
}

/* One query on c; no output (the screen is ncurses'). Returns 0 with rep
 * holding the answer, or -1 with the reason in err. */
static int
ask(struct net_conn *c, const struct query *q, struct net_reply *rep, char *err,
    size_t err_len)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint64_t id;
    size_t start;
    int rc;

    memset(rep, 0, sizeof(*rep));
    msgpack_unpacked_init(&rep->up);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    start = net_frame_begin(c, &sb, &pk, PROTO_OP_QUERY, 1, &id);
    if (start == (size_t)-1 || pack_cb(&pk, q) != 0 ||
        net_frame_finish(c, &sb, start) != 0) {
        msgpack_sbuffer_destroy(&sb);
        snprintf(err, err_len, "%s: the request does not fit in a frame",
                 q->kind);
        return -1;
    }
    msgpack_unpacked_destroy(&rep->up);
    rc = net_call(c, &sb, id, rep, err, err_len);
    msgpack_sbuffer_destroy(&sb);
    if (rc != 0)
        return -1;
    if (!rep->r.ok) {
        snprintf(err, err_len, "%s: %s: %s", q->kind,
                 proto_code_name(rep->r.err.code), rep->r.err.message);
        return -1;
    }
    return 0;
}

static const msgpack_object *
first_row(const msgpack_object *result)
{
    const msgpack_object *rows = mpobj_map_get(result, "rows", NULL);

    if (rows == NULL || rows->type != MSGPACK_OBJECT_ARRAY ||
        rows->via.array.size == 0)
        return NULL;
    return &rows->via.array.ptr[0];
}

static uint64_t
u64(const msgpack_object *m, const char *k)
{
    const msgpack_object *v = mpobj_map_get(m, k, NULL);

    return v != NULL && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? v->via.u64
                                                                   : 0;
}

static double
f64(const msgpack_object *m, const char *k)
{
    const msgpack_object *v = mpobj_map_get(m, k, NULL);

    if (v == NULL)
        return 0;
    if (v->type == MSGPACK_OBJECT_FLOAT32 || v->type == MSGPACK_OBJECT_FLOAT64)
        return v->via.f64;
    return v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (double)v->via.u64 : 0;
}

static int
read_stats(const msgpack_object *result, struct sample *s)
{
    const msgpack_object *row = first_row(result), *v;

    if (row == NULL)
        return -1;
    s->accepted = u64(row, "accepted");
    s->frames = u64(row, "frames");
    s->quarantined = u64(row, "quarantined");
    s->groups = u64(row, "commit_groups");
    s->writer_cpu_us = u64(row, "writer_cpu_us");
    s->connections = u64(row, "connections");
    s->refused = u64(row, "connections_refused");
    s->pending_writes = u64(row, "pending_writes");
    s->pending_bytes = u64(row, "pending_bytes");
    s->uptime_ms = u64(row, "uptime_ms");
    s->commit_mean_ms = f64(row, "commit_mean_ms");
    s->acks = u64(row, "acks");
    s->ack_mean_ms = f64(row, "ack_mean_ms");
    v = mpobj_map_get(row, "store_failing", NULL);
    s->failing =
        v != NULL && v->type == MSGPACK_OBJECT_BOOLEAN && v->via.boolean;
    cli_copy_str(s->last_error, sizeof(s->last_error), row, "store_last_error");
    return 0;
}

static size_t
read_pairs(const msgpack_object *result, struct pair *p, size_t cap)
{
    const msgpack_object *rows = mpobj_map_get(result, "rows", NULL);
    size_t i, n = 0;

    if (rows == NULL || rows->type != MSGPACK_OBJECT_ARRAY)
        return 0;
    for (i = 0; i < rows->via.array.size && n < cap; i++) {
        const msgpack_object *r = &rows->via.array.ptr[i];

        cli_copy_str(p[n].requested, sizeof(p[n].requested), r,
                     "requested_backend");
        cli_copy_str(p[n].executed, sizeof(p[n].executed), r,
                     "executed_backend");
        p[n].receipts = u64(r, "receipts");
        p[n].fallback = u64(r, "fallback");
        n++;
    }
    return n;
}

static double
per_s(uint64_t now, uint64_t then, uint64_t dt_ms)
{
    return dt_ms > 0 && now >= then
               ? (double)(now - then) * 1000.0 / (double)dt_ms
               : 0.0;
}

static void
draw(const char *peer, const struct sample *cur, const struct sample *prev,
     const struct pair *pairs, size_t npairs)
{
    uint64_t dt = prev ? cur->at_ms - prev->at_ms : 0;
    uint64_t dgroups = prev ? cur->groups - prev->groups : 0;
    uint64_t dacc = prev ? cur->accepted - prev->accepted : 0;
    uint64_t dacks = prev ? cur->acks - prev->acks : 0;
    double commit_ms = cur->commit_mean_ms, us_per = 0;
    double ack_ms = cur->ack_mean_ms;
    size_t i;
    int row = 0;

    /* The means of the last second's groups and answered writes, from
     * the running means. */
    if (prev != NULL && dgroups > 0)
        commit_ms = (cur->commit_mean_ms * (double)cur->groups -
                     prev->commit_mean_ms * (double)prev->groups) /
                    (double)dgroups;
    if (prev != NULL && dacks > 0)
        ack_ms = (cur->ack_mean_ms * (double)cur->acks -
                  prev->ack_mean_ms * (double)prev->acks) /
                 (double)dacks;
    if (prev != NULL && dacc > 0)
        us_per =
            (double)(cur->writer_cpu_us - prev->writer_cpu_us) / (double)dacc;
    erase();
    mvprintw(row++, 0, "receiptctl top: %s, up %" PRIu64 " s   (q to quit)",
             peer, cur->uptime_ms / 1000u);
    row++;
    mvprintw(row++, 0,
             "receipts/s %10.1f   frames/s %10.1f   quarantined/s %8.1f",
             per_s(cur->accepted, prev ? prev->accepted : 0, dt),
             per_s(cur->frames, prev ? prev->frames : 0, dt),
             per_s(cur->quarantined, prev ? prev->quarantined : 0, dt));
    mvprintw(row++, 0,
             "commit ms  %10.2f   writer us/receipt %6.1f   queue %" PRIu64
             " writes, %" PRIu64 " KiB",
             commit_ms, us_per, cur->pending_writes,
             cur->pending_bytes / 1024u);
    mvprintw(row++, 0, "ack ms     %10.2f   (queued to answered, writes)",
             ack_ms);
    mvprintw(row++, 0, "connections %9" PRIu64 "   refused/s %9.1f   store %s",
             cur->connections,
             per_s(cur->refused, prev ? prev->refused : 0, dt),
             cur->failing ? "FAILING" : "ok");
    if (cur->failing)
        mvprintw(row++, 0, "  %s", cur->last_error);
    row++;
    mvprintw(row++, 0, "fallbacks over the last minute, by backend pair:");
    attron(A_BOLD);
    mvprintw(row++, 0, "%-14s %-14s %10s %10s %9s", "requested", "executed",
             "receipts", "fallbacks", "rate");
    attroff(A_BOLD);
    for (i = 0; i < npairs && row < LINES - 1; i++)
        mvprintw(row++, 0, "%-14s %-14s %10" PRIu64 " %10" PRIu64 " %8.2f%%",
                 pairs[i].requested, pairs[i].executed, pairs[i].receipts,
                 pairs[i].fallback,
                 pairs[i].receipts ? 100.0 * (double)pairs[i].fallback /
                                         (double)pairs[i].receipts
                                   : 0.0);
    if (npairs == 0)
        mvprintw(row++, 0, "(no receipts in the last minute)");
    refresh();
}

static void
on_signals(void (*fn)(int))
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = fn;
    sigemptyset(&sa.sa_mask);
    /* No SA_RESTART: a signal ends getch()'s wait at once. */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

int
top_run(struct cli_opts *o)
{
    struct sample cur, prev;
    struct pair pairs[TOP_PAIRS_MAX];
    struct net_conn c;
    struct net_reply rep;
    char err[NET_ERR_MAX] = "";
    int rc, have_prev = 0, failed = 0;
    size_t npairs;

    if (o->nargs > 0) {
        cli_usage_err(o->prog, "unexpected argument \"%s\"", o->args[0]);
        return CLI_EXIT_USAGE;
    }
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        cli_usage_err(o->prog, "needs a terminal; for scripts use "
                               "'receiptctl stats'");
        return CLI_EXIT_USAGE;
    }
    if ((rc = cli_open_conn(o, &c, NULL, 0)) != 0)
        return rc;
    on_signals(stop_cb);
    if (initscr() == NULL) {
        net_close(&c);
        fputs("receiptctl: top: cannot start the terminal (is TERM set?)\n",
              stderr);
        return CLI_EXIT_USAGE;
    }
    cbreak();
    noecho();
    curs_set(0);
    keypad(stdscr, TRUE);
    while (!stop_signal) {
        struct query qs = { "stats", 0 }, qf = { "fallbacks", 0 };
        uint64_t next = mono_ms() + 1000, now;
        int ch;

        memset(&cur, 0, sizeof(cur));
        if (ask(&c, &qs, &rep, err, sizeof(err)) != 0 ||
            read_stats(rep.r.result, &cur) != 0) {
            net_reply_free(&rep);
            failed = 1;
            break;
        }
        net_reply_free(&rep);
        cur.at_ms = mono_ms();
        qf.since = unix_ms() - 60000u;
        if (ask(&c, &qf, &rep, err, sizeof(err)) != 0) {
            net_reply_free(&rep);
            failed = 1;
            break;
        }
        npairs = read_pairs(rep.r.result, pairs, TOP_PAIRS_MAX);
        net_reply_free(&rep);
        draw(c.peer, &cur, have_prev ? &prev : NULL, pairs, npairs);
        prev = cur;
        have_prev = 1;
        /* Keys until the next refresh; a resize redraws at once. */
        while (!stop_signal && (now = mono_ms()) < next) {
            timeout((int)(next - now));
            ch = getch();
            if (ch == 'q' || ch == 'Q') {
                stop_signal = -1;
                break;
            }
            if (ch == KEY_RESIZE)
                break;
        }
    }
    endwin();
    on_signals(SIG_DFL);
    net_close(&c);
    if (failed) {
        fprintf(stderr, "receiptctl: top: %s\n", err);
        return CLI_EXIT_CONNECT;
    }
    return 0;
}
