/*
 * dispatch_relay.c: the `relay` op at a center (docs/fleet.md).
 *
 * A node sends what it committed, in its id order, as
 * {stream, from_id, records: [[id, received_at, source, seq|nil,
 * payload], ...]}. The loop thread checks the whole batch (sizes before
 * anything is allocated, ids strictly rising, every payload through
 * receipt_decode as a producer's), then queues one job. On the writer
 * thread the job reads the origin's mark (the highest node id committed
 * here for the stream), stores only the records above it, each with the
 * producer's source, seq and received_at (store_write.relayed: no dedupe
 * by (source, seq), the node's id is the identity; the (source, seq) is
 * recorded for `gaps` where it is new), and raises the mark in the same
 * transaction. The reply, {committed_id, stored}, leaves after COMMIT, so
 * a node that reads committed_id may advance its cursor: a resend after a
 * lost reply stores nothing twice. Every step is an operation of the
 * store's backend (store_ops.h): SQLite gives the rows ids of its own and
 * records the batch's range; PostgreSQL keeps them under (origin, id).
 */
#include "dispatch_relay.h"

#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "conn.h"
#include "envelope.h"
#include "identity.h"
#include "invariant.h"
#include "mpobj.h"
#include "mpread.h"
#include "plan.h"
#include "receipt.h"
#include "reply.h"
#include "retention.h"
#include "server.h"
#include "store_plan.h"
#include "store_relay.h"
#include "writer.h"

/* One record of a batch: the receipt, or the plan's key and a retained
 * value's id, borrows the job's frame; a plan's canonical bytes, or a
 * retained value's bytes, are the record's own (canon). */
struct relay_rec {
    uint64_t id;
    int64_t received_at;
    struct proto_str source;
    int has_seq;
    uint64_t seq;
    struct receipt r;
    struct store_plan_key key;
    struct proto_str value_id;
    char *canon;
    size_t canon_len;
    uint64_t nnodes, nvalues;
};

struct rctx {
    struct conn_slot *slot;
    struct server *srv;
    int has_id;
    uint64_t id;
    char origin[CONN_SOURCE_MAX + 1];
    size_t origin_len;
    int plans;     /* the stream: plans, */
    int retention; /* retained values, else receipts */
    int follows;   /* stored only if the mark is at from_id or above */
    uint64_t from_id;
    struct relay_rec *recs;
    size_t n;
    /* Writer thread outputs. */
    uint64_t committed; /* the origin's mark after the job */
    uint64_t stored;    /* records stored (above the mark) */
    uint64_t conflicts; /* plans whose key holds another plan here;
                           values that this center's plan of their key
                           does not resolve to */
};

static void
answer(struct conn_slot *slot, int has_id, uint64_t id,
       const struct proto_err *err)
{
    size_t len;
    char *r = reply_error(has_id, id, err, &len);

    conn_slot_complete(slot, r, len);
}

static void
rctx_clear(struct rctx *x)
{
    size_t i;

    if (x == NULL)
        return;
    for (i = 0; x->recs != NULL && i < x->n; i++) {
        receipt_clear(&x->recs[i].r);
        free(x->recs[i].canon);
    }
    free(x->recs);
}

static void
rctx_free(struct rctx *x)
{
    if (x != NULL) {
        rctx_clear(x);
        free(x);
    }
}

/* A plan of the batch: stored unless its key is; a key that holds
 * another plan here is a conflict, counted and skipped (the node cannot
 * change it, and the stream must go on). */
static int
plan_apply(struct rctx *x, struct store *s, const struct relay_rec *r,
           struct proto_err *err)
{
    struct store_plan_new np;
    void *stored = NULL;
    size_t len = 0;
    int64_t id;
    int rc;

    if ((rc = store_plan_get(s, &r->key, &id, &stored, &len, err)))
        return rc;
    if (id != 0) {
        if (len != r->canon_len || memcmp(stored, r->canon, len) != 0)
            x->conflicts++;
        free(stored);
        return 0;
    }
    memset(&np, 0, sizeof(np));
    np.key = r->key;
    np.registered_at = r->received_at;
    np.source = r->source;
    np.nodes = r->nnodes;
    np.values = r->nvalues;
    np.canonical = r->canon;
    np.len = r->canon_len;
    if ((rc = store_plan_put(s, &np, &id, err)))
        return rc;
    x->stored++;
    return 0;
}

