/*
 * check_envelope.c: request envelopes (every malformed case with its code
 * and path, every op, seq and body handling) and replies (encode, decode,
 * round trip for every error code).
 */
#include <check.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "envelope.h"

/* Parses raw frame bytes; returns the code. */
static int
parse_raw(const char *bytes, size_t len, struct envelope *env,
          struct proto_err *err, msgpack_unpacked *up)
{
    msgpack_unpacked_init(up);
    proto_err_clear(err);
    return envelope_parse(bytes, len, up, env, err);
}

#define RAW(s) s, sizeof(s) - 1

static const struct {
    const char *bytes;
    size_t len;
    int want;
    const char *path;
    int has_id;
} bad[] = {
    /* Not one msgpack object. */
    { RAW("\xc1"), PROTO_EMALFORMED, "", 0 },
    { RAW("\x82\xa2op"), PROTO_EMALFORMED, "", 0 },
    { RAW("\x80\x80"), PROTO_EMALFORMED, "", 0 },
    { RAW("\xdf\xff\xff\xff\xff"), PROTO_EMALFORMED, "", 0 },
    /* Not a map. */
    { RAW("\x92\xa2op\x01"), PROTO_EMALFORMED, "", 0 },
    { RAW("\xa4ping"), PROTO_EMALFORMED, "", 0 },
    { RAW("\xc0"), PROTO_EMALFORMED, "", 0 },
    /* id. */
    { RAW("\x81\xa2op\xa4ping"), PROTO_EMALFORMED, "id", 0 },
    { RAW("\x82\xa2op\xa4ping\xa2id\xa1x"), PROTO_EMALFORMED, "id", 0 },
    { RAW("\x82\xa2op\xa4ping\xa2id\xff"), PROTO_EMALFORMED, "id", 0 },
    { RAW("\x82\xa2op\xa4ping\xa2id\xc0"), PROTO_EMALFORMED, "id", 0 },
    { RAW("\x82\xa2op\xa4ping\xa2id\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00"),
      PROTO_EMALFORMED, "id", 0 },
    { RAW("\x83\xa2op\xa4ping\xa2id\x01\xa2id\x02"), PROTO_EMALFORMED, "id",
      0 },
    /* op. */
    { RAW("\x81\xa2id\x07"), PROTO_EMALFORMED, "op", 1 },
    { RAW("\x82\xa2op\x01\xa2id\x07"), PROTO_EMALFORMED, "op", 1 },
    { RAW("\x82\xa2op\xc0\xa2id\x07"), PROTO_EMALFORMED, "op", 1 },
    { RAW("\x82\xa2op\xc4\x04ping\xa2id\x07"), PROTO_EMALFORMED, "op", 1 },
    { RAW("\x83\xa2op\xa4ping\xa2id\x07\xa2op\xa4ping"), PROTO_EMALFORMED, "op",
      1 },
    { RAW("\x82\xa2op\xa3"
          "fly\xa2id\x07"),
      PROTO_EUNKNOWN_OP, "op", 1 },
    { RAW("\x82\xa2op\xa0\xa2id\x07"), PROTO_EUNKNOWN_OP, "op", 1 },
    { RAW("\x82\xa2op\xa4PING\xa2id\x07"), PROTO_EUNKNOWN_OP, "op", 1 },
    { RAW("\x82\xa2op\xa5pings\xa2id\x07"), PROTO_EUNKNOWN_OP, "op", 1 },
    /* seq. */
    { RAW("\x83\xa2op\xa4ping\xa2id\x07\xa3seq\xa1x"), PROTO_EINVALID, "seq",
      1 },
    { RAW("\x83\xa2op\xa4ping\xa2id\x07\xa3seq\xff"), PROTO_EINVALID, "seq",
      1 },
    { RAW("\x84\xa2op\xa4ping\xa2id\x07\xa3seq\x01\xa3seq\x01"),
      PROTO_EMALFORMED, "seq", 1 },
    /* body. */
    { RAW("\x84\xa2op\xa4ping\xa2id\x07\xa4"
          "body\xc0\xa4"
          "body\xc0"),
      PROTO_EMALFORMED, "body", 1 },
};

