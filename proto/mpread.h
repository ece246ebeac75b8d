/*
 * mpread.h: reading msgpack straight from its bytes, for the fast paths
 * (receipt_decode_fast, envelope_peek) that take the plainest encodings of
 * what producers send and leave everything else to mpcheck, msgpack-c and
 * the full decoders. Every read checks the end of the buffer; a read that
 * cannot be taken returns -1 and moves nothing, and the caller declines.
 */
#ifndef RECEIPTD_PROTO_MPREAD_H
#define RECEIPTD_PROTO_MPREAD_H

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct mpread {
    const unsigned char *p, *end;
};

static inline void
mpread_init(struct mpread *d, const char *buf, size_t len)
{
    d->p = (const unsigned char *)buf;
    d->end = d->p + len;
}

/* A fixmap or map16 header. */
static inline int
mpread_map(struct mpread *d, uint32_t *n)
{
    if (d->p >= d->end)
        return -1;
    if ((*d->p & 0xf0) == 0x80) {
        *n = *d->p++ & 0x0f;
        return 0;
    }
    if (*d->p == 0xde && d->end - d->p >= 3) {
        *n = (uint32_t)d->p[1] << 8 | d->p[2];
        d->p += 3;
        return 0;
    }
    return -1;
}

/* An array header of any width (a node's relay writes its records' count
 * last, in an array32). The count is the peer's: callers bound it before
 * they allocate for it. */
static inline int
mpread_array(struct mpread *d, uint32_t *n)
{
    if (d->p >= d->end)
        return -1;
    if ((*d->p & 0xf0) == 0x90) {
        *n = *d->p++ & 0x0f;
        return 0;
    }
    if (*d->p == 0xdc && d->end - d->p >= 3) {
        *n = (uint32_t)d->p[1] << 8 | d->p[2];
        d->p += 3;
        return 0;
    }
    if (*d->p == 0xdd && d->end - d->p >= 5) {
        *n = (uint32_t)d->p[1] << 24 | (uint32_t)d->p[2] << 16 |
             (uint32_t)d->p[3] << 8 | d->p[4];
        d->p += 5;
        return 0;
    }
    return -1;
}

/* A fixstr, str8 or str16 (never a bin). An empty str gets a real
 * pointer, as the full decoders give. */
static inline int
mpread_str(struct mpread *d, const char **s, size_t *n)
{
    size_t h, len;

    if (d->p >= d->end)
        return -1;
    if ((*d->p & 0xe0) == 0xa0) {
        len = *d->p & 0x1f;
        h = 1;
    } else if (*d->p == 0xd9 && d->end - d->p >= 2) {
        len = d->p[1];
        h = 2;
    } else if (*d->p == 0xda && d->end - d->p >= 3) {
        len = (size_t)d->p[1] << 8 | d->p[2];
        h = 3;
    } else {
        return -1;
    }
    if ((size_t)(d->end - d->p) - h < len)
        return -1;
    *n = len;
    *s = len > 0 ? (const char *)d->p + h : "";
    d->p += h + len;
    return 0;
}

/* An unsigned int in a positive fixint or a uint form. A wider uint is
 * one load and a byte swap (a loop of byte loads and shifts, which -O2
 * does not unroll, was a third of the cost of a receipt's counters). */
static inline int
mpread_uint(struct mpread *d, uint64_t *v)
{
    const unsigned char *p = d->p;
    uint16_t w16;
    uint32_t w32;
    uint64_t w64;
    size_t left;

    if (p >= d->end)
        return -1;
    if (*p < 0x80) {
        *v = *p;
        d->p++;
        return 0;
    }
    left = (size_t)(d->end - p) - 1;
    switch (*p) {
    case 0xcc:
        if (left < 1)
            return -1;
        *v = p[1];
        d->p += 2;
        return 0;
    case 0xcd:
        if (left < 2)
            return -1;
        memcpy(&w16, p + 1, sizeof(w16));
        *v = be16toh(w16);
        d->p += 3;
        return 0;
    case 0xce:
        if (left < 4)
            return -1;
        memcpy(&w32, p + 1, sizeof(w32));
        *v = be32toh(w32);
        d->p += 5;
        return 0;
    case 0xcf:
        if (left < 8)
            return -1;
        memcpy(&w64, p + 1, sizeof(w64));
        *v = be64toh(w64);
        d->p += 9;
        return 0;
    default:
        return -1;
    }
}

/* Bytes read so far from buf. */
static inline size_t
mpread_used(const struct mpread *d, const char *buf)
{
    return (size_t)(d->p - (const unsigned char *)buf);
}

#endif
