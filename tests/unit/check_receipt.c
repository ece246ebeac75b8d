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

#include "mpcheck.h"
#include "receipt.h"
#include "receipt_json.h"

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

/* The bytes of vector i in form f (its file in the index); *len set. */
static char *
read_form(size_t i, enum form f, size_t *len)
{
    return read_file(
        json_object_get_string(jget(jget(vector_at(i), "files"), form_keys[f])),
        len);
}

/*
 * Decodes vector i in one form into r. The bytes (or the JSON tree) that r
 * borrows are handed back through *keep / *jkeep for the caller to free.
 */
static int
decode_form(size_t i, enum form f, struct receipt *r, struct proto_err *err,
            char **keep, msgpack_unpacked *up, struct json_object **jkeep)
{
    size_t len, off = 0;
    char *buf = read_form(i, f, &len);

    *keep = buf;
    *jkeep = NULL;
    if (f == FORM_JSON) {
        ck_assert_int_eq(receipt_json_parse(buf, len, jkeep, err), 0);
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

static int
same_str(const struct proto_str *a, const struct proto_str *b)
{
    return a->len == b->len &&
           (a->len == 0 || memcmp(a->ptr, b->ptr, a->len) == 0);
}

/* True when a and b are the same receipt, field by field. */
static int
same_receipt(const struct receipt *a, const struct receipt *b)
{
    return a->schema_version == b->schema_version &&
           a->requested_backend == b->requested_backend &&
           a->executed_backend == b->executed_backend &&
           same_str(&a->model_instance_id, &b->model_instance_id) &&
           same_str(&a->prepared_plan_id, &b->prepared_plan_id) &&
           same_str(&a->graph_hash, &b->graph_hash) &&
           same_str(&a->tuning_profile, &b->tuning_profile) &&
           same_str(&a->stop_reason, &b->stop_reason) &&
           a->counter_coverage == b->counter_coverage &&
           memcmp(a->counters, b->counters, sizeof(a->counters)) == 0 &&
           memcmp(a->artifacts, b->artifacts, sizeof(a->artifacts)) == 0 &&
           a->extra_len == b->extra_len &&
           (a->extra_len == 0 || memcmp(a->extra, b->extra, a->extra_len) == 0);
}

/*
 * receipt_decode_fast on buf[0..len) against receipt_decode: when the
 * fast path takes the bytes, it takes exactly the one object mpcheck sees
 * there, receipt_decode accepts it too, and both give the same receipt
 * with no extra. Returns whether the fast path took it.
 */
static int
fast_matches_slow(const char *buf, size_t len)
{
    struct receipt fast, slow;
    struct proto_err err;
    msgpack_unpacked up;
    size_t used = receipt_decode_fast(buf, len, &fast), off = 0;

    /* Called for every mutation of every vector: plain comparisons, since
     * each passing ck_assert costs Check a write(2). */
    if (used == 0) {
        if (fast.schema_version != 0)
            ck_abort_msg("a refused receipt left schema_version %u",
                         (unsigned)fast.schema_version);
        return 0;
    }
    if (used != mpcheck_skip(buf, len))
        ck_abort_msg("the fast path took %zu bytes, the object has %zu", used,
                     mpcheck_skip(buf, len));
    if (fast.extra != NULL)
        ck_abort_msg("the fast path kept unknown keys");
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, buf, used, &off) != MSGPACK_UNPACK_SUCCESS)
        ck_abort_msg("msgpack-c does not unpack what the fast path took");
    if (receipt_decode(&up.data, &slow, &err) != 0)
        ck_abort_msg("the fast path took what receipt_decode refuses: %s: %s",
                     err.path, err.message);
    if (!same_receipt(&fast, &slow))
        ck_abort_msg("the fast path and receipt_decode differ");
    receipt_clear(&slow);
    msgpack_unpacked_destroy(&up);
    return 1;
}

/* Every changed byte (to four values) and every cut of buf: what the
 * fast path takes of them, receipt_decode takes alike. Returns how many
 * it took. */
static size_t
mutations_match(char *buf, size_t len)
{
    static const unsigned char values[] = { 0x00, 0x7f, 0xa3, 0xff };
    size_t i, k, taken = 0;

    for (i = 0; i < len; i++) {
        unsigned char was = (unsigned char)buf[i];

        for (k = 0; k < sizeof(values); k++) {
            buf[i] = (char)values[k];
            taken += (size_t)fast_matches_slow(buf, len);
        }
        buf[i] = (char)was;
        taken += (size_t)fast_matches_slow(buf, i);
    }
    return taken;
}

/* Every vector, in both its named and its compact (array) form, takes the
 * fast path and decodes to its expected values, as receipt_decode does;
 * then the mutations of both forms (mutations_match). */
START_TEST(test_receipt_decode_fast_path_matches)
{
    struct json_object *v = vector_at((size_t)_i);
    const char *named =
        json_object_get_string(jget(jget(v, "files"), "named_msgpack"));
    const char *compact =
        json_object_get_string(jget(jget(v, "files"), "compact_msgpack"));
    struct receipt r;
    size_t len, clen;
    char *buf = read_file(named, &len), *cbuf = read_file(compact, &clen);

    ck_assert_uint_eq(receipt_decode_fast(buf, len, &r), len);
    assert_expected(&r, v);
    ck_assert_int_eq(fast_matches_slow(buf, len), 1);
    /* The compact form (an array, or a map where the producer writes
     * schema 1 as one there too). */
    ck_assert_uint_eq(receipt_decode_fast(cbuf, clen, &r), clen);
    assert_expected(&r, v);
    ck_assert_int_eq(fast_matches_slow(cbuf, clen), 1);
    /* Changed string bytes and counter values are still receipts. */
    ck_assert_uint_gt(mutations_match(buf, len), 0);
    ck_assert_uint_gt(mutations_match(cbuf, clen), 0);
    free(buf);
    free(cbuf);
}
END_TEST

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
    named = read_form((size_t)_i, FORM_NAMED, &len);
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

/* The compact form likewise: decoding a vector's named bytes and encoding
 * them with receipt_encode_compact reproduces the producer's compact
 * bytes (rmp-serde's to_vec), except for the schema-1 vectors that the
 * runtime wrote as a map there too; and those decode to the receipt
 * again. */
START_TEST(test_receipt_encode_compact_matches_rmp_serde_bytes)
{
    struct receipt r, again;
    struct proto_err err;
    msgpack_unpacked up;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct json_object *j;
    char *buf, *compact;
    size_t len;

    msgpack_unpacked_init(&up);
    ck_assert_int_eq(
        decode_form((size_t)_i, FORM_NAMED, &r, &err, &buf, &up, &j), 0);
    compact = read_form((size_t)_i, FORM_COMPACT, &len);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    ck_assert_int_eq(receipt_encode_compact(&r, &pk), 0);
    ck_assert((sb.data[0] & 0xf0) == 0x90 || (unsigned char)sb.data[0] == 0xdc);
    if (((unsigned char)compact[0] & 0xf0) == 0x90 ||
        (unsigned char)compact[0] == 0xdc) {
        ck_assert_uint_eq(sb.size, len);
        ck_assert_mem_eq(sb.data, compact, len);
    }
    ck_assert_uint_eq(receipt_decode_fast(sb.data, sb.size, &again), sb.size);
    ck_assert(same_receipt(&again, &r));
    msgpack_sbuffer_destroy(&sb);
    msgpack_unpacked_destroy(&up);
    receipt_clear(&r);
    free(compact);
    free(buf);
}
END_TEST

/* What the array form cannot hold goes in the map form: a receipt with
 * unknown keys keeps them, a schema-1 receipt its tuning_profile. */
START_TEST(test_receipt_encode_compact_falls_back_to_the_map)
{
    struct receipt r, again;
    struct proto_err err;
    msgpack_unpacked up, up2;
    msgpack_sbuffer sb, xb;
    msgpack_packer pk, xp;
    struct json_object *j;
    char *buf;
    size_t off, i;
    int k;

    for (k = 0; k < 2; k++) {
        /* The first vector of schema 1 for its tuning_profile, of schema 3
         * for an unknown key. */
        for (i = 0; json_object_get_int(jget(vector_at(i), "schema")) !=
                    (k == 0 ? 1 : 3);
             i++)
            ;
        msgpack_unpacked_init(&up);
        ck_assert_int_eq(decode_form(i, FORM_NAMED, &r, &err, &buf, &up, &j),
                         0);
        msgpack_sbuffer_init(&xb);
        if (k == 0) {
            r.tuning_profile.ptr = "t";
            r.tuning_profile.len = 1;
        } else {
            ck_assert_ptr_null(r.extra);
            msgpack_packer_init(&xp, &xb, msgpack_sbuffer_write);
            msgpack_pack_map(&xp, 1);
            msgpack_pack_str_with_body(&xp, "flavour", 7);
            msgpack_pack_uint8(&xp, 1);
            r.extra = malloc(xb.size);
            ck_assert_ptr_nonnull(r.extra);
            memcpy(r.extra, xb.data, xb.size);
            r.extra_len = xb.size;
        }
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        ck_assert_int_eq(receipt_encode_compact(&r, &pk), 0);
        ck_assert_uint_eq((unsigned char)sb.data[0] & 0xf0, 0x80);
        msgpack_unpacked_init(&up2);
        off = 0;
        ck_assert_int_eq(msgpack_unpack_next(&up2, sb.data, sb.size, &off),
                         MSGPACK_UNPACK_SUCCESS);
        ck_assert_int_eq(receipt_decode(&up2.data, &again, &err), 0);
        ck_assert(same_receipt(&again, &r));
        if (k == 0)
            ck_assert_uint_eq(again.tuning_profile.len, 1);
        else
            ck_assert_ptr_nonnull(again.extra);
        receipt_clear(&again);
        receipt_clear(&r);
        msgpack_unpacked_destroy(&up2);
        msgpack_unpacked_destroy(&up);
        msgpack_sbuffer_destroy(&sb);
        msgpack_sbuffer_destroy(&xb);
        json_object_put(j);
        free(buf);
    }
}
END_TEST

/* Counters of every width msgpack has, at each edge, survive encoding:
 * receipt_encode builds the u64 maps' bytes itself (pack_u64_map). */
START_TEST(test_receipt_encode_u64_widths_roundtrip)
{
    static const uint64_t edges[] = { 0,
                                      1,
                                      127,
                                      128,
                                      255,
                                      256,
                                      65535,
                                      65536,
                                      4294967295ull,
                                      4294967296ull,
                                      0x0102030405060708ull,
                                      UINT64_MAX };
    const size_t ne = sizeof(edges) / sizeof(edges[0]);
    struct receipt r, r2;
    struct proto_err err;
    msgpack_unpacked up, up2;
    msgpack_sbuffer sb;
    struct json_object *j;
    char *buf;
    size_t k, shift;

    msgpack_unpacked_init(&up);
    ck_assert_int_eq(
        decode_form((size_t)_i, FORM_COMPACT, &r, &err, &buf, &up, &j), 0);
    for (shift = 0; shift < ne; shift++) {
        for (k = 0; k < (r.schema_version == 3 ? RECEIPT_NCOUNTERS
                                               : RECEIPT_NCOUNTERS_V2);
             k++)
            r.counters[k] = edges[(k + shift) % ne];
        for (k = 0; k < RECEIPT_NARTIFACTS; k++)
            r.artifacts[k] = edges[(k + shift + 3) % ne];
        msgpack_unpacked_init(&up2);
        reencode(&r, &sb, &up2, &r2);
        assert_same(&r, &r2);
        receipt_clear(&r2);
        msgpack_sbuffer_destroy(&sb);
        msgpack_unpacked_destroy(&up2);
    }
    receipt_clear(&r);
    msgpack_unpacked_destroy(&up);
    json_object_put(j);
    free(buf);
}
END_TEST