/* Writer thread, inside the group's transaction: the plans stream. */
static int
plans_apply(struct rctx *x, struct store *s, struct proto_err *err)
{
    uint64_t mark;
    size_t i;
    int rc;

    if ((rc = store_relay_origin_get(s, x->origin, x->origin_len,
                                     STORE_RELAY_PLANS, &mark, err)))
        return rc;
    x->committed = mark;
    for (i = 0; i < x->n; i++) {
        if (x->recs[i].id <= mark)
            continue;
        if ((rc = plan_apply(x, s, &x->recs[i], err)))
            return rc;
        x->committed = x->recs[i].id;
    }
    if (x->committed == mark)
        return 0;
    return store_relay_origin_set(s, x->origin, x->origin_len,
                                  STORE_RELAY_PLANS, x->committed, err);
}

static int
same_key(const struct store_plan_key *a, const struct store_plan_key *b)
{
    return a->plan.len == b->plan.len && a->graph.len == b->graph.len &&
           memcmp(a->plan.ptr, b->plan.ptr, a->plan.len) == 0 &&
           memcmp(a->graph.ptr, b->graph.ptr, a->graph.len) == 0;
}

static int
by_value_id_cb(const void *a, const void *b)
{
    const struct retention_request *x = a, *y = b;

    return identity_cmp(x->value_id, y->value_id);
}

/* Whether the node's value (msgpack bytes) is v as this center encodes
 * it: compared as objects, since the node's bytes were packed again on
 * the way in. */
static int
value_equal(const struct relay_rec *r, const struct retained_value *v,
            msgpack_sbuffer *enc, int *equal)
{
    msgpack_unpacked a, b;
    msgpack_packer pk;
    size_t oa = 0, ob = 0;

    *equal = 0;
    enc->size = 0;
    msgpack_packer_init(&pk, enc, msgpack_sbuffer_write);
    if (retention_value_encode(v, &pk) != 0)
        return PROTO_ENOMEM;
    msgpack_unpacked_init(&a);
    msgpack_unpacked_init(&b);
    if (msgpack_unpack_next(&a, r->canon, r->canon_len, &oa) ==
            MSGPACK_UNPACK_SUCCESS &&
        msgpack_unpack_next(&b, enc->data, enc->size, &ob) ==
            MSGPACK_UNPACK_SUCCESS)
        *equal = msgpack_object_equal(a.data, b.data);
    msgpack_unpacked_destroy(&a);
    msgpack_unpacked_destroy(&b);
    return 0;
}

/*
 * Resolves the value ids of recs[0..n) (one plan's key) against this
 * center's plan p, as a producer's retention spec would be: all at once,
 * or, should they not resolve together (rule 5 between values the node
 * retained in different specs), one by one. found[k] is recs[k]'s value
 * or NULL when p does not resolve it. *vals to free().
 */
