/*
 * dispatch_plan.c: the ops plan, retention and readback (the query kinds
 * plans and retained are query_plan.c's).
 *
 * Threads. dispatch_plan_frame() and a job's done run on the loop thread.
 * A write's apply runs on the writer thread inside
 * the job's savepoint and touches only the job (its struct pctx, the
 * frame and what was decoded from it) and the store; the loop does not
 * look at a job between submitting it and getting it back. A readback runs
 * like a query (query_submit): on a libuv threadpool thread with a
 * read-only store from the query pool, so the loop never waits on the disk.
 *
 * Memory. A write job keeps its request frame, and what it keeps is
 * counted in its bytes against max_pending_bytes: the frame, the canonical
 * plan, the decoded retention spec. The body is decoded on the loop from
 * the envelope's unpacked tree; that tree (a 24-byte msgpack_object per
 * object, so up to ~24x the frame) is the caller's and the decoded plan is
 * freed here, both before the loop turns again, which works because
 * msgpack-c points strings into the frame, not into its tree. A readback
 * copies its three strings and keeps nothing of the frame.
 *
 * Every rejected plan or retention payload (invalid, conflict, mismatch)
 * is quarantined with its exact body bytes (where envelope_parse() found
 * them in the frame), like a receipt; unknown_plan is not a payload fault
 * and is only answered. Only accepted writes are recorded for seq dedupe,
 * so a refused one can be fixed and resent.
 */
#include "dispatch_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "conn.h"
#include "dispatch.h"
#include "envelope.h"
#include "log.h"
#include "mpobj.h"
#include "plan.h"
#include "query.h"
#include "reply.h"
#include "retention.h"
#include "server.h"
#include "store.h"
#include "store_plan.h"
#include "writer.h"

/* A plan or retention job's own data (its ctx). */
struct pctx {
    struct conn_slot *slot;
    struct server *srv;
    int op;
    int has_id;
    uint64_t id;
    /* The source at the time of the request; the writer reads it. */
    char source[CONN_SOURCE_MAX + 1];
    const char *raw; /* the body's bytes in the frame, for quarantine */
    size_t raw_len;
    /* op plan: what the writer needs of the decoded plan */
    struct store_plan_key key; /* borrows the frame */
    uint32_t nnodes;
    uint64_t nvalues;
    char *canon;                 /* its canonical bytes */
    size_t canon_len;            /* ... */
    struct retention_spec *spec; /* op retention; borrows the frame */
    int refused;                 /* reply err instead of the outcome */
    struct proto_err err;        /* ... */
    struct store_quarantine_item q;
    char *outcome; /* the result, malloc'd; also the dedupe record */
    size_t outcome_len;
};

static void
answer_error(struct conn_slot *slot, int has_id, uint64_t id,
             const struct proto_err *err)
{
    size_t len;
    char *r = reply_error(has_id, id, err, &len);

    conn_slot_complete(slot, r, len);
}

/* ---- plan and retention: the loop's side ---- */

static void
pctx_release(struct pctx *x)
{
    if (x == NULL)
        return;
    retention_spec_free(x->spec);
    x->spec = NULL;
    free(x->canon);
    x->canon = NULL;
    free(x->outcome);
    x->outcome = NULL;
}

/* Frees a job of ours, with what its pctx holds. */
static void
job_free(struct writer_job *job)
{
    pctx_release((struct pctx *)job->ctx);
    writer_job_free(job);
}

/* Makes the job refuse with err: its body is quarantined (when quarantine)
 * and err is the reply after the commit. For the writer thread as well. */
static void
refuse(struct pctx *x, struct store_write *w, const struct proto_err *err,
       int quarantine)
{
    x->refused = 1;
    x->err = *err;
    w->refused = 1;
    if (!quarantine)
        return;
    x->q.raw = x->raw;
    x->q.len = x->raw_len;
    x->q.op = envelope_op_name(x->op);
    x->q.code = x->err.code;
    x->q.path = x->err.path;
    x->q.message = x->err.message;
    w->quarantine = &x->q;
    w->n_quarantine = 1;
}

