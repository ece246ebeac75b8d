/*
 * query.c: the `query` op: the kind table and the parsing every kind
 * shares (loop thread), execution and reply encoding (a libuv threadpool
 * thread), completion (loop thread). Each kind parses and runs in its own
 * room (query_kind.h): receipts, stats and prunes here, the aggregates in
 * query_agg.c, plans and retained values in query_plan.c.
 *
 * A request copies every filter string out of the frame, so the frame is
 * freed at once. The pool hands each running query its own read-only
 * connection; when all are busy the thread waits for one, so at most
 * query_threads SQLite readers exist. Rows are packed into a side buffer
 * first, because the row count and `truncated` are known only at the end.
 */
#include "query.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "conn.h"
#include "dispatch.h"
#include "dispatch_plan.h"
#include "envelope.h"
#include "follow.h"
#include "invariant.h"
#include "log.h"
#include "metrics.h"
#include "mpcheck.h"
#include "notify.h"
#include "query_agg.h"
#include "query_kind.h"
#include "query_plan.h"
#include "receipt.h"
#include "reply.h"
#include "server.h"
#include "store.h"
#include "store_plan.h"
#include "store_prune.h"
#include "store_agg.h"
#include "writer.h"

#define POOL_MAX       64
#define FILTER_STR_MAX 4096

struct query_pool {
    char *path;
    unsigned max, open;
    uint32_t timeout_ms;
    uv_mutex_t mu;
    uv_cond_t cond;
    struct store *idle[POOL_MAX]; /* guarded by mu */
    unsigned n_idle;
    struct store_shared *shared; /* a reference, or NULL */
    int backend;                 /* store_opts.backend of the connections */
};

struct qreq {
    uv_work_t work;
    struct query_pool *qp;
    struct conn_slot *slot;
    const struct query_kind *kind; /* NULL for a job of another op */
    query_run_fn job_run;          /* ... which runs this */
    void *job_arg;                 /* ... on this, */
    void (*job_free)(void *);      /* ... freed by this at the end */
    int has_id;
    uint64_t id;
    struct query_args a;
    struct query_snapshot snap;
    char *reply;
    size_t len;
};

int
query_pool_new(const char *db_path, unsigned n, uint32_t timeout_ms,
               struct query_pool **out, struct proto_err *err)
{
    struct query_pool *qp = calloc(1, sizeof(*qp));

    *out = NULL;
    if (qp == NULL || (qp->path = strdup(db_path)) == NULL) {
        free(qp);
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    }
    qp->max = n < 1 ? 1 : n > POOL_MAX ? POOL_MAX : n;
    qp->timeout_ms = timeout_ms;
    uv_mutex_init(&qp->mu);
    uv_cond_init(&qp->cond);
    *out = qp;
    return 0;
}

void
query_pool_set_shared(struct query_pool *qp, struct store_shared *sh)
{
    store_shared_unref(qp->shared);
    qp->shared = store_shared_ref(sh);
}

void
query_pool_set_backend(struct query_pool *qp, int backend)
{
    qp->backend = backend;
}

void
query_pool_set_timeout(struct query_pool *qp, uint32_t timeout_ms)
{
    qp->timeout_ms = timeout_ms;
}

void
query_pool_free(struct query_pool *qp)
{
    unsigned i;

    if (qp == NULL)
        return;
    for (i = 0; i < qp->n_idle; i++)
        store_free(qp->idle[i]);
    uv_cond_destroy(&qp->cond);
    uv_mutex_destroy(&qp->mu);
    store_shared_unref(qp->shared);
    free(qp->path);
    free(qp);
}

/* Borrows a read-only connection, opening one when under the limit. */
static int
pool_get(struct query_pool *qp, struct store **out, struct proto_err *err)
{
    struct store_opts opts;
    int rc;

    uv_mutex_lock(&qp->mu);
    while (qp->n_idle == 0 && qp->open >= qp->max)
        uv_cond_wait(&qp->cond, &qp->mu);
    if (qp->n_idle > 0) {
        *out = qp->idle[--qp->n_idle];
        uv_mutex_unlock(&qp->mu);
        return 0;
    }
    qp->open++;
    uv_mutex_unlock(&qp->mu);
    memset(&opts, 0, sizeof(opts));
    opts.readonly = 1;
    opts.backend = qp->backend;
    opts.shared = qp->shared;
    rc = store_open(qp->path, &opts, out, err);
    if (rc != 0) {
        uv_mutex_lock(&qp->mu);
        qp->open--;
        uv_cond_signal(&qp->cond);
        uv_mutex_unlock(&qp->mu);
    }
    return rc;
}

