/*
 * check_tls.c: proto/tls.c, a client and a server connection in one
 * process with their bytes moved by hand: the handshake, plaintext both
 * ways, the bound on waiting input, garbage, verification failures and
 * their words, client certificates, contexts that outlive their owner.
 * The certificates come from tests/lib/testcerts.c (openssl at test time;
 * without it every test reports skipped).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skip.h"
#include "testcerts.h"
#include "tls.h"

static char dir[256];

static const char *
path(char *buf, size_t len, const char *name, const char *ext)
{
    snprintf(buf, len, "%s/%s.%s", dir, name, ext);
    return buf;
}

static struct tls_ctx *
server_ctx(const char *name, const char *client_ca, int require)
{
    char c[300], k[300], ca[300], err[TLS_ERR_MAX];
    struct tls_ctx *ctx;

    if (dir[0] == '\0')
        skip_now("openssl is not installed");
    ck_assert_msg(
        tls_ctx_server_new(
            path(c, sizeof(c), name, "pem"), path(k, sizeof(k), name, "key"),
            client_ca != NULL ? path(ca, sizeof(ca), client_ca, "pem") : NULL,
            require, &ctx, err, sizeof(err)) == 0,
        "%s", err);
    return ctx;
}

static struct tls_ctx *
client_ctx(const char *ca, const char *cert)
{
    char a[300], c[300], k[300], err[TLS_ERR_MAX];
    struct tls_ctx *ctx;

    ck_assert_msg(tls_ctx_client_new(
                      ca != NULL ? path(a, sizeof(a), ca, "pem") : NULL,
                      cert != NULL ? path(c, sizeof(c), cert, "pem") : NULL,
                      cert != NULL ? path(k, sizeof(k), cert, "key") : NULL,
                      &ctx, err, sizeof(err)) == 0,
                  "%s", err);
    return ctx;
}

/* Moves what from has for the peer into to. Returns the bytes moved. */
static size_t
move(struct tls_conn *from, struct tls_conn *to)
{
    char buf[4096];
    size_t n, total = 0;

    while ((n = tls_conn_take(from, buf, sizeof(buf))) > 0) {
        ck_assert_int_eq(tls_conn_feed(to, buf, n), 0);
        total += n;
    }
    return total;
}

/* Runs both sides until neither has anything to send. Returns the
 * server's last code (0 once its handshake is done). */
static int
shake(struct tls_conn *cl, struct tls_conn *sv, int *client_rc)
{
    int rc = TLS_EWANT, crc = TLS_EWANT, i;

    for (i = 0; i < 10; i++) {
        size_t moved = move(cl, sv);

        rc = tls_conn_handshake(sv);
        moved += move(sv, cl);
        crc = tls_conn_handshake(cl);
        if (moved == 0 && tls_conn_pending(cl) == 0)
            break;
    }
    if (client_rc != NULL)
        *client_rc = crc;
    return rc;
}

START_TEST(test_tls_handshake_then_plaintext_both_ways)
{
    struct tls_ctx *sc = server_ctx("server", NULL, 0),
                   *cc = client_ctx("ca", NULL);
    struct tls_conn *cl = tls_conn_new(cc, "127.0.0.1"),
                    *sv = tls_conn_new(sc, NULL);
    static char big[100000], got[100000];
    size_t n, off = 0;
    int crc, rc, i;

    ck_assert_ptr_nonnull(cl);
    ck_assert_ptr_nonnull(sv);
    ck_assert_uint_gt(tls_conn_pending(cl), 0); /* the ClientHello */
    ck_assert_int_eq(shake(cl, sv, &crc), 0);
    ck_assert_int_eq(crc, 0);
    ck_assert(tls_conn_established(cl) && tls_conn_established(sv));
    ck_assert_str_eq(tls_conn_version(sv), "TLSv1.3");
    for (i = 0; i < (int)sizeof(big); i++)
        big[i] = (char)(i * 7);
    /* Larger than a record: split by the sender, whole at the other end. */
    ck_assert_int_eq(tls_conn_write(cl, big, sizeof(big)), 0);
    move(cl, sv);
    while (off < sizeof(big)) {
        rc = tls_conn_read(sv, got + off, sizeof(got) - off, &n);
        ck_assert_int_eq(rc, 0);
        ck_assert_uint_le(n, 16384);
        off += n;
    }
    ck_assert_int_eq(memcmp(big, got, sizeof(big)), 0);
    ck_assert_int_eq(tls_conn_read(sv, got, sizeof(got), &n), TLS_EWANT);
    ck_assert_int_eq(tls_conn_write(sv, "pong", 4), 0);
    move(sv, cl);
    ck_assert_int_eq(tls_conn_read(cl, got, sizeof(got), &n), 0);
    ck_assert_uint_eq(n, 4);
    ck_assert_int_eq(memcmp(got, "pong", 4), 0);
    /* close_notify ends the stream. */
    tls_conn_shutdown(cl);
    move(cl, sv);
    ck_assert_int_eq(tls_conn_read(sv, got, sizeof(got), &n), TLS_ECLOSED);
    /* The contexts go first: each connection holds its own reference. */
    tls_ctx_free(sc);
    tls_ctx_free(cc);
    tls_conn_free(cl);
    tls_conn_free(sv);
}
END_TEST

