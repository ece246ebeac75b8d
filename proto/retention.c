/*
 * retention.c: retention specs resolved against plans (PROTOCOL section 6)
 * and completion readback checks (section 7). Pure functions; safe on any
 * thread.
 *
 * Invariants. Resolution applies rules 1-5 in order to each requested value
 * in byte order of value_id, so the first failure reported is the same one
 * the runtime's planner reports. Rule 5 is answered for all values at once:
 * the writing components are sorted by (resource, offset) under a segment
 * tree of range ends, the values are visited from the last producer node
 * to the first while the writers of each node are switched on, so a plan of
 * W writing components and R retained values costs O((W + R) log W), not
 * W x R comparisons a forged plan could make quadratic. Range ends never
 * wrap: plan_decode() rejected components whose offset + length exceeds
 * 2^64-1, and rule 4 checks the retained range's own end.
 */
#include "retention.h"

#include <stdlib.h>
#include <string.h>

#include "plan.h"

static int
at(int rc, struct proto_err *err, const char *key)
{
    if (rc != 0)
        proto_err_prefix_field(err, key);
    return rc;
}

static int
expect(const msgpack_object *o, msgpack_object_type type, const char *what,
       struct proto_err *err)
{
    if (o->type == type)
        return 0;
    return proto_err_set(err, PROTO_EINVALID, NULL, "expected %s, got %s", what,
                         mpobj_type_name(o));
}

/* Reads the plan key every body starts with. */
static int
plan_key(const msgpack_object *o, struct proto_str *id, struct proto_str *gh,
         struct proto_err *err)
{
    const msgpack_object *v;
    int rc;

    if ((rc = mpobj_field(o, "prepared_plan_id", 1, &v, err)) != 0 ||
        (rc = at(identity_decode(v, id, err), err, "prepared_plan_id")) != 0)
        return rc;
    if ((rc = mpobj_field(o, "graph_hash", 1, &v, err)) != 0 ||
        (rc = at(mpobj_str(v, PLAN_GRAPH_HASH_MAX, gh, err), err,
                 "graph_hash")) != 0)
        return rc;
    return 0;
}

static int
value_fill(const msgpack_object *o, struct retained_value *rv, uint64_t *w,
           size_t nw, struct proto_err *err)
{
    const msgpack_object *v;
    uint64_t u;
    int rc;

    memset(rv, 0, sizeof(*rv));
    if ((rc = expect(o, MSGPACK_OBJECT_MAP, "a retained value map", err)))
        return rc;
    if ((rc = mpobj_field(o, "value_id", 1, &v, err)) != 0 ||
        (rc = at(identity_decode(v, &rv->value_id, err), err, "value_id")) != 0)
        return rc;
    if ((rc = mpobj_field(o, "producer_node_id", 1, &v, err)) != 0 ||
        (rc = at(identity_decode(v, &rv->producer_node_id, err), err,
                 "producer_node_id")) != 0)
        return rc;
    if ((rc = mpobj_field(o, "output_ordinal", 1, &v, err)) != 0 ||
        (rc = at(mpobj_uint(v, UINT32_MAX, &u, err), err, "output_ordinal")) !=
            0)
        return rc;
    rv->output_ordinal = (uint32_t)u;
    if ((rc = mpobj_field(o, "resource_id", 1, &v, err)) != 0 ||
        (rc = at(identity_decode(v, &rv->resource_id, err), err,
                 "resource_id")) != 0)
        return rc;
    if ((rc = mpobj_field(o, "logical_offset_bytes", 1, &v, err)) != 0 ||
        (rc = at(mpobj_uint(v, UINT64_MAX, &rv->logical_offset_bytes, err), err,
                 "logical_offset_bytes")) != 0)
        return rc;
    if ((rc = mpobj_field(o, "tensor", 1, &v, err)) != 0 ||
        (rc = at(tensor_decode(v, &rv->tensor, w, nw, err), err, "tensor")) !=
            0)
        return rc;
    return 0;
}

