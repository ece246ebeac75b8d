/*
 * plan.c: decoding, validation and canonical encoding of prepared plans
 * (PROTOCOL section 5): nodes, value bindings and their storage
 * components. The tensor rules are tensor.c's, the identity rules
 * identity.c's; the JSON form is plan_json.c's. Pure functions; safe on any
 * thread.
 *
 * Invariants. plan_decode() runs in two passes: a counting pass that only
 * reads container sizes, then one allocation, then the validating pass that
 * fills it. The validating pass never allocates, so a plan is either
 * returned whole or not at all. Every u64 computation that can exceed 2^64-1
 * (range ends here, products of dimensions, strided extents and rounding up
 * to a block in tensor.c) goes through the __builtin_*_overflow checks and
 * turns into PROTO_EINVALID: a wrapped number would let a forged plan claim
 * a tiny storage range.
 */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

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

/* Prefixes the field name key to a path set by a typed read. */
static int
at(int rc, struct proto_err *err, const char *key)
{
    if (rc != 0)
        proto_err_prefix_field(err, key);
    return rc;
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
            if (t != NULL && add(&c->words, tensor_words(t)))
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
    if ((rc = mpobj_expect_map(o, "a storage component", err)) != 0)
        return rc;
    if ((rc = mpobj_field(o, "component_id", 0, &v, err)) != 0)
        return rc;
    if (v != NULL) {
        if ((rc = identity_decode(v, &c->component_id, err)) != 0)
            return at(rc, err, "component_id");
        c->has_component_id = 1;
    }
    if ((rc = mpobj_field(o, "resource_id", 1, &v, err)) != 0 ||
        (rc = at(identity_decode(v, &c->resource_id, err), err,
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
        (rc = at(tensor_etype_decode(v, &et, err), err, "element_type")) != 0)
        return rc;
    c->element_type = (uint8_t)et;
    size = tensor_etype_size(et);

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
    int c = identity_cmp(x->component_id, y->component_id);

    /* Ties keep list order, so the later duplicate is reported. */
    return c ? c : (x > y) - (x < y);
}

static int
by_resource_offset_cb(const void *a, const void *b)
{
    const struct plan_component *x = *(const struct plan_component *const *)a;
    const struct plan_component *y = *(const struct plan_component *const *)b;
    int c = identity_cmp(x->resource_id, y->resource_id);

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
            if (identity_cmp(s[i - 1]->component_id, s[i]->component_id))
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
            identity_cmp(far->resource_id, s[i]->resource_id) == 0 &&
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
            identity_cmp(far->resource_id, s[i]->resource_id) != 0 ||
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
        return proto_err_set(err, PROTO_EINVALID,
                             "storage.components[0].element_type",
                             "a single component without component_id "
                             "needs the tensor's element type %s, got %s",
                             tensor_etype_name(v->tensor.element_type),
                             tensor_etype_name(c->element_type));
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
    /* Set on every path, but gcc cannot see it once mpobj_variant() has only
     * this caller here and is inlined. */
    const msgpack_object *name = NULL, *payload = NULL, *ti;
    uint64_t idx;
    int rc, kind = 0;

    if ((rc = mpobj_variant(o, &name, &payload, err)) != 0)
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
    if ((rc = mpobj_expect_map(payload, alias_names[kind], err)) != 0)
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
    if ((rc = mpobj_expect_map(o, "a value binding", err)) != 0)
        return rc;
    if ((rc = mpobj_field(o, "value_id", 1, &v, err)) != 0 ||
        (rc = at(identity_decode(v, &val->value_id, err), err, "value_id")) !=
            0)
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
    nw = tensor_words(v);
    if ((rc = at(tensor_decode(v, &val->tensor, d->words, d->nwords, err), err,
                 "tensor")) != 0)
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
    if ((rc = mpobj_expect_map(v, "storage", err)) != 0)
        return at(rc, err, "storage");
    if ((rc = mpobj_field(v, "components", 1, &comps, err)) != 0)
        return at(rc, err, "storage");
    if ((rc = mpobj_expect_array(comps, "components", err)) != 0)
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
    if ((rc = mpobj_expect_map(o, "a plan node", err)) != 0)
        return rc;
    if ((rc = mpobj_field(o, "id", 1, &v, err)) != 0 ||
        (rc = at(identity_decode(v, &node->id, err), err, "id")) != 0)
        return rc;
    if ((rc = mpobj_field(o, "values", 1, &v, err)) != 0)
        return rc;
    if ((rc = mpobj_expect_array(v, "values", err)) != 0)
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

    if ((rc = mpobj_expect_map(o, "a plan body", err)) != 0)
        return rc;
    if ((rc = mpobj_field(o, "prepared_plan_id", 1, &v, err)) != 0 ||
        (rc = at(identity_decode(v, &p->prepared_plan_id, err), err,
                 "prepared_plan_id")) != 0)
        return rc;
    if ((rc = mpobj_field(o, "graph_hash", 1, &v, err)) != 0 ||
        (rc = at(mpobj_str(v, PLAN_GRAPH_HASH_MAX, &p->graph_hash, err), err,
                 "graph_hash")) != 0)
        return rc;
    if ((rc = mpobj_field(o, "nodes", 1, &v, err)) != 0)
        return rc;
    if ((rc = mpobj_expect_array(v, "nodes", err)) != 0)
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

void
plan_free(struct plan *p)
{
    struct plan_owned *own;

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
                   pack_cstr(pk, tensor_etype_name(c->element_type))
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
        tensor_encode(&v->tensor, pk) || pack_cstr(pk, "access") ||
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
