/*
 * dispatch.c: request frames to handlers, handlers to replies.
 *
 * Loop thread only. Every frame takes a reply slot before anything else, so
 * replies keep request order. Writes are decoded and validated here (pure
 * proto/ code), then handed to the writer as one job that owns the frame:
 * decoded receipts borrow their strings from it. A rejected payload is kept
 * in quarantine with its exact bytes rather than a re-encoding of the
 * object, so an odd integer width a producer used is preserved for replay:
 * envelope_parse() says where the body is in the frame, and the rejected
 * items of a batch are found with mpcheck_iter (proto/, over bytes mpcheck
 * accepted), walking only as far as the last rejected item.
 *
 * The op table below names each op's handler; which ops write, and so who
 * may send them, is proto/'s table (envelope_op_writes()), read here and by
 * access_op_allowed(), never listed a second time.
 */
#include "dispatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "access.h"
#include "conn.h"
#include "dispatch_plan.h"
#include "dispatch_relay.h"
#include "reply.h"
#include "envelope.h"
#include "hash.h"
#include "invariant.h"
#include "log.h"
#include "pool.h"
#include "mpcheck.h"
#include "mpread.h"
#include "mpobj.h"
#include "query.h"
#include "receipt.h"
#include "server.h"
#include "tls.h"
#include "writer.h"

#define TOKEN_MAX 4096

/* What a write job needs to build its reply when it comes back. */
struct wctx {
    struct conn_slot *slot;
    struct server *srv;
    int op;
    int has_id;
    uint64_t id;
    int reply_err; /* the request was refused: reply err after commit */
    struct proto_err err;
    uint64_t accepted, rejected, stray;
    /* The source at the time of the request: a later hello on the same
     * connection must not change what the writer thread reads. */
    char source[CONN_SOURCE_MAX + 1];
};

static void
answer_error(struct conn_slot *slot, int has_id, uint64_t id,
             const struct proto_err *err)
{
    size_t len;
    char *r = reply_error(has_id, id, err, &len);

    conn_slot_complete(slot, r, len);
}

/* ---- write jobs ---- */

static void write_done(struct writer_job *job);

/* Receipts and quarantine items: store_apply() stores them all. */
static const struct writer_job_ops write_ops = { NULL, write_done, 0 };

static struct writer_job *
job_new(const struct request *rq)
{
    struct conn_slot *slot = rq->slot;
    const struct envelope *env = rq->env;
    char *frame = rq->frame;
    uint32_t len = rq->len;
    struct writer_job *job = writer_job_new();
    struct wctx *x = pool_zalloc(sizeof(*x));

    if (job == NULL || x == NULL) {
        free(job);
        free(x);
        return NULL;
    }
    x->slot = slot;
    x->srv = rq->srv;
    x->op = env->op;
    x->has_id = env->has_id;
    x->id = env->id;
    job->ops = &write_ops;
    job->ctx = x;
    job->ctx_pooled = sizeof(*x);
    job->frame = frame;
    job->frame_pooled = rq->frame_pooled;
    job->bytes = sizeof(*job) + sizeof(*x) + len;
    job->w.op = -1;
    memcpy(x->source, rq->source, rq->source_len + 1);
    job->w.source = x->source;
    job->w.source_len = rq->source_len;
    job->w.has_seq = env->has_seq;
    job->w.seq = env->seq;
    job->w.received_at = (int64_t)server_now_unix_ms();
    dispatch_replay_of(&job->w, env, frame);
    return job;
}

/* Makes job a quarantine-only write of one payload and the reply err. */
static int
job_quarantine_one(struct writer_job *job, const char *raw, size_t rlen,
                   const char *op, const struct proto_err *err)
{
    struct wctx *x = (struct wctx *)job->ctx;
    struct store_quarantine_item *q = calloc(1, sizeof(*q));

    if (q == NULL)
        return -1;
    x->reply_err = 1;
    x->err = *err;
    q->raw = raw;
    q->len = rlen;
    q->op = op;
    q->code = x->err.code;
    q->path = x->err.path;
    q->message = x->err.message;
    job->quarantine = q;
    job->w.quarantine = q;
    job->w.n_quarantine = 1;
    job->w.op = -1;
    job->items = 1;
    job->bytes += sizeof(*q);
    return 0;
}

static void
count_stray(struct wctx *x, const struct receipt *r)
{
    if (r->counter_coverage & ~receipt_meaningful_bits(r->schema_version))
        x->stray++;
}

