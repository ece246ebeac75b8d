/*
 * main.c: receiptctl, the command-line client of receiptd.
 *
 * A table of subcommands, one function each: the queries, ping and
 * readback-check live here, import in import.c, quarantine replay in
 * replay.c, and what they share (options, connection, error lines) in
 * cli.c. Options are parsed once for
 * the whole command line (GNU getopt permutes, so they may come before or
 * after the subcommand), then checked against the options the subcommand
 * accepts, so a misplaced flag is a usage error rather than silently
 * ignored. Exit codes: 0 ok, 1 the daemon answered with an error (or an
 * import had rejected items), 2 usage, 3 cannot connect or the connection
 * failed, 4 a query cut at --limit under --fail-on-truncate. Every error is one
 * line on stderr. Single-threaded.
 */
#include <errno.h>
#include <getopt.h>
#include <langinfo.h>
#include <locale.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>
#include <msgpack.h>

#include "cli.h"
#include "clock.h"
#include "top.h"
#include "duration.h"
#include "envelope.h"
#include "follow.h"
#include "import.h"
#include "mpobj.h"
#include "net.h"
#include "output.h"
#include "receipt.h"
#include "replay.h"
#include "timespec.h"

#define DEFAULT_TIMEOUT 60
#define DEFAULT_BATCH   1000
#define QUERY_LIMIT_MAX 10000
#define FOLLOW_PAGE     1000 /* --follow: rows per reply by default */

enum opt_id {
    O_SOCKET = 256,
    O_TCP,
    O_TOKEN,
    O_TOKEN_FILE,
    O_TIMEOUT,
    O_TLS,
    O_CA,
    O_CERT,
    O_KEY,
    O_FORMAT,
    O_PLAN,
    O_GRAPH,
    O_MODEL,
    O_SOURCE,
    O_REQUESTED,
    O_EXECUTED,
    O_SINCE,
    O_UNTIL,
    O_LIMIT,
    O_BEFORE_ID,
    O_STATUS,
    O_GROUP_BY,
    O_BATCH,
    O_VALUE,
    O_PARTICIPANT,
    O_ELEMENT_TYPE,
    O_COUNT,
    O_DRY_RUN,
    O_FAIL_ON_TRUNCATE,
    O_COLUMNS,
    O_ONLY_MISSING,
    O_QUIET_FOR,
    O_ONLY_FALLBACKS,
    O_MIN_RATE,
    O_ORIGIN,
    O_AFTER_ID,
    O_FOLLOW,
    O_EVERY,
    O_HELP,
    O_VERSION,
};

/* Each subcommand lists the options it applies, one bit per option: an
 * option a command would not apply is refused, never ignored. */
#define B(id) (1ull << ((id)-O_SOCKET))
#define CONN                                                                   \
    (B(O_SOCKET) | B(O_TCP) | B(O_TOKEN) | B(O_TOKEN_FILE) | B(O_TIMEOUT) |    \
     B(O_TLS) | B(O_CA) | B(O_CERT) | B(O_KEY))
#define OUT   (CONN | B(O_FORMAT))
#define QUERY (OUT | B(O_LIMIT) | B(O_FAIL_ON_TRUNCATE) | B(O_COLUMNS))
#define RECEIPT_FILTERS                                                        \
    (B(O_PLAN) | B(O_GRAPH) | B(O_MODEL) | B(O_SOURCE) | B(O_REQUESTED) |      \
     B(O_EXECUTED) | B(O_SINCE) | B(O_UNTIL))
#define TIME (B(O_SINCE) | B(O_UNTIL))

struct optdesc {
    const char *name;
    int id;
    const char *arg;
    const char *help;
};

static const struct optdesc optdescs[] = {
    { "socket", O_SOCKET, "PATH",
      "Unix socket of the daemon (default: $RECEIPTD_SOCKET, "
      "then " CLI_DEFAULT_SOCKET ")" },
    { "tcp", O_TCP, "HOST:PORT", "connect over TCP instead" },
    { "token", O_TOKEN, "TOKEN",
      "token to authenticate with (sent in hello); other users see it in "
      "ps: prefer --token-file or $RECEIPTD_TOKEN" },
    { "token-file", O_TOKEN_FILE, "PATH",
      "read the token from the first line of PATH" },
    { "tls", O_TLS, NULL,
      "speak TLS over --tcp, verifying the daemon's certificate and its "
      "name or address" },
    { "ca", O_CA, "FILE",
      "--tls: the CAs to verify the daemon against (PEM; default: the "
      "system's)" },
    { "cert", O_CERT, "FILE",
      "--tls: a client certificate (PEM) for a daemon that asks for one" },
    { "key", O_KEY, "FILE", "--tls: its private key (PEM)" },
    { "timeout", O_TIMEOUT, "DURATION",
      "give up waiting on the daemon after this long: seconds or units, "
      "500ms, 2m (default 60s; 0: never)" },
    { "format", O_FORMAT, "FMT", "output: table (default), json or csv" },
    { "plan", O_PLAN, "ID", "prepared_plan_id" },
    { "graph", O_GRAPH, "HASH", "graph_hash" },
    { "model", O_MODEL, "ID", "model_instance_id" },
    { "source", O_SOURCE, "NAME", "producer source" },
    { "requested", O_REQUESTED, "BACKEND",
      "requested backend (cpu, wgpu-dx12, wgpu-vulkan, wgpu-metal, cuda, "
      "metal, unknown)" },
    { "executed", O_EXECUTED, "BACKEND", "executed backend" },
    { "since", O_SINCE, "TIME",
      "received at or after TIME: 1h, 30m, 7d, 2w, unix ms or RFC 3339" },
    { "until", O_UNTIL, "TIME", "received before TIME" },
    { "limit", O_LIMIT, "N", "at most N rows (1-10000; default 100)" },
    { "before-id", O_BEFORE_ID, "ID",
      "only receipt ids below ID (page backwards)" },
    { "after-id", O_AFTER_ID, "ID",
      "only receipt ids above ID, oldest first (page forwards, or resume "
      "a --follow)" },
    { "follow", O_FOLLOW, NULL,
      "stay and print receipts as they are committed (json as JSON lines; "
      "--limit: rows per reply, default 1000)" },
    { "status", O_STATUS, "STATUS", "fallback, clean or unproven" },
    { "origin", O_ORIGIN, "NODE",
      "at a center: only the receipts relayed by this node (its name)" },
    { "group-by", O_GROUP_BY, "KEY",
      "plan, graph, model, backends, source or none, or two keys: one of "
      "plan, graph, model, source with backends (plan,backends)" },
    { "batch", O_BATCH, "N",
      "receipts per request without --source (default 1000; the daemon's "
      "max_batch caps it)" },
    { "value", O_VALUE, "ID", "retained value_id" },
    { "participant", O_PARTICIPANT, "N", "participant_index (default 0)" },
    { "element-type", O_ELEMENT_TYPE, "ET",
      "element type of the readback (bool, u8, u32, i8, i32, f16, bf16, f32)" },
    { "count", O_COUNT, "N", "element_count of the readback" },
    { "dry-run", O_DRY_RUN, NULL,
      "check the files locally and send nothing (no daemon needed)" },
    { "columns", O_COLUMNS, "LIST",
      "table and csv: these columns, comma-separated, in this order (names "
      "as in the csv header, e.g. receipt_id,counters.decode_steps)" },
    { "fail-on-truncate", O_FAIL_ON_TRUNCATE, NULL,
      "exit 4 when --limit cut the answer short (the rows are still "
      "printed)" },
    { "only-missing", O_ONLY_MISSING, NULL, "only sources with missing seqs" },
    { "quiet-for", O_QUIET_FOR, "DURATION",
      "only sources with no receipt received for DURATION (10m, 1h; "
      "sources with no receipt stored included)" },
    { "only-fallbacks", O_ONLY_FALLBACKS, NULL,
      "only groups with at least one fallback" },
    { "every", O_EVERY, "DURATION",
      "a series: one row per group and bucket of DURATION (whole hours: "
      "1h, 6h, 1d), empty buckets included; buckets start at multiples of "
      "DURATION since 1970 UTC; --since defaults to 24 buckets back" },
    { "min-rate", O_MIN_RATE, "RATE",
      "only groups whose fallback rate is at least RATE (1%, 0.5%, or a "
      "fraction: 0.01)" },
};

