/*
 * main.c: receiptctl, the command-line client of receiptd.
 *
 * A table of subcommands, one function each. Options are parsed once for
 * the whole command line (GNU getopt permutes, so they may come before or
 * after the subcommand), then checked against the options the subcommand
 * accepts, so a misplaced flag is a usage error rather than silently
 * ignored. Exit codes: 0 ok, 1 the daemon answered with an error (or an
 * import had rejected items), 2 usage, 3 cannot connect or the connection
 * failed. Every error is one line on stderr. Single-threaded.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>
#include <msgpack.h>

#include "envelope.h"
#include "mpcheck.h"
#include "mpobj.h"
#include "net.h"
#include "output.h"
#include "receipt.h"
#include "timespec.h"

#define EXIT_DAEMON  1
#define EXIT_USAGE   2
#define EXIT_CONNECT 3

#define DEFAULT_SOCKET  "/run/receiptd/receiptd.sock"
#define DEFAULT_TIMEOUT 60
#define DEFAULT_BATCH   1000
#define QUERY_LIMIT_MAX 10000
/* Requests in flight during an import: enough to keep the daemon's group
 * commit fed, few enough that their replies never fill its per-connection
 * reply cap while this process is busy writing. */
#define IMPORT_WINDOW 8

/* Option groups: each subcommand accepts the union of some of them. */
#define G_CONN     0x001u /* --socket --tcp --token --timeout */
#define G_FORMAT   0x002u /* --format */
#define G_FILTER   0x004u /* --plan ... --limit */
#define G_BEFORE   0x008u /* --before-id */
#define G_STATUS   0x010u /* --status */
#define G_GROUP    0x020u /* --group-by */
#define G_IMPORT   0x040u /* --batch, --source as the hello source */
#define G_READBACK 0x080u /* --value --participant --element-type --count */
#define G_PLAN     0x100u /* --plan --graph only */

enum opt_id {
    O_SOCKET = 256,
    O_TCP,
    O_TOKEN,
    O_TIMEOUT,
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
    O_HELP,
    O_VERSION,
};

struct optdesc {
    const char *name;
    int id;
    unsigned groups;
    const char *arg;
    const char *help;
};

static const struct optdesc optdescs[] = {
    { "socket", O_SOCKET, G_CONN, "PATH",
      "Unix socket of the daemon (default: $RECEIPTD_SOCKET, "
      "then " DEFAULT_SOCKET ")" },
    { "tcp", O_TCP, G_CONN, "HOST:PORT", "connect over TCP instead" },
    { "token", O_TOKEN, G_CONN, "TOKEN",
      "token to authenticate with (sent in hello)" },
    { "timeout", O_TIMEOUT, G_CONN, "SECONDS",
      "give up waiting on the daemon after this long (default 60; 0: never)" },
    { "format", O_FORMAT, G_FORMAT, "FMT",
      "output: table (default), json or csv" },
    { "plan", O_PLAN, G_FILTER | G_PLAN | G_READBACK, "ID",
      "prepared_plan_id" },
    { "graph", O_GRAPH, G_FILTER | G_PLAN | G_READBACK, "HASH", "graph_hash" },
    { "model", O_MODEL, G_FILTER, "ID", "model_instance_id" },
    { "source", O_SOURCE, G_FILTER | G_IMPORT, "NAME",
      "producer source (import: the source to say hello as, default "
      "receiptctl/<hostname>)" },
    { "requested", O_REQUESTED, G_FILTER, "BACKEND",
      "requested backend (cpu, wgpu-dx12, wgpu-vulkan, wgpu-metal, cuda, "
      "metal, unknown)" },
    { "executed", O_EXECUTED, G_FILTER, "BACKEND", "executed backend" },
    { "since", O_SINCE, G_FILTER, "TIME",
      "received at or after TIME: 1h, 30m, 7d, 2w, unix ms or RFC 3339" },
    { "until", O_UNTIL, G_FILTER, "TIME", "received before TIME" },
    { "limit", O_LIMIT, G_FILTER, "N",
      "at most N rows (1-10000; default 100)" },
    { "before-id", O_BEFORE_ID, G_BEFORE, "ID",
      "only receipt ids below ID (page backwards)" },
    { "status", O_STATUS, G_STATUS, "STATUS", "fallback, clean or unproven" },
    { "group-by", O_GROUP_BY, G_GROUP, "KEY",
      "plan, graph, model, backends, source or none" },
    { "batch", O_BATCH, G_IMPORT, "N",
      "receipts per request (default 1000; the daemon's max_batch caps it)" },
    { "value", O_VALUE, G_READBACK, "ID", "retained value_id" },
    { "participant", O_PARTICIPANT, G_READBACK, "N",
      "participant_index (default 0)" },
    { "element-type", O_ELEMENT_TYPE, G_READBACK, "ET",
      "element type of the readback (bool, u8, u32, i8, i32, f16, bf16, f32)" },
    { "count", O_COUNT, G_READBACK, "N", "element_count of the readback" },
};

struct opts {
    const char *prog; /* the subcommand's name, for messages */
    const char *socket;
    const char *tcp;
    const char *token;
    int timeout_ms;
    int format;
    const char *plan, *graph, *model, *source, *requested, *executed;
    const char *status, *group_by, *value, *element_type;
    int has_since, has_until, has_limit, has_before, has_count;
    uint64_t since, until, limit, before_id, participant, count;
    uint32_t batch;
    char **args; /* positional arguments after the subcommand */
    int nargs;
};

struct cmd {
    const char *name;
    int (*fn)(struct opts *);
    unsigned groups;
    const char *args;
    const char *summary;
    const char *help;
};

static const struct cmd *find_cmd(const char *name);
static void print_help(FILE *out, const struct cmd *c);

static void usage_err(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints "receiptctl: CMD: ..." and a pointer to the help. */
static void
usage_err(const char *prog, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "receiptctl: %s%s", prog ? prog : "", prog ? ": " : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see 'receiptctl help%s%s')\n", prog ? " " : "",
            prog ? prog : "");
}

static void
daemon_err(const char *what, const struct envelope_reply *r)
{
    fprintf(stderr, "receiptctl: %s%s", what ? what : "", what ? ": " : "");
    if (r->code_name.len > 0)
        fprintf(stderr, "%.*s", (int)r->code_name.len, r->code_name.ptr);
    else
        fputs(proto_code_name(r->err.code), stderr);
    if (r->err.path[0] != '\0')
        fprintf(stderr, ": %s", r->err.path);
    fprintf(stderr, ": %s\n", r->err.message);
}

/* ---- connections ---- */

static const char *
socket_path(const struct opts *o)
{
    const char *env;

    if (o->socket != NULL)
        return o->socket;
    env = getenv("RECEIPTD_SOCKET");
    if (env != NULL && env[0] != '\0')
        return env;
    return DEFAULT_SOCKET;
}

/*
 * Connects and, when a token or source must be presented, says hello.
 * Returns 0 or an exit code (the error already printed).
 */
