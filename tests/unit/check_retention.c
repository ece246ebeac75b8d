/*
 * check_retention.c: retention specs (PROTOCOL section 6) and completion
 * readback (section 7) against the fixture plan of plan_fixture.h: rules
 * 1-5 one by one with their boundaries, determinism_outputs, the
 * comparison with a claimed resolution, the stored encoding, and every
 * readback rule with its code and path.
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
#include "retention.h"

#define KEY                                                                    \
    "\"prepared_plan_id\": \"plan:fixture/1\", \"graph_hash\": "               \
    "\"sha256:0f1e2d3c\""
#define U64_MAX_S "18446744073709551615"

struct edit {
    const char *path;
    const char *json;
};

static struct plan *
fixture_plan(const struct edit *edits, size_t n)
{
    msgpack_object *o = fx_fixture();
    struct proto_err err;
    struct plan *p;
    size_t i;

    for (i = 0; i < n && edits[i].path != NULL; i++)
        fx_set(o, edits[i].path, edits[i].json);
    proto_err_clear(&err);
    ck_assert_msg(plan_decode(o, &p, &err) == 0,
                  "fixture edit broke the "
                  "plan: %s: %s",
                  err.path, err.message);
    return p;
}

static struct retention_spec *
spec(const char *json)
{
    struct retention_spec *s = NULL;
    struct proto_err err;

    proto_err_clear(&err);
    ck_assert_msg(retention_spec_decode(fx_json(json), &s, &err) == 0,
                  "%s: %s: %s", json, err.path, err.message);
    return s;
}

static void
assert_str(struct proto_str s, const char *want)
{
    ck_assert_msg(s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0,
                  "got \"%.*s\", expected \"%s\"", (int)s.len, s.ptr, want);
}

/* Resolves and expects success; returns the values. */
static struct retained_value *
resolve_ok(const struct plan *p, const struct retention_spec *s, size_t *n)
{
    struct retained_value *out = NULL;
    struct proto_err err;

    proto_err_clear(&err);
    ck_assert_msg(retention_resolve(p, s, &out, n, &err) == 0, "%s: %s",
                  err.path, err.message);
    ck_assert_ptr_nonnull(out);
    return out;
}

static void
resolve_fails(const struct plan *p, const struct retention_spec *s, int code,
              const char *path, const char *needle)
{
    struct retained_value *out = (struct retained_value *)1;
    struct proto_err err;
    size_t n = 99;

    proto_err_clear(&err);
    ck_assert_int_eq(retention_resolve(p, s, &out, &n, &err), code);
    ck_assert_ptr_null(out);
    ck_assert_uint_eq(n, 0);
    ck_assert_str_eq(err.path, path);
    if (needle != NULL)
        ck_assert_msg(strstr(err.message, needle) != NULL,
                      "message \"%s\" does not mention \"%s\"", err.message,
                      needle);
}

/* ---- resolution ---- */

START_TEST(test_retention_resolves_in_byte_order)
{
    struct plan *p = fixture_plan(NULL, 0);
    struct retention_spec *s =
        spec("{" KEY ", \"values\": [\"logits\", \"hidden1\", \"hidden0\"]}");
    struct retained_value *v;
    size_t n;

    v = resolve_ok(p, s, &n);
    ck_assert_uint_eq(n, 3);
    assert_str(v[0].value_id, "hidden0");
    assert_str(v[0].producer_node_id, "embed");
    ck_assert_uint_eq(v[0].output_ordinal, 0);
    assert_str(v[0].resource_id, "pool/a");
    ck_assert_uint_eq(v[0].logical_offset_bytes, 0);
    ck_assert_uint_eq(v[0].tensor.min_storage_bytes, 128);
    assert_str(v[1].value_id, "hidden1");
    assert_str(v[1].producer_node_id, "block");
    assert_str(v[1].resource_id, "pool/b");
    ck_assert_int_eq(v[1].tensor.layout, TENSOR_LAYOUT_STRIDED);
    assert_str(v[2].value_id, "logits");
    assert_str(v[2].producer_node_id, "head");
    ck_assert_uint_eq(v[2].logical_offset_bytes, 128);
    ck_assert_ptr_eq(retention_find(v, n, v[1].value_id), &v[1]);
    free(v);
    retention_spec_free(s);
    plan_free(p);
}
END_TEST

START_TEST(test_retention_accepts_empty_values)
{
    struct plan *p = fixture_plan(NULL, 0);
    struct retention_spec *s = spec("{" KEY ", \"values\": []}");
    struct retained_value *v;
    size_t n = 7;

    v = resolve_ok(p, s, &n);
    ck_assert_uint_eq(n, 0);
    free(v);
    retention_spec_free(s);
    plan_free(p);
}
END_TEST

/* A row: plan edits, the requested values, and the expected outcome. */
struct rule_case {
    struct edit edits[5];
    const char *values;
    int code;
    const char *path;
    const char *needle;
};

#define TMP  "nodes[2].values[2]"
#define HID0 "nodes[0].values[2]"
#define HID1 "nodes[1].values[1]"
#define HIN  "nodes[2].values[0]" /* hidden1 read by head */
#define SCR  "nodes[1].values[3]"
#define KV   "nodes[1].values[2]"
#define EMB  "nodes[0].values[1]"
#define C0   ".storage.components[0]"