static int
resolve_run(const struct plan *p, const struct relay_rec *recs, size_t n,
            struct retained_value **vals, size_t *nvals,
            const struct retained_value **found)
{
    struct retention_spec spec;
    struct retention_request *req;
    struct retained_value *one;
    struct proto_err e;
    size_t k, m;
    int rc;

    *vals = NULL;
    *nvals = 0;
    if ((req = calloc(n, sizeof(*req))) == NULL ||
        (*vals = calloc(n, sizeof(**vals))) == NULL) {
        free(req);
        return PROTO_ENOMEM;
    }
    for (k = 0; k < n; k++) {
        req[k].value_id = recs[k].value_id;
        req[k].index = k;
    }
    qsort(req, n, sizeof(*req), by_value_id_cb);
    memset(&spec, 0, sizeof(spec));
    spec.requests = req;
    spec.nrequests = n;
    rc = PROTO_EINVALID;
    for (k = 1; k < n; k++)
        if (identity_cmp(req[k - 1].value_id, req[k].value_id) == 0)
            break;
    if (k == n) /* no id twice: the whole run at once */
        rc = retention_resolve(p, &spec, &one, &m, &e);
    if (rc == 0) {
        free(*vals);
        *vals = one;
        *nvals = m;
        for (k = 0; k < n; k++)
            found[k] = retention_find(one, m, recs[k].value_id);
        free(req);
        return 0;
    }
    if (rc == PROTO_ENOMEM) {
        free(req);
        return rc;
    }
    for (k = 0; k < n; k++) {
        req[0].value_id = recs[k].value_id;
        req[0].index = 0;
        spec.nrequests = 1;
        found[k] = NULL;
        rc = retention_resolve(p, &spec, &one, &m, &e);
        if (rc == PROTO_ENOMEM) {
            free(req);
            return rc;
        }
        if (rc == 0 && m == 1) {
            (*vals)[k] = one[0];
            found[k] = &(*vals)[k];
        }
        if (rc == 0)
            free(one);
    }
    *nvals = n;
    free(req);
    return 0;
}

/* recs[0..n) of the retention stream, all of one plan's key and above
 * the origin's mark: each value is stored under this center's plan of
 * that key when the plan resolves its value id to the same value, else
 * counted in conflicts and skipped (another plan under the same key, as
 * the plans stream counts it); a key with no plan here refuses the batch
 * (the node sends it again once its plans are here). */
static int
retained_run(struct rctx *x, struct store *s, size_t first, size_t n,
             struct proto_err *err)
{
    const struct relay_rec *recs = &x->recs[first];
    const struct retained_value **found = NULL;
    struct retained_value *vals = NULL;
    struct plan *p = NULL;
    struct proto_err e;
    msgpack_unpacked up;
    msgpack_sbuffer enc;
    void *stored = NULL;
    size_t len = 0, off = 0, nvals, k;
    int64_t id;
    int rc = 0, equal = 0;

    if ((rc = store_plan_get(s, &recs[0].key, &id, &stored, &len, err)))
        return rc;
    if (id == 0) {
        proto_err_set(err, PROTO_EUNKNOWN_PLAN, "prepared_plan_id",
                      "no plan \"%.*s\" with graph_hash \"%.*s\" here for "
                      "retained value %llu; the plans stream delivers it "
                      "first, send the batch again then",
                      (int)recs[0].key.plan.len, recs[0].key.plan.ptr,
                      (int)recs[0].key.graph.len, recs[0].key.graph.ptr,
                      (unsigned long long)recs[0].id);
        proto_err_prefix_index(err, 4);
        proto_err_prefix_index(err, first);
        proto_err_prefix_field(err, "records");
        return err->code;
    }
    msgpack_unpacked_init(&up);
    msgpack_sbuffer_init(&enc);
    proto_err_clear(&e);
    if (msgpack_unpack_next(&up, stored, len, &off) != MSGPACK_UNPACK_SUCCESS ||
        (rc = plan_decode(&up.data, &p, &e)) != 0) {
        rc = rc == PROTO_ENOMEM
                 ? proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory")
                 : proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                                 "the stored plan does not decode: %s",
                                 e.message);
        goto out;
    }
    if ((found = calloc(n, sizeof(*found))) == NULL ||
        (rc = resolve_run(p, recs, n, &vals, &nvals, found)) != 0) {
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        goto out;
    }
    for (k = 0; k < n; k++) {
        if (found[k] != NULL &&
            value_equal(&recs[k], found[k], &enc, &equal) != 0) {
            rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
            goto out;
        }
        if (found[k] == NULL || !equal) {
            x->conflicts++;
            continue;
        }
        if ((rc =
                 store_plan_retain(s, id, recs[k].value_id, recs[k].received_at,
                                   enc.data, enc.size, err)))
            goto out;
        x->stored++;
    }
    x->committed = recs[n - 1].id;
out:
    free(found);
    free(vals);
    plan_free(p);
    msgpack_sbuffer_destroy(&enc);
    msgpack_unpacked_destroy(&up);
    free(stored);
    return rc;
}

