/*
 * envelope.c: request and reply envelopes. Pure; any thread.
 */
#include "envelope.h"

#include <string.h>

#include "invariant.h"
#include "mpcheck.h"
#include "mpread.h"

/*
 * The ops of PROTOCOL section 3. Whether an op writes decides who may send
 * it (daemon/access.c), whether its rejected payloads are quarantined and
 * when it is answered, so it is said here once; the daemon's table of
 * handlers (daemon/dispatch.c) adds only what proto/ cannot know.
 */
static const struct {
    const char *name;
    int writes;
} ops[PROTO_OP_COUNT] = {
    [PROTO_OP_HELLO] = { "hello", 0 },
    [PROTO_OP_PING] = { "ping", 0 },
    [PROTO_OP_RECEIPT] = { "receipt", 1 },
    [PROTO_OP_RECEIPTS] = { "receipts", 1 },
    [PROTO_OP_PLAN] = { "plan", 1 },
    [PROTO_OP_RETENTION] = { "retention", 1 },
    [PROTO_OP_READBACK] = { "readback", 0 },
    [PROTO_OP_QUERY] = { "query", 0 },
    [PROTO_OP_RELAY] = { "relay", 1 },
};

const char *
envelope_op_name(int op)
{
    if (op < 0 || op >= PROTO_OP_COUNT)
        return NULL;
    return ops[op].name;
}

int
envelope_op_from_name(const char *name, size_t len)
{
    int i;

    for (i = 0; i < PROTO_OP_COUNT; i++)
        if (strlen(ops[i].name) == len && memcmp(ops[i].name, name, len) == 0)
            return i;
    return -1;
}

int
envelope_op_writes(int op)
{
    if (op < 0 || op >= PROTO_OP_COUNT)
        return 0;
    return ops[op].writes;
}

int
envelope_pack_cstr(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);

    if (msgpack_pack_str(pk, n) != 0)
        return -1;
    return msgpack_pack_str_body(pk, s, n);
}

int
envelope_pack_raw(msgpack_packer *pk, const char *bytes, size_t n)
{
    return pk->callback(pk->data, bytes, n);
}

/* True when p[0..n) is at most 64 bytes of printable ASCII, no quote. */
static int
printable(const char *p, size_t n)
{
    size_t i;

    if (n > 64)
        return 0;
    for (i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] > 0x7e || p[i] == '"')
            return 0;
    return 1;
}

/*
 * Finds the bytes of v, a value of the map root unpacked from frame.
 * msgpack-c keeps a map's pairs in wire order, so v's pair is found by its
 * index, and which key is "body" is decided only by mpobj_map_get(), not a
 * second time over bytes. The pairs before it and its key are walked; v
 * itself is walked only when a pair follows it. The last pair's value
 * ends where the frame does, since mpcheck() proved the frame is exactly
 * the map, and a producer's body (the bulk of a write) is last in every
 * frame envelope_request() builds. Returns 0, or -1 when the walk fails
 * (it cannot on a frame mpcheck() accepted).
 */
static int
value_span(const char *frame, size_t len, const msgpack_object *root,
           const msgpack_object *v, size_t *off, size_t *vlen)
{
    struct mpcheck_iter it;
    const char *el = NULL;
    size_t ellen = 0;
    uint64_t i, k;

    for (i = 0; i < root->via.map.size; i++)
        if (&root->via.map.ptr[i].val == v)
            break;
    if (i == root->via.map.size || mpcheck_iter_init(&it, frame, len) != 0)
        return -1;
    /* Pair i's value is element 2i + 1: skip the pairs before it and its
     * key. */
    for (k = 0; k < 2 * i + 1; k++)
        if (NEVER(mpcheck_iter_next(&it, &el, &ellen) != 0))
            return -1;
    if (i + 1 == root->via.map.size) {
        /* The value is all that is left: nothing follows it in a frame
         * mpcheck() accepted. */
        if (NEVER(it.n != 1 || it.left == 0))
            return -1;
        *off = (size_t)(it.at - frame);
        *vlen = it.left;
        return 0;
    }
    if (NEVER(mpcheck_iter_next(&it, &el, &ellen) != 0))
        return -1;
    *off = (size_t)(el - frame);
    *vlen = ellen;
    return 0;
}

