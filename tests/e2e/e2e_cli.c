/*
 * e2e_cli.c: what scripts rely on in receiptctl (issue 15), against the
 * real receiptd on a temporary socket and database: fixed CSV schemas,
 * JSON lines, unmeasured counters as null, filters a command does not
 * apply refused, truncation on stderr, durations, tokens kept out of argv,
 * the daemon's --check-config, and idempotent imports.
 *
 * Every case runs the real receiptctl binary (fork/exec) and reads its
 * stdout, stderr and exit status.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <locale.h>
#include <wchar.h>

#include <json-c/json.h>
#include <msgpack.h>
#include <pty.h>

#include "clock.h"
#include "e2e_util.h"

#define CTL TEST_BINARY_DIR "/client/receiptctl"

static struct e2e_daemon d;

struct run {
    int status; /* exit code, or -1 when killed */
    char *out;
    char *err;
};

static void
run_free(struct run *r)
{
    free(r->out);
    free(r->err);
}

static char *
slurp(const char *path)
{
    size_t len;
    char *s = e2e_read_file(path, &len);

    return s != NULL ? s : strdup("");
}

/*
 * Runs receiptctl with args (NULL-terminated, without argv[0]), talking to
 * the test's daemon through RECEIPTD_SOCKET; env, when not NULL, is a
 * NULL-terminated list of NAME=VALUE set as well; stdin_path, when not
 * NULL, is its standard input.
 */
static void
run_env(struct run *r, const char *const *env, const char *stdin_path,
        const char *const *args)
{
    char outp[300], errp[300];
    const char *argv[64];
    pid_t pid;
    int st, i, fd;

    argv[0] = "receiptctl";
    for (i = 0; args[i] != NULL; i++)
        argv[i + 1] = args[i];
    argv[i + 1] = NULL;
    snprintf(outp, sizeof(outp), "%s/ctl.out", d.dir);
    snprintf(errp, sizeof(errp), "%s/ctl.err", d.dir);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        fd = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        fd = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 2);
        if (stdin_path != NULL) {
            fd = open(stdin_path, O_RDONLY);
            dup2(fd, 0);
        }
        setenv("RECEIPTD_SOCKET", d.sock, 1);
        unsetenv("RECEIPTD_TOKEN");
        for (i = 0; env != NULL && env[i] != NULL; i++)
            putenv((char *)env[i]);
        execv(CTL, (char *const *)argv);
        _exit(127);
    }
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r->out = slurp(outp);
    r->err = slurp(errp);
}

static void
run(struct run *r, const char *const *args)
{
    run_env(r, NULL, NULL, args);
}

/* Runs and expects exit 0. */
static void
run_ok(struct run *r, const char *const *args)
{
    run(r, args);
    ck_assert_msg(r->status == 0, "%s: exit %d\nstdout: %s\nstderr: %s",
                  args[0], r->status, r->out, r->err);
}

/* The first line of s, copied into buf. */
static const char *
first_line(const char *s, char *buf, size_t len)
{
    size_t n = strcspn(s, "\n");

    snprintf(buf, len, "%.*s", (int)n, s);
    return buf;
}

/* A file in the daemon's directory holding text; its path in path. */
static void
write_tmp(char *path, size_t len, const char *name, const char *text)
{
    snprintf(path, len, "%s/%s", d.dir, name);
    ck_assert_int_eq(e2e_write_file(path, text), 0);
}

/* Starts the test's daemon with extra flags. */
static void
start(const char *const *extra)
{
    if (e2e_start(&d, extra) != 0) {
        size_t len;
        char *log = e2e_read_file(d.log, &len);

        ck_abort_msg("receiptd did not start: %s", log ? log : "(no log)");
    }
}

static void
setup(void)
{
    static const char *const extra[] = { "--log-level", "warning", NULL };

    start(extra);
}

