/*
 * conn.c: the per-connection state machine.
 *
 * Loop thread only. A connection reads frames while every limit allows
 * (may_dispatch): its unsent replies are under max_unsent_bytes ("full"
 * clears below half), the writer is not behind (the server-wide pause),
 * fewer than CONN_MAX_PENDING requests and CONN_MAX_QUERIES queries wait
 * for replies. When a limit is reached in the middle of a read, the rest of
 * that read waits in the stash and the socket is not read until the stash
 * is dispatched, so each limit holds exactly. want_close (a framing error,
 * EOF, a refused token or drain) means no more frames: close once every
 * slot is written. closing: handles being closed. The connection is freed
 * when both handles are closed and no slot is outstanding.
 *
 * One timer serves three deadlines: a frame that has begun must complete
 * (a trickled frame is cut off), a TCP peer must authenticate, and an idle
 * connection is closed. Reads land in the server's shared buffer and are
 * consumed (or stashed) before the callback returns, so an idle connection
 * holds no read buffer.
 *
 * TLS (c->tls): the socket's bytes go into the TLS connection, and what it
 * decrypts takes the plain-text path above, in the server's second shared
 * buffer, under the same limits: a limit reached mid-buffer stashes the
 * rest of that plaintext, and records not yet decrypted wait inside the
 * TLS connection (at most a read buffer beyond a record: reading stops
 * with the stash) until the stash is dispatched. Replies are encrypted as
 * they are written; the unsent account counts their plaintext. The
 * handshake happens within the hello deadline like everything else a
 * peer does before it authenticates, and a failed one closes the
 * connection once its alert is sent.
 */
#include "conn.h"
#include "pool.h"

#include <assert.h>
#include <stdatomic.h>
#include <sys/ioctl.h>
#include <syslog.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "access.h"
#include "dispatch.h"
#include "envelope.h"
#include "follow.h"
#include "log.h"
#include "reply.h"
#include "store.h"
#include "tls.h"

#define WRITE_BATCH 64

struct wreq {
    uv_write_t req;
    struct conn *c;
    unsigned n;
    size_t bytes;
    uv_buf_t bufs[WRITE_BATCH];
};

static void arm_timer(struct conn *c);
static void timer_cb(uv_timer_t *t);

/* Reply bytes leave the connection's and the server's account. */
static void
unsent_sub(struct conn *c, uint64_t n)
{
    c->unsent -= n;
    c->srv->unsent_bytes -= n;
}
static void stash_free(struct conn *c);
static void maybe_finish(struct conn *c);

static void
maybe_free(struct conn *c)
{
    if (c->handles_open == 0 && c->n_slots == 0) {
        struct server *srv = c->srv;

        /* A corked connection has a slot waiting, and the flush at the
         * end of the delivery unlists it before any close callback. */
        assert(!c->corked);
        /* Replies completed but never written (dropped at close) leave
         * the server's account with the connection. */
        srv->unsent_bytes -= c->unsent;
        stash_free(c);
        tls_conn_free(c->tls);
        server_conn_freed(srv, c);
        free(c);
    }
}

static void
close_cb(uv_handle_t *h)
{
    struct conn *c = h->data;

    c->handles_open--;
    maybe_free(c);
}

/* What the frame reader admits: a TCP peer that has not authenticated gets
 * only a frame a hello fits in. */
static uint32_t
frame_limit(const struct conn *c)
{
    uint32_t max = c->srv->cfg->max_frame;

    if (c->kind == CONN_TCP && c->level == ACCESS_NONE &&
        max > CONN_PREAUTH_FRAME_MAX)
        return CONN_PREAUTH_FRAME_MAX;
    return max;
}