START_TEST(test_tls_write_before_handshake_fails)
{
    struct tls_ctx *sc = server_ctx("server", NULL, 0);
    struct tls_conn *sv = tls_conn_new(sc, NULL);

    ck_assert_int_eq(tls_conn_write(sv, "x", 1), TLS_EFAIL);
    ck_assert_ptr_nonnull(strstr(tls_conn_error(sv), "before the handshake"));
    tls_conn_free(sv);
    tls_ctx_free(sc);
}
END_TEST

START_TEST(test_tls_input_is_bounded)
{
    struct tls_ctx *sc = server_ctx("server", NULL, 0);
    struct tls_conn *sv = tls_conn_new(sc, NULL);
    static char chunk[65536];
    size_t total = 0;
    int rc;

    memset(chunk, 0x16, sizeof(chunk));
    while ((rc = tls_conn_feed(sv, chunk, sizeof(chunk))) == 0)
        total += sizeof(chunk);
    ck_assert_int_eq(rc, TLS_EFULL);
    ck_assert_uint_le(total, TLS_CONN_INBUF_MAX);
    ck_assert_uint_ge(total + sizeof(chunk), TLS_CONN_INBUF_MAX);
    tls_conn_free(sv);
    tls_ctx_free(sc);
}
END_TEST

START_TEST(test_tls_garbage_fails_at_once_and_says_so)
{
    struct tls_ctx *sc = server_ctx("server", NULL, 0);
    struct tls_conn *sv = tls_conn_new(sc, NULL);
    char buf[64];
    size_t n;

    ck_assert_int_eq(tls_conn_feed(sv, "GET / HTTP/1.1\r\n\r\n", 18), 0);
    ck_assert_int_eq(tls_conn_read(sv, buf, sizeof(buf), &n), TLS_EFAIL);
    ck_assert_str_eq(tls_conn_error(sv),
                     "the peer did not start a TLS handshake");
    tls_conn_free(sv);
    tls_ctx_free(sc);
}
END_TEST

/* The client's words for each verification failure. */
static const struct {
    const char *server, *ca, *host, *want;
} verify_cases[] = {
    { "server", "ca2", "127.0.0.1",
      "the server's certificate is not signed by a trusted CA" },
    { "wrongname", "ca", "127.0.0.1",
      "the server's certificate does not name 127.0.0.1" },
    { "wrongname", "ca", "localhost",
      "the server's certificate does not name localhost" },
    { "expired", "ca", "localhost", "the server's certificate has expired" },
    { "server", "ca", "localhost", NULL },
    { "server", "ca", "::1", "the server's certificate does not name ::1" },
};

START_TEST(test_tls_client_says_why_verification_failed)
{
    struct tls_ctx *sc = server_ctx(verify_cases[_i].server, NULL, 0);
    struct tls_ctx *cc = client_ctx(verify_cases[_i].ca, NULL);
    struct tls_conn *cl = tls_conn_new(cc, verify_cases[_i].host);
    struct tls_conn *sv = tls_conn_new(sc, NULL);
    int crc;

    shake(cl, sv, &crc);
    if (verify_cases[_i].want == NULL) {
        ck_assert_int_eq(crc, 0);
    } else {
        ck_assert_int_eq(crc, TLS_EFAIL);
        ck_assert_msg(strstr(tls_conn_error(cl), verify_cases[_i].want) != NULL,
                      "\"%s\" does not say \"%s\"", tls_conn_error(cl),
                      verify_cases[_i].want);
    }
    tls_conn_free(cl);
    tls_conn_free(sv);
    tls_ctx_free(sc);
    tls_ctx_free(cc);
}
END_TEST