static int plan_apply(struct pctx *x, struct store *s, struct store_write *w,
                      struct proto_err *err);
static int retention_apply(struct pctx *x, struct store *s,
                           struct store_write *w, struct proto_err *err);
static int job_apply(struct writer_job *job, struct store *s,
                     struct proto_err *err);
static void write_done(struct writer_job *job);

/* A plan or a retention spec: looked up and stored by job_apply, in a
 * savepoint of its own, since either may be refused by what is stored.
 * One refused on the loop is only quarantined, by store_apply(). */
static const struct writer_job_ops apply_ops = { job_apply, write_done, 1 };
static const struct writer_job_ops refused_ops = { NULL, write_done, 0 };
static void do_readback(const struct request *rq);

static void
do_write(const struct request *rq)
{
    struct conn_slot *slot = rq->slot;
    const struct envelope *env = rq->env;
    char *frame = rq->frame;
    uint32_t len = rq->len;
    struct writer_job *job = writer_job_new();
    struct pctx *x = calloc(1, sizeof(*x));
    struct plan *plan = NULL;
    struct proto_err err;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    proto_err_clear(&err);
    if (job == NULL || x == NULL) {
        free(job);
        free(x);
        free(frame);
        proto_err_set(&err, PROTO_ENOMEM, NULL, "out of memory; try later");
        answer_error(slot, env->has_id, env->id, &err);
        return;
    }
    x->slot = slot;
    x->srv = rq->srv;
    x->op = env->op;
    x->has_id = env->has_id;
    x->id = env->id;
    memcpy(x->source, rq->source, rq->source_len + 1);
    job->ctx = x;
    job->frame = frame;
    job->items = 1;
    job->bytes = sizeof(*job) + sizeof(*x) + len;
    job->w.op = env->op;
    job->w.source = x->source;
    job->w.source_len = rq->source_len;
    job->w.has_seq = env->has_seq;
    job->w.seq = env->seq;
    job->w.received_at = (int64_t)server_now_unix_ms();
    dispatch_replay_of(&job->w, env, frame);

    if (env->body == NULL) {
        /* No body: the whole frame is what the producer sent. */
        x->raw = frame;
        x->raw_len = len;
        proto_err_set(&err, PROTO_EINVALID, "body", "missing body; expected %s",
                      env->op == PROTO_OP_PLAN
                          ? "a plan {prepared_plan_id, graph_hash, nodes}"
                          : "a retention spec {prepared_plan_id, "
                            "graph_hash, values or determinism_outputs}");
        goto refused;
    }
    x->raw = frame + env->body_off;
    x->raw_len = env->body_len;
    if (env->op == PROTO_OP_PLAN) {
        rc = plan_decode(env->body, &plan, &err);
        if (rc == 0) {
            /* The canonical form is what is stored and compared. */
            msgpack_sbuffer_init(&sb);
            msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
            if (plan_encode_canonical(plan, &pk) != 0) {
                msgpack_sbuffer_destroy(&sb);
                rc = proto_err_set(&err, PROTO_ENOMEM, NULL, "out of memory");
            } else {
                x->canon_len = sb.size;
                x->canon = msgpack_sbuffer_release(&sb);
                job->bytes += x->canon_len;
                x->key.plan = plan->prepared_plan_id;
                x->key.graph = plan->graph_hash;
                x->nnodes = plan->nnodes;
                x->nvalues = plan->nvalues;
            }
        }
    } else {
        rc = retention_spec_decode(env->body, &x->spec, &err);
        if (rc == 0)
            job->bytes += x->spec->bytes;
    }
    job->ops = &apply_ops;
    /* What a job keeps is counted in job->bytes, so queued jobs stay
     * within max_pending_bytes: the frame, the canonical plan, the spec.
     * The decoded plan (and the caller's unpacked tree) would cost up to
     * ~24x the frame (a msgpack_object per byte), uncounted; strings
     * borrow the frame, not the tree, so the plan goes now. */
    plan_free(plan);
    if (rc == PROTO_ENOMEM) {
        proto_err_set(&err, PROTO_ENOMEM, NULL, "out of memory; try later");
        answer_error(slot, env->has_id, env->id, &err);
        job_free(job);
        return;
    }
    if (rc != 0)
        goto refused;
    dispatch_payload(job, x->raw, x->raw_len, envelope_op_name(env->op));
    server_submit(rq->srv, job);
    return;
refused:
    /* Refused before the store was asked: nothing to resolve and no seq to
     * record, but the payload is kept. */
    job->ops = &refused_ops;
    job->w.has_seq = 0;
    refuse(x, &job->w, &err, 1);
    server_submit(rq->srv, job);
}

