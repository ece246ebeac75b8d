/*
 * check_frame.c: the incremental frame reader. Every frame reassembles
 * whatever the pieces its bytes arrive in (split at every byte boundary,
 * byte by byte, several frames per buffer); bad lengths are refused before
 * any body memory is taken.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "frame.h"

#define VEC_DIR TEST_DATA_DIR "/vectors"

static const char *const vector_files[] = {
    "s1_minimal_cuda.named.msgpack",
    "s2_backend_wgpu_dx12.compact.msgpack",
    "s2_u64_max.named.msgpack",
    "s2_non_ascii.compact.msgpack",
    "s3_full_coverage_latency.named.msgpack",
    "s3_long_tuning_profile.named.msgpack",
};
#define NVEC (sizeof(vector_files) / sizeof(vector_files[0]))

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
    buf = malloc((size_t)n + FRAME_HEADER_SIZE);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf + FRAME_HEADER_SIZE, 1, (size_t)n, f),
                      (size_t)n);
    fclose(f);
    frame_put_header((unsigned char *)buf, (uint32_t)n);
    *len = (size_t)n + FRAME_HEADER_SIZE;
    return buf;
}

/*
 * Feeds stream[0..len) in pieces whose ends are cuts[0..ncuts) (ascending),
 * collecting every frame; checks each against want[i] (bodies without
 * headers). Returns the number of frames.
 */
static size_t
feed_pieces(struct frame_reader *fr, const char *stream, size_t len,
            const size_t *cuts, size_t ncuts, char *const *want,
            const size_t *wantlen, size_t nwant)
{
    struct proto_err err;
    size_t from = 0, c, consumed, got = 0, end;
    char *frame;
    uint32_t flen;

    for (c = 0; c <= ncuts; c++) {
        end = c < ncuts ? cuts[c] : len;
        while (from < end) {
            ck_assert_int_eq(frame_reader_feed(fr, stream + from, end - from,
                                               &consumed, &frame, &flen, &err),
                             0);
            ck_assert_uint_le(consumed, end - from);
            from += consumed;
            if (frame == NULL) {
                ck_assert_uint_eq(from, end);
                continue;
            }
            ck_assert_uint_lt(got, nwant);
            ck_assert_uint_eq(flen, wantlen[got]);
            ck_assert_mem_eq(frame, want[got], flen);
            free(frame);
            got++;
        }
    }
    ck_assert_int_eq(frame_reader_in_frame(fr), 0);
    ck_assert_uint_eq(frame_reader_buffered(fr), 0);
    return got;
}

START_TEST(test_frame_split_at_every_byte)
{
    struct frame_reader fr;
    size_t len, k;
    char *buf = read_vector(vector_files[_i], &len);
    char *body = buf + FRAME_HEADER_SIZE;
    size_t blen = len - FRAME_HEADER_SIZE;

    for (k = 0; k <= len; k++) {
        frame_reader_init(&fr, FRAME_MAX_DEFAULT);
        ck_assert_uint_eq(feed_pieces(&fr, buf, len, &k, 1, &body, &blen, 1),
                          1);
        frame_reader_close(&fr);
    }
    free(buf);
}
END_TEST

START_TEST(test_frame_byte_by_byte)
{
    struct frame_reader fr;
    size_t len, k, *cuts;
    char *buf = read_vector(vector_files[_i], &len);
    char *body = buf + FRAME_HEADER_SIZE;
    size_t blen = len - FRAME_HEADER_SIZE;

    cuts = malloc(len * sizeof(*cuts));
    ck_assert_ptr_nonnull(cuts);
    for (k = 0; k < len; k++)
        cuts[k] = k + 1;
    frame_reader_init(&fr, FRAME_MAX_DEFAULT);
    ck_assert_uint_eq(feed_pieces(&fr, buf, len, cuts, len, &body, &blen, 1),
                      1);
    frame_reader_close(&fr);
    free(cuts);
    free(buf);
}
END_TEST

/* Every vector, back to back in one stream: in one piece, and in pieces
 * of every size from 1 to 64 bytes. */
START_TEST(test_frame_several_per_buffer)
{
    struct frame_reader fr;
    char *bufs[NVEC], *bodies[NVEC], *stream;
    size_t lens[NVEC], blens[NVEC], total = 0, at = 0, i, step, ncuts, *cuts;

    for (i = 0; i < NVEC; i++) {
        bufs[i] = read_vector(vector_files[i], &lens[i]);
        bodies[i] = bufs[i] + FRAME_HEADER_SIZE;
        blens[i] = lens[i] - FRAME_HEADER_SIZE;
        total += lens[i];
    }
    stream = malloc(total);
    ck_assert_ptr_nonnull(stream);
    for (i = 0; i < NVEC; i++) {
        memcpy(stream + at, bufs[i], lens[i]);
        at += lens[i];
    }
    cuts = malloc(total * sizeof(*cuts));
    ck_assert_ptr_nonnull(cuts);
    for (step = 0; step <= 64; step++) {
        ncuts = 0;
        if (step > 0)
            for (at = step; at < total; at += step)
                cuts[ncuts++] = at;
        frame_reader_init(&fr, FRAME_MAX_DEFAULT);
        ck_assert_uint_eq(
            feed_pieces(&fr, stream, total, cuts, ncuts, bodies, blens, NVEC),
            NVEC);
        frame_reader_close(&fr);
    }
    free(cuts);
    free(stream);
    for (i = 0; i < NVEC; i++)
        free(bufs[i]);
}
END_TEST