static void
pool_put(struct query_pool *qp, struct store *s)
{
    uv_mutex_lock(&qp->mu);
    qp->idle[qp->n_idle++] = s;
    uv_cond_signal(&qp->cond);
    uv_mutex_unlock(&qp->mu);
}

/* ---- parsing ---- */

static int
opt_str(const msgpack_object *body, const char *key, char **copy,
        const char **out, size_t *out_len, struct proto_err *err)
{
    const msgpack_object *o = mpobj_map_get(body, key, NULL);
    struct proto_str s;

    if (o == NULL || o->type == MSGPACK_OBJECT_NIL)
        return 0;
    if (mpobj_str(o, FILTER_STR_MAX, &s, err) != 0) {
        proto_err_prefix_field(err, key);
        return PROTO_EINVALID;
    }
    *copy = malloc(s.len + 1);
    if (*copy == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    memcpy(*copy, s.ptr, s.len);
    (*copy)[s.len] = '\0';
    *out = *copy;
    *out_len = s.len;
    return 0;
}

int
query_opt_uint(const msgpack_object *body, const char *key, int *has,
               uint64_t *v, struct proto_err *err)
{
    const msgpack_object *o = mpobj_map_get(body, key, NULL);

    if (o == NULL || o->type == MSGPACK_OBJECT_NIL)
        return 0;
    if (mpobj_uint(o, UINT64_MAX, v, err) != 0) {
        proto_err_prefix_field(err, key);
        return PROTO_EINVALID;
    }
    *has = 1;
    return 0;
}

int
query_opt_bool(const msgpack_object *body, const char *key, int *v,
               struct proto_err *err)
{
    const msgpack_object *o = mpobj_map_get(body, key, NULL);

    if (o == NULL || o->type == MSGPACK_OBJECT_NIL)
        return 0;
    if (o->type != MSGPACK_OBJECT_BOOLEAN)
        return proto_err_set(err, PROTO_EINVALID, key,
                             "expected %s as a boolean", key);
    *v = o->via.boolean;
    return 0;
}

int
query_opt_enum(const msgpack_object *body, const char *key,
               int (*from_name)(const char *, size_t), const char *expected,
               int *out, struct proto_err *err)
{
    const msgpack_object *o = mpobj_map_get(body, key, NULL);
    struct proto_str s;

    *out = -1;
    if (o == NULL || o->type == MSGPACK_OBJECT_NIL)
        return 0;
    if (mpobj_str(o, 64, &s, err) != 0) {
        proto_err_prefix_field(err, key);
        return PROTO_EINVALID;
    }
    *out = from_name(s.ptr, s.len);
    if (*out < 0)
        return proto_err_set(err, PROTO_EINVALID, key,
                             "unknown %s \"%.*s\"; expected %s", key,
                             (int)s.len, s.ptr, expected);
    return 0;
}

#define BACKENDS                                                               \
    "cpu, wgpu-dx12, wgpu-vulkan, wgpu-metal, cuda, metal or unknown"

/* The filters every kind shares (PROTOCOL section 9). */
int
query_parse_common(struct query_args *a, const msgpack_object *body,
                   struct proto_err *err)
{
    struct store_filter *f = &a->f;
    uint64_t limit = QUERY_LIMIT_DEFAULT;
    int has_limit = 0, rc;

    if ((rc =
             opt_str(body, "plan", &a->strs[0], &f->plan, &f->plan_len, err)) ||
        (rc = opt_str(body, "graph", &a->strs[1], &f->graph, &f->graph_len,
                      err)) ||
        (rc = opt_str(body, "model", &a->strs[2], &f->model, &f->model_len,
                      err)) ||
        (rc = opt_str(body, "source", &a->strs[3], &f->source, &f->source_len,
                      err)) ||
        (rc = query_opt_enum(body, "requested", receipt_backend_from_name,
                             BACKENDS, &f->requested, err)) ||
        (rc = query_opt_enum(body, "executed", receipt_backend_from_name,
                             BACKENDS, &f->executed, err)) ||
        (rc = query_opt_uint(body, "since", &f->has_since, &f->since, err)) ||
        (rc = query_opt_uint(body, "until", &f->has_until, &f->until, err)) ||
        (rc = query_opt_uint(body, "limit", &has_limit, &limit, err)))
        return rc;
    if (has_limit && (limit < 1 || limit > QUERY_LIMIT_MAX))
        return proto_err_set(err, PROTO_EINVALID, "limit",
                             "limit %llu is outside 1..%d",
                             (unsigned long long)limit, QUERY_LIMIT_MAX);
    f->limit = (uint32_t)limit;
    f->status = -1;
    return 0;
}

static int
parse_receipts(struct query_args *a, const msgpack_object *body,
               struct proto_err *err)
{
    int rc;

    if ((rc = query_parse_common(a, body, err)) ||
        (rc = query_opt_uint(body, "before_id", &a->f.has_before_id,
                             &a->f.before_id, err)) ||
        (rc = opt_str(body, "origin", &a->strs[4], &a->f.origin,
                      &a->f.origin_len, err)) ||
        (rc = query_opt_enum(body, "status", receipt_status_from_name,
                             "fallback, clean or unproven", &a->f.status,
                             err)) ||
        (rc = query_opt_uint(body, "after_id", &a->f.has_after_id,
                             &a->f.after_id, err)) ||
        (rc = query_opt_bool(body, "follow", &a->follow, err)))
        return rc;
    if (a->follow && a->f.has_before_id)
        return proto_err_set(err, PROTO_EINVALID, "before_id",
                             "a follow goes forward: before_id does not "
                             "apply (after_id does)");
    return 0;
}

static int
parse_stats(struct query_args *a, const msgpack_object *body,
            struct proto_err *err)
{
    (void)a;
    (void)body;
    (void)err;
    return 0;
}

/* ---- running ---- */

static int
kv_str(msgpack_packer *pk, const char *k, const char *p, size_t n)
{
    return envelope_pack_cstr(pk, k) != 0 || msgpack_pack_str(pk, n) != 0 ||
           msgpack_pack_str_body(pk, p, n) != 0;
}

static int
kv_uint(msgpack_packer *pk, const char *k, uint64_t v)
{
    return envelope_pack_cstr(pk, k) != 0 || msgpack_pack_uint64(pk, v) != 0;
}

static int
kv_double(msgpack_packer *pk, const char *k, double v)
{
    return envelope_pack_cstr(pk, k) != 0 || msgpack_pack_double(pk, v) != 0;
}

struct rows {
    msgpack_sbuffer sb; /* the rows, packed one after another */
    msgpack_packer pk;
    msgpack_sbuffer tmp; /* one receipt's own map form */
    msgpack_packer tpk;
    uint32_t n;
    uint64_t last_id; /* the last row's */
};

static int
receipt_row_cb(void *arg, const struct store_row *row)
{
    struct rows *rs = arg;
    msgpack_packer *pk = &rs->pk;
    const char *status = receipt_status_name(row->status);
    msgpack_unpacked up;
    const msgpack_object *o;
    size_t off = 0;
    uint32_t i;
    int failed;

    /* The receipt's own fields come from receipt_encode(), so a row shows
     * exactly what the map form of PROTOCOL section 4 would, plus
     * tuning_profile "" on schema-1 rows as section 9 asks. */
    rs->tmp.size = 0;
    if (receipt_encode_flags(&row->r, &rs->tpk, RECEIPT_ENCODE_TUNING) != 0)
        return PROTO_ENOMEM;
    msgpack_unpacked_init(&up);
    /* What receipt_encode() just packed unpacks (but for memory), and is
     * a map. */
    if (msgpack_unpack_next(&up, rs->tmp.data, rs->tmp.size, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        NEVER(up.data.type != MSGPACK_OBJECT_MAP)) {
        msgpack_unpacked_destroy(&up);
        return PROTO_ENOMEM;
    }
    o = &up.data;
    failed = msgpack_pack_map(pk, 5 + o->via.map.size) != 0 ||
             kv_uint(pk, "receipt_id", (uint64_t)row->receipt_id) != 0 ||
             kv_uint(pk, "received_at", (uint64_t)row->received_at) != 0 ||
             kv_str(pk, "source", row->source.ptr, row->source.len) != 0 ||
             envelope_pack_cstr(pk, "seq") != 0 ||
             (row->has_seq ? msgpack_pack_uint64(pk, row->seq)
                           : msgpack_pack_nil(pk)) != 0 ||
             kv_str(pk, "fallback", status ? status : "",
                    status ? strlen(status) : 0) != 0;
    for (i = 0; i < o->via.map.size && !failed; i++)
        failed = msgpack_pack_object(pk, o->via.map.ptr[i].key) != 0 ||
                 msgpack_pack_object(pk, o->via.map.ptr[i].val) != 0;
    msgpack_unpacked_destroy(&up);
    if (failed)
        return PROTO_ENOMEM;
    rs->n++;
    rs->last_id = (uint64_t)row->receipt_id;
    return 0;
}

int
query_pack_receipts(struct query_args *a, struct store *s, msgpack_packer *pk,
                    unsigned extra, int silent_if_empty,
                    struct query_rows_info *info, struct proto_err *err)
{
    struct rows rs;
    int truncated = 0, rc;

    memset(&rs, 0, sizeof(rs));
    memset(info, 0, sizeof(*info));
    msgpack_sbuffer_init(&rs.sb);
    msgpack_packer_init(&rs.pk, &rs.sb, msgpack_sbuffer_write);
    msgpack_sbuffer_init(&rs.tmp);
    msgpack_packer_init(&rs.tpk, &rs.tmp, msgpack_sbuffer_write);
    rc = store_query_receipts(s, &a->f, a->deadline_ms, receipt_row_cb, &rs,
                              &truncated, err);
    if (rc == PROTO_ENOMEM)
        proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    info->n = rs.n;
    info->truncated = truncated;
    info->last_id = rs.last_id;
    if (rc == 0 && rs.n == 0 && silent_if_empty)
        rc = QUERY_RUN_SILENT;
    else if (rc == 0 &&
             (msgpack_pack_map(pk, 2 + extra) != 0 ||
              envelope_pack_cstr(pk, "rows") != 0 ||
              msgpack_pack_array(pk, rs.n) != 0 ||
              (rs.sb.size > 0 &&
               msgpack_sbuffer_write(pk->data, rs.sb.data, rs.sb.size) != 0) ||
              envelope_pack_cstr(pk, "truncated") != 0 ||
              (truncated ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) !=
                  0))
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    msgpack_sbuffer_destroy(&rs.sb);
    msgpack_sbuffer_destroy(&rs.tmp);
    return rc;
}

int
query_run_receipts(struct query_args *a, struct store *s, msgpack_packer *pk,
                   struct proto_err *err)
{
    struct query_rows_info info;

    return query_pack_receipts(a, s, pk, 0, 0, &info, err);
}

/* The relay's figures in `stats` (docs/fleet.md), only on a node that
 * relays. */
static int
kv_str_or_nil(msgpack_packer *pk, const char *k, const char *v)
{
    return envelope_pack_cstr(pk, k) != 0 ||
           (v[0] != '\0' ? envelope_pack_cstr(pk, v) : msgpack_pack_nil(pk)) !=
               0;
}

static int
pack_relay(msgpack_packer *pk, const struct relay_stats *r)
{
    return kv_str_or_nil(pk, "relay_endpoint", r->endpoint) ||
           envelope_pack_cstr(pk, "relay_connected") != 0 ||
           (r->connected ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) ||
           kv_uint(pk, "relay_acked_id", r->acked_id) != 0 ||
           kv_uint(pk, "relay_backlog", r->backlog_records) != 0 ||
           kv_uint(pk, "relay_backlog_bytes", r->backlog_bytes) != 0 ||
           kv_uint(pk, "relay_oldest_undelivered_ms", r->oldest_ms) != 0 ||
           envelope_pack_cstr(pk, "relay_last_success") != 0 ||
           (r->last_success_ms ? msgpack_pack_uint64(pk, r->last_success_ms)
                               : msgpack_pack_nil(pk)) != 0 ||
           kv_uint(pk, "relay_relayed", r->relayed) != 0 ||
           kv_uint(pk, "relay_plans_relayed", r->plans_relayed) != 0 ||
           kv_uint(pk, "relay_retained_relayed", r->values_relayed) != 0 ||
           kv_uint(pk, "relay_failures", r->failures) != 0 ||
           kv_str_or_nil(pk, "relay_error", r->error);
}

/* The entries of a map whose keys and values were packed into sb, as a
 * map: counted from the bytes, so no count is kept by hand. */
static int
pack_counted_map(msgpack_packer *pk, const msgpack_sbuffer *sb)
{
    size_t off = 0, n = 0, one;

    while (off < sb->size &&
           (one = mpcheck_skip(sb->data + off, sb->size - off)) > 0) {
        off += one;
        n++;
    }
    return off != sb->size || n % 2 != 0 ||
           msgpack_pack_map(pk, (uint32_t)(n / 2)) != 0 ||
           envelope_pack_raw(pk, sb->data, sb->size) != 0;
}

static int
run_stats(struct query_args *a, struct store *s, msgpack_packer *out,
          struct proto_err *err)
{
    const struct query_snapshot *sn = a->snap;
    struct store_stats st;
    uint64_t groups = sn->w.groups, plans, retained;
    msgpack_sbuffer sb;
    msgpack_packer pkb, *pk = &pkb;
    int rc, failed;

    if ((rc = store_query_stats(s, a->deadline_ms, &st, err)) ||
        (rc = store_plan_counts(s, &plans, &retained, err)))
        return rc;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(pk, &sb, msgpack_sbuffer_write);
    failed =
        kv_uint(pk, "uptime_ms", sn->now_ms - sn->started_ms) != 0 ||
        kv_uint(pk, "started_at", sn->started_ms) != 0 ||
        kv_uint(pk, "connections", sn->connections) != 0 ||
        kv_uint(pk, "connections_total", sn->n.connections_total) != 0 ||
        kv_uint(pk, "connections_refused", sn->n.connections_refused) != 0 ||
        kv_uint(pk, "frames", sn->n.frames) != 0 ||
        kv_uint(pk, "framing_errors", sn->n.framing_errors) != 0 ||
        kv_uint(pk, "auth_failures", sn->n.auth_failures) != 0 ||
        kv_uint(pk, "unauthenticated_refused", sn->n.unauthenticated_refused) !=
            0 ||
        kv_uint(pk, "tls_handshakes", sn->n.tls_handshakes) != 0 ||
        kv_uint(pk, "tls_failures", sn->n.tls_failures) != 0 ||
        kv_uint(pk, "notify_dropped", sn->notify_dropped) != 0 ||
        kv_uint(pk, "accepted", sn->n.accepted) != 0 ||
        kv_uint(pk, "rejected", sn->n.rejected) != 0 ||
        kv_uint(pk, "duplicates", sn->n.duplicates) != 0 ||
        kv_uint(pk, "conflicts", sn->n.conflicts) != 0 ||
        kv_uint(pk, "quarantined", sn->n.quarantined) != 0 ||
        kv_uint(pk, "quarantine_rows", st.quarantined) != 0 ||
        kv_uint(pk, "quarantine_bytes", st.quarantine_bytes) != 0 ||
        kv_uint(pk, "quarantine_evictions", st.quarantine_evictions) != 0 ||
        kv_uint(pk, "stray_coverage", sn->n.stray_coverage) != 0 ||
        kv_uint(pk, "unavailable", sn->n.unavailable) != 0 ||
        kv_uint(pk, "commit_groups", groups) != 0 ||
        kv_uint(pk, "writer_cpu_us", sn->w.cpu_us) != 0 ||
        kv_uint(pk, "checkpoints", sn->w.checkpoints) != 0 ||
        kv_uint(pk, "checkpoint_us", sn->w.checkpoint_us) != 0 ||
        kv_uint(pk, "wal_syncs", sn->w.syncs) != 0 ||
        kv_uint(pk, "wal_sync_us", sn->w.sync_us) != 0 ||
        kv_uint(pk, "commit_failures", sn->w.failures) != 0 ||
        envelope_pack_cstr(pk, "store_failing") != 0 ||
        (sn->w.failing ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) ||
        envelope_pack_cstr(pk, "store_last_error") != 0 ||
        /* nil until a group commit has failed */
        (sn->w.last_error[0] != '\0' ? envelope_pack_cstr(pk, sn->w.last_error)
                                     : msgpack_pack_nil(pk)) != 0 ||
        kv_double(pk, "commit_last_ms", (double)sn->w.last_us / 1000.0) != 0 ||
        kv_double(pk, "commit_mean_ms",
                  groups ? (double)sn->w.total_us / 1000.0 / (double)groups
                         : 0.0) != 0 ||
        kv_double(pk, "commit_max_ms", (double)sn->w.max_us / 1000.0) != 0 ||
        kv_uint(pk, "acks", sn->w.ack.count) != 0 ||
        kv_double(pk, "ack_mean_ms",
                  sn->w.ack.count ? (double)sn->w.ack.sum_us / 1000.0 /
                                        (double)sn->w.ack.count
                                  : 0.0) != 0 ||
        kv_uint(pk, "pending_writes", sn->w.queued) != 0 ||
        kv_uint(pk, "pending_bytes", sn->pending_bytes) != 0 ||
        kv_uint(pk, "store_size_bytes", st.size_bytes) != 0 ||
        kv_uint(pk, "plans", plans) != 0 ||
        kv_uint(pk, "retained_values", retained) != 0 ||
        kv_uint(pk, "pruned", sn->w.pruned) != 0 ||
        kv_uint(pk, "prune_runs", sn->w.prune_runs) != 0 ||
        kv_uint(pk, "pruned_undelivered", sn->w.pruned_undelivered) != 0 ||
        kv_uint(pk, "prune_failures", sn->w.prune_failures) != 0 ||
        kv_uint(pk, "aggregates_from_memory", sn->agg_from_memory) != 0 ||
        kv_uint(pk, "aggregates_from_rows", sn->agg_from_rows) != 0 ||
        kv_uint(pk, "followers", sn->followers) != 0 ||
        kv_uint(pk, "followers_total", sn->n.followers_total) != 0 ||
        kv_uint(pk, "followers_cut_off", sn->n.followers_cut_off) != 0 ||
        (sn->relay_on && pack_relay(pk, &sn->relay) != 0);
    failed = failed || msgpack_pack_map(out, 2) != 0 ||
             envelope_pack_cstr(out, "rows") != 0 ||
             msgpack_pack_array(out, 1) != 0 ||
             pack_counted_map(out, &sb) != 0 ||
             envelope_pack_cstr(out, "truncated") != 0 ||
             msgpack_pack_false(out) != 0;
    msgpack_sbuffer_destroy(&sb);
    if (failed)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    return 0;
}

static int
pack_prune(msgpack_packer *pk, const struct store_prune_rec *r)
{
    static const char *const keys[7] = {
        "id",         "pruned_at",          "cutoff_at",
        "rows",       "oldest_received_at", "newest_received_at",
        "undelivered"
    };
    const int64_t v[7] = { r->id,     r->pruned_at, r->cutoff,     r->rows,
                           r->oldest, r->newest,    r->undelivered };
    int i;

    if (msgpack_pack_map(pk, 7) != 0)
        return -1;
    for (i = 0; i < 7; i++)
        if (envelope_pack_cstr(pk, keys[i]) != 0 ||
            msgpack_pack_int64(pk, v[i]) != 0)
            return -1;
    return 0;
}

/* What retention removed, and when (store_query_prune.c). */
static int
run_prunes(struct query_args *a, struct store *s, msgpack_packer *pk,
           struct proto_err *err)
{
    struct store_prune_rec *recs;
    size_t n, i;
    int rc, truncated;

    rc = store_query_prunes(s, &a->f, a->deadline_ms, &recs, &n, &truncated,
                            err);
    if (rc != 0)
        return rc;
    rc = msgpack_pack_map(pk, 2) != 0 || envelope_pack_cstr(pk, "rows") != 0 ||
         msgpack_pack_array(pk, (uint32_t)n) != 0;
    for (i = 0; i < n && rc == 0; i++)
        rc = pack_prune(pk, &recs[i]) != 0;
    if (rc == 0)
        rc = envelope_pack_cstr(pk, "truncated") != 0 ||
             (truncated ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) != 0;
    free(recs);
    if (rc != 0)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    return 0;
}

static const struct query_kind kind_receipts = { "receipts", parse_receipts,
                                                 query_run_receipts };
static const struct query_kind kind_stats = { "stats", parse_stats, run_stats };
static const struct query_kind kind_prunes = { "prunes", query_parse_common,
                                               run_prunes };

/* Every kind, in the order the error message names them. */
static const struct query_kind *const kinds[] = {
    &kind_receipts,      &query_kind_fallbacks,  &query_kind_coverage,
    &query_kind_gaps,    &query_kind_quarantine, &kind_stats,
    &query_kind_plans,   &query_kind_retained,   &kind_prunes,
    &query_kind_metrics,
};

#define KIND_NAMES                                                             \
    "receipts, fallbacks, coverage, gaps, quarantine, stats, plans, "          \
    "retained, prunes or metrics"

#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

/* The loop's figures as a query sees them; loop thread. */
static void
snapshot(struct query_snapshot *sn, struct server *srv)
{
    sn->now_ms = server_now_unix_ms();
    sn->started_ms = srv->started_ms;
    sn->connections = srv->n_conns;
    sn->pending_bytes = srv->pending_bytes;
    sn->n = srv->n;
    sn->notify_dropped = notify_dropped();
    sn->followers = srv->n_followers;
    sn->metrics_models = srv->cfg->metrics_model_series;
    store_shared_counts(srv->queries ? srv->queries->shared : NULL,
                        &sn->agg_from_memory, &sn->agg_from_rows);
    writer_get_stats(srv->writer, &sn->w);
    sn->relay_on = srv->relay != NULL;
    if (sn->relay_on)
        relay_get_stats(srv->relay, &sn->relay);
}

static void
qreq_free(struct qreq *q)
{
    int i;

    for (i = 0; i < 5; i++)
        free(q->a.strs[i]);
    if (q->job_free != NULL)
        q->job_free(q->job_arg);
    free(q->reply);
    free(q);
}

static void
work_cb(uv_work_t *w)
{
    struct qreq *q = w->data;
    struct proto_err err;
    struct store *s = NULL;
    struct reply r;
    int rc;

    proto_err_clear(&err);
    /* The peer has gone: its reply would be dropped, so the work (a
     * query may read 10,000 rows) is not done. */
    if (atomic_load(&q->slot->abandoned)) {
        q->reply = NULL;
        q->len = 0;
        return;
    }
    rc = pool_get(q->qp, &s, &err);
    if (rc == 0) {
        if (reply_begin_ok(&r, q->has_id, q->id, 0) != 0)
            rc = proto_err_set(&err, PROTO_ENOMEM, NULL, "out of memory");
        else if (q->kind != NULL)
            rc = q->kind->run(&q->a, s, &r.pk, &err);
        else
            rc = q->job_run(q->job_arg, s, q->a.deadline_ms, &r.pk, &err);
        pool_put(q->qp, s);
        if (rc == QUERY_RUN_SILENT) {
            /* Nothing to say: the slot completes without a reply. */
            reply_finish(&r, 1, &q->len);
            q->reply = NULL;
            q->len = 0;
            return;
        }
        if ((q->reply = reply_finish(&r, rc != 0, &q->len)) != NULL)
            return;
        if (rc == 0)
            rc = proto_err_set(&err, PROTO_ENOMEM, NULL, "out of memory");
    }
    q->reply = reply_error(q->has_id, q->id, &err, &q->len);
}

static void
after_cb(uv_work_t *w, int status)
{
    struct qreq *q = w->data;
    struct proto_err err;
    char *reply = q->reply;

    if (status != 0) {
        free(reply);
        proto_err_set(&err, PROTO_EUNAVAILABLE, NULL,
                      "the %s was cancelled while the daemon stopped",
                      q->kind != NULL ? "query" : "request");
        reply = reply_error(q->has_id, q->id, &err, &q->len);
    }
    q->reply = NULL;
    q->slot->c->n_queries--;
    conn_slot_complete(q->slot, reply, q->len);
    qreq_free(q);
}

/* Queues q on the threadpool with its deadline; q is freed on failure. */
static int
queue(struct qreq *q, struct server *srv, struct proto_err *err)
{
    const char *what = q->kind != NULL ? "query" : "request";

    /* Replies waiting for readers that do not read, over every
     * connection, are bounded by max_pending_bytes: past it no new reply
     * is computed (each connection's own share is bounded by
     * max_unsent_bytes and one query at a time, conn.h). */
    if (srv->unsent_bytes > srv->cfg->max_pending_bytes) {
        qreq_free(q);
        return proto_err_set(err, PROTO_EOVERLOADED, NULL,
                             "replies not yet read by their peers hold %llu "
                             "MiB, over max_pending; try the %s later",
                             (unsigned long long)(srv->unsent_bytes >> 20),
                             what);
    }
    q->a.deadline_ms =
        q->qp->timeout_ms ? store_now_ms() + q->qp->timeout_ms : 0;
    q->work.data = q;
    if (uv_queue_work(srv->loop, &q->work, work_cb, after_cb) != 0) {
        qreq_free(q);
        return proto_err_set(err, PROTO_EOVERLOADED, NULL,
                             "cannot queue the %s; try later", what);
    }
    /* The connection's count of queries in flight is this file's alone:
     * up here, down in after_cb. */
    q->slot->c->n_queries++;
    return 0;
}

int
query_start(struct query_pool *qp, struct server *srv, struct conn_slot *slot,
            int has_id, uint64_t id, const msgpack_object *body,
            struct proto_err *err)
{
    const msgpack_object *o;
    struct proto_str kind;
    struct qreq *q;
    size_t i;
    int rc;

    if (body == NULL || body->type != MSGPACK_OBJECT_MAP)
        return proto_err_set(err, PROTO_EINVALID, body ? "" : "body",
                             "expected the query body as a map with a "
                             "\"kind\"");
    o = mpobj_map_get(body, "kind", NULL);
    if (o == NULL)
        return proto_err_set(err, PROTO_EINVALID, "kind",
                             "missing kind; expected " KIND_NAMES);
    if (mpobj_str(o, 64, &kind, err) != 0) {
        proto_err_prefix_field(err, "kind");
        return PROTO_EINVALID;
    }
    for (i = 0; i < NKINDS; i++)
        if (strlen(kinds[i]->name) == kind.len &&
            memcmp(kinds[i]->name, kind.ptr, kind.len) == 0)
            break;
    if (i == NKINDS)
        return proto_err_set(
            err, PROTO_EINVALID, "kind",
            "unknown query kind \"%.*s\"; expected " KIND_NAMES, (int)kind.len,
            kind.ptr);
    q = calloc(1, sizeof(*q));
    if (q == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    q->qp = qp;
    q->slot = slot;
    q->kind = kinds[i];
    q->has_id = has_id;
    q->id = id;
    q->a.f.requested = q->a.f.executed = q->a.f.status = -1;
    q->a.snap = &q->snap;
    if ((rc = q->kind->parse(&q->a, body, err)) != 0) {
        qreq_free(q);
        return rc;
    }
    if (q->a.follow) {
        /* The follower takes the filters (follow.c); the request's slot
         * carries its first reply. */
        rc = follow_start(srv, slot, has_id, id, &q->a, err);
        qreq_free(q);
        return rc;
    }
    snapshot(&q->snap, srv);
    return queue(q, srv, err);
}

int
query_submit(struct query_pool *qp, struct server *srv, struct conn_slot *slot,
             int has_id, uint64_t id, query_run_fn run, void *arg,
             void (*free_arg)(void *), struct proto_err *err)
{
    struct qreq *q = calloc(1, sizeof(*q));

    if (q == NULL) {
        if (free_arg != NULL)
            free_arg(arg);
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    }
    q->qp = qp;
    q->slot = slot;
    q->has_id = has_id;
    q->id = id;
    q->job_run = run;
    q->job_arg = arg;
    q->job_free = free_arg;
    return queue(q, srv, err);
}

/* ---- jobs without a connection (the HTTP listener) ---- */

struct dreq {
    uv_work_t work;
    struct query_pool *qp;
    struct server *srv;
    struct query_snapshot snap;
    uint64_t deadline_ms;
    query_detached_fn run;
    query_detached_done_fn done;
    void *arg;
    int rc;
    struct proto_err err;
};

static void
dwork_cb(uv_work_t *w)
{
    struct dreq *q = w->data;
    struct store *s = NULL;

    q->rc = pool_get(q->qp, &s, &q->err);
    if (q->rc != 0)
        return;
    q->rc = q->run(q->arg, s, &q->snap, q->deadline_ms, &q->err);
    pool_put(q->qp, s);
}

static void
dafter_cb(uv_work_t *w, int status)
{
    struct dreq *q = w->data;

    if (status != 0)
        q->rc = proto_err_set(&q->err, PROTO_EUNAVAILABLE, NULL,
                              "cancelled while the daemon stopped");
    q->done(q->arg, q->rc, &q->err);
    server_release(q->srv);
    free(q);
}

int
query_run_detached(struct query_pool *qp, struct server *srv,
                   query_detached_fn run, query_detached_done_fn done,
                   void *arg, struct proto_err *err)
{
    struct dreq *q;

    if (srv->draining || qp == NULL)
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "the daemon is stopping");
    q = calloc(1, sizeof(*q));
    if (q == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    q->qp = qp;
    q->srv = srv;
    q->run = run;
    q->done = done;
    q->arg = arg;
    proto_err_clear(&q->err);
    snapshot(&q->snap, srv);
    q->deadline_ms = qp->timeout_ms ? store_now_ms() + qp->timeout_ms : 0;
    q->work.data = q;
    if (uv_queue_work(srv->loop, &q->work, dwork_cb, dafter_cb) != 0) {
        free(q);
        return proto_err_set(err, PROTO_EOVERLOADED, NULL,
                             "cannot queue the request; try later");
    }
    /* The drain waits for it as for a connection: the pool stays open. */
    server_hold(srv);
    return 0;
}