/* Writer thread, inside the job's savepoint: the retention stream, in
 * runs of one plan's key (a plan is looked up and resolved once a run). */
static int
retention_apply(struct rctx *x, struct store *s, struct proto_err *err)
{
    uint64_t mark;
    size_t i, j;
    int rc;

    if ((rc = store_relay_origin_get(s, x->origin, x->origin_len,
                                     STORE_RELAY_RETENTION, &mark, err)))
        return rc;
    x->committed = mark;
    for (i = 0; i < x->n && x->recs[i].id <= mark; i++)
        ;
    for (; i < x->n; i = j) {
        for (j = i + 1; j < x->n && same_key(&x->recs[j].key, &x->recs[i].key);
             j++)
            ;
        if ((rc = retained_run(x, s, i, j - i, err)))
            return rc;
    }
    if (x->committed == mark)
        return 0;
    return store_relay_origin_set(s, x->origin, x->origin_len,
                                  STORE_RELAY_RETENTION, x->committed, err);
}

/* Writer thread, inside the group's transaction. */
static int
relay_apply(struct writer_job *job, struct store *s, struct proto_err *err)
{
    struct rctx *x = job->ctx;
    struct store_write w;
    uint64_t mark, first_node = 0;
    int64_t first_id = 0, last_id = 0;
    size_t i;
    int rc;

    x->stored = 0;
    x->conflicts = 0;
    if (x->plans)
        return plans_apply(x, s, err);
    if (x->retention)
        return retention_apply(x, s, err);
    if ((rc = store_relay_origin_get(s, x->origin, x->origin_len,
                                     STORE_RELAY_RECEIPTS, &mark, err)))
        return rc;
    /* Sent behind a batch not answered yet, which was not stored (refused,
     * failed): storing this one would raise the mark over that one's
     * records, and the resend would be cut as if they were here. */
    if (x->follows && mark < x->from_id)
        return proto_err_set(err, PROTO_ECONFLICT, "from_id",
                             "the batch before this one was not stored: the "
                             "origin's mark is %llu, below from_id %llu; "
                             "send again from the mark",
                             (unsigned long long)mark,
                             (unsigned long long)x->from_id);
    x->committed = mark;
    for (i = 0; i < x->n; i++) {
        const struct relay_rec *r = &x->recs[i];
        const struct relay_rec *before = x->stored > 0 ? r - 1 : NULL;

        /* Committed here before: a resend. The ids rise, so everything
         * at or below the mark is one prefix of the batch. */
        if (r->id <= mark)
            continue;
        if (i + RECEIPT_PREFETCH_AHEAD < x->n)
            receipt_prefetch(&x->recs[i + RECEIPT_PREFETCH_AHEAD].r);
        memset(&w, 0, sizeof(w));
        w.op = PROTO_OP_RECEIPT;
        w.source = r->source.ptr;
        w.source_len = r->source.len;
        w.has_seq = r->has_seq;
        w.seq = r->seq;
        w.relayed = 1;
        w.origin = x->origin;
        w.origin_len = x->origin_len;
        w.origin_id = r->id;
        w.received_at = r->received_at;
        w.receipts = &r->r;
        w.n_receipts = 1;
        w.seq_as_before =
            before != NULL && r->has_seq && before->has_seq &&
            r->seq == before->seq && r->source.len == before->source.len &&
            memcmp(r->source.ptr, before->source.ptr, r->source.len) == 0;
        if ((rc = store_apply(s, &w, err)))
            return rc;
        if (x->stored++ == 0) {
            first_id = w.receipt_id;
            first_node = r->id;
        }
        last_id = w.receipt_id;
        x->committed = r->id;
    }
    if (x->stored == 0)
        return 0;
    if ((rc =
             store_relay_origin_set(s, x->origin, x->origin_len,
                                    STORE_RELAY_RECEIPTS, x->committed, err)) ||
        (rc = store_relay_range_add(s, x->origin, x->origin_len, first_id,
                                    last_id, first_node, x->committed, err)))
        return rc;
    return 0;
}