struct conn *
conn_new(struct server *srv, int kind)
{
    struct conn *c = calloc(1, sizeof(*c));
    int rc;

    if (c == NULL)
        return NULL;
    c->srv = srv;
    c->kind = kind;
    if (kind == CONN_TCP)
        rc = uv_tcp_init(srv->loop, &c->u.tcp);
    else
        rc = uv_pipe_init(srv->loop, &c->u.pipe, 0);
    if (rc != 0) {
        free(c);
        return NULL;
    }
    c->u.handle.data = c;
    uv_timer_init(srv->loop, &c->timer);
    c->timer.data = c;
    c->handles_open = 2;
    c->level = ACCESS_NONE;
    c->accepted_ms = uv_now(srv->loop);
    frame_reader_init(&c->fr, frame_limit(c));
    /* A frame that comes whole in one read (most) gets its buffer from
     * the pool, and its job gives it back (writer.c). */
    c->fr.alloc = pool_alloc;
    server_conn_add(srv, c);
    return c;
}

static void
free_done_slots(struct conn *c)
{
    struct conn_slot *s, *next, **pp = &c->head;

    c->tail = NULL;
    for (s = c->head; s != NULL; s = next) {
        next = s->next;
        if (s->done) {
            *pp = next;
            free(s->reply);
            pool_free(s, sizeof(*s));
            c->n_slots--;
        } else {
            pp = &s->next;
            c->tail = s;
        }
    }
}

void
conn_authenticated(struct conn *c, int level)
{
    c->level = level;
    if (c->unauth) {
        c->unauth = 0;
        c->srv->n_unauth--;
    }
    /* Between frames or inside the next one, whose length was already
     * checked against the smaller limit: either way the larger one is
     * safe to apply now. */
    c->fr.max_frame = c->srv->cfg->max_frame;
}

void
conn_close(struct conn *c)
{
    struct conn_slot *s;

    if (c->closing)
        return;
    c->closing = 1;
    c->want_close = 1;
    if (c->id != 0)
        log_debug("connection %llu closed after %.1f s (source \"%s\")",
                  (unsigned long long)c->id,
                  (double)(uv_now(c->srv->loop) - c->accepted_ms) / 1000.0,
                  c->source);
    if (c->reading)
        uv_read_stop(&c->u.stream);
    c->reading = 0;
    frame_reader_close(&c->fr);
    free_done_slots(c);
    for (s = c->head; s != NULL; s = s->next)
        atomic_store(&s->abandoned, 1);
    if (c->unauth) {
        c->unauth = 0;
        c->srv->n_unauth--;
    }
    server_conn_closing(c->srv, c);
    if (c->follow != NULL)
        follow_conn_closed(c);
    uv_close((uv_handle_t *)&c->timer, close_cb);
    uv_close(&c->u.handle, close_cb);
}

static void
alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = h->data;

    (void)suggested;
    buf->base = c->srv->readbuf;
    buf->len = sizeof(c->srv->readbuf);
}

/* Replies to a framing error (the stream cannot be trusted any more) and
 * closes once that reply is written. */
static void
framing_error(struct conn *c, const struct proto_err *err)
{
    struct conn_slot *s;
    char *reply;
    size_t len;

    c->srv->n.framing_errors++;
    frame_reader_close(&c->fr);
    frame_reader_init(&c->fr, frame_limit(c));
    s = conn_slot_new(c);
    if (s == NULL) {
        conn_close(c);
        return;
    }
    reply = reply_error(0, 0, err, &len);
    conn_close_after_replies(c);
    conn_slot_complete(s, reply, len);
}

/*
 * Whether another request of c may be dispatched now. When not, bytes
 * already read wait in the stash and the socket is not read, so every
 * limit holds exactly rather than one read buffer late.
 */
static int
may_dispatch(const struct conn *c)
{
    return !c->full && !c->srv->paused && c->n_queries < CONN_MAX_QUERIES &&
           c->n_slots < CONN_MAX_PENDING;
}

/* Feeds buf[0..len) to the frame reader and dispatches whole frames while
 * may_dispatch() (or always, with force). Returns the bytes consumed. */