void
dispatch_plan_frame(const struct request *rq)
{
    if (rq->env->op == PROTO_OP_READBACK)
        do_readback(rq);
    else
        do_write(rq);
}

/* ---- plan and retention: the writer thread's side ---- */

/* Packs a finished outcome into x->outcome and points w at it. */
static int
keep_outcome(struct pctx *x, struct store_write *w, msgpack_sbuffer *sb,
             struct proto_err *err)
{
    free(x->outcome);
    x->outcome_len = sb->size;
    x->outcome = msgpack_sbuffer_release(sb);
    if (x->outcome == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    w->outcome = x->outcome;
    w->outcome_len = x->outcome_len;
    return 0;
}

/*
 * Names the first difference between two canonical plans for a conflict's
 * path: "nodes" when the node count differs, "nodes[i].id",
 * "nodes[i].values" when a node has another number of values, else
 * "nodes[i].values[j]". Both encodings come from plan_encode_canonical(),
 * so equal objects mean equal bytes.
 */
static void
conflict_path(const void *a, size_t alen, const void *b, size_t blen,
              char *path, size_t cap)
{
    const msgpack_object *na, *nb, *va, *vb;
    msgpack_unpacked ua, ub;
    size_t oa = 0, ob = 0;
    uint32_t i, j;

    snprintf(path, cap, "nodes");
    msgpack_unpacked_init(&ua);
    msgpack_unpacked_init(&ub);
    if (msgpack_unpack_next(&ua, a, alen, &oa) != MSGPACK_UNPACK_SUCCESS ||
        msgpack_unpack_next(&ub, b, blen, &ob) != MSGPACK_UNPACK_SUCCESS)
        goto out;
    na = mpobj_map_get(&ua.data, "nodes", NULL);
    nb = mpobj_map_get(&ub.data, "nodes", NULL);
    if (na == NULL || nb == NULL || na->type != MSGPACK_OBJECT_ARRAY ||
        nb->type != MSGPACK_OBJECT_ARRAY ||
        na->via.array.size != nb->via.array.size)
        goto out;
    for (i = 0; i < na->via.array.size; i++) {
        const msgpack_object *x = &na->via.array.ptr[i];
        const msgpack_object *y = &nb->via.array.ptr[i];

        if (msgpack_object_equal(*x, *y))
            continue;
        va = mpobj_map_get(x, "id", NULL);
        vb = mpobj_map_get(y, "id", NULL);
        if (va == NULL || vb == NULL || !msgpack_object_equal(*va, *vb)) {
            snprintf(path, cap, "nodes[%u].id", (unsigned)i);
            goto out;
        }
        snprintf(path, cap, "nodes[%u].values", (unsigned)i);
        va = mpobj_map_get(x, "values", NULL);
        vb = mpobj_map_get(y, "values", NULL);
        if (va == NULL || vb == NULL || va->type != MSGPACK_OBJECT_ARRAY ||
            vb->type != MSGPACK_OBJECT_ARRAY ||
            va->via.array.size != vb->via.array.size)
            goto out;
        for (j = 0; j < va->via.array.size; j++)
            if (!msgpack_object_equal(va->via.array.ptr[j],
                                      vb->via.array.ptr[j])) {
                snprintf(path, cap, "nodes[%u].values[%u]", (unsigned)i,
                         (unsigned)j);
                goto out;
            }
        goto out;
    }
out:
    msgpack_unpacked_destroy(&ua);
    msgpack_unpacked_destroy(&ub);
}

static int
plan_apply(struct pctx *x, struct store *s, struct store_write *w,
           struct proto_err *err)
{
    struct store_plan_key key = x->key;
    struct store_plan_new np;
    struct proto_err e;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    void *stored = NULL;
    size_t stored_len = 0;
    int64_t id;
    int rc, created, failed;