static int
open_conn(struct opts *o, struct net_conn *c, const char *source,
          int want_hello)
{
    char err[NET_ERR_MAX];
    struct net_reply rep;
    int rc;

    if (net_connect(c, socket_path(o), o->tcp, o->timeout_ms, err,
                    sizeof(err)) != 0) {
        fprintf(stderr, "receiptctl: %s\n", err);
        return EXIT_CONNECT;
    }
    if (!want_hello && o->token == NULL && source == NULL)
        return 0;
    rc = net_hello(c, source, o->token, &rep, err, sizeof(err));
    if (rc == 1) {
        daemon_err("hello", &rep.r);
        rc = EXIT_DAEMON;
    } else if (rc != 0) {
        fprintf(stderr, "receiptctl: %s\n", err);
        rc = EXIT_CONNECT;
    }
    net_reply_free(&rep);
    if (rc != 0)
        net_close(c);
    return rc;
}

/* ---- option parsing helpers ---- */

static int
parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    unsigned long long v;

    if (s[0] < '0' || s[0] > '9')
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static int
check_choice(const char *prog, const char *flag, const char *v,
             const char *const *choices)
{
    size_t i;

    for (i = 0; choices[i] != NULL; i++)
        if (strcmp(v, choices[i]) == 0)
            return 0;
    usage_err(prog, "--%s: unknown value \"%s\"", flag, v);
    return -1;
}

/* ---- queries ---- */

static int
pack_kv_str(msgpack_packer *pk, const char *k, const char *v)
{
    return envelope_pack_cstr(pk, k) != 0 || envelope_pack_cstr(pk, v) != 0;
}

static int
pack_kv_u64(msgpack_packer *pk, const char *k, uint64_t v)
{
    return envelope_pack_cstr(pk, k) != 0 || msgpack_pack_uint64(pk, v) != 0;
}

/* Packs {"kind": kind, filters...} from the options that were given. */
static int
pack_query(msgpack_packer *pk, const struct opts *o, const char *kind)
{
    const char *skeys[] = { "plan",      "graph",    "model",  "source",
                            "requested", "executed", "status", "group_by" };
    const char *svals[] = { o->plan,      o->graph,    o->model,  o->source,
                            o->requested, o->executed, o->status, o->group_by };
    const char *ukeys[] = { "since", "until", "limit", "before_id" };
    const int uhas[] = { o->has_since, o->has_until, o->has_limit,
                         o->has_before };
    const uint64_t uvals[] = { o->since, o->until, o->limit, o->before_id };
    size_t i, n = 1;
    int rc;

    for (i = 0; i < 8; i++)
        n += svals[i] != NULL;
    for (i = 0; i < 4; i++)
        n += uhas[i] != 0;
    rc = msgpack_pack_map(pk, n) != 0 || pack_kv_str(pk, "kind", kind);
    for (i = 0; i < 8 && rc == 0; i++)
        if (svals[i] != NULL)
            rc = pack_kv_str(pk, skeys[i], svals[i]);
    for (i = 0; i < 4 && rc == 0; i++)
        if (uhas[i])
            rc = pack_kv_u64(pk, ukeys[i], uvals[i]);
    return rc;
}

/*
 * Sends one request whose body pack_body packs, and waits for its reply.
 * Returns 0 with rep holding an ok reply, or an exit code (printed).
 */
static int
request(struct net_conn *c, int op, const char *what,
        int (*pack_body)(msgpack_packer *, const void *), const void *arg,
        struct net_reply *rep)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    char err[NET_ERR_MAX];
    uint64_t id;
    size_t start;
    int rc;

    memset(rep, 0, sizeof(*rep));
    msgpack_unpacked_init(&rep->up);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    start = net_frame_begin(c, &sb, &pk, op, pack_body != NULL, &id);
    if (start == (size_t)-1 || (pack_body && pack_body(&pk, arg) != 0) ||
        net_frame_finish(c, &sb, start) != 0) {
        msgpack_sbuffer_destroy(&sb);
        fprintf(stderr,
                "receiptctl: %s: the request does not fit in a "
                "frame\n",
                what);
        return EXIT_USAGE;
    }
    msgpack_unpacked_destroy(&rep->up);
    rc = net_call(c, &sb, id, rep, err, sizeof(err));
    msgpack_sbuffer_destroy(&sb);
    if (rc != 0) {
        fprintf(stderr, "receiptctl: %s\n", err);
        return EXIT_CONNECT;
    }
    if (!rep->r.ok) {
        daemon_err(NULL, &rep->r);
        return EXIT_DAEMON;
    }
    return 0;
}

struct query_arg {
    const struct opts *o;
    const char *kind;
};

static int
pack_query_cb(msgpack_packer *pk, const void *arg)
{
    const struct query_arg *q = arg;

    return pack_query(pk, q->o, q->kind);
}

static int
print_result(const struct opts *o, const char *kind,
             const msgpack_object *result)
{
    char err[OUTPUT_ERR_MAX];
    int rc;

    if (o->format == OUTPUT_PROMETHEUS)
        rc = output_prometheus(stdout, result, err, sizeof(err));
    else
        rc = output_result(stdout, o->format, kind, result, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "receiptctl: %s: %s\n", kind, err);
        return EXIT_CONNECT;
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "receiptctl: writing the output: %s\n",
                strerror(errno));
        return EXIT_DAEMON;
    }
    return 0;
}

static int
run_query(struct opts *o, const char *kind)
{
    struct net_conn c;
    struct net_reply rep;
    struct query_arg q = { o, kind };
    int rc;

    if (o->nargs > 0) {
        usage_err(o->prog, "unexpected argument \"%s\"", o->args[0]);
        return EXIT_USAGE;
    }
    if ((rc = open_conn(o, &c, NULL, 0)) != 0)
        return rc;
    rc = request(&c, PROTO_OP_QUERY, kind, pack_query_cb, &q, &rep);
    if (rc == 0)
        rc = print_result(o, kind, rep.r.result);
    net_reply_free(&rep);
    net_close(&c);
    return rc;
}

static const char *const group_plain[] = { "plan",     "graph",  "model",
                                           "backends", "source", "none",
                                           NULL };

static int
cmd_fallbacks(struct opts *o)
{
    return run_query(o, "fallbacks");
}

static int
cmd_coverage(struct opts *o)
{
    return run_query(o, "coverage");
}

static int
cmd_receipts(struct opts *o)
{
    return run_query(o, "receipts");
}

static int
cmd_gaps(struct opts *o)
{
    return run_query(o, "gaps");
}

static int
cmd_plans(struct opts *o)
{
    return run_query(o, "plans");
}

static int
cmd_retained(struct opts *o)
{
    if (o->plan == NULL) {
        usage_err(o->prog, "--plan is required");
        return EXIT_USAGE;
    }
    return run_query(o, "retained");
}

static int
cmd_stats(struct opts *o)
{
    return run_query(o, "stats");
}

/* ---- ping ---- */

