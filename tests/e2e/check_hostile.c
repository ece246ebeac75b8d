/*
 * check_hostile.c: every frame of the hostile corpus (tests/hostile/, listed
 * with its expected outcome in README.txt) through proto's frame reader,
 * envelope parser and receipt decoder, checking the code and path that
 * PROTOCOL.md requires. Each frame is fed whole and again byte by byte: the
 * incremental reader must reach the same verdict. A second case cuts a valid
 * receipt request at every byte.
 *
 * Thread: single-threaded; Check forks each test.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "envelope.h"
#include "frame.h"
#include "receipt.h"
#include "hostile_list.h"
#include "relpack.h"

#define MAX_BATCH 10000

static struct hostile_case cases[HOSTILE_MAX];
static int ncases;

/* What proto made of some bytes. */
struct verdict {
    const char *outcome;
    int code; /* PROTO_OK for a success reply */
    char path[PROTO_ERR_PATH_MAX];
    char message[PROTO_ERR_MSG_MAX];
};

static void
set(struct verdict *v, const char *outcome, int code,
    const struct proto_err *err)
{
    v->outcome = outcome;
    v->code = code;
    snprintf(v->path, sizeof(v->path), "%.*s", (int)sizeof(v->path) - 1,
             err ? err->path : "");
    snprintf(v->message, sizeof(v->message), "%.*s",
             (int)sizeof(v->message) - 1, err ? err->message : "");
}

/* The reply a daemon would send for one complete frame. */
static void
judge_frame(const char *frame, size_t len, struct verdict *v)
{
    struct proto_err err;
    struct envelope env;
    struct receipt r;
    msgpack_unpacked up;
    int rc;

    proto_err_clear(&err);
    msgpack_unpacked_init(&up);
    rc = envelope_parse(frame, len, &up, &env, &err);
    if (rc == 0 && env.op == PROTO_OP_RECEIPT) {
        rc = receipt_decode(env.body, &r, &err);
        if (rc == 0)
            receipt_clear(&r);
        /* As dispatch.c says it: a body of the wrong type is the body's
         * fault. */
        if (rc == PROTO_EINVALID && err.path[0] == '\0' && env.body != NULL &&
            env.body->type != MSGPACK_OBJECT_MAP &&
            env.body->type != MSGPACK_OBJECT_ARRAY)
            snprintf(err.path, sizeof(err.path), "body");
    } else if (rc == 0 && env.op == PROTO_OP_RECEIPTS && env.body != NULL &&
               env.body->type == MSGPACK_OBJECT_ARRAY &&
               env.body->via.array.size > MAX_BATCH) {
        rc = proto_err_set(&err, PROTO_ETOO_LARGE, NULL, "batch too large");
    }
    set(v, HOSTILE_REPLY, rc, rc ? &err : NULL);
    msgpack_unpacked_destroy(&up);
}

/* Feeds buf in pieces of step bytes (0 = all at once); judges the first
 * frame, as the connection would. */
static void
judge(const char *buf, size_t len, size_t step, struct verdict *v)
{
    struct frame_reader fr;
    struct proto_err err;
    char *frame = NULL;
    uint32_t flen = 0;
    size_t off = 0, used, n;
    int rc = 0;

    proto_err_clear(&err);
    frame_reader_init(&fr, FRAME_MAX_DEFAULT);
    while (off < len && frame == NULL) {
        n = step == 0 || step > len - off ? len - off : step;
        rc = frame_reader_feed(&fr, buf + off, n, &used, &frame, &flen, &err);
        if (rc != 0)
            break;
        off += used;
    }
    frame_reader_close(&fr);
    if (rc != 0) {
        set(v, HOSTILE_CLOSE, rc, &err);
        return;
    }
    if (frame == NULL) {
        set(v, HOSTILE_WAIT, 0, NULL);
        return;
    }
    judge_frame(frame, flen, v);
    free(frame);
}

