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
 * encoding must pass mpcheck itself. Built with -fsanitize=fuzzer by
 * tests/fuzz.cmake, and compiled into check_fuzz_replay_receipt in every
 * build. Single-threaded.
 */
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "fuzz.h"
#include "mpcheck.h"
#include "receipt.h"

static int
same_str(const struct proto_str *a, const struct proto_str *b)
{
    return a->len == b->len &&
           (a->len == 0 || memcmp(a->ptr, b->ptr, a->len) == 0);
}

static void
roundtrip(const struct receipt *r)
{
    struct receipt r2;
    struct proto_err err;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacked up;
    size_t off = 0;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (receipt_encode(r, &pk) != 0)
        abort();
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, sb.data, sb.size, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        off != sb.size)
        abort();
    if (receipt_decode(&up.data, &r2, &err) != 0)
        abort();
    if (r->schema_version != r2.schema_version ||
        r->requested_backend != r2.requested_backend ||
        r->executed_backend != r2.executed_backend ||
        !same_str(&r->model_instance_id, &r2.model_instance_id) ||
        !same_str(&r->prepared_plan_id, &r2.prepared_plan_id) ||
        !same_str(&r->graph_hash, &r2.graph_hash) ||
        !same_str(&r->tuning_profile, &r2.tuning_profile) ||
        !same_str(&r->stop_reason, &r2.stop_reason) ||
        r->counter_coverage != r2.counter_coverage ||
        memcmp(r->counters, r2.counters, sizeof(r->counters)) != 0 ||
        memcmp(r->artifacts, r2.artifacts, sizeof(r->artifacts)) != 0 ||
        r->extra_len != r2.extra_len ||
        (r->extra_len > 0 && memcmp(r->extra, r2.extra, r->extra_len) != 0))
        abort();
    receipt_clear(&r2);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&sb);
}

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
    if (rc == 0) {
        (void)receipt_status(&r);
        roundtrip(&r);
    } else if (r.extra != NULL || err.code != rc || err.message[0] == '\0') {
        abort();
    }
    receipt_clear(&r);
    msgpack_unpacked_destroy(&up);
    return 0;
}
