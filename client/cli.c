/*
 * cli.c: what receiptctl's subcommands share: one-line error messages, the
 * connection and its hello, request/reply round trips and printing a
 * result. Every failure is printed here, once, and turned into the exit
 * code the caller returns. Single-threaded.
 */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpobj.h"
#include "output.h"
#include "tls.h"

/* Prints "receiptctl: CMD: ..." and a pointer to the help. */
void
cli_usage_err(const char *prog, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "receiptctl: %s%s", prog ? prog : "", prog ? ": " : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see 'receiptctl help%s%s')\n", prog ? " " : "",
            prog ? prog : "");
}

void
cli_daemon_err(const char *what, const struct envelope_reply *r)
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

static const char *
socket_path(const struct cli_opts *o)
{
    const char *env;

    if (o->socket != NULL)
        return o->socket;
    env = getenv("RECEIPTD_SOCKET");
    if (env != NULL && env[0] != '\0')
        return env;
    return CLI_DEFAULT_SOCKET;
}

/*
 * Connects and, when a token or source must be presented, says hello.
 * Returns 0 or an exit code (the error already printed).
 */
/*
 * Reads the token of --token-file into buf (cap bytes): the file's bytes
 * up to one final newline, 1 to CLI_TOKEN_MAX of them, no NUL or newline
 * inside. Returns 0, or CLI_EXIT_USAGE with the reason printed.
 */
static int
read_token_file(const char *path, char *buf, size_t cap)
{
    char tmp[CLI_TOKEN_MAX + 3];
    size_t n;
    FILE *f;

    if ((f = fopen(path, "rb")) == NULL) {
        fprintf(stderr, "receiptctl: --token-file: %s: %s\n", path,
                strerror(errno));
        return CLI_EXIT_USAGE;
    }
    n = fread(tmp, 1, sizeof(tmp), f);
    if (ferror(f)) {
        fprintf(stderr, "receiptctl: --token-file: %s: %s\n", path,
                strerror(errno));
        fclose(f);
        explicit_bzero(tmp, sizeof(tmp));
        return CLI_EXIT_USAGE;
    }
    fclose(f);
    if (n > 0 && tmp[n - 1] == '\n')
        n--;
    if (n > 0 && tmp[n - 1] == '\r')
        n--;
    if (n == 0 || n > CLI_TOKEN_MAX || n >= cap ||
        memchr(tmp, '\0', n) != NULL || memchr(tmp, '\n', n) != NULL) {
        fprintf(stderr,
                "receiptctl: --token-file: %s: a token is one line of 1 to "
                "%d bytes\n",
                path, CLI_TOKEN_MAX);
        explicit_bzero(tmp, sizeof(tmp));
        return CLI_EXIT_USAGE;
    }
    memcpy(buf, tmp, n);
    buf[n] = '\0';
    explicit_bzero(tmp, sizeof(tmp));
    return 0;
}

/* TLS on the connection c just made to --tcp; closes c on failure. */
static int
start_tls(const struct cli_opts *o, struct net_conn *c, char *err,
          size_t err_len)
{
    struct net_tls t = { o->ca_file, o->cert, o->key };
    struct tls_ctx *ctx;
    int rc;

    if ((rc = net_tls_ctx(&t, &ctx, err, err_len)) == 0) {
        rc = net_start_tls(c, ctx, o->tcp, err, err_len);
        tls_ctx_free(ctx);
    }
    if (rc != 0)
        net_close(c);
    return rc;
}

int
cli_open_conn(struct cli_opts *o, struct net_conn *c, const char *source,
              int want_hello)
{
    char err[NET_ERR_MAX], filetok[CLI_TOKEN_MAX + 1];
    const char *token = o->token;
    struct net_reply rep;
    int rc;

    if (token == NULL && o->token_file != NULL) {
        if ((rc = read_token_file(o->token_file, filetok, sizeof(filetok))) !=
            0)
            return rc;
        token = filetok;
    }
    if (token == NULL) {
        token = getenv("RECEIPTD_TOKEN");
        if (token != NULL && token[0] == '\0')
            token = NULL;
    }
    if (net_connect(c, socket_path(o), o->tcp, o->timeout_ms, err,
                    sizeof(err)) != 0 ||
        (o->tls && start_tls(o, c, err, sizeof(err)) != 0)) {
        fprintf(stderr, "receiptctl: %s\n", err);
        if (token == filetok)
            explicit_bzero(filetok, sizeof(filetok));
        return CLI_EXIT_CONNECT;
    }
    if (!want_hello && token == NULL && source == NULL)
        return 0;
    rc = net_hello(c, source, token, &rep, err, sizeof(err));
    if (token == filetok)
        explicit_bzero(filetok, sizeof(filetok));
    if (rc == 1) {
        cli_daemon_err("hello", &rep.r);
        rc = CLI_EXIT_DAEMON;
    } else if (rc != 0) {
        fprintf(stderr, "receiptctl: %s\n", err);
        rc = CLI_EXIT_CONNECT;
    }
    net_reply_free(&rep);
    if (rc != 0)
        net_close(c);
    return rc;
}

