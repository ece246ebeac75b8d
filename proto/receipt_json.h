/*
 * receipt_json.h: receipts in the serde_json form (json-c), for importing
 * files: a strict parse of the text and the decoder over its tree. Part of
 * the receiptproto_json library, which the client and the tests link and
 * the daemon does not.
 */
#ifndef RECEIPTD_PROTO_RECEIPT_JSON_H
#define RECEIPTD_PROTO_RECEIPT_JSON_H

#include <stddef.h>

#include "error.h"
#include "receipt.h"

struct json_object;

/*
 * receipt_decode() from the serde_json form (a JSON object), with the same
 * rules, codes, paths and messages. Strings borrow o's storage: keep o
 * alive as long as r; r->extra is owned as receipt_decode() says (JSON values
 * converted to msgpack: integers, floats, strings, nil, booleans, arrays,
 * maps). Integers up to 2^64-1 are read exactly; parse the text with
 * receipt_json_parse() so that larger ones are refused rather than saturated by
 * json-c.
 */
int receipt_decode_json(struct json_object *o, struct receipt *r,
                        struct proto_err *err);

/*
 * Parses JSON text (text[0..len), one value with optional whitespace
 * around it, as serde_json writes it) for receipt_decode_json. Unlike a
 * bare json_tokener_parse, it refuses what json-c would change silently: an
 * integer beyond the 64-bit range (json-c saturates it) and a key repeated
 * in one object (json-c keeps the last), naming the path ("[2].counters.
 * decode_steps"; keys as written, escapes kept). Strings must be valid
 * UTF-8. On success *out is a new reference the caller owns
 * (json_object_put); on failure *out is NULL and the return is
 * PROTO_EMALFORMED (not one JSON value), PROTO_EINVALID (the rules above),
 * PROTO_ETOO_LARGE (len >= INT_MAX) or PROTO_ENOMEM. text is borrowed.
 */
int receipt_json_parse(const char *text, size_t len, struct json_object **out,
                       struct proto_err *err);

#endif
