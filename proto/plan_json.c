/*
 * plan_json.c: prepared plans in the serde_json form (plan files the
 * client registers). The JSON tree is packed into msgpack bytes the plan
 * owns and decoded by plan_decode(), so both forms share one validator and
 * one set of error messages. The only json-c code of plans: the daemon
 * does not link it. Pure; any thread.
 */
#include "plan_json.h"

#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

static int
pack_str(msgpack_packer *pk, const char *s, size_t n)
{
    if (msgpack_pack_str(pk, n) != 0)
        return -1;
    return msgpack_pack_str_body(pk, s, n);
}

static int
pack_cstr(msgpack_packer *pk, const char *s)
{
    return pack_str(pk, s, strlen(s));
}

/* JSON nesting deeper than the wire allows is refused like a frame. */
#define JSON_MAX_DEPTH 32

static int
json_pack(struct json_object *j, msgpack_packer *pk, int depth)
{
    int64_t i64;

    if (depth > JSON_MAX_DEPTH)
        return 1;
    switch (json_object_get_type(j)) {
    case json_type_null:
        return msgpack_pack_nil(pk) ? -1 : 0;
    case json_type_boolean:
        return (json_object_get_boolean(j) ? msgpack_pack_true(pk)
                                           : msgpack_pack_false(pk))
                   ? -1
                   : 0;
    case json_type_int:
        /* json-c keeps integers above INT64_MAX as unsigned; get_int64
         * saturates them, get_uint64 reads them exactly. */
        i64 = json_object_get_int64(j);
        if (i64 < 0)
            return msgpack_pack_int64(pk, i64) ? -1 : 0;
        return msgpack_pack_uint64(pk, json_object_get_uint64(j)) ? -1 : 0;
    case json_type_double:
        return msgpack_pack_double(pk, json_object_get_double(j)) ? -1 : 0;
    case json_type_string:
        return pack_str(pk, json_object_get_string(j),
                        (size_t)json_object_get_string_len(j));
    case json_type_array: {
        size_t n = json_object_array_length(j), k;
        int rc;

        if (n > UINT32_MAX || msgpack_pack_array(pk, (uint32_t)n))
            return -1;
        for (k = 0; k < n; k++)
            if ((rc = json_pack(json_object_array_get_idx(j, k), pk,
                                depth + 1)) != 0)
                return rc;
        return 0;
    }
    case json_type_object: {
        struct json_object_iterator it = json_object_iter_begin(j);
        struct json_object_iterator end = json_object_iter_end(j);
        int rc;

        if (msgpack_pack_map(pk, (uint32_t)json_object_object_length(j)))
            return -1;
        for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
            if (pack_cstr(pk, json_object_iter_peek_name(&it)) != 0)
                return -1;
            if ((rc = json_pack(json_object_iter_peek_value(&it), pk,
                                depth + 1)) != 0)
                return rc;
        }
        return 0;
    }
    }
    return -1;
}

int
plan_decode_json(struct json_object *o, struct plan **out,
                 struct proto_err *err)
{
    struct plan_owned *own;
    msgpack_packer pk;
    size_t off = 0;
    int rc;

    *out = NULL;
    if ((own = calloc(1, sizeof(*own))) == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "no memory");
    msgpack_sbuffer_init(&own->sb);
    msgpack_unpacked_init(&own->up);
    msgpack_packer_init(&pk, &own->sb, msgpack_sbuffer_write);
    rc = json_pack(o, &pk, 0);
    if (rc == 0 && msgpack_unpack_next(&own->up, own->sb.data, own->sb.size,
                                       &off) != MSGPACK_UNPACK_SUCCESS)
        rc = -1;
    if (rc != 0) {
        msgpack_unpacked_destroy(&own->up);
        msgpack_sbuffer_destroy(&own->sb);
        free(own);
        if (rc > 0)
            return proto_err_set(err, PROTO_EINVALID, NULL,
                                 "JSON nested deeper than %d levels",
                                 JSON_MAX_DEPTH);
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "no memory to convert the JSON plan");
    }
    if ((rc = plan_decode(&own->up.data, out, err)) != 0) {
        msgpack_unpacked_destroy(&own->up);
        msgpack_sbuffer_destroy(&own->sb);
        free(own);
        return rc;
    }
    (*out)->owned = own;
    return 0;
}