static void
teardown(void)
{
    int st = 0;

    ck_assert_int_eq(e2e_stop(&d, SIGTERM, 10000, &st), 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    e2e_cleanup(&d);
}

/* A schema-1 receipt measuring only decode_steps (bit 0) and a schema-3
 * one measuring everything, as JSON lines. */
#define S1_LINE                                                                \
    "{\"schema_version\":1,\"requested_backend\":\"cuda\","                    \
    "\"executed_backend\":\"cpu\",\"model_instance_id\":\"m1\","               \
    "\"prepared_plan_id\":\"plan-a\",\"graph_hash\":\"g\","                    \
    "\"stop_reason\":\"eos\",\"counter_coverage\":1,"                          \
    "\"counters\":{\"decode_steps\":5,\"graph_launches\":0,"                   \
    "\"compute_dispatches\":0,\"device_fences\":0,"                            \
    "\"host_to_device_bytes\":0,\"device_to_host_bytes\":0,"                   \
    "\"fallback_count\":0,\"hot_path_allocations\":0,\"compile_calls\":0,"     \
    "\"immutable_upload_bytes\":0},\"artifacts\":{\"temp_created_bytes\":0,"   \
    "\"temp_removed_bytes\":0,\"temp_retained_bytes\":0,"                      \
    "\"temp_cleanup_failures\":0}}\n"
#define S3_LINE                                                                \
    "{\"schema_version\":3,\"requested_backend\":\"cpu\","                     \
    "\"executed_backend\":\"cpu\",\"model_instance_id\":\"m3\","               \
    "\"prepared_plan_id\":\"plan-b\",\"graph_hash\":\"g\","                    \
    "\"tuning_profile\":\"\",\"stop_reason\":\"eos\","                         \
    "\"counter_coverage\":67108863,\"counters\":{\"decode_steps\":7,"          \
    "\"graph_launches\":0,\"compute_dispatches\":0,\"device_fences\":0,"       \
    "\"host_to_device_bytes\":0,\"device_to_host_bytes\":0,"                   \
    "\"fallback_count\":0,\"hot_path_allocations\":0,\"compile_calls\":0,"     \
    "\"immutable_upload_bytes\":0},\"latency\":{\"queue_delay_us\":3},"        \
    "\"artifacts\":{\"temp_created_bytes\":0,\"temp_removed_bytes\":0,"        \
    "\"temp_retained_bytes\":0,\"temp_cleanup_failures\":0}}\n"

static void
import_text(const char *name, const char *text)
{
    char path[400];
    const char *args[] = { "import", path, NULL };
    struct run r;

    write_tmp(path, sizeof(path), name, text);
    run_ok(&r, args);
    run_free(&r);
}

/* ---- fixed schemas, JSON lines, null counters ---- */

/* The CSV header of kind (with extra arguments) as it prints now. */
static void
csv_header(char *buf, size_t len, const char *const *args)
{
    struct run r;

    run_ok(&r, args);
    first_line(r.out, buf, len);
    run_free(&r);
}

START_TEST(test_cli_csv_header_is_fixed_per_kind)
{
    static const char *const kinds[][6] = {
        { "receipts", "--format", "csv", NULL },
        { "fallbacks", "--format", "csv", NULL },
        { "fallbacks", "--group-by", "backends", "--format", "csv", NULL },
        { "fallbacks", "--group-by", "none", "--format", "csv", NULL },
        { "coverage", "--format", "csv", NULL },
        { "gaps", "--format", "csv", NULL },
        { "prunes", "--format", "csv", NULL },
        { "plans", "--format", "csv", NULL },
        { "quarantine", "--format", "csv", NULL },
    };
    char before[9][2048], after[2048];
    size_t i;

    for (i = 0; i < 9; i++) {
        csv_header(before[i], sizeof(before[i]), kinds[i]);
        ck_assert_msg(before[i][0] != '\0', "%s: empty header", kinds[i][0]);
    }
    /* 44 receipt columns and extra, with no rows at all. */
    {
        int commas = 0;
        const char *p;

        for (p = before[0]; *p; p++)
            commas += *p == ',';
        ck_assert_int_eq(commas, 44);
    }
    ck_assert_str_eq(before[3], before[0]);
    ck_assert_str_eq(before[6],
                     "id,pruned_at,cutoff_at,rows,"
                     "oldest_received_at,newest_received_at,undelivered,extra");
    import_text("mixed.jsonl", S1_LINE S3_LINE);
    for (i = 0; i < 9; i++) {
        csv_header(after, sizeof(after), kinds[i]);
        ck_assert_msg(strcmp(after, before[i]) == 0,
                      "%s: header changed with rows:\n%s\n%s", kinds[i][0],
                      before[i], after);
    }
}
END_TEST

START_TEST(test_cli_jsonl_one_row_per_line)
{
    const char *args[] = { "receipts", "--format", "jsonl", NULL };
    const char *none[] = { "gaps",     "--format", "jsonl",
                           "--source", "nobody",   NULL };
    struct json_object *j;
    struct run r;
    char *line, *save = NULL;
    int n = 0;

    import_text("two.jsonl", S1_LINE S3_LINE);
    run_ok(&r, args);
    ck_assert_int_eq(e2e_count_lines(r.out), 2);
    for (line = strtok_r(r.out, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        j = json_tokener_parse(line);
        ck_assert_msg(j != NULL, "not one JSON object: %s", line);
        ck_assert(json_object_is_type(j, json_type_object));
        ck_assert(json_object_object_get_ex(j, "receipt_id", NULL));
        json_object_put(j);
        n++;
    }
    ck_assert_int_eq(n, 2);
    run_free(&r);

    run_ok(&r, none);
    ck_assert_str_eq(r.out, "");
    run_free(&r);
}
END_TEST

/* decode_steps of the schema-1 receipt is measured (5); its fallback_count
 * (bit 6) is not, so it is null in JSON and empty in CSV, never 0. */
START_TEST(test_cli_unmeasured_counter_is_null)
{
    const char *json[] = {
        "receipts", "--model", "m1", "--format", "json", NULL
    };
    const char *csv[] = {
        "receipts", "--model", "m1", "--format", "csv", NULL
    };
    struct json_object *j, *row, *counters, *v;
    struct run r;
    char *hdr, *data, *tok, *save = NULL;
    int col = 0, dcol = -1, fcol = -1;

    import_text("s1.jsonl", S1_LINE);
    run_ok(&r, json);
    j = json_tokener_parse(r.out);
    ck_assert_ptr_nonnull(j);
    row = json_object_array_get_idx(json_object_object_get(j, "rows"), 0);
    counters = json_object_object_get(row, "counters");
    ck_assert_uint_eq(json_object_get_uint64(
                          json_object_object_get(counters, "decode_steps")),
                      5);
    ck_assert(json_object_object_get_ex(counters, "fallback_count", &v));
    ck_assert_ptr_null(v);
    json_object_put(j);
    run_free(&r);

    run_ok(&r, csv);
    hdr = r.out;
    data = strchr(hdr, '\n');
    ck_assert_ptr_nonnull(data);
    *data++ = '\0';
    for (tok = strtok_r(hdr, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save), col++) {
        if (strcmp(tok, "counters.decode_steps") == 0)
            dcol = col;
        if (strcmp(tok, "counters.fallback_count") == 0)
            fcol = col;
    }
    ck_assert_int_ge(dcol, 0);
    ck_assert_int_gt(fcol, dcol);
    /* Fields of the data line by position (no quoting in this row). */
    {
        const char *p = data;
        int at = 0;
        char dv[32] = "", fv[32] = "";

        while (*p != '\0' && *p != '\n') {
            size_t n = strcspn(p, ",\n");

            if (at == dcol)
                snprintf(dv, sizeof(dv), "%.*s", (int)n, p);
            if (at == fcol)
                snprintf(fv, sizeof(fv), "%.*s", (int)n, p);
            p += n;
            if (*p == ',')
                p++;
            at++;
        }
        ck_assert_str_eq(dv, "5");
        ck_assert_str_eq(fv, "");
    }
    run_free(&r);
}
END_TEST

/* ---- filters a command does not apply ---- */

/* The daemon's count of frames read, through receiptctl. */
static uint64_t
frames_read(void)
{
    const char *args[] = { "stats", "--format", "json", NULL };
    struct json_object *j, *row;
    struct run r;
    uint64_t n;

    run_ok(&r, args);
    j = json_tokener_parse(r.out);
    ck_assert_ptr_nonnull(j);
    row = json_object_array_get_idx(json_object_object_get(j, "rows"), 0);
    n = json_object_get_uint64(json_object_object_get(row, "frames"));
    json_object_put(j);
    run_free(&r);
    return n;
}

static const struct {
    const char *args[8];
    const char *want;
} unapplied[] = {
    { { "gaps", "--since", "1h", NULL }, "--since is not an option of gaps" },
    { { "gaps", "--plan", "p", NULL }, "--plan is not an option of gaps" },
    { { "quarantine", "--plan", "p", NULL },
      "--plan is not an option of quarantine" },
    { { "quarantine", "--requested", "cuda", NULL },
      "--requested is not an option of quarantine" },
    { { "plans", "--model", "m", NULL }, "--model is not an option of plans" },
    { { "plans", "--requested", "cpu", NULL },
      "--requested is not an option of plans" },
    { { "prunes", "--source", "s", NULL },
      "--source is not an option of prunes" },
    { { "retained", "--plan", "p", "--since", "1h", NULL },
      "--since is not an option of retained" },
    { { "fallbacks", "--before-id", "9", NULL },
      "--before-id is not an option of fallbacks" },
    { { "stats", "--limit", "5", NULL }, "--limit is not an option of stats" },
    { { "quarantine", "show", "1", "--limit", "3", NULL },
      "--limit applies to the listing" },
    { { "quarantine", "replay", "1", "--source", "s", NULL },
      "--source applies to the listing" },
    { { "ping", "--format", "jsonl", NULL }, "unknown format \"jsonl\"" },
};

START_TEST(test_cli_unapplied_filter_is_usage_error)
{
    struct run r;
    uint64_t before = frames_read(), after;

    run(&r, unapplied[_i].args);
    ck_assert_msg(r.status == 2, "%s: exit %d, stderr %s", unapplied[_i].want,
                  r.status, r.err);
    ck_assert_msg(strstr(r.err, unapplied[_i].want) != NULL,
                  "want \"%s\" in: %s", unapplied[_i].want, r.err);
    ck_assert_str_eq(r.out, "");
    run_free(&r);
    /* Refused before anything was sent: one frame more is the stats
     * query itself. */
    after = frames_read();
    ck_assert_uint_eq(after, before + 1);
}
END_TEST

/* Each command's help lists the options it applies, and no other. */
START_TEST(test_cli_help_lists_own_options_only)
{
    static const struct {
        const char *cmd;
        const char *has[4];
        const char *lacks[6];
    } cases[] = {
        { "gaps",
          { "--source", "--limit", "--fail-on-truncate", NULL },
          { "--since", "--plan", "--model", "--requested", "--status", NULL } },
        { "quarantine",
          { "--source", "--since", "--until", NULL },
          { "--plan", "--requested", "--graph", "--group-by", NULL } },
        { "plans",
          { "--plan", "--graph", "--source", NULL },
          { "--model", "--requested", "--executed", NULL } },
        { "prunes",
          { "--since", "pruned at or after", NULL },
          { "--source", "--plan", NULL } },
        { "stats", { "prometheus", NULL }, { "--limit", "--since", NULL } },
    };
    size_t i, k;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *args[] = { cases[i].cmd, "--help", NULL };
        struct run r;

        run_ok(&r, args);
        for (k = 0; cases[i].has[k] != NULL; k++)
            ck_assert_msg(strstr(r.out, cases[i].has[k]) != NULL,
                          "%s --help lacks %s:\n%s", cases[i].cmd,
                          cases[i].has[k], r.out);
        for (k = 0; cases[i].lacks[k] != NULL; k++) {
            char opt[64];

            snprintf(opt, sizeof(opt), "  %s ", cases[i].lacks[k]);
            ck_assert_msg(strstr(r.out, opt) == NULL,
                          "%s --help offers %s:\n%s", cases[i].cmd,
                          cases[i].lacks[k], r.out);
        }
        run_free(&r);
    }
}
END_TEST

/* ---- series (--every) and charts ---- */

static int
count_str(const char *s, const char *what)
{
    int n = 0;

    while ((s = strstr(s, what)) != NULL) {
        n++;
        s += strlen(what);
    }
    return n;
}

/* --every makes a row per group and hour, the empty hours included (the
 * receipts arrived in the last one); --format chart draws a line per
 * group and one for the total, a character per hour. */
/* Two grouping keys: a string key with backends, in either order (the
 * columns follow it), as one total and as a series; other pairs are
 * refused before anything is sent. */
START_TEST(test_cli_group_by_two_keys)
{
    /* S1 again, but clean on its backend: plan-a and m1 get two pairs. */
    static const char s1_cuda[] =
        "{\"schema_version\":1,\"requested_backend\":\"cuda\","
        "\"executed_backend\":\"cuda\",\"model_instance_id\":\"m1\","
        "\"prepared_plan_id\":\"plan-a\",\"graph_hash\":\"g\","
        "\"stop_reason\":\"eos\",\"counter_coverage\":1,"
        "\"counters\":{\"decode_steps\":4,\"graph_launches\":0,"
        "\"compute_dispatches\":0,\"device_fences\":0,"
        "\"host_to_device_bytes\":0,\"device_to_host_bytes\":0,"
        "\"fallback_count\":0,\"hot_path_allocations\":0,\"compile_calls\":0,"
        "\"immutable_upload_bytes\":0},\"artifacts\":{\"temp_created_bytes\":0,"
        "\"temp_removed_bytes\":0,\"temp_retained_bytes\":0,"
        "\"temp_cleanup_failures\":0}}\n";
    const char *fb[] = { "fallbacks", "--group-by", "plan,backends",
                         "--format",  "csv",        NULL };
    const char *rev[] = { "fallbacks", "--group-by", "backends,plan",
                          "--format",  "csv",        NULL };
    const char *cov[] = { "coverage", "--group-by", "model,backends",
                          "--format", "csv",        NULL };
    const char *series[] = { "fallbacks", "--group-by", "source,backends",
                             "--every",   "1h",         "--since",
                             "3h",        "--format",   "csv",
                             NULL };
    static const char *const refused[] = { "plan,model", "backends,backends",
                                           "none,backends", "plan,backends,x",
                                           "backends,plan,backends" };
    const char *bad[] = { "fallbacks", "--group-by", NULL, NULL };
    char text[4096];
    size_t i;
    struct run r;
    int rows;

    snprintf(text, sizeof(text), "%s%s%s%s", S1_LINE, S1_LINE, s1_cuda,
             S3_LINE);
    import_text("pairs.jsonl", text);

    /* Most fallbacks first: plan-a's cuda->cpu pair, then the two
     * without, by name. */
    run_ok(&r, fb);
    ck_assert_int_eq(e2e_count_lines(r.out), 4);
    ck_assert_msg(strncmp(r.out,
                          "prepared_plan_id,requested_backend,executed_backend,"
                          "receipts,fallback,unproven,clean,fallback_rate,"
                          "extra\nplan-a,cuda,cpu,2,2,0,0,1,\nplan-a,cuda,cuda,"
                          "1,0,",
                          140) == 0,
                  "%s", r.out);
    ck_assert_ptr_nonnull(strstr(r.out, "\nplan-b,cpu,cpu,1,0,"));
    run_free(&r);

    run_ok(&r, rev);
    ck_assert_int_eq(e2e_count_lines(r.out), 4);
    ck_assert_ptr_nonnull(strstr(r.out, "requested_backend,executed_backend,"
                                        "prepared_plan_id,receipts,"));
    ck_assert_ptr_nonnull(strstr(r.out, "\ncuda,cpu,plan-a,2,2,0,0,1,\n"));
    ck_assert_ptr_nonnull(strstr(r.out, "\ncuda,cuda,plan-a,1,0,"));
    run_free(&r);

    /* Coverage: three groups of every counter, decode_steps measured by
     * each receipt. */
    run_ok(&r, cov);
    ck_assert_int_eq(e2e_count_lines(r.out), 1 + 3 * 26);
    ck_assert_ptr_nonnull(
        strstr(r.out, "\nm1,cuda,cpu,counters.decode_steps,0,2,2,"));
    ck_assert_ptr_nonnull(
        strstr(r.out, "\nm1,cuda,cuda,counters.decode_steps,0,1,1,"));
    ck_assert_ptr_nonnull(
        strstr(r.out, "\nm3,cpu,cpu,counters.decode_steps,0,1,1,"));
    run_free(&r);

    /* A series: every pair (one source here) has the same buckets. */
    run_ok(&r, series);
    rows = e2e_count_lines(r.out) - 1;
    ck_assert_msg(rows % 3 == 0 && (rows / 3 == 3 || rows / 3 == 4), "%s",
                  r.out);
    ck_assert_int_eq(count_str(r.out, ",cuda,cpu,"), rows / 3);
    /* The bucket after the keys; both fallbacks in the newest one. */
    ck_assert_ptr_nonnull(strstr(r.out, "source,requested_backend,"
                                        "executed_backend,bucket,receipts,"));
    ck_assert_int_eq(count_str(r.out, ",2,2,0,0,1,"), 1);
    run_free(&r);

    for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        bad[2] = refused[i];
        run(&r, bad);
        ck_assert_int_eq(r.status, 2); /* usage */
        ck_assert_msg(strstr(r.err, "--group-by") != NULL, "%s", r.err);
        ck_assert_str_eq(r.out, "");
        run_free(&r);
    }
}
END_TEST