/*
 * A receipt builder for the rule tests: packs a valid receipt of a schema,
 * with the top level and the nested structs each in map or array form, and
 * applies one mutation to one field on the way (drop it, replace its value
 * with raw bytes, repeat its key, add an unknown key, or give an array a
 * different number of elements). The layouts are written here again from
 * PROTOCOL section 4, independently of receipt.c.
 */
enum action { M_NONE, M_OMIT, M_RAW, M_DUP, M_EXTRA, M_COUNT };

struct mut {
    enum action action;
    const char *path; /* the field's dotted path; the struct's for M_EXTRA
                         and M_COUNT ("" is the top level) */
    const char *raw;  /* M_RAW, M_EXTRA: the value's msgpack bytes */
    size_t rawlen;
    const char *key; /* M_EXTRA: the unknown key */
    unsigned count;  /* M_COUNT */
};

static const char *const t_top[] = {
    "schema_version",    "requested_backend", "executed_backend",
    "model_instance_id", "prepared_plan_id",  "graph_hash",
    "tuning_profile",    "stop_reason",       "counter_coverage",
    "counters",          "latency",           "artifacts",
};

static const char *const t_counters[] = {
    "decode_steps",
    "graph_launches",
    "compute_dispatches",
    "device_fences",
    "host_to_device_bytes",
    "device_to_host_bytes",
    "fallback_count",
    "hot_path_allocations",
    "compile_calls",
    "immutable_upload_bytes",
    "submitted_prefill_tokens",
    "committed_prefill_tokens",
    "cached_prefill_tokens",
    "queued_requests",
    "admitted_requests",
    "cow_copies",
    "evictions",
    "unique_freed_pages",
    "pool_high_water_bytes",
    "cancellations",
    "graph_bucket_tokens",
    "graph_padding_tokens",
    "rebuild_outcomes",
};

static const char *const t_latency[] = {
    "queue_delay_us",
    "time_to_first_token_us",
    "inter_token_latency_us",
};

static const char *const t_artifacts[] = {
    "temp_created_bytes",
    "temp_removed_bytes",
    "temp_retained_bytes",
    "temp_cleanup_failures",
};

/* Top-level names of a schema, in declaration order. */
static unsigned
top_fields(unsigned schema, const char **out)
{
    unsigned i, n = 0;

    for (i = 0; i < 12; i++) {
        if (schema == 1 && i == 6)
            continue;
        if (schema < 3 && i == 10)
            continue;
        out[n++] = t_top[i];
    }
    return n;
}

struct build {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    unsigned schema;
    int top_map;
    int nested_map;
    const struct mut *m;
};

static void
pk_cstr(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

static int
path_is(const char *prefix, const char *name, const char *path)
{
    size_t n = strlen(prefix);

    return path != NULL && strncmp(path, prefix, n) == 0 &&
           strcmp(path + n, name) == 0;
}

static void emit_struct(struct build *b, const char *spath,
                        const char *const *names, unsigned n, int is_map);

/* Packs the valid default value of the field called name in struct spath. */
static void
emit_default(struct build *b, const char *spath, const char *name, unsigned idx)
{
    if (spath[0] != '\0') {
        if (strcmp(spath, "latency") == 0)
            msgpack_pack_uint64(&b->pk, 100 + idx);
        else if (strcmp(spath, "artifacts") == 0)
            msgpack_pack_uint64(&b->pk, 200 + idx);
        else
            msgpack_pack_uint64(&b->pk, idx + 1);
        return;
    }
    if (strcmp(name, "schema_version") == 0)
        msgpack_pack_uint16(&b->pk, (uint16_t)b->schema);
    else if (strcmp(name, "requested_backend") == 0 ||
             strcmp(name, "executed_backend") == 0)
        pk_cstr(&b->pk, "cuda");
    else if (strcmp(name, "model_instance_id") == 0)
        pk_cstr(&b->pk, "model-a");
    else if (strcmp(name, "prepared_plan_id") == 0)
        pk_cstr(&b->pk, "plan-a");
    else if (strcmp(name, "graph_hash") == 0)
        pk_cstr(&b->pk, "g");
    else if (strcmp(name, "tuning_profile") == 0)
        pk_cstr(&b->pk, "tp");
    else if (strcmp(name, "stop_reason") == 0)
        pk_cstr(&b->pk, "eos");
    else if (strcmp(name, "counter_coverage") == 0)
        msgpack_pack_uint64(&b->pk, 0x7f);
    else if (strcmp(name, "counters") == 0)
        emit_struct(b, "counters", t_counters, b->schema == 3 ? 23 : 10,
                    b->nested_map);
    else if (strcmp(name, "latency") == 0)
        emit_struct(b, "latency", t_latency, 3, b->nested_map);
    else if (strcmp(name, "artifacts") == 0)
        emit_struct(b, "artifacts", t_artifacts, 4, b->nested_map);
    else
        ck_abort_msg("no default for %s", name);
}

static void
emit_value(struct build *b, const char *spath, const char *prefix,
           const char *name, unsigned idx)
{
    if (b->m->action == M_RAW && path_is(prefix, name, b->m->path))
        msgpack_sbuffer_write(&b->sb, b->m->raw, b->m->rawlen);
    else
        emit_default(b, spath, name, idx);
}

static void
emit_struct(struct build *b, const char *spath, const char *const *names,
            unsigned n, int is_map)
{
    const struct mut *m = b->m;
    char prefix[64];
    unsigned i, out = n;

    snprintf(prefix, sizeof(prefix), "%s%s", spath, spath[0] ? "." : "");
    if (!is_map) {
        if (m->action == M_COUNT && strcmp(m->path, spath) == 0)
            out = m->count;
        msgpack_pack_array(&b->pk, out);
        for (i = 0; i < out; i++) {
            if (i < n)
                emit_value(b, spath, prefix, names[i], i);
            else
                msgpack_pack_uint64(&b->pk, 0);
        }
        return;
    }
    for (i = 0; i < n; i++) {
        if (m->action == M_OMIT && path_is(prefix, names[i], m->path))
            out--;
        if (m->action == M_DUP && path_is(prefix, names[i], m->path))
            out++;
    }
    if (m->action == M_EXTRA && strcmp(m->path, spath) == 0)
        out++;
    msgpack_pack_map(&b->pk, out);
    for (i = 0; i < n; i++) {
        if (m->action == M_OMIT && path_is(prefix, names[i], m->path))
            continue;
        pk_cstr(&b->pk, names[i]);
        emit_value(b, spath, prefix, names[i], i);
        if (m->action == M_DUP && path_is(prefix, names[i], m->path)) {
            pk_cstr(&b->pk, names[i]);
            emit_value(b, spath, prefix, names[i], i);
        }
    }
    if (m->action == M_EXTRA && strcmp(m->path, spath) == 0) {
        pk_cstr(&b->pk, m->key);
        msgpack_sbuffer_write(&b->sb, m->raw, m->rawlen);
    }
}

/* Builds a receipt into b->sb (the caller destroys it). */
static void
build(struct build *b, unsigned schema, int top_map, int nested_map,
      const struct mut *m)
{
    static const struct mut none = { M_NONE, NULL, NULL, 0, NULL, 0 };
    const char *names[12];
    unsigned n = top_fields(schema, names);

    msgpack_sbuffer_init(&b->sb);
    msgpack_packer_init(&b->pk, &b->sb, msgpack_sbuffer_write);
    b->schema = schema;
    b->top_map = top_map;
    b->nested_map = nested_map;
    b->m = m != NULL ? m : &none;
    emit_struct(b, "", names, n, top_map);
}

/* Builds, unpacks and decodes; returns the code. r borrows *up. */
static int
build_decode(unsigned schema, int top_map, int nested_map, const struct mut *m,
             msgpack_unpacked *up, struct build *b, struct receipt *r,
             struct proto_err *err)
{
    size_t off = 0;

    build(b, schema, top_map, nested_map, m);
    ck_assert_int_eq(msgpack_unpack_next(up, b->sb.data, b->sb.size, &off),
                     MSGPACK_UNPACK_SUCCESS);
    ck_assert_uint_eq(off, b->sb.size);
    proto_err_clear(err);
    return receipt_decode(&up->data, r, err);
}

/* The u64 at a dotted path of r, by the coverage table and artifacts. */
static int
get_u64(const struct receipt *r, const char *path, uint64_t *v)
{
    unsigned i;

    for (i = 0; i < RECEIPT_NCOUNTERS; i++)
        if (strcmp(receipt_counters[i].path, path) == 0) {
            *v = r->counters[i];
            return 1;
        }
    for (i = 0; i < RECEIPT_NARTIFACTS; i++)
        if (strncmp(path, "artifacts.", 10) == 0 &&
            strcmp(path + 10, receipt_artifact_names[i]) == 0) {
            *v = r->artifacts[i];
            return 1;
        }
    if (strcmp(path, "counter_coverage") == 0) {
        *v = r->counter_coverage;
        return 1;
    }
    if (strcmp(path, "schema_version") == 0) {
        *v = r->schema_version;
        return 1;
    }
    return 0;
}

static const struct proto_str *
get_str(const struct receipt *r, const char *path)
{
    if (strcmp(path, "model_instance_id") == 0)
        return &r->model_instance_id;
    if (strcmp(path, "prepared_plan_id") == 0)
        return &r->prepared_plan_id;
    if (strcmp(path, "graph_hash") == 0)
        return &r->graph_hash;
    if (strcmp(path, "tuning_profile") == 0)
        return &r->tuning_profile;
    if (strcmp(path, "stop_reason") == 0)
        return &r->stop_reason;
    return NULL;
}

/*
 * One generated rule case. The table is built in main (before Check
 * forks), from the field list below, so adding a field to the protocol
 * means adding one line there.
 */
enum check { CHK_NONE, CHK_U64, CHK_STR, CHK_BACKEND };

struct rcase {
    char name[128];
    unsigned schema;
    int top_map, nested_map;
    struct mut m;
    char *raw; /* owned */
    int want_rc;
    char want_path[64];
    const char *want_msg; /* a substring of the message, or NULL */
    enum check check;
    uint64_t want_u64;
    const char *want_str;
    size_t want_len;
};

static struct rcase *rcases;
static size_t nrcases, caprcases;

static struct rcase *
add_case(unsigned schema, int top_map, int nested_map, enum action a,
         const char *path, const char *raw, size_t rawlen, int want_rc,
         const char *want_path)
{
    struct rcase *c;

    if (nrcases == caprcases) {
        caprcases = caprcases ? caprcases * 2 : 256;
        rcases = realloc(rcases, caprcases * sizeof(*rcases));
        if (rcases == NULL)
            abort();
    }
    c = &rcases[nrcases++];
    memset(c, 0, sizeof(*c));
    c->schema = schema;
    c->top_map = top_map;
    c->nested_map = nested_map;
    c->m.action = a;
    c->m.path = path;
    if (raw != NULL) {
        c->raw = malloc(rawlen ? rawlen : 1);
        if (c->raw == NULL)
            abort();
        memcpy(c->raw, raw, rawlen);
    }
    c->m.raw = c->raw;
    c->m.rawlen = rawlen;
    c->want_rc = want_rc;
    snprintf(c->want_path, sizeof(c->want_path), "%s", want_path);
    snprintf(
        c->name, sizeof(c->name), "schema %u %s/%s %s %s", schema,
        top_map ? "map" : "array", nested_map ? "map" : "array",
        (const char *[]){ "none", "omit", "raw", "dup", "extra", "count" }[a],
        path ? path : "");
    return c;
}

enum kind { K_SCHEMA, K_BACKEND, K_ID, K_TUNING, K_U64, K_STRUCT };

struct tfield {
    const char *path;
    enum kind kind;
    unsigned min_schema;
    int required; /* in a map */
};

static struct tfield tfields[64];
static unsigned ntfields;

static void
add_tfield(const char *path, enum kind k, unsigned min_schema, int required)
{
    tfields[ntfields].path = path;
    tfields[ntfields].kind = k;
    tfields[ntfields].min_schema = min_schema;
    tfields[ntfields].required = required;
    ntfields++;
}

static void
init_tfields(void)
{
    static char paths[40][64];
    unsigned i, np = 0;

    add_tfield("schema_version", K_SCHEMA, 1, 1);
    add_tfield("requested_backend", K_BACKEND, 1, 1);
    add_tfield("executed_backend", K_BACKEND, 1, 1);
    add_tfield("model_instance_id", K_ID, 1, 1);
    add_tfield("prepared_plan_id", K_ID, 1, 1);
    add_tfield("graph_hash", K_ID, 1, 1);
    add_tfield("tuning_profile", K_TUNING, 2, 0);
    add_tfield("stop_reason", K_ID, 1, 1);
    add_tfield("counter_coverage", K_U64, 1, 1);
    add_tfield("counters", K_STRUCT, 1, 1);
    add_tfield("latency", K_STRUCT, 3, 0);
    add_tfield("artifacts", K_STRUCT, 1, 1);
    for (i = 0; i < 23; i++) {
        snprintf(paths[np], sizeof(paths[np]), "counters.%s", t_counters[i]);
        add_tfield(paths[np++], K_U64, i < 10 ? 1 : 3, i < 10);
    }
    for (i = 0; i < 3; i++) {
        snprintf(paths[np], sizeof(paths[np]), "latency.%s", t_latency[i]);
        add_tfield(paths[np++], K_U64, 3, 0);
    }
    for (i = 0; i < 4; i++) {
        snprintf(paths[np], sizeof(paths[np]), "artifacts.%s", t_artifacts[i]);
        add_tfield(paths[np++], K_U64, 1, 1);
    }
}

/* Packs a str of n bytes of 'a' into a fresh buffer. */
static char *
long_str(size_t n, size_t *len)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    char *body = malloc(n + 1);

    if (body == NULL)
        abort();
    memset(body, 'a', n);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_str(&pk, n);
    msgpack_pack_str_body(&pk, body, n);
    free(body);
    *len = sb.size;
    return msgpack_sbuffer_release(&sb);
}