int
envelope_parse(const char *frame, size_t len, msgpack_unpacked *up,
               struct envelope *env, struct proto_err *err)
{
    const msgpack_object *root, *o;
    size_t off = 0;
    int dup, rc;

    memset(env, 0, sizeof(*env));
    env->op = -1;
    if ((rc = mpcheck(frame, len, err)) != 0)
        return rc;
    if (msgpack_unpack_next(up, frame, len, &off) != MSGPACK_UNPACK_SUCCESS ||
        off != len)
        return proto_err_set(err, PROTO_EMALFORMED, NULL,
                             "frame is not one msgpack object");
    root = &up->data;
    if (root->type != MSGPACK_OBJECT_MAP)
        return proto_err_set(err, PROTO_EMALFORMED, NULL,
                             "expected a request map, got %s",
                             mpobj_type_name(root));

    o = mpobj_map_get(root, "id", &dup);
    if (o == NULL || dup)
        return proto_err_set(err, PROTO_EMALFORMED, "id",
                             o ? "duplicate key \"id\" in the request"
                               : "missing request id");
    if (mpobj_uint(o, UINT64_MAX, &env->id, err) != 0) {
        proto_err_set(err, PROTO_EMALFORMED, "id",
                      "expected the request id as an unsigned integer, "
                      "got %s",
                      mpobj_type_name(o));
        return PROTO_EMALFORMED;
    }
    env->has_id = 1;

    o = mpobj_map_get(root, "op", &dup);
    if (o == NULL || dup)
        return proto_err_set(err, PROTO_EMALFORMED, "op",
                             o ? "duplicate key \"op\" in the request"
                               : "missing op");
    if (o->type != MSGPACK_OBJECT_STR)
        return proto_err_set(err, PROTO_EMALFORMED, "op",
                             "expected op as a string, got %s",
                             mpobj_type_name(o));
    env->op = envelope_op_from_name(o->via.str.ptr, o->via.str.size);
    /* The message goes back in a str, which must be UTF-8: the op is
     * quoted only when it is short printable ASCII. */
    if (env->op < 0 && printable(o->via.str.ptr, o->via.str.size))
        return proto_err_set(err, PROTO_EUNKNOWN_OP, "op",
                             "unknown op \"%.*s\"; expected hello, ping, "
                             "receipt, receipts, plan, retention, readback "
                             "or query",
                             (int)o->via.str.size,
                             o->via.str.size > 0 ? o->via.str.ptr : "");
    if (env->op < 0)
        return proto_err_set(err, PROTO_EUNKNOWN_OP, "op",
                             "unknown op of %lu bytes; expected hello, "
                             "ping, receipt, receipts, plan, retention, "
                             "readback or query",
                             (unsigned long)o->via.str.size);

    o = mpobj_map_get(root, "seq", &dup);
    if (dup)
        return proto_err_set(err, PROTO_EMALFORMED, "seq",
                             "duplicate key \"seq\" in the request");
    if (o != NULL && o->type != MSGPACK_OBJECT_NIL) {
        if (mpobj_uint(o, UINT64_MAX, &env->seq, err) != 0) {
            proto_err_prefix_field(err, "seq");
            return PROTO_EINVALID;
        }
        env->has_seq = 1;
    }

    /* Only a hint for where a refused payload is kept: one that cannot be
     * read is no reason to refuse a frame daemons before it accepted. */
    o = mpobj_map_get(root, "replay_of", &dup);
    if (o != NULL && !dup &&
        mpobj_uint(o, UINT64_MAX, &env->replay_of, NULL) == 0)
        env->has_replay_of = 1;
    else
        env->replay_of = 0;

