/*
 * plan_fixture_gen.c: writes the checked-in plan fixtures from the code
 * that defines them, so they can be regenerated when the fixture changes:
 *
 *   plan_fixture_gen tests/data/plans tests/fuzz/corpus/plan
 *
 * Into the first directory: fixture, retention, retained, readback and
 * readback-request, each as .msgpack and .json (the golden files that
 * check_plan and check_retention compare with). Into the second: the seed
 * corpus of fuzz_plan. Built by tests/lib/CMakeLists.txt; not a test itself.
 * Single-threaded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <msgpack.h>

#include "plan.h"
#include "plan_fixture.h"
#include "retention.h"

#define KEY                                                                    \
    "\"prepared_plan_id\": \"plan:fixture/1\", \"graph_hash\": "               \
    "\"sha256:0f1e2d3c\""

static struct json_object *
to_json(const msgpack_object *o)
{
    struct json_object *j;
    char key[256];
    uint32_t i;

    switch (o->type) {
    case MSGPACK_OBJECT_BOOLEAN:
        return json_object_new_boolean(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        return json_object_new_uint64(o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return json_object_new_int64(o->via.i64);
    case MSGPACK_OBJECT_STR:
        return json_object_new_string_len(o->via.str.ptr, (int)o->via.str.size);
    case MSGPACK_OBJECT_ARRAY:
        j = json_object_new_array();
        for (i = 0; i < o->via.array.size; i++)
            json_object_array_add(j, to_json(&o->via.array.ptr[i]));
        return j;
    case MSGPACK_OBJECT_MAP:
        j = json_object_new_object();
        for (i = 0; i < o->via.map.size; i++) {
            const msgpack_object *k = &o->via.map.ptr[i].key;

            snprintf(key, sizeof(key), "%.*s", (int)k->via.str.size,
                     k->via.str.ptr);
            json_object_object_add(j, key, to_json(&o->via.map.ptr[i].val));
        }
        return j;
    default:
        return NULL; /* nil, and nothing else occurs in the fixtures */
    }
}