/* Where one command means something else by an option than its generic
 * help says. */
static const struct {
    const char *cmd;
    int id;
    const char *help;
} opthelp[] = {
    { "stats", O_FORMAT,
      "output: table (default), json, jsonl, csv or prometheus" },
    { "receipts", O_FORMAT, "output: table (default), json, jsonl or csv" },
    { "fallbacks", O_FORMAT,
      "output: table (default), json, jsonl, csv or chart (with --every)" },
    { "coverage", O_FORMAT,
      "output: table (default), json, jsonl, csv or chart (with --every)" },
    { "gaps", O_FORMAT, "output: table (default), json, jsonl or csv" },
    { "quarantine", O_FORMAT,
      "output: table (default), json, jsonl (the listing only) or csv" },
    { "plans", O_FORMAT, "output: table (default), json, jsonl or csv" },
    { "prunes", O_FORMAT, "output: table (default), json, jsonl or csv" },
    { "retained", O_FORMAT, "output: table (default), json, jsonl or csv" },
    { "import", O_SOURCE,
      "the source to say hello as (default receiptctl/<hostname>)" },
    { "gaps", O_SOURCE, "only this producer source" },
    { "quarantine", O_SINCE,
      "kept at or after TIME: 1h, 30m, 7d, 2w, unix "
      "ms or RFC 3339" },
    { "quarantine", O_UNTIL, "kept before TIME" },
    { "plans", O_SINCE,
      "registered at or after TIME: 1h, 30m, 7d, 2w, unix "
      "ms or RFC 3339" },
    { "plans", O_UNTIL, "registered before TIME" },
    { "prunes", O_SINCE,
      "pruned at or after TIME: 1h, 30m, 7d, 2w, unix ms "
      "or RFC 3339" },
    { "prunes", O_UNTIL, "pruned before TIME" },
    { "gaps", O_LIMIT,
      "at most N sources, and N missing ranges per source "
      "(1-10000; default 100)" },
};

/* The formats a command prints: queries add jsonl, stats prometheus. */
static int
format_ok(const char *cmd, int format)
{
    if (format == OUTPUT_PROMETHEUS)
        return strcmp(cmd, "stats") == 0;
    if (format == OUTPUT_CHART)
        return strcmp(cmd, "fallbacks") == 0 || strcmp(cmd, "coverage") == 0;
    if (format == OUTPUT_JSONL)
        return strcmp(cmd, "ping") != 0 && strcmp(cmd, "import") != 0 &&
               strcmp(cmd, "readback-check") != 0;
    return 1;
}

struct cmd {
    const char *name;
    int (*fn)(struct cli_opts *);
    uint64_t opts; /* B() of every option it applies */
    const char *args;
    const char *summary;
    const char *help;
};

static const struct cmd *find_cmd(const char *name);
static void print_help(FILE *out, const struct cmd *c);

/* ---- option parsing helpers ---- */

static int
check_choice(const char *prog, const char *flag, const char *v,
             const char *const *choices)
{
    size_t i;

    for (i = 0; choices[i] != NULL; i++)
        if (strcmp(v, choices[i]) == 0)
            return 0;
    cli_usage_err(prog, "--%s: unknown value \"%s\"", flag, v);
    return -1;
}

/* ---- queries ---- */

/* Packs {"kind": kind, filters...} from the options that were given. */
static int
pack_query(msgpack_packer *pk, const struct cli_opts *o, const char *kind)
{
    const char *skeys[] = { "plan",   "graph",     "model",
                            "source", "requested", "executed",
                            "status", "group_by",  "origin" };
    const char *svals[] = { o->plan,   o->graph,     o->model,
                            o->source, o->requested, o->executed,
                            o->status, o->group_by,  o->origin };
    const char *ukeys[] = { "since",     "until",    "limit", "before_id",
                            "quiet_for", "after_id", "every" };
    const int uhas[] = { o->has_since,  o->has_until,     o->has_limit,
                         o->has_before, o->has_quiet_for, o->has_after,
                         o->has_every };
    const uint64_t uvals[] = { o->since,     o->until,     o->limit,
                               o->before_id, o->quiet_for, o->after_id,
                               o->every };
    size_t i, n = 1 + (o->only_missing != 0) + (o->only_fallbacks != 0) +
                  (o->has_min_rate != 0) + (o->follow != 0);
    int rc;

    for (i = 0; i < 9; i++)
        n += svals[i] != NULL;
    for (i = 0; i < sizeof(uhas) / sizeof(uhas[0]); i++)
        n += uhas[i] != 0;
    rc = msgpack_pack_map(pk, n) != 0 || cli_pack_str(pk, "kind", kind);
    for (i = 0; i < 9 && rc == 0; i++)
        if (svals[i] != NULL)
            rc = cli_pack_str(pk, skeys[i], svals[i]);
    for (i = 0; i < sizeof(uhas) / sizeof(uhas[0]) && rc == 0; i++)
        if (uhas[i])
            rc = cli_pack_u64(pk, ukeys[i], uvals[i]);
    if (rc == 0 && o->follow)
        rc =
            envelope_pack_cstr(pk, "follow") != 0 || msgpack_pack_true(pk) != 0;
    if (rc == 0 && o->only_missing)
        rc = envelope_pack_cstr(pk, "only_missing") != 0 ||
             msgpack_pack_true(pk) != 0;
    if (rc == 0 && o->only_fallbacks)
        rc = envelope_pack_cstr(pk, "only_fallbacks") != 0 ||
             msgpack_pack_true(pk) != 0;
    if (rc == 0 && o->has_min_rate)
        rc = envelope_pack_cstr(pk, "min_rate") != 0 ||
             msgpack_pack_double(pk, o->min_rate) != 0;
    return rc;
}