static void
assert_verdict(const struct hostile_case *e, const struct verdict *v,
               const char *how)
{
    const char *got = v->code == 0 ? "ok" : proto_code_name(v->code);

    ck_assert_msg(strcmp(e->outcome, v->outcome) == 0,
                  "%s (%s): expected %s, got %s %s (%s: %s)", e->file, how,
                  e->outcome, v->outcome, got, v->path, v->message);
    if (strcmp(e->outcome, HOSTILE_WAIT) == 0)
        return;
    ck_assert_msg(strcmp(e->code, got) == 0,
                  "%s (%s): expected code %s, got %s (%s: %s)", e->file, how,
                  e->code, got, v->path, v->message);
    if (e->check_path)
        ck_assert_msg(strcmp(e->path, v->path) == 0,
                      "%s (%s): expected path \"%s\", got \"%s\" (%s)", e->file,
                      how, e->path, v->path, v->message);
}

START_TEST(test_hostile_corpus_frame_gets_expected_outcome)
{
    const struct hostile_case *e = &cases[_i];
    struct verdict v;
    char *buf;
    size_t len = 0;

    buf = hostile_list_read(HOSTILE_DIR, e->file, &len);
    ck_assert_msg(buf != NULL, "cannot read %s", e->file);
    judge(buf, len, 0, &v);
    assert_verdict(e, &v, "whole");
    /* Byte by byte costs a call per byte: for the two large frames,
     * pieces of 4099 bytes, which still straddle every buffer boundary. */
    judge(buf, len, len > 65536 ? 4099 : 1, &v);
    assert_verdict(e, &v, "in pieces");
    free(buf);
}
END_TEST

START_TEST(test_hostile_corpus_is_large_enough)
{
    ck_assert_int_ge(ncases, 40);
}
END_TEST

/* A valid request cut at every byte: with the length patched to the bytes
 * kept it is a whole frame that is not one object (malformed); with the
 * original length it never completes. */
START_TEST(test_hostile_truncation_at_every_byte_is_malformed)
{
    msgpack_sbuffer sb;
    struct verdict v;
    char *buf;
    size_t body, cut;

    msgpack_sbuffer_init(&sb);
    ck_assert_int_eq(relpack_receipt_frame(&sb, 1, 1, 1, 1, 1), 0);
    judge(sb.data, sb.size, 0, &v);
    ck_assert_int_eq(v.code, 0);
    body = sb.size - FRAME_HEADER_SIZE;
    buf = malloc(sb.size);
    ck_assert_ptr_nonnull(buf);
    for (cut = 1; cut < body; cut++) {
        frame_put_header((unsigned char *)buf, (uint32_t)cut);
        memcpy(buf + FRAME_HEADER_SIZE, sb.data + FRAME_HEADER_SIZE, cut);
        judge(buf, FRAME_HEADER_SIZE + cut, 0, &v);
        ck_assert_msg(strcmp(v.outcome, HOSTILE_REPLY) == 0 &&
                          v.code == PROTO_EMALFORMED,
                      "cut at %zu of %zu: %s %s", cut, body, v.outcome,
                      proto_code_name(v.code));
        judge(sb.data, FRAME_HEADER_SIZE + cut, 0, &v);
        ck_assert_str_eq(v.outcome, HOSTILE_WAIT);
    }
    free(buf);
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

static Suite *
hostile_suite(void)
{
    Suite *s = suite_create("hostile");
    TCase *tc;

    tc = tcase_create("corpus");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_hostile_corpus_is_large_enough);
    tcase_add_loop_test(tc, test_hostile_corpus_frame_gets_expected_outcome, 0,
                        ncases);
    suite_add_tcase(s, tc);

    tc = tcase_create("truncation");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_hostile_truncation_at_every_byte_is_malformed);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr;
    int failed;

    ncases = hostile_list_load(HOSTILE_DIR, cases, HOSTILE_MAX);
    if (ncases < 0) {
        fprintf(stderr, "cannot read %s/README.txt\n", HOSTILE_DIR);
        return EXIT_FAILURE;
    }
    sr = srunner_create(hostile_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