static void
do_receipt(const struct request *rq)
{
    struct conn_slot *slot = rq->slot;
    const struct envelope *env = rq->env;
    char *frame = rq->frame;
    uint32_t len = rq->len;
    struct writer_job *job;
    struct proto_err err;
    struct receipt *r;
    size_t boff = 0, blen = len;
    int rc;

    job = job_new(rq);
    if (job == NULL) {
        free(frame);
        free(rq->decoded);
        proto_err_set(&err, PROTO_ENOMEM, NULL, "out of memory; try later");
        answer_error(slot, env->has_id, env->id, &err);
        return;
    }
    if (env->body != NULL || rq->decoded != NULL) {
        boff = env->body_off;
        blen = env->body_len;
    }
    proto_err_clear(&err);
    r = rq->decoded != NULL ? rq->decoded : calloc(1, sizeof(*r));
    if (rq->decoded != NULL) {
        rc = 0;
    } else if (r == NULL) {
        rc = proto_err_set(&err, PROTO_ENOMEM, NULL, "out of memory");
    } else if (env->body == NULL) {
        rc = proto_err_set(&err, PROTO_EINVALID, "body",
                           "missing body; expected one receipt as a map or "
                           "an array");
    } else {
        rc = receipt_decode(env->body, r, &err);
        /* A body of the wrong type is the body's fault. */
        if (rc == PROTO_EINVALID && err.path[0] == '\0' &&
            env->body->type != MSGPACK_OBJECT_MAP &&
            env->body->type != MSGPACK_OBJECT_ARRAY)
            snprintf(err.path, sizeof(err.path), "body");
    }
    if (rc == PROTO_ENOMEM) {
        free(r);
        answer_error(slot, env->has_id, env->id, &err);
        writer_job_free(job);
        return;
    }
    if (rc != 0) {
        free(r);
        if (job_quarantine_one(job, frame + boff, blen, "receipt", &err)) {
            proto_err_set(&err, PROTO_ENOMEM, NULL, "out of memory");
            answer_error(slot, env->has_id, env->id, &err);
            writer_job_free(job);
            return;
        }
        ((struct wctx *)job->ctx)->rejected = 1;
        server_submit(rq->srv, job);
        return;
    }
    count_stray((struct wctx *)job->ctx, r);
    ((struct wctx *)job->ctx)->accepted = 1;
    dispatch_payload(job, frame + boff, blen, "receipt");
    job->receipts = r;
    /* dispatch_fast's one receipt comes from the pool. */
    job->receipts_pooled = rq->decoded != NULL ? sizeof(*r) : 0;
    job->w.op = PROTO_OP_RECEIPT;
    job->w.receipts = r;
    job->w.n_receipts = 1;
    job->items = 1;
    job->bytes += sizeof(*r) + r->extra_len;
    server_submit(rq->srv, job);
}

static int
pack_rejected(msgpack_packer *pk, size_t index, const struct proto_err *e)
{
    return msgpack_pack_map(pk, 4) != 0 ||
           reply_kv_uint(pk, "index", index) != 0 ||
           reply_kv_cstr(pk, "code", proto_code_name(e->code)) != 0 ||
           reply_kv_cstr(pk, "path", e->path) != 0 ||
           reply_kv_cstr(pk, "message", e->message) != 0;
}

/* A batch's `rejected` list names at most this many items; past it the
 * result adds rejected_count and rejected_truncated, so a reply stays
 * proportional to its request (10,000 one-byte items used to cost 870 KB of
 * reply). The quarantine row holds every rejected item. */
#define DISPATCH_REJECTED_LISTED 100

/* A rejected item's bytes in the frame. */
struct span {
    const char *p;
    size_t n;
};

/*
 * The one quarantine row of a batch's rejected items: their bytes as one
 * msgpack array (replayable as a `receipts` batch), the first rejection's
 * code and path ("[i]..."), and a message that says how many there are.
 * One allocation, taken by the job (writer_job_free frees it). Returns it,
 * or NULL when out of memory.
 */
static struct store_quarantine_item *
batch_quarantine(const struct span *spans, size_t nbad, size_t first_index,
                 const struct proto_err *first)
{
    struct store_quarantine_item *q;
    struct proto_err *e;
    unsigned char *raw;
    size_t total = 5, i, off = 0;

    for (i = 0; i < nbad; i++)
        total += spans[i].n;
    q = malloc(sizeof(*q) + sizeof(*e) + total);
    if (q == NULL)
        return NULL;
    e = (struct proto_err *)(q + 1);
    raw = (unsigned char *)(e + 1);
    /* The array header in its shortest form, as msgpack-c writes it. */
    if (nbad < 16)
        raw[off++] = (unsigned char)(0x90u | nbad);
    else if (nbad < 65536) {
        raw[off++] = 0xdc;
        raw[off++] = (unsigned char)(nbad >> 8);
        raw[off++] = (unsigned char)nbad;
    } else {
        raw[off++] = 0xdd;
        raw[off++] = (unsigned char)(nbad >> 24);
        raw[off++] = (unsigned char)(nbad >> 16);
        raw[off++] = (unsigned char)(nbad >> 8);
        raw[off++] = (unsigned char)nbad;
    }
    for (i = 0; i < nbad; i++) {
        memcpy(raw + off, spans[i].p, spans[i].n);
        off += spans[i].n;
    }
    *e = *first;
    proto_err_prefix_index(e, first_index);
    if (nbad > 1)
        snprintf(e->message, sizeof(e->message),
                 "%.150s (the first of %zu rejected items of the batch, all "
                 "kept here as one array)",
                 first->message, nbad);
    q->raw = raw;
    q->len = off;
    q->op = "receipts";
    q->code = e->code;
    q->path = e->path;
    q->message = e->message;
    return q;
}

