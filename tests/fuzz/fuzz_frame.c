/*
 * fuzz_frame.c: libFuzzer target over the whole receive path of proto/:
 * frame reader (the input arrives in two pieces, split where its first
 * byte says), envelope parse of every frame, receipt decode of the body of
 * receipt and receipts requests, then encode and decode again.
 *
 * A finding is a sanitizer report, or an abort() below: the body's span
 * must hold exactly one object, and a receipt that decoded must encode,
 * and decode again to the same struct with byte-identical extra. Built
 * with -fsanitize=fuzzer by tests/fuzz/CMakeLists.txt, and compiled into
 * check_fuzz_replay in every build.
 */
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "envelope.h"
#include "frame.h"
#include "fuzz.h"
#include "fuzz_receipt_check.h"
#include "mpcheck.h"
#include "receipt.h"

/* The same bound as -max_len in scripts/fuzz.sh: a frame may be as large
 * as any input. */
#define FUZZ_MAX_FRAME 65536

/* Decodes one receipt body; when valid, checks the round trip. */
static void
receipt_roundtrip(const msgpack_object *o)
{
    struct receipt r;
    struct proto_err err;
    int rc;

    rc = receipt_decode(o, &r, &err);
    if (rc != 0) {
        /* A failure leaves nothing behind and says where and why. */
        if (r.extra != NULL || err.code != rc || err.message[0] == '\0')
            abort();
        return;
    }
    (void)receipt_status(&r);
    fuzz_check_receipt_roundtrip(&r);
    receipt_clear(&r);
}

static void
handle_frame(const char *frame, size_t len)
{
    struct envelope env;
    struct proto_err err;
    msgpack_unpacked up;
    uint32_t i;
    int rc;

    /* What mpcheck accepts, msgpack-c must unpack whole: otherwise the
     * bounded walk and the unpacker disagree about the format. */
    if (mpcheck(frame, len, &err) == 0) {
        size_t off = 0;

        msgpack_unpacked_init(&up);
        if (msgpack_unpack_next(&up, frame, len, &off) !=
                MSGPACK_UNPACK_SUCCESS ||
            off != len)
            abort();
        msgpack_unpacked_destroy(&up);
    }
    msgpack_unpacked_init(&up);
    rc = envelope_parse(frame, len, &up, &env, &err);
    /* The body's span is exactly one object, found by walking it whether
     * or not envelope_parse() had to (it does not when body is last). */
    if (rc == 0 && env.body != NULL &&
        (env.body_off >= len || env.body_len > len - env.body_off ||
         mpcheck_skip(frame + env.body_off, len - env.body_off) !=
             env.body_len))
        abort();
    if (rc == 0 && env.body != NULL) {
        if (env.op == PROTO_OP_RECEIPT)
            receipt_roundtrip(env.body);
        else if (env.op == PROTO_OP_RECEIPTS &&
                 env.body->type == MSGPACK_OBJECT_ARRAY)
            for (i = 0; i < env.body->via.array.size; i++)
                receipt_roundtrip(&env.body->via.array.ptr[i]);
    } else if (rc != 0 && (err.code != rc || err.message[0] == '\0')) {
        abort();
    }
    msgpack_unpacked_destroy(&up);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct frame_reader fr;
    struct proto_err err;
    const char *buf = (const char *)data;
    size_t split, from, end, consumed;
    char *frame;
    uint32_t flen;
    int piece, rc = 0;

    split = size > 0 ? (size_t)data[0] * size / 256 : 0;
    frame_reader_init(&fr, FUZZ_MAX_FRAME);
    for (piece = 0, from = 0; piece < 2 && rc == 0; piece++) {
        end = piece == 0 ? split : size;
        while (from < end) {
            rc = frame_reader_feed(&fr, buf + from, end - from, &consumed,
                                   &frame, &flen, &err);
            if (consumed > end - from)
                abort();
            from += consumed;
            if (rc != 0)
                break;
            if (frame == NULL) {
                if (from != end)
                    abort();
                continue;
            }
            if (flen == 0 || flen > FUZZ_MAX_FRAME)
                abort();
            handle_frame(frame, flen);
            free(frame);
        }
    }
    /* Memory held for a partial frame follows the bytes that arrived. */
    if (frame_reader_buffered(&fr) > 2 * size + 4096)
        abort();
    frame_reader_close(&fr);
    return 0;
}