static const struct rule_case rule_cases[] = {
    /* Rule 1: exactly one output binding with that value_id. */
    { { { NULL, NULL } },
      "[\"tokens\"]",
      PROTO_EINVALID,
      "values[0]",
      "rule 1" },
    { { { NULL, NULL } }, "[\"nope\"]", PROTO_EINVALID, "values[0]", "rule 1" },
    { { { NULL, NULL } },
      "[\"emb.weight\"]",
      PROTO_EINVALID,
      "values[0]",
      "rule 1" },
    { { { TMP ".value_id", "\"hidden0\"" } },
      "[\"hidden0\"]",
      PROTO_EINVALID,
      "values[0]",
      "rule 1" },
    /* Rule 2: activations only. */
    { { { NULL, NULL } }, "[\"kv\"]", PROTO_EINVALID, "values[0]", "rule 2" },
    { { { NULL, NULL } },
      "[\"scratch0\"]",
      PROTO_EINVALID,
      "values[0]",
      "rule 2" },
    { { { NULL, NULL } }, "[\"tmp\"]", PROTO_EINVALID, "values[0]", "rule 2" },
    { { { EMB ".role", "\"output\"" }, { EMB ".access", "\"write\"" } },
      "[\"emb.weight\"]",
      PROTO_EINVALID,
      "values[0]",
      "rule 2" },
    { { { KV ".usage", "\"activations\"" } }, "[\"kv\"]", 0, "", NULL },
    /* Values are resolved in byte order: "Zed" (0x5a) before "logits". */
    { { { NULL, NULL } },
      "[\"logits\", \"Zed\"]",
      PROTO_EINVALID,
      "values[1]",
      "rule 1" },
    { { { NULL, NULL } },
      "[\"zzz\", \"kv\"]",
      PROTO_EINVALID,
      "values[1]",
      "rule 2" },
    { { { NULL, NULL } },
      "[\"kv\", \"zzz\"]",
      PROTO_EINVALID,
      "values[0]",
      "rule 2" },
    /* Rule 5: a later write overlapping by one byte; touching is fine. */
    { { { TMP C0 ".offset_bytes", "127" } },
      "[\"hidden1\"]",
      PROTO_EINVALID,
      "values[0]",
      "rule 5" },
    { { { TMP C0 ".offset_bytes", "128" } }, "[\"hidden1\"]", 0, "", NULL },
    { { { "nodes[2].values[1]" C0 ".offset_bytes", "124" } },
      "[\"hidden0\"]",
      PROTO_EINVALID,
      "values[0]",
      "rule 5" },
    /* The same write on another resource is no overlap. */
    { { { TMP C0 ".offset_bytes", "0" },
        { TMP C0 ".resource_id", "\"pool/c\"" } },
      "[\"hidden1\"]",
      0,
      "",
      NULL },
    /* Writes before the producer node are ignored. */
    { { { HID0 C0 ".length_bytes", "160" } }, "[\"logits\"]", 0, "", NULL },
    /* The retained range is the tensor's 128 bytes, not the component's
     * 160: logits at 128 only touches it. */
    { { { HID0 C0 ".length_bytes", "160" } }, "[\"hidden0\"]", 0, "", NULL },
    /* A read after the producer is allowed; a read_write is a write. */
    { { { HIN ".access", "\"read\"" } }, "[\"hidden1\"]", 0, "", NULL },
    { { { HIN ".access", "\"read_write\"" } },
      "[\"hidden1\"]",
      PROTO_EINVALID,
      "values[0]",
      "rule 5" },
    /* The producer node's own other outputs count. */
    { { { SCR C0 ".resource_id", "\"pool/b\"" },
        { SCR C0 ".offset_bytes", "112" } },
      "[\"hidden1\"]",
      PROTO_EINVALID,
      "values[0]",
      "rule 5" },
    { { { SCR C0 ".resource_id", "\"pool/b\"" },
        { SCR C0 ".offset_bytes", "128" } },
      "[\"hidden1\"]",
      0,
      "",
      NULL },
    { { { KV C0 ".resource_id", "\"pool/b\"" },
        { KV C0 ".offset_bytes", "126" } },
      "[\"hidden1\"]",
      PROTO_EINVALID,
      "values[0]",
      "rule 5" },
    /* ... but not the producer's own input of the retained range when it
     * only reads. */
    { { { "nodes[1].values[0]" C0 ".resource_id", "\"pool/b\"" } },
      "[\"hidden1\"]",
      0,
      "",
      NULL },
    /* A long write that starts before the range, hidden behind a short
     * one that ends before it. */
    { { { HID1 C0 ".offset_bytes", "64" },
        { TMP C0 ".offset_bytes", "0" },
        { TMP C0 ".length_bytes", "100" },
        { SCR C0 ".resource_id", "\"pool/b\"" },
        { SCR C0 ".offset_bytes", "16" } },
      "[\"hidden1\"]",
      PROTO_EINVALID,
      "values[0]",
      "rule 5" },
    { { { HID1 C0 ".offset_bytes", "64" },
        { TMP C0 ".offset_bytes", "0" },
        { TMP C0 ".length_bytes", "64" },
        { SCR C0 ".resource_id", "\"pool/b\"" },
        { SCR C0 ".offset_bytes", "16" } },
      "[\"hidden1\"]",
      0,
      "",
      NULL },
    /* The retained range ends at the last f32-aligned end, 2^64-4. */
    { { { "nodes[2].values[1]" C0 ".offset_bytes", "18446744073709551580" } },
      "[\"logits\"]",
      0,
      "",
      NULL },
};

START_TEST(test_retention_rules)
{
    const struct rule_case *c = &rule_cases[_i];
    struct plan *p = fixture_plan(c->edits, 5);
    struct retention_spec *s;
    struct retained_value *v;
    char json[512];
    size_t n;

    snprintf(json, sizeof(json), "{" KEY ", \"values\": %s}", c->values);
    s = spec(json);
    if (c->code == 0) {
        v = resolve_ok(p, s, &n);
        ck_assert_uint_eq(n, s->nrequests);
        free(v);
    } else {
        resolve_fails(p, s, c->code, c->path, c->needle);
    }
    retention_spec_free(s);
    plan_free(p);
}
END_TEST

/* Rules 3 and 4 cannot fail on a plan that passed plan_decode() (a
 * non-weight value has one component whose end fits u64 and covers the
 * tensor); they still hold on a plan built some other way. */
START_TEST(test_retention_rule3_needs_one_component)
{
    struct plan *p = fixture_plan(NULL, 0);
    struct retention_spec *s = spec("{" KEY ", \"values\": [\"hidden0\"]}");

    p->nodes[0].values[2].ncomponents = 0;
    resolve_fails(p, s, PROTO_EINVALID, "values[0]", "rule 3");
    retention_spec_free(s);
    plan_free(p);
}
END_TEST

START_TEST(test_retention_rule4_overflow)
{
    struct plan *p = fixture_plan(NULL, 0);
    struct retention_spec *s = spec("{" KEY ", \"values\": [\"hidden0\"]}");
    struct retained_value *v;
    size_t n;

    /* 2^64-128 + 128 bytes wraps; 2^64-129 + 128 is exactly 2^64-1. */
    p->nodes[0].values[2].components[0].offset_bytes = UINT64_MAX - 127;
    resolve_fails(p, s, PROTO_EINVALID, "values[0]", "rule 4");
    p->nodes[0].values[2].components[0].offset_bytes = UINT64_MAX - 128;
    v = resolve_ok(p, s, &n);
    ck_assert_uint_eq(v[0].logical_offset_bytes, UINT64_MAX - 128);
    free(v);
    retention_spec_free(s);
    plan_free(p);
}
END_TEST

/* ---- spec decoding ---- */

struct spec_case {
    const char *json;
    int code;
    const char *path;
};

