/*
 * relay.c: a node's relay to a center (relay.h, docs/fleet.md).
 *
 * Threads: relay_start and relay_stop, the cursor's timer and the cursor
 * job's done run on the loop; everything else on the relay's own thread,
 * which owns the read-only store connection and the connection to the
 * center and runs at a lower priority (upstream.priority). They share the
 * mutex-guarded figures, the stop flag and the socket's descriptor (so
 * that relay_stop can cut a wait short with shutdown(2)), and the
 * acknowledged id (an atomic the loop's timer reads). The loop never
 * waits for the relay thread: it takes the figures' mutex only when free
 * (relay_get_stats), and no wake-up of the loop comes from the thread.
 *
 * Invariants: the cursor (relay_cursor in the store) never passes what
 * the center acknowledged after its COMMIT; the relay thread sends from
 * the highest id acknowledged, stored or not, so a restart resends at
 * most what was acknowledged after the cursor was last stored, and the
 * center cuts it (its per-origin mark). Up to upstream.window batches
 * are in flight (a ring of what each was, not its bytes), and a batch of
 * receipts behind an unanswered one says `follows`, so the center never
 * stores it without the one before. Memory is bounded by one batch:
 * RELAY_BATCH_RECORDS records and half the center's max_frame, and
 * replies are read with a 64 KiB frame limit.
 */
#include "relay.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <msgpack.h>

#include "clock.h"
#include "config.h"
#include "envelope.h"
#include "log.h"
#include "mpobj.h"
#include "net.h"
#include "receipt.h"
#include "server.h"
#include "store.h"
#include "store_relay.h"
#include "tls.h"
#include "writer.h"

#define TOKEN_MAX       4096
#define REPLY_FRAME_MAX (64u << 10)
/* The most encoded records a batch holds, whatever the center allows. */
#define RELAY_BATCH_BYTES_MAX (8u << 20)
/* How long a batch read waits for what it read to be durable (writer.c,
 * pipelined durability: a sync takes milliseconds) before it is read
 * again later. */
#define RELAY_DURABLE_WAIT_MS 1000u
/* How often an idle relay looks for new rows, and refreshes its backlog
 * figures while busy. */
#define IDLE_POLL_MS 100
/* The relay thread's nice value at upstream.priority "low", where
 * SCHED_IDLE is refused or could not be lifted, and once lifted. */
#define RELAY_NICE 10
/* How long a relay thread at SCHED_IDLE may stay runnable with a core
 * less than a tenth of the time before the loop lifts it to RELAY_NICE
 * (starve_check). */
#define RELAY_STARVED_MS 5000
#define BACKLOG_EVERY_MS 500
/* Backlog figures older than this, while the relay thread is at
 * SCHED_IDLE, are read again by the loop (backlog_for_starved). */
#define BACKLOG_STALE_MS (2 * BACKLOG_EVERY_MS)
/* The most rows the loop counts for that read, past which the ids'
 * difference stands for the count: 10,000 rows read in about 0.1-0.2 ms
 * here, 100,000 (the thread's bound) in 10 ms once they are out of
 * SQLite's cache, a stall of every connection. */
#define LOOP_COUNT_MAX 10000
/* How often, at most, the cursor is stored while batches are
 * acknowledged: each store is a writer job, and with nothing else queued
 * a commit and a sync of its own. A crash loses at most this much of the
 * cursor's advance, which the center cuts when it comes again. */
#define RELAY_CURSOR_EVERY_MS 250

/* A batch sent and not answered yet. */
/* The streams, in the order a round sends them: a retained value names a
 * plan, so it follows the plans. */
enum stream { STREAM_RECEIPTS, STREAM_PLANS, STREAM_RETENTION };

struct flight {
    uint64_t id;   /* the frame's */
    uint64_t from; /* its from_id */
    uint64_t last; /* its last record's id */
    uint32_t n;
    int stream; /* enum stream */
};

struct relay {
    uv_loop_t *loop;
    struct server *srv;
    /* Stores the cursor every RELAY_CURSOR_EVERY_MS when it moved. The
     * loop looks rather than being woken: a uv_async_send from a thread
     * of low priority, preempted inside it, leaves libuv's loop spinning
     * until that thread runs again. */
    uv_timer_t cursor_timer;
    uv_thread_t thread;
    int started;

    /* Copied settings. */
    char **endpoints;
    size_t n_endpoints;
    char token[TOKEN_MAX + 1];
    char name[256];
    char *db_path;
    struct tls_ctx *tls; /* NULL: plain text */
    enum { PRIO_IDLE, PRIO_LOW, PRIO_NORMAL } priority;

    uv_mutex_t mu; /* guards what follows, up to the loop's part */
    uv_cond_t cv;
    int stop;
    /* The relay thread's priority, once lowered: its id and its nice
     * value before (restore_priority). */
    int lowered;
    pid_t tid;
    int nice_before;
    int idle;   /* the thread is at SCHED_IDLE now */
    int lifted; /* the loop lifted it to RELAY_NICE (starve_check) */
    int fd;     /* the connection's socket while it is open, else -1 */
    struct relay_stats st;
    int64_t oldest_at;     /* received_at of the oldest undelivered;
                              INT64_MIN when none waits */
    uint64_t backlog_at;   /* when st's backlog was read (monotonic ms) */
    uint64_t backlog_mean; /* the relay thread's bytes a record */

    _Atomic uint64_t acked;       /* the center's last acknowledged id */
    _Atomic uint64_t acked_plans; /* the same for the plans stream */
    /* And for retained values. */
    _Atomic uint64_t acked_retention;

    /* Loop thread. */
    uint64_t stored; /* the cursor as the writer last stored it */
    uint64_t stored_plans;
    uint64_t stored_retention;
    int job_running; /* a cursor job is with the writer */
    int stopping;    /* relay_stop ran */
    int handles;     /* cursor_timer not closed yet */
    /* starve_check: since when the relay thread has been starved (0:
     * not looked at yet), and its last look (when, the time it had run). */
    uint64_t starve_from_ms, starve_at_ms, starve_run_ns;
    int waits_for_core;         /* at that look: SCHED_IDLE and runnable */
    struct relay_stats st_seen; /* relay_get_stats' last copy, and */
    int64_t oldest_seen;        /* oldest_at then */
    /* backlog_for_starved's read-only handle, opened when first needed;
     * lro_failed: it could not be (said once). */
    struct store *lro;
    int lro_failed;

    /* Relay thread. */
    struct store *ro;
    struct net_conn conn;
    int connected;
    size_t ep;            /* the endpoint in use or to try next */
    uint64_t backoff;     /* the current bound, ms; 0 after a success */
    uint64_t enc_bytes;   /* encoded bytes and records read, for the */
    uint64_t enc_records; /* backlog's estimate */
    uint64_t backlog_ms;
    uint64_t plans_paused_until; /* monotonic ms: the center refused plans */
    uint64_t retention_paused_until; /* the same for retained values */
    uint64_t rng;
    /* Batches in flight: a ring of `window` from head, of which
     * n_receipts of receipts, plans_out (0 or 1) of plans and
     * retention_out (0 or 1) of retained values. */
    struct flight *flights;
    uint32_t window, head, n_flight, n_receipts;
    int plans_out, retention_out;
    uint64_t sent; /* the last receipt id of the last batch sent */
    /* The backoff's bound for a center that answered unavailable or
     * overloaded, ms; 0 after a batch stored. */
    uint64_t busy_backoff;
};

