/*
 * e2e_metrics.c: what operators watch, against the real daemon: the
 * Prometheus exposition of `receiptctl stats --format prometheus` (the
 * daemon's `metrics` query kind) and, when the daemon listens for HTTP,
 * /metrics and /healthz.
 *
 * The case tagged "promtool" runs Prometheus' own linter over the real
 * output; it reports SKIP where promtool is not installed, unless
 * RECEIPTD_CI is set (CI installs it: there a missing promtool fails).
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "e2e_util.h"
#include "op.h"
#include "skip.h"

#define T   5000
#define CTL TEST_BINARY_DIR "/client/receiptctl"

static struct e2e_daemon d;

static void
setup_models(void)
{
    const char *extra[] = { "--metrics-model-series", "2", NULL };

    ck_assert_int_eq(e2e_start(&d, extra), 0);
}

static void
teardown(void)
{
    e2e_stop_clean(&d);
}

static void
send_one(int fd, uint64_t seq, const char *model, const char *req,
         const char *exe, uint64_t coverage)
{
    struct e2e_receipt r = { .schema = 3,
                             .plan = "plan-p",
                             .graph = "g",
                             .model = model,
                             .requested = req,
                             .executed = exe,
                             .coverage = coverage,
                             .decode_steps = seq,
                             .fallback_count = 0 };
    struct e2e_reply rep;
    size_t len;
    char *body = e2e_receipt_bytes(&r, &len);

    ck_assert_ptr_nonnull(body);
    ck_assert_int_eq(e2e_request(fd, PROTO_OP_RECEIPT, seq, 1, seq, body, len),
                     0);
    free(body);
    ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
    ck_assert_msg(rep.r.ok, "seq %" PRIu64 ": %s", seq, rep.r.err.message);
    e2e_reply_free(&rep);
}

/*
 * Ten receipts: 3 cuda->cpu fallbacks, 6 cuda->cuda measured in bit 0
 * only, 1 cpu->cpu; three models with 5, 4 and 1 receipts.
 */
static void
send_fleet(void)
{
    int fd = e2e_connect(&d);
    uint64_t seq = 1;
    int i;

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "node-1"), 0);
    for (i = 0; i < 3; i++)
        send_one(fd, seq++, "model-a", "cuda", "cpu", 0x1);
    for (i = 0; i < 6; i++)
        send_one(fd, seq++, i < 2 ? "model-a" : "model-b", "cuda", "cuda", 0x1);
    send_one(fd, seq++, "model-c", "cpu", "cpu", 0x1);
    close(fd);
}

static char *
scrape(void)
{
    const char *argv[] = { "receiptctl", "stats", "--format", "prometheus",
                           NULL };
    char *out = NULL, *err = NULL;
    int rc = e2e_run(CTL, argv, NULL, d.sock, &out, &err);

    ck_assert_msg(rc == 0, "receiptctl exit %d: %s", rc, err ? err : "");
    ck_assert_ptr_nonnull(out);
    free(err);
    return out;
}

/* The value of the sample line that starts with series (name and labels,
 * exactly), or -1 when there is none. */
static double
sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    const char *p;

    for (p = text; p != NULL && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return -1;
}

/* Prometheus' linter accepts the real output, every family of it. */
START_TEST(test_metrics_pass_promtool)
{
    char tool[512], path[300];
    const char *argv[] = { "promtool", "check", "metrics", NULL };
    char *text, *out = NULL, *err = NULL;
    FILE *f;
    int rc;

    if (e2e_which("promtool", tool, sizeof(tool)) != 0) {
        ck_assert_msg(getenv("RECEIPTD_CI") == NULL,
                      "promtool is missing, and CI installs it "
                      "(scripts/install-deps.sh: prometheus)");
        skip_now("promtool (Debian's prometheus package) is not installed");
    }
    send_fleet();
    text = scrape();
    snprintf(path, sizeof(path), "%s/metrics.prom", d.dir);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
    rc = e2e_run(tool, argv, path, NULL, &out, &err);
    ck_assert_msg(rc == 0, "promtool check metrics: exit %d:\n%s%s", rc,
                  out ? out : "", err ? err : "");
    /* The linter prints nothing when it has nothing to say. */
    ck_assert_msg(out != NULL && out[0] == '\0', "promtool: %s", out);
    free(out);
    free(err);
    free(text);
}
END_TEST

/* The conventions hold without promtool too: every counter's name ends
 * in _total, no family is both a gauge and a counter, every sample has
 * its TYPE line, no unit but base units in names. */
