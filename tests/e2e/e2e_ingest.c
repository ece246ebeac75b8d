/*
 * e2e_ingest.c: end-to-end tests of receiptd: the real binary on a
 * temporary socket and database, driven over the wire.
 *
 * Each test starts its own daemon (e2e_util.c) in Check's fork mode, so a
 * crash or a hang in one cannot hide another. Stored data is read back
 * through the `receipts` query or, for the quarantine, with a read-only
 * SQLite connection on the daemon's file.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "e2e_util.h"
#include "frame.h"

#define T 5000 /* reply timeout, ms */

/* Resident memory a daemon may use while a client refuses its replies:
 * the 64 MiB goal, or four times that under AddressSanitizer, whose shadow
 * memory and quarantine inflate every process. */
#ifdef __SANITIZE_ADDRESS__
#define RSS_LIMIT_KB (256 * 1024)
#else
#define RSS_LIMIT_KB (64 * 1024)
#endif

static struct e2e_daemon d;

static void
start(const char *const *extra)
{
    ck_assert_msg(e2e_start(&d, extra) == 0, "receiptd did not start");
}

/* Every test ends with a clean SIGTERM: a drain that hangs, a crash, or
 * (under the sanitizers) a leak at exit fails the test that caused it. */
static void
teardown(void)
{
    e2e_stop_clean(&d);
}

static void
expect_ok(int fd, uint64_t id, struct e2e_reply *rep)
{
    ck_assert_int_eq(e2e_recv(fd, T, rep), 0);
    ck_assert_msg(rep->r.ok, "id %llu: %s at %s: %s", (unsigned long long)id,
                  proto_code_name(rep->r.err.code), rep->r.err.path,
                  rep->r.err.message);
    ck_assert(rep->r.has_id);
    ck_assert_uint_eq(rep->r.id, id);
}

/* n `receipt` frames of body (ids 0..n-1, source-less seqs) into a new
 * sb; the caller destroys it. */
static void
pack_receipts(msgpack_sbuffer *sb, const char *body, size_t len, size_t n)
{
    msgpack_packer pk;
    size_t i;

    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    for (i = 0; i < n; i++) {
        size_t at = frame_sbuffer_begin(sb);

        envelope_request(&pk, PROTO_OP_RECEIPT, i, 0, 0, 1);
        msgpack_sbuffer_write(sb, body, len);
        frame_sbuffer_finish(sb, at);
    }
}

/* Sends n `receipt` frames of body (ids 0..n-1) in one write, before
 * any reply is read, and expects n ok replies in order. */
static void
send_receipts_at_once(int fd, const char *body, size_t len, size_t n)
{
    msgpack_sbuffer sb;
    struct e2e_reply rep;
    size_t i;

    pack_receipts(&sb, body, len, n);
    ck_assert_int_eq(e2e_send_all(fd, sb.data, sb.size), 0);
    for (i = 0; i < n; i++) {
        expect_ok(fd, i, &rep);
        e2e_reply_free(&rep);
    }
    msgpack_sbuffer_destroy(&sb);
}

static void
expect_err(int fd, int code, const char *path, struct e2e_reply *rep)
{
    ck_assert_int_eq(e2e_recv(fd, T, rep), 0);
    ck_assert_msg(!rep->r.ok, "expected an error reply");
    ck_assert_str_eq(proto_code_name(rep->r.err.code), proto_code_name(code));
    if (path != NULL)
        ck_assert_str_eq(rep->r.err.path, path);
    ck_assert(rep->r.err.message[0] != '\0');
}

static uint64_t
send_receipt(int fd, uint64_t id, int has_seq, uint64_t seq,
             const struct e2e_receipt *r, struct e2e_reply *rep)
{
    size_t len;
    char *body = e2e_receipt_bytes(r, &len);

    ck_assert_ptr_nonnull(body);
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_RECEIPT, id, has_seq, seq, body, len), 0);
    free(body);
    expect_ok(fd, id, rep);
    return e2e_get_uint(rep->r.result, "receipt_id");
}

/* Packs a query body {kind, ...} from key/value string pairs and numbers. */
static void
query(int fd, uint64_t id, const char *kind, uint64_t limit, uint64_t before_id,
      const char *skey, const char *sval, struct e2e_reply *rep)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1 + (limit > 0) + (before_id > 0) + (skey != NULL));
    envelope_pack_cstr(&pk, "kind");
    envelope_pack_cstr(&pk, kind);
    if (limit > 0) {
        envelope_pack_cstr(&pk, "limit");
        msgpack_pack_uint64(&pk, limit);
    }
    if (before_id > 0) {
        envelope_pack_cstr(&pk, "before_id");
        msgpack_pack_uint64(&pk, before_id);
    }
    if (skey != NULL) {
        envelope_pack_cstr(&pk, skey);
        envelope_pack_cstr(&pk, sval);
    }
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_QUERY, id, 0, 0, sb.data, sb.size), 0);
    msgpack_sbuffer_destroy(&sb);
    expect_ok(fd, id, rep);
}

static const msgpack_object *
rows_of(const struct e2e_reply *rep)
{
    const msgpack_object *rows = e2e_get(rep->r.result, "rows");

    ck_assert_ptr_nonnull(rows);
    ck_assert_int_eq(rows->type, MSGPACK_OBJECT_ARRAY);
    return rows;
}

/* ---- hello, ping, unknown ops ---- */

START_TEST(test_e2e_hello_and_ping)
{
    struct e2e_reply rep;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    char big[300];
    int fd;

    start(NULL);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    envelope_pack_cstr(&pk, "protocol");
    msgpack_pack_uint64(&pk, 1);
    envelope_pack_cstr(&pk, "source");
    envelope_pack_cstr(&pk, "node-17/runtime-3");
    envelope_pack_cstr(&pk, "token");
    envelope_pack_cstr(&pk, "secret");
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_HELLO, 41, 0, 0, sb.data, sb.size), 0);
    expect_ok(fd, 41, &rep);
    ck_assert_uint_eq(e2e_get_uint(rep.r.result, "protocol"), 1);
    ck_assert(
        e2e_get_str_eq(rep.r.result, "server", "receiptd/" RECEIPTD_VERSION));
    ck_assert_uint_eq(e2e_get_uint(rep.r.result, "max_frame"), 1u << 20);
    ck_assert_uint_eq(e2e_get_uint(rep.r.result, "max_batch"), 10000);
    e2e_reply_free(&rep);

    ck_assert_int_eq(e2e_request(fd, PROTO_OP_PING, 42, 0, 0, NULL, 0), 0);
    expect_ok(fd, 42, &rep);
    ck_assert_int_eq(rep.r.result->type, MSGPACK_OBJECT_MAP);
    ck_assert_uint_eq(rep.r.result->via.map.size, 0);
    e2e_reply_free(&rep);

    /* protocol 2 is refused, the connection stays usable */
    sb.size = 0;
    msgpack_pack_map(&pk, 1);
    envelope_pack_cstr(&pk, "protocol");
    msgpack_pack_uint64(&pk, 2);
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_HELLO, 43, 0, 0, sb.data, sb.size), 0);
    expect_err(fd, PROTO_EINVALID, "protocol", &rep);
    e2e_reply_free(&rep);

    /* a source over 256 bytes */
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    sb.size = 0;
    msgpack_pack_map(&pk, 2);
    envelope_pack_cstr(&pk, "protocol");
    msgpack_pack_uint64(&pk, 1);
    envelope_pack_cstr(&pk, "source");
    envelope_pack_cstr(&pk, big);
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_HELLO, 44, 0, 0, sb.data, sb.size), 0);
    expect_err(fd, PROTO_EINVALID, "source", &rep);
    e2e_reply_free(&rep);

    ck_assert_int_eq(e2e_request(fd, PROTO_OP_PING, 45, 0, 0, NULL, 0), 0);
    expect_ok(fd, 45, &rep);
    e2e_reply_free(&rep);
    msgpack_sbuffer_destroy(&sb);
    close(fd);
}
END_TEST

START_TEST(test_e2e_unimplemented_ops_and_kinds)
{
    static const int ops[] = { PROTO_OP_PLAN, PROTO_OP_RETENTION,
                               PROTO_OP_READBACK };
    struct e2e_reply rep;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    unsigned i;
    int fd;

    start(NULL);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    /* Implemented since issue 5: an empty body breaks their rules
     * (tests/e2e/e2e_plan.c covers them). */
    for (i = 0; i < 3; i++) {
        ck_assert_int_eq(e2e_request(fd, ops[i], i, 0, 0, "\x80", 1), 0);
        expect_err(fd, PROTO_EINVALID, NULL, &rep);
        e2e_reply_free(&rep);
    }
    /* an op outside the protocol */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    envelope_pack_cstr(&pk, "op");
    envelope_pack_cstr(&pk, "launch");
    envelope_pack_cstr(&pk, "id");
    msgpack_pack_uint64(&pk, 9);
    ck_assert_int_eq(e2e_send_frame(fd, sb.data, sb.size), 0);
    expect_err(fd, PROTO_EUNKNOWN_OP, "op", &rep);
    ck_assert_uint_eq(rep.r.id, 9);
    e2e_reply_free(&rep);
    /* an unknown query kind */
    sb.size = 0;
    msgpack_pack_map(&pk, 1);
    envelope_pack_cstr(&pk, "kind");
    envelope_pack_cstr(&pk, "horoscope");
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_QUERY, 10, 0, 0, sb.data, sb.size), 0);
    expect_err(fd, PROTO_EINVALID, "kind", &rep);
    e2e_reply_free(&rep);
    /* a bad filter */
    sb.size = 0;
    msgpack_pack_map(&pk, 2);
    envelope_pack_cstr(&pk, "kind");
    envelope_pack_cstr(&pk, "receipts");
    envelope_pack_cstr(&pk, "limit");
    msgpack_pack_uint64(&pk, 10001);
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_QUERY, 11, 0, 0, sb.data, sb.size), 0);
    expect_err(fd, PROTO_EINVALID, "limit", &rep);
    e2e_reply_free(&rep);
    msgpack_sbuffer_destroy(&sb);
    close(fd);
}
END_TEST