struct query_arg {
    const struct cli_opts *o;
    const char *kind;
};

/* --columns: for tables and csv only, and names the kind's columns. 0, or
 * -1 with the usage error said. */
static int
check_columns(const struct cli_opts *o, const struct output_spec *spec)
{
    char err[OUTPUT_ERR_MAX];

    if (o->format != OUTPUT_TABLE && o->format != OUTPUT_CSV) {
        cli_usage_err(o->prog, "--columns applies to tables and csv");
        return -1;
    }
    if (output_check_columns(spec, err, sizeof(err)) != 0) {
        cli_usage_err(o->prog, "--columns: %s", err);
        return -1;
    }
    return 0;
}

static int
pack_query_cb(msgpack_packer *pk, const void *arg)
{
    const struct query_arg *q = arg;

    return pack_query(pk, q->o, q->kind);
}

static int
run_query_answered(struct cli_opts *o, const char *kind, int *answered)
{
    struct net_conn c;
    struct net_reply rep;
    struct query_arg q = { o, kind };
    int rc;

    *answered = 0;
    if (o->nargs > 0) {
        cli_usage_err(o->prog, "unexpected argument \"%s\"", o->args[0]);
        return CLI_EXIT_USAGE;
    }
    if (o->columns != NULL) {
        struct output_spec spec = { kind,       o->group_by,
                                    o->columns, 0,
                                    0,          o->has_every ? o->every : 0 };

        if (check_columns(o, &spec) != 0)
            return CLI_EXIT_USAGE;
    }
    if ((rc = cli_open_conn(o, &c, NULL, 0)) != 0)
        return rc;
    rc = cli_request(&c, PROTO_OP_QUERY, kind, pack_query_cb, &q, &rep);
    if (rc == 0) {
        *answered = 1;
        rc = cli_print_result(o, kind, rep.r.result);
    }
    net_reply_free(&rep);
    net_close(&c);
    return rc;
}

static int
run_query(struct cli_opts *o, const char *kind)
{
    int answered;

    return run_query_answered(o, kind, &answered);
}

static const char *const group_plain[] = { "plan",     "graph",  "model",
                                           "backends", "source", "none",
                                           NULL };

/* --group-by: one key, or a string key and backends in either order
 * ("plan,backends", "backends,model"). */
static int
check_group_by(const char *prog, const char *v)
{
    static const char *const named[] = { "plan", "graph", "model", "source",
                                         NULL };
    const char *comma = strchr(v, ',');
    const char *other = NULL;
    size_t i;

    if (comma == NULL)
        return check_choice(prog, "group-by", v, group_plain);
    if (strncmp(v, "backends,", 9) == 0)
        other = v + 9;
    else if (strcmp(comma, ",backends") == 0)
        other = v;
    /* The key ends at the comma before backends, or at the end. */
    for (i = 0; other != NULL && named[i] != NULL; i++)
        if (strncmp(other, named[i], strlen(named[i])) == 0 &&
            other[strlen(named[i])] == (other == v ? ',' : '\0'))
            return 0;
    cli_usage_err(prog,
                  "--group-by: unknown value \"%s\" (two keys are plan, "
                  "graph, model or source with backends: \"plan,backends\")",
                  v);
    return -1;
}

/* --every and --format chart: a series needs a start (24 buckets before
 * --until or now by default), a chart a series. */
static int
series_opts(struct cli_opts *o)
{
    if (o->format == OUTPUT_CHART && !o->has_every) {
        cli_usage_err(o->prog, "--format chart needs --every (a series)");
        return CLI_EXIT_USAGE;
    }
    if (o->has_every && o->group_by != NULL &&
        strcmp(o->group_by, "none") == 0 && strcmp(o->prog, "fallbacks") == 0) {
        cli_usage_err(o->prog,
                      "--every applies to groups, not to --group-by none "
                      "(whose rows are the fallback receipts)");
        return CLI_EXIT_USAGE;
    }
    if (o->has_every && !o->has_since) {
        uint64_t end = o->has_until ? o->until : timespec_now_ms();

        o->since = end > 24 * o->every ? end - 24 * o->every : 0;
        o->has_since = 1;
    }
    return 0;
}

static int
cmd_fallbacks(struct cli_opts *o)
{
    int rc;

    /* Without groups the rows are the fallback receipts themselves. */
    if ((o->only_fallbacks || o->has_min_rate) && o->group_by != NULL &&
        strcmp(o->group_by, "none") == 0) {
        cli_usage_err(o->prog,
                      "--%s applies to groups, not to --group-by "
                      "none (whose rows are the fallback receipts)",
                      o->only_fallbacks ? "only-fallbacks" : "min-rate");
        return CLI_EXIT_USAGE;
    }
    if ((rc = series_opts(o)) != 0)
        return rc;
    return run_query(o, "fallbacks");
}

static int
cmd_coverage(struct cli_opts *o)
{
    int rc;

    if ((rc = series_opts(o)) != 0)
        return rc;
    return run_query(o, "coverage");
}

static int
cmd_receipts(struct cli_opts *o)
{
    struct query_arg q = { o, "receipts" };

    if (!o->follow)
        return run_query(o, "receipts");
    if (o->has_before || o->fail_on_truncate) {
        cli_usage_err(o->prog, "--%s does not apply to --follow",
                      o->has_before ? "before-id" : "fail-on-truncate");
        return CLI_EXIT_USAGE;
    }
    if (o->nargs > 0) {
        cli_usage_err(o->prog, "unexpected argument \"%s\"", o->args[0]);
        return CLI_EXIT_USAGE;
    }
    if (o->columns != NULL) {
        struct output_spec spec = { .kind = "receipts", .columns = o->columns };

        if (check_columns(o, &spec) != 0)
            return CLI_EXIT_USAGE;
    }
    if (!o->has_limit) {
        o->limit = FOLLOW_PAGE;
        o->has_limit = 1;
    }
    return follow_receipts(o, pack_query_cb, &q);
}

