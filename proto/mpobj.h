/*
 * mpobj.h: typed reads of msgpack-c objects shared by every decoder in
 * proto/ (envelope, receipt, plan). Each returns 0 or PROTO_EINVALID with a
 * message saying what was expected and what arrived; the caller adds the
 * field path. Objects are borrowed; nothing is allocated.
 */
#ifndef RECEIPTD_PROTO_MPOBJ_H
#define RECEIPTD_PROTO_MPOBJ_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "error.h"
#include "str.h"

/* "a string", "an array", ... for messages. Never NULL. */
const char *mpobj_type_name(const msgpack_object *o);

/* True when o is a str (or bin) equal to the NUL-terminated s. */
int mpobj_str_eq(const msgpack_object *o, const char *s);

/*
 * Reads an unsigned integer in any msgpack integer form (a negative-int
 * form holding a non-negative value is accepted). Fails on negatives, other
 * types, and values above max.
 */
int mpobj_uint(const msgpack_object *o, uint64_t max, uint64_t *out,
               struct proto_err *err);

/*
 * Reads a string: a str, or a bin holding valid UTF-8. Fails on invalid
 * UTF-8 (overlong forms, surrogates and code points above U+10FFFF
 * included) and on strings longer than max_len bytes. out borrows o's bytes.
 */
int mpobj_str(const msgpack_object *o, size_t max_len, struct proto_str *out,
              struct proto_err *err);

/* True when buf[0..len) is valid UTF-8 as RFC 3629 defines it. */
int mpobj_utf8_valid(const char *buf, size_t len);

/*
 * Looks up key in map o; returns the value or NULL. When the key appears
 * more than once, *dup is set to 1 (dup may be NULL).
 */
const msgpack_object *mpobj_map_get(const msgpack_object *o, const char *key,
                                    int *dup);

/*
 * Looks up key in map o for a struct decoder: a duplicate key, or a missing
 * required one, is PROTO_EINVALID with path key. *v is NULL for a missing
 * optional key, and for an optional key holding nil (serde's Option).
 */
int mpobj_field(const msgpack_object *o, const char *key, int required,
                const msgpack_object **v, struct proto_err *err);

/* PROTO_EINVALID ("expected <what> as a map, got ...") unless o is a map
 * (an array); the caller adds the path. */
int mpobj_expect_map(const msgpack_object *o, const char *what,
                     struct proto_err *err);
int mpobj_expect_array(const msgpack_object *o, const char *what,
                       struct proto_err *err);

/*
 * Splits a serde enum into its variant name and payload: a string is a
 * unit variant (payload NULL), a map of exactly one entry is a variant
 * carrying data. PROTO_EINVALID otherwise.
 */
int mpobj_variant(const msgpack_object *o, const msgpack_object **name,
                  const msgpack_object **payload, struct proto_err *err);

#endif