START_TEST(test_cli_series_and_chart)
{
    const char *jsonl[] = { "fallbacks", "--group-by", "backends", "--every",
                            "1h",        "--since",    "3h",       "--format",
                            "jsonl",     NULL };
    const char *chart[] = { "fallbacks", "--group-by", "backends", "--every",
                            "1h",        "--since",    "3h",       "--format",
                            "chart",     NULL };
    const char *cov[] = { "coverage", "--every",  "1h",    "--since",
                          "2h",       "--format", "chart", NULL };
    const char *dflt[] = {
        "fallbacks", "--every", "1d", "--format", "csv", NULL
    };
    const char *nochart[] = { "fallbacks", "--format", "chart", NULL };
    const char *minutes[] = { "coverage", "--every", "90m", NULL };
    const char *far[] = {
        "fallbacks", "--every", "1h", "--since", "100d", NULL
    };
    char line[512];
    const char *p;
    struct run r;
    int rows, nb;

    import_text("series.jsonl", S1_LINE S3_LINE S3_LINE);

    run_ok(&r, jsonl);
    rows = e2e_count_lines(r.out);
    nb = rows / 2;
    ck_assert_msg(rows % 2 == 0 && (nb == 3 || nb == 4), "%s", r.out);
    /* Each pair's receipts are in the newest hour only. */
    ck_assert_int_eq(count_str(r.out, "\"receipts\":0,"), 2 * (nb - 1));
    ck_assert_int_eq(count_str(r.out, "\"bucket\":"), rows);
    run_free(&r);

    run_ok(&r, chart);
    ck_assert_int_eq(e2e_count_lines(r.out), 4); /* header, 2 groups, total */
    ck_assert_msg(strncmp(r.out, "fallback rate, every 1h from ", 29) == 0,
                  "%s", r.out);
    p = strchr(r.out, '\n') + 1;
    /* Most fallbacks first: cuda->cpu, every receipt a fallback, a full
     * block in the newest hour, blanks before it. */
    first_line(p, line, sizeof(line));
    ck_assert_msg(strncmp(line, "cuda->cpu ", 10) == 0, "%s", line);
    ck_assert_msg(strstr(line, "   \u2588  ") != NULL, "%s", line);
    ck_assert_msg(strstr(line, "100%  1/1") != NULL, "%s", line);
    p = strchr(p, '\n') + 1;
    first_line(p, line, sizeof(line));
    ck_assert_msg(strncmp(line, "cpu->cpu ", 9) == 0, "%s", line);
    ck_assert_msg(strstr(line, "\u00b7  ") != NULL, "%s", line);
    ck_assert_msg(strstr(line, "0%  0/2") != NULL, "%s", line);
    p = strchr(p, '\n') + 1;
    first_line(p, line, sizeof(line));
    ck_assert_msg(strncmp(line, "(total) ", 8) == 0, "%s", line);
    ck_assert_msg(strstr(line, "33.3%  1/3") != NULL, "%s", line);
    ck_assert_str_eq(r.err, "");
    run_free(&r);

    /* Coverage: a line per counter. */
    run_ok(&r, cov);
    ck_assert_int_eq(e2e_count_lines(r.out), 27);
    ck_assert_ptr_nonnull(strstr(r.out, "\ncounters.decode_steps "));
    run_free(&r);

    /* Without --since: 24 buckets back (here days), a bucket column. */
    run_ok(&r, dflt);
    first_line(r.out, line, sizeof(line));
    ck_assert_str_eq(line, "prepared_plan_id,bucket,receipts,fallback,"
                           "unproven,clean,fallback_rate,extra");
    ck_assert_int_eq(e2e_count_lines(r.out), 1 + 2 * 25);
    run_free(&r);

    run(&r, nochart);
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "--every"));
    run_free(&r);
    run(&r, minutes);
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "whole number of hours"));
    run_free(&r);
    /* 2,400 hours: the daemon refuses, naming the field. */
    run(&r, far);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "invalid: every:") != NULL, "%s", r.err);
    run_free(&r);
}
END_TEST

/* ---- truncation ---- */

START_TEST(test_cli_truncation_note_on_stderr)
{
    const char *csv[] = { "receipts", "--limit", "1", "--format", "csv", NULL };
    const char *fail[] = { "receipts", "--limit", "1",
                           "--format", "jsonl",   "--fail-on-truncate",
                           NULL };
    const char *whole[] = { "receipts", "--limit", "2", "--fail-on-truncate",
                            NULL };
    const char *fb[] = { "fallbacks", "--group-by", "model", "--limit",
                         "1",         "--format",   "csv",   NULL };
    const char *cov[] = { "coverage", "--group-by", "model", "--limit",
                          "30",       "--format",   "csv",   NULL };
    char next[64], *at;
    const char *page[] = { "receipts", "--limit",  "1",     "--before-id",
                           next,       "--format", "jsonl", NULL };
    struct run r;

    import_text("two.jsonl", S1_LINE S3_LINE);
    run_ok(&r, csv);
    ck_assert_int_eq(e2e_count_lines(r.out), 2); /* header and one row */
    ck_assert_ptr_null(strstr(r.out, "truncated"));
    at = strstr(r.err, "--before-id ");
    ck_assert_msg(at != NULL, "no cursor in: %s", r.err);
    snprintf(next, sizeof(next), "%.*s", (int)strcspn(at + 12, ", \n"),
             at + 12);
    run_free(&r);

    /* The cursor the note names is the way on: the other receipt. */
    run_ok(&r, page);
    ck_assert_int_eq(e2e_count_lines(r.out), 1);
    ck_assert_ptr_nonnull(strstr(r.out, "\"model_instance_id\":\"m1\""));
    ck_assert_str_eq(r.err, "");
    run_free(&r);

    run(&r, fail);
    ck_assert_int_eq(r.status, 4);
    ck_assert_int_eq(e2e_count_lines(r.out), 1); /* the rows still print */
    ck_assert_ptr_nonnull(strstr(r.err, "truncated at 1 rows"));
    run_free(&r);

    run_ok(&r, whole);
    ck_assert_str_eq(r.err, "");
    run_free(&r);

    /* An aggregate has no cursor: the note does not offer one. */
    run_ok(&r, fb);
    ck_assert_ptr_nonnull(strstr(r.err, "raise --limit or narrow"));
    ck_assert_ptr_null(strstr(r.err, "--before-id"));
    run_free(&r);

    /* 30 coverage rows are one model's 26 counters and 4 of the next. */
    run_ok(&r, cov);
    ck_assert_int_eq(e2e_count_lines(r.out), 31);
    ck_assert_msg(strstr(r.err, "the last group is incomplete: 4 of its 26 "
                                "counters") != NULL,
                  "%s", r.err);
    run_free(&r);
}
END_TEST

