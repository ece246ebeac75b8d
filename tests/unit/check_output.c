/*
 * check_output.c: receiptctl's result formatting (client/output.c).
 *
 * Inputs are written as JSON in this file and turned into msgpack results
 * the way the daemon sends them (unsigned integers as u64, floats as
 * float64); outputs are compared with golden files under
 * tests/data/client/. Set RECEIPTD_UPDATE_GOLDEN=1 to rewrite the golden
 * files after an intended change, then review the diff. Exactness of u64
 * at 2^64-1 and RFC 4180 quoting are also checked field by field.
 */
#include <check.h>
#include <stdint.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <msgpack.h>

#include "output.h"

#define GOLDEN_DIR TEST_DATA_DIR "/client/"

/* Packs a json-c value as the daemon would: non-negative integers as
 * unsigned (exact up to 2^64-1), doubles as float64. */
static void
pack_json(msgpack_packer *pk, struct json_object *j)
{
    struct json_object_iterator it, end;
    size_t i, n;
    int64_t v;

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
    case json_type_double:
        msgpack_pack_double(pk, json_object_get_double(j));
        break;
    case json_type_int:
        v = json_object_get_int64(j);
        if (v == INT64_MAX)
            msgpack_pack_uint64(pk, json_object_get_uint64(j));
        else if (v < 0)
            msgpack_pack_int64(pk, v);
        else
            msgpack_pack_uint64(pk, (uint64_t)v);
        break;
    case json_type_string:
        n = (size_t)json_object_get_string_len(j);
        msgpack_pack_str(pk, n);
        msgpack_pack_str_body(pk, json_object_get_string(j), n);
        break;
    case json_type_array:
        n = json_object_array_length(j);
        msgpack_pack_array(pk, n);
        for (i = 0; i < n; i++)
            pack_json(pk, json_object_array_get_idx(j, i));
        break;
    case json_type_object:
        msgpack_pack_map(pk, (size_t)json_object_object_length(j));
        it = json_object_iter_begin(j);
        end = json_object_iter_end(j);
        while (!json_object_iter_equal(&it, &end)) {
            const char *k = json_object_iter_peek_name(&it);

            msgpack_pack_str(pk, strlen(k));
            msgpack_pack_str_body(pk, k, strlen(k));
            pack_json(pk, json_object_iter_peek_value(&it));
            json_object_iter_next(&it);
        }
        break;
    }
}

/* A decoded result built from JSON text; free with result_free(). */
struct result {
    msgpack_sbuffer sb;
    msgpack_unpacked up;
};

static void
result_from_json(struct result *r, const char *text)
{
    struct json_object *j = json_tokener_parse(text);
    msgpack_packer pk;
    size_t off = 0;

    ck_assert_msg(j != NULL, "test input is not JSON: %s", text);
    msgpack_sbuffer_init(&r->sb);
    msgpack_packer_init(&pk, &r->sb, msgpack_sbuffer_write);
    pack_json(&pk, j);
    json_object_put(j);
    msgpack_unpacked_init(&r->up);
    ck_assert_int_eq(msgpack_unpack_next(&r->up, r->sb.data, r->sb.size, &off),
                     MSGPACK_UNPACK_SUCCESS);
}

static void
result_free(struct result *r)
{
    msgpack_unpacked_destroy(&r->up);
    msgpack_sbuffer_destroy(&r->sb);
}

/* Runs fn-style output into a string (caller frees). */
static char *
render_every(int format, const char *kind, const char *group_by, uint64_t every,
             const msgpack_object *res, int *rc)
{
    struct output_spec spec = { kind, group_by, NULL, 0, 0, every };
    char *buf = NULL, err[OUTPUT_ERR_MAX] = "";
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    ck_assert_ptr_nonnull(f);
    if (format == OUTPUT_PROMETHEUS)
        *rc = output_prometheus(f, res, err, sizeof(err));
    else
        *rc = output_result(f, format, &spec, res, err, sizeof(err));
    fclose(f);
    if (*rc != 0) {
        free(buf);
        return strdup(err);
    }
    return buf;
}

static char *
render_by(int format, const char *kind, const char *group_by,
          const msgpack_object *res, int *rc)
{
    return render_every(format, kind, group_by, 0, res, rc);
}

static char *
render(int format, const char *kind, const msgpack_object *res, int *rc)
{
    return render_by(format, kind, NULL, res, rc);
}

static char *
read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;

    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void
check_golden(const char *name, const char *got)
{
    char path[512];
    char *want;
    const char *upd = getenv("RECEIPTD_UPDATE_GOLDEN");

    snprintf(path, sizeof(path), GOLDEN_DIR "%s", name);
    if (upd != NULL && strcmp(upd, "1") == 0) {
        FILE *f = fopen(path, "wb");

        ck_assert_ptr_nonnull(f);
        fputs(got, f);
        fclose(f);
    }
    want = read_all(path);
    ck_assert_msg(want != NULL, "missing golden file %s", path);
    ck_assert_msg(strcmp(want, got) == 0,
                  "%s differs from its golden file.\n--- got:\n%s--- want:\n%s",
                  name, got, want);
    free(want);
}