/* retention_values_decode(), also saying how many bytes *out holds. */
static int
values_decode(const msgpack_object *o, struct retained_value **out, size_t *n,
              size_t *owned, struct proto_err *err)
{
    struct retained_value *vals;
    size_t count, words = 0, i, used = 0, nw, bytes;
    uint64_t *w;
    int rc;

    *out = NULL;
    *n = 0;
    if ((rc = expect(o, MSGPACK_OBJECT_ARRAY, "an array of retained values",
                     err)) != 0)
        return rc;
    count = o->via.array.size;
    for (i = 0; i < count; i++) {
        const msgpack_object *t =
            mpobj_map_get(&o->via.array.ptr[i], "tensor", NULL);

        if (t != NULL && __builtin_add_overflow(words, tensor_words(t), &words))
            return proto_err_set(err, PROTO_ENOMEM, NULL, "too large");
    }
    /* The values and every tensor's words in one block; the counts come
     * from objects already in memory. */
    if (__builtin_mul_overflow(count, sizeof(*vals), &bytes) ||
        __builtin_mul_overflow(words, sizeof(*w), &nw) ||
        __builtin_add_overflow(bytes, nw + 8, &bytes) ||
        (vals = calloc(1, bytes)) == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "no memory for %zu retained values", count);
    w = (uint64_t *)(void *)(vals + count);
    for (i = 0; i < count; i++) {
        const msgpack_object *t =
            mpobj_map_get(&o->via.array.ptr[i], "tensor", NULL);

        nw = t ? tensor_words(t) : 0;
        if ((rc = value_fill(&o->via.array.ptr[i], &vals[i], w + used, nw,
                             err)) != 0) {
            free(vals);
            proto_err_prefix_index(err, i);
            return rc;
        }
        used += nw;
    }
    *out = vals;
    *n = count;
    *owned = bytes;
    return 0;
}

int
retention_values_decode(const msgpack_object *o, struct retained_value **out,
                        size_t *n, struct proto_err *err)
{
    size_t owned;

    return values_decode(o, out, n, &owned, err);
}

int
retention_value_decode(const msgpack_object *o, struct retained_value **out,
                       struct proto_err *err)
{
    const msgpack_object *t;
    size_t nw = 0, bytes;
    int rc;

    *out = NULL;
    if ((rc = expect(o, MSGPACK_OBJECT_MAP, "a retained value map", err)))
        return rc;
    if ((t = mpobj_map_get(o, "tensor", NULL)) != NULL)
        nw = tensor_words(t);
    if (__builtin_mul_overflow(nw, sizeof(uint64_t), &bytes) ||
        __builtin_add_overflow(bytes, sizeof(**out) + 8, &bytes) ||
        (*out = calloc(1, bytes)) == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "no memory for a retained value");
    if ((rc = value_fill(o, *out, (uint64_t *)(void *)(*out + 1), nw, err))) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

static int
by_request_cb(const void *a, const void *b)
{
    const struct retention_request *x = a, *y = b;
    int c = identity_cmp(x->value_id, y->value_id);

    /* Ties in body order, so the later duplicate is the one reported. */
    return c ? c : (x->index > y->index) - (x->index < y->index);
}

int
retention_spec_decode(const msgpack_object *o, struct retention_spec **out,
                      struct proto_err *err)
{
    const msgpack_object *vals, *det, *ret;
    struct retention_spec *s;
    size_t count = 0, owned = 0, i;
    int rc;