static int
cmd_gaps(struct cli_opts *o)
{
    return run_query(o, "gaps");
}

static int
cmd_plans(struct cli_opts *o)
{
    return run_query(o, "plans");
}

static int
cmd_prunes(struct cli_opts *o)
{
    return run_query(o, "prunes");
}

static int
cmd_retained(struct cli_opts *o)
{
    if (o->plan == NULL) {
        cli_usage_err(o->prog, "--plan is required");
        return CLI_EXIT_USAGE;
    }
    return run_query(o, "retained");
}

static int
cmd_stats(struct cli_opts *o)
{
    /* Prometheus text comes from the daemon's `metrics` kind, the same
     * exposition its HTTP listener serves. */
    int answered,
        rc = run_query_answered(
            o, o->format == OUTPUT_PROMETHEUS ? "metrics" : "stats", &answered);

    /* A scrape of a daemon that is down (or refuses the query) must say
     * so rather than leave the last file in place: the file gets
     * receiptd_up 0, and the exit status still says what failed. */
    if (rc != 0 && rc != CLI_EXIT_USAGE && !answered &&
        o->format == OUTPUT_PROMETHEUS)
        output_prometheus_down(stdout);
    return rc;
}

static int
cmd_top(struct cli_opts *o)
{
    return top_run(o);
}

/* ---- ping ---- */

static int
cmd_ping(struct cli_opts *o)
{
    struct net_conn c;
    struct net_reply rep;
    uint64_t t0, t1;
    int rc;

    if (o->nargs > 0) {
        cli_usage_err(o->prog, "unexpected argument \"%s\"", o->args[0]);
        return CLI_EXIT_USAGE;
    }
    if ((rc = cli_open_conn(o, &c, NULL, 1)) != 0)
        return rc;
    t0 = mono_us();
    rc = cli_request(&c, PROTO_OP_PING, "ping", NULL, NULL, &rep);
    t1 = mono_us();
    if (rc == 0) {
        if (o->format == OUTPUT_JSON) {
            struct json_object *j = json_object_new_object();

            json_object_object_add(j, "ok", json_object_new_boolean(1));
            json_object_object_add(j, "server",
                                   json_object_new_string(c.server));
            json_object_object_add(j, "max_frame",
                                   json_object_new_uint64(c.max_frame));
            json_object_object_add(j, "max_batch",
                                   json_object_new_uint64(c.max_batch));
            json_object_object_add(j, "rtt_us",
                                   json_object_new_uint64(t1 - t0));
            puts(json_object_to_json_string_ext(
                j, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                       JSON_C_TO_STRING_NOSLASHESCAPE));
            json_object_put(j);
        } else if (o->format == OUTPUT_CSV) {
            printf("ok,server,max_frame,max_batch,rtt_us\ntrue,");
            output_csv_field(stdout, c.server, strlen(c.server));
            printf(",%" PRIu32 ",%" PRIu32 ",%" PRIu64 "\n", c.max_frame,
                   c.max_batch, t1 - t0);
        } else {
            printf("ok: %s answered in %.3f ms (max_frame %" PRIu32
                   ", max_batch %" PRIu32 ")\n",
                   c.server[0] ? c.server : "receiptd",
                   (double)(t1 - t0) / 1000.0, c.max_frame, c.max_batch);
        }
    }
    net_reply_free(&rep);
    net_close(&c);
    return rc;
}

/* ---- readback-check ---- */

static int
pack_readback_cb(msgpack_packer *pk, const void *arg)
{
    const struct cli_opts *o = arg;

    return msgpack_pack_map(pk, 5) != 0 ||
           cli_pack_str(pk, "prepared_plan_id", o->plan) ||
           cli_pack_str(pk, "graph_hash", o->graph ? o->graph : "") ||
           cli_pack_str(pk, "value_id", o->value) ||
           cli_pack_u64(pk, "participant_index", o->participant) ||
           envelope_pack_cstr(pk, "output_layout") != 0 ||
           msgpack_pack_map(pk, 2) != 0 ||
           cli_pack_str(pk, "element_type", o->element_type) ||
           cli_pack_u64(pk, "element_count", o->count);
}

/* Packs {"rows": [request], "truncated": false} around the readback's
 * answer, so it prints like any other result. */
static int
wrap_row(msgpack_sbuffer *sb, const msgpack_object *row, msgpack_unpacked *up)
{
    msgpack_packer pk;
    size_t off = 0;

    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    if (msgpack_pack_map(&pk, 2) != 0 || envelope_pack_cstr(&pk, "rows") ||
        msgpack_pack_array(&pk, 1) != 0 || msgpack_pack_object(&pk, *row) ||
        envelope_pack_cstr(&pk, "truncated") || msgpack_pack_false(&pk))
        return -1;
    return msgpack_unpack_next(up, sb->data, sb->size, &off) ==
                   MSGPACK_UNPACK_SUCCESS
               ? 0
               : -1;
}

static int
cmd_readback_check(struct cli_opts *o)
{
    struct net_conn c;
    struct net_reply rep;
    const msgpack_object *req;
    msgpack_sbuffer sb;
    msgpack_unpacked up;
    int rc;

    if (o->nargs > 0) {
        cli_usage_err(o->prog, "unexpected argument \"%s\"", o->args[0]);
        return CLI_EXIT_USAGE;
    }
    if (o->plan == NULL || o->value == NULL || o->element_type == NULL ||
        !o->has_count) {
        cli_usage_err(o->prog,
                      "--plan, --value, --element-type and --count are "
                      "required");
        return CLI_EXIT_USAGE;
    }
    if ((rc = cli_open_conn(o, &c, NULL, 0)) != 0)
        return rc;
    rc = cli_request(&c, PROTO_OP_READBACK, "readback", pack_readback_cb, o,
                     &rep);
    if (rc == 0) {
        req = rep.r.result && rep.r.result->type == MSGPACK_OBJECT_MAP
                  ? mpobj_map_get(rep.r.result, "request", NULL)
                  : NULL;
        msgpack_sbuffer_init(&sb);
        msgpack_unpacked_init(&up);
        if (req == NULL || req->type != MSGPACK_OBJECT_MAP ||
            wrap_row(&sb, req, &up) != 0) {
            fprintf(stderr, "receiptctl: readback: the reply has no "
                            "\"request\" map\n");
            rc = CLI_EXIT_CONNECT;
        } else {
            rc = cli_print_result(o, "readback", &up.data);
        }
        msgpack_unpacked_destroy(&up);
        msgpack_sbuffer_destroy(&sb);
    }
    net_reply_free(&rep);
    net_close(&c);
    return rc;
}

