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
 *
 * The same header reader then walks accepted bytes: mpcheck_skip() and
 * mpcheck_iter find the exact bytes of one object inside a frame.
 */
#ifndef RECEIPTD_PROTO_MPCHECK_H
#define RECEIPTD_PROTO_MPCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define MPCHECK_MAX_DEPTH 32

/*
 * Checks that buf[0..len) holds exactly one well-formed msgpack object.
 * Returns 0, or PROTO_EMALFORMED with err saying what and at which byte.
 * buf is borrowed; nothing is allocated.
 */
int mpcheck(const char *buf, size_t len, struct proto_err *err);

/*
 * The size in bytes of the whole msgpack object at the start of
 * buf[0..len), header and contents, or 0 when those bytes do not hold one
 * complete object. Bytes after it are not looked at. buf is borrowed;
 * nothing is allocated, and nesting costs no stack.
 */
size_t mpcheck_skip(const char *buf, size_t len);

/*
 * A walk over the elements of one array or map, giving each element's
 * exact bytes: what the daemon keeps in quarantine and where the envelope
 * finds its body, without re-encoding anything (an odd integer width a
 * producer used is kept). A map's keys and values are elements of their
 * own, in wire order: key, value, key, value.
 */
struct mpcheck_iter {
    const char *at; /* the next element; borrowed from the buffer */
    size_t left;    /* bytes from at to the end of the buffer */
    uint64_t n;     /* elements not yet given */
};

/*
 * Starts a walk over the array or map at the start of buf[0..len); it
 * borrows buf, and needs no close. Returns 0, or -1 when buf does not
 * start with a whole array or map header.
 */
int mpcheck_iter_init(struct mpcheck_iter *it, const char *buf, size_t len);

/*
 * Gives the next element: *obj (borrowed from the buffer) and *olen are
 * its bytes. Returns 0, or -1 when every element was given or the buffer
 * ends inside the next one (never for a buffer mpcheck() accepted).
 */
int mpcheck_iter_next(struct mpcheck_iter *it, const char **obj, size_t *olen);

#endif
