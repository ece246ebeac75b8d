/*
 * check_receipt.c: the receipt model against the shared vectors (every
 * vector in its named, compact and JSON forms), encode/decode round trips,
 * and every validation rule of PROTOCOL section 4 with its exact code and
 * path.
 *
 * The vectors' index.json is loaded once in main, before Check forks, so
 * every loop test sees it.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <msgpack.h>

#include "receipt.h"

#define VEC_DIR TEST_DATA_DIR "/vectors"

enum form { FORM_NAMED, FORM_COMPACT, FORM_JSON, FORM_COUNT };

static struct json_object *vindex;
static size_t nvectors;

static struct json_object *
vector_at(size_t i)
{
    return json_object_array_get_idx(json_object_object_get(vindex, "vectors"),
                                     i);
}

static struct json_object *
jget(struct json_object *o, const char *key)
{
    struct json_object *v = NULL;

    ck_assert_msg(json_object_object_get_ex(o, key, &v), "no key %s", key);
    return v;
}

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

/* The expected integer named key in o: from its decimal string when the
 * index gives one (values above 2^53-1), else from the JSON number. */
static uint64_t
expect_u64(struct json_object *o, const char *key)
{
    char dkey[128];
    struct json_object *d;

    snprintf(dkey, sizeof(dkey), "%s_decimal", key);
    if (json_object_object_get_ex(o, dkey, &d))
        return strtoull(json_object_get_string(d), NULL, 10);
    return json_object_get_uint64(jget(o, key));
}

static void
assert_str(const struct proto_str *got, struct json_object *want,
           const char *what)
{
    size_t n = (size_t)json_object_get_string_len(want);

    ck_assert_msg(got->len == n &&
                      memcmp(got->ptr, json_object_get_string(want), n) == 0,
                  "%s: got \"%.*s\", want \"%s\"", what, (int)got->len,
                  got->ptr, json_object_get_string(want));
}

/* Compares every field of r with the vector's "expected" object. */
static void
assert_expected(const struct receipt *r, struct json_object *v)
{
    struct json_object *e = jget(v, "expected"), *c, *cov;
    const struct receipt_counter *rc;
    unsigned i;
    uint64_t meaning, want;
    size_t k;
    int found;

    ck_assert_uint_eq(r->schema_version,
                      json_object_get_int(jget(e, "schema_version")));
    ck_assert_str_eq(receipt_backend_name(r->requested_backend),
                     json_object_get_string(jget(e, "requested_backend")));
    ck_assert_str_eq(receipt_backend_name(r->executed_backend),
                     json_object_get_string(jget(e, "executed_backend")));
    assert_str(&r->model_instance_id, jget(e, "model_instance_id"),
               "model_instance_id");
    assert_str(&r->prepared_plan_id, jget(e, "prepared_plan_id"),
               "prepared_plan_id");
    assert_str(&r->graph_hash, jget(e, "graph_hash"), "graph_hash");
    assert_str(&r->tuning_profile, jget(e, "tuning_profile"), "tuning_profile");
    assert_str(&r->stop_reason, jget(e, "stop_reason"), "stop_reason");
    ck_assert_uint_eq(r->counter_coverage, expect_u64(e, "counter_coverage"));
    for (i = 0; i < RECEIPT_NCOUNTERS; i++) {
        rc = &receipt_counters[i];
        /* Fields absent from "expected" (the schema-3 ones of an older
         * receipt) must read as 0. */
        if (!json_object_object_get_ex(
                e, i < RECEIPT_NCOUNTERS_V3 ? "counters" : "latency", &c) ||
            !json_object_object_get_ex(c, rc->field, NULL))
            want = 0;
        else
            want = expect_u64(c, rc->field);
        ck_assert_msg(r->counters[i] == want, "%s: got %llu, want %llu",
                      rc->path, (unsigned long long)r->counters[i],
                      (unsigned long long)want);
    }
    for (i = 0; i < RECEIPT_NARTIFACTS; i++)
        ck_assert_uint_eq(
            r->artifacts[i],
            expect_u64(jget(e, "artifacts"), receipt_artifact_names[i]));

    /* covered_fields names exactly the meaningful bits that are set. */
    cov = jget(v, "covered_fields");
    meaning = receipt_meaningful_bits(r->schema_version);
    for (i = 0; i < RECEIPT_NCOUNTERS; i++) {
        found = 0;
        for (k = 0; k < json_object_array_length(cov); k++)
            if (strcmp(
                    json_object_get_string(json_object_array_get_idx(cov, k)),
                    receipt_counters[i].path) == 0)
                found = 1;
        ck_assert_msg(
            found == ((meaning >> i) & 1 && (r->counter_coverage >> i) & 1),
            "%s: covered_fields says %d", receipt_counters[i].path, found);
    }
    ck_assert_int_eq(
        json_object_array_length(jget(v, "coverage_bits_without_meaning")),
        __builtin_popcountll(r->counter_coverage & ~meaning));
    ck_assert_int_eq(
        json_object_get_boolean(jget(v, "backend_matches_request")),
        receipt_status(r) != RECEIPT_STATUS_FALLBACK);
}

