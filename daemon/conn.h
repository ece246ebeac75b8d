/*
 * conn.h: one client connection: the frame reader, the deadline and idle
 * timers, and the FIFO of reply slots that keeps replies in request order.
 *
 * Loop thread only. A slot is taken for each frame, in arrival order; it
 * completes later (at once for ping, after the COMMIT for writes, after the
 * query thread for queries), and replies are written strictly from the
 * head of the FIFO. The connection's memory outlives its handles until its
 * last slot completes, so a job finishing after the peer left is harmless.
 */
#ifndef RECEIPTD_DAEMON_CONN_H
#define RECEIPTD_DAEMON_CONN_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "frame.h"
#include "server.h"

struct tls_conn;
struct follower;

#define CONN_SOURCE_MAX 256

/* Requests of one connection that may wait for their replies at once: a
 * client pipelining beyond this stops being read until half are answered,
 * so neither slots nor queued queries grow without bound. Queries are
 * capped lower because one reply may hold up to 10,000 rows (several MB):
 * one at a time, so that what a connection owes (its unsent replies, the
 * account of max_unsent_bytes) is never more than that and the one reply
 * being computed (issue 17: four in flight let a reader that never reads
 * hold 24-45 MB whatever max_unsent was). */
#define CONN_MAX_PENDING 4096
#define CONN_MAX_QUERIES 1

/* The largest frame a TCP peer may send before hello authenticates it: a
 * hello with the longest token and source fits, and nothing larger is
 * read (or decoded) for a peer nobody knows yet. */
#define CONN_PREAUTH_FRAME_MAX 4096

enum conn_kind { CONN_UNIX, CONN_TCP };

struct conn_slot {
    struct conn_slot *next;
    struct conn *c;
    int done;
    /* Set (loop thread) when the connection closes before the slot is
     * done; a query thread that sees it skips the work, since nobody will
     * read the reply. */
    _Atomic int abandoned;
    char *reply; /* owned once done; NULL for no reply */
    size_t len;
};

struct conn {
    union {
        uv_handle_t handle;
        uv_stream_t stream;
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } u;
    uv_timer_t timer;
    struct server *srv;
    struct conn *prev, *next; /* the server's list */
    struct conn *corked_next; /* the server's corked list */
    int corked;               /* on that list */
    int kind;
    struct frame_reader fr;

    /* enum access_level: set from the peer's credentials on a Unix
     * socket, and by a valid token in hello on TCP (ACCESS_NONE until
     * then: only hello is answered, within hello_timeout_ms). */
    int level;
    uint64_t accepted_ms; /* uv_now() at accept */
    uint64_t id;          /* connections_total when it started, for logs */
    int unauth;           /* counted in srv->n_unauth (TCP, no token yet) */
    int spoke;            /* a whole frame has arrived */
    int wipe_frame;       /* the frame just dispatched was a hello: feed()
                             zeroes its bytes in the read buffer */
    int graced;           /* a due deadline waited for bytes already sent */

    int reading;      /* uv_read_start is in effect */
    int full;         /* unsent replies passed max_unsent_bytes */
    int want_close;   /* close once every slot is written */
    int closing;      /* uv_close called */
    int handles_open; /* handles whose close callback has not run */
    uint64_t frame_started_ms;

    struct conn_slot *head, *tail;
    size_t n_slots;     /* slots not yet freed, done or not */
    unsigned n_queries; /* queries running for this connection */

    /* Bytes read but not yet dispatched because a limit was reached (at
     * most one read buffer); reading stays stopped while they wait. */
    char *stash;
    size_t stash_len, stash_off;
    int in_dispatch;   /* feeding frames: no re-entry from callbacks */
    uint64_t unsent;   /* reply bytes ready or being written */
    unsigned n_writes; /* uv_write requests in flight */
    uint64_t wrote_ms; /* uv_now() when a write last completed or began */

    /* The SHA-256 of the token that authenticated this TCP connection
     * (has_token), so that a reload which removes it closes the
     * connection (server_tokens_reloaded). */
    unsigned char token_sha[32];
    int has_token;

    /* TLS (tls.h) on a TCP listener with a certificate, NULL otherwise:
     * the peer's bytes go through it to the frame reader, replies through
     * it to the socket. Owned; freed with the connection. */
    struct tls_conn *tls;
    int tls_up;  /* its handshake completed */
    int tls_bye; /* its close_notify was queued */

    /* Set by hello. A token is checked there and not kept. */
    char source[CONN_SOURCE_MAX + 1];
    size_t source_len;
    int relays; /* hello said relay: true, with a token (dispatch_relay.c) */
    /* The follow this connection started (follow.c), NULL when none. */
    struct follower *follow;
};

/*
 * Allocates a connection with its stream and timer initialised on the
 * server's loop, ready for uv_accept(). Returns NULL on failure. The caller
 * must end with conn_start() or conn_close().
 */
struct conn *conn_new(struct server *srv, int kind);

/* Starts reading and the idle timer; registers with the server. */
void conn_start(struct conn *c);

/*
 * A TCP peer's token was valid: it gets level, leaves the budget of
 * unauthenticated connections, and may send frames up to max_frame.
 */
void conn_authenticated(struct conn *c, int level);

/* Closes at once (replies not yet written are dropped). Idempotent. */
void conn_close(struct conn *c);

/* Stops reading, drops a partial frame, and closes once every slot has been
 * written. */
void conn_drain(struct conn *c);

/* Starts or stops reading after the server's backpressure switch moved. */
void conn_update_reading(struct conn *c);

/*
 * The read path over a buffer: what libuv's read callback does with nread
 * bytes of buf (borrowed, only during the call; UV_EOF at the end of the
 * stream, another negative code on a read error, when buf is not read).
 * The read callback is this; the connection fuzzer calls it directly.
 *
 * Call it only while c->reading is set, the one condition under which
 * libuv calls the read callback: when it is clear, bytes of an earlier
 * read may wait in the stash, and bytes fed now would overtake them or
 * pass a limit. The call may close c (a read error, no memory for the
 * stash), but never frees it: that happens in a close callback, when the
 * loop runs. buf is borrowed and written to: the bytes of a hello (and of
 * a connection's first frame) are zeroed once the frame reader has them.
 */
void conn_read(struct conn *c, char *buf, ssize_t nread);

/* A new slot at the tail of the FIFO, or NULL when out of memory. */
struct conn_slot *conn_slot_new(struct conn *c);

/*
 * Completes a slot with reply (taken; malloc'd frame bytes, or NULL for no
 * reply) and writes whatever is ready at the head, at once or, while the
 * server is corked (srv->corked), at conn_flush_corked(). Safe after the
 * connection closed: the reply is dropped, and the connection is freed
 * when its last slot completes.
 */
void conn_slot_complete(struct conn_slot *s, char *reply, size_t len);

/*
 * conn_slot_complete() delay_ms from now (at once for 0): the reply waits
 * in a timer of its own, and the connection, which cannot be freed while
 * the slot is open, waits with it. For a refused hello, so that guessing
 * tokens costs the guesser time. reply is taken. Returns 0, or -1 when no
 * timer could be made (the slot is then completed at once).
 */
int conn_slot_complete_after(struct conn_slot *s, char *reply, size_t len,
                             uint64_t delay_ms);

/* Writes what the corked connections of srv have ready (see above). */
void conn_flush_corked(struct server *srv);

/* Asks to close once everything before now is written; stops reading. */
void conn_close_after_replies(struct conn *c);

#endif
