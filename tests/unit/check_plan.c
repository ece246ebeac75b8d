/*
 * check_plan.c: plan decoding and validation (PROTOCOL section 5): the
 * fixture plan in msgpack and JSON, the canonical encoding, and every
 * identity, tensor, storage and binding rule with its exact code and path.
 *
 * Rule tests are tables of edits applied to a fresh copy of the fixture
 * (plan_fixture.h); each row breaks one rule, or sits on a boundary that
 * must still pass.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <msgpack.h>

#include "plan.h"
#include "plan_json.h"
#include "plan_fixture.h"

#define U64_MAX_S "18446744073709551615"

/* One edit of the fixture: 's' sets path to json, 'd' deletes the key at
 * path, 'u' duplicates it, 'a' adds an unknown key holding json to the map
 * at path. */
struct edit {
    char op;
    const char *path;
    const char *json;
};

/* A table row: up to three edits, then the expected code and path. */
struct rule_case {
    struct edit edits[3];
    int code;
    const char *path;
};

static void
apply(msgpack_object *root, const struct edit *e, size_t n)
{
    size_t i;

    for (i = 0; i < n && e[i].op != 0; i++) {
        if (e[i].op == 's')
            fx_set(root, e[i].path, e[i].json);
        else if (e[i].op == 'a')
            fx_add(root, e[i].path, "future_field", e[i].json);
        else if (e[i].op == 'd')
            fx_del(root, e[i].path);
        else
            fx_dup(root, e[i].path);
    }
}

/* Decodes o and checks the outcome; returns the plan on success. */
static struct plan *
expect_decode(const msgpack_object *o, int code, const char *path)
{
    struct proto_err err;
    struct plan *p = (struct plan *)1;
    int rc;

    proto_err_clear(&err);
    rc = plan_decode(o, &p, &err);
    ck_assert_msg(rc == code, "expected code %d, got %d (%s: %s)", code, rc,
                  err.path, err.message);
    if (code == 0) {
        ck_assert_ptr_nonnull(p);
        return p;
    }
    ck_assert_ptr_null(p);
    ck_assert_int_eq(err.code, code);
    ck_assert_str_eq(err.path, path);
    ck_assert_msg(err.message[0] != '\0', "no message for %s", path);
    return NULL;
}

static void
run_case(const struct rule_case *c)
{
    msgpack_object *o = fx_fixture();

    apply(o, c->edits, 3);
    plan_free(expect_decode(o, c->code, c->path));
}

static const struct plan_value *
find_value(const struct plan *p, const char *node, const char *value)
{
    uint32_t i, j;

    for (i = 0; i < p->nnodes; i++) {
        if (p->nodes[i].id.len != strlen(node) ||
            memcmp(p->nodes[i].id.ptr, node, strlen(node)) != 0)
            continue;
        for (j = 0; j < p->nodes[i].nvalues; j++) {
            const struct plan_value *v = &p->nodes[i].values[j];

            if (v->value_id.len == strlen(value) &&
                memcmp(v->value_id.ptr, value, strlen(value)) == 0)
                return v;
        }
    }
    ck_abort_msg("no value %s in node %s", value, node);
    return NULL;
}

/* Canonical bytes of a plan, in zone memory. */
static const char *
canonical(const struct plan *p, size_t *len)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_object *o;
    const char *bytes;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    ck_assert_int_eq(plan_encode_canonical(p, &pk), 0);
    o = fx_unpack(sb.data, sb.size);
    ck_assert_ptr_nonnull(o);
    bytes = fx_pack(o, len);
    msgpack_sbuffer_destroy(&sb);
    return bytes;
}

static void
assert_str(struct proto_str s, const char *want)
{
    ck_assert_uint_eq(s.len, strlen(want));
    ck_assert(memcmp(s.ptr, want, s.len) == 0);
}

/* ---- the fixture ---- */

START_TEST(test_plan_decode_accepts_fixture)
{
    struct plan *p = expect_decode(fx_fixture(), 0, "");
    const struct plan_value *v;

    assert_str(p->prepared_plan_id, "plan:fixture/1");
    assert_str(p->graph_hash, "sha256:0f1e2d3c");
    ck_assert_uint_eq(p->nnodes, 3);
    ck_assert_uint_eq(p->nvalues, 10);
    ck_assert_uint_eq(p->nodes[1].nvalues, 4);

    v = find_value(p, "embed", "emb.weight");
    ck_assert_ptr_nonnull(v->weight);
    ck_assert_int_eq(v->usage, PLAN_USAGE_WEIGHTS);
    ck_assert_uint_eq(v->ncomponents, 2);
    assert_str(v->components[1].component_id, "w1");
    ck_assert_uint_eq(v->components[1].offset_bytes, 64);
    ck_assert_uint_eq(v->tensor.min_storage_bytes, 128);

    v = find_value(p, "block", "hidden1");
    ck_assert_int_eq(v->tensor.layout, TENSOR_LAYOUT_STRIDED);
    ck_assert_uint_eq(v->tensor.byte_strides[0], 16);
    ck_assert_uint_eq(v->tensor.min_storage_bytes, 128);
    ck_assert_int_eq(v->alias, PLAN_ALIAS_MAY);
    ck_assert_uint_eq(v->alias_tensor_index, 0);
    ck_assert_ptr_null(v->weight);

    v = find_value(p, "block", "kv");
    ck_assert_int_eq(v->tensor.layout, TENSOR_LAYOUT_BLOCKED);
    ck_assert_int_eq(v->tensor.padding, TENSOR_PADDING_ZERO_FILL);
    ck_assert_uint_eq(v->tensor.axis_order[0], 1);
    ck_assert_uint_eq(v->tensor.physical_dimensions[1], 8);
    ck_assert_uint_eq(v->tensor.min_storage_bytes, 64);
    ck_assert_int_eq(v->access, PLAN_ACCESS_READ_WRITE);

    v = find_value(p, "block", "scratch0");
    ck_assert_int_eq(v->tensor.padding, TENSOR_PADDING_EXACT);
    ck_assert_uint_eq(v->tensor.min_storage_bytes, 16);
    ck_assert_uint_eq(v->ordinal, 2);

    v = find_value(p, "head", "tmp");
    ck_assert_int_eq(v->components[0].element_type, TENSOR_ETYPE_U8);
    ck_assert_int_eq(v->components[0].has_component_id, 0);
    plan_free(p);
}
END_TEST