/* ---- receipts ---- */

START_TEST(test_e2e_receipt_stored_and_read_back)
{
    struct e2e_receipt r = { .schema = 3,
                             .plan = "plan-x",
                             .graph = "g1",
                             .requested = "cuda",
                             .executed = "cpu",
                             .coverage = 0x3ffffff,
                             .decode_steps = UINT64_MAX };
    const msgpack_object *rows, *row, *counters;
    struct e2e_reply rep;
    uint64_t id1, id2;
    int fd;

    start(NULL);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "node-1"), 0);
    id1 = send_receipt(fd, 2, 1, 77, &r, &rep);
    ck_assert(e2e_get_str_eq(rep.r.result, "fallback", "fallback"));
    ck_assert_ptr_null(e2e_get(rep.r.result, "duplicate"));
    e2e_reply_free(&rep);
    r.executed = "cuda";
    r.plan = "plan-y";
    r.decode_steps = 5;
    id2 = send_receipt(fd, 3, 0, 0, &r, &rep);
    ck_assert(e2e_get_str_eq(rep.r.result, "fallback", "clean"));
    e2e_reply_free(&rep);
    ck_assert_uint_gt(id2, id1);

    query(fd, 4, "receipts", 0, 0, NULL, NULL, &rep);
    rows = rows_of(&rep);
    ck_assert_uint_eq(rows->via.array.size, 2);
    /* newest first */
    ck_assert_uint_eq(e2e_get_uint(&rows->via.array.ptr[0], "receipt_id"), id2);
    row = &rows->via.array.ptr[1];
    ck_assert_uint_eq(e2e_get_uint(row, "receipt_id"), id1);
    ck_assert(e2e_get_str_eq(row, "source", "node-1"));
    ck_assert_uint_eq(e2e_get_uint(row, "seq"), 77);
    ck_assert(e2e_get_str_eq(row, "fallback", "fallback"));
    ck_assert(e2e_get_str_eq(row, "prepared_plan_id", "plan-x"));
    ck_assert(e2e_get_str_eq(row, "requested_backend", "cuda"));
    ck_assert(e2e_get_str_eq(row, "executed_backend", "cpu"));
    ck_assert_uint_eq(e2e_get_uint(row, "schema_version"), 3);
    ck_assert_uint_gt(e2e_get_uint(row, "received_at"), 1600000000000ull);
    counters = e2e_get(row, "counters");
    /* u64 values survive SQLite's signed integers bit for bit */
    ck_assert_uint_eq(e2e_get_uint(counters, "decode_steps"), UINT64_MAX);
    ck_assert_uint_eq(e2e_get_uint(counters, "rebuild_outcomes"), 112);
    ck_assert_uint_eq(
        e2e_get_uint(e2e_get(row, "latency"), "inter_token_latency_us"), 13);
    ck_assert(e2e_get(&rows->via.array.ptr[0], "seq")->type ==
              MSGPACK_OBJECT_NIL);
    ck_assert(e2e_get_str_eq(&rows->via.array.ptr[0], "fallback", "clean"));
    ck_assert_uint_eq(e2e_get_uint(rep.r.result, "truncated") == UINT64_MAX, 1);
    ck_assert(e2e_get(rep.r.result, "truncated")->via.boolean == 0);
    e2e_reply_free(&rep);

    /* filters and paging */
    query(fd, 5, "receipts", 0, 0, "plan", "plan-x", &rep);
    rows = rows_of(&rep);
    ck_assert_uint_eq(rows->via.array.size, 1);
    ck_assert_uint_eq(e2e_get_uint(&rows->via.array.ptr[0], "receipt_id"), id1);
    e2e_reply_free(&rep);
    query(fd, 6, "receipts", 1, 0, NULL, NULL, &rep);
    ck_assert_uint_eq(rows_of(&rep)->via.array.size, 1);
    ck_assert(e2e_get(rep.r.result, "truncated")->via.boolean == 1);
    e2e_reply_free(&rep);
    query(fd, 7, "receipts", 0, id2, NULL, NULL, &rep);
    rows = rows_of(&rep);
    ck_assert_uint_eq(rows->via.array.size, 1);
    ck_assert_uint_eq(e2e_get_uint(&rows->via.array.ptr[0], "receipt_id"), id1);
    e2e_reply_free(&rep);
    query(fd, 8, "receipts", 0, 0, "status", "clean", &rep);
    rows = rows_of(&rep);
    ck_assert_uint_eq(rows->via.array.size, 1);
    ck_assert_uint_eq(e2e_get_uint(&rows->via.array.ptr[0], "receipt_id"), id2);
    e2e_reply_free(&rep);
    query(fd, 9, "receipts", 0, 0, "source", "nobody", &rep);
    ck_assert_uint_eq(rows_of(&rep)->via.array.size, 0);
    e2e_reply_free(&rep);

    query(fd, 10, "stats", 0, 0, NULL, NULL, &rep);
    rows = rows_of(&rep);
    ck_assert_uint_eq(rows->via.array.size, 1);
    ck_assert_uint_eq(e2e_get_uint(&rows->via.array.ptr[0], "accepted"), 2);
    ck_assert_uint_eq(e2e_get_uint(&rows->via.array.ptr[0], "connections"), 1);
    ck_assert_uint_gt(e2e_get_uint(&rows->via.array.ptr[0], "store_size_bytes"),
                      0);
    e2e_reply_free(&rep);
    close(fd);
}
END_TEST

START_TEST(test_e2e_unknown_keys_kept_and_read_back)
{
    struct e2e_receipt r = { .schema = 3 };
    const msgpack_object *row;
    struct e2e_reply rep;
    msgpack_sbuffer sb;
    size_t len;
    char *body = e2e_receipt_bytes(&r, &len);
    int fd;

    start(NULL);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    /* The same receipt with one more top-level key, as a newer producer
     * would send: the map header 0x8c (12 keys) becomes 0x8d. */
    ck_assert_uint_eq((unsigned char)body[0], 0x8c);
    msgpack_sbuffer_init(&sb);
    msgpack_sbuffer_write(&sb, "\x8d", 1);
    msgpack_sbuffer_write(&sb, body + 1, len - 1);
    msgpack_sbuffer_write(&sb,
                          "\xa7"
                          "flavour"
                          "\xa5"
                          "mango",
                          14);
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_RECEIPT, 1, 0, 0, sb.data, sb.size), 0);
    expect_ok(fd, 1, &rep);
    e2e_reply_free(&rep);
    query(fd, 2, "receipts", 1, 0, NULL, NULL, &rep);
    row = &rows_of(&rep)->via.array.ptr[0];
    ck_assert(e2e_get_str_eq(row, "flavour", "mango"));
    ck_assert(e2e_get_str_eq(row, "stop_reason", "eos"));
    e2e_reply_free(&rep);
    msgpack_sbuffer_destroy(&sb);
    free(body);
    close(fd);
}
END_TEST

START_TEST(test_e2e_slow_query_is_interrupted)
{
    static const char *const extra[] = { "--query-timeout-ms", "1", NULL };
    struct e2e_receipt r = { .schema = 3 };
    struct e2e_reply rep;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer qb;
    int fd, i;

    start(extra);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 1000);
    for (i = 0; i < 1000; i++)
        e2e_pack_receipt(&pk, &r);
    for (i = 0; i < 10; i++) {
        ck_assert_int_eq(e2e_request(fd, PROTO_OP_RECEIPTS, (uint64_t)i, 0, 0,
                                     sb.data, sb.size),
                         0);
        expect_ok(fd, (uint64_t)i, &rep);
        e2e_reply_free(&rep);
    }
    /* 10,000 rows cannot be read and encoded within 1 ms. */
    msgpack_sbuffer_init(&qb);
    msgpack_packer_init(&pk, &qb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    envelope_pack_cstr(&pk, "kind");
    envelope_pack_cstr(&pk, "receipts");
    envelope_pack_cstr(&pk, "limit");
    msgpack_pack_uint64(&pk, 10000);
    ck_assert_int_eq(e2e_request(fd, PROTO_OP_QUERY, 9, 0, 0, qb.data, qb.size),
                     0);
    expect_err(fd, PROTO_EOVERLOADED, NULL, &rep);
    ck_assert_ptr_nonnull(strstr(rep.r.err.message, "query_timeout_ms"));
    e2e_reply_free(&rep);
    /* the connection and the daemon carry on */
    ck_assert_int_eq(e2e_request(fd, PROTO_OP_PING, 10, 0, 0, NULL, 0), 0);
    expect_ok(fd, 10, &rep);
    e2e_reply_free(&rep);
    msgpack_sbuffer_destroy(&qb);
    msgpack_sbuffer_destroy(&sb);
    close(fd);
}
END_TEST

/* A write keeps the source its connection had when the write arrived,
 * even when a pipelined hello changes it before the COMMIT. */
