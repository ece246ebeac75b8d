/*
 * http.c: the optional HTTP listener (listen.http): GET /metrics and
 * GET /healthz, on libmicrohttpd.
 *
 * Threads: libmicrohttpd runs its own threads (one polls the listening
 * socket, one serves each connection, at most HTTP_MAX_CONNS), apart
 * from the event loop, so a slow scraper never delays a producer.
 * /healthz is answered on the connection's thread from the writer's
 * atomic figures alone. /metrics needs the loop's figures and a store
 * read: the connection's thread queues an hreq and wakes the loop
 * (uv_async_t); the loop takes the snapshot and runs metrics_render() on
 * the query pool (query_run_detached); the result comes back on the loop
 * and the waiting thread is woken. An hreq is shared by the waiting
 * thread and the loop, so it is reference-counted and has its own lock:
 * whichever lets go last frees it (a thread that gave up at shutdown
 * leaves the loop's side to finish alone).
 *
 * Bounds: HTTP_MAX_CONNS connections (HTTP_MAX_PER_IP from one address),
 * HTTP_TIMEOUT_S of silence closes one, HTTP_MEM bytes of memory each (so
 * request headers are bounded); only GET and HEAD, no request bodies.
 */
#include "http.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "log.h"
#include "metrics.h"
#include "query.h"
#include "server.h"
#include "writer.h"

#define HTTP_MAX_CONNS  16
#define HTTP_MAX_PER_IP 8
#define HTTP_TIMEOUT_S  10
#define HTTP_MEM        (32u * 1024u)

struct hreq {
    uv_mutex_t mu;
    uv_cond_t cond;
    int refs;   /* guarded by mu: the waiting thread and the loop */
    int done;   /* guarded by mu */
    int rc;     /* guarded by mu: 0 or the PROTO_E* code */
    char *text; /* guarded by mu: the exposition on success */
    size_t len; /* guarded by mu */
    char msg[PROTO_ERR_MSG_MAX];
    struct hreq *next; /* guarded by the http's mu while pending */
};

struct http {
    struct MHD_Daemon *mhd;
    struct server *srv;
    struct writer *writer;
    uv_async_t async;
    uv_mutex_t mu;
    struct hreq *pending; /* guarded by mu: for the loop to start */
    _Atomic int closing;
    _Atomic uint32_t stall_ms;
    int fd;
};

static void
hreq_unref(struct hreq *r)
{
    int left;

    uv_mutex_lock(&r->mu);
    left = --r->refs;
    uv_mutex_unlock(&r->mu);
    if (left > 0)
        return;
    uv_cond_destroy(&r->cond);
    uv_mutex_destroy(&r->mu);
    free(r->text);
    free(r);
}

/* Wakes the waiting thread with the outcome; loop thread. text taken. */
static void
hreq_finish(struct hreq *r, int rc, const char *msg, char *text, size_t len)
{
    uv_mutex_lock(&r->mu);
    r->done = 1;
    r->rc = rc;
    r->text = text;
    r->len = len;
    snprintf(r->msg, sizeof(r->msg), "%s", msg ? msg : "");
    uv_cond_signal(&r->cond);
    uv_mutex_unlock(&r->mu);
    hreq_unref(r);
}

/* ---- the loop's side ---- */

struct mjob {
    struct hreq *r;
    char *text;
    size_t len;
};

/* A query thread. */
static int
metrics_run_cb(void *arg, struct store *s, const struct query_snapshot *snap,
               uint64_t deadline_ms, struct proto_err *err)
{
    struct mjob *j = arg;

    return metrics_render(snap, s, deadline_ms, &j->text, &j->len, err);
}

static void
metrics_done_cb(void *arg, int rc, const struct proto_err *err)
{
    struct mjob *j = arg;

    if (rc != 0) {
        free(j->text);
        j->text = NULL;
    }
    hreq_finish(j->r, rc, rc ? err->message : NULL, j->text, j->len);
    free(j);
}

static void
async_cb(uv_async_t *a)
{
    struct http *h = a->data;
    struct hreq *r, *next;
    struct proto_err err;

    uv_mutex_lock(&h->mu);
    r = h->pending;
    h->pending = NULL;
    uv_mutex_unlock(&h->mu);
    for (; r != NULL; r = next) {
        struct mjob *j = calloc(1, sizeof(*j));

        next = r->next;
        proto_err_clear(&err);
        if (j == NULL) {
            hreq_finish(r, PROTO_ENOMEM, "out of memory", NULL, 0);
            continue;
        }
        j->r = r;
        if (query_run_detached(h->srv->queries, h->srv, metrics_run_cb,
                               metrics_done_cb, j, &err) != 0) {
            free(j);
            hreq_finish(r, err.code, err.message, NULL, 0);
        }
    }
}