START_TEST(test_envelope_parse_rejects_malformed)
{
    struct envelope env;
    struct proto_err err;
    msgpack_unpacked up;
    int rc = parse_raw(bad[_i].bytes, bad[_i].len, &env, &err, &up);

    ck_assert_msg(rc == bad[_i].want, "case %d: rc %d (%s)", _i, rc,
                  err.message);
    ck_assert_int_eq(err.code, bad[_i].want);
    ck_assert_str_eq(err.path, bad[_i].path);
    ck_assert_int_eq(env.has_id, bad[_i].has_id);
    if (env.has_id)
        ck_assert_uint_eq(env.id, 7);
    ck_assert_msg(err.message[0] != '\0', "no message");
    msgpack_unpacked_destroy(&up);
}
END_TEST

/*
 * Memory per frame stays a small multiple of its size: after mpcheck, a
 * frame of N bytes holds at most N objects, and msgpack-c spends 24 bytes
 * on each plus its zone's chunk doubling. Measured with mallinfo2, which
 * the sanitizer build replaces (the check is skipped there).
 */
START_TEST(test_envelope_parse_memory_is_bounded)
{
    static const unsigned char fill[] = { 0x90, 0x80, 0x00, 0xc0 };
    const size_t len = 65536;
    unsigned char *f = malloc(len);
    struct mallinfo2 before, after;
    struct envelope env;
    struct proto_err err;
    msgpack_unpacked up;
    size_t head, used;
    uint32_t n;

    ck_assert_ptr_nonnull(f);
    /* {"op": "receipts", "id": 1, "body": [x, x, x, ...]} */
    memcpy(f,
           "\x83\xa2op\xa8receipts\xa2id\x01\xa4"
           "body\xdd",
           23);
    head = 23 + 4;
    n = (uint32_t)(len - head);
    f[23] = (unsigned char)(n >> 24);
    f[24] = (unsigned char)(n >> 16);
    f[25] = (unsigned char)(n >> 8);
    f[26] = (unsigned char)n;
    memset(f + head, fill[_i], len - head);
    msgpack_unpacked_init(&up);
    before = mallinfo2();
    ck_assert_int_eq(envelope_parse((const char *)f, len, &up, &env, &err), 0);
    after = mallinfo2();
    used = (after.uordblks + after.hblkhd) - (before.uordblks + before.hblkhd);
    ck_assert_uint_eq(env.body->via.array.size, n);
    if (before.uordblks + before.hblkhd > 0)
        ck_assert_msg(used <= 40 * len, "%zu bytes for a %zu-byte frame", used,
                      len);
    msgpack_unpacked_destroy(&up);
    free(f);
}
END_TEST

/* An unknown op is quoted back only when that is safe in a str. */
START_TEST(test_envelope_unknown_op_message_is_utf8)
{
    struct envelope env;
    struct proto_err err;
    msgpack_unpacked up;

    ck_assert_int_eq(parse_raw(RAW("\x82\xa2op\xa3"
                                   "fly\xa2id\x07"),
                               &env, &err, &up),
                     PROTO_EUNKNOWN_OP);
    ck_assert_str_eq(err.message, "unknown op \"fly\"; expected hello, ping, "
                                  "receipt, receipts, plan, retention, "
                                  "readback or query");
    msgpack_unpacked_destroy(&up);
    ck_assert_int_eq(
        parse_raw(RAW("\x82\xa2op\xa2\xc3\x28\xa2id\x07"), &env, &err, &up),
        PROTO_EUNKNOWN_OP);
    ck_assert_str_eq(err.message, "unknown op of 2 bytes; expected hello, "
                                  "ping, receipt, receipts, plan, "
                                  "retention, readback or query");
    ck_assert(mpobj_utf8_valid(err.message, strlen(err.message)));
    msgpack_unpacked_destroy(&up);
}
END_TEST

