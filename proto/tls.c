/*
 * tls.c: TLS through two memory BIOs per connection (OpenSSL 3).
 *
 * The read BIO holds the peer's bytes until SSL_read() assembles records
 * from them, the write BIO what OpenSSL produced for the peer until the
 * caller takes it. Connections release their record buffers while idle
 * (SSL_MODE_RELEASE_BUFFERS), keep no session cache and send no TLS 1.3
 * tickets, so an idle connection holds little beyond the SSL object.
 * OpenSSL's error queue is per thread: every call that can fail clears it
 * first and copies its reason into the connection before returning.
 */
#include "tls.h"

#include <arpa/inet.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

struct tls_ctx {
    SSL_CTX *ssl;
    int server;
    atomic_int refs;
};

struct tls_conn {
    struct tls_ctx *ctx;
    SSL *ssl;
    BIO *in, *out; /* owned by ssl */
    int first;     /* the peer's first byte, -1 before it arrived */
    char peer[128];
    char err[TLS_ERR_MAX];
};

/* OpenSSL's latest reason, or what if its queue is empty. */
static void
last_reason(char *buf, size_t len, const char *what)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e != 0 ? ERR_reason_error_string(e) : NULL;

    snprintf(buf, len, "%s", r != NULL ? r : what);
}

static int
ctx_fail(SSL_CTX *ssl, char *err, size_t err_len, const char *what,
         const char *path)
{
    char reason[160];

    last_reason(reason, sizeof(reason), "unknown error");
    snprintf(err, err_len, "%s %s: %s", what, path, reason);
    SSL_CTX_free(ssl);
    return TLS_EFAIL;
}

static struct tls_ctx *
ctx_wrap(SSL_CTX *ssl, int server)
{
    struct tls_ctx *ctx = calloc(1, sizeof(*ctx));

    if (ctx == NULL) {
        SSL_CTX_free(ssl);
        return NULL;
    }
    ctx->ssl = ssl;
    ctx->server = server;
    atomic_init(&ctx->refs, 1);
    return ctx;
}

/* What both sides share: TLS 1.2 and 1.3, no renegotiation, buffers
 * released while idle, and a peer that closes without close_notify is an
 * end of stream (frames carry their own lengths, so truncation shows).
 * OpenSSL's own copies of decrypted bytes are wiped once read, as the
 * daemon wipes a hello's token. */
static void
ctx_common(SSL_CTX *ssl)
{
    SSL_CTX_set_min_proto_version(ssl, TLS1_2_VERSION);
    SSL_CTX_set_options(ssl,
                        SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF |
                            SSL_OP_NO_COMPRESSION | SSL_OP_CLEANSE_PLAINTEXT);
    SSL_CTX_set_mode(ssl, SSL_MODE_RELEASE_BUFFERS);
}

