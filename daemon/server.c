/*
 * server.c: the loop-side glue: the connection registry, accounting of the
 * bytes held by queued writes, the global backpressure switch, and the
 * drain of SIGTERM.
 *
 * Loop thread only. Backpressure has hysteresis: every connection stops
 * reading once queued write bytes pass max_pending_bytes and starts again
 * below half of it, so memory stays bounded whatever producers do.
 */
#include "server.h"

#include "clock.h"
#include "tls.h"

#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

#include "access.h"
#include "conn.h"
#include "dispatch.h"
#include "follow.h"
#include "listen.h"
#include "log.h"
#include "writer.h"

uint64_t
server_now_unix_ms(void)
{
    return unix_ms();
}

/* Rate-limited warnings: at most a line per interval each. */
#define LOG_EVERY_MS 10000u

void
server_init(struct server *srv, uv_loop_t *loop, const struct config *cfg)
{
    memset(srv, 0, sizeof(*srv));
    srv->loop = loop;
    srv->cfg = cfg;
    srv->started_ms = server_now_unix_ms();
    ratelog_init(&srv->log_auth, LOG_WARNING, LOG_EVERY_MS,
                 "failed authentications");
    ratelog_init(&srv->log_quarantine, LOG_WARNING, LOG_EVERY_MS,
                 "payloads put in quarantine");
    ratelog_init(&srv->log_refused, LOG_WARNING, LOG_EVERY_MS,
                 "connections refused");
    ratelog_init(&srv->log_unavailable, LOG_ERR, LOG_EVERY_MS,
                 "writes answered unavailable");
    ratelog_init(&srv->log_tls, LOG_WARNING, LOG_EVERY_MS,
                 "failed TLS handshakes");
}

void
server_log_flush(struct server *srv)
{
    uint64_t now = uv_now(srv->loop);

    ratelog_flush(&srv->log_auth, now);
    ratelog_flush(&srv->log_quarantine, now);
    ratelog_flush(&srv->log_refused, now);
    ratelog_flush(&srv->log_unavailable, now);
    ratelog_flush(&srv->log_tls, now);
}

int
server_tls_load(const struct config *cfg, struct tls_ctx **out,
                char err[CONFIG_ERR_MAX])
{
    char why[TLS_ERR_MAX];

    *out = NULL;
    if (cfg->tls_cert == NULL)
        return 0;
    if (tls_ctx_server_new(cfg->tls_cert, cfg->tls_key, cfg->tls_client_ca,
                           (int)cfg->tls_require_client_cert, out, why,
                           sizeof(why)) != 0) {
        snprintf(err, CONFIG_ERR_MAX, "listen.tls_cert: %.400s", why);
        return -1;
    }
    return 0;
}

void
server_tls_set(struct server *srv, struct tls_ctx *ctx)
{
    tls_ctx_free(srv->tls);
    srv->tls = ctx;
}

void
server_tls_failed(struct server *srv, const char *peer, const char *reason)
{
    srv->n.tls_failures++;
    ratelog_event(&srv->log_tls, uv_now(srv->loop),
                  "TLS handshake with %s failed: %s", peer, reason);
}

void
server_refused(struct server *srv, const char *why)
{
    ratelog_event(&srv->log_refused, uv_now(srv->loop),
                  "refused a connection: %s", why);
}

void
server_tokens_reloaded(struct server *srv)
{
    const struct access_policy *p = srv->access;
    struct conn *c;
    size_t i, closed = 0;
    int kept;

    for (c = srv->conns; c != NULL; c = c->next) {
        if (c->closing || c->want_close || !c->has_token)
            continue;
        kept = 0;
        for (i = 0; i < p->n_tokens && !kept; i++)
            kept = memcmp(p->tokens[i].sha256, c->token_sha, 32) == 0;
        if (kept)
            continue;
        conn_close_after_replies(c);
        closed++;
    }
    if (closed > 0)
        log_info("reload: closed %zu TCP connections whose token was "
                 "removed",
                 closed);
}

size_t
server_unauth_budget(const struct server *srv)
{
    size_t n = srv->cfg->max_connections / 8;

    return n > 0 ? n : 1;
}

#define AUTH_FORGET_MS    60000u
#define AUTH_DELAY_MIN_MS 25u
#define AUTH_DELAY_MAX_MS 1000u

/* The address of a peer as 16 bytes (IPv4 mapped into IPv6), and its
 * text; 0, or -1 when it is neither. */
