/*
 * frame.h: the length-prefixed framing of PROTOCOL section 1.
 *
 * A frame is a 4-byte big-endian length N, then N bytes holding one msgpack
 * object, with 1 <= N <= max_frame. The reader is incremental: bytes may
 * arrive in pieces of any size, and a frame's buffer grows only as its bytes
 * arrive, so a peer that announces a large frame and sends little costs
 * little.
 */
#ifndef RECEIPTD_PROTO_FRAME_H
#define RECEIPTD_PROTO_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "error.h"

#define FRAME_MAX_DEFAULT (1u << 20)
#define FRAME_MAX_CEILING (64u << 20)
#define FRAME_HEADER_SIZE 4

struct frame_reader {
    uint32_t max_frame;
    unsigned char hdr[FRAME_HEADER_SIZE];
    size_t hdr_have;
    char *body; /* owned; NULL between frames */
    size_t body_cap;
    uint32_t body_len;
    uint32_t body_have;
    /* Optional, set after frame_reader_init (which clears it):
     * allocates a body that arrives whole in one feed, in one
     * piece of exactly body_len bytes (NULL: malloc). Such a frame's
     * *frame_len is then also the length it was allocated for, reported
     * in whole_alloc, which a caller with a pool of sizes gives back
     * with. Whatever it returns must be free()able. */
    void *(*alloc)(size_t size);
    uint32_t whole_alloc; /* the last frame: its alloc length, or 0 */
    int body_whole;       /* body came from alloc and was not grown */
};

/* Embedded object. max_frame is clamped to [1, FRAME_MAX_CEILING]. */
void frame_reader_init(struct frame_reader *fr, uint32_t max_frame);

/* Frees a partial frame, if any. The reader may be initialised again. */
void frame_reader_close(struct frame_reader *fr);

/* Bytes of the current partial frame held in memory (0 between frames). */
size_t frame_reader_buffered(const struct frame_reader *fr);

/* True when a frame has begun (some of its header or body has arrived). */
int frame_reader_in_frame(const struct frame_reader *fr);

/*
 * Consumes bytes of buf[0..len) and reports how many in *consumed.
 * Returns:
 *  0, *frame == NULL: every byte was consumed, more are needed;
 *  0, *frame != NULL: a whole frame; the caller takes *frame (free() it) of
 *     *frame_len bytes; bytes after it are left unconsumed, call again;
 *     fr->whole_alloc is *frame_len when fr->alloc made *frame, else 0;
 *  PROTO_ETOO_LARGE: a length above max_frame; PROTO_EMALFORMED: a length of
 *     0; PROTO_ENOMEM: no memory for the frame. After an error the stream
 *     cannot be trusted and the reader must not be fed again.
 * buf is borrowed.
 */
int frame_reader_feed(struct frame_reader *fr, const char *buf, size_t len,
                      size_t *consumed, char **frame, uint32_t *frame_len,
                      struct proto_err *err);

/* Writes the 4-byte big-endian header for a frame of len bytes. */
void frame_put_header(unsigned char out[FRAME_HEADER_SIZE], uint32_t len);

/*
 * Starts a frame in sb: appends a placeholder header and returns the offset
 * of the frame's start. Pack one object, then call frame_sbuffer_finish().
 * Returns (size_t)-1 when sb could not grow.
 */
size_t frame_sbuffer_begin(msgpack_sbuffer *sb);

/* Patches the header of the frame begun at start. Returns the body length. */
uint32_t frame_sbuffer_finish(msgpack_sbuffer *sb, size_t start);

#endif