static void
do_receipts(const struct request *rq)
{
    struct conn_slot *slot = rq->slot;
    const struct envelope *env = rq->env;
    char *frame = rq->frame;
    uint32_t len = rq->len;
    struct store_quarantine_item *q = NULL;
    struct proto_err err, first;
    struct span *spans = NULL;
    struct writer_job *job;
    struct receipt *items = NULL;
    struct mpcheck_iter it;
    struct wctx *x;
    const char *raw = NULL;
    size_t ilen = 0, i, n, walked = 0, nvalid = 0, nbad = 0, first_index = 0;
    msgpack_sbuffer sb, rej;
    msgpack_packer pk, rpk;
    int rc, failed;

    job = job_new(rq);
    if (job == NULL) {
        free(frame);
        proto_err_set(&err, PROTO_ENOMEM, NULL, "out of memory; try later");
        answer_error(slot, env->has_id, env->id, &err);
        return;
    }
    x = (struct wctx *)job->ctx;
    if (rq->decoded == NULL &&
        (env->body == NULL || env->body->type != MSGPACK_OBJECT_ARRAY)) {
        /* What is kept is the body, or with no body the whole frame:
         * what the producer sent. */
        if (env->body == NULL)
            proto_err_set(&err, PROTO_EINVALID, "body",
                          "missing body; expected an array of receipts");
        else
            proto_err_set(&err, PROTO_EINVALID, "body",
                          "expected the body as an array of receipts, got %s",
                          mpobj_type_name(env->body));
        x->rejected = 1;
        if (job_quarantine_one(job, env->body ? frame + env->body_off : frame,
                               env->body ? env->body_len : len, "receipts",
                               &err))
            goto nomem;
        server_submit(rq->srv, job);
        return;
    }
    n = rq->decoded != NULL ? rq->ndecoded : env->body->via.array.size;
    if (n > rq->srv->cfg->max_batch) {
        proto_err_set(&err, PROTO_ETOO_LARGE, "",
                      "batch of %lu receipts is over max_batch %lu; split it",
                      (unsigned long)n, (unsigned long)rq->srv->cfg->max_batch);
        answer_error(slot, env->has_id, env->id, &err);
        writer_job_free(job);
        return;
    }
    /* n is bounded by max_batch (checked above) and by the frame's size
     * (mpcheck), so these allocations are bounded too. The error and
     * quarantine arrays are made only when an item fails: a clean batch
     * does not pay for them. */
    items = job->receipts =
        rq->decoded != NULL ? rq->decoded : calloc(n ? n : 1, sizeof(*items));
    if (items == NULL)
        goto nomem;
    /* The walk gives an item's bytes for quarantine. Only a rejected item
     * needs them, so the walk advances only when an item fails, and only
     * up to it: walked counts the items it has passed, each is passed
     * once, and a batch costs at most one walk however many items fail.
     * A clean batch is not walked at all. */
    if (NEVER(mpcheck_iter_init(&it, frame + env->body_off, env->body_len) !=
              0))
        goto unwalkable;
    /* The rejected entries are packed as they are found; the array header
     * (which needs their count) is written in front of them at the end. */
    msgpack_sbuffer_init(&rej);
    msgpack_packer_init(&rpk, &rej, msgpack_sbuffer_write);
    for (i = 0; i < n; i++) {
        proto_err_clear(&err);
        rc = rq->decoded != NULL ? 0
                                 : receipt_decode(&env->body->via.array.ptr[i],
                                                  &items[nvalid], &err);
        if (rc == PROTO_ENOMEM) {
            msgpack_sbuffer_destroy(&rej);
            goto nomem;
        }
        if (rc == 0) {
            count_stray(x, &items[nvalid]);
            job->bytes += sizeof(*items) + items[nvalid].extra_len;
            nvalid++;
            /* Tell writer_job_free how many to clear so far. */
            job->w.n_receipts = nvalid;
        } else {
            while (walked <= i) {
                if (NEVER(mpcheck_iter_next(&it, &raw, &ilen) != 0)) {
                    msgpack_sbuffer_destroy(&rej);
                    goto unwalkable;
                }
                walked++;
            }
            if (spans == NULL) {
                spans = calloc(n, sizeof(*spans));
                if (spans == NULL) {
                    msgpack_sbuffer_destroy(&rej);
                    goto nomem;
                }
                first = err;
                first_index = i;
            }
            spans[nbad].p = raw;
            spans[nbad].n = ilen;
            nbad++;
            if (nbad <= DISPATCH_REJECTED_LISTED &&
                pack_rejected(&rpk, i, &err) != 0) {
                msgpack_sbuffer_destroy(&rej);
                goto nomem;
            }
        }
    }

    if (nbad > 0) {
        q = job->quarantine =
            batch_quarantine(spans, nbad, first_index, &first);
        free(spans);
        spans = NULL;
        if (q == NULL) {
            msgpack_sbuffer_destroy(&rej);
            goto nomem;
        }
        job->bytes += sizeof(*q) + sizeof(first) + q->len;
    }

    /* The result is encoded now, because it is also the first outcome the
     * dedupe table records for this (source, seq). */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    failed =
        msgpack_pack_map(&pk, nbad > DISPATCH_REJECTED_LISTED ? 4 : 2) != 0 ||
        reply_kv_uint(&pk, "accepted", nvalid) != 0 ||
        envelope_pack_cstr(&pk, "rejected") != 0 ||
        msgpack_pack_array(&pk, nbad > DISPATCH_REJECTED_LISTED
                                    ? DISPATCH_REJECTED_LISTED
                                    : nbad) != 0 ||
        (rej.size > 0 && msgpack_sbuffer_write(&sb, rej.data, rej.size)) ||
        (nbad > DISPATCH_REJECTED_LISTED &&
         (reply_kv_uint(&pk, "rejected_count", nbad) != 0 ||
          envelope_pack_cstr(&pk, "rejected_truncated") != 0 ||
          msgpack_pack_true(&pk) != 0));
    msgpack_sbuffer_destroy(&rej);
    if (failed) {
        msgpack_sbuffer_destroy(&sb);
        goto nomem;
    }
    job->w.outcome_len = sb.size;
    job->outcome = msgpack_sbuffer_release(&sb);
    job->w.outcome = job->outcome;
    job->bytes += job->w.outcome_len;
    job->w.op = PROTO_OP_RECEIPTS;
    dispatch_payload(job, frame + env->body_off, env->body_len, "receipts");
    job->w.receipts = items;
    job->w.n_receipts = nvalid;
    job->w.quarantine = q;
    job->w.n_quarantine = q != NULL;
    job->items = n;
    x->accepted = nvalid;
    x->rejected = nbad;
    server_submit(rq->srv, job);
    return;
nomem:
    free(spans);
    proto_err_set(&err, PROTO_ENOMEM, NULL, "out of memory; try later");
    answer_error(slot, env->has_id, env->id, &err);
    writer_job_free(job);
    return;
unwalkable:
    free(spans);
    /* NEVER: mpcheck() accepted these bytes, and the walk reads headers as
     * it does. Were it to, refusing the batch beats keeping the wrong
     * bytes of an item. */
    proto_err_set(&err, PROTO_EMALFORMED, "",
                  "the batch's items cannot be found in the frame");
    answer_error(slot, env->has_id, env->id, &err);
    writer_job_free(job);
}