static int
cmd_quarantine(struct cli_opts *o)
{
    if (o->nargs == 0)
        return run_query(o, "quarantine");
    if (strcmp(o->args[0], "replay") != 0 && strcmp(o->args[0], "show") != 0) {
        cli_usage_err(o->prog,
                      "unexpected argument \"%s\"; did you mean "
                      "'quarantine show ID...' or 'quarantine replay ID...'?",
                      o->args[0]);
        return CLI_EXIT_USAGE;
    }
    /* show and replay fetch payloads by id: the listing's filters would
     * be ignored, so they are refused. */
    {
        const char *flag = o->source                   ? "--source"
                           : o->has_since              ? "--since"
                           : o->has_until              ? "--until"
                           : o->has_limit              ? "--limit"
                           : o->fail_on_truncate       ? "--fail-on-truncate"
                           : o->format == OUTPUT_JSONL ? "--format jsonl"
                                                       : NULL;

        if (flag != NULL) {
            cli_usage_err(o->prog,
                          "%s applies to the listing, not to 'quarantine "
                          "%s'",
                          flag, o->args[0]);
            return CLI_EXIT_USAGE;
        }
    }
    return replay_run(o);
}

/* ---- help ---- */

static int cmd_help(struct cli_opts *o);

static const struct cmd cmds[] = {
    { "ping", cmd_ping, OUT, "", "check that the daemon answers",
      "Says hello and pings the daemon; prints its version, limits and the\n"
      "round-trip time." },
    { "stats", cmd_stats, OUT, "", "the daemon's own counters",
      "Shows the daemon's counters: uptime, connections, frames, accepted,\n"
      "rejected, duplicates, quarantined, commit latency, store size.\n"
      "--format prometheus prints the daemon's metrics (its `metrics`\n"
      "query: the text its HTTP listener serves at /metrics, see\n"
      "receiptd --http) for node_exporter's textfile collector, e.g.\n"
      "from cron:\n"
      "  receiptctl stats --format prometheus > receiptd.prom.tmp;\n"
      "    mv receiptd.prom.tmp "
      "/var/lib/prometheus/node-exporter/receiptd.prom\n"
      "When the daemon does not answer it prints receiptd_up 0 (and exits\n"
      "non-zero), so the file says the daemon is down." },
    { "top", cmd_top, CONN, "",
      "a live full-screen view, refreshed each second",
      "Shows, refreshed each second on the whole terminal: receipts,\n"
      "frames and quarantined payloads per second; the mean commit time\n"
      "and the writer's CPU per receipt over the last second; the writer's\n"
      "queue; connections and refusals; the store's health; and the\n"
      "fallback rate per requested -> executed backend pair over the last\n"
      "minute. q or Ctrl-C quits and restores the terminal. Needs a\n"
      "terminal; scripts use stats." },
    { "receipts", cmd_receipts,
      QUERY | RECEIPT_FILTERS | B(O_BEFORE_ID) | B(O_STATUS) | B(O_ORIGIN) |
          B(O_AFTER_ID) | B(O_FOLLOW),
      "", "stored receipts, newest first; or as they are committed",
      "Lists stored receipts, newest first. Page backwards with --before-id\n"
      "set to the smallest receipt_id of the previous page. With --after-id\n"
      "ID: the receipts above ID, oldest first, so a script pages forwards\n"
      "with the largest receipt_id it got. Tables show the identifying\n"
      "columns; --format json or csv carries every field.\n"
      "--follow stays and prints each receipt the filters match as it is\n"
      "committed (the daemon pushes them; --format json prints JSON lines),\n"
      "from now on, or from --after-id ID to catch up first. It ends on\n"
      "Ctrl-C or when stdout closes (| head), exiting 0; when the daemon\n"
      "stops or cuts off a follower that reads too slowly, it says why and\n"
      "the --after-id that resumes without missing a receipt." },
    { "fallbacks", cmd_fallbacks,
      QUERY | RECEIPT_FILTERS | B(O_GROUP_BY) | B(O_ONLY_FALLBACKS) |
          B(O_MIN_RATE) | B(O_EVERY),
      "", "fallback counts and rates per group",
      "Counts receipts per group (--group-by plan, graph, model, backends or\n"
      "source, or a key with backends such as plan,backends; default plan)\n"
      "as fallback, unproven and clean, with the fallback rate, most\n"
      "fallbacks first; a table ends with a (total) row over every group\n"
      "the filters match. --only-fallbacks and --min-rate keep the groups\n"
      "that fell back (at that rate); --group-by none lists the fallback\n"
      "receipts themselves, newest first. --every 1h makes a series: a row\n"
      "per group and hour (empty hours included), --limit counting groups;\n"
      "--format chart draws it, a line per group." },
    { "coverage", cmd_coverage,
      QUERY | RECEIPT_FILTERS | B(O_GROUP_BY) | B(O_EVERY), "",
      "counter coverage and sum/min/max/mean",
      "Per counter (and per group with --group-by): receipts, measured,\n"
      "unknown, coverage, and sum, min, max and mean over measured receipts\n"
      "only; an unknown counter is never counted as zero. not_applicable:\n"
      "receipts whose schema lacks the counter (coverage is over the rest).\n"
      "Grouped, a table ends with a (total) row per counter over every\n"
      "group. --every 1h makes a series: a row per group, counter and hour\n"
      "(empty hours included), --limit counting (group, counter) pairs;\n"
      "--format chart draws it, a line per group and counter." },
    { "gaps", cmd_gaps,
      QUERY | B(O_SOURCE) | B(O_ONLY_MISSING) | B(O_QUIET_FOR), "",
      "missing seq ranges per source; quiet sources",
      "Per source: first and last seq, receipts received, the missing seq\n"
      "ranges in between (receipts lost before they reached the daemon)\n"
      "and when its last receipt arrived, the sources with most missing\n"
      "seqs first, so --limit never hides a gappy source behind healthy\n"
      "ones. --only-missing lists only sources with gaps; --quiet-for 10m\n"
      "only those that sent no receipt in the last 10 minutes (the ones\n"
      "that stopped)." },
    { "quarantine", cmd_quarantine, QUERY | B(O_SOURCE) | TIME,
      "[show|replay ID...]", "rejected payloads; show, replay them",
      "Lists quarantined payloads (rejected writes kept with their bytes).\n"
      "'quarantine show ID...' prints a payload with its bytes decoded.\n"
      "'quarantine replay ID...' fetches each payload's raw bytes and\n"
      "submits it again, as its original source, e.g. after an upgrade\n"
      "that accepts it; a payload rejected again stays in its row, whose\n"
      "attempts and last_attempt_at count the refusals.\n"
      "With --format json or csv, show and replay take one ID and print\n"
      "one document (replay: the daemon's result with quarantine_id and\n"
      "replayed_as)." },
    { "plans", cmd_plans, QUERY | B(O_PLAN) | B(O_GRAPH) | B(O_SOURCE) | TIME,
      "", "registered plans",
      "Lists registered plans with their node, value and retained counts." },
    { "prunes", cmd_prunes, QUERY | TIME, "",
      "what retention removed, and when",
      "Lists the retention prunes, newest first: when each ran, its cutoff,\n"
      "the receipts it removed and the oldest and newest received_at among\n"
      "them. --since and --until select by the time of the prune." },
    { "retained", cmd_retained, QUERY | B(O_PLAN) | B(O_GRAPH), "",
      "retained values of one plan",
      "Lists the retained completion values of the plan given by --plan\n"
      "(and --graph)." },
    { "readback-check", cmd_readback_check,
      OUT | B(O_PLAN) | B(O_GRAPH) | B(O_VALUE) | B(O_PARTICIPANT) |
          B(O_ELEMENT_TYPE) | B(O_COUNT),
      "", "check a completion readback",
      "Asks the daemon to check a completion readback against a retained\n"
      "value (op readback; nothing is stored) and prints the resolved\n"
      "readback request. Needs --plan, --value, --element-type, --count." },
    { "import", import_run, OUT | B(O_SOURCE) | B(O_BATCH) | B(O_DRY_RUN),
      "FILE...", "send receipts from files",
      "Reads receipts from files (\"-\" is stdin): msgpack (one receipt or an\n"
      "array of receipts) or serde_json (one object, an array, or JSON\n"
      "lines). Each is checked locally first, then sent in 'receipts'\n"
      "batches (--batch, default 1000), pipelined. With --source, each\n"
      "receipt is a 'receipt' write numbered by its position in the input\n"
      "(seq, from 1 over all the files in order), so running the same\n"
      "import again after an interruption stores each receipt once.\n"
      "Prints each rejected item as FILE:LINE: (JSON; arrays add the\n"
      "item's index) or FILE: item INDEX: (msgpack), then code, path and\n"
      "message, then the counts. Exits 1 when any item was rejected. On a\n"
      "terminal, progress goes to stderr. A file holding a map with a\n"
      "\"nodes\" key is a plan: it is registered with one 'plan' request." },
    { "help", cmd_help, 0, "[COMMAND]", "show help",
      "Shows the list of commands, or one command's help." },
};

