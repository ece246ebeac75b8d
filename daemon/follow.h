/*
 * follow.h: `receipts` queries that stay open (`follow: true`,
 * docs/protocol.md "Following new receipts"). The daemon pushes each new
 * matching receipt to the follower, read through the query pool and the
 * store interface after the writer's commits; it never buffers rows for a
 * follower beyond its connection's unsent replies, and the writer never
 * waits for one. Loop thread only.
 */
#ifndef RECEIPTD_DAEMON_FOLLOW_H
#define RECEIPTD_DAEMON_FOLLOW_H

#include <stdint.h>

#include "error.h"

struct server;
struct conn;
struct conn_slot;
struct query_args;

/*
 * Starts a follow for the request of slot (its reply is the follow's
 * first frame) with the filters of a, whose strings it takes (a's
 * pointers are cleared). Returns 0, or an error for the caller to reply
 * at once: too many followers (overloaded), a connection that already
 * follows (invalid at follow), no memory.
 */
int follow_start(struct server *srv, struct conn_slot *slot, int has_id,
                 uint64_t id, struct query_args *a, struct proto_err *err);

/* The writer delivered a group: followers look for new rows when it
 * stored receipts (server_delivery_cb). */
void follow_committed(struct server *srv);

/* The connection of a follower wrote a reply (conn.c): a follower that
 * catches up takes its next page when room was made. */
void follow_writable(struct conn *c);

/* The connection of a follower closes: the follow ends (conn.c). */
void follow_conn_closed(struct conn *c);

/* The daemon stops: every follower is told so and its connection closes
 * once what it was sent is written (server_drain). */
void follow_stop_all(struct server *srv);

#endif
