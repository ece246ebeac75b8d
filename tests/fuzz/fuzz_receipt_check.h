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

/* Field by field, extra byte for byte. */
static int
fuzz_same_receipt(const struct receipt *r, const struct receipt *o)
{
    return !(
        r->schema_version != o->schema_version ||
        r->requested_backend != o->requested_backend ||
        r->executed_backend != o->executed_backend ||
        !fuzz_same_str(&r->model_instance_id, &o->model_instance_id) ||
        !fuzz_same_str(&r->prepared_plan_id, &o->prepared_plan_id) ||
        !fuzz_same_str(&r->graph_hash, &o->graph_hash) ||
        !fuzz_same_str(&r->tuning_profile, &o->tuning_profile) ||
        !fuzz_same_str(&r->stop_reason, &o->stop_reason) ||
        r->counter_coverage != o->counter_coverage ||
        memcmp(r->counters, o->counters, sizeof(r->counters)) != 0 ||
        memcmp(r->artifacts, o->artifacts, sizeof(r->artifacts)) != 0 ||
        r->extra_len != o->extra_len ||
        (r->extra_len > 0 && memcmp(r->extra, o->extra, r->extra_len) != 0));
}

/*
 * receipt_decode_fast against receipt_decode's result rc and r for the
 * one object buf[0..len): what the fast path takes is the whole object,
 * accepted by receipt_decode too, and the same receipt.
 */
static inline void
fuzz_check_fast_path(const char *buf, size_t len, int rc,
                     const struct receipt *r)
{
    struct receipt f;
    size_t used = receipt_decode_fast(buf, len, &f);

    if (used == 0)
        return;
    if (used != len || rc != 0 || f.extra != NULL || !fuzz_same_receipt(r, &f))
        abort();
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
    if (!fuzz_same_receipt(r, &r2))
        abort();
    receipt_clear(&r2);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&sb);
}

#endif