static int
peer_key(const struct sockaddr *sa, unsigned char key[16], char *text,
         size_t cap)
{
    memset(key, 0, 16);
    if (sa != NULL && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

        key[10] = key[11] = 0xff;
        memcpy(key + 12, &in->sin_addr, 4);
        uv_ip4_name(in, text, cap);
        return 0;
    }
    if (sa != NULL && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

        memcpy(key, &in6->sin6_addr, 16);
        uv_ip6_name(in6, text, cap);
        return 0;
    }
    snprintf(text, cap, "an unknown address");
    return -1;
}

uint64_t
server_auth_failed(struct server *srv, const struct sockaddr *addr,
                   const char *reason)
{
    static const unsigned char zero[16];
    struct server_auth_slot *slot = NULL, *oldest = &srv->auth[0];
    unsigned char key[16];
    char text[64];
    uint64_t now = uv_now(srv->loop);
    uint32_t fails;
    size_t i;

    srv->n.auth_failures++;
    if (peer_key(addr, key, text, sizeof(text)) == 0 &&
        memcmp(key, zero, 16) != 0) {
        /* A small table searched in full: failures are rare, and a table
         * this size keeps one line of the cache per 4 slots. */
        for (i = 0; i < SERVER_AUTH_SLOTS && slot == NULL; i++) {
            if (memcmp(srv->auth[i].addr, key, 16) == 0)
                slot = &srv->auth[i];
            else if (srv->auth[i].last_ms < oldest->last_ms)
                oldest = &srv->auth[i];
        }
        if (slot == NULL) {
            slot = oldest;
            memcpy(slot->addr, key, 16);
            slot->fails = 0;
        }
        if (slot->fails > 0 && now - slot->last_ms >= AUTH_FORGET_MS)
            slot->fails = 0;
        slot->fails++;
        slot->last_ms = now;
    }
    ratelog_event(&srv->log_auth, now,
                  "authentication failed for a TCP peer from %s: %s", text,
                  reason != NULL ? reason : "refused");
    fails = slot != NULL ? slot->fails : 1;
    if (fails <= 1)
        return 0;
    if (fails - 2 >= 6)
        return AUTH_DELAY_MAX_MS;
    return AUTH_DELAY_MIN_MS << (fails - 2) < AUTH_DELAY_MAX_MS
               ? AUTH_DELAY_MIN_MS << (fails - 2)
               : AUTH_DELAY_MAX_MS;
}

static void
update_all(struct server *srv)
{
    struct conn *c, *next;

    for (c = srv->conns; c != NULL; c = next) {
        next = c->next;
        conn_update_reading(c);
    }
}

void
server_backpressure(struct server *srv)
{
    uint64_t cap = srv->cfg->max_pending_bytes;

    if (!srv->paused && srv->pending_bytes > cap) {
        srv->paused = 1;
        log_info("writer is behind (%llu bytes queued): reading paused",
                 (unsigned long long)srv->pending_bytes);
        update_all(srv);
    } else if (srv->paused && srv->pending_bytes <= cap / 2) {
        srv->paused = 0;
        log_info("writer caught up: reading resumed");
        update_all(srv);
    }
}

void
server_submit(struct server *srv, struct writer_job *job)
{
    srv->pending_bytes += job->bytes;
    writer_submit(srv->writer, job);
    server_backpressure(srv);
}

/* The first quarantined payload of a job, for the log. */
static void
log_quarantined(struct server *srv, const struct writer_job *job)
{
    const struct store_quarantine_item *q =
        job->w.conflict ? job->w.conflict_q : job->w.quarantine;
    const char *code;

    if (q == NULL)
        return;
    code = proto_code_name(q->code);
    ratelog_event(&srv->log_quarantine, uv_now(srv->loop),
                  "put a payload from source \"%.*s\" in quarantine: %s%s%s: "
                  "%s",
                  (int)(job->w.source_len < 64 ? job->w.source_len : 64),
                  job->w.source ? job->w.source : "", code ? code : "error",
                  q->path && q->path[0] ? " at " : "", q->path ? q->path : "",
                  q->message ? q->message : "");
}

/* Store failures and recoveries as the loop sees them: the first write
 * answered unavailable is an error at once, then at most a line every
 * 10 s; the first write stored after them says how long it lasted. */