/* Loop thread, after COMMIT (or the group's failure). */
static void
relay_done(struct writer_job *job)
{
    struct rctx *x = job->ctx;
    struct reply rb;
    size_t len;
    char *reply;
    int failed;

    server_count_write(x->srv, job);
    if (job->rc != 0) {
        reply = reply_error(x->has_id, x->id, &job->err, &len);
    } else {
        int conflicts = x->plans || x->retention;

        if (!conflicts)
            x->srv->n.accepted += x->stored;
        failed = reply_begin_ok(&rb, x->has_id, x->id, REPLY_SMALL) != 0 ||
                 msgpack_pack_map(&rb.pk, conflicts ? 3 : 2) != 0 ||
                 reply_kv_uint(&rb.pk, "committed_id", x->committed) != 0 ||
                 reply_kv_uint(&rb.pk, "stored", x->stored) != 0 ||
                 (conflicts &&
                  reply_kv_uint(&rb.pk, "conflicts", x->conflicts) != 0);
        reply = reply_finish(&rb, failed, &len);
    }
    conn_slot_complete(x->slot, reply, len);
    rctx_clear(x);
    writer_job_free(job);
}

static const struct writer_job_ops relay_ops = { relay_apply, relay_done, 0 };
/* A retention batch can be refused in the store (a plan not here yet):
 * in a savepoint of its own, so that the rest of its group is kept. */
static const struct writer_job_ops relay_retention_ops = { relay_apply,
                                                           relay_done, 1 };

/* A retained value's payload, {prepared_plan_id, graph_hash, value}: the
 * key and the value id borrow the frame, the value is packed again into
 * rec->canon (to compare with what this center's plan resolves). */
static int
retained_record(const msgpack_object *o, struct relay_rec *rec,
                struct proto_err *err)
{
    struct retained_value *v = NULL;
    const msgpack_object *f;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc, dup;

    if (o->type != MSGPACK_OBJECT_MAP)
        return proto_err_set(err, PROTO_EINVALID, "",
                             "expected a retained value as a map "
                             "{prepared_plan_id, graph_hash, value}, got %s",
                             mpobj_type_name(o));
    f = mpobj_map_get(o, "prepared_plan_id", &dup);
    if (f == NULL || dup)
        return proto_err_set(err, PROTO_EINVALID, "prepared_plan_id",
                             "expected one prepared_plan_id");
    if ((rc = identity_decode(f, &rec->key.plan, err)) != 0) {
        proto_err_prefix_field(err, "prepared_plan_id");
        return rc;
    }
    f = mpobj_map_get(o, "graph_hash", &dup);
    if (f == NULL || dup)
        return proto_err_set(err, PROTO_EINVALID, "graph_hash",
                             "expected one graph_hash");
    if ((rc = mpobj_str(f, PLAN_GRAPH_HASH_MAX, &rec->key.graph, err)) != 0) {
        proto_err_prefix_field(err, "graph_hash");
        return rc;
    }
    f = mpobj_map_get(o, "value", &dup);
    if (f == NULL || dup)
        return proto_err_set(err, PROTO_EINVALID, "value",
                             "expected one value, a RetainedCompletionValue");
    if ((rc = retention_value_decode(f, &v, err)) != 0) {
        proto_err_prefix_field(err, "value");
        return rc;
    }
    rec->value_id = v->value_id;
    free(v);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (msgpack_pack_object(&pk, *f) != 0) {
        msgpack_sbuffer_destroy(&sb);
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    }
    rec->canon_len = sb.size;
    rec->canon = msgpack_sbuffer_release(&sb);
    return 0;
}

/* Queues the job of a checked batch x (its records and stream set);
 * bytes is what the records hold beyond the frame. */
static void
submit(const struct request *rq, struct writer_job *job, struct rctx *x,
       int64_t bytes)
{
    x->slot = rq->slot;
    x->srv = rq->srv;
    x->has_id = rq->env->has_id;
    x->id = rq->env->id;
    memcpy(x->origin, rq->source, rq->source_len);
    x->origin_len = rq->source_len;
    job->ops = x->retention ? &relay_retention_ops : &relay_ops;
    job->ctx = x;
    job->frame = rq->frame; /* the receipts borrow it */
    job->items = x->n ? x->n : 1;
    job->bytes = sizeof(*job) + sizeof(*x) + rq->len + (size_t)bytes;
    job->w.op = -1;
    server_submit(rq->srv, job);
}

