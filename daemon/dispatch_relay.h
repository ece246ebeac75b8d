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

#endif
