/*
 * follow.c: `receiptctl receipts --follow`. One request, then a reply
 * frame for each page of rows the daemon pushes, printed and flushed as it
 * comes. The daemon's first reply may hold no row (without --after-id a
 * follow starts at the newest receipt); every reply carries last_id, the
 * cursor a new follow resumes from (--after-id) without missing a row.
 *
 * Ctrl-C and SIGTERM end the wait (net_conn.stop) and exit 0; SIGPIPE is
 * ignored, and a write to a closed stdout (`| head`) ends quietly with 0.
 * Single-threaded; the handler sets a flag and writes a byte to a pipe
 * that the wait polls too: a signal that came just before poll() would
 * otherwise leave it waiting for the next reply, which may never come (a
 * SIGTERM right after a page was printed hung receiptctl in CI).
 */
#include "follow.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mpobj.h"
#include "net.h"
#include "output.h"

static volatile sig_atomic_t stop_signal;
static int stop_pipe[2] = { -1, -1 };

static void
stop_cb(int sig)
{
    int saved = errno;

    stop_signal = sig;
    if (stop_pipe[1] >= 0) {
        ssize_t n = write(stop_pipe[1], "", 1);

        (void)n;
    }
    errno = saved;
}

static void
on_signals(void)
{
    struct sigaction sa;

    /* Non-blocking: a handler never waits on a full pipe (one byte is
     * enough to end the wait). */
    if (stop_pipe[0] < 0 && pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
        stop_pipe[0] = stop_pipe[1] = -1;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = stop_cb;
    sigemptyset(&sa.sa_mask);
    /* No SA_RESTART: a signal ends poll()'s wait at once. */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* The reply's cursor: last_id, else the largest receipt_id of its rows. */
static void
advance(const msgpack_object *result, uint64_t *cursor, int *has)
{
    const msgpack_object *v = mpobj_map_get(result, "last_id", NULL);
    const msgpack_object *rows = mpobj_map_get(result, "rows", NULL);
    uint32_t i;

    if (v != NULL && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (!*has || v->via.u64 > *cursor)
            *cursor = v->via.u64;
        *has = 1;
        return;
    }
    for (i = 0; rows != NULL && rows->type == MSGPACK_OBJECT_ARRAY &&
                i < rows->via.array.size;
         i++) {
        v = mpobj_map_get(&rows->via.array.ptr[i], "receipt_id", NULL);
        if (v != NULL && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
            (!*has || v->via.u64 > *cursor)) {
            *cursor = v->via.u64;
            *has = 1;
        }
    }
}

static void
resume_hint(const char *why, int has, uint64_t cursor)
{
    if (has)
        fprintf(stderr,
                "receiptctl: receipts: %s; resume with --after-id %" PRIu64
                "\n",
                why, cursor);
    else
        fprintf(stderr, "receiptctl: receipts: %s\n", why);
}

int
follow_receipts(struct cli_opts *o,
                int (*pack_body)(msgpack_packer *, const void *),
                const void *arg)
{
    struct output_spec spec = { .kind = "receipts",
                                .columns = o->columns,
                                .forward = 1 };
    int format = o->format == OUTPUT_JSON ? OUTPUT_JSONL : o->format;
    char err[NET_ERR_MAX], oerr[OUTPUT_ERR_MAX];
    const msgpack_object *rows;
    struct net_reply rep;
    struct net_conn c;
    uint64_t cursor = o->after_id;
    int has = o->has_after, rc, first = 1;

    on_signals();
    if ((rc = cli_open_conn(o, &c, NULL, 0)) != 0)
        return rc;
    c.stop = &stop_signal;
    c.stop_fd = stop_pipe[0];
    c.watch_stdout = 1;
    /* The first reply within --timeout, as any query; then rows come
     * when they are committed, however long that takes. */
    rc = cli_request(&c, PROTO_OP_QUERY, "receipts", pack_body, arg, &rep);
    for (;;) {
        if (rc != 0) {
            /* cli_request printed why. */
            net_reply_free(&rep);
            if (stop_signal || c.stdout_closed)
                rc = 0;
            break;
        }
        if (!first) {
            rc = net_recv(&c, &rep, err, sizeof(err));
            if (rc == 0 && rep.r.has_id && rep.r.id + 1 != c.next_id) {
                snprintf(err, sizeof(err), "a reply for another request");
                rc = NET_EPROTO;
            }
            if (rc != 0) {
                net_reply_free(&rep);
                if (stop_signal || c.stdout_closed) {
                    rc = 0;
                    break;
                }
                resume_hint(err, has, cursor);
                rc = CLI_EXIT_CONNECT;
                break;
            }
            if (!rep.r.ok) {
                /* The daemon ended the follow and says why: cut off for
                 * reading too slowly, stopping. */
                cli_daemon_err("receipts", &rep.r);
                net_reply_free(&rep);
                resume_hint("the follow ended", has, cursor);
                rc = CLI_EXIT_DAEMON;
                break;
            }
        }
        first = 0;
        rows = mpobj_map_get(rep.r.result, "rows", NULL);
        if (rows != NULL && rows->type == MSGPACK_OBJECT_ARRAY &&
            rows->via.array.size > 0) {
            if (output_result(stdout, format, &spec, rep.r.result, oerr,
                              sizeof(oerr)) != 0) {
                fprintf(stderr, "receiptctl: receipts: %s\n", oerr);
                net_reply_free(&rep);
                rc = CLI_EXIT_CONNECT;
                break;
            }
            spec.no_header = 1;
            if (fflush(stdout) != 0 || ferror(stdout)) {
                /* `| head` has what it wanted: not an error. */
                net_reply_free(&rep);
                if (errno == EPIPE) {
                    rc = 0;
                    break;
                }
                fprintf(stderr, "receiptctl: writing the output: %s\n",
                        strerror(errno));
                rc = CLI_EXIT_DAEMON;
                break;
            }
        }
        advance(rep.r.result, &cursor, &has);
        net_reply_free(&rep);
        c.timeout_ms = 0;
        if (stop_signal) {
            rc = 0;
            break;
        }
    }
    net_close(&c);
    return rc;
}
