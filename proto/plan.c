/*
 * plan.c: decoding, validation and canonical encoding of prepared plans
 * (PROTOCOL section 5). Pure functions; safe on any thread.
 *
 * Invariants. plan_decode() runs in two passes: a counting pass that only
 * reads container sizes, then one allocation, then the validating pass that
 * fills it. The validating pass never allocates, so a plan is either
 * returned whole or not at all. Every u64 computation that can exceed 2^64-1
 * (range ends, products of dimensions, strided extents, rounding up to a
 * block) goes through the __builtin_*_overflow checks and turns into
 * PROTO_EINVALID: a wrapped number would let a forged plan claim a tiny
 * storage range.
 */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

static const char *const role_names[PLAN_ROLE_COUNT] = { "input", "output" };
static const char *const access_names[PLAN_ACCESS_COUNT] = { "read", "write",
                                                             "read_write" };
static const char *const alias_names[PLAN_ALIAS_COUNT] = { "no_alias",
                                                           "may_alias",
                                                           "must_alias" };
static const char *const usage_names[PLAN_USAGE_COUNT] = {
    "weights", "activations", "state",    "persistent",
    "binding", "scratch",     "transfer",
};
static const char *const etype_names[PLAN_ETYPE_COUNT] = {
    "bool", "u8", "u32", "i8", "i32", "f16", "bf16", "f32",
};
static const unsigned etype_sizes[PLAN_ETYPE_COUNT] = {
    1, 1, 4, 1, 4, 2, 2, 4
};
static const char *const layout_names[PLAN_LAYOUT_COUNT] = { "contiguous",
                                                             "strided",
                                                             "blocked" };

const char *
plan_role_name(int role)
{
    return role >= 0 && role < PLAN_ROLE_COUNT ? role_names[role] : NULL;
}

const char *
plan_access_name(int access)
{
    return access >= 0 && access < PLAN_ACCESS_COUNT ? access_names[access]
                                                     : NULL;
}

const char *
plan_usage_name(int usage)
{
    return usage >= 0 && usage < PLAN_USAGE_COUNT ? usage_names[usage] : NULL;
}

const char *
plan_etype_name(int etype)
{
    return etype >= 0 && etype < PLAN_ETYPE_COUNT ? etype_names[etype] : NULL;
}

const char *
plan_layout_name(int layout)
{
    return layout >= 0 && layout < PLAN_LAYOUT_COUNT ? layout_names[layout]
                                                     : NULL;
}

unsigned
plan_etype_size(int etype)
{
    return etype >= 0 && etype < PLAN_ETYPE_COUNT ? etype_sizes[etype] : 0;
}

int
plan_str_cmp(struct proto_str a, struct proto_str b)
{
    size_t n = a.len < b.len ? a.len : b.len;
    int c = n ? memcmp(a.ptr, b.ptr, n) : 0;

    if (c != 0)
        return c;
    return a.len < b.len ? -1 : a.len > b.len;
}

/* Reads a unit variant name from a str among names[0..n). */
static int
enum_decode(const msgpack_object *o, const char *const *names, int n,
            const char *what, int *out, struct proto_err *err)
{
    int i;

    if (o->type != MSGPACK_OBJECT_STR && o->type != MSGPACK_OBJECT_BIN)
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "expected %s as a string, got %s", what,
                             mpobj_type_name(o));
    for (i = 0; i < n; i++) {
        if (mpobj_str_eq(o, names[i])) {
            *out = i;
            return 0;
        }
    }
    return proto_err_set(err, PROTO_EINVALID, NULL, "unknown %s", what);
}

int
plan_etype_decode(const msgpack_object *o, int *out, struct proto_err *err)
{
    int rc =
        enum_decode(o, etype_names, PLAN_ETYPE_COUNT, "element type", out, err);

    if (rc != 0 && err != NULL)
        proto_err_set(err, rc, NULL,
                      "expected an element type (bool, u8, u32, i8, i32, "
                      "f16, bf16 or f32)");
    return rc;
}

int
plan_identity_valid(const char *s, size_t len)
{
    size_t i;

    if (len == 0 || len > PLAN_IDENTITY_MAX)
        return 0;
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
            c == ':' || c == '/')
            continue;
        return 0;
    }
    return 1;
}

int
plan_identity_decode(const msgpack_object *o, struct proto_str *out,
                     struct proto_err *err)
{
    const char *p;
    size_t n, i;

    if (o->type == MSGPACK_OBJECT_STR) {
        p = o->via.str.ptr;
        n = o->via.str.size;
    } else if (o->type == MSGPACK_OBJECT_BIN) {
        p = o->via.bin.ptr;
        n = o->via.bin.size;
    } else {
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "expected an identity as a string, got %s",
                             mpobj_type_name(o));
    }
    if (n == 0)
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "expected an identity, got an empty string");
    if (n > PLAN_IDENTITY_MAX)
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "expected an identity of at most %d bytes, got "
                             "%zu bytes",
                             PLAN_IDENTITY_MAX, n);
    for (i = 0; i < n; i++) {
        if (!plan_identity_valid(p + i, 1))
            return proto_err_set(err, PROTO_EINVALID, NULL,
                                 "identity has a byte 0x%02x at offset %zu; "
                                 "expected ASCII letters, digits and . _ - "
                                 ": /",
                                 (unsigned char)p[i], i);
    }
    out->ptr = p;
    out->len = n;
    return 0;
}

