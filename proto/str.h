/*
 * str.h: the borrowed byte string every part of the wire model passes
 * around (a field of a decoded frame, a column of a stored row).
 */
#ifndef RECEIPTD_PROTO_STR_H
#define RECEIPTD_PROTO_STR_H

#include <stddef.h>

/* A borrowed byte string: not NUL-terminated. */
struct proto_str {
    const char *ptr;
    size_t len;
};

#endif