/* Quarantines a frame that is not a usable request, and replies err. */
static void
do_bad_frame(const struct request *rq, const struct proto_err *err)
{
    struct conn_slot *slot = rq->slot;
    const struct envelope *env = rq->env;
    char *frame = rq->frame;
    uint32_t len = rq->len;
    struct writer_job *job = job_new(rq);

    if (job == NULL) {
        free(frame);
        answer_error(slot, env->has_id, env->id, err);
        return;
    }
    /* Dedupe does not apply to a request that could not be read, nor
     * does its replay_of: the frame is kept whole. */
    job->w.has_seq = 0;
    job->w.replay_of = 0;
    if (job_quarantine_one(job, frame, len,
                           env->op >= 0 ? envelope_op_name(env->op) : "",
                           err) != 0) {
        answer_error(slot, env->has_id, env->id, err);
        writer_job_free(job);
        return;
    }
    server_submit(rq->srv, job);
}

/* Frees a hello frame after zeroing it: it may hold a TCP token. */
static void
wipe(char *frame, uint32_t len)
{
    explicit_bzero(frame, len);
    free(frame);
}

static void
do_hello(const struct request *rq)
{
    struct conn_slot *slot = rq->slot;
    const struct envelope *env = rq->env;
    char *frame = rq->frame;
    uint32_t len = rq->len;
    struct conn *c = rq->conn;
    const msgpack_object *b = env->body, *o;
    const struct config *cfg = rq->srv->cfg;
    struct proto_str src = { "", 0 }, tok = { NULL, 0 };
    struct proto_err err;
    uint64_t proto;
    struct reply rb;
    char *reply;
    size_t rlen;
    int dup, failed, relays;

    /* Its bytes in the read buffer go too (conn.c's feed). */
    c->wipe_frame = 1;
    proto_err_clear(&err);
    if (b == NULL || b->type != MSGPACK_OBJECT_MAP) {
        proto_err_set(&err, PROTO_EINVALID, b ? "" : "body",
                      "expected the hello body as a map {protocol, source?, "
                      "token?}");
        goto fail;
    }
    o = mpobj_map_get(b, "protocol", &dup);
    if (o == NULL) {
        proto_err_set(&err, PROTO_EINVALID, "protocol",
                      "missing protocol; this daemon speaks protocol 1");
        goto fail;
    }
    if (mpobj_uint(o, UINT32_MAX, &proto, &err) != 0) {
        proto_err_prefix_field(&err, "protocol");
        goto fail;
    }
    if (proto != PROTO_VERSION) {
        proto_err_set(&err, PROTO_EINVALID, "protocol",
                      "protocol %lu is not supported; this daemon speaks "
                      "protocol 1",
                      (unsigned long)proto);
        goto fail;
    }
    o = mpobj_map_get(b, "source", &dup);
    if (o != NULL && o->type != MSGPACK_OBJECT_NIL &&
        mpobj_str(o, CONN_SOURCE_MAX, &src, &err) != 0) {
        proto_err_prefix_field(&err, "source");
        goto fail;
    }
    o = mpobj_map_get(b, "token", &dup);
    if (o != NULL && o->type != MSGPACK_OBJECT_NIL) {
        if (mpobj_str(o, TOKEN_MAX, &tok, &err) != 0) {
            proto_err_prefix_field(&err, "token");
            goto fail;
        }
    }
    /* A node relaying to this center (dispatch_relay.c): its source is
     * the origin, so it must hold a token, checked below. */
    o = mpobj_map_get(b, "relay", &dup);
    relays = o != NULL && o->type == MSGPACK_OBJECT_BOOLEAN && o->via.boolean;
    if (relays && (c->kind != CONN_TCP || tok.ptr == NULL || src.len == 0)) {
        proto_err_set(&err, PROTO_EUNAUTHORIZED, "relay",
                      "relay needs a TCP connection, a token and a source "
                      "(the node's name)");
        goto fail;
    }
    if (c->kind == CONN_TCP) {
        char cn[256];

        /* A TCP peer is who its token says, or without one, its verified
         * client certificate when the certificate's common name is a
         * token's name (listen.tls_client_ca): it holds that token's
         * rights, and a SIGHUP that removes the token closes it. A wrong
         * or missing token ends the connection after the reply, so
         * tokens cannot be guessed at leisure on one connection. */
        if (tok.ptr == NULL && c->tls != NULL &&
            tls_conn_peer_name(c->tls, cn, sizeof(cn)) == 0 && strlen(cn) > 0 &&
            access_token_named(rq->srv->access, cn, c->token_sha) == 0) {
            conn_authenticated(c, ACCESS_WRITE);
            c->has_token = 1;
        } else if (tok.ptr == NULL ||
                   access_check_token(rq->srv->access, tok.ptr, tok.len, NULL,
                                      &err) != 0) {
            struct sockaddr_storage ss;
            int sslen = sizeof(ss);
            uint64_t delay;

            if (tok.ptr == NULL)
                proto_err_set(&err, PROTO_EUNAUTHORIZED, "token",
                              "a TCP connection needs a token in hello");
            wipe(frame, len);
            /* Counted, logged, and held longer at each failure in a row
             * from one address (the connection waits with it). */
            delay = server_auth_failed(
                rq->srv,
                uv_tcp_getpeername(&c->u.tcp, (struct sockaddr *)&ss, &sslen) ==
                        0
                    ? (struct sockaddr *)&ss
                    : NULL,
                err.message);
            reply = reply_error(env->has_id, env->id, &err, &rlen);
            conn_close_after_replies(c);
            conn_slot_complete_after(slot, reply, rlen, delay);
            return;
        } else {
            conn_authenticated(c, ACCESS_WRITE);
            access_token_hash(tok.ptr, tok.len, c->token_sha);
            c->has_token = 1;
        }
    }
    memcpy(c->source, src.ptr, src.len);
    c->source[src.len] = '\0';
    c->source_len = src.len;
    c->relays = relays;
    /* The source is copied and the token was only checked (never kept):
     * nothing borrows the frame, which is wiped so no plaintext token
     * outlives the handshake in freed memory. */
    wipe(frame, len);

    failed =
        reply_begin_ok(&rb, env->has_id, env->id, REPLY_SMALL) != 0 ||
        msgpack_pack_map(&rb.pk, 4) != 0 ||
        reply_kv_uint(&rb.pk, "protocol", PROTO_VERSION) != 0 ||
        reply_kv_cstr(&rb.pk, "server", "receiptd/" RECEIPTD_VERSION) != 0 ||
        reply_kv_uint(&rb.pk, "max_frame", cfg->max_frame) != 0 ||
        reply_kv_uint(&rb.pk, "max_batch", cfg->max_batch) != 0;
    reply = reply_finish(&rb, failed, &rlen);
    conn_slot_complete(slot, reply, rlen);
    return;
fail:
    wipe(frame, len);
    answer_error(slot, env->has_id, env->id, &err);
}