static uint64_t
mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static int
cmd_ping(struct opts *o)
{
    struct net_conn c;
    struct net_reply rep;
    uint64_t t0, t1;
    int rc;

    if (o->nargs > 0) {
        usage_err(o->prog, "unexpected argument \"%s\"", o->args[0]);
        return EXIT_USAGE;
    }
    if ((rc = open_conn(o, &c, NULL, 1)) != 0)
        return rc;
    t0 = mono_us();
    rc = request(&c, PROTO_OP_PING, "ping", NULL, NULL, &rep);
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
    const struct opts *o = arg;

    return msgpack_pack_map(pk, 5) != 0 ||
           pack_kv_str(pk, "prepared_plan_id", o->plan) ||
           pack_kv_str(pk, "graph_hash", o->graph ? o->graph : "") ||
           pack_kv_str(pk, "value_id", o->value) ||
           pack_kv_u64(pk, "participant_index", o->participant) ||
           envelope_pack_cstr(pk, "output_layout") != 0 ||
           msgpack_pack_map(pk, 2) != 0 ||
           pack_kv_str(pk, "element_type", o->element_type) ||
           pack_kv_u64(pk, "element_count", o->count);
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
cmd_readback_check(struct opts *o)
{
    struct net_conn c;
    struct net_reply rep;
    const msgpack_object *req;
    msgpack_sbuffer sb;
    msgpack_unpacked up;
    int rc;

    if (o->nargs > 0) {
        usage_err(o->prog, "unexpected argument \"%s\"", o->args[0]);
        return EXIT_USAGE;
    }
    if (o->plan == NULL || o->value == NULL || o->element_type == NULL ||
        !o->has_count) {
        usage_err(o->prog, "--plan, --value, --element-type and --count are "
                           "required");
        return EXIT_USAGE;
    }
    if ((rc = open_conn(o, &c, NULL, 0)) != 0)
        return rc;
    rc = request(&c, PROTO_OP_READBACK, "readback", pack_readback_cb, o, &rep);
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
            rc = EXIT_CONNECT;
        } else {
            rc = print_result(o, "readback", &up.data);
        }
        msgpack_unpacked_destroy(&up);
        msgpack_sbuffer_destroy(&sb);
    }
    net_reply_free(&rep);
    net_close(&c);
    return rc;
}

/* ---- import ---- */

struct item {
    size_t file;
    size_t index;
    char *data; /* owned msgpack bytes of one receipt */
    size_t len;
};

struct reject {
    size_t file;
    size_t index;
    char code[32];
    char path[PROTO_ERR_PATH_MAX];
    char message[PROTO_ERR_MSG_MAX];
};

struct import {
    char **files; /* borrowed from argv */
    size_t nfiles;
    struct item *items;
    size_t nitems, icap;
    struct reject *rej;
    size_t nrej, rcap;
    uint64_t accepted;
    size_t acked; /* items whose batch got a reply */
};

static void
oom_exit(void)
{
    fputs("receiptctl: out of memory\n", stderr);
    exit(EXIT_DAEMON);
}

static void
add_reject(struct import *im, size_t file, size_t index, const char *code,
           const char *path, const char *message)
{
    struct reject *r;

    if (im->nrej == im->rcap) {
        size_t cap = im->rcap ? im->rcap * 2 : 16;

        r = realloc(im->rej, cap * sizeof(*r));
        if (r == NULL)
            oom_exit();
        im->rej = r;
        im->rcap = cap;
    }
    r = &im->rej[im->nrej++];
    r->file = file;
    r->index = index;
    snprintf(r->code, sizeof(r->code), "%s", code);
    snprintf(r->path, sizeof(r->path), "%s", path ? path : "");
    snprintf(r->message, sizeof(r->message), "%s", message);
}

/* Copies sb's bytes as the next item. */
static void
add_item(struct import *im, size_t file, size_t index, msgpack_sbuffer *sb)
{
    struct item *it;

    if (im->nitems == im->icap) {
        size_t cap = im->icap ? im->icap * 2 : 256;

        it = realloc(im->items, cap * sizeof(*it));
        if (it == NULL)
            oom_exit();
        im->items = it;
        im->icap = cap;
    }
    it = &im->items[im->nitems++];
    it->file = file;
    it->index = index;
    it->len = sb->size;
    /* An sbuffer starts at 8 KiB; a receipt is a few hundred bytes, and an
     * import holds a whole file's worth of them. */
    it->data = malloc(sb->size ? sb->size : 1);
    if (it->data == NULL)
        oom_exit();
    memcpy(it->data, sb->data, sb->size);
}

/* Decodes one receipt from the JSON text buf[0..len) (strictly: integers
 * past 2^64-1 and repeated keys are errors, not silently changed). */
static void
json_item(struct import *im, size_t file, size_t index, const char *buf,
          size_t len)
{
    struct json_object *obj = NULL;
    struct receipt r;
    struct proto_err err;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    proto_err_clear(&err);
    rc = receipt_json_parse(buf, len, &obj, &err);
    if (rc == 0)
        rc = receipt_decode_json(obj, &r, &err);
    if (rc != 0) {
        add_reject(im, file, index, proto_code_name(rc), err.path, err.message);
        json_object_put(obj);
        return;
    }
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (receipt_encode(&r, &pk) != 0)
        oom_exit();
    receipt_clear(&r);
    json_object_put(obj);
    add_item(im, file, index, &sb);
    msgpack_sbuffer_destroy(&sb);
}

static int
is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

/*
 * The length of the JSON value at p[0..len) (p[0] not a space), or 0 when
 * it does not end there. Only strings and bracket depth are followed: this
 * finds where each receipt's text ends, so that each is parsed (strictly)
 * on its own and one bad item does not hide the others; the parser checks
 * everything else.
 */
static size_t
value_len(const char *p, size_t len)
{
    size_t i;
    int depth = 0, in_str = 0;

    if (p[0] != '{' && p[0] != '[' && p[0] != '"') {
        for (i = 0; i < len && !is_space(p[i]) && p[i] != ',' && p[i] != ']' &&
                    p[i] != '}';
             i++)
            ;
        return i;
    }
    for (i = 0; i < len; i++) {
        char ch = p[i];

        if (in_str) {
            if (ch == '\\') {
                i++;
            } else if (ch == '"') {
                in_str = 0;
                if (depth == 0)
                    return i + 1;
            }
            continue;
        }
        if (ch == '"')
            in_str = 1;
        else if (ch == '{' || ch == '[')
            depth++;
        else if ((ch == '}' || ch == ']') && --depth <= 0)
            return i + 1;
    }
    return 0;
}

static size_t
skip_space(const char *buf, size_t len, size_t off)
{
    while (off < len && is_space(buf[off]))
        off++;
    return off;
}

/*
 * Splits the array at buf[0..len) (buf[0] == '[') into its elements.
 * Returns 0, or -1 after rejecting the item where the text broke.
 */
static int
json_array(struct import *im, size_t file, size_t *index, const char *buf,
           size_t len)
{
    size_t off = skip_space(buf, len, 1), n;

    if (off < len && buf[off] == ']')
        return 0;
    while (off < len) {
        n = value_len(buf + off, len - off);
        if (n == 0)
            break;
        json_item(im, file, (*index)++, buf + off, n);
        off = skip_space(buf, len, off + n);
        if (off < len && buf[off] == ']')
            return 0;
        if (off >= len || buf[off] != ',')
            break;
        off = skip_space(buf, len, off + 1);
    }
    add_reject(im, file, *index, "malformed", "",
               "the JSON array is not well formed here; the rest of the "
               "file was not read");
    return -1;
}

/* A JSON array of receipts, one receipt, or JSON lines (several values one
 * after another); an array inside JSON lines is a batch of receipts too. */