START_TEST(test_metrics_follow_the_conventions)
{
    char *text, *line, *save = NULL;
    char types[256][96];
    char kinds[256][16];
    size_t ntypes = 0, i, j;

    send_fleet();
    text = scrape();
    for (line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        char name[96], kind[16];

        if (strncmp(line, "# TYPE ", 7) != 0)
            continue;
        ck_assert_int_eq(sscanf(line + 7, "%95s %15s", name, kind), 2);
        ck_assert_uint_lt(ntypes, 256);
        if (strcmp(kind, "counter") == 0) {
            size_t n = strlen(name);

            ck_assert_msg(n > 6 && strcmp(name + n - 6, "_total") == 0,
                          "counter %s does not end in _total", name);
            name[n - 6] = '\0';
        }
        ck_assert_msg(strstr(name, "_ms") == NULL &&
                          strstr(name, "_us") == NULL,
                      "%s: not a base unit", name);
        for (i = 0; i < ntypes; i++)
            ck_assert_msg(strcmp(types[i], name) != 0,
                          "family %s is both a %s and a %s", name, kinds[i],
                          kind);
        snprintf(types[ntypes], sizeof(types[ntypes]), "%s", name);
        snprintf(kinds[ntypes], sizeof(kinds[ntypes]), "%s", kind);
        ntypes++;
    }
    /* No family twice, and the names issue 14 asks for are there. */
    for (i = 0; i < ntypes; i++)
        for (j = i + 1; j < ntypes; j++)
            ck_assert_str_ne(types[i], types[j]);
    free(text);
    text = scrape();
    ck_assert_ptr_nonnull(strstr(text, "\n# TYPE receiptd_build_info gauge\n"
                                       "receiptd_build_info{version=\""));
    ck_assert_ptr_nonnull(
        strstr(text, "# TYPE receiptd_commit_duration_seconds histogram\n"));
    ck_assert_ptr_nonnull(
        strstr(text, "# TYPE receiptd_auth_failures_total counter\n"));
    ck_assert_ptr_nonnull(strstr(
        text, "# TYPE receiptd_unauthenticated_refused_total counter\n"));
    ck_assert_ptr_null(strstr(text, "The daemon's stats field"));
    free(text);
}
END_TEST

/* The figures match what was sent: receipts by backends and status from
 * the rollups, coverage per counter, models bounded by
 * metrics.model_series, the histogram consistent with the commits. */
START_TEST(test_metrics_figures_match_what_was_sent)
{
    char *text;
    double count, inf, prev = 0, v, start;
    const char *p;
    int fd, buckets = 0;
    uint64_t groups;

    send_fleet();
    text = scrape();
    ck_assert_double_eq(
        sample(text, "receiptd_stored_receipts{requested_backend=\"cuda\","
                     "executed_backend=\"cpu\",status=\"fallback\"}"),
        3);
    ck_assert_double_eq(
        sample(text, "receiptd_stored_receipts{requested_backend=\"cuda\","
                     "executed_backend=\"cuda\",status=\"fallback\"}"),
        0);
    ck_assert_double_eq(
        sample(text, "receiptd_stored_receipts{requested_backend=\"cpu\","
                     "executed_backend=\"cpu\",status=\"unproven\"}"),
        1);
    ck_assert_double_eq(
        sample(text, "receiptd_stored_coverage_receipts{counter=\"counters."
                     "decode_steps\",coverage=\"measured\"}"),
        10);
    ck_assert_double_eq(
        sample(text, "receiptd_stored_coverage_receipts{counter=\"counters."
                     "graph_launches\",coverage=\"unknown\"}"),
        10);
    ck_assert_double_eq(sample(text, "receiptd_receipts_accepted_total"), 10);
    /* Two models of three, the biggest: model-b (4, all clean or
     * unproven) and model-a (5, 3 fallbacks). */
    ck_assert_double_eq(
        sample(text, "receiptd_stored_model_receipts{model_instance_id="
                     "\"model-a\",status=\"fallback\"}"),
        3);
    ck_assert_double_ge(
        sample(text, "receiptd_stored_model_receipts{model_instance_id="
                     "\"model-b\",status=\"unproven\"}"),
        0);
    ck_assert_ptr_null(strstr(text, "model-c"));
    ck_assert_double_eq(sample(text, "receiptd_stored_models_omitted"), 1);
    /* The histogram: cumulative buckets, +Inf equal to the count, which is
     * the committed groups that `stats` counts. */
    for (p = strstr(text, "receiptd_commit_duration_seconds_bucket{");
         p != NULL;
         p = strstr(p + 1, "receiptd_commit_duration_seconds_bucket{")) {
        v = strtod(strchr(p, '}') + 2, NULL);
        ck_assert_double_ge(v, prev);
        prev = v;
        buckets++;
    }
    ck_assert_int_eq(buckets, 15);
    inf = sample(text, "receiptd_commit_duration_seconds_bucket{le=\"+Inf\"}");
    count = sample(text, "receiptd_commit_duration_seconds_count");
    ck_assert_double_eq(inf, count);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    groups = e2e_stat(fd, 1, "commit_groups");
    close(fd);
    ck_assert_double_eq(count, (double)groups);
    ck_assert_double_ge(count, 1);
    ck_assert_double_gt(sample(text, "receiptd_commit_duration_seconds_sum"),
                        0);
    start = sample(text, "receiptd_start_time_seconds");
    ck_assert_double_le(start, (double)time(NULL) + 1);
    ck_assert_double_gt(start, (double)time(NULL) - 600);
    free(text);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("e2e_metrics");
    TCase *tc;

    tc = tcase_create("exposition");
    tcase_add_checked_fixture(tc, setup_models, teardown);
    tcase_add_test(tc, test_metrics_follow_the_conventions);
    tcase_add_test(tc, test_metrics_figures_match_what_was_sent);
    suite_add_tcase(s, tc);

    tc = tcase_create("promtool");
    tcase_set_tags(tc, "promtool");
    tcase_add_checked_fixture(tc, setup_models, teardown);
    tcase_add_test(tc, test_metrics_pass_promtool);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(suite());
    int status;

    srunner_run_all(sr, CK_NORMAL);
    status = skip_status(sr);
    srunner_free(sr);
    return status;
}
