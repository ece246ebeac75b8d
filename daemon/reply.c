/*
 * reply.c: reply frames (reply.h).
 */
#include "reply.h"

#include <stdlib.h>

#include "envelope.h"
#include "frame.h"

static int
begin(struct reply *r, size_t initial)
{
    msgpack_sbuffer_init(&r->sb);
    if (initial > 0) {
        if ((r->sb.data = malloc(initial)) == NULL)
            return -1;
        r->sb.alloc = initial;
    }
    msgpack_packer_init(&r->pk, &r->sb, msgpack_sbuffer_write);
    r->start = frame_sbuffer_begin(&r->sb);
    return r->start == (size_t)-1 ? -1 : 0;
}

int
reply_begin_ok(struct reply *r, int has_id, uint64_t id, size_t initial)
{
    if (begin(r, initial) != 0)
        return -1;
    return envelope_reply_ok(&r->pk, has_id, id) != 0 ? -1 : 0;
}

char *
reply_finish(struct reply *r, int failed, size_t *len)
{
    if (failed) {
        msgpack_sbuffer_destroy(&r->sb);
        *len = 0;
        return NULL;
    }
    frame_sbuffer_finish(&r->sb, r->start);
    *len = r->sb.size;
    return msgpack_sbuffer_release(&r->sb);
}

char *
reply_error(int has_id, uint64_t id, const struct proto_err *err, size_t *len)
{
    struct reply r;
    int failed;

    failed = begin(&r, REPLY_SMALL) != 0 ||
             envelope_reply_error(&r.pk, has_id, id, err) != 0;
    return reply_finish(&r, failed, len);
}

int
reply_kv_uint(msgpack_packer *pk, const char *k, uint64_t v)
{
    return envelope_pack_cstr(pk, k) != 0 || msgpack_pack_uint64(pk, v) != 0;
}

int
reply_kv_cstr(msgpack_packer *pk, const char *k, const char *v)
{
    return envelope_pack_cstr(pk, k) != 0 || envelope_pack_cstr(pk, v) != 0;
}

int
reply_kv_str(msgpack_packer *pk, const char *k, struct proto_str v)
{
    return envelope_pack_cstr(pk, k) != 0 || msgpack_pack_str(pk, v.len) != 0 ||
           msgpack_pack_str_body(pk, v.ptr, v.len) != 0;
}

int
reply_rows_and(msgpack_packer *pk, const msgpack_sbuffer *rows, uint32_t n,
               int truncated, const char *key, const msgpack_sbuffer *val)
{
    return msgpack_pack_map(pk, key != NULL ? 3 : 2) != 0 ||
           envelope_pack_cstr(pk, "rows") != 0 ||
           msgpack_pack_array(pk, n) != 0 ||
           (rows->size > 0 &&
            msgpack_sbuffer_write(pk->data, rows->data, rows->size) != 0) ||
           envelope_pack_cstr(pk, "truncated") != 0 ||
           (truncated ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) != 0 ||
           (key != NULL &&
            (envelope_pack_cstr(pk, key) != 0 ||
             msgpack_sbuffer_write(pk->data, val->data, val->size) != 0));
}

int
reply_rows(msgpack_packer *pk, const msgpack_sbuffer *rows, uint32_t n,
           int truncated)
{
    return reply_rows_and(pk, rows, n, truncated, NULL, NULL);
}
