/*
 * http.h: the optional HTTP listener (listen.http) serving GET /metrics
 * (the exposition of metrics.h) and GET /healthz, on libmicrohttpd's own
 * threads (http.c).
 *
 * /healthz answers 200 "ok" while the store commits and the writer makes
 * progress: the last group commit did not fail (writer_stats.failing),
 * and writes have not waited metrics.health_stall or longer for the
 * writer to finish a group (writer_stats.stalled_ms). Otherwise 503 with
 * the reason in the body; 503 too once the daemon is stopping.
 */
#ifndef RECEIPTD_DAEMON_HTTP_H
#define RECEIPTD_DAEMON_HTTP_H

#include <stddef.h>
#include <stdint.h>

struct server;
struct http;

/*
 * Binds hostport (numeric "HOST:PORT" or "[V6]:PORT") and starts serving.
 * srv (borrowed) must have its writer and query pool; it must outlive the
 * listener until http_stop(). Loop thread. Returns 0, or -1 with the
 * reason in err (the address cannot be bound, memory).
 */
int http_start(struct server *srv, const char *hostport, uint32_t stall_ms,
               struct http **out, char *err, size_t err_len);

/* Changes metrics.health_stall (reload). Any thread. NULL is a no-op. */
void http_set_stall(struct http *h, uint32_t stall_ms);

/*
 * Stops serving: open connections are closed, a /metrics request waiting
 * for its figures is answered 503 within 100 ms, and the listener is freed
 * once the loop has run its close callback. Loop thread; call before the
 * drain, so no request starts a job after it. NULL is a no-op.
 */
void http_stop(struct http *h);

#endif
