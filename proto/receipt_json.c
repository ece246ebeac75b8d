/*
 * receipt_json.c: receipts in the serde_json form (for importing files).
 *
 * The JSON tree is mirrored as a msgpack-c object tree in a scratch zone,
 * with strings pointing into json-c's own storage, and handed to
 * receipt_decode, so both forms share one validator and one set of error
 * messages. Integers keep their exact value up to 2^64-1 (json-c holds big
 * positives as uint64); floats stay floats and are rejected where an integer
 * is expected. The zone is freed before returning: the receipt's strings
 * borrow json-c's storage, and extra is packed into its own buffer.
 * Pure; any thread.
 */
#include "receipt.h"

#include <string.h>

#include <json-c/json.h>

/* Deeper than any receipt needs; bounds the recursion for trees built by
 * hand (the tokener has its own limit of 32). */
#define JSON_MAX_DEPTH 64

static int
mirror(struct json_object *j, msgpack_object *out, msgpack_zone *z, int depth,
       struct proto_err *err)
{
    struct json_object_iterator it, end;
    size_t i, n;
    int64_t v;
    int rc;

    if (depth > JSON_MAX_DEPTH)
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "JSON nesting deeper than %d", JSON_MAX_DEPTH);
    memset(out, 0, sizeof(*out));
    switch (json_object_get_type(j)) {
    case json_type_null:
        out->type = MSGPACK_OBJECT_NIL;
        return 0;
    case json_type_boolean:
        out->type = MSGPACK_OBJECT_BOOLEAN;
        out->via.boolean = json_object_get_boolean(j) != 0;
        return 0;
    case json_type_double:
        out->type = MSGPACK_OBJECT_FLOAT64;
        out->via.f64 = json_object_get_double(j);
        return 0;
    case json_type_int:
        /* json-c keeps an int64 or, for big positives, a uint64; the
         * int64 view of a big positive saturates at INT64_MAX, so its sign
         * is the value's sign. */
        v = json_object_get_int64(j);
        if (v < 0) {
            out->type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
            out->via.i64 = v;
        } else {
            out->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
            out->via.u64 = json_object_get_uint64(j);
        }
        return 0;
    case json_type_string:
        out->type = MSGPACK_OBJECT_STR;
        out->via.str.ptr = json_object_get_string(j);
        out->via.str.size = (uint32_t)json_object_get_string_len(j);
        return 0;
    case json_type_array:
        n = json_object_array_length(j);
        out->type = MSGPACK_OBJECT_ARRAY;
        out->via.array.size = (uint32_t)n;
        if (n == 0)
            return 0;
        out->via.array.ptr = msgpack_zone_malloc(z, n * sizeof(msgpack_object));
        if (out->via.array.ptr == NULL)
            return proto_err_set(err, PROTO_ENOMEM, NULL,
                                 "no memory for a JSON array");
        for (i = 0; i < n; i++) {
            rc = mirror(json_object_array_get_idx(j, i), &out->via.array.ptr[i],
                        z, depth + 1, err);
            if (rc != 0)
                return rc;
        }
        return 0;
    case json_type_object:
        n = (size_t)json_object_object_length(j);
        out->type = MSGPACK_OBJECT_MAP;
        out->via.map.size = (uint32_t)n;
        if (n == 0)
            return 0;
        out->via.map.ptr =
            msgpack_zone_malloc(z, n * sizeof(msgpack_object_kv));
        if (out->via.map.ptr == NULL)
            return proto_err_set(err, PROTO_ENOMEM, NULL,
                                 "no memory for a JSON object");
        it = json_object_iter_begin(j);
        end = json_object_iter_end(j);
        for (i = 0; i < n && !json_object_iter_equal(&it, &end); i++) {
            msgpack_object_kv *kv = &out->via.map.ptr[i];
            const char *name = json_object_iter_peek_name(&it);

            kv->key.type = MSGPACK_OBJECT_STR;
            kv->key.via.str.ptr = name;
            kv->key.via.str.size = (uint32_t)strlen(name);
            rc = mirror(json_object_iter_peek_value(&it), &kv->val, z,
                        depth + 1, err);
            if (rc != 0)
                return rc;
            json_object_iter_next(&it);
        }
        out->via.map.size = (uint32_t)i;
        return 0;
    }
    return proto_err_set(err, PROTO_EINVALID, NULL,
                         "unexpected JSON value type");
}

int
receipt_decode_json(struct json_object *o, struct receipt *r,
                    struct proto_err *err)
{
    msgpack_zone *z;
    msgpack_object mo;
    int rc;

    memset(r, 0, sizeof(*r));
    if (o == NULL)
        return receipt_decode(NULL, r, err);
    z = msgpack_zone_new(4096);
    if (z == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "no memory to read a JSON receipt");
    rc = mirror(o, &mo, z, 0, err);
    if (rc == 0)
        rc = receipt_decode(&mo, r, err);
    msgpack_zone_free(z);
    return rc;
}