/* Packs a request with envelope_request and a small body. */
static void
pack_request(msgpack_sbuffer *sb, int op, uint64_t id, int has_seq,
             uint64_t seq, int has_body)
{
    msgpack_packer pk;

    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    ck_assert_int_eq(envelope_request(&pk, op, id, has_seq, seq, has_body), 0);
    if (has_body) {
        msgpack_pack_map(&pk, 1);
        envelope_pack_cstr(&pk, "k");
        msgpack_pack_uint64(&pk, 42);
    }
}

START_TEST(test_envelope_request_roundtrip)
{
    int op = _i / 4, has_seq = _i % 2, has_body = (_i / 2) % 2;
    struct envelope env;
    struct proto_err err;
    msgpack_unpacked up;
    msgpack_sbuffer sb;
    uint64_t id = op % 2 ? UINT64_MAX : (uint64_t)op;

    pack_request(&sb, op, id, has_seq, 1000 + (uint64_t)op, has_body);
    ck_assert_int_eq(parse_raw(sb.data, sb.size, &env, &err, &up), 0);
    ck_assert_int_eq(env.op, op);
    ck_assert_int_eq(env.has_id, 1);
    ck_assert_uint_eq(env.id, id);
    ck_assert_int_eq(env.has_seq, has_seq);
    if (has_seq)
        ck_assert_uint_eq(env.seq, 1000 + (uint64_t)op);
    if (has_body) {
        ck_assert_ptr_nonnull(env.body);
        ck_assert_int_eq(env.body->type, MSGPACK_OBJECT_MAP);
    } else {
        ck_assert_ptr_null(env.body);
    }
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(test_envelope_parse_accepts_variants)
{
    struct envelope env;
    struct proto_err err;
    msgpack_unpacked up;

    /* Unknown keys (even non-string ones) are ignored; nil seq is none; an
     * int64-form id holding a positive value is an id. */
    ck_assert_int_eq(
        parse_raw(RAW("\x85\xa2op\xa7receipt\xa2id\xd3\x00\x00\x00\x00\x00"
                      "\x00\x00\x07\xa3seq\xc0\x01\x02\xa5"
                      "extra\x90"),
                  &env, &err, &up),
        0);
    ck_assert_int_eq(env.op, PROTO_OP_RECEIPT);
    ck_assert_uint_eq(env.id, 7);
    ck_assert_int_eq(env.has_seq, 0);
    ck_assert_ptr_null(env.body);
    msgpack_unpacked_destroy(&up);

    /* A nil body is a body (the op decides what it needs). */
    ck_assert_int_eq(parse_raw(RAW("\x83\xa2id\x00\xa2op\xa4ping\xa4"
                                   "body\xc0"),
                               &env, &err, &up),
                     0);
    ck_assert_ptr_nonnull(env.body);
    ck_assert_int_eq(env.body->type, MSGPACK_OBJECT_NIL);
    ck_assert_uint_eq(env.id, 0);
    msgpack_unpacked_destroy(&up);
}
END_TEST

/*
 * Where the body is in the frame: its exact bytes, whichever key encoding
 * said "body" and wherever the key sits in the map. The expected span is
 * given by the byte offset at which the body starts and its length.
 */
static const struct {
    const char *what;
    const char *bytes;
    size_t len;
    size_t off, blen;
} spans[] = {
    { "str key, last",
      RAW("\x83\xa2op\xa7receipt\xa2id\x07\xa4"
          "body\x92\x01\xa1x"),
      21, 4 },
    { "bin key, last",
      RAW("\x83\xa2op\xa7receipt\xa2id\x07\xc4\x04"
          "body\x92\x01\xa1x"),
      22, 4 },
    { "bin key, first",
      RAW("\x83\xc4\x04"
          "body\x91\xce\x00\x00\x00\x03\xa2op\xa8receipts\xa2id\x07"),
      7, 6 },
    { "str8 key, between unknown keys",
      RAW("\x85\xa5"
          "extra\x92\x90\x80\xa2op\xa4ping\xd9\x04"
          "body\x81\xa1k\xc0\x01\x02\xa2id\x07"),
      24, 4 },
    { "bin16 key, nil body",
      RAW("\x83\xa2id\x07\xc5\x00\x04"
          "body\xc0\xa2op\xa4ping"),
      12, 1 },
    { "map16 envelope, str32 key",
      RAW("\xde\x00\x03\xa2op\xa4ping\xdb\x00\x00\x00\x04"
          "body\xa3"
          "abc\xa2id\x07"),
      20, 4 },
    /* Last: the span runs to the end of the frame, whatever precedes it. */
    { "nil body, last",
      RAW("\x83\xa2op\xa4ping\xa2id\x07\xa4"
          "body\xc0"),
      18, 1 },
    { "last after seq and unknown keys, map16 envelope",
      RAW("\xde\x00\x05\xa2id\x07\xa1k\x92\x80\xc0\xa3seq\xcd\x01\x00\xa2op"
          "\xa8receipts\xa4"
          "body\xdc\x00\x02\x91\x01\x81\xa1x\xc4\x01z"),
      36, 11 },
    { "bin8 key, bin32 body, last",
      RAW("\x83\xa2id\x07\xa2op\xa4ping\xc4\x04"
          "body\xc6\x00\x00\x00\x02hi"),
      19, 7 },
    /* First and in the middle, with a container body: the body is walked,
     * not assumed to end the frame. */
    { "array body, first",
      RAW("\x83\xa4"
          "body\x92\x81\xa1x\x01\x90\xa2op\xa8receipts\xa2id\x07"),
      6, 6 },
    { "map body, middle",
      RAW("\x83\xa2op\xa7receipt\xa4"
          "body\x81\xa1k\x93\x01\x02\x03\xa2id\x07"),
      17, 7 },
};

START_TEST(test_envelope_parse_records_body_span)
{
    struct envelope env;
    struct proto_err err;
    msgpack_unpacked up, one;
    size_t off = 0;

    ck_assert_msg(parse_raw(spans[_i].bytes, spans[_i].len, &env, &err, &up) ==
                      0,
                  "%s: %s", spans[_i].what, err.message);
    ck_assert_ptr_nonnull(env.body);
    ck_assert_uint_eq(env.id, 7);
    ck_assert_uint_eq(env.body_off, spans[_i].off);
    ck_assert_uint_eq(env.body_len, spans[_i].blen);
    /* The span holds exactly the object envelope_parse calls the body. */
    msgpack_unpacked_init(&one);
    ck_assert_int_eq(msgpack_unpack_next(&one, spans[_i].bytes + env.body_off,
                                         env.body_len, &off),
                     MSGPACK_UNPACK_SUCCESS);
    ck_assert_uint_eq(off, env.body_len);
    ck_assert(msgpack_object_equal(one.data, *env.body));
    msgpack_unpacked_destroy(&one);
    msgpack_unpacked_destroy(&up);
}
END_TEST

/* No body, no span; and a body key of another type is not "body". */
START_TEST(test_envelope_parse_span_without_body)
{
    struct envelope env;
    struct proto_err err;
    msgpack_unpacked up;

    ck_assert_int_eq(
        parse_raw(RAW("\x83\xa2op\xa4ping\xa2id\x07\x04\xc0"), &env, &err, &up),
        0);
    ck_assert_ptr_null(env.body);
    ck_assert_uint_eq(env.body_off, 0);
    ck_assert_uint_eq(env.body_len, 0);
    msgpack_unpacked_destroy(&up);
    /* A str "body" and a bin "body" are the same key: a duplicate. */
    ck_assert_int_eq(parse_raw(RAW("\x84\xa2op\xa4ping\xa2id\x07\xa4"
                                   "body\xc0\xc4\x04"
                                   "body\xc0"),
                               &env, &err, &up),
                     PROTO_EMALFORMED);
    ck_assert_str_eq(err.path, "body");
    msgpack_unpacked_destroy(&up);
}
END_TEST

/*
 * replay_of: what envelope_request_replay() packs is read back by
 * envelope_parse() and by its fast path alike (the same op, id, row and
 * body span); one that is no unsigned integer, or is repeated, is ignored
 * by envelope_parse() (older daemons ignored the key) and left to it by
 * envelope_peek().
 */
START_TEST(test_envelope_replay_of_both_paths)
{
    static const struct {
        const char *bytes;
        size_t len;
    } ignored[] = {
        { RAW("\x84\xa2op\xa7receipt\xa2id\x07\xa9replay_of\xa1x\xa4"
              "body\x80") },
        { RAW("\x84\xa2op\xa7receipt\xa2id\x07\xa9replay_of\xff\xa4"
              "body\x80") },
        { RAW("\x85\xa2op\xa7receipt\xa2id\x07\xa9replay_of\x01\xa9"
              "replay_of\x02\xa4"
              "body\x80") },
    };
    struct envelope env, fast;
    struct proto_err err;
    msgpack_unpacked up;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    size_t i;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    ck_assert_int_eq(
        envelope_request_replay(&pk, PROTO_OP_RECEIPTS, 9, UINT64_MAX, 1), 0);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_map(&pk, 0);
    ck_assert_int_eq(parse_raw(sb.data, sb.size, &env, &err, &up), 0);
    ck_assert_int_eq(env.has_replay_of, 1);
    ck_assert_uint_eq(env.replay_of, UINT64_MAX);
    ck_assert_int_eq(envelope_peek(sb.data, sb.size, &fast), 1);
    ck_assert_int_eq(fast.op, PROTO_OP_RECEIPTS);
    ck_assert_uint_eq(fast.id, 9);
    ck_assert_int_eq(fast.has_replay_of, 1);
    ck_assert_uint_eq(fast.replay_of, UINT64_MAX);
    ck_assert_uint_eq(fast.body_off, env.body_off);
    ck_assert_uint_eq(fast.body_len, env.body_len);
    ck_assert_uint_eq(env.body_len, 2);
    msgpack_unpacked_destroy(&up);

    /* Without the key: no replay on either path. */
    msgpack_sbuffer_clear(&sb);
    ck_assert_int_eq(envelope_request(&pk, PROTO_OP_RECEIPT, 9, 0, 0, 1), 0);
    msgpack_pack_map(&pk, 0);
    ck_assert_int_eq(parse_raw(sb.data, sb.size, &env, &err, &up), 0);
    ck_assert_int_eq(env.has_replay_of, 0);
    ck_assert_int_eq(envelope_peek(sb.data, sb.size, &fast), 1);
    ck_assert_int_eq(fast.has_replay_of, 0);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&sb);

    for (i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++) {
        ck_assert_msg(
            parse_raw(ignored[i].bytes, ignored[i].len, &env, &err, &up) == 0,
            "%zu: %s", i, err.message);
        ck_assert_int_eq(env.op, PROTO_OP_RECEIPT);
        ck_assert_int_eq(env.has_replay_of, 0);
        ck_assert_uint_eq(env.replay_of, 0);
        ck_assert_ptr_nonnull(env.body);
        ck_assert_int_eq(envelope_peek(ignored[i].bytes, ignored[i].len, &fast),
                         0);
        msgpack_unpacked_destroy(&up);
    }
}
END_TEST

