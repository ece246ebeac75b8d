/*
 * store_plan.h: the store's part of plans, retention and readback
 * (PROTOCOL sections 5 to 7, migration 0003). Like store.h it never sees
 * msgpack: plans and retained values travel as opaque msgpack bytes that
 * dispatch_plan.c encodes and decodes with proto/.
 *
 * The write functions (store_plan.c) run on the writer thread inside the
 * transaction of a write job, from its own apply (writer.h). The read
 * functions (store_query_plan.c) run on a query thread with a read-only
 * store. Every function returns 0 or a negative PROTO_E* code with the
 * detail in a caller-owned struct proto_err, as store.h describes.
 */
#ifndef RECEIPTD_DAEMON_STORE_PLAN_H
#define RECEIPTD_DAEMON_STORE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "str.h"
#include "store.h"

/* A plan's key. Both strings borrowed; graph may be empty. */
struct store_plan_key {
    struct proto_str plan;  /* prepared_plan_id */
    struct proto_str graph; /* graph_hash */
};

/*
 * Looks up the plan k. On success *id is its row id and *canonical a
 * malloc'd copy of its canonical bytes (*len of them) that the caller
 * frees; both are 0/NULL when no such plan is stored. Errors:
 * PROTO_EUNAVAILABLE, PROTO_ENOMEM (then *canonical is NULL). Read-write
 * store, inside the writer's transaction.
 */
int store_plan_get(struct store *s, const struct store_plan_key *k, int64_t *id,
                   void **canonical, size_t *len, struct proto_err *err);

/* A plan to insert. Every pointer borrowed for the call. */
struct store_plan_new {
    struct store_plan_key key;
    int64_t registered_at; /* unix milliseconds */
    struct proto_str source;
    uint64_t nodes, values;
    const void *canonical;
    size_t len;
};

/*
 * Inserts a plan whose key is not stored yet (the caller checked with
 * store_plan_get in the same transaction) and sets *id to its row id.
 * Returns 0 or PROTO_EUNAVAILABLE.
 */
int store_plan_put(struct store *s, const struct store_plan_new *p, int64_t *id,
                   struct proto_err *err);

/*
 * Stores the resolved value value_id (borrowed) of plan row plan_id as the
 * msgpack bytes value[0..len) (borrowed). A value already retained for
 * that plan is left as it is: it was resolved against the same plan.
 * Returns 0 or PROTO_EUNAVAILABLE.
 */
int store_plan_retain(struct store *s, int64_t plan_id,
                      struct proto_str value_id, int64_t retained_at,
                      const void *value, size_t len, struct proto_err *err);

/* A row of the `plans` query; strings borrow SQLite's memory and are valid
 * only during the callback. */
struct store_plan_row {
    struct proto_str plan, graph, source;
    int64_t registered_at;
    uint64_t nodes, values, retained;
};

typedef int (*store_plan_row_cb)(void *arg, const struct store_plan_row *row);

/*
 * The `plans` query: registered plans, newest first, filtered by f's plan,
 * graph, source, since and until (registration time), at most f->limit
 * rows; *truncated tells whether more matched. cb returns 0 or a PROTO_E*
 * code that stops the query with it. Interrupted with PROTO_EOVERLOADED
 * past deadline_ms (CLOCK_MONOTONIC, 0 = none). Read-only store.
 */
int store_query_plans(struct store *s, const struct store_filter *f,
                      uint64_t deadline_ms, store_plan_row_cb cb, void *arg,
                      int *truncated, struct proto_err *err);

/* A row of the `retained` query; borrowed like store_plan_row. value is
 * the stored msgpack RetainedCompletionValue. */
struct store_retained_row {
    struct proto_str plan, graph, value_id;
    int64_t retained_at;
    const void *value;
    size_t len;
};

typedef int (*store_retained_row_cb)(void *arg,
                                     const struct store_retained_row *row);

/*
 * The `retained` query: the retained values of the plans whose
 * prepared_plan_id is f->plan (required) and, when given, whose graph_hash
 * is f->graph, by plan and then value_id in byte order, at most f->limit
 * rows. Otherwise as store_query_plans.
 */
int store_query_retained(struct store *s, const struct store_filter *f,
                         uint64_t deadline_ms, store_retained_row_cb cb,
                         void *arg, int *truncated, struct proto_err *err);

/*
 * For a readback: whether plan k is stored (*plan_found) and, when it is
 * and value_id (borrowed) is retained for it, a malloc'd copy of the
 * value's msgpack bytes in *value (*len bytes; the caller frees it), else
 * NULL. Returns 0, PROTO_EUNAVAILABLE, PROTO_EOVERLOADED past the
 * deadline, or PROTO_ENOMEM. Read-only store.
 */
int store_plan_readback(struct store *s, const struct store_plan_key *k,
                        struct proto_str value_id, uint64_t deadline_ms,
                        int *plan_found, void **value, size_t *len,
                        struct proto_err *err);

/* Counts for the `stats` query: plans registered and values retained. */
int store_plan_counts(struct store *s, uint64_t *plans, uint64_t *retained,
                      struct proto_err *err);

#endif