#define RAW(s) s, sizeof(s) - 1

/* The rule cases for one field in one schema and one pair of forms. */
static void
gen_field(const struct tfield *f, unsigned s, int tm, int nm, int full)
{
    int nested = strchr(f->path, '.') != NULL;
    int in_map = nested ? nm : tm;
    struct rcase *c;
    char *big;
    size_t len;

    /* Every field: a value of another type, and nil. */
    if (f->kind == K_U64 || f->kind == K_SCHEMA)
        c = add_case(s, tm, nm, M_RAW, f->path, RAW("\xa1x"), PROTO_EINVALID,
                     f->path);
    else
        c = add_case(s, tm, nm, M_RAW, f->path, RAW("\x01"), PROTO_EINVALID,
                     f->path);
    c->want_msg = "expected";
    add_case(s, tm, nm, M_RAW, f->path, RAW("\xc0"), PROTO_EINVALID, f->path);
    add_case(s, tm, nm, M_RAW, f->path, RAW("\xc3"), PROTO_EINVALID, f->path);
    if (f->kind != K_STRUCT)
        add_case(s, tm, nm, M_RAW, f->path, RAW("\x91\x01"), PROTO_EINVALID,
                 f->path);

    if (in_map) {
        c = add_case(s, tm, nm, M_OMIT, f->path, NULL, 0,
                     f->required ? PROTO_EINVALID : 0,
                     f->required ? f->path : "");
        if (f->required)
            c->want_msg = "missing required field";
        else if (f->kind == K_U64) {
            c->check = CHK_U64;
            c->want_u64 = 0;
        } else if (f->kind == K_TUNING) {
            c->check = CHK_STR;
            c->want_str = "";
        }
        c = add_case(s, tm, nm, M_DUP, f->path, NULL, 0, PROTO_EINVALID,
                     f->path);
        c->want_msg = "duplicate key";
    }
    /* With the nested structs in the other form than their parent, the
     * cases above show that paths and presence rules still hold; the value
     * rules below do not depend on the form and run once per form. */
    if (!full)
        return;

    switch (f->kind) {
    case K_U64:
        /* Edge values, in every integer form msgpack has. */
        c = add_case(s, tm, nm, M_RAW, f->path, RAW("\x00"), 0, "");
        c->check = CHK_U64;
        c->want_u64 = 0;
        c = add_case(s, tm, nm, M_RAW, f->path,
                     RAW("\xcf\xff\xff\xff\xff\xff\xff\xff\xff"), 0, "");
        c->check = CHK_U64;
        c->want_u64 = UINT64_MAX;
        c = add_case(s, tm, nm, M_RAW, f->path,
                     RAW("\xd3\x00\x00\x00\x00\x00\x00\x00\x07"), 0, "");
        c->check = CHK_U64;
        c->want_u64 = 7;
        c = add_case(s, tm, nm, M_RAW, f->path, RAW("\xd0\x05"), 0, "");
        c->check = CHK_U64;
        c->want_u64 = 5;
        c = add_case(s, tm, nm, M_RAW, f->path, RAW("\xcd\x01\x00"), 0, "");
        c->check = CHK_U64;
        c->want_u64 = 256;
        c = add_case(s, tm, nm, M_RAW, f->path, RAW("\xff"), PROTO_EINVALID,
                     f->path);
        c->want_msg = "expected an unsigned integer, got -1";
        add_case(s, tm, nm, M_RAW, f->path, RAW("\xd0\x80"), PROTO_EINVALID,
                 f->path);
        add_case(s, tm, nm, M_RAW, f->path,
                 RAW("\xd3\x80\x00\x00\x00\x00\x00\x00\x00"), PROTO_EINVALID,
                 f->path);
        add_case(s, tm, nm, M_RAW, f->path, RAW("\xca\x3f\x80\x00\x00"),
                 PROTO_EINVALID, f->path);
        add_case(s, tm, nm, M_RAW, f->path,
                 RAW("\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00"), PROTO_EINVALID,
                 f->path);
        add_case(s, tm, nm, M_RAW, f->path, RAW("\xc4\x01\x01"), PROTO_EINVALID,
                 f->path);
        break;
    case K_ID:
    case K_TUNING:
        big = long_str(f->kind == K_ID ? RECEIPT_ID_MAX : RECEIPT_TUNING_MAX,
                       &len);
        c = add_case(s, tm, nm, M_RAW, f->path, big, len, 0, "");
        free(big);
        c->check = CHK_STR;
        c->want_len = f->kind == K_ID ? RECEIPT_ID_MAX : RECEIPT_TUNING_MAX;
        big = long_str(
            (f->kind == K_ID ? RECEIPT_ID_MAX : RECEIPT_TUNING_MAX) + 1, &len);
        c = add_case(s, tm, nm, M_RAW, f->path, big, len, PROTO_EINVALID,
                     f->path);
        free(big);
        c->want_msg = "at most";
        c = add_case(s, tm, nm, M_RAW, f->path, RAW("\xa0"), 0, "");
        c->check = CHK_STR;
        c->want_str = "";
        c = add_case(s, tm, nm, M_RAW, f->path, RAW("\xa3\xc3\xa9x"), 0, "");
        c->check = CHK_STR;
        c->want_str = "\xc3\xa9x";
        /* A bin holding valid UTF-8 is a string. */
        c = add_case(s, tm, nm, M_RAW, f->path,
                     RAW("\xc4\x03"
                         "abc"),
                     0, "");
        c->check = CHK_STR;
        c->want_str = "abc";
        c = add_case(s, tm, nm, M_RAW, f->path, RAW("\xa2\xc3\x28"),
                     PROTO_EINVALID, f->path);
        c->want_msg = "expected a valid UTF-8 string, got a byte sequence "
                      "that is not UTF-8 at byte 0";
        add_case(s, tm, nm, M_RAW, f->path, RAW("\xa2\xc0\xaf"), PROTO_EINVALID,
                 f->path);
        add_case(s, tm, nm, M_RAW, f->path, RAW("\xa3\xed\xa0\x80"),
                 PROTO_EINVALID, f->path);
        add_case(s, tm, nm, M_RAW, f->path, RAW("\xa4\xf4\x90\x80\x80"),
                 PROTO_EINVALID, f->path);
        add_case(s, tm, nm, M_RAW, f->path, RAW("\xa1\xff"), PROTO_EINVALID,
                 f->path);
        /* Invalid bytes after and inside runs of ASCII (the validator
         * skips ASCII in words). */
        c = add_case(s, tm, nm, M_RAW, f->path,
                     RAW("\xaa"
                         "abcdefgh\xc3\x28"),
                     PROTO_EINVALID, f->path);
        c->want_msg = "not UTF-8 at byte 8";
        add_case(s, tm, nm, M_RAW, f->path,
                 RAW("\xb1"
                     "abcdefghijklmno\x80"
                     "p"),
                 PROTO_EINVALID, f->path);
        c = add_case(s, tm, nm, M_RAW, f->path,
                     RAW("\xba"
                         "abcdefg\xc3\xa9"
                         "hijklmnopqrstu\xe2\x82\xac"),
                     0, "");
        c->check = CHK_STR;
        c->want_str = "abcdefg\xc3\xa9"
                      "hijklmnopqrstu\xe2\x82\xac";
        add_case(s, tm, nm, M_RAW, f->path, RAW("\xa2\xe2\x82"), PROTO_EINVALID,
                 f->path);
        add_case(s, tm, nm, M_RAW, f->path, RAW("\xc4\x02\xc3\x28"),
                 PROTO_EINVALID, f->path);
        add_case(s, tm, nm, M_RAW, f->path, RAW("\xff"), PROTO_EINVALID,
                 f->path);
        break;
    case K_BACKEND:
        c = add_case(s, tm, nm, M_RAW, f->path, RAW("\xa3gpu"), PROTO_EINVALID,
                     f->path);
        c->want_msg = "expected one of cpu, wgpu-dx12, wgpu-vulkan, "
                      "wgpu-metal, cuda, metal, unknown; got \"gpu\"";
        add_case(s, tm, nm, M_RAW, f->path,
                 RAW("\xa4"
                     "CUDA"),
                 PROTO_EINVALID, f->path);
        add_case(s, tm, nm, M_RAW, f->path, RAW("\xa9wgpu_dx12"),
                 PROTO_EINVALID, f->path);
        add_case(s, tm, nm, M_RAW, f->path, RAW("\xa0"), PROTO_EINVALID,
                 f->path);
        c = add_case(s, tm, nm, M_RAW, f->path, RAW("\xa9wgpu-dx12"), 0, "");
        c->check = CHK_BACKEND;
        c->want_u64 = RECEIPT_BACKEND_WGPU_DX12;
        c = add_case(s, tm, nm, M_RAW, f->path, RAW("\xa7unknown"), 0, "");
        c->check = CHK_BACKEND;
        c->want_u64 = RECEIPT_BACKEND_UNKNOWN;
        c = add_case(s, tm, nm, M_RAW, f->path, RAW("\xc4\x05metal"), 0, "");
        c->check = CHK_BACKEND;
        c->want_u64 = RECEIPT_BACKEND_METAL;
        break;
    case K_SCHEMA:
    case K_STRUCT:
        break;
    }
}