/* Prefixes the field name key to a path set by a typed read. */
static int
at(int rc, struct proto_err *err, const char *key)
{
    if (rc != 0)
        proto_err_prefix_field(err, key);
    return rc;
}

static int
expect_map(const msgpack_object *o, const char *what, struct proto_err *err)
{
    if (o->type == MSGPACK_OBJECT_MAP)
        return 0;
    return proto_err_set(err, PROTO_EINVALID, NULL,
                         "expected %s as a map, got %s", what,
                         mpobj_type_name(o));
}

static int
expect_array(const msgpack_object *o, const char *what, struct proto_err *err)
{
    if (o->type == MSGPACK_OBJECT_ARRAY)
        return 0;
    return proto_err_set(err, PROTO_EINVALID, NULL,
                         "expected %s as an array, got %s", what,
                         mpobj_type_name(o));
}

/*
 * Splits a serde enum into its variant name and payload: a string is a
 * unit variant (payload NULL), a map of exactly one entry is a variant
 * carrying data.
 */
static int
variant(const msgpack_object *o, const msgpack_object **name,
        const msgpack_object **payload, struct proto_err *err)
{
    if (o->type == MSGPACK_OBJECT_STR || o->type == MSGPACK_OBJECT_BIN) {
        *name = o;
        *payload = NULL;
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_MAP && o->via.map.size == 1) {
        *name = &o->via.map.ptr[0].key;
        *payload = &o->via.map.ptr[0].val;
        return 0;
    }
    return proto_err_set(err, PROTO_EINVALID, NULL,
                         "expected an enum as a string or a map of one "
                         "entry, got %s",
                         mpobj_type_name(o));
}