/* xorshift64*: the jitter needs no more. */
static uint64_t
rnd(struct relay *r)
{
    r->rng ^= r->rng >> 12;
    r->rng ^= r->rng << 25;
    r->rng ^= r->rng >> 27;
    return r->rng * 2685821657736338717ull;
}

static int
stopping(struct relay *r)
{
    int s;

    uv_mutex_lock(&r->mu);
    s = r->stop;
    uv_mutex_unlock(&r->mu);
    return s;
}

/* Waits ms or until relay_stop; returns 1 when stopping. */
static int
nap(struct relay *r, uint64_t ms)
{
    uint64_t until = mono_ms() + ms, now;
    int s;

    uv_mutex_lock(&r->mu);
    while (!r->stop && (now = mono_ms()) < until)
        uv_cond_timedwait(&r->cv, &r->mu, (until - now) * 1000000u);
    s = r->stop;
    uv_mutex_unlock(&r->mu);
    return s;
}

static void backlog(struct relay *r, int force);

static void set_error(struct relay *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
set_error(struct relay *r, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    int changed;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    uv_mutex_lock(&r->mu);
    changed = strcmp(r->st.error, msg) != 0;
    snprintf(r->st.error, sizeof(r->st.error), "%s", msg);
    r->st.failures++;
    uv_mutex_unlock(&r->mu);
    /* The same failure again (a center that stays down) is logged once. */
    if (changed)
        log_warnx("relay: %s", msg);
}

/* ---- The connection. ---- */

static void drop_window(struct relay *r);

static void
hang_up(struct relay *r)
{
    if (!r->connected && r->conn.rbuf == NULL)
        return;
    uv_mutex_lock(&r->mu);
    r->fd = -1;
    r->st.connected = 0;
    uv_mutex_unlock(&r->mu);
    net_close(&r->conn);
    r->connected = 0;
    drop_window(r);
}

/* A TCP connection to hostport within RELAY_CONNECT_TIMEOUT_MS, given to
 * r->conn; 0 or -1 with msg set. */
static int
dial(struct relay *r, const char *hostport, char *msg, size_t len)
{
    char host[256];
    const char *colon = strrchr(hostport, ':'), *h = hostport;
    size_t hlen = colon != NULL ? (size_t)(colon - hostport) : 0;
    struct addrinfo hints, *res = NULL, *ai;
    int fd = -1, rc, e = ETIMEDOUT, flags;

    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    if (colon == NULL || hlen == 0 || hlen >= sizeof(host)) {
        snprintf(msg, len, "%.100s: expected HOST:PORT", hostport);
        return -1;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if ((rc = getaddrinfo(host, colon + 1, &hints, &res)) != 0) {
        snprintf(msg, len, "cannot resolve %.100s: %.100s", hostport,
                 gai_strerror(rc));
        return -1;
    }
    for (ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        uint64_t until = mono_ms() + RELAY_CONNECT_TIMEOUT_MS;

        fd = socket(ai->ai_family,
                    ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    ai->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 &&
            errno != EINPROGRESS) {
            e = errno;
            close(fd);
            fd = -1;
            continue;
        }
        /* In slices, so that relay_stop need not wait for the timeout. */
        for (;;) {
            struct pollfd p = { .fd = fd, .events = POLLOUT };
            socklen_t elen = sizeof(e);

            if (poll(&p, 1, 100) > 0) {
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &elen) != 0)
                    e = errno;
                break;
            }
            if (stopping(r) || mono_ms() >= until) {
                e = ETIMEDOUT;
                break;
            }
        }
        if (e != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(msg, len, "cannot connect to %.100s: %.100s", hostport,
                 strerror(e));
        return -1;
    }
    flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        close(fd);
        snprintf(msg, len, "%.100s: cannot set up the socket", hostport);
        return -1;
    }
    /* net_adopt closes fd when it fails. */
    if (net_adopt(&r->conn, fd, hostport, RELAY_REPLY_TIMEOUT_MS, msg, len))
        return -1;
    r->conn.tcp = 1;
    /* Replies to a relay are small: a center may not make this node
     * buffer more. */
    frame_reader_close(&r->conn.fr);
    frame_reader_init(&r->conn.fr, REPLY_FRAME_MAX);
    uv_mutex_lock(&r->mu);
    r->fd = fd;
    uv_mutex_unlock(&r->mu);
    return 0;
}

/* hello {protocol, source: the node's name, token, relay: true}. */
static int
hello(struct relay *r, char *msg, size_t len)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct net_reply rep;
    const msgpack_object *v;
    uint64_t id, u;
    size_t start;
    int rc;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    start = net_frame_begin(&r->conn, &sb, &pk, PROTO_OP_HELLO, 1, &id);
    if (start == (size_t)-1 || msgpack_pack_map(&pk, 4) != 0 ||
        envelope_pack_cstr(&pk, "protocol") != 0 ||
        msgpack_pack_uint64(&pk, PROTO_VERSION) != 0 ||
        envelope_pack_cstr(&pk, "source") != 0 ||
        envelope_pack_cstr(&pk, r->name) != 0 ||
        envelope_pack_cstr(&pk, "token") != 0 ||
        envelope_pack_cstr(&pk, r->token) != 0 ||
        envelope_pack_cstr(&pk, "relay") != 0 || msgpack_pack_true(&pk) != 0 ||
        net_frame_finish(&r->conn, &sb, start) != 0) {
        if (sb.data != NULL)
            explicit_bzero(sb.data, sb.size);
        msgpack_sbuffer_destroy(&sb);
        snprintf(msg, len, "cannot build hello");
        return -1;
    }
    rc = net_call(&r->conn, &sb, id, &rep, msg, len);
    /* The frame held the token. */
    explicit_bzero(sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    if (rc == 0 && !rep.r.ok) {
        snprintf(msg, len, "%.64s refused hello: %.160s", r->conn.peer,
                 rep.r.err.message);
        rc = -1;
    }
    if (rc == 0 && rep.r.result != NULL &&
        rep.r.result->type == MSGPACK_OBJECT_MAP) {
        v = mpobj_map_get(rep.r.result, "max_frame", NULL);
        if (v != NULL && mpobj_uint(v, FRAME_MAX_CEILING, &u, NULL) == 0 &&
            u >= 4096)
            r->conn.max_frame = (uint32_t)u;
        v = mpobj_map_get(rep.r.result, "max_batch", NULL);
        if (v != NULL && mpobj_uint(v, UINT32_MAX, &u, NULL) == 0 && u > 0)
            r->conn.max_batch = (uint32_t)u;
    }
    net_reply_free(&rep);
    return rc == 0 ? 0 : -1;
}

/* Connects to the endpoint r->ep, after the backoff; on failure the next
 * attempt goes to the next endpoint. Returns 0 when connected, -1 when
 * not (try again), 1 when stopping. */
static int nap_watching(struct relay *r, uint64_t ms);

