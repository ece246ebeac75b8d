/*
 * plan.h: the resolved nodes of a prepared plan (PROTOCOL section 5),
 * decoded from the serde map form that rmp-serde writes, validated rule by
 * rule (identities, tensor specs, storage components, bindings), and
 * encoded back in one canonical form.
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
 * the plan. plan_decode_json() is the exception: that plan owns its storage.
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
#include "mpobj.h"

struct json_object;

#define PLAN_IDENTITY_MAX   160 /* bytes of an identity */
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

enum plan_etype {
    PLAN_ETYPE_BOOL,
    PLAN_ETYPE_U8,
    PLAN_ETYPE_U32,
    PLAN_ETYPE_I8,
    PLAN_ETYPE_I32,
    PLAN_ETYPE_F16,
    PLAN_ETYPE_BF16,
    PLAN_ETYPE_F32,
    PLAN_ETYPE_COUNT
};

enum plan_layout {
    PLAN_LAYOUT_CONTIGUOUS,
    PLAN_LAYOUT_STRIDED,
    PLAN_LAYOUT_BLOCKED,
    PLAN_LAYOUT_COUNT
};

enum plan_padding { PLAN_PADDING_EXACT, PLAN_PADDING_ZERO_FILL };

/*
 * A ResolvedTensorSpec. Every array has `rank` entries (a strided or
 * blocked layout whose arrays have another length is rejected); arrays a
 * layout does not use are NULL. min_storage_bytes is computed at decode.
 */
struct plan_tensor {
    uint32_t rank;
    uint8_t element_type; /* enum plan_etype */
    uint8_t layout;       /* enum plan_layout */
    uint8_t padding;      /* enum plan_padding, blocked only */
    const uint64_t *dimensions;
    const uint64_t *byte_strides;        /* strided */
    const uint64_t *block;               /* blocked */
    const uint32_t *axis_order;          /* blocked */
    const uint64_t *physical_dimensions; /* blocked with zero_fill */
    uint64_t min_storage_bytes;
};

struct plan_component {
    int has_component_id;
    struct proto_str component_id; /* borrowed; when has_component_id */
    struct proto_str resource_id;  /* borrowed */
    uint64_t offset_bytes;
    uint64_t length_bytes;
    uint8_t element_type; /* enum plan_etype */
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
    struct plan_tensor tensor;
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
    void *owned;      /* storage a JSON-decoded plan owns; else NULL */
};

/* Names of the enums as serde writes them, or NULL outside the enum. */
const char *plan_role_name(int role);
const char *plan_access_name(int access);
const char *plan_usage_name(int usage);
const char *plan_etype_name(int etype);
const char *plan_layout_name(int layout);

/* Size in bytes of an element type (1, 2 or 4), or 0 outside the enum. */
unsigned plan_etype_size(int etype);

/*
 * Reads an element type name ("f32") from o. Returns 0 and sets *out, or
 * PROTO_EINVALID with an empty path and a message naming the valid types.
 */
int plan_etype_decode(const msgpack_object *o, int *out, struct proto_err *err);

/*
 * True when s[0..len) is an identity: 1 to PLAN_IDENTITY_MAX bytes, each an
 * ASCII letter or digit or one of `. _ - : /`.
 */
int plan_identity_valid(const char *s, size_t len);

/*
 * Reads an identity from o (a str, or a bin holding one). Returns 0, or
 * PROTO_EINVALID with an empty path and a message saying which rule failed.
 * out borrows o's bytes.
 */
int plan_identity_decode(const msgpack_object *o, struct proto_str *out,
                         struct proto_err *err);

/* Byte-order comparison of two strings (memcmp, then the shorter first). */
int plan_str_cmp(struct proto_str a, struct proto_str b);

/*
 * Minimum storage bytes of a tensor whose fields are set (rank, element
 * type, layout and its arrays), per section 5: contiguous = size x
 * product(dims); blocked = size x product(dims, or physical_dimensions for
 * zero_fill); strided = size + sum((dim_i - 1) x stride_i). Returns 0 and
 * *out, or PROTO_EINVALID (empty path) when the value does not fit in u64.
 */
int plan_tensor_min_bytes(const struct plan_tensor *t, uint64_t *out,
                          struct proto_err *err);

/*
 * The number of 64-bit words plan_tensor_decode() needs for o: an upper
 * bound computed from the sizes of its arrays (0 when o is not a map).
 * Pure; o is borrowed.
 */
size_t plan_tensor_words(const msgpack_object *o);

/*
 * Decodes and validates a ResolvedTensorSpec map (every tensor rule of
 * section 5) and computes its minimum storage bytes. Arrays are carved from
 * words[0..nwords), which the caller owns and sizes with
 * plan_tensor_words(o); t's array pointers point into it. Returns 0,
 * PROTO_EINVALID with err->path relative to the tensor ("dimensions[1]",
 * "layout.blocked.axis_order"), or PROTO_ENOMEM when nwords is smaller
 * than plan_tensor_words(o) (a caller's bug).
 */
int plan_tensor_decode(const msgpack_object *o, struct plan_tensor *t,
                       uint64_t *words, size_t nwords, struct proto_err *err);

/*
 * Packs t in the serde map form it was received in: {"dimensions",
 * "element_type", "layout"}, the layout as "contiguous" or a single-key map.
 * Returns 0 or -1 when the packer's buffer cannot grow.
 */
int plan_tensor_encode(const struct plan_tensor *t, msgpack_packer *pk);

/* True when two decoded tensors are equal field by field. */
int plan_tensor_equal(const struct plan_tensor *a, const struct plan_tensor *b);

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

/*
 * The same from a JSON plan file (serde_json's form of the same body;
 * json-c), with the same rules, codes and paths. The plan owns copies of
 * everything it needs: o may be freed as soon as this returns. Integers up
 * to 2^64-1 are read exactly; negative or fractional numbers are rejected
 * where an integer is expected. Parse the file's text with
 * receipt_json_parse() (receipt.h), which refuses integers json-c would
 * saturate and repeated keys json-c would drop. JSON nested deeper than 32
 * levels is PROTO_EINVALID.
 */
int plan_decode_json(struct json_object *o, struct plan **out,
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