    x->refused = 0;
    if ((rc = store_plan_get(s, &key, &id, &stored, &stored_len, err)))
        return rc;
    if (id != 0) {
        created = 0;
        if (stored_len != x->canon_len ||
            memcmp(stored, x->canon, stored_len) != 0) {
            char path[PROTO_ERR_PATH_MAX];

            conflict_path(stored, stored_len, x->canon, x->canon_len, path,
                          sizeof(path));
            free(stored);
            proto_err_set(&e, PROTO_ECONFLICT, path,
                          "plan \"%.*s\" with graph_hash \"%.*s\" is already "
                          "registered with other nodes; a changed plan needs "
                          "a new prepared_plan_id or graph_hash",
                          (int)key.plan.len, key.plan.ptr, (int)key.graph.len,
                          key.graph.ptr);
            refuse(x, w, &e, 1);
            return 0;
        }
        free(stored);
    } else {
        created = 1;
        memset(&np, 0, sizeof(np));
        np.key = key;
        np.registered_at = w->received_at;
        np.source.ptr = w->source;
        np.source.len = w->source_len;
        np.nodes = x->nnodes;
        np.values = x->nvalues;
        np.canonical = x->canon;
        np.len = x->canon_len;
        if ((rc = store_plan_put(s, &np, &id, err)))
            return rc;
    }
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    failed = msgpack_pack_map(&pk, 3) != 0 ||
             envelope_pack_cstr(&pk, "created") != 0 ||
             (created ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk)) ||
             reply_kv_uint(&pk, "nodes", x->nnodes) != 0 ||
             reply_kv_uint(&pk, "values", x->nvalues) != 0;
    if (failed) {
        msgpack_sbuffer_destroy(&sb);
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    }
    return keep_outcome(x, w, &sb, err);
}

static int
retention_apply(struct pctx *x, struct store *s, struct store_write *w,
                struct proto_err *err)
{
    struct store_plan_key key = { x->spec->prepared_plan_id,
                                  x->spec->graph_hash };
    struct retained_value *vals = NULL;
    struct plan *p = NULL;
    struct proto_err e;
    msgpack_unpacked up;
    msgpack_sbuffer sb, one;
    msgpack_packer pk, opk;
    void *stored = NULL;
    size_t stored_len = 0, off = 0, n = 0, i;
    int64_t id;
    int rc;

