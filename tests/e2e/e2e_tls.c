/*
 * e2e_tls.c: the real receiptd with TLS on a real TCP port of 127.0.0.1
 * and a real SQLite file, driven by the real receiptctl and by the client
 * connection of client/net.c (the same TLS code).
 *
 * The certificates are made when the test starts, by Debian's openssl: a
 * CA and a second one, a server certificate for localhost and 127.0.0.1,
 * an expired one, one for another name, one from the second CA, a client
 * certificate from each CA. Covered: a good handshake and a receipt
 * acknowledged; each failure a client reports (unknown CA, name mismatch,
 * expired, TLS spoken to a plain-text port, plain text spoken to a TLS
 * port); mutual TLS accepted and refused; a handshake that never finishes
 * closed at the hello deadline; garbage instead of a ClientHello closed at
 * once and counted; a new certificate on SIGHUP while a producer writes,
 * with no acknowledged receipt lost; the hostile corpus over TLS.
 *
 * Without openssl every test reports skipped. Single-threaded; Check forks
 * each test, and each test starts its own daemon.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <msgpack.h>

#include "e2e_util.h"
#include "envelope.h"
#include "frame.h"
#include "hostile_list.h"
#include "net.h"
#include "skip.h"
#include "testcerts.h"
#include "tls.h"

#define CTL    TEST_BINARY_DIR "/client/receiptctl"
#define IMPORT TEST_DATA_DIR "/vectors/s2_seed_roundtrip.json"
/* SHA-256 of "test", the one token here. */
#define TOKEN "test"
#define TOKEN_HASH                                                             \
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
#define HELLO_MS 1000
/* A second token, too distinctive to be in memory by chance. */
#define TOKEN2 "tls-hello-Zq8v3Kp1wX"
#define TOKEN2_HASH                                                            \
    "ee283eb634984c5e07216008befe725cc16a3c8b6771c432e870c127849e76de"
#define TOKENS_CONF                                                            \
    "access: { tokens = ( { name = \"e2e\"; sha256 = \"" TOKEN_HASH            \
    "\"; }, { name = \"e2\"; sha256 = \"" TOKEN2_HASH "\"; }%s ); };\n"
/* A token named as the client certificate's common name (its secret is
 * TOKEN2's hash read as a token: never sent here). */
#define CN_TOKEN                                                               \
    ", { name = \"node-17\"; sha256 = "                                        \
    "\"0000000000000000000000000000000000000000000000000000000000000001\"; }"
/* Whether start_with() configures CN_TOKEN. */
static int with_cn_token;
/* AddressSanitizer's runtime leaves register spills in the stack's dead
 * part (e2e_harden scans the stack only without it). */
#ifdef __SANITIZE_ADDRESS__
#define SCAN_STACK 0
#else
#define SCAN_STACK 1
#endif

static char certs[256]; /* the directory of the certificates; "" when none */
static struct e2e_daemon d;
static int port;
static char hostport[64];

static void
need_certs(void)
{
    if (certs[0] == '\0')
        skip_now("openssl is not installed or could not make certificates");
}

/* dir/name.ext into buf. */
static const char *
cert(char *buf, size_t len, const char *name, const char *ext)
{
    snprintf(buf, len, "%s/%s.%s", certs, name, ext);
    return buf;
}

/*
 * Starts the daemon with a TCP listener on a fresh port, its TLS from
 * the configuration file: the certificate name (NULL: tcp_plaintext),
 * and the listen section's extra keys (may be NULL). more: extra flags.
 */
static void
start_with(const char *name, const char *listen_extra, const char *const *more)
{
    char conf[300], text[2048], c[300], k[300];
    const char *flags[16] = { "--config",        conf, "--tcp", hostport,
                              "--hello-timeout", "1s", NULL };
    int i, n = 6, fd;
    long until;

    need_certs();
    port = e2e_free_port();
    ck_assert_int_gt(port, 0);
    snprintf(hostport, sizeof(hostport), "127.0.0.1:%d", port);
    snprintf(conf, sizeof(conf), "%s/receiptd-%d.conf", certs, port);
    if (name != NULL)
        snprintf(text, sizeof(text),
                 "listen: { tls_cert = \"%s\"; tls_key = \"%s\"; %s "
                 "};\n" TOKENS_CONF,
                 cert(c, sizeof(c), name, "pem"),
                 cert(k, sizeof(k), name, "key"),
                 listen_extra != NULL ? listen_extra : "",
                 with_cn_token ? CN_TOKEN : "");
    else
        snprintf(text, sizeof(text),
                 "listen: { tcp_plaintext = true; };\n" TOKENS_CONF,
                 with_cn_token ? CN_TOKEN : "");
    ck_assert_int_eq(e2e_write_file(conf, text), 0);
    for (i = 0; more != NULL && more[i] != NULL && n < 15; i++)
        flags[n++] = more[i];
    flags[n] = NULL;
    ck_assert_msg(e2e_start(&d, flags) == 0, "receiptd did not start");
    /* The TCP listener is bound right after the Unix socket. */
    for (until = e2e_now_ms() + 5000; e2e_now_ms() < until;) {
        if ((fd = e2e_connect_tcp(port)) >= 0) {
            close(fd);
            return;
        }
        usleep(10000);
    }
    ck_abort_msg("the TCP listener did not come up");
}

