/*
 * check_receipt_json.c: receipts in the serde_json form. The shared
 * vectors' JSON files decode to the same struct as their msgpack files;
 * integers are exact to 2^64-1 and nothing beyond; floats, negatives,
 * strings and null are refused where an integer belongs; repeated keys are
 * refused although json-c itself would keep the last; unknown keys reach
 * extra as msgpack.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <msgpack.h>

#include "receipt_json.h"

#define VEC_DIR TEST_DATA_DIR "/vectors"

static struct json_object *vindex;
static size_t nvectors;

static char *
read_file(const char *name, size_t *len)
{
    char path[1024];
    FILE *f;
    char *buf;
    long n;

    snprintf(path, sizeof(path), "%s/%s", VEC_DIR, name);
    f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s: %s", path, strerror(errno));
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    ck_assert_int_ge(n, 0);
    rewind(f);
    buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static const char *
vector_file(size_t i, const char *form)
{
    struct json_object *v =
        json_object_array_get_idx(json_object_object_get(vindex, "vectors"), i);

    return json_object_get_string(
        json_object_object_get(json_object_object_get(v, "files"), form));
}

static int
same_str(const struct proto_str *a, const struct proto_str *b)
{
    return a->len == b->len &&
           (a->len == 0 || memcmp(a->ptr, b->ptr, a->len) == 0);
}

START_TEST(test_receipt_json_vector_equals_msgpack)
{
    struct receipt rj, rm;
    struct proto_err err;
    struct json_object *j;
    msgpack_unpacked up;
    char *text, *bin;
    size_t tlen, blen, off = 0;

    text = read_file(vector_file((size_t)_i, "json"), &tlen);
    bin = read_file(vector_file((size_t)_i, "named_msgpack"), &blen);
    ck_assert_int_eq(receipt_json_parse(text, tlen, &j, &err), 0);
    ck_assert_msg(receipt_decode_json(j, &rj, &err) == 0, "%s: %s", err.path,
                  err.message);
    msgpack_unpacked_init(&up);
    ck_assert_int_eq(msgpack_unpack_next(&up, bin, blen, &off),
                     MSGPACK_UNPACK_SUCCESS);
    ck_assert_int_eq(receipt_decode(&up.data, &rm, &err), 0);

    ck_assert_uint_eq(rj.schema_version, rm.schema_version);
    ck_assert_uint_eq(rj.requested_backend, rm.requested_backend);
    ck_assert_uint_eq(rj.executed_backend, rm.executed_backend);
    ck_assert(same_str(&rj.model_instance_id, &rm.model_instance_id));
    ck_assert(same_str(&rj.prepared_plan_id, &rm.prepared_plan_id));
    ck_assert(same_str(&rj.graph_hash, &rm.graph_hash));
    ck_assert(same_str(&rj.tuning_profile, &rm.tuning_profile));
    ck_assert(same_str(&rj.stop_reason, &rm.stop_reason));
    ck_assert_uint_eq(rj.counter_coverage, rm.counter_coverage);
    ck_assert_mem_eq(rj.counters, rm.counters, sizeof(rj.counters));
    ck_assert_mem_eq(rj.artifacts, rm.artifacts, sizeof(rj.artifacts));
    ck_assert_ptr_null(rj.extra);
    receipt_clear(&rj);
    receipt_clear(&rm);
    msgpack_unpacked_destroy(&up);
    json_object_put(j);
    free(text);
    free(bin);
}
END_TEST

/* A schema-2 receipt with decode_steps and extra top-level text spliced
 * in. */
static char *
receipt_text(const char *decode_steps, const char *more)
{
    static const char fmt[] =
        "{\"schema_version\":2,\"requested_backend\":\"cuda\","
        "\"executed_backend\":\"cuda\",\"model_instance_id\":\"m\","
        "\"prepared_plan_id\":\"p\",\"graph_hash\":\"g\","
        "\"tuning_profile\":\"t\",\"stop_reason\":\"eos\","
        "\"counter_coverage\":1023,\"counters\":{\"decode_steps\":%s,"
        "\"graph_launches\":1,\"compute_dispatches\":2,\"device_fences\":3,"
        "\"host_to_device_bytes\":4,\"device_to_host_bytes\":5,"
        "\"fallback_count\":0,\"hot_path_allocations\":7,"
        "\"compile_calls\":8,\"immutable_upload_bytes\":9},"
        "\"artifacts\":{\"temp_created_bytes\":10,\"temp_removed_bytes\":11,"
        "\"temp_retained_bytes\":12,\"temp_cleanup_failures\":13}%s}";
    size_t n = sizeof(fmt) + strlen(decode_steps) + strlen(more);
    char *t = malloc(n);

    ck_assert_ptr_nonnull(t);
    snprintf(t, n, fmt, decode_steps, more);
    return t;
}

