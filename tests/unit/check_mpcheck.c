/*
 * check_mpcheck.c: the bounded msgpack walk. Nesting at the limit and one
 * past it, container and string headers that claim more than the frame
 * holds, truncation at every byte, trailing bytes, 0xc1; and msgpack-c's own
 * unpacker accepting everything the walk accepts. Then mpcheck_skip() and
 * mpcheck_iter, which find exact bytes inside checked frames.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "mpcheck.h"

#define VEC_DIR TEST_DATA_DIR "/vectors"

static char *
read_vector(const char *name, size_t *len)
{
    char path[1024];
    FILE *f;
    char *buf;
    long n;

    snprintf(path, sizeof(path), "%s/%s", VEC_DIR, name);
    f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s: %s", path, strerror(errno));
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    ck_assert_int_gt(n, 0);
    rewind(f);
    buf = malloc((size_t)n);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* msgpack-c must take whatever mpcheck passed, whole. */
static void
assert_unpacks(const char *buf, size_t len)
{
    msgpack_unpacked up;
    size_t off = 0;

    msgpack_unpacked_init(&up);
    ck_assert_int_eq(msgpack_unpack_next(&up, buf, len, &off),
                     MSGPACK_UNPACK_SUCCESS);
    ck_assert_uint_eq(off, len);
    msgpack_unpacked_destroy(&up);
}

static void
assert_malformed(const char *buf, size_t len, const char *msg)
{
    struct proto_err err;

    proto_err_clear(&err);
    ck_assert_int_eq(mpcheck(buf, len, &err), PROTO_EMALFORMED);
    ck_assert_int_eq(err.code, PROTO_EMALFORMED);
    ck_assert_str_eq(err.path, "");
    if (msg != NULL)
        ck_assert_msg(strstr(err.message, msg) != NULL, "message \"%s\"",
                      err.message);
}

/* depth containers, each holding the next; the innermost holds inner. The
 * form alternates between arrays and maps when mixed is set. */
static size_t
nest(char *out, int depth, int mixed, const char *inner, size_t ilen)
{
    size_t n = 0;
    int i;

    for (i = 0; i < depth; i++) {
        if (mixed && i % 2 == 1) {
            out[n++] = (char)0x81; /* fixmap of 1: key, then the rest */
            out[n++] = 0x00;
        } else {
            out[n++] = (char)0x91;
        }
    }
    memcpy(out + n, inner, ilen);
    return n + ilen;
}

START_TEST(test_mpcheck_depth_limit)
{
    char buf[256];
    size_t n;
    int mixed = _i;

    /* 32 open containers: accepted, by mpcheck and by msgpack-c. */
    n = nest(buf, MPCHECK_MAX_DEPTH, mixed, "\x01", 1);
    ck_assert_int_eq(mpcheck(buf, n, NULL), 0);
    assert_unpacks(buf, n);
    /* An empty container is a level too, as it is to msgpack-c. */
    n = nest(buf, MPCHECK_MAX_DEPTH - 1, mixed, "\x90", 1);
    ck_assert_int_eq(mpcheck(buf, n, NULL), 0);
    assert_unpacks(buf, n);
    n = nest(buf, MPCHECK_MAX_DEPTH - 1, mixed, "\x80", 1);
    ck_assert_int_eq(mpcheck(buf, n, NULL), 0);
    assert_unpacks(buf, n);
    /* A scalar at the deepest level whose payload begins with a byte that
     * would be a container's type is still a scalar (the depth check once
     * read the byte after the header instead of the type). */
    n = nest(buf, MPCHECK_MAX_DEPTH, mixed, "\xcc\x90", 2);
    ck_assert_int_eq(mpcheck(buf, n, NULL), 0);
    assert_unpacks(buf, n);
    n = nest(buf, MPCHECK_MAX_DEPTH, mixed, "\xa1\x80", 2);
    ck_assert_int_eq(mpcheck(buf, n, NULL), 0);
    assert_unpacks(buf, n);
    n = nest(buf, MPCHECK_MAX_DEPTH, mixed, "\x90", 1);
    assert_malformed(buf, n, "nesting deeper than 32");
    n = nest(buf, MPCHECK_MAX_DEPTH, mixed, "\xdf\x00\x00\x00\x00", 5);
    assert_malformed(buf, n, "nesting deeper than 32");
    /* 33: rejected. */
    n = nest(buf, MPCHECK_MAX_DEPTH + 1, mixed, "\x01", 1);
    assert_malformed(buf, n, "nesting deeper than 32");
    n = nest(buf, MPCHECK_MAX_DEPTH, mixed, "\x91\x01", 2);
    assert_malformed(buf, n, "nesting deeper than 32");
    n = nest(buf, 100, mixed, "\x01", 1);
    assert_malformed(buf, n, "nesting deeper than 32");
}
END_TEST

