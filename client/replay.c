/*
 * replay.c: `receiptctl quarantine replay ID...`: re-submit quarantined
 * payloads, e.g. after an upgrade that accepts what was refused.
 *
 * For each id the daemon is asked for the payload's bytes with the query
 * {"kind": "quarantine", "id": N, "raw": true}, whose row carries them in a
 * "raw" bin field with the payload's "op" and "source". The bytes must be
 * one msgpack object (a payload quarantined as malformed is not, and cannot
 * be replayed); they are sent unchanged as the body of a new request, on a
 * connection that says hello as the original source, with the envelope key
 * "replay_of": N, so that a daemon that refuses the payload again keeps the
 * refusal in row N (its "attempts" counts them) rather than in a copy.
 * Single-threaded.
 */
#include "replay.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "envelope.h"
#include "mpcheck.h"
#include "mpobj.h"
#include "net.h"
#include "output.h"

struct replay_query {
    uint64_t id;
    int raw;
};

static int
pack_replay_query_cb(msgpack_packer *pk, const void *arg)
{
    const struct replay_query *q = arg;

    return msgpack_pack_map(pk, 2 + (q->raw != 0)) != 0 ||
           cli_pack_str(pk, "kind", "quarantine") ||
           cli_pack_u64(pk, "id", q->id) ||
           (q->raw &&
            (envelope_pack_cstr(pk, "raw") || msgpack_pack_true(pk) != 0));
}

struct raw_body {
    const char *ptr;
    size_t len;
};

static int
pack_raw_cb(msgpack_packer *pk, const void *arg)
{
    const struct raw_body *b = arg;

    /* The payload is one checked msgpack object; it is the body as is. */
    return msgpack_sbuffer_write(pk->data, b->ptr, b->len);
}

/* The op to replay a payload with: plans and retentions keep their op; a
 * receipt payload is a `receipt`, an array of them a `receipts` batch. */
static int
replay_op(const char *op, const msgpack_object *body)
{
    int k = envelope_op_from_name(op, strlen(op));

    if (k == PROTO_OP_PLAN || k == PROTO_OP_RETENTION || k == PROTO_OP_READBACK)
        return k;
    if (body->type == MSGPACK_OBJECT_ARRAY &&
        (body->via.array.size == 0 ||
         body->via.array.ptr[0].type == MSGPACK_OBJECT_MAP ||
         body->via.array.ptr[0].type == MSGPACK_OBJECT_ARRAY))
        return PROTO_OP_RECEIPTS;
    return PROTO_OP_RECEIPT;
}

/*
 * Prints the outcome of a replay; a batch's items that were refused again
 * go to stderr, one line each. Returns 0, or CLI_EXIT_DAEMON when any item
 * was refused.
 */
static int
print_replayed(uint64_t qid, int op, const msgpack_object *res)
{
    char code[32], path[PROTO_ERR_PATH_MAX], msg[PROTO_ERR_MSG_MAX];
    const msgpack_object *v, *rej = NULL;
    uint64_t u;
    uint32_t i;

    printf("quarantine %" PRIu64 ": replayed as %s", qid, envelope_op_name(op));
    if (res != NULL && res->type == MSGPACK_OBJECT_MAP) {
        v = mpobj_map_get(res, "receipt_id", NULL);
        if (v != NULL && mpobj_uint(v, UINT64_MAX, &u, NULL) == 0)
            printf(", receipt %" PRIu64, u);
        v = mpobj_map_get(res, "fallback", NULL);
        if (v != NULL && v->type == MSGPACK_OBJECT_STR)
            printf(" (%.*s)", (int)v->via.str.size, v->via.str.ptr);
        v = mpobj_map_get(res, "accepted", NULL);
        if (v != NULL && mpobj_uint(v, UINT64_MAX, &u, NULL) == 0)
            printf(", accepted %" PRIu64, u);
        rej = mpobj_map_get(res, "rejected", NULL);
        if (rej != NULL && rej->type == MSGPACK_OBJECT_ARRAY)
            printf(", rejected %" PRIu32, rej->via.array.size);
        else
            rej = NULL;
    }
    putchar('\n');
    if (rej == NULL || rej->via.array.size == 0)
        return 0;
    fflush(stdout);
    for (i = 0; i < rej->via.array.size; i++) {
        const msgpack_object *e = &rej->via.array.ptr[i];

        if (e->type != MSGPACK_OBJECT_MAP)
            continue;
        v = mpobj_map_get(e, "index", NULL);
        if (v == NULL || mpobj_uint(v, UINT64_MAX, &u, NULL) != 0)
            u = i;
        cli_copy_str(code, sizeof(code), e, "code");
        cli_copy_str(path, sizeof(path), e, "path");
        cli_copy_str(msg, sizeof(msg), e, "message");
        fprintf(stderr,
                "receiptctl: quarantine %" PRIu64 ": [%" PRIu64
                "]: %s%s%s: %s\n",
                qid, u, code, path[0] ? ": " : "", path, msg);
    }
    return CLI_EXIT_DAEMON;
}

