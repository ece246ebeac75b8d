/*
 * fuzz_json.c: libFuzzer target for the serde_json forms of receipts and
 * plans (the files `receiptctl import` reads): the strict parse (json-c
 * plus the scan for saturated integers and repeated keys), then
 * receipt_decode_json, encode to msgpack and decode again, and
 * plan_decode_json on the same tree.
 *
 * A finding is a sanitizer report, or an abort() below: a failure must
 * leave nothing behind and carry its code; a receipt that decoded must
 * encode, and decode again to the same struct with byte-identical extra; a
 * plan that decoded must keep its canonical form (fuzz_plan_check.h).
 * Built with -fsanitize=fuzzer by tests/fuzz.cmake, and compiled into
 * check_fuzz_replay_json in every build. Single-threaded.
 */
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <msgpack.h>

#include "fuzz.h"
#include "fuzz_plan_check.h"
#include "plan.h"
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
    struct json_object *j;
    struct receipt r;
    struct plan *p = NULL;
    struct proto_err err;
    int rc;

    proto_err_clear(&err);
    rc = receipt_json_parse((const char *)data, size, &j, &err);
    if (rc != 0) {
        if (j != NULL || err.code != rc || err.message[0] == '\0')
            abort();
        return 0;
    }
    rc = receipt_decode_json(j, &r, &err);
    if (rc == 0)
        roundtrip(&r);
    else if (r.extra != NULL || err.code != rc || err.message[0] == '\0')
        abort();
    receipt_clear(&r);
    proto_err_clear(&err);
    rc = plan_decode_json(j, &p, &err);
    if (rc == 0) {
        /* The plan owns its storage: the tree may go first. */
        json_object_put(j);
        fuzz_check_canonical(p);
        plan_free(p);
        return 0;
    }
    if (p != NULL || err.code != rc || err.message[0] == '\0')
        abort();
    json_object_put(j);
    return 0;
}