static int
connect_next(struct relay *r)
{
    const char *ep = r->endpoints[r->ep];
    char msg[256];

    /* While the center is away the backlog grows: keep its figures
     * current through every wait. */
    backlog(r, 1);
    if (r->backoff > 0 && nap_watching(r, rnd(r) % (r->backoff + 1)))
        return 1;
    uv_mutex_lock(&r->mu);
    snprintf(r->st.endpoint, sizeof(r->st.endpoint), "%s", ep);
    uv_mutex_unlock(&r->mu);
    if (dial(r, ep, msg, sizeof(msg)) != 0)
        goto fail;
    if (r->tls != NULL &&
        net_start_tls(&r->conn, r->tls, ep, msg, sizeof(msg)) != 0)
        goto fail;
    if (hello(r, msg, sizeof(msg)) != 0)
        goto fail;
    r->connected = 1;
    r->backoff = 0;
    uv_mutex_lock(&r->mu);
    r->st.connected = 1;
    r->st.connects++;
    r->st.error[0] = '\0';
    uv_mutex_unlock(&r->mu);
    log_info("relay: relaying to %s as \"%s\"%s", ep, r->name,
             r->tls != NULL ? " over TLS" : "");
    return 0;
fail:
    hang_up(r);
    if (stopping(r))
        return 1;
    set_error(r, "%s", msg);
    r->ep = (r->ep + 1) % r->n_endpoints;
    r->backoff = r->backoff == 0 ? RELAY_BACKOFF_MIN_MS : r->backoff * 2;
    if (r->backoff > RELAY_BACKOFF_MAX_MS)
        r->backoff = RELAY_BACKOFF_MAX_MS;
    return -1;
}

/* ---- Batches. ---- */

struct batch {
    msgpack_sbuffer *sb; /* the records go after sb's first base bytes */
    size_t base;
    msgpack_packer pk;
    size_t limit; /* bytes of records */
    uint32_t n;
    uint64_t last; /* id of the last record packed */
    /* Retention: the plans the center acknowledged (acked_plans). */
    uint64_t plans_upto;
};

/*
 * The batch packer's writer. Encoding a receipt is some ninety writes of
 * one to nine bytes (names, headers, values); msgpack_sbuffer_write
 * copies each with a call to memcpy, which was the largest part of the
 * relay's own time. Copies of the sizes msgpack writes are inlined here;
 * growing the buffer is left to msgpack.
 */
static int
put_cb(void *data, const char *buf, size_t len)
{
    msgpack_sbuffer *sb = data;
    char *d;

    if (sb->alloc - sb->size < len)
        return msgpack_sbuffer_write(data, buf, len);
    d = sb->data + sb->size;
    switch (len) {
    case 1:
        d[0] = buf[0];
        break;
    case 2:
        memcpy(d, buf, 2);
        break;
    case 3:
        memcpy(d, buf, 3);
        break;
    case 5:
        memcpy(d, buf, 5);
        break;
    case 9:
        memcpy(d, buf, 9);
        break;
    default:
        memcpy(d, buf, len);
    }
    sb->size += len;
    return 0;
}

/* store_relay_read's callback: one row as [id, received_at, source,
 * seq|nil, payload], the payload in the compact (array) form of
 * rmp-serde, which a center decodes as a producer's, or the map form when
 * the receipt kept unknown keys. */
static int
pack_cb(void *arg, const struct store_row *row)
{
    struct batch *b = arg;
    msgpack_packer *pk = &b->pk;

    if (b->n > 0 && b->sb->size - b->base >= b->limit)
        return 1; /* full: the row waits for the next batch */
    if (msgpack_pack_array(pk, 5) != 0 ||
        msgpack_pack_uint64(pk, (uint64_t)row->receipt_id) != 0 ||
        msgpack_pack_int64(pk, row->received_at) != 0 ||
        msgpack_pack_str_with_body(pk, row->source.ptr, row->source.len) != 0 ||
        (row->has_seq ? msgpack_pack_uint64(pk, row->seq)
                      : msgpack_pack_nil(pk)) != 0 ||
        receipt_encode_compact(&row->r, pk) != 0)
        return PROTO_ENOMEM;
    b->n++;
    b->last = (uint64_t)row->receipt_id;
    return 0;
}

/* store_relay_read_plans' callback: [id, registered_at, source, nil,
 * plan], the plan in its canonical form (a plan body as a producer sends
 * it). */
static int
pack_plan_cb(void *arg, const struct store_relay_plan *p)
{
    struct batch *b = arg;
    msgpack_packer *pk = &b->pk;

    if (b->n > 0 && b->sb->size - b->base >= b->limit)
        return 1;
    if (msgpack_pack_array(pk, 5) != 0 ||
        msgpack_pack_uint64(pk, (uint64_t)p->id) != 0 ||
        msgpack_pack_int64(pk, p->registered_at) != 0 ||
        msgpack_pack_str_with_body(pk, p->source.ptr, p->source.len) != 0 ||
        msgpack_pack_nil(pk) != 0 ||
        msgpack_sbuffer_write(b->sb, p->canonical, p->len) != 0)
        return PROTO_ENOMEM;
    b->n++;
    b->last = (uint64_t)p->id;
    return 0;
}

/* store_relay_read_retained's callback: [id, retained_at, "", nil,
 * {prepared_plan_id, graph_hash, value}], the value as stored (a
 * RetainedCompletionValue, which holds its value_id). A value whose plan
 * the center has not acknowledged yet ends the batch: it waits for the
 * plans stream, so that the center knows the plan when it comes. */
static int
pack_retained_cb(void *arg, const struct store_relay_retained *v)
{
    struct batch *b = arg;
    msgpack_packer *pk = &b->pk;

    if ((uint64_t)v->plan_id > b->plans_upto ||
        (b->n > 0 && b->sb->size - b->base >= b->limit))
        return 1;
    if (msgpack_pack_array(pk, 5) != 0 ||
        msgpack_pack_uint64(pk, (uint64_t)v->id) != 0 ||
        msgpack_pack_int64(pk, v->retained_at) != 0 ||
        msgpack_pack_str(pk, 0) != 0 || msgpack_pack_nil(pk) != 0 ||
        msgpack_pack_map(pk, 3) != 0 ||
        envelope_pack_cstr(pk, "prepared_plan_id") != 0 ||
        msgpack_pack_str_with_body(pk, v->plan.ptr, v->plan.len) != 0 ||
        envelope_pack_cstr(pk, "graph_hash") != 0 ||
        msgpack_pack_str_with_body(pk, v->graph.ptr, v->graph.len) != 0 ||
        envelope_pack_cstr(pk, "value") != 0 ||
        msgpack_sbuffer_write(b->sb, v->value, v->len) != 0)
        return PROTO_ENOMEM;
    b->n++;
    b->last = (uint64_t)v->id;
    return 0;
}

static _Atomic uint64_t *
stream_acked(struct relay *r, int k)
{
    return k == STREAM_PLANS       ? &r->acked_plans
           : k == STREAM_RETENTION ? &r->acked_retention
                                   : &r->acked;
}

static const char *
stream_name(int k)
{
    return k == STREAM_PLANS       ? STORE_RELAY_PLANS
           : k == STREAM_RETENTION ? STORE_RELAY_RETENTION
                                   : STORE_RELAY_RECEIPTS;
}

/* The encoded bytes of up to 100 records past after, read with st, into
 * *bytes and their number into *n: 0, or -1 when none was read. */