static void
load_json(struct import *im, size_t file, const char *buf, size_t len)
{
    size_t off = skip_space(buf, len, 0), index = 0, n;

    while (off < len) {
        n = value_len(buf + off, len - off);
        if (n == 0 && buf[off] == '[') {
            /* An array cut short: import its complete items, then report
             * where it broke. */
            json_array(im, file, &index, buf + off, len - off);
            return;
        }
        if (n == 0) {
            add_reject(im, file, index, "malformed", "",
                       "the file ends inside a JSON value");
            return;
        }
        if (buf[off] == '[') {
            if (json_array(im, file, &index, buf + off, n) != 0)
                return;
        } else {
            json_item(im, file, index++, buf + off, n);
        }
        off = skip_space(buf, len, off + n);
    }
}

static void
msgpack_item(struct import *im, size_t file, size_t index,
             const msgpack_object *o)
{
    struct receipt r;
    struct proto_err err;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    proto_err_clear(&err);
    rc = receipt_decode(o, &r, &err);
    if (rc != 0) {
        add_reject(im, file, index, proto_code_name(rc), err.path, err.message);
        return;
    }
    receipt_clear(&r);
    /* The object goes out as the producer wrote it (map or array form,
     * unknown keys included); only integer widths may be normalised. */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (msgpack_pack_object(&pk, *o) != 0)
        oom_exit();
    add_item(im, file, index, &sb);
    msgpack_sbuffer_destroy(&sb);
}

/* One receipt (map, or array form starting with schema_version) or an
 * array of receipts (an array whose elements are maps or arrays). */
static void
load_msgpack(struct import *im, size_t file, const char *buf, size_t len)
{
    struct proto_err err;
    msgpack_unpacked up;
    const msgpack_object *o;
    size_t off = 0;
    uint32_t i;

    if (mpcheck(buf, len, &err) != 0) {
        add_reject(im, file, 0, "malformed", "", err.message);
        return;
    }
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, buf, len, &off) != MSGPACK_UNPACK_SUCCESS) {
        add_reject(im, file, 0, "malformed", "",
                   "the file is not one msgpack object");
        msgpack_unpacked_destroy(&up);
        return;
    }
    o = &up.data;
    if (o->type == MSGPACK_OBJECT_ARRAY &&
        (o->via.array.size == 0 ||
         o->via.array.ptr[0].type == MSGPACK_OBJECT_MAP ||
         o->via.array.ptr[0].type == MSGPACK_OBJECT_ARRAY)) {
        for (i = 0; i < o->via.array.size; i++)
            msgpack_item(im, file, i, &o->via.array.ptr[i]);
    } else {
        msgpack_item(im, file, 0, o);
    }
    msgpack_unpacked_destroy(&up);
}

/* Reads a whole file ("-" is stdin). Returns 0 or -1 with errno. */
static int
read_file(const char *path, char **out, size_t *out_len)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    char *buf = NULL, *nb;
    size_t len = 0, cap = 0, n;
    int e;

    if (f == NULL)
        return -1;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 65536;
            if ((nb = realloc(buf, cap)) == NULL) {
                errno = ENOMEM;
                goto fail;
            }
            buf = nb;
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) {
            if (ferror(f)) {
                errno = EIO;
                goto fail;
            }
            break;
        }
    }
    if (f != stdin)
        fclose(f);
    *out = buf;
    *out_len = len;
    return 0;
fail:
    e = errno;
    if (f != stdin)
        fclose(f);
    free(buf);
    errno = e;
    return -1;
}

static int
load_file(struct import *im, size_t file)
{
    char *buf;
    size_t len, off = 0;

    if (read_file(im->files[file], &buf, &len) != 0) {
        fprintf(stderr, "receiptctl: import: %s: %s\n", im->files[file],
                strerror(errno));
        return -1;
    }
    /* json_tokener takes an int length. */
    if (len > (size_t)INT32_MAX) {
        fprintf(stderr, "receiptctl: import: %s: larger than 2 GiB; split it\n",
                im->files[file]);
        free(buf);
        return -1;
    }
    if (len >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0)
        off = 3;
    while (off < len && is_space(buf[off]))
        off++;
    /* '{' and '[' are positive fixints in msgpack, never a receipt, so the
     * first byte tells the encodings apart. */
    if (off < len && (buf[off] == '{' || buf[off] == '['))
        load_json(im, file, buf + off, len - off);
    else if (len == 0)
        add_reject(im, file, 0, "malformed", "", "the file is empty");
    else
        load_msgpack(im, file, buf, len);
    free(buf);
    return 0;
}

struct pending {
    uint64_t id;
    size_t first;
    size_t n;
};

static void
reject_batch(struct import *im, const struct pending *p,
             const struct envelope_reply *r)
{
    char code[32];
    size_t i;

    if (r->code_name.len > 0)
        snprintf(code, sizeof(code), "%.*s", (int)r->code_name.len,
                 r->code_name.ptr);
    else
        snprintf(code, sizeof(code), "%s", proto_code_name(r->err.code));
    for (i = 0; i < p->n; i++)
        add_reject(im, im->items[p->first + i].file,
                   im->items[p->first + i].index, code, r->err.path,
                   r->err.message);
}

static void
copy_field(char *dst, size_t cap, const msgpack_object *m, const char *key)
{
    const msgpack_object *v = mpobj_map_get(m, key, NULL);

    if (v != NULL && v->type == MSGPACK_OBJECT_STR)
        snprintf(dst, cap, "%.*s", (int)v->via.str.size, v->via.str.ptr);
    else
        dst[0] = '\0';
}

/* Applies a `receipts` result to the batch it answers. */
static int
batch_result(struct import *im, const struct pending *p,
             const msgpack_object *res)
{
    const msgpack_object *acc, *rej, *e, *idx;
    char code[32], path[PROTO_ERR_PATH_MAX], msg[PROTO_ERR_MSG_MAX];
    uint64_t a = 0, k;
    uint32_t i;

    if (res == NULL || res->type != MSGPACK_OBJECT_MAP)
        return -1;
    acc = mpobj_map_get(res, "accepted", NULL);
    rej = mpobj_map_get(res, "rejected", NULL);
    if (acc == NULL || mpobj_uint(acc, p->n, &a, NULL) != 0)
        return -1;
    im->accepted += a;
    if (rej == NULL || rej->type != MSGPACK_OBJECT_ARRAY)
        return 0;
    for (i = 0; i < rej->via.array.size; i++) {
        e = &rej->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_MAP)
            return -1;
        idx = mpobj_map_get(e, "index", NULL);
        if (idx == NULL || mpobj_uint(idx, p->n - 1, &k, NULL) != 0)
            return -1;
        copy_field(code, sizeof(code), e, "code");
        copy_field(path, sizeof(path), e, "path");
        copy_field(msg, sizeof(msg), e, "message");
        add_reject(im, im->items[p->first + k].file,
                   im->items[p->first + k].index, code, path, msg);
    }
    return 0;
}

/*
 * The sending side of an import. Files are parsed one after another and
 * their items queued; full batches go out as soon as they exist, up to
 * IMPORT_WINDOW in flight, and an item's bytes are freed once its batch is
 * answered, so memory follows the largest file, not the whole import.
 */
struct sender {
    struct net_conn c;
    int state; /* 0 not connected yet, 1 connected, -1 failed */
    int rc;    /* the exit code of a failure */
    uint32_t batch;
    struct pending win[IMPORT_WINDOW];
    size_t head, inflight, next;
};