/* ---- libmicrohttpd's threads ---- */

static enum MHD_Result
reply(struct MHD_Connection *conn, unsigned status, const char *type,
      const char *body)
{
    struct MHD_Response *resp;
    enum MHD_Result ret;

    resp = MHD_create_response_from_buffer(strlen(body), (void *)body,
                                           MHD_RESPMEM_MUST_COPY);
    if (resp == NULL)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result
healthz(struct http *h, struct MHD_Connection *conn)
{
    struct writer_stats st;
    uint32_t stall = atomic_load(&h->stall_ms);
    char body[PROTO_ERR_MSG_MAX + 128];

    if (atomic_load(&h->closing))
        return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain",
                     "unhealthy: the daemon is stopping\n");
    writer_get_stats(h->writer, &st);
    if (st.failing) {
        snprintf(body, sizeof(body), "unhealthy: the store cannot commit: %s\n",
                 st.last_error);
        return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain", body);
    }
    if (st.stalled_ms >= stall) {
        snprintf(body, sizeof(body),
                 "unhealthy: writes have waited %llu ms for the writer "
                 "(metrics.health_stall is %u ms)\n",
                 (unsigned long long)st.stalled_ms, (unsigned)stall);
        return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain", body);
    }
    return reply(conn, MHD_HTTP_OK, "text/plain", "ok\n");
}

static enum MHD_Result
metrics(struct http *h, struct MHD_Connection *conn)
{
    struct hreq *r = calloc(1, sizeof(*r));
    struct MHD_Response *resp;
    enum MHD_Result ret;
    char body[PROTO_ERR_MSG_MAX + 64];
    unsigned status;

    if (r == NULL)
        return reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain",
                     "out of memory\n");
    uv_mutex_init(&r->mu);
    uv_cond_init(&r->cond);
    r->refs = 2;
    uv_mutex_lock(&h->mu);
    r->next = h->pending;
    h->pending = r;
    uv_mutex_unlock(&h->mu);
    uv_async_send(&h->async);

    /* Until the loop answers, or the daemon stops: the query itself is
     * bounded by limits.query_timeout. */
    uv_mutex_lock(&r->mu);
    while (!r->done && !atomic_load(&h->closing))
        uv_cond_timedwait(&r->cond, &r->mu, 100u * 1000u * 1000u);
    if (!r->done) {
        uv_mutex_unlock(&r->mu);
        hreq_unref(r);
        return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain",
                     "the daemon is stopping\n");
    }
    uv_mutex_unlock(&r->mu);
    if (r->rc != 0) {
        status = r->rc == PROTO_EOVERLOADED ? MHD_HTTP_SERVICE_UNAVAILABLE
                                            : MHD_HTTP_INTERNAL_SERVER_ERROR;
        snprintf(body, sizeof(body), "metrics: %s\n", r->msg);
        hreq_unref(r);
        return reply(conn, status, "text/plain", body);
    }
    resp =
        MHD_create_response_from_buffer(r->len, r->text, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) {
        hreq_unref(r);
        return MHD_NO;
    }
    r->text = NULL; /* the response has it now */
    hreq_unref(r);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            METRICS_CONTENT_TYPE);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result
access_cb(void *cls, struct MHD_Connection *conn, const char *url,
          const char *method, const char *version, const char *upload_data,
          size_t *upload_data_size, void **con_cls)
{
    struct http *h = cls;
    static int seen; /* only its address: "the headers were checked" */
    const char *cl;

    (void)version;
    (void)upload_data;
    /* The first call has the headers only; answering then refuses a body
     * before any of it is read. */
    if (*con_cls == NULL) {
        *con_cls = &seen;
        if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
            strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
            return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain",
                         "only GET and HEAD\n");
        cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                         MHD_HTTP_HEADER_CONTENT_LENGTH);
        if ((cl != NULL && strcmp(cl, "0") != 0) ||
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                        MHD_HTTP_HEADER_TRANSFER_ENCODING) !=
                NULL)
            return reply(conn, MHD_HTTP_CONTENT_TOO_LARGE, "text/plain",
                         "no request bodies\n");
    }
    if (*upload_data_size != 0)
        return MHD_NO;
    if (strcmp(url, "/metrics") == 0)
        return metrics(h, conn);
    if (strcmp(url, "/healthz") == 0)
        return healthz(h, conn);
    return reply(conn, MHD_HTTP_NOT_FOUND, "text/plain",
                 "not found: this listener serves /metrics and /healthz\n");
}