/* ---- inputs ---- */

static const char fallbacks_json[] =
    "{\"rows\": ["
    "{\"prepared_plan_id\": \"plan-a\", \"receipts\": 1200, \"fallback\": 12,"
    " \"unproven\": 100, \"clean\": 1088, \"fallback_rate\": 0.01},"
    "{\"prepared_plan_id\": \"plan-\xce\xb2\", \"receipts\": "
    "18446744073709551615, \"fallback\": 0, \"unproven\": 0, \"clean\": "
    "18446744073709551615, \"fallback_rate\": 0.0}"
    "], \"truncated\": false}";

static const char fallbacks_backends_json[] =
    "{\"rows\": ["
    "{\"receipts\": 10, \"executed_backend\": \"cpu\", \"fallback\": 10,"
    " \"requested_backend\": \"cuda\", \"unproven\": 0, \"clean\": 0,"
    " \"fallback_rate\": 1.0},"
    "{\"requested_backend\": \"wgpu-vulkan\", \"executed_backend\": "
    "\"wgpu-vulkan\", \"receipts\": 5, \"fallback\": 0, \"unproven\": 2,"
    " \"clean\": 3, \"fallback_rate\": 0.0}"
    "], \"truncated\": false, \"total\": {\"receipts\": 15, \"fallback\": 10,"
    " \"unproven\": 2, \"clean\": 3, \"fallback_rate\": 0.6666666666666666}}";

/* Grouped by two keys (plan,backends): the plan's column, then the
 * backends', whatever order the daemon packed them in. */
static const char fallbacks_plan_backends_json[] =
    "{\"rows\": ["
    "{\"prepared_plan_id\": \"p1\", \"requested_backend\": \"cuda\","
    " \"executed_backend\": \"cpu\", \"receipts\": 4, \"fallback\": 4,"
    " \"unproven\": 0, \"clean\": 0, \"fallback_rate\": 1.0},"
    "{\"executed_backend\": \"cuda\", \"receipts\": 6, \"fallback\": 0,"
    " \"prepared_plan_id\": \"p1\", \"requested_backend\": \"cuda\","
    " \"unproven\": 1, \"clean\": 5, \"fallback_rate\": 0.0},"
    "{\"prepared_plan_id\": \"p2\", \"requested_backend\": \"cpu\","
    " \"executed_backend\": \"cpu\", \"receipts\": 5, \"fallback\": 0,"
    " \"unproven\": 0, \"clean\": 5, \"fallback_rate\": 0.0}"
    "], \"truncated\": false, \"total\": {\"receipts\": 15, \"fallback\": 4,"
    " \"unproven\": 1, \"clean\": 10, \"fallback_rate\": 0.26666666666666666}}";

/* Grouped coverage with its totals (one counter of the 26, for short). */
static const char coverage_model_json[] =
    "{\"rows\": ["
    "{\"model_instance_id\": \"m1\", \"counter\": \"counters.decode_steps\","
    " \"bit\": 0, \"receipts\": 2, \"measured\": 2, \"unknown\": 0,"
    " \"coverage\": 1.0, \"sum\": 10, \"min\": 4, \"max\": 6, \"mean\": 5.0,"
    " \"not_applicable\": 0},"
    "{\"model_instance_id\": \"m2\", \"counter\": \"counters.decode_steps\","
    " \"bit\": 0, \"receipts\": 99998, \"measured\": 1, \"unknown\": 99997,"
    " \"coverage\": 0.0000100002, \"sum\": 1, \"min\": 1, \"max\": 1,"
    " \"mean\": 1.0, \"not_applicable\": 0}"
    "], \"truncated\": false, \"total\": ["
    "{\"counter\": \"counters.decode_steps\", \"bit\": 0, \"receipts\": 100000,"
    " \"measured\": 3, \"unknown\": 99997, \"coverage\": 0.00003, \"sum\": 11,"
    " \"min\": 1, \"max\": 6, \"mean\": 3.6666666666666665,"
    " \"not_applicable\": 0}]}";

static const char coverage_json[] =
    "{\"rows\": ["
    "{\"counter\": \"counters.decode_steps\", \"bit\": 0, \"receipts\": 3,"
    " \"measured\": 2, \"unknown\": 1, \"coverage\": 0.6666666666666666,"
    " \"sum\": \"36893488147419103230\", \"min\": 18446744073709551615,"
    " \"max\": 18446744073709551615, \"mean\": 1.8446744073709552e19,"
    " \"not_applicable\": 0},"
    "{\"counter\": \"counters.graph_launches\", \"bit\": 1, \"receipts\": 3,"
    " \"measured\": 3, \"unknown\": 0, \"coverage\": 1.0, \"sum\": 7,"
    " \"min\": 0, \"max\": 5, \"mean\": 2.3333333333333335,"
    " \"not_applicable\": 0},"
    "{\"counter\": \"latency.queue_delay_us\", \"bit\": 23, \"receipts\": 3,"
    " \"measured\": 0, \"unknown\": 1, \"coverage\": 0.0, \"sum\": 0,"
    " \"min\": null, \"max\": null, \"mean\": null, \"not_applicable\": 2}"
    "], \"truncated\": false}";