START_TEST(test_e2e_write_keeps_source_of_its_time)
{
    struct e2e_receipt r = { .schema = 3 };
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct e2e_reply rep;
    size_t len, i, n = 100, k;
    char *body = e2e_receipt_bytes(&r, &len);
    static const char *const src[2] = { "source-a", "source-b" };
    int fd;

    start(NULL);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (i = 0; i < 2 * n; i++) {
        size_t at = frame_sbuffer_begin(&sb);
        envelope_request(&pk, PROTO_OP_HELLO, 2 * i, 0, 0, 1);
        msgpack_pack_map(&pk, 2);
        envelope_pack_cstr(&pk, "protocol");
        msgpack_pack_uint64(&pk, 1);
        envelope_pack_cstr(&pk, "source");
        envelope_pack_cstr(&pk, src[i % 2]);
        frame_sbuffer_finish(&sb, at);
        at = frame_sbuffer_begin(&sb);
        envelope_request(&pk, PROTO_OP_RECEIPT, 2 * i + 1, 1, i / 2, 1);
        msgpack_sbuffer_write(&sb, body, len);
        frame_sbuffer_finish(&sb, at);
    }
    ck_assert_int_eq(e2e_send_all(fd, sb.data, sb.size), 0);
    for (i = 0; i < 4 * n; i++) {
        expect_ok(fd, i, &rep);
        ck_assert_ptr_null(e2e_get(rep.r.result, "duplicate"));
        e2e_reply_free(&rep);
    }
    for (k = 0; k < 2; k++) {
        const msgpack_object *rows;
        query(fd, 1000 + k, "receipts", 1000, 0, "source", src[k], &rep);
        rows = rows_of(&rep);
        ck_assert_uint_eq(rows->via.array.size, n);
        e2e_reply_free(&rep);
    }
    msgpack_sbuffer_destroy(&sb);
    free(body);
    close(fd);
}
END_TEST

/* Sends a receipts query with one unsigned filter and one string filter
 * (either may be NULL) and returns the number of rows. */
static uint32_t
count_rows(int fd, uint64_t id, const char *ukey, uint64_t uval,
           const char *skey, const char *sval)
{
    struct e2e_reply rep;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint32_t n;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1 + (ukey != NULL) + (skey != NULL));
    envelope_pack_cstr(&pk, "kind");
    envelope_pack_cstr(&pk, "receipts");
    if (ukey != NULL) {
        envelope_pack_cstr(&pk, ukey);
        msgpack_pack_uint64(&pk, uval);
    }
    if (skey != NULL) {
        envelope_pack_cstr(&pk, skey);
        envelope_pack_cstr(&pk, sval);
    }
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_QUERY, id, 0, 0, sb.data, sb.size), 0);
    msgpack_sbuffer_destroy(&sb);
    expect_ok(fd, id, &rep);
    n = rows_of(&rep)->via.array.size;
    e2e_reply_free(&rep);
    return n;
}

START_TEST(test_e2e_query_filters_select_rows)
{
    struct e2e_receipt a = { .schema = 3,
                             .requested = "cuda",
                             .executed = "cpu",
                             .model = "m-1",
                             .graph = "g-1" };
    struct e2e_receipt b = { .schema = 2,
                             .requested = "metal",
                             .executed = "metal",
                             .model = "m-2",
                             .graph = "g-2",
                             .coverage = 0x40 };
    struct e2e_reply rep;
    uint64_t now;
    int fd;

    start(NULL);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    send_receipt(fd, 1, 0, 0, &a, &rep);
    now = e2e_get_uint(rep.r.result, "receipt_id");
    ck_assert_uint_ne(now, UINT64_MAX);
    e2e_reply_free(&rep);
    send_receipt(fd, 2, 0, 0, &b, &rep);
    e2e_reply_free(&rep);
    now = (uint64_t)time(NULL) * 1000u;

    ck_assert_uint_eq(count_rows(fd, 3, NULL, 0, NULL, NULL), 2);
    ck_assert_uint_eq(count_rows(fd, 4, NULL, 0, "requested", "cuda"), 1);
    ck_assert_uint_eq(count_rows(fd, 5, NULL, 0, "executed", "metal"), 1);
    ck_assert_uint_eq(count_rows(fd, 6, NULL, 0, "model", "m-2"), 1);
    ck_assert_uint_eq(count_rows(fd, 7, NULL, 0, "graph", "g-1"), 1);
    ck_assert_uint_eq(count_rows(fd, 8, NULL, 0, "status", "fallback"), 1);
    ck_assert_uint_eq(count_rows(fd, 9, NULL, 0, "status", "unproven"), 0);
    ck_assert_uint_eq(count_rows(fd, 10, "since", now - 60000, NULL, NULL), 2);
    ck_assert_uint_eq(count_rows(fd, 11, "since", now + 3600000, NULL, NULL),
                      0);
    ck_assert_uint_eq(count_rows(fd, 12, "until", now - 60000, NULL, NULL), 0);
    ck_assert_uint_eq(count_rows(fd, 13, "until", now + 3600000, NULL, NULL),
                      2);
    ck_assert_uint_eq(count_rows(fd, 14, NULL, 0, "source", ""), 2);
    /* a backend that does not exist is the caller's mistake */
    ck_assert_int_eq(e2e_request(fd, PROTO_OP_QUERY, 15, 0, 0,
                                 "\x82\xa4kind\xa8receipts\xa9requested"
                                 "\xa3tpu",
                                 29),
                     0);
    expect_err(fd, PROTO_EINVALID, "requested", &rep);
    e2e_reply_free(&rep);
    close(fd);
}
END_TEST

START_TEST(test_e2e_pipelined_replies_in_order)
{
    struct e2e_receipt r = { .schema = 3, .coverage = 0x7f };
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct e2e_reply rep;
    size_t len, i, n = 600;
    char *body = e2e_receipt_bytes(&r, &len);
    int fd;

    start(NULL);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    /* Every frame goes out before any reply is read: writes (which wait
     * for a COMMIT), pings (answered at once) and queries (answered from
     * a thread) interleave, and the replies must still come in order. */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (i = 0; i < n; i++) {
        size_t start_at = frame_sbuffer_begin(&sb);
        switch (i % 3) {
        case 0:
            envelope_request(&pk, PROTO_OP_RECEIPT, i, 0, 0, 1);
            msgpack_sbuffer_write(&sb, body, len);
            break;
        case 1:
            envelope_request(&pk, PROTO_OP_PING, i, 0, 0, 0);
            break;
        default:
            envelope_request(&pk, PROTO_OP_QUERY, i, 0, 0, 1);
            msgpack_pack_map(&pk, 2);
            envelope_pack_cstr(&pk, "kind");
            envelope_pack_cstr(&pk, "receipts");
            envelope_pack_cstr(&pk, "limit");
            msgpack_pack_uint64(&pk, 1);
            break;
        }
        frame_sbuffer_finish(&sb, start_at);
    }
    ck_assert_int_eq(e2e_send_all(fd, sb.data, sb.size), 0);
    for (i = 0; i < n; i++) {
        expect_ok(fd, i, &rep);
        e2e_reply_free(&rep);
    }
    msgpack_sbuffer_destroy(&sb);
    free(body);
    close(fd);
}
END_TEST

/* Where the WAL is synced: by default the writer's syncer thread syncs
 * it after commit groups (stats wal_syncs counts them); with
 * --sync-in-commit true SQLite syncs inside COMMIT and the syncer is
 * not there. Either way every write is answered ok after its sync. */
START_TEST(test_e2e_wal_synced_where_configured)
{
    static const char *const in_commit[] = { "--sync-in-commit", "true", NULL };
    struct e2e_receipt r = { .schema = 3, .coverage = 0x7f };
    size_t len, n = 50;
    char *body = e2e_receipt_bytes(&r, &len);
    uint64_t syncs;
    int fd;

    start(_i == 0 ? NULL : in_commit);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    send_receipts_at_once(fd, body, len, n);
    ck_assert_uint_eq(e2e_stat(fd, n, "accepted"), n);
    syncs = e2e_stat(fd, n + 1, "wal_syncs");
    if (_i == 0)
        ck_assert_uint_gt(syncs, 0);
    else
        ck_assert_uint_eq(syncs, 0);
    free(body);
    close(fd);
}
END_TEST

START_TEST(test_e2e_dedupe_across_reconnects_and_restart)
{
    struct e2e_receipt r = { .schema = 2, .coverage = 0x40 };
    struct e2e_reply rep;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint64_t id, again;
    int fd, status, pass;
    char *first = NULL;
    size_t first_len = 0;

    start(NULL);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "node-9/rt-1"), 0);
    id = send_receipt(fd, 1, 1, 1000, &r, &rep);
    ck_assert(e2e_get_str_eq(rep.r.result, "fallback", "clean"));
    e2e_reply_free(&rep);

    /* a batch with one bad item, seq 1001 */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 2);
    e2e_pack_receipt(&pk, &r);
    msgpack_pack_str_with_body(&pk, "nope", 4);
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_RECEIPTS, 2, 1, 1001, sb.data, sb.size), 0);
    expect_ok(fd, 2, &rep);
    ck_assert_uint_eq(e2e_get_uint(rep.r.result, "accepted"), 1);
    e2e_reply_free(&rep);
    close(fd);

    for (pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            ck_assert_int_eq(e2e_stop(&d, SIGTERM, 5000, &status), 0);
            ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            ck_assert_int_eq(e2e_restart(&d, NULL), 0);
        }
        fd = e2e_connect(&d);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(e2e_hello(fd, "node-9/rt-1"), 0);
        again = send_receipt(fd, 3, 1, 1000, &r, &rep);
        ck_assert_uint_eq(again, id);
        ck_assert(e2e_get(rep.r.result, "duplicate")->via.boolean);
        ck_assert(e2e_get_str_eq(rep.r.result, "fallback", "clean"));
        e2e_reply_free(&rep);
        ck_assert_int_eq(
            e2e_request(fd, PROTO_OP_RECEIPTS, 4, 1, 1001, sb.data, sb.size),
            0);
        expect_ok(fd, 4, &rep);
        ck_assert(e2e_get(rep.r.result, "duplicate")->via.boolean);
        ck_assert_uint_eq(e2e_get_uint(rep.r.result, "accepted"), 1);
        ck_assert_uint_eq(e2e_get(rep.r.result, "rejected")->via.array.size, 1);
        e2e_reply_free(&rep);
        /* the same seq from another source is a new write */
        if (pass == 0) {
            int fd2 = e2e_connect(&d);
            ck_assert_int_eq(e2e_hello(fd2, "node-10/rt-1"), 0);
            ck_assert_uint_ne(send_receipt(fd2, 5, 1, 1000, &r, &rep), id);
            ck_assert_ptr_null(e2e_get(rep.r.result, "duplicate"));
            e2e_reply_free(&rep);
            close(fd2);
        }
        query(fd, 6, "receipts", 0, 0, "source", "node-9/rt-1", &rep);
        ck_assert_uint_eq(rows_of(&rep)->via.array.size, 2);
        e2e_reply_free(&rep);
        close(fd);
    }
    (void)first;
    (void)first_len;
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

