/*
 * varint.h: unsigned LEB128, seven bits a byte, low first; at most 10
 * bytes for a u64. The SQLite store's counters and rollup figures and the
 * PostgreSQL center's pending sums are written with it. Inline: a row
 * reads and writes hundreds. No SQLite, no libpq: both backends take it.
 */
#ifndef RECEIPTD_DAEMON_VARINT_H
#define RECEIPTD_DAEMON_VARINT_H

#include <stdint.h>

/* v from [p, end): the byte after it, NULL when cut at end or past 64
 * bits. */
static inline const unsigned char *
store_varint_get(const unsigned char *p, const unsigned char *end, uint64_t *v)
{
    unsigned shift = 0;

    *v = 0;
    while (p < end && shift < 64) {
        unsigned char c = *p++;

        if (shift == 63 && (c & 0x7e) != 0)
            return NULL; /* past 64 bits */
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            return p;
        shift += 7;
    }
    return NULL;
}

/* v at p (room for 10 bytes): the byte after it. */
static inline unsigned char *
store_varint_put(unsigned char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

#endif