static const char *const form_keys[FORM_COUNT] = {
    "named_msgpack",
    "compact_msgpack",
    "json",
};

/*
 * Decodes vector i in one form into r. The bytes (or the JSON tree) that r
 * borrows are handed back through *keep / *jkeep for the caller to free.
 */
static int
decode_form(size_t i, enum form f, struct receipt *r, struct proto_err *err,
            char **keep, msgpack_unpacked *up, struct json_object **jkeep)
{
    struct json_object *v = vector_at(i);
    const char *file =
        json_object_get_string(jget(jget(v, "files"), form_keys[f]));
    size_t len, off = 0;
    char *buf = read_file(file, &len);

    *keep = buf;
    *jkeep = NULL;
    if (f == FORM_JSON) {
        *jkeep = json_tokener_parse(buf);
        ck_assert_ptr_nonnull(*jkeep);
        return receipt_decode_json(*jkeep, r, err);
    }
    ck_assert_int_eq(msgpack_unpack_next(up, buf, len, &off),
                     MSGPACK_UNPACK_SUCCESS);
    ck_assert_uint_eq(off, len);
    return receipt_decode(&up->data, r, err);
}

static void
check_vector_form(size_t i, enum form f)
{
    struct receipt r;
    struct proto_err err;
    msgpack_unpacked up;
    struct json_object *j;
    char *buf;
    int rc;

    msgpack_unpacked_init(&up);
    rc = decode_form(i, f, &r, &err, &buf, &up, &j);
    ck_assert_msg(rc == 0, "%s (%s): %s: %s",
                  json_object_get_string(jget(vector_at(i), "name")),
                  form_keys[f], err.path, err.message);
    assert_expected(&r, vector_at(i));
    ck_assert_ptr_null(r.extra);
    receipt_clear(&r);
    json_object_put(j);
    msgpack_unpacked_destroy(&up);
    free(buf);
}

START_TEST(test_receipt_decode_vector_named)
{
    check_vector_form((size_t)_i, FORM_NAMED);
}
END_TEST

START_TEST(test_receipt_decode_vector_compact)
{
    check_vector_form((size_t)_i, FORM_COMPACT);
}
END_TEST

START_TEST(test_receipt_decode_vector_json)
{
    check_vector_form((size_t)_i, FORM_JSON);
}
END_TEST