/*
 * A seq names one write of a source: a resend of the same bytes is a
 * duplicate; other bytes, or another op, under a committed seq get
 * `conflict` at path "seq", store nothing, and leave the payload in
 * quarantine. The same after a restart (the record is then a seq run or
 * a dedupe row), and `stats` counts the conflicts.
 */
START_TEST(test_e2e_reused_seq_is_a_conflict)
{
    struct e2e_receipt a = { .schema = 2, .coverage = 0x41, .decode_steps = 1 };
    struct e2e_receipt b = { .schema = 2, .coverage = 0x41, .decode_steps = 2 };
    const char *const extra[] = { "--chunk-receipts", "4", NULL };
    struct e2e_reply rep;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    uint64_t id, rid = 10;
    char *body;
    size_t len;
    int fd, status, pass, i;

    start(extra);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "node-3/rt-1"), 0);
    id = send_receipt(fd, 1, 1, 7, &a, &rep);
    e2e_reply_free(&rep);
    /* a batch of one under seq 8 */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 1);
    e2e_pack_receipt(&pk, &a);
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_RECEIPTS, 2, 1, 8, sb.data, sb.size), 0);
    expect_ok(fd, 2, &rep);
    e2e_reply_free(&rep);
    for (pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            /* Enough receipts from elsewhere to make chunks, then a
             * restart. */
            for (i = 0; i < 9; i++) {
                send_receipt(fd, rid++, 1, 100 + (uint64_t)i, &a, &rep);
                e2e_reply_free(&rep);
            }
            close(fd);
            ck_assert_int_eq(e2e_stop(&d, SIGTERM, 5000, &status), 0);
            ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            ck_assert_int_eq(e2e_restart(&d, NULL), 0);
            fd = e2e_connect(&d);
            ck_assert_int_ge(fd, 0);
            ck_assert_int_eq(e2e_hello(fd, "node-3/rt-1"), 0);
        }
        ck_assert_uint_eq(send_receipt(fd, rid++, 1, 7, &a, &rep), id);
        ck_assert(e2e_get(rep.r.result, "duplicate")->via.boolean);
        e2e_reply_free(&rep);
        body = e2e_receipt_bytes(&b, &len);
        ck_assert_int_eq(
            e2e_request(fd, PROTO_OP_RECEIPT, rid++, 1, 7, body, len), 0);
        expect_err(fd, PROTO_ECONFLICT, "seq", &rep);
        e2e_reply_free(&rep);
        /* a `receipt` under the batch's seq, with the batch's own bytes */
        ck_assert_int_eq(
            e2e_request(fd, PROTO_OP_RECEIPT, rid++, 1, 8, body, len), 0);
        expect_err(fd, PROTO_ECONFLICT, "seq", &rep);
        e2e_reply_free(&rep);
        free(body);
        ck_assert_int_eq(
            e2e_request(fd, PROTO_OP_RECEIPTS, rid, 1, 8, sb.data, sb.size), 0);
        expect_ok(fd, rid++, &rep);
        ck_assert(e2e_get(rep.r.result, "duplicate")->via.boolean);
        e2e_reply_free(&rep);
        ck_assert_uint_eq(e2e_stat(fd, rid++, "conflicts"), 2);
    }
    /* The four conflicting payloads are kept; no receipt of b. */
    query(fd, rid++, "quarantine", 0, 0, NULL, NULL, &rep);
    ck_assert_uint_eq(rows_of(&rep)->via.array.size, 4);
    for (i = 0; i < 4; i++)
        ck_assert(e2e_get_str_eq(&rows_of(&rep)->via.array.ptr[i], "code",
                                 "conflict"));
    e2e_reply_free(&rep);
    query(fd, rid++, "receipts", 0, 0, "source", "node-3/rt-1", &rep);
    ck_assert_uint_eq(rows_of(&rep)->via.array.size, 2 + 9);
    for (i = 0; i < 11; i++)
        ck_assert_uint_eq(
            e2e_get_uint(e2e_get(&rows_of(&rep)->via.array.ptr[i], "counters"),
                         "decode_steps"),
            1);
    e2e_reply_free(&rep);
    msgpack_sbuffer_destroy(&sb);
    close(fd);
}
END_TEST

static sqlite3 *
open_ro(void)
{
    sqlite3 *db = NULL;

    ck_assert_int_eq(sqlite3_open_v2(d.db, &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    return db;
}

START_TEST(test_e2e_batch_rejects_items_into_quarantine)
{
    struct e2e_receipt r = { .schema = 3 };
    const msgpack_object *rej, *e;
    struct e2e_reply rep;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    size_t bad1_at, bad1_len, bad2_at, bad2_len;
    sqlite3_stmt *st;
    sqlite3 *db;
    int fd, rows = 0;

    start(NULL);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "q-node"), 0);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 5);
    e2e_pack_receipt(&pk, &r);
    /* [1]: a counter as a string */
    bad1_at = sb.size;
    msgpack_pack_map(&pk, 1);
    envelope_pack_cstr(&pk, "schema_version");
    msgpack_pack_uint32(&pk, 3); /* uint32 form: kept byte for byte */
    bad1_len = sb.size - bad1_at;
    e2e_pack_receipt(&pk, &r);
    /* [3]: schema 9 */
    bad2_at = sb.size;
    msgpack_pack_array(&pk, 1);
    msgpack_pack_uint64(&pk, 9);
    bad2_len = sb.size - bad2_at;
    e2e_pack_receipt(&pk, &r);
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_RECEIPTS, 7, 0, 0, sb.data, sb.size), 0);
    expect_ok(fd, 7, &rep);
    ck_assert_uint_eq(e2e_get_uint(rep.r.result, "accepted"), 3);
    rej = e2e_get(rep.r.result, "rejected");
    ck_assert_uint_eq(rej->via.array.size, 2);
    e = &rej->via.array.ptr[0];
    ck_assert_uint_eq(e2e_get_uint(e, "index"), 1);
    ck_assert(e2e_get_str_eq(e, "code", "invalid"));
    ck_assert_uint_gt(e2e_get(e, "path")->via.str.size, 0);
    ck_assert_uint_gt(e2e_get(e, "message")->via.str.size, 0);
    e = &rej->via.array.ptr[1];
    ck_assert_uint_eq(e2e_get_uint(e, "index"), 3);
    ck_assert(e2e_get_str_eq(e, "code", "unsupported_schema"));
    e2e_reply_free(&rep);

    /* a single bad receipt: error reply, connection stays usable */
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_RECEIPT, 8, 0, 0, sb.data + bad2_at, bad2_len),
        0);
    expect_err(fd, PROTO_EUNSUPPORTED_SCHEMA, NULL, &rep);
    e2e_reply_free(&rep);
    ck_assert_int_eq(e2e_request(fd, PROTO_OP_PING, 9, 0, 0, NULL, 0), 0);
    expect_ok(fd, 9, &rep);
    e2e_reply_free(&rep);

    db = open_ro();
    ck_assert_int_eq(sqlite3_prepare_v2(db,
                                        "SELECT q.op, q.code, q.path, "
                                        "q.message, q.size, q.raw, s.value "
                                        "FROM quarantine q JOIN strings s ON "
                                        "s.id = q.source_id ORDER BY q.id",
                                        -1, &st, NULL),
                     SQLITE_OK);
    /* One row for the batch's two rejected items (issue 17: one row per
     * batch), their bytes as one array, named by the first; then the
     * single receipt's row. */
    while (sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *blob = sqlite3_column_blob(st, 5);
        size_t want_len = rows == 0 ? 1 + bad1_len + bad2_len : bad2_len;

        ck_assert_str_eq((const char *)sqlite3_column_text(st, 0),
                         rows == 0 ? "receipts" : "receipt");
        ck_assert_str_eq((const char *)sqlite3_column_text(st, 1),
                         rows == 0 ? "invalid" : "unsupported_schema");
        if (rows == 0)
            ck_assert_int_eq(
                strncmp((const char *)sqlite3_column_text(st, 2), "[1].", 4),
                0);
        ck_assert_int_gt(sqlite3_column_bytes(st, 3), 0);
        ck_assert_int_eq(sqlite3_column_int(st, 4), (int)want_len);
        ck_assert_int_eq(sqlite3_column_bytes(st, 5), (int)want_len);
        if (rows == 0) {
            ck_assert_uint_eq(blob[0], 0x92);
            ck_assert_mem_eq(blob + 1, sb.data + bad1_at, bad1_len);
            ck_assert_mem_eq(blob + 1 + bad1_len, sb.data + bad2_at, bad2_len);
        } else
            ck_assert_mem_eq(blob, sb.data + bad2_at, bad2_len);
        ck_assert_str_eq((const char *)sqlite3_column_text(st, 6), "q-node");
        rows++;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    ck_assert_int_eq(rows, 2);
    msgpack_sbuffer_destroy(&sb);
    close(fd);
}
END_TEST

