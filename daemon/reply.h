/*
 * reply.h: every reply frame the daemon sends is built here (PROTOCOL
 * section 2): the frame header, the envelope {ok, id, ...} or {ok: false,
 * error}, and the key-value helpers the op handlers pack their results
 * with. Loop and query threads alike; no state.
 */
#ifndef RECEIPTD_DAEMON_REPLY_H
#define RECEIPTD_DAEMON_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "error.h"
#include "mpobj.h"

/* A reply frame under construction: pack the rest of the envelope with
 * pk, then take the frame with reply_finish(). */
struct reply {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    size_t start;
};

/* A reply to a write is a few dozen bytes: its buffer can start at this
 * size instead of msgpack-c's 8 KiB, which cost a fresh page or two per
 * reply. */
#define REPLY_SMALL 128

/*
 * Starts a reply with its frame header reserved and the envelope of
 * success packed up to its "result" key (envelope_reply_ok): the caller
 * packs exactly one object next. initial is the buffer's first size (0:
 * msgpack-c's own). Returns 0, or -1 when out of memory (then reply_finish(r,
 * 1, ...) cleans up).
 */
int reply_begin_ok(struct reply *r, int has_id, uint64_t id, size_t initial);

/* The whole frame (malloc'd; *len set) once the envelope is complete, or
 * NULL when failed (or out of memory); r is consumed either way. */
char *reply_finish(struct reply *r, int failed, size_t *len);

/* A whole error reply frame (malloc'd; *len set), or NULL when out of
 * memory. */
char *reply_error(int has_id, uint64_t id, const struct proto_err *err,
                  size_t *len);

/* The result of a query kind that lists rows: {"rows": [the n rows packed
 * one after another in rows], "truncated": truncated}. Nonzero on
 * failure. */
int reply_rows(msgpack_packer *pk, const msgpack_sbuffer *rows, uint32_t n,
               int truncated);

/* The same with one more key, whose value is the object packed in val
 * ("total" of fallbacks and grouped coverage). */
int reply_rows_and(msgpack_packer *pk, const msgpack_sbuffer *rows, uint32_t n,
                   int truncated, const char *key, const msgpack_sbuffer *val);

/* Packs one key and its value; nonzero on failure. */
int reply_kv_uint(msgpack_packer *pk, const char *k, uint64_t v);
int reply_kv_cstr(msgpack_packer *pk, const char *k, const char *v);
int reply_kv_str(msgpack_packer *pk, const char *k, struct proto_str v);

#endif