/* Reads an array of exactly rank u64 values, each non-zero when nonzero. */
static int
u64_array(const msgpack_object *o, uint32_t rank, int nonzero, uint64_t *dst,
          const char *what, struct proto_err *err)
{
    uint32_t i;
    int rc;

    if ((rc = expect_array(o, what, err)) != 0)
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
plan_tensor_min_bytes(const struct plan_tensor *t, uint64_t *out,
                      struct proto_err *err)
{
    uint64_t size = plan_etype_size(t->element_type), acc = size, term;
    const uint64_t *dims = t->dimensions;
    uint32_t i;

    if (size == 0)
        return proto_err_set(err, PROTO_EINVALID, NULL, "unknown element type");
    if (t->layout == PLAN_LAYOUT_BLOCKED &&
        t->padding == PLAN_PADDING_ZERO_FILL)
        dims = t->physical_dimensions;
    if (t->layout == PLAN_LAYOUT_STRIDED) {
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
plan_tensor_words(const msgpack_object *o)
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
blocked_decode(const msgpack_object *o, struct plan_tensor *t, uint64_t *w,
               struct proto_err *err)
{
    const msgpack_object *v, *name, *payload, *pd;
    uint32_t rank = t->rank, i, *order = (uint32_t *)(w + rank);
    uint64_t *block = w, *phys = w + 2 * (size_t)rank, ax;
    int rc, padded = 0;

    if ((rc = expect_map(o, "the blocked layout", err)) != 0)
        return rc;
    if ((rc = mpobj_field(o, "block", 1, &v, err)) != 0)
        return rc;
    if ((rc = at(u64_array(v, rank, 1, block, "block", err), err, "block")))
        return rc;
    t->block = block;

    if ((rc = mpobj_field(o, "axis_order", 1, &v, err)) != 0)
        return rc;
    if ((rc = expect_array(v, "axis_order", err)) != 0)
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
    if ((rc = variant(v, &name, &payload, err)) != 0)
        return at(rc, err, "padding");
    if (mpobj_str_eq(name, "exact") && payload == NULL) {
        t->padding = PLAN_PADDING_EXACT;
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
    t->padding = PLAN_PADDING_ZERO_FILL;
    if ((rc = expect_map(payload, "zero_fill", err)) != 0)
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
plan_tensor_decode(const msgpack_object *o, struct plan_tensor *t,
                   uint64_t *words, size_t nwords, struct proto_err *err)
{
    const msgpack_object *v, *name, *payload;
    uint64_t prod;
    uint32_t rank;
    int rc, et = 0;

    memset(t, 0, sizeof(*t));
    if ((rc = expect_map(o, "a tensor spec", err)) != 0)
        return rc;
    if ((rc = mpobj_field(o, "dimensions", 1, &v, err)) != 0)
        return rc;
    if ((rc = expect_array(v, "dimensions", err)) != 0)
        return at(rc, err, "dimensions");
    rank = v->via.array.size;
    /* The caller sized words with plan_tensor_words(); a smaller buffer is
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
    if ((rc = plan_etype_decode(v, &et, err)) != 0)
        return at(rc, err, "element_type");
    t->element_type = (uint8_t)et;

    if ((rc = plan_tensor_min_bytes(t, &prod, err)) != 0) {
        proto_err_set(err, PROTO_EINVALID, "dimensions",
                      "element size times the product of the dimensions "
                      "exceeds 2^64-1");
        return PROTO_EINVALID;
    }

    if ((rc = mpobj_field(o, "layout", 1, &v, err)) != 0)
        return rc;
    if ((rc = variant(v, &name, &payload, err)) != 0)
        return at(rc, err, "layout");
    if (mpobj_str_eq(name, "contiguous") && payload == NULL) {
        t->layout = PLAN_LAYOUT_CONTIGUOUS;
    } else if (mpobj_str_eq(name, "strided") && payload != NULL) {
        const msgpack_object *s;
        uint64_t *strides = words + rank;

        t->layout = PLAN_LAYOUT_STRIDED;
        if ((rc = expect_map(payload, "the strided layout", err)) != 0)
            return at(rc, err, "layout.strided");
        if ((rc = mpobj_field(payload, "byte_strides", 1, &s, err)) != 0)
            return at(rc, err, "layout.strided");
        if ((rc = u64_array(s, rank, 1, strides, "byte_strides", err)) != 0)
            return at(rc, err, "layout.strided.byte_strides");
        t->byte_strides = strides;
        if ((rc = plan_tensor_min_bytes(t, &t->min_storage_bytes, err)) != 0)
            return at(rc, err, "layout.strided.byte_strides");
        return 0;
    } else if (mpobj_str_eq(name, "blocked") && payload != NULL) {
        t->layout = PLAN_LAYOUT_BLOCKED;
        if ((rc = blocked_decode(payload, t, words + rank, err)) != 0)
            return at(rc, err, "layout.blocked");
        if ((rc = plan_tensor_min_bytes(t, &t->min_storage_bytes, err)) != 0)
            return at(rc, err,
                      t->padding == PLAN_PADDING_ZERO_FILL
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
pack_pstr(msgpack_packer *pk, struct proto_str s)
{
    return pack_str(pk, s.ptr, s.len);
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
plan_tensor_encode(const struct plan_tensor *t, msgpack_packer *pk)
{
    uint32_t i;

    if (msgpack_pack_map(pk, 3) != 0 || pack_cstr(pk, "dimensions") != 0 ||
        pack_u64s(pk, t->dimensions, t->rank) != 0 ||
        pack_cstr(pk, "element_type") != 0 ||
        pack_cstr(pk, etype_names[t->element_type]) != 0 ||
        pack_cstr(pk, "layout") != 0)
        return -1;
    switch (t->layout) {
    case PLAN_LAYOUT_STRIDED:
        return msgpack_pack_map(pk, 1) || pack_cstr(pk, "strided") ||
                       msgpack_pack_map(pk, 1) ||
                       pack_cstr(pk, "byte_strides") ||
                       pack_u64s(pk, t->byte_strides, t->rank)
                   ? -1
                   : 0;
    case PLAN_LAYOUT_BLOCKED:
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
        if (t->padding == PLAN_PADDING_EXACT)
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
plan_tensor_equal(const struct plan_tensor *a, const struct plan_tensor *b)
{
    if (a->rank != b->rank || a->element_type != b->element_type ||
        a->layout != b->layout ||
        !u64s_equal(a->dimensions, b->dimensions, a->rank))
        return 0;
    if (a->layout == PLAN_LAYOUT_STRIDED)
        return u64s_equal(a->byte_strides, b->byte_strides, a->rank);
    if (a->layout != PLAN_LAYOUT_BLOCKED)
        return 1;
    if (a->padding != b->padding || !u64s_equal(a->block, b->block, a->rank) ||
        (a->rank &&
         memcmp(a->axis_order, b->axis_order, sizeof(uint32_t) * a->rank)))
        return 0;
    return a->padding == PLAN_PADDING_EXACT ||
           u64s_equal(a->physical_dimensions, b->physical_dimensions, a->rank);
}

/* What the counting pass found: sizes of the one allocation. */
struct counts {
    size_t nodes, values, components, words, max_components;
};

static int
add(size_t *acc, size_t n)
{
    return __builtin_add_overflow(*acc, n, acc);
}

/* Counts containers whatever their validity; the validating pass decides. */
static int
count_plan(const msgpack_object *o, struct counts *c)
{
    const msgpack_object *nodes, *vals, *s, *comps;
    uint32_t i, j;

    memset(c, 0, sizeof(*c));
    if (o->type != MSGPACK_OBJECT_MAP)
        return 0;
    nodes = mpobj_map_get(o, "nodes", NULL);
    if (nodes == NULL || nodes->type != MSGPACK_OBJECT_ARRAY)
        return 0;
    c->nodes = nodes->via.array.size;
    for (i = 0; i < nodes->via.array.size; i++) {
        vals = mpobj_map_get(&nodes->via.array.ptr[i], "values", NULL);
        if (vals == NULL || vals->type != MSGPACK_OBJECT_ARRAY)
            continue;
        if (add(&c->values, vals->via.array.size))
            return -1;
        for (j = 0; j < vals->via.array.size; j++) {
            const msgpack_object *v = &vals->via.array.ptr[j], *t;

            t = mpobj_map_get(v, "tensor", NULL);
            if (t != NULL && add(&c->words, plan_tensor_words(t)))
                return -1;
            s = mpobj_map_get(v, "storage", NULL);
            comps = s ? mpobj_map_get(s, "components", NULL) : NULL;
            if (comps == NULL || comps->type != MSGPACK_OBJECT_ARRAY)
                continue;
            if (add(&c->components, comps->via.array.size))
                return -1;
            if (comps->via.array.size > c->max_components)
                c->max_components = comps->via.array.size;
        }
    }
    return 0;
}

/* Bump allocation inside the one block of a plan. */
struct arena {
    char *base;
    size_t used, cap;
};

static void *
carve(struct arena *a, size_t size)
{
    void *p = a->base + a->used;

    /* arena_size() summed every part rounded up to 8 bytes with overflow
     * checks, so this never passes cap. A zero-size part still gets a
     * valid pointer, so memset and memcmp of zero bytes stay defined. */
    a->used += (size + 7) & ~(size_t)7;
    return p;
}

/* Adds n elements of size bytes, rounded up to 8, to *total. */
static int
part(size_t *total, size_t n, size_t size)
{
    size_t bytes;

    return __builtin_mul_overflow(n, size, &bytes) ||
           __builtin_add_overflow(bytes, 7, &bytes) ||
           __builtin_add_overflow(*total, bytes & ~(size_t)7, total);
}

/* Each carve() of a node, value or component list is rounded up on its
 * own, so allow 8 bytes of rounding per list on top of the element sizes. */
static int
arena_size(const struct counts *c, size_t *total)
{
    size_t t = 0;

    if (part(&t, 1, sizeof(struct plan)) ||
        part(&t, c->nodes, sizeof(struct plan_node)) ||
        part(&t, c->values, sizeof(struct plan_value)) ||
        part(&t, c->components, sizeof(struct plan_component)) ||
        part(&t, c->words, sizeof(uint64_t)) ||
        part(&t, c->max_components, sizeof(struct plan_component *)) ||
        part(&t, c->nodes + c->values + 1, 8))
        return -1;
    *total = t;
    return 0;
}

struct decoder {
    struct arena arena;
    uint64_t *words;
    size_t nwords;
    const struct plan_component **scratch; /* max_components entries */
};

static int
component_decode(const msgpack_object *o, struct plan_component *c,
                 struct proto_err *err)
{
    const msgpack_object *v;
    uint64_t size;
    int rc, et = 0;

    memset(c, 0, sizeof(*c));
    if ((rc = expect_map(o, "a storage component", err)) != 0)
        return rc;
    if ((rc = mpobj_field(o, "component_id", 0, &v, err)) != 0)
        return rc;
    if (v != NULL) {
        if ((rc = plan_identity_decode(v, &c->component_id, err)) != 0)
            return at(rc, err, "component_id");
        c->has_component_id = 1;
    }
    if ((rc = mpobj_field(o, "resource_id", 1, &v, err)) != 0 ||
        (rc = at(plan_identity_decode(v, &c->resource_id, err), err,
                 "resource_id")) != 0)
        return rc;
    if ((rc = mpobj_field(o, "offset_bytes", 1, &v, err)) != 0 ||
        (rc = at(mpobj_uint(v, UINT64_MAX, &c->offset_bytes, err), err,
                 "offset_bytes")) != 0)
        return rc;
    if ((rc = mpobj_field(o, "length_bytes", 1, &v, err)) != 0 ||
        (rc = at(mpobj_uint(v, UINT64_MAX, &c->length_bytes, err), err,
                 "length_bytes")) != 0)
        return rc;
    if ((rc = mpobj_field(o, "element_type", 1, &v, err)) != 0 ||
        (rc = at(plan_etype_decode(v, &et, err), err, "element_type")) != 0)
        return rc;
    c->element_type = (uint8_t)et;
    size = etype_sizes[et];

    if (c->length_bytes == 0)
        return proto_err_set(err, PROTO_EINVALID, "length_bytes",
                             "expected length_bytes greater than 0");
    if (c->offset_bytes > UINT64_MAX - c->length_bytes)
        return proto_err_set(err, PROTO_EINVALID, "offset_bytes",
                             "offset_bytes + length_bytes (%llu + %llu) "
                             "exceeds 2^64-1",
                             (unsigned long long)c->offset_bytes,
                             (unsigned long long)c->length_bytes);
    if (c->offset_bytes % size != 0)
        return proto_err_set(err, PROTO_EINVALID, "offset_bytes",
                             "expected offset_bytes a multiple of the "
                             "element size %llu, got %llu",
                             (unsigned long long)size,
                             (unsigned long long)c->offset_bytes);
    if (c->length_bytes % size != 0)
        return proto_err_set(err, PROTO_EINVALID, "length_bytes",
                             "expected length_bytes a multiple of the "
                             "element size %llu, got %llu",
                             (unsigned long long)size,
                             (unsigned long long)c->length_bytes);
    return 0;
}

static int
by_component_id_cb(const void *a, const void *b)
{
    const struct plan_component *x = *(const struct plan_component *const *)a;
    const struct plan_component *y = *(const struct plan_component *const *)b;
    int c = plan_str_cmp(x->component_id, y->component_id);

    /* Ties keep list order, so the later duplicate is reported. */
    return c ? c : (x > y) - (x < y);
}

static int
by_resource_offset_cb(const void *a, const void *b)
{
    const struct plan_component *x = *(const struct plan_component *const *)a;
    const struct plan_component *y = *(const struct plan_component *const *)b;
    int c = plan_str_cmp(x->resource_id, y->resource_id);

    if (c != 0)
        return c;
    if (x->offset_bytes != y->offset_bytes)
        return x->offset_bytes < y->offset_bytes ? -1 : 1;
    return (x > y) - (x < y);
}

/* The list rules: distinct ids with several components, no overlap. */
static int
components_check(struct plan_value *val, struct decoder *d,
                 struct proto_err *err)
{
    const struct plan_component **s = d->scratch, *far;
    uint32_t n = val->ncomponents, i;
    size_t later, other;
    uint64_t end;

    if (n == 0)
        return proto_err_set(err, PROTO_EINVALID, "components",
                             "expected at least one storage component");
    if (n > 1) {
        for (i = 0; i < n; i++) {
            if (!val->components[i].has_component_id) {
                proto_err_set(err, PROTO_EINVALID, "component_id",
                              "a value with several components needs a "
                              "component_id on each");
                proto_err_prefix_index(err, i);
                return at(PROTO_EINVALID, err, "components");
            }
            s[i] = &val->components[i];
        }
        qsort(s, n, sizeof(*s), by_component_id_cb);
        for (i = 1; i < n; i++) {
            if (plan_str_cmp(s[i - 1]->component_id, s[i]->component_id))
                continue;
            later = (size_t)(s[i] - val->components);
            other = (size_t)(s[i - 1] - val->components);
            proto_err_set(err, PROTO_EINVALID, "component_id",
                          "component_id \"%.*s\" is also used by "
                          "components[%zu]",
                          (int)s[i]->component_id.len, s[i]->component_id.ptr,
                          other);
            proto_err_prefix_index(err, later);
            return at(PROTO_EINVALID, err, "components");
        }
    }
    for (i = 0; i < n; i++)
        s[i] = &val->components[i];
    qsort(s, n, sizeof(*s), by_resource_offset_cb);
    /* A sweep per resource: a component overlaps an earlier one exactly
     * when it starts before the furthest end seen so far. */
    far = NULL;
    end = 0;
    for (i = 0; i < n; i++) {
        if (far != NULL &&
            plan_str_cmp(far->resource_id, s[i]->resource_id) == 0 &&
            s[i]->offset_bytes < end) {
            later = (size_t)(s[i] - val->components);
            other = (size_t)(far - val->components);
            if (later < other) {
                size_t tmp = later;

                later = other;
                other = tmp;
            }
            proto_err_set(err, PROTO_EINVALID, NULL,
                          "component overlaps components[%zu] on resource "
                          "\"%.*s\"",
                          other, (int)s[i]->resource_id.len,
                          s[i]->resource_id.ptr);
            proto_err_prefix_index(err, later);
            return at(PROTO_EINVALID, err, "components");
        }
        if (far == NULL ||
            plan_str_cmp(far->resource_id, s[i]->resource_id) != 0 ||
            s[i]->offset_bytes + s[i]->length_bytes > end) {
            far = s[i];
            end = s[i]->offset_bytes + s[i]->length_bytes;
        }
    }
    return 0;
}

/* The binding rules of section 5, after every field has been read. */
static int
binding_check(const struct plan_value *v, struct proto_err *err)
{
    const struct plan_component *c = &v->components[0];

    if ((v->weight != NULL) != (v->usage == PLAN_USAGE_WEIGHTS))
        return proto_err_set(err, PROTO_EINVALID, "weight",
                             v->weight ? "weight is present but usage is not "
                                         "weights"
                                       : "usage weights needs a weight");
    if (v->role == PLAN_ROLE_INPUT && v->access == PLAN_ACCESS_WRITE)
        return proto_err_set(err, PROTO_EINVALID, "access",
                             "an input needs read or read_write access, "
                             "got write");
    if (v->role == PLAN_ROLE_INPUT && v->alias != PLAN_ALIAS_NO)
        return proto_err_set(err, PROTO_EINVALID, "alias",
                             "an input needs no_alias, got %s",
                             alias_names[v->alias]);
    if (v->role == PLAN_ROLE_OUTPUT && v->access == PLAN_ACCESS_READ)
        return proto_err_set(err, PROTO_EINVALID, "access",
                             "an output needs write or read_write access, "
                             "got read");
    if (v->usage != PLAN_USAGE_WEIGHTS && v->ncomponents != 1)
        return proto_err_set(err, PROTO_EINVALID, "storage.components",
                             "a non-weight value needs exactly one storage "
                             "component, got %u",
                             v->ncomponents);
    /* Section 5 states this rule for every value, weights included; the
     * two around it are for non-weight values only. */
    if (v->ncomponents == 1 && !c->has_component_id &&
        c->element_type != v->tensor.element_type)
        return proto_err_set(
            err, PROTO_EINVALID, "storage.components[0].element_type",
            "a single component without component_id "
            "needs the tensor's element type %s, got %s",
            etype_names[v->tensor.element_type], etype_names[c->element_type]);
    if (v->usage != PLAN_USAGE_WEIGHTS &&
        c->length_bytes < v->tensor.min_storage_bytes)
        return proto_err_set(err, PROTO_EINVALID,
                             "storage.components[0].length_bytes",
                             "length_bytes %llu is below the tensor's "
                             "minimum storage bytes %llu",
                             (unsigned long long)c->length_bytes,
                             (unsigned long long)v->tensor.min_storage_bytes);
    return 0;
}

static int
alias_decode(const msgpack_object *o, struct plan_value *val,
             struct proto_err *err)
{
    const msgpack_object *name, *payload, *ti;
    uint64_t idx;
    int rc, kind = 0;

    if ((rc = variant(o, &name, &payload, err)) != 0)
        return rc;
    if ((rc = enum_decode(name, alias_names, PLAN_ALIAS_COUNT, "alias", &kind,
                          err)) != 0 ||
        (kind == PLAN_ALIAS_NO) != (payload == NULL))
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "expected alias \"no_alias\", {\"may_alias\": "
                             "{\"tensor_index\": u32}} or {\"must_alias\": "
                             "{...}}");
    val->alias = (uint8_t)kind;
    if (kind == PLAN_ALIAS_NO)
        return 0;
    if ((rc = expect_map(payload, alias_names[kind], err)) != 0)
        return at(rc, err, alias_names[kind]);
    if ((rc = mpobj_field(payload, "tensor_index", 1, &ti, err)) != 0 ||
        (rc = at(mpobj_uint(ti, UINT32_MAX, &idx, err), err, "tensor_index")) !=
            0)
        return at(rc, err, alias_names[kind]);
    val->alias_tensor_index = (uint32_t)idx;
    return 0;
}

static int
value_decode(const msgpack_object *o, struct plan_value *val, struct decoder *d,
             struct proto_err *err)
{
    const msgpack_object *v, *comps;
    uint64_t u;
    uint32_t i;
    size_t nw;
    int rc, e = 0;

    memset(val, 0, sizeof(*val));
    if ((rc = expect_map(o, "a value binding", err)) != 0)
        return rc;
    if ((rc = mpobj_field(o, "value_id", 1, &v, err)) != 0 ||
        (rc = at(plan_identity_decode(v, &val->value_id, err), err,
                 "value_id")) != 0)
        return rc;
    if ((rc = mpobj_field(o, "role", 1, &v, err)) != 0 ||
        (rc = at(enum_decode(v, role_names, PLAN_ROLE_COUNT,
                             "role (input or output)", &e, err),
                 err, "role")) != 0)
        return rc;
    val->role = (uint8_t)e;
    if ((rc = mpobj_field(o, "ordinal", 1, &v, err)) != 0 ||
        (rc = at(mpobj_uint(v, UINT32_MAX, &u, err), err, "ordinal")) != 0)
        return rc;
    val->ordinal = (uint32_t)u;
    if ((rc = mpobj_field(o, "tensor", 1, &v, err)) != 0)
        return rc;
    nw = plan_tensor_words(v);
    if ((rc = at(plan_tensor_decode(v, &val->tensor, d->words, d->nwords, err),
                 err, "tensor")) != 0)
        return rc;
    d->words += nw;
    d->nwords -= nw;
    if ((rc = mpobj_field(o, "access", 1, &v, err)) != 0 ||
        (rc = at(enum_decode(v, access_names, PLAN_ACCESS_COUNT,
                             "access (read, write or read_write)", &e, err),
                 err, "access")) != 0)
        return rc;
    val->access = (uint8_t)e;
    if ((rc = mpobj_field(o, "alias", 1, &v, err)) != 0 ||
        (rc = at(alias_decode(v, val, err), err, "alias")) != 0)
        return rc;
    if ((rc = mpobj_field(o, "usage", 1, &v, err)) != 0 ||
        (rc = at(enum_decode(v, usage_names, PLAN_USAGE_COUNT,
                             "usage (weights, activations, state, "
                             "persistent, binding, scratch or transfer)",
                             &e, err),
                 err, "usage")) != 0)
        return rc;
    val->usage = (uint8_t)e;
    if ((rc = mpobj_field(o, "weight", 0, &v, err)) != 0)
        return rc;
    if (v != NULL && v->type != MSGPACK_OBJECT_MAP)
        return proto_err_set(err, PROTO_EINVALID, "weight",
                             "expected weight as nil or a map, got %s",
                             mpobj_type_name(v));
    val->weight = v;

    if ((rc = mpobj_field(o, "storage", 1, &v, err)) != 0)
        return rc;
    if ((rc = expect_map(v, "storage", err)) != 0)
        return at(rc, err, "storage");
    if ((rc = mpobj_field(v, "components", 1, &comps, err)) != 0)
        return at(rc, err, "storage");
    if ((rc = expect_array(comps, "components", err)) != 0)
        return at(at(rc, err, "components"), err, "storage");
    val->ncomponents = comps->via.array.size;
    val->components =
        carve(&d->arena, sizeof(*val->components) * val->ncomponents);
    for (i = 0; i < val->ncomponents; i++) {
        if ((rc = component_decode(&comps->via.array.ptr[i],
                                   &val->components[i], err)) != 0) {
            proto_err_prefix_index(err, i);
            return at(at(rc, err, "components"), err, "storage");
        }
    }
    if ((rc = components_check(val, d, err)) != 0)
        return at(rc, err, "storage");
    return binding_check(val, err);
}

static int
node_decode(const msgpack_object *o, struct plan_node *node, struct decoder *d,
            struct proto_err *err)
{
    const msgpack_object *v;
    uint32_t i;
    int rc;

    memset(node, 0, sizeof(*node));
    if ((rc = expect_map(o, "a plan node", err)) != 0)
        return rc;
    if ((rc = mpobj_field(o, "id", 1, &v, err)) != 0 ||
        (rc = at(plan_identity_decode(v, &node->id, err), err, "id")) != 0)
        return rc;
    if ((rc = mpobj_field(o, "values", 1, &v, err)) != 0)
        return rc;
    if ((rc = expect_array(v, "values", err)) != 0)
        return at(rc, err, "values");
    node->nvalues = v->via.array.size;
    node->values = carve(&d->arena, sizeof(*node->values) * node->nvalues);
    for (i = 0; i < node->nvalues; i++) {
        if ((rc = value_decode(&v->via.array.ptr[i], &node->values[i], d,
                               err)) != 0) {
            proto_err_prefix_index(err, i);
            return at(rc, err, "values");
        }
    }
    return 0;
}

static int
plan_fill(const msgpack_object *o, struct plan *p, struct decoder *d,
          struct proto_err *err)
{
    const msgpack_object *v;
    uint32_t i;
    int rc;

    if ((rc = expect_map(o, "a plan body", err)) != 0)
        return rc;
    if ((rc = mpobj_field(o, "prepared_plan_id", 1, &v, err)) != 0 ||
        (rc = at(plan_identity_decode(v, &p->prepared_plan_id, err), err,
                 "prepared_plan_id")) != 0)
        return rc;
    if ((rc = mpobj_field(o, "graph_hash", 1, &v, err)) != 0 ||
        (rc = at(mpobj_str(v, PLAN_GRAPH_HASH_MAX, &p->graph_hash, err), err,
                 "graph_hash")) != 0)
        return rc;
    if ((rc = mpobj_field(o, "nodes", 1, &v, err)) != 0)
        return rc;
    if ((rc = expect_array(v, "nodes", err)) != 0)
        return at(rc, err, "nodes");
    p->nnodes = v->via.array.size;
    p->nodes = carve(&d->arena, sizeof(*p->nodes) * p->nnodes);
    for (i = 0; i < p->nnodes; i++) {
        if ((rc = node_decode(&v->via.array.ptr[i], &p->nodes[i], d, err))) {
            proto_err_prefix_index(err, i);
            return at(rc, err, "nodes");
        }
        p->nvalues += p->nodes[i].nvalues;
    }
    return 0;
}

int
plan_decode(const msgpack_object *o, struct plan **out, struct proto_err *err)
{
    struct decoder d;
    struct counts c;
    struct plan *p;
    size_t total;
    int rc;

    *out = NULL;
    if (count_plan(o, &c) != 0 || arena_size(&c, &total) != 0)
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "plan too large to hold in memory");
    memset(&d, 0, sizeof(d));
    d.arena.base = calloc(1, total);
    if (d.arena.base == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "no memory for a plan of %zu bytes", total);
    d.arena.cap = total;
    p = carve(&d.arena, sizeof(*p));
    /* Carve the fixed parts up front: words and scratch are used while the
     * nodes, values and components are carved in order. */
    d.nwords = c.words;
    d.words = carve(&d.arena, sizeof(uint64_t) * c.words);
    d.scratch = carve(&d.arena, sizeof(*d.scratch) * c.max_components);
    if ((rc = plan_fill(o, p, &d, err)) != 0) {
        free(d.arena.base);
        return rc;
    }
    *out = p;
    return 0;
}

/* What a JSON-decoded plan owns: the msgpack bytes and their unpacking. */
struct owned {
    msgpack_sbuffer sb;
    msgpack_unpacked up;
};

void
plan_free(struct plan *p)
{
    struct owned *own;

    if (p == NULL)
        return;
    own = p->owned;
    free(p);
    if (own != NULL) {
        msgpack_unpacked_destroy(&own->up);
        msgpack_sbuffer_destroy(&own->sb);
        free(own);
    }
}

/* JSON nesting deeper than the wire allows is refused like a frame. */
#define JSON_MAX_DEPTH 32

static int
json_pack(struct json_object *j, msgpack_packer *pk, int depth)
{
    int64_t i64;

    if (depth > JSON_MAX_DEPTH)
        return 1;
    switch (json_object_get_type(j)) {
    case json_type_null:
        return msgpack_pack_nil(pk) ? -1 : 0;
    case json_type_boolean:
        return (json_object_get_boolean(j) ? msgpack_pack_true(pk)
                                           : msgpack_pack_false(pk))
                   ? -1
                   : 0;
    case json_type_int:
        /* json-c keeps integers above INT64_MAX as unsigned; get_int64
         * saturates them, get_uint64 reads them exactly. */
        i64 = json_object_get_int64(j);
        if (i64 < 0)
            return msgpack_pack_int64(pk, i64) ? -1 : 0;
        return msgpack_pack_uint64(pk, json_object_get_uint64(j)) ? -1 : 0;
    case json_type_double:
        return msgpack_pack_double(pk, json_object_get_double(j)) ? -1 : 0;
    case json_type_string:
        return pack_str(pk, json_object_get_string(j),
                        (size_t)json_object_get_string_len(j));
    case json_type_array: {
        size_t n = json_object_array_length(j), k;
        int rc;

        if (n > UINT32_MAX || msgpack_pack_array(pk, (uint32_t)n))
            return -1;
        for (k = 0; k < n; k++)
            if ((rc = json_pack(json_object_array_get_idx(j, k), pk,
                                depth + 1)) != 0)
                return rc;
        return 0;
    }
    case json_type_object: {
        struct json_object_iterator it = json_object_iter_begin(j);
        struct json_object_iterator end = json_object_iter_end(j);
        int rc;

        if (msgpack_pack_map(pk, (uint32_t)json_object_object_length(j)))
            return -1;
        for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
            if (pack_cstr(pk, json_object_iter_peek_name(&it)) != 0)
                return -1;
            if ((rc = json_pack(json_object_iter_peek_value(&it), pk,
                                depth + 1)) != 0)
                return rc;
        }
        return 0;
    }
    }
    return -1;
}

int
plan_decode_json(struct json_object *o, struct plan **out,
                 struct proto_err *err)
{
    struct owned *own;
    msgpack_packer pk;
    size_t off = 0;
    int rc;

    *out = NULL;
    if ((own = calloc(1, sizeof(*own))) == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "no memory");
    msgpack_sbuffer_init(&own->sb);
    msgpack_unpacked_init(&own->up);
    msgpack_packer_init(&pk, &own->sb, msgpack_sbuffer_write);
    rc = json_pack(o, &pk, 0);
    if (rc == 0 && msgpack_unpack_next(&own->up, own->sb.data, own->sb.size,
                                       &off) != MSGPACK_UNPACK_SUCCESS)
        rc = -1;
    if (rc != 0) {
        msgpack_unpacked_destroy(&own->up);
        msgpack_sbuffer_destroy(&own->sb);
        free(own);
        if (rc > 0)
            return proto_err_set(err, PROTO_EINVALID, NULL,
                                 "JSON nested deeper than %d levels",
                                 JSON_MAX_DEPTH);
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "no memory to convert the JSON plan");
    }
    if ((rc = plan_decode(&own->up.data, out, err)) != 0) {
        msgpack_unpacked_destroy(&own->up);
        msgpack_sbuffer_destroy(&own->sb);
        free(own);
        return rc;
    }
    (*out)->owned = own;
    return 0;
}

static int
component_encode(const struct plan_component *c, msgpack_packer *pk)
{
    if (msgpack_pack_map(pk, 5) || pack_cstr(pk, "component_id"))
        return -1;
    if (c->has_component_id ? pack_pstr(pk, c->component_id)
                            : msgpack_pack_nil(pk))
        return -1;
    return pack_cstr(pk, "resource_id") || pack_pstr(pk, c->resource_id) ||
                   pack_cstr(pk, "offset_bytes") ||
                   msgpack_pack_uint64(pk, c->offset_bytes) ||
                   pack_cstr(pk, "length_bytes") ||
                   msgpack_pack_uint64(pk, c->length_bytes) ||
                   pack_cstr(pk, "element_type") ||
                   pack_cstr(pk, etype_names[c->element_type])
               ? -1
               : 0;
}

static int
value_encode(const struct plan_value *v, msgpack_packer *pk)
{
    uint32_t i;

    if (msgpack_pack_map(pk, 9) || pack_cstr(pk, "value_id") ||
        pack_pstr(pk, v->value_id) || pack_cstr(pk, "role") ||
        pack_cstr(pk, role_names[v->role]) || pack_cstr(pk, "ordinal") ||
        msgpack_pack_uint32(pk, v->ordinal) || pack_cstr(pk, "tensor") ||
        plan_tensor_encode(&v->tensor, pk) || pack_cstr(pk, "access") ||
        pack_cstr(pk, access_names[v->access]) || pack_cstr(pk, "alias"))
        return -1;
    if (v->alias == PLAN_ALIAS_NO) {
        if (pack_cstr(pk, "no_alias"))
            return -1;
    } else if (msgpack_pack_map(pk, 1) ||
               pack_cstr(pk, alias_names[v->alias]) ||
               msgpack_pack_map(pk, 1) || pack_cstr(pk, "tensor_index") ||
               msgpack_pack_uint32(pk, v->alias_tensor_index)) {
        return -1;
    }
    if (pack_cstr(pk, "usage") || pack_cstr(pk, usage_names[v->usage]) ||
        pack_cstr(pk, "weight"))
        return -1;
    if (v->weight ? msgpack_pack_object(pk, *v->weight) : msgpack_pack_nil(pk))
        return -1;
    if (pack_cstr(pk, "storage") || msgpack_pack_map(pk, 1) ||
        pack_cstr(pk, "components") || msgpack_pack_array(pk, v->ncomponents))
        return -1;
    for (i = 0; i < v->ncomponents; i++)
        if (component_encode(&v->components[i], pk) != 0)
            return -1;
    return 0;
}

int
plan_encode_canonical(const struct plan *p, msgpack_packer *pk)
{
    uint32_t i, j;

    if (msgpack_pack_map(pk, 3) || pack_cstr(pk, "prepared_plan_id") ||
        pack_pstr(pk, p->prepared_plan_id) || pack_cstr(pk, "graph_hash") ||
        pack_pstr(pk, p->graph_hash) || pack_cstr(pk, "nodes") ||
        msgpack_pack_array(pk, p->nnodes))
        return -1;
    for (i = 0; i < p->nnodes; i++) {
        const struct plan_node *n = &p->nodes[i];

        if (msgpack_pack_map(pk, 2) || pack_cstr(pk, "id") ||
            pack_pstr(pk, n->id) || pack_cstr(pk, "values") ||
            msgpack_pack_array(pk, n->nvalues))
            return -1;
        for (j = 0; j < n->nvalues; j++)
            if (value_encode(&n->values[j], pk) != 0)
                return -1;
    }
    return 0;
}
