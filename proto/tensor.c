/*
 * tensor.c: the ResolvedTensorSpec rules of PROTOCOL section 5 (element
 * types, layouts, minimum storage bytes) and the tensor's serde map form.
 * Plans and retention specs both hold tensors. Pure functions; safe on any
 * thread.
 *
 * Invariants. tensor_decode() never allocates: its arrays are carved from
 * words the caller sized with tensor_words(). Every u64 computation that
 * can exceed 2^64-1 (products of dimensions, strided extents, rounding up
 * to a block) goes through the __builtin_*_overflow checks and turns into
 * PROTO_EINVALID.
 */
#include "tensor.h"

#include <string.h>

static const char *const etype_names[TENSOR_ETYPE_COUNT] = {
    "bool", "u8", "u32", "i8", "i32", "f16", "bf16", "f32",
};
static const unsigned etype_sizes[TENSOR_ETYPE_COUNT] = {
    1, 1, 4, 1, 4, 2, 2, 4
};
static const char *const layout_names[TENSOR_LAYOUT_COUNT] = { "contiguous",
                                                               "strided",
                                                               "blocked" };

const char *
tensor_etype_name(int etype)
{
    return etype >= 0 && etype < TENSOR_ETYPE_COUNT ? etype_names[etype] : NULL;
}

const char *
tensor_layout_name(int layout)
{
    return layout >= 0 && layout < TENSOR_LAYOUT_COUNT ? layout_names[layout]
                                                       : NULL;
}

unsigned
tensor_etype_size(int etype)
{
    return etype >= 0 && etype < TENSOR_ETYPE_COUNT ? etype_sizes[etype] : 0;
}

int
tensor_etype_decode(const msgpack_object *o, int *out, struct proto_err *err)
{
    int i;

    if (o->type == MSGPACK_OBJECT_STR || o->type == MSGPACK_OBJECT_BIN) {
        for (i = 0; i < TENSOR_ETYPE_COUNT; i++) {
            if (mpobj_str_eq(o, etype_names[i])) {
                *out = i;
                return 0;
            }
        }
    }
    return proto_err_set(err, PROTO_EINVALID, NULL,
                         "expected an element type (bool, u8, u32, i8, i32, "
                         "f16, bf16 or f32)");
}

/* Prefixes the field name key to a path set by a typed read. */
static int
at(int rc, struct proto_err *err, const char *key)
{
    if (rc != 0)
        proto_err_prefix_field(err, key);
    return rc;
}

/* Reads an array of exactly rank u64 values, each non-zero when nonzero. */
static int
u64_array(const msgpack_object *o, uint32_t rank, int nonzero, uint64_t *dst,
          const char *what, struct proto_err *err)
{
    uint32_t i;
    int rc;

    if ((rc = mpobj_expect_array(o, what, err)) != 0)
        return rc;
    if (o->via.array.size != rank)
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "expected %s with one entry per dimension (%u), "
                             "got %u",
                             what, rank, o->via.array.size);
    for (i = 0; i < rank; i++) {
        if ((rc = mpobj_uint(&o->via.array.ptr[i], UINT64_MAX, &dst[i], err)) !=
            0) {
            proto_err_prefix_index(err, i);
            return rc;
        }
        if (nonzero && dst[i] == 0) {
            proto_err_set(err, PROTO_EINVALID, NULL,
                          "expected a non-zero value in %s", what);
            proto_err_prefix_index(err, i);
            return PROTO_EINVALID;
        }
    }
    return 0;
}

int
tensor_min_bytes(const struct tensor *t, uint64_t *out, struct proto_err *err)
{
    uint64_t size = tensor_etype_size(t->element_type), acc = size, term;
    const uint64_t *dims = t->dimensions;
    uint32_t i;

    if (size == 0)
        return proto_err_set(err, PROTO_EINVALID, NULL, "unknown element type");
    if (t->layout == TENSOR_LAYOUT_BLOCKED &&
        t->padding == TENSOR_PADDING_ZERO_FILL)
        dims = t->physical_dimensions;
    if (t->layout == TENSOR_LAYOUT_STRIDED) {
        for (i = 0; i < t->rank; i++) {
            if (t->dimensions[i] == 0)
                continue;
            if (__builtin_mul_overflow(t->dimensions[i] - 1, t->byte_strides[i],
                                       &term) ||
                __builtin_add_overflow(acc, term, &acc))
                return proto_err_set(err, PROTO_EINVALID, NULL,
                                     "minimum storage bytes of the strided "
                                     "layout exceed 2^64-1");
        }
    } else {
        for (i = 0; i < t->rank; i++)
            if (__builtin_mul_overflow(acc, dims[i], &acc))
                return proto_err_set(err, PROTO_EINVALID, NULL,
                                     "minimum storage bytes (element size "
                                     "times the product of the dimensions) "
                                     "exceed 2^64-1");
    }
    *out = acc;
    return 0;
}