/* Siblings at depth 32 do not add up: depth is nesting, not a count. */
START_TEST(test_mpcheck_depth_counts_nesting_only)
{
    char buf[256];
    size_t n;

    n = nest(buf, MPCHECK_MAX_DEPTH - 2, 0, "\x93\x91\x01\x91\x02\x91\x03", 7);
    ck_assert_int_eq(mpcheck(buf, n, NULL), 0);
    assert_unpacks(buf, n);
}
END_TEST

/* Headers that claim more than the bytes left. */
static const struct {
    const char *bytes;
    size_t len;
    const char *msg;
} lying[] = {
    { "\xdd\xff\xff\xff\xff\x01\x02", 7, "claims 4294967295 elements" },
    { "\xdd\x00\x00\x00\x03\x01\x02", 7, "claims 3 elements" },
    { "\xdf\xff\xff\xff\xff\x01\x02", 7, "claims" },
    /* A map of 2 needs 4 objects; 3 bytes cannot hold them. */
    { "\xdf\x00\x00\x00\x02\x01\x02\x03", 8, "claims 4 elements" },
    { "\xdc\xff\xff\x01", 4, "claims 65535 elements" },
    { "\xde\x00\x02\x01\x02\x03", 6, "claims 4 elements" },
    { "\x9f\x01\x02", 3, "claims 15 elements" },
    { "\x8f\x01\x02", 3, "claims 30 elements" },
    { "\xdb\xff\xff\xff\xff"
      "abc",
      8, "claims 4294967295 bytes" },
    { "\xdb\x00\x00\x00\x04"
      "abc",
      8, "claims 4 bytes" },
    { "\xda\x00\x04"
      "abc",
      6, "claims 4 bytes" },
    { "\xd9\x04"
      "abc",
      5, "claims 4 bytes" },
    { "\xa4"
      "abc",
      4, "claims 4 bytes" },
    { "\xc6\xff\xff\xff\xff"
      "abc",
      8, "claims 4294967295 bytes" },
    { "\xc5\x00\x04"
      "abc",
      6, "claims 4 bytes" },
    { "\xc4\x04"
      "abc",
      5, "claims 4 bytes" },
    { "\xc9\xff\xff\xff\xff\x01"
      "abc",
      9, "claims 4294967295 bytes" },
    { "\xc8\x00\x04\x01"
      "abc",
      7, "claims 4 bytes" },
    { "\xc7\x04\x01"
      "abc",
      6, "claims 4 bytes" },
    { "\xd8\x01"
      "abc",
      5, "claims 17 bytes" },
    { "\xd4\x01", 2, "claims 2 bytes" },
    { "\xcf\x01\x02", 3, "claims 8 bytes" },
    { "\xcb\x01", 2, "claims 8 bytes" },
    { "\x92\xdb\x7f\xff\xff\xff\x01", 7, "claims 2147483647 bytes" },
    { "\xdb\x00\x00", 3, "header truncated" },
    { "\xc9\x00\x00\x00\x01", 5, "header truncated" },
    { "\xdd\x00", 2, "header truncated" },
};

START_TEST(test_mpcheck_rejects_lying_headers)
{
    assert_malformed(lying[_i].bytes, lying[_i].len, lying[_i].msg);
}
END_TEST