static const char receipts_json[] =
    "{\"rows\": ["
    "{\"receipt_id\": 42, \"received_at\": 1796011200123, \"source\":"
    " \"node-1/rt-3\", \"seq\": 7, \"fallback\": \"fallback\","
    " \"schema_version\": 3, \"requested_backend\": \"cuda\","
    " \"executed_backend\": \"cpu\", \"model_instance_id\": "
    "\"llama, \\\"8b\\\"\", \"prepared_plan_id\": \"plan-a\","
    " \"graph_hash\": \"\", \"tuning_profile\": \"\", \"stop_reason\":"
    " \"eos\\nline2\", \"counter_coverage\": 67108863, \"counters\":"
    " {\"decode_steps\": 18446744073709551615, \"fallback_count\": 1},"
    " \"latency\": {\"queue_delay_us\": 5}, \"artifacts\":"
    " {\"temp_created_bytes\": 0}, \"flavour\": \"x\"},"
    "{\"receipt_id\": 41, \"received_at\": 1796011100000, \"source\": \"\","
    " \"seq\": null, \"fallback\": \"clean\", \"schema_version\": 1,"
    " \"requested_backend\": \"cpu\", \"executed_backend\": \"cpu\","
    " \"model_instance_id\": \"m\", \"prepared_plan_id\": \"plan-b\","
    " \"graph_hash\": \"g1\", \"tuning_profile\": \"\", \"stop_reason\":"
    " \"length\", \"counter_coverage\": 64, \"counters\": {\"decode_steps\":"
    " 0, \"fallback_count\": 0}, \"artifacts\": {\"temp_created_bytes\": 9}}"
    "], \"truncated\": true}";

static const char gaps_json[] =
    "{\"rows\": ["
    "{\"source\": \"node-1/rt-3\", \"first_seq\": 1, \"last_seq\": 20,"
    " \"received\": 15, \"missing_seqs\": 6, \"missing_truncated\": false,"
    " \"last_received_at\": 1796011200000,"
    " \"missing\": [[3, 5], [9, 9], [12, 13]]},"
    "{\"source\": \"node-2\", \"first_seq\": 5, \"last_seq\": 5,"
    " \"received\": 1, \"missing_seqs\": 0, \"missing_truncated\": false,"
    " \"last_received_at\": null, \"missing\": []}"
    "], \"truncated\": false}";

static const char stats_json[] =
    "{\"rows\": [{\"uptime_ms\": 12345, \"started_at\": 1796011200000,"
    " \"connections\": 3, \"connections_total\": 40, \"frames\": 100,"
    " \"accepted\": 90, \"rejected\": 10, \"duplicates\": 1,"
    " \"quarantined\": 10, \"commit_mean_ms\": 0.75,"
    " \"future_thing\": {\"p50\": 800, \"p99\": 4000},"
    " \"store_size_bytes\": 18446744073709551615, \"store_failing\": true,"
    " \"store_last_error\": \"the store cannot commit: database or disk"
    " is full\","
    " \"server\": \"receiptd/0.1.0\"}], \"truncated\": false}";

/* The `metrics` kind's row: the daemon's own exposition. */
static const char metrics_json[] =
    "{\"rows\": [{\"text\": \"# HELP receiptd_frames_total Frames.\\n"
    "# TYPE receiptd_frames_total counter\\nreceiptd_frames_total 100\\n\"}],"
    " \"truncated\": false}";

/* A series by backends, four hours: a group that fell back in two of
 * them (one rarely), one that never did, an hour without receipts. */