/* Envelope of a batch around its items: map header, "op": "receipts",
 * "id": u64, "body", array32 header. */
#define BATCH_OVERHEAD 64

static int
sender_recv(struct import *im, struct sender *s, char *err, size_t err_len)
{
    struct pending *p = &s->win[s->head];
    struct net_reply rep;
    size_t i;
    int rc;

    rc = net_recv(&s->c, &rep, err, err_len);
    if (rc == 0 && (!rep.r.has_id || rep.r.id != p->id)) {
        snprintf(err, err_len, "a reply came out of order");
        rc = NET_EPROTO;
    }
    if (rc == 0 && !rep.r.ok)
        reject_batch(im, p, &rep.r);
    else if (rc == 0 && batch_result(im, p, rep.r.result) != 0) {
        snprintf(err, err_len,
                 "the daemon's receipts result is not "
                 "{\"accepted\", \"rejected\"}");
        rc = NET_EPROTO;
    }
    net_reply_free(&rep);
    if (rc != 0)
        return rc;
    im->acked += p->n;
    for (i = p->first; i < p->first + p->n; i++) {
        free(im->items[i].data);
        im->items[i].data = NULL;
    }
    s->head = (s->head + 1) % IMPORT_WINDOW;
    s->inflight--;
    return 0;
}

/* Packs and sends the next batch of at most s->batch items. */
static int
sender_send(struct import *im, struct sender *s, char *err, size_t err_len)
{
    struct pending *p = &s->win[(s->head + s->inflight) % IMPORT_WINDOW];
    size_t n, size = BATCH_OVERHEAD, i, start;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    for (n = 0; n < s->batch && s->next + n < im->nitems &&
                size + im->items[s->next + n].len <= s->c.max_frame;
         n++)
        size += im->items[s->next + n].len;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    start = net_frame_begin(&s->c, &sb, &pk, PROTO_OP_RECEIPTS, 1, &p->id);
    if (start == (size_t)-1 || msgpack_pack_array(&pk, n) != 0)
        oom_exit();
    for (i = 0; i < n; i++)
        if (msgpack_sbuffer_write(&sb, im->items[s->next + i].data,
                                  im->items[s->next + i].len) != 0)
            oom_exit();
    if (net_frame_finish(&s->c, &sb, start) != 0)
        oom_exit(); /* cannot happen: sizes were checked above */
    p->first = s->next;
    p->n = n;
    rc = net_send(&s->c, sb.data, sb.size, err, err_len);
    msgpack_sbuffer_destroy(&sb);
    if (rc != 0)
        return rc;
    s->next += n;
    s->inflight++;
    return 0;
}

/*
 * Sends the queued items that make full batches (all of them when final),
 * reading replies whenever the window is full; when final, waits for every
 * reply. After a failure it only records it: the remaining files are still
 * checked locally.
 */
static void
sender_pump(struct import *im, struct sender *s, struct opts *o,
            const char *source, int final)
{
    char err[NET_ERR_MAX];
    int rc = 0;

    if (s->state < 0)
        return;
    while (rc == 0) {
        size_t queued = im->nitems - s->next;

        if (queued > 0 && s->state == 0) {
            if ((s->rc = open_conn(o, &s->c, source, 1)) != 0) {
                s->state = -1;
                return;
            }
            s->state = 1;
            if (s->c.max_batch < s->batch)
                s->batch = s->c.max_batch;
        }
        if (queued > 0 &&
            im->items[s->next].len + BATCH_OVERHEAD > s->c.max_frame) {
            char msg[PROTO_ERR_MSG_MAX];

            snprintf(msg, sizeof(msg),
                     "the receipt is %zu bytes; the daemon's max_frame is "
                     "%" PRIu32,
                     im->items[s->next].len, s->c.max_frame);
            add_reject(im, im->items[s->next].file, im->items[s->next].index,
                       "too_large", "", msg);
            /* Counted as answered: the daemon will never see it. */
            free(im->items[s->next].data);
            im->items[s->next].data = NULL;
            im->acked++;
            s->next++;
            continue;
        }
        if (queued > 0 && (final || queued >= s->batch) &&
            s->inflight < IMPORT_WINDOW)
            rc = sender_send(im, s, err, sizeof(err));
        else if (s->inflight > 0 && (final || s->inflight == IMPORT_WINDOW))
            rc = sender_recv(im, s, err, sizeof(err));
        else
            break;
    }
    if (rc != 0) {
        fprintf(stderr, "receiptctl: import: %s\n", err);
        s->state = -1;
        s->rc = EXIT_CONNECT;
    }
}

static int
reject_cmp(const void *a, const void *b)
{
    const struct reject *x = a, *y = b;

    if (x->file != y->file)
        return x->file < y->file ? -1 : 1;
    if (x->index != y->index)
        return x->index < y->index ? -1 : 1;
    return 0;
}