static const struct spec_case spec_cases[] = {
    { "{" KEY ", \"values\": [\"a\", \"b\", \"a\"]}", PROTO_EINVALID,
      "values[2]" },
    { "{" KEY ", \"values\": [\"b\", \"a\", \"b\"]}", PROTO_EINVALID,
      "values[2]" },
    { "{" KEY ", \"values\": [\"a\", \"\"]}", PROTO_EINVALID, "values[1]" },
    { "{" KEY ", \"values\": [\"a\", 3]}", PROTO_EINVALID, "values[1]" },
    { "{" KEY ", \"values\": \"a\"}", PROTO_EINVALID, "values" },
    { "{" KEY "}", PROTO_EINVALID, "values" },
    { "{" KEY ", \"values\": null}", PROTO_EINVALID, "values" },
    { "{" KEY ", \"values\": [\"a\"], \"determinism_outputs\": true}",
      PROTO_EINVALID, "values" },
    { "{" KEY ", \"values\": [\"a\"], \"determinism_outputs\": false}", 0, "" },
    { "{" KEY ", \"determinism_outputs\": false}", PROTO_EINVALID, "values" },
    { "{" KEY ", \"determinism_outputs\": 1}", PROTO_EINVALID,
      "determinism_outputs" },
    { "{" KEY ", \"determinism_outputs\": true}", 0, "" },
    { "{" KEY ", \"determinism_outputs\": true, \"values\": null}", 0, "" },
    { "{\"graph_hash\": \"\", \"values\": []}", PROTO_EINVALID,
      "prepared_plan_id" },
    { "{\"prepared_plan_id\": \"p\", \"values\": []}", PROTO_EINVALID,
      "graph_hash" },
    { "{\"prepared_plan_id\": \"p q\", \"graph_hash\": \"\", \"values\": []}",
      PROTO_EINVALID, "prepared_plan_id" },
    { "[]", PROTO_EINVALID, "" },
    { "{" KEY ", \"values\": [], \"retained\": null}", 0, "" },
    { "{" KEY ", \"values\": [], \"retained\": {}}", PROTO_EINVALID,
      "retained" },
    { "{" KEY ", \"values\": [], \"retained\": [3]}", PROTO_EINVALID,
      "retained[0]" },
    { "{" KEY ", \"values\": [], \"retained\": [{\"value_id\": \"a\"}]}",
      PROTO_EINVALID, "retained[0].producer_node_id" },
};

START_TEST(test_retention_spec_decode)
{
    const struct spec_case *c = &spec_cases[_i];
    struct retention_spec *s = (struct retention_spec *)1;
    struct proto_err err;
    int rc;

    proto_err_clear(&err);
    rc = retention_spec_decode(fx_json(c->json), &s, &err);
    ck_assert_msg(rc == c->code, "%s: got %d (%s: %s)", c->json, rc, err.path,
                  err.message);
    if (rc == 0) {
        ck_assert_ptr_nonnull(s);
        retention_spec_free(s);
        return;
    }
    ck_assert_ptr_null(s);
    ck_assert_str_eq(err.path, c->path);
    ck_assert(err.message[0] != '\0');
}
END_TEST

START_TEST(test_retention_spec_free_accepts_null)
{
    struct retention_spec *s = spec("{" KEY ", \"values\": [\"b\", \"a\"]}");

    retention_spec_free(NULL);
    ck_assert_uint_eq(s->nrequests, 2);
    assert_str(s->requests[0].value_id, "a");
    ck_assert_uint_eq(s->requests[0].index, 1);
    ck_assert_int_eq(s->has_claimed, 0);
    retention_spec_free(s);
}
END_TEST

/* ---- determinism_outputs ---- */

static const struct edit all_activations[] = {
    { KV ".usage", "\"activations\"" },
    { SCR ".usage", "\"activations\"" },
    { TMP ".usage", "\"activations\"" },
};

START_TEST(test_retention_determinism_outputs_all)
{
    static const char *const want[] = { "hidden0", "hidden1",  "kv",
                                        "logits",  "scratch0", "tmp" };
    struct plan *p = fixture_plan(all_activations, 3);
    struct retention_spec *s = spec("{" KEY ", \"determinism_outputs\": true}");
    struct retained_value *v;
    size_t n, i;

    v = resolve_ok(p, s, &n);
    ck_assert_uint_eq(n, 6);
    for (i = 0; i < n; i++)
        assert_str(v[i].value_id, want[i]);
    assert_str(v[2].producer_node_id, "block");
    ck_assert_uint_eq(v[2].output_ordinal, 1);
    ck_assert_int_eq(v[2].tensor.layout, TENSOR_LAYOUT_BLOCKED);
    free(v);
    retention_spec_free(s);
    plan_free(p);
}
END_TEST

START_TEST(test_retention_determinism_outputs_applies_rules)
{
    struct plan *p = fixture_plan(NULL, 0);
    struct retention_spec *s = spec("{" KEY ", \"determinism_outputs\": true}");

    /* kv is state: rule 2 fails for it, named in the message. */
    resolve_fails(p, s, PROTO_EINVALID, "determinism_outputs", "\"kv\"");
    retention_spec_free(s);
    plan_free(p);
}
END_TEST

START_TEST(test_retention_determinism_outputs_produced_twice)
{
    struct edit e[4] = { all_activations[0],
                         all_activations[1],
                         all_activations[2],
                         { TMP ".value_id", "\"logits\"" } };
    msgpack_object *o = fx_fixture();
    struct retention_spec *s = spec("{" KEY ", \"determinism_outputs\": true}");
    struct proto_err err;
    struct plan *p;
    size_t i;

    for (i = 0; i < 4; i++)
        fx_set(o, e[i].path, e[i].json);
    ck_assert_int_eq(plan_decode(o, &p, &err), 0);
    resolve_fails(p, s, PROTO_EINVALID, "determinism_outputs", "logits");
    retention_spec_free(s);
    plan_free(p);
}
END_TEST

START_TEST(test_retention_determinism_outputs_no_outputs)
{
    static const struct edit edits[][2] = {
        { { "nodes", "[]" }, { NULL, NULL } },
        { { "nodes", "[{\"id\": \"n\", \"values\": []}]" }, { NULL, NULL } },
    };
    struct plan *p = fixture_plan(edits[_i], 2);
    struct retention_spec *s = spec("{" KEY ", \"determinism_outputs\": true}");

    resolve_fails(p, s, PROTO_EINVALID, "determinism_outputs", "no outputs");
    retention_spec_free(s);
    plan_free(p);
}
END_TEST

/* ---- claimed resolutions ---- */

/* The resolution of hidden0, hidden1 and logits, packed as the claimed
 * `retained` list, editable. */
static msgpack_object *
claim_for(const struct plan *p)
{
    struct retention_spec *s =
        spec("{" KEY ", \"values\": [\"hidden0\", \"hidden1\", \"logits\"]}");
    struct retained_value *v;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_object *o;
    size_t n, i;

    v = resolve_ok(p, s, &n);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, n);
    for (i = 0; i < n; i++)
        ck_assert_int_eq(retention_value_encode(&v[i], &pk), 0);
    o = fx_unpack(sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    free(v);
    retention_spec_free(s);
    return o;
}