/* True when a and b hold the same receipt, strings compared by content. */
static void
assert_same(const struct receipt *a, const struct receipt *b)
{
#define SAME_STR(f)                                                            \
    ck_assert_msg(                                                             \
        a->f.len == b->f.len &&                                                \
            (a->f.len == 0 || memcmp(a->f.ptr, b->f.ptr, a->f.len) == 0),      \
        #f " differs")
    ck_assert_uint_eq(a->schema_version, b->schema_version);
    ck_assert_uint_eq(a->requested_backend, b->requested_backend);
    ck_assert_uint_eq(a->executed_backend, b->executed_backend);
    SAME_STR(model_instance_id);
    SAME_STR(prepared_plan_id);
    SAME_STR(graph_hash);
    SAME_STR(tuning_profile);
    SAME_STR(stop_reason);
#undef SAME_STR
    ck_assert_uint_eq(a->counter_coverage, b->counter_coverage);
    ck_assert_mem_eq(a->counters, b->counters, sizeof(a->counters));
    ck_assert_mem_eq(a->artifacts, b->artifacts, sizeof(a->artifacts));
    ck_assert_uint_eq(a->extra_len, b->extra_len);
    if (a->extra_len > 0)
        ck_assert_mem_eq(a->extra, b->extra, a->extra_len);
}

/* Encodes r, decodes the result into *out (which borrows *sb). */
static void
reencode(const struct receipt *r, msgpack_sbuffer *sb, msgpack_unpacked *up,
         struct receipt *out)
{
    msgpack_packer pk;
    struct proto_err err;
    size_t off = 0;
    int rc;

    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    ck_assert_int_eq(receipt_encode(r, &pk), 0);
    ck_assert_int_eq(msgpack_unpack_next(up, sb->data, sb->size, &off),
                     MSGPACK_UNPACK_SUCCESS);
    ck_assert_uint_eq(off, sb->size);
    ck_assert_int_eq(up->data.type, MSGPACK_OBJECT_MAP);
    rc = receipt_decode(&up->data, out, &err);
    ck_assert_msg(rc == 0, "re-decode: %s: %s", err.path, err.message);
}

START_TEST(test_receipt_encode_roundtrips_vectors)
{
    struct receipt r, r2;
    struct proto_err err;
    msgpack_unpacked up, up2;
    msgpack_sbuffer sb;
    struct json_object *j;
    char *buf;

    msgpack_unpacked_init(&up);
    msgpack_unpacked_init(&up2);
    ck_assert_int_eq(decode_form((size_t)_i / FORM_COUNT,
                                 (enum form)(_i % FORM_COUNT), &r, &err, &buf,
                                 &up, &j),
                     0);
    reencode(&r, &sb, &up2, &r2);
    assert_same(&r, &r2);
    assert_expected(&r2, vector_at((size_t)_i / FORM_COUNT));
    receipt_clear(&r);
    receipt_clear(&r2);
    msgpack_sbuffer_destroy(&sb);
    msgpack_unpacked_destroy(&up);
    msgpack_unpacked_destroy(&up2);
    json_object_put(j);
    free(buf);
}
END_TEST

/* rmp-serde writes declaration order and the smallest integer and string
 * forms, as msgpack-c does: encoding a named vector reproduces its bytes.
 * The schema-1 vectors are the exception: the runtime's compatibility test
 * builds them through a sorted map, so their keys are in byte order; they
 * are checked by the round trip instead. */
START_TEST(test_receipt_encode_matches_rmp_serde_named_bytes)
{
    struct receipt r;
    struct proto_err err;
    msgpack_unpacked up;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct json_object *j;
    char *buf, *named;
    size_t len;

    if (json_object_get_int(jget(vector_at((size_t)_i), "schema")) == 1)
        return;
    msgpack_unpacked_init(&up);
    ck_assert_int_eq(
        decode_form((size_t)_i, FORM_COMPACT, &r, &err, &buf, &up, &j), 0);
    named =
        read_file(json_object_get_string(jget(
                      jget(vector_at((size_t)_i), "files"), "named_msgpack")),
                  &len);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    ck_assert_int_eq(receipt_encode(&r, &pk), 0);
    ck_assert_uint_eq(sb.size, len);
    ck_assert_mem_eq(sb.data, named, len);
    msgpack_sbuffer_destroy(&sb);
    msgpack_unpacked_destroy(&up);
    receipt_clear(&r);
    free(named);
    free(buf);
}
END_TEST

static Suite *
receipt_suite(void)
{
    Suite *s = suite_create("receipt");
    TCase *tc;
    int n = (int)nvectors;

    tc = tcase_create("vectors_named");
    tcase_add_loop_test(tc, test_receipt_decode_vector_named, 0, n);
    suite_add_tcase(s, tc);
    tc = tcase_create("vectors_compact");
    tcase_add_loop_test(tc, test_receipt_decode_vector_compact, 0, n);
    suite_add_tcase(s, tc);
    tc = tcase_create("vectors_json");
    tcase_add_loop_test(tc, test_receipt_decode_vector_json, 0, n);
    suite_add_tcase(s, tc);
    tc = tcase_create("roundtrip");
    tcase_add_loop_test(tc, test_receipt_encode_roundtrips_vectors, 0,
                        n * FORM_COUNT);
    suite_add_tcase(s, tc);
    tc = tcase_create("encode_bytes");
    tcase_add_loop_test(tc, test_receipt_encode_matches_rmp_serde_named_bytes,
                        0, n);
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
    if (nvectors == 0) {
        fprintf(stderr, "index.json lists no vectors\n");
        return 1;
    }
    sr = srunner_create(receipt_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    json_object_put(vindex);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
