/*
 * mpcheck.c: the allocation-free msgpack walk of mpcheck.h.
 *
 * Invariant: `need` on the stack counts the elements (keys and values
 * separately for maps) still to be read in each open container; an object
 * that completes decrements the innermost count, and containers whose count
 * reaches zero are popped. The walk is iterative, so hostile nesting costs
 * no C stack. Pure functions; safe on any thread.
 *
 * mpcheck_skip() and mpcheck_iter read headers with the same header() as
 * the check, so "mpcheck passed" means they cannot fail on those bytes.
 */
#include "mpcheck.h"

#include <stdint.h>

static uint64_t
be(const unsigned char *p, int n)
{
    uint64_t v = 0;
    int i;

    for (i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* True for the type bytes of arrays and maps. */
static int
is_container(unsigned char t)
{
    return (t & 0xe0) == 0x80 || t == 0xdc || t == 0xdd || t == 0xde ||
           t == 0xdf;
}

/*
 * Reads the header of the object at p (len bytes available). On success sets
 * *hdr to the header size, *payload to the bytes that follow the header and
 * belong to this object (str/bin/ext data, fixed-size scalars), and
 * *children to the number of elements a container holds (0 for scalars).
 * Returns 0, or -1 when the header itself is truncated or invalid.
 */
static int
header(const unsigned char *p, size_t len, size_t *hdr, uint64_t *payload,
       uint64_t *children)
{
    unsigned char t = p[0];
    int n;

    *payload = 0;
    *children = 0;
    *hdr = 1;
    if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3)
        return 0;
    if ((t & 0xe0) == 0xa0) { /* fixstr */
        *payload = t & 0x1f;
        return 0;
    }
    if ((t & 0xf0) == 0x90) { /* fixarray */
        *children = t & 0x0f;
        return 0;
    }
    if ((t & 0xf0) == 0x80) { /* fixmap */
        *children = 2 * (uint64_t)(t & 0x0f);
        return 0;
    }
    switch (t) {
    case 0xc4:
    case 0xc5:
    case 0xc6: /* bin 8/16/32 */
    case 0xd9:
    case 0xda:
    case 0xdb: /* str 8/16/32 */
        n = (t == 0xc4 || t == 0xd9) ? 1 : (t == 0xc5 || t == 0xda) ? 2 : 4;
        if (len < 1 + (size_t)n)
            return -1;
        *hdr = 1 + n;
        *payload = be(p + 1, n);
        return 0;
    case 0xc7:
    case 0xc8:
    case 0xc9: /* ext 8/16/32: length, type byte */
        n = t == 0xc7 ? 1 : t == 0xc8 ? 2 : 4;
        if (len < 2 + (size_t)n)
            return -1;
        *hdr = 2 + n;
        *payload = be(p + 1, n);
        return 0;
    case 0xca:
    case 0xd2:
    case 0xce: /* float32, int32, uint32 */
        *payload = 4;
        return 0;
    case 0xcb:
    case 0xd3:
    case 0xcf: /* float64, int64, uint64 */
        *payload = 8;
        return 0;
    case 0xcc:
    case 0xd0: /* uint8, int8 */
        *payload = 1;
        return 0;
    case 0xcd:
    case 0xd1: /* uint16, int16 */
        *payload = 2;
        return 0;
    case 0xd4:
    case 0xd5:
    case 0xd6:
    case 0xd7:
    case 0xd8: /* fixext */
        *payload = 1 + ((uint64_t)1 << (t - 0xd4));
        return 0;
    case 0xdc:
    case 0xdd: /* array 16/32 */
    case 0xde:
    case 0xdf: /* map 16/32 */
        n = (t == 0xdc || t == 0xde) ? 2 : 4;
        if (len < 1 + (size_t)n)
            return -1;
        *hdr = 1 + n;
        *children = be(p + 1, n);
        if (t >= 0xde)
            *children *= 2;
        return 0;
    default: /* 0xc1, never used */
        return -1;
    }
}

int
mpcheck(const char *buf, size_t len, struct proto_err *err)
{
    const unsigned char *p = (const unsigned char *)buf;
    uint64_t need[MPCHECK_MAX_DEPTH + 1];
    size_t off = 0, hdr;
    uint64_t payload, children;
    int depth = 0;

    if (len == 0)
        return proto_err_set(err, PROTO_EMALFORMED, NULL,
                             "expected one msgpack object, got no bytes");
    for (;;) {
        unsigned char type;

        if (off >= len)
            return proto_err_set(err, PROTO_EMALFORMED, NULL,
                                 "msgpack object truncated at byte %zu", off);
        type = p[off];
        /* Most of a receipt is fixints and short strings: those need
         * neither header() nor the container checks. */
        if (type <= 0x7f || type >= 0xe0 || (type & 0xe0) == 0xa0) {
            payload = type >= 0xa0 && type <= 0xbf ? type & 0x1f : 0;
            if (payload > len - off - 1)
                return proto_err_set(err, PROTO_EMALFORMED, NULL,
                                     "msgpack object at byte %zu claims %llu "
                                     "bytes but only %zu remain",
                                     off, (unsigned long long)payload,
                                     len - off - 1);
            off += 1 + (size_t)payload;
            goto complete;
        }
        if (header(p + off, len - off, &hdr, &payload, &children) != 0) {
            if (p[off] == 0xc1)
                return proto_err_set(err, PROTO_EMALFORMED, NULL,
                                     "invalid msgpack type byte 0xc1 at "
                                     "byte %zu",
                                     off);
            return proto_err_set(err, PROTO_EMALFORMED, NULL,
                                 "msgpack header truncated at byte %zu", off);
        }
        if (payload > len - off - hdr)
            return proto_err_set(err, PROTO_EMALFORMED, NULL,
                                 "msgpack object at byte %zu claims %llu "
                                 "bytes but only %zu remain",
                                 off, (unsigned long long)payload,
                                 len - off - hdr);
        if (children > len - off - hdr)
            return proto_err_set(err, PROTO_EMALFORMED, NULL,
                                 "msgpack container at byte %zu claims %llu "
                                 "elements but only %zu bytes remain",
                                 off, (unsigned long long)children,
                                 len - off - hdr);
        /* An empty container is a level too: msgpack-c gives every
         * container, empty or not, one of its 32 stack entries, so counting
         * it here keeps "mpcheck passed" meaning "msgpack-c will unpack". */
        if (is_container(type) && depth == MPCHECK_MAX_DEPTH)
            return proto_err_set(err, PROTO_EMALFORMED, NULL,
                                 "msgpack nesting deeper than %d at byte %zu",
                                 MPCHECK_MAX_DEPTH, off);
        off += hdr + (size_t)payload;
        if (children > 0) {
            need[depth++] = children;
            continue;
        }
    complete:
        /* A complete object: count it against its containers. */
        while (depth > 0 && --need[depth - 1] == 0)
            depth--;
        if (depth == 0)
            break;
    }
    if (off != len)
        return proto_err_set(err, PROTO_EMALFORMED, NULL,
                             "%zu trailing bytes after the msgpack object",
                             len - off);
    return 0;
}

size_t
mpcheck_skip(const char *buf, size_t len)
{
    const unsigned char *p = (const unsigned char *)buf;
    uint64_t left = 1, payload, children;
    size_t off = 0, hdr;

    /* Only a count of objects still owed is needed, not a stack: every
     * object, a container's header included, is consumed in order. */
    while (left > 0) {
        if (off >= len ||
            header(p + off, len - off, &hdr, &payload, &children) != 0 ||
            payload > len - off - hdr)
            return 0;
        off += hdr + (size_t)payload;
        left = left - 1 + children;
        /* Every object owed takes at least one byte: more of them than
         * bytes left is a lie, and refusing it here keeps left bounded. */
        if (left > len - off)
            return 0;
    }
    return off;
}

int
mpcheck_iter_init(struct mpcheck_iter *it, const char *buf, size_t len)
{
    const unsigned char *p = (const unsigned char *)buf;
    uint64_t payload, children;
    size_t hdr;

    it->at = buf;
    it->left = 0;
    it->n = 0;
    if (len == 0 || !is_container(p[0]) ||
        header(p, len, &hdr, &payload, &children) != 0)
        return -1;
    it->at = buf + hdr;
    it->left = len - hdr;
    it->n = children;
    return 0;
}

int
mpcheck_iter_next(struct mpcheck_iter *it, const char **obj, size_t *olen)
{
    size_t n;

    if (it->n == 0 || (n = mpcheck_skip(it->at, it->left)) == 0)
        return -1;
    *obj = it->at;
    *olen = n;
    it->at += n;
    it->left -= n;
    it->n--;
    return 0;
}