struct claim_case {
    const char *path; /* edit of the claimed list; NULL for none */
    const char *json;
    int code;
    const char *err_path;
};

static const struct claim_case claim_cases[] = {
    { NULL, NULL, 0, "" },
    { "[1].resource_id", "\"pool/x\"", PROTO_EMISMATCH,
      "retained[1].resource_id" },
    { "[0].logical_offset_bytes", "4", PROTO_EMISMATCH,
      "retained[0].logical_offset_bytes" },
    { "[2].logical_offset_bytes", U64_MAX_S, PROTO_EMISMATCH,
      "retained[2].logical_offset_bytes" },
    { "[2].producer_node_id", "\"block\"", PROTO_EMISMATCH,
      "retained[2].producer_node_id" },
    { "[1].output_ordinal", "1", PROTO_EMISMATCH,
      "retained[1].output_ordinal" },
    { "[0].value_id", "\"hidden9\"", PROTO_EMISMATCH, "retained[0].value_id" },
    { "[0].tensor.dimensions", "[4, 8]", PROTO_EMISMATCH,
      "retained[0].tensor" },
    { "[1].tensor.layout", "\"contiguous\"", PROTO_EMISMATCH,
      "retained[1].tensor" },
    { "[0].tensor.element_type", "\"i32\"", PROTO_EMISMATCH,
      "retained[0].tensor" },
    { "[2]", "{\"value_id\": \"logits\"}", PROTO_EINVALID,
      "retained[2].producer_node_id" },
    { "[1].tensor.dimensions", "[8, 0]", PROTO_EINVALID,
      "retained[1].tensor.dimensions[1]" },
    { "[1].resource_id", "\"pool b\"", PROTO_EINVALID,
      "retained[1].resource_id" },
};

START_TEST(test_retention_claimed_resolution)
{
    const struct claim_case *c = &claim_cases[_i];
    struct plan *p = fixture_plan(NULL, 0);
    msgpack_object *claim = claim_for(p), *body;
    struct retention_spec *s = NULL;
    struct retained_value *v;
    struct proto_err err;
    size_t n;
    int rc;

    if (c->path != NULL)
        fx_set(claim, c->path, c->json);
    body = fx_json("{" KEY ", \"values\": [\"logits\", \"hidden1\", "
                   "\"hidden0\"], \"retained\": null}");
    *fx_at(body, "retained") = *claim;
    proto_err_clear(&err);
    rc = retention_spec_decode(body, &s, &err);
    if (rc == 0) {
        ck_assert_int_eq(s->has_claimed, 1);
        rc = retention_resolve(p, s, &v, &n, &err);
        if (rc == 0)
            free(v);
    }
    ck_assert_msg(rc == c->code, "got %d (%s: %s)", rc, err.path, err.message);
    ck_assert_str_eq(err.path, c->err_path);
    retention_spec_free(s);
    plan_free(p);
}
END_TEST

START_TEST(test_retention_claimed_count_and_order)
{
    struct plan *p = fixture_plan(NULL, 0);
    msgpack_object *claim = claim_for(p), *body;
    struct retention_spec *s;
    struct retained_value *v;
    struct proto_err err;
    size_t n;

    if (_i == 0) {
        claim->via.array.size = 2; /* one value short */
    } else {
        msgpack_object t = claim->via.array.ptr[0];

        claim->via.array.ptr[0] = claim->via.array.ptr[1];
        claim->via.array.ptr[1] = t;
    }
    body = fx_json("{" KEY ", \"values\": [\"logits\", \"hidden1\", "
                   "\"hidden0\"], \"retained\": null}");
    *fx_at(body, "retained") = *claim;
    ck_assert_int_eq(retention_spec_decode(body, &s, &err), 0);
    ck_assert_int_eq(retention_resolve(p, s, &v, &n, &err), PROTO_EMISMATCH);
    ck_assert_str_eq(err.path, _i == 0 ? "retained" : "retained[0].value_id");
    retention_spec_free(s);
    plan_free(p);
}
END_TEST

/* ---- the stored form ---- */

START_TEST(test_retention_values_round_trip)
{
    struct plan *p = fixture_plan(all_activations, 3);
    struct retention_spec *s = spec("{" KEY ", \"determinism_outputs\": true}");
    struct retained_value *v, *back;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct proto_err err;
    size_t n, m, i;

    v = resolve_ok(p, s, &n);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, n);
    for (i = 0; i < n; i++)
        ck_assert_int_eq(retention_value_encode(&v[i], &pk), 0);
    ck_assert_int_eq(
        retention_values_decode(fx_unpack(sb.data, sb.size), &back, &m, &err),
        0);
    ck_assert_uint_eq(m, n);
    for (i = 0; i < n; i++) {
        ck_assert_int_eq(identity_cmp(v[i].value_id, back[i].value_id), 0);
        ck_assert_int_eq(
            identity_cmp(v[i].producer_node_id, back[i].producer_node_id), 0);
        ck_assert_int_eq(identity_cmp(v[i].resource_id, back[i].resource_id),
                         0);
        ck_assert_uint_eq(v[i].output_ordinal, back[i].output_ordinal);
        ck_assert_uint_eq(v[i].logical_offset_bytes,
                          back[i].logical_offset_bytes);
        ck_assert(tensor_equal(&v[i].tensor, &back[i].tensor));
        ck_assert_uint_eq(v[i].tensor.min_storage_bytes,
                          back[i].tensor.min_storage_bytes);
        ck_assert_ptr_eq(retention_find(back, m, v[i].value_id), &back[i]);
    }
    msgpack_sbuffer_destroy(&sb);
    free(back);
    free(v);
    retention_spec_free(s);
    plan_free(p);
}
END_TEST

/* One value map alone (a relayed value), as the list decodes it; a bad
 * field is named. */
START_TEST(test_retention_value_decode_one)
{
    struct plan *p = fixture_plan(all_activations, 3);
    struct retention_spec *s = spec("{" KEY ", \"values\": [\"kv\"]}");
    struct retained_value *v, *one;
    msgpack_object *o;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct proto_err err;
    size_t n;

    v = resolve_ok(p, s, &n);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    ck_assert_int_eq(retention_value_encode(&v[0], &pk), 0);
    o = fx_unpack(sb.data, sb.size);
    ck_assert_int_eq(retention_value_decode(o, &one, &err), 0);
    ck_assert_int_eq(identity_cmp(one->value_id, v[0].value_id), 0);
    ck_assert_uint_eq(one->logical_offset_bytes, v[0].logical_offset_bytes);
    ck_assert(tensor_equal(&one->tensor, &v[0].tensor));
    free(one);
    fx_set(o, "tensor.element_type", "\"f99\"");
    ck_assert_int_eq(retention_value_decode(o, &one, &err), PROTO_EINVALID);
    ck_assert_ptr_null(one);
    ck_assert_str_eq(err.path, "tensor.element_type");
    ck_assert_int_eq(retention_value_decode(fx_json("[1]"), &one, &err),
                     PROTO_EINVALID);
    ck_assert_ptr_null(one);
    msgpack_sbuffer_destroy(&sb);
    free(v);
    retention_spec_free(s);
    plan_free(p);
}
END_TEST