/* ---- one duration grammar ---- */

START_TEST(test_cli_durations_are_one_grammar)
{
    static const char *const ok[] = { "500ms", "2m", "1h 30m", "60", NULL };
    static const struct {
        const char *v, *want;
    } bad[] = {
        { "1y", "--timeout: \"1y\": unknown or missing unit \"y\"" },
        { "1h30", "unknown or missing unit" },
        { "2d", "--timeout: \"2d\" is over a day" },
    };
    char conf[400], bin[300], text[200], other[300];
    struct run r;
    size_t i;
    int fd;

    /* Not the running daemon's socket: --check-config refuses that. */
    snprintf(other, sizeof(other), "%s/other.sock", d.dir);
    for (i = 0; ok[i] != NULL; i++) {
        const char *args[] = { "ping", "--timeout", ok[i], NULL };

        run_ok(&r, args);
        run_free(&r);
    }
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *args[] = { "ping", "--timeout", bad[i].v, NULL };

        run(&r, args);
        ck_assert_int_eq(r.status, 2);
        ck_assert_msg(strstr(r.err, bad[i].want) != NULL, "%s", r.err);
        run_free(&r);
    }

    /* The daemon reads the same strings on its flags and in its file. */
    snprintf(bin, sizeof(bin), "%s/daemon/receiptd", TEST_BINARY_DIR);
    for (i = 0; ok[i] != NULL; i++) {
        const char *flag[] = {
            bin,  "--check-config", "--socket", other, "--db",
            d.db, "--idle-timeout", ok[i],      NULL
        };
        pid_t pid;
        int st;

        snprintf(conf, sizeof(conf), "%s/durations.conf", d.dir);
        snprintf(text, sizeof(text), "limits: { idle_timeout = %s%s%s; };\n",
                 strcmp(ok[i], "60") == 0 ? "" : "\"", ok[i],
                 strcmp(ok[i], "60") == 0 ? "" : "\"");
        ck_assert_int_eq(e2e_write_file(conf, text), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            fd = open("/dev/null", O_WRONLY);
            dup2(fd, 1);
            dup2(fd, 2);
            execv(bin, (char *const *)flag);
            _exit(127);
        }
        ck_assert_int_eq(waitpid(pid, &st, 0), pid);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                      "receiptd --idle-timeout %s refused", ok[i]);
        flag[6] = "--config";
        flag[7] = conf;
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            fd = open("/dev/null", O_WRONLY);
            dup2(fd, 1);
            dup2(fd, 2);
            execv(bin, (char *const *)flag);
            _exit(127);
        }
        ck_assert_int_eq(waitpid(pid, &st, 0), pid);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s refused",
                      text);
    }
}
END_TEST

/* A daemon started with --idle-timeout 1s closes a silent connection after
 * about that long: the flag's plain unit is no longer milliseconds. */
START_TEST(test_cli_daemon_idle_timeout_flag_takes_units)
{
    static const char *const extra[] = { "--idle-timeout", "1s", "--log-level",
                                         "warning", NULL };
    struct e2e_daemon d2;
    int st = 0, fd;

    ck_assert_int_eq(e2e_start(&d2, extra), 0);
    fd = e2e_connect(&d2);
    ck_assert_int_ge(fd, 0);
    /* Open at 500 ms, closed by 3 s. */
    ck_assert_int_eq(e2e_wait_closed(fd, 500), 0);
    ck_assert_int_eq(e2e_wait_closed(fd, 2500), 1);
    close(fd);
    ck_assert_int_eq(e2e_stop(&d2, SIGTERM, 10000, &st), 0);
    e2e_cleanup(&d2);
}
END_TEST

/* ---- secrets ---- */

static int
free_port(void)
{
    struct sockaddr_in sin;
    socklen_t sl = sizeof(sin);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sin, &sl), 0);
    port = ntohs(sin.sin_port);
    close(fd);
    return port;
}

/* The TCP token need not appear in argv: --token-file or RECEIPTD_TOKEN. */
START_TEST(test_cli_token_from_file_or_environment)
{
    char conf[300], listen_at[64], good[400], bad[400], empty[400],
        missing[400];
    const char *extra[] = { "--config",        conf,          "--tcp",
                            listen_at,         "--log-level", "warning",
                            "--tcp-plaintext", "true",        NULL };
    const char *by_file[] = { "ping",         "--tcp", listen_at,
                              "--token-file", good,    NULL };
    const char *by_bad_file[] = { "stats",        "--tcp", listen_at,
                                  "--token-file", bad,     NULL };
    const char *by_empty[] = { "ping",         "--tcp", listen_at,
                               "--token-file", empty,   NULL };
    const char *by_missing[] = { "ping",         "--tcp", listen_at,
                                 "--token-file", missing, NULL };
    const char *both[] = { "ping", "--tcp",        listen_at, "--token",
                           "test", "--token-file", good,      NULL };
    const char *by_env[] = { "ping", "--tcp", listen_at, NULL };
    static const char *const env_good[] = { "RECEIPTD_TOKEN=test", NULL };
    static const char *const env_bad[] = { "RECEIPTD_TOKEN=nope", NULL };
    struct e2e_daemon t;
    struct run r;
    int st = 0;

    snprintf(conf, sizeof(conf), "%s/e2e-cli-tcp-%d.conf", TEST_BINARY_DIR,
             (int)getpid());
    /* SHA-256 of "test": the daemon is only ever given the hash. */
    ck_assert_int_eq(
        e2e_write_file(conf, "access: {\n  tokens = ( { name = \"ctl\"; "
                             "sha256 = \"9f86d081884c7d659a2feaa0c55ad015a3bf4f"
                             "1b2b0b822cd15d6c15b0f00a08\"; } );\n};\n"),
        0);
    snprintf(listen_at, sizeof(listen_at), "127.0.0.1:%d", free_port());
    ck_assert_int_eq(e2e_start(&t, extra), 0);
    unlink(conf);
    write_tmp(good, sizeof(good), "good.token", "test\n");
    write_tmp(bad, sizeof(bad), "bad.token", "nope");
    write_tmp(empty, sizeof(empty), "empty.token", "\n");
    snprintf(missing, sizeof(missing), "%s/missing.token", d.dir);

    run_ok(&r, by_file);
    ck_assert_ptr_nonnull(strstr(r.out, "ok: receiptd/"));
    run_free(&r);

    run(&r, by_bad_file);
    ck_assert_msg(r.status == 1, "exit %d: %s", r.status, r.err);
    ck_assert_ptr_nonnull(strstr(r.err, "unauthorized"));
    run_free(&r);

    run(&r, by_empty);
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "a token is one line of 1 to 1024"));
    run_free(&r);

    run(&r, by_missing);
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "No such file or directory"));
    run_free(&r);

    run(&r, both);
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "exclude each other"));
    run_free(&r);

    run_env(&r, env_good, NULL, by_env);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    run_free(&r);

    run_env(&r, env_bad, NULL, by_env);
    ck_assert_int_eq(r.status, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "unauthorized"));
    run_free(&r);

    /* No token at all over TCP: the daemon's refusal. */
    run(&r, by_env);
    ck_assert_int_eq(r.status, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "needs a token"));
    run_free(&r);

    ck_assert_int_eq(e2e_stop(&t, SIGTERM, 10000, &st), 0);
    e2e_cleanup(&t);
}
END_TEST

/* The daemon's file holds hashes only: a plaintext token is refused with
 * the way to make its hash. */
START_TEST(test_cli_daemon_refuses_plaintext_tokens)
{
    char conf[400], bin[300], sock[300], out[400];
    const char *argv[] = { bin,  "--check-config", "--config", conf, "--socket",
                           sock, "--db",           d.db,       NULL };
    char *log;
    pid_t pid;
    int st, fd;

    snprintf(bin, sizeof(bin), "%s/daemon/receiptd", TEST_BINARY_DIR);
    snprintf(sock, sizeof(sock), "%s/other.sock", d.dir);
    snprintf(out, sizeof(out), "%s/check.out", d.dir);
    write_tmp(conf, sizeof(conf), "plain.conf",
              "access: {\n  tokens = ( { name = \"ctl\"; token = \"test\"; "
              "} );\n};\n");
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    log = slurp(out);
    ck_assert_msg(strstr(log, "plain.conf:2:") != NULL &&
                      strstr(log, "unknown key \"token\"") != NULL,
                  "%s", log);
    free(log);
}
END_TEST

/* ---- --check-config ---- */

/*
 * Runs receiptd with args (NULL-terminated, without argv[0]); its stdout
 * and stderr together in *out (the caller frees). Returns the exit
 * status, or -1 when it was killed.
 */