static const char series_json[] =
    "{\"rows\": ["
    "{\"requested_backend\": \"cuda\", \"executed_backend\": \"cpu\","
    " \"bucket\": 1796385600000, \"receipts\": 40, \"fallback\": 8,"
    " \"unproven\": 0, \"clean\": 32, \"fallback_rate\": 0.2},"
    "{\"requested_backend\": \"cuda\", \"executed_backend\": \"cpu\","
    " \"bucket\": 1796389200000, \"receipts\": 0, \"fallback\": 0,"
    " \"unproven\": 0, \"clean\": 0, \"fallback_rate\": 0.0},"
    "{\"requested_backend\": \"cuda\", \"executed_backend\": \"cpu\","
    " \"bucket\": 1796392800000, \"receipts\": 1000, \"fallback\": 1,"
    " \"unproven\": 0, \"clean\": 999, \"fallback_rate\": 0.001},"
    "{\"requested_backend\": \"cuda\", \"executed_backend\": \"cpu\","
    " \"bucket\": 1796396400000, \"receipts\": 10, \"fallback\": 0,"
    " \"unproven\": 0, \"clean\": 10, \"fallback_rate\": 0.0},"
    "{\"requested_backend\": \"wgpu-vulkan\", \"executed_backend\":"
    " \"wgpu-vulkan\", \"bucket\": 1796385600000, \"receipts\": 5,"
    " \"fallback\": 0, \"unproven\": 5, \"clean\": 0, \"fallback_rate\": 0.0},"
    "{\"requested_backend\": \"wgpu-vulkan\", \"executed_backend\":"
    " \"wgpu-vulkan\", \"bucket\": 1796389200000, \"receipts\": 0,"
    " \"fallback\": 0, \"unproven\": 0, \"clean\": 0, \"fallback_rate\": 0.0},"
    "{\"requested_backend\": \"wgpu-vulkan\", \"executed_backend\":"
    " \"wgpu-vulkan\", \"bucket\": 1796392800000, \"receipts\": 7,"
    " \"fallback\": 0, \"unproven\": 0, \"clean\": 7, \"fallback_rate\": 0.0},"
    "{\"requested_backend\": \"wgpu-vulkan\", \"executed_backend\":"
    " \"wgpu-vulkan\", \"bucket\": 1796396400000, \"receipts\": 3,"
    " \"fallback\": 0, \"unproven\": 0, \"clean\": 3, \"fallback_rate\": 0.0}"
    "], \"truncated\": false, \"total\": ["
    "{\"bucket\": 1796385600000, \"receipts\": 45, \"fallback\": 8,"
    " \"unproven\": 5, \"clean\": 32, \"fallback_rate\": 0.17777777777777778},"
    "{\"bucket\": 1796389200000, \"receipts\": 0, \"fallback\": 0,"
    " \"unproven\": 0, \"clean\": 0, \"fallback_rate\": 0.0},"
    "{\"bucket\": 1796392800000, \"receipts\": 1007, \"fallback\": 1,"
    " \"unproven\": 0, \"clean\": 1006, \"fallback_rate\": 0.000993},"
    "{\"bucket\": 1796396400000, \"receipts\": 13, \"fallback\": 0,"
    " \"unproven\": 0, \"clean\": 13, \"fallback_rate\": 0.0}]}";

/* A coverage series without groups: two counters, three hours. */
static const char coverage_series_json[] =
    "{\"rows\": ["
    "{\"counter\": \"counters.decode_steps\", \"bucket\": 1796385600000,"
    " \"bit\": 0, \"receipts\": 4, \"measured\": 4, \"unknown\": 0,"
    " \"not_applicable\": 0, \"coverage\": 1.0, \"sum\": 8, \"min\": 1,"
    " \"max\": 3, \"mean\": 2.0},"
    "{\"counter\": \"counters.decode_steps\", \"bucket\": 1796389200000,"
    " \"bit\": 0, \"receipts\": 4, \"measured\": 1, \"unknown\": 3,"
    " \"not_applicable\": 0, \"coverage\": 0.25, \"sum\": 2, \"min\": 2,"
    " \"max\": 2, \"mean\": 2.0},"
    "{\"counter\": \"counters.decode_steps\", \"bucket\": 1796392800000,"
    " \"bit\": 0, \"receipts\": 0, \"measured\": 0, \"unknown\": 0,"
    " \"not_applicable\": 0, \"coverage\": 0.0, \"sum\": 0, \"min\": null,"
    " \"max\": null, \"mean\": null},"
    "{\"counter\": \"latency.queue_delay_us\", \"bucket\": 1796385600000,"
    " \"bit\": 23, \"receipts\": 4, \"measured\": 0, \"unknown\": 2,"
    " \"not_applicable\": 2, \"coverage\": 0.0, \"sum\": 0, \"min\": null,"
    " \"max\": null, \"mean\": null},"
    "{\"counter\": \"latency.queue_delay_us\", \"bucket\": 1796389200000,"
    " \"bit\": 23, \"receipts\": 4, \"measured\": 3, \"unknown\": 0,"
    " \"not_applicable\": 1, \"coverage\": 1.0, \"sum\": 30, \"min\": 5,"
    " \"max\": 20, \"mean\": 10.0},"
    "{\"counter\": \"latency.queue_delay_us\", \"bucket\": 1796392800000,"
    " \"bit\": 23, \"receipts\": 0, \"measured\": 0, \"unknown\": 0,"
    " \"not_applicable\": 0, \"coverage\": 0.0, \"sum\": 0, \"min\": null,"
    " \"max\": null, \"mean\": null}"
    "], \"truncated\": false}";

static const char empty_json[] = "{\"rows\": [], \"truncated\": false}";

struct golden_case {
    const char *golden;
    const char *kind;
    const char *input;
    int format;
    const char *group_by;
};