static void
mhd_log_cb(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    size_t n;

    (void)cls;
    vsnprintf(line, sizeof(line), fmt, ap);
    n = strlen(line);
    while (n > 0 && line[n - 1] == '\n')
        line[--n] = '\0';
    /* What a peer's mistakes make libmicrohttpd say is for debugging:
     * at warning level a scanner could fill the journal. */
    log_debug("http: %s", line);
}

/* Binds hostport ("HOST:PORT", "[V6]:PORT"; checked by config.c). */
static int
bind_addr(const char *hostport, int *out, char *err, size_t err_len)
{
    struct sockaddr_storage ss;
    char host[64];
    const char *colon = strrchr(hostport, ':'), *h = hostport;
    size_t hlen;
    int fd, one = 1, port;

    memset(&ss, 0, sizeof(ss));
    if (colon == NULL)
        return snprintf(err, err_len, "\"%s\" is not HOST:PORT", hostport), -1;
    hlen = (size_t)(colon - hostport);
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    port = atoi(colon + 1);
    snprintf(host, sizeof(host), "%.*s", (int)hlen, h);
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0)
        return snprintf(err, err_len, "\"%s\" is not a numeric address", host),
               -1;
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return snprintf(err, err_len, "socket: %s", strerror(errno)), -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss,
             ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                      : sizeof(struct sockaddr_in)) != 0 ||
        listen(fd, 64) != 0) {
        snprintf(err, err_len, "cannot listen on %s: %s", hostport,
                 strerror(errno));
        close(fd);
        return -1;
    }
    *out = fd;
    return 0;
}

static void
close_cb(uv_handle_t *handle)
{
    struct http *h = handle->data;

    uv_mutex_destroy(&h->mu);
    free(h);
}

int
http_start(struct server *srv, const char *hostport, uint32_t stall_ms,
           struct http **out, char *err, size_t err_len)
{
    struct http *h;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG;

    *out = NULL;
    h = calloc(1, sizeof(*h));
    if (h == NULL)
        return snprintf(err, err_len, "out of memory"), -1;
    h->srv = srv;
    h->writer = srv->writer;
    atomic_init(&h->closing, 0);
    atomic_init(&h->stall_ms, stall_ms);
    if (bind_addr(hostport, &h->fd, err, err_len) != 0) {
        free(h);
        return -1;
    }
    uv_mutex_init(&h->mu);
    uv_async_init(srv->loop, &h->async, async_cb);
    h->async.data = h;
    h->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, access_cb, h, MHD_OPTION_EXTERNAL_LOGGER,
        mhd_log_cb, NULL, MHD_OPTION_LISTEN_SOCKET, h->fd,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_MAX_CONNS,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)HTTP_MAX_PER_IP,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_TIMEOUT_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_MEM, MHD_OPTION_END);
    if (h->mhd == NULL) {
        snprintf(err, err_len, "cannot start the HTTP server on %s", hostport);
        close(h->fd);
        uv_close((uv_handle_t *)&h->async, close_cb);
        return -1;
    }
    *out = h;
    return 0;
}

void
http_set_stall(struct http *h, uint32_t stall_ms)
{
    if (h != NULL)
        atomic_store(&h->stall_ms, stall_ms);
}

void
http_stop(struct http *h)
{
    struct hreq *r, *next;

    if (h == NULL)
        return;
    /* Waiting threads give up within 100 ms; libmicrohttpd then joins
     * them and closes every connection. */
    atomic_store(&h->closing, 1);
    /* It closes the listening socket it was given too. */
    MHD_stop_daemon(h->mhd);
    uv_mutex_lock(&h->mu);
    r = h->pending;
    h->pending = NULL;
    uv_mutex_unlock(&h->mu);
    for (; r != NULL; r = next) {
        next = r->next;
        hreq_finish(r, PROTO_EUNAVAILABLE, "stopping", NULL, 0);
    }
    uv_close((uv_handle_t *)&h->async, close_cb);
}