static int
run_daemon(const char *const *args, char **out)
{
    char bin[300], path[400];
    const char *argv[32];
    pid_t pid;
    int st, i, fd;

    snprintf(bin, sizeof(bin), "%s/daemon/receiptd", TEST_BINARY_DIR);
    snprintf(path, sizeof(path), "%s/receiptd.out", d.dir);
    argv[0] = bin;
    for (i = 0; args[i] != NULL; i++)
        argv[i + 1] = args[i];
    argv[i + 1] = NULL;
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        unsetenv("LISTEN_FDS");
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    *out = slurp(path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(test_cli_check_config_refuses_what_start_would)
{
    char conf[400], sock[300], db[300], nodir[300], want[600], port[64];
    const char *check[] = {
        "--check-config", "--config", conf, "--db", db, NULL
    };
    const char *start[] = { "--config", conf, "--db", db, NULL };
    const char *served[] = { "--check-config", "--socket", d.sock,
                             "--db",           db,         NULL };
    const char *missing[] = { "--check-config", "--socket", nodir,
                              "--db",           db,         NULL };
    const char *nodb[] = { "--check-config", "--socket", sock,
                           "--db",           nodir,      NULL };
    const char *busy[] = { "--check-config", "--config", conf, NULL };
    struct sockaddr_in sin;
    socklen_t sl = sizeof(sin);
    struct stat st;
    char *out;
    int lfd;

    snprintf(sock, sizeof(sock), "%s/other.sock", d.dir);
    snprintf(db, sizeof(db), "%s/other.db", d.dir);
    snprintf(nodir, sizeof(nodir), "%s/no-such-dir/x", d.dir);

    /* A host name: refused with its line, and start creates no store. */
    write_tmp(conf, sizeof(conf), "name.conf",
              "listen: {\n    socket = \"\";\n    tcp = \"localhost:7411\";"
              "\n};\n");
    ck_assert_int_eq(run_daemon(check, &out), 1);
    snprintf(want, sizeof(want),
             "%s:3: listen.tcp: \"localhost:7411\": the host must be a "
             "numeric address",
             conf);
    ck_assert_msg(strstr(out, want) != NULL, "%s", out);
    free(out);
    ck_assert_int_eq(run_daemon(start, &out), 1);
    ck_assert_msg(strstr(out, want) != NULL, "%s", out);
    free(out);
    ck_assert_int_ne(stat(db, &st), 0);

    /* A cross-field error keeps the line that caused it. */
    write_tmp(conf, sizeof(conf), "notoken.conf",
              "# no tokens\nlisten: {\n    socket = \"\";\n"
              "    tcp = \"127.0.0.1:7411\";\n};\n");
    ck_assert_int_eq(run_daemon(check, &out), 1);
    snprintf(want, sizeof(want),
             "%s:4: listen.tcp: TCP listener 127.0.0.1:7411 needs at least "
             "one token",
             conf);
    ck_assert_msg(strstr(out, want) != NULL, "%s", out);
    free(out);

    /* The running daemon's socket. */
    ck_assert_int_eq(run_daemon(served, &out), 1);
    ck_assert_msg(strstr(out, "--socket: a daemon already serves") != NULL,
                  "%s", out);
    free(out);
    /* For a reload of that daemon the socket must be served. */
    {
        const char *reload[] = { "--check-config",
                                 "--for-reload",
                                 "--socket",
                                 d.sock,
                                 "--db",
                                 db,
                                 NULL };
        const char *noreload[] = {
            "--check-config", "--for-reload", "--socket", sock, "--db", db, NULL
        };

        ck_assert_int_eq(run_daemon(reload, &out), 0);
        free(out);
        ck_assert_int_eq(run_daemon(noreload, &out), 1);
        ck_assert_msg(strstr(out, "no daemon serves") != NULL, "%s", out);
        free(out);
    }
    /* Start refuses the same before it creates or migrates a store. */
    ck_assert_int_eq(run_daemon(served + 1, &out), 1);
    ck_assert_msg(strstr(out, "--socket: a daemon already serves") != NULL,
                  "%s", out);
    free(out);
    ck_assert_int_ne(stat(db, &st), 0);

    /* Directories that do not exist. */
    ck_assert_int_eq(run_daemon(missing, &out), 1);
    ck_assert_msg(strstr(out, "--socket: the directory ") != NULL &&
                      strstr(out, "no-such-dir: No such file") != NULL,
                  "%s", out);
    free(out);
    ck_assert_int_eq(run_daemon(nodb, &out), 1);
    ck_assert_msg(strstr(out, "--db: the directory ") != NULL, "%s", out);
    free(out);
    ck_assert_int_ne(stat(db, &st), 0);

    /* A TCP port another process listens on. */
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    ck_assert_int_eq(listen(lfd, 1), 0);
    ck_assert_int_eq(getsockname(lfd, (struct sockaddr *)&sin, &sl), 0);
    snprintf(port, sizeof(port), "127.0.0.1:%d", ntohs(sin.sin_port));
    snprintf(want, sizeof(want),
             "listen: {\n    socket = \"\";\n    tcp = \"%s\";\n"
             "    tcp_plaintext = true;\n};\n"
             "store: {\n    path = \"%s\";\n};\n"
             "access: {\n  tokens = ( { name = \"a\"; sha256 = \"9f86d08188"
             "4c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"; } );"
             "\n};\n",
             port, db);
    write_tmp(conf, sizeof(conf), "busy.conf", want);
    ck_assert_int_eq(run_daemon(busy, &out), 1);
    snprintf(want, sizeof(want),
             "%s:3: listen.tcp: cannot listen on %s: ", conf, port);
    ck_assert_msg(strstr(out, want) != NULL, "%s", out);
    free(out);
    close(lfd);
    /* Once the port is free the same file is fine. */
    ck_assert_int_eq(run_daemon(busy, &out), 0);
    free(out);
}
END_TEST

/* --check-config --print is the effective configuration, flags applied,
 * in the file's syntax: fed back, it checks out and prints the same. */
START_TEST(test_cli_check_config_print_is_effective)
{
    char conf[400], again[400], sock[300], db[300];
    const char *print[] = { "--check-config",
                            "--print",
                            "--config",
                            conf,
                            "--socket",
                            sock,
                            "--db",
                            db,
                            "--idle-timeout",
                            "90s",
                            "--max-batch",
                            "77",
                            NULL };
    const char *reprint[] = { "--check-config", "--print", "--config", again,
                              NULL };
    const char *alone[] = { "--print", "--socket", sock, "--db", db, NULL };
    char *out, *out2;

    snprintf(sock, sizeof(sock), "%s/other.sock", d.dir);
    snprintf(db, sizeof(db), "%s/other.db", d.dir);
    write_tmp(conf, sizeof(conf), "print.conf",
              "limits: {\n    idle_timeout = \"5m\";\n"
              "    max_batch = 500;\n    query_timeout = \"2s\";\n};\n");
    ck_assert_int_eq(run_daemon(print, &out), 0);
    ck_assert_msg(strstr(out, "idle_timeout = \"90s\";") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "max_batch = 77;") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "query_timeout = \"2s\";") != NULL, "%s", out);
    ck_assert_ptr_null(strstr(out, "configuration OK"));
    write_tmp(again, sizeof(again), "again.conf", out);
    ck_assert_int_eq(run_daemon(reprint, &out2), 0);
    ck_assert_str_eq(out2, out);
    free(out);
    free(out2);

    ck_assert_int_eq(run_daemon(alone, &out), 2);
    ck_assert_ptr_nonnull(strstr(out, "--print goes with --check-config"));
    free(out);
}
END_TEST

/* ---- import ---- */

/* n JSON lines, receipts whose model is m<i> (i from 1). */
static char *
lines(int n)
{
    size_t cap = (size_t)n * (sizeof(S1_LINE) + 8) + 1, len = 0;
    char *buf = malloc(cap), *p;
    int i;

    ck_assert_ptr_nonnull(buf);
    for (i = 1; i <= n; i++) {
        p = strstr(S1_LINE, "\"m1\"");
        len += (size_t)snprintf(buf + len, cap - len, "%.*s\"m%d\"%s",
                                (int)(p - S1_LINE), S1_LINE, i, p + 4);
    }
    return buf;
}

/* The `gaps` row of source as JSON (owned), or NULL when it has none. */
static struct json_object *
gaps_row(const char *source)
{
    const char *args[] = {
        "gaps", "--source", source, "--format", "jsonl", NULL
    };
    struct run r;
    struct json_object *j;

    run_ok(&r, args);
    j = r.out[0] != '\0' ? json_tokener_parse(r.out) : NULL;
    run_free(&r);
    return j;
}

static uint64_t
juint(struct json_object *j, const char *key)
{
    return json_object_get_uint64(json_object_object_get(j, key));
}

/* An import cut short, run again whole, stores each receipt once: items
 * are numbered by their position (seq) under the --source given. */