START_TEST(test_envelope_op_tables)
{
    int i;
    const char *n;

    for (i = 0; i < PROTO_OP_COUNT; i++) {
        n = envelope_op_name(i);
        ck_assert_ptr_nonnull(n);
        ck_assert_int_eq(envelope_op_from_name(n, strlen(n)), i);
    }
    ck_assert_str_eq(envelope_op_name(PROTO_OP_READBACK), "readback");
    ck_assert_ptr_null(envelope_op_name(-1));
    ck_assert_ptr_null(envelope_op_name(PROTO_OP_COUNT));
    ck_assert_int_eq(envelope_op_from_name("receipt", 6), -1);
    ck_assert_int_eq(envelope_op_writes(PROTO_OP_RECEIPT), 1);
    ck_assert_int_eq(envelope_op_writes(PROTO_OP_RECEIPTS), 1);
    ck_assert_int_eq(envelope_op_writes(PROTO_OP_PLAN), 1);
    ck_assert_int_eq(envelope_op_writes(PROTO_OP_RETENTION), 1);
    ck_assert_int_eq(envelope_op_writes(PROTO_OP_READBACK), 0);
    ck_assert_int_eq(envelope_op_writes(PROTO_OP_QUERY), 0);
    ck_assert_int_eq(envelope_op_writes(PROTO_OP_HELLO), 0);
    ck_assert_int_eq(envelope_op_writes(PROTO_OP_PING), 0);
    {
        msgpack_sbuffer sb;
        msgpack_packer pk;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        ck_assert_int_eq(envelope_request(&pk, PROTO_OP_COUNT, 1, 0, 0, 0), -1);
        msgpack_sbuffer_destroy(&sb);
    }
}
END_TEST