/* Bad lengths: an error as soon as the header is complete, with no body
 * memory taken, whether the header arrives whole or in pieces. */
static const struct {
    uint32_t max;
    const char hdr[4];
    int want;
} bad_lengths[] = {
    { FRAME_MAX_DEFAULT, { 0, 0, 0, 0 }, PROTO_EMALFORMED },
    { 1, { 0, 0, 0, 0 }, PROTO_EMALFORMED },
    { FRAME_MAX_DEFAULT, { 0, 0x10, 0, 1 }, PROTO_ETOO_LARGE },
    { FRAME_MAX_DEFAULT,
      { (char)0xff, (char)0xff, (char)0xff, (char)0xff },
      PROTO_ETOO_LARGE },
    { 100, { 0, 0, 0, 101 }, PROTO_ETOO_LARGE },
    { 1, { 0, 0, 0, 2 }, PROTO_ETOO_LARGE },
    { FRAME_MAX_CEILING, { 0x04, 0, 0, 1 }, PROTO_ETOO_LARGE },
};

START_TEST(test_frame_rejects_bad_length)
{
    struct frame_reader fr;
    struct proto_err err;
    char stream[8];
    size_t consumed, split;
    char *frame;
    uint32_t flen;
    int rc;

    memcpy(stream, bad_lengths[_i].hdr, 4);
    memset(stream + 4, 0x01, 4);
    for (split = 0; split <= 4; split++) {
        frame_reader_init(&fr, bad_lengths[_i].max);
        rc = 0;
        if (split > 0) {
            rc = frame_reader_feed(&fr, stream, split, &consumed, &frame, &flen,
                                   &err);
            if (split < 4) {
                ck_assert_int_eq(rc, 0);
                ck_assert_uint_eq(consumed, split);
                ck_assert_int_eq(frame_reader_in_frame(&fr), 1);
            }
        }
        if (split < 4)
            rc = frame_reader_feed(&fr, stream + split, sizeof(stream) - split,
                                   &consumed, &frame, &flen, &err);
        ck_assert_int_eq(rc, bad_lengths[_i].want);
        ck_assert_int_eq(err.code, bad_lengths[_i].want);
        ck_assert_ptr_null(frame);
        ck_assert_uint_eq(frame_reader_buffered(&fr), 0);
        ck_assert_ptr_null(fr.body);
        frame_reader_close(&fr);
    }
}
END_TEST

START_TEST(test_frame_accepts_max_frame_exactly)
{
    struct frame_reader fr;
    struct proto_err err;
    char stream[4 + 100];
    size_t consumed;
    char *frame;
    uint32_t flen;

    frame_put_header((unsigned char *)stream, 100);
    memset(stream + 4, 0x05, 100);
    frame_reader_init(&fr, 100);
    ck_assert_int_eq(frame_reader_feed(&fr, stream, sizeof(stream), &consumed,
                                       &frame, &flen, &err),
                     0);
    ck_assert_ptr_nonnull(frame);
    ck_assert_uint_eq(flen, 100);
    ck_assert_uint_eq(consumed, sizeof(stream));
    free(frame);
    frame_reader_close(&fr);
}
END_TEST

/* A peer that announces a big frame and sends little costs little. */
START_TEST(test_frame_memory_follows_bytes)
{
    struct frame_reader fr;
    struct proto_err err;
    char stream[4 + 10];
    size_t consumed;
    char *frame;
    uint32_t flen;

    frame_put_header((unsigned char *)stream, FRAME_MAX_DEFAULT);
    memset(stream + 4, 0, 10);
    frame_reader_init(&fr, FRAME_MAX_DEFAULT);
    ck_assert_int_eq(frame_reader_feed(&fr, stream, sizeof(stream), &consumed,
                                       &frame, &flen, &err),
                     0);
    ck_assert_ptr_null(frame);
    ck_assert_uint_eq(consumed, sizeof(stream));
    ck_assert_uint_le(frame_reader_buffered(&fr), 4096);
    ck_assert_int_eq(frame_reader_in_frame(&fr), 1);
    /* Closing mid-frame frees it; the reader starts over. */
    frame_reader_close(&fr);
    ck_assert_uint_eq(frame_reader_buffered(&fr), 0);
    ck_assert_int_eq(frame_reader_in_frame(&fr), 0);
}
END_TEST

/* The allocator the daemon gives its pool: what it was asked for. */
static size_t alloc_calls, alloc_last;

static void *
counting_alloc(size_t size)
{
    alloc_calls++;
    alloc_last = size;
    return malloc(size);
}

