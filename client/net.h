/*
 * net.h: receiptctl's connection to the daemon: a blocking stream socket
 * (Unix or TCP), request frames built with envelope.h and frame.h, and
 * replies read through a frame_reader and decoded with
 * envelope_reply_decode(). Requests may be pipelined: send several, then
 * read their replies, which come back in request order (PROTOCOL section 1).
 * Single-threaded.
 */
#ifndef RECEIPTD_CLIENT_NET_H
#define RECEIPTD_CLIENT_NET_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "envelope.h"
#include "frame.h"

#define NET_ERR_MAX 512

/* Failures of the transport, as opposed to a daemon's error reply. */
enum net_code {
    NET_OK = 0,
    NET_ECONNECT = -1, /* could not connect */
    NET_EIO = -2,      /* the connection failed or timed out */
    NET_EPROTO = -3,   /* the peer's bytes are not a reply envelope */
    NET_ENOMEM = -4,
};

#define NET_READ_CHUNK 65536

struct tls_conn;
struct tls_ctx;

/* TLS for a TCP connection (tls.h); every string borrowed. */
struct net_tls {
    const char *ca_file; /* verify the server against it; NULL: the system's
                            CAs */
    const char *cert;    /* offered to a server that asks (mutual TLS) */
    const char *key;
};

struct net_conn {
    int fd;
    struct tls_conn *tls; /* owned; NULL for plain text */
    int timeout_ms;       /* for each wait on the socket; <= 0 waits forever */
    struct frame_reader fr;
    char *rbuf; /* owned; NET_READ_CHUNK bytes */
    size_t rlen;
    size_t roff;
    uint64_t next_id;
    char peer[256]; /* for messages: the socket path or HOST:PORT */
    int tcp;        /* connected over TCP */
    int answered;   /* a reply has arrived */
    /* From the hello reply; defaults until a hello was answered. */
    uint32_t max_frame;
    uint32_t max_batch;
    char server[64];
    /* When set (after connecting): a wait ends with NET_EIO "interrupted"
     * once *stop is non-zero (receipts --follow's Ctrl-C and SIGTERM).
     * stop_fd is then the read end of a pipe that the signal handler
     * writes after setting *stop, so that a signal that comes between the
     * check of *stop and poll() still ends the wait (-1: none). */
    volatile sig_atomic_t *stop;
    int stop_fd;
    /* When set: a wait also ends (NET_EIO, stdout_closed set) once
     * stdout's reader has gone (a pipe into `head`). */
    int watch_stdout;
    int stdout_closed;
};

/* A decoded reply. It owns its frame; r's pointers borrow it. */
struct net_reply {
    char *frame;
    uint32_t frame_len;
    msgpack_unpacked up;
    struct envelope_reply r;
};

/*
 * Connects to the Unix socket unix_path, or, when tcp is not NULL, to
 * "HOST:PORT" ("[::1]:7000" for IPv6). Both strings are borrowed. Returns 0,
 * or NET_ECONNECT / NET_ENOMEM with one line in err. c needs net_close()
 * after success only.
 */
int net_connect(struct net_conn *c, const char *unix_path, const char *tcp,
                int timeout_ms, char *err, size_t err_len);

/*
 * Takes a connected stream socket fd (closed by net_close(), or here on
 * failure) as a connection; peer (copied) names it in messages. Returns 0
 * or NET_ENOMEM. net_connect() ends here; tests use it with a socketpair.
 */
int net_adopt(struct net_conn *c, int fd, const char *peer, int timeout_ms,
              char *err, size_t err_len);

/*
 * Starts TLS on c, connected to "HOST:PORT": the server's certificate must
 * verify against ctx's CAs and name HOST (its name, or its numeric
 * address); the handshake is done when this returns. ctx is borrowed (the
 * connection takes a reference). Returns 0, or NET_ECONNECT with err
 * saying what failed in the words of tls_conn_error(): an unknown CA, a
 * name mismatch, an expired certificate, a server that did not answer
 * with TLS. For the future relay as for receiptctl.
 */
int net_start_tls(struct net_conn *c, struct tls_ctx *ctx, const char *hostport,
                  char *err, size_t err_len);

/* A client TLS context from t: tls_ctx_client_new() with its files.
 * Returns 0 with *out, or NET_ECONNECT with the file and reason in err. */
int net_tls_ctx(const struct net_tls *t, struct tls_ctx **out, char *err,
                size_t err_len);

/* Closes the socket and frees the buffers. c may be zeroed or closed. */
void net_close(struct net_conn *c);

/*
 * Starts a request frame in sb (initialised by the caller): the header
 * placeholder and the envelope with a fresh id (returned in *id) and the
 * "body" key when has_body; the caller then packs exactly one body object
 * with pk (which writes to sb) and calls net_frame_finish(). Returns the
 * frame's start offset, or (size_t)-1 when sb could not grow.
 */
size_t net_frame_begin(struct net_conn *c, msgpack_sbuffer *sb,
                       msgpack_packer *pk, int op, int has_body, uint64_t *id);

/* The same with a "seq" in the envelope when has_seq, for exactly-once
 * writes under the connection's hello source. */
size_t net_frame_begin_seq(struct net_conn *c, msgpack_sbuffer *sb,
                           msgpack_packer *pk, int op, int has_seq,
                           uint64_t seq, int has_body, uint64_t *id);

/* Patches the frame's length. Returns 0, or -1 when the frame is larger
 * than max_frame (the daemon would refuse it). */
int net_frame_finish(struct net_conn *c, msgpack_sbuffer *sb, size_t start);

/* Writes buf[0..len) whole (borrowed). Returns 0 or NET_EIO with err set. */
int net_send(struct net_conn *c, const char *buf, size_t len, char *err,
             size_t err_len);

/*
 * Reads the next reply frame, checks it, unpacks it and decodes its
 * envelope into rep (initialised here; release with net_reply_free() after
 * success and failure alike). Returns 0 (rep->r.ok tells whether the daemon
 * answered with an error), NET_EIO, NET_EPROTO or NET_ENOMEM with err set.
 */
int net_recv(struct net_conn *c, struct net_reply *rep, char *err,
             size_t err_len);

void net_reply_free(struct net_reply *rep);

/*
 * Sends the frame in sb and reads its reply; fails with NET_EPROTO when the
 * reply's id is not want_id. The same return values as net_recv().
 */
int net_call(struct net_conn *c, const msgpack_sbuffer *sb, uint64_t want_id,
             struct net_reply *rep, char *err, size_t err_len);

/*
 * Says hello (protocol 1; source and token are borrowed and may be NULL)
 * and records the server's max_frame, max_batch and name in c. Returns 0,
 * a transport error, or 1 when the daemon answered with an error (then rep
 * holds it; release rep in every case).
 */
int net_hello(struct net_conn *c, const char *source, const char *token,
              struct net_reply *rep, char *err, size_t err_len);

#endif
