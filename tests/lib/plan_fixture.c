/*
 * plan_fixture.c: the fixture plan and the path-editing helpers of
 * plan_fixture.h. Test code only; single-threaded (each Check test runs in
 * its own forked process).
 */
#include "plan_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

static msgpack_zone *zone;

static msgpack_zone *
z(void)
{
    if (zone == NULL && (zone = msgpack_zone_new(8192)) == NULL)
        abort();
    return zone;
}

static void *
zalloc(size_t n)
{
    void *p = msgpack_zone_malloc(z(), n ? n : 1);

    if (p == NULL)
        abort();
    return p;
}

void
fx_done(void)
{
    if (zone != NULL)
        msgpack_zone_free(zone);
    zone = NULL;
}

static void
s(msgpack_packer *pk, const char *str)
{
    msgpack_pack_str(pk, strlen(str));
    msgpack_pack_str_body(pk, str, strlen(str));
}

static void
u64s(msgpack_packer *pk, int n, const uint64_t *v)
{
    int i;

    msgpack_pack_array(pk, (size_t)n);
    for (i = 0; i < n; i++)
        msgpack_pack_uint64(pk, v[i]);
}

/* {"dimensions": dims, "element_type": et, "layout": "contiguous"} */
static void
contiguous(msgpack_packer *pk, int rank, const uint64_t *dims, const char *et)
{
    msgpack_pack_map(pk, 3);
    s(pk, "dimensions");
    u64s(pk, rank, dims);
    s(pk, "element_type");
    s(pk, et);
    s(pk, "layout");
    s(pk, "contiguous");
}

/* One storage component; cid NULL packs component_id as nil. */
static void
component(msgpack_packer *pk, const char *cid, const char *res, uint64_t off,
          uint64_t len, const char *et)
{
    msgpack_pack_map(pk, 5);
    s(pk, "component_id");
    if (cid != NULL)
        s(pk, cid);
    else
        msgpack_pack_nil(pk);
    s(pk, "resource_id");
    s(pk, res);
    s(pk, "offset_bytes");
    msgpack_pack_uint64(pk, off);
    s(pk, "length_bytes");
    msgpack_pack_uint64(pk, len);
    s(pk, "element_type");
    s(pk, et);
}

/* The binding fields before "tensor"; the caller packs the tensor next. */
static void
value_head(msgpack_packer *pk, const char *id, const char *role,
           uint32_t ordinal)
{
    msgpack_pack_map(pk, 9);
    s(pk, "value_id");
    s(pk, id);
    s(pk, "role");
    s(pk, role);
    s(pk, "ordinal");
    msgpack_pack_uint32(pk, ordinal);
    s(pk, "tensor");
}

/* The fields after "tensor" for a non-weight value with one component. */
static void
value_tail(msgpack_packer *pk, const char *access, const char *usage,
           const char *res, uint64_t off, uint64_t len, const char *et)
{
    s(pk, "access");
    s(pk, access);
    s(pk, "alias");
    s(pk, "no_alias");
    s(pk, "usage");
    s(pk, usage);
    s(pk, "weight");
    msgpack_pack_nil(pk);
    s(pk, "storage");
    msgpack_pack_map(pk, 1);
    s(pk, "components");
    msgpack_pack_array(pk, 1);
    component(pk, NULL, res, off, len, et);
}

static void
node_embed(msgpack_packer *pk)
{
    static const uint64_t d8[] = { 8 }, d16x4[] = { 16, 4 }, d8x4[] = { 8, 4 };

    msgpack_pack_map(pk, 3);
    s(pk, "id");
    s(pk, "embed");
    /* An unknown key of PlanNode: the daemon reads id and values only. */
    s(pk, "kernel");
    s(pk, "gather");
    s(pk, "values");
    msgpack_pack_array(pk, 3);

    value_head(pk, "tokens", "input", 0);
    contiguous(pk, 1, d8, "u32");
    value_tail(pk, "read", "binding", "io/in", 0, 32, "u32");

    value_head(pk, "emb.weight", "input", 1);
    contiguous(pk, 2, d16x4, "f16");
    s(pk, "access");
    s(pk, "read");
    s(pk, "alias");
    s(pk, "no_alias");
    s(pk, "usage");
    s(pk, "weights");
    s(pk, "weight");
    msgpack_pack_map(pk, 2);
    s(pk, "name");
    s(pk, "embedding");
    s(pk, "quantized");
    msgpack_pack_false(pk);
    s(pk, "storage");
    msgpack_pack_map(pk, 1);
    s(pk, "components");
    msgpack_pack_array(pk, 2);
    component(pk, "w0", "weights/w", 0, 64, "f16");
    component(pk, "w1", "weights/w", 64, 64, "f16");

    value_head(pk, "hidden0", "output", 0);
    contiguous(pk, 2, d8x4, "f32");
    value_tail(pk, "write", "activations", "pool/a", 0, 128, "f32");
}