/* A few hand-made objects covering every type byte family. */
static const struct {
    const char *bytes;
    size_t len;
} valid[] = {
    { "\x00", 1 },
    { "\x7f", 1 },
    { "\xe0", 1 },
    { "\xc0", 1 },
    { "\xc2", 1 },
    { "\xc3", 1 },
    { "\xa0", 1 },
    { "\x90", 1 },
    { "\x80", 1 },
    { "\xcc\xff", 2 },
    { "\xcd\xff\xff", 3 },
    { "\xce\xff\xff\xff\xff", 5 },
    { "\xcf\xff\xff\xff\xff\xff\xff\xff\xff", 9 },
    { "\xd0\x80", 2 },
    { "\xd1\x80\x00", 3 },
    { "\xd2\x80\x00\x00\x00", 5 },
    { "\xd3\x80\x00\x00\x00\x00\x00\x00\x00", 9 },
    { "\xca\x3f\x80\x00\x00", 5 },
    { "\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00", 9 },
    { "\xd9\x03"
      "abc",
      5 },
    { "\xda\x00\x03"
      "abc",
      6 },
    { "\xdb\x00\x00\x00\x03"
      "abc",
      8 },
    { "\xc4\x03"
      "abc",
      5 },
    { "\xc5\x00\x03"
      "abc",
      6 },
    { "\xc6\x00\x00\x00\x03"
      "abc",
      8 },
    { "\xd4\x01\x02", 3 },
    { "\xd5\x01\x02\x03", 4 },
    { "\xd6\x01\x01\x02\x03\x04", 6 },
    { "\xd7\x01\x01\x02\x03\x04\x05\x06\x07\x08", 10 },
    { "\xd8\x01"
      "0123456789abcdef",
      18 },
    { "\xc7\x02\x01"
      "ab",
      5 },
    { "\xc8\x00\x02\x01"
      "ab",
      6 },
    { "\xc9\x00\x00\x00\x02\x01"
      "ab",
      8 },
    { "\xc7\x00\x01", 3 },
    { "\xdc\x00\x02\x01\x02", 5 },
    { "\xdd\x00\x00\x00\x02\x01\x02", 7 },
    { "\xde\x00\x01\xa1k\x01", 6 },
    { "\xdf\x00\x00\x00\x01\xa1k\x90", 8 },
    { "\x82\xa1"
      "a\x91\x90\xa1"
      "b\x81\xc0\xc0",
      10 },
    { "\xdc\x00\x00", 3 },
    { "\xdf\x00\x00\x00\x00", 5 },
};

START_TEST(test_mpcheck_accepts_every_type)
{
    ck_assert_int_eq(mpcheck(valid[_i].bytes, valid[_i].len, NULL), 0);
    assert_unpacks(valid[_i].bytes, valid[_i].len);
}
END_TEST

/* Cutting a valid object anywhere leaves a truncated one; adding a byte
 * leaves trailing bytes. */
static void
check_cuts(const char *buf, size_t len)
{
    char *more;
    size_t k;

    ck_assert_int_eq(mpcheck(buf, len, NULL), 0);
    assert_unpacks(buf, len);
    for (k = 0; k < len; k++)
        assert_malformed(buf, k, NULL);
    more = malloc(len + 1);
    ck_assert_ptr_nonnull(more);
    memcpy(more, buf, len);
    more[len] = 0x00;
    assert_malformed(more, len + 1, "1 trailing bytes");
    free(more);
}

START_TEST(test_mpcheck_truncation_at_every_byte)
{
    check_cuts(valid[_i].bytes, valid[_i].len);
}
END_TEST

static const char *const vector_files[] = {
    "s1_full_coverage_cpu.named.msgpack",
    "s2_u64_max.compact.msgpack",
    "s2_u64_max.named.msgpack",
    "s2_non_ascii.named.msgpack",
    "s3_full_coverage_latency.compact.msgpack",
    "s3_full_coverage_latency.named.msgpack",
    "s3_long_tuning_profile.named.msgpack",
};

START_TEST(test_mpcheck_truncation_of_vectors)
{
    size_t len;
    char *buf = read_vector(vector_files[_i], &len);

    check_cuts(buf, len);
    free(buf);
}
END_TEST

START_TEST(test_mpcheck_rejects_c1_and_empty)
{
    assert_malformed("\xc1", 1, "0xc1 at byte 0");
    assert_malformed("\x92\x01\xc1", 3, "0xc1 at byte 2");
    assert_malformed("\x81\xc1\x01", 3, "0xc1 at byte 1");
    assert_malformed("", 0, "no bytes");
    assert_malformed("\x01\x02", 2, "1 trailing bytes");
    assert_malformed("\x90\x90\x90", 3, "2 trailing bytes");
}
END_TEST

/*
 * Random mutations of the vectors: whatever mpcheck accepts, msgpack-c
 * unpacks whole. A small LCG keeps the run reproducible.
 */
static uint32_t
lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

