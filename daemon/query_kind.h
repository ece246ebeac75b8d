/*
 * query_kind.h: one kind of the `query` op (PROTOCOL section 9), as the
 * file that owns it offers it to query.c's table: its name, how its body
 * is parsed (loop thread) and how it runs and packs its result map (a
 * query thread). receipts, stats and prunes live in query.c, fallbacks,
 * coverage, gaps and quarantine in query_agg.c, plans and retained in
 * query_plan.c; the parsing helpers every kind shares are query.c's.
 */
#ifndef RECEIPTD_DAEMON_QUERY_KIND_H
#define RECEIPTD_DAEMON_QUERY_KIND_H

#include <stdint.h>

#include <msgpack.h>

#include "error.h"
#include "store.h"

#include "relay.h"
#include "server.h"
#include "writer.h"

/* The loop's figures, copied when a stats or metrics query starts. */
struct query_snapshot {
    uint64_t now_ms, started_ms, connections, pending_bytes;
    uint64_t notify_dropped; /* notify_dropped() */
    uint32_t metrics_models; /* metrics.model_series */
    /* Aggregate queries that read the writer's published sums of the
     * chunks not merged yet, and those that read those rows instead
     * (store_shared_counts). */
    uint64_t agg_from_memory, agg_from_rows;
    struct server_counters n;
    struct writer_stats w;
    uint64_t followers; /* follow.c: followers open now */
    int relay_on;       /* upstream configured: relay holds its figures */
    struct relay_stats relay;
};

/* What a kind's parse fills and its run reads. The strings of f point
 * into strs, owned copies (the frame is freed once parsed). */
struct query_args {
    struct store_filter f;
    char *strs[5]; /* plan, graph, model, source; receipts: origin */
    int group_by;  /* fallbacks, coverage: enum store_group */
    int has_qid;   /* quarantine: one row by its id */
    uint64_t qid;
    int raw; /* quarantine: with the payload bytes */
    /* gaps: only sources with missing seqs; only those quiet for
     * quiet_for ms (the cutoff is taken when the query runs) */
    int only_missing;
    int has_quiet_for;
    uint64_t quiet_for;
    /* fallbacks: only groups with a fallback; only those at min_rate */
    int only_fallbacks;
    int has_min_rate;
    double min_rate;
    /* receipts: stay open and push rows as they are committed (follow.c) */
    int follow;
    uint64_t deadline_ms;
    const struct query_snapshot *snap; /* stats: the loop's figures */
};

struct query_kind {
    const char *name;
    int (*parse)(struct query_args *a, const msgpack_object *body,
                 struct proto_err *err);
    int (*run)(struct query_args *a, struct store *s, msgpack_packer *pk,
               struct proto_err *err);
};

/* The filters every kind shares (plan, graph, model, source, requested,
 * executed, since, until, limit); a kind's parse starts with it. */
int query_parse_common(struct query_args *a, const msgpack_object *body,
                       struct proto_err *err);
/* Optional fields of body: a uint (*has set when present) and a name
 * from_name knows (-1 when absent; expected lists the names). */
int query_opt_uint(const msgpack_object *body, const char *key, int *has,
                   uint64_t *v, struct proto_err *err);
/* An optional boolean: *v left alone when absent or nil. */
int query_opt_bool(const msgpack_object *body, const char *key, int *v,
                   struct proto_err *err);
int query_opt_enum(const msgpack_object *body, const char *key,
                   int (*from_name)(const char *, size_t), const char *expected,
                   int *out, struct proto_err *err);

/* The `receipts` kind's run, which `fallbacks` without groups is too. */
int query_run_receipts(struct query_args *a, struct store *s,
                       msgpack_packer *pk, struct proto_err *err);

/* A run's answer when no reply is to be sent at all (a follower's fetch
 * that found nothing new): the slot completes without bytes. */
#define QUERY_RUN_SILENT 1

/* What query_pack_receipts found. */
struct query_rows_info {
    uint32_t n;       /* rows packed */
    int truncated;    /* more matched than f.limit */
    uint64_t last_id; /* the last row's receipt_id (0: none) */
};

/* The `receipts` result of a->f as a map of 2 + extra keys, rows and
 * truncated packed, the extra ones left for the caller; with
 * silent_if_empty and no row, nothing is packed and QUERY_RUN_SILENT
 * returned. info is filled either way. */
int query_pack_receipts(struct query_args *a, struct store *s,
                        msgpack_packer *pk, unsigned extra, int silent_if_empty,
                        struct query_rows_info *info, struct proto_err *err);

extern const struct query_kind query_kind_fallbacks, query_kind_coverage,
    query_kind_gaps, query_kind_quarantine;
extern const struct query_kind query_kind_plans, query_kind_retained;

#endif