/* Parses and decodes text; returns the first failing code. */
static int
parse_decode(const char *text, struct json_object **j, struct receipt *r,
             struct proto_err *err)
{
    int rc;

    memset(r, 0, sizeof(*r));
    proto_err_clear(err);
    rc = receipt_json_parse(text, strlen(text), j, err);
    if (rc != 0) {
        ck_assert_ptr_null(*j);
        return rc;
    }
    return receipt_decode_json(*j, r, err);
}

static const struct {
    const char *text;
    int want_rc;
    uint64_t want;
    const char *msg;
} int_cases[] = {
    { "0", 0, 0, NULL },
    { "18446744073709551615", 0, UINT64_MAX, NULL },
    { "9223372036854775807", 0, 9223372036854775807ull, NULL },
    { "9223372036854775808", 0, 9223372036854775808ull, NULL },
    { "18446744073709551616", PROTO_EINVALID, 0, "at most" },
    { "99999999999999999999999", PROTO_EINVALID, 0, "at most" },
    { "-1", PROTO_EINVALID, 0, "expected an unsigned integer, got -1" },
    { "-9223372036854775808", PROTO_EINVALID, 0, "expected an unsigned" },
    { "-9223372036854775809", PROTO_EINVALID, 0, "expected an unsigned" },
    { "1.0", PROTO_EINVALID, 0, "got a float" },
    { "1e3", PROTO_EINVALID, 0, "got a float" },
    { "0.5", PROTO_EINVALID, 0, "got a float" },
    { "\"5\"", PROTO_EINVALID, 0, "got a string" },
    { "null", PROTO_EINVALID, 0, "got nil" },
    { "true", PROTO_EINVALID, 0, "got a boolean" },
    { "[1]", PROTO_EINVALID, 0, "got an array" },
    { "{}", PROTO_EINVALID, 0, "got a map" },
};

START_TEST(test_receipt_json_integers)
{
    struct json_object *j = NULL;
    struct receipt r;
    struct proto_err err;
    char *text = receipt_text(int_cases[_i].text, "");
    int rc = parse_decode(text, &j, &r, &err);

    ck_assert_msg(rc == int_cases[_i].want_rc, "%s: rc %d (%s)",
                  int_cases[_i].text, rc, err.message);
    if (rc == 0) {
        ck_assert_uint_eq(r.counters[0], int_cases[_i].want);
        ck_assert_uint_eq(r.counters[9], 9);
    } else {
        ck_assert_str_eq(err.path, "counters.decode_steps");
        ck_assert_msg(strstr(err.message, int_cases[_i].msg) != NULL,
                      "message \"%s\"", err.message);
    }
    receipt_clear(&r);
    json_object_put(j);
    free(text);
}
END_TEST

static const struct {
    const char *text;
    int want_rc;
    const char *path;
} dup_cases[] = {
    { "{\"a\":1,\"a\":2}", PROTO_EINVALID, "a" },
    { "{\"a\":{\"b\":1,\"c\":2,\"b\":3}}", PROTO_EINVALID, "a.b" },
    { "[{},{\"x\":[1,{\"k\":1,\"k\":1}]}]", PROTO_EINVALID, "[1].x[1].k" },
    { "{\"a\":1,\"b\":{\"a\":2}}", 0, "" },
    { "{\"a\\\"\":1,\"a\":2}", 0, "" },
    /* Repeats spelled with escapes, as json-c decodes them. */
    { "{\"a\":1,\"\\u0061\":2}", PROTO_EINVALID, "a" },
    { "{\"\\/\":1,\"/\":2}", PROTO_EINVALID, "/" },
    { "{\"\\ud83d\\ude00\":1,\"\xf0\x9f\x98\x80\":2}", PROTO_EINVALID,
      "\xf0\x9f\x98\x80" },
    { "{\"\\ud800\":1,\"\\udc00\":2}", PROTO_EINVALID, "\xef\xbf\xbd" },
    { "{\"a\\u0000b\":1,\"a\\u0000c\":2}", PROTO_EINVALID, "a" },
    { "{\"\\u00e9\":1,\"\\u00E9x\":2,\"\\n\":3,\"\\t\":4}", 0, "" },
    { "[18446744073709551616]", PROTO_EINVALID, "[0]" },
    { "{\"a\":[0,1,18446744073709551616]}", PROTO_EINVALID, "a[2]" },
    { "{\"a\":[0.5e30, 1E400, -1]}", 0, "" },
    { "", PROTO_EMALFORMED, "" },
    { "{", PROTO_EMALFORMED, "" },
    { "{} x", PROTO_EMALFORMED, "" },
    { "{}{}", PROTO_EMALFORMED, "" },
    { "{\"a\":\"\xc3\x28\"}", PROTO_EMALFORMED, "" },
    { " \n{}\n ", 0, "" },
    { "7", 0, "" },
};

