/*
 * dispatch.h: one handler per op family (hello, ping, receipt/receipts,
 * query; plan, retention and readback in dispatch_plan.h), found through
 * one op table. Loop thread only, except the table lookups, which are
 * pure.
 */
#ifndef RECEIPTD_DAEMON_DISPATCH_H
#define RECEIPTD_DAEMON_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "error.h"

struct conn;
struct conn_slot;
struct envelope;
struct server;
struct store_write;
struct writer_job;

/*
 * What a handler sees of one request: the frame (len bytes, malloc'd;
 * taken: freed now or kept by the job or query made from it) and its
 * envelope (borrowed for the call), the reply slot (completed exactly
 * once, now or later), the server's shared parts, and of the connection
 * only its source ("" before hello). hello, which sets the connection's
 * source and role and closes it after a refused token, alone gets the
 * connection itself; conn is NULL for every other op.
 */
struct request {
    struct server *srv;
    struct conn_slot *slot;
    const struct envelope *env;
    char *frame;
    uint32_t len;
    const char *source; /* NUL-terminated */
    size_t source_len;
    struct conn *conn;
    /* The receipts of a `receipt` or `receipts` frame that dispatch_frame's
     * fast path decoded from the bytes (env->body is NULL then), given to
     * the handler, which owns them; NULL otherwise. */
    struct receipt *decoded;
    size_t ndecoded;
    /* The connection's hello said relay: true with a token (`relay`). */
    int relays;
    /* Nonzero: frame came from pool_alloc() with this size (the frame
     * reader's whole_alloc), for a job to give it back there. free()
     * takes it too. */
    uint32_t frame_pooled;
};

/*
 * A row of the op table: the handler of one op. Whether the op writes is
 * proto/'s table (envelope_op_writes()), which the access check reads too;
 * a row adds only what the daemon knows.
 */
struct dispatch_op {
    int op;   /* enum proto_op; the row's index in the table */
    int open; /* answered whatever the peer's access level (hello) */
    /* Handles a parsed request on the loop thread (struct request). */
    void (*handle)(const struct request *rq);
};

/* The op table's row for op (enum proto_op), or NULL outside the enum.
 * Every op has a row. */
const struct dispatch_op *dispatch_op_find(int op);

/*
 * The access rule: whether a peer at level (enum access_level) may send op.
 * An open op, always; any other, as access_op_allowed() says (a write
 * needs ACCESS_WRITE, the rest ACCESS_READ). Returns 0, PROTO_EUNAUTHORIZED
 * with err set, or PROTO_EUNKNOWN_OP for an op outside the table. Pure.
 */
int dispatch_op_allowed(int level, int op, struct proto_err *err);

/*
 * Handles one request frame of c (frame taken; malloc'd, len bytes). Takes
 * a reply slot at once, so replies keep request order whatever completes
 * first.
 */
void dispatch_frame(struct conn *c, char *frame, uint32_t len);

/*
 * Packs the first outcome of a write (blob: the stored result map, len
 * bytes) with "duplicate": true added, as the reply to a resent seq. A
 * write recorded without a result (blob NULL, or not a map) packs
 * {"duplicate": true}. Returns 0, or -1 when out of memory.
 */
int dispatch_pack_dup_outcome(msgpack_packer *pk, const char *blob, size_t len);

/*
 * A write with a seq: the payload's bytes raw[0..len) (borrowed from the
 * job's frame) are hashed for the seq's record and kept in quarantine if
 * the (source, seq) names another write (docs/protocol.md, "seq").
 * dispatch_conflict_error is the reply's error for such a job.
 */
void dispatch_payload(struct writer_job *job, const char *raw, size_t len,
                      const char *op);
void dispatch_conflict_error(const struct writer_job *job,
                             struct proto_err *err);

/*
 * A write that replays a quarantined payload (env->replay_of): w is told
 * the row and the body's bytes in frame (borrowed: the job keeps the
 * frame), so a refusal updates that row rather than adding another
 * (store.h). Nothing for a request without replay_of or without a body.
 */
void dispatch_replay_of(struct store_write *w, const struct envelope *env,
                        const char *frame);

#endif
