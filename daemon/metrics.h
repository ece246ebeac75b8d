/*
 * metrics.h: the daemon's figures as Prometheus text (metrics.c), for the
 * `metrics` query kind and the HTTP listener's /metrics.
 */
#ifndef RECEIPTD_DAEMON_METRICS_H
#define RECEIPTD_DAEMON_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "query_kind.h"
#include "store.h"

/* The content type of what metrics_render() writes. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/*
 * Renders the exposition: sn's figures (borrowed) and what the store s
 * (a read-only store on a query thread, borrowed) holds, read before
 * deadline_ms (CLOCK_MONOTONIC). On success *text is a malloc'd buffer of
 * *len bytes (the caller frees it) and 0 is returned; otherwise *text is
 * NULL and the error is the store's (PROTO_EOVERLOADED, PROTO_ENOMEM,
 * PROTO_EUNAVAILABLE).
 */
int metrics_render(const struct query_snapshot *sn, struct store *s,
                   uint64_t deadline_ms, char **text, size_t *len,
                   struct proto_err *err);

/* The `metrics` query kind: one row, {"text": the exposition}. */
extern const struct query_kind query_kind_metrics;

#endif