int
cli_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
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

int
cli_pack_str(msgpack_packer *pk, const char *k, const char *v)
{
    return envelope_pack_cstr(pk, k) != 0 || envelope_pack_cstr(pk, v) != 0;
}

int
cli_pack_u64(msgpack_packer *pk, const char *k, uint64_t v)
{
    return envelope_pack_cstr(pk, k) != 0 || msgpack_pack_uint64(pk, v) != 0;
}

int
cli_request(struct net_conn *c, int op, const char *what,
            int (*pack_body)(msgpack_packer *, const void *), const void *arg,
            struct net_reply *rep)
{
    return cli_request_named(c, op, what, 0, pack_body, arg, rep);
}

/* The request of cli_request_named(); with replay_of (0: none) the
 * envelope names the quarantine row it replays. */
static int
request(struct net_conn *c, int op, uint64_t replay_of, const char *what,
        int name_errors, int (*pack_body)(msgpack_packer *, const void *),
        const void *arg, struct net_reply *rep)
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
    if (replay_of == 0) {
        start = net_frame_begin(c, &sb, &pk, op, pack_body != NULL, &id);
    } else {
        start = frame_sbuffer_begin(&sb);
        id = c->next_id++;
        if (start != (size_t)-1 &&
            envelope_request_replay(&pk, op, id, replay_of,
                                    pack_body != NULL) != 0)
            start = (size_t)-1;
    }
    if (start == (size_t)-1 || (pack_body && pack_body(&pk, arg) != 0) ||
        net_frame_finish(c, &sb, start) != 0) {
        msgpack_sbuffer_destroy(&sb);
        fprintf(stderr,
                "receiptctl: %s: the request does not fit in a "
                "frame\n",
                what);
        return CLI_EXIT_USAGE;
    }
    msgpack_unpacked_destroy(&rep->up);
    rc = net_call(c, &sb, id, rep, err, sizeof(err));
    msgpack_sbuffer_destroy(&sb);
    if (rc != 0) {
        fprintf(stderr, "receiptctl: %s\n", err);
        return CLI_EXIT_CONNECT;
    }
    if (!rep->r.ok) {
        cli_daemon_err(name_errors ? what : NULL, &rep->r);
        return CLI_EXIT_DAEMON;
    }
    return 0;
}

int
cli_request_named(struct net_conn *c, int op, const char *what, int name_errors,
                  int (*pack_body)(msgpack_packer *, const void *),
                  const void *arg, struct net_reply *rep)
{
    return request(c, op, 0, what, name_errors, pack_body, arg, rep);
}

int
cli_request_replay(struct net_conn *c, int op, uint64_t replay_of,
                   const char *what,
                   int (*pack_body)(msgpack_packer *, const void *),
                   const void *arg, struct net_reply *rep)
{
    return request(c, op, replay_of, what, 1, pack_body, arg, rep);
}

int
cli_print_result(const struct cli_opts *o, const char *kind,
                 const msgpack_object *result)
{
    struct output_spec spec = { kind, o->group_by, o->columns, 0,
                                o->has_after };
    char err[OUTPUT_ERR_MAX];
    int rc;

    if (o->format == OUTPUT_PROMETHEUS)
        rc = output_prometheus(stdout, result, err, sizeof(err));
    else
        rc = output_result(stdout, o->format, &spec, result, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "receiptctl: %s: %s\n", kind, err);
        return CLI_EXIT_CONNECT;
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "receiptctl: writing the output: %s\n",
                strerror(errno));
        return CLI_EXIT_DAEMON;
    }
    if (o->format != OUTPUT_PROMETHEUS &&
        output_truncation(stderr, &spec, result) && o->fail_on_truncate)
        return CLI_EXIT_TRUNCATED;
    return 0;
}

void
cli_oom(void)
{
    fputs("receiptctl: out of memory\n", stderr);
    exit(CLI_EXIT_DAEMON);
}

void
cli_copy_str(char *dst, size_t cap, const msgpack_object *m, const char *key)
{
    const msgpack_object *v = mpobj_map_get(m, key, NULL);

    if (v != NULL && v->type == MSGPACK_OBJECT_STR)
        snprintf(dst, cap, "%.*s", (int)v->via.str.size, v->via.str.ptr);
    else
        dst[0] = '\0';
}
