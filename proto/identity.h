/*
 * identity.h: identities (PROTOCOL section 5): the ids of plans, nodes,
 * values, resources and storage components, and the byte order they are
 * sorted and compared in. Plans (plan.h) and retention specs
 * (retention.h) both read them.
 */
#ifndef RECEIPTD_PROTO_IDENTITY_H
#define RECEIPTD_PROTO_IDENTITY_H

#include <stddef.h>

#include <msgpack.h>

#include "error.h"
#include "mpobj.h"

#define IDENTITY_MAX 160 /* bytes of an identity */

/*
 * True when s[0..len) is an identity: 1 to IDENTITY_MAX bytes, each an
 * ASCII letter or digit or one of `. _ - : /`.
 */
int identity_valid(const char *s, size_t len);

/*
 * Reads an identity from o (a str, or a bin holding one). Returns 0, or
 * PROTO_EINVALID with an empty path and a message saying which rule failed.
 * out borrows o's bytes.
 */
int identity_decode(const msgpack_object *o, struct proto_str *out,
                    struct proto_err *err);

/* Byte-order comparison of two strings (memcmp, then the shorter first). */
int identity_cmp(struct proto_str a, struct proto_str b);

#endif