    o = mpobj_map_get(root, "body", &dup);
    if (dup)
        return proto_err_set(err, PROTO_EMALFORMED, "body",
                             "duplicate key \"body\" in the request");
    if (o != NULL &&
        value_span(frame, len, root, o, &env->body_off, &env->body_len) != 0)
        return proto_err_set(err, PROTO_EMALFORMED, "body",
                             "the body's bytes cannot be found in the frame");
    env->body = o;
    return 0;
}

int
envelope_peek(const char *frame, size_t len, struct envelope *env)
{
    struct mpread d;
    const char *k;
    size_t kn;
    uint32_t n, i;
    int seen_op = 0, seen_seq = 0, seen_replay = 0;

    memset(env, 0, sizeof(*env));
    mpread_init(&d, frame, len);
    if (mpread_map(&d, &n) != 0)
        return 0;
    for (i = 0; i < n; i++) {
        if (mpread_str(&d, &k, &kn) != 0)
            return 0;
        if (kn == 2 && memcmp(k, "op", 2) == 0 && !seen_op) {
            if (mpread_str(&d, &k, &kn) != 0 ||
                (env->op = envelope_op_from_name(k, kn)) < 0)
                return 0;
            seen_op = 1;
        } else if (kn == 2 && memcmp(k, "id", 2) == 0 && !env->has_id) {
            if (mpread_uint(&d, &env->id) != 0)
                return 0;
            env->has_id = 1;
        } else if (kn == 3 && memcmp(k, "seq", 3) == 0 && !seen_seq) {
            seen_seq = 1;
            if (d.p < d.end && *d.p == 0xc0)
                d.p++;
            else if (mpread_uint(&d, &env->seq) != 0)
                return 0;
            else
                env->has_seq = 1;
        } else if (kn == 9 && memcmp(k, "replay_of", 9) == 0 && !seen_replay) {
            /* Anything but an unsigned int is envelope_parse()'s to
             * ignore. */
            seen_replay = 1;
            if (mpread_uint(&d, &env->replay_of) != 0)
                return 0;
            env->has_replay_of = 1;
        } else if (kn == 4 && memcmp(k, "body", 4) == 0 && i == n - 1 &&
                   d.p < d.end) {
            env->body_off = mpread_used(&d, frame);
            env->body_len = len - env->body_off;
            return seen_op && env->has_id;
        } else {
            return 0;
        }
    }
    return 0;
}

static int
pack_id(msgpack_packer *pk, int has_id, uint64_t id)
{
    if (envelope_pack_cstr(pk, "id") != 0)
        return -1;
    return has_id ? msgpack_pack_uint64(pk, id) : msgpack_pack_nil(pk);
}

int
envelope_reply_ok(msgpack_packer *pk, int has_id, uint64_t id)
{
    /* {"id": id, "ok": true, "result": ...}, the constant parts packed
     * once: a reply per write is the hot path of single receipts. */
    static const char head[] = "\x83\xa2"
                               "id";
    static const char ok[] = "\xa2"
                             "ok\xc3\xa6"
                             "result";

    if (envelope_pack_raw(pk, head, sizeof(head) - 1) != 0 ||
        (has_id ? msgpack_pack_uint64(pk, id) : msgpack_pack_nil(pk)) != 0)
        return -1;
    return envelope_pack_raw(pk, ok, sizeof(ok) - 1);
}

int
envelope_reply_error(msgpack_packer *pk, int has_id, uint64_t id,
                     const struct proto_err *err)
{
    if (msgpack_pack_map(pk, 3) != 0 || pack_id(pk, has_id, id) != 0 ||
        envelope_pack_cstr(pk, "ok") != 0 || msgpack_pack_false(pk) != 0 ||
        envelope_pack_cstr(pk, "error") != 0 || msgpack_pack_map(pk, 3) != 0)
        return -1;
    if (envelope_pack_cstr(pk, "code") != 0 ||
        envelope_pack_cstr(pk, proto_code_name(err->code)) != 0 ||
        envelope_pack_cstr(pk, "message") != 0 ||
        envelope_pack_cstr(pk, err->message) != 0 ||
        envelope_pack_cstr(pk, "path") != 0)
        return -1;
    return envelope_pack_cstr(pk, err->path);
}