    *out = NULL;
    if ((rc = expect(o, MSGPACK_OBJECT_MAP, "a retention body map", err)))
        return rc;
    if ((s = calloc(1, sizeof(*s))) == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "no memory");
    if ((rc = plan_key(o, &s->prepared_plan_id, &s->graph_hash, err)) != 0)
        goto fail;
    if ((rc = mpobj_field(o, "values", 0, &vals, err)) != 0 ||
        (rc = mpobj_field(o, "determinism_outputs", 0, &det, err)) != 0 ||
        (rc = mpobj_field(o, "retained", 0, &ret, err)) != 0)
        goto fail;
    if (det != NULL) {
        if (det->type != MSGPACK_OBJECT_BOOLEAN) {
            rc = proto_err_set(err, PROTO_EINVALID, "determinism_outputs",
                               "expected a boolean, got %s",
                               mpobj_type_name(det));
            goto fail;
        }
        s->determinism_outputs = det->via.boolean;
    }
    if (s->determinism_outputs && vals != NULL) {
        rc = proto_err_set(err, PROTO_EINVALID, "values",
                           "give either values or determinism_outputs: "
                           "true, not both");
        goto fail;
    }
    if (!s->determinism_outputs && vals == NULL) {
        rc = proto_err_set(err, PROTO_EINVALID, "values",
                           "missing values (or determinism_outputs: true)");
        goto fail;
    }
    if (vals != NULL) {
        if ((rc = at(
                 expect(vals, MSGPACK_OBJECT_ARRAY, "values as an array", err),
                 err, "values")) != 0)
            goto fail;
        count = vals->via.array.size;
        s->requests = calloc(count ? count : 1, sizeof(*s->requests));
        if (s->requests == NULL) {
            rc = proto_err_set(err, PROTO_ENOMEM, NULL, "no memory");
            goto fail;
        }
        for (i = 0; i < count; i++) {
            if ((rc = identity_decode(&vals->via.array.ptr[i],
                                      &s->requests[i].value_id, err))) {
                proto_err_prefix_index(err, i);
                at(rc, err, "values");
                goto fail;
            }
            s->requests[i].index = i;
        }
        s->nrequests = count;
        qsort(s->requests, count, sizeof(*s->requests), by_request_cb);
        for (i = 1; i < count; i++) {
            if (identity_cmp(s->requests[i - 1].value_id,
                             s->requests[i].value_id) != 0)
                continue;
            rc = proto_err_set(err, PROTO_EINVALID, NULL,
                               "value \"%.*s\" is already listed at "
                               "values[%zu]",
                               (int)s->requests[i].value_id.len,
                               s->requests[i].value_id.ptr,
                               s->requests[i - 1].index);
            proto_err_prefix_index(err, s->requests[i].index);
            at(rc, err, "values");
            goto fail;
        }
    }
    if (ret != NULL) {
        if ((rc = at(values_decode(ret, &s->claimed, &s->nclaimed, &owned, err),
                     err, "retained")) != 0)
            goto fail;
        s->has_claimed = 1;
    }
    s->bytes = sizeof(*s) + s->nrequests * sizeof(*s->requests) + owned;
    *out = s;
    return 0;
fail:
    retention_spec_free(s);
    return rc;
}

void
retention_spec_free(struct retention_spec *s)
{
    if (s == NULL)
        return;
    free(s->requests);
    free(s->claimed);
    free(s);
}

/* An output binding and the node that produces it. */
struct output {
    const struct plan_value *v;
    uint32_t node;
};

/* A component of a writing binding (write or read_write), for rule 5. */
struct writer {
    const struct plan_component *c;
    const struct plan_value *v;
    uint32_t node;
    uint64_t end; /* offset + length; never wraps (plan_decode) */
};

/* A node index and a position, to visit writers or requests by node. */
struct by_node {
    uint32_t node;
    size_t pos;
};

/* The index resolution works from; built once per call. */
struct index {
    struct output *outs; /* sorted by value_id, then node */
    size_t nouts;
    struct writer *ws; /* sorted by resource, offset, binding */
    size_t nws;
    struct by_node *wnodes; /* writer positions by node, last node first */
    uint64_t *tree;         /* max end of the active writers, per subtree */
    size_t leaves;          /* a power of two >= nws */
};

/* One requested value that passed rules 1-4, waiting for rule 5. */
struct pending {
    const struct output *o;
    size_t index; /* in the body's values, for the error path */
    uint64_t start, end;
    size_t self;              /* position of its own writer */
    const struct writer *hit; /* the writer that breaks rule 5, if any */
};

static int
by_output_cb(const void *a, const void *b)
{
    const struct output *x = a, *y = b;
    int c = identity_cmp(x->v->value_id, y->v->value_id);

    if (c != 0)
        return c;
    return (x->node > y->node) - (x->node < y->node);
}

/* Orders writers by resource and offset; ties by binding and component
 * address, so that a binding's own writer can be found by binary search.
 * Every binding lives in the plan's one allocation. */
static int
writer_cmp(struct proto_str r, uint64_t off, uintptr_t v, uintptr_t c,
           const struct writer *y)
{
    int k = identity_cmp(r, y->c->resource_id);

    if (k != 0)
        return k;
    if (off != y->c->offset_bytes)
        return off < y->c->offset_bytes ? -1 : 1;
    if (v != (uintptr_t)y->v)
        return v < (uintptr_t)y->v ? -1 : 1;
    return (c > (uintptr_t)y->c) - (c < (uintptr_t)y->c);
}

static int
by_writer_cb(const void *a, const void *b)
{
    const struct writer *x = a;

    return writer_cmp(x->c->resource_id, x->c->offset_bytes, (uintptr_t)x->v,
                      (uintptr_t)x->c, b);
}

/* Last node first; ties by position, so the order is total. */
static int
by_node_desc_cb(const void *a, const void *b)
{
    const struct by_node *x = a, *y = b;

    if (x->node != y->node)
        return x->node < y->node ? 1 : -1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

static void
index_free(struct index *ix)
{
    free(ix->outs);
    free(ix->ws);
    free(ix->wnodes);
    free(ix->tree);
}

static int
index_build(const struct plan *p, struct index *ix, struct proto_err *err)
{
    size_t nouts = 0, nws = 0, i;
    uint32_t n, j, k;

    memset(ix, 0, sizeof(*ix));
    for (n = 0; n < p->nnodes; n++) {
        for (j = 0; j < p->nodes[n].nvalues; j++) {
            const struct plan_value *v = &p->nodes[n].values[j];

            nouts += v->role == PLAN_ROLE_OUTPUT;
            if (v->access != PLAN_ACCESS_READ)
                nws += v->ncomponents;
        }
    }
    ix->leaves = 1;
    while (ix->leaves < nws)
        ix->leaves *= 2;
    /* The counts come from a plan already in memory, so these sizes are
     * bounded by a small multiple of it. */
    ix->outs = calloc(nouts ? nouts : 1, sizeof(*ix->outs));
    ix->ws = calloc(nws ? nws : 1, sizeof(*ix->ws));
    ix->wnodes = calloc(nws ? nws : 1, sizeof(*ix->wnodes));
    ix->tree = calloc(2 * ix->leaves, sizeof(*ix->tree));
    if (ix->outs == NULL || ix->ws == NULL || ix->wnodes == NULL ||
        ix->tree == NULL) {
        index_free(ix);
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "no memory to index the plan");
    }
    for (n = 0; n < p->nnodes; n++) {
        for (j = 0; j < p->nodes[n].nvalues; j++) {
            const struct plan_value *v = &p->nodes[n].values[j];

            if (v->role == PLAN_ROLE_OUTPUT)
                ix->outs[ix->nouts++] = (struct output){ v, n };
            if (v->access == PLAN_ACCESS_READ)
                continue;
            for (k = 0; k < v->ncomponents; k++) {
                const struct plan_component *c = &v->components[k];
                struct writer *w = &ix->ws[ix->nws++];

                w->c = c;
                w->v = v;
                w->node = n;
                w->end = c->offset_bytes + c->length_bytes;
            }
        }
    }
    qsort(ix->outs, ix->nouts, sizeof(*ix->outs), by_output_cb);
    qsort(ix->ws, ix->nws, sizeof(*ix->ws), by_writer_cb);
    for (i = 0; i < ix->nws; i++)
        ix->wnodes[i] = (struct by_node){ ix->ws[i].node, i };
    qsort(ix->wnodes, ix->nws, sizeof(*ix->wnodes), by_node_desc_cb);
    return 0;
}

/* First output whose value_id is not below id. */
static size_t
outputs_lower(const struct index *ix, struct proto_str id)
{
    size_t lo = 0, hi = ix->nouts, mid;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        if (identity_cmp(ix->outs[mid].v->value_id, id) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* First writer not below (r, off, v, c) in the writers' order. */
static size_t
writers_lower(const struct index *ix, struct proto_str r, uint64_t off,
              uintptr_t v, uintptr_t c)
{
    size_t lo = 0, hi = ix->nws, mid;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        if (writer_cmp(r, off, v, c, &ix->ws[mid]) > 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Marks writer pos active: its end enters the maxima above it. */
static void
tree_activate(struct index *ix, size_t pos)
{
    size_t i = pos + ix->leaves;

    ix->tree[i] = ix->ws[pos].end;
    for (i /= 2; i >= 1; i /= 2)
        ix->tree[i] = ix->tree[2 * i] > ix->tree[2 * i + 1]
                          ? ix->tree[2 * i]
                          : ix->tree[2 * i + 1];
}

/*
 * The first active writer in positions [l, r) whose end exceeds a, or
 * SIZE_MAX; node covers [nl, nr). Inactive leaves hold 0, which exceeds no
 * start. A subtree whose maximum is at most a is skipped whole, so this
 * costs O(log n) per call.
 */
static size_t
tree_find(const struct index *ix, size_t node, size_t nl, size_t nr, size_t l,
          size_t r, uint64_t a)
{
    size_t mid, f;

    if (r <= nl || nr <= l || ix->tree[node] <= a)
        return SIZE_MAX;
    if (nr - nl == 1)
        return nl;
    mid = nl + (nr - nl) / 2;
    f = tree_find(ix, 2 * node, nl, mid, l, r, a);
    return f != SIZE_MAX ? f : tree_find(ix, 2 * node + 1, mid, nr, l, r, a);
}

/*
 * Rule 5 for every pending value at once: visits them from the last
 * producer node to the first, activating the writers of each node on the
 * way, so that when a value is checked exactly the writers of its producer
 * node and later nodes are active. Its candidates are then the writers of
 * the same resource that start before the range ends, minus its own.
 */
static int
rule5_sweep(struct index *ix, struct pending *pd, size_t n,
            struct proto_err *err)
{
    struct by_node *order = calloc(n ? n : 1, sizeof(*order));
    size_t i, k = 0, g, u, f;

    if (order == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "no memory to check rule 5");
    for (i = 0; i < n; i++)
        order[i] = (struct by_node){ pd[i].o->node, i };
    qsort(order, n, sizeof(*order), by_node_desc_cb);
    for (i = 0; i < n; i++) {
        struct pending *q = &pd[order[i].pos];
        struct proto_str r = q->o->v->components[0].resource_id;

        while (k < ix->nws && ix->wnodes[k].node >= q->o->node)
            tree_activate(ix, ix->wnodes[k++].pos);
        g = writers_lower(ix, r, 0, 0, 0);
        u = writers_lower(ix, r, q->end, 0, 0);
        f = tree_find(ix, 1, 0, ix->leaves, g, q->self, q->start);
        if (f == SIZE_MAX)
            f = tree_find(ix, 1, 0, ix->leaves, q->self + 1, u, q->start);
        q->hit = f == SIZE_MAX ? NULL : &ix->ws[f];
    }
    free(order);
    return 0;
}

/* Sets the error path of a request: values[i] or determinism_outputs. */
static void
req_path(struct proto_err *err, const struct retention_spec *s, size_t index)
{
    if (s->determinism_outputs) {
        proto_err_prefix_field(err, "determinism_outputs");
        return;
    }
    proto_err_prefix_index(err, index);
    proto_err_prefix_field(err, "values");
}

/* Rules 1-4 for one value id; fills pd for rule 5. */
static int
rules_1_to_4(const struct index *ix, const struct retention_spec *s,
             struct proto_str id, size_t index, struct pending *pd,
             struct proto_err *err)
{
    size_t lo = outputs_lower(ix, id), hi = lo;
    const struct plan_value *v;
    const struct plan_component *c;
    int idl = (int)id.len;

    while (hi < ix->nouts && identity_cmp(ix->outs[hi].v->value_id, id) == 0)
        hi++;
    if (hi - lo != 1) {
        proto_err_set(err, PROTO_EINVALID, NULL,
                      hi == lo ? "rule 1: no node has an output binding "
                                 "with value_id \"%.*s\""
                               : "rule 1: more than one output binding has "
                                 "value_id \"%.*s\"",
                      idl, id.ptr);
        req_path(err, s, index);
        return PROTO_EINVALID;
    }
    v = ix->outs[lo].v;
    if (v->usage != PLAN_USAGE_ACTIVATIONS) {
        proto_err_set(err, PROTO_EINVALID, NULL,
                      "rule 2: value \"%.*s\" has usage %s; only activations "
                      "can be retained",
                      idl, id.ptr, plan_usage_name(v->usage));
        req_path(err, s, index);
        return PROTO_EINVALID;
    }
    if (v->ncomponents != 1) {
        proto_err_set(err, PROTO_EINVALID, NULL,
                      "rule 3: value \"%.*s\" has %u storage components; "
                      "expected exactly one",
                      idl, id.ptr, v->ncomponents);
        req_path(err, s, index);
        return PROTO_EINVALID;
    }
    c = &v->components[0];
    if (__builtin_add_overflow(c->offset_bytes, v->tensor.min_storage_bytes,
                               &pd->end)) {
        proto_err_set(err, PROTO_EINVALID, NULL,
                      "rule 4: the retained range of \"%.*s\" (offset %llu "
                      "plus %llu bytes) exceeds 2^64-1",
                      idl, id.ptr, (unsigned long long)c->offset_bytes,
                      (unsigned long long)v->tensor.min_storage_bytes);
        req_path(err, s, index);
        return PROTO_EINVALID;
    }
    pd->o = &ix->outs[lo];
    pd->index = index;
    pd->start = c->offset_bytes;
    /* An output has write or read_write access, so it is a writer. */
    pd->self = writers_lower(ix, c->resource_id, c->offset_bytes, (uintptr_t)v,
                             (uintptr_t)c);
    return 0;
}

static int
rule5_error(const struct plan *p, const struct retention_spec *s,
            const struct pending *pd, struct proto_err *err)
{
    const struct plan_value *v = pd->o->v;
    const struct plan_node *pn = &p->nodes[pd->o->node];
    const struct plan_node *wn = &p->nodes[pd->hit->node];
    struct proto_str r = v->components[0].resource_id;

    proto_err_set(err, PROTO_EINVALID, NULL,
                  "rule 5: value \"%.*s\" of node \"%.*s\" is overwritten "
                  "by \"%.*s\" of node \"%.*s\" on resource \"%.*s\"",
                  (int)v->value_id.len, v->value_id.ptr, (int)pn->id.len,
                  pn->id.ptr, (int)pd->hit->v->value_id.len,
                  pd->hit->v->value_id.ptr, (int)wn->id.len, wn->id.ptr,
                  (int)r.len, r.ptr);
    req_path(err, s, pd->index);
    return PROTO_EINVALID;
}

static int
mismatch(struct proto_err *err, size_t i, const char *fieldname,
         const char *what)
{
    proto_err_set(err, PROTO_EMISMATCH, fieldname,
                  "the claimed %s differs from the daemon's resolution", what);
    proto_err_prefix_index(err, i);
    proto_err_prefix_field(err, "retained");
    return PROTO_EMISMATCH;
}

/* Compares a claimed resolution with ours, field by field. */
static int
compare(const struct retained_value *ours, size_t n,
        const struct retention_spec *s, struct proto_err *err)
{
    size_t i;

    if (s->nclaimed != n)
        return proto_err_set(err, PROTO_EMISMATCH, "retained",
                             "%zu retained values claimed, the resolution "
                             "has %zu",
                             s->nclaimed, n);
    for (i = 0; i < n; i++) {
        const struct retained_value *a = &ours[i], *b = &s->claimed[i];

        if (identity_cmp(a->value_id, b->value_id) != 0)
            return mismatch(err, i, "value_id", "value_id");
        if (identity_cmp(a->producer_node_id, b->producer_node_id) != 0)
            return mismatch(err, i, "producer_node_id", "producer node");
        if (a->output_ordinal != b->output_ordinal)
            return mismatch(err, i, "output_ordinal", "output ordinal");
        if (identity_cmp(a->resource_id, b->resource_id) != 0)
            return mismatch(err, i, "resource_id", "resource");
        if (a->logical_offset_bytes != b->logical_offset_bytes)
            return mismatch(err, i, "logical_offset_bytes", "offset");
        if (!tensor_equal(&a->tensor, &b->tensor))
            return mismatch(err, i, "tensor", "tensor");
    }
    return 0;
}

/* Rejects a determinism_outputs plan with no outputs or a repeated one. */
static int
determinism_check(const struct plan *p, const struct index *ix,
                  struct proto_err *err)
{
    size_t i;

    if (ix->nouts == 0)
        return proto_err_set(err, PROTO_EINVALID, "determinism_outputs",
                             "the plan has no outputs to retain");
    for (i = 1; i < ix->nouts; i++) {
        const struct output *a = &ix->outs[i - 1], *b = &ix->outs[i];

        if (identity_cmp(a->v->value_id, b->v->value_id) != 0)
            continue;
        return proto_err_set(
            err, PROTO_EINVALID, "determinism_outputs",
            "output \"%.*s\" is produced by node \"%.*s\" "
            "and again by node \"%.*s\"",
            (int)b->v->value_id.len, b->v->value_id.ptr,
            (int)p->nodes[a->node].id.len, p->nodes[a->node].id.ptr,
            (int)p->nodes[b->node].id.len, p->nodes[b->node].id.ptr);
    }
    return 0;
}

int
retention_resolve(const struct plan *p, const struct retention_spec *s,
                  struct retained_value **out, size_t *n, struct proto_err *err)
{
    struct retained_value *res = NULL;
    struct pending *pd = NULL;
    struct index ix;
    size_t count, i, upto;
    int rc, first_rc = 0;

    *out = NULL;
    *n = 0;
    if ((rc = index_build(p, &ix, err)) != 0)
        return rc;
    if (s->determinism_outputs && (rc = determinism_check(p, &ix, err)) != 0)
        goto done;
    count = s->determinism_outputs ? ix.nouts : s->nrequests;
    pd = calloc(count ? count : 1, sizeof(*pd));
    res = calloc(count ? count : 1, sizeof(*res));
    if (pd == NULL || res == NULL) {
        rc = proto_err_set(err, PROTO_ENOMEM, NULL,
                           "no memory for %zu retained values", count);
        goto done;
    }
    /* Rules 1-4 in byte order of value_id (both lists are sorted) up to
     * the first failure; err keeps that failure while rule 5 runs over the
     * values before it, any of which would be reported first. */
    for (upto = 0; upto < count; upto++) {
        if (s->determinism_outputs)
            first_rc = rules_1_to_4(&ix, s, ix.outs[upto].v->value_id, upto,
                                    &pd[upto], err);
        else
            first_rc = rules_1_to_4(&ix, s, s->requests[upto].value_id,
                                    s->requests[upto].index, &pd[upto], err);
        if (first_rc != 0)
            break;
    }
    if ((rc = rule5_sweep(&ix, pd, upto, err)) != 0)
        goto done;
    for (i = 0; i < upto; i++) {
        if (pd[i].hit != NULL) {
            rc = rule5_error(p, s, &pd[i], err);
            goto done;
        }
    }
    if ((rc = first_rc) != 0)
        goto done;
    for (i = 0; i < count; i++) {
        const struct plan_value *v = pd[i].o->v;

        res[i].value_id = v->value_id;
        res[i].producer_node_id = p->nodes[pd[i].o->node].id;
        res[i].output_ordinal = v->ordinal;
        res[i].resource_id = v->components[0].resource_id;
        res[i].logical_offset_bytes = pd[i].start;
        res[i].tensor = v->tensor;
    }
    if (s->has_claimed && (rc = compare(res, count, s, err)) != 0)
        goto done;
    *out = res;
    *n = count;
    res = NULL;
done:
    free(res);
    free(pd);
    index_free(&ix);
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

int
retention_value_encode(const struct retained_value *v, msgpack_packer *pk)
{
    if (msgpack_pack_map(pk, 6) || pack_cstr(pk, "value_id") ||
        pack_str(pk, v->value_id.ptr, v->value_id.len) ||
        pack_cstr(pk, "producer_node_id") ||
        pack_str(pk, v->producer_node_id.ptr, v->producer_node_id.len) ||
        pack_cstr(pk, "output_ordinal") ||
        msgpack_pack_uint32(pk, v->output_ordinal) ||
        pack_cstr(pk, "resource_id") ||
        pack_str(pk, v->resource_id.ptr, v->resource_id.len) ||
        pack_cstr(pk, "logical_offset_bytes") ||
        msgpack_pack_uint64(pk, v->logical_offset_bytes) ||
        pack_cstr(pk, "tensor"))
        return -1;
    return tensor_encode(&v->tensor, pk);
}

const struct retained_value *
retention_find(const struct retained_value *v, size_t n,
               struct proto_str value_id)
{
    size_t lo = 0, hi = n, mid;
    int c;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        c = identity_cmp(v[mid].value_id, value_id);
        if (c == 0)
            return &v[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int
retention_readback_decode(const msgpack_object *o, struct readback *rb,
                          struct proto_err *err)
{
    const msgpack_object *v, *ol;
    uint64_t u;
    int rc, et = 0;

    memset(rb, 0, sizeof(*rb));
    if ((rc = expect(o, MSGPACK_OBJECT_MAP, "a readback body map", err)))
        return rc;
    if ((rc = plan_key(o, &rb->prepared_plan_id, &rb->graph_hash, err)) != 0)
        return rc;
    if ((rc = mpobj_field(o, "value_id", 1, &v, err)) != 0 ||
        (rc = at(identity_decode(v, &rb->value_id, err), err, "value_id")) != 0)
        return rc;
    if ((rc = mpobj_field(o, "participant_index", 1, &v, err)) != 0 ||
        (rc = at(mpobj_uint(v, UINT32_MAX, &u, err), err,
                 "participant_index")) != 0)
        return rc;
    rb->participant_index = (uint32_t)u;
    if ((rc = mpobj_field(o, "output_layout", 1, &ol, err)) != 0)
        return rc;
    if ((rc = at(expect(ol, MSGPACK_OBJECT_MAP, "output_layout as a map", err),
                 err, "output_layout")) != 0)
        return rc;
    if ((rc = mpobj_field(ol, "element_type", 1, &v, err)) != 0 ||
        (rc = at(tensor_etype_decode(v, &et, err), err, "element_type")) != 0)
        return at(rc, err, "output_layout");
    rb->element_type = (uint8_t)et;
    if ((rc = mpobj_field(ol, "element_count", 1, &v, err)) != 0 ||
        (rc = at(mpobj_uint(v, UINT64_MAX, &rb->element_count, err), err,
                 "element_count")) != 0)
        return at(rc, err, "output_layout");
    if (rb->element_count == 0)
        return proto_err_set(err, PROTO_EINVALID, "output_layout.element_count",
                             "expected element_count greater than 0");
    if (__builtin_mul_overflow(rb->element_count,
                               (uint64_t)tensor_etype_size(et),
                               &rb->byte_length))
        return proto_err_set(err, PROTO_EINVALID, "output_layout.element_count",
                             "element_count %llu of %s is more than 2^64-1 "
                             "bytes",
                             (unsigned long long)rb->element_count,
                             tensor_etype_name(et));
    return 0;
}

int
retention_readback_check(const struct readback *rb,
                         const struct retained_value *rv,
                         struct readback_request *out, struct proto_err *err)
{
    uint64_t end;

    memset(out, 0, sizeof(*out));
    if (rv == NULL || identity_cmp(rv->value_id, rb->value_id) != 0)
        return proto_err_set(err, PROTO_ENOT_RETAINED, "value_id",
                             "value \"%.*s\" is not retained for this plan",
                             (int)rb->value_id.len, rb->value_id.ptr);
    if (rv->tensor.layout != TENSOR_LAYOUT_CONTIGUOUS)
        return proto_err_set(err, PROTO_EINVALID, "value_id",
                             "the retained tensor has a %s layout; readback "
                             "needs a contiguous one",
                             tensor_layout_name(rv->tensor.layout));
    if (rb->element_type != rv->tensor.element_type)
        return proto_err_set(err, PROTO_EINVALID, "output_layout.element_type",
                             "expected the retained tensor's element type "
                             "%s, got %s",
                             tensor_etype_name(rv->tensor.element_type),
                             tensor_etype_name(rb->element_type));
    if (rb->byte_length > rv->tensor.min_storage_bytes)
        return proto_err_set(err, PROTO_EINVALID, "output_layout.element_count",
                             "%llu bytes requested, the retained tensor "
                             "holds %llu",
                             (unsigned long long)rb->byte_length,
                             (unsigned long long)rv->tensor.min_storage_bytes);
    if (__builtin_add_overflow(rv->logical_offset_bytes, rb->byte_length, &end))
        return proto_err_set(err, PROTO_EINVALID, "output_layout.element_count",
                             "logical_offset_bytes %llu plus %llu bytes "
                             "exceeds 2^64-1",
                             (unsigned long long)rv->logical_offset_bytes,
                             (unsigned long long)rb->byte_length);
    out->node_id = rv->producer_node_id;
    out->participant_index = rb->participant_index;
    out->resource_id = rv->resource_id;
    out->logical_offset_bytes = rv->logical_offset_bytes;
    out->element_type = rb->element_type;
    out->element_count = rb->element_count;
    return 0;
}

int
retention_readback_encode(const struct readback_request *r, msgpack_packer *pk)
{
    return msgpack_pack_map(pk, 5) || pack_cstr(pk, "node_id") ||
                   pack_str(pk, r->node_id.ptr, r->node_id.len) ||
                   pack_cstr(pk, "participant_index") ||
                   msgpack_pack_uint32(pk, r->participant_index) ||
                   pack_cstr(pk, "resource_id") ||
                   pack_str(pk, r->resource_id.ptr, r->resource_id.len) ||
                   pack_cstr(pk, "logical_offset_bytes") ||
                   msgpack_pack_uint64(pk, r->logical_offset_bytes) ||
                   pack_cstr(pk, "output_layout") || msgpack_pack_map(pk, 2) ||
                   pack_cstr(pk, "element_type") ||
                   pack_cstr(pk, tensor_etype_name(r->element_type)) ||
                   pack_cstr(pk, "element_count") ||
                   msgpack_pack_uint64(pk, r->element_count)
               ? -1
               : 0;
}