static void
node_block(msgpack_packer *pk)
{
    static const uint64_t d8x4[] = { 8, 4 }, strides[] = { 16, 4 };
    static const uint64_t d6x4[] = { 6, 4 }, blk[] = { 4, 4 },
                          phys[] = { 4, 8 };
    static const uint64_t d4[] = { 4 }, blk2[] = { 2 };

    msgpack_pack_map(pk, 2);
    s(pk, "id");
    s(pk, "block");
    s(pk, "values");
    msgpack_pack_array(pk, 4);

    value_head(pk, "hidden0", "input", 0);
    contiguous(pk, 2, d8x4, "f32");
    value_tail(pk, "read", "activations", "pool/a", 0, 128, "f32");

    /* Strided: 4 + 7 x 16 + 3 x 4 = 128 bytes. */
    value_head(pk, "hidden1", "output", 0);
    msgpack_pack_map(pk, 3);
    s(pk, "dimensions");
    u64s(pk, 2, d8x4);
    s(pk, "element_type");
    s(pk, "f32");
    s(pk, "layout");
    msgpack_pack_map(pk, 1);
    s(pk, "strided");
    msgpack_pack_map(pk, 1);
    s(pk, "byte_strides");
    u64s(pk, 2, strides);
    s(pk, "access");
    s(pk, "write");
    s(pk, "alias");
    msgpack_pack_map(pk, 1);
    s(pk, "may_alias");
    msgpack_pack_map(pk, 1);
    s(pk, "tensor_index");
    msgpack_pack_uint32(pk, 0);
    s(pk, "usage");
    s(pk, "activations");
    s(pk, "weight");
    msgpack_pack_nil(pk);
    s(pk, "storage");
    msgpack_pack_map(pk, 1);
    s(pk, "components");
    msgpack_pack_array(pk, 1);
    component(pk, NULL, "pool/b", 0, 128, "f32");

    /* Blocked with zero_fill: axis 1 (4, block 4) then axis 0 (6 rounded
     * up to 8): 2 x 4 x 8 = 64 bytes. */
    value_head(pk, "kv", "output", 1);
    msgpack_pack_map(pk, 3);
    s(pk, "dimensions");
    u64s(pk, 2, d6x4);
    s(pk, "element_type");
    s(pk, "f16");
    s(pk, "layout");
    msgpack_pack_map(pk, 1);
    s(pk, "blocked");
    msgpack_pack_map(pk, 3);
    s(pk, "block");
    u64s(pk, 2, blk);
    s(pk, "axis_order");
    msgpack_pack_array(pk, 2);
    msgpack_pack_uint32(pk, 1);
    msgpack_pack_uint32(pk, 0);
    s(pk, "padding");
    msgpack_pack_map(pk, 1);
    s(pk, "zero_fill");
    msgpack_pack_map(pk, 1);
    s(pk, "physical_dimensions");
    u64s(pk, 2, phys);
    value_tail(pk, "read_write", "state", "pool/kv", 0, 64, "f16");

    /* Blocked with exact padding: 4 x 4 = 16 bytes. */
    value_head(pk, "scratch0", "output", 2);
    msgpack_pack_map(pk, 3);
    s(pk, "dimensions");
    u64s(pk, 1, d4);
    s(pk, "element_type");
    s(pk, "f32");
    s(pk, "layout");
    msgpack_pack_map(pk, 1);
    s(pk, "blocked");
    msgpack_pack_map(pk, 3);
    s(pk, "block");
    u64s(pk, 1, blk2);
    s(pk, "axis_order");
    msgpack_pack_array(pk, 1);
    msgpack_pack_uint32(pk, 0);
    s(pk, "padding");
    s(pk, "exact");
    value_tail(pk, "write", "scratch", "pool/a", 256, 16, "f32");
}