START_TEST(test_plan_fixture_file_matches_builder)
{
    msgpack_sbuffer sb;
    size_t len;
    char *file = fx_read_data("plans/fixture.msgpack", &len);

    ck_assert_ptr_nonnull(file);
    msgpack_sbuffer_init(&sb);
    fx_build(&sb);
    ck_assert_msg(len == sb.size && memcmp(file, sb.data, len) == 0,
                  "fixture.msgpack differs from fx_build(); if intended, "
                  "rerun plan_fixture_gen (tests/lib/CMakeLists.txt)");
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(test_plan_decode_json_matches_msgpack)
{
    struct json_object *j;
    struct plan *pj = NULL, *pm;
    struct proto_err err;
    const char *a, *b;
    size_t alen, blen, len;
    char *text = fx_read_data("plans/fixture.json", &len);

    ck_assert_ptr_nonnull(text);
    j = json_tokener_parse(text);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(plan_decode_json(j, &pj, &err), 0);
    /* The JSON plan owns its storage: the JSON may go first. */
    json_object_put(j);
    pm = expect_decode(fx_fixture(), 0, "");
    a = canonical(pj, &alen);
    b = canonical(pm, &blen);
    ck_assert_uint_eq(alen, blen);
    ck_assert(memcmp(a, b, alen) == 0);
    plan_free(pj);
    plan_free(pm);
}
END_TEST

START_TEST(test_plan_decode_json_rejects_with_path)
{
    struct json_object *j;
    struct plan *p = NULL;
    struct proto_err err;
    size_t len;
    char *text = fx_read_data("plans/fixture.json", &len);

    j = json_tokener_parse(text);
    ck_assert_ptr_nonnull(j);
    /* A negative offset only JSON can carry as a signed number. */
    json_object_object_add(
        json_object_array_get_idx(
            json_object_object_get(
                json_object_object_get(
                    json_object_array_get_idx(
                        json_object_object_get(
                            json_object_array_get_idx(
                                json_object_object_get(j, "nodes"), 2),
                            "values"),
                        1),
                    "storage"),
                "components"),
            0),
        "offset_bytes", json_object_new_int64(-4));
    ck_assert_int_eq(plan_decode_json(j, &p, &err), PROTO_EINVALID);
    ck_assert_ptr_null(p);
    ck_assert_str_eq(err.path,
                     "nodes[2].values[1].storage.components[0].offset_bytes");
    json_object_put(j);
}
END_TEST

START_TEST(test_plan_decode_json_reads_u64_exactly)
{
    struct json_object *j, *comp;
    struct plan *p = NULL;
    struct proto_err err;
    size_t len;
    char *text = fx_read_data("plans/fixture.json", &len);

    j = json_tokener_parse(text);
    ck_assert_ptr_nonnull(j);
    /* tmp (u8[8]) at 2^64-9: its end is exactly 2^64-1, above INT64_MAX. */
    comp = json_object_array_get_idx(
        json_object_object_get(
            json_object_object_get(
                json_object_array_get_idx(
                    json_object_object_get(
                        json_object_array_get_idx(
                            json_object_object_get(j, "nodes"), 2),
                        "values"),
                    2),
                "storage"),
            "components"),
        0);
    json_object_object_add(comp, "offset_bytes",
                           json_object_new_uint64(UINT64_MAX - 8));
    ck_assert_int_eq(plan_decode_json(j, &p, &err), 0);
    ck_assert_uint_eq(p->nodes[2].values[2].components[0].offset_bytes,
                      UINT64_MAX - 8);
    plan_free(p);
    json_object_object_add(comp, "offset_bytes",
                           json_object_new_uint64(UINT64_MAX - 7));
    ck_assert_int_eq(plan_decode_json(j, &p, &err), PROTO_EINVALID);
    ck_assert_str_eq(err.path,
                     "nodes[2].values[2].storage.components[0].offset_bytes");
    json_object_put(j);
}
END_TEST

START_TEST(test_plan_decode_json_refuses_deep_nesting)
{
    struct json_object *j, *deep, *inner;
    struct plan *p = (struct plan *)1;
    struct proto_err err;
    size_t len;
    int i;
    char *text = fx_read_data("plans/fixture.json", &len);

    j = json_tokener_parse(text);
    ck_assert_ptr_nonnull(j);
    /* An opaque weight nested far deeper than a frame may be. */
    deep = json_object_new_object();
    for (inner = deep, i = 0; i < 40; i++) {
        struct json_object *next = json_object_new_object();

        json_object_object_add(inner, "x", next);
        inner = next;
    }
    json_object_object_add(
        json_object_array_get_idx(
            json_object_object_get(json_object_array_get_idx(
                                       json_object_object_get(j, "nodes"), 0),
                                   "values"),
            1),
        "weight", deep);
    ck_assert_int_eq(plan_decode_json(j, &p, &err), PROTO_EINVALID);
    ck_assert_ptr_null(p);
    json_object_put(j);
}
END_TEST

START_TEST(test_plan_free_accepts_null)
{
    struct proto_err err;
    struct plan *p = (struct plan *)1;

    plan_free(NULL);
    /* And a failed decode leaves nothing to free. */
    ck_assert_int_eq(plan_decode(fx_json("[]"), &p, &err), PROTO_EINVALID);
    ck_assert_ptr_null(p);
    ck_assert_str_eq(err.path, "");
}
END_TEST

/* ---- canonical encoding ---- */

START_TEST(test_plan_canonical_round_trips)
{
    struct plan *p = expect_decode(fx_fixture(), 0, ""), *q;
    const char *a, *b;
    size_t alen, blen;

    a = canonical(p, &alen);
    q = expect_decode(fx_unpack(a, alen), 0, "");
    b = canonical(q, &blen);
    ck_assert_uint_eq(alen, blen);
    ck_assert(memcmp(a, b, alen) == 0);
    ck_assert_uint_eq(q->nvalues, p->nvalues);
    plan_free(p);
    plan_free(q);
}
END_TEST

/* Reverses the entries of the map at path, keeping its content. */
static void
reverse_map(msgpack_object *root, const char *path)
{
    msgpack_object *m = fx_at(root, path);
    uint32_t i, n;

    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(m->type, MSGPACK_OBJECT_MAP);
    n = m->via.map.size;
    for (i = 0; i < n / 2; i++) {
        msgpack_object_kv t = m->via.map.ptr[i];

        m->via.map.ptr[i] = m->via.map.ptr[n - 1 - i];
        m->via.map.ptr[n - 1 - i] = t;
    }
}

START_TEST(test_plan_canonical_ignores_key_order_and_extras)
{
    msgpack_object *o = fx_fixture();
    struct plan *p = expect_decode(o, 0, ""), *q;
    const char *a, *b;
    size_t alen, blen;

    a = canonical(p, &alen);
    o = fx_fixture();
    reverse_map(o, "");
    reverse_map(o, "nodes[1].values[2]");
    reverse_map(o, "nodes[1].values[2].tensor");
    reverse_map(o, "nodes[0].values[0].storage.components[0]");
    fx_del(o, "nodes[0].values[0].weight");
    fx_del(o, "nodes[0].values[0].storage.components[0].component_id");
    fx_set(o, "nodes[0].kernel", "{\"anything\": [1, 2]}");
    q = expect_decode(o, 0, "");
    b = canonical(q, &blen);
    ck_assert_uint_eq(alen, blen);
    ck_assert(memcmp(a, b, alen) == 0);
    plan_free(p);
    plan_free(q);
}
END_TEST

static const struct edit canonical_changes[] = {
    { 's', "graph_hash", "\"sha256:ffff\"" },
    { 's', "nodes[0].id", "\"embed2\"" },
    { 's', "nodes[0].values[2].ordinal", "1" },
    { 's', "nodes[0].values[2].storage.components[0].offset_bytes", "4" },
    { 's', "nodes[0].values[2].storage.components[0].resource_id",
      "\"pool/c\"" },
    { 's', "nodes[0].values[2].storage.components[0].length_bytes", "132" },
    { 's', "nodes[0].values[2].access", "\"read_write\"" },
    { 's', "nodes[1].values[1].alias",
      "{\"may_alias\": {\"tensor_index\": 1}}" },
    { 's', "nodes[1].values[1].alias",
      "{\"must_alias\": {\"tensor_index\": 0}}" },
    { 's', "nodes[0].values[1].weight", "{\"name\": \"other\"}" },
    { 's', "nodes[1].values[2].usage", "\"activations\"" },
    { 's', "nodes[0].values[0].storage.components[0].component_id", "\"c0\"" },
    { 's', "nodes[1].values[1].tensor.layout.strided.byte_strides", "[12, 4]" },
};

START_TEST(test_plan_canonical_differs_on_content)
{
    struct plan *p = expect_decode(fx_fixture(), 0, ""), *q;
    msgpack_object *o = fx_fixture();
    const char *a, *b;
    size_t alen, blen;

    apply(o, &canonical_changes[_i], 1);
    q = expect_decode(o, 0, "");
    a = canonical(p, &alen);
    b = canonical(q, &blen);
    ck_assert_msg(alen != blen || memcmp(a, b, alen) != 0,
                  "edit of %s left the canonical form unchanged",
                  canonical_changes[_i].path);
    plan_free(p);
    plan_free(q);
}
END_TEST

/* ---- identities ---- */

struct id_case {
    const char *json; /* NULL: built in the test */
    int ok;
};

static const struct id_case id_cases[] = {
    { "\"\"", 0 },
    { NULL, 1 }, /* 160 bytes */
    { NULL, 0 }, /* 161 bytes */
    { "\"a\"", 1 },
    { "\"Az09._-:/\"", 1 },
    { "\"a b\"", 0 },
    { "\"a@b\"", 0 },
    { "\"a\\u00e9\"", 0 },
    { "\"a\\u0000b\"", 0 },
    { "\"a,b\"", 0 },
    { "\"a\\\\b\"", 0 },
    { "7", 0 },
    { "null", 0 },
};

static const char *const id_paths[] = {
    "prepared_plan_id",
    "nodes[1].id",
    "nodes[0].values[0].value_id",
    "nodes[0].values[0].storage.components[0].resource_id",
    "nodes[0].values[1].storage.components[0].component_id",
};

#define NIDS   (sizeof(id_cases) / sizeof(id_cases[0]))
#define NIDPOS (sizeof(id_paths) / sizeof(id_paths[0]))

START_TEST(test_plan_identity_rules)
{
    const struct id_case *c = &id_cases[_i / NIDPOS];
    const char *path = id_paths[_i % NIDPOS];
    msgpack_object *o = fx_fixture();
    char buf[200];

    if (c->json == NULL) {
        size_t n = (size_t)(_i / NIDPOS) == 1 ? 160 : 161;

        buf[0] = '"';
        memset(buf + 1, 'a', n);
        buf[n + 1] = '"';
        buf[n + 2] = '\0';
        fx_set(o, path, buf);
    } else {
        fx_set(o, path, c->json);
    }
    plan_free(expect_decode(o, c->ok ? 0 : PROTO_EINVALID, path));
}
END_TEST

START_TEST(test_plan_identity_valid_table)
{
    static const char ok[] = "abcdefghijklmnopqrstuvwxyz"
                             "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:/";
    char c[2] = { (char)_i, 0 };

    ck_assert_int_eq(identity_valid(c, 1), _i != 0 && strchr(ok, _i) != NULL);
}
END_TEST

START_TEST(test_plan_identity_accepts_bin)
{
    msgpack_object *o = fx_fixture(), *id = fx_at(o, "nodes[0].id");
    struct plan *p;

    /* rmp-serde may write a string as bin; the content decides. */
    id->type = MSGPACK_OBJECT_BIN;
    id->via.bin.ptr = "bin-node";
    id->via.bin.size = 8;
    p = expect_decode(o, 0, "");
    assert_str(p->nodes[0].id, "bin-node");
    plan_free(p);
}
END_TEST

/* ---- tensor rules ---- */

#define V(n, v) "nodes[" #n "].values[" #v "]"
#define HID0    V(0, 2)
#define HID1    V(1, 1)
#define KV      V(1, 2)
#define SCR     V(1, 3)
#define TOK     V(0, 0)
#define EMB     V(0, 1)
#define TMP     V(2, 2)
#define BLK     ".tensor.layout.blocked"
#define ZF      BLK ".padding.zero_fill.physical_dimensions"
#define COMP(i) ".storage.components[" #i "]"

static const struct rule_case tensor_cases[] = {
    { { { 's', HID0 ".tensor.dimensions", "[8, 0]" } },
      PROTO_EINVALID,
      HID0 ".tensor.dimensions[1]" },
    { { { 's', HID0 ".tensor.dimensions", "[0]" } },
      PROTO_EINVALID,
      HID0 ".tensor.dimensions[0]" },
    { { { 's', HID0 ".tensor.dimensions", "[-1]" } },
      PROTO_EINVALID,
      HID0 ".tensor.dimensions[0]" },
    { { { 's', HID0 ".tensor.dimensions", "\"8\"" } },
      PROTO_EINVALID,
      HID0 ".tensor.dimensions" },
    { { { 's', HID0 ".tensor.dimensions", "[]" } }, 0, "" }, /* rank 0 */
    { { { 's', HID0 ".tensor.element_type", "\"f64\"" } },
      PROTO_EINVALID,
      HID0 ".tensor.element_type" },
    { { { 's', HID0 ".tensor.layout", "\"diagonal\"" } },
      PROTO_EINVALID,
      HID0 ".tensor.layout" },
    { { { 's', HID0 ".tensor.layout", "{\"contiguous\": null}" } },
      PROTO_EINVALID,
      HID0 ".tensor.layout" },
    { { { 's', HID0 ".tensor.layout",
          "{\"strided\": {\"byte_strides\": [16, 4]}, \"x\": 1}" } },
      PROTO_EINVALID,
      HID0 ".tensor.layout" },
    { { { 's', HID0 ".tensor.layout", "\"strided\"" } },
      PROTO_EINVALID,
      HID0 ".tensor.layout" },
    { { { 's', HID1 ".tensor.layout.strided.byte_strides", "[16]" } },
      PROTO_EINVALID,
      HID1 ".tensor.layout.strided.byte_strides" },
    { { { 's', HID1 ".tensor.layout.strided.byte_strides", "[16, 4, 4]" } },
      PROTO_EINVALID,
      HID1 ".tensor.layout.strided.byte_strides" },
    { { { 's', HID1 ".tensor.layout.strided.byte_strides", "[16, 0]" } },
      PROTO_EINVALID,
      HID1 ".tensor.layout.strided.byte_strides[1]" },
    { { { 'd', HID1 ".tensor.layout.strided.byte_strides", NULL } },
      PROTO_EINVALID,
      HID1 ".tensor.layout.strided.byte_strides" },
    { { { 's', KV BLK ".block", "[4, 0]" } },
      PROTO_EINVALID,
      KV BLK ".block[1]" },
    { { { 's', KV BLK ".block", "[4]" } }, PROTO_EINVALID, KV BLK ".block" },
    { { { 'd', KV BLK ".block", NULL } }, PROTO_EINVALID, KV BLK ".block" },
    { { { 's', KV BLK ".axis_order", "[1, 1]" } },
      PROTO_EINVALID,
      KV BLK ".axis_order[1]" },
    { { { 's', KV BLK ".axis_order", "[0, 2]" } },
      PROTO_EINVALID,
      KV BLK ".axis_order[1]" },
    { { { 's', KV BLK ".axis_order", "[1, 4294967296]" } },
      PROTO_EINVALID,
      KV BLK ".axis_order[1]" },
    { { { 's', KV BLK ".axis_order", "[0]" } },
      PROTO_EINVALID,
      KV BLK ".axis_order" },
    /* exact: every extent divisible by its block. */
    { { { 's', SCR ".tensor.dimensions", "[5]" } },
      PROTO_EINVALID,
      SCR BLK ".padding" },
    { { { 's', SCR ".tensor.dimensions", "[2]" } }, 0, "" },
    { { { 's', SCR BLK ".padding", "\"none\"" } },
      PROTO_EINVALID,
      SCR BLK ".padding" },
    { { { 's', SCR BLK ".padding", "{\"exact\": null}" } },
      PROTO_EINVALID,
      SCR BLK ".padding" },
    /* zero_fill: physical_dimensions[i] follows axis_order[i]. */
    { { { 's', KV ZF, "[4, 6]" } }, PROTO_EINVALID, KV ZF "[1]" },
    { { { 's', KV ZF, "[8, 4]" } }, PROTO_EINVALID, KV ZF "[0]" },
    { { { 's', KV ZF, "[4]" } }, PROTO_EINVALID, KV ZF },
    { { { 's', KV BLK ".padding", "{\"zero_fill\": {}}" } },
      PROTO_EINVALID,
      KV ZF },
    /* Nothing actually padded: 8 and 4 are multiples of their blocks. */
    { { { 's', KV ".tensor.dimensions", "[8, 4]" }, { 's', KV ZF, "[4, 8]" } },
      PROTO_EINVALID,
      KV ZF },
    /* With axis_order [0, 1] the same sizes are listed the other way. */
    { { { 's', KV BLK ".axis_order", "[0, 1]" }, { 's', KV ZF, "[8, 4]" } },
      0,
      "" },
    { { { 's', HID0 ".tensor", "\"x\"" } }, PROTO_EINVALID, HID0 ".tensor" },
    { { { 'u', HID0 ".tensor.dimensions", NULL } },
      PROTO_EINVALID,
      HID0 ".tensor.dimensions" },
};

START_TEST(test_plan_tensor_rules)
{
    run_case(&tensor_cases[_i]);
}
END_TEST

/* ---- minimum storage bytes ---- */

struct min_case {
    const char *json;
    const char *min; /* decimal, or NULL for an error */
    const char *path;
};

#define T(dims, et, layout)                                                    \
    "{\"dimensions\": " dims ", \"element_type\": \"" et                       \
    "\", \"layout\": " layout "}"
#define STRIDED(s) "{\"strided\": {\"byte_strides\": " s "}}"
#define BLOCKED(b, o, pad)                                                     \
    "{\"blocked\": {\"block\": " b ", \"axis_order\": " o                      \
    ", \"padding\": " pad "}}"
#define ZEROFILL(p) "{\"zero_fill\": {\"physical_dimensions\": " p "}}"

static const struct min_case min_cases[] = {
    { T("[]", "f32", "\"contiguous\""), "4", NULL },
    { T("[3, 5]", "bf16", "\"contiguous\""), "30", NULL },
    { T("[7]", "bool", "\"contiguous\""), "7", NULL },
    { T("[" U64_MAX_S "]", "u8", "\"contiguous\""), U64_MAX_S, NULL },
    { T("[9223372036854775807]", "f16", "\"contiguous\""),
      "18446744073709551614", NULL },
    { T("[9223372036854775808]", "f16", "\"contiguous\""), NULL, "dimensions" },
    { T("[4294967296, 4294967295]", "i8", "\"contiguous\""),
      "18446744069414584320", NULL },
    { T("[4294967296, 4294967296]", "u8", "\"contiguous\""), NULL,
      "dimensions" },
    { T("[3, 5]", "f32", STRIDED("[40, 8]")), "116", NULL },
    { T("[1]", "f32", STRIDED("[1000]")), "4", NULL },
    { T("[]", "i32", STRIDED("[]")), "4", NULL },
    { T("[2]", "u8", STRIDED("[18446744073709551614]")), U64_MAX_S, NULL },
    { T("[2]", "u8", STRIDED("[" U64_MAX_S "]")), NULL,
      "layout.strided.byte_strides" },
    { T("[3]", "u8", STRIDED("[9223372036854775808]")), NULL,
      "layout.strided.byte_strides" },
    { T("[2, 2]", "u8", STRIDED("[9223372036854775807, 9223372036854775807]")),
      "18446744073709551615", NULL },
    { T("[2, 2]", "u8", STRIDED("[9223372036854775808, 9223372036854775807]")),
      NULL, "layout.strided.byte_strides" },
    /* The size x product rule holds for strided layouts too. */
    { T("[4611686018427387904, 2]", "f32", STRIDED("[1, 1]")), NULL,
      "dimensions" },
    { T("[8, 4]", "f32", BLOCKED("[4, 2]", "[0, 1]", "\"exact\"")), "128",
      NULL },
    { T("[]", "f32", BLOCKED("[]", "[]", "\"exact\"")), "4", NULL },
    { T("[6, 4]", "f16", BLOCKED("[4, 4]", "[1, 0]", ZEROFILL("[4, 8]"))), "64",
      NULL },
    { T("[5, 3, 2]", "u32",
        BLOCKED("[2, 2, 2]", "[2, 0, 1]", ZEROFILL("[2, 6, 4]"))),
      "192", NULL },
    { T("[]", "f32", BLOCKED("[]", "[]", ZEROFILL("[]"))), NULL,
      "layout.blocked.padding.zero_fill.physical_dimensions" },
    /* The physical size overflows although the logical one fits. */
    { T("[3, 4611686018427387903]", "u8",
        BLOCKED("[2, 4611686018427387904]", "[0, 1]",
                ZEROFILL("[4, 4611686018427387904]"))),
      NULL, "layout.blocked.padding.zero_fill.physical_dimensions" },
    { T("[3, 4611686018427387903]", "u8",
        BLOCKED("[1, 4611686018427387904]", "[0, 1]",
                ZEROFILL("[3, 4611686018427387904]"))),
      "13835058055282163712", NULL },
    /* Rounding an extent up to its block passes 2^64-1. */
    { T("[9223372036854775809]", "u8",
        BLOCKED("[9223372036854775808]", "[0]", ZEROFILL("[0]"))),
      NULL, "layout.blocked.padding.zero_fill.physical_dimensions[0]" },
};

START_TEST(test_plan_tensor_min_bytes)
{
    const struct min_case *c = &min_cases[_i];
    const msgpack_object *o = fx_json(c->json);
    size_t nw = tensor_words(o);
    uint64_t *words = calloc(nw ? nw : 1, sizeof(*words));
    struct tensor t;
    struct proto_err err;
    char got[32];
    int rc;

    proto_err_clear(&err);
    rc = tensor_decode(o, &t, words, nw, &err);
    if (c->min != NULL) {
        ck_assert_msg(rc == 0, "%s: %s: %s", c->json, err.path, err.message);
        snprintf(got, sizeof(got), "%llu",
                 (unsigned long long)t.min_storage_bytes);
        ck_assert_str_eq(got, c->min);
    } else {
        ck_assert_int_eq(rc, PROTO_EINVALID);
        ck_assert_str_eq(err.path, c->path);
    }
    free(words);
}
END_TEST

START_TEST(test_plan_tensor_encode_round_trips)
{
    const struct min_case *c = &min_cases[_i];
    const msgpack_object *o = fx_json(c->json), *back;
    size_t nw = tensor_words(o), len;
    uint64_t *w1 = calloc(nw ? nw : 1, 8), *w2 = calloc(nw ? nw : 1, 8);
    struct tensor t, u;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    const char *a, *b;
    size_t alen;

    if (c->min == NULL) {
        free(w1);
        free(w2);
        return;
    }
    ck_assert_int_eq(tensor_decode(o, &t, w1, nw, NULL), 0);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    ck_assert_int_eq(tensor_encode(&t, &pk), 0);
    back = fx_unpack(sb.data, sb.size);
    ck_assert_int_eq(tensor_decode(back, &u, w2, nw, NULL), 0);
    ck_assert(tensor_equal(&t, &u));
    /* The serde form as received: the same bytes as the input. */
    a = fx_pack(o, &alen);
    b = fx_pack(back, &len);
    ck_assert_uint_eq(alen, len);
    ck_assert(memcmp(a, b, len) == 0);
    msgpack_sbuffer_destroy(&sb);
    free(w1);
    free(w2);
}
END_TEST

/* ---- storage rules ---- */

static const struct rule_case storage_cases[] = {
    { { { 's', TOK COMP(0) ".length_bytes", "0" } },
      PROTO_EINVALID,
      TOK COMP(0) ".length_bytes" },
    { { { 's', EMB COMP(1) ".length_bytes", "0" } },
      PROTO_EINVALID,
      EMB COMP(1) ".length_bytes" },
    /* offset + length at exactly 2^64-1 fits; one more byte does not. */
    { { { 's', TMP COMP(0) ".offset_bytes", "18446744073709551607" } }, 0, "" },
    { { { 's', TMP COMP(0) ".offset_bytes", "18446744073709551608" } },
      PROTO_EINVALID,
      TMP COMP(0) ".offset_bytes" },
    { { { 's', TMP COMP(0) ".offset_bytes", U64_MAX_S } },
      PROTO_EINVALID,
      TMP COMP(0) ".offset_bytes" },
    { { { 's', TMP COMP(0) ".offset_bytes", "18446744073709551616" } },
      PROTO_EINVALID,
      TMP COMP(0) ".offset_bytes" },
    { { { 's', HID0 COMP(0) ".offset_bytes", "2" } },
      PROTO_EINVALID,
      HID0 COMP(0) ".offset_bytes" },
    { { { 's', HID0 COMP(0) ".length_bytes", "130" } },
      PROTO_EINVALID,
      HID0 COMP(0) ".length_bytes" },
    { { { 's', EMB COMP(1) ".offset_bytes", "65" } },
      PROTO_EINVALID,
      EMB COMP(1) ".offset_bytes" },
    { { { 's', HID0 ".storage.components", "[]" } },
      PROTO_EINVALID,
      HID0 ".storage.components" },
    { { { 's', HID0 ".storage.components", "{}" } },
      PROTO_EINVALID,
      HID0 ".storage.components" },
    { { { 'd', HID0 ".storage", NULL } }, PROTO_EINVALID, HID0 ".storage" },
    { { { 'd', HID0 ".storage.components", NULL } },
      PROTO_EINVALID,
      HID0 ".storage.components" },
    { { { 's', EMB COMP(1) ".component_id", "null" } },
      PROTO_EINVALID,
      EMB COMP(1) ".component_id" },
    { { { 'd', EMB COMP(0) ".component_id", NULL } },
      PROTO_EINVALID,
      EMB COMP(0) ".component_id" },
    { { { 's', EMB COMP(1) ".component_id", "\"w0\"" } },
      PROTO_EINVALID,
      EMB COMP(1) ".component_id" },
    { { { 's', EMB COMP(0) ".component_id", "\"\"" } },
      PROTO_EINVALID,
      EMB COMP(0) ".component_id" },
    /* Overlaps on one resource, reported at the later component. */
    { { { 's', EMB COMP(1) ".offset_bytes", "62" } },
      PROTO_EINVALID,
      EMB COMP(1) },
    { { { 's', EMB COMP(0) ".offset_bytes", "126" } },
      PROTO_EINVALID,
      EMB COMP(1) },
    { { { 's', EMB COMP(0) ".offset_bytes", "128" } }, 0, "" }, /* touch */
    { { { 's', EMB COMP(1) ".offset_bytes", "0" },
        { 's', EMB COMP(1) ".resource_id", "\"weights/x\"" } },
      0,
      "" },
    /* A long first component overlaps a later one past a shorter one. */
    { { { 's', EMB ".storage.components",
          "[{\"component_id\": \"a\", \"resource_id\": \"r\", "
          "\"offset_bytes\": 0, \"length_bytes\": 100, \"element_type\": "
          "\"u8\"}, {\"component_id\": \"b\", \"resource_id\": \"r\", "
          "\"offset_bytes\": 10, \"length_bytes\": 2, \"element_type\": "
          "\"u8\"}, {\"component_id\": \"c\", \"resource_id\": \"r\", "
          "\"offset_bytes\": 99, \"length_bytes\": 1, \"element_type\": "
          "\"u8\"}]" } },
      PROTO_EINVALID,
      EMB COMP(1) },
    { { { 's', EMB ".storage.components",
          "[{\"component_id\": \"c\", \"resource_id\": \"r\", "
          "\"offset_bytes\": 99, \"length_bytes\": 1, \"element_type\": "
          "\"u8\"}, {\"component_id\": \"a\", \"resource_id\": \"r\", "
          "\"offset_bytes\": 0, \"length_bytes\": 99, \"element_type\": "
          "\"u8\"}, {\"component_id\": \"b\", \"resource_id\": \"r\", "
          "\"offset_bytes\": 100, \"length_bytes\": 1, \"element_type\": "
          "\"u8\"}]" } },
      0,
      "" },
    { { { 's', EMB COMP(1) ".element_type", "\"f64\"" } },
      PROTO_EINVALID,
      EMB COMP(1) ".element_type" },
    { { { 'd', EMB COMP(1) ".resource_id", NULL } },
      PROTO_EINVALID,
      EMB COMP(1) ".resource_id" },
    { { { 's', EMB COMP(1), "[]" } }, PROTO_EINVALID, EMB COMP(1) },
};

START_TEST(test_plan_storage_rules)
{
    run_case(&storage_cases[_i]);
}
END_TEST

/* ---- binding rules ---- */

static const struct rule_case binding_cases[] = {
    { { { 's', TOK ".access", "\"write\"" } }, PROTO_EINVALID, TOK ".access" },
    { { { 's', TOK ".access", "\"read_write\"" } }, 0, "" },
    { { { 's', TOK ".alias", "{\"may_alias\": {\"tensor_index\": 1}}" } },
      PROTO_EINVALID,
      TOK ".alias" },
    { { { 's', TOK ".alias", "{\"must_alias\": {\"tensor_index\": 1}}" } },
      PROTO_EINVALID,
      TOK ".alias" },
    { { { 's', HID0 ".access", "\"read\"" } }, PROTO_EINVALID, HID0 ".access" },
    { { { 's', HID0 ".access", "\"read_write\"" } }, 0, "" },
    { { { 's', HID0 ".alias", "{\"must_alias\": {\"tensor_index\": 7}}" } },
      0,
      "" },
    { { { 's', HID0 ".storage.components",
          "[{\"component_id\": \"a\", \"resource_id\": \"pool/a\", "
          "\"offset_bytes\": 0, \"length_bytes\": 128, \"element_type\": "
          "\"f32\"}, {\"component_id\": \"b\", \"resource_id\": \"pool/a\", "
          "\"offset_bytes\": 128, \"length_bytes\": 4, \"element_type\": "
          "\"f32\"}]" } },
      PROTO_EINVALID,
      HID0 ".storage.components" },
    { { { 's', HID0 COMP(0) ".element_type", "\"u32\"" } },
      PROTO_EINVALID,
      HID0 COMP(0) ".element_type" },
    { { { 's', HID0 COMP(0) ".element_type", "\"u32\"" },
        { 's', HID0 COMP(0) ".component_id", "\"c0\"" } },
      0,
      "" },
    { { { 's', HID0 COMP(0) ".length_bytes", "124" } },
      PROTO_EINVALID,
      HID0 COMP(0) ".length_bytes" },
    { { { 's', HID0 COMP(0) ".length_bytes", "132" } }, 0, "" },
    { { { 's', HID1 COMP(0) ".length_bytes", "124" } },
      PROTO_EINVALID,
      HID1 COMP(0) ".length_bytes" },
    { { { 's', KV COMP(0) ".length_bytes", "62" } },
      PROTO_EINVALID,
      KV COMP(0) ".length_bytes" },
    { { { 's', SCR COMP(0) ".length_bytes", "12" } },
      PROTO_EINVALID,
      SCR COMP(0) ".length_bytes" },
    /* A single weight component without component_id still needs the
     * tensor's element type; with an id, or with several, it need not. */
    { { { 's', EMB ".storage.components",
          "[{\"component_id\": null, \"resource_id\": \"weights/w\", "
          "\"offset_bytes\": 0, \"length_bytes\": 2, \"element_type\": "
          "\"u8\"}]" } },
      PROTO_EINVALID,
      EMB COMP(0) ".element_type" },
    { { { 's', EMB ".storage.components",
          "[{\"component_id\": \"q\", \"resource_id\": \"weights/w\", "
          "\"offset_bytes\": 0, \"length_bytes\": 2, \"element_type\": "
          "\"u8\"}]" } },
      0,
      "" },
    /* ... but the length rule is for non-weight values only. */
    { { { 's', EMB ".storage.components",
          "[{\"resource_id\": \"weights/w\", \"offset_bytes\": 0, "
          "\"length_bytes\": 2, \"element_type\": \"f16\"}]" } },
      0,
      "" },
    /* A weight value is exempt from the one-component rules. */
    { { { 's', EMB COMP(0) ".element_type", "\"u8\"" },
        { 's', EMB COMP(0) ".length_bytes", "2" } },
      0,
      "" },
    { { { 's', TOK ".weight", "{\"a\": 1}" } }, PROTO_EINVALID, TOK ".weight" },
    { { { 's', EMB ".weight", "null" } }, PROTO_EINVALID, EMB ".weight" },
    { { { 'd', EMB ".weight", NULL } }, PROTO_EINVALID, EMB ".weight" },
    { { { 's', EMB ".weight", "\"w\"" } }, PROTO_EINVALID, EMB ".weight" },
    { { { 's', EMB ".weight", "{}" } }, 0, "" },
    { { { 's', EMB ".usage", "\"activations\"" } },
      PROTO_EINVALID,
      EMB ".weight" },
    { { { 's', TOK ".role", "\"inout\"" } }, PROTO_EINVALID, TOK ".role" },
    { { { 's', TOK ".access", "\"rw\"" } }, PROTO_EINVALID, TOK ".access" },
    { { { 's', TOK ".usage", "\"temp\"" } }, PROTO_EINVALID, TOK ".usage" },
    { { { 's', TOK ".alias", "\"maybe\"" } }, PROTO_EINVALID, TOK ".alias" },
    { { { 's', TOK ".alias", "{\"no_alias\": {}}" } },
      PROTO_EINVALID,
      TOK ".alias" },
    { { { 's', HID1 ".alias", "{\"may_alias\": {}}" } },
      PROTO_EINVALID,
      HID1 ".alias.may_alias.tensor_index" },
    { { { 's', HID1 ".alias", "{\"may_alias\": 3}" } },
      PROTO_EINVALID,
      HID1 ".alias.may_alias" },
    { { { 's', HID1 ".alias",
          "{\"may_alias\": {\"tensor_index\": 4294967296}}" } },
      PROTO_EINVALID,
      HID1 ".alias.may_alias.tensor_index" },
    { { { 's', HID1 ".alias",
          "{\"may_alias\": {\"tensor_index\": 4294967295}}" } },
      0,
      "" },
};

START_TEST(test_plan_binding_rules)
{
    run_case(&binding_cases[_i]);
}
END_TEST

/* ---- structure and serde forms ---- */

static const struct rule_case structure_cases[] = {
    { { { 'd', "prepared_plan_id", NULL } },
      PROTO_EINVALID,
      "prepared_plan_id" },
    { { { 'd', "graph_hash", NULL } }, PROTO_EINVALID, "graph_hash" },
    { { { 'd', "nodes", NULL } }, PROTO_EINVALID, "nodes" },
    { { { 'u', "nodes", NULL } }, PROTO_EINVALID, "nodes" },
    { { { 'u', "prepared_plan_id", NULL } },
      PROTO_EINVALID,
      "prepared_plan_id" },
    { { { 's', "nodes", "{}" } }, PROTO_EINVALID, "nodes" },
    { { { 's', "nodes", "[]" } }, 0, "" },
    { { { 's', "nodes[1]", "3" } }, PROTO_EINVALID, "nodes[1]" },
    { { { 'd', "nodes[1].id", NULL } }, PROTO_EINVALID, "nodes[1].id" },
    { { { 'd', "nodes[1].values", NULL } }, PROTO_EINVALID, "nodes[1].values" },
    { { { 's', "nodes[1].values", "[]" } }, 0, "" },
    { { { 's', "nodes[1].values[3]", "[]" } },
      PROTO_EINVALID,
      "nodes[1].values[3]" },
    { { { 'd', HID0 ".value_id", NULL } }, PROTO_EINVALID, HID0 ".value_id" },
    { { { 'd', HID0 ".role", NULL } }, PROTO_EINVALID, HID0 ".role" },
    { { { 'd', HID0 ".ordinal", NULL } }, PROTO_EINVALID, HID0 ".ordinal" },
    { { { 'd', HID0 ".tensor", NULL } }, PROTO_EINVALID, HID0 ".tensor" },
    { { { 'd', HID0 ".access", NULL } }, PROTO_EINVALID, HID0 ".access" },
    { { { 'd', HID0 ".alias", NULL } }, PROTO_EINVALID, HID0 ".alias" },
    { { { 'd', HID0 ".usage", NULL } }, PROTO_EINVALID, HID0 ".usage" },
    { { { 'd', HID0 ".weight", NULL } }, 0, "" },
    { { { 'u', HID0 ".value_id", NULL } }, PROTO_EINVALID, HID0 ".value_id" },
    { { { 'u', HID0 COMP(0) ".offset_bytes", NULL } },
      PROTO_EINVALID,
      HID0 COMP(0) ".offset_bytes" },
    { { { 's', HID0 ".ordinal", "4294967295" } }, 0, "" },
    { { { 's', HID0 ".ordinal", "4294967296" } },
      PROTO_EINVALID,
      HID0 ".ordinal" },
    { { { 's', HID0 ".ordinal", "-1" } }, PROTO_EINVALID, HID0 ".ordinal" },
    { { { 's', HID0 ".ordinal", "1.0" } }, PROTO_EINVALID, HID0 ".ordinal" },
    { { { 's', HID0 ".role", "0" } }, PROTO_EINVALID, HID0 ".role" },
    { { { 's', "graph_hash", "\"\"" } }, 0, "" },
    { { { 's', "graph_hash", "123" } }, PROTO_EINVALID, "graph_hash" },
    { { { 'a', HID0, "[1, 2, 3]" } }, 0, "" },
    { { { 'a', HID0 ".tensor", "{}" } }, 0, "" },
    { { { 'a', HID0 COMP(0), "null" } }, 0, "" },
    { { { 'a', "", "\"x\"" } }, 0, "" },
    { { { 's', "nodes[0].values", "null" } },
      PROTO_EINVALID,
      "nodes[0].values" },
};

START_TEST(test_plan_structure)
{
    run_case(&structure_cases[_i]);
}
END_TEST

START_TEST(test_plan_graph_hash_length)
{
    msgpack_object *o = fx_fixture();
    char buf[300];

    buf[0] = '"';
    memset(buf + 1, 'h', 256 + (size_t)_i);
    buf[257 + _i] = '"';
    buf[258 + _i] = '\0';
    fx_set(o, "graph_hash", buf);
    plan_free(expect_decode(o, _i ? PROTO_EINVALID : 0, "graph_hash"));
}
END_TEST

START_TEST(test_plan_accepts_signed_integer_forms)
{
    msgpack_object *o = fx_fixture();
    msgpack_object *off = fx_at(o, TMP COMP(0) ".offset_bytes");
    struct plan *p;

    /* Producers other than rmp-serde may write an int64 form holding a
     * non-negative value. */
    off->type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
    off->via.i64 = 136;
    p = expect_decode(o, 0, "");
    ck_assert_uint_eq(find_value(p, "head", "tmp")->components[0].offset_bytes,
                      136);
    plan_free(p);
}
END_TEST

START_TEST(test_plan_enum_names_round_trip)
{
    int i;

    for (i = 0; i < TENSOR_ETYPE_COUNT; i++) {
        msgpack_object o;
        const char *name = tensor_etype_name(i);
        int got = -1;

        o.type = MSGPACK_OBJECT_STR;
        o.via.str.ptr = name;
        o.via.str.size = (uint32_t)strlen(name);
        ck_assert_int_eq(tensor_etype_decode(&o, &got, NULL), 0);
        ck_assert_int_eq(got, i);
    }
    ck_assert_uint_eq(tensor_etype_size(TENSOR_ETYPE_BF16), 2);
    ck_assert_uint_eq(tensor_etype_size(TENSOR_ETYPE_U32), 4);
    ck_assert_uint_eq(tensor_etype_size(TENSOR_ETYPE_COUNT), 0);
    ck_assert_ptr_null(plan_usage_name(PLAN_USAGE_COUNT));
    ck_assert_str_eq(plan_access_name(PLAN_ACCESS_READ_WRITE), "read_write");
    ck_assert_str_eq(plan_role_name(PLAN_ROLE_OUTPUT), "output");
    ck_assert_str_eq(tensor_layout_name(TENSOR_LAYOUT_BLOCKED), "blocked");
}
END_TEST

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static Suite *
plan_suite(void)
{
    Suite *s = suite_create("plan");
    TCase *tc;

    tc = tcase_create("fixture");
    tcase_add_test(tc, test_plan_decode_accepts_fixture);
    tcase_add_test(tc, test_plan_fixture_file_matches_builder);
    tcase_add_test(tc, test_plan_free_accepts_null);
    suite_add_tcase(s, tc);

    tc = tcase_create("json");
    tcase_add_test(tc, test_plan_decode_json_matches_msgpack);
    tcase_add_test(tc, test_plan_decode_json_rejects_with_path);
    tcase_add_test(tc, test_plan_decode_json_reads_u64_exactly);
    tcase_add_test(tc, test_plan_decode_json_refuses_deep_nesting);
    suite_add_tcase(s, tc);

    tc = tcase_create("canonical");
    tcase_add_test(tc, test_plan_canonical_round_trips);
    tcase_add_test(tc, test_plan_canonical_ignores_key_order_and_extras);
    tcase_add_loop_test(tc, test_plan_canonical_differs_on_content, 0,
                        N(canonical_changes));
    suite_add_tcase(s, tc);

    tc = tcase_create("identity");
    tcase_add_loop_test(tc, test_plan_identity_rules, 0, (int)(NIDS * NIDPOS));
    tcase_add_loop_test(tc, test_plan_identity_valid_table, 0, 256);
    tcase_add_test(tc, test_plan_identity_accepts_bin);
    suite_add_tcase(s, tc);

    tc = tcase_create("tensor");
    tcase_add_loop_test(tc, test_plan_tensor_rules, 0, N(tensor_cases));
    suite_add_tcase(s, tc);

    tc = tcase_create("min_bytes");
    tcase_add_loop_test(tc, test_plan_tensor_min_bytes, 0, N(min_cases));
    tcase_add_loop_test(tc, test_plan_tensor_encode_round_trips, 0,
                        N(min_cases));
    suite_add_tcase(s, tc);

    tc = tcase_create("storage");
    tcase_add_loop_test(tc, test_plan_storage_rules, 0, N(storage_cases));
    suite_add_tcase(s, tc);

    tc = tcase_create("binding");
    tcase_add_loop_test(tc, test_plan_binding_rules, 0, N(binding_cases));
    suite_add_tcase(s, tc);

    tc = tcase_create("structure");
    tcase_add_loop_test(tc, test_plan_structure, 0, N(structure_cases));
    tcase_add_loop_test(tc, test_plan_graph_hash_length, 0, 2);
    tcase_add_test(tc, test_plan_accepts_signed_integer_forms);
    tcase_add_test(tc, test_plan_enum_names_round_trip);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(plan_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
