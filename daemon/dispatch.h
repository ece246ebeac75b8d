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
struct writer_job;

/*
 * A row of the op table: the handler of one op. Whether the op writes is
 * proto/'s table (envelope_op_writes()), which the access check reads too;
 * a row adds only what the daemon knows.
 */
struct dispatch_op {
    int op;   /* enum proto_op; the row's index in the table */
    int open; /* answered whatever the peer's access level (hello) */
    /*
     * Handles a parsed request on the loop thread: frame (len bytes,
     * malloc'd) is taken, freed now or kept by the job or query made from
     * it; env is borrowed for the call; slot is completed exactly once,
     * now or later.
     */
    void (*handle)(struct conn *c, struct conn_slot *slot,
                   const struct envelope *env, char *frame, uint32_t len);
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

#endif