static size_t
feed(struct conn *c, char *buf, size_t len, int force)
{
    struct proto_err err;
    size_t off = 0, used;
    uint32_t flen;
    char *frame;
    int rc;

    while (off < len && !c->want_close && (force || may_dispatch(c))) {
        proto_err_clear(&err);
        rc = frame_reader_feed(&c->fr, buf + off, len - off, &used, &frame,
                               &flen, &err);
        off += used;
        if (rc != 0) {
            if (rc == PROTO_ETOO_LARGE &&
                frame_limit(c) < c->srv->cfg->max_frame)
                proto_err_set(&err, PROTO_ETOO_LARGE, NULL,
                              "a frame above %u bytes before hello "
                              "authenticates the connection",
                              (unsigned)CONN_PREAUTH_FRAME_MAX);
            framing_error(c, &err);
            return len;
        }
        if (frame != NULL) {
            int first = !c->spoke, early;

            c->srv->n.frames++;
            c->frame_started_ms = 0;
            c->spoke = 1;
            c->wipe_frame = 0;
            /* A hello may carry a token in plaintext: its bytes here (the
             * server's shared read buffer, or the stash) are zeroed, as
             * the frame itself is by do_hello. The frame reader holds its
             * copy, so a small frame's go before dispatch, which may
             * answer at once: a peer that has its reply finds no token
             * left. A larger hello's go after. The frame's earlier part,
             * read before, was zeroed below if it was the first. */
            early = first || flen <= CONN_PREAUTH_FRAME_MAX;
            if (early)
                explicit_bzero(buf + off - used, used);
            /* dispatch takes the frame. */
            dispatch_frame(c, frame, flen);
            if (c->wipe_frame && !early)
                explicit_bzero(buf + off - used, used);
        } else if (!c->spoke) {
            /* Part of a connection's first frame, its hello as a rule:
             * the frame reader has copied it, so nothing needs it here. */
            explicit_bzero(buf + off - used, used);
        }
    }
    return off;
}

static void
stash_free(struct conn *c)
{
    free(c->stash);
    c->stash = NULL;
    c->stash_len = c->stash_off = 0;
}

/* Dispatches what the stash holds; with force, all of it. */
static void
stash_drain(struct conn *c, int force)
{
    if (c->stash == NULL || c->in_dispatch)
        return;
    c->in_dispatch = 1;
    c->stash_off +=
        feed(c, c->stash + c->stash_off, c->stash_len - c->stash_off, force);
    c->in_dispatch = 0;
    if (c->stash_off == c->stash_len || c->want_close)
        stash_free(c);
}

/* What was read is answered before the connection ends: the peer
 * half-closed, or the daemon drains. */
static void tls_pump(struct conn *c, int force);

static void
finish_reading(struct conn *c)
{
    stash_drain(c, 1);
    if (c->tls != NULL && !c->closing && c->stash == NULL)
        tls_pump(c, 1);
    if (!c->closing)
        conn_close_after_replies(c);
}

/* Dispatches plaintext buf[0..n) and stashes what a limit left. */
static void
read_plain(struct conn *c, char *buf, size_t n, int force)
{
    size_t used;

    c->in_dispatch = 1;
    used = feed(c, buf, n, force);
    c->in_dispatch = 0;
    if (used < n && !c->want_close && !c->closing) {
        /* A limit was reached mid-buffer: keep the rest (at most one read
         * buffer) and stop reading until it can be dispatched. */
        c->stash = malloc(n - used);
        if (c->stash == NULL) {
            conn_close(c);
            return;
        }
        memcpy(c->stash, buf + used, n - used);
        c->stash_len = n - used;
        c->stash_off = 0;
    }
}

static void write_req_cb(uv_write_t *req, int status);

/* Sends what the TLS connection has for the peer (handshake records,
 * alerts, encrypted replies) as one write; bytes is the plaintext it
 * carries, for the unsent account. Returns 0, or -1 with c closed. */
static int
tls_send(struct conn *c, struct wreq *wr, size_t bytes)
{
    size_t n = tls_conn_pending(c->tls);
    char *out;

    if (n == 0) {
        pool_free(wr, sizeof(*wr));
        unsent_sub(c, bytes);
        return 0;
    }
    if ((wr == NULL && (wr = pool_zalloc(sizeof(*wr))) == NULL) ||
        (out = malloc(n)) == NULL) {
        pool_free(wr, sizeof(*wr));
        unsent_sub(c, bytes);
        conn_close(c);
        return -1;
    }
    wr->bufs[0] = uv_buf_init(out, (unsigned)tls_conn_take(c->tls, out, n));
    wr->n = 1;
    wr->bytes = bytes;
    wr->c = c;
    wr->req.data = wr;
    if (uv_write(&wr->req, &c->u.stream, wr->bufs, 1, write_req_cb) != 0) {
        free(out);
        unsent_sub(c, bytes);
        pool_free(wr, sizeof(*wr));
        conn_close(c);
        return -1;
    }
    if (c->n_writes++ == 0)
        c->wrote_ms = uv_now(c->srv->loop);
    return 0;
}