START_TEST(test_retention_value_encode_keeps_serde_tensor)
{
    struct plan *p = fixture_plan(all_activations, 3);
    struct retention_spec *s = spec("{" KEY ", \"values\": [\"kv\"]}");
    msgpack_object *fixture = fx_fixture(), *enc;
    struct retained_value *v;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    const char *a, *b;
    size_t n, alen, blen;

    v = resolve_ok(p, s, &n);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    ck_assert_int_eq(retention_value_encode(&v[0], &pk), 0);
    enc = fx_unpack(sb.data, sb.size);
    ck_assert_ptr_nonnull(enc);
    ck_assert_uint_eq(enc->via.map.size, 6);
    ck_assert_uint_eq(fx_at(enc, "output_ordinal")->via.u64, 1);
    a = fx_pack(fx_at(enc, "tensor"), &alen);
    b = fx_pack(fx_at(fixture, KV ".tensor"), &blen);
    ck_assert_uint_eq(alen, blen);
    ck_assert(memcmp(a, b, alen) == 0);
    msgpack_sbuffer_destroy(&sb);
    free(v);
    retention_spec_free(s);
    plan_free(p);
}
END_TEST

START_TEST(test_retention_find)
{
    struct plan *p = fixture_plan(all_activations, 3);
    struct retention_spec *s = spec("{" KEY ", \"determinism_outputs\": true}");
    struct retained_value *v;
    struct proto_str q;
    size_t n;

    v = resolve_ok(p, s, &n);
    q.ptr = "kv";
    q.len = 2;
    ck_assert_ptr_eq(retention_find(v, n, q), &v[2]);
    q.len = 1; /* "k" is a prefix, not a value */
    ck_assert_ptr_null(retention_find(v, n, q));
    q.ptr = "tmp";
    q.len = 3;
    ck_assert_ptr_eq(retention_find(v, n, q), &v[5]);
    ck_assert_ptr_null(retention_find(v, 0, q));
    free(v);
    retention_spec_free(s);
    plan_free(p);
}
END_TEST

/* ---- readback ---- */

#define RB(value, layout)                                                      \
    "{" KEY ", \"value_id\": \"" value "\", \"participant_index\": 3, "        \
    "\"output_layout\": " layout "}"
#define OL(et, count)                                                          \
    "{\"element_type\": \"" et "\", \"element_count\": " count "}"

struct readback_case {
    const char *json;
    int code;
    const char *path;
};

/* Retained: hidden0 (f32[8,4] contiguous, 128 bytes), hidden1 (strided),
 * kv (blocked), logits (f32[8] contiguous at 128). */
static const struct readback_case readback_cases[] = {
    { RB("hidden0", OL("f32", "32")), 0, "" },
    { RB("hidden0", OL("f32", "1")), 0, "" },
    { RB("logits", OL("f32", "8")), 0, "" },
    { RB("hidden0", OL("f32", "33")), PROTO_EINVALID,
      "output_layout.element_count" },
    { RB("logits", OL("f32", "9")), PROTO_EINVALID,
      "output_layout.element_count" },
    { RB("hidden0", OL("f32", "0")), PROTO_EINVALID,
      "output_layout.element_count" },
    { RB("hidden0", OL("f32", "4611686018427387904")), PROTO_EINVALID,
      "output_layout.element_count" },
    { RB("hidden0", OL("f32", "4611686018427387903")), PROTO_EINVALID,
      "output_layout.element_count" },
    /* 2^64-1 single bytes fit u64: the next rule, the type, fails. */
    { RB("hidden0", OL("u8", U64_MAX_S)), PROTO_EINVALID,
      "output_layout.element_type" },
    { RB("hidden0", OL("f16", "2")), PROTO_EINVALID,
      "output_layout.element_type" },
    { RB("hidden0", OL("f64", "2")), PROTO_EINVALID,
      "output_layout.element_type" },
    { RB("hidden1", OL("f32", "2")), PROTO_EINVALID, "value_id" },
    { RB("kv", OL("f16", "2")), PROTO_EINVALID, "value_id" },
    { RB("tmp", OL("u8", "2")), PROTO_ENOT_RETAINED, "value_id" },
    { RB("hidden0", "[]"), PROTO_EINVALID, "output_layout" },
    { RB("hidden0 x", OL("f32", "2")), PROTO_EINVALID, "value_id" },
    { RB("hidden0", "{\"element_type\": \"f32\"}"), PROTO_EINVALID,
      "output_layout.element_count" },
    { RB("hidden0", "{\"element_count\": 1}"), PROTO_EINVALID,
      "output_layout.element_type" },
    { "{" KEY ", \"value_id\": \"hidden0\", \"participant_index\": "
      "4294967296, \"output_layout\": " OL("f32", "1") "}",
      PROTO_EINVALID, "participant_index" },
    { "{" KEY
      ", \"value_id\": \"hidden0\", \"output_layout\": " OL("f32", "1") "}",
      PROTO_EINVALID, "participant_index" },
    { "{\"prepared_plan_id\": \"p\", \"value_id\": \"hidden0\", "
      "\"participant_index\": 0, \"output_layout\": " OL("f32", "1") "}",
      PROTO_EINVALID, "graph_hash" },
    { "[]", PROTO_EINVALID, "" },
};

START_TEST(test_retention_readback_rules)
{
    const struct readback_case *c = &readback_cases[_i];
    struct plan *p = fixture_plan(all_activations, 1);
    struct retention_spec *s = spec("{" KEY ", \"values\": [\"hidden0\", "
                                    "\"hidden1\", \"kv\", \"logits\"]}");
    struct readback_request req;
    struct retained_value *v;
    struct proto_err err;
    struct readback rb;
    size_t n;
    int rc;

    v = resolve_ok(p, s, &n);
    proto_err_clear(&err);
    rc = retention_readback_decode(fx_json(c->json), &rb, &err);
    if (rc == 0)
        rc = retention_readback_check(&rb, retention_find(v, n, rb.value_id),
                                      &req, &err);
    ck_assert_msg(rc == c->code, "%s: got %d (%s: %s)", c->json, rc, err.path,
                  err.message);
    ck_assert_str_eq(err.path, c->path);
    if (rc == 0) {
        const struct retained_value *rv = retention_find(v, n, rb.value_id);

        ck_assert_int_eq(identity_cmp(req.node_id, rv->producer_node_id), 0);
        ck_assert_int_eq(identity_cmp(req.resource_id, rv->resource_id), 0);
        ck_assert_uint_eq(req.logical_offset_bytes, rv->logical_offset_bytes);
        ck_assert_uint_eq(req.participant_index, 3);
        ck_assert_uint_eq(req.element_count, rb.element_count);
    } else {
        ck_assert(err.message[0] != '\0');
    }
    free(v);
    retention_spec_free(s);
    plan_free(p);
}
END_TEST