START_TEST(test_cli_import_resumes_idempotently)
{
    char part[400], whole[400];
    const char *first[] = { "import", "--source", "e2e/resume", part, NULL };
    const char *again[] = { "import", "--source", "e2e/resume", whole, NULL };
    const char *count[] = { "receipts", "--source", "e2e/resume", "--format",
                            "jsonl",    "--limit",  "100",        NULL };
    const char *batch[] = { "import", "--source", "x", "--batch",
                            "5",      whole,      NULL };
    char *all = lines(7), *cut;
    struct json_object *g;
    struct run r;

    /* The first run got through three items before it stopped. */
    cut = strdup(all);
    *strchr(strchr(strchr(cut, '\n') + 1, '\n') + 1, '\n') = '\0';
    write_tmp(part, sizeof(part), "part.jsonl", cut);
    write_tmp(whole, sizeof(whole), "whole.jsonl", all);
    run_ok(&r, first);
    ck_assert_str_eq(r.out, "accepted 3, already stored 0, rejected 0\n");
    ck_assert_str_eq(r.err, ""); /* no progress when stderr is no terminal */
    run_free(&r);

    run_ok(&r, again);
    ck_assert_str_eq(r.out, "accepted 4, already stored 3, rejected 0\n");
    run_free(&r);
    run_ok(&r, again);
    ck_assert_str_eq(r.out, "accepted 0, already stored 7, rejected 0\n");
    run_free(&r);

    run_ok(&r, count);
    ck_assert_int_eq(e2e_count_lines(r.out), 7);
    run_free(&r);
    /* Seqs 1..7, none missing. */
    g = gaps_row("e2e/resume");
    ck_assert_ptr_nonnull(g);
    ck_assert_uint_eq(juint(g, "first_seq"), 1);
    ck_assert_uint_eq(juint(g, "last_seq"), 7);
    ck_assert_uint_eq(juint(g, "received"), 7);
    ck_assert_uint_eq(juint(g, "missing_seqs"), 0);
    json_object_put(g);

    run(&r, batch);
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "--batch does not apply with"));
    run_free(&r);
    free(cut);
    free(all);
}
END_TEST

/* JSON lines: file:LINE:, 1-based; msgpack: items named by index; a file
 * that is neither is called that. */
START_TEST(test_cli_import_errors_name_line_or_item)
{
    char jl[400], mp[400], csv[400], want[600];
    const char *args[] = { "import", jl, mp, csv, NULL };
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct e2e_receipt er = { .schema = 3,
                              .plan = "p",
                              .graph = "g",
                              .model = "m",
                              .requested = "cpu",
                              .executed = "cpu" };
    struct run r;
    FILE *f;

    /* Line 3 is blank, so the bad receipt is the third item on line 4. */
    write_tmp(jl, sizeof(jl), "bad.jsonl",
              S1_LINE S1_LINE "\n{\"schema_version\":\"one\"}\n" S1_LINE);
    snprintf(mp, sizeof(mp), "%s/bad.msgpack", d.dir);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 3);
    ck_assert_int_eq(e2e_pack_receipt(&pk, &er), 0);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "schema_version", 14);
    msgpack_pack_str_with_body(&pk, "one", 3);
    ck_assert_int_eq(e2e_pack_receipt(&pk, &er), 0);
    f = fopen(mp, "wb");
    ck_assert_ptr_nonnull(f);
    fwrite(sb.data, 1, sb.size, f);
    fclose(f);
    msgpack_sbuffer_destroy(&sb);
    write_tmp(csv, sizeof(csv), "receipts.csv", "schema_version,model\n1,m\n");

    run(&r, args);
    ck_assert_int_eq(r.status, 1);
    snprintf(want, sizeof(want), "%s:4: invalid: schema_version: ", jl);
    ck_assert_msg(strstr(r.out, want) != NULL, "%s", r.out);
    snprintf(want, sizeof(want), "%s: item 1: invalid: schema_version: ", mp);
    ck_assert_msg(strstr(r.out, want) != NULL, "%s", r.out);
    snprintf(want, sizeof(want),
             "%s: malformed: the file is neither JSON nor msgpack (it starts "
             "with \"schema_version,m\")",
             csv);
    ck_assert_msg(strstr(r.out, want) != NULL, "%s", r.out);
    ck_assert_msg(strstr(r.out, "accepted 5, rejected 3\n") != NULL, "%s",
                  r.out);
    run_free(&r);
}
END_TEST

/* On a terminal, stderr shows items, bytes, the rate and the time left,
 * and the line is erased at the end; stdout keeps only the outcome. */
START_TEST(test_cli_import_progress_on_a_terminal)
{
    char file[400], outp[400], buf[8192];
    const char *argv[] = { "receiptctl", "import", file, NULL };
    char *all = lines(2000), *out;
    int master, slave, st, fd;
    size_t got = 0;
    ssize_t n;
    pid_t pid;

    write_tmp(file, sizeof(file), "many.jsonl", all);
    free(all);
    snprintf(outp, sizeof(outp), "%s/progress.out", d.dir);
    ck_assert_int_eq(openpty(&master, &slave, NULL, NULL, NULL), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(master);
        fd = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(slave, 2);
        setenv("RECEIPTD_SOCKET", d.sock, 1);
        execv(CTL, (char *const *)argv);
        _exit(127);
    }
    close(slave);
    /* Read the terminal until the child closes it. */
    while (got < sizeof(buf) - 1 &&
           (n = read(master, buf + got, sizeof(buf) - 1 - got)) > 0)
        got += (size_t)n;
    buf[got] = '\0';
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    close(master);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ck_assert_msg(strstr(buf, "\rimport: ") != NULL, "%s", buf);
    ck_assert_msg(strstr(buf, " items, ") != NULL && strstr(buf, " of ") &&
                      strstr(buf, "items/s") != NULL,
                  "%s", buf);
    ck_assert_msg(strstr(buf, "\r\033[K") != NULL, "not erased: %s", buf);
    out = slurp(outp);
    ck_assert_str_eq(out, "accepted 2000, rejected 0\n");
    free(out);
}
END_TEST

/* Invalid items keep their numbers, so gaps shows them as missing; a gaps
 * answer whose ranges were cut at --limit says so on stderr. */
START_TEST(test_cli_gaps_cut_ranges_are_noted)
{
    char file[400];
    const char *imp[] = { "import", "--source", "e2e/holes", file, NULL };
    const char *gaps[] = { "gaps", "--source", "e2e/holes", "--limit",
                           "2",    "--format", "csv",       NULL };
    const char *fail[] = { "gaps", "--source",           "e2e/holes", "--limit",
                           "2",    "--fail-on-truncate", NULL };
    struct run r;

    write_tmp(file, sizeof(file), "holes.jsonl",
              S1_LINE "{}\n" S1_LINE "{}\n" S1_LINE "{}\n" S1_LINE);
    run(&r, imp);
    ck_assert_int_eq(r.status, 1);
    ck_assert_ptr_nonnull(strstr(r.out, "accepted 4, already stored 0, "
                                        "rejected 3\n"));
    run_free(&r);
    run_ok(&r, gaps);
    ck_assert_int_eq(e2e_count_lines(r.out), 2);
    ck_assert_ptr_nonnull(strstr(r.out, ",1,7,4,3,true,"));
    ck_assert_msg(strstr(r.err, "the missing ranges of source \"e2e/holes\" "
                                "are cut at --limit") != NULL,
                  "%s", r.err);
    run_free(&r);
    run(&r, fail);
    ck_assert_int_eq(r.status, 4);
    run_free(&r);
}
END_TEST

/* ---- fleet health: gaps sorted, --only-missing, --quiet-for ---- */

/* A daemon whose chunks hold 4 receipts, so a source's newest receipt is
 * looked for in the chunks' postings as well as in the tail. */
static void
setup_small_chunks(void)
{
    static const char *const extra[] = { "--log-level", "warning",
                                         "--chunk-receipts", "4", NULL };

    start(extra);
}

/* Imports, as source, receipts at positions 1..n but those in holes (a
 * string of '1' and '0' by position, shorter than n: 1 is a hole). */
static void
import_source(const char *source, int n, const char *holes)
{
    char path[400], name[64];
    const char *args[] = { "import", "--source", source, path, NULL };
    size_t cap = (size_t)n * (sizeof(S1_LINE) + 4), len = 0, k;
    char *text = malloc(cap);
    struct run r;
    int i;

    ck_assert_ptr_nonnull(text);
    text[0] = '\0';
    for (i = 0; i < n; i++)
        len += (size_t)snprintf(
            text + len, cap - len, "%s",
            (size_t)i < strlen(holes) && holes[i] == '1' ? "{}\n" : S1_LINE);
    snprintf(name, sizeof(name), "%s.jsonl", source);
    for (k = 0; name[k] != '\0'; k++)
        if (name[k] == '/')
            name[k] = '_';
    write_tmp(path, sizeof(path), name, text);
    free(text);
    run(&r, args);
    /* A hole is an invalid item: exit 1, the others stored. */
    ck_assert_msg(r.status == (strchr(holes, '1') ? 1 : 0), "%s%s", r.out,
                  r.err);
    run_free(&r);
}

/* The rows of `gaps` with args as JSON (owned by *doc). */
static struct json_object *
gaps_rows(struct json_object **doc, const char *const *args, struct run *r)
{
    run_ok(r, args);
    *doc = json_tokener_parse(r->out);
    ck_assert_msg(*doc != NULL, "%s", r->out);
    return json_object_object_get(*doc, "rows");
}

static const char *
jstr(struct json_object *j, const char *key)
{
    return json_object_get_string(json_object_object_get(j, key));
}

/* Most missing seqs first, whatever order the sources came in (and their
 * names); --only-missing leaves out the sources without gaps. */
