/*
 * identity.c: the identity rule of PROTOCOL section 5 (plan, node, value,
 * resource and component ids) and the byte order identities are sorted
 * in. Plans and retention specs both read identities. Pure functions; safe
 * on any thread.
 */
#include "identity.h"

#include <string.h>

int
identity_cmp(struct proto_str a, struct proto_str b)
{
    size_t n = a.len < b.len ? a.len : b.len;
    int c = n ? memcmp(a.ptr, b.ptr, n) : 0;

    if (c != 0)
        return c;
    return a.len < b.len ? -1 : a.len > b.len;
}

int
identity_valid(const char *s, size_t len)
{
    size_t i;

    if (len == 0 || len > IDENTITY_MAX)
        return 0;
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
            c == ':' || c == '/')
            continue;
        return 0;
    }
    return 1;
}

int
identity_decode(const msgpack_object *o, struct proto_str *out,
                struct proto_err *err)
{
    const char *p;
    size_t n, i;

    if (o->type == MSGPACK_OBJECT_STR) {
        p = o->via.str.ptr;
        n = o->via.str.size;
    } else if (o->type == MSGPACK_OBJECT_BIN) {
        p = o->via.bin.ptr;
        n = o->via.bin.size;
    } else {
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "expected an identity as a string, got %s",
                             mpobj_type_name(o));
    }
    if (n == 0)
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "expected an identity, got an empty string");
    if (n > IDENTITY_MAX)
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "expected an identity of at most %d bytes, got "
                             "%zu bytes",
                             IDENTITY_MAX, n);
    for (i = 0; i < n; i++) {
        if (!identity_valid(p + i, 1))
            return proto_err_set(err, PROTO_EINVALID, NULL,
                                 "identity has a byte 0x%02x at offset %zu; "
                                 "expected ASCII letters, digits and . _ - "
                                 ": /",
                                 (unsigned char)p[i], i);
    }
    out->ptr = p;
    out->len = n;
    return 0;
}