static void
write_file(const char *dir, const char *name, const char *ext, const char *buf,
           size_t len)
{
    char path[1024];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s%s", dir, name, ext);
    if ((f = fopen(path, "wb")) == NULL || fwrite(buf, 1, len, f) != len ||
        fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* name.msgpack and name.json when json is set, else name as given. */
static void
out(const char *dir, const char *name, const msgpack_object *o, int json)
{
    struct json_object *j;
    const char *text;
    char *line;
    size_t len;
    const char *buf = fx_pack(o, &len);

    write_file(dir, name, json ? ".msgpack" : "", buf, len);
    if (!json)
        return;
    j = to_json(o);
    text = json_object_to_json_string_ext(
        j, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
               JSON_C_TO_STRING_NOSLASHESCAPE);
    /* json-c leaves the final newline to the caller. */
    len = strlen(text);
    if ((line = malloc(len + 1)) == NULL)
        exit(1);
    memcpy(line, text, len);
    line[len] = '\n';
    write_file(dir, name, ".json", line, len + 1);
    free(line);
    json_object_put(j);
}

/* [a, b] or [a, b, c]. */
static msgpack_object *
triple(const msgpack_object *a, const msgpack_object *b,
       const msgpack_object *c)
{
    msgpack_object *o = fx_json("[0, 0, 0]");

    o->via.array.ptr[0] = *a;
    o->via.array.ptr[1] = *b;
    if (c != NULL)
        o->via.array.ptr[2] = *c;
    else
        o->via.array.size = 2;
    return o;
}

static void
die(const char *what, const struct proto_err *err)
{
    fprintf(stderr, "%s: %s: %s\n", what, err->path, err->message);
    exit(1);
}

/* The resolution of spec against plan, packed as a `retained` array. */
static msgpack_object *
resolved(const msgpack_object *plan, const msgpack_object *spec,
         struct plan **pp, struct retained_value **vals, size_t *n)
{
    struct retention_spec *s;
    struct proto_err err;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_object *o;
    struct plan *p;
    size_t i;

    if (plan_decode(plan, pp, &err) != 0)
        die("plan", &err);
    p = *pp;
    if (retention_spec_decode(spec, &s, &err) != 0)
        die("spec", &err);
    if (retention_resolve(p, s, vals, n, &err) != 0)
        die("resolve", &err);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, *n);
    for (i = 0; i < *n; i++)
        retention_value_encode(&(*vals)[i], &pk);
    o = fx_unpack(sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    retention_spec_free(s);
    return o;
}

int
main(int argc, char **argv)
{
    msgpack_object *plan, *act, *r5, *strided, *sv, *sd, *sc, *rb, *rbkv;
    msgpack_object *claimed;
    struct readback_request req;
    struct retained_value *v;
    struct proto_err err;
    struct readback r;
    struct plan *p;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    const char *data, *corpus;
    size_t n;

    if (argc != 3) {
        fprintf(stderr, "usage: %s DATA_DIR CORPUS_DIR\n", argv[0]);
        return 2;
    }
    data = argv[1];
    corpus = argv[2];

    plan = fx_fixture();
    sv = fx_json("{" KEY ", \"values\": [\"logits\", \"hidden1\", "
                 "\"hidden0\"]}");
    rb = fx_json("{" KEY ", \"value_id\": \"logits\", \"participant_index\": "
                 "2, \"output_layout\": {\"element_type\": \"f32\", "
                 "\"element_count\": 8}}");
    claimed = resolved(plan, sv, &p, &v, &n);
    out(data, "fixture", plan, 1);
    out(data, "retention", sv, 1);
    out(data, "retained", claimed, 1);
    out(data, "readback", rb, 1);
    if (retention_readback_decode(rb, &r, &err) != 0 ||
        retention_readback_check(&r, retention_find(v, n, r.value_id), &req,
                                 &err) != 0)
        die("readback", &err);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    retention_readback_encode(&req, &pk);
    out(data, "readback-request", fx_unpack(sb.data, sb.size), 1);
    msgpack_sbuffer_destroy(&sb);

    /* The fuzz seeds: each decoder alone, then [plan, spec, readback]. */
    act = fx_fixture();
    fx_set(act, "nodes[1].values[2].usage", "\"activations\"");
    fx_set(act, "nodes[1].values[3].usage", "\"activations\"");
    fx_set(act, "nodes[2].values[2].usage", "\"activations\"");
    sd = fx_json("{" KEY ", \"determinism_outputs\": true}");
    rbkv = fx_json("{" KEY ", \"value_id\": \"kv\", \"participant_index\": 0, "
                   "\"output_layout\": {\"element_type\": \"f16\", "
                   "\"element_count\": 2}}");
    sc = fx_json("{" KEY ", \"values\": [\"logits\", \"hidden1\", "
                 "\"hidden0\"], \"retained\": null}");
    *fx_at(sc, "retained") = *claimed;
    strided = fx_fixture();
    fx_set(strided, "nodes[1].values[1].tensor.layout.strided.byte_strides",
           "[9223372036854775808, 9223372036854775808]");
    r5 = fx_fixture();
    fx_set(r5, "nodes[2].values[2].storage.components[0].offset_bytes", "127");
    out(corpus, "plan-fixture.msgpack", plan, 0);
    out(corpus, "plan-strided-overflow.msgpack", strided, 0);
    out(corpus, "plan-empty.msgpack",
        fx_json("{\"prepared_plan_id\": \"p\", \"graph_hash\": \"\", "
                "\"nodes\": []}"),
        0);
    out(corpus, "spec-values.msgpack", sv, 0);
    out(corpus, "spec-determinism.msgpack", sd, 0);
    out(corpus, "readback.msgpack", rb, 0);
    out(corpus, "retained-values.msgpack", claimed, 0);
    out(corpus, "together-values.msgpack", triple(plan, sv, rb), 0);
    out(corpus, "together-determinism.msgpack", triple(act, sd, rbkv), 0);
    out(corpus, "together-claimed.msgpack", triple(plan, sc, rb), 0);
    out(corpus, "together-rule5.msgpack",
        triple(r5, fx_json("{" KEY ", \"values\": [\"hidden1\"]}"), rb), 0);
    out(corpus, "together-blocked-readback.msgpack",
        triple(act, fx_json("{" KEY ", \"values\": [\"kv\", \"scratch0\"]}"),
               rbkv),
        0);
    free(v);
    plan_free(p);
    fx_done();
    return 0;
}
