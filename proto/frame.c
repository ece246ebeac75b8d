/*
 * frame.c: incremental frame reader and frame-building helpers.
 *
 * Invariant: either hdr_have < 4 and body == NULL (reading a header), or
 * hdr_have == 4 and body_have < body_len (reading a body). The body buffer
 * grows by doubling, capped at body_len, so memory follows the bytes that
 * actually arrived. Pure; safe on any thread for distinct readers.
 */
#include "frame.h"

#include <stdlib.h>
#include <string.h>

#define FIRST_CHUNK 4096u

void
frame_reader_init(struct frame_reader *fr, uint32_t max_frame)
{
    memset(fr, 0, sizeof(*fr));
    if (max_frame == 0)
        max_frame = 1;
    if (max_frame > FRAME_MAX_CEILING)
        max_frame = FRAME_MAX_CEILING;
    fr->max_frame = max_frame;
}

void
frame_reader_close(struct frame_reader *fr)
{
    free(fr->body);
    fr->body = NULL;
    fr->body_cap = 0;
    fr->hdr_have = 0;
    fr->body_have = 0;
    fr->body_len = 0;
}

size_t
frame_reader_buffered(const struct frame_reader *fr)
{
    return fr->body_cap;
}

int
frame_reader_in_frame(const struct frame_reader *fr)
{
    return fr->hdr_have > 0;
}

static int
grow(struct frame_reader *fr, size_t want)
{
    size_t cap = fr->body_cap ? fr->body_cap : FIRST_CHUNK;
    char *p;

    /* The whole body at once: one buffer of its length from alloc. */
    if (fr->body == NULL && fr->alloc != NULL && want == fr->body_len) {
        if ((p = fr->alloc(want)) == NULL)
            return -1;
        fr->body = p;
        fr->body_cap = want;
        fr->body_whole = 1;
        return 0;
    }
    fr->body_whole = 0;
    while (cap < want)
        cap *= 2;
    if (cap > fr->body_len)
        cap = fr->body_len;
    p = realloc(fr->body, cap);
    if (p == NULL)
        return -1;
    fr->body = p;
    fr->body_cap = cap;
    return 0;
}

int
frame_reader_feed(struct frame_reader *fr, const char *buf, size_t len,
                  size_t *consumed, char **frame, uint32_t *frame_len,
                  struct proto_err *err)
{
    size_t off = 0, n;
    uint32_t want;

    *frame = NULL;
    *frame_len = 0;
    while (off < len) {
        if (fr->hdr_have < FRAME_HEADER_SIZE) {
            n = FRAME_HEADER_SIZE - fr->hdr_have;
            if (n > len - off)
                n = len - off;
            memcpy(fr->hdr + fr->hdr_have, buf + off, n);
            fr->hdr_have += n;
            off += n;
            if (fr->hdr_have < FRAME_HEADER_SIZE)
                break;
            want = (uint32_t)fr->hdr[0] << 24 | (uint32_t)fr->hdr[1] << 16 |
                   (uint32_t)fr->hdr[2] << 8 | (uint32_t)fr->hdr[3];
            *consumed = off;
            if (want == 0)
                return proto_err_set(err, PROTO_EMALFORMED, NULL,
                                     "frame length is 0; a frame holds one "
                                     "msgpack object of at least 1 byte");
            if (want > fr->max_frame)
                return proto_err_set(err, PROTO_ETOO_LARGE, NULL,
                                     "frame length %lu is over max_frame "
                                     "%lu",
                                     (unsigned long)want,
                                     (unsigned long)fr->max_frame);
            fr->body_len = want;
            fr->body_have = 0;
            continue;
        }
        n = fr->body_len - fr->body_have;
        if (n > len - off)
            n = len - off;
        if (fr->body_have + n > fr->body_cap &&
            grow(fr, fr->body_have + n) != 0) {
            *consumed = off;
            return proto_err_set(err, PROTO_ENOMEM, NULL,
                                 "no memory for a frame of %lu bytes",
                                 (unsigned long)fr->body_len);
        }
        memcpy(fr->body + fr->body_have, buf + off, n);
        fr->body_have += (uint32_t)n;
        off += n;
        if (fr->body_have == fr->body_len) {
            *frame = fr->body;
            *frame_len = fr->body_len;
            fr->whole_alloc = fr->body_whole ? fr->body_len : 0;
            fr->body_whole = 0;
            fr->body = NULL;
            fr->body_cap = 0;
            fr->hdr_have = 0;
            fr->body_have = 0;
            fr->body_len = 0;
            break;
        }
    }
    *consumed = off;
    return 0;
}

void
frame_put_header(unsigned char out[FRAME_HEADER_SIZE], uint32_t len)
{
    out[0] = (unsigned char)(len >> 24);
    out[1] = (unsigned char)(len >> 16);
    out[2] = (unsigned char)(len >> 8);
    out[3] = (unsigned char)len;
}

size_t
frame_sbuffer_begin(msgpack_sbuffer *sb)
{
    static const char zero[FRAME_HEADER_SIZE];
    size_t start = sb->size;

    if (msgpack_sbuffer_write(sb, zero, sizeof(zero)) != 0)
        return (size_t)-1;
    return start;
}

uint32_t
frame_sbuffer_finish(msgpack_sbuffer *sb, size_t start)
{
    uint32_t len = (uint32_t)(sb->size - start - FRAME_HEADER_SIZE);

    frame_put_header((unsigned char *)sb->data + start, len);
    return len;
}
