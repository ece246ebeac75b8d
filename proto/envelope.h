/*
 * envelope.h: request and reply envelopes of PROTOCOL section 2, for both
 * sides of the wire.
 *
 * A request is a map {"op", "id", "seq"?, "replay_of"?, "body"?}; a reply
 * is {"id", "ok": true, "result"} or {"id", "ok": false, "error": {"code",
 * "message", "path"}}. Unknown envelope keys are ignored.
 */
#ifndef RECEIPTD_PROTO_ENVELOPE_H
#define RECEIPTD_PROTO_ENVELOPE_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "error.h"
#include "mpobj.h"
#include "op.h"

struct envelope {
    int op;     /* enum proto_op */
    int has_id; /* 0 when id was missing or unusable (reply id is nil) */
    uint64_t id;
    int has_seq;
    uint64_t seq;
    /* The quarantine row whose payload this request resends (`receiptctl
     * quarantine replay`); a replay_of that is not an unsigned integer is
     * ignored, as the key was by daemons before it. */
    int has_replay_of;
    uint64_t replay_of;
    const msgpack_object *body; /* borrowed from the unpacked frame; NULL
                                   when absent */
    /* Where body's msgpack encoding is in the frame, byte for byte:
     * frame[body_off, body_off + body_len). Both 0 when body is NULL. */
    size_t body_off;
    size_t body_len;
};

/*
 * The op table (envelope.c) is the one list of the ops and of which of
 * them write: the daemon's dispatch table and its access check both read
 * it through these functions.
 */

/* The wire name of an op ("receipts"), or NULL outside the table. */
const char *envelope_op_name(int op);

/* The op for a wire name, or -1. */
int envelope_op_from_name(const char *name, size_t len);

/* True for the ops that write to the store (acknowledged after their
 * commit; a peer that may only read is refused them); 0 outside the
 * table. */
int envelope_op_writes(int op);

/*
 * Parses a whole request frame: the bounded check of mpcheck.h, unpacking
 * into up (initialised by the caller with msgpack_unpacked_init and
 * destroyed by it afterwards), then the envelope. env->body and every string
 * read from it borrow both frame and up; env->body_off and body_len locate
 * the body's bytes in frame. A key is the string it names whether sent as a
 * str or as a bin ("body" as a bin is the body), the same rule for every
 * envelope key. Returns 0, PROTO_EMALFORMED (not one object, not a map, bad
 * op or id types, a duplicate key; has_id tells whether the id could be
 * read), PROTO_EUNKNOWN_OP, or PROTO_EINVALID (a bad seq), with err set.
 */
int envelope_parse(const char *frame, size_t len, msgpack_unpacked *up,
                   struct envelope *env, struct proto_err *err);

/*
 * The fast path of envelope_parse() for what producers send: a map of str
 * keys "op" (a str naming an op), "id", "seq" and "replay_of" (unsigned
 * ints, seq also nil), and "body" last, each once, read from the bytes
 * without unpacking.
 * Returns 1 with env filled (env->body NULL: the body's bytes are
 * frame[body_off, body_off + body_len), to the end of the frame, which
 * the caller decodes or hands back) or 0 for any other frame, valid or
 * not, with nothing said: envelope_parse() answers those. Bounded by len;
 * nothing is allocated.
 */
int envelope_peek(const char *frame, size_t len, struct envelope *env);

/*
 * Reply encoding. envelope_reply_ok() packs the map header, the id and
 * "ok": true and the "result" key: the caller packs exactly one object next.
 * envelope_reply_error() packs a whole error reply from err.
 * Both return 0 or -1 when the packer's buffer cannot grow.
 */
int envelope_reply_ok(msgpack_packer *pk, int has_id, uint64_t id);
int envelope_reply_error(msgpack_packer *pk, int has_id, uint64_t id,
                         const struct proto_err *err);

/*
 * Request encoding, for clients and tests: packs the map header, "op",
 * "id", "seq" when has_seq, and the "body" key when has_body; the caller
 * then packs the body object. Returns 0 or -1.
 */
int envelope_request(msgpack_packer *pk, int op, uint64_t id, int has_seq,
                     uint64_t seq, int has_body);

/* envelope_request() for a replay of quarantine row replay_of: "replay_of"
 * comes before the "body" key, which stays last. Returns 0 or -1. */
int envelope_request_replay(msgpack_packer *pk, int op, uint64_t id,
                            uint64_t replay_of, int has_body);

/* A decoded reply, for clients and tests. */
struct envelope_reply {
    int has_id;
    uint64_t id;
    int ok;
    const msgpack_object *result; /* when ok; borrowed */
    struct proto_err err;         /* when !ok: code, path, message */
    struct proto_str code_name;   /* the wire code as sent */
};

/*
 * Decodes a reply object (already unpacked). Returns 0 or PROTO_EMALFORMED
 * when it is not a reply envelope.
 */
int envelope_reply_decode(const msgpack_object *o, struct envelope_reply *r,
                          struct proto_err *err);

/* Packs a NUL-terminated string. Returns 0 or -1. */
int envelope_pack_cstr(msgpack_packer *pk, const char *s);
/* Bytes already in msgpack form (a constant key, say "\xa2ok"), written
 * as they are: one write instead of a header and a body. */
int envelope_pack_raw(msgpack_packer *pk, const char *bytes, size_t n);

#endif