static void
print_import(const struct opts *o, struct import *im)
{
    size_t i;

    if (im->nrej > 0)
        qsort(im->rej, im->nrej, sizeof(*im->rej), reject_cmp);
    if (o->format == OUTPUT_JSON) {
        struct json_object *j = json_object_new_object(), *a, *e;

        json_object_object_add(j, "accepted",
                               json_object_new_uint64(im->accepted));
        a = json_object_new_array();
        for (i = 0; i < im->nrej; i++) {
            const struct reject *r = &im->rej[i];

            e = json_object_new_object();
            json_object_object_add(e, "file",
                                   json_object_new_string(im->files[r->file]));
            json_object_object_add(e, "index",
                                   json_object_new_uint64(r->index));
            json_object_object_add(e, "code", json_object_new_string(r->code));
            json_object_object_add(e, "path", json_object_new_string(r->path));
            json_object_object_add(e, "message",
                                   json_object_new_string(r->message));
            json_object_array_add(a, e);
        }
        json_object_object_add(j, "rejected", a);
        json_object_object_add(j, "unacknowledged",
                               json_object_new_uint64(im->nitems - im->acked));
        puts(json_object_to_json_string_ext(
            j, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                   JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(j);
        return;
    }
    if (o->format == OUTPUT_CSV) {
        puts("file,index,code,path,message");
        for (i = 0; i < im->nrej; i++) {
            const struct reject *r = &im->rej[i];

            output_csv_field(stdout, im->files[r->file],
                             strlen(im->files[r->file]));
            printf(",%zu,", r->index);
            output_csv_field(stdout, r->code, strlen(r->code));
            putchar(',');
            output_csv_field(stdout, r->path, strlen(r->path));
            putchar(',');
            output_csv_field(stdout, r->message, strlen(r->message));
            putchar('\n');
        }
        return;
    }
    for (i = 0; i < im->nrej; i++) {
        const struct reject *r = &im->rej[i];

        printf("%s:%zu: %s: %s%s%s\n", im->files[r->file], r->index, r->code,
               r->path, r->path[0] ? ": " : "", r->message);
    }
    printf("accepted %" PRIu64 ", rejected %zu", im->accepted, im->nrej);
    /* Items sent without a reply may or may not be stored: say so rather
     * than count them either way. */
    if (im->acked < im->nitems)
        printf(", not acknowledged %zu", im->nitems - im->acked);
    putchar('\n');
}

/* Fails (printed) when path is not a readable file, before anything is
 * sent, so a typo in a file name does not leave half an import behind. */
static int
check_readable(const char *path)
{
    struct stat st;
    int fd;

    if (strcmp(path, "-") == 0)
        return 0;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
        fprintf(stderr, "receiptctl: import: %s: %s\n", path,
                fd < 0 ? strerror(errno) : strerror(EISDIR));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

static int
cmd_import(struct opts *o)
{
    struct import im;
    struct sender snd;
    char host[200], source[256];
    size_t i;
    int rc = 0;

    if (o->nargs == 0) {
        usage_err(o->prog, "no files to import");
        return EXIT_USAGE;
    }
    for (i = 0; i < (size_t)o->nargs; i++)
        if (check_readable(o->args[i]) != 0)
            return EXIT_USAGE;
    memset(&im, 0, sizeof(im));
    memset(&snd, 0, sizeof(snd));
    im.files = o->args;
    im.nfiles = (size_t)o->nargs;
    snd.batch = o->batch;
    if (o->source == NULL) {
        if (gethostname(host, sizeof(host)) != 0)
            snprintf(host, sizeof(host), "localhost");
        host[sizeof(host) - 1] = '\0';
        snprintf(source, sizeof(source), "receiptctl/%s", host);
    } else {
        snprintf(source, sizeof(source), "%s", o->source);
    }
    /* A file that became unreadable since the check stops the import;
     * what was sent before is reported as usual. The local verdicts are
     * printed even when the daemon cannot be reached. */
    for (i = 0; i < im.nfiles && rc == 0; i++) {
        if (load_file(&im, i) != 0)
            rc = EXIT_USAGE;
        sender_pump(&im, &snd, o, source, i + 1 == im.nfiles || rc != 0);
    }
    if (snd.state == 1)
        net_close(&snd.c);
    print_import(o, &im);
    fflush(stdout);
    if (rc == 0)
        rc = snd.rc;
    if (rc == 0 && im.nrej > 0)
        rc = EXIT_DAEMON;
    for (i = 0; i < im.nitems; i++)
        free(im.items[i].data);
    free(im.items);
    free(im.rej);
    return rc;
}

/* ---- quarantine and replay ---- */

struct replay_query {
    uint64_t id;
};

static int
pack_replay_query_cb(msgpack_packer *pk, const void *arg)
{
    const struct replay_query *q = arg;

    return msgpack_pack_map(pk, 3) != 0 ||
           pack_kv_str(pk, "kind", "quarantine") ||
           pack_kv_u64(pk, "id", q->id) || envelope_pack_cstr(pk, "raw") ||
           msgpack_pack_true(pk) != 0;
}

struct raw_body {
    const char *ptr;
    size_t len;
};

static int
pack_raw_cb(msgpack_packer *pk, const void *arg)
{
    const struct raw_body *b = arg;

    /* The payload is one checked msgpack object; it is the body as is. */
    return msgpack_sbuffer_write(pk->data, b->ptr, b->len);
}

/* The op to replay a payload with: plans and retentions keep their op; a
 * receipt payload is a `receipt`, an array of them a `receipts` batch. */
static int
replay_op(const char *op, const msgpack_object *body)
{
    int k = envelope_op_from_name(op, strlen(op));

    if (k == PROTO_OP_PLAN || k == PROTO_OP_RETENTION || k == PROTO_OP_READBACK)
        return k;
    if (body->type == MSGPACK_OBJECT_ARRAY &&
        (body->via.array.size == 0 ||
         body->via.array.ptr[0].type == MSGPACK_OBJECT_MAP ||
         body->via.array.ptr[0].type == MSGPACK_OBJECT_ARRAY))
        return PROTO_OP_RECEIPTS;
    return PROTO_OP_RECEIPT;
}

static void
print_replayed(uint64_t qid, int op, const msgpack_object *res)
{
    const msgpack_object *v;
    uint64_t u;

    printf("quarantine %" PRIu64 ": replayed as %s", qid, envelope_op_name(op));
    if (res != NULL && res->type == MSGPACK_OBJECT_MAP) {
        v = mpobj_map_get(res, "receipt_id", NULL);
        if (v != NULL && mpobj_uint(v, UINT64_MAX, &u, NULL) == 0)
            printf(", receipt %" PRIu64, u);
        v = mpobj_map_get(res, "fallback", NULL);
        if (v != NULL && v->type == MSGPACK_OBJECT_STR)
            printf(" (%.*s)", (int)v->via.str.size, v->via.str.ptr);
        v = mpobj_map_get(res, "accepted", NULL);
        if (v != NULL && mpobj_uint(v, UINT64_MAX, &u, NULL) == 0)
            printf(", accepted %" PRIu64, u);
        v = mpobj_map_get(res, "rejected", NULL);
        if (v != NULL && v->type == MSGPACK_OBJECT_ARRAY)
            printf(", rejected %" PRIu32, v->via.array.size);
    }
    putchar('\n');
}

static int
replay_one(struct opts *o, struct net_conn *qc, uint64_t qid)
{
    struct replay_query q = { qid };
    struct net_reply rep, rep2;
    const msgpack_object *rows, *row, *raw;
    char what[64], op[32], source[PROTO_ERR_MSG_MAX];
    struct proto_err perr;
    struct raw_body body;
    msgpack_unpacked up;
    struct net_conn c;
    size_t off = 0;
    int rc, k;

    snprintf(what, sizeof(what), "quarantine %" PRIu64, qid);
    rc = request(qc, PROTO_OP_QUERY, what, pack_replay_query_cb, &q, &rep);
    if (rc != 0)
        goto out;
    rows = rep.r.result && rep.r.result->type == MSGPACK_OBJECT_MAP
               ? mpobj_map_get(rep.r.result, "rows", NULL)
               : NULL;
    if (rows == NULL || rows->type != MSGPACK_OBJECT_ARRAY ||
        rows->via.array.size == 0 ||
        rows->via.array.ptr[0].type != MSGPACK_OBJECT_MAP) {
        fprintf(stderr, "receiptctl: %s: no such quarantined payload\n", what);
        rc = EXIT_DAEMON;
        goto out;
    }
    row = &rows->via.array.ptr[0];
    raw = mpobj_map_get(row, "raw", NULL);
    if (raw == NULL ||
        (raw->type != MSGPACK_OBJECT_BIN && raw->type != MSGPACK_OBJECT_STR)) {
        fprintf(stderr, "receiptctl: %s: the daemon sent no \"raw\" bytes\n",
                what);
        rc = EXIT_DAEMON;
        goto out;
    }
    body.ptr = raw->via.bin.ptr;
    body.len = raw->via.bin.size;
    copy_field(op, sizeof(op), row, "op");
    copy_field(source, sizeof(source), row, "source");
    /* A payload that was quarantined as malformed is not one msgpack
     * object; sending it inside an envelope would corrupt the frame. */
    if (body.len == 0 || mpcheck(body.ptr, body.len, &perr) != 0) {
        fprintf(stderr,
                "receiptctl: %s: cannot be replayed: the payload is "
                "not one msgpack object\n",
                what);
        rc = EXIT_DAEMON;
        goto out;
    }
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, body.ptr, body.len, &off) !=
        MSGPACK_UNPACK_SUCCESS) {
        msgpack_unpacked_destroy(&up);
        fprintf(stderr, "receiptctl: %s: cannot unpack the payload\n", what);
        rc = EXIT_DAEMON;
        goto out;
    }
    k = replay_op(op, &up.data);
    msgpack_unpacked_destroy(&up);
    /* The replay speaks as the payload's original source, so queries by
     * source still find it; a fresh connection says that hello. */
    rc = open_conn(o, &c, source[0] ? source : NULL, 0);
    if (rc != 0)
        goto out;
    rc = request(&c, k, what, pack_raw_cb, &body, &rep2);
    if (rc == 0)
        print_replayed(qid, k, rep2.r.result);
    net_reply_free(&rep2);
    net_close(&c);
out:
    net_reply_free(&rep);
    return rc;
}

static int
cmd_quarantine(struct opts *o)
{
    struct net_conn c;
    uint64_t *ids;
    int i, rc, worst = 0;

    if (o->nargs == 0)
        return run_query(o, "quarantine");
    if (strcmp(o->args[0], "replay") != 0) {
        usage_err(o->prog,
                  "unexpected argument \"%s\"; did you mean "
                  "'quarantine replay ID...'?",
                  o->args[0]);
        return EXIT_USAGE;
    }
    if (o->nargs < 2) {
        usage_err(o->prog, "replay needs at least one quarantine id");
        return EXIT_USAGE;
    }
    ids = calloc((size_t)o->nargs, sizeof(*ids));
    if (ids == NULL)
        oom_exit();
    for (i = 1; i < o->nargs; i++)
        if (parse_u64(o->args[i], 0, UINT64_MAX, &ids[i]) != 0) {
            usage_err(o->prog, "replay: \"%s\" is not a quarantine id",
                      o->args[i]);
            free(ids);
            return EXIT_USAGE;
        }
    if ((rc = open_conn(o, &c, NULL, 0)) != 0) {
        free(ids);
        return rc;
    }
    for (i = 1; i < o->nargs; i++) {
        rc = replay_one(o, &c, ids[i]);
        /* Keep going after a rejected payload; stop when the daemon is
         * gone. */
        if (rc == EXIT_CONNECT) {
            worst = rc;
            break;
        }
        if (rc > worst)
            worst = rc;
    }
    net_close(&c);
    free(ids);
    return worst;
}

/* ---- help ---- */

static int cmd_help(struct opts *o);

static const struct cmd cmds[] = {
    { "ping", cmd_ping, G_CONN | G_FORMAT, "", "check that the daemon answers",
      "Says hello and pings the daemon; prints its version, limits and the\n"
      "round-trip time." },
    { "stats", cmd_stats, G_CONN | G_FORMAT, "", "the daemon's own counters",
      "Shows the daemon's counters: uptime, connections, frames, accepted,\n"
      "rejected, duplicates, quarantined, commit latency, store size.\n"
      "--format prometheus prints them in the Prometheus text format for\n"
      "node_exporter's textfile collector, e.g. from cron:\n"
      "  receiptctl stats --format prometheus > receiptd.prom.tmp &&\n"
      "    mv receiptd.prom.tmp "
      "/var/lib/prometheus/node-exporter/receiptd.prom" },
    { "receipts", cmd_receipts,
      G_CONN | G_FORMAT | G_FILTER | G_BEFORE | G_STATUS, "",
      "stored receipts, newest first",
      "Lists stored receipts, newest first. Page backwards with --before-id\n"
      "set to the smallest receipt_id of the previous page. Tables show the\n"
      "identifying columns; --format json or csv carries every field." },
    { "fallbacks", cmd_fallbacks, G_CONN | G_FORMAT | G_FILTER | G_GROUP, "",
      "fallback counts and rates per group",
      "Counts receipts per group (--group-by plan, graph, model, backends or\n"
      "source; default plan) as fallback, unproven and clean, with the\n"
      "fallback rate. --group-by none lists the fallback receipts\n"
      "themselves, newest first." },
    { "coverage", cmd_coverage, G_CONN | G_FORMAT | G_FILTER | G_GROUP, "",
      "counter coverage and sum/min/max/mean",
      "Per counter (and per group with --group-by): receipts, measured,\n"
      "unknown, coverage, and sum, min, max and mean over measured receipts\n"
      "only; an unknown counter is never counted as zero." },
    { "gaps", cmd_gaps, G_CONN | G_FORMAT | G_FILTER, "",
      "missing seq ranges per source",
      "Per source: first and last seq, receipts received, and the missing\n"
      "seq ranges in between (receipts lost before they reached the\n"
      "daemon)." },
    { "quarantine", cmd_quarantine, G_CONN | G_FORMAT | G_FILTER,
      "[replay ID...]", "rejected payloads; replay them",
      "Lists quarantined payloads (rejected writes kept with their bytes).\n"
      "'quarantine replay ID...' fetches each payload's raw bytes and\n"
      "submits it again, as its original source, e.g. after an upgrade\n"
      "that accepts it; a payload rejected again stays quarantined." },
    { "plans", cmd_plans, G_CONN | G_FORMAT | G_FILTER, "", "registered plans",
      "Lists registered plans with their node, value and retained counts." },
    { "retained", cmd_retained, G_CONN | G_FORMAT | G_PLAN, "",
      "retained values of one plan",
      "Lists the retained completion values of the plan given by --plan\n"
      "(and --graph)." },
    { "readback-check", cmd_readback_check, G_CONN | G_FORMAT | G_READBACK, "",
      "check a completion readback",
      "Asks the daemon to check a completion readback against a retained\n"
      "value (op readback; nothing is stored) and prints the resolved\n"
      "readback request. Needs --plan, --value, --element-type, --count." },
    { "import", cmd_import, G_CONN | G_FORMAT | G_IMPORT, "FILE...",
      "send receipts from files",
      "Reads receipts from files (\"-\" is stdin): msgpack (one receipt or an\n"
      "array of receipts) or serde_json (one object, an array, or JSON\n"
      "lines). Each is checked locally first, then sent in 'receipts'\n"
      "batches (--batch, default 1000), pipelined. Prints each rejected\n"
      "item as FILE:INDEX: code: path: message, then the counts. Exits 1\n"
      "when any item was rejected." },
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
          "an error, 2 usage, 3 cannot connect.\n",
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
    size_t i;
    char left[64];

    fprintf(out, "usage: receiptctl %s%s%s%s\n\n%s\n", c->name,
            c->groups ? " [OPTIONS]" : "", c->args[0] ? " " : "", c->args,
            c->help);
    if (c->groups == 0)
        return;
    fputs("\noptions:\n", out);
    for (i = 0; i < sizeof(optdescs) / sizeof(optdescs[0]); i++) {
        const struct optdesc *d = &optdescs[i];
        const char *help = d->help;

        if ((d->groups & c->groups) == 0)
            continue;
        if (d->id == O_FORMAT && strcmp(c->name, "stats") == 0)
            help = "output: table (default), json, csv or prometheus";
        snprintf(left, sizeof(left), "--%s %s", d->name, d->arg);
        fprintf(out, "  %-24s ", left);
        wrap(out, help, 27, 79);
    }
    fprintf(out, "  %-24s %s\n", "--help", "this help");
}

static int
cmd_help(struct opts *o)
{
    const struct cmd *c;

    if (o->nargs == 0) {
        print_usage(stdout);
        return 0;
    }
    if ((c = find_cmd(o->args[0])) == NULL) {
        usage_err(NULL, "unknown command \"%s\"", o->args[0]);
        return EXIT_USAGE;
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

static int
backend_ok(const char *prog, const char *flag, const char *v)
{
    if (receipt_backend_from_name(v, strlen(v)) >= 0)
        return 0;
    usage_err(prog,
              "--%s: unknown backend \"%s\" (expected cpu, wgpu-dx12, "
              "wgpu-vulkan, wgpu-metal, cuda, metal or unknown)",
              flag, v);
    return -1;
}

/*
 * Applies one option's argument. Returns 0 or EXIT_USAGE (printed).
 */
static int
apply_opt(struct opts *o, const struct cmd *c, int id, const char *arg,
          uint64_t now)
{
    char err[TIMESPEC_ERR_MAX];
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
    case O_TIMEOUT:
        if (parse_u64(arg, 0, 86400, &v) != 0) {
            usage_err(prog,
                      "--timeout: expected seconds from 0 to 86400, "
                      "got \"%s\"",
                      arg);
            return EXIT_USAGE;
        }
        o->timeout_ms = (int)(v * 1000);
        break;
    case O_FORMAT:
        o->format = output_format_from_name(arg);
        if (o->format < 0 || (o->format == OUTPUT_PROMETHEUS &&
                              (c == NULL || strcmp(c->name, "stats") != 0))) {
            usage_err(prog,
                      "--format: unknown format \"%s\" (expected "
                      "table, json or csv%s)",
                      arg,
                      c && strcmp(c->name, "stats") == 0 ? " or prometheus"
                                                         : "");
            return EXIT_USAGE;
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
    case O_REQUESTED:
        if (backend_ok(prog, "requested", arg) != 0)
            return EXIT_USAGE;
        o->requested = arg;
        break;
    case O_EXECUTED:
        if (backend_ok(prog, "executed", arg) != 0)
            return EXIT_USAGE;
        o->executed = arg;
        break;
    case O_SINCE:
    case O_UNTIL:
        if (timespec_parse(arg, now, &v, err, sizeof(err)) != 0) {
            usage_err(prog, "--%s: %s", id == O_SINCE ? "since" : "until", err);
            return EXIT_USAGE;
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
        if (parse_u64(arg, 1, QUERY_LIMIT_MAX, &o->limit) != 0) {
            usage_err(prog,
                      "--limit: expected an integer from 1 to %d, got "
                      "\"%s\"",
                      QUERY_LIMIT_MAX, arg);
            return EXIT_USAGE;
        }
        o->has_limit = 1;
        break;
    case O_BEFORE_ID:
        if (parse_u64(arg, 0, UINT64_MAX, &o->before_id) != 0) {
            usage_err(prog, "--before-id: expected a receipt id, got \"%s\"",
                      arg);
            return EXIT_USAGE;
        }
        o->has_before = 1;
        break;
    case O_STATUS:
        if (check_choice(prog, "status", arg, statuses) != 0)
            return EXIT_USAGE;
        o->status = arg;
        break;
    case O_GROUP_BY:
        if (check_choice(prog, "group-by", arg, group_plain) != 0)
            return EXIT_USAGE;
        o->group_by = arg;
        break;
    case O_BATCH:
        if (parse_u64(arg, 1, 1000000, &v) != 0) {
            usage_err(prog,
                      "--batch: expected an integer from 1 to 1000000, "
                      "got \"%s\"",
                      arg);
            return EXIT_USAGE;
        }
        o->batch = (uint32_t)v;
        break;
    case O_VALUE:
        o->value = arg;
        break;
    case O_PARTICIPANT:
        if (parse_u64(arg, 0, UINT32_MAX, &o->participant) != 0) {
            usage_err(prog,
                      "--participant: expected an integer from 0 to "
                      "4294967295, got \"%s\"",
                      arg);
            return EXIT_USAGE;
        }
        break;
    case O_ELEMENT_TYPE:
        o->element_type = arg;
        break;
    case O_COUNT:
        if (parse_u64(arg, 1, UINT64_MAX, &o->count) != 0) {
            usage_err(prog,
                      "--count: expected a positive integer, got "
                      "\"%s\"",
                      arg);
            return EXIT_USAGE;
        }
        o->has_count = 1;
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
    struct opts o;
    const struct cmd *c = NULL;
    char **pos;
    int npos = 0, ch, help = 0, rc;
    uint64_t now = timespec_now_ms();

    memset(&o, 0, sizeof(o));
    o.timeout_ms = DEFAULT_TIMEOUT * 1000;
    o.format = OUTPUT_TABLE;
    o.batch = DEFAULT_BATCH;
    for (i = 0; i < sizeof(optdescs) / sizeof(optdescs[0]); i++) {
        longopts[i].name = optdescs[i].name;
        longopts[i].has_arg = required_argument;
        longopts[i].flag = NULL;
        longopts[i].val = optdescs[i].id;
    }
    longopts[i++] = (struct option){ "help", no_argument, NULL, O_HELP };
    longopts[i++] = (struct option){ "version", no_argument, NULL, O_VERSION };
    longopts[i] = (struct option){ NULL, 0, NULL, 0 };

    pos = calloc((size_t)argc + 1, sizeof(*pos));
    if (pos == NULL)
        oom_exit();
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
            usage_err(npos ? pos[0] : NULL, "%s needs a value",
                      argv[optind - 1]);
            free(pos);
            return EXIT_USAGE;
        case '?':
            if (optopt != 0)
                usage_err(npos ? pos[0] : NULL, "unknown option -%c", optopt);
            else
                usage_err(npos ? pos[0] : NULL, "unknown option %s",
                          argv[optind - 1]);
            free(pos);
            return EXIT_USAGE;
        default:
            if (nuses == MAX_OPT_USES) {
                usage_err(NULL, "too many options");
                free(pos);
                return EXIT_USAGE;
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
        return EXIT_USAGE;
    }
    c = find_cmd(pos[0]);
    if (c == NULL) {
        usage_err(NULL, "unknown command \"%s\"", pos[0]);
        free(pos);
        return EXIT_USAGE;
    }
    if (help) {
        print_help(stdout, c);
        free(pos);
        return 0;
    }
    o.prog = c->name;
    for (i = 0; i < nuses; i++) {
        const struct optdesc *d = find_optdesc(uses[i].id);

        if (d == NULL || (d->groups & c->groups) == 0) {
            usage_err(c->name, "--%s is not an option of %s", d ? d->name : "?",
                      c->name);
            free(pos);
            return EXIT_USAGE;
        }
        if ((rc = apply_opt(&o, c, uses[i].id, uses[i].arg, now)) != 0) {
            free(pos);
            return rc;
        }
    }
    if (o.tcp != NULL && o.socket != NULL) {
        usage_err(c->name, "--socket and --tcp exclude each other");
        free(pos);
        return EXIT_USAGE;
    }
    o.args = pos + 1;
    o.nargs = npos - 1;
    rc = c->fn(&o);
    free(pos);
    return rc;
}
