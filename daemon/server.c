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

#include <string.h>
#include <time.h>

#include "conn.h"
#include "dispatch.h"
#include "listen.h"
#include "log.h"
#include "writer.h"

uint64_t
server_now_unix_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void
server_init(struct server *srv, uv_loop_t *loop, const struct config *cfg)
{
    memset(srv, 0, sizeof(*srv));
    srv->loop = loop;
    srv->cfg = cfg;
    srv->started_ms = server_now_unix_ms();
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

void
server_count_write(struct server *srv, const struct writer_job *job)
{
    if (job->rc != 0) {
        if (job->rc == PROTO_EUNAVAILABLE)
            srv->n.unavailable++;
        return;
    }
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