START_TEST(test_cli_gaps_sorted_by_missing)
{
    const char *all[] = { "gaps", "--format", "json", NULL };
    const char *only[] = { "gaps", "--only-missing", "--format", "json", NULL };
    const char *csv[] = { "gaps", "--only-missing", "--format", "csv", NULL };
    static const char *const want[] = { "fleet/c", "fleet/b", "fleet/a",
                                        "fleet/d" };
    struct json_object *doc, *rows;
    struct run r;
    size_t i;

    import_source("fleet/a", 5, "");
    import_source("fleet/b", 5, "0100");
    import_source("fleet/c", 6, "01101");
    import_source("fleet/d", 3, "");

    rows = gaps_rows(&doc, all, &r);
    ck_assert_msg(json_object_array_length(rows) == 4, "%s", r.out);
    for (i = 0; i < 4; i++) {
        struct json_object *row = json_object_array_get_idx(rows, i);

        ck_assert_msg(strcmp(jstr(row, "source"), want[i]) == 0, "row %zu: %s",
                      i, r.out);
    }
    ck_assert_uint_eq(juint(json_object_array_get_idx(rows, 0), "missing_seqs"),
                      3);
    ck_assert_uint_eq(juint(json_object_array_get_idx(rows, 1), "missing_seqs"),
                      1);
    json_object_put(doc);
    run_free(&r);

    rows = gaps_rows(&doc, only, &r);
    ck_assert_msg(json_object_array_length(rows) == 2, "%s", r.out);
    ck_assert_str_eq(jstr(json_object_array_get_idx(rows, 0), "source"),
                     "fleet/c");
    ck_assert_str_eq(jstr(json_object_array_get_idx(rows, 1), "source"),
                     "fleet/b");
    json_object_put(doc);
    run_free(&r);

    run_ok(&r, csv);
    ck_assert_int_eq(e2e_count_lines(r.out), 3);
    ck_assert_ptr_nonnull(strstr(r.out, "last_received_at,missing,extra\n"
                                        "fleet/c,1,6,3,3,false,"));
    run_free(&r);
}
END_TEST

/* A gappy source that came last is listed first under a --limit that
 * healthy ones would fill: the cut falls on healthy sources. */
START_TEST(test_cli_gaps_limit_never_hides_a_gappy_source)
{
    const char *args[] = { "gaps", "--limit", "2", "--format", "json", NULL };
    const char *fail[] = { "gaps", "--limit", "2", "--fail-on-truncate", NULL };
    struct json_object *doc, *rows;
    char name[32];
    struct run r;
    int i;

    for (i = 0; i < 5; i++) {
        snprintf(name, sizeof(name), "healthy/%d", i);
        import_source(name, 3, "");
    }
    import_source("z/gappy", 4, "01");
    rows = gaps_rows(&doc, args, &r);
    ck_assert_msg(json_object_array_length(rows) == 2, "%s", r.out);
    ck_assert_msg(strcmp(jstr(json_object_array_get_idx(rows, 0), "source"),
                         "z/gappy") == 0,
                  "%s", r.out);
    ck_assert_uint_eq(juint(json_object_array_get_idx(rows, 0), "missing_seqs"),
                      1);
    ck_assert_str_eq(jstr(json_object_array_get_idx(rows, 1), "source"),
                     "healthy/0");
    ck_assert(
        json_object_get_boolean(json_object_object_get(doc, "truncated")));
    json_object_put(doc);
    run_free(&r);
    run(&r, fail);
    ck_assert_int_eq(r.status, 4);
    run_free(&r);
}
END_TEST

/* The newest receipt of source, from `receipts` (its received_at). */
static uint64_t
newest_received_at(const char *source)
{
    const char *args[] = { "receipts", "--source", source,  "--limit",
                           "1",        "--format", "jsonl", NULL };
    struct json_object *j;
    struct run r;
    uint64_t v;

    run_ok(&r, args);
    j = json_tokener_parse(r.out);
    ck_assert_msg(j != NULL, "%s", r.out);
    v = juint(j, "received_at");
    json_object_put(j);
    run_free(&r);
    return v;
}

/*
 * Each source's last receive time is its newest receipt's, whether that
 * is in a chunk or in the tail; --quiet-for lists the sources that sent
 * nothing for that long (the one that stopped), not the one still
 * sending.
 */
START_TEST(test_cli_gaps_quiet_for_lists_the_sources_that_stopped)
{
    const char *all[] = { "gaps", "--format", "json", NULL };
    char quiet_for[32];
    const char *quiet[] = { "gaps",     "--quiet-for", quiet_for,
                            "--format", "json",        NULL };
    const char *bad[] = { "gaps", "--quiet-for", "soon", NULL };
    struct json_object *doc, *rows;
    uint64_t old_at, new_at[9];
    char name[32];
    struct run r;
    size_t i;

    /* 9 receipts: two chunks of 4 and one in the tail; then one receipt
     * of each of 9 other sources pushes them all into chunks, and all but
     * one of those too, so the stopped source's time is looked up in its
     * own chunks once every other source has one. */
    import_source("stopped/1", 9, "");
    usleep(2500 * 1000);
    for (i = 0; i < 9; i++) {
        snprintf(name, sizeof(name), "sending/%zu", i);
        import_source(name, 1, "");
    }
    old_at = newest_received_at("stopped/1");
    for (i = 0; i < 9; i++) {
        snprintf(name, sizeof(name), "sending/%zu", i);
        new_at[i] = newest_received_at(name);
        ck_assert_uint_gt(new_at[i], old_at + 2000);
    }

    rows = gaps_rows(&doc, all, &r);
    ck_assert_msg(json_object_array_length(rows) == 10, "%s", r.out);
    for (i = 0; i < 10; i++) {
        struct json_object *row = json_object_array_get_idx(rows, i);
        const char *src = jstr(row, "source");

        ck_assert_uint_eq(juint(row, "last_received_at"),
                          strcmp(src, "stopped/1") == 0
                              ? old_at
                              : new_at[atoi(src + strlen("sending/"))]);
    }
    json_object_put(doc);
    run_free(&r);

    /* Quiet for a second less than the stopped source has been: the
     * others sent at least 2 s after it, so they stay out however long
     * the commands above took (under the sanitizers, over 1.5 s). */
    snprintf(quiet_for, sizeof(quiet_for), "%llums",
             (unsigned long long)(unix_ms() - (int64_t)old_at - 1000));
    rows = gaps_rows(&doc, quiet, &r);
    ck_assert_msg(json_object_array_length(rows) == 1, "%s", r.out);
    ck_assert_str_eq(jstr(json_object_array_get_idx(rows, 0), "source"),
                     "stopped/1");
    json_object_put(doc);
    run_free(&r);

    run(&r, bad);
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "--quiet-for"));
    run_free(&r);
}
END_TEST

/* ---- fallbacks: totals, --only-fallbacks, --min-rate ---- */

/* Appends n receipts of plan to text (cap bytes), fallbacks of them to cpu
 * and the rest executed where requested (unproven). */
static void
plan_lines(char *text, size_t cap, const char *plan, int n, int fallbacks)
{
    const char *pp = strstr(S1_LINE, "\"plan-a\""),
               *ep = strstr(S1_LINE, "\"executed_backend\":\"cpu\"");
    size_t len = strlen(text);
    int i;

    ck_assert(pp != NULL && ep != NULL && ep < pp);
    for (i = 0; i < n; i++)
        len += (size_t)snprintf(
            text + len, cap - len,
            "%.*s\"executed_backend\":\"%s\"%.*s\"%s\"%s", (int)(ep - S1_LINE),
            S1_LINE, i < fallbacks ? "cpu" : "cuda",
            (int)(pp - ep - strlen("\"executed_backend\":\"cpu\"")),
            ep + strlen("\"executed_backend\":\"cpu\""), plan,
            pp + strlen("\"plan-a\""));
    ck_assert_uint_lt(len, cap);
}

/* plan-big: 200 receipts, 1 fallback (0.50%); plan-small: 2, 1 (50%);
 * plan-none: 3, none. */
static void
import_plans(void)
{
    size_t cap = 210 * (sizeof(S1_LINE) + 16);
    char *text = calloc(1, cap);

    ck_assert_ptr_nonnull(text);
    plan_lines(text, cap, "plan-big", 200, 1);
    plan_lines(text, cap, "plan-small", 2, 1);
    plan_lines(text, cap, "plan-none", 3, 0);
    import_text("plans.jsonl", text);
    free(text);
}

/* The one line of out that starts with prefix, or NULL. */
static const char *
line_of(const char *out, const char *prefix)
{
    const char *p = out;

    for (; p != NULL && *p != '\0';
         p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, prefix, strlen(prefix)) == 0)
            return p;
    return NULL;
}

/*
 * A fallbacks table ends with a (total) row over every group, rates keep
 * two significant digits, and JSON carries the same "total"; coverage by
 * group ends with a (total) row per counter.
 */
START_TEST(test_cli_fallbacks_totals_and_rates)
{
    const char *table[] = { "fallbacks", NULL };
    const char *json[] = { "fallbacks", "--format", "json", NULL };
    const char *csv[] = { "fallbacks", "--format", "csv", NULL };
    const char *cov[] = { "coverage", "--group-by", "model",
                          "--limit",  "10000",      NULL };
    struct json_object *doc, *tot;
    const char *l;
    struct run r;

    import_plans();
    run_ok(&r, table);
    l = line_of(r.out, "(total)");
    ck_assert_msg(l != NULL && strchr(l, '\n')[1] == '\0', "%s", r.out);
    ck_assert_msg(strstr(l, " 205 ") != NULL && strstr(l, "0.98%\n") != NULL,
                  "%s", r.out);
    l = line_of(r.out, "plan-big");
    ck_assert_msg(l != NULL && strstr(l, "0.50%\n") != NULL, "%s", r.out);
    run_free(&r);

    run_ok(&r, json);
    doc = json_tokener_parse(r.out);
    ck_assert_ptr_nonnull(doc);
    tot = json_object_object_get(doc, "total");
    ck_assert_msg(tot != NULL, "%s", r.out);
    ck_assert_uint_eq(juint(tot, "receipts"), 205);
    ck_assert_uint_eq(juint(tot, "fallback"), 2);
    json_object_put(doc);
    run_free(&r);

    /* Scripts get the groups alone. */
    run_ok(&r, csv);
    ck_assert_int_eq(e2e_count_lines(r.out), 4);
    ck_assert_ptr_null(strstr(r.out, "(total)"));
    run_free(&r);

    run_ok(&r, cov);
    {
        const char *p = r.out;
        int n = 0;

        while ((p = strstr(p, "\n(total) ")) != NULL) {
            n++;
            p++;
        }
        ck_assert_msg(n == 26, "%d: %s", n, r.out); /* one per counter */
    }
    run_free(&r);
}
END_TEST