START_TEST(test_retention_readback_not_retained)
{
    struct readback_request req;
    struct retained_value rv;
    struct proto_err err;
    struct readback rb;

    ck_assert_int_eq(retention_readback_decode(
                         fx_json(RB("hidden0", OL("f32", "1"))), &rb, &err),
                     0);
    ck_assert_int_eq(retention_readback_check(&rb, NULL, &req, &err),
                     PROTO_ENOT_RETAINED);
    ck_assert_str_eq(err.path, "value_id");
    /* A value found under another id is not the one asked for. */
    memset(&rv, 0, sizeof(rv));
    rv.value_id.ptr = "hidden1";
    rv.value_id.len = 7;
    ck_assert_int_eq(retention_readback_check(&rb, &rv, &req, &err),
                     PROTO_ENOT_RETAINED);
}
END_TEST

START_TEST(test_retention_readback_offset_overflow)
{
    struct plan *p = fixture_plan(NULL, 0);
    struct retention_spec *s = spec("{" KEY ", \"values\": [\"hidden0\"]}");
    struct readback_request req;
    struct retained_value *v;
    struct proto_err err;
    struct readback rb;
    size_t n;

    v = resolve_ok(p, s, &n);
    ck_assert_int_eq(retention_readback_decode(
                         fx_json(RB("hidden0", OL("f32", "2"))), &rb, &err),
                     0);
    /* A stored value can claim any offset: 8 bytes from 2^64-8 wrap. */
    v[0].logical_offset_bytes = UINT64_MAX - 7;
    ck_assert_int_eq(retention_readback_check(&rb, &v[0], &req, &err),
                     PROTO_EINVALID);
    ck_assert_str_eq(err.path, "output_layout.element_count");
    v[0].logical_offset_bytes = UINT64_MAX - 8;
    ck_assert_int_eq(retention_readback_check(&rb, &v[0], &req, &err), 0);
    ck_assert_uint_eq(req.logical_offset_bytes, UINT64_MAX - 8);
    free(v);
    retention_spec_free(s);
    plan_free(p);
}
END_TEST

START_TEST(test_retention_readback_encode)
{
    struct readback_request req;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_object *o;

    memset(&req, 0, sizeof(req));
    req.node_id.ptr = "head";
    req.node_id.len = 4;
    req.participant_index = 7;
    req.resource_id.ptr = "pool/a";
    req.resource_id.len = 6;
    req.logical_offset_bytes = UINT64_MAX;
    req.element_type = TENSOR_ETYPE_BF16;
    req.element_count = 3;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    ck_assert_int_eq(retention_readback_encode(&req, &pk), 0);
    o = fx_unpack(sb.data, sb.size);
    ck_assert_uint_eq(o->via.map.size, 5);
    ck_assert(fx_at(o, "node_id")->via.str.size == 4);
    ck_assert_uint_eq(fx_at(o, "participant_index")->via.u64, 7);
    ck_assert_uint_eq(fx_at(o, "logical_offset_bytes")->via.u64, UINT64_MAX);
    ck_assert(memcmp(fx_at(o, "output_layout.element_type")->via.str.ptr,
                     "bf16", 4) == 0);
    ck_assert_uint_eq(fx_at(o, "output_layout.element_count")->via.u64, 3);
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

/* ---- golden files ----
 *
 * tests/data/plans/ holds, beside the fixture plan, a retention body, its
 * resolution, a readback body and its request, in msgpack and JSON, for the
 * end-to-end tests of the daemon and the client. They must stay what this
 * code produces.
 */

static const char *
golden_bytes(const char *name, size_t *len)
{
    char rel[128];
    const char *buf;

    snprintf(rel, sizeof(rel), "plans/%s.msgpack", name);
    buf = fx_read_data(rel, len);
    ck_assert_msg(buf != NULL, "missing %s", rel);
    return buf;
}

static void
assert_golden(const char *name, const msgpack_sbuffer *sb)
{
    size_t len;
    const char *want = golden_bytes(name, &len);

    ck_assert_msg(
        sb->size == len && memcmp(sb->data, want, len) == 0,
        "%s.msgpack differs from what the code produces; "
        "if intended, rerun plan_fixture_gen (tests/lib/CMakeLists.txt)",
        name);
}

START_TEST(test_retention_golden_resolution)
{
    size_t len, n, i;
    const char *plan_bytes = golden_bytes("fixture", &len);
    struct plan *p;
    struct retention_spec *s;
    struct retained_value *v;
    struct proto_err err;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    const char *body = golden_bytes("retention", &n);

    ck_assert_int_eq(plan_decode(fx_unpack(plan_bytes, len), &p, &err), 0);
    ck_assert_int_eq(retention_spec_decode(fx_unpack(body, n), &s, &err), 0);
    ck_assert_int_eq(retention_resolve(p, s, &v, &n, &err), 0);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, n);
    for (i = 0; i < n; i++)
        ck_assert_int_eq(retention_value_encode(&v[i], &pk), 0);
    assert_golden("retained", &sb);
    msgpack_sbuffer_destroy(&sb);
    free(v);
    retention_spec_free(s);
    plan_free(p);
}
END_TEST

START_TEST(test_retention_golden_readback)
{
    size_t len, n;
    const char *stored = golden_bytes("retained", &len);
    const char *body = golden_bytes("readback", &n);
    struct retained_value *v;
    struct readback_request req;
    struct readback rb;
    struct proto_err err;
    msgpack_sbuffer sb;
    msgpack_packer pk;

    ck_assert_int_eq(
        retention_values_decode(fx_unpack(stored, len), &v, &len, &err), 0);
    ck_assert_int_eq(retention_readback_decode(fx_unpack(body, n), &rb, &err),
                     0);
    ck_assert_int_eq(retention_readback_check(
                         &rb, retention_find(v, len, rb.value_id), &req, &err),
                     0);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    ck_assert_int_eq(retention_readback_encode(&req, &pk), 0);
    assert_golden("readback-request", &sb);
    msgpack_sbuffer_destroy(&sb);
    free(v);
}
END_TEST

