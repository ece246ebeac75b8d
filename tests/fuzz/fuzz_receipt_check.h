/*
 * fuzz_receipt_check.h: the round-trip invariant of a decoded receipt,
 * shared by the targets that decode receipts (fuzz_frame.c, fuzz_receipt.c,
 * fuzz_json.c): it encodes, the bytes pass mpcheck and unpack whole, and
 * they decode again to the same struct with byte-identical extra. Aborts (a
 * finding) otherwise. Each target is its own program, so the functions are
 * static here.
 */
#ifndef RECEIPTD_TESTS_FUZZ_RECEIPT_CHECK_H
#define RECEIPTD_TESTS_FUZZ_RECEIPT_CHECK_H

#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "mpcheck.h"
#include "receipt.h"

static int
fuzz_same_str(const struct proto_str *a, const struct proto_str *b)
{
    return a->len == b->len &&
           (a->len == 0 || memcmp(a->ptr, b->ptr, a->len) == 0);
}

static void
fuzz_check_receipt_roundtrip(const struct receipt *r)
{
    struct receipt r2;
    struct proto_err err;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacked up;
    size_t off = 0;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (receipt_encode(r, &pk) != 0 || mpcheck(sb.data, sb.size, &err) != 0)
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
        !fuzz_same_str(&r->model_instance_id, &r2.model_instance_id) ||
        !fuzz_same_str(&r->prepared_plan_id, &r2.prepared_plan_id) ||
        !fuzz_same_str(&r->graph_hash, &r2.graph_hash) ||
        !fuzz_same_str(&r->tuning_profile, &r2.tuning_profile) ||
        !fuzz_same_str(&r->stop_reason, &r2.stop_reason) ||
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

#endif