static void
gen_cases(void)
{
    unsigned i, s, fm;

    init_tfields();
    for (i = 0; i < ntfields; i++)
        for (s = 1; s <= 3; s++) {
            if (s < tfields[i].min_schema)
                continue;
            for (fm = 0; fm < 4; fm++) {
                /* The nested form only matters to nested fields. */
                if (strchr(tfields[i].path, '.') == NULL && fm >= 2)
                    continue;
                gen_field(&tfields[i], s, fm == 0 || fm == 2,
                          fm == 0 || fm == 3, fm < 2);
            }
        }
}

static void
run_rule_case(const struct rcase *c)
{
    struct receipt r;
    struct proto_err err;
    msgpack_unpacked up;
    struct build b;
    const struct proto_str *str;
    uint64_t v;
    int rc;

    msgpack_unpacked_init(&up);
    rc = build_decode(c->schema, c->top_map, c->nested_map, &c->m, &up, &b, &r,
                      &err);
    ck_assert_msg(rc == c->want_rc, "%s: rc %d, want %d (%s: %s)", c->name, rc,
                  c->want_rc, err.path, err.message);
    if (rc != 0) {
        ck_assert_int_eq(err.code, rc);
        ck_assert_msg(strcmp(err.path, c->want_path) == 0,
                      "%s: path \"%s\", want \"%s\"", c->name, err.path,
                      c->want_path);
        ck_assert_msg(err.message[0] != '\0', "%s: no message", c->name);
        if (c->want_msg != NULL)
            ck_assert_msg(strstr(err.message, c->want_msg) != NULL,
                          "%s: message \"%s\" lacks \"%s\"", c->name,
                          err.message, c->want_msg);
        /* Nothing is left behind on failure. */
        ck_assert_ptr_null(r.extra);
        ck_assert_uint_eq(r.schema_version, 0);
    } else if (c->check == CHK_U64) {
        ck_assert(get_u64(&r, c->m.path, &v));
        ck_assert_msg(v == c->want_u64, "%s: got %llu", c->name,
                      (unsigned long long)v);
    } else if (c->check == CHK_STR) {
        str = get_str(&r, c->m.path);
        ck_assert_ptr_nonnull(str);
        if (c->want_str != NULL)
            ck_assert_msg(str->len == strlen(c->want_str) &&
                              memcmp(str->ptr, c->want_str, str->len) == 0,
                          "%s: got \"%.*s\"", c->name, (int)str->len, str->ptr);
        else
            ck_assert_uint_eq(str->len, c->want_len);
    } else if (c->check == CHK_BACKEND) {
        ck_assert_uint_eq(strcmp(c->m.path, "requested_backend") == 0
                              ? r.requested_backend
                              : r.executed_backend,
                          c->want_u64);
    }
    receipt_clear(&r);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&b.sb);
}

/* Each iteration runs a batch of cases: one fork per case costs more than
 * the cases themselves under AddressSanitizer. A failure names its case. */
#define RULES_PER_TEST 8

START_TEST(test_receipt_decode_field_rules)
{
    size_t i;

    for (i = (size_t)_i * RULES_PER_TEST;
         i < nrcases && i < ((size_t)_i + 1) * RULES_PER_TEST; i++)
        run_rule_case(&rcases[i]);
}
END_TEST

/* Options: tuning_profile always (query rows), and no extra. */
START_TEST(test_receipt_encode_flags)
{
    struct mut m = { M_EXTRA, "", RAW("\x01"), "flavour", 0 };
    struct receipt r;
    struct proto_err err;
    msgpack_unpacked up, up2;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct build b;
    const msgpack_object *t;

    msgpack_unpacked_init(&up);
    ck_assert_int_eq(build_decode(1, 1, 1, &m, &up, &b, &r, &err), 0);
    ck_assert_ptr_nonnull(r.extra);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    ck_assert_int_eq(
        receipt_encode_flags(&r, &pk,
                             RECEIPT_ENCODE_TUNING | RECEIPT_ENCODE_NO_EXTRA),
        0);
    msgpack_unpacked_init(&up2);
    ck_assert_int_eq(msgpack_unpack_next(&up2, sb.data, sb.size, NULL),
                     MSGPACK_UNPACK_SUCCESS);
    ck_assert_uint_eq(up2.data.via.map.size, 11);
    /* In declaration order: after graph_hash, before stop_reason. */
    ck_assert(mpobj_str_eq(&up2.data.via.map.ptr[6].key, "tuning_profile"));
    t = &up2.data.via.map.ptr[6].val;
    ck_assert_int_eq(t->type, MSGPACK_OBJECT_STR);
    ck_assert_uint_eq(t->via.str.size, 0);
    ck_assert_ptr_null(mpobj_map_get(&up2.data, "flavour", NULL));
    msgpack_unpacked_destroy(&up2);
    msgpack_sbuffer_destroy(&sb);

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    ck_assert_int_eq(receipt_encode_flags(&r, &pk, 0), 0);
    msgpack_unpacked_init(&up2);
    ck_assert_int_eq(msgpack_unpack_next(&up2, sb.data, sb.size, NULL),
                     MSGPACK_UNPACK_SUCCESS);
    ck_assert_uint_eq(up2.data.via.map.size, 11);
    ck_assert_ptr_null(mpobj_map_get(&up2.data, "tuning_profile", NULL));
    ck_assert_ptr_nonnull(mpobj_map_get(&up2.data, "flavour", NULL));
    msgpack_unpacked_destroy(&up2);
    msgpack_sbuffer_destroy(&sb);
    receipt_clear(&r);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&b.sb);
}
END_TEST

/* schema_version is read first, in both forms, and decides the code. */
static const struct {
    const char *raw;
    size_t len;
    int want_rc;
    const char *want_path;
} schema_cases[] = {
    { RAW("\x00"), PROTO_EUNSUPPORTED_SCHEMA, "schema_version" },
    { RAW("\x04"), PROTO_EUNSUPPORTED_SCHEMA, "schema_version" },
    { RAW("\xcd\xff\xff"), PROTO_EUNSUPPORTED_SCHEMA, "schema_version" },
    { RAW("\xce\x00\x01\x00\x00"), PROTO_EINVALID, "schema_version" },
    { RAW("\xcf\x00\x00\x00\x00\x00\x00\x00\x02"), 0, "" },
    { RAW("\xd0\x02"), 0, "" },
    { RAW("\xd3\x00\x00\x00\x00\x00\x00\x00\x02"), 0, "" },
    { RAW("\xff"), PROTO_EINVALID, "schema_version" },
    { RAW("\xa1\x32"), PROTO_EINVALID, "schema_version" },
    { RAW("\xc0"), PROTO_EINVALID, "schema_version" },
    { RAW("\xcb\x40\x00\x00\x00\x00\x00\x00\x00"), PROTO_EINVALID,
      "schema_version" },
};

START_TEST(test_receipt_decode_schema_version)
{
    struct mut m = { M_RAW,
                     "schema_version",
                     schema_cases[_i / 2].raw,
                     schema_cases[_i / 2].len,
                     NULL,
                     0 };
    struct receipt r;
    struct proto_err err;
    msgpack_unpacked up;
    struct build b;
    int rc;

    /* Built as a schema-2 receipt, so that the accepted cases fit. */
    msgpack_unpacked_init(&up);
    rc = build_decode(2, _i % 2, _i % 2, &m, &up, &b, &r, &err);
    ck_assert_msg(rc == schema_cases[_i / 2].want_rc, "case %d: rc %d (%s)", _i,
                  rc, err.message);
    if (rc != 0)
        ck_assert_str_eq(err.path, schema_cases[_i / 2].want_path);
    else
        ck_assert_uint_eq(r.schema_version, 2);
    receipt_clear(&r);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&b.sb);
}
END_TEST

/* schema_version decides first: an unknown schema is unsupported even
 * when the rest of the map would be invalid under the schemas we know. */
START_TEST(test_receipt_decode_schema_before_other_rules)
{
    struct receipt r;
    struct proto_err err;
    msgpack_unpacked up;
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    msgpack_pack_uint64(&pk, 1); /* an integer key */
    msgpack_pack_uint64(&pk, 1);
    pk_cstr(&pk, "graph_hash");
    pk_cstr(&pk, "a");
    pk_cstr(&pk, "graph_hash");
    pk_cstr(&pk, "b");
    pk_cstr(&pk, "schema_version");
    msgpack_pack_uint64(&pk, 4);
    msgpack_unpacked_init(&up);
    ck_assert_int_eq(msgpack_unpack_next(&up, sb.data, sb.size, NULL),
                     MSGPACK_UNPACK_SUCCESS);
    ck_assert_int_eq(receipt_decode(&up.data, &r, &err),
                     PROTO_EUNSUPPORTED_SCHEMA);
    ck_assert_str_eq(err.path, "schema_version");
    ck_assert_str_eq(err.message, "expected schema_version 1, 2 or 3, got 4");
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(test_receipt_decode_rejects_missing_schema_version)
{
    struct mut m = { M_OMIT, "schema_version", NULL, 0, NULL, 0 };
    struct receipt r;
    struct proto_err err;
    msgpack_unpacked up;
    msgpack_object empty;
    struct build b;

    msgpack_unpacked_init(&up);
    ck_assert_int_eq(build_decode(3, 1, 1, &m, &up, &b, &r, &err),
                     PROTO_EINVALID);
    ck_assert_str_eq(err.path, "schema_version");
    memset(&empty, 0, sizeof(empty));
    empty.type = MSGPACK_OBJECT_ARRAY;
    ck_assert_int_eq(receipt_decode(&empty, &r, &err), PROTO_EINVALID);
    ck_assert_str_eq(err.path, "schema_version");
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&b.sb);
}
END_TEST