/* Unpacks sb and decodes it as a reply. */
static void
decode_reply(msgpack_sbuffer *sb, msgpack_unpacked *up,
             struct envelope_reply *r)
{
    struct proto_err err;
    size_t off = 0;

    msgpack_unpacked_init(up);
    ck_assert_int_eq(msgpack_unpack_next(up, sb->data, sb->size, &off),
                     MSGPACK_UNPACK_SUCCESS);
    ck_assert_uint_eq(off, sb->size);
    ck_assert_int_eq(envelope_reply_decode(&up->data, r, &err), 0);
}

START_TEST(test_envelope_reply_ok_roundtrip)
{
    struct envelope_reply r;
    msgpack_unpacked up;
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    ck_assert_int_eq(envelope_reply_ok(&pk, 1, UINT64_MAX), 0);
    msgpack_pack_map(&pk, 1);
    envelope_pack_cstr(&pk, "receipt_id");
    msgpack_pack_uint64(&pk, 99);
    decode_reply(&sb, &up, &r);
    ck_assert_int_eq(r.ok, 1);
    ck_assert_int_eq(r.has_id, 1);
    ck_assert_uint_eq(r.id, UINT64_MAX);
    ck_assert_ptr_nonnull(r.result);
    ck_assert_ptr_nonnull(mpobj_map_get(r.result, "receipt_id", NULL));
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&sb);

    /* Without an id, the reply's id is nil. */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    ck_assert_int_eq(envelope_reply_ok(&pk, 0, 5), 0);
    msgpack_pack_map(&pk, 0);
    decode_reply(&sb, &up, &r);
    ck_assert_int_eq(r.has_id, 0);
    ck_assert_int_eq(mpobj_map_get(&up.data, "id", NULL)->type,
                     MSGPACK_OBJECT_NIL);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(test_envelope_reply_error_roundtrip)
{
    int code = -1 - _i; /* every code of the table, and ENOMEM */
    struct proto_err err;
    struct envelope_reply r;
    msgpack_unpacked up;
    msgpack_sbuffer sb;
    msgpack_packer pk;

    proto_err_set(&err, code, "counters.decode_steps",
                  "expected an unsigned integer, got a string");
    proto_err_prefix_index(&err, 17);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    ck_assert_int_eq(envelope_reply_error(&pk, 1, 17, &err), 0);
    decode_reply(&sb, &up, &r);
    ck_assert_int_eq(r.ok, 0);
    ck_assert_uint_eq(r.id, 17);
    ck_assert_int_eq(r.err.code,
                     code == PROTO_ENOMEM ? PROTO_EOVERLOADED : code);
    ck_assert_str_eq(r.err.path, "[17].counters.decode_steps");
    ck_assert_str_eq(r.err.message,
                     "expected an unsigned integer, got a string");
    ck_assert_uint_eq(r.code_name.len, strlen(proto_code_name(code)));
    ck_assert_int_eq(
        memcmp(r.code_name.ptr, proto_code_name(code), r.code_name.len), 0);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(test_envelope_reply_decode_rejects_non_replies)
{
    static const struct {
        const char *bytes;
        size_t len;
        const char *path;
    } cases[] = {
        { RAW("\x90"), "" },
        { RAW("\x81\xa2id\x01"), "ok" },
        { RAW("\x82\xa2id\x01\xa2ok\x01"), "ok" },
        { RAW("\x82\xa2id\x01\xa2ok\xc2"), "error" },
        { RAW("\x83\xa2id\x01\xa2ok\xc2\xa5"
              "error\xa1x"),
          "error" },
    };
    struct envelope_reply r;
    struct proto_err err;
    msgpack_unpacked up;
    size_t i, off;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        msgpack_unpacked_init(&up);
        off = 0;
        ck_assert_int_eq(
            msgpack_unpack_next(&up, cases[i].bytes, cases[i].len, &off),
            MSGPACK_UNPACK_SUCCESS);
        ck_assert_int_eq(envelope_reply_decode(&up.data, &r, &err),
                         PROTO_EMALFORMED);
        ck_assert_str_eq(err.path, cases[i].path);
        msgpack_unpacked_destroy(&up);
    }
    /* An unknown code still decodes, as invalid, keeping its name. */
    msgpack_unpacked_init(&up);
    off = 0;
    ck_assert_int_eq(msgpack_unpack_next(&up,
                                         RAW("\x83\xa2id\x01\xa2ok\xc2\xa5"
                                             "error\x81\xa4"
                                             "code\xa3new"),
                                         &off),
                     MSGPACK_UNPACK_SUCCESS);
    ck_assert_int_eq(envelope_reply_decode(&up.data, &r, &err), 0);
    ck_assert_int_eq(r.err.code, PROTO_EINVALID);
    ck_assert_uint_eq(r.code_name.len, 3);
    ck_assert_str_eq(r.err.path, "");
    msgpack_unpacked_destroy(&up);
}
END_TEST