static void
do_ping(const struct request *rq)
{
    struct conn_slot *slot = rq->slot;
    const struct envelope *env = rq->env;
    char *frame = rq->frame;
    uint32_t len = rq->len;
    struct reply rb;
    size_t rlen;
    char *reply;
    int failed;

    (void)len;
    free(frame);
    failed = reply_begin_ok(&rb, env->has_id, env->id, REPLY_SMALL) != 0 ||
             msgpack_pack_map(&rb.pk, 0) != 0;
    reply = reply_finish(&rb, failed, &rlen);
    conn_slot_complete(slot, reply, rlen);
}

static void
do_query(const struct request *rq)
{
    struct conn_slot *slot = rq->slot;
    const struct envelope *env = rq->env;
    char *frame = rq->frame;
    uint32_t len = rq->len;
    struct proto_err err;

    (void)len;
    proto_err_clear(&err);
    /* query_start copies what it keeps out of the body. */
    if (query_start(rq->srv->queries, rq->srv, slot, env->has_id, env->id,
                    env->body, &err) != 0)
        answer_error(slot, env->has_id, env->id, &err);
    free(frame);
}

/*
 * The op table: each op's handler, and whether the op is open (answered
 * whatever the peer's access level). Which ops write is not a column here:
 * it is proto/'s table, read through envelope_op_writes() by
 * access_op_allowed() and by the quarantine rule in dispatch_frame(), so
 * dispatch, access and the protocol cannot disagree about it.
 */
