/*
 * mpobj.c: typed reads of msgpack-c objects. Pure; any thread.
 */
#include "mpobj.h"

#include <string.h>

const char *
mpobj_type_name(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        return "nil";
    case MSGPACK_OBJECT_BOOLEAN:
        return "a boolean";
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        return "an unsigned integer";
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return "a negative integer";
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return "a float";
    case MSGPACK_OBJECT_STR:
        return "a string";
    case MSGPACK_OBJECT_ARRAY:
        return "an array";
    case MSGPACK_OBJECT_MAP:
        return "a map";
    case MSGPACK_OBJECT_BIN:
        return "a bin";
    case MSGPACK_OBJECT_EXT:
        return "an ext";
    }
    return "an unknown type";
}

int
mpobj_str_eq(const msgpack_object *o, const char *s)
{
    size_t n = strlen(s);

    /* msgpack-c leaves ptr NULL for an empty str or bin, and memcmp must
     * not see a NULL pointer even for zero bytes. */
    if (o->type == MSGPACK_OBJECT_STR)
        return o->via.str.size == n &&
               (n == 0 || memcmp(o->via.str.ptr, s, n) == 0);
    if (o->type == MSGPACK_OBJECT_BIN)
        return o->via.bin.size == n &&
               (n == 0 || memcmp(o->via.bin.ptr, s, n) == 0);
    return 0;
}

int
mpobj_uint(const msgpack_object *o, uint64_t max, uint64_t *out,
           struct proto_err *err)
{
    uint64_t v;

    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        v = o->via.u64;
    } else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        /* msgpack-c reports int8..int64 forms as negative even when the
         * value is >= 0; only a truly negative value is an error. */
        if (o->via.i64 < 0)
            return proto_err_set(err, PROTO_EINVALID, NULL,
                                 "expected an unsigned integer, got %lld",
                                 (long long)o->via.i64);
        v = (uint64_t)o->via.i64;
    } else {
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "expected an unsigned integer, got %s",
                             mpobj_type_name(o));
    }
    if (v > max)
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "expected an unsigned integer at most %llu, "
                             "got %llu",
                             (unsigned long long)max, (unsigned long long)v);
    *out = v;
    return 0;
}

/* The offset of the first byte that is not valid UTF-8, or len. */
static size_t
utf8_bad(const char *buf, size_t len)
{
    const unsigned char *s = (const unsigned char *)buf;
    size_t i = 0, n, k;
    uint32_t cp, min;

    while (i < len) {
        /* Receipts are mostly ASCII: skip it eight bytes at a time. */
        if (len - i >= 8) {
            uint64_t w;

            memcpy(&w, s + i, sizeof(w));
            if ((w & 0x8080808080808080ull) == 0) {
                i += 8;
                continue;
            }
        }
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        if ((s[i] & 0xe0) == 0xc0) {
            n = 1;
            cp = s[i] & 0x1f;
            min = 0x80;
        } else if ((s[i] & 0xf0) == 0xe0) {
            n = 2;
            cp = s[i] & 0x0f;
            min = 0x800;
        } else if ((s[i] & 0xf8) == 0xf0) {
            n = 3;
            cp = s[i] & 0x07;
            min = 0x10000;
        } else {
            return i;
        }
        if (len - i - 1 < n)
            return i;
        for (k = 1; k <= n; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return i;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return i;
        i += n + 1;
    }
    return len;
}

int
mpobj_utf8_valid(const char *buf, size_t len)
{
    return utf8_bad(buf, len) == len;
}

int
mpobj_str(const msgpack_object *o, size_t max_len, struct proto_str *out,
          struct proto_err *err)
{
    const char *p;
    size_t n, bad;

    if (o->type == MSGPACK_OBJECT_STR) {
        p = o->via.str.ptr;
        n = o->via.str.size;
    } else if (o->type == MSGPACK_OBJECT_BIN) {
        p = o->via.bin.ptr;
        n = o->via.bin.size;
    } else {
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "expected a string, got %s", mpobj_type_name(o));
    }
    if (n > max_len)
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "expected a string of at most %zu bytes, got "
                             "%zu bytes",
                             max_len, n);
    if ((bad = utf8_bad(p, n)) != n)
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "expected a valid UTF-8 string, got a byte "
                             "sequence that is not UTF-8 at byte %zu",
                             bad);
    /* An empty string may come with a NULL pointer; callers get a real
     * one, so that memcpy and printf("%.*s") need no special case. */
    out->ptr = n > 0 ? p : "";
    out->len = n;
    return 0;
}

const msgpack_object *
mpobj_map_get(const msgpack_object *o, const char *key, int *dup)
{
    const msgpack_object *found = NULL;
    uint32_t i;

    if (dup != NULL)
        *dup = 0;
    if (o->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (i = 0; i < o->via.map.size; i++) {
        if (!mpobj_str_eq(&o->via.map.ptr[i].key, key))
            continue;
        if (found != NULL) {
            if (dup != NULL)
                *dup = 1;
            break;
        }
        found = &o->via.map.ptr[i].val;
    }
    return found;
}

int
mpobj_field(const msgpack_object *o, const char *key, int required,
            const msgpack_object **v, struct proto_err *err)
{
    int dup;

    *v = mpobj_map_get(o, key, &dup);
    if (dup)
        return proto_err_set(err, PROTO_EINVALID, key, "duplicate key \"%s\"",
                             key);
    if (*v == NULL && required)
        return proto_err_set(err, PROTO_EINVALID, key,
                             "missing required field \"%s\"", key);
    if (*v != NULL && !required && (*v)->type == MSGPACK_OBJECT_NIL)
        *v = NULL;
    return 0;
}

int
mpobj_expect_map(const msgpack_object *o, const char *what,
                 struct proto_err *err)
{
    if (o->type == MSGPACK_OBJECT_MAP)
        return 0;
    return proto_err_set(err, PROTO_EINVALID, NULL,
                         "expected %s as a map, got %s", what,
                         mpobj_type_name(o));
}

int
mpobj_expect_array(const msgpack_object *o, const char *what,
                   struct proto_err *err)
{
    if (o->type == MSGPACK_OBJECT_ARRAY)
        return 0;
    return proto_err_set(err, PROTO_EINVALID, NULL,
                         "expected %s as an array, got %s", what,
                         mpobj_type_name(o));
}

int
mpobj_variant(const msgpack_object *o, const msgpack_object **name,
              const msgpack_object **payload, struct proto_err *err)
{
    if (o->type == MSGPACK_OBJECT_STR || o->type == MSGPACK_OBJECT_BIN) {
        *name = o;
        *payload = NULL;
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_MAP && o->via.map.size == 1) {
        *name = &o->via.map.ptr[0].key;
        *payload = &o->via.map.ptr[0].val;
        return 0;
    }
    return proto_err_set(err, PROTO_EINVALID, NULL,
                         "expected an enum as a string or a map of one "
                         "entry, got %s",
                         mpobj_type_name(o));
}