START_TEST(test_tls_client_to_plain_text_peer)
{
    struct tls_ctx *cc = client_ctx("ca", NULL);
    struct tls_conn *cl = tls_conn_new(cc, "127.0.0.1");
    /* What a plain-text daemon answers a ClientHello with: a reply frame,
     * its length first. */
    static const char reply[] = "\x00\x00\x00\x30\x83\xa2ok\xc2";

    ck_assert_int_eq(tls_conn_feed(cl, reply, sizeof(reply) - 1), 0);
    ck_assert_int_eq(tls_conn_handshake(cl), TLS_EFAIL);
    ck_assert_ptr_nonnull(
        strstr(tls_conn_error(cl), "the server did not answer with TLS"));
    tls_conn_free(cl);
    tls_ctx_free(cc);
}
END_TEST

START_TEST(test_tls_client_certificate_verified_and_named)
{
    struct tls_ctx *sc = server_ctx("server", "ca", 1);
    const char *certs[] = { "client", "rogue", NULL };
    char name[64], buf[16];
    int i, crc, rc;
    size_t n;

    for (i = 0; i < 3; i++) {
        struct tls_ctx *cc = client_ctx("ca", certs[i]);
        struct tls_conn *cl = tls_conn_new(cc, "localhost");
        struct tls_conn *sv = tls_conn_new(sc, NULL);

        rc = shake(cl, sv, &crc);
        if (i == 0) {
            ck_assert_int_eq(rc, 0);
            ck_assert_int_eq(tls_conn_peer_name(sv, name, sizeof(name)), 0);
            ck_assert_str_eq(name, "node-17");
        } else {
            /* TLS 1.3: the server refuses after the client's Finished,
             * and the client hears it at its first read. */
            ck_assert_int_eq(rc, TLS_EFAIL);
            ck_assert_int_eq(tls_conn_peer_name(sv, name, sizeof(name)), -1);
            move(sv, cl);
            ck_assert_int_eq(tls_conn_read(cl, buf, sizeof(buf), &n),
                             TLS_EFAIL);
            ck_assert_msg(strstr(tls_conn_error(cl),
                                 "the server refused the session") != NULL,
                          "%s", tls_conn_error(cl));
        }
        tls_conn_free(cl);
        tls_conn_free(sv);
        tls_ctx_free(cc);
    }
    tls_ctx_free(sc);
}
END_TEST

START_TEST(test_tls_bad_files_are_named)
{
    char c[300], k[300], err[TLS_ERR_MAX];
    struct tls_ctx *ctx = (struct tls_ctx *)1;

    if (dir[0] == '\0')
        skip_now("openssl is not installed");
    ck_assert_int_eq(tls_ctx_server_new("/nonexistent.pem",
                                        path(k, sizeof(k), "server", "key"),
                                        NULL, 0, &ctx, err, sizeof(err)),
                     TLS_EFAIL);
    ck_assert_ptr_null(ctx);
    ck_assert_ptr_nonnull(
        strstr(err, "cannot load the certificate /nonexistent.pem"));
    ck_assert_int_eq(tls_ctx_server_new(path(c, sizeof(c), "server", "pem"),
                                        path(k, sizeof(k), "client", "key"),
                                        NULL, 0, &ctx, err, sizeof(err)),
                     TLS_EFAIL);
    ck_assert_ptr_nonnull(strstr(err, "does not match"));
    ck_assert_int_eq(tls_ctx_client_new("/nonexistent-ca.pem", NULL, NULL, &ctx,
                                        err, sizeof(err)),
                     TLS_EFAIL);
    ck_assert_ptr_nonnull(strstr(err, "cannot load the CA"));
    tls_ctx_free(NULL);
    tls_conn_free(NULL);
}
END_TEST

static Suite *
tls_suite(void)
{
    Suite *s = suite_create("tls");
    TCase *tc = tcase_create("tls");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_tls_handshake_then_plaintext_both_ways);
    tcase_add_test(tc, test_tls_write_before_handshake_fails);
    tcase_add_test(tc, test_tls_input_is_bounded);
    tcase_add_test(tc, test_tls_garbage_fails_at_once_and_says_so);
    tcase_add_loop_test(tc, test_tls_client_says_why_verification_failed, 0,
                        (int)(sizeof(verify_cases) / sizeof(verify_cases[0])));
    tcase_add_test(tc, test_tls_client_to_plain_text_peer);
    tcase_add_test(tc, test_tls_client_certificate_verified_and_named);
    tcase_add_test(tc, test_tls_bad_files_are_named);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return testcerts_run("check_tls", tls_suite(), dir, sizeof(dir));
}