/* The key at d is the str s. */
static int
fast_key(struct mpread *d, const char *s)
{
    const char *k;
    size_t n;

    return mpread_str(d, &k, &n) == 0 && n == strlen(s) && memcmp(k, s, n) == 0;
}

/* Record i of the receipts stream read from d into rec, with the checks
 * record() makes; 0 when it is not in the plainest form or not valid. */
static int
fast_record(struct mpread *d, uint64_t *prev, struct relay_rec *rec)
{
    uint32_t n;
    uint64_t at;
    size_t used;

    if (mpread_array(d, &n) != 0 || n != 5 || mpread_uint(d, &rec->id) != 0 ||
        rec->id > INT64_MAX || rec->id <= *prev || mpread_uint(d, &at) != 0 ||
        at > INT64_MAX ||
        mpread_str(d, &rec->source.ptr, &rec->source.len) != 0 ||
        rec->source.len > CONN_SOURCE_MAX ||
        !mpobj_utf8_valid(rec->source.ptr, rec->source.len) || d->p >= d->end)
        return 0;
    *prev = rec->id;
    rec->received_at = (int64_t)at;
    if (*d->p == 0xc0) {
        d->p++;
        rec->has_seq = 0;
    } else if (mpread_uint(d, &rec->seq) != 0)
        return 0;
    else
        rec->has_seq = 1;
    used = receipt_decode_fast((const char *)d->p, (size_t)(d->end - d->p),
                               &rec->r);
    d->p += used;
    return used != 0;
}

int
dispatch_relay_fast(const struct request *rq)
{
    const struct envelope *env = rq->env;
    const char *body = rq->frame + env->body_off, *stream;
    struct writer_job *job = NULL;
    struct rctx *x = NULL;
    struct mpread d;
    uint64_t from_id, prev;
    uint32_t nkeys, n, i;
    size_t len;
    int64_t bytes = 0;
    int follows = 0;

    if (!rq->relays)
        return 0;
    mpread_init(&d, body, env->body_len);
    if (mpread_map(&d, &nkeys) != 0 || (nkeys != 3 && nkeys != 4) ||
        !fast_key(&d, "stream") || mpread_str(&d, &stream, &len) != 0 ||
        len != strlen(STORE_RELAY_RECEIPTS) ||
        memcmp(stream, STORE_RELAY_RECEIPTS, len) != 0 ||
        !fast_key(&d, "from_id") || mpread_uint(&d, &from_id) != 0 ||
        from_id > INT64_MAX)
        return 0;
    if (nkeys == 4) {
        if (!fast_key(&d, "follows") || d.p >= d.end || *d.p != 0xc3)
            return 0;
        d.p++;
        follows = 1;
    }
    /* The count is checked before anything is allocated; a record takes
     * more than a byte, so the frame bounds it too. */
    if (!fast_key(&d, "records") || mpread_array(&d, &n) != 0 ||
        n > DISPATCH_RELAY_MAX_RECORDS || n > rq->srv->cfg->max_batch ||
        n > env->body_len)
        return 0;
    if ((job = writer_job_new()) == NULL ||
        (x = calloc(1, sizeof(*x))) == NULL ||
        (x->recs = calloc(n ? n : 1, sizeof(*x->recs))) == NULL)
        goto decline;
    prev = from_id;
    for (i = 0; i < n; i++) {
        x->n = i + 1;
        if (!fast_record(&d, &prev, &x->recs[i]))
            goto decline;
        bytes += (int64_t)(sizeof(x->recs[i]) + x->recs[i].r.extra_len);
    }
    if (d.p != d.end)
        goto decline;
    x->follows = follows;
    x->from_id = from_id;
    submit(rq, job, x, bytes);
    return 1;
decline:
    rctx_free(x);
    free(job);
    return 0;
}

