/*
 * fuzz_conn.c: libFuzzer target for the receive side of the connection
 * state machine, the loop of daemon/conn.c (feed) without its sockets: the
 * input is the byte stream a peer sends, fed to the frame reader whole,
 * one byte at a time, and in chunks whose sizes the input picks, each
 * frame parsed as an envelope as dispatch_frame() does, a framing error
 * ending the stream as framing_error() does.
 *
 * A finding is a sanitizer report or an abort() below: the three feedings
 * must see the same events (every frame's length, bytes and envelope
 * outcome, and the framing error with the offset where it struck), the
 * reader may never report more bytes consumed than it was given, and the
 * memory it holds for a partial frame is bounded by max_frame.
 *
 * What this does not reach: conn.c itself needs a libuv stream, a server
 * and, behind dispatch, the writer and a SQLite store; driving those from
 * a fuzzer needs a socket-free conn entry point (a refactor of conn.c's
 * read path into a function over a buffer). Until then this models that
 * loop over the same proto/ code. Built with -fsanitize=fuzzer by
 * tests/fuzz.cmake, and compiled into check_fuzz_replay_conn in every build.
 */
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "envelope.h"
#include "frame.h"
#include "fuzz.h"

/* Small, so that too_large frames are within reach of short inputs. */
#define FUZZ_MAX_FRAME 4096

/* A running FNV-1a hash of the events a feeding saw. */
struct trace {
    uint64_t h;
    unsigned frames;
    int error;       /* the framing error's code, or 0 */
    size_t error_at; /* where the frame that failed began */
};

static void
trace_mix(struct trace *t, const void *p, size_t n)
{
    const unsigned char *b = p;
    size_t i;

    for (i = 0; i < n; i++) {
        t->h ^= b[i];
        t->h *= 0x100000001b3ULL;
    }
}

/* One whole frame: what dispatch_frame() sees. */
static void
on_frame(struct trace *t, const char *frame, uint32_t len)
{
    struct envelope env;
    struct proto_err err;
    msgpack_unpacked up;
    int rc, fields[4];

    if (len == 0 || len > FUZZ_MAX_FRAME)
        abort();
    t->frames++;
    trace_mix(t, &len, sizeof(len));
    trace_mix(t, frame, len);
    msgpack_unpacked_init(&up);
    proto_err_clear(&err);
    rc = envelope_parse(frame, len, &up, &env, &err);
    if (rc != 0 && (err.code != rc || err.message[0] == '\0'))
        abort();
    fields[0] = rc;
    fields[1] = rc == 0 ? env.op : 0;
    fields[2] = rc == 0 ? env.has_id : 0;
    fields[3] = rc == 0 ? (int)(env.id & 0x7fffffff) : 0;
    trace_mix(t, fields, sizeof(fields));
    msgpack_unpacked_destroy(&up);
}

/* Feeds data[0..size) in pieces: whole (step 0), one byte at a time (step
 * 1), or chunks sized by the input (step 2). After each frame the loop
 * stops and resumes with what was not consumed, as conn.c does when a
 * limit stops dispatching mid-read and stashes the rest. */
static void
feed_all(const uint8_t *data, size_t size, int step, struct trace *t)
{
    struct frame_reader fr;
    struct proto_err err;
    const char *buf = (const char *)data;
    size_t from = 0, start = 0, end, used, k = 0;
    uint32_t flen;
    char *frame;
    int rc;

    memset(t, 0, sizeof(*t));
    t->h = 0xcbf29ce484222325ULL;
    frame_reader_init(&fr, FUZZ_MAX_FRAME);
    while (from < size && t->error == 0) {
        if (step == 0)
            end = size;
        else if (step == 1)
            end = from + 1;
        else
            end = from + 1 + data[k++ % size] % 23;
        if (end > size)
            end = size;
        while (from < end) {
            proto_err_clear(&err);
            rc = frame_reader_feed(&fr, buf + from, end - from, &used, &frame,
                                   &flen, &err);
            if (used > end - from)
                abort();
            from += used;
            if (rc != 0) {
                if (err.code != rc || frame != NULL)
                    abort();
                /* Where within a bad header the reader stops is not
                 * specified, so the frame's start is what must agree. */
                t->error = rc;
                t->error_at = start;
                break;
            }
            if (frame == NULL) {
                if (from != end)
                    abort();
                break;
            }
            on_frame(t, frame, flen);
            free(frame);
            start = from;
        }
        /* Memory held for a partial frame is bounded by max_frame,
         * whatever its header claims and however the bytes arrive. */
        if (frame_reader_buffered(&fr) > FUZZ_MAX_FRAME)
            abort();
    }
    frame_reader_close(&fr);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct trace whole, bytes, chunks;

    feed_all(data, size, 0, &whole);
    feed_all(data, size, 1, &bytes);
    feed_all(data, size, 2, &chunks);
    if (memcmp(&whole, &bytes, sizeof(whole)) != 0 ||
        memcmp(&whole, &chunks, sizeof(whole)) != 0)
        abort();
    return 0;
}