/*
 * --only-fallbacks and --min-rate keep the groups that fell back, chosen
 * before --limit: the group with the highest rate is listed under a limit
 * the group with the most fallbacks would fill.
 */
START_TEST(test_cli_fallbacks_only_and_min_rate)
{
    const char *only[] = { "fallbacks", "--only-fallbacks", "--format", "json",
                           NULL };
    const char *rate[] = { "fallbacks", "--min-rate", "10%",  "--limit",
                           "1",         "--format",   "json", NULL };
    const char *frac[] = { "fallbacks", "--min-rate", "0.004",
                           "--format",  "json",       NULL };
    const char *bad[] = { "fallbacks", "--min-rate", "150%", NULL };
    const char *none[] = { "fallbacks", "--group-by", "none",
                           "--only-fallbacks", NULL };
    struct json_object *doc, *rows;
    struct run r;

    import_plans();
    run_ok(&r, only);
    doc = json_tokener_parse(r.out);
    rows = json_object_object_get(doc, "rows");
    ck_assert_msg(json_object_array_length(rows) == 2, "%s", r.out);
    ck_assert_ptr_null(strstr(r.out, "plan-none"));
    json_object_put(doc);
    run_free(&r);

    run_ok(&r, rate);
    doc = json_tokener_parse(r.out);
    rows = json_object_object_get(doc, "rows");
    ck_assert_msg(json_object_array_length(rows) == 1, "%s", r.out);
    ck_assert_str_eq(
        jstr(json_object_array_get_idx(rows, 0), "prepared_plan_id"),
        "plan-small");
    json_object_put(doc);
    run_free(&r);

    run_ok(&r, frac);
    doc = json_tokener_parse(r.out);
    ck_assert_msg(
        json_object_array_length(json_object_object_get(doc, "rows")) == 2,
        "%s", r.out);
    json_object_put(doc);
    run_free(&r);

    run(&r, bad);
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "--min-rate"));
    run_free(&r);
    run(&r, none);
    ck_assert_int_eq(r.status, 2);
    run_free(&r);
}
END_TEST

/* ---- tables for people ---- */

/* The display width of the UTF-8 text s[0..n). */
static int
display_width(const char *s, size_t n)
{
    wchar_t w[512];
    char tmp[2048];
    size_t k;

    snprintf(tmp, sizeof(tmp), "%.*s", (int)n, s);
    k = mbstowcs(w, tmp, 511);
    ck_assert_msg(k != (size_t)-1, "not UTF-8: %s", tmp);
    w[k] = L'\0';
    return wcswidth(w, k);
}

/* A receipt line of S1_LINE with another model. */
static void
model_line(char *buf, size_t len, const char *model)
{
    const char *p = strstr(S1_LINE, "\"m1\"");

    snprintf(buf, len, "%.*s\"%s\"%s", (int)(p - S1_LINE), S1_LINE, model,
             p + 4);
}

START_TEST(test_cli_table_widths_and_columns)
{
    const char *tbl[] = { "receipts", "--columns",
                          "model_instance_id,counters.fallback_count,"
                          "receipt_id,counters.decode_steps",
                          NULL };
    const char *csv[] = {
        "receipts", "--columns", "receipt_id,model_instance_id",
        "--format", "csv",       NULL
    };
    const char *bad[] = { "receipts", "--columns", "receipt_id,nope", NULL };
    const char *json[] = { "receipts", "--columns", "receipt_id",
                           "--format", "json",      NULL };
    const char *stats[] = { "stats", NULL };
    char a[2048], b[2048], c[2048], all[6200];
    char *line, *save = NULL;
    struct run r;
    int w = -1, n = 0;

    model_line(a, sizeof(a),
               "\xe6\xa8\xa1\xe5\x9e\x8b-\xe4\xb8\x80"); /* 模型-一 */
    model_line(b, sizeof(b), "\xf0\x9f\xa6\x80-rt");     /* crab */
    model_line(c, sizeof(c), "plain-ascii-model");
    snprintf(all, sizeof(all), "%s%s%s", a, b, c);
    import_text("wide.jsonl", all);

    run_ok(&r, tbl);
    /* Left-aligned text, then right-aligned numbers: every line has the
     * same display width when the widths are measured right. */
    for (line = strtok_r(r.out, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save), n++) {
        int lw = display_width(line, strlen(line));

        if (w < 0)
            w = lw;
        ck_assert_msg(lw == w, "line %d is %d columns wide, the first %d:\n%s",
                      n, lw, w, line);
    }
    ck_assert_int_eq(n, 4);
    run_free(&r);
    run_ok(&r, tbl);
    ck_assert_msg(strncmp(r.out, "model_instance_id", 17) == 0, "%s", r.out);
    /* fallback_count is not measured (bit 6 clear): "-", not 0. */
    ck_assert_msg(strstr(r.out, "plain-ascii-model  -  ") != NULL, "%s", r.out);
    ck_assert_msg(strstr(r.out, "5\n") != NULL, "%s", r.out);
    run_free(&r);

    run_ok(&r, csv);
    ck_assert_msg(strncmp(r.out, "receipt_id,model_instance_id\n", 29) == 0,
                  "%s", r.out);
    ck_assert_int_eq(e2e_count_lines(r.out), 4);
    run_free(&r);

    run(&r, bad);
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "--columns: receipts has no column "
                                        "\"nope\""));
    run_free(&r);
    run(&r, json);
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "--columns applies to tables and csv"));
    run_free(&r);

    /* stats for people: units from the field names, digits grouped. */
    run_ok(&r, stats);
    ck_assert_msg(strstr(r.out, " ms\n") != NULL, "%s", r.out);
    ck_assert_msg(strstr(r.out, "iB\n") != NULL, "%s", r.out);
    ck_assert_msg(strstr(r.out, "writer_cpu_us") != NULL &&
                      strstr(r.out, " us\n") != NULL,
                  "%s", r.out);
    run_free(&r);
}
END_TEST

static Suite *
e2e_cli_suite(void)
{
    Suite *s = suite_create("e2e_cli");
    TCase *tc;

    tc = tcase_create("output");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cli_csv_header_is_fixed_per_kind);
    tcase_add_test(tc, test_cli_jsonl_one_row_per_line);
    tcase_add_test(tc, test_cli_unmeasured_counter_is_null);
    suite_add_tcase(s, tc);

    tc = tcase_create("filters");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_cli_unapplied_filter_is_usage_error, 0,
                        (int)(sizeof(unapplied) / sizeof(unapplied[0])));
    tcase_add_test(tc, test_cli_help_lists_own_options_only);
    tcase_add_test(tc, test_cli_truncation_note_on_stderr);
    suite_add_tcase(s, tc);

    tc = tcase_create("durations");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cli_durations_are_one_grammar);
    tcase_add_test(tc, test_cli_daemon_idle_timeout_flag_takes_units);
    suite_add_tcase(s, tc);

    tc = tcase_create("secrets");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cli_token_from_file_or_environment);
    tcase_add_test(tc, test_cli_daemon_refuses_plaintext_tokens);
    suite_add_tcase(s, tc);

    tc = tcase_create("check_config");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cli_check_config_refuses_what_start_would);
    tcase_add_test(tc, test_cli_check_config_print_is_effective);
    suite_add_tcase(s, tc);

    tc = tcase_create("import");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cli_import_resumes_idempotently);
    tcase_add_test(tc, test_cli_import_errors_name_line_or_item);
    tcase_add_test(tc, test_cli_import_progress_on_a_terminal);
    tcase_add_test(tc, test_cli_gaps_cut_ranges_are_noted);
    suite_add_tcase(s, tc);

    tc = tcase_create("fleet");
    tcase_add_checked_fixture(tc, setup_small_chunks, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cli_gaps_sorted_by_missing);
    tcase_add_test(tc, test_cli_gaps_limit_never_hides_a_gappy_source);
    tcase_add_test(tc, test_cli_gaps_quiet_for_lists_the_sources_that_stopped);
    suite_add_tcase(s, tc);

    tc = tcase_create("fallbacks");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cli_fallbacks_totals_and_rates);
    tcase_add_test(tc, test_cli_fallbacks_only_and_min_rate);
    tcase_add_test(tc, test_cli_series_and_chart);
    tcase_add_test(tc, test_cli_group_by_two_keys);
    suite_add_tcase(s, tc);

    tc = tcase_create("tables");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cli_table_widths_and_columns);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(e2e_cli_suite());
    int failed;

    /* The test measures display widths as a UTF-8 terminal would. */
    setlocale(LC_CTYPE, "C.UTF-8");
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