    x->refused = 0;
    if ((rc = store_plan_get(s, &key, &id, &stored, &stored_len, err)))
        return rc;
    if (id == 0) {
        proto_err_set(&e, PROTO_EUNKNOWN_PLAN, "prepared_plan_id",
                      "no plan \"%.*s\" with graph_hash \"%.*s\" is "
                      "registered; register it with op plan first",
                      (int)key.plan.len, key.plan.ptr, (int)key.graph.len,
                      key.graph.ptr);
        refuse(x, w, &e, 0);
        return 0;
    }
    /* The stored canonical form was validated when it was registered; a
     * plan that no longer decodes means the file was damaged. */
    msgpack_unpacked_init(&up);
    proto_err_clear(&e);
    if (msgpack_unpack_next(&up, stored, stored_len, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        (rc = plan_decode(&up.data, &p, &e)) != 0) {
        msgpack_unpacked_destroy(&up);
        free(stored);
        if (rc == PROTO_ENOMEM)
            return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "the stored plan does not decode: %s", e.message);
    }
    rc = retention_resolve(p, x->spec, &vals, &n, &e);
    if (rc == PROTO_EINVALID || rc == PROTO_EMISMATCH) {
        refuse(x, w, &e, 1);
        rc = 0;
        goto out;
    }
    if (rc != 0) {
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        goto out;
    }
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_sbuffer_init(&one);
    msgpack_packer_init(&opk, &one, msgpack_sbuffer_write);
    if (msgpack_pack_map(&pk, 1) != 0 ||
        envelope_pack_cstr(&pk, "retained") != 0 ||
        msgpack_pack_array(&pk, n) != 0)
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    for (i = 0; i < n && rc == 0; i++) {
        one.size = 0;
        if (retention_value_encode(&vals[i], &opk) != 0 ||
            msgpack_sbuffer_write(&sb, one.data, one.size) != 0) {
            rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
            break;
        }
        rc = store_plan_retain(s, id, vals[i].value_id, w->received_at,
                               one.data, one.size, err);
    }
    msgpack_sbuffer_destroy(&one);
    if (rc == 0)
        rc = keep_outcome(x, w, &sb, err);
    else
        msgpack_sbuffer_destroy(&sb);
out:
    free(vals);
    plan_free(p);
    msgpack_unpacked_destroy(&up);
    free(stored);
    return rc;
}

/* The writer thread's side of a plan or retention job: the dedupe check,
 * the plan or spec against what is stored, then the quarantine and the
 * dedupe record (store_apply's halves around our own part). */
static int
job_apply(struct writer_job *job, struct store *s, struct proto_err *err)
{
    struct pctx *x = job->ctx;
    int64_t source_id;
    int rc;

    if ((rc = store_write_begin(s, &job->w, &source_id, err)))
        return rc == 1 ? 0 : rc;
    rc = job->w.op == PROTO_OP_PLAN ? plan_apply(x, s, &job->w, err)
                                    : retention_apply(x, s, &job->w, err);
    return rc ? rc : store_write_end(s, &job->w, source_id, err);
}

/* ---- plan and retention: the reply, on the loop ---- */

static void
write_done(struct writer_job *job)
{
    struct pctx *x = (struct pctx *)job->ctx;
    struct proto_err err;
    struct reply rb;
    size_t len = 0;
    char *reply = NULL;
    int failed;

    server_count_write(x->srv, job);
    if (job->rc != 0) {
        reply = reply_error(x->has_id, x->id, &job->err, &len);
        goto done;
    }
    if (x->refused) {
        reply = reply_error(x->has_id, x->id, &x->err, &len);
        goto done;
    }
    if (job->w.conflict) {
        dispatch_conflict_error(job, &err);
        reply = reply_error(x->has_id, x->id, &err, &len);
        goto done;
    }
    failed = reply_begin_ok(&rb, x->has_id, x->id, REPLY_SMALL) != 0;
    if (!failed && job->w.duplicate)
        failed = dispatch_pack_dup_outcome(&rb.pk, job->w.dup_outcome,
                                           job->w.dup_outcome_len) != 0;
    else if (!failed)
        failed = msgpack_sbuffer_write(&rb.sb, x->outcome, x->outcome_len) != 0;
    if ((reply = reply_finish(&rb, failed, &len)) == NULL) {
        proto_err_set(&err, PROTO_ENOMEM, NULL,
                      "out of memory for the reply; the write was committed");
        reply = reply_error(x->has_id, x->id, &err, &len);
    }
done:
    conn_slot_complete(x->slot, reply, len);
    job_free(job);
}

/* ---- readback ---- */

/* A readback waiting for the query pool. Its strings are copied out of
 * the body, so neither the frame nor its unpacked tree is held meanwhile:
 * a queued readback costs about what its identities do. */
struct rbreq {
    struct readback rb; /* its strings point into text */
    char text[];
};