static int
sample_read(struct store *st, uint64_t after, uint64_t *bytes, uint64_t *n)
{
    struct proto_err err;
    struct batch b;
    msgpack_sbuffer sb;
    uint64_t last;
    int rc = -1;

    memset(&b, 0, sizeof(b));
    msgpack_sbuffer_init(&sb);
    b.sb = &sb;
    msgpack_packer_init(&b.pk, &sb, msgpack_sbuffer_write);
    b.limit = SIZE_MAX;
    if (store_relay_read(st, after, 100, SIZE_MAX, pack_cb, &b, &last, &err) ==
            0 &&
        b.n > 0) {
        *bytes = sb.size;
        *n = b.n;
        rc = 0;
    }
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

/* Before anything was sent (the center away since start), the mean
 * encoded size of what waits comes from a read of its first records. */
static void
sample(struct relay *r)
{
    uint64_t bytes, n;

    if (sample_read(r->ro, atomic_load(&r->acked), &bytes, &n) == 0) {
        r->enc_bytes += bytes;
        r->enc_records += n;
    }
}

/* The backlog's figures for stats, read at now (monotonic ms) with mean
 * bytes a record; with mu held. */
static void
set_backlog(struct relay *r, const struct store_relay_backlog *bl,
            uint64_t mean, uint64_t now)
{
    r->st.acked_id = atomic_load(&r->acked);
    r->st.backlog_records = bl->records;
    r->st.backlog_bytes = bl->records * mean;
    r->oldest_at = bl->oldest_at;
    r->backlog_at = now;
    r->backlog_mean = mean;
}

static void
backlog(struct relay *r, int force)
{
    struct store_relay_backlog bl;
    struct proto_err err;
    uint64_t now = mono_ms(), mean;

    if (!force && now - r->backlog_ms < BACKLOG_EVERY_MS)
        return;
    r->backlog_ms = now;
    if (store_relay_backlog(r->ro, atomic_load(&r->acked),
                            STORE_RELAY_COUNT_MAX, &bl, &err) != 0)
        return;
    if (r->enc_records == 0 && bl.records > 0)
        sample(r);
    mean = r->enc_records ? r->enc_bytes / r->enc_records : 0;
    uv_mutex_lock(&r->mu);
    set_backlog(r, &bl, mean, now);
    uv_mutex_unlock(&r->mu);
}

/*
 * Reads the next batch of the stream past `from` and sends it (with
 * `follows` when a batch before it on this connection is not answered
 * yet); returns 1 with *f, 0 when there was nothing to send, -1 when the
 * connection failed, -2 when the batch cannot be sent (wait before
 * trying again).
 */
static int
send_batch(struct relay *r, int k, uint64_t from, int follows, struct flight *f)
{
    static const unsigned char array32[5] = { 0xdd, 0, 0, 0, 0 };
    const char *stream = stream_name(k);
    struct proto_err err;
    struct batch b;
    msgpack_sbuffer fs;
    msgpack_packer fpk;
    char msg[256];
    size_t start;
    uint64_t last;
    uint32_t max = RELAY_BATCH_RECORDS;
    unsigned char *count;
    int rc;

    if (r->conn.max_batch < max)
        max = r->conn.max_batch;
    /* The frame's head, then the records packed straight after it, under
     * an array header whose count is written once they are read. */
    msgpack_sbuffer_init(&fs);
    msgpack_packer_init(&fpk, &fs, msgpack_sbuffer_write);
    start = net_frame_begin(&r->conn, &fs, &fpk, PROTO_OP_RELAY, 1, &f->id);
    if (start == (size_t)-1 || msgpack_pack_map(&fpk, follows ? 4 : 3) != 0 ||
        envelope_pack_cstr(&fpk, "stream") != 0 ||
        envelope_pack_cstr(&fpk, stream) != 0 ||
        envelope_pack_cstr(&fpk, "from_id") != 0 ||
        msgpack_pack_uint64(&fpk, from) != 0 ||
        (follows && (envelope_pack_cstr(&fpk, "follows") != 0 ||
                     msgpack_pack_true(&fpk) != 0)) ||
        envelope_pack_cstr(&fpk, "records") != 0 ||
        msgpack_sbuffer_write(&fs, (const char *)array32, sizeof(array32)) !=
            0) {
        msgpack_sbuffer_destroy(&fs);
        set_error(r, "out of memory for a batch");
        return -2;
    }
    memset(&b, 0, sizeof(b));
    b.sb = &fs;
    b.base = fs.size;
    msgpack_packer_init(&b.pk, &fs, put_cb);
    /* The center's max_frame is its word: the node's memory is bounded
     * by its own cap as well. */
    b.limit = r->conn.max_frame / 2 < RELAY_BATCH_BYTES_MAX
                  ? r->conn.max_frame / 2
                  : RELAY_BATCH_BYTES_MAX;
    b.plans_upto = atomic_load(&r->acked_plans);
    rc = k == STREAM_PLANS
             ? store_relay_read_plans(r->ro, from, max, SIZE_MAX, pack_plan_cb,
                                      &b, &last, &err)
         : k == STREAM_RETENTION
             ? store_relay_read_retained(r->ro, from, max, SIZE_MAX,
                                         pack_retained_cb, &b, &last, &err)
             : store_relay_read(r->ro, from, max, SIZE_MAX, pack_cb, &b, &last,
                                &err);
    if (rc < 0) {
        msgpack_sbuffer_destroy(&fs);
        set_error(r, "cannot read the store: %s", err.message);
        return -2;
    }
    if (b.n == 0) {
        msgpack_sbuffer_destroy(&fs);
        return 0;
    }
    /* Read committed is not yet durable when the writer syncs after
     * its commits: the center must never hold what a power cut could
     * take from the node, whose ids would then be given out again. */
    if (r->srv->writer != NULL &&
        writer_wait_durable(r->srv->writer, RELAY_DURABLE_WAIT_MS) != 0) {
        msgpack_sbuffer_destroy(&fs);
        return 0;
    }
    if (k == STREAM_RECEIPTS) {
        r->enc_bytes += fs.size - b.base;
        r->enc_records += b.n;
    }
    count = (unsigned char *)fs.data + b.base - 4;
    count[0] = (unsigned char)(b.n >> 24);
    count[1] = (unsigned char)(b.n >> 16);
    count[2] = (unsigned char)(b.n >> 8);
    count[3] = (unsigned char)b.n;
    if (net_frame_finish(&r->conn, &fs, start) != 0) {
        msgpack_sbuffer_destroy(&fs);
        set_error(r,
                  "receipt %llu does not fit the center's max_frame "
                  "(%lu bytes)",
                  (unsigned long long)(from + 1),
                  (unsigned long)r->conn.max_frame);
        return -2;
    }
    rc = net_send(&r->conn, fs.data, fs.size, msg, sizeof(msg));
    msgpack_sbuffer_destroy(&fs);
    if (rc != 0) {
        set_error(r, "%s", msg);
        return -1;
    }
    f->from = from;
    f->last = b.last;
    f->n = b.n;
    return 1;
}

/*
 * Reads the reply to the batch f, the oldest in flight, and moves the
 * stream's acknowledged id; returns 1, -1 when the connection failed or
 * the reply is not f's, -2 when the center refused the batch or answered
 * what it cannot have stored, -3 when it could not store it now
 * (unavailable: its database away; overloaded).
 */
static int
take_reply(struct relay *r, int k, const struct flight *f)
{
    _Atomic uint64_t *acked = stream_acked(r, k);
    const char *stream = stream_name(k);
    struct net_reply rep;
    struct proto_err err;
    const msgpack_object *v;
    char msg[256];
    uint64_t committed, last = f->last;
    int rc;

    rc = net_recv(&r->conn, &rep, msg, sizeof(msg));
    if (rc != 0) {
        net_reply_free(&rep);
        set_error(r, "%s", msg);
        return -1;
    }
    if (!rep.r.has_id || rep.r.id != f->id) {
        /* A batch behind f refused before f was answered (checked on the
         * center's loop, f still in its writer): the window is dropped
         * and sent again from the cursor, f first. */
        set_error(r, "%s answered out of order%s%s", r->conn.peer,
                  rep.r.ok ? "" : ": ", rep.r.ok ? "" : rep.r.err.message);
        net_reply_free(&rep);
        return -1;
    }
    if (!rep.r.ok) {
        int busy = rep.r.err.code == PROTO_EUNAVAILABLE ||
                   rep.r.err.code == PROTO_EOVERLOADED;

        set_error(
            r, "%s refused a batch from id %llu: %s%s%s: %s", r->conn.peer,
            (unsigned long long)f->from, proto_code_name(rep.r.err.code),
            rep.r.err.path[0] ? " at " : "", rep.r.err.path, rep.r.err.message);
        net_reply_free(&rep);
        return busy ? -3 : -2;
    }
    v = rep.r.result != NULL && rep.r.result->type == MSGPACK_OBJECT_MAP
            ? mpobj_map_get(rep.r.result, "committed_id", NULL)
            : NULL;
    if (v == NULL || mpobj_uint(v, INT64_MAX, &committed, NULL) != 0) {
        net_reply_free(&rep);
        set_error(r, "%s answered a batch without committed_id", r->conn.peer);
        return -1;
    }
    net_reply_free(&rep);
    if (committed > last) {
        uint64_t newest;

        /* The center had more of this origin than the batch: batches it
         * committed whose replies were lost before this node stored its
         * cursor (a kill -9, a failover), sent again in smaller batches.
         * Everything up to committed is at the center, in order, so the
         * cursor may move there, provided this store holds ids that
         * high: otherwise the name is another node's too, or this store
         * was replaced, and the cursor must not move on a guess. */
        if (store_relay_last_id(r->ro, stream, &newest, &err) != 0 ||
            committed > newest) {
            set_error(r,
                      "%s says origin \"%s\" is committed up to id %llu, "
                      "above this store's newest receipt; not relaying "
                      "until that is resolved (two nodes with one name?)",
                      r->conn.peer, r->name, (unsigned long long)committed);
            return -2;
        }
    } else if (committed < last) {
        /* Every record above the mark is stored: a center that answers
         * less did not store the batch as it says. */
        set_error(r, "%s answered committed_id %llu to a batch ending at %llu",
                  r->conn.peer, (unsigned long long)committed,
                  (unsigned long long)last);
        return -2;
    }
    /* Never back: a batch behind a resend may answer a lower mark than
     * the one before it did. */
    if (committed > atomic_load(acked))
        atomic_store(acked, committed);
    uv_mutex_lock(&r->mu);
    if (k == STREAM_PLANS) {
        r->st.plans_relayed += f->n;
    } else if (k == STREAM_RETENTION) {
        r->st.values_relayed += f->n;
    } else {
        r->st.acked_id = atomic_load(acked);
        r->st.relayed += f->n;
    }
    r->st.batches++;
    r->st.last_success_ms = unix_ms();
    r->st.error[0] = '\0';
    uv_mutex_unlock(&r->mu);
    return 1;
}

/* Forgets every batch in flight (after a failure, or a hang-up): the next
 * connection starts again from what was acknowledged. */
static void
drop_window(struct relay *r)
{
    r->n_flight = r->n_receipts = 0;
    r->plans_out = r->retention_out = 0;
}

/* A batch of plans or of retained values, one of each stream at a time
 * (few, and named by what follows them): sent when none of its stream is
 * out and the center has not paused it. Returns -1 when the connection
 * failed, else 0. */
static int
send_single(struct relay *r, int k, int *out, uint64_t *paused_until)
{
    struct flight *f;
    int rc;

    if (*out || r->n_flight >= r->window || mono_ms() < *paused_until)
        return 0;
    f = &r->flights[(r->head + r->n_flight) % r->window];
    rc = send_batch(r, k, atomic_load(stream_acked(r, k)), 0, f);
    if (rc == -2)
        *paused_until = mono_ms() + RELAY_BACKOFF_MAX_MS;
    if (rc == 1) {
        f->stream = k;
        *out = 1;
        r->n_flight++;
    }
    return rc == -1 ? -1 : 0;
}

/*
 * One step of the relay on a connection: sends what fits the window,
 * then takes the oldest batch's reply. A batch of plans and one of
 * retained values go first when none of theirs is out (send_single),
 * then batches of receipts past the last one sent while fewer than
 * r->window batches are unanswered; replies come in the order sent.
 * Returns 1 when a batch was answered, 0 when nothing waits and nothing
 * is in flight, -1 when the connection failed (hang up and reconnect),
 * -2 when the center refused a batch of receipts (wait before trying
 * again), -3 when it could not store one now (the next endpoint, after a
 * backoff of its own). After a failure nothing is in flight: the next
 * connection starts from what was acknowledged, and the center cuts what
 * it has. A center that refuses plans or retained values (one older than
 * the stream) pauses that stream alone.
 */
static int
relay_window(struct relay *r)
{
    struct flight *f;
    int rc, k;

    if (r->n_receipts == 0)
        r->sent = atomic_load(&r->acked);
    if (send_single(r, STREAM_PLANS, &r->plans_out, &r->plans_paused_until) <
            0 ||
        send_single(r, STREAM_RETENTION, &r->retention_out,
                    &r->retention_paused_until) < 0) {
        drop_window(r);
        return -1;
    }
    while (r->n_flight < r->window) {
        f = &r->flights[(r->head + r->n_flight) % r->window];
        rc = send_batch(r, STREAM_RECEIPTS, r->sent, r->n_receipts > 0, f);
        if (rc < 0) {
            drop_window(r);
            return rc;
        }
        if (rc == 0)
            break;
        f->stream = STREAM_RECEIPTS;
        r->sent = f->last;
        r->n_flight++;
        r->n_receipts++;
    }
    if (r->n_flight == 0)
        return 0;
    f = &r->flights[r->head];
    k = f->stream;
    rc = take_reply(r, k, f);
    if (rc == -2 && k != STREAM_RECEIPTS) {
        /* The connection is fine: receipts go on. */
        if (k == STREAM_PLANS)
            r->plans_paused_until = mono_ms() + RELAY_BACKOFF_MAX_MS;
        else
            r->retention_paused_until = mono_ms() + RELAY_BACKOFF_MAX_MS;
        rc = 1;
    }
    if (rc < 0) {
        drop_window(r);
        return rc;
    }
    r->head = (r->head + 1) % r->window;
    r->n_flight--;
    if (k == STREAM_PLANS)
        r->plans_out = 0;
    else if (k == STREAM_RETENTION)
        r->retention_out = 0;
    else
        r->n_receipts--;
    return 1;
}

/* nap(), refreshing the backlog's figures every BACKLOG_EVERY_MS. */
static int
nap_watching(struct relay *r, uint64_t ms)
{
    uint64_t until = mono_ms() + ms, now;

    while ((now = mono_ms()) < until) {
        if (nap(r, until - now < BACKLOG_EVERY_MS ? until - now
                                                  : BACKLOG_EVERY_MS))
            return 1;
        backlog(r, 0);
    }
    return stopping(r);
}

/* Whether this process may lift a thread from SCHED_IDLE to SCHED_OTHER
 * at RELAY_NICE: CAP_SYS_NICE, or an RLIMIT_NICE that allows that nice
 * value (the systemd unit's LimitNICE=+0). */
static int
can_lift(void)
{
    struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
    struct rlimit rl;

    if (getrlimit(RLIMIT_NICE, &rl) == 0 &&
        (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= 20 - RELAY_NICE))
        return 1;
    if (syscall(SYS_capget, &h, d) != 0)
        return 0;
    return (d[CAP_SYS_NICE / 32].effective >> (CAP_SYS_NICE % 32)) & 1;
}

/* The file /proc/self/task/<tid>/<what>, NUL-terminated, into buf: 0,
 * or -1. */
static int
read_task_file(pid_t tid, const char *what, char *buf, size_t cap)
{
    char path[64];
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/self/task/%d/%s", (int)tid, what);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return -1;
    n = read(fd, buf, cap - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

/* Thread tid's state (R: running or waiting for a core) and its time on
 * a core in ns (the first figure of its schedstat): 0, or -1. The time it
 * waits for a core (the second) is only added when it gets one, so a
 * thread that never does shows none: its state and the time it ran say
 * it. */
static int
thread_sample(pid_t tid, char *state, uint64_t *run_ns)
{
    char buf[512];
    unsigned long long run;
    const char *p;

    if (read_task_file(tid, "stat", buf, sizeof(buf)) != 0 ||
        (p = strrchr(buf, ')')) == NULL || p[1] != ' ' || p[2] == '\0')
        return -1;
    *state = p[2];
    if (read_task_file(tid, "schedstat", buf, sizeof(buf)) != 0 ||
        sscanf(buf, "%llu", &run) != 1)
        return -1;
    *run_ns = run;
    return 0;
}

/*
 * Loop thread, every RELAY_CURSOR_EVERY_MS: a relay thread at SCHED_IDLE
 * that stayed runnable for RELAY_STARVED_MS while running less than a
 * tenth of that time (cores that other work keeps busy: a CPU inference
 * node at full load) is lifted to SCHED_OTHER at RELAY_NICE, or what the
 * node stored would wait for the center as long as the cores stay busy
 * (CI: none of 300 receipts in 10 s). A burst shorter than that still
 * goes first. The thread goes back to SCHED_IDLE itself once it has
 * caught up (relax).
 */
static void
starve_check(struct relay *r)
{
    struct sched_param sp = { 0 };
    uint64_t now = uv_now(r->loop), run;
    pid_t tid;
    char state;
    int rc, starved;

    uv_mutex_lock(&r->mu);
    tid = r->idle && !r->stop ? r->tid : 0;
    uv_mutex_unlock(&r->mu);
    r->waits_for_core = 0;
    if (tid == 0 || thread_sample(tid, &state, &run) != 0) {
        r->starve_from_ms = 0;
        return;
    }
    r->waits_for_core = state == 'R';
    starved = r->starve_from_ms != 0 && state == 'R' &&
              run >= r->starve_run_ns &&
              (run - r->starve_run_ns) / 100000u < now - r->starve_at_ms;
    r->starve_at_ms = now;
    r->starve_run_ns = run;
    if (!starved) {
        r->starve_from_ms = now;
        return;
    }
    if (now - r->starve_from_ms < RELAY_STARVED_MS)
        return;
    r->starve_from_ms = 0;
    uv_mutex_lock(&r->mu);
    /* The nice value first: SCHED_OTHER then needs only the RLIMIT_NICE
     * of that value. */
    if (r->idle && !r->stop) {
        rc = setpriority(PRIO_PROCESS, (id_t)tid, RELAY_NICE) != 0
                 ? errno
                 : pthread_setschedparam(r->thread, SCHED_OTHER, &sp);
        if (rc == 0) {
            r->idle = 0;
            r->lifted = 1;
            log_info("relay: the relay thread, runnable, had a core less "
                     "than a tenth of the last %d ms; it runs at nice %d "
                     "until it has caught up",
                     RELAY_STARVED_MS, RELAY_NICE);
        } else
            log_warnx("relay: cannot lift the relay thread from SCHED_IDLE "
                      "(%s)",
                      strerror(rc));
    }
    uv_mutex_unlock(&r->mu);
}

/*
 * Loop thread, on the cursor's timer. The backlog's figures (stats,
 * STATUS=, the metrics) are the relay thread's to read, and a thread at
 * SCHED_IDLE that gets no core reads nothing: a node whose cores are busy
 * would show the backlog of before, 0 say, while receipts wait for the
 * seconds until starve_check lifts the thread. So while the thread is at
 * SCHED_IDLE and was runnable at starve_check's last look (waiting for a
 * core, not for the center), and its figures are older than
 * BACKLOG_STALE_MS, the loop reads them itself with a read-only handle of
 * its own (a few indexed reads, and a count of at most LOOP_COUNT_MAX
 * rows), at most every BACKLOG_STALE_MS. The bytes are the thread's last
 * size a record times the records, or, when the thread never sized one,
 * the loop's own sample of the first records waiting. The mutex is only
 * tried: the thread may hold it, preempted.
 */
static void
backlog_for_starved(struct relay *r)
{
    struct store_relay_backlog bl;
    struct store_opts o;
    struct proto_err err;
    uint64_t now = mono_ms(), at, mean, bytes, n;

    if (!r->waits_for_core || r->lro_failed || uv_mutex_trylock(&r->mu) != 0)
        return;
    at = r->backlog_at;
    mean = r->backlog_mean;
    uv_mutex_unlock(&r->mu);
    if (now - at < BACKLOG_STALE_MS)
        return;
    if (r->lro == NULL) {
        memset(&o, 0, sizeof(o));
        o.readonly = 1;
        if (store_open(r->db_path, &o, &r->lro, &err) != 0) {
            r->lro_failed = 1;
            log_warnx("relay: cannot open the store to read the backlog while "
                      "the relay thread waits for a core: %s",
                      err.message);
            return;
        }
    }
    if (store_relay_backlog(r->lro, atomic_load(&r->acked), LOOP_COUNT_MAX, &bl,
                            &err) != 0)
        return;
    /* The thread has not sized a record yet (it never got to send or to
     * read one): the loop reads the first ones waiting, once, as the
     * thread's sample() does, so that the bytes are not shown as 0. */
    if (mean == 0 && bl.records > 0 &&
        sample_read(r->lro, atomic_load(&r->acked), &bytes, &n) == 0)
        mean = bytes / n;
    if (uv_mutex_trylock(&r->mu) != 0)
        return;
    /* Unless the thread read them meanwhile. */
    if (r->backlog_at == at)
        set_backlog(r, &bl, mean, now);
    uv_mutex_unlock(&r->mu);
}

/* Relay thread, nothing left to send: back to SCHED_IDLE when the loop
 * lifted it (starve_check). */
static void
relax(struct relay *r)
{
    struct sched_param sp = { 0 };

    uv_mutex_lock(&r->mu);
    if (r->lifted && !r->stop &&
        pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp) == 0) {
        r->lifted = 0;
        r->idle = 1;
    }
    uv_mutex_unlock(&r->mu);
}

/*
 * Background work (upstream.priority): on a busy node the loop and the
 * writer (local ingest) go first, and the relay catches up when a core
 * has nothing else to run. SCHED_IDLE, the default, gives way to any
 * other thread at once; on cores that other work keeps busy it may wait
 * tens of seconds, so the loop lifts it to nice 10 when starved
 * (starve_check), and a daemon that could not do that runs it at nice 10
 * from the start. Nice 10 takes about a tenth of a core one other thread
 * wants.
 * Linux applies a thread's policy and nice value to that thread alone.
 * Nothing the loop or the writer waits for is held by this thread
 * (relay_get_stats, writer_wait_durable, the cursor's timer), except at
 * the end: relay_stop joins it, and restore_priority first gives it back
 * its priority, or a node whose cores are all busy would wait seconds
 * for a thread at SCHED_IDLE to be scheduled at all.
 */
static void
lower_priority(struct relay *r)
{
    struct sched_param sp = { 0 };
    pid_t tid = (pid_t)syscall(SYS_gettid);
    int rc = 0, nice;

    if (r->priority == PRIO_NORMAL)
        return;
    uv_mutex_lock(&r->mu);
    if (r->stop)
        goto out;
    errno = 0;
    nice = getpriority(PRIO_PROCESS, (id_t)tid);
    if (errno != 0)
        goto out;
    r->tid = tid;
    r->nice_before = nice;
    if (r->priority == PRIO_IDLE) {
        if (!can_lift())
            log_info("relay: SCHED_IDLE could not be lifted when the cores "
                     "stay busy (that takes CAP_SYS_NICE or an RLIMIT_NICE of "
                     "%d); the relay runs at nice %d",
                     20 - RELAY_NICE, RELAY_NICE);
        else if ((rc = pthread_setschedparam(pthread_self(), SCHED_IDLE,
                                             &sp)) == 0) {
            r->lowered = r->idle = 1;
            goto out;
        } else
            log_warnx("relay: SCHED_IDLE refused (%s); the relay runs at "
                      "nice %d",
                      strerror(rc), RELAY_NICE);
    }
    /* A daemon started at a lower priority than that keeps its own. */
    if (nice >= RELAY_NICE)
        goto out;
    if (setpriority(PRIO_PROCESS, (id_t)tid, RELAY_NICE) != 0)
        log_warnx("relay: cannot lower the relay thread's priority (%s); it "
                  "runs as the daemon's other threads",
                  strerror(errno));
    else
        r->lowered = 1;
out:
    uv_mutex_unlock(&r->mu);
}

/* Loop thread, r->mu held, r->stop set: the relay thread back at the
 * daemon's priority, so that it ends now however busy the cores are.
 * Raising a priority takes CAP_SYS_NICE or an RLIMIT_NICE that allows
 * the nice value (the systemd unit's LimitNICE); without either the
 * thread ends when it is next scheduled. */
static void
restore_priority(struct relay *r)
{
    struct sched_param sp = { 0 };
    int rc;

    if (!r->lowered)
        return;
    r->lowered = r->idle = r->lifted = 0;
    if ((rc = pthread_setschedparam(r->thread, SCHED_OTHER, &sp)) != 0 ||
        setpriority(PRIO_PROCESS, (id_t)r->tid, r->nice_before) != 0)
        log_info("relay: the relay thread keeps its low priority to the "
                 "end (%s)",
                 strerror(rc != 0 ? rc : errno));
}

static void
thread_cb(void *arg)
{
    struct relay *r = arg;
    int rc;

    lower_priority(r);
    backlog(r, 1);
    while (!stopping(r)) {
        if (!r->connected) {
            if ((rc = connect_next(r)) == 1)
                break;
            if (rc < 0) {
                backlog(r, 0);
                continue;
            }
        }
        rc = relay_window(r);
        backlog(r, rc == 0);
        if (rc >= 0)
            r->busy_backoff = 0;
        if (rc == 0) {
            relax(r);
            if (nap(r, IDLE_POLL_MS))
                break;
        } else if (rc == -1) {
            /* The connection broke: at once to the next endpoint, then
             * with the backoff. */
            hang_up(r);
            r->ep = (r->ep + 1) % r->n_endpoints;
        } else if (rc == -2) {
            hang_up(r);
            if (nap_watching(r, RELAY_BACKOFF_MAX_MS))
                break;
        } else if (rc == -3) {
            /* The center could not store it now (a database restarting,
             * an instance overloaded): another endpoint may, after a
             * backoff that connecting does not reset. */
            hang_up(r);
            r->ep = (r->ep + 1) % r->n_endpoints;
            r->busy_backoff = r->busy_backoff == 0 ? RELAY_BACKOFF_MIN_MS
                                                   : r->busy_backoff * 2;
            if (r->busy_backoff > RELAY_BACKOFF_MAX_MS)
                r->busy_backoff = RELAY_BACKOFF_MAX_MS;
            if (nap_watching(r, rnd(r) % (r->busy_backoff + 1)))
                break;
        }
    }
    hang_up(r);
}

/* ---- The loop's side: the cursor, through the writer. ---- */

struct cursor_job {
    struct relay *r;
    uint64_t acked, acked_plans, acked_retention;
};

static void maybe_free(struct relay *r);
static void cursor_submit(struct relay *r);

/* Whether an acknowledgement waits to be stored. Loop thread. */
static int
behind(struct relay *r)
{
    return atomic_load(&r->acked) > r->stored ||
           atomic_load(&r->acked_plans) > r->stored_plans ||
           atomic_load(&r->acked_retention) > r->stored_retention;
}

static int
cursor_apply(struct writer_job *job, struct store *s, struct proto_err *err)
{
    struct cursor_job *c = job->ctx;
    int rc;

    if ((rc = store_relay_cursor_set(s, STORE_RELAY_RECEIPTS, c->acked, err)) ||
        (rc =
             store_relay_cursor_set(s, STORE_RELAY_PLANS, c->acked_plans, err)))
        return rc;
    return store_relay_cursor_set(s, STORE_RELAY_RETENTION, c->acked_retention,
                                  err);
}

static void
cursor_done(struct writer_job *job)
{
    struct cursor_job *c = job->ctx;
    struct relay *r = c->r;

    r->job_running = 0;
    if (job->rc == 0 && c->acked > r->stored)
        r->stored = c->acked;
    if (job->rc == 0 && c->acked_plans > r->stored_plans)
        r->stored_plans = c->acked_plans;
    if (job->rc == 0 && c->acked_retention > r->stored_retention)
        r->stored_retention = c->acked_retention;
    writer_job_free(job);
    server_release(r->srv);
    /* When stopping, what was acknowledged meanwhile at once; else the
     * timer stores it. */
    if (r->stopping && r->srv->writer != NULL && behind(r))
        cursor_submit(r);
    maybe_free(r);
}

static const struct writer_job_ops cursor_ops = { cursor_apply, cursor_done,
                                                  1 };

static void
cursor_submit(struct relay *r)
{
    struct writer_job *job;
    struct cursor_job *c;

    if (r->job_running || r->srv->writer == NULL)
        return;
    if ((job = writer_job_new()) == NULL ||
        (c = calloc(1, sizeof(*c))) == NULL) {
        free(job);
        return; /* the next acknowledgement tries again */
    }
    c->r = r;
    c->acked = atomic_load(&r->acked);
    c->acked_plans = atomic_load(&r->acked_plans);
    c->acked_retention = atomic_load(&r->acked_retention);
    job->ops = &cursor_ops;
    job->ctx = c;
    job->items = 1;
    job->bytes = sizeof(*job) + sizeof(*c);
    job->w.op = -1;
    r->job_running = 1;
    server_hold(r->srv);
    server_submit(r->srv, job);
}

static void
cursor_timer_cb(uv_timer_t *t)
{
    struct relay *r = t->data;

    if (!r->stopping && behind(r))
        cursor_submit(r);
    if (!r->stopping) {
        starve_check(r);
        backlog_for_starved(r);
    }
}

static void
relay_free(struct relay *r)
{
    size_t i;

    for (i = 0; i < r->n_endpoints; i++)
        free(r->endpoints[i]);
    free(r->endpoints);
    free(r->flights);
    free(r->db_path);
    store_free(r->ro);
    store_free(r->lro);
    tls_ctx_free(r->tls);
    explicit_bzero(r->token, sizeof(r->token));
    uv_cond_destroy(&r->cv);
    uv_mutex_destroy(&r->mu);
    free(r);
}

static void
maybe_free(struct relay *r)
{
    if (r->stopping && r->handles == 0 && !r->job_running)
        relay_free(r);
}

static void
close_cb(uv_handle_t *h)
{
    struct relay *r = h->data;

    r->handles--;
    maybe_free(r);
}

/* The token: the file's first line, without its line end. */
static int
read_token(const char *path, char *out, char *err, size_t err_len)
{
    FILE *f = fopen(path, "re");
    size_t n;

    if (f == NULL) {
        snprintf(err, err_len, "upstream.token_file %s: %s", path,
                 strerror(errno));
        return -1;
    }
    n = fread(out, 1, TOKEN_MAX + 1, f);
    fclose(f);
    if (n > TOKEN_MAX) {
        explicit_bzero(out, TOKEN_MAX + 1);
        snprintf(err, err_len, "upstream.token_file %s: over %d bytes", path,
                 TOKEN_MAX);
        return -1;
    }
    out[n] = '\0';
    out[strcspn(out, "\r\n")] = '\0';
    if (out[0] == '\0') {
        snprintf(err, err_len, "upstream.token_file %s: empty", path);
        return -1;
    }
    return 0;
}

int
relay_start(uv_loop_t *loop, struct server *srv, const struct config *cfg,
            struct relay **out, char *err, size_t err_len)
{
    struct relay *r = calloc(1, sizeof(*r));
    struct store_opts o;
    struct proto_err perr;
    uint64_t cursor = 0;
    size_t i;

    *out = NULL;
    if (r == NULL) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    uv_mutex_init(&r->mu);
    uv_cond_init(&r->cv);
    r->loop = loop;
    r->srv = srv;
    r->fd = -1;
    r->conn.fd = -1;
    r->oldest_at = INT64_MIN;
    r->rng = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^
             (uint64_t)(uintptr_t)r;
    if (r->rng == 0)
        r->rng = 1;
    r->window = cfg->upstream_window > 0 ? cfg->upstream_window : 1;
    r->priority = cfg->upstream_priority == NULL ||
                          cfg->upstream_priority[0] == '\0' ||
                          strcmp(cfg->upstream_priority, "idle") == 0
                      ? PRIO_IDLE
                  : strcmp(cfg->upstream_priority, "low") == 0 ? PRIO_LOW
                                                               : PRIO_NORMAL;
    if ((r->flights = calloc(r->window, sizeof(*r->flights))) == NULL ||
        (r->endpoints = calloc(cfg->n_upstream, sizeof(char *))) == NULL ||
        (r->db_path = strdup(cfg->db_path)) == NULL)
        goto nomem;
    for (i = 0; i < cfg->n_upstream; i++) {
        if ((r->endpoints[i] = strdup(cfg->upstream[i])) == NULL)
            goto nomem;
        r->n_endpoints++;
    }
    if (cfg->upstream_name != NULL)
        snprintf(r->name, sizeof(r->name), "%s", cfg->upstream_name);
    else if (gethostname(r->name, sizeof(r->name) - 1) != 0)
        r->name[0] = '\0';
    if (r->name[0] == '\0') {
        snprintf(err, err_len, "upstream.name: no host name to use; set it");
        goto fail;
    }
    if (read_token(cfg->upstream_token_file, r->token, err, err_len) != 0)
        goto fail;
    if (cfg->upstream_ca_file != NULL) {
        struct net_tls t = { cfg->upstream_ca_file, NULL, NULL };

        if (net_tls_ctx(&t, &r->tls, err, err_len) != 0)
            goto fail;
    }
    /* Opened here, so that the cursor is known (stats) before the thread
     * runs; the thread alone uses the connection from then on. */
    memset(&o, 0, sizeof(o));
    o.readonly = 1;
    if (store_open(r->db_path, &o, &r->ro, &perr) != 0 ||
        store_relay_cursor_get(r->ro, STORE_RELAY_RECEIPTS, &cursor, &perr) !=
            0) {
        snprintf(err, err_len, "cannot read the relay cursor: %s",
                 perr.message);
        goto fail;
    }
    atomic_store(&r->acked, cursor);
    r->stored = cursor;
    r->st.acked_id = cursor;
    if (store_relay_cursor_get(r->ro, STORE_RELAY_PLANS, &cursor, &perr) != 0) {
        snprintf(err, err_len, "cannot read the relay cursor: %s",
                 perr.message);
        goto fail;
    }
    atomic_store(&r->acked_plans, cursor);
    r->stored_plans = cursor;
    if (store_relay_cursor_get(r->ro, STORE_RELAY_RETENTION, &cursor, &perr) !=
        0) {
        snprintf(err, err_len, "cannot read the relay cursor: %s",
                 perr.message);
        goto fail;
    }
    atomic_store(&r->acked_retention, cursor);
    r->stored_retention = cursor;
    r->st_seen = r->st;
    r->oldest_seen = r->oldest_at;
    uv_timer_init(loop, &r->cursor_timer);
    r->cursor_timer.data = r;
    r->handles = 1;
    if (uv_thread_create(&r->thread, thread_cb, r) != 0) {
        snprintf(err, err_len, "cannot start the relay thread");
        r->stopping = 1;
        uv_close((uv_handle_t *)&r->cursor_timer, close_cb);
        return -1;
    }
    /* Named here, before the daemon accepts: a thread that names itself
     * may not have run yet when someone looks (top -H, or a test that
     * pins the relay thread by its name: e2e_relay busy_cores, once in
     * CI). */
    (void)pthread_setname_np(r->thread, "relay");
    uv_timer_start(&r->cursor_timer, cursor_timer_cb, RELAY_CURSOR_EVERY_MS,
                   RELAY_CURSOR_EVERY_MS);
    r->started = 1;
    *out = r;
    return 0;
nomem:
    snprintf(err, err_len, "out of memory");
fail:
    relay_free(r);
    return -1;
}

void
relay_stop(struct relay *r)
{
    if (r == NULL || r->stopping)
        return;
    uv_mutex_lock(&r->mu);
    r->stop = 1;
    restore_priority(r);
    /* A wait for the center ends now. */
    if (r->fd >= 0)
        shutdown(r->fd, SHUT_RDWR);
    uv_cond_broadcast(&r->cv);
    uv_mutex_unlock(&r->mu);
    uv_thread_join(&r->thread);
    r->stopping = 1;
    if (behind(r))
        cursor_submit(r);
    uv_close((uv_handle_t *)&r->cursor_timer, close_cb);
}

void
relay_get_stats(struct relay *r, struct relay_stats *st)
{
    uint64_t now = unix_ms();

    /* The relay thread, preempted while it holds the mutex, must not stall
     * the loop: a busy mutex gives the figures of the last look. */
    if (uv_mutex_trylock(&r->mu) == 0) {
        r->st_seen = r->st;
        r->oldest_seen = r->oldest_at;
        uv_mutex_unlock(&r->mu);
    }
    *st = r->st_seen;
    /* The age as of now, not as of the last look at the store. */
    st->oldest_ms =
        r->oldest_seen != INT64_MIN && now > (uint64_t)r->oldest_seen
            ? now - (uint64_t)r->oldest_seen
            : 0;
}