static const struct golden_case golden_cases[] = {
    { "fallbacks.table", "fallbacks", fallbacks_json, OUTPUT_TABLE, NULL },
    { "fallbacks.csv", "fallbacks", fallbacks_json, OUTPUT_CSV, NULL },
    { "fallbacks.json", "fallbacks", fallbacks_json, OUTPUT_JSON, NULL },
    { "fallbacks_backends.table", "fallbacks", fallbacks_backends_json,
      OUTPUT_TABLE, "backends" },
    { "fallbacks_backends.csv", "fallbacks", fallbacks_backends_json,
      OUTPUT_CSV, "backends" },
    { "fallbacks_plan_backends.table", "fallbacks",
      fallbacks_plan_backends_json, OUTPUT_TABLE, "plan,backends" },
    { "fallbacks_plan_backends.csv", "fallbacks", fallbacks_plan_backends_json,
      OUTPUT_CSV, "plan,backends" },
    { "fallbacks_backends_plan.csv", "fallbacks", fallbacks_plan_backends_json,
      OUTPUT_CSV, "backends,plan" },
    { "coverage.table", "coverage", coverage_json, OUTPUT_TABLE, NULL },
    { "coverage_model.table", "coverage", coverage_model_json, OUTPUT_TABLE,
      "model" },
    { "coverage_model.csv", "coverage", coverage_model_json, OUTPUT_CSV,
      "model" },
    { "coverage.csv", "coverage", coverage_json, OUTPUT_CSV, NULL },
    { "coverage.json", "coverage", coverage_json, OUTPUT_JSON, NULL },
    { "receipts.table", "receipts", receipts_json, OUTPUT_TABLE, NULL },
    { "receipts.csv", "receipts", receipts_json, OUTPUT_CSV, NULL },
    { "receipts.json", "receipts", receipts_json, OUTPUT_JSON, NULL },
    { "receipts.jsonl", "receipts", receipts_json, OUTPUT_JSONL, NULL },
    { "gaps.table", "gaps", gaps_json, OUTPUT_TABLE, NULL },
    { "gaps.csv", "gaps", gaps_json, OUTPUT_CSV, NULL },
    { "stats.table", "stats", stats_json, OUTPUT_TABLE, NULL },
    { "metrics.prom", "metrics", metrics_json, OUTPUT_PROMETHEUS, NULL },
    { "stats.csv", "stats", stats_json, OUTPUT_CSV, NULL },
    { "empty.table", "receipts", empty_json, OUTPUT_TABLE, NULL },
    { "empty.csv", "receipts", empty_json, OUTPUT_CSV, NULL },
    { "empty_prunes.csv", "prunes", empty_json, OUTPUT_CSV, NULL },
    { "empty_fallbacks.csv", "fallbacks", empty_json, OUTPUT_CSV, NULL },
};

/* Series (--every 1h). */
static const struct golden_case series_cases[] = {
    { "series_backends.chart", "fallbacks", series_json, OUTPUT_CHART,
      "backends" },
    { "series_backends.table", "fallbacks", series_json, OUTPUT_TABLE,
      "backends" },
    { "series_backends.csv", "fallbacks", series_json, OUTPUT_CSV, "backends" },
    { "coverage_series.chart", "coverage", coverage_series_json, OUTPUT_CHART,
      NULL },
    { "empty_series.chart", "fallbacks", empty_json, OUTPUT_CHART, NULL },
};

START_TEST(test_output_series_match_golden)
{
    const struct golden_case *gc = &series_cases[_i];
    struct result r;
    char *got;
    int rc;

    result_from_json(&r, gc->input);
    got = render_every(gc->format, gc->kind, gc->group_by, 3600000, &r.up.data,
                       &rc);
    ck_assert_msg(rc == 0, "%s: %s", gc->golden, got);
    check_golden(gc->golden, got);
    free(got);
    result_free(&r);
}
END_TEST

/* A chart needs a series: rows without buckets are refused. */
START_TEST(test_output_chart_needs_buckets)
{
    struct result r;
    char *got;
    int rc;

    result_from_json(&r, fallbacks_json);
    got =
        render_every(OUTPUT_CHART, "fallbacks", NULL, 3600000, &r.up.data, &rc);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(got, "--every") != NULL, "%s", got);
    free(got);
    result_free(&r);
}
END_TEST

START_TEST(test_output_matches_golden)
{
    const struct golden_case *gc = &golden_cases[_i];
    struct result r;
    char *got;
    int rc;

    result_from_json(&r, gc->input);
    got = render_by(gc->format, gc->kind, gc->group_by, &r.up.data, &rc);
    ck_assert_msg(rc == 0, "%s: %s", gc->golden, got);
    check_golden(gc->golden, got);
    free(got);
    result_free(&r);
}
END_TEST

/* ---- exactness ---- */