/* Copies v into *at and points v there. */
static void
move_str(struct proto_str *v, char **at)
{
    if (v->len > 0)
        memcpy(*at, v->ptr, v->len);
    v->ptr = *at;
    *at += v->len;
}

/* Checks the readback against the store (a query_run_fn). */
static int
readback_run(void *arg, struct store *s, uint64_t deadline_ms,
             msgpack_packer *pk, struct proto_err *err)
{
    struct rbreq *q = arg;
    struct store_plan_key key = { q->rb.prepared_plan_id, q->rb.graph_hash };
    struct retained_value *vals = NULL;
    struct readback_request out;
    msgpack_unpacked up;
    msgpack_object arr;
    void *blob = NULL;
    size_t blen = 0, off = 0, n = 0;
    int found, rc;

    if ((rc = store_plan_readback(s, &key, q->rb.value_id, deadline_ms, &found,
                                  &blob, &blen, err)))
        return rc;
    if (!found)
        return proto_err_set(err, PROTO_EUNKNOWN_PLAN, "prepared_plan_id",
                             "no plan \"%.*s\" with graph_hash \"%.*s\" is "
                             "registered",
                             (int)key.plan.len, key.plan.ptr,
                             (int)key.graph.len, key.graph.ptr);
    if (blob == NULL)
        return retention_readback_check(&q->rb, NULL, &out, err);
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, blob, blen, &off) != MSGPACK_UNPACK_SUCCESS) {
        rc = proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                           "the stored retained value does not decode");
        goto out;
    }
    /* The store keeps one value per row; retention_values_decode() reads
     * a list, so the row is seen as a list of one. */
    arr.type = MSGPACK_OBJECT_ARRAY;
    arr.via.array.size = 1;
    arr.via.array.ptr = &up.data;
    rc = retention_values_decode(&arr, &vals, &n, err);
    if (rc == PROTO_EINVALID)
        rc = proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                           "the stored retained value does not decode");
    if (rc != 0)
        goto out;
    rc = retention_readback_check(
        &q->rb, retention_find(vals, n, q->rb.value_id), &out, err);
    if (rc == 0 && (msgpack_pack_map(pk, 1) != 0 ||
                    envelope_pack_cstr(pk, "request") != 0 ||
                    retention_readback_encode(&out, pk) != 0))
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
out:
    free(vals);
    msgpack_unpacked_destroy(&up);
    free(blob);
    return rc;
}

static void
do_readback(const struct request *rq)
{
    struct conn_slot *slot = rq->slot;
    const struct envelope *env = rq->env;
    char *frame = rq->frame;
    uint32_t len = rq->len;
    struct rbreq *q = NULL;
    struct readback rb;
    struct proto_err err;
    char *at;

    (void)len;
    proto_err_clear(&err);
    if (env->body == NULL) {
        proto_err_set(&err, PROTO_EINVALID, "body",
                      "missing body; expected a readback {prepared_plan_id, "
                      "graph_hash, value_id, participant_index, "
                      "output_layout}");
        goto fail;
    }
    /* Nothing is stored for a readback, so a bad body is only answered. */
    if (retention_readback_decode(env->body, &rb, &err) != 0)
        goto fail;
    /* The three lengths sum to at most the frame's. */
    q = malloc(sizeof(*q) + rb.prepared_plan_id.len + rb.graph_hash.len +
               rb.value_id.len);
    if (q == NULL) {
        proto_err_set(&err, PROTO_ENOMEM, NULL, "out of memory; try later");
        goto fail;
    }
    q->rb = rb;
    at = q->text;
    move_str(&q->rb.prepared_plan_id, &at);
    move_str(&q->rb.graph_hash, &at);
    move_str(&q->rb.value_id, &at);
    free(frame);
    if (query_submit(rq->srv->queries, rq->srv, slot, env->has_id, env->id,
                     readback_run, q, free, &err) != 0) {
        answer_error(slot, env->has_id, env->id, &err);
        return;
    }
    return;
fail:
    free(frame);
    answer_error(slot, env->has_id, env->id, &err);
}