/*
 * The quarantined bytes of every rejected item are its own, wherever it
 * sits in the batch (the batch's one row is the array of them, in order):
 * first, next to another rejected item, after accepted ones, last, and in a
 * batch where every item is rejected (dispatch walks the batch only as far as
 * the last rejected item).
 */
START_TEST(test_e2e_batch_quarantines_items_at_every_position)
{
    /* 1: rejected, 0: accepted; the second batch is all rejected. */
    static const int bad[2][6] = { { 1, 1, 0, 1, 0, 1 }, { 1, 1, 1, 0, 0, 0 } };
    static const size_t nitems[2] = { 6, 3 };
    struct e2e_receipt r = { .schema = 3 };
    size_t at[2][6], len[2][6], b, i, k, nbad;
    const msgpack_object *rej;
    struct e2e_reply rep;
    msgpack_sbuffer sb[2];
    msgpack_packer pk;
    sqlite3_stmt *st;
    sqlite3 *db;
    int fd;

    start(NULL);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "q-pos"), 0);
    for (b = 0; b < 2; b++) {
        msgpack_sbuffer_init(&sb[b]);
        msgpack_packer_init(&pk, &sb[b], msgpack_sbuffer_write);
        msgpack_pack_array(&pk, (uint32_t)nitems[b]);
        for (i = 0; i < nitems[b]; i++) {
            at[b][i] = sb[b].size;
            if (!bad[b][i]) {
                e2e_pack_receipt(&pk, &r);
            } else if (i % 2 == 0) {
                /* An unsupported schema in a uint32 form, and a few
                 * bytes that differ per item. */
                msgpack_pack_array(&pk, 2);
                msgpack_pack_uint32(&pk, 9);
                msgpack_pack_uint64(&pk, 1000 * b + i);
            } else {
                /* A map missing every field but schema_version. */
                msgpack_pack_map(&pk, 2);
                envelope_pack_cstr(&pk, "schema_version");
                msgpack_pack_uint16(&pk, 3);
                envelope_pack_cstr(&pk, "item");
                msgpack_pack_uint64(&pk, 1000 * b + i);
            }
            len[b][i] = sb[b].size - at[b][i];
        }
        ck_assert_int_eq(e2e_request(fd, PROTO_OP_RECEIPTS, 10 + b, 0, 0,
                                     sb[b].data, sb[b].size),
                         0);
        expect_ok(fd, 10 + b, &rep);
        rej = e2e_get(rep.r.result, "rejected");
        for (i = 0, nbad = 0; i < nitems[b]; i++) {
            if (!bad[b][i])
                continue;
            ck_assert_uint_gt(rej->via.array.size, nbad);
            ck_assert_uint_eq(e2e_get_uint(&rej->via.array.ptr[nbad], "index"),
                              i);
            ck_assert(
                e2e_get_str_eq(&rej->via.array.ptr[nbad], "code",
                               i % 2 == 0 ? "unsupported_schema" : "invalid"));
            nbad++;
        }
        ck_assert_uint_eq(rej->via.array.size, nbad);
        ck_assert_uint_eq(e2e_get_uint(rep.r.result, "accepted"),
                          nitems[b] - nbad);
        e2e_reply_free(&rep);
    }

    db = open_ro();
    ck_assert_int_eq(sqlite3_prepare_v2(db,
                                        "SELECT raw FROM quarantine "
                                        "ORDER BY id",
                                        -1, &st, NULL),
                     SQLITE_OK);
    /* One row per batch: an array of its rejected items, in order, each
     * with its own bytes. */
    for (b = 0; b < 2; b++) {
        const unsigned char *blob;
        size_t off = 1;

        ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
        blob = sqlite3_column_blob(st, 0);
        k = (size_t)sqlite3_column_bytes(st, 0);
        for (i = 0, nbad = 0; i < nitems[b]; i++)
            nbad += bad[b][i] != 0;
        ck_assert_uint_gt(k, 0);
        ck_assert_uint_eq(blob[0], 0x90 | nbad);
        for (i = 0; i < nitems[b]; i++) {
            if (!bad[b][i])
                continue;
            ck_assert_msg(off + len[b][i] <= k,
                          "batch %zu item %zu: row of "
                          "%zu bytes",
                          b, i, k);
            ck_assert_mem_eq(blob + off, sb[b].data + at[b][i], len[b][i]);
            off += len[b][i];
        }
        ck_assert_uint_eq(off, k);
    }
    ck_assert_int_eq(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(db);
    msgpack_sbuffer_destroy(&sb[0]);
    msgpack_sbuffer_destroy(&sb[1]);
    close(fd);
}
END_TEST

START_TEST(test_e2e_batch_over_max_batch_is_refused_whole)
{
    static const char *const extra[] = { "--max-batch", "3", NULL };
    struct e2e_receipt r = { .schema = 3 };
    struct e2e_reply rep;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int fd, i;

    start(extra);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 4);
    for (i = 0; i < 4; i++)
        e2e_pack_receipt(&pk, &r);
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_RECEIPTS, 1, 0, 0, sb.data, sb.size), 0);
    expect_err(fd, PROTO_ETOO_LARGE, NULL, &rep);
    e2e_reply_free(&rep);
    query(fd, 2, "receipts", 0, 0, NULL, NULL, &rep);
    ck_assert_uint_eq(rows_of(&rep)->via.array.size, 0);
    e2e_reply_free(&rep);
    msgpack_sbuffer_destroy(&sb);
    close(fd);
}
END_TEST

/*
 * Sends a request whose "body" key is a str or, with bin_key, a bin
 * holding the same four bytes, between "op" and "id" so that the body is
 * neither the first value of the map nor the last.
 */
static void
send_keyed(int fd, int op, uint64_t id, int bin_key, const char *body,
           size_t blen)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    envelope_pack_cstr(&pk, "op");
    envelope_pack_cstr(&pk, envelope_op_name(op));
    if (bin_key) {
        msgpack_pack_bin(&pk, 4);
        msgpack_pack_bin_body(&pk, "body", 4);
    } else {
        envelope_pack_cstr(&pk, "body");
    }
    msgpack_sbuffer_write(&sb, body, blen);
    envelope_pack_cstr(&pk, "id");
    msgpack_pack_uint64(&pk, id);
    ck_assert_int_eq(e2e_send_frame(fd, sb.data, sb.size), 0);
    msgpack_sbuffer_destroy(&sb);
}

/*
 * A "body" key sent as a bin is the key "body", as "op" and "id" are, for
 * receipt and receipts alike (receipts used to refuse it: "expected the
 * body as an array of receipts, got an array"), and what is quarantined
 * is the rejected item's own bytes under either encoding.
 */
START_TEST(test_e2e_bin_body_key_reads_like_str)
{
    struct e2e_receipt r = { .schema = 3 };
    const msgpack_object *rej;
    struct e2e_reply rep;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    size_t bad_at, bad_len;
    sqlite3_stmt *st;
    sqlite3 *db;
    uint64_t id = 1;
    int fd, bin, rows = 0;

    start(NULL);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "bin-node"), 0);
    /* [valid, schema 9] */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 2);
    e2e_pack_receipt(&pk, &r);
    bad_at = sb.size;
    msgpack_pack_array(&pk, 1);
    msgpack_pack_uint64(&pk, 9);
    bad_len = sb.size - bad_at;
    for (bin = 0; bin < 2; bin++) {
        /* One valid receipt: stored. */
        send_keyed(fd, PROTO_OP_RECEIPT, id, bin, sb.data + 1, bad_at - 1);
        expect_ok(fd, id, &rep);
        ck_assert_uint_gt(e2e_get_uint(rep.r.result, "receipt_id"), 0);
        ck_assert(e2e_get_str_eq(rep.r.result, "fallback", "unproven"));
        e2e_reply_free(&rep);
        id++;
        /* One bad receipt: refused with its code. */
        send_keyed(fd, PROTO_OP_RECEIPT, id, bin, sb.data + bad_at, bad_len);
        expect_err(fd, PROTO_EUNSUPPORTED_SCHEMA, NULL, &rep);
        ck_assert_uint_eq(rep.r.id, id);
        e2e_reply_free(&rep);
        id++;
        /* The same two as a batch: the same outcome, item by item. */
        send_keyed(fd, PROTO_OP_RECEIPTS, id, bin, sb.data, sb.size);
        expect_ok(fd, id, &rep);
        ck_assert_uint_eq(e2e_get_uint(rep.r.result, "accepted"), 1);
        rej = e2e_get(rep.r.result, "rejected");
        ck_assert_ptr_nonnull(rej);
        ck_assert_uint_eq(rej->via.array.size, 1);
        ck_assert_uint_eq(e2e_get_uint(&rej->via.array.ptr[0], "index"), 1);
        ck_assert(e2e_get_str_eq(&rej->via.array.ptr[0], "code",
                                 "unsupported_schema"));
        e2e_reply_free(&rep);
        id++;
    }
    query(fd, id, "receipts", 0, 0, "source", "bin-node", &rep);
    ck_assert_uint_eq(rows_of(&rep)->via.array.size, 4);
    e2e_reply_free(&rep);

    db = open_ro();
    ck_assert_int_eq(sqlite3_prepare_v2(db,
                                        "SELECT op, code, raw FROM "
                                        "quarantine ORDER BY id",
                                        -1, &st, NULL),
                     SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        ck_assert_str_eq((const char *)sqlite3_column_text(st, 0),
                         rows % 2 == 0 ? "receipt" : "receipts");
        ck_assert_str_eq((const char *)sqlite3_column_text(st, 1),
                         "unsupported_schema");
        /* A batch's row is the array of its rejected items (one here). */
        if (rows % 2 == 0) {
            ck_assert_int_eq(sqlite3_column_bytes(st, 2), (int)bad_len);
            ck_assert_mem_eq(sqlite3_column_blob(st, 2), sb.data + bad_at,
                             bad_len);
        } else {
            const unsigned char *blob = sqlite3_column_blob(st, 2);

            ck_assert_int_eq(sqlite3_column_bytes(st, 2), (int)bad_len + 1);
            ck_assert_uint_eq(blob[0], 0x91);
            ck_assert_mem_eq(blob + 1, sb.data + bad_at, bad_len);
        }
        rows++;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    ck_assert_int_eq(rows, 4);
    msgpack_sbuffer_destroy(&sb);
    close(fd);
}
END_TEST