/* The peer's address, for log lines. */
static void
peer_text(struct conn *c, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    int sl = sizeof(ss);

    snprintf(buf, len, "an unknown peer");
    if (uv_tcp_getpeername(&c->u.tcp, (struct sockaddr *)&ss, &sl) == 0)
        uv_ip_name((struct sockaddr *)&ss, buf, len);
}

/*
 * Decrypts what the TLS connection holds and dispatches it while the
 * limits allow (always, with force). A failed handshake or record is
 * counted, logged (rate-limited) and closes the connection once the alert
 * is sent: nothing of the peer is kept.
 */
static void
tls_pump(struct conn *c, int force)
{
    char *plain = c->srv->plainbuf, peer[64];
    size_t got;
    int rc;

    while (!c->closing && !c->want_close && c->stash == NULL &&
           (force || may_dispatch(c))) {
        rc = tls_conn_read(c->tls, plain, sizeof(c->srv->plainbuf), &got);
        if (!c->tls_up && tls_conn_established(c->tls)) {
            c->tls_up = 1;
            c->srv->n.tls_handshakes++;
            log_debug("connection %llu: %s", (unsigned long long)c->id,
                      tls_conn_version(c->tls));
        }
        if (tls_send(c, NULL, 0) != 0)
            return;
        if (rc == TLS_EWANT)
            return;
        if (rc == TLS_ECLOSED) {
            conn_close_after_replies(c);
            return;
        }
        if (rc != 0) {
            peer_text(c, peer, sizeof(peer));
            server_tls_failed(c->srv, peer, tls_conn_error(c->tls));
            frame_reader_close(&c->fr);
            conn_close_after_replies(c);
            return;
        }
        read_plain(c, plain, got, force);
        /* The plaintext of a hello held a token: it goes as the plain
         * path's buffer does (feed zeroes the hello's own bytes). */
        if (!c->spoke || c->wipe_frame)
            explicit_bzero(plain, got);
    }
}

void
conn_read(struct conn *c, char *buf, ssize_t nread)
{
    if (nread == UV_EOF) {
        /* The peer finished sending: it may still read the replies for
         * what it sent, as a producer that half-closes does. */
        finish_reading(c);
        return;
    }
    if (nread < 0) {
        conn_close(c);
        return;
    }
    if (c->tls != NULL) {
        /* Reading stops while plaintext waits in the stash, so at most a
         * read buffer beyond a record waits here. */
        if (tls_conn_feed(c->tls, buf, (size_t)nread) != 0) {
            conn_close(c);
            return;
        }
        tls_pump(c, 0);
    } else {
        read_plain(c, buf, (size_t)nread, 0);
    }
    if (!c->closing) {
        arm_timer(c);
        conn_update_reading(c);
    }
}

static void
read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    conn_read(stream->data, buf->base, nread);
}

void
conn_update_reading(struct conn *c)
{
    int want;

    if (c->closing || c->in_dispatch)
        return;
    if (c->stash != NULL && !c->want_close && may_dispatch(c)) {
        stash_drain(c, 0);
        if (c->closing)
            return;
        arm_timer(c);
    }
    if (c->tls != NULL && c->stash == NULL && !c->want_close &&
        may_dispatch(c) && tls_conn_has_input(c->tls)) {
        /* Records that arrived with the stash's bytes. */
        tls_pump(c, 0);
        if (c->closing)
            return;
        arm_timer(c);
    }
    want = !c->want_close && !c->srv->draining && c->stash == NULL &&
           may_dispatch(c);
    if (want && !c->reading) {
        if (uv_read_start(&c->u.stream, alloc_cb, read_cb) == 0)
            c->reading = 1;
        else
            conn_close(c);
    } else if (!want && c->reading) {
        uv_read_stop(&c->u.stream);
        c->reading = 0;
    }
}

