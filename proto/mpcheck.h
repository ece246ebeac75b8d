/*
 * mpcheck.h: a bounded structural check of one msgpack object, run on every
 * frame before msgpack-c sees it.
 *
 * msgpack-c's C unpacker trusts container headers (a 5-byte array32 header
 * makes it reserve gigabytes) and its nesting limit is a build constant. This
 * walk rejects, without allocating, anything that is not exactly one complete
 * object: truncation, trailing bytes, the never-used type byte 0xc1, nesting
 * deeper than MPCHECK_MAX_DEPTH, str/bin/ext lengths past the end, and
 * container headers that claim more elements than there are bytes left (every
 * element takes at least one byte). After it passes, unpacking needs at most
 * one msgpack_object per byte of input.
 */
#ifndef RECEIPTD_PROTO_MPCHECK_H
#define RECEIPTD_PROTO_MPCHECK_H

#include <stddef.h>

#include "error.h"

#define MPCHECK_MAX_DEPTH 32

/*
 * Checks that buf[0..len) holds exactly one well-formed msgpack object.
 * Returns 0, or PROTO_EMALFORMED with err saying what and at which byte.
 * buf is borrowed; nothing is allocated.
 */
int mpcheck(const char *buf, size_t len, struct proto_err *err);

#endif