/* A body that arrives whole in one feed comes from fr->alloc, in one
 * piece of its own length, and whole_alloc says so; a body that arrives
 * in pieces is grown by realloc, and whole_alloc is 0: a pool must not
 * take back a buffer whose size it did not choose. */
START_TEST(test_frame_whole_body_from_alloc)
{
    struct frame_reader fr;
    struct proto_err err;
    char stream[2 * (4 + 700)];
    size_t consumed, off;
    char *frame;
    uint32_t flen;

    memset(stream, 'x', sizeof(stream));
    frame_put_header((unsigned char *)stream, 700);
    frame_put_header((unsigned char *)stream + 704, 700);
    frame_reader_init(&fr, FRAME_MAX_DEFAULT);
    fr.alloc = counting_alloc;
    alloc_calls = 0;
    ck_assert_int_eq(frame_reader_feed(&fr, stream, sizeof(stream), &consumed,
                                       &frame, &flen, &err),
                     0);
    ck_assert_ptr_nonnull(frame);
    ck_assert_uint_eq(flen, 700);
    ck_assert_uint_eq(consumed, 704);
    ck_assert_uint_eq(alloc_calls, 1);
    ck_assert_uint_eq(alloc_last, 700);
    ck_assert_uint_eq(fr.whole_alloc, 700);
    free(frame);
    /* The second frame in two pieces: header and half, then the rest. */
    ck_assert_int_eq(frame_reader_feed(&fr, stream + 704, 354, &consumed,
                                       &frame, &flen, &err),
                     0);
    ck_assert_ptr_null(frame);
    ck_assert_int_eq(frame_reader_feed(&fr, stream + 1058, 350, &consumed,
                                       &frame, &flen, &err),
                     0);
    ck_assert_ptr_nonnull(frame);
    ck_assert_uint_eq(flen, 700);
    ck_assert_uint_eq(alloc_calls, 1);
    ck_assert_uint_eq(fr.whole_alloc, 0);
    for (off = 0; off < flen; off++)
        ck_assert_int_eq(frame[off], 'x');
    free(frame);
    frame_reader_close(&fr);
}
END_TEST

START_TEST(test_frame_init_clamps_max)
{
    struct frame_reader fr;

    frame_reader_init(&fr, 0);
    ck_assert_uint_eq(fr.max_frame, 1);
    frame_reader_init(&fr, FRAME_MAX_CEILING + 1);
    ck_assert_uint_eq(fr.max_frame, FRAME_MAX_CEILING);
    frame_reader_init(&fr, UINT32_MAX);
    ck_assert_uint_eq(fr.max_frame, FRAME_MAX_CEILING);
    frame_reader_init(&fr, 12345);
    ck_assert_uint_eq(fr.max_frame, 12345);
    frame_reader_close(&fr);
}
END_TEST

START_TEST(test_frame_sbuffer_builds_frames)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    size_t a, b;
    uint32_t len;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    a = frame_sbuffer_begin(&sb);
    ck_assert_uint_eq(a, 0);
    msgpack_pack_array(&pk, 300);
    for (len = 0; len < 300; len++)
        msgpack_pack_uint32(&pk, len);
    len = frame_sbuffer_finish(&sb, a);
    ck_assert_uint_eq(len, sb.size - 4);
    b = frame_sbuffer_begin(&sb);
    ck_assert_uint_eq(b, sb.size - 4);
    msgpack_pack_nil(&pk);
    ck_assert_uint_eq(frame_sbuffer_finish(&sb, b), 1);
    ck_assert_int_eq((unsigned char)sb.data[0], (len >> 24) & 0xff);
    ck_assert_int_eq((unsigned char)sb.data[1], (len >> 16) & 0xff);
    ck_assert_int_eq((unsigned char)sb.data[2], (len >> 8) & 0xff);
    ck_assert_int_eq((unsigned char)sb.data[3], len & 0xff);
    ck_assert_mem_eq(sb.data + b, "\x00\x00\x00\x01\xc0", 5);
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

static Suite *
frame_suite(void)
{
    Suite *s = suite_create("frame");
    TCase *tc;

    tc = tcase_create("reassembly");
    tcase_add_loop_test(tc, test_frame_split_at_every_byte, 0, (int)NVEC);
    tcase_add_loop_test(tc, test_frame_byte_by_byte, 0, (int)NVEC);
    tcase_add_test(tc, test_frame_several_per_buffer);
    suite_add_tcase(s, tc);
    tc = tcase_create("lengths");
    tcase_add_loop_test(tc, test_frame_rejects_bad_length, 0,
                        (int)(sizeof(bad_lengths) / sizeof(bad_lengths[0])));
    tcase_add_test(tc, test_frame_accepts_max_frame_exactly);
    tcase_add_test(tc, test_frame_init_clamps_max);
    suite_add_tcase(s, tc);
    tc = tcase_create("memory");
    tcase_add_test(tc, test_frame_memory_follows_bytes);
    tcase_add_test(tc, test_frame_whole_body_from_alloc);
    suite_add_tcase(s, tc);
    tc = tcase_create("building");
    tcase_add_test(tc, test_frame_sbuffer_builds_frames);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(frame_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