/* A TCP peer must present a valid token in hello within
 * hello_timeout_ms, so unauthenticated peers cannot hold connection
 * slots. */
static uint64_t
hello_due(const struct conn *c)
{
    if (c->kind != CONN_TCP || c->level != ACCESS_NONE ||
        c->srv->cfg->hello_timeout_ms == 0)
        return 0;
    return c->accepted_ms + c->srv->cfg->hello_timeout_ms;
}

/* The idle timeout of c: a Unix peer that has sent no request yet gets no
 * more than hello_timeout_ms, as a TCP peer gets to authenticate, so peers
 * that connect and wait cannot hold slots for the whole idle timeout. A
 * producer says hello at once, and receiptctl sends its request at once;
 * after its first request a peer has the idle timeout. */
static uint32_t
idle_ms(const struct conn *c)
{
    const struct config *cfg = c->srv->cfg;

    if (c->kind == CONN_UNIX && !c->spoke && cfg->hello_timeout_ms > 0 &&
        (cfg->idle_timeout_ms == 0 ||
         cfg->hello_timeout_ms < cfg->idle_timeout_ms))
        return cfg->hello_timeout_ms;
    return cfg->idle_timeout_ms;
}

static int
hello_overdue(const struct conn *c)
{
    uint64_t due = hello_due(c);

    return due != 0 && uv_now(c->srv->loop) >= due;
}

/*
 * A deadline is due, but bytes the peer sent are waiting unread: the loop
 * itself was late (a stall, SIGSTOP, a paused VM), and libuv runs timers
 * before it polls. Looks again right after the read, once per arming, so
 * the peer is judged on what it sent, not on when we looked. Returns 1
 * when it did.
 */
static int
deadline_grace(struct conn *c)
{
    uv_os_fd_t fd;
    int waiting = 0;

    if (c->graced || !c->reading || uv_fileno(&c->u.handle, &fd) != 0 ||
        ioctl(fd, FIONREAD, &waiting) != 0 || waiting <= 0)
        return 0;
    c->graced = 1;
    uv_timer_start(&c->timer, timer_cb, 1, 0);
    return 1;
}

static void
timer_cb(uv_timer_t *t)
{
    struct conn *c = t->data;
    struct proto_err err;

    if (c->closing)
        return;
    if (hello_overdue(c)) {
        if (deadline_grace(c))
            return;
        log_info("closing a TCP connection that did not authenticate "
                 "within %lu ms",
                 (unsigned long)c->srv->cfg->hello_timeout_ms);
        conn_close(c);
        return;
    }
    if (c->n_writes > 0 && c->srv->cfg->idle_timeout_ms > 0 &&
        uv_now(c->srv->loop) - c->wrote_ms >= c->srv->cfg->idle_timeout_ms) {
        /* A peer that takes none of its replies for a whole idle timeout
         * would otherwise hold its connection slot and its unsent replies
         * forever: owed replies keep a connection from being idle, and a
         * full connection is not read, so no frame deadline runs either. */
        log_info("closing a connection that read none of its replies "
                 "within %lu ms",
                 (unsigned long)c->srv->cfg->idle_timeout_ms);
        conn_close(c);
        return;
    }
    if (frame_reader_in_frame(&c->fr) && c->frame_started_ms != 0) {
        if (!c->reading ||
            uv_now(c->srv->loop) <
                c->frame_started_ms + c->srv->cfg->frame_timeout_ms) {
            /* Not due yet (another deadline fired), or we stopped reading
             * this peer ourselves, so the delay is not the peer's: its
             * clock restarts rather than the timer spinning. */
            if (!c->reading)
                c->frame_started_ms = uv_now(c->srv->loop);
            arm_timer(c);
            return;
        }
        if (deadline_grace(c))
            return;
        proto_err_set(&err, PROTO_EMALFORMED, NULL,
                      "frame not complete within %lu ms; a frame must "
                      "arrive within frame_timeout_ms once it has begun",
                      (unsigned long)c->srv->cfg->frame_timeout_ms);
        framing_error(c, &err);
        return;
    }
    if (c->n_slots > 0 || c->n_writes > 0 || c->follow != NULL) {
        /* Replies are still owed, or rows as they come: not idle. */
        arm_timer(c);
        return;
    }
    if (deadline_grace(c))
        return;
    log_debug("closing an idle connection");
    conn_close(c);
}