/* ---- lifecycle ---- */

START_TEST(test_e2e_sigterm_drains_and_removes_socket)
{
    struct e2e_receipt r = { .schema = 3 };
    msgpack_sbuffer sb;
    struct e2e_reply rep;
    struct stat st;
    size_t len, i, n = 300;
    char *body = e2e_receipt_bytes(&r, &len);
    int fd, status;

    start(NULL);
    ck_assert_int_eq(stat(d.sock, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0660);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    pack_receipts(&sb, body, len, n);
    ck_assert_int_eq(e2e_send_all(fd, sb.data, sb.size), 0);
    /* Give the daemon time to read the frames, then stop it while the
     * writes may still be queued: each one read must still be answered. */
    usleep(100000);
    kill(d.pid, SIGTERM);
    for (i = 0; i < n; i++) {
        expect_ok(fd, i, &rep);
        e2e_reply_free(&rep);
    }
    ck_assert_int_eq(e2e_wait_closed(fd, 5000), 1);
    ck_assert_int_eq(e2e_stop(&d, 0, 5000, &status), 0);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 0);
    ck_assert_int_ne(stat(d.sock, &st), 0);
    msgpack_sbuffer_destroy(&sb);
    free(body);
    close(fd);
}
END_TEST

START_TEST(test_e2e_sigkill_keeps_every_acknowledged_receipt)
{
    struct e2e_receipt r = { .schema = 3 };
    msgpack_sbuffer sb;
    struct e2e_reply rep;
    uint64_t acked[400];
    size_t len, i, n = 400, got = 0;
    char *body = e2e_receipt_bytes(&r, &len);
    const msgpack_object *rows;
    int fd, status;

    start(NULL);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    pack_receipts(&sb, body, len, n);
    ck_assert_int_eq(e2e_send_all(fd, sb.data, sb.size), 0);
    /* Kill the daemon half-way through the acknowledgements. */
    for (i = 0; i < n; i++) {
        if (i == n / 2)
            kill(d.pid, SIGKILL);
        if (e2e_recv(fd, T, &rep) != 0)
            break;
        ck_assert(rep.r.ok);
        acked[got++] = e2e_get_uint(rep.r.result, "receipt_id");
        e2e_reply_free(&rep);
    }
    close(fd);
    ck_assert_int_ge(got, n / 2);
    e2e_stop(&d, SIGKILL, 5000, &status);
    ck_assert_int_eq(e2e_restart(&d, NULL), 0);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    query(fd, 1, "receipts", 10000, 0, NULL, NULL, &rep);
    rows = rows_of(&rep);
    ck_assert_uint_ge(rows->via.array.size, got);
    for (i = 0; i < got; i++) {
        uint32_t k;
        int found = 0;
        for (k = 0; k < rows->via.array.size && !found; k++)
            found =
                e2e_get_uint(&rows->via.array.ptr[k], "receipt_id") == acked[i];
        ck_assert_msg(found, "acknowledged receipt %llu is missing",
                      (unsigned long long)acked[i]);
    }
    e2e_reply_free(&rep);
    msgpack_sbuffer_destroy(&sb);
    free(body);
    close(fd);
}
END_TEST