START_TEST(test_output_json_keeps_u64_max_exact)
{
    struct result r;
    struct json_object *j, *row, *v;
    char *got;
    int rc;

    result_from_json(&r, "{\"rows\": [{\"v\": 18446744073709551615, \"w\": "
                         "9223372036854775808, \"n\": -9223372036854775807, "
                         "\"sum\": \"36893488147419103230\", \"f\": 0.1}], "
                         "\"truncated\": false}");
    got = render(OUTPUT_JSON, "coverage", &r.up.data, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_nonnull(strstr(got, "18446744073709551615"));
    ck_assert_ptr_nonnull(strstr(got, "9223372036854775808"));
    ck_assert_ptr_null(strstr(got, "e+19"));
    j = json_tokener_parse(got);
    ck_assert_ptr_nonnull(j);
    row = json_object_array_get_idx(json_object_object_get(j, "rows"), 0);
    v = json_object_object_get(row, "v");
    ck_assert(json_object_is_type(v, json_type_int));
    ck_assert_uint_eq(json_object_get_uint64(v), UINT64_MAX);
    v = json_object_object_get(row, "w");
    ck_assert_uint_eq(json_object_get_uint64(v), 9223372036854775808ull);
    v = json_object_object_get(row, "n");
    ck_assert_int_eq(json_object_get_int64(v), -9223372036854775807ll);
    /* A sum past 2^64 arrives as a decimal string and stays one. */
    v = json_object_object_get(row, "sum");
    ck_assert(json_object_is_type(v, json_type_string));
    ck_assert_str_eq(json_object_get_string(v), "36893488147419103230");
    v = json_object_object_get(row, "f");
    ck_assert(json_object_is_type(v, json_type_double));
    ck_assert_ptr_nonnull(strstr(got, "0.1"));
    ck_assert_ptr_null(strstr(got, "0.1000"));
    json_object_put(j);
    free(got);
    result_free(&r);
}
END_TEST

START_TEST(test_output_csv_and_table_keep_u64_max_exact)
{
    static const int formats[] = { OUTPUT_TABLE, OUTPUT_CSV };
    struct result r;
    char *got;
    int rc;

    result_from_json(&r, "{\"rows\": [{\"max\": 18446744073709551615}], "
                         "\"truncated\": false}");
    got = render(formats[_i], "coverage", &r.up.data, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_nonnull(strstr(got, "18446744073709551615"));
    free(got);
    result_free(&r);
}
END_TEST

/* Binary fields (the raw bytes of a quarantined payload) are base64 in JSON
 * and CSV and a size in tables. */
START_TEST(test_output_bin_fields)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacked up;
    size_t off = 0;
    char *got;
    int rc;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "rows", 4);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "id", 2);
    msgpack_pack_uint64(&pk, 9);
    msgpack_pack_str_with_body(&pk, "raw", 3);
    msgpack_pack_bin_with_body(&pk,
                               "\x81\xa1"
                               "a\xff",
                               4);
    msgpack_pack_str_with_body(&pk, "truncated", 9);
    msgpack_pack_false(&pk);
    msgpack_unpacked_init(&up);
    ck_assert_int_eq(msgpack_unpack_next(&up, sb.data, sb.size, &off),
                     MSGPACK_UNPACK_SUCCESS);

    got = render(OUTPUT_JSON, "quarantine", &up.data, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_nonnull(strstr(got, "\"raw\": \"gaFh/w==\""));
    free(got);
    got = render(OUTPUT_CSV, "quarantine", &up.data, &rc);
    ck_assert_int_eq(rc, 0);
    /* The header is the kind's whole fixed list, raw among it. */
    ck_assert_str_eq(got, "id,time,source,op,code,path,message,size,raw,"
                          "attempts,last_attempt_at,extra\n"
                          "9,,,,,,,,gaFh/w==,,,\n");
    free(got);
    got = render(OUTPUT_TABLE, "quarantine", &up.data, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_nonnull(strstr(got, "<4 bytes>"));
    free(got);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

/* One map as a name/value listing (quarantine show): nested maps become
 * dotted names, numbers line up, times are RFC 3339. */
START_TEST(test_output_record_matches_golden)
{
    struct result r;
    char *buf = NULL, err[OUTPUT_ERR_MAX] = "";
    size_t len = 0;
    FILE *f;

    result_from_json(&r,
                     "{\"id\": 5, \"time\": 1796011200123, \"source\":"
                     " \"node-9/rt-1\", \"op\": \"receipts\", \"code\":"
                     " \"invalid\", \"path\": \"[3].counters.decode_steps\","
                     " \"message\": \"expected an unsigned integer, got a"
                     " string\", \"size\": 1234, \"payload\": {"
                     "\"schema_version\": 2, \"model_instance_id\": \"m\","
                     " \"counters\": {\"decode_steps\": \"12\","
                     " \"fallback_count\": 18446744073709551615}}}");
    f = open_memstream(&buf, &len);
    ck_assert_int_eq(output_record(f, &r.up.data, err, sizeof(err)), 0);
    fclose(f);
    check_golden("record.table", buf);
    free(buf);
    result_free(&r);
}
END_TEST

/* ---- CSV quoting ---- */

struct csv_case {
    const char *in;
    size_t len;
    const char *want;
};

#define CSV(s, w)                                                              \
    {                                                                          \
        s, sizeof(s) - 1, w                                                    \
    }

static const struct csv_case csv_cases[] = {
    CSV("plain", "plain"),
    CSV("", ""),
    CSV(" spaced ", " spaced "),
    CSV("a,b", "\"a,b\""),
    CSV("say \"hi\"", "\"say \"\"hi\"\"\""),
    CSV("\"", "\"\"\"\""),
    CSV("line1\nline2", "\"line1\nline2\""),
    CSV("cr\r", "\"cr\r\""),
    CSV("crlf\r\n", "\"crlf\r\n\""),
    CSV("all, \"of\"\nthem", "\"all, \"\"of\"\"\nthem\""),
    CSV("\xce\xb2"
        "eta",
        "\xce\xb2"
        "eta"),
};

START_TEST(test_output_csv_field_quotes_rfc4180)
{
    const struct csv_case *c = &csv_cases[_i];
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    ck_assert_ptr_nonnull(f);
    output_csv_field(f, c->in, c->len);
    fclose(f);
    ck_assert_msg(strcmp(buf, c->want) == 0, "case %d: got [%s] want [%s]", _i,
                  buf, c->want);
    free(buf);
}
END_TEST

/* ---- errors ---- */

static const char *const bad_results[] = {
    "[1, 2]",          "{\"truncated\": false}",          "{\"rows\": 3}",
    "{\"rows\": [1]}", "{\"rows\": [{\"a\": 1}, \"x\"]}",
};

START_TEST(test_output_rejects_result_without_rows)
{
    static const int formats[] = { OUTPUT_TABLE, OUTPUT_CSV, OUTPUT_JSON,
                                   OUTPUT_PROMETHEUS };
    struct result r;
    char *got;
    size_t i;
    int rc;

    result_from_json(&r, bad_results[_i]);
    for (i = 0; i < sizeof(formats) / sizeof(formats[0]); i++) {
        got = render(formats[i], "fallbacks", &r.up.data, &rc);
        ck_assert_msg(rc == -1, "%s accepted in format %d", bad_results[_i],
                      formats[i]);
        ck_assert_msg(strlen(got) > 5, "no message");
        free(got);
    }
    result_free(&r);
}
END_TEST

START_TEST(test_output_format_names)
{
    ck_assert_int_eq(output_format_from_name("table"), OUTPUT_TABLE);
    ck_assert_int_eq(output_format_from_name("json"), OUTPUT_JSON);
    ck_assert_int_eq(output_format_from_name("csv"), OUTPUT_CSV);
    ck_assert_int_eq(output_format_from_name("prometheus"), OUTPUT_PROMETHEUS);
    ck_assert_int_eq(output_format_from_name("yaml"), -1);
    ck_assert_int_eq(output_format_from_name(""), -1);
}
END_TEST

/* receiptd_up comes first, then the daemon's text as it is; a text cut
 * without its last newline still ends the file with one; a row without
 * text is an error, not an empty scrape that looks healthy. */
START_TEST(test_output_prometheus_adds_up_to_the_daemons_text)
{
    struct result r;
    char *got;
    int rc;

    result_from_json(&r, "{\"rows\": [{\"text\": \"x_total 1\"}], "
                         "\"truncated\": false}");
    got = render(OUTPUT_PROMETHEUS, "metrics", &r.up.data, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(strncmp(got, "# HELP receiptd_up ", 19), 0);
    ck_assert_ptr_nonnull(strstr(got, "\nreceiptd_up 1\nx_total 1\n"));
    ck_assert_int_eq(got[strlen(got) - 1], '\n');
    free(got);
    result_free(&r);

    result_from_json(&r, "{\"rows\": [{\"txt\": \"x 1\"}], "
                         "\"truncated\": false}");
    got = render(OUTPUT_PROMETHEUS, "metrics", &r.up.data, &rc);
    ck_assert_int_eq(rc, -1);
    ck_assert_ptr_nonnull(strstr(got, "text"));
    free(got);
    result_free(&r);
}
END_TEST

/* ---- truncation notes ---- */

/* The note output_truncation() writes for kind over the JSON result. */
static char *
note(const char *kind, const char *json, int *cut)
{
    struct output_spec spec = { kind, NULL, NULL, 0, 0, 0 };
    struct result r;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    ck_assert_ptr_nonnull(f);
    result_from_json(&r, json);
    *cut = output_truncation(f, &spec, &r.up.data);
    fclose(f);
    result_free(&r);
    return buf;
}

START_TEST(test_output_truncation_names_the_way_on)
{
    char *got;
    int cut;

    got = note("receipts",
               "{\"rows\": [{\"receipt_id\": 9}, {\"receipt_id\": 7}], "
               "\"truncated\": true}",
               &cut);
    ck_assert_int_eq(cut, 1);
    ck_assert_str_eq(got, "receiptctl: receipts: truncated at 2 rows; more "
                          "match: page on with --before-id 7, or raise "
                          "--limit\n");
    free(got);
    got = note("coverage",
               "{\"rows\": [{\"counter\": \"x\", \"bit\": 25}, {\"bit\": 3}], "
               "\"truncated\": true}",
               &cut);
    ck_assert_int_eq(cut, 1);
    ck_assert_ptr_nonnull(strstr(got, "raise --limit or narrow the filters\n"
                                      "receiptctl: coverage: the last group "
                                      "is incomplete: 4 of its 26 counters"));
    free(got);
    got = note("coverage", "{\"rows\": [{\"bit\": 25}], \"truncated\": true}",
               &cut);
    ck_assert_ptr_null(strstr(got, "incomplete"));
    free(got);
    got = note("gaps",
               "{\"rows\": [{\"source\": \"s1\", \"missing_truncated\": "
               "true}, {\"source\": \"s2\", \"missing_truncated\": false}], "
               "\"truncated\": false}",
               &cut);
    ck_assert_int_eq(cut, 1);
    ck_assert_str_eq(got, "receiptctl: gaps: the missing ranges of source "
                          "\"s1\" are cut at --limit; missing_seqs counts "
                          "them all\n");
    free(got);
    got = note("plans", "{\"rows\": [], \"truncated\": false}", &cut);
    ck_assert_int_eq(cut, 0);
    ck_assert_str_eq(got, "");
    free(got);
}
END_TEST

/* Rates in tables keep two significant digits: a rare fallback is not
 * 0.0%, and only exactly 0 and 1 are 0% and 100%. */
static const struct {
    const char *rate, *want;
} rates[] = {
    { "0.000016", " 0.0016%\n" }, { "0.0012", " 0.12%\n" },
    { "0.005", " 0.50%\n" },      { "0.01", " 1.0%\n" },
    { "0.123", " 12.3%\n" },      { "0.99996", " 99.996%\n" },
    { "0.0", " 0%\n" },           { "1.0", " 100%\n" },
};

START_TEST(test_output_rates_keep_two_digits)
{
    struct result r;
    char json[256], *got;
    int rc;

    snprintf(json, sizeof(json),
             "{\"rows\": [{\"prepared_plan_id\": \"p\", \"receipts\": 1,"
             " \"fallback\": 0, \"unproven\": 0, \"clean\": 1,"
             " \"fallback_rate\": %s}], \"truncated\": false}",
             rates[_i].rate);
    result_from_json(&r, json);
    got = render(OUTPUT_TABLE, "fallbacks", &r.up.data, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(strlen(got) > strlen(rates[_i].want) &&
                      strcmp(got + strlen(got) - strlen(rates[_i].want),
                             rates[_i].want) == 0,
                  "%s: %s", rates[_i].rate, got);
    free(got);
    result_free(&r);
}
END_TEST

static Suite *
output_suite(void)
{
    Suite *s = suite_create("output");
    TCase *tc;

    tc = tcase_create("golden");
    tcase_add_loop_test(tc, test_output_matches_golden, 0,
                        (int)(sizeof(golden_cases) / sizeof(golden_cases[0])));
    suite_add_tcase(s, tc);
    tc = tcase_create("exact");
    tcase_add_test(tc, test_output_json_keeps_u64_max_exact);
    tcase_add_loop_test(tc, test_output_csv_and_table_keep_u64_max_exact, 0, 2);
    tcase_add_test(tc, test_output_bin_fields);
    tcase_add_loop_test(tc, test_output_rates_keep_two_digits, 0,
                        (int)(sizeof(rates) / sizeof(rates[0])));
    tcase_add_test(tc, test_output_record_matches_golden);
    tcase_add_loop_test(tc, test_output_series_match_golden, 0,
                        (int)(sizeof(series_cases) / sizeof(series_cases[0])));
    tcase_add_test(tc, test_output_chart_needs_buckets);
    suite_add_tcase(s, tc);
    tc = tcase_create("truncation");
    tcase_add_test(tc, test_output_truncation_names_the_way_on);
    suite_add_tcase(s, tc);
    tc = tcase_create("csv");
    tcase_add_loop_test(tc, test_output_csv_field_quotes_rfc4180, 0,
                        (int)(sizeof(csv_cases) / sizeof(csv_cases[0])));
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_add_loop_test(tc, test_output_rejects_result_without_rows, 0,
                        (int)(sizeof(bad_results) / sizeof(bad_results[0])));
    tcase_add_test(tc, test_output_format_names);
    suite_add_tcase(s, tc);
    tc = tcase_create("prometheus");
    tcase_add_test(tc, test_output_prometheus_adds_up_to_the_daemons_text);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(output_suite());
    int failed;

    /* As receiptctl does: tables measure UTF-8 text by display width. */
    setlocale(LC_CTYPE, "C.UTF-8");
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