START_TEST(test_mpcheck_accepted_means_unpackable)
{
    size_t len, n, k;
    char *orig = read_vector(vector_files[_i], &len);
    char *buf = malloc(len + 16);
    uint32_t seed = 12345u + (uint32_t)_i;
    int round, accepted = 0;

    ck_assert_ptr_nonnull(buf);
    for (round = 0; round < 4000; round++) {
        memcpy(buf, orig, len);
        n = len;
        for (k = 0; k < 1 + lcg(&seed) % 4; k++) {
            switch (lcg(&seed) % 3) {
            case 0:
                buf[lcg(&seed) % n] = (char)lcg(&seed);
                break;
            case 1:
                if (n > 1)
                    n--;
                break;
            default:
                buf[lcg(&seed) % n] ^= (char)(1u << (lcg(&seed) % 8));
                break;
            }
        }
        if (mpcheck(buf, n, NULL) == 0) {
            accepted++;
            assert_unpacks(buf, n);
            /* The walk that finds bytes in a checked frame agrees. */
            ck_assert_uint_eq(mpcheck_skip(buf, n), n);
        }
    }
    /* The mutations must leave some inputs valid, or this proves nothing. */
    ck_assert_int_gt(accepted, 100);
    free(buf);
    free(orig);
}
END_TEST

/* ---- mpcheck_skip and mpcheck_iter: exact bytes inside a checked frame */

/* The size of a whole object, with bytes after it left alone; 0 for every
 * cut of it. */
START_TEST(test_mpcheck_skip_finds_every_type)
{
    const char *b = valid[_i].bytes;
    size_t len = valid[_i].len, k;
    char *more = malloc(len + 3);

    ck_assert_ptr_nonnull(more);
    ck_assert_uint_eq(mpcheck_skip(b, len), len);
    memcpy(more, b, len);
    memcpy(more + len, "\x91\x01\xc1", 3);
    ck_assert_uint_eq(mpcheck_skip(more, len + 3), len);
    for (k = 0; k < len; k++)
        ck_assert_uint_eq(mpcheck_skip(b, k), 0);
    free(more);
}
END_TEST

START_TEST(test_mpcheck_skip_refuses_lying_headers)
{
    ck_assert_uint_eq(mpcheck_skip(lying[_i].bytes, lying[_i].len), 0);
}
END_TEST

/* Deep nesting costs no stack, and 0xc1 is not an object. */
START_TEST(test_mpcheck_skip_deep_and_c1)
{
    size_t n = 100000, k;
    char *buf = malloc(n + 1);

    ck_assert_ptr_nonnull(buf);
    for (k = 0; k < n; k++)
        buf[k] = (char)0x91;
    buf[n] = 0x01;
    ck_assert_uint_eq(mpcheck_skip(buf, n + 1), n + 1);
    ck_assert_uint_eq(mpcheck_skip(buf, n), 0);
    free(buf);
    ck_assert_uint_eq(mpcheck_skip("\xc1", 1), 0);
    ck_assert_uint_eq(mpcheck_skip("\x92\x01\xc1", 3), 0);
    ck_assert_uint_eq(mpcheck_skip("", 0), 0);
}
END_TEST

/* Walks buf's container and checks each element against want, in order:
 * their offsets and sizes in buf. */
static void
check_walk(const char *buf, size_t len, const size_t *at, const size_t *n,
           size_t count)
{
    struct mpcheck_iter it;
    const char *obj;
    size_t olen, i;

    ck_assert_int_eq(mpcheck_iter_init(&it, buf, len), 0);
    ck_assert_uint_eq(it.n, count);
    for (i = 0; i < count; i++) {
        ck_assert_int_eq(mpcheck_iter_next(&it, &obj, &olen), 0);
        ck_assert_uint_eq((size_t)(obj - buf), at[i]);
        ck_assert_uint_eq(olen, n[i]);
    }
    ck_assert_int_eq(mpcheck_iter_next(&it, &obj, &olen), -1);
    ck_assert_uint_eq(it.n, 0);
}

START_TEST(test_mpcheck_iter_gives_each_element)
{
    /* [1, "ab", [2, 3], {}, uint32 7] */
    static const char arr[] = "\x95\x01\xa2"
                              "ab\x92\x02\x03\x80\xce\x00\x00\x00\x07";
    static const size_t arr_at[] = { 1, 2, 5, 8, 9 };
    static const size_t arr_n[] = { 1, 3, 3, 1, 5 };
    /* map16 {"a": 1, bin "body": [nil]} */
    static const char map[] = "\xde\x00\x02\xa1"
                              "a\x01\xc4\x04"
                              "body\x91\xc0";
    static const size_t map_at[] = { 3, 5, 6, 12 };
    static const size_t map_n[] = { 2, 1, 6, 2 };

    check_walk(arr, sizeof(arr) - 1, arr_at, arr_n, 5);
    check_walk(map, sizeof(map) - 1, map_at, map_n, 4);
    check_walk("\x90", 1, NULL, NULL, 0);
    check_walk("\xdf\x00\x00\x00\x00", 5, NULL, NULL, 0);
}
END_TEST