static void
start(const char *name)
{
    start_with(name, NULL, NULL);
}

static void
teardown(void)
{
    e2e_cleanup(&d);
}

/*
 * Runs receiptctl with args (NULL-terminated, the command first) against
 * the daemon's TCP port; *err gets its stderr (malloc'd). Returns the
 * exit status.
 */
static int
ctl(char **err, const char *const *args)
{
    const char *argv[32] = { "receiptctl" };
    int n = 1, i;

    for (i = 0; args[i] != NULL && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return e2e_run(CTL, argv, NULL, NULL, NULL, err);
}

/* receiptctl ping over TLS with the CA file ca (NULL: the system's) and
 * the client certificate name (NULL: none); exit status, stderr in *err. */
static int
ping_tls_as(const char *host, const char *ca, const char *client,
            const char *token, char **err)
{
    char hp[80], cafile[300], c[300], k[300];
    const char *args[16] = { "ping", "--tcp", hp, "--tls" };
    int n = 4;

    if (token != NULL) {
        args[n++] = "--token";
        args[n++] = token;
    }

    snprintf(hp, sizeof(hp), "%s:%d", host, port);
    if (ca != NULL) {
        args[n++] = "--ca";
        args[n++] = cert(cafile, sizeof(cafile), ca, "pem");
    }
    if (client != NULL) {
        args[n++] = "--cert";
        args[n++] = cert(c, sizeof(c), client, "pem");
        args[n++] = "--key";
        args[n++] = cert(k, sizeof(k), client, "key");
    }
    args[n] = NULL;
    return ctl(err, args);
}

static int
ping_tls(const char *host, const char *ca, const char *client, char **err)
{
    return ping_tls_as(host, ca, client, TOKEN, err);
}

/* A counter of the stats query, asked over the Unix socket. */
static uint64_t
stat_of(const char *key)
{
    int fd = e2e_connect(&d);
    uint64_t v;

    ck_assert_int_ge(fd, 0);
    v = e2e_stat(fd, 1, key);
    close(fd);
    return v;
}

/* The daemon's log holds s. */
static int
log_has(const char *s)
{
    size_t len;
    char *text = e2e_read_file(d.log, &len);
    int found = text != NULL && strstr(text, s) != NULL;

    free(text);
    return found;
}

/* Asserts that a failed command's stderr names the reason. */
#define ASSERT_FAILS_WITH(rc, err, want)                                       \
    do {                                                                       \
        ck_assert_msg((rc) == 3, "exit %d, stderr: %s", (rc),                  \
                      (err) ? (err) : "");                                     \
        ck_assert_msg((err) != NULL && strstr((err), (want)) != NULL,          \
                      "stderr \"%s\" does not say \"%s\"", (err) ? (err) : "", \
                      (want));                                                 \
        free(err);                                                             \
        (err) = NULL;                                                          \
    } while (0)

START_TEST(test_tls_good_handshake_and_a_receipt_acknowledged)
{
    char *err = NULL, cafile[300];
    const char *import[] = { "import",   "--tcp",   hostport, "--token",
                             TOKEN,      "--tls",   "--ca",   cafile,
                             "--source", "tls-e2e", IMPORT,   NULL };
    int rc;

    start("server");
    rc = ping_tls("127.0.0.1", "ca", NULL, &err);
    ck_assert_msg(rc == 0, "ping by address: %d %s", rc, err);
    free(err);
    rc = ping_tls("localhost", "ca", NULL, &err);
    ck_assert_msg(rc == 0, "ping by name: %d %s", rc, err);
    free(err);
    cert(cafile, sizeof(cafile), "ca", "pem");
    rc = ctl(&err, import);
    ck_assert_msg(rc == 0, "import over TLS: %d %s", rc, err);
    free(err);
    ck_assert_uint_ge(stat_of("accepted"), 1);
    ck_assert_uint_eq(stat_of("tls_handshakes"), 3);
    ck_assert_uint_eq(stat_of("tls_failures"), 0);
}
END_TEST

START_TEST(test_tls_client_names_an_unknown_ca)
{
    char *err = NULL;

    start("server");
    /* The system's store does not hold the test CA, nor does the other
     * CA's file. */
    ASSERT_FAILS_WITH(ping_tls("127.0.0.1", NULL, NULL, &err), err,
                      "the server's certificate is not signed by a trusted "
                      "CA");
    ASSERT_FAILS_WITH(ping_tls("127.0.0.1", "ca2", NULL, &err), err,
                      "not signed by a trusted CA");
    ck_assert_uint_eq(stat_of("tls_failures"), 2);
    ck_assert(log_has("TLS handshake with 127.0.0.1 failed"));
}
END_TEST

START_TEST(test_tls_client_names_a_name_mismatch)
{
    char *err = NULL;

    start("wrongname");
    ASSERT_FAILS_WITH(ping_tls("127.0.0.1", "ca", NULL, &err), err,
                      "the server's certificate does not name 127.0.0.1");
    ASSERT_FAILS_WITH(ping_tls("localhost", "ca", NULL, &err), err,
                      "the server's certificate does not name localhost");
}
END_TEST

START_TEST(test_tls_client_names_an_expired_certificate)
{
    char *err = NULL;

    start("expired");
    ASSERT_FAILS_WITH(ping_tls("127.0.0.1", "ca", NULL, &err), err,
                      "the server's certificate has expired");
}
END_TEST

START_TEST(test_tls_client_names_a_plain_text_port)
{
    char *err = NULL;
    const char *plain[] = { "ping", "--tcp", hostport, "--token", TOKEN, NULL };
    int rc;

    start(NULL);
    ck_assert(log_has("speaks plain text (listen.tcp_plaintext)"));
    ASSERT_FAILS_WITH(ping_tls("127.0.0.1", "ca", NULL, &err), err,
                      "the server did not answer with TLS");
    rc = ctl(&err, plain);
    ck_assert_msg(rc == 0, "plain ping: %d %s", rc, err);
    free(err);
    e2e_cleanup(&d);

    /* And the other way round: plain text to a TLS port. */
    start("server");
    ASSERT_FAILS_WITH(ctl(&err, plain), err, "connect with --tls");
    ck_assert_uint_eq(stat_of("tls_failures"), 1);
}
END_TEST

START_TEST(test_tls_mutual_accepted_and_refused)
{
    char *err = NULL, extra[700], ca[300];
    int rc;

    need_certs();
    snprintf(extra, sizeof(extra),
             "tls_client_ca = \"%s\"; tls_require_client_cert = true;",
             cert(ca, sizeof(ca), "ca", "pem"));
    start_with("server", extra, NULL);
    rc = ping_tls("127.0.0.1", "ca", "client", &err);
    ck_assert_msg(rc == 0, "with the client certificate: %d %s", rc, err);
    free(err);
    /* TLS 1.3: the client learns at its first read that the server
     * refused its certificate, or the lack of one. */
    ASSERT_FAILS_WITH(ping_tls("127.0.0.1", "ca", NULL, &err), err,
                      "the server refused the session");
    ASSERT_FAILS_WITH(ping_tls("127.0.0.1", "ca", "rogue", &err), err,
                      "the server refused the session");
    ck_assert_uint_eq(stat_of("tls_failures"), 2);
    ck_assert_uint_eq(stat_of("tls_handshakes"), 1);
}
END_TEST

/* A hello refused for want of a token: receiptctl's exit status 1. */
#define ASSERT_REFUSED(rc, err)                                                \
    do {                                                                       \
        ck_assert_msg((rc) == 1 && (err) != NULL &&                            \
                          strstr((err), "needs a token") != NULL,              \
                      "exit %d, stderr: %s", (rc), (err) ? (err) : "");        \
        free(err);                                                             \
        (err) = NULL;                                                          \
    } while (0)

/* A verified client certificate whose common name is a token's name
 * stands in for that token; one whose name is no token's does not. */
START_TEST(test_tls_client_certificate_instead_of_a_token)
{
    char *err = NULL, extra[700], ca[300];
    int rc;

    need_certs();
    snprintf(extra, sizeof(extra), "tls_client_ca = \"%s\";",
             cert(ca, sizeof(ca), "ca", "pem"));
    with_cn_token = 1;
    start_with("server", extra, NULL);
    with_cn_token = 0;
    rc = ping_tls_as("127.0.0.1", "ca", "client", NULL, &err);
    ck_assert_msg(rc == 0, "the certificate alone: %d %s", rc, err);
    free(err);
    /* No certificate and no token: refused at hello. */
    rc = ping_tls_as("127.0.0.1", "ca", NULL, NULL, &err);
    ASSERT_REFUSED(rc, err);
    e2e_cleanup(&d);
    /* The same certificate where no token bears its name. */
    start_with("server", extra, NULL);
    rc = ping_tls_as("127.0.0.1", "ca", "client", NULL, &err);
    ASSERT_REFUSED(rc, err);
    rc = ping_tls_as("127.0.0.1", "ca", "client", TOKEN, &err);
    ck_assert_msg(rc == 0, "the certificate and a token: %d %s", rc, err);
    free(err);
}
END_TEST

/* A peer that starts a handshake and never finishes it is closed at the
 * hello deadline, not before and not much later. */
START_TEST(test_tls_unfinished_handshake_closed_at_hello_deadline)
{
    static const unsigned char part[] = { 0x16, 0x03, 0x01, 0x02,
                                          0x00, 0x01, 0x00, 0x01 };
    int fd, silent;
    long t0, dt;

    start("server");
    fd = e2e_connect_tcp(port);
    silent = e2e_connect_tcp(port);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_ge(silent, 0);
    t0 = e2e_now_ms();
    ck_assert_int_eq(e2e_send_all(fd, part, sizeof(part)), 0);
    ck_assert_int_eq(e2e_wait_closed(fd, HELLO_MS + 2000), 1);
    dt = e2e_now_ms() - t0;
    ck_assert_msg(dt >= HELLO_MS - 150 && dt <= HELLO_MS + 1000,
                  "closed after %ld ms, the deadline is %d ms", dt, HELLO_MS);
    ck_assert_int_eq(e2e_wait_closed(silent, 1000), 1);
    close(fd);
    close(silent);
    ck_assert(e2e_alive(&d));
}
END_TEST

/* Garbage where a ClientHello belongs costs one failed handshake: the
 * connection is closed at once, counted and logged. */
START_TEST(test_tls_garbage_instead_of_client_hello)
{
    char junk[512];
    int fd, i;
    long t0;

    start("server");
    for (i = 0; i < (int)sizeof(junk); i++)
        junk[i] = (char)(i * 37 + 11);
    for (i = 0; i < 20; i++) {
        fd = e2e_connect_tcp(port);
        ck_assert_int_ge(fd, 0);
        t0 = e2e_now_ms();
        (void)e2e_send_all(fd, junk, sizeof(junk));
        ck_assert_int_eq(e2e_wait_closed(fd, HELLO_MS / 2), 1);
        ck_assert_int_lt(e2e_now_ms() - t0, HELLO_MS / 2);
        close(fd);
    }
    ck_assert_uint_eq(stat_of("tls_failures"), 20);
    ck_assert_uint_eq(stat_of("connections"), 1);
    /* Rate-limited: the first at once, the rest in a later summary. */
    ck_assert(log_has("the peer did not start a TLS handshake"));
    ck_assert(e2e_alive(&d));
}
END_TEST

/* A TLS producer connection of client/net.c, after a hello with token:
 * 0, or 1 when the daemon refused the hello. */
static int
open_producer_as(struct net_conn *c, const char *ca, const char *source,
                 const char *token)
{
    struct net_tls t = { NULL, NULL, NULL };
    char err[NET_ERR_MAX], cafile[300];
    struct net_reply rep;
    struct tls_ctx *ctx;
    int rc;

    t.ca_file = cert(cafile, sizeof(cafile), ca, "pem");
    ck_assert_msg(net_tls_ctx(&t, &ctx, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(net_connect(c, NULL, hostport, 5000, err, sizeof(err)) == 0,
                  "%s", err);
    ck_assert_msg(net_start_tls(c, ctx, hostport, err, sizeof(err)) == 0, "%s",
                  err);
    tls_ctx_free(ctx);
    rc = net_hello(c, source, token, &rep, err, sizeof(err));
    ck_assert_msg(rc == 0 || rc == 1, "hello: %s", err);
    net_reply_free(&rep);
    return rc;
}

static void
open_producer(struct net_conn *c, const char *ca, const char *source)
{
    ck_assert_int_eq(open_producer_as(c, ca, source, TOKEN), 0);
}

/* Sends receipts seq first..first+n-1, window at a time, and counts the
 * acknowledgements; returns how many were acknowledged. */
static uint64_t
send_receipts(struct net_conn *c, uint64_t first, unsigned n)
{
    struct e2e_receipt r = { .schema = 3, .plan = "plan-tls" };
    char err[NET_ERR_MAX];
    uint64_t seq, acked = 0, id;
    unsigned i, window = 8, sent;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct net_reply rep;
    size_t start_off, len;
    char *body;

    for (i = 0; i < n; i += sent) {
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        for (sent = 0; sent < window && i + sent < n; sent++) {
            seq = first + i + sent;
            r.decode_steps = seq;
            body = e2e_receipt_bytes(&r, &len);
            ck_assert_ptr_nonnull(body);
            start_off = net_frame_begin_seq(c, &sb, &pk, PROTO_OP_RECEIPT, 1,
                                            seq, 1, &id);
            ck_assert_uint_ne(start_off, (size_t)-1);
            ck_assert_int_eq(msgpack_sbuffer_write(&sb, body, len), 0);
            ck_assert_int_eq(net_frame_finish(c, &sb, start_off), 0);
            free(body);
        }
        ck_assert_msg(net_send(c, sb.data, sb.size, err, sizeof(err)) == 0,
                      "%s", err);
        msgpack_sbuffer_destroy(&sb);
        for (unsigned j = 0; j < sent; j++) {
            ck_assert_msg(net_recv(c, &rep, err, sizeof(err)) == 0, "%s", err);
            if (rep.r.ok)
                acked++;
            net_reply_free(&rep);
        }
    }
    return acked;
}

/* SIGHUP with a new certificate while a producer writes: the producer's
 * session goes on with the old one, new connections get the new one, and
 * every acknowledged receipt is stored. */
START_TEST(test_tls_reload_under_load_loses_no_acknowledged_receipt)
{
    struct net_conn p, q;
    char conf[300], text[1024], c[300], k[300], *err = NULL;
    uint64_t acked = 0;
    long until;
    int rc;

    start("server");
    open_producer(&p, "ca", "tls-reload");
    acked += send_receipts(&p, 1, 300);
    snprintf(conf, sizeof(conf), "%s/receiptd-%d.conf", certs, port);
    snprintf(text, sizeof(text),
             "listen: { tls_cert = \"%s\"; tls_key = \"%s\"; };\n"
             "access: { tokens = ( { name = \"e2e\"; sha256 = \"%s\"; } ); "
             "};\n",
             cert(c, sizeof(c), "server2", "pem"),
             cert(k, sizeof(k), "server2", "key"), TOKEN_HASH);
    ck_assert_int_eq(e2e_write_file(conf, text), 0);
    ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
    /* The producer keeps writing through the reload. */
    acked += send_receipts(&p, 301, 300);
    for (until = e2e_now_ms() + 5000;
         !log_has("configuration reloaded") && e2e_now_ms() < until;)
        usleep(10000);
    ck_assert(log_has("configuration reloaded"));
    acked += send_receipts(&p, 601, 300);
    /* New connections: the new certificate, from the other CA. */
    open_producer(&q, "ca2", "tls-reload-2");
    acked += send_receipts(&q, 1, 100);
    rc = ping_tls("127.0.0.1", "ca2", NULL, &err);
    ck_assert_msg(rc == 0, "ping after the reload: %d %s", rc, err);
    free(err);
    ASSERT_FAILS_WITH(ping_tls("127.0.0.1", "ca", NULL, &err), err,
                      "not signed by a trusted CA");
    net_close(&p);
    net_close(&q);
    ck_assert_uint_eq(acked, 1000);
    ck_assert_uint_eq(stat_of("accepted"), acked);
}
END_TEST

/* A hello's token, decrypted by TLS, is not left in the daemon's memory:
 * neither in its read buffers nor in OpenSSL's (which release their
 * record buffers and, with SSL_OP_CLEANSE_PLAINTEXT, wipe them). */
START_TEST(test_tls_hello_token_not_left_in_memory)
{
    struct net_conn c, wrong;
    long n;

    start("server");
    /* A wrong token of the same length first, as e2e_harden does: the
     * first calls of the hash functions bind them lazily. */
    ck_assert_int_eq(
        open_producer_as(&wrong, "ca", "tls-wipe", "tls-hello-Zq8v3Kp1wY"), 1);
    net_close(&wrong);
    ck_assert_int_eq(open_producer_as(&c, "ca", "tls-wipe", TOKEN2), 0);
    n = e2e_proc_mem_count(d.pid, TOKEN2, strlen(TOKEN2), SCAN_STACK);
    if (n < 0)
        skip_now("cannot read the daemon's memory (/proc/%d/mem)", (int)d.pid);
    ck_assert_msg(n == 0,
                  "the token is %ld times in the daemon's memory after a "
                  "hello over TLS",
                  n);
    net_close(&c);
}
END_TEST

/* The hostile corpus over TLS, after a hello with the token: every frame
 * has the outcome it has on the Unix socket, and the daemon stays up. */
START_TEST(test_tls_hostile_corpus)
{
    static struct hostile_case cases[HOSTILE_MAX];
    const char *const more[] = { "--frame-timeout", "2s", NULL };
    char err[NET_ERR_MAX];
    int n, i, bad = 0;

    n = hostile_list_load(HOSTILE_DIR, cases, HOSTILE_MAX);
    ck_assert_int_ge(n, 40);
    start_with("server", NULL, more);
    for (i = 0; i < n; i++) {
        const struct hostile_case *e = &cases[i];
        struct net_conn c;
        struct net_reply rep;
        size_t len = 0;
        char *buf = hostile_list_read(HOSTILE_DIR, e->file, &len);
        const char *got;
        int rc;

        ck_assert_ptr_nonnull(buf);
        open_producer(&c, "ca", "tls-hostile");
        c.timeout_ms = 5000;
        (void)net_send(&c, buf, len, err, sizeof(err));
        free(buf);
        rc = net_recv(&c, &rep, err, sizeof(err));
        if (strcmp(e->outcome, HOSTILE_WAIT) == 0) {
            /* Cut off by the frame timeout: closed without a reply, or
             * with the timeout's error. */
            if (rc == 0 && rep.r.ok) {
                fprintf(stderr, "e2e_tls: %s: answered ok\n", e->file);
                bad++;
            }
        } else if (rc != 0) {
            fprintf(stderr, "e2e_tls: %s: no reply: %s\n", e->file, err);
            bad++;
        } else {
            got = rep.r.ok ? "ok" : proto_code_name(rep.r.err.code);
            if (strcmp(got, e->code) != 0) {
                fprintf(stderr, "e2e_tls: %s: expected %s, got %s\n", e->file,
                        e->code, got);
                bad++;
            }
        }
        if (rc == 0)
            net_reply_free(&rep);
        net_close(&c);
        ck_assert_msg(e2e_alive(&d), "receiptd died on %s", e->file);
    }
    printf("e2e_tls: %d hostile frames over TLS, %d wrong outcomes\n", n, bad);
    fflush(stdout);
    ck_assert_int_eq(bad, 0);
    ck_assert_uint_eq(stat_of("tls_failures"), 0);
}
END_TEST

static Suite *
e2e_tls_suite(void)
{
    Suite *s = suite_create("e2e_tls");
    TCase *tc = tcase_create("tls");

    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_tls_good_handshake_and_a_receipt_acknowledged);
    tcase_add_test(tc, test_tls_client_names_an_unknown_ca);
    tcase_add_test(tc, test_tls_client_names_a_name_mismatch);
    tcase_add_test(tc, test_tls_client_names_an_expired_certificate);
    tcase_add_test(tc, test_tls_client_names_a_plain_text_port);
    tcase_add_test(tc, test_tls_mutual_accepted_and_refused);
    tcase_add_test(tc, test_tls_unfinished_handshake_closed_at_hello_deadline);
    tcase_add_test(tc, test_tls_garbage_instead_of_client_hello);
    tcase_add_test(tc, test_tls_client_certificate_instead_of_a_token);
    tcase_add_test(tc,
                   test_tls_reload_under_load_loses_no_acknowledged_receipt);
    tcase_add_test(tc, test_tls_hello_token_not_left_in_memory);
    suite_add_tcase(s, tc);

    tc = tcase_create("hostile");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_tls_hostile_corpus);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return testcerts_run("e2e_tls", e2e_tls_suite(), certs, sizeof(certs));
}
