/*
 * retention.h: completion retention specs (PROTOCOL section 6) and
 * completion readback (section 7), resolved and checked against a decoded
 * plan (plan.h). Decoding specs, retained values and readbacks needs only
 * the tensor and identity rules (tensor.h, identity.h).
 *
 * The daemon's flow: retention_spec_decode() the body, look the plan up by
 * (prepared_plan_id, graph_hash) (unknown_plan when absent),
 * retention_resolve() it (which also compares a claimed resolution), then
 * store the resolved values with retention_value_encode(). For a readback:
 * retention_readback_decode() the body, look up the plan and its stored
 * retained values (retention_values_decode() of what was stored, then
 * retention_find()), retention_readback_check(), and reply with
 * retention_readback_encode().
 */
#ifndef RECEIPTD_PROTO_RETENTION_H
#define RECEIPTD_PROTO_RETENTION_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "error.h"
#include "identity.h"
#include "mpobj.h"
#include "tensor.h"

struct plan;

/* A RetainedCompletionValue. */
struct retained_value {
    struct proto_str value_id;
    struct proto_str producer_node_id;
    uint32_t output_ordinal;
    struct proto_str resource_id;
    uint64_t logical_offset_bytes;
    struct tensor tensor;
};

/* One requested value id and its index in the body's `values`. */
struct retention_request {
    struct proto_str value_id;
    size_t index;
};

struct retention_spec {
    struct proto_str prepared_plan_id; /* borrowed from the body */
    struct proto_str graph_hash;       /* borrowed from the body */
    int determinism_outputs;           /* retain every output of every node */
    /* With values: the requested ids sorted in byte order (each remembers
     * its index in the body for error paths); empty with
     * determinism_outputs. Owned by the spec; ids borrowed from the body. */
    struct retention_request *requests;
    size_t nrequests;
    /* The claimed `retained` list, when the body had one (not nil). Owned
     * by the spec; strings borrowed from the body. */
    int has_claimed;
    struct retained_value *claimed;
    size_t nclaimed;
    size_t bytes; /* heap bytes the spec owns, for memory accounting */
};

/*
 * Decodes a retention body: {"prepared_plan_id", "graph_hash", "values":
 * [identity]} or "determinism_outputs": true instead of values, and an
 * optional "retained" list. A value id listed twice, both values and
 * determinism_outputs true, or neither, is PROTO_EINVALID (path "values" or
 * "values[i]"). On success *out is a new spec (free with
 * retention_spec_free) borrowing strings from o, which must outlive it. On
 * failure *out is NULL and the return is PROTO_EINVALID or PROTO_ENOMEM.
 */
int retention_spec_decode(const msgpack_object *o, struct retention_spec **out,
                          struct proto_err *err);

/* Frees a spec. s may be NULL. */
void retention_spec_free(struct retention_spec *s);

/*
 * Resolves s against plan p with the rules of section 6, in order, for
 * each requested value in byte order of value_id. On success *out is a new
 * array of *n values sorted by value_id (free() it); its strings and tensor
 * arrays borrow p, which must outlive it. Errors: PROTO_EINVALID when a
 * rule fails, path "values[i]" (i as in the body) or "determinism_outputs",
 * the message naming the rule ("rule 5: ..."); PROTO_EMISMATCH when s
 * claims a resolution that differs, path "retained" (a different count) or
 * "retained[i].<field>"; PROTO_ENOMEM. On failure *out is NULL and *n 0.
 * The spec's plan key is not compared with p's: the caller looked p up by
 * it.
 */
int retention_resolve(const struct plan *p, const struct retention_spec *s,
                      struct retained_value **out, size_t *n,
                      struct proto_err *err);

/*
 * Packs v as the map {"value_id", "producer_node_id", "output_ordinal",
 * "resource_id", "logical_offset_bytes", "tensor"}, the tensor in the serde
 * form it was received in. Returns 0 or -1 when the buffer cannot grow.
 */
int retention_value_encode(const struct retained_value *v, msgpack_packer *pk);

/*
 * Decodes an array of RetainedCompletionValue maps (the stored form, or a
 * claimed list) with every tensor rule. On success *out is one allocation
 * (free() it) of *n values whose strings borrow o. Errors: PROTO_EINVALID,
 * path "[i].field"; PROTO_ENOMEM. On failure *out is NULL.
 */
int retention_values_decode(const msgpack_object *o,
                            struct retained_value **out, size_t *n,
                            struct proto_err *err);

/* retention_values_decode() of one value map o: *out is one allocation
 * (free() it) whose strings borrow o. */
int retention_value_decode(const msgpack_object *o, struct retained_value **out,
                           struct proto_err *err);

/*
 * Finds value_id in v[0..n), sorted by value_id as retention_resolve()
 * returns it. Returns the value or NULL.
 */
const struct retained_value *retention_find(const struct retained_value *v,
                                            size_t n,
                                            struct proto_str value_id);

/* A readback body (section 7). */
struct readback {
    struct proto_str prepared_plan_id; /* borrowed from the body */
    struct proto_str graph_hash;
    struct proto_str value_id;
    uint32_t participant_index;
    uint8_t element_type; /* enum tensor_etype */
    uint64_t element_count;
    uint64_t byte_length; /* element_count x element size */
};

/* A CompletionReadbackRequest; strings borrow the retained value. */
struct readback_request {
    struct proto_str node_id;
    uint32_t participant_index;
    struct proto_str resource_id;
    uint64_t logical_offset_bytes;
    uint8_t element_type;
    uint64_t element_count;
};

/*
 * Decodes a readback body and checks the rules that need nothing else:
 * element_count > 0 and its byte length within u64 (path
 * "output_layout.element_count"). Strings borrow o. Returns 0 or
 * PROTO_EINVALID.
 */
int retention_readback_decode(const msgpack_object *o, struct readback *rb,
                              struct proto_err *err);

/*
 * Checks rb against the retained value rv the caller found for it (NULL:
 * PROTO_ENOT_RETAINED, path "value_id"; a value with another id is also not
 * retained) and fills out. Rules, in order: the retained layout is
 * contiguous (PROTO_EINVALID, path "value_id"); the element types are equal
 * ("output_layout.element_type"); the byte length is at most the tensor's
 * minimum storage bytes and logical_offset_bytes plus it fits u64
 * ("output_layout.element_count"). out borrows rv's strings.
 */
int retention_readback_check(const struct readback *rb,
                             const struct retained_value *rv,
                             struct readback_request *out,
                             struct proto_err *err);

/*
 * Packs {"node_id", "participant_index", "resource_id",
 * "logical_offset_bytes", "output_layout": {"element_type",
 * "element_count"}}. Returns 0 or -1.
 */
int retention_readback_encode(const struct readback_request *r,
                              msgpack_packer *pk);

#endif