static const struct dispatch_op ops[PROTO_OP_COUNT] = {
    /* On TCP, hello is how a peer authenticates: it must get through. */
    [PROTO_OP_HELLO] = { PROTO_OP_HELLO, 1, do_hello },
    [PROTO_OP_PING] = { PROTO_OP_PING, 0, do_ping },
    /* The writes keep the frame in their job: decoded strings borrow it. */
    [PROTO_OP_RECEIPT] = { PROTO_OP_RECEIPT, 0, do_receipt },
    [PROTO_OP_RECEIPTS] = { PROTO_OP_RECEIPTS, 0, do_receipts },
    [PROTO_OP_PLAN] = { PROTO_OP_PLAN, 0, dispatch_plan_frame },
    [PROTO_OP_RETENTION] = { PROTO_OP_RETENTION, 0, dispatch_plan_frame },
    [PROTO_OP_READBACK] = { PROTO_OP_READBACK, 0, dispatch_plan_frame },
    [PROTO_OP_QUERY] = { PROTO_OP_QUERY, 0, do_query },
    /* A node's batch; only after a hello with relay: true and a token. */
    [PROTO_OP_RELAY] = { PROTO_OP_RELAY, 0, dispatch_relay },
};

const struct dispatch_op *
dispatch_op_find(int op)
{
    if (op < 0 || op >= PROTO_OP_COUNT)
        return NULL;
    return &ops[op];
}

int
dispatch_op_allowed(int level, int op, struct proto_err *err)
{
    const struct dispatch_op *o = dispatch_op_find(op);

    if (o == NULL)
        return proto_err_set(err, PROTO_EUNKNOWN_OP, "op",
                             "op %d is not in the op table", op);
    if (o->open)
        return 0;
    return access_op_allowed((enum access_level)level, op, err);
}

/*
 * The fast path of dispatch_frame for what producers send most: a
 * `receipt` or `receipts` frame that envelope_peek reads, from a peer that
 * may write, whose every receipt receipt_decode_fast takes, is decoded
 * straight from its bytes (no mpcheck walk, no msgpack-c unpacking, no
 * second pass over a tree: a single receipt cost the loop about 20,000
 * instructions, half of them there) and handed to the op's handler as
 * rq->decoded. Returns 1 when it did, 0 (nothing taken, nothing said) for
 * every other frame, which envelope_parse and the handlers answer as
 * before: the fast path never answers an error itself.
 */