START_TEST(test_receipt_json_parse_rules)
{
    struct json_object *j = NULL;
    struct proto_err err;
    int rc;

    proto_err_clear(&err);
    rc = receipt_json_parse(dup_cases[_i].text, strlen(dup_cases[_i].text), &j,
                            &err);
    ck_assert_msg(rc == dup_cases[_i].want_rc, "%s: rc %d (%s)",
                  dup_cases[_i].text, rc, err.message);
    ck_assert_str_eq(err.path, dup_cases[_i].path);
    if (rc == 0)
        ck_assert_ptr_nonnull(j);
    else
        ck_assert_ptr_null(j);
    json_object_put(j);
}
END_TEST

START_TEST(test_receipt_json_rejects_duplicate_field)
{
    struct json_object *j = NULL;
    struct receipt r;
    struct proto_err err;
    char *text = receipt_text("1", ",\"graph_hash\":\"h\"");

    ck_assert_int_eq(parse_decode(text, &j, &r, &err), PROTO_EINVALID);
    ck_assert_str_eq(err.path, "graph_hash");
    ck_assert_str_eq(err.message, "duplicate key");
    free(text);
}
END_TEST

START_TEST(test_receipt_json_keeps_unknown_keys)
{
    struct json_object *j = NULL;
    struct receipt r;
    struct proto_err err;
    msgpack_unpacked up;
    const msgpack_object *v, *a;
    size_t off = 0;
    char *text = receipt_text(
        "1", ",\"flavour\":{\"a\":[1,-2,1.5,true,null,\"s\"]},\"n\":"
             "18446744073709551615");

    ck_assert_int_eq(parse_decode(text, &j, &r, &err), 0);
    ck_assert_ptr_nonnull(r.extra);
    msgpack_unpacked_init(&up);
    ck_assert_int_eq(msgpack_unpack_next(&up, r.extra, r.extra_len, &off),
                     MSGPACK_UNPACK_SUCCESS);
    ck_assert_uint_eq(up.data.via.map.size, 2);
    v = mpobj_map_get(&up.data, "flavour", NULL);
    ck_assert_ptr_nonnull(v);
    a = mpobj_map_get(v, "a", NULL);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(a->type, MSGPACK_OBJECT_ARRAY);
    ck_assert_uint_eq(a->via.array.size, 6);
    ck_assert_int_eq(a->via.array.ptr[0].type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    ck_assert_uint_eq(a->via.array.ptr[0].via.u64, 1);
    ck_assert_int_eq(a->via.array.ptr[1].type, MSGPACK_OBJECT_NEGATIVE_INTEGER);
    ck_assert_int_eq(a->via.array.ptr[1].via.i64, -2);
    ck_assert_int_eq(a->via.array.ptr[2].type, MSGPACK_OBJECT_FLOAT64);
    ck_assert_double_eq(a->via.array.ptr[2].via.f64, 1.5);
    ck_assert_int_eq(a->via.array.ptr[3].type, MSGPACK_OBJECT_BOOLEAN);
    ck_assert_int_eq(a->via.array.ptr[4].type, MSGPACK_OBJECT_NIL);
    ck_assert(mpobj_str_eq(&a->via.array.ptr[5], "s"));
    v = mpobj_map_get(&up.data, "n", NULL);
    ck_assert_ptr_nonnull(v);
    ck_assert_uint_eq(v->via.u64, UINT64_MAX);
    msgpack_unpacked_destroy(&up);
    receipt_clear(&r);
    json_object_put(j);
    free(text);
}
END_TEST

START_TEST(test_receipt_json_strings)
{
    struct json_object *j = NULL;
    struct receipt r;
    struct proto_err err;
    char *text = receipt_text("1", ",\"stop_reason\":\"a\\u00e9\\n\"");

    /* The template's own stop_reason is replaced by a repeat: refused. */
    ck_assert_int_eq(parse_decode(text, &j, &r, &err), PROTO_EINVALID);
    free(text);

    text = strdup("{\"schema_version\":1,\"requested_backend\":\"cpu\","
                  "\"executed_backend\":\"metal\",\"model_instance_id\":"
                  "\"a\\u00e9\\n\",\"prepared_plan_id\":\"\\ud83d\\ude00\","
                  "\"graph_hash\":\"\",\"stop_reason\":\"x\","
                  "\"counter_coverage\":64,\"counters\":[0,0,0,0,0,0,0,0,0,0],"
                  "\"artifacts\":[1,2,3,4]}");
    ck_assert_ptr_nonnull(text);
    ck_assert_int_eq(parse_decode(text, &j, &r, &err), 0);
    ck_assert_uint_eq(r.model_instance_id.len, 4);
    ck_assert_int_eq(memcmp(r.model_instance_id.ptr, "a\xc3\xa9\n", 4), 0);
    ck_assert_uint_eq(r.prepared_plan_id.len, 4);
    ck_assert_int_eq(memcmp(r.prepared_plan_id.ptr, "\xf0\x9f\x98\x80", 4), 0);
    ck_assert_uint_eq(r.executed_backend, RECEIPT_BACKEND_METAL);
    ck_assert_uint_eq(r.artifacts[3], 4);
    ck_assert_int_eq(receipt_status(&r), RECEIPT_STATUS_FALLBACK);
    receipt_clear(&r);
    json_object_put(j);
    free(text);
}
END_TEST

START_TEST(test_receipt_json_rejects_bad_bodies)
{
    struct json_object *j, *deep, *inner;
    struct receipt r;
    struct proto_err err;
    char *text;
    int i;

    ck_assert_int_eq(receipt_decode_json(NULL, &r, &err), PROTO_EINVALID);
    ck_assert_str_eq(err.path, "");
    j = json_object_new_string("x");
    ck_assert_int_eq(receipt_decode_json(j, &r, &err), PROTO_EINVALID);
    ck_assert_str_eq(err.path, "");
    json_object_put(j);

    /* A missing field, with the same message as in msgpack. */
    text = receipt_text("1", "");
    ck_assert_int_eq(parse_decode(text, &j, &r, &err), 0);
    receipt_clear(&r);
    json_object_object_del(json_object_object_get(j, "artifacts"),
                           "temp_removed_bytes");
    ck_assert_int_eq(receipt_decode_json(j, &r, &err), PROTO_EINVALID);
    ck_assert_str_eq(err.path, "artifacts.temp_removed_bytes");
    ck_assert_str_eq(err.message, "missing required field (schema 2)");

    /* A tree built by hand, deeper than any parse would allow. */
    deep = json_object_new_array();
    inner = deep;
    for (i = 0; i < 100; i++) {
        struct json_object *n = json_object_new_array();

        json_object_array_add(inner, n);
        inner = n;
    }
    json_object_object_add(j, "deep", deep);
    ck_assert_int_eq(receipt_decode_json(j, &r, &err), PROTO_EINVALID);
    ck_assert_ptr_null(r.extra);
    json_object_put(j);
    free(text);
}
END_TEST

static Suite *
receipt_json_suite(void)
{
    Suite *s = suite_create("receipt_json");
    TCase *tc;

    tc = tcase_create("vectors");
    tcase_add_loop_test(tc, test_receipt_json_vector_equals_msgpack, 0,
                        (int)nvectors);
    suite_add_tcase(s, tc);
    tc = tcase_create("integers");
    tcase_add_loop_test(tc, test_receipt_json_integers, 0,
                        (int)(sizeof(int_cases) / sizeof(int_cases[0])));
    suite_add_tcase(s, tc);
    tc = tcase_create("parse");
    tcase_add_loop_test(tc, test_receipt_json_parse_rules, 0,
                        (int)(sizeof(dup_cases) / sizeof(dup_cases[0])));
    tcase_add_test(tc, test_receipt_json_rejects_duplicate_field);
    suite_add_tcase(s, tc);
    tc = tcase_create("unknown_keys");
    tcase_add_test(tc, test_receipt_json_keeps_unknown_keys);
    suite_add_tcase(s, tc);
    tc = tcase_create("strings");
    tcase_add_test(tc, test_receipt_json_strings);
    suite_add_tcase(s, tc);
    tc = tcase_create("bodies");
    tcase_add_test(tc, test_receipt_json_rejects_bad_bodies);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr;
    int failed;

    vindex = json_object_from_file(VEC_DIR "/index.json");
    if (vindex == NULL) {
        fprintf(stderr, "cannot read %s/index.json\n", VEC_DIR);
        return 1;
    }
    nvectors =
        json_object_array_length(json_object_object_get(vindex, "vectors"));
    if (nvectors == 0)
        return 1;
    sr = srunner_create(receipt_json_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    json_object_put(vindex);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
