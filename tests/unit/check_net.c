/*
 * check_net.c: receiptctl's connection layer (client/net.c) against a peer
 * this test plays itself on a socketpair: replies split into single bytes
 * or pipelined in one write, a peer that hangs up mid-frame, bytes that are
 * not a reply, ids that do not match, timeouts, hello limits, and connect
 * errors.
 */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <msgpack.h>

#include "envelope.h"
#include "frame.h"
#include "net.h"

/* The test's end of the socketpair and the client's connection. */
static int peer = -1;
static struct net_conn conn;

static void
setup(void)
{
    int sv[2];
    char err[NET_ERR_MAX];

    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    peer = sv[1];
    ck_assert_int_eq(
        net_adopt(&conn, sv[0], "test-peer", 2000, err, sizeof(err)), 0);
}

static void
teardown(void)
{
    net_close(&conn);
    if (peer >= 0)
        close(peer);
    peer = -1;
}

/* Appends a framed ok reply {"id", "ok": true, "result": {"n": n}}. */
static void
put_reply(msgpack_sbuffer *sb, uint64_t id, uint64_t n)
{
    msgpack_packer pk;
    size_t start;

    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    start = frame_sbuffer_begin(sb);
    envelope_reply_ok(&pk, 1, id);
    msgpack_pack_map(&pk, 1);
    envelope_pack_cstr(&pk, "n");
    msgpack_pack_uint64(&pk, n);
    frame_sbuffer_finish(sb, start);
}

/* Appends a frame holding raw[0..len). */
static void
put_raw(msgpack_sbuffer *sb, const char *raw, size_t len)
{
    unsigned char hdr[FRAME_HEADER_SIZE];

    frame_put_header(hdr, (uint32_t)len);
    msgpack_sbuffer_write(sb, (const char *)hdr, sizeof(hdr));
    msgpack_sbuffer_write(sb, raw, len);
}

static uint64_t
result_n(const struct net_reply *rep)
{
    const msgpack_object *r = rep->r.result;

    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->type, MSGPACK_OBJECT_MAP);
    return r->via.map.ptr[0].val.via.u64;
}

struct dribble {
    int fd;
    const char *p;
    size_t len;
};

static void *
dribble_cb(void *arg)
{
    struct dribble *d = arg;
    size_t i;

    for (i = 0; i < d->len; i++) {
        ck_assert_int_eq(write(d->fd, d->p + i, 1), 1);
        if (i % 7 == 0)
            usleep(200);
    }
    return NULL;
}