size_t
tensor_words(const msgpack_object *o)
{
    const msgpack_object *d;

    if (o->type != MSGPACK_OBJECT_MAP)
        return 0;
    d = mpobj_map_get(o, "dimensions", NULL);
    if (d == NULL || d->type != MSGPACK_OBJECT_ARRAY)
        return 0;
    /* Every array of a tensor has exactly rank entries once validated:
     * dimensions, byte_strides, block, axis_order and physical_dimensions,
     * so five words per dimension is always enough. */
    return (size_t)d->via.array.size * 5;
}

/* The blocked layout: block, axis_order and padding against dims. */
static int
blocked_decode(const msgpack_object *o, struct tensor *t, uint64_t *w,
               struct proto_err *err)
{
    const msgpack_object *v, *name, *payload, *pd;
    uint32_t rank = t->rank, i, *order = (uint32_t *)(w + rank);
    uint64_t *block = w, *phys = w + 2 * (size_t)rank, ax;
    int rc, padded = 0;

    if ((rc = mpobj_expect_map(o, "the blocked layout", err)) != 0)
        return rc;
    if ((rc = mpobj_field(o, "block", 1, &v, err)) != 0)
        return rc;
    if ((rc = at(u64_array(v, rank, 1, block, "block", err), err, "block")))
        return rc;
    t->block = block;

    if ((rc = mpobj_field(o, "axis_order", 1, &v, err)) != 0)
        return rc;
    if ((rc = mpobj_expect_array(v, "axis_order", err)) != 0)
        return at(rc, err, "axis_order");
    if (v->via.array.size != rank)
        return proto_err_set(err, PROTO_EINVALID, "axis_order",
                             "expected axis_order as a permutation of "
                             "0..%u, got %u entries",
                             rank, v->via.array.size);
    /* phys doubles as a seen-set until padding is read. */
    memset(phys, 0, sizeof(*phys) * rank);
    for (i = 0; i < rank; i++) {
        if ((rc = mpobj_uint(&v->via.array.ptr[i], UINT32_MAX, &ax, err))) {
            proto_err_prefix_index(err, i);
            return at(rc, err, "axis_order");
        }
        if (ax >= rank || phys[ax]) {
            proto_err_set(err, PROTO_EINVALID, NULL,
                          ax >= rank ? "axis %llu is out of range; expected "
                                       "axis_order as a permutation of 0..%u"
                                     : "axis %llu appears twice; expected "
                                       "axis_order as a permutation of 0..%u",
                          (unsigned long long)ax, rank);
            proto_err_prefix_index(err, i);
            return at(PROTO_EINVALID, err, "axis_order");
        }
        phys[ax] = 1;
        order[i] = (uint32_t)ax;
    }
    t->axis_order = order;

