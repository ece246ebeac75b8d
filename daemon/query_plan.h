/*
 * query_plan.h: the `plans` and `retained` query kinds (query_plan.c).
 * Each runs on a query thread with the read-only store s, using f's plan,
 * graph, source, since, until and limit, and packs {"rows": [...],
 * "truncated"} into pk. Return 0 or a PROTO_E* code with err set.
 */
#ifndef RECEIPTD_DAEMON_QUERY_PLAN_H
#define RECEIPTD_DAEMON_QUERY_PLAN_H

#include <stdint.h>

#include <msgpack.h>

#include "error.h"

struct store;
struct store_filter;

int query_plan_plans(struct store *s, const struct store_filter *f,
                     uint64_t deadline_ms, msgpack_packer *pk,
                     struct proto_err *err);
int query_plan_retained(struct store *s, const struct store_filter *f,
                        uint64_t deadline_ms, msgpack_packer *pk,
                        struct proto_err *err);

#endif