START_TEST(test_net_recv_reassembles_a_reply_sent_byte_by_byte)
{
    msgpack_sbuffer sb;
    struct net_reply rep;
    struct dribble d;
    pthread_t th;
    char err[NET_ERR_MAX];

    msgpack_sbuffer_init(&sb);
    put_reply(&sb, 5, 42);
    d.fd = peer;
    d.p = sb.data;
    d.len = sb.size;
    ck_assert_int_eq(pthread_create(&th, NULL, dribble_cb, &d), 0);
    ck_assert_int_eq(net_recv(&conn, &rep, err, sizeof(err)), 0);
    pthread_join(th, NULL);
    ck_assert(rep.r.ok);
    ck_assert_uint_eq(rep.r.id, 5);
    ck_assert_uint_eq(result_n(&rep), 42);
    net_reply_free(&rep);
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(test_net_recv_returns_pipelined_replies_in_order)
{
    msgpack_sbuffer sb;
    struct net_reply rep;
    char err[NET_ERR_MAX];
    uint64_t i;

    msgpack_sbuffer_init(&sb);
    for (i = 1; i <= 50; i++)
        put_reply(&sb, i, i * 10);
    ck_assert_int_eq(write(peer, sb.data, sb.size), (ssize_t)sb.size);
    for (i = 1; i <= 50; i++) {
        ck_assert_int_eq(net_recv(&conn, &rep, err, sizeof(err)), 0);
        ck_assert_uint_eq(rep.r.id, i);
        ck_assert_uint_eq(result_n(&rep), i * 10);
        net_reply_free(&rep);
    }
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(test_net_recv_decodes_error_replies)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct proto_err perr;
    struct net_reply rep;
    char err[NET_ERR_MAX];
    size_t start;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    start = frame_sbuffer_begin(&sb);
    proto_err_set(&perr, PROTO_EINVALID, "counters.decode_steps",
                  "expected an unsigned integer, got a string");
    envelope_reply_error(&pk, 1, 9, &perr);
    frame_sbuffer_finish(&sb, start);
    ck_assert_int_eq(write(peer, sb.data, sb.size), (ssize_t)sb.size);
    ck_assert_int_eq(net_recv(&conn, &rep, err, sizeof(err)), 0);
    ck_assert(!rep.r.ok);
    ck_assert_int_eq(rep.r.err.code, PROTO_EINVALID);
    ck_assert_str_eq(rep.r.err.path, "counters.decode_steps");
    ck_assert_uint_eq(rep.r.code_name.len, strlen("invalid"));
    net_reply_free(&rep);
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

/* Peer behaviours that must end in a transport error, never a crash or a
 * hang: each case writes bytes (or closes) and names the expected code. */
struct bad_peer {
    const char *what;
    const char *raw; /* frame body; NULL for a special case below */
    size_t len;
    int want;
};

static const struct bad_peer bad_peers[] = {
    { "not msgpack", "\xc1", 1, NET_EPROTO },
    { "trailing bytes", "\x80\x80", 2, NET_EPROTO },
    { "truncated map", "\x82\xa2id", 4, NET_EPROTO },
    { "not a map", "\x93\x01\x02\x03", 4, NET_EPROTO },
    { "no ok key", "\x81\xa2id\x01", 5, NET_EPROTO },
    { "lying array header", "\xdd\xff\xff\xff\xff", 5, NET_EPROTO },
    { "zero-length frame", NULL, 0, NET_EPROTO },
    { "hang-up mid-frame", NULL, 1, NET_EIO },
    { "hang-up before a reply", NULL, 2, NET_EIO },
};

START_TEST(test_net_recv_rejects_bad_peers)
{
    const struct bad_peer *b = &bad_peers[_i];
    msgpack_sbuffer sb;
    struct net_reply rep;
    char err[NET_ERR_MAX] = "";

    msgpack_sbuffer_init(&sb);
    if (b->raw != NULL) {
        put_raw(&sb, b->raw, b->len);
    } else if (b->len == 0) {
        static const char zero[4] = { 0, 0, 0, 0 };

        msgpack_sbuffer_write(&sb, zero, 4);
    } else if (b->len == 1) {
        /* A header announcing 100 bytes, then 3 of them. */
        static const char part[7] = { 0, 0, 0, 100, 1, 2, 3 };

        msgpack_sbuffer_write(&sb, part, sizeof(part));
    }
    if (sb.size > 0)
        ck_assert_int_eq(write(peer, sb.data, sb.size), (ssize_t)sb.size);
    if (b->raw == NULL && b->len > 0) {
        close(peer);
        peer = -1;
    }
    ck_assert_msg(net_recv(&conn, &rep, err, sizeof(err)) == b->want, "%s: %s",
                  b->what, err);
    ck_assert_msg(strlen(err) > 5, "%s: no message", b->what);
    net_reply_free(&rep);
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(test_net_call_rejects_a_mismatched_id)
{
    msgpack_sbuffer req, rsp;
    struct net_reply rep;
    char err[NET_ERR_MAX];

    msgpack_sbuffer_init(&req);
    msgpack_sbuffer_init(&rsp);
    msgpack_sbuffer_write(&req, "x", 1);
    put_reply(&rsp, 8, 1);
    ck_assert_int_eq(write(peer, rsp.data, rsp.size), (ssize_t)rsp.size);
    ck_assert_int_eq(net_call(&conn, &req, 7, &rep, err, sizeof(err)),
                     NET_EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "does not match"));
    net_reply_free(&rep);
    msgpack_sbuffer_destroy(&req);
    msgpack_sbuffer_destroy(&rsp);
}
END_TEST

START_TEST(test_net_recv_times_out)
{
    struct net_reply rep;
    char err[NET_ERR_MAX];

    conn.timeout_ms = 100;
    ck_assert_int_eq(net_recv(&conn, &rep, err, sizeof(err)), NET_EIO);
    ck_assert_ptr_nonnull(strstr(err, "no answer from test-peer within 100"));
    net_reply_free(&rep);
}
END_TEST

/* hello: the request carries protocol, source and token; the reply's
 * limits and server name are kept on the connection. */
START_TEST(test_net_hello_records_limits)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacked up;
    struct net_reply rep;
    struct envelope env;
    struct proto_err perr;
    char err[NET_ERR_MAX], req[4096];
    ssize_t n;
    size_t start;

    /* The reply goes first: the client reads it after writing hello. */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    start = frame_sbuffer_begin(&sb);
    envelope_reply_ok(&pk, 1, 1);
    msgpack_pack_map(&pk, 3);
    envelope_pack_cstr(&pk, "max_frame");
    msgpack_pack_uint64(&pk, 65536);
    envelope_pack_cstr(&pk, "max_batch");
    msgpack_pack_uint64(&pk, 17);
    envelope_pack_cstr(&pk, "server");
    envelope_pack_cstr(&pk, "receiptd/9.8.7");
    frame_sbuffer_finish(&sb, start);
    ck_assert_int_eq(write(peer, sb.data, sb.size), (ssize_t)sb.size);

    ck_assert_int_eq(
        net_hello(&conn, "node-1/rt-2", "tok", &rep, err, sizeof(err)), 0);
    net_reply_free(&rep);
    ck_assert_uint_eq(conn.max_frame, 65536);
    ck_assert_uint_eq(conn.max_batch, 17);
    ck_assert_str_eq(conn.server, "receiptd/9.8.7");

    n = read(peer, req, sizeof(req));
    ck_assert_int_gt(n, FRAME_HEADER_SIZE);
    msgpack_unpacked_init(&up);
    ck_assert_int_eq(envelope_parse(req + FRAME_HEADER_SIZE,
                                    (size_t)n - FRAME_HEADER_SIZE, &up, &env,
                                    &perr),
                     0);
    ck_assert_int_eq(env.op, PROTO_OP_HELLO);
    ck_assert_uint_eq(env.body->via.map.size, 3);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(test_net_frame_finish_refuses_frames_over_max_frame)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint64_t id;
    size_t start;
    char big[2048];

    memset(big, 'a', sizeof(big));
    conn.max_frame = 1024;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    start = net_frame_begin(&conn, &sb, &pk, PROTO_OP_PING, 1, &id);
    ck_assert_uint_eq(id, 1);
    msgpack_pack_str_with_body(&pk, big, sizeof(big));
    ck_assert_int_eq(net_frame_finish(&conn, &sb, start), -1);
    msgpack_sbuffer_destroy(&sb);

    /* Ids keep increasing, one per request. */
    msgpack_sbuffer_init(&sb);
    start = net_frame_begin(&conn, &sb, &pk, PROTO_OP_PING, 0, &id);
    ck_assert_uint_eq(id, 2);
    ck_assert_int_eq(net_frame_finish(&conn, &sb, start), 0);
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

struct connect_case {
    const char *unix_path;
    const char *tcp;
    const char *want; /* in the message */
};

static const struct connect_case connect_cases[] = {
    { "/nonexistent-dir/x.sock", NULL, "No such file or directory" },
    { "/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.sock",
      NULL, "longer than a Unix socket address allows" },
    { NULL, "no-port", "expected HOST:PORT" },
    { NULL, "host:", "expected HOST:PORT" },
    { NULL, ":7000", "bad host" },
    { NULL, "127.0.0.1:1", "127.0.0.1:1" },
    { NULL, "[::1]:1", "[::1]:1" },
};

START_TEST(test_net_connect_failures_name_the_peer)
{
    const struct connect_case *c = &connect_cases[_i];
    struct net_conn nc;
    char err[NET_ERR_MAX] = "";

    ck_assert_int_eq(
        net_connect(&nc, c->unix_path, c->tcp, 1000, err, sizeof(err)),
        NET_ECONNECT);
    ck_assert_msg(strstr(err, c->want) != NULL, "[%s] lacks [%s]", err,
                  c->want);
    net_close(&nc);
}
END_TEST

static Suite *
net_suite(void)
{
    Suite *s = suite_create("net");
    TCase *tc;

    tc = tcase_create("recv");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_net_recv_reassembles_a_reply_sent_byte_by_byte);
    tcase_add_test(tc, test_net_recv_returns_pipelined_replies_in_order);
    tcase_add_test(tc, test_net_recv_decodes_error_replies);
    suite_add_tcase(s, tc);

    tc = tcase_create("bad_peer");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_net_recv_rejects_bad_peers, 0,
                        (int)(sizeof(bad_peers) / sizeof(bad_peers[0])));
    tcase_add_test(tc, test_net_call_rejects_a_mismatched_id);
    tcase_add_test(tc, test_net_recv_times_out);
    suite_add_tcase(s, tc);

    tc = tcase_create("requests");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_net_hello_records_limits);
    tcase_add_test(tc, test_net_frame_finish_refuses_frames_over_max_frame);
    suite_add_tcase(s, tc);

    tc = tcase_create("connect");
    tcase_add_loop_test(
        tc, test_net_connect_failures_name_the_peer, 0,
        (int)(sizeof(connect_cases) / sizeof(connect_cases[0])));
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(net_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
