/*
 * plan.h: the resolved nodes of a prepared plan (PROTOCOL section 5),
 * decoded from the serde map form that rmp-serde writes, validated rule by
 * rule (storage components and bindings here; identities and tensor specs
 * by identity.h and tensor.h), and encoded back in one canonical form.
 *
 * Memory model. A plan is peer-controlled and may hold many nodes and
 * values, so plan_decode() first counts what it needs (nodes, values,
 * components and the 64-bit words of every tensor array) and then makes ONE
 * allocation holding the struct plan and all of its arrays. The counts come
 * from msgpack objects that already exist in memory, and a frame that passed
 * mpcheck() unpacks to at most one object per byte, so the allocation is
 * bounded by a small multiple of the frame's size. Strings and the opaque
 * `weight` maps are not copied: they borrow the decoded msgpack object (and
 * so the frame buffer and the unpacked zone behind it), which must outlive
 * the plan. plan_decode_json() (plan_json.h) is the exception: that plan
 * owns its storage.
 *
 * The canonical encoding (plan_encode_canonical) holds exactly the fields
 * the daemon reads, in a fixed order, so two registrations of the same key
 * are identical exactly when their canonical bytes are equal; decoding the
 * canonical bytes again gives the same plan.
 */
#ifndef RECEIPTD_PROTO_PLAN_H
#define RECEIPTD_PROTO_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "error.h"
#include "identity.h"
#include "mpobj.h"
#include "tensor.h"

#define PLAN_GRAPH_HASH_MAX 256 /* bytes of graph_hash */

enum plan_role { PLAN_ROLE_INPUT, PLAN_ROLE_OUTPUT, PLAN_ROLE_COUNT };

enum plan_access {
    PLAN_ACCESS_READ,
    PLAN_ACCESS_WRITE,
    PLAN_ACCESS_READ_WRITE,
    PLAN_ACCESS_COUNT
};

enum plan_alias {
    PLAN_ALIAS_NO,   /* "no_alias" */
    PLAN_ALIAS_MAY,  /* {"may_alias": {"tensor_index": u32}} */
    PLAN_ALIAS_MUST, /* {"must_alias": {"tensor_index": u32}} */
    PLAN_ALIAS_COUNT
};

enum plan_usage {
    PLAN_USAGE_WEIGHTS,
    PLAN_USAGE_ACTIVATIONS,
    PLAN_USAGE_STATE,
    PLAN_USAGE_PERSISTENT,
    PLAN_USAGE_BINDING,
    PLAN_USAGE_SCRATCH,
    PLAN_USAGE_TRANSFER,
    PLAN_USAGE_COUNT
};

struct plan_component {
    int has_component_id;
    struct proto_str component_id; /* borrowed; when has_component_id */
    struct proto_str resource_id;  /* borrowed */
    uint64_t offset_bytes;
    uint64_t length_bytes;
    uint8_t element_type; /* enum tensor_etype */
};

/* A ResolvedValueBinding. */
struct plan_value {
    struct proto_str value_id; /* borrowed */
    uint8_t role;              /* enum plan_role */
    uint8_t access;            /* enum plan_access */
    uint8_t alias;             /* enum plan_alias */
    uint8_t usage;             /* enum plan_usage */
    uint32_t ordinal;
    uint32_t alias_tensor_index; /* may_alias and must_alias only */
    struct tensor tensor;
    /* Borrowed opaque map; NULL when the value has no weight (nil or
     * absent). Present exactly when usage is weights. */
    const msgpack_object *weight;
    struct plan_component *components;
    uint32_t ncomponents;
};

struct plan_node {
    struct proto_str id; /* borrowed */
    struct plan_value *values;
    uint32_t nvalues;
};

struct plan {
    struct proto_str prepared_plan_id; /* borrowed; an identity */
    struct proto_str graph_hash;       /* borrowed; may be empty */
    struct plan_node *nodes;
    uint32_t nnodes;
    uint64_t nvalues; /* bindings over all nodes, for the `plan` result */
    struct plan_owned *owned; /* what a JSON-decoded plan owns; else NULL */
};

/*
 * What a plan decoded from JSON (plan_json.h) owns: the msgpack bytes the
 * JSON was packed into and their unpacking, which the plan's strings and
 * weights borrow. plan_free() frees them with the plan.
 */
struct plan_owned {
    msgpack_sbuffer sb;
    msgpack_unpacked up;
};

/* Names of the enums as serde writes them, or NULL outside the enum. */
const char *plan_role_name(int role);
const char *plan_access_name(int access);
const char *plan_usage_name(int usage);

/*
 * Decodes and validates a plan body (map form). On success *out is a new
 * plan (free with plan_free) that borrows strings and weight maps from o:
 * keep o's storage alive as long as the plan. On failure *out is NULL and
 * the return is PROTO_EINVALID (path relative to the body, e.g.
 * "nodes[2].values[0].storage.components[1].offset_bytes", "" for the body
 * itself) or PROTO_ENOMEM.
 */
int plan_decode(const msgpack_object *o, struct plan **out,
                struct proto_err *err);

/* Frees a plan from plan_decode or plan_decode_json. p may be NULL. */
void plan_free(struct plan *p);

/*
 * Packs the canonical form of p: {"prepared_plan_id", "graph_hash",
 * "nodes": [{"id", "values": [{"value_id", "role", "ordinal", "tensor",
 * "access", "alias", "usage", "weight", "storage"}]}]}, always in this key
 * order, with every Option written as nil when absent and weights packed as
 * received. It is a valid plan body. Returns 0 or -1 when the packer's
 * buffer cannot grow.
 */
int plan_encode_canonical(const struct plan *p, msgpack_packer *pk);

#endif
