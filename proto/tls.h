/*
 * tls.h: TLS over memory buffers (OpenSSL 3), for any event loop or a
 * blocking socket: the caller moves the peer's bytes in (tls_conn_feed)
 * and the bytes to send out (tls_conn_take), and reads and writes
 * plaintext in between. Nothing here touches a socket, so the daemon's
 * libuv loop, receiptctl's blocking connection and a future relay share
 * it. Its own library (receipttls): the wire model does not need OpenSSL.
 *
 * A struct tls_ctx is the settings of many connections (certificate, key,
 * CAs), reference counted: each connection holds one reference, so a
 * daemon that loads a new certificate on SIGHUP hands the new context to
 * new connections while established ones keep theirs, and the old one is
 * freed with its last connection.
 *
 * Bounds: the peer's bytes are held only as whole TLS records are
 * assembled (OpenSSL refuses a record above 16 KiB plus its overhead
 * before buffering it); tls_conn_feed() refuses more than
 * TLS_CONN_INBUF_MAX bytes waiting, so a caller that feeds without reading
 * cannot make it grow. Single-threaded per connection; a context may be
 * shared by connections on different threads.
 */
#ifndef RECEIPTD_PROTO_TLS_H
#define RECEIPTD_PROTO_TLS_H

#include <stddef.h>

#define TLS_ERR_MAX 512

/* Ciphertext that may wait in a connection before it is read. */
#define TLS_CONN_INBUF_MAX (256u << 10)

/* The longest certificate chain a server accepts from a client. */
#define TLS_CERT_LIST_MAX (32u << 10)

enum tls_code {
    TLS_OK = 0,
    TLS_EWANT = -1,   /* needs more bytes from the peer */
    TLS_ECLOSED = -2, /* the peer ended the session (close_notify) */
    TLS_EFAIL = -3,   /* the handshake or a record failed: see the text */
    TLS_ENOMEM = -4,
    TLS_EFULL = -5, /* tls_conn_feed(): TLS_CONN_INBUF_MAX reached */
};

struct tls_ctx;
struct tls_conn;

/*
 * A server context: the certificate chain (PEM, the leaf first) and its
 * key, both paths borrowed; with client_ca (may be NULL) client
 * certificates are asked for and verified against it, and refused when
 * missing if require_client_cert. TLS 1.2 and 1.3 only. Returns 0 with
 * *out (one reference), or TLS_EFAIL / TLS_ENOMEM with a line in err
 * naming the file and OpenSSL's reason.
 */
int tls_ctx_server_new(const char *cert, const char *key, const char *client_ca,
                       int require_client_cert, struct tls_ctx **out, char *err,
                       size_t err_len);

/*
 * A client context: the server is verified against ca_file (PEM, borrowed)
 * or, when NULL, the system's store; cert and key (both or neither, may be
 * NULL) are offered to a server that asks. Returns as above.
 */
int tls_ctx_client_new(const char *ca_file, const char *cert, const char *key,
                       struct tls_ctx **out, char *err, size_t err_len);

/* Takes a reference; returns ctx. */
struct tls_ctx *tls_ctx_ref(struct tls_ctx *ctx);

/* Drops a reference; the last frees it. NULL is a no-op. */
void tls_ctx_free(struct tls_ctx *ctx);

/*
 * A connection over ctx (a reference taken). On a client context, peer is
 * the host name or numeric address the server's certificate must name
 * (borrowed; copied), and the handshake's first bytes are ready to take at
 * once; on a server context peer is ignored. NULL when out of memory.
 */
struct tls_conn *tls_conn_new(struct tls_ctx *ctx, const char *peer);

/* Frees the connection and drops its context reference. NULL is a
 * no-op. */
void tls_conn_free(struct tls_conn *t);

/* Hands the peer's bytes (borrowed) to the connection. Returns 0,
 * TLS_EFULL when more than TLS_CONN_INBUF_MAX would wait, or
 * TLS_ENOMEM. */
int tls_conn_feed(struct tls_conn *t, const void *buf, size_t len);

/*
 * Moves the handshake on and reads plaintext into buf (up to cap bytes).
 * Returns 0 with *got > 0; TLS_EWANT when more of the peer's bytes are
 * needed; TLS_ECLOSED at the peer's close_notify; TLS_EFAIL with the
 * reason in tls_conn_error(). Take the bytes to send after each call: the
 * handshake writes some.
 */
int tls_conn_read(struct tls_conn *t, void *buf, size_t cap, size_t *got);

/* Drives only the handshake: 0 once done, TLS_EWANT, TLS_EFAIL. */
int tls_conn_handshake(struct tls_conn *t);

/* 1 once the handshake has completed. */
int tls_conn_established(const struct tls_conn *t);

/* Encrypts buf[0..len) (borrowed) whole into the bytes to send. Returns
 * 0, TLS_EFAIL (also before the handshake has completed) or
 * TLS_ENOMEM. */
int tls_conn_write(struct tls_conn *t, const void *buf, size_t len);

/* Queues a close_notify to send. */
void tls_conn_shutdown(struct tls_conn *t);

/* Bytes waiting to be sent to the peer. */
size_t tls_conn_pending(const struct tls_conn *t);

/* Moves up to cap waiting bytes into buf; returns how many. */
size_t tls_conn_take(struct tls_conn *t, void *buf, size_t cap);

/* Whether ciphertext fed in waits to be read (buffered records). */
int tls_conn_has_input(const struct tls_conn *t);

/* Why the last TLS_EFAIL happened, one line; "" before. The client side
 * names what an operator fixes: an unknown CA, a name mismatch, an
 * expired certificate, a server that does not speak TLS. */
const char *tls_conn_error(const struct tls_conn *t);

/*
 * The subject common name of the peer's certificate, when the peer sent
 * one and it verified against the context's CAs: 0 with the name in buf
 * (len bytes, NUL-terminated), -1 otherwise.
 */
int tls_conn_peer_name(const struct tls_conn *t, char *buf, size_t len);

/* The negotiated protocol version ("TLSv1.3"), "" before the
 * handshake. */
const char *tls_conn_version(const struct tls_conn *t);

#endif