static void
node_head(msgpack_packer *pk)
{
    static const uint64_t d8x4[] = { 8, 4 }, strides[] = { 16, 4 };
    static const uint64_t d8[] = { 8 };

    msgpack_pack_map(pk, 2);
    s(pk, "id");
    s(pk, "head");
    s(pk, "values");
    msgpack_pack_array(pk, 3);

    value_head(pk, "hidden1", "input", 0);
    msgpack_pack_map(pk, 3);
    s(pk, "dimensions");
    u64s(pk, 2, d8x4);
    s(pk, "element_type");
    s(pk, "f32");
    s(pk, "layout");
    msgpack_pack_map(pk, 1);
    s(pk, "strided");
    msgpack_pack_map(pk, 1);
    s(pk, "byte_strides");
    u64s(pk, 2, strides);
    value_tail(pk, "read", "activations", "pool/b", 0, 128, "f32");

    value_head(pk, "logits", "output", 0);
    contiguous(pk, 1, d8, "f32");
    value_tail(pk, "write", "activations", "pool/a", 128, 32, "f32");

    value_head(pk, "tmp", "output", 1);
    contiguous(pk, 1, d8, "u8");
    value_tail(pk, "write", "scratch", "pool/b", 128, 8, "u8");
}

void
fx_build(msgpack_sbuffer *sb)
{
    msgpack_packer pk;

    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    s(&pk, "prepared_plan_id");
    s(&pk, "plan:fixture/1");
    s(&pk, "graph_hash");
    s(&pk, "sha256:0f1e2d3c");
    s(&pk, "nodes");
    msgpack_pack_array(&pk, 3);
    node_embed(&pk);
    node_block(&pk);
    node_head(&pk);
}

msgpack_object *
fx_unpack(const char *buf, size_t len)
{
    msgpack_object *o = zalloc(sizeof(*o));
    char *copy = zalloc(len);
    size_t off = 0;

    /* Strings of the unpacked object point into its buffer: keep a copy
     * in the zone so the object outlives the caller's bytes. */
    memcpy(copy, buf, len);
    if (msgpack_unpack(copy, len, &off, z(), o) != MSGPACK_UNPACK_SUCCESS ||
        off != len)
        return NULL;
    return o;
}

