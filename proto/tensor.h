/*
 * tensor.h: a ResolvedTensorSpec (PROTOCOL section 5): element types,
 * layouts and the rules that bind them, decoded from the serde map form,
 * its minimum storage bytes, and encoded back in the form it came in.
 * Plans (plan.h) and retention specs (retention.h) both hold tensors.
 *
 * Memory model. A decoded tensor owns nothing: its arrays point into 64-bit
 * words the caller provides (tensor_words() says how many), so decoding
 * never allocates.
 */
#ifndef RECEIPTD_PROTO_TENSOR_H
#define RECEIPTD_PROTO_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "error.h"
#include "mpobj.h"

enum tensor_etype {
    TENSOR_ETYPE_BOOL,
    TENSOR_ETYPE_U8,
    TENSOR_ETYPE_U32,
    TENSOR_ETYPE_I8,
    TENSOR_ETYPE_I32,
    TENSOR_ETYPE_F16,
    TENSOR_ETYPE_BF16,
    TENSOR_ETYPE_F32,
    TENSOR_ETYPE_COUNT
};

enum tensor_layout {
    TENSOR_LAYOUT_CONTIGUOUS,
    TENSOR_LAYOUT_STRIDED,
    TENSOR_LAYOUT_BLOCKED,
    TENSOR_LAYOUT_COUNT
};

enum tensor_padding { TENSOR_PADDING_EXACT, TENSOR_PADDING_ZERO_FILL };

/*
 * A ResolvedTensorSpec. Every array has `rank` entries (a strided or
 * blocked layout whose arrays have another length is rejected); arrays a
 * layout does not use are NULL. min_storage_bytes is computed at decode.
 */
struct tensor {
    uint32_t rank;
    uint8_t element_type; /* enum tensor_etype */
    uint8_t layout;       /* enum tensor_layout */
    uint8_t padding;      /* enum tensor_padding, blocked only */
    const uint64_t *dimensions;
    const uint64_t *byte_strides;        /* strided */
    const uint64_t *block;               /* blocked */
    const uint32_t *axis_order;          /* blocked */
    const uint64_t *physical_dimensions; /* blocked with zero_fill */
    uint64_t min_storage_bytes;
};

/* Names of the enums as serde writes them, or NULL outside the enum. */
const char *tensor_etype_name(int etype);
const char *tensor_layout_name(int layout);

/* Size in bytes of an element type (1, 2 or 4), or 0 outside the enum. */
unsigned tensor_etype_size(int etype);

/*
 * Reads an element type name ("f32") from o. Returns 0 and sets *out, or
 * PROTO_EINVALID with an empty path and a message naming the valid types.
 */
int tensor_etype_decode(const msgpack_object *o, int *out,
                        struct proto_err *err);

/*
 * Minimum storage bytes of a tensor whose fields are set (rank, element
 * type, layout and its arrays), per section 5: contiguous = size x
 * product(dims); blocked = size x product(dims, or physical_dimensions for
 * zero_fill); strided = size + sum((dim_i - 1) x stride_i). Returns 0 and
 * *out, or PROTO_EINVALID (empty path) when the value does not fit in u64.
 */
int tensor_min_bytes(const struct tensor *t, uint64_t *out,
                     struct proto_err *err);

/*
 * The number of 64-bit words tensor_decode() needs for o: an upper bound
 * computed from the sizes of its arrays (0 when o is not a map). Pure; o
 * is borrowed.
 */
size_t tensor_words(const msgpack_object *o);

/*
 * Decodes and validates a ResolvedTensorSpec map (every tensor rule of
 * section 5) and computes its minimum storage bytes. Arrays are carved from
 * words[0..nwords), which the caller owns and sizes with tensor_words(o);
 * t's array pointers point into it. Returns 0, PROTO_EINVALID with
 * err->path relative to the tensor ("dimensions[1]",
 * "layout.blocked.axis_order"), or PROTO_ENOMEM when nwords is smaller
 * than tensor_words(o) (a caller's bug).
 */
int tensor_decode(const msgpack_object *o, struct tensor *t, uint64_t *words,
                  size_t nwords, struct proto_err *err);

/*
 * Packs t in the serde map form it was received in: {"dimensions",
 * "element_type", "layout"}, the layout as "contiguous" or a single-key map.
 * Returns 0 or -1 when the packer's buffer cannot grow.
 */
int tensor_encode(const struct tensor *t, msgpack_packer *pk);

/* True when two decoded tensors are equal field by field. */
int tensor_equal(const struct tensor *a, const struct tensor *b);

#endif