static const struct cmd *
find_cmd(const char *name)
{
    size_t i;

    for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        if (strcmp(cmds[i].name, name) == 0)
            return &cmds[i];
    return NULL;
}

static void
print_usage(FILE *out)
{
    size_t i;

    fputs("usage: receiptctl COMMAND [OPTIONS]\n\ncommands:\n", out);
    for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        fprintf(out, "  %-15s %s\n", cmds[i].name, cmds[i].summary);
    fputs("\n'receiptctl help COMMAND' or 'receiptctl COMMAND --help' for a\n"
          "command's options. Exit status: 0 ok, 1 the daemon answered with\n"
          "an error, 2 usage, 3 cannot connect, 4 cut at --limit with\n"
          "--fail-on-truncate.\n",
          out);
}

/* Prints text from column `col`, wrapped at `width`, continuation lines
 * indented to col. */
static void
wrap(FILE *out, const char *text, int col, int width)
{
    const char *p = text, *sp;
    int at = col, n;

    while (*p != '\0') {
        sp = strchr(p, ' ');
        n = sp ? (int)(sp - p) : (int)strlen(p);
        if (at > col && at + 1 + n > width) {
            fprintf(out, "\n%*s", col, "");
            at = col;
        } else if (at > col) {
            putc(' ', out);
            at++;
        }
        fwrite(p, 1, (size_t)n, out);
        at += n;
        p += n;
        while (*p == ' ')
            p++;
    }
    putc('\n', out);
}

static void
print_help(FILE *out, const struct cmd *c)
{
    size_t i, k;
    char left[64];

    fprintf(out, "usage: receiptctl %s%s%s%s\n\n%s\n", c->name,
            c->opts ? " [OPTIONS]" : "", c->args[0] ? " " : "", c->args,
            c->help);
    if (c->opts == 0)
        return;
    fputs("\noptions:\n", out);
    for (i = 0; i < sizeof(optdescs) / sizeof(optdescs[0]); i++) {
        const struct optdesc *d = &optdescs[i];
        const char *help = d->help;

        if ((B(d->id) & c->opts) == 0)
            continue;
        for (k = 0; k < sizeof(opthelp) / sizeof(opthelp[0]); k++)
            if (opthelp[k].id == d->id && strcmp(opthelp[k].cmd, c->name) == 0)
                help = opthelp[k].help;
        snprintf(left, sizeof(left), "--%s%s%s", d->name, d->arg ? " " : "",
                 d->arg ? d->arg : "");
        fprintf(out, "  %-24s ", left);
        wrap(out, help, 27, 79);
    }
    fprintf(out, "  %-24s %s\n", "--help", "this help");
}

static int
cmd_help(struct cli_opts *o)
{
    const struct cmd *c;

    if (o->nargs == 0) {
        print_usage(stdout);
        return 0;
    }
    if ((c = find_cmd(o->args[0])) == NULL) {
        cli_usage_err(NULL, "unknown command \"%s\"", o->args[0]);
        return CLI_EXIT_USAGE;
    }
    print_help(stdout, c);
    return 0;
}

/* ---- main ---- */

static const struct optdesc *
find_optdesc(int id)
{
    size_t i;

    for (i = 0; i < sizeof(optdescs) / sizeof(optdescs[0]); i++)
        if (optdescs[i].id == id)
            return &optdescs[i];
    return NULL;
}

static const char *const statuses[] = { "fallback", "clean", "unproven", NULL };

/* A fallback rate: "1%", "0.5%" or a fraction "0.01", into [0, 1]. */
static int
parse_rate(const char *arg, double *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(arg, &end);
    if (end == arg || errno != 0)
        return -1;
    if (*end == '%') {
        v /= 100.0;
        end++;
    }
    if (*end != '\0' || !(v >= 0 && v <= 1))
        return -1;
    *out = v;
    return 0;
}