msgpack_object *
fx_fixture(void)
{
    msgpack_sbuffer sb;
    msgpack_object *o;

    msgpack_sbuffer_init(&sb);
    fx_build(&sb);
    o = fx_unpack(sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    return o;
}

static void
json_to_mp(struct json_object *j, msgpack_packer *pk)
{
    switch (json_object_get_type(j)) {
    case json_type_null:
        msgpack_pack_nil(pk);
        break;
    case json_type_boolean:
        if (json_object_get_boolean(j))
            msgpack_pack_true(pk);
        else
            msgpack_pack_false(pk);
        break;
    case json_type_int:
        if (json_object_get_int64(j) < 0)
            msgpack_pack_int64(pk, json_object_get_int64(j));
        else
            msgpack_pack_uint64(pk, json_object_get_uint64(j));
        break;
    case json_type_double:
        msgpack_pack_double(pk, json_object_get_double(j));
        break;
    case json_type_string:
        msgpack_pack_str(pk, (size_t)json_object_get_string_len(j));
        msgpack_pack_str_body(pk, json_object_get_string(j),
                              (size_t)json_object_get_string_len(j));
        break;
    case json_type_array: {
        size_t n = json_object_array_length(j), i;

        msgpack_pack_array(pk, n);
        for (i = 0; i < n; i++)
            json_to_mp(json_object_array_get_idx(j, i), pk);
        break;
    }
    case json_type_object:
        msgpack_pack_map(pk, (size_t)json_object_object_length(j));
        json_object_object_foreach(j, key, val)
        {
            s(pk, key);
            json_to_mp(val, pk);
        }
        break;
    }
}

msgpack_object *
fx_json(const char *json)
{
    struct json_object *j = json_tokener_parse(json);
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_object *o;

    if (j == NULL && strcmp(json, "null") != 0) {
        fprintf(stderr, "fx_json: bad JSON: %s\n", json);
        abort();
    }
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    json_to_mp(j, &pk);
    json_object_put(j);
    o = fx_unpack(sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    return o;
}

/*
 * Walks one step of path from *p: a key up to '.', '[' or the end, or an
 * index in brackets. Returns the child, and for keys the map entry in *kv.
 */
static msgpack_object *
step(msgpack_object *o, const char **p, msgpack_object_kv **kv)
{
    const char *q = *p;
    size_t n;
    uint32_t i;

    *kv = NULL;
    if (*q == '.')
        q++;
    if (*q == '[') {
        unsigned long idx = strtoul(q + 1, NULL, 10);

        *p = strchr(q, ']') + 1;
        if (o->type != MSGPACK_OBJECT_ARRAY || idx >= o->via.array.size)
            return NULL;
        return &o->via.array.ptr[idx];
    }
    n = strcspn(q, ".[");
    *p = q + n;
    if (o->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (i = 0; i < o->via.map.size; i++) {
        msgpack_object_kv *e = &o->via.map.ptr[i];

        if (e->key.type == MSGPACK_OBJECT_STR && e->key.via.str.size == n &&
            memcmp(e->key.via.str.ptr, q, n) == 0) {
            *kv = e;
            return &e->val;
        }
    }
    return NULL;
}

msgpack_object *
fx_at(msgpack_object *root, const char *path)
{
    msgpack_object_kv *kv;
    const char *p = path;
    msgpack_object *o = root;

    while (o != NULL && *p != '\0')
        o = step(o, &p, &kv);
    return o;
}

/* The parent map of the key at path and the entry itself. */
static msgpack_object *
parent_of(msgpack_object *root, const char *path, msgpack_object_kv **kv)
{
    const char *p = path;
    msgpack_object *o = root, *parent = NULL;

    *kv = NULL;
    while (o != NULL && *p != '\0') {
        parent = o;
        o = step(o, &p, kv);
    }
    if (o == NULL || *kv == NULL) {
        fprintf(stderr, "fx: no key at %s\n", path);
        abort();
    }
    return parent;
}

void
fx_set(msgpack_object *root, const char *path, const char *json)
{
    msgpack_object *o = fx_at(root, path);

    if (o == NULL) {
        fprintf(stderr, "fx_set: no object at %s\n", path);
        abort();
    }
    *o = *fx_json(json);
}

void
fx_del(msgpack_object *root, const char *path)
{
    msgpack_object_kv *kv;
    msgpack_object *m = parent_of(root, path, &kv);
    size_t i = (size_t)(kv - m->via.map.ptr);

    memmove(kv, kv + 1, (m->via.map.size - i - 1) * sizeof(*kv));
    m->via.map.size--;
}

void
fx_dup(msgpack_object *root, const char *path)
{
    msgpack_object_kv *kv, *grown;
    msgpack_object *m = parent_of(root, path, &kv);

    grown = zalloc((m->via.map.size + 1) * sizeof(*grown));
    memcpy(grown, m->via.map.ptr, m->via.map.size * sizeof(*grown));
    grown[m->via.map.size] = *kv;
    m->via.map.ptr = grown;
    m->via.map.size++;
}

const char *
fx_pack(const msgpack_object *o, size_t *len)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    char *copy;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_object(&pk, *o);
    copy = zalloc(sb.size);
    memcpy(copy, sb.data, sb.size);
    *len = sb.size;
    msgpack_sbuffer_destroy(&sb);
    return copy;
}

char *
fx_read_data(const char *rel, size_t *len)
{
    char path[1024];
    FILE *f;
    long n;
    char *buf;

    snprintf(path, sizeof(path), "%s/%s", TEST_DATA_DIR, rel);
    if ((f = fopen(path, "rb")) == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    buf = zalloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        return NULL;
    }
    fclose(f);
    buf[n] = '\0';
    *len = (size_t)n;
    return buf;
}

void
fx_add(msgpack_object *root, const char *path, const char *key,
       const char *json)
{
    msgpack_object *m = fx_at(root, path);
    msgpack_object_kv *grown;
    char *k;

    if (m == NULL || m->type != MSGPACK_OBJECT_MAP) {
        fprintf(stderr, "fx_add: no map at %s\n", path);
        abort();
    }
    grown = zalloc((m->via.map.size + 1) * sizeof(*grown));
    memcpy(grown, m->via.map.ptr, m->via.map.size * sizeof(*grown));
    k = zalloc(strlen(key));
    memcpy(k, key, strlen(key));
    grown[m->via.map.size].key.type = MSGPACK_OBJECT_STR;
    grown[m->via.map.size].key.via.str.ptr = k;
    grown[m->via.map.size].key.via.str.size = (uint32_t)strlen(key);
    grown[m->via.map.size].val = *fx_json(json);
    m->via.map.ptr = grown;
    m->via.map.size++;
}
