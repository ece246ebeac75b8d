/*
 * query.h: the `query` op. The body is parsed on the loop thread into a
 * request that copies everything it needs; the query itself runs on
 * libuv's threadpool with a read-only store connection borrowed from a
 * small pool (never the writer's), and the reply frame is built there too.
 * One parse function and one run function per kind, from a table, so new
 * kinds (fallbacks, coverage, gaps, quarantine) are one entry each.
 */
#ifndef RECEIPTD_DAEMON_QUERY_H
#define RECEIPTD_DAEMON_QUERY_H

#include <stdint.h>

#include <msgpack.h>

#include "error.h"

struct server;
struct conn_slot;
struct query_pool;

#define QUERY_LIMIT_DEFAULT 100
#define QUERY_LIMIT_MAX     10000

/*
 * A pool of at most n read-only connections to db_path (borrowed; copied),
 * opened on first use. Returns 0 or PROTO_ENOMEM.
 */
int query_pool_new(const char *db_path, unsigned n, uint32_t timeout_ms,
                   struct query_pool **out, struct proto_err *err);

/* Closes every connection. Call when no query is in flight. NULL is a
 * no-op. */
void query_pool_free(struct query_pool *qp);

/*
 * Borrows a read-only store from the pool for a threadpool thread (the
 * readback op), waiting while every connection is busy, and gives it back.
 * Never on the loop thread. Returns 0 or PROTO_EUNAVAILABLE/PROTO_ENOMEM.
 */
struct store;
int query_pool_borrow(struct query_pool *qp, struct store **out,
                      struct proto_err *err);
void query_pool_return(struct query_pool *qp, struct store *s);

/*
 * Parses body (borrowed, only during the call) and queues the query; the
 * slot is completed with the reply on the loop thread later. Returns 0, or
 * an error for the caller to reply at once (PROTO_EINVALID with its path:
 * "kind" for an unknown kind, the filter's name otherwise).
 */
int query_start(struct query_pool *qp, struct server *srv,
                struct conn_slot *slot, int has_id, uint64_t id,
                const msgpack_object *body, struct proto_err *err);

#endif