    if ((rc = mpobj_field(o, "padding", 1, &v, err)) != 0)
        return rc;
    if ((rc = mpobj_variant(v, &name, &payload, err)) != 0)
        return at(rc, err, "padding");
    if (mpobj_str_eq(name, "exact") && payload == NULL) {
        t->padding = TENSOR_PADDING_EXACT;
        for (i = 0; i < rank; i++)
            if (t->dimensions[i] % block[i] != 0)
                return proto_err_set(err, PROTO_EINVALID, "padding",
                                     "exact padding needs every extent "
                                     "divisible by its block; axis %u has "
                                     "extent %llu and block %llu",
                                     i, (unsigned long long)t->dimensions[i],
                                     (unsigned long long)block[i]);
        return 0;
    }
    if (!mpobj_str_eq(name, "zero_fill") || payload == NULL)
        return proto_err_set(err, PROTO_EINVALID, "padding",
                             "expected padding \"exact\" or {\"zero_fill\": "
                             "{\"physical_dimensions\": [...]}}");
    t->padding = TENSOR_PADDING_ZERO_FILL;
    if ((rc = mpobj_expect_map(payload, "zero_fill", err)) != 0)
        return at(rc, err, "padding.zero_fill");
    if ((rc = mpobj_field(payload, "physical_dimensions", 1, &pd, err)) != 0)
        return at(rc, err, "padding.zero_fill");
    if ((rc = u64_array(pd, rank, 0, phys, "physical_dimensions", err)) != 0)
        return at(rc, err, "padding.zero_fill.physical_dimensions");
    for (i = 0; i < rank; i++) {
        uint64_t ext = t->dimensions[order[i]], b = block[order[i]], up;

        if (ext % b != 0)
            padded = 1;
        /* Rounding up: ext + (b - ext % b) when not a multiple. */
        up = ext;
        if (ext % b != 0 && __builtin_add_overflow(ext, b - ext % b, &up)) {
            proto_err_set(err, PROTO_EINVALID, NULL,
                          "axis %u rounded up to its block exceeds 2^64-1",
                          order[i]);
            proto_err_prefix_index(err, i);
            return at(PROTO_EINVALID, err,
                      "padding.zero_fill.physical_dimensions");
        }
        if (phys[i] != up) {
            proto_err_set(err, PROTO_EINVALID, NULL,
                          "expected %llu (extent %llu of axis %u rounded up "
                          "to its block %llu), got %llu",
                          (unsigned long long)up, (unsigned long long)ext,
                          order[i], (unsigned long long)b,
                          (unsigned long long)phys[i]);
            proto_err_prefix_index(err, i);
            return at(PROTO_EINVALID, err,
                      "padding.zero_fill.physical_dimensions");
        }
    }
    if (!padded)
        return proto_err_set(err, PROTO_EINVALID,
                             "padding.zero_fill.physical_dimensions",
                             "zero_fill padding needs at least one axis "
                             "actually padded; use \"exact\"");
    t->physical_dimensions = phys;
    return 0;
}

int
tensor_decode(const msgpack_object *o, struct tensor *t, uint64_t *words,
              size_t nwords, struct proto_err *err)
{
    const msgpack_object *v, *name, *payload;
    uint64_t prod;
    uint32_t rank;
    int rc, et = 0;

    memset(t, 0, sizeof(*t));
    if ((rc = mpobj_expect_map(o, "a tensor spec", err)) != 0)
        return rc;
    if ((rc = mpobj_field(o, "dimensions", 1, &v, err)) != 0)
        return rc;
    if ((rc = mpobj_expect_array(v, "dimensions", err)) != 0)
        return at(rc, err, "dimensions");
    rank = v->via.array.size;
    /* The caller sized words with tensor_words(); a smaller buffer is
     * our own bug, not the peer's. */
    if (nwords < (size_t)rank * 5)
        return proto_err_set(err, PROTO_ENOMEM, "dimensions",
                             "tensor word buffer too small");
    t->rank = rank;
    if ((rc = u64_array(v, rank, 1, words, "dimensions", err)) != 0)
        return at(rc, err, "dimensions");
    t->dimensions = words;

    if ((rc = mpobj_field(o, "element_type", 1, &v, err)) != 0)
        return rc;
    if ((rc = tensor_etype_decode(v, &et, err)) != 0)
        return at(rc, err, "element_type");
    t->element_type = (uint8_t)et;

    if ((rc = tensor_min_bytes(t, &prod, err)) != 0) {
        proto_err_set(err, PROTO_EINVALID, "dimensions",
                      "element size times the product of the dimensions "
                      "exceeds 2^64-1");
        return PROTO_EINVALID;
    }

    if ((rc = mpobj_field(o, "layout", 1, &v, err)) != 0)
        return rc;
    if ((rc = mpobj_variant(v, &name, &payload, err)) != 0)
        return at(rc, err, "layout");
    if (mpobj_str_eq(name, "contiguous") && payload == NULL) {
        t->layout = TENSOR_LAYOUT_CONTIGUOUS;
    } else if (mpobj_str_eq(name, "strided") && payload != NULL) {
        const msgpack_object *s;
        uint64_t *strides = words + rank;

        t->layout = TENSOR_LAYOUT_STRIDED;
        if ((rc = mpobj_expect_map(payload, "the strided layout", err)) != 0)
            return at(rc, err, "layout.strided");
        if ((rc = mpobj_field(payload, "byte_strides", 1, &s, err)) != 0)
            return at(rc, err, "layout.strided");
        if ((rc = u64_array(s, rank, 1, strides, "byte_strides", err)) != 0)
            return at(rc, err, "layout.strided.byte_strides");
        t->byte_strides = strides;
        if ((rc = tensor_min_bytes(t, &t->min_storage_bytes, err)) != 0)
            return at(rc, err, "layout.strided.byte_strides");
        return 0;
    } else if (mpobj_str_eq(name, "blocked") && payload != NULL) {
        t->layout = TENSOR_LAYOUT_BLOCKED;
        if ((rc = blocked_decode(payload, t, words + rank, err)) != 0)
            return at(rc, err, "layout.blocked");
        if ((rc = tensor_min_bytes(t, &t->min_storage_bytes, err)) != 0)
            return at(rc, err,
                      t->padding == TENSOR_PADDING_ZERO_FILL
                          ? "layout.blocked.padding.zero_fill."
                            "physical_dimensions"
                          : "dimensions");
        return 0;
    } else {
        return proto_err_set(err, PROTO_EINVALID, "layout",
                             "expected layout \"contiguous\", "
                             "{\"strided\": {...}} or {\"blocked\": {...}}");
    }
    t->min_storage_bytes = prod;
    return 0;
}

