/*
 * dispatch.h: one handler per op family (hello, ping, receipt/receipts,
 * query; plan, retention and readback in dispatch_plan.h).
 * Loop thread only.
 */
#ifndef RECEIPTD_DAEMON_DISPATCH_H
#define RECEIPTD_DAEMON_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "error.h"

struct conn;
struct writer_job;

/*
 * Handles one request frame of c (frame taken; malloc'd, len bytes). Takes
 * a reply slot at once, so replies keep request order whatever completes
 * first.
 */
void dispatch_frame(struct conn *c, char *frame, uint32_t len);

/* Builds the reply for a finished write job and completes its slot; the
 * job is taken. */
void dispatch_write_done(struct writer_job *job);

/* A whole error reply frame (malloc'd; *len set), or NULL when out of
 * memory. */
char *dispatch_error_reply(int has_id, uint64_t id, const struct proto_err *err,
                           size_t *len);

/*
 * Packs the first outcome of a write (blob: the stored result map, len
 * bytes) with "duplicate": true added, as the reply to a resent seq. A
 * write recorded without a result (blob NULL, or not a map) packs
 * {"duplicate": true}. Returns 0, or -1 when out of memory.
 */
int dispatch_pack_dup_outcome(msgpack_packer *pk, const char *blob, size_t len);

#endif
