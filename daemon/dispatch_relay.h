/*
 * dispatch_relay.h: the `relay` op, a center's side of the fleet's relay
 * (docs/fleet.md, docs/protocol.md "Relay"). Loop thread.
 */
#ifndef RECEIPTD_DAEMON_DISPATCH_RELAY_H
#define RECEIPTD_DAEMON_DISPATCH_RELAY_H

#include "dispatch.h"

/* The most records a `relay` batch may hold, whatever max_batch says. */
#define DISPATCH_RELAY_MAX_RECORDS 10000

/*
 * Handles a `relay` request: only on a connection whose hello said
 * `relay: true` with a valid token (rq->relays); the origin is that
 * hello's source. Validates the batch whole (a bad record refuses it,
 * naming records[i]), then queues one writer job that stores the records
 * above the origin's mark and raises the mark in the same transaction;
 * the reply {committed_id, stored} leaves after COMMIT.
 */
void dispatch_relay(const struct request *rq);

/*
 * The fast path of dispatch_relay for what a node's relay sends most: a
 * batch of the receipts stream whose every payload receipt_decode_fast
 * takes, read straight from the frame's bytes (envelope_peek gave env's
 * body_off and body_len). Returns 1 when it queued the job (the frame is
 * the job's), 0 with nothing taken and nothing said for every other body,
 * which dispatch_relay answers.
 */
int dispatch_relay_fast(const struct request *rq);

#endif