/*
 * Asks for quarantined payload qid with its raw bytes. Returns 0 with *row
 * (borrowed from rep, which the caller releases in every case) and *raw (a
 * bin or str), or an exit code (printed).
 */
static int
fetch(struct net_conn *qc, uint64_t qid, const char *what,
      struct net_reply *rep, const msgpack_object **row,
      const msgpack_object **raw)
{
    struct replay_query q = { qid, 1 };
    const msgpack_object *rows, *v;
    uint64_t got;
    int rc;

    rc = cli_request_named(qc, PROTO_OP_QUERY, what, 1, pack_replay_query_cb,
                           &q, rep);
    if (rc != 0)
        return rc;
    rows = rep->r.result && rep->r.result->type == MSGPACK_OBJECT_MAP
               ? mpobj_map_get(rep->r.result, "rows", NULL)
               : NULL;
    if (rows == NULL || rows->type != MSGPACK_OBJECT_ARRAY ||
        rows->via.array.size == 0 ||
        rows->via.array.ptr[0].type != MSGPACK_OBJECT_MAP) {
        fprintf(stderr, "receiptctl: %s: no such quarantined payload\n", what);
        return CLI_EXIT_DAEMON;
    }
    *row = &rows->via.array.ptr[0];
    /* A daemon that ignored "id" would answer with the newest payloads;
     * replaying one of those instead would be worse than failing. */
    v = mpobj_map_get(*row, "id", NULL);
    if (v == NULL || mpobj_uint(v, UINT64_MAX, &got, NULL) != 0 || got != qid) {
        fprintf(stderr,
                "receiptctl: %s: the daemon answered with another payload\n",
                what);
        return CLI_EXIT_DAEMON;
    }
    *raw = mpobj_map_get(*row, "raw", NULL);
    if (*raw == NULL || ((*raw)->type != MSGPACK_OBJECT_BIN &&
                         (*raw)->type != MSGPACK_OBJECT_STR)) {
        fprintf(stderr, "receiptctl: %s: the daemon sent no \"raw\" bytes\n",
                what);
        return CLI_EXIT_DAEMON;
    }
    return 0;
}

/*
 * The outcome of a replay for --format json or csv: one row, the daemon's
 * result with "quarantine_id" and "replayed_as" first. Returns as
 * print_replayed() does.
 */
static int
print_replayed_as(const struct cli_opts *o, uint64_t qid, int op,
                  const msgpack_object *res)
{
    const msgpack_object *rej = NULL;
    msgpack_unpacked up;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint32_t i, n = 0;
    size_t off = 0;
    int rc;

    if (res != NULL && res->type == MSGPACK_OBJECT_MAP) {
        n = res->via.map.size;
        rej = mpobj_map_get(res, "rejected", NULL);
    }
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (msgpack_pack_map(&pk, 2) != 0 || envelope_pack_cstr(&pk, "rows") ||
        msgpack_pack_array(&pk, 1) != 0 || msgpack_pack_map(&pk, n + 2) != 0 ||
        envelope_pack_cstr(&pk, "quarantine_id") ||
        msgpack_pack_uint64(&pk, qid) != 0 ||
        envelope_pack_cstr(&pk, "replayed_as") ||
        envelope_pack_cstr(&pk, envelope_op_name(op)))
        cli_oom();
    for (i = 0; i < n; i++)
        if (msgpack_pack_object(&pk, res->via.map.ptr[i].key) != 0 ||
            msgpack_pack_object(&pk, res->via.map.ptr[i].val) != 0)
            cli_oom();
    if (envelope_pack_cstr(&pk, "truncated") || msgpack_pack_false(&pk))
        cli_oom();
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, sb.data, sb.size, &off) !=
        MSGPACK_UNPACK_SUCCESS)
        cli_oom();
    rc = cli_print_result(o, "replay", &up.data);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&sb);
    if (rc == 0 && rej != NULL && rej->type == MSGPACK_OBJECT_ARRAY &&
        rej->via.array.size > 0)
        rc = CLI_EXIT_DAEMON;
    return rc;
}