/* Element counts of the array form: top level, counters, latency,
 * artifacts, for every schema. */
static const struct {
    unsigned schema;
    const char *path;
    unsigned count;
    int ok;
    const char *msg;
} count_cases[] = {
    { 1, "", 9, 0, "expected 10 fields for schema 1, got 9" },
    { 1, "", 10, 1, NULL },
    { 1, "", 11, 0, "expected 10 fields for schema 1, got 11" },
    { 2, "", 10, 0, "expected 11 fields for schema 2, got 10" },
    { 2, "", 11, 1, NULL },
    { 2, "", 12, 0, "expected 11 fields for schema 2, got 12" },
    { 3, "", 11, 0, "expected 12 fields for schema 3, got 11" },
    { 3, "", 12, 1, NULL },
    { 3, "", 13, 0, "expected 12 fields for schema 3, got 13" },
    { 1, "counters", 9, 0, "expected 10 fields for schema 1, got 9" },
    { 1, "counters", 10, 1, NULL },
    { 1, "counters", 11, 0, "expected 10 fields for schema 1, got 11" },
    { 2, "counters", 0, 0, "expected 10 fields for schema 2, got 0" },
    { 2, "counters", 9, 0, "expected 10 fields for schema 2, got 9" },
    { 2, "counters", 23, 0, "expected 10 fields for schema 2, got 23" },
    { 3, "counters", 9, 0, "expected 10 to 23 fields for schema 3, got 9" },
    { 3, "counters", 10, 1, NULL },
    { 3, "counters", 11, 1, NULL },
    { 3, "counters", 22, 1, NULL },
    { 3, "counters", 23, 1, NULL },
    { 3, "counters", 24, 0, "expected 10 to 23 fields for schema 3, got 24" },
    { 3, "latency", 0, 1, NULL },
    { 3, "latency", 1, 1, NULL },
    { 3, "latency", 3, 1, NULL },
    { 3, "latency", 4, 0, "expected 0 to 3 fields for schema 3, got 4" },
    { 1, "artifacts", 3, 0, "expected 4 fields for schema 1, got 3" },
    { 2, "artifacts", 5, 0, "expected 4 fields for schema 2, got 5" },
    { 3, "artifacts", 0, 0, "expected 4 fields for schema 3, got 0" },
    { 3, "artifacts", 4, 1, NULL },
};

START_TEST(test_receipt_decode_array_lengths)
{
    struct mut m = { M_COUNT, count_cases[_i].path, NULL, 0,
                     NULL,    count_cases[_i].count };
    struct receipt r;
    struct proto_err err;
    msgpack_unpacked up;
    struct build b;
    unsigned i, n;
    int rc;

    msgpack_unpacked_init(&up);
    rc = build_decode(count_cases[_i].schema, 0, 0, &m, &up, &b, &r, &err);
    if (count_cases[_i].ok) {
        ck_assert_msg(rc == 0, "case %d: %s: %s", _i, err.path, err.message);
        /* Fields the array left out read as 0; those it has, as sent. */
        if (strcmp(count_cases[_i].path, "counters") == 0) {
            for (i = 0; i < 23; i++)
                ck_assert_uint_eq(r.counters[i],
                                  i < count_cases[_i].count ? i + 1 : 0);
        } else if (strcmp(count_cases[_i].path, "latency") == 0) {
            n = count_cases[_i].count;
            for (i = 0; i < 3; i++)
                ck_assert_uint_eq(r.counters[23 + i], i < n ? 100 + i : 0);
        }
    } else {
        ck_assert_int_eq(rc, PROTO_EINVALID);
        ck_assert_str_eq(err.path, count_cases[_i].path);
        ck_assert_str_eq(err.message, count_cases[_i].msg);
    }
    receipt_clear(&r);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&b.sb);
}
END_TEST

/* A schema-2 array does not fit the schema-3 layout, nor the reverse. */
START_TEST(test_receipt_decode_rejects_other_schema_layout)
{
    struct mut m = { M_RAW, "schema_version", RAW("\x02"), NULL, 0 };
    struct receipt r;
    struct proto_err err;
    msgpack_unpacked up;
    struct build b;

    msgpack_unpacked_init(&up);
    ck_assert_int_eq(build_decode(3, 0, 0, &m, &up, &b, &r, &err),
                     PROTO_EINVALID);
    ck_assert_str_eq(err.path, "");
    ck_assert_str_eq(err.message, "expected 11 fields for schema 2, got 12");
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&b.sb);
    m.raw = "\x03";
    msgpack_unpacked_init(&up);
    ck_assert_int_eq(build_decode(2, 0, 0, &m, &up, &b, &r, &err),
                     PROTO_EINVALID);
    ck_assert_str_eq(err.message, "expected 12 fields for schema 3, got 11");
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&b.sb);
}
END_TEST

START_TEST(test_receipt_decode_rejects_non_struct_body)
{
    static const char *const bodies[] = { "\xc0", "\x01", "\xa1x", "\xc3",
                                          "\xc4\x01x" };
    static const size_t lens[] = { 1, 1, 2, 1, 3 };
    struct receipt r;
    struct proto_err err;
    msgpack_unpacked up;
    size_t i, off;

    ck_assert_int_eq(receipt_decode(NULL, &r, &err), PROTO_EINVALID);
    ck_assert_str_eq(err.path, "");
    for (i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        msgpack_unpacked_init(&up);
        off = 0;
        ck_assert_int_eq(msgpack_unpack_next(&up, bodies[i], lens[i], &off),
                         MSGPACK_UNPACK_SUCCESS);
        ck_assert_int_eq(receipt_decode(&up.data, &r, &err), PROTO_EINVALID);
        ck_assert_str_eq(err.path, "");
        ck_assert_msg(strstr(err.message, "expected a receipt") != NULL, "%s",
                      err.message);
        msgpack_unpacked_destroy(&up);
    }
}
END_TEST

START_TEST(test_receipt_decode_rejects_non_string_key)
{
    static const char *const paths[] = { "", "counters", "latency",
                                         "artifacts" };
    struct receipt r;
    struct proto_err err;
    msgpack_unpacked up;
    struct build b;
    struct mut m = { M_EXTRA, NULL, RAW("\x01"), NULL, 0 };
    msgpack_object_kv *kv;
    const msgpack_object *map;
    unsigned i;

    for (i = 0; i < 4; i++) {
        m.path = paths[i];
        m.key = "k";
        msgpack_unpacked_init(&up);
        build(&b, 3, 1, 1, &m);
        ck_assert_int_eq(msgpack_unpack_next(&up, b.sb.data, b.sb.size, NULL),
                         MSGPACK_UNPACK_SUCCESS);
        /* Turn the added key into an integer key in place. */
        map = &up.data;
        if (i > 0)
            map = &map->via.map.ptr[i == 1 ? 9 : i == 2 ? 10 : 11].val;
        kv = &map->via.map.ptr[map->via.map.size - 1];
        ck_assert(mpobj_str_eq(&kv->key, "k"));
        kv->key.type = MSGPACK_OBJECT_POSITIVE_INTEGER;
        kv->key.via.u64 = 7;
        ck_assert_int_eq(receipt_decode(&up.data, &r, &err), PROTO_EINVALID);
        ck_assert_str_eq(err.path, paths[i]);
        ck_assert_str_eq(err.message,
                         "expected string keys, got an unsigned integer as a "
                         "key");
        msgpack_unpacked_destroy(&up);
        msgpack_sbuffer_destroy(&b.sb);
    }
}
END_TEST

/* Finds key in the extra map of r; NULL when absent. */
static const msgpack_object *
extra_get(const struct receipt *r, msgpack_unpacked *up, const char *key)
{
    size_t off = 0;
    int dup;
    const msgpack_object *v;

    ck_assert_ptr_nonnull(r->extra);
    ck_assert_int_eq(msgpack_unpack_next(up, r->extra, r->extra_len, &off),
                     MSGPACK_UNPACK_SUCCESS);
    ck_assert_uint_eq(off, r->extra_len);
    ck_assert_int_eq(up->data.type, MSGPACK_OBJECT_MAP);
    v = mpobj_map_get(&up->data, key, &dup);
    ck_assert_int_eq(dup, 0);
    return v;
}

/* Unknown keys, at each level: kept in extra under their dotted path with
 * the value as sent, and merged back where they came from on encoding. A
 * top-level key that itself looks like a path ("counters.x") cannot be told
 * apart from one that came from inside counters, so it is encoded there;
 * the decoded receipt is the same either way. */
static const struct {
    unsigned schema;
    int nested_map;
    const char *at;  /* struct */
    const char *key; /* key sent */
    const char *raw;
    size_t len;
    const char *path;   /* key in extra */
    const char *enc_at; /* where encoding puts it */
    const char *enc_key;
} unknown_cases[] = {
    { 3, 1, "", "flavour", RAW("\xa5vanil"), "flavour", "", "flavour" },
    { 3, 0, "", "flavour", RAW("\x92\x01\xa1x"), "flavour", "", "flavour" },
    { 3, 1, "counters", "new_thing", RAW("\x2a"), "counters.new_thing",
      "counters", "new_thing" },
    { 3, 1, "latency", "p99_us", RAW("\xcd\x10\x00"), "latency.p99_us",
      "latency", "p99_us" },
    { 3, 1, "artifacts", "temp_dirs", RAW("\x81\xa1k\xc0"),
      "artifacts.temp_dirs", "artifacts", "temp_dirs" },
    { 2, 1, "counters", "submitted_prefill_tokens", RAW("\x05"),
      "counters.submitted_prefill_tokens", "counters",
      "submitted_prefill_tokens" },
    { 1, 1, "counters", "rebuild_outcomes", RAW("\x05"),
      "counters.rebuild_outcomes", "counters", "rebuild_outcomes" },
    { 2, 1, "", "latency", RAW("\x81\xaequeue_delay_us\x05"), "latency", "",
      "latency" },
    { 1, 0, "", "latency", RAW("\x93\x01\x02\x03"), "latency", "", "latency" },
    { 2, 1, "", "counters.x", RAW("\x01"), "counters.x", "counters", "x" },
    { 3, 1, "", "", RAW("\x01"), "", "", "" },
    /* Found by fuzz_json: a top-level key spelled like a field's path goes
     * back to the top level, not onto the field. */
    { 3, 1, "", "counters.submitted_prefill_tokens", RAW("\x02"),
      "counters.submitted_prefill_tokens", "",
      "counters.submitted_prefill_tokens" },
    { 2, 1, "", "counters.decode_steps", RAW("\x02"), "counters.decode_steps",
      "", "counters.decode_steps" },
    { 3, 1, "", "latency.queue_delay_us", RAW("\x02"), "latency.queue_delay_us",
      "", "latency.queue_delay_us" },
    { 1, 1, "", "artifacts.temp_created_bytes", RAW("\x02"),
      "artifacts.temp_created_bytes", "", "artifacts.temp_created_bytes" },
    /* In schema 2, a schema-3 counter name is no field of counters. */
    { 2, 1, "", "counters.cow_copies", RAW("\x02"), "counters.cow_copies",
      "counters", "cow_copies" },
};

