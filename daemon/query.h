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
struct store_shared;

#define QUERY_LIMIT_DEFAULT 100
#define QUERY_LIMIT_MAX     10000

/*
 * A pool of at most n read-only connections to db_path (borrowed; copied),
 * opened on first use. Returns 0 or PROTO_ENOMEM.
 */
int query_pool_new(const char *db_path, unsigned n, uint32_t timeout_ms,
                   struct query_pool **out, struct proto_err *err);

/* Sets the deadline of queries started from now on (0: none). Loop
 * thread (reload). */
void query_pool_set_timeout(struct query_pool *qp, uint32_t timeout_ms);
/* The writer's registry of rollup sums (store_opts.shared) for the
 * connections opened from now on; the pool takes a reference. Before the
 * first query. */
void query_pool_set_shared(struct query_pool *qp, struct store_shared *sh);
/* The backend (store_opts.backend) of the connections it opens from now
 * on; db_path is then that backend's where (store_open). */
void query_pool_set_backend(struct query_pool *qp, int backend);

/* Closes every connection. Call when no query is in flight. NULL is a
 * no-op. */
void query_pool_free(struct query_pool *qp);

struct store;

/*
 * A request of another op that runs like a query (readback): on the
 * threadpool, with a read-only store borrowed from the pool, before
 * deadline_ms (0: none). It packs the reply's result after the ok header
 * and returns 0, or an error to be replied instead.
 */
typedef int (*query_run_fn)(void *arg, struct store *s, uint64_t deadline_ms,
                            msgpack_packer *pk, struct proto_err *err);

/*
 * Queues run(arg) as above; the slot is completed with the reply on the
 * loop thread later and arg is then freed with free_arg (when not NULL).
 * The caller counts the request in its connection's n_queries when this
 * returns 0, as for query_start(). On failure arg is freed at once and the
 * error (PROTO_ENOMEM, PROTO_EOVERLOADED) is for the caller to reply.
 */
int query_submit(struct query_pool *qp, struct server *srv,
                 struct conn_slot *slot, int has_id, uint64_t id,
                 query_run_fn run, void *arg, void (*free_arg)(void *),
                 struct proto_err *err);

/*
 * Parses body (borrowed, only during the call) and queues the query; the
 * slot is completed with the reply on the loop thread later. Returns 0, or
 * an error for the caller to reply at once (PROTO_EINVALID with its path:
 * "kind" for an unknown kind, the filter's name otherwise).
 */
int query_start(struct query_pool *qp, struct server *srv,
                struct conn_slot *slot, int has_id, uint64_t id,
                const msgpack_object *body, struct proto_err *err);

/*
 * A job for a caller without a connection (the HTTP listener's /metrics):
 * run(arg, s, snap, deadline_ms, err) on the threadpool with a read-only
 * store of the pool and the loop's figures taken now; then done(arg, rc,
 * err) on the loop thread (rc PROTO_EUNAVAILABLE when the job was
 * cancelled at stop). The drain waits for it (server_hold). Loop thread.
 * Returns 0, or an error (the daemon is stopping, memory) with neither
 * callback called.
 */
struct query_snapshot;
typedef int (*query_detached_fn)(void *arg, struct store *s,
                                 const struct query_snapshot *snap,
                                 uint64_t deadline_ms, struct proto_err *err);
typedef void (*query_detached_done_fn)(void *arg, int rc,
                                       const struct proto_err *err);
int query_run_detached(struct query_pool *qp, struct server *srv,
                       query_detached_fn run, query_detached_done_fn done,
                       void *arg, struct proto_err *err);

#endif