/* Record i of the batch into rec; err's path is the record's. */
static int
record(const msgpack_object *o, size_t i, int plans, int retention,
       uint64_t *prev, int64_t *bytes, struct relay_rec *rec,
       struct proto_err *err)
{
    const msgpack_object *f;
    uint64_t at;
    int rc;

    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 5) {
        proto_err_set(err, PROTO_EINVALID, "",
                      "expected a record as an array [id, received_at, "
                      "source, seq, payload], got %s",
                      mpobj_type_name(o));
        goto fail;
    }
    f = o->via.array.ptr;
    if (mpobj_uint(&f[0], INT64_MAX, &rec->id, err) != 0) {
        proto_err_prefix_index(err, 0);
        goto fail;
    }
    if (rec->id <= *prev) {
        proto_err_set(err, PROTO_EINVALID, "", "ids must rise: %llu after %llu",
                      (unsigned long long)rec->id, (unsigned long long)*prev);
        proto_err_prefix_index(err, 0);
        goto fail;
    }
    *prev = rec->id;
    if (mpobj_uint(&f[1], INT64_MAX, &at, err) != 0) {
        proto_err_prefix_index(err, 1);
        goto fail;
    }
    rec->received_at = (int64_t)at;
    if (mpobj_str(&f[2], CONN_SOURCE_MAX, &rec->source, err) != 0) {
        proto_err_prefix_index(err, 2);
        goto fail;
    }
    rec->has_seq = f[3].type != MSGPACK_OBJECT_NIL;
    if (rec->has_seq && mpobj_uint(&f[3], UINT64_MAX, &rec->seq, err) != 0) {
        proto_err_prefix_index(err, 3);
        goto fail;
    }
    if (plans) {
        struct plan *plan = NULL;
        msgpack_sbuffer sb;
        msgpack_packer pk;

        if ((rc = plan_decode(&f[4], &plan, err)) != 0) {
            proto_err_prefix_index(err, 4);
            proto_err_prefix_index(err, i);
            return rc;
        }
        /* The canonical form is what is stored and compared, as for a
         * plan a producer registers. */
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (plan_encode_canonical(plan, &pk) != 0) {
            msgpack_sbuffer_destroy(&sb);
            plan_free(plan);
            return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        }
        rec->canon_len = sb.size;
        rec->canon = msgpack_sbuffer_release(&sb);
        rec->key.plan = plan->prepared_plan_id;
        rec->key.graph = plan->graph_hash;
        rec->nnodes = plan->nnodes;
        rec->nvalues = plan->nvalues;
        plan_free(plan);
        *bytes += (int64_t)(sizeof(*rec) + rec->canon_len);
        return 0;
    }
    if (retention) {
        if ((rc = retained_record(&f[4], rec, err)) != 0) {
            proto_err_prefix_index(err, 4);
            proto_err_prefix_index(err, i);
            return rc;
        }
        *bytes += (int64_t)(sizeof(*rec) + rec->canon_len);
        return 0;
    }
    if ((rc = receipt_decode(&f[4], &rec->r, err)) != 0) {
        proto_err_prefix_index(err, 4);
        proto_err_prefix_index(err, i);
        return rc;
    }
    *bytes += (int64_t)(sizeof(*rec) + rec->r.extra_len);
    return 0;
fail:
    proto_err_prefix_index(err, i);
    return err->code;
}