static int
pack_str(msgpack_packer *pk, const char *s, size_t n)
{
    if (msgpack_pack_str(pk, n) != 0)
        return -1;
    return msgpack_pack_str_body(pk, s, n);
}

static int
pack_cstr(msgpack_packer *pk, const char *s)
{
    return pack_str(pk, s, strlen(s));
}

static int
pack_u64s(msgpack_packer *pk, const uint64_t *v, uint32_t n)
{
    uint32_t i;

    if (msgpack_pack_array(pk, n) != 0)
        return -1;
    for (i = 0; i < n; i++)
        if (msgpack_pack_uint64(pk, v[i]) != 0)
            return -1;
    return 0;
}

int
tensor_encode(const struct tensor *t, msgpack_packer *pk)
{
    uint32_t i;

    if (msgpack_pack_map(pk, 3) != 0 || pack_cstr(pk, "dimensions") != 0 ||
        pack_u64s(pk, t->dimensions, t->rank) != 0 ||
        pack_cstr(pk, "element_type") != 0 ||
        pack_cstr(pk, etype_names[t->element_type]) != 0 ||
        pack_cstr(pk, "layout") != 0)
        return -1;
    switch (t->layout) {
    case TENSOR_LAYOUT_STRIDED:
        return msgpack_pack_map(pk, 1) || pack_cstr(pk, "strided") ||
                       msgpack_pack_map(pk, 1) ||
                       pack_cstr(pk, "byte_strides") ||
                       pack_u64s(pk, t->byte_strides, t->rank)
                   ? -1
                   : 0;
    case TENSOR_LAYOUT_BLOCKED:
        if (msgpack_pack_map(pk, 1) || pack_cstr(pk, "blocked") ||
            msgpack_pack_map(pk, 3) || pack_cstr(pk, "block") ||
            pack_u64s(pk, t->block, t->rank) || pack_cstr(pk, "axis_order") ||
            msgpack_pack_array(pk, t->rank))
            return -1;
        for (i = 0; i < t->rank; i++)
            if (msgpack_pack_uint32(pk, t->axis_order[i]) != 0)
                return -1;
        if (pack_cstr(pk, "padding") != 0)
            return -1;
        if (t->padding == TENSOR_PADDING_EXACT)
            return pack_cstr(pk, "exact");
        return msgpack_pack_map(pk, 1) || pack_cstr(pk, "zero_fill") ||
                       msgpack_pack_map(pk, 1) ||
                       pack_cstr(pk, "physical_dimensions") ||
                       pack_u64s(pk, t->physical_dimensions, t->rank)
                   ? -1
                   : 0;
    default:
        return pack_cstr(pk, "contiguous");
    }
}

static int
u64s_equal(const uint64_t *a, const uint64_t *b, uint32_t n)
{
    return n == 0 || memcmp(a, b, sizeof(*a) * n) == 0;
}

int
tensor_equal(const struct tensor *a, const struct tensor *b)
{
    if (a->rank != b->rank || a->element_type != b->element_type ||
        a->layout != b->layout ||
        !u64s_equal(a->dimensions, b->dimensions, a->rank))
        return 0;
    if (a->layout == TENSOR_LAYOUT_STRIDED)
        return u64s_equal(a->byte_strides, b->byte_strides, a->rank);
    if (a->layout != TENSOR_LAYOUT_BLOCKED)
        return 1;
    if (a->padding != b->padding || !u64s_equal(a->block, b->block, a->rank) ||
        (a->rank &&
         memcmp(a->axis_order, b->axis_order, sizeof(uint32_t) * a->rank)))
        return 0;
    return a->padding == TENSOR_PADDING_EXACT ||
           u64s_equal(a->physical_dimensions, b->physical_dimensions, a->rank);
}
