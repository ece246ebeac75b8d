/*
 * relpack.c: packing of valid requests (relpack.h). Field names come from
 * proto/receipt.h's tables, so the receipt follows the protocol's layout.
 * Pure; any thread.
 */
#include "relpack.h"

#include "envelope.h"
#include "frame.h"
#include "receipt.h"

static int
kv_str(msgpack_packer *pk, const char *k, const char *v)
{
    return envelope_pack_cstr(pk, k) != 0 || envelope_pack_cstr(pk, v) != 0 ? -1
                                                                            : 0;
}

static int
kv_uint(msgpack_packer *pk, const char *k, uint64_t v)
{
    return envelope_pack_cstr(pk, k) != 0 || msgpack_pack_uint64(pk, v) != 0
               ? -1
               : 0;
}

int
relpack_receipt(msgpack_packer *pk, uint64_t n, int extra)
{
    unsigned i;

    if (msgpack_pack_map(pk, 12 + (extra ? 1 : 0)) != 0 ||
        kv_uint(pk, "schema_version", 3) != 0 ||
        kv_str(pk, "requested_backend", "cuda") != 0 ||
        kv_str(pk, "executed_backend", n % 5 == 0 ? "cpu" : "cuda") != 0 ||
        kv_str(pk, "model_instance_id", "model-a") != 0 ||
        kv_str(pk, "prepared_plan_id", "plan-1") != 0 ||
        kv_str(pk, "graph_hash", "g0") != 0 ||
        kv_str(pk, "tuning_profile", "") != 0 ||
        kv_str(pk, "stop_reason", "eos") != 0 ||
        kv_uint(pk, "counter_coverage", 0x3ffffff) != 0)
        return -1;
    if (envelope_pack_cstr(pk, "counters") != 0 ||
        msgpack_pack_map(pk, RECEIPT_NCOUNTERS_V3 + (extra ? 1 : 0)) != 0)
        return -1;
    for (i = 0; i < RECEIPT_NCOUNTERS_V3; i++)
        if (kv_uint(pk, receipt_counters[i].field, i == 6 ? 0 : n * 3 + i) != 0)
            return -1;
    if (extra && kv_uint(pk, "new_thing", n) != 0)
        return -1;
    if (envelope_pack_cstr(pk, "latency") != 0 ||
        msgpack_pack_map(pk, RECEIPT_NLATENCY) != 0)
        return -1;
    for (i = RECEIPT_NCOUNTERS_V3; i < RECEIPT_NCOUNTERS; i++)
        if (kv_uint(pk, receipt_counters[i].field, n + i) != 0)
            return -1;
    if (envelope_pack_cstr(pk, "artifacts") != 0 ||
        msgpack_pack_map(pk, RECEIPT_NARTIFACTS) != 0)
        return -1;
    for (i = 0; i < RECEIPT_NARTIFACTS; i++)
        if (kv_uint(pk, receipt_artifact_names[i], i) != 0)
            return -1;
    if (extra && kv_str(pk, "flavour", "vanilla") != 0)
        return -1;
    return 0;
}

int
relpack_receipt_frame(msgpack_sbuffer *sb, uint64_t id, int has_seq,
                      uint64_t seq, uint64_t n, int extra)
{
    msgpack_packer pk;
    size_t start = frame_sbuffer_begin(sb);

    if (start == (size_t)-1)
        return -1;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    if (envelope_request(&pk, PROTO_OP_RECEIPT, id, has_seq, seq, 1) != 0 ||
        relpack_receipt(&pk, n, extra) != 0)
        return -1;
    frame_sbuffer_finish(sb, start);
    return 0;
}

int
relpack_hello_frame(msgpack_sbuffer *sb, uint64_t id, const char *source)
{
    msgpack_packer pk;
    size_t start = frame_sbuffer_begin(sb);

    if (start == (size_t)-1)
        return -1;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    if (envelope_request(&pk, PROTO_OP_HELLO, id, 0, 0, 1) != 0 ||
        msgpack_pack_map(&pk, 2) != 0 || kv_uint(&pk, "protocol", 1) != 0 ||
        kv_str(&pk, "source", source) != 0)
        return -1;
    frame_sbuffer_finish(sb, start);
    return 0;
}