/*
 * After a replay was refused again: prints how many refusals row qid now
 * stands for, when the daemon kept this one in it (a daemon before
 * "attempts", or a row evicted meanwhile, says nothing: the refusal is
 * then in a new row).
 */
static void
print_attempts(struct net_conn *qc, uint64_t qid, const char *what)
{
    struct replay_query q = { qid, 0 };
    const msgpack_object *rows, *row, *v;
    struct net_reply rep;
    uint64_t got, attempts;

    if (cli_request_named(qc, PROTO_OP_QUERY, what, 1, pack_replay_query_cb, &q,
                          &rep) == 0 &&
        rep.r.result != NULL && rep.r.result->type == MSGPACK_OBJECT_MAP &&
        (rows = mpobj_map_get(rep.r.result, "rows", NULL)) != NULL &&
        rows->type == MSGPACK_OBJECT_ARRAY && rows->via.array.size == 1 &&
        (row = &rows->via.array.ptr[0])->type == MSGPACK_OBJECT_MAP &&
        (v = mpobj_map_get(row, "id", NULL)) != NULL &&
        mpobj_uint(v, UINT64_MAX, &got, NULL) == 0 && got == qid &&
        (v = mpobj_map_get(row, "attempts", NULL)) != NULL &&
        mpobj_uint(v, UINT64_MAX, &attempts, NULL) == 0 && attempts > 1)
        printf("%s: refused again, attempt %" PRIu64 ", kept in the same "
               "row\n",
               what, attempts);
    net_reply_free(&rep);
}

static int
replay_one(struct cli_opts *o, struct net_conn *qc, uint64_t qid)
{
    struct net_reply rep, rep2;
    const msgpack_object *row, *raw;
    char what[64], op[32], source[PROTO_ERR_MSG_MAX];
    struct proto_err perr;
    struct raw_body body;
    msgpack_unpacked up;
    struct net_conn c;
    size_t off = 0;
    int rc, k;

    snprintf(what, sizeof(what), "quarantine %" PRIu64, qid);
    if ((rc = fetch(qc, qid, what, &rep, &row, &raw)) != 0)
        goto out;
    body.ptr = raw->via.bin.ptr;
    body.len = raw->via.bin.size;
    cli_copy_str(op, sizeof(op), row, "op");
    cli_copy_str(source, sizeof(source), row, "source");
    /* A payload that was quarantined as malformed is not one msgpack
     * object; sending it inside an envelope would corrupt the frame. */
    if (body.len == 0 || mpcheck(body.ptr, body.len, &perr) != 0) {
        fprintf(stderr,
                "receiptctl: %s: cannot be replayed: the payload is "
                "not one msgpack object\n",
                what);
        rc = CLI_EXIT_DAEMON;
        goto out;
    }
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, body.ptr, body.len, &off) !=
        MSGPACK_UNPACK_SUCCESS) {
        msgpack_unpacked_destroy(&up);
        fprintf(stderr, "receiptctl: %s: cannot unpack the payload\n", what);
        rc = CLI_EXIT_DAEMON;
        goto out;
    }
    k = replay_op(op, &up.data);
    msgpack_unpacked_destroy(&up);
    /* The replay speaks as the payload's original source, so queries by
     * source still find it; a fresh connection says that hello. */
    rc = cli_open_conn(o, &c, source[0] ? source : NULL, 0);
    if (rc != 0)
        goto out;
    rc = cli_request_replay(&c, k, qid, what, pack_raw_cb, &body, &rep2);
    if (rc == 0)
        rc = o->format == OUTPUT_TABLE
                 ? print_replayed(qid, k, rep2.r.result)
                 : print_replayed_as(o, qid, k, rep2.r.result);
    net_reply_free(&rep2);
    net_close(&c);
    if (rc == CLI_EXIT_DAEMON && o->format == OUTPUT_TABLE) {
        fflush(stderr);
        print_attempts(qc, qid, what);
    }
out:
    net_reply_free(&rep);
    return rc;
}

/*
 * Prints quarantined payload qid: its row without the raw bytes, plus
 * "payload", the bytes decoded when they are one msgpack object (else the
 * bytes themselves, base64 in JSON and CSV). The document printed,
 * {"rows": [row], "truncated": false}, is built from objects that point
 * into the reply and the decoded payload, not packed and unpacked again:
 * msgpack's unpacker stops at 32 levels, and a payload up to 31 deep (all
 * a frame can carry) sits 3 levels down in it.
 */
