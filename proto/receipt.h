/*
 * receipt.h: the execution receipt of PROTOCOL section 4, one C struct for
 * schemas 1, 2 and 3, decoded from either rmp-serde encoding (map or array),
 * validated field by field, and encoded back (map form). The serde_json form
 * is receipt_json.h's.
 *
 * The struct and its tables are receipt_types.h's (no msgpack there, so
 * the store can take receipts without the codec).
 */
#ifndef RECEIPTD_PROTO_RECEIPT_H
#define RECEIPTD_PROTO_RECEIPT_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "error.h"
#include "mpobj.h"
#include "receipt_types.h"

/*
 * Decodes and validates a receipt body (map or array form). On success r is
 * filled, its strings borrow o's bytes, and r->extra is owned (free with
 * receipt_clear). On failure r holds nothing to free, the return is
 * PROTO_EINVALID or PROTO_EUNSUPPORTED_SCHEMA (PROTO_ENOMEM when extra could
 * not be allocated), and err names the path relative to the receipt
 * ("counters.decode_steps"; "" for the body itself).
 */
int receipt_decode(const msgpack_object *o, struct receipt *r,
                   struct proto_err *err);

/*
 * The fast path of receipt_decode() for what producers send, straight
 * from the bytes buf[0..len) (one object from its start), without
 * msgpack-c's unpacking. It takes the map form when every key is a str
 * naming a field of its schema, schema_version first, each once, and the
 * array (compact) form when it has its schema's fields, the nested
 * structs as arrays; values of the plainest types (unsigned ints in their
 * unsigned forms, strs). Then r is what receipt_decode() gives for the same
 * bytes (strings borrow buf, r->extra is NULL) and the return is the object's
 * size in bytes. Anything else, valid or not, returns 0 with r zeroed and
 * nothing said: the caller decodes it with receipt_decode(), which gives
 * the answer and the error. Bounded by len; nothing is allocated.
 */
size_t receipt_decode_fast(const char *buf, size_t len, struct receipt *r);

/*
 * Encodes r in map form, as rmp-serde's to_vec_named would for its schema
 * (byte for byte: declaration order, smallest integer and string forms;
 * schema 1 without tuning_profile unless it holds a value), with the extra
 * keys appended to the map they came from. Decoding the result gives r
 * again, extra included. r is borrowed. Returns 0 or -1 when the packer's
 * buffer cannot grow.
 */
int receipt_encode(const struct receipt *r, msgpack_packer *pk);

/*
 * Encodes r in the array (compact) form, as rmp-serde's to_vec would for
 * its schema, when that form holds all of r; else (unknown keys kept in
 * extra, or a schema-1 receipt that carried a tuning_profile) in the map
 * form, as receipt_encode. Decoding the result gives r again. About a
 * quarter of the map form's bytes: what a node relays (docs/fleet.md).
 * Returns 0 or -1 when the packer's buffer cannot grow.
 */
int receipt_encode_compact(const struct receipt *r, msgpack_packer *pk);

/*
 * Options of receipt_encode_flags(). RECEIPT_ENCODE_TUNING writes
 * tuning_profile for schema 1 too ("" when absent), as query rows show it;
 * RECEIPT_ENCODE_NO_EXTRA leaves the unknown keys out.
 */
#define RECEIPT_ENCODE_TUNING   0x1
#define RECEIPT_ENCODE_NO_EXTRA 0x2

/* The deepest an unknown key's value may nest (receipt_decode refuses it
 * as invalid past this): MPCHECK_MAX_DEPTH less the five levels a query
 * reply puts around it. */
#define RECEIPT_EXTRA_MAX_DEPTH 27

/* receipt_encode() with options; flags 0 is receipt_encode(). */
int receipt_encode_flags(const struct receipt *r, msgpack_packer *pk,
                         unsigned flags);

#endif
