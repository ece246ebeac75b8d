/*
 * receipt_types.h: the execution receipt of PROTOCOL section 4 as plain C
 * data, one struct for schemas 1, 2 and 3, with the coverage table (bit,
 * counter name, first schema), the backend and status names and the
 * fallback status, defined here once. No msgpack: the store takes these
 * (daemon/store.h), and receipt.h adds the codec. Implemented in
 * receipt.c.
 */
#ifndef RECEIPTD_PROTO_RECEIPT_TYPES_H
#define RECEIPTD_PROTO_RECEIPT_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "str.h"

#define RECEIPT_SCHEMA_MIN 1
#define RECEIPT_SCHEMA_MAX 3

/* Counters indexed by coverage bit: 0-22 are `counters.*`, 23-25 are
 * `latency.*`. */
#define RECEIPT_NCOUNTERS    26
#define RECEIPT_NCOUNTERS_V2 10 /* counters of schemas 1 and 2 */
#define RECEIPT_NCOUNTERS_V3 23 /* fields of `counters` in schema 3 */
#define RECEIPT_NLATENCY     3
#define RECEIPT_NARTIFACTS   4

#define RECEIPT_ID_MAX     256 /* model, plan, stop_reason, graph */
#define RECEIPT_TUNING_MAX 4096

enum receipt_backend {
    RECEIPT_BACKEND_CPU,
    RECEIPT_BACKEND_WGPU_DX12,
    RECEIPT_BACKEND_WGPU_VULKAN,
    RECEIPT_BACKEND_WGPU_METAL,
    RECEIPT_BACKEND_CUDA,
    RECEIPT_BACKEND_METAL,
    RECEIPT_BACKEND_UNKNOWN,
    RECEIPT_BACKEND_COUNT
};

enum receipt_status {
    RECEIPT_STATUS_FALLBACK,
    RECEIPT_STATUS_CLEAN,
    RECEIPT_STATUS_UNPROVEN,
    RECEIPT_STATUS_COUNT
};

struct receipt {
    uint16_t schema_version;
    uint8_t requested_backend; /* enum receipt_backend */
    uint8_t executed_backend;
    /* Borrowed from the decoded input (the frame buffer, or the JSON
     * object); valid UTF-8, not NUL-terminated. */
    struct proto_str model_instance_id;
    struct proto_str prepared_plan_id;
    struct proto_str graph_hash;
    struct proto_str tuning_profile; /* "" for schema 1 */
    struct proto_str stop_reason;
    uint64_t counter_coverage;            /* kept exactly as sent */
    uint64_t counters[RECEIPT_NCOUNTERS]; /* by coverage bit; absent = 0 */
    uint64_t artifacts[RECEIPT_NARTIFACTS];
    /* Owned: the msgpack bytes of a map of every unknown map key, so a newer
     * producer loses nothing. Keys are the dotted paths ("counters.new_thing",
     * "flavour"), sorted by their bytes so the same keys always give the
     * same bytes, and values the objects as sent (a schema-3 counter inside
     * a schema-1/2 receipt is unknown there: "counters.cow_copies"; so is
     * "latency"). NULL when there were none, which is the only case in
     * which decoding allocates nothing. */
    char *extra;
    size_t extra_len;
};

/*
 * Asks the CPU for r's strings ahead of their first read. A receipt is
 * decoded on the loop thread and stored on the writer's, on the other
 * core: each string's first touch there is a miss that the hardware
 * prefetcher cannot foresee (they lie wherever the frame put them), and
 * interning them was a sixth of the batch writer's time. A loop over
 * receipts asks RECEIPT_PREFETCH_AHEAD receipts ahead.
 */
#define RECEIPT_PREFETCH_AHEAD 2

static inline void
receipt_prefetch(const struct receipt *r)
{
    __builtin_prefetch(r->model_instance_id.ptr);
    __builtin_prefetch(r->prepared_plan_id.ptr);
    __builtin_prefetch(r->graph_hash.ptr);
    __builtin_prefetch(r->tuning_profile.ptr);
    __builtin_prefetch(r->stop_reason.ptr);
}

struct receipt_counter {
    unsigned bit;
    const char *path;  /* "counters.decode_steps", "latency.queue_delay_us" */
    const char *field; /* "decode_steps" */
    unsigned min_schema;
};

/* Indexed by bit; entry i has bit == i. */
extern const struct receipt_counter receipt_counters[RECEIPT_NCOUNTERS];

extern const char *const receipt_artifact_names[RECEIPT_NARTIFACTS];

/* "cpu", "wgpu-dx12", ... or NULL outside the enum. */
const char *receipt_backend_name(int backend);
/* The enum value, or -1. */
int receipt_backend_from_name(const char *name, size_t len);

/* "fallback", "clean", "unproven", or NULL. */
const char *receipt_status_name(int status);
int receipt_status_from_name(const char *name, size_t len);

/* Fallback status of PROTOCOL section 4. */
int receipt_status(const struct receipt *r);

/* The coverage bits that mean something in a schema: 0x3ff for schemas 1
 * and 2, 0x3ffffff for 3, 0 otherwise. */
uint64_t receipt_meaningful_bits(unsigned schema_version);

/* Frees r->extra and zeroes r. r may be NULL. */
void receipt_clear(struct receipt *r);

#endif
