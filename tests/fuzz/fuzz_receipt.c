/*
 * fuzz_receipt.c: libFuzzer target for receipt_decode alone. An input is
 * one msgpack object (a receipt body, no frame or envelope), so the fuzzer
 * spends its time in the receipt rules rather than in getting a frame
 * through: mpcheck, unpack, decode, then encode and decode again.
 *
 * A finding is a sanitizer report, or an abort() below: msgpack-c must
 * unpack what mpcheck accepts; a failure must leave nothing behind and
 * carry its code and message; a receipt that decoded must encode, and
 * decode again to the same struct with byte-identical extra, and its
 * encoding must pass mpcheck itself; what receipt_decode_fast takes,
 * receipt_decode takes alike. Built with -fsanitize=fuzzer by
 * tests/fuzz/CMakeLists.txt, and compiled into check_fuzz_replay_receipt in
 * every build. Single-threaded.
 */
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "fuzz.h"
#include "fuzz_receipt_check.h"
#include "mpcheck.h"
#include "receipt.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    struct proto_err err;
    msgpack_unpacked up;
    struct receipt r;
    size_t off = 0;
    int rc;

    if (mpcheck(buf, size, &err) != 0)
        return 0;
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, buf, size, &off) != MSGPACK_UNPACK_SUCCESS ||
        off != size)
        abort();
    proto_err_clear(&err);
    rc = receipt_decode(&up.data, &r, &err);
    fuzz_check_fast_path(buf, size, rc, &r);
    if (rc == 0) {
        (void)receipt_status(&r);
        fuzz_check_receipt_roundtrip(&r);
    } else if (r.extra != NULL || err.code != rc || err.message[0] == '\0') {
        abort();
    }
    receipt_clear(&r);
    msgpack_unpacked_destroy(&up);
    return 0;
}