static const char *const golden_names[] = {
    "fixture", "retention", "retained", "readback", "readback-request",
};

START_TEST(test_retention_golden_json_twins)
{
    char rel[128];
    size_t len, jlen, plen;
    const char *bytes, *packed;
    char *text;

    snprintf(rel, sizeof(rel), "plans/%s.msgpack", golden_names[_i]);
    bytes = fx_read_data(rel, &len);
    snprintf(rel, sizeof(rel), "plans/%s.json", golden_names[_i]);
    text = fx_read_data(rel, &jlen);
    ck_assert_ptr_nonnull(bytes);
    ck_assert_ptr_nonnull(text);
    packed = fx_pack(fx_json(text), &plen);
    ck_assert_msg(plen == len && memcmp(packed, bytes, len) == 0,
                  "%s.json and .msgpack differ", golden_names[_i]);
}
END_TEST

/* ---- rule 5 against a brute-force oracle ----
 *
 * Random plans (seeded, so a failure replays): a few nodes, outputs and
 * read or read_write inputs of u8 tensors on two resources with random
 * ranges. Each output is retained alone, and the outcome is compared with
 * the rule read literally: any writing binding of the producer node or a
 * later one, other than the value itself, overlapping its range.
 */

struct rnd_binding {
    char id[16];
    int output, rw;
    unsigned node, resource;
    uint64_t dim, offset, length;
};

static uint64_t rnd_state;

static uint64_t
rnd(uint64_t below)
{
    /* xorshift64*: deterministic from the seed, good enough here. */
    rnd_state ^= rnd_state >> 12;
    rnd_state ^= rnd_state << 25;
    rnd_state ^= rnd_state >> 27;
    return (rnd_state * 2685821657736338717ull) % below;
}

static void
rnd_pack_str(msgpack_packer *pk, const char *str)
{
    msgpack_pack_str(pk, strlen(str));
    msgpack_pack_str_body(pk, str, strlen(str));
}

static void
rnd_pack_binding(msgpack_packer *pk, const struct rnd_binding *b)
{
    static const char *const res[] = { "r0", "r1" };

    msgpack_pack_map(pk, 8);
    rnd_pack_str(pk, "value_id");
    rnd_pack_str(pk, b->id);
    rnd_pack_str(pk, "role");
    rnd_pack_str(pk, b->output ? "output" : "input");
    rnd_pack_str(pk, "ordinal");
    msgpack_pack_uint32(pk, 0);
    rnd_pack_str(pk, "tensor");
    msgpack_pack_map(pk, 3);
    rnd_pack_str(pk, "dimensions");
    msgpack_pack_array(pk, 1);
    msgpack_pack_uint64(pk, b->dim);
    rnd_pack_str(pk, "element_type");
    rnd_pack_str(pk, "u8");
    rnd_pack_str(pk, "layout");
    rnd_pack_str(pk, "contiguous");
    rnd_pack_str(pk, "access");
    rnd_pack_str(pk, b->output ? "write" : b->rw ? "read_write" : "read");
    rnd_pack_str(pk, "alias");
    rnd_pack_str(pk, "no_alias");
    rnd_pack_str(pk, "usage");
    rnd_pack_str(pk, "activations");
    rnd_pack_str(pk, "storage");
    msgpack_pack_map(pk, 1);
    rnd_pack_str(pk, "components");
    msgpack_pack_array(pk, 1);
    msgpack_pack_map(pk, 4);
    rnd_pack_str(pk, "resource_id");
    rnd_pack_str(pk, res[b->resource]);
    rnd_pack_str(pk, "offset_bytes");
    msgpack_pack_uint64(pk, b->offset);
    rnd_pack_str(pk, "length_bytes");
    msgpack_pack_uint64(pk, b->length);
    rnd_pack_str(pk, "element_type");
    rnd_pack_str(pk, "u8");
}

/* The literal rule 5 for output b among all bindings. */
static int
rnd_oracle_overwritten(const struct rnd_binding *all, size_t n,
                       const struct rnd_binding *b)
{
    uint64_t start = b->offset, end = b->offset + b->dim;
    size_t i;

    for (i = 0; i < n; i++) {
        const struct rnd_binding *w = &all[i];

        if (w == b || w->node < b->node || (!w->output && !w->rw) ||
            w->resource != b->resource)
            continue;
        if (w->offset < end && start < w->offset + w->length)
            return 1;
    }
    return 0;
}

START_TEST(test_retention_rule5_matches_oracle)
{
    struct rnd_binding all[48];
    unsigned nodes = 2 + (unsigned)(_i % 6), node;
    size_t n = 0, i, outs = 0, k;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct proto_err err;
    struct plan *p;

    rnd_state = 0x9e3779b97f4a7c15ull ^ ((uint64_t)_i * 0x100000001b3ull);
    for (node = 0; node < nodes; node++) {
        size_t per = 1 + rnd(6);

        for (k = 0; k < per && n < 48; k++) {
            struct rnd_binding *b = &all[n++];

            b->output = outs == 0 || rnd(2);
            b->rw = rnd(2);
            b->node = node;
            b->resource = (unsigned)rnd(2);
            b->dim = 1 + rnd(16);
            b->length = b->dim + rnd(8);
            b->offset = rnd(96);
            if (b->output)
                snprintf(b->id, sizeof(b->id), "o%zu", outs++);
            else
                snprintf(b->id, sizeof(b->id), "i%zu", n);
        }
    }
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    rnd_pack_str(&pk, "prepared_plan_id");
    rnd_pack_str(&pk, "plan:fixture/1");
    rnd_pack_str(&pk, "graph_hash");
    rnd_pack_str(&pk, "sha256:0f1e2d3c");
    rnd_pack_str(&pk, "nodes");
    msgpack_pack_array(&pk, nodes);
    for (node = 0, i = 0; node < nodes; node++) {
        size_t first = i;
        char id[16];

        while (i < n && all[i].node == node)
            i++;
        snprintf(id, sizeof(id), "n%u", node);
        msgpack_pack_map(&pk, 2);
        rnd_pack_str(&pk, "id");
        rnd_pack_str(&pk, id);
        rnd_pack_str(&pk, "values");
        msgpack_pack_array(&pk, i - first);
        for (k = first; k < i; k++)
            rnd_pack_binding(&pk, &all[k]);
    }
    ck_assert_int_eq(plan_decode(fx_unpack(sb.data, sb.size), &p, &err), 0);
    msgpack_sbuffer_destroy(&sb);

    for (i = 0; i < n; i++) {
        struct retention_spec *s;
        struct retained_value *v = NULL;
        char json[256];
        size_t m;
        int rc, want;

        if (!all[i].output)
            continue;
        want = rnd_oracle_overwritten(all, n, &all[i]);
        snprintf(json, sizeof(json), "{" KEY ", \"values\": [\"%.15s\"]}",
                 all[i].id);
        s = spec(json);
        rc = retention_resolve(p, s, &v, &m, &err);
        ck_assert_msg(rc == (want ? PROTO_EINVALID : 0),
                      "seed %d, %s: oracle %d, got %d (%s)", _i, all[i].id,
                      want, rc, err.message);
        if (rc == 0)
            ck_assert_uint_eq(v[0].logical_offset_bytes, all[i].offset);
        else
            ck_assert(strstr(err.message, "rule 5") != NULL);
        free(v);
        retention_spec_free(s);
    }
    plan_free(p);
}
END_TEST