int
tls_ctx_server_new(const char *cert, const char *key, const char *client_ca,
                   int require_client_cert, struct tls_ctx **out, char *err,
                   size_t err_len)
{
    SSL_CTX *ssl;

    *out = NULL;
    ERR_clear_error();
    if ((ssl = SSL_CTX_new(TLS_server_method())) == NULL) {
        snprintf(err, err_len, "out of memory");
        return TLS_ENOMEM;
    }
    ctx_common(ssl);
    SSL_CTX_set_session_cache_mode(ssl, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_num_tickets(ssl, 0);
    /* A peer nobody knows yet may send a certificate chain: at most this
     * much of one is buffered (OpenSSL's default is 100 KiB). */
    SSL_CTX_set_max_cert_list(ssl, TLS_CERT_LIST_MAX);
    if (SSL_CTX_use_certificate_chain_file(ssl, cert) != 1)
        return ctx_fail(ssl, err, err_len, "cannot load the certificate", cert);
    if (SSL_CTX_use_PrivateKey_file(ssl, key, SSL_FILETYPE_PEM) != 1) {
        if (ERR_GET_REASON(ERR_peek_last_error()) ==
            X509_R_KEY_VALUES_MISMATCH) {
            snprintf(err, err_len,
                     "the key %s does not match the certificate %s", key, cert);
            SSL_CTX_free(ssl);
            return TLS_EFAIL;
        }
        return ctx_fail(ssl, err, err_len, "cannot load the key", key);
    }
    if (SSL_CTX_check_private_key(ssl) != 1)
        return ctx_fail(ssl, err, err_len,
                        "the key does not match the certificate", cert);
    if (client_ca != NULL) {
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(client_ca);

        if (names == NULL ||
            SSL_CTX_load_verify_locations(ssl, client_ca, NULL) != 1) {
            sk_X509_NAME_pop_free(names, X509_NAME_free);
            return ctx_fail(ssl, err, err_len, "cannot load the client CA",
                            client_ca);
        }
        SSL_CTX_set_client_CA_list(ssl, names);
        SSL_CTX_set_verify(
            ssl,
            SSL_VERIFY_PEER |
                (require_client_cert ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0),
            NULL);
    }
    if ((*out = ctx_wrap(ssl, 1)) == NULL) {
        snprintf(err, err_len, "out of memory");
        return TLS_ENOMEM;
    }
    return 0;
}

int
tls_ctx_client_new(const char *ca_file, const char *cert, const char *key,
                   struct tls_ctx **out, char *err, size_t err_len)
{
    SSL_CTX *ssl;

    *out = NULL;
    ERR_clear_error();
    if ((ssl = SSL_CTX_new(TLS_client_method())) == NULL) {
        snprintf(err, err_len, "out of memory");
        return TLS_ENOMEM;
    }
    ctx_common(ssl);
    SSL_CTX_set_verify(ssl, SSL_VERIFY_PEER, NULL);
    if (ca_file != NULL) {
        if (SSL_CTX_load_verify_locations(ssl, ca_file, NULL) != 1)
            return ctx_fail(ssl, err, err_len, "cannot load the CA", ca_file);
    } else if (SSL_CTX_set_default_verify_paths(ssl) != 1) {
        return ctx_fail(ssl, err, err_len, "cannot load", "the system CAs");
    }
    if (cert != NULL && SSL_CTX_use_certificate_chain_file(ssl, cert) != 1)
        return ctx_fail(ssl, err, err_len, "cannot load the certificate", cert);
    if (key != NULL &&
        SSL_CTX_use_PrivateKey_file(ssl, key, SSL_FILETYPE_PEM) != 1)
        return ctx_fail(ssl, err, err_len, "cannot load the key", key);
    if ((*out = ctx_wrap(ssl, 0)) == NULL) {
        snprintf(err, err_len, "out of memory");
        return TLS_ENOMEM;
    }
    return 0;
}

struct tls_ctx *
tls_ctx_ref(struct tls_ctx *ctx)
{
    atomic_fetch_add(&ctx->refs, 1);
    return ctx;
}

void
tls_ctx_free(struct tls_ctx *ctx)
{
    if (ctx == NULL || atomic_fetch_sub(&ctx->refs, 1) != 1)
        return;
    SSL_CTX_free(ctx->ssl);
    free(ctx);
}

static int
is_address(const char *s)
{
    unsigned char buf[16];

    return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

struct tls_conn *
tls_conn_new(struct tls_ctx *ctx, const char *peer)
{
    struct tls_conn *t = calloc(1, sizeof(*t));

    if (t == NULL)
        return NULL;
    t->first = -1;
    ERR_clear_error();
    t->ssl = SSL_new(ctx->ssl);
    t->in = BIO_new(BIO_s_mem());
    t->out = BIO_new(BIO_s_mem());
    if (t->ssl == NULL || t->in == NULL || t->out == NULL) {
        BIO_free(t->in);
        BIO_free(t->out);
        SSL_free(t->ssl);
        free(t);
        return NULL;
    }
    /* An empty read BIO means "more to come", not the end. */
    BIO_set_mem_eof_return(t->in, -1);
    BIO_set_mem_eof_return(t->out, -1);
    SSL_set_bio(t->ssl, t->in, t->out);
    t->ctx = tls_ctx_ref(ctx);
    if (ctx->server) {
        SSL_set_accept_state(t->ssl);
        return t;
    }
    if (peer != NULL) {
        snprintf(t->peer, sizeof(t->peer), "%s", peer);
        if (is_address(peer)) {
            if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), peer) !=
                1)
                goto fail;
        } else if (SSL_set_tlsext_host_name(t->ssl, peer) != 1 ||
                   SSL_set1_host(t->ssl, peer) != 1) {
            goto fail;
        }
    }
    SSL_set_connect_state(t->ssl);
    /* The ClientHello, ready to take. */
    if (tls_conn_handshake(t) == TLS_EFAIL)
        goto fail;
    return t;
fail:
    tls_conn_free(t);
    return NULL;
}

void
tls_conn_free(struct tls_conn *t)
{
    if (t == NULL)
        return;
    SSL_free(t->ssl);
    tls_ctx_free(t->ctx);
    free(t);
}

int
tls_conn_feed(struct tls_conn *t, const void *buf, size_t len)
{
    if (len == 0)
        return 0;
    if (BIO_ctrl_pending(t->in) + len > TLS_CONN_INBUF_MAX)
        return TLS_EFULL;
    if (t->first < 0)
        t->first = ((const unsigned char *)buf)[0];
    if (BIO_write(t->in, buf, (int)len) != (int)len)
        return TLS_ENOMEM;
    return 0;
}