void
dispatch_relay(const struct request *rq)
{
    const struct envelope *env = rq->env;
    const msgpack_object *b = env->body, *o, *recs;
    struct writer_job *job = NULL;
    struct rctx *x = NULL;
    struct proto_err err;
    struct proto_str stream;
    uint64_t from_id, prev;
    int64_t bytes = 0;
    size_t n, i;
    int dup, plans, retention, follows;

    proto_err_clear(&err);
    if (!rq->relays) {
        proto_err_set(&err, PROTO_EUNAUTHORIZED, "",
                      "relay needs a TCP connection whose hello has a token "
                      "and relay: true");
        goto fail;
    }
    if (b == NULL || b->type != MSGPACK_OBJECT_MAP) {
        proto_err_set(&err, PROTO_EINVALID, "body",
                      "expected the relay body as a map {stream, from_id, "
                      "records}");
        goto fail;
    }
    o = mpobj_map_get(b, "stream", &dup);
    if (o == NULL || mpobj_str(o, 32, &stream, &err) != 0 || dup) {
        if (o == NULL || dup)
            proto_err_set(&err, PROTO_EINVALID, "stream",
                          "expected one stream, a string");
        else
            proto_err_prefix_field(&err, "stream");
        goto fail;
    }
    plans = stream.len == strlen(STORE_RELAY_PLANS) &&
            memcmp(stream.ptr, STORE_RELAY_PLANS, stream.len) == 0;
    retention = stream.len == strlen(STORE_RELAY_RETENTION) &&
                memcmp(stream.ptr, STORE_RELAY_RETENTION, stream.len) == 0;
    if (!plans && !retention &&
        (stream.len != strlen(STORE_RELAY_RECEIPTS) ||
         memcmp(stream.ptr, STORE_RELAY_RECEIPTS, stream.len) != 0)) {
        proto_err_set(&err, PROTO_EINVALID, "stream",
                      "stream \"%.*s\" is not relayed by this daemon (it "
                      "takes \"receipts\", \"plans\" and \"retention\")",
                      (int)(stream.len < 32 ? stream.len : 32), stream.ptr);
        goto fail;
    }
    o = mpobj_map_get(b, "from_id", &dup);
    if (o == NULL || dup) {
        proto_err_set(&err, PROTO_EINVALID, "from_id",
                      "expected one from_id, an unsigned integer");
        goto fail;
    }
    if (mpobj_uint(o, INT64_MAX, &from_id, &err) != 0) {
        proto_err_prefix_field(&err, "from_id");
        goto fail;
    }
    o = mpobj_map_get(b, "follows", &dup);
    if (o != NULL && (dup || o->type != MSGPACK_OBJECT_BOOLEAN)) {
        proto_err_set(&err, PROTO_EINVALID, "follows",
                      "expected follows as one boolean");
        goto fail;
    }
    follows = o != NULL && o->via.boolean;
    recs = mpobj_map_get(b, "records", &dup);
    if (recs == NULL || dup || recs->type != MSGPACK_OBJECT_ARRAY) {
        proto_err_set(&err, PROTO_EINVALID, "records",
                      "expected one records array");
        goto fail;
    }
    /* The count is checked before the array of records is allocated. */
    n = recs->via.array.size;
    if (n > DISPATCH_RELAY_MAX_RECORDS || n > rq->srv->cfg->max_batch) {
        proto_err_set(
            &err, PROTO_ETOO_LARGE, "records",
            "batch of %zu records is over %lu; split it", n,
            (unsigned long)(rq->srv->cfg->max_batch < DISPATCH_RELAY_MAX_RECORDS
                                ? rq->srv->cfg->max_batch
                                : DISPATCH_RELAY_MAX_RECORDS));
        goto fail;
    }
    if ((job = writer_job_new()) == NULL ||
        (x = calloc(1, sizeof(*x))) == NULL ||
        (x->recs = calloc(n ? n : 1, sizeof(*x->recs))) == NULL)
        goto nomem;
    prev = from_id;
    for (i = 0; i < n; i++) {
        int rc = record(&recs->via.array.ptr[i], i, plans, retention, &prev,
                        &bytes, &x->recs[i], &err);

        /* A record that failed may own its canonical plan already. */
        x->n = i + 1;
        if (rc == PROTO_ENOMEM)
            goto nomem;
        if (rc != 0) {
            proto_err_prefix_field(&err, "records");
            goto fail;
        }
    }
    x->plans = plans;
    x->retention = retention;
    x->follows = follows;
    x->from_id = from_id;
    submit(rq, job, x, bytes);
    return;
nomem:
    proto_err_set(&err, PROTO_ENOMEM, NULL, "out of memory; try later");
fail:
    answer(rq->slot, env->has_id, env->id, &err);
    rctx_free(x);
    free(job);
    free(rq->frame);
}