static int
show_one(struct cli_opts *o, struct net_conn *qc, uint64_t qid, int first)
{
    const msgpack_object *row, *raw;
    char what[64], err[OUTPUT_ERR_MAX];
    struct net_reply rep;
    struct proto_err perr;
    msgpack_unpacked up;
    msgpack_object doc, rows, shown;
    msgpack_object_kv top[2], *kv = NULL;
    size_t off = 0;
    uint32_t i, n;
    int rc, decoded = 0;

    snprintf(what, sizeof(what), "quarantine %" PRIu64, qid);
    msgpack_unpacked_init(&up);
    if ((rc = fetch(qc, qid, what, &rep, &row, &raw)) != 0)
        goto out;
    if (raw->via.bin.size > 0 &&
        mpcheck(raw->via.bin.ptr, raw->via.bin.size, &perr) == 0 &&
        msgpack_unpack_next(&up, raw->via.bin.ptr, raw->via.bin.size, &off) ==
            MSGPACK_UNPACK_SUCCESS)
        decoded = 1;
    n = row->via.map.size;
    kv = calloc(n ? n : 1, sizeof(*kv));
    if (kv == NULL)
        cli_oom();
    for (i = 0; i < n; i++) {
        kv[i] = row->via.map.ptr[i];
        if (&row->via.map.ptr[i].val == raw) {
            kv[i].key = output_str_object("payload");
            kv[i].val = decoded ? up.data : *raw;
        }
    }
    shown.type = MSGPACK_OBJECT_MAP;
    shown.via.map.size = n;
    shown.via.map.ptr = kv;
    rows.type = MSGPACK_OBJECT_ARRAY;
    rows.via.array.size = 1;
    rows.via.array.ptr = &shown;
    top[0].key = output_str_object("rows");
    top[0].val = rows;
    top[1].key = output_str_object("truncated");
    top[1].val.type = MSGPACK_OBJECT_BOOLEAN;
    top[1].val.via.boolean = false;
    doc.type = MSGPACK_OBJECT_MAP;
    doc.via.map.size = 2;
    doc.via.map.ptr = top;
    if (o->format != OUTPUT_TABLE) {
        rc = cli_print_result(o, "quarantine", &doc);
        goto out;
    }
    if (!first)
        putchar('\n');
    if (output_record(stdout, &shown, err, sizeof(err)) != 0) {
        fprintf(stderr, "receiptctl: %s: %s\n", what, err);
        rc = CLI_EXIT_CONNECT;
    }
out:
    free(kv);
    msgpack_unpacked_destroy(&up);
    net_reply_free(&rep);
    return rc;
}

int
replay_run(struct cli_opts *o)
{
    struct net_conn c;
    uint64_t *ids;
    int i, rc, worst = 0;

    int show = strcmp(o->args[0], "show") == 0;

    if (o->nargs < 2) {
        cli_usage_err(o->prog, "%s needs at least one quarantine id",
                      o->args[0]);
        return CLI_EXIT_USAGE;
    }
    /* JSON is one document: several payloads would be several. */
    if (o->format != OUTPUT_TABLE && o->nargs > 2) {
        cli_usage_err(o->prog, "%s prints one payload as %s; give one id",
                      o->args[0], o->format == OUTPUT_JSON ? "JSON" : "CSV");
        return CLI_EXIT_USAGE;
    }
    ids = calloc((size_t)o->nargs, sizeof(*ids));
    if (ids == NULL)
        cli_oom();
    for (i = 1; i < o->nargs; i++)
        if (cli_parse_u64(o->args[i], 0, UINT64_MAX, &ids[i]) != 0) {
            cli_usage_err(o->prog, "%s: \"%s\" is not a quarantine id",
                          o->args[0], o->args[i]);
            free(ids);
            return CLI_EXIT_USAGE;
        }
    if ((rc = cli_open_conn(o, &c, NULL, 0)) != 0) {
        free(ids);
        return rc;
    }
    for (i = 1; i < o->nargs; i++) {
        rc = show ? show_one(o, &c, ids[i], i == 1) : replay_one(o, &c, ids[i]);
        /* Keep going after a rejected payload; stop when the daemon is
         * gone. */
        if (rc == CLI_EXIT_CONNECT) {
            worst = rc;
            break;
        }
        if (rc > worst)
            worst = rc;
    }
    net_close(&c);
    free(ids);
    return worst;
}