START_TEST(test_e2e_full_store_answers_unavailable_and_resumes)
{
    static const char *const extra[] = { "--max-db-pages", "80", NULL };
    struct e2e_receipt r = { .schema = 3 };
    struct e2e_reply rep;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    sqlite3 *db;
    uint64_t id = 1;
    int fd, i, full = 0;

    start(extra);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 50);
    for (i = 0; i < 50; i++)
        e2e_pack_receipt(&pk, &r);
    while (!full && id < 1000) {
        ck_assert_int_eq(
            e2e_request(fd, PROTO_OP_RECEIPTS, id, 0, 0, sb.data, sb.size), 0);
        ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
        if (!rep.r.ok) {
            ck_assert_str_eq(proto_code_name(rep.r.err.code), "unavailable");
            full = 1;
        }
        e2e_reply_free(&rep);
        id++;
    }
    ck_assert_msg(full, "the store never filled up");
    /* alive, serving, and still refusing writes while full */
    ck_assert(e2e_alive(&d));
    ck_assert_int_eq(e2e_request(fd, PROTO_OP_PING, id, 0, 0, NULL, 0), 0);
    expect_ok(fd, id, &rep);
    e2e_reply_free(&rep);
    id++;
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_RECEIPTS, id, 0, 0, sb.data, sb.size), 0);
    expect_err(fd, PROTO_EUNAVAILABLE, NULL, &rep);
    e2e_reply_free(&rep);
    id++;

    /* Free space the way an operator would: delete old rows. */
    ck_assert_int_eq(sqlite3_open(d.db, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    ck_assert_int_eq(sqlite3_exec(db, "DELETE FROM receipts", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_RECEIPTS, id, 0, 0, sb.data, sb.size), 0);
    expect_ok(fd, id, &rep);
    ck_assert_uint_eq(e2e_get_uint(rep.r.result, "accepted"), 50);
    e2e_reply_free(&rep);
    msgpack_sbuffer_destroy(&sb);
    close(fd);
}
END_TEST

/* ---- hostile input ---- */

struct hostile {
    const char *name;
    int close_expected;
    const char *code;
};

static const struct hostile hostile[] = {
    { "length 0", 1, "malformed" },
    { "length 0xFFFFFFFF", 1, "too_large" },
    { "max_frame + 1", 1, "too_large" },
    { "nesting 33", 0, "malformed" },
    { "nesting 100000", 0, "malformed" },
    { "lying array32", 0, "malformed" },
    { "lying map32", 0, "malformed" },
    { "lying str32", 0, "malformed" },
    { "truncated map", 0, "malformed" },
    { "trailing bytes", 0, "malformed" },
    { "not a map", 0, "malformed" },
};

static void
send_hostile(int fd, int i)
{
    unsigned char hdr[4];
    char *buf;
    size_t n, k;

    switch (i) {
    case 0:
        ck_assert_int_eq(e2e_send_all(fd, "\0\0\0\0", 4), 0);
        return;
    case 1:
        ck_assert_int_eq(e2e_send_all(fd, "\xff\xff\xff\xff", 4), 0);
        return;
    case 2:
        frame_put_header(hdr, (1u << 20) + 1);
        ck_assert_int_eq(e2e_send_all(fd, hdr, 4), 0);
        return;
    case 3:
    case 4:
        n = i == 3 ? 33 : 100000;
        buf = malloc(n + 1);
        for (k = 0; k < n; k++)
            buf[k] = (char)0x91; /* array of one element */
        buf[n] = (char)0xc0;
        ck_assert_int_eq(e2e_send_frame(fd, buf, n + 1), 0);
        free(buf);
        return;
    case 5:
        ck_assert_int_eq(e2e_send_frame(fd, "\xdd\xff\xff\xff\xff\x01", 6), 0);
        return;
    case 6:
        ck_assert_int_eq(e2e_send_frame(fd, "\xdf\xff\xff\xff\xff\x01", 6), 0);
        return;
    case 7:
        ck_assert_int_eq(e2e_send_frame(fd, "\xdb\xff\xff\xff\xff\x61", 6), 0);
        return;
    case 8:
        ck_assert_int_eq(e2e_send_frame(fd, "\x83\xa2op\xa4ping", 8), 0);
        return;
    case 9:
        ck_assert_int_eq(
            e2e_send_frame(fd, "\x82\xa2op\xa4ping\xa2id\x01\xc0", 14), 0);
        return;
    default:
        ck_assert_int_eq(e2e_send_frame(fd, "\x93\x01\x02\x03", 4), 0);
        return;
    }
}

START_TEST(test_e2e_hostile_frame_answered_daemon_survives)
{
    struct e2e_receipt r = { .schema = 3 };
    struct e2e_reply rep;
    int fd;

    start(NULL);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    send_hostile(fd, _i);
    ck_assert_msg(e2e_recv(fd, T, &rep) == 0, "%s: no reply", hostile[_i].name);
    ck_assert_msg(!rep.r.ok, "%s: accepted", hostile[_i].name);
    ck_assert_str_eq(proto_code_name(rep.r.err.code), hostile[_i].code);
    e2e_reply_free(&rep);
    if (hostile[_i].close_expected) {
        ck_assert_int_eq(e2e_wait_closed(fd, T), 1);
        close(fd);
        fd = e2e_connect(&d);
        ck_assert_int_ge(fd, 0);
    }
    /* the daemon is alive and stores valid receipts */
    ck_assert(e2e_alive(&d));
    send_receipt(fd, 5, 0, 0, &r, &rep);
    e2e_reply_free(&rep);
    close(fd);
}
END_TEST

START_TEST(test_e2e_trickled_frame_is_cut_off)
{
    static const char *const extra[] = { "--frame-timeout-ms", "300", NULL };
    struct e2e_reply rep;
    unsigned char hdr[4];
    int fd, i, closed = 0;

    start(extra);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    frame_put_header(hdr, 1000);
    ck_assert_int_eq(e2e_send_all(fd, hdr, 4), 0);
    /* one byte every 50 ms: always active, never finished */
    for (i = 0; i < 40 && !closed; i++) {
        if (e2e_send_all(fd, "\x80", 1) != 0)
            closed = 1;
        usleep(50000);
    }
    ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
    ck_assert(!rep.r.ok);
    ck_assert_str_eq(proto_code_name(rep.r.err.code), "malformed");
    ck_assert_ptr_nonnull(strstr(rep.r.err.message, "ms"));
    e2e_reply_free(&rep);
    ck_assert_int_eq(e2e_wait_closed(fd, T), 1);
    close(fd);
}
END_TEST

START_TEST(test_e2e_client_that_never_reads_is_not_buffered)
{
    static const char *const extra[] = { "--max-unsent-bytes", "65536", NULL };
    struct e2e_reply rep;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    size_t i, sent = 0, frames, total;
    long rss;
    int fd, fd2, flags;

    start(extra);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    /* 200,000 pings are about 4 MB of replies: far over the cap. */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    frames = 200000;
    for (i = 0; i < frames; i++) {
        size_t at = frame_sbuffer_begin(&sb);
        envelope_request(&pk, PROTO_OP_PING, i, 0, 0, 0);
        frame_sbuffer_finish(&sb, at);
    }
    total = sb.size;
    flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    for (i = 0; i < 400 && sent < total; i++) {
        ssize_t n = send(fd, sb.data + sent, total - sent, MSG_NOSIGNAL);
        if (n > 0)
            sent += (size_t)n;
        else
            usleep(5000);
    }
    ck_assert_msg(sent < total, "the daemon read everything while its "
                                "replies were not read");
    rss = e2e_proc_kb(d.pid, "VmRSS:");
    ck_assert_int_gt(rss, 0);
    ck_assert_int_lt(rss, RSS_LIMIT_KB);
    /* others are still served */
    fd2 = e2e_connect(&d);
    ck_assert_int_ge(fd2, 0);
    ck_assert_int_eq(e2e_request(fd2, PROTO_OP_PING, 1, 0, 0, NULL, 0), 0);
    expect_ok(fd2, 1, &rep);
    e2e_reply_free(&rep);
    close(fd2);
    /* and the slow reader gets every reply once it reads */
    fcntl(fd, F_SETFL, flags);
    for (i = 0; i < 100; i++) {
        expect_ok(fd, i, &rep);
        e2e_reply_free(&rep);
    }
    msgpack_sbuffer_destroy(&sb);
    close(fd);
}
END_TEST

START_TEST(test_e2e_connection_limit_and_idle_timeout)
{
    static const char *const extra[] = { "--max-connections", "2",
                                         "--idle-timeout-ms", "500", NULL };
    struct e2e_reply rep;
    int a, b, c;

    start(extra);
    /* Let the daemon see the start-up probe connection go away first. */
    usleep(200000);
    a = e2e_connect(&d);
    b = e2e_connect(&d);
    ck_assert_int_ge(a, 0);
    ck_assert_int_ge(b, 0);
    ck_assert_int_eq(e2e_request(a, PROTO_OP_PING, 1, 0, 0, NULL, 0), 0);
    expect_ok(a, 1, &rep);
    e2e_reply_free(&rep);
    c = e2e_connect(&d);
    ck_assert_int_ge(c, 0);
    ck_assert_int_eq(e2e_wait_closed(c, 2000), 1);
    close(c);
    ck_assert_int_eq(e2e_request(b, PROTO_OP_PING, 2, 0, 0, NULL, 0), 0);
    expect_ok(b, 2, &rep);
    e2e_reply_free(&rep);
    /* both go idle and are closed */
    ck_assert_int_eq(e2e_wait_closed(a, 3000), 1);
    ck_assert_int_eq(e2e_wait_closed(b, 3000), 1);
    close(a);
    close(b);
}
END_TEST

START_TEST(test_e2e_stale_socket_replaced_live_socket_kept)
{
    struct e2e_daemon other;
    struct sockaddr_un sa;
    struct e2e_reply rep;
    int fd, status;

    start(NULL);
    /* A second daemon on the same socket must not steal it. */
    memcpy(&other, &d, sizeof(other));
    snprintf(other.db, sizeof(other.db), "%s/other.db", d.dir);
    e2e_restart(&other, NULL);
    /* It must exit on its own, with a failure. */
    ck_assert_int_eq(e2e_stop(&other, 0, 5000, &status), 0);
    ck_assert(WIFEXITED(status));
    ck_assert_int_ne(WEXITSTATUS(status), 0);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_request(fd, PROTO_OP_PING, 1, 0, 0, NULL, 0), 0);
    expect_ok(fd, 1, &rep);
    e2e_reply_free(&rep);
    close(fd);
    ck_assert_int_eq(e2e_stop(&d, SIGKILL, 5000, &status), 0);

    /* A crash leaves no file here (SIGKILL keeps it, in fact); make sure
     * a stale socket file exists, then restart over it. */
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    ck_assert_uint_lt(strlen(d.sock), sizeof(sa.sun_path));
    memcpy(sa.sun_path, d.sock, strlen(d.sock));
    unlink(d.sock);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    close(fd);
    ck_assert_int_eq(e2e_restart(&d, NULL), 0);
    fd = e2e_connect(&d);
    ck_assert_int_eq(e2e_request(fd, PROTO_OP_PING, 2, 0, 0, NULL, 0), 0);
    expect_ok(fd, 2, &rep);
    e2e_reply_free(&rep);
    close(fd);
}
END_TEST

/* SHA-256 of "e2e-secret-token", as `receiptd --hash-token` prints it. */
#define E2E_TOKEN "e2e-secret-token"
#define E2E_TOKEN_HASH                                                         \
    "6da197884111838681a163e04f14a56ec56bd1bade42f0975edee6252d593b7d"

static int
hello_token(int fd, const char *token, struct e2e_reply *rep)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    envelope_pack_cstr(&pk, "protocol");
    msgpack_pack_uint64(&pk, 1);
    envelope_pack_cstr(&pk, "source");
    envelope_pack_cstr(&pk, "tcp-node");
    envelope_pack_cstr(&pk, "token");
    envelope_pack_cstr(&pk, token);
    rc = e2e_request(fd, PROTO_OP_HELLO, 1, 0, 0, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    if (rc == 0)
        rc = e2e_recv(fd, T, rep);
    return rc;
}

START_TEST(test_e2e_tcp_listener_needs_a_token)
{
    struct e2e_receipt r = { .schema = 3 };
    struct e2e_reply rep;
    const char *extra[7] = { "--tcp",           NULL,   "--config", NULL,
                             "--tcp-plaintext", "true", NULL };
    char addr[64], conf[300], tmp[300];
    FILE *f;
    int port, fd = -1, attempt, cfd;

    /* The configuration (a token for TCP) lives outside the daemon's
     * directory, which e2e_start creates. */
    snprintf(tmp, sizeof(tmp), "%s/e2e-conf-XXXXXX", TEST_BINARY_DIR);
    cfd = mkstemp(tmp);
    ck_assert_int_ge(cfd, 0);
    f = fdopen(cfd, "w");
    fprintf(f,
            "access: { tokens = ( { name = \"e2e\"; sha256 = \"%s\"; } ); "
            "};\nlimits: { hello_timeout = \"500ms\"; };\n",
            E2E_TOKEN_HASH);
    fclose(f);
    snprintf(conf, sizeof(conf), "%s", tmp);
    extra[3] = conf;
    /* A port picked from the pid, retried on collision with another run. */
    for (attempt = 0; attempt < 5 && fd < 0; attempt++) {
        port = 20000 + (int)((getpid() * 7 + attempt * 131) % 30000);
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
        extra[1] = addr;
        if (e2e_start(&d, extra) != 0) {
            e2e_cleanup(&d);
            continue;
        }
        fd = e2e_connect_tcp(port);
    }
    unlink(tmp);
    ck_assert_int_ge(fd, 0);
    /* nothing but hello before authenticating */
    ck_assert_int_eq(e2e_request(fd, PROTO_OP_PING, 7, 0, 0, NULL, 0), 0);
    expect_err(fd, PROTO_EUNAUTHORIZED, NULL, &rep);
    e2e_reply_free(&rep);
    /* a wrong token: refused and closed */
    ck_assert_int_eq(hello_token(fd, "guess", &rep), 0);
    ck_assert(!rep.r.ok);
    ck_assert_str_eq(proto_code_name(rep.r.err.code), "unauthorized");
    e2e_reply_free(&rep);
    ck_assert_int_eq(e2e_wait_closed(fd, T), 1);
    close(fd);
    /* the right one: writes are accepted */
    fd = e2e_connect_tcp(port);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(hello_token(fd, E2E_TOKEN, &rep), 0);
    ck_assert(rep.r.ok);
    e2e_reply_free(&rep);
    send_receipt(fd, 2, 1, 1, &r, &rep);
    e2e_reply_free(&rep);
    close(fd);
    /* a peer that never authenticates does not keep its slot */
    fd = e2e_connect_tcp(port);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_wait_closed(fd, 3000), 1);
    close(fd);
}
END_TEST