static int
backend_ok(const char *prog, const char *flag, const char *v)
{
    if (receipt_backend_from_name(v, strlen(v)) >= 0)
        return 0;
    cli_usage_err(prog,
                  "--%s: unknown backend \"%s\" (expected cpu, wgpu-dx12, "
                  "wgpu-vulkan, wgpu-metal, cuda, metal or unknown)",
                  flag, v);
    return -1;
}

/*
 * Applies one option's argument. Returns 0 or CLI_EXIT_USAGE (printed).
 */
static int
apply_opt(struct cli_opts *o, const struct cmd *c, int id, const char *arg,
          uint64_t now)
{
    char err[TIMESPEC_ERR_MAX], derr[DURATION_ERR_MAX];
    const char *prog = c ? c->name : NULL;
    uint64_t v;

    switch (id) {
    case O_SOCKET:
        o->socket = arg;
        break;
    case O_TCP:
        o->tcp = arg;
        break;
    case O_TOKEN:
        o->token = arg;
        break;
    case O_TOKEN_FILE:
        o->token_file = arg;
        break;
    case O_TLS:
        o->tls = 1;
        break;
    case O_CA:
        o->ca_file = arg;
        break;
    case O_CERT:
        o->cert = arg;
        break;
    case O_KEY:
        o->key = arg;
        break;
    case O_TIMEOUT:
        if (duration_parse(arg, 1000, &v, derr, sizeof(derr)) != 0) {
            cli_usage_err(prog, "--timeout: %s", derr);
            return CLI_EXIT_USAGE;
        }
        if (v > 86400000) {
            cli_usage_err(prog, "--timeout: \"%s\" is over a day", arg);
            return CLI_EXIT_USAGE;
        }
        o->timeout_ms = (int)v;
        break;
    case O_FORMAT:
        o->format = output_format_from_name(arg);
        if (o->format < 0 || !format_ok(c->name, o->format)) {
            cli_usage_err(prog,
                          "--format: unknown format \"%s\" (expected "
                          "table, json%s or csv%s)",
                          arg,
                          format_ok(c->name, OUTPUT_JSONL) ? ", jsonl" : "",
                          strcmp(c->name, "stats") == 0      ? " or prometheus"
                          : format_ok(c->name, OUTPUT_CHART) ? " or chart"
                                                             : "");
            return CLI_EXIT_USAGE;
        }
        break;
    case O_PLAN:
        o->plan = arg;
        break;
    case O_GRAPH:
        o->graph = arg;
        break;
    case O_MODEL:
        o->model = arg;
        break;
    case O_SOURCE:
        o->source = arg;
        break;
    case O_ORIGIN:
        o->origin = arg;
        break;
    case O_REQUESTED:
        if (backend_ok(prog, "requested", arg) != 0)
            return CLI_EXIT_USAGE;
        o->requested = arg;
        break;
    case O_EXECUTED:
        if (backend_ok(prog, "executed", arg) != 0)
            return CLI_EXIT_USAGE;
        o->executed = arg;
        break;
    case O_SINCE:
    case O_UNTIL:
        if (timespec_parse(arg, now, &v, err, sizeof(err)) != 0) {
            cli_usage_err(prog, "--%s: %s", id == O_SINCE ? "since" : "until",
                          err);
            return CLI_EXIT_USAGE;
        }
        if (id == O_SINCE) {
            o->since = v;
            o->has_since = 1;
        } else {
            o->until = v;
            o->has_until = 1;
        }
        break;
    case O_LIMIT:
        if (cli_parse_u64(arg, 1, QUERY_LIMIT_MAX, &o->limit) != 0) {
            cli_usage_err(prog,
                          "--limit: expected an integer from 1 to %d, got "
                          "\"%s\"",
                          QUERY_LIMIT_MAX, arg);
            return CLI_EXIT_USAGE;
        }
        o->has_limit = 1;
        break;
    case O_BEFORE_ID:
        if (cli_parse_u64(arg, 0, UINT64_MAX, &o->before_id) != 0) {
            cli_usage_err(
                prog, "--before-id: expected a receipt id, got \"%s\"", arg);
            return CLI_EXIT_USAGE;
        }
        o->has_before = 1;
        break;
    case O_AFTER_ID:
        if (cli_parse_u64(arg, 0, UINT64_MAX, &o->after_id) != 0) {
            cli_usage_err(prog, "--after-id: expected a receipt id, got \"%s\"",
                          arg);
            return CLI_EXIT_USAGE;
        }
        o->has_after = 1;
        break;
    case O_FOLLOW:
        o->follow = 1;
        break;
    case O_STATUS:
        if (check_choice(prog, "status", arg, statuses) != 0)
            return CLI_EXIT_USAGE;
        o->status = arg;
        break;
    case O_GROUP_BY:
        if (check_group_by(prog, arg) != 0)
            return CLI_EXIT_USAGE;
        o->group_by = arg;
        break;
    case O_BATCH:
        if (cli_parse_u64(arg, 1, 1000000, &v) != 0) {
            cli_usage_err(prog,
                          "--batch: expected an integer from 1 to 1000000, "
                          "got \"%s\"",
                          arg);
            return CLI_EXIT_USAGE;
        }
        o->batch = (uint32_t)v;
        o->has_batch = 1;
        break;
    case O_VALUE:
        o->value = arg;
        break;
    case O_PARTICIPANT:
        if (cli_parse_u64(arg, 0, UINT32_MAX, &o->participant) != 0) {
            cli_usage_err(prog,
                          "--participant: expected an integer from 0 to "
                          "4294967295, got \"%s\"",
                          arg);
            return CLI_EXIT_USAGE;
        }
        break;
    case O_ELEMENT_TYPE:
        o->element_type = arg;
        break;
    case O_COUNT:
        if (cli_parse_u64(arg, 1, UINT64_MAX, &o->count) != 0) {
            cli_usage_err(prog,
                          "--count: expected a positive integer, got "
                          "\"%s\"",
                          arg);
            return CLI_EXIT_USAGE;
        }
        o->has_count = 1;
        break;
    case O_DRY_RUN:
        o->dry_run = 1;
        break;
    case O_FAIL_ON_TRUNCATE:
        o->fail_on_truncate = 1;
        break;
    case O_COLUMNS:
        o->columns = arg;
        break;
    case O_ONLY_MISSING:
        o->only_missing = 1;
        break;
    case O_ONLY_FALLBACKS:
        o->only_fallbacks = 1;
        break;
    case O_MIN_RATE:
        if (parse_rate(arg, &o->min_rate) != 0) {
            cli_usage_err(prog,
                          "--min-rate: expected a rate from 0%% to 100%% "
                          "(1%%, 0.5%%) or a fraction from 0 to 1, got "
                          "\"%s\"",
                          arg);
            return CLI_EXIT_USAGE;
        }
        o->has_min_rate = 1;
        break;
    case O_EVERY:
        if (duration_parse(arg, 1000, &o->every, derr, sizeof(derr)) != 0) {
            cli_usage_err(prog, "--every: %s", derr);
            return CLI_EXIT_USAGE;
        }
        if (o->every == 0 || o->every % 3600000 != 0) {
            cli_usage_err(prog,
                          "--every: \"%s\" is not a whole number of hours "
                          "(1h, 6h, 1d)",
                          arg);
            return CLI_EXIT_USAGE;
        }
        o->has_every = 1;
        break;
    case O_QUIET_FOR:
        if (duration_parse(arg, 1000, &o->quiet_for, derr, sizeof(derr)) != 0) {
            cli_usage_err(prog, "--quiet-for: %s", derr);
            return CLI_EXIT_USAGE;
        }
        o->has_quiet_for = 1;
        break;
    }
    return 0;
}