static int
dispatch_fast(struct conn *c, struct request *rq, struct envelope *env)
{
    const char *p;
    struct receipt *items;
    struct mpread d;
    struct proto_err err;
    uint32_t n, i;
    size_t used;

    if (!envelope_peek(rq->frame, rq->len, env) ||
        (env->op != PROTO_OP_RECEIPT && env->op != PROTO_OP_RECEIPTS &&
         env->op != PROTO_OP_RELAY) ||
        dispatch_op_allowed(c->level, env->op, &err) != 0)
        return 0;
    if (env->op == PROTO_OP_RELAY)
        return dispatch_relay_fast(rq);
    p = rq->frame + env->body_off;
    if (env->op == PROTO_OP_RECEIPT) {
        n = 1;
        used = 0;
    } else {
        mpread_init(&d, p, env->body_len);
        /* Past max_batch (or empty) it is envelope_parse's to answer; n
         * receipts take at least n bytes, so the allocation is bounded by
         * the frame as well. */
        if (mpread_array(&d, &n) != 0 || n == 0 ||
            n > rq->srv->cfg->max_batch || n > env->body_len)
            return 0;
        used = mpread_used(&d, p);
    }
    /* A single receipt, the common frame, is pooled (do_receipt). */
    items = env->op == PROTO_OP_RECEIPT ? pool_zalloc(sizeof(*items))
                                        : calloc(n, sizeof(*items));
    if (items == NULL)
        return 0;
    for (i = 0; i < n; i++) {
        size_t one =
            receipt_decode_fast(p + used, env->body_len - used, &items[i]);

        if (one == 0)
            break;
        used += one;
    }
    if (i < n || used != env->body_len) {
        free(items);
        return 0;
    }
    rq->decoded = items;
    rq->ndecoded = n;
    dispatch_op_find(env->op)->handle(rq);
    return 1;
}

void
dispatch_frame(struct conn *c, char *frame, uint32_t len)
{
    struct conn_slot *slot = conn_slot_new(c);
    struct envelope env;
    /* What a handler sees (dispatch.h): the connection itself only for
     * hello, set once the envelope names the op. */
    struct request rq = { c->srv, slot,      &env,          frame,
                          len,    c->source, c->source_len, NULL,
                          NULL,   0,         c->relays,     c->fr.whole_alloc };
    struct proto_err err;
    msgpack_unpacked up;
    int rc;

    if (slot == NULL) {
        free(frame);
        conn_close(c);
        return;
    }
    if (dispatch_fast(c, &rq, &env))
        return;
    msgpack_unpacked_init(&up);
    proto_err_clear(&err);
    rc = envelope_parse(frame, len, &up, &env, &err);
    if ((rc == PROTO_EMALFORMED ||
         (rc == PROTO_EINVALID && envelope_op_writes(env.op))) &&
        c->level == ACCESS_WRITE) {
        /* Not a usable request (or a write with an unusable seq): kept
         * in quarantine with its bytes, as every rejected write is. Only
         * from a peer that may write: the quarantine is bounded and
         * evicts its oldest rows, so a reader or a TCP peer that has not
         * authenticated must not be able to push out evidence. Theirs
         * are answered below. */
        do_bad_frame(&rq, &err);
        goto out;
    }
    if (rc != 0) {
        /* An unknown op or a bad seq: the producer's mistake, and no
         * write payload to keep (or a peer whose payloads are not kept). */
        answer_error(slot, env.has_id, env.id, &err);
        free(frame);
        goto out;
    }
    /* envelope_parse() gave an op of the table, so a row exists. */
    if (dispatch_op_allowed(c->level, env.op, &err) != 0) {
        if (c->kind == CONN_TCP && c->level == ACCESS_NONE)
            proto_err_set(&err, PROTO_EUNAUTHORIZED, NULL,
                          "authenticate first: send hello with a token");
        answer_error(slot, env.has_id, env.id, &err);
        free(frame);
        goto out;
    }
    if (env.op == PROTO_OP_HELLO)
        rq.conn = c;
    dispatch_op_find(env.op)->handle(&rq);
out:
    msgpack_unpacked_destroy(&up);
}

void
dispatch_replay_of(struct store_write *w, const struct envelope *env,
                   const char *frame)
{
    if (!env->has_replay_of || env->body_len == 0)
        return;
    w->replay_of = env->replay_of;
    w->replay_body = frame + env->body_off;
    w->replay_body_len = env->body_len;
}

/* Said in quarantine and in the reply: a seq is a write's name. */
#define CONFLICT_MSG                                                           \
    "this source's seq was committed before with another payload; a seq "      \
    "names one write of a source, so a new write needs a new seq"

void
dispatch_payload(struct writer_job *job, const char *raw, size_t len,
                 const char *op)
{
    if (!job->w.has_seq)
        return;
    job->w.payload_hash = proto_hash32(raw, len);
    job->conflict_q.raw = raw;
    job->conflict_q.len = len;
    job->conflict_q.op = op;
    job->conflict_q.code = PROTO_ECONFLICT;
    job->conflict_q.path = "seq";
    job->conflict_q.message = CONFLICT_MSG;
    job->w.conflict_q = &job->conflict_q;
}