static void
arm_timer(struct conn *c)
{
    const struct config *cfg = c->srv->cfg;
    uint64_t now = uv_now(c->srv->loop), due = 0, hello = hello_due(c);

    if (c->closing)
        return;
    c->graced = 0;
    if (c->want_close) {
        /* Nothing more is read, but the replies must still be taken: a
         * peer that half-closes (or breaks framing) and then reads nothing
         * would otherwise hold its slot and its replies for good. While
         * the writer or a query still owes a reply, the timer only looks
         * again an idle timeout later. */
        if (cfg->idle_timeout_ms > 0 && c->n_writes > 0)
            due = c->wrote_ms + cfg->idle_timeout_ms;
        else if (cfg->idle_timeout_ms > 0 && c->n_slots > 0)
            due = now + cfg->idle_timeout_ms;
        if (due == 0)
            uv_timer_stop(&c->timer);
        else
            uv_timer_start(&c->timer, timer_cb, due > now ? due - now : 1, 0);
        return;
    }
    if (frame_reader_in_frame(&c->fr)) {
        if (c->frame_started_ms == 0)
            c->frame_started_ms = now;
        due = c->frame_started_ms + cfg->frame_timeout_ms;
    } else {
        c->frame_started_ms = 0;
        if (idle_ms(c) > 0)
            due = now + idle_ms(c);
    }
    if (hello != 0 && (due == 0 || hello < due))
        due = hello;
    /* A peer that stopped taking its replies is closed an idle timeout
     * after the last write progress (timer_cb), even inside a frame. */
    if (c->n_writes > 0 && cfg->idle_timeout_ms > 0 &&
        (due == 0 || c->wrote_ms + cfg->idle_timeout_ms < due))
        due = c->wrote_ms + cfg->idle_timeout_ms;
    if (due == 0)
        uv_timer_stop(&c->timer);
    else
        uv_timer_start(&c->timer, timer_cb, due > now ? due - now : 1, 0);
}

void
conn_start(struct conn *c)
{
    c->id = c->srv->n.connections_total;
    if (c->kind == CONN_TCP && c->srv->tls != NULL &&
        (c->tls = tls_conn_new(c->srv->tls, NULL)) == NULL) {
        log_warnx("accept: out of memory for a TLS connection");
        conn_close(c);
        return;
    }
    if (log_enabled(LOG_DEBUG)) {
        struct sockaddr_storage ss;
        char host[64] = "a local peer";
        int len = sizeof(ss);

        if (c->kind == CONN_TCP &&
            uv_tcp_getpeername(&c->u.tcp, (struct sockaddr *)&ss, &len) == 0)
            uv_ip_name((struct sockaddr *)&ss, host, sizeof(host));
        log_debug("connection %llu opened: %s %s, %zu open",
                  (unsigned long long)c->id,
                  c->kind == CONN_TCP ? "TCP from" : "Unix,", host,
                  c->srv->n_conns);
    }
    arm_timer(c);
    conn_update_reading(c);
}

void
conn_close_after_replies(struct conn *c)
{
    if (c->closing)
        return;
    c->want_close = 1;
    frame_reader_close(&c->fr);
    arm_timer(c);
    conn_update_reading(c);
    maybe_finish(c);
}

void
conn_drain(struct conn *c)
{
    finish_reading(c);
}

struct conn_slot *
conn_slot_new(struct conn *c)
{
    struct conn_slot *s = pool_zalloc(sizeof(*s));

    if (s == NULL)
        return NULL;
    s->c = c;
    if (c->tail != NULL)
        c->tail->next = s;
    else
        c->head = s;
    c->tail = s;
    c->n_slots++;
    return s;
}