/* Why a certificate did not verify, in the words of whoever fixes it. */
static void
verify_reason(struct tls_conn *t, long v)
{
    const char *who = t->ctx->server ? "the client" : "the server";
    const char *text = X509_verify_cert_error_string(v);

    switch (v) {
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_CERT_SIGNATURE_FAILURE:
        snprintf(t->err, sizeof(t->err),
                 "%s's certificate is not signed by a trusted CA (%s)", who,
                 text);
        break;
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
        snprintf(t->err, sizeof(t->err),
                 "%s's certificate does not name %s (%s)", who, t->peer, text);
        break;
    case X509_V_ERR_CERT_HAS_EXPIRED:
        snprintf(t->err, sizeof(t->err), "%s's certificate has expired", who);
        break;
    case X509_V_ERR_CERT_NOT_YET_VALID:
        snprintf(t->err, sizeof(t->err), "%s's certificate is not valid yet",
                 who);
        break;
    default:
        snprintf(t->err, sizeof(t->err), "%s's certificate did not verify: %s",
                 who, text);
        break;
    }
}

/* Fills t->err after a failed call; returns the code to give back. */
static int
failed(struct tls_conn *t, int rc)
{
    int e = SSL_get_error(t->ssl, rc);
    long v;
    char reason[160];

    switch (e) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
        return TLS_EWANT;
    case SSL_ERROR_ZERO_RETURN:
        return TLS_ECLOSED;
    default:
        break;
    }
    /* A TLS record begins with its content type, 20 to 23; anything else
     * is another protocol (a reply frame of a plain-text daemon begins
     * with its length's high byte, 0 as a rule). */
    if (t->first >= 0 && (t->first < 20 || t->first > 23)) {
        snprintf(t->err, sizeof(t->err), "%s",
                 t->ctx->server ? "the peer did not start a TLS handshake"
                                : "the server did not answer with TLS (is "
                                  "it a plain-text listener?)");
        return TLS_EFAIL;
    }
    v = SSL_get_verify_result(t->ssl);
    if (v != X509_V_OK && (t->ctx->server || !SSL_is_init_finished(t->ssl))) {
        verify_reason(t, v);
        return TLS_EFAIL;
    }
    last_reason(reason, sizeof(reason), "the connection failed");
    if (!t->ctx->server && ERR_GET_LIB(ERR_peek_last_error()) == ERR_LIB_SSL &&
        strstr(reason, "alert") != NULL)
        snprintf(t->err, sizeof(t->err), "the server refused the session: %s",
                 reason);
    else
        snprintf(t->err, sizeof(t->err), "TLS: %s", reason);
    return TLS_EFAIL;
}

int
tls_conn_handshake(struct tls_conn *t)
{
    int rc;

    if (SSL_is_init_finished(t->ssl))
        return 0;
    ERR_clear_error();
    rc = SSL_do_handshake(t->ssl);
    return rc == 1 ? 0 : failed(t, rc);
}

int
tls_conn_established(const struct tls_conn *t)
{
    return SSL_is_init_finished(t->ssl);
}

int
tls_conn_read(struct tls_conn *t, void *buf, size_t cap, size_t *got)
{
    int rc;

    *got = 0;
    ERR_clear_error();
    rc = SSL_read_ex(t->ssl, buf, cap, got);
    return rc == 1 ? 0 : failed(t, rc);
}

int
tls_conn_write(struct tls_conn *t, const void *buf, size_t len)
{
    size_t done = 0;
    int rc;

    if (!SSL_is_init_finished(t->ssl)) {
        snprintf(t->err, sizeof(t->err), "TLS: write before the handshake");
        return TLS_EFAIL;
    }
    if (len == 0)
        return 0;
    ERR_clear_error();
    rc = SSL_write_ex(t->ssl, buf, len, &done);
    if (rc == 1 && done == len)
        return 0;
    return failed(t, rc) == TLS_EWANT ? TLS_ENOMEM : TLS_EFAIL;
}

void
tls_conn_shutdown(struct tls_conn *t)
{
    ERR_clear_error();
    if (SSL_is_init_finished(t->ssl))
        SSL_shutdown(t->ssl);
}

size_t
tls_conn_pending(const struct tls_conn *t)
{
    return BIO_ctrl_pending(t->out);
}

size_t
tls_conn_take(struct tls_conn *t, void *buf, size_t cap)
{
    int n;

    if (cap > (size_t)INT32_MAX)
        cap = INT32_MAX;
    n = BIO_read(t->out, buf, (int)cap);
    return n > 0 ? (size_t)n : 0;
}

int
tls_conn_has_input(const struct tls_conn *t)
{
    return BIO_ctrl_pending(t->in) > 0 || SSL_pending(t->ssl) > 0;
}

const char *
tls_conn_error(const struct tls_conn *t)
{
    return t->err;
}

int
tls_conn_peer_name(const struct tls_conn *t, char *buf, size_t len)
{
    X509 *x = SSL_get0_peer_certificate(t->ssl);
    int n;

    if (x == NULL || SSL_get_verify_result(t->ssl) != X509_V_OK || len == 0)
        return -1;
    n = X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, buf,
                                  (int)(len > INT32_MAX ? INT32_MAX : len));
    return n > 0 && (size_t)n < len ? 0 : -1;
}

const char *
tls_conn_version(const struct tls_conn *t)
{
    return SSL_is_init_finished(t->ssl) ? SSL_get_version(t->ssl) : "";
}