START_TEST(test_receipt_decode_keeps_unknown_keys)
{
    struct mut m = { M_EXTRA,
                     unknown_cases[_i].at,
                     unknown_cases[_i].raw,
                     unknown_cases[_i].len,
                     unknown_cases[_i].key,
                     0 };
    struct receipt r, r2;
    struct proto_err err;
    msgpack_unpacked up, ex, up2;
    msgpack_sbuffer sb;
    const msgpack_object *v, *where;
    struct build b;
    msgpack_sbuffer vs;
    msgpack_packer vp;
    int dup;

    msgpack_unpacked_init(&up);
    msgpack_unpacked_init(&ex);
    msgpack_unpacked_init(&up2);
    ck_assert_int_eq(build_decode(unknown_cases[_i].schema, 1,
                                  unknown_cases[_i].nested_map, &m, &up, &b, &r,
                                  &err),
                     0);
    v = extra_get(&r, &ex, unknown_cases[_i].path);
    ck_assert_ptr_nonnull(v);
    ck_assert_uint_eq(ex.data.via.map.size, 1);
    /* The value is kept byte for byte. */
    msgpack_sbuffer_init(&vs);
    msgpack_packer_init(&vp, &vs, msgpack_sbuffer_write);
    ck_assert_int_eq(msgpack_pack_object(&vp, *v), 0);
    ck_assert_uint_eq(vs.size, unknown_cases[_i].len);
    ck_assert_mem_eq(vs.data, unknown_cases[_i].raw, vs.size);
    msgpack_sbuffer_destroy(&vs);

    /* Encoding puts it back in its struct, and decoding again gives the
     * same receipt and the same extra. */
    reencode(&r, &sb, &up2, &r2);
    assert_same(&r, &r2);
    where = &up2.data;
    if (unknown_cases[_i].enc_at[0] != '\0')
        where = mpobj_map_get(where, unknown_cases[_i].enc_at, NULL);
    ck_assert_ptr_nonnull(where);
    ck_assert_ptr_nonnull(
        mpobj_map_get(where, unknown_cases[_i].enc_key, &dup));
    ck_assert_int_eq(dup, 0);
    receipt_clear(&r);
    receipt_clear(&r2);
    msgpack_sbuffer_destroy(&sb);
    msgpack_sbuffer_destroy(&b.sb);
    msgpack_unpacked_destroy(&up);
    msgpack_unpacked_destroy(&ex);
    msgpack_unpacked_destroy(&up2);
}
END_TEST

/* Packs the head of a schema-1 map receipt with room for nextra more
 * keys, which the caller packs next. */
static void
pack_s1_head(msgpack_packer *pk, uint32_t nextra)
{
    unsigned i;

    msgpack_pack_map(pk, 10 + nextra);
    pk_cstr(pk, "schema_version");
    msgpack_pack_uint64(pk, 1);
    pk_cstr(pk, "requested_backend");
    pk_cstr(pk, "cpu");
    pk_cstr(pk, "executed_backend");
    pk_cstr(pk, "cpu");
    pk_cstr(pk, "model_instance_id");
    pk_cstr(pk, "m");
    pk_cstr(pk, "prepared_plan_id");
    pk_cstr(pk, "p");
    pk_cstr(pk, "graph_hash");
    pk_cstr(pk, "");
    pk_cstr(pk, "stop_reason");
    pk_cstr(pk, "");
    pk_cstr(pk, "counter_coverage");
    msgpack_pack_uint64(pk, 0);
    pk_cstr(pk, "counters");
    msgpack_pack_array(pk, 10);
    for (i = 0; i < 10; i++)
        msgpack_pack_uint64(pk, i);
    pk_cstr(pk, "artifacts");
    msgpack_pack_array(pk, 4);
    for (i = 0; i < 4; i++)
        msgpack_pack_uint64(pk, i);
}

/* extra is canonical: sorted by path, whatever order the keys came in. */
START_TEST(test_receipt_decode_extra_is_sorted)
{
    static const char *const orders[2][3] = {
        { "zeta", "alpha", "counters.new" },
        { "counters.new", "zeta", "alpha" },
    };
    char *bytes[2];
    size_t lens[2];
    struct receipt r;
    struct proto_err err;
    msgpack_unpacked up;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int o, i;

    for (o = 0; o < 2; o++) {
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        pack_s1_head(&pk, 3);
        for (i = 0; i < 3; i++) {
            pk_cstr(&pk, orders[o][i]);
            msgpack_pack_uint64(&pk, (uint64_t)orders[o][i][0]);
        }
        msgpack_unpacked_init(&up);
        ck_assert_int_eq(msgpack_unpack_next(&up, sb.data, sb.size, NULL),
                         MSGPACK_UNPACK_SUCCESS);
        ck_assert_int_eq(receipt_decode(&up.data, &r, &err), 0);
        bytes[o] = r.extra;
        lens[o] = r.extra_len;
        r.extra = NULL;
        receipt_clear(&r);
        msgpack_unpacked_destroy(&up);
        msgpack_sbuffer_destroy(&sb);
    }
    ck_assert_uint_eq(lens[0], lens[1]);
    ck_assert_mem_eq(bytes[0], bytes[1], lens[0]);
    /* {"alpha": 97, "counters.new": 99, "zeta": 122} */
    ck_assert_mem_eq(bytes[0],
                     "\x83\xa5"
                     "alpha\x61\xac"
                     "counters.new\x63"
                     "\xa4zeta\x7a",
                     lens[0]);
    free(bytes[0]);
    free(bytes[1]);
}
END_TEST