static void
update_full(struct conn *c)
{
    uint64_t cap = c->srv->cfg->max_unsent_bytes;

    /* Hysteresis: stop at the cap, resume below half of it, so a slow
     * reader does not flip reading on and off with every reply. */
    if (!c->full && c->unsent > cap)
        c->full = 1;
    else if (c->full && c->unsent <= cap / 2)
        c->full = 0;
    conn_update_reading(c);
}

static void
write_req_cb(uv_write_t *req, int status)
{
    struct wreq *wr = req->data;
    struct conn *c = wr->c;
    unsigned i;

    for (i = 0; i < wr->n; i++)
        free(wr->bufs[i].base);
    unsent_sub(c, wr->bytes);
    c->n_writes--;
    c->wrote_ms = uv_now(c->srv->loop);
    pool_free(wr, sizeof(*wr));
    if (status < 0) {
        conn_close(c);
        return;
    }
    if (!c->closing) {
        update_full(c);
        maybe_finish(c);
    }
    /* A follower catching up takes its next page once this one left. */
    if (!c->closing && c->follow != NULL)
        follow_writable(c);
}

/*
 * Writes wr at once when nothing is queued before it and the socket takes
 * it: most replies fit the socket's buffer, and a request through uv_write
 * costs libuv a callback and an epoll_ctl when it stops watching for
 * POLLOUT afterwards, a syscall a write. Returns 1 when all of it left (wr
 * is freed), 0 to queue wr with uv_write (what left already is cut from
 * it, the rest copied into one buffer), -1 when the connection failed.
 * Not for followers, whose next page follows a write's callback.
 */
static int
write_now(struct conn *c, struct wreq *wr)
{
    size_t total = 0, off, skip, i;
    char *rest;
    int rc;

    if (c->n_writes != 0 || c->follow != NULL)
        return 0;
    rc = uv_try_write(&c->u.stream, wr->bufs, wr->n);
    if (rc == UV_EAGAIN)
        return 0;
    if (rc < 0)
        return -1;
    for (i = 0; i < wr->n; i++)
        total += wr->bufs[i].len;
    if ((size_t)rc < total) {
        if ((rest = malloc(total - (size_t)rc)) == NULL)
            return -1;
        for (i = 0, off = 0, skip = (size_t)rc; i < wr->n; i++) {
            size_t len = wr->bufs[i].len;

            if (skip < len) {
                memcpy(rest + off, wr->bufs[i].base + skip, len - skip);
                off += len - skip;
                skip = 0;
            } else
                skip -= len;
            free(wr->bufs[i].base);
        }
        wr->bufs[0] = uv_buf_init(rest, (unsigned)off);
        wr->n = 1;
        return 0;
    }
    for (i = 0; i < wr->n; i++)
        free(wr->bufs[i].base);
    unsent_sub(c, wr->bytes);
    c->wrote_ms = uv_now(c->srv->loop);
    pool_free(wr, sizeof(*wr));
    return 1;
}

/* Writes every completed slot at the head of the FIFO. */
static void
flush(struct conn *c)
{
    struct wreq *wr = NULL;
    struct conn_slot *s;
    int rc;

    while ((s = c->head) != NULL && s->done) {
        c->head = s->next;
        if (c->head == NULL)
            c->tail = NULL;
        c->n_slots--;
        if (s->reply != NULL) {
            if (wr == NULL && (wr = pool_zalloc(sizeof(*wr))) == NULL) {
                free(s->reply);
                pool_free(s, sizeof(*s));
                conn_close(c);
                return;
            }
            wr->bytes += s->len;
            if (c->tls != NULL) {
                /* Encrypted into the TLS connection's output, sent below
                 * as one buffer. */
                rc = tls_conn_write(c->tls, s->reply, s->len);
                free(s->reply);
                if (rc != 0) {
                    unsent_sub(c, wr->bytes);
                    pool_free(wr, sizeof(*wr));
                    pool_free(s, sizeof(*s));
                    conn_close(c);
                    return;
                }
            } else {
                wr->bufs[wr->n] = uv_buf_init(s->reply, (unsigned)s->len);
            }
            wr->n++;
        }
        pool_free(s, sizeof(*s));
        if (wr != NULL &&
            (wr->n == WRITE_BATCH || c->head == NULL || !c->head->done)) {
            if (c->tls != NULL) {
                if (tls_send(c, wr, wr->bytes) != 0)
                    return;
                wr = NULL;
                continue;
            }
            wr->c = c;
            wr->req.data = wr;
            if ((rc = write_now(c, wr)) > 0) {
                wr = NULL;
                continue;
            }
            if (rc < 0 || uv_write(&wr->req, &c->u.stream, wr->bufs, wr->n,
                                   write_req_cb) != 0) {
                unsigned i;
                for (i = 0; i < wr->n; i++)
                    free(wr->bufs[i].base);
                unsent_sub(c, wr->bytes);
                pool_free(wr, sizeof(*wr));
                conn_close(c);
                return;
            }
            /* The peer's clock for taking its replies starts when the
             * first of them is handed to the stream. */
            if (c->n_writes++ == 0)
                c->wrote_ms = uv_now(c->srv->loop);
            wr = NULL;
        }
    }
}