START_TEST(test_mpcheck_iter_refuses_non_containers_and_cuts)
{
    struct mpcheck_iter it;
    const char *obj;
    size_t olen;

    /* Not a container, or no whole header. */
    ck_assert_int_eq(mpcheck_iter_init(&it, "\x01", 1), -1);
    ck_assert_int_eq(mpcheck_iter_init(&it,
                                       "\xa2"
                                       "ab",
                                       3),
                     -1);
    ck_assert_int_eq(mpcheck_iter_init(&it, "", 0), -1);
    ck_assert_int_eq(mpcheck_iter_init(&it, "\xdc\x00", 2), -1);
    /* An element the buffer cuts off is not given. */
    ck_assert_int_eq(mpcheck_iter_init(&it,
                                       "\x92\x01\xa3"
                                       "ab",
                                       5),
                     0);
    ck_assert_int_eq(mpcheck_iter_next(&it, &obj, &olen), 0);
    ck_assert_uint_eq(olen, 1);
    ck_assert_int_eq(mpcheck_iter_next(&it, &obj, &olen), -1);
}
END_TEST

/* The elements of a shared vector (a map, or an array) tile it exactly. */
START_TEST(test_mpcheck_iter_tiles_vectors)
{
    struct mpcheck_iter it;
    const char *obj;
    size_t len, olen, end;
    char *buf = read_vector(vector_files[_i], &len);

    ck_assert_int_eq(mpcheck_iter_init(&it, buf, len), 0);
    ck_assert_uint_gt(it.n, 0);
    end = (size_t)(it.at - buf);
    while (it.n > 0) {
        ck_assert_int_eq(mpcheck_iter_next(&it, &obj, &olen), 0);
        ck_assert_uint_eq((size_t)(obj - buf), end);
        end += olen;
    }
    ck_assert_uint_eq(end, len);
    free(buf);
}
END_TEST

static Suite *
mpcheck_suite(void)
{
    Suite *s = suite_create("mpcheck");
    TCase *tc;

    tc = tcase_create("depth");
    tcase_add_loop_test(tc, test_mpcheck_depth_limit, 0, 2);
    tcase_add_test(tc, test_mpcheck_depth_counts_nesting_only);
    suite_add_tcase(s, tc);
    tc = tcase_create("lying_headers");
    tcase_add_loop_test(tc, test_mpcheck_rejects_lying_headers, 0,
                        (int)(sizeof(lying) / sizeof(lying[0])));
    suite_add_tcase(s, tc);
    tc = tcase_create("types");
    tcase_add_loop_test(tc, test_mpcheck_accepts_every_type, 0,
                        (int)(sizeof(valid) / sizeof(valid[0])));
    tcase_add_test(tc, test_mpcheck_rejects_c1_and_empty);
    suite_add_tcase(s, tc);
    tc = tcase_create("truncation");
    tcase_add_loop_test(tc, test_mpcheck_truncation_at_every_byte, 0,
                        (int)(sizeof(valid) / sizeof(valid[0])));
    tcase_add_loop_test(tc, test_mpcheck_truncation_of_vectors, 0,
                        (int)(sizeof(vector_files) / sizeof(vector_files[0])));
    suite_add_tcase(s, tc);
    tc = tcase_create("skip_and_iter");
    tcase_add_loop_test(tc, test_mpcheck_skip_finds_every_type, 0,
                        (int)(sizeof(valid) / sizeof(valid[0])));
    tcase_add_loop_test(tc, test_mpcheck_skip_refuses_lying_headers, 0,
                        (int)(sizeof(lying) / sizeof(lying[0])));
    tcase_add_test(tc, test_mpcheck_skip_deep_and_c1);
    tcase_add_test(tc, test_mpcheck_iter_gives_each_element);
    tcase_add_test(tc, test_mpcheck_iter_refuses_non_containers_and_cuts);
    tcase_add_loop_test(tc, test_mpcheck_iter_tiles_vectors, 0,
                        (int)(sizeof(vector_files) / sizeof(vector_files[0])));
    suite_add_tcase(s, tc);
    tc = tcase_create("unpack_agrees");
    tcase_add_loop_test(tc, test_mpcheck_accepted_means_unpackable, 0,
                        (int)(sizeof(vector_files) / sizeof(vector_files[0])));
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(mpcheck_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