/* ---- allocation failures ----
 *
 * This binary is linked with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc
 * (tests/unit/CMakeLists.txt), so proto's allocations (and msgpack-c's inline
 * sbuffer growth) come here. Only the Nth allocation after arming fails;
 * the allocations of Check and of the fixture happen while disarmed.
 */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);

static long oom_count, oom_fail_at;

static int
oom_fail(void)
{
    return oom_fail_at != 0 && ++oom_count == oom_fail_at;
}

void *
__wrap_malloc(size_t n)
{
    return oom_fail() ? NULL : __real_malloc(n);
}

void *
__wrap_calloc(size_t n, size_t size)
{
    return oom_fail() ? NULL : __real_calloc(n, size);
}

void *
__wrap_realloc(void *p, size_t n)
{
    return oom_fail() ? NULL : __real_realloc(p, n);
}

/* Plan, spec, resolution with a claim, stored values, JSON import: returns
 * 0 or the first error. Frees everything it made either way. */
static int
oom_run(const msgpack_object *plan, const msgpack_object *body,
        struct json_object *json)
{
    struct retention_spec *s = NULL;
    struct retained_value *v = NULL, *back = NULL, *one = NULL;
    struct plan *p = NULL, *pj = NULL;
    struct proto_err err;
    size_t n, m;
    int rc;

    if ((rc = plan_decode(plan, &p, &err)) == 0 &&
        (rc = retention_spec_decode(body, &s, &err)) == 0 &&
        (rc = retention_resolve(p, s, &v, &n, &err)) == 0 &&
        (rc = retention_values_decode(fx_at((msgpack_object *)body, "retained"),
                                      &back, &m, &err)) == 0 &&
        (rc = retention_value_decode(
             fx_at((msgpack_object *)body, "retained[0]"), &one, &err)) == 0)
        rc = plan_decode_json(json, &pj, &err);
    if (rc != 0)
        ck_assert_int_eq(err.code, rc);
    plan_free(pj);
    free(one);
    free(back);
    free(v);
    retention_spec_free(s);
    plan_free(p);
    return rc;
}

START_TEST(test_retention_alloc_failures_end_cleanly)
{
    msgpack_object *plan = fx_fixture(), *claim, *body;
    struct plan *p = fixture_plan(NULL, 0);
    struct json_object *json;
    size_t len;
    char *text = fx_read_data("plans/fixture.json", &len);
    long n;
    int rc;

    json = json_tokener_parse(text);
    ck_assert_ptr_nonnull(json);
    claim = claim_for(p);
    plan_free(p);
    body = fx_json("{" KEY ", \"values\": [\"logits\", \"hidden1\", "
                   "\"hidden0\"], \"retained\": null}");
    *fx_at(body, "retained") = *claim;
    for (n = 1;; n++) {
        oom_count = 0;
        oom_fail_at = n;
        rc = oom_run(plan, body, json);
        oom_fail_at = 0;
        if (oom_count < n) {
            /* No allocation was failed: the whole run must succeed. */
            ck_assert_int_eq(rc, 0);
            break;
        }
        ck_assert_msg(rc == PROTO_ENOMEM, "allocation %ld: got %d", n, rc);
    }
    /* Every allocation of the path was failed once. */
    ck_assert_int_gt(n, 8);
    json_object_put(json);
}
END_TEST

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static Suite *
retention_suite(void)
{
    Suite *s = suite_create("retention");
    TCase *tc;

    tc = tcase_create("resolve");
    tcase_add_test(tc, test_retention_resolves_in_byte_order);
    tcase_add_test(tc, test_retention_accepts_empty_values);
    suite_add_tcase(s, tc);

    tc = tcase_create("rules");
    tcase_add_loop_test(tc, test_retention_rules, 0, N(rule_cases));
    tcase_add_test(tc, test_retention_rule3_needs_one_component);
    tcase_add_test(tc, test_retention_rule4_overflow);
    tcase_add_loop_test(tc, test_retention_rule5_matches_oracle, 0, 300);
    suite_add_tcase(s, tc);

    tc = tcase_create("spec");
    tcase_add_loop_test(tc, test_retention_spec_decode, 0, N(spec_cases));
    tcase_add_test(tc, test_retention_spec_free_accepts_null);
    suite_add_tcase(s, tc);

    tc = tcase_create("determinism_outputs");
    tcase_add_test(tc, test_retention_determinism_outputs_all);
    tcase_add_test(tc, test_retention_determinism_outputs_applies_rules);
    tcase_add_test(tc, test_retention_determinism_outputs_produced_twice);
    tcase_add_loop_test(tc, test_retention_determinism_outputs_no_outputs, 0,
                        2);
    suite_add_tcase(s, tc);

    tc = tcase_create("mismatch");
    tcase_add_loop_test(tc, test_retention_claimed_resolution, 0,
                        N(claim_cases));
    tcase_add_loop_test(tc, test_retention_claimed_count_and_order, 0, 2);
    suite_add_tcase(s, tc);

    tc = tcase_create("stored");
    tcase_add_test(tc, test_retention_values_round_trip);
    tcase_add_test(tc, test_retention_value_decode_one);
    tcase_add_test(tc, test_retention_value_encode_keeps_serde_tensor);
    tcase_add_test(tc, test_retention_find);
    suite_add_tcase(s, tc);

    tc = tcase_create("readback");
    tcase_add_loop_test(tc, test_retention_readback_rules, 0,
                        N(readback_cases));
    tcase_add_test(tc, test_retention_readback_not_retained);
    tcase_add_test(tc, test_retention_readback_offset_overflow);
    tcase_add_test(tc, test_retention_readback_encode);
    suite_add_tcase(s, tc);

    tc = tcase_create("golden");
    tcase_add_test(tc, test_retention_golden_resolution);
    tcase_add_test(tc, test_retention_golden_readback);
    tcase_add_loop_test(tc, test_retention_golden_json_twins, 0,
                        N(golden_names));
    suite_add_tcase(s, tc);

    tc = tcase_create("oom");
    tcase_add_test(tc, test_retention_alloc_failures_end_cleanly);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(retention_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