START_TEST(test_e2e_backpressure_bounds_queue_without_deadlock)
{
    static const char *const extra[] = { "--max-pending-bytes", "4096",
                                         "--max-unsent-bytes", "4096", NULL };
    struct e2e_receipt r = { .schema = 3 };
    size_t len, n = 500;
    char *body = e2e_receipt_bytes(&r, &len);
    int fd;

    start(extra);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    /* Far more than 4 KiB of writes at once: reading pauses and resumes
     * as the writer drains, and every write is still answered. */
    send_receipts_at_once(fd, body, len, n);
    free(body);
    close(fd);
}
END_TEST

static uint64_t
hello_max_batch(int fd, uint64_t id)
{
    struct e2e_reply rep;
    uint64_t v;

    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_HELLO, id, 0, 0, "\x81\xa8protocol\x01", 11),
        0);
    expect_ok(fd, id, &rep);
    v = e2e_get_uint(rep.r.result, "max_batch");
    e2e_reply_free(&rep);
    return v;
}

static void
write_conf(const char *path, unsigned max_batch)
{
    FILE *f = fopen(path, "w");

    ck_assert_ptr_nonnull(f);
    fprintf(f, "limits: { max_batch = %u; };\n", max_batch);
    fclose(f);
}

START_TEST(test_e2e_sighup_reloads_the_configuration)
{
    const char *extra[3] = { "--config", NULL, NULL };
    char conf[300];
    FILE *f;
    int fd, i;

    snprintf(conf, sizeof(conf), "%s/e2e-reload-%d.conf", TEST_BINARY_DIR,
             (int)getpid());
    write_conf(conf, 7);
    extra[1] = conf;
    start(extra);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_uint_eq(hello_max_batch(fd, 1), 7);
    write_conf(conf, 9);
    kill(d.pid, SIGHUP);
    for (i = 0; i < 100 && hello_max_batch(fd, 2) != 9; i++)
        usleep(20000);
    ck_assert_uint_eq(hello_max_batch(fd, 3), 9);
    /* a broken file changes nothing and the daemon stays up */
    f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "limits: { max_batch = \"many\"; };\n");
    fclose(f);
    kill(d.pid, SIGHUP);
    usleep(200000);
    ck_assert(e2e_alive(&d));
    ck_assert_uint_eq(hello_max_batch(fd, 4), 9);
    unlink(conf);
    close(fd);
}
END_TEST

/* ---- shared vectors ---- */

/* Every key of want (a named-form map) has an equal value in got; nested
 * maps compared key by key, so field order does not matter. */
static int
same_fields(const msgpack_object *want, const msgpack_object *got, char *why,
            size_t cap)
{
    uint32_t i;

    if (want->type == MSGPACK_OBJECT_MAP) {
        if (got == NULL || got->type != MSGPACK_OBJECT_MAP) {
            snprintf(why, cap, "expected a map");
            return 0;
        }
        for (i = 0; i < want->via.map.size; i++) {
            const msgpack_object *k = &want->via.map.ptr[i].key;
            char name[128];
            snprintf(name, sizeof(name), "%.*s", (int)k->via.str.size,
                     k->via.str.ptr);
            if (!same_fields(&want->via.map.ptr[i].val, e2e_get(got, name), why,
                             cap)) {
                size_t n = strlen(why);
                snprintf(why + n, cap - n, " <- %s", name);
                return 0;
            }
        }
        return 1;
    }
    if (got == NULL || !msgpack_object_equal(*want, *got)) {
        snprintf(why, cap, "value differs");
        return 0;
    }
    return 1;
}

START_TEST(test_e2e_shared_vectors_read_back_identical)
{
    struct e2e_reply rep, q;
    char path[1024], why[512];
    const msgpack_object *rows;
    struct dirent *de;
    DIR *dir;
    int fd, form, n = 0;
    uint64_t id = 1;

    start(NULL);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    dir = opendir(TEST_DATA_DIR "/vectors");
    ck_assert_ptr_nonnull(dir);
    while ((de = readdir(dir)) != NULL) {
        size_t l = strlen(de->d_name), nlen, clen, off = 0;
        char *named, *compact;
        msgpack_unpacked up;
        if (l < 15 || strcmp(de->d_name + l - 14, ".named.msgpack") != 0)
            continue;
        snprintf(path, sizeof(path), "%s/vectors/%s", TEST_DATA_DIR,
                 de->d_name);
        named = e2e_read_file(path, &nlen);
        ck_assert_ptr_nonnull(named);
        snprintf(path, sizeof(path), "%s/vectors/%.*s.compact.msgpack",
                 TEST_DATA_DIR, (int)(l - 14), de->d_name);
        compact = e2e_read_file(path, &clen);
        ck_assert_ptr_nonnull(compact);
        msgpack_unpacked_init(&up);
        ck_assert_int_eq(msgpack_unpack_next(&up, named, nlen, &off),
                         MSGPACK_UNPACK_SUCCESS);
        for (form = 0; form < 2; form++) {
            uint64_t rid;
            ck_assert_int_eq(e2e_request(fd, PROTO_OP_RECEIPT, id, 0, 0,
                                         form ? compact : named,
                                         form ? clen : nlen),
                             0);
            ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
            ck_assert_msg(rep.r.ok, "%s (%s): %s at %s", de->d_name,
                          form ? "compact" : "named", rep.r.err.message,
                          rep.r.err.path);
            rid = e2e_get_uint(rep.r.result, "receipt_id");
            e2e_reply_free(&rep);
            query(fd, id + 1, "receipts", 1, rid + 1, NULL, NULL, &q);
            rows = rows_of(&q);
            ck_assert_uint_eq(rows->via.array.size, 1);
            ck_assert_uint_eq(
                e2e_get_uint(&rows->via.array.ptr[0], "receipt_id"), rid);
            /* section 9: a schema-1 row shows tuning_profile as "" */
            ck_assert_msg(e2e_get(&rows->via.array.ptr[0], "tuning_profile") !=
                              NULL,
                          "%s: no tuning_profile in the row", de->d_name);
            why[0] = '\0';
            ck_assert_msg(same_fields(&up.data, &rows->via.array.ptr[0], why,
                                      sizeof(why)),
                          "%s (%s): %s", de->d_name, form ? "compact" : "named",
                          why);
            e2e_reply_free(&q);
            id += 2;
            n++;
        }
        msgpack_unpacked_destroy(&up);
        free(named);
        free(compact);
    }
    closedir(dir);
    ck_assert_int_ge(n, 2);
    close(fd);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("e2e_ingest");
    struct {
        const char *name;
        const TTest *t;
        int loop; /* iterations of a loop test; 0: a plain test */
    } cases[] = {
        { "hello_ping", test_e2e_hello_and_ping, 0 },
        { "unimplemented", test_e2e_unimplemented_ops_and_kinds, 0 },
        { "receipt_read_back", test_e2e_receipt_stored_and_read_back, 0 },
        { "unknown_keys", test_e2e_unknown_keys_kept_and_read_back, 0 },
        { "query_timeout", test_e2e_slow_query_is_interrupted, 0 },
        { "filters", test_e2e_query_filters_select_rows, 0 },
        { "pipelining", test_e2e_pipelined_replies_in_order, 0 },
        { "wal_sync", test_e2e_wal_synced_where_configured, 2 },
        { "source_of_its_time", test_e2e_write_keeps_source_of_its_time, 0 },
        { "dedupe", test_e2e_dedupe_across_reconnects_and_restart, 0 },
        { "seq_conflict", test_e2e_reused_seq_is_a_conflict, 0 },
        { "batch_quarantine", test_e2e_batch_rejects_items_into_quarantine, 0 },
        { "batch_quarantine_positions",
          test_e2e_batch_quarantines_items_at_every_position, 0 },
        { "batch_too_large", test_e2e_batch_over_max_batch_is_refused_whole,
          0 },
        { "bin_body_key", test_e2e_bin_body_key_reads_like_str, 0 },
        { "sigterm", test_e2e_sigterm_drains_and_removes_socket, 0 },
        { "sigkill", test_e2e_sigkill_keeps_every_acknowledged_receipt, 0 },
        { "full_store", test_e2e_full_store_answers_unavailable_and_resumes,
          0 },
        { "hostile", test_e2e_hostile_frame_answered_daemon_survives,
          (int)(sizeof(hostile) / sizeof(hostile[0])) },
        { "trickle", test_e2e_trickled_frame_is_cut_off, 0 },
        { "never_reads", test_e2e_client_that_never_reads_is_not_buffered, 0 },
        { "limits", test_e2e_connection_limit_and_idle_timeout, 0 },
        { "socket_file", test_e2e_stale_socket_replaced_live_socket_kept, 0 },
        { "vectors", test_e2e_shared_vectors_read_back_identical, 0 },
        { "tcp", test_e2e_tcp_listener_needs_a_token, 0 },
        { "sighup", test_e2e_sighup_reloads_the_configuration, 0 },
        { "backpressure", test_e2e_backpressure_bounds_queue_without_deadlock,
          0 },
    };
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 60);
        tcase_add_checked_fixture(tc, NULL, teardown);
        if (cases[i].loop)
            tcase_add_loop_test(tc, cases[i].t, 0, cases[i].loop);
        else
            tcase_add_test(tc, cases[i].t);
        suite_add_tcase(s, tc);
    }
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