/* A repeated unknown key is a duplicate like a repeated known one. */
START_TEST(test_receipt_decode_rejects_duplicate_unknown_key)
{
    struct receipt r;
    struct proto_err err;
    msgpack_unpacked up;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    unsigned i;
    int rc;

    /* A valid receipt's fields plus many unknown keys, one of which
     * repeats, so that the sorted check is exercised. */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_s1_head(&pk, 40);
    for (i = 0; i < 40; i++) {
        char key[16];

        snprintf(key, sizeof(key), "x%02u", i == 33 ? 7 : i);
        pk_cstr(&pk, key);
        msgpack_pack_uint64(&pk, i);
    }
    msgpack_unpacked_init(&up);
    ck_assert_int_eq(msgpack_unpack_next(&up, sb.data, sb.size, NULL),
                     MSGPACK_UNPACK_SUCCESS);
    rc = receipt_decode(&up.data, &r, &err);
    ck_assert_int_eq(rc, PROTO_EINVALID);
    ck_assert_str_eq(err.path, "x07");
    ck_assert_str_eq(err.message, "duplicate key");
    ck_assert_ptr_null(r.extra);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

/*
 * Field lookup. receipt.c finds a key by its length and bytes, trying the
 * field after the previous key's first; these check that every known name
 * is found wherever it sits in its map, that a name one byte off is an
 * unknown key and never a field, and that a known key repeated after the
 * lookup has moved past it is still a duplicate.
 */

/* How repack() orders the pairs of a map. */
enum order { ORDER_AS_IS, ORDER_REVERSED, ORDER_ROTATED };

/*
 * Packs o again, the pairs of every map (top level and nested structs) in
 * order. With key, the map at path at ("" for the top level, "counters",
 * ...) gets one more pair at its end: key (klen bytes, as a str) -> 42.
 */
static void
repack(msgpack_packer *pk, const msgpack_object *o, const char *path,
       enum order order, const char *at, const char *key, size_t klen)
{
    const msgpack_object_kv *kv;
    char sub[64];
    uint32_t i, j, n;
    int add;

    if (o->type != MSGPACK_OBJECT_MAP) {
        ck_assert_int_eq(msgpack_pack_object(pk, *o), 0);
        return;
    }
    n = o->via.map.size;
    add = key != NULL && strcmp(path, at) == 0;
    msgpack_pack_map(pk, n + (uint32_t)add);
    for (i = 0; i < n; i++) {
        j = order == ORDER_REVERSED  ? n - 1 - i
            : order == ORDER_ROTATED ? (i + n / 2) % n
                                     : i;
        kv = &o->via.map.ptr[j];
        ck_assert_int_eq(kv->key.type, MSGPACK_OBJECT_STR);
        ck_assert_int_eq(msgpack_pack_object(pk, kv->key), 0);
        if (path[0] != '\0') {
            ck_assert_int_eq(msgpack_pack_object(pk, kv->val), 0);
            continue;
        }
        snprintf(sub, sizeof(sub), "%.*s", (int)kv->key.via.str.size,
                 kv->key.via.str.ptr);
        repack(pk, &kv->val, sub, order, at, key, klen);
    }
    if (add) {
        msgpack_pack_str(pk, klen);
        msgpack_pack_str_body(pk, key, klen);
        msgpack_pack_uint64(pk, 42);
    }
}

/*
 * Decodes a valid receipt of schema (maps throughout), then the same
 * receipt repacked (order, plus key at at: see repack()) and returns the
 * code of the second decode, err filled. When it decodes, its known fields
 * must equal the first decode's, and its extra is handed to *extra
 * (*extra_len bytes; the caller frees it).
 */
static int
decode_repacked(unsigned schema, enum order order, const char *at,
                const char *key, size_t klen, char **extra, size_t *extra_len,
                struct proto_err *err)
{
    struct receipt ref, got;
    msgpack_unpacked up, up2;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct build b;
    int rc;

    msgpack_unpacked_init(&up);
    msgpack_unpacked_init(&up2);
    ck_assert_int_eq(build_decode(schema, 1, 1, NULL, &up, &b, &ref, err), 0);
    ck_assert_ptr_null(ref.extra);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    repack(&pk, &up.data, "", order, at, key, klen);
    ck_assert_int_eq(msgpack_unpack_next(&up2, sb.data, sb.size, NULL),
                     MSGPACK_UNPACK_SUCCESS);
    proto_err_clear(err);
    rc = receipt_decode(&up2.data, &got, err);
    *extra = NULL;
    *extra_len = 0;
    if (rc == 0) {
        *extra = got.extra;
        *extra_len = got.extra_len;
        got.extra = NULL;
        got.extra_len = 0;
        assert_same(&ref, &got);
    }
    receipt_clear(&ref);
    msgpack_unpacked_destroy(&up);
    msgpack_unpacked_destroy(&up2);
    msgpack_sbuffer_destroy(&sb);
    msgpack_sbuffer_destroy(&b.sb);
    return rc;
}

/* Every field, in reversed and rotated maps, of every schema. */
START_TEST(test_receipt_decode_finds_fields_in_any_order)
{
    unsigned schema = 1 + (unsigned)_i / 2;
    enum order order = _i % 2 ? ORDER_ROTATED : ORDER_REVERSED;
    struct proto_err err;
    size_t extra_len;
    char *extra;

    ck_assert_msg(decode_repacked(schema, order, "", NULL, 0, &extra,
                                  &extra_len, &err) == 0,
                  "schema %u: %s: %s", schema, err.path, err.message);
    ck_assert_ptr_null(extra);
}
END_TEST

/* The known names of each map of a schema-3 receipt, from the builder's
 * own tables. */
static const struct {
    const char *at;
    const char *const *names;
    unsigned n;
} lookup_scopes[] = {
    { "", t_top, 12 },
    { "counters", t_counters, 23 },
    { "latency", t_latency, 3 },
    { "artifacts", t_artifacts, 4 },
};

/* The known name at flat index i of lookup_scopes; sets *scope. */
static const char *
lookup_name(unsigned i, unsigned *scope)
{
    unsigned s;

    for (s = 0; i >= lookup_scopes[s].n; s++)
        i -= lookup_scopes[s].n;
    *scope = s;
    return lookup_scopes[s].names[i];
}

/*
 * A key one byte off a known name (shorter, longer, a trailing NUL, the
 * first, a middle or the last byte changed) is an unknown key of that map:
 * kept in extra under its own bytes, and every field still decodes.
 */
START_TEST(test_receipt_decode_near_miss_names_are_unknown)
{
    unsigned scope, v, k;
    const char *name = lookup_name((unsigned)_i, &scope);
    const char *at = lookup_scopes[scope].at;
    size_t n = strlen(name), klen, plen, off, extra_len;
    struct proto_err err;
    msgpack_unpacked up;
    const msgpack_object *ek;
    char key[64], path[80], *extra;
    int known;

    for (v = 0; v < 6; v++) {
        memcpy(key, name, n + 1);
        klen = n;
        switch (v) {
        case 0: /* one byte shorter */
            klen = n - 1;
            break;
        case 1: /* one byte longer */
            key[n] = '_';
            klen = n + 1;
            break;
        case 2: /* the same bytes and a NUL */
            key[n] = '\0';
            klen = n + 1;
            break;
        case 3:
            key[0] = (char)(key[0] ^ 0x20);
            break;
        case 4:
            key[n / 2]++;
            break;
        case 5:
            key[n - 1]++;
            break;
        }
        for (k = 0, known = 0; k < lookup_scopes[scope].n; k++)
            known |= strlen(lookup_scopes[scope].names[k]) == klen &&
                     memcmp(lookup_scopes[scope].names[k], key, klen) == 0;
        ck_assert_msg(!known, "%s: variant %u is a known name", name, v);
        ck_assert_msg(decode_repacked(3, ORDER_AS_IS, at, key, klen, &extra,
                                      &extra_len, &err) == 0,
                      "%s variant %u: %s: %s", name, v, err.path, err.message);
        /* extra is {"<at>.<key>": 42}, the key byte for byte. */
        plen = (size_t)snprintf(path, sizeof(path), "%s%s", at,
                                at[0] != '\0' ? "." : "");
        memcpy(path + plen, key, klen);
        msgpack_unpacked_init(&up);
        off = 0;
        ck_assert_ptr_nonnull(extra);
        ck_assert_int_eq(msgpack_unpack_next(&up, extra, extra_len, &off),
                         MSGPACK_UNPACK_SUCCESS);
        ck_assert_uint_eq(up.data.via.map.size, 1);
        ek = &up.data.via.map.ptr[0].key;
        ck_assert_int_eq(ek->type, MSGPACK_OBJECT_STR);
        ck_assert_uint_eq(ek->via.str.size, plen + klen);
        ck_assert_mem_eq(ek->via.str.ptr, path, plen + klen);
        ck_assert_uint_eq(up.data.via.map.ptr[0].val.via.u64, 42);
        msgpack_unpacked_destroy(&up);
        free(extra);
    }
}
END_TEST

/* A known key repeated at the end of its map, after the lookup has moved
 * past it, is a duplicate. */
START_TEST(test_receipt_decode_rejects_repeated_first_key)
{
    const char *name = lookup_scopes[_i].names[0];
    const char *at = lookup_scopes[_i].at;
    struct proto_err err;
    size_t extra_len;
    char path[64], msg[64], *extra;

    ck_assert_int_eq(decode_repacked(3, ORDER_AS_IS, at, name, strlen(name),
                                     &extra, &extra_len, &err),
                     PROTO_EINVALID);
    ck_assert_ptr_null(extra);
    snprintf(path, sizeof(path), "%s%s%s", at, at[0] != '\0' ? "." : "", name);
    snprintf(msg, sizeof(msg), "duplicate key \"%s\"", name);
    ck_assert_str_eq(err.path, path);
    ck_assert_str_eq(err.message, msg);
}
END_TEST

/* A schema-1 map may carry tuning_profile anyway: it is the value, and it
 * survives encoding; without it, schema 1 encodes no tuning_profile. */
START_TEST(test_receipt_decode_schema1_tuning_profile)
{
    struct mut m = { M_EXTRA, "", RAW("\xa2tp"), "tuning_profile", 0 };
    struct receipt r, r2;
    struct proto_err err;
    msgpack_unpacked up, up2;
    msgpack_sbuffer sb;
    struct build b;

    msgpack_unpacked_init(&up);
    msgpack_unpacked_init(&up2);
    ck_assert_int_eq(build_decode(1, 1, 1, &m, &up, &b, &r, &err), 0);
    ck_assert_uint_eq(r.tuning_profile.len, 2);
    ck_assert_int_eq(memcmp(r.tuning_profile.ptr, "tp", 2), 0);
    ck_assert_ptr_null(r.extra);
    reencode(&r, &sb, &up2, &r2);
    assert_same(&r, &r2);
    ck_assert_ptr_nonnull(mpobj_map_get(&up2.data, "tuning_profile", NULL));
    msgpack_sbuffer_destroy(&sb);
    msgpack_sbuffer_destroy(&b.sb);
    msgpack_unpacked_destroy(&up);
    msgpack_unpacked_destroy(&up2);

    msgpack_unpacked_init(&up);
    msgpack_unpacked_init(&up2);
    ck_assert_int_eq(build_decode(1, 0, 0, NULL, &up, &b, &r, &err), 0);
    ck_assert_uint_eq(r.tuning_profile.len, 0);
    ck_assert_ptr_nonnull(r.tuning_profile.ptr);
    reencode(&r, &sb, &up2, &r2);
    ck_assert_ptr_null(mpobj_map_get(&up2.data, "tuning_profile", NULL));
    ck_assert_ptr_null(mpobj_map_get(&up2.data, "latency", NULL));
    ck_assert_uint_eq(up2.data.via.map.size, 10);
    msgpack_sbuffer_destroy(&sb);
    msgpack_sbuffer_destroy(&b.sb);
    msgpack_unpacked_destroy(&up);
    msgpack_unpacked_destroy(&up2);
}
END_TEST

/* Schema 3: latency missing entirely reads as zeros; coverage bits with no
 * meaning in the schema are kept as sent. */
START_TEST(test_receipt_decode_schema3_defaults)
{
    struct mut m = { M_OMIT, "latency", NULL, 0, NULL, 0 };
    struct mut cov = { M_RAW, "counter_coverage",
                       RAW("\xcf\xff\xff\xff\xff\xff\xff\xff\xff"), NULL, 0 };
    struct receipt r;
    struct proto_err err;
    msgpack_unpacked up;
    struct build b;

    msgpack_unpacked_init(&up);
    ck_assert_int_eq(build_decode(3, 1, 1, &m, &up, &b, &r, &err), 0);
    ck_assert_uint_eq(r.counters[23], 0);
    ck_assert_uint_eq(r.counters[24], 0);
    ck_assert_uint_eq(r.counters[25], 0);
    ck_assert_uint_eq(r.counters[22], 23);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&b.sb);

    msgpack_unpacked_init(&up);
    ck_assert_int_eq(build_decode(2, 0, 0, &cov, &up, &b, &r, &err), 0);
    ck_assert_uint_eq(r.counter_coverage, UINT64_MAX);
    ck_assert_uint_eq(r.counter_coverage & ~receipt_meaningful_bits(2),
                      UINT64_MAX << 10);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&b.sb);
}
END_TEST

static const struct {
    int req, exec;
    uint64_t fallback_count, coverage;
    int want;
} status_cases[] = {
    { RECEIPT_BACKEND_CUDA, RECEIPT_BACKEND_CPU, 0, 0x7f,
      RECEIPT_STATUS_FALLBACK },
    { RECEIPT_BACKEND_CUDA, RECEIPT_BACKEND_CPU, 0, 0,
      RECEIPT_STATUS_FALLBACK },
    { RECEIPT_BACKEND_CUDA, RECEIPT_BACKEND_CUDA, 1, 0x40,
      RECEIPT_STATUS_FALLBACK },
    /* fallback_count counts even when its bit says unknown. */
    { RECEIPT_BACKEND_CUDA, RECEIPT_BACKEND_CUDA, 3, 0,
      RECEIPT_STATUS_FALLBACK },
    { RECEIPT_BACKEND_CUDA, RECEIPT_BACKEND_CUDA, 0, 0x40,
      RECEIPT_STATUS_CLEAN },
    { RECEIPT_BACKEND_CPU, RECEIPT_BACKEND_CPU, 0, UINT64_MAX,
      RECEIPT_STATUS_CLEAN },
    { RECEIPT_BACKEND_CUDA, RECEIPT_BACKEND_CUDA, 0, 0x3bf,
      RECEIPT_STATUS_UNPROVEN },
    { RECEIPT_BACKEND_UNKNOWN, RECEIPT_BACKEND_UNKNOWN, 0, 0,
      RECEIPT_STATUS_UNPROVEN },
};

START_TEST(test_receipt_status_table)
{
    struct receipt r;

    memset(&r, 0, sizeof(r));
    r.schema_version = 2;
    r.requested_backend = (uint8_t)status_cases[_i].req;
    r.executed_backend = (uint8_t)status_cases[_i].exec;
    r.counters[6] = status_cases[_i].fallback_count;
    r.counter_coverage = status_cases[_i].coverage;
    ck_assert_int_eq(receipt_status(&r), status_cases[_i].want);
}
END_TEST