static void
store_health(struct server *srv, const struct writer_job *job)
{
    uint64_t now = uv_now(srv->loop);

    if (job->rc == PROTO_EUNAVAILABLE) {
        if (srv->store_failing_ms == 0) {
            srv->store_failing_ms = now > 0 ? now : 1;
            srv->store_failed_writes = 0;
        }
        srv->store_failed_writes++;
        ratelog_event(&srv->log_unavailable, now,
                      "the store cannot commit; writes are answered "
                      "unavailable: %s",
                      job->err.message);
        return;
    }
    if (job->rc == 0 && srv->store_failing_ms != 0) {
        ratelog_finish(&srv->log_unavailable, now);
        log_warnx("the store commits again after %.1f s; %llu writes were "
                  "answered unavailable",
                  (double)(now - srv->store_failing_ms) / 1000.0,
                  (unsigned long long)srv->store_failed_writes);
        srv->store_failing_ms = 0;
    }
}

void
server_count_write(struct server *srv, const struct writer_job *job)
{
    store_health(srv, job);
    if (job->rc != 0) {
        if (job->rc == PROTO_EUNAVAILABLE)
            srv->n.unavailable++;
        return;
    }
    if ((job->w.conflict && job->w.conflict_q != NULL) ||
        (!job->w.conflict && !job->w.duplicate && job->w.n_quarantine > 0))
        log_quarantined(srv, job);
    srv->n.quarantine_evictions += job->w.evicted;
    /* What a duplicate stored and quarantined was counted the first
     * time. */
    if (job->w.conflict) {
        /* Nothing but the payload, in quarantine. */
        srv->n.conflicts++;
        srv->n.quarantined += job->w.conflict_q != NULL;
    } else if (job->w.duplicate)
        srv->n.duplicates++;
    else
        srv->n.quarantined += job->w.n_quarantine;
}

void
server_delivery_cb(void *arg, int end, size_t bytes)
{
    struct server *srv = arg;

    if (end) {
        /* The replies of the jobs just delivered leave now, a write per
         * connection rather than a write per reply. */
        srv->corked = 0;
        conn_flush_corked(srv);
        /* After the commit: followers read what it added. */
        follow_committed(srv);
        return;
    }
    srv->corked = 1;
    srv->pending_bytes -= bytes;
    server_backpressure(srv);
}

void
server_conn_add(struct server *srv, struct conn *c)
{
    c->prev = NULL;
    c->next = srv->conns;
    if (srv->conns != NULL)
        srv->conns->prev = c;
    srv->conns = c;
    srv->n_conns++;
    srv->n_alive++;
}

void
server_conn_closing(struct server *srv, struct conn *c)
{
    (void)c;
    srv->n_conns--;
}

static void
grace_close_cb(uv_handle_t *h)
{
    (void)h;
}

static void
maybe_drained(struct server *srv)
{
    void (*cb)(struct server *);

    if (!srv->draining || srv->n_alive > 0 || srv->drained_cb == NULL)
        return;
    if (srv->grace_active) {
        srv->grace_active = 0;
        uv_close((uv_handle_t *)&srv->grace, grace_close_cb);
    }
    cb = srv->drained_cb;
    srv->drained_cb = NULL;
    cb(srv);
}

void
server_conn_freed(struct server *srv, struct conn *c)
{
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    srv->n_alive--;
    maybe_drained(srv);
}

void
server_hold(struct server *srv)
{
    srv->n_alive++;
}

void
server_release(struct server *srv)
{
    srv->n_alive--;
    maybe_drained(srv);
}

static void
grace_cb(uv_timer_t *t)
{
    struct server *srv = t->data;
    struct conn *c, *next;

    log_warnx("drain: closing %zu connections that did not take their "
              "replies in time",
              srv->n_conns);
    for (c = srv->conns; c != NULL; c = next) {
        next = c->next;
        conn_close(c);
    }
}

void
server_drain(struct server *srv, uint32_t grace_ms)
{
    struct conn *c, *next;
    size_t i;

    if (srv->draining)
        return;
    srv->draining = 1;
    /* Followers are told why their rows stop before the drain closes
     * them. */
    follow_stop_all(srv);
    for (i = 0; i < srv->n_listeners; i++)
        listen_close(srv->listeners[i]);
    srv->n_listeners = 0;
    for (c = srv->conns; c != NULL; c = next) {
        next = c->next;
        conn_drain(c);
    }
    if (srv->n_alive > 0) {
        uv_timer_init(srv->loop, &srv->grace);
        srv->grace.data = srv;
        uv_timer_start(&srv->grace, grace_cb, grace_ms, 0);
        srv->grace_active = 1;
    }
    maybe_drained(srv);
}