int
envelope_request(msgpack_packer *pk, int op, uint64_t id, int has_seq,
                 uint64_t seq, int has_body)
{
    const char *name = envelope_op_name(op);

    if (name == NULL)
        return -1;
    if (msgpack_pack_map(pk, 2 + (has_seq != 0) + (has_body != 0)) != 0 ||
        envelope_pack_cstr(pk, "op") != 0 ||
        envelope_pack_cstr(pk, name) != 0 ||
        envelope_pack_cstr(pk, "id") != 0 || msgpack_pack_uint64(pk, id) != 0)
        return -1;
    if (has_seq && (envelope_pack_cstr(pk, "seq") != 0 ||
                    msgpack_pack_uint64(pk, seq) != 0))
        return -1;
    if (has_body && envelope_pack_cstr(pk, "body") != 0)
        return -1;
    return 0;
}

int
envelope_request_replay(msgpack_packer *pk, int op, uint64_t id,
                        uint64_t replay_of, int has_body)
{
    const char *name = envelope_op_name(op);

    if (name == NULL)
        return -1;
    if (msgpack_pack_map(pk, 3 + (has_body != 0)) != 0 ||
        envelope_pack_cstr(pk, "op") != 0 ||
        envelope_pack_cstr(pk, name) != 0 ||
        envelope_pack_cstr(pk, "id") != 0 || msgpack_pack_uint64(pk, id) != 0 ||
        envelope_pack_cstr(pk, "replay_of") != 0 ||
        msgpack_pack_uint64(pk, replay_of) != 0)
        return -1;
    if (has_body && envelope_pack_cstr(pk, "body") != 0)
        return -1;
    return 0;
}

static void
copy_str(char *dst, size_t cap, const msgpack_object *o)
{
    size_t n = 0;

    if (o != NULL && o->type == MSGPACK_OBJECT_STR) {
        n = o->via.str.size < cap - 1 ? o->via.str.size : cap - 1;
        /* An empty str may carry a NULL pointer, which memcpy must not
         * see even for zero bytes. */
        if (n > 0)
            memcpy(dst, o->via.str.ptr, n);
    }
    dst[n] = '\0';
}

int
envelope_reply_decode(const msgpack_object *o, struct envelope_reply *r,
                      struct proto_err *err)
{
    const msgpack_object *v, *e, *c;

    memset(r, 0, sizeof(*r));
    if (o->type != MSGPACK_OBJECT_MAP)
        return proto_err_set(err, PROTO_EMALFORMED, NULL,
                             "expected a reply map, got %s",
                             mpobj_type_name(o));
    v = mpobj_map_get(o, "id", NULL);
    if (v != NULL && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        r->has_id = 1;
        r->id = v->via.u64;
    }
    v = mpobj_map_get(o, "ok", NULL);
    if (v == NULL || v->type != MSGPACK_OBJECT_BOOLEAN)
        return proto_err_set(err, PROTO_EMALFORMED, "ok",
                             "expected \"ok\" as a boolean");
    r->ok = v->via.boolean;
    if (r->ok) {
        r->result = mpobj_map_get(o, "result", NULL);
        return 0;
    }
    e = mpobj_map_get(o, "error", NULL);
    if (e == NULL || e->type != MSGPACK_OBJECT_MAP)
        return proto_err_set(err, PROTO_EMALFORMED, "error",
                             "expected \"error\" as a map");
    c = mpobj_map_get(e, "code", NULL);
    if (c != NULL && c->type == MSGPACK_OBJECT_STR) {
        r->code_name.ptr = c->via.str.size > 0 ? c->via.str.ptr : "";
        r->code_name.len = c->via.str.size;
        r->err.code = proto_code_from_name(c->via.str.ptr, c->via.str.size);
    }
    if (r->err.code == PROTO_OK)
        r->err.code = PROTO_EINVALID;
    copy_str(r->err.path, sizeof(r->err.path), mpobj_map_get(e, "path", NULL));
    copy_str(r->err.message, sizeof(r->err.message),
             mpobj_map_get(e, "message", NULL));
    return 0;
}