START_TEST(test_receipt_names_and_tables)
{
    char path[64];
    int i;

    for (i = 0; i < RECEIPT_NCOUNTERS; i++) {
        ck_assert_uint_eq(receipt_counters[i].bit, (unsigned)i);
        snprintf(path, sizeof(path), "%s.%s",
                 i < RECEIPT_NCOUNTERS_V3 ? "counters" : "latency",
                 receipt_counters[i].field);
        ck_assert_str_eq(receipt_counters[i].path, path);
        ck_assert_uint_eq(receipt_counters[i].min_schema,
                          i < RECEIPT_NCOUNTERS_V2 ? 1 : 3);
    }
    for (i = 0; i < RECEIPT_BACKEND_COUNT; i++)
        ck_assert_int_eq(
            receipt_backend_from_name(receipt_backend_name(i),
                                      strlen(receipt_backend_name(i))),
            i);
    ck_assert_str_eq(receipt_backend_name(RECEIPT_BACKEND_WGPU_METAL),
                     "wgpu-metal");
    ck_assert_ptr_null(receipt_backend_name(RECEIPT_BACKEND_COUNT));
    ck_assert_ptr_null(receipt_backend_name(-1));
    ck_assert_int_eq(receipt_backend_from_name("cud", 3), -1);
    ck_assert_int_eq(receipt_backend_from_name("cudax", 5), -1);
    for (i = 0; i < RECEIPT_STATUS_COUNT; i++)
        ck_assert_int_eq(
            receipt_status_from_name(receipt_status_name(i),
                                     strlen(receipt_status_name(i))),
            i);
    ck_assert_str_eq(receipt_status_name(RECEIPT_STATUS_UNPROVEN), "unproven");
    ck_assert_ptr_null(receipt_status_name(RECEIPT_STATUS_COUNT));
    ck_assert_int_eq(receipt_status_from_name("clea", 4), -1);
    ck_assert_uint_eq(receipt_meaningful_bits(1), 0x3ff);
    ck_assert_uint_eq(receipt_meaningful_bits(2), 0x3ff);
    ck_assert_uint_eq(receipt_meaningful_bits(3), 0x3ffffff);
    ck_assert_uint_eq(receipt_meaningful_bits(4), 0);
    receipt_clear(NULL);
}
END_TEST

/* Error paths name fields in the array form too, never indices. */
START_TEST(test_receipt_decode_rejects_string_counter)
{
    struct mut m = { M_RAW, "counters.decode_steps", RAW("\xa1x"), NULL, 0 };
    struct receipt r;
    struct proto_err err;
    msgpack_unpacked up;
    struct build b;

    msgpack_unpacked_init(&up);
    ck_assert_int_eq(build_decode(3, 0, 0, &m, &up, &b, &r, &err),
                     PROTO_EINVALID);
    ck_assert_str_eq(err.path, "counters.decode_steps");
    ck_assert_str_eq(err.message, "expected an unsigned integer, got a string");
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&b.sb);
}
END_TEST

/*
 * Allocation-failure injection. check_receipt is linked with
 * -Wl,--wrap=malloc,realloc,calloc (tests/unit/CMakeLists.txt), which redirects
 * the calls made from proto/ and from msgpack-c's inline buffer code compiled
 * into it; with a budget set, the allocation after the budget fails. Each
 * operation is run with budgets 0, 1, 2, ... until it succeeds: every run
 * before must end in a clean PROTO_ENOMEM (or -1) with nothing leaked,
 * which the sanitizer build checks.
 */
void *__real_malloc(size_t n);
void *__real_realloc(void *p, size_t n);
void *__real_calloc(size_t k, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_calloc(size_t k, size_t n);

static long alloc_budget = -1; /* -1: no limit */
static long alloc_failed;

static int
alloc_allowed(void)
{
    if (alloc_budget < 0)
        return 1;
    if (alloc_budget == 0) {
        alloc_failed++;
        return 0;
    }
    alloc_budget--;
    return 1;
}

void *
__wrap_malloc(size_t n)
{
    return alloc_allowed() ? __real_malloc(n) : NULL;
}

void *
__wrap_realloc(void *p, size_t n)
{
    return alloc_allowed() ? __real_realloc(p, n) : NULL;
}

void *
__wrap_calloc(size_t k, size_t n)
{
    return alloc_allowed() ? __real_calloc(k, n) : NULL;
}

START_TEST(test_receipt_decode_survives_allocation_failure)
{
    struct mut m = { M_EXTRA, "counters", RAW("\x92\x01\xa1x"), "new", 0 };
    struct receipt ref, r;
    struct proto_err err;
    msgpack_unpacked up;
    struct build b;
    long budget;
    int rc;

    msgpack_unpacked_init(&up);
    ck_assert_int_eq(build_decode(3, 1, 1, &m, &up, &b, &ref, &err), 0);
    ck_assert_ptr_nonnull(ref.extra);
    for (budget = 0;; budget++) {
        alloc_failed = 0;
        alloc_budget = budget;
        rc = receipt_decode(&up.data, &r, &err);
        alloc_budget = -1;
        if (rc == 0)
            break;
        ck_assert_int_eq(rc, PROTO_ENOMEM);
        ck_assert_int_eq(err.code, PROTO_ENOMEM);
        ck_assert_ptr_null(r.extra);
        ck_assert_int_gt(alloc_failed, 0);
    }
    ck_assert_int_gt(budget, 0);
    ck_assert_uint_eq(r.extra_len, ref.extra_len);
    ck_assert_mem_eq(r.extra, ref.extra, ref.extra_len);
    receipt_clear(&r);

    /* Encoding: the packer's buffer cannot grow, and the encoder says so. */
    for (budget = 0;; budget++) {
        msgpack_sbuffer sb;
        msgpack_packer pk;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        alloc_budget = budget;
        rc = receipt_encode(&ref, &pk);
        alloc_budget = -1;
        msgpack_sbuffer_destroy(&sb);
        if (rc == 0)
            break;
        ck_assert_int_eq(rc, -1);
    }
    ck_assert_int_gt(budget, 0);
    receipt_clear(&ref);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&b.sb);
}
END_TEST

/* Without unknown keys, decoding allocates nothing at all. */
START_TEST(test_receipt_decode_allocates_nothing)
{
    struct receipt r;
    struct proto_err err;
    msgpack_unpacked up;
    struct build b;
    int rc, form;

    for (form = 0; form < 4; form++) {
        msgpack_unpacked_init(&up);
        build(&b, 1 + (unsigned)form % 3, form & 1, form < 2, NULL);
        ck_assert_int_eq(msgpack_unpack_next(&up, b.sb.data, b.sb.size, NULL),
                         MSGPACK_UNPACK_SUCCESS);
        alloc_failed = 0;
        alloc_budget = 0;
        rc = receipt_decode(&up.data, &r, &err);
        alloc_budget = -1;
        ck_assert_int_eq(rc, 0);
        ck_assert_int_eq(alloc_failed, 0);
        ck_assert_ptr_null(r.extra);
        msgpack_unpacked_destroy(&up);
        msgpack_sbuffer_destroy(&b.sb);
    }
}
END_TEST

START_TEST(test_receipt_json_parse_survives_allocation_failure)
{
    static const char text[] = "{\"a\":[1,{\"b\":2,\"c\":3}],\"d\":4}";
    struct json_object *j;
    struct proto_err err;
    long budget;
    int rc;

    for (budget = 0;; budget++) {
        alloc_budget = budget;
        rc = receipt_json_parse(text, sizeof(text) - 1, &j, &err);
        alloc_budget = -1;
        if (rc == 0)
            break;
        ck_assert_int_eq(rc, PROTO_ENOMEM);
        ck_assert_ptr_null(j);
    }
    ck_assert_int_gt(budget, 0);
    json_object_put(j);
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
    tc = tcase_create("vectors_fast_path");
    tcase_add_loop_test(tc, test_receipt_decode_fast_path_matches, 0, n);
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
    tcase_add_loop_test(tc, test_receipt_encode_u64_widths_roundtrip, 0, n);
    suite_add_tcase(s, tc);
    tc = tcase_create("field_rules");
    tcase_add_loop_test(tc, test_receipt_decode_field_rules, 0,
                        (int)((nrcases + RULES_PER_TEST - 1) / RULES_PER_TEST));
    suite_add_tcase(s, tc);
    tc = tcase_create("schema_version");
    tcase_add_loop_test(
        tc, test_receipt_decode_schema_version, 0,
        2 * (int)(sizeof(schema_cases) / sizeof(schema_cases[0])));
    tcase_add_test(tc, test_receipt_decode_rejects_missing_schema_version);
    tcase_add_test(tc, test_receipt_decode_schema_before_other_rules);
    tcase_add_test(tc, test_receipt_decode_rejects_other_schema_layout);
    suite_add_tcase(s, tc);
    tc = tcase_create("array_lengths");
    tcase_add_loop_test(tc, test_receipt_decode_array_lengths, 0,
                        (int)(sizeof(count_cases) / sizeof(count_cases[0])));
    suite_add_tcase(s, tc);
    tc = tcase_create("body");
    tcase_add_test(tc, test_receipt_decode_rejects_non_struct_body);
    tcase_add_test(tc, test_receipt_decode_rejects_non_string_key);
    tcase_add_test(tc, test_receipt_decode_rejects_string_counter);
    suite_add_tcase(s, tc);
    tc = tcase_create("unknown_keys");
    tcase_add_loop_test(
        tc, test_receipt_decode_keeps_unknown_keys, 0,
        (int)(sizeof(unknown_cases) / sizeof(unknown_cases[0])));
    tcase_add_test(tc, test_receipt_decode_rejects_duplicate_unknown_key);
    tcase_add_test(tc, test_receipt_decode_extra_is_sorted);
    suite_add_tcase(s, tc);
    tc = tcase_create("field_lookup");
    tcase_add_loop_test(tc, test_receipt_decode_finds_fields_in_any_order, 0,
                        6);
    tcase_add_loop_test(tc, test_receipt_decode_near_miss_names_are_unknown, 0,
                        12 + 23 + 3 + 4);
    tcase_add_loop_test(tc, test_receipt_decode_rejects_repeated_first_key, 0,
                        4);
    suite_add_tcase(s, tc);
    tc = tcase_create("defaults");
    tcase_add_test(tc, test_receipt_decode_schema1_tuning_profile);
    tcase_add_test(tc, test_receipt_decode_schema3_defaults);
    tcase_add_test(tc, test_receipt_encode_flags);
    suite_add_tcase(s, tc);
    tc = tcase_create("status");
    tcase_add_loop_test(tc, test_receipt_status_table, 0,
                        (int)(sizeof(status_cases) / sizeof(status_cases[0])));
    suite_add_tcase(s, tc);
    tc = tcase_create("tables");
    tcase_add_test(tc, test_receipt_names_and_tables);
    suite_add_tcase(s, tc);
    tc = tcase_create("allocation_failure");
    tcase_add_test(tc, test_receipt_decode_survives_allocation_failure);
    tcase_add_test(tc, test_receipt_json_parse_survives_allocation_failure);
    tcase_add_test(tc, test_receipt_decode_allocates_nothing);
    suite_add_tcase(s, tc);
    tc = tcase_create("encode_bytes");
    tcase_add_loop_test(tc, test_receipt_encode_matches_rmp_serde_named_bytes,
                        0, n);
    tcase_add_loop_test(tc, test_receipt_encode_compact_matches_rmp_serde_bytes,
                        0, n);
    tcase_add_test(tc, test_receipt_encode_compact_falls_back_to_the_map);
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
    gen_cases();
    sr = srunner_create(receipt_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    json_object_put(vindex);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