static Suite *
envelope_suite(void)
{
    Suite *s = suite_create("envelope");
    TCase *tc;

    tc = tcase_create("malformed");
    tcase_add_loop_test(tc, test_envelope_parse_rejects_malformed, 0,
                        (int)(sizeof(bad) / sizeof(bad[0])));
    suite_add_tcase(s, tc);
    tc = tcase_create("requests");
    tcase_add_loop_test(tc, test_envelope_request_roundtrip, 0,
                        4 * PROTO_OP_COUNT);
    tcase_add_test(tc, test_envelope_parse_accepts_variants);
    tcase_add_test(tc, test_envelope_unknown_op_message_is_utf8);
    tcase_add_loop_test(tc, test_envelope_parse_memory_is_bounded, 0, 4);
    tcase_add_test(tc, test_envelope_op_tables);
    tcase_add_test(tc, test_envelope_replay_of_both_paths);
    suite_add_tcase(s, tc);
    tc = tcase_create("body_span");
    tcase_add_loop_test(tc, test_envelope_parse_records_body_span, 0,
                        (int)(sizeof(spans) / sizeof(spans[0])));
    tcase_add_test(tc, test_envelope_parse_span_without_body);
    suite_add_tcase(s, tc);
    tc = tcase_create("replies");
    tcase_add_test(tc, test_envelope_reply_ok_roundtrip);
    tcase_add_loop_test(tc, test_envelope_reply_error_roundtrip, 0,
                        -PROTO_CODE_MIN);
    tcase_add_test(tc, test_envelope_reply_decode_rejects_non_replies);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(envelope_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