#define MAX_OPT_USES 64

int
main(int argc, char **argv)
{
    struct option longopts[sizeof(optdescs) / sizeof(optdescs[0]) + 3];
    struct {
        int id;
        const char *arg;
    } uses[MAX_OPT_USES];
    size_t i, nuses = 0;
    struct cli_opts o;
    const struct cmd *c = NULL;
    char **pos;
    int npos = 0, ch, help = 0, rc;
    uint64_t now = timespec_now_ms();

    /* Display widths of UTF-8 text (tables): the user's character set, or
     * C.UTF-8 where that is not UTF-8; numbers keep the C locale. */
    if (setlocale(LC_CTYPE, "") == NULL ||
        strcmp(nl_langinfo(CODESET), "UTF-8") != 0)
        setlocale(LC_CTYPE, "C.UTF-8");
    memset(&o, 0, sizeof(o));
    o.timeout_ms = DEFAULT_TIMEOUT * 1000;
    o.format = OUTPUT_TABLE;
    o.batch = DEFAULT_BATCH;
    for (i = 0; i < sizeof(optdescs) / sizeof(optdescs[0]); i++) {
        longopts[i].name = optdescs[i].name;
        longopts[i].has_arg =
            optdescs[i].arg != NULL ? required_argument : no_argument;
        longopts[i].flag = NULL;
        longopts[i].val = optdescs[i].id;
    }
    longopts[i++] = (struct option){ "help", no_argument, NULL, O_HELP };
    longopts[i++] = (struct option){ "version", no_argument, NULL, O_VERSION };
    longopts[i] = (struct option){ NULL, 0, NULL, 0 };

    pos = calloc((size_t)argc + 1, sizeof(*pos));
    if (pos == NULL)
        cli_oom();
    /* First pass: collect options and positionals; the subcommand (the
     * first positional) decides which options are allowed, so options are
     * applied only after it is known. A leading '-' in optstring returns
     * positionals in place, so "import -" keeps stdin as a file. */
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "-:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 1:
            pos[npos++] = optarg;
            break;
        case 'h':
        case O_HELP:
            help = 1;
            break;
        case O_VERSION:
            printf("receiptctl %s\n", RECEIPTD_VERSION);
            free(pos);
            return 0;
        case ':':
            cli_usage_err(npos ? pos[0] : NULL, "%s needs a value",
                          argv[optind - 1]);
            free(pos);
            return CLI_EXIT_USAGE;
        case '?':
            if (optopt != 0)
                cli_usage_err(npos ? pos[0] : NULL, "unknown option -%c",
                              optopt);
            else
                cli_usage_err(npos ? pos[0] : NULL, "unknown option %s",
                              argv[optind - 1]);
            free(pos);
            return CLI_EXIT_USAGE;
        default:
            if (nuses == MAX_OPT_USES) {
                cli_usage_err(NULL, "too many options");
                free(pos);
                return CLI_EXIT_USAGE;
            }
            uses[nuses].id = ch;
            uses[nuses].arg = optarg;
            nuses++;
            break;
        }
    }
    /* After "--" everything is an argument ("import -- -odd-name.json"). */
    while (optind < argc)
        pos[npos++] = argv[optind++];
    if (npos == 0) {
        if (help) {
            print_usage(stdout);
            free(pos);
            return 0;
        }
        print_usage(stderr);
        free(pos);
        return CLI_EXIT_USAGE;
    }
    c = find_cmd(pos[0]);
    if (c == NULL) {
        cli_usage_err(NULL, "unknown command \"%s\"", pos[0]);
        free(pos);
        return CLI_EXIT_USAGE;
    }
    if (help) {
        print_help(stdout, c);
        free(pos);
        return 0;
    }
    o.prog = c->name;
    for (i = 0; i < nuses; i++) {
        const struct optdesc *d = find_optdesc(uses[i].id);

        if (d == NULL || (B(d->id) & c->opts) == 0) {
            cli_usage_err(c->name, "--%s is not an option of %s",
                          d ? d->name : "?", c->name);
            free(pos);
            return CLI_EXIT_USAGE;
        }
        if ((rc = apply_opt(&o, c, uses[i].id, uses[i].arg, now)) != 0) {
            free(pos);
            return rc;
        }
    }
    if (o.tcp != NULL && o.socket != NULL) {
        cli_usage_err(c->name, "--socket and --tcp exclude each other");
        free(pos);
        return CLI_EXIT_USAGE;
    }
    if (o.token != NULL && o.token_file != NULL) {
        cli_usage_err(c->name, "--token and --token-file exclude each other");
        free(pos);
        return CLI_EXIT_USAGE;
    }
    if ((o.tls && o.tcp == NULL) ||
        ((o.ca_file != NULL || o.cert != NULL || o.key != NULL) && !o.tls) ||
        ((o.cert == NULL) != (o.key == NULL))) {
        cli_usage_err(c->name, o.tls && o.tcp == NULL ? "--tls goes with --tcp"
                               : (o.cert == NULL) != (o.key == NULL) && o.tls
                                   ? "--cert and --key go together"
                                   : "--ca, --cert and --key go with --tls");
        free(pos);
        return CLI_EXIT_USAGE;
    }
    o.args = pos + 1;
    o.nargs = npos - 1;
    rc = c->fn(&o);
    free(pos);
    return rc;
}