void
conn_flush_corked(struct server *srv)
{
    struct conn *c;

    while ((c = srv->corked_conns) != NULL) {
        srv->corked_conns = c->corked_next;
        c->corked = 0;
        if (c->closing)
            continue;
        flush(c);
        if (!c->closing) {
            update_full(c);
            maybe_finish(c);
        }
    }
}

static void
maybe_finish(struct conn *c)
{
    if (c->closing || !c->want_close || c->n_slots != 0 || c->n_writes != 0)
        return;
    if (c->tls_up && !c->tls_bye) {
        /* A TLS session ends with close_notify, so the peer can tell the
         * end from a cut; the close follows its write. */
        c->tls_bye = 1;
        tls_conn_shutdown(c->tls);
        if (tls_send(c, NULL, 0) != 0 || c->n_writes > 0)
            return;
    }
    conn_close(c);
}

void
conn_slot_complete(struct conn_slot *s, char *reply, size_t len)
{
    struct conn *c = s->c;

    if (c->closing) {
        /* Unlink it: the FIFO of a closing connection only holds slots
         * that are still waiting for the writer or a query. */
        struct conn_slot **pp = &c->head;
        c->tail = NULL;
        while (*pp != NULL) {
            if (*pp == s) {
                *pp = s->next;
                continue;
            }
            c->tail = *pp;
            pp = &(*pp)->next;
        }
        free(reply);
        pool_free(s, sizeof(*s));
        c->n_slots--;
        maybe_free(c);
        return;
    }
    s->done = 1;
    s->reply = reply;
    s->len = reply != NULL ? len : 0;
    c->unsent += s->len;
    c->srv->unsent_bytes += s->len;
    if (s == c->head) {
        if (c->srv->corked) {
            if (!c->corked) {
                c->corked = 1;
                c->corked_next = c->srv->corked_conns;
                c->srv->corked_conns = c;
            }
            return;
        }
        flush(c);
    }
    if (!c->closing) {
        update_full(c);
        maybe_finish(c);
    }
}

struct delayed {
    uv_timer_t timer;
    struct conn_slot *slot;
    char *reply;
    size_t len;
};

static void
delayed_close_cb(uv_handle_t *h)
{
    free(h->data);
}

static void
delayed_cb(uv_timer_t *t)
{
    struct delayed *dl = t->data;

    conn_slot_complete(dl->slot, dl->reply, dl->len);
    uv_close((uv_handle_t *)&dl->timer, delayed_close_cb);
}

int
conn_slot_complete_after(struct conn_slot *s, char *reply, size_t len,
                         uint64_t delay_ms)
{
    struct delayed *dl = delay_ms > 0 ? calloc(1, sizeof(*dl)) : NULL;

    if (dl == NULL) {
        conn_slot_complete(s, reply, len);
        return delay_ms > 0 ? -1 : 0;
    }
    dl->slot = s;
    dl->reply = reply;
    dl->len = len;
    uv_timer_init(s->c->srv->loop, &dl->timer);
    dl->timer.data = dl;
    uv_timer_start(&dl->timer, delayed_cb, delay_ms, 0);
    return 0;
}