void
dispatch_conflict_error(const struct writer_job *job, struct proto_err *err)
{
    int op = job->w.conflict_op;

    proto_err_set(err, PROTO_ECONFLICT, "seq",
                  "seq %llu: %s (first a `%s` write; the payload is kept in "
                  "quarantine)",
                  (unsigned long long)job->w.seq, CONFLICT_MSG,
                  op >= 0 && op < PROTO_OP_COUNT ? envelope_op_name(op) : "?");
}

int
dispatch_pack_dup_outcome(msgpack_packer *pk, const char *blob, size_t len)
{
    msgpack_unpacked up;
    const msgpack_object *o;
    size_t off = 0;
    uint32_t i;
    int failed;

    msgpack_unpacked_init(&up);
    if (blob == NULL ||
        msgpack_unpack_next(&up, blob, len, &off) != MSGPACK_UNPACK_SUCCESS ||
        up.data.type != MSGPACK_OBJECT_MAP) {
        /* The seq was first used by a write without a recorded result. */
        msgpack_unpacked_destroy(&up);
        return msgpack_pack_map(pk, 1) != 0 ||
               envelope_pack_cstr(pk, "duplicate") != 0 ||
               msgpack_pack_true(pk) != 0;
    }
    o = &up.data;
    failed = msgpack_pack_map(pk, o->via.map.size + 1) != 0;
    for (i = 0; i < o->via.map.size && !failed; i++)
        failed = msgpack_pack_object(pk, o->via.map.ptr[i].key) != 0 ||
                 msgpack_pack_object(pk, o->via.map.ptr[i].val) != 0;
    if (!failed)
        failed = envelope_pack_cstr(pk, "duplicate") != 0 ||
                 msgpack_pack_true(pk) != 0;
    msgpack_unpacked_destroy(&up);
    return failed ? -1 : 0;
}

/* Builds the reply of a finished receipt, receipts or quarantine-only
 * job and completes its slot, on the loop thread; the job is taken. */
static void
write_done(struct writer_job *job)
{
    struct wctx *x = (struct wctx *)job->ctx;
    struct server *srv = x->srv;
    struct reply rb;
    const char *status;
    size_t len = 0;
    char *reply;
    int failed;

    server_count_write(srv, job);
    if (job->rc != 0) {
        reply = reply_error(x->has_id, x->id, &job->err, &len);
        goto done;
    }
    if (x->reply_err) {
        srv->n.rejected += x->rejected;
        reply = reply_error(x->has_id, x->id, &x->err, &len);
        goto done;
    }
    if (job->w.conflict) {
        struct proto_err cerr;

        srv->n.rejected += x->accepted + x->rejected;
        dispatch_conflict_error(job, &cerr);
        reply = reply_error(x->has_id, x->id, &cerr, &len);
        goto done;
    }
    if (!job->w.duplicate) {
        srv->n.accepted += x->accepted;
        srv->n.rejected += x->rejected;
        srv->n.stray_coverage += x->stray;
    }
    failed = reply_begin_ok(&rb, x->has_id, x->id, REPLY_SMALL) != 0;
    if (!failed && job->w.duplicate && job->w.dup_outcome != NULL) {
        failed = dispatch_pack_dup_outcome(&rb.pk, job->w.dup_outcome,
                                           job->w.dup_outcome_len);
    } else if (!failed && (x->op == PROTO_OP_RECEIPT || job->w.duplicate)) {
        /* A duplicate without a recorded blob was first a `receipt`. */
        static const char receipt_id[] = "\xaa"
                                         "receipt_id";
        static const char fallback[] = "\xa8"
                                       "fallback";

        status = receipt_status_name(job->w.status);
        failed =
            msgpack_pack_map(&rb.pk, job->w.duplicate ? 3 : 2) != 0 ||
            envelope_pack_raw(&rb.pk, receipt_id, sizeof(receipt_id) - 1) !=
                0 ||
            msgpack_pack_uint64(&rb.pk, (uint64_t)job->w.receipt_id) != 0 ||
            envelope_pack_raw(&rb.pk, fallback, sizeof(fallback) - 1) != 0 ||
            envelope_pack_cstr(&rb.pk, status ? status : "") != 0;
        if (!failed && job->w.duplicate)
            failed = envelope_pack_cstr(&rb.pk, "duplicate") != 0 ||
                     msgpack_pack_true(&rb.pk) != 0;
    } else if (!failed) {
        failed = msgpack_sbuffer_write(&rb.sb, job->outcome,
                                       job->w.outcome_len) != 0;
    }
    reply = reply_finish(&rb, failed, &len);
done:
    conn_slot_complete(x->slot, reply, len);
    writer_job_free(job);
}
