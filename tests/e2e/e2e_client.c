/*
 * e2e_client.c: the real receiptctl binary, run with fork/exec.
 *
 * Three layers: argument handling and connection failures (no daemon at
 * all); a fake daemon on a thread of this process that answers with canned
 * replies and records every request, to check what the client sends
 * (filters, hello, batching, replay) and how it reports daemon errors; and,
 * when the daemon is built (E2E_HAVE_DAEMON), the real receiptd on a
 * temporary socket and database: ping, stats in every format, imports of
 * the shared producer vectors in each encoding, and error exits.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>
#include <msgpack.h>

#include "e2e_util.h"
#include "envelope.h"
#include "frame.h"
#include "mpobj.h"
#include "output.h"
#include "receipt.h"

#define CTL     TEST_BINARY_DIR "/client/receiptctl"
#define VECTORS TEST_DATA_DIR "/vectors/"
#define IMPORTS TEST_DATA_DIR "/client/import/"

/* ---- temporary directories ---- */

static char tmpdir[256];

static void
rm_rf(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    char p[512];

    if (d == NULL) {
        unlink(path);
        return;
    }
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
        rm_rf(p);
    }
    closedir(d);
    rmdir(path);
}

/* Under the build tree, so a failed test (Check skips the teardown then)
 * leaves nothing in /tmp; under $TMPDIR when the build path is too long
 * for a Unix socket address (108 bytes) with a socket name appended. */
static void
setup_dir(void)
{
    const char *base = TEST_BINARY_DIR;

    if (strlen(base) > 60) {
        base = getenv("TMPDIR");
        if (base == NULL || base[0] == '\0')
            base = "/tmp";
    }
    snprintf(tmpdir, sizeof(tmpdir), "%s/receiptctl-e2e-XXXXXX", base);
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void
teardown_dir(void)
{
    rm_rf(tmpdir);
}

static char *
read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;

    if (f == NULL)
        return strdup("");
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

/* ---- running receiptctl ---- */

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

/*
 * Runs receiptctl with args (NULL-terminated, without argv[0]); socket,
 * when not NULL, goes into RECEIPTD_SOCKET, otherwise the variable is
 * removed.
 */
static void
run_ctl(struct run *r, const char *socket, const char *const *args)
{
    char outp[300], errp[300];
    const char *argv[64];
    pid_t pid;
    int st, i, fd;

    argv[0] = "receiptctl";
    for (i = 0; args[i] != NULL; i++)
        argv[i + 1] = args[i];
    argv[i + 1] = NULL;
    snprintf(outp, sizeof(outp), "%s/ctl.out", tmpdir);
    snprintf(errp, sizeof(errp), "%s/ctl.err", tmpdir);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        fd = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        fd = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 2);
        if (socket != NULL)
            setenv("RECEIPTD_SOCKET", socket, 1);
        else
            unsetenv("RECEIPTD_SOCKET");
        execv(CTL, (char *const *)argv);
        _exit(127);
    }
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r->out = read_all(outp);
    r->err = read_all(errp);
}

/* ---- usage errors: exit 2, one line on stderr ---- */

struct usage_case {
    const char *args[8];
    const char *want; /* a substring of the one stderr line */
};

static const struct usage_case usage_cases[] = {
    { { "frob", NULL }, "unknown command \"frob\"" },
    { { "fallbacks", "--bogus", NULL }, "unknown option --bogus" },
    { { "fallbacks", "--plan", NULL }, "--plan needs a value" },
    { { "fallbacks", "--limit", "0", NULL }, "--limit: expected an integer" },
    { { "fallbacks", "--limit", "10001", NULL },
      "--limit: expected an integer from 1 to 10000" },
    { { "fallbacks", "--limit", "ten", NULL }, "got \"ten\"" },
    { { "fallbacks", "--since", "1y", NULL }, "--since: \"1y\": unknown" },
    { { "fallbacks", "--until", "2026-02-30T00:00:00Z", NULL },
      "day 30 does not exist" },
    { { "fallbacks", "--group-by", "colour", NULL },
      "--group-by: unknown value \"colour\"" },
    { { "fallbacks", "--status", "clean", NULL },
      "--status is not an option of fallbacks" },
    { { "receipts", "--status", "dirty", NULL },
      "--status: unknown value \"dirty\"" },
    { { "receipts", "--requested", "tpu", NULL },
      "--requested: unknown backend \"tpu\"" },
    { { "receipts", "--before-id", "-3", NULL }, "--before-id: expected" },
    { { "receipts", "--format", "yaml", NULL },
      "--format: unknown format \"yaml\"" },
    { { "receipts", "--format", "prometheus", NULL },
      "--format: unknown format \"prometheus\"" },
    { { "receipts", "extra", NULL }, "unexpected argument \"extra\"" },
    { { "ping", "--plan", "p", NULL }, "--plan is not an option of ping" },
    { { "ping", "--timeout", "x", NULL },
      "--timeout: \"x\" is not a duration" },
    { { "import", NULL }, "no files to import" },
    { { "import", "--batch", "0", NULL }, "--batch: expected an integer" },
    { { "import", "/nonexistent-dir/file.json", NULL },
      "/nonexistent-dir/file.json: No such file or directory" },
    { { "retained", NULL }, "--plan is required" },
    { { "readback-check", "--plan", "p", NULL }, "are required" },
    { { "quarantine", "replay", NULL }, "replay needs at least one" },
    { { "quarantine", "replay", "abc", NULL },
      "\"abc\" is not a quarantine id" },
    { { "quarantine", "purge", NULL }, "unexpected argument \"purge\"" },
    { { "quarantine", "show", NULL }, "show needs at least one" },
    { { "stats", "--socket", "a", "--tcp", "b:1", NULL },
      "--socket and --tcp exclude each other" },
    { { "help", "frob", NULL }, "unknown command \"frob\"" },
};

START_TEST(test_ctl_usage_error_exits_2)
{
    const struct usage_case *c = &usage_cases[_i];
    struct run r;

    run_ctl(&r, "/nonexistent-dir/never.sock", c->args);
    ck_assert_msg(r.status == 2, "%s: exit %d, stderr %s", c->args[0], r.status,
                  r.err);
    ck_assert_msg(strstr(r.err, c->want) != NULL, "stderr [%s] lacks [%s]",
                  r.err, c->want);
    ck_assert_msg(strncmp(r.err, "receiptctl: ", 12) == 0, "[%s]", r.err);
    ck_assert_int_eq(e2e_count_lines(r.err), 1);
    ck_assert_str_eq(r.out, "");
    run_free(&r);
}
END_TEST

START_TEST(test_ctl_no_command_prints_usage_and_exits_2)
{
    const char *args[] = { NULL };
    struct run r;

    run_ctl(&r, NULL, args);
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "usage: receiptctl COMMAND"));
    run_free(&r);
}
END_TEST

/* ---- help ---- */

static const char *const commands[] = {
    "ping",       "stats", "receipts", "fallbacks",      "coverage", "gaps",
    "quarantine", "plans", "retained", "readback-check", "import",
};

START_TEST(test_ctl_help_for_every_command)
{
    const char *cmd = commands[_i];
    const char *a1[] = { "help", cmd, NULL };
    const char *a2[] = { cmd, "--help", NULL };
    char want[64];
    struct run r1, r2;

    run_ctl(&r1, NULL, a1);
    run_ctl(&r2, NULL, a2);
    ck_assert_int_eq(r1.status, 0);
    ck_assert_int_eq(r2.status, 0);
    snprintf(want, sizeof(want), "usage: receiptctl %s", cmd);
    ck_assert_msg(strncmp(r1.out, want, strlen(want)) == 0, "%s", r1.out);
    ck_assert_str_eq(r1.out, r2.out);
    ck_assert_ptr_nonnull(strstr(r1.out, "--socket PATH"));
    ck_assert_str_eq(r1.err, "");
    run_free(&r1);
    run_free(&r2);
}
END_TEST

START_TEST(test_ctl_help_lists_every_command)
{
    const char *args[] = { "--help", NULL };
    struct run r;
    size_t i;

    run_ctl(&r, NULL, args);
    ck_assert_int_eq(r.status, 0);
    for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        ck_assert_msg(strstr(r.out, commands[i]) != NULL, "%s", commands[i]);
    run_free(&r);
}
END_TEST

/* ---- cannot connect: exit 3 ---- */

START_TEST(test_ctl_cannot_connect_exits_3)
{
    char sock[300];
    const char *a_flag[] = { "ping", "--socket", sock, NULL };
    const char *a_env[] = { "stats", NULL };
    const char *a_tcp[] = { "ping", "--tcp", "127.0.0.1:1", NULL };
    const char *a_default[] = { "receipts", NULL };
    struct run r;

    snprintf(sock, sizeof(sock), "%s/absent.sock", tmpdir);
    run_ctl(&r, NULL, a_flag);
    ck_assert_int_eq(r.status, 3);
    ck_assert_ptr_nonnull(strstr(r.err, "cannot connect to"));
    ck_assert_ptr_nonnull(strstr(r.err, "absent.sock"));
    ck_assert_int_eq(e2e_count_lines(r.err), 1);
    run_free(&r);

    /* RECEIPTD_SOCKET is used when --socket is absent. */
    run_ctl(&r, sock, a_env);
    ck_assert_int_eq(r.status, 3);
    ck_assert_ptr_nonnull(strstr(r.err, sock));
    run_free(&r);

    run_ctl(&r, NULL, a_tcp);
    ck_assert_int_eq(r.status, 3);
    ck_assert_ptr_nonnull(strstr(r.err, "127.0.0.1:1"));
    run_free(&r);

    /* An import still reports its local verdicts, and what was not sent. */
    {
        const char *a_imp[] = { "import", "--socket", sock,
                                IMPORTS "bad_item.jsonl", NULL };

        run_ctl(&r, NULL, a_imp);
        ck_assert_int_eq(r.status, 3);
        ck_assert_ptr_nonnull(
            strstr(r.out, "bad_item.jsonl:2: invalid: counters.decode_steps"));
        ck_assert_ptr_nonnull(
            strstr(r.out, "accepted 0, rejected 1, not acknowledged 2\n"));
        run_free(&r);
    }

    /* Without either, the packaged default path is tried. */
    run_ctl(&r, NULL, a_default);
    if (access("/run/receiptd/receiptd.sock", F_OK) != 0) {
        ck_assert_int_eq(r.status, 3);
        ck_assert_ptr_nonnull(strstr(r.err, "/run/receiptd/receiptd.sock"));
    }
    run_free(&r);
}
END_TEST

/* --dry-run checks files without a daemon: exit 1 when an item is bad, 0
 * when all are good, and nothing is ever sent (the socket does not exist). */
START_TEST(test_ctl_import_dry_run_needs_no_daemon)
{
    const char *bad[] = { "import",
                          "--dry-run",
                          "--socket",
                          "/nonexistent-dir/never.sock",
                          IMPORTS "bad_item.jsonl",
                          IMPORTS "array.msgpack",
                          NULL };
    const char *good[] = { "import", "--dry-run", IMPORTS "array.json",
                           IMPORTS "lines.jsonl", NULL };
    struct run r;

    run_ctl(&r, NULL, bad);
    ck_assert_int_eq(r.status, 1);
    ck_assert_ptr_nonnull(
        strstr(r.out, "bad_item.jsonl:2: invalid: counters.decode_steps: "));
    ck_assert_ptr_nonnull(
        strstr(r.out, "valid 6, invalid 1 (dry run: nothing sent)\n"));
    ck_assert_str_eq(r.err, "");
    run_free(&r);

    run_ctl(&r, "/nonexistent-dir/never.sock", good);
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.out, "valid 10, invalid 0 (dry run: nothing sent)\n");
    run_free(&r);
}
END_TEST

/* ---- a fake daemon ---- */

struct fake {
    int lfd;
    char path[300];
    pthread_t th;
    pthread_mutex_t mu;
    char log[1 << 16];
    size_t loglen;
    uint32_t max_batch;
    int nconn;
    int tcp_lfd;
    int tcp_port;
    pthread_t tcp_th;
};

static struct fake fake;

static void
fake_log(const char *s)
{
    size_t n = strlen(s);

    pthread_mutex_lock(&fake.mu);
    if (fake.loglen + n < sizeof(fake.log)) {
        memcpy(fake.log + fake.loglen, s, n + 1);
        fake.loglen += n;
    }
    pthread_mutex_unlock(&fake.mu);
}

static int
write_all(int fd, const char *p, size_t n)
{
    ssize_t k;

    while (n > 0) {
        k = write(fd, p, n);
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static void
pk_str(msgpack_packer *pk, const char *s)
{
    envelope_pack_cstr(pk, s);
}

/* A receipt in named msgpack form, for the fake quarantine's raw bytes. */
static void
pack_vector(msgpack_sbuffer *sb, const char *name)
{
    char path[512];
    char *buf;
    FILE *f;
    long n;

    snprintf(path, sizeof(path), VECTORS "%s", name);
    f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    msgpack_sbuffer_write(sb, buf, (size_t)n);
    free(buf);
}

/* Packs the result for one request; returns 0, or -1 for an error reply
 * described by err. */
static int
fake_answer(const struct envelope *env, msgpack_packer *pk,
            struct proto_err *err)
{
    const msgpack_object *b = env->body, *kind, *v;
    uint32_t i, nrej = 0;

    switch (env->op) {
    case PROTO_OP_HELLO:
        msgpack_pack_map(pk, 4);
        pk_str(pk, "protocol");
        msgpack_pack_uint64(pk, 1);
        pk_str(pk, "server");
        pk_str(pk, "fake/9.9.9");
        pk_str(pk, "max_frame");
        msgpack_pack_uint64(pk, 1 << 20);
        pk_str(pk, "max_batch");
        msgpack_pack_uint64(pk, fake.max_batch);
        return 0;
    case PROTO_OP_PING:
        msgpack_pack_map(pk, 0);
        return 0;
    case PROTO_OP_RECEIPT:
        msgpack_pack_map(pk, 2);
        pk_str(pk, "receipt_id");
        msgpack_pack_uint64(pk, 77);
        pk_str(pk, "fallback");
        pk_str(pk, "clean");
        return 0;
    case PROTO_OP_RECEIPTS: {
        int *rej = calloc(b->via.array.size + 1, sizeof(int));

        for (i = 0; i < b->via.array.size; i++) {
            struct receipt r;

            if (receipt_decode(&b->via.array.ptr[i], &r, err) != 0) {
                rej[i] = 1;
            } else {
                rej[i] =
                    r.model_instance_id.len == 14 &&
                    memcmp(r.model_instance_id.ptr, "daemon-rejects", 14) == 0;
                receipt_clear(&r);
            }
            nrej += rej[i] != 0;
        }
        msgpack_pack_map(pk, 2);
        pk_str(pk, "accepted");
        msgpack_pack_uint64(pk, b->via.array.size - nrej);
        pk_str(pk, "rejected");
        msgpack_pack_array(pk, nrej);
        for (i = 0; i < b->via.array.size; i++) {
            if (!rej[i])
                continue;
            msgpack_pack_map(pk, 4);
            pk_str(pk, "index");
            msgpack_pack_uint64(pk, i);
            pk_str(pk, "code");
            pk_str(pk, "invalid");
            pk_str(pk, "path");
            pk_str(pk, "model_instance_id");
            pk_str(pk, "message");
            pk_str(pk, "rejected by the fake daemon");
        }
        free(rej);
        return 0;
    }
    case PROTO_OP_READBACK:
        msgpack_pack_map(pk, 1);
        pk_str(pk, "request");
        msgpack_pack_map(pk, 3);
        pk_str(pk, "node_id");
        pk_str(pk, "n1");
        pk_str(pk, "participant_index");
        msgpack_pack_uint64(pk, 0);
        pk_str(pk, "logical_offset_bytes");
        msgpack_pack_uint64(pk, 4096);
        return 0;
    case PROTO_OP_QUERY:
        kind = mpobj_map_get(b, "kind", NULL);
        v = mpobj_map_get(b, "plan", NULL);
        /* "hang": the fake reads the request and never answers. */
        if (v != NULL && mpobj_str_eq(v, "hang"))
            return 1;
        if (v != NULL && mpobj_str_eq(v, "err"))
            return proto_err_set(err, PROTO_EINVALID, "counters.decode_steps",
                                 "expected an unsigned integer, got a "
                                 "string");
        if (mpobj_str_eq(kind, "quarantine") &&
            mpobj_map_get(b, "raw", NULL) != NULL) {
            uint64_t id = 0;
            msgpack_sbuffer raw;

            mpobj_uint(mpobj_map_get(b, "id", NULL), UINT64_MAX, &id, NULL);
            msgpack_sbuffer_init(&raw);
            if (id == 5) {
                pack_vector(&raw, "s2_backend_cpu.named.msgpack");
            } else if (id == 7) {
                /* A batch of two; the fake refuses the second again. */
                msgpack_sbuffer one;
                msgpack_unpacked u1;
                msgpack_packer rpk;
                struct receipt r;
                size_t off = 0;

                msgpack_sbuffer_init(&one);
                pack_vector(&one, "s2_backend_cpu.named.msgpack");
                msgpack_unpacked_init(&u1);
                msgpack_unpack_next(&u1, one.data, one.size, &off);
                ck_assert_int_eq(receipt_decode(&u1.data, &r, err), 0);
                msgpack_packer_init(&rpk, &raw, msgpack_sbuffer_write);
                msgpack_pack_array(&rpk, 2);
                receipt_encode(&r, &rpk);
                r.model_instance_id.ptr = "daemon-rejects";
                r.model_instance_id.len = 14;
                receipt_encode(&r, &rpk);
                receipt_clear(&r);
                msgpack_unpacked_destroy(&u1);
                msgpack_sbuffer_destroy(&one);
            } else {
                msgpack_sbuffer_write(&raw, "\xc1\x01", 2);
            }
            msgpack_pack_map(pk, 2);
            pk_str(pk, "rows");
            msgpack_pack_array(pk, 1);
            msgpack_pack_map(pk, 4);
            pk_str(pk, "id");
            /* 8: a daemon that answers with some other payload. */
            msgpack_pack_uint64(pk, id == 8 ? 99 : id);
            pk_str(pk, "op");
            pk_str(pk, "receipts");
            pk_str(pk, "source");
            pk_str(pk, "node-9/rt-1");
            pk_str(pk, "raw");
            msgpack_pack_bin_with_body(pk, raw.data, raw.size);
            pk_str(pk, "truncated");
            msgpack_pack_false(pk);
            msgpack_sbuffer_destroy(&raw);
            return 0;
        }
        msgpack_pack_map(pk, 2);
        pk_str(pk, "rows");
        msgpack_pack_array(pk, 1);
        msgpack_pack_map(pk, 2);
        pk_str(pk, "prepared_plan_id");
        pk_str(pk, "plan-a");
        pk_str(pk, "receipts");
        msgpack_pack_uint64(pk, UINT64_MAX);
        pk_str(pk, "truncated");
        msgpack_pack_false(pk);
        return 0;
    }
    return proto_err_set(err, PROTO_EUNKNOWN_OP, "op", "not in the fake");
}

static void
log_request(const struct envelope *env)
{
    char line[4096];
    struct json_object *j;

    if (env->op == PROTO_OP_RECEIPTS) {
        snprintf(line, sizeof(line), "receipts %u\n",
                 env->body ? env->body->via.array.size : 0);
    } else if (env->op == PROTO_OP_RECEIPT) {
        struct receipt r;
        struct proto_err err;

        if (receipt_decode(env->body, &r, &err) == 0) {
            snprintf(line, sizeof(line), "receipt %.*s\n",
                     (int)r.model_instance_id.len, r.model_instance_id.ptr);
            receipt_clear(&r);
        } else {
            snprintf(line, sizeof(line), "receipt ?\n");
        }
    } else {
        j = env->body ? output_to_json(env->body) : NULL;
        snprintf(
            line, sizeof(line), "%s %s\n", envelope_op_name(env->op),
            j ? json_object_to_json_string_ext(
                    j, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)
              : "-");
        json_object_put(j);
    }
    if (env->has_replay_of) {
        size_t n = strlen(line) - 1;

        snprintf(line + n, sizeof(line) - n, " replay_of %llu\n",
                 (unsigned long long)env->replay_of);
    }
    fake_log(line);
}

static void *
fake_conn_cb(void *arg)
{
    int fd = (int)(intptr_t)arg;
    struct frame_reader fr;
    char buf[65536], *frame;
    uint32_t flen;
    size_t off, used;
    ssize_t n;
    int rc;

    frame_reader_init(&fr, FRAME_MAX_CEILING);
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        off = 0;
        while (off < (size_t)n) {
            struct proto_err err;
            struct envelope env;
            msgpack_unpacked up;
            msgpack_sbuffer sb;
            msgpack_packer pk;
            size_t start;

            if (frame_reader_feed(&fr, buf + off, (size_t)n - off, &used,
                                  &frame, &flen, &err) != 0)
                goto out;
            off += used;
            if (frame == NULL)
                continue;
            msgpack_unpacked_init(&up);
            msgpack_sbuffer_init(&sb);
            msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
            start = frame_sbuffer_begin(&sb);
            proto_err_clear(&err);
            if (envelope_parse(frame, flen, &up, &env, &err) == 0) {
                msgpack_sbuffer tmp;
                msgpack_packer tpk;

                log_request(&env);
                msgpack_sbuffer_init(&tmp);
                msgpack_packer_init(&tpk, &tmp, msgpack_sbuffer_write);
                rc = fake_answer(&env, &tpk, &err);
                if (rc == 0) {
                    envelope_reply_ok(&pk, 1, env.id);
                    msgpack_sbuffer_write(&sb, tmp.data, tmp.size);
                } else if (rc < 0) {
                    envelope_reply_error(&pk, 1, env.id, &err);
                } else {
                    sb.size = 0; /* no reply at all */
                }
                msgpack_sbuffer_destroy(&tmp);
            } else {
                envelope_reply_error(&pk, env.has_id, env.id, &err);
            }
            if (sb.size > 0) {
                frame_sbuffer_finish(&sb, start);
                write_all(fd, sb.data, sb.size);
            }
            msgpack_sbuffer_destroy(&sb);
            msgpack_unpacked_destroy(&up);
            free(frame);
        }
    }
out:
    frame_reader_close(&fr);
    close(fd);
    return NULL;
}

static void *
fake_accept_cb(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    pthread_t th;
    int fd;

    while ((fd = accept(lfd, NULL, NULL)) >= 0) {
        pthread_mutex_lock(&fake.mu);
        fake.nconn++;
        pthread_mutex_unlock(&fake.mu);
        pthread_create(&th, NULL, fake_conn_cb, (void *)(intptr_t)fd);
        pthread_detach(th);
    }
    return NULL;
}

/* Each test runs in its own forked process (Check's fork mode), so the
 * fake's threads end with it. */
static void
setup_fake(void)
{
    struct sockaddr_un sun;

    setup_dir();
    memset(&fake, 0, sizeof(fake));
    pthread_mutex_init(&fake.mu, NULL);
    fake.max_batch = 10000;
    snprintf(fake.path, sizeof(fake.path), "%s/fake.sock", tmpdir);
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    ck_assert_uint_lt(strlen(fake.path), sizeof(sun.sun_path));
    memcpy(sun.sun_path, fake.path, strlen(fake.path));
    fake.lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_ge(fake.lfd, 0);
    ck_assert_int_eq(bind(fake.lfd, (struct sockaddr *)&sun, sizeof(sun)), 0);
    ck_assert_int_eq(listen(fake.lfd, 16), 0);
    ck_assert_int_eq(pthread_create(&fake.th, NULL, fake_accept_cb,
                                    (void *)(intptr_t)fake.lfd),
                     0);

    /* The same fake on TCP, loopback, a port the kernel picks. */
    {
        struct sockaddr_in sin;
        socklen_t sl = sizeof(sin);

        memset(&sin, 0, sizeof(sin));
        sin.sin_family = AF_INET;
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        fake.tcp_lfd = socket(AF_INET, SOCK_STREAM, 0);
        ck_assert_int_ge(fake.tcp_lfd, 0);
        ck_assert_int_eq(
            bind(fake.tcp_lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
        ck_assert_int_eq(listen(fake.tcp_lfd, 16), 0);
        ck_assert_int_eq(
            getsockname(fake.tcp_lfd, (struct sockaddr *)&sin, &sl), 0);
        fake.tcp_port = ntohs(sin.sin_port);
        ck_assert_int_eq(pthread_create(&fake.tcp_th, NULL, fake_accept_cb,
                                        (void *)(intptr_t)fake.tcp_lfd),
                         0);
    }
}

static void
teardown_fake(void)
{
    teardown_dir();
}

static char *
fake_log_copy(void)
{
    char *s;

    pthread_mutex_lock(&fake.mu);
    s = strdup(fake.log);
    pthread_mutex_unlock(&fake.mu);
    return s;
}

START_TEST(test_ctl_daemon_error_exits_1_with_path)
{
    const char *args[] = { "coverage", "--plan", "err", NULL };
    struct run r;

    run_ctl(&r, fake.path, args);
    ck_assert_int_eq(r.status, 1);
    ck_assert_str_eq(r.err, "receiptctl: invalid: counters.decode_steps: "
                            "expected an unsigned integer, got a string\n");
    ck_assert_str_eq(r.out, "");
    run_free(&r);
}
END_TEST

/* Every filter flag reaches the query body under its PROTOCOL name, times
 * converted to unix milliseconds. */
START_TEST(test_ctl_query_sends_filters)
{
    const char *args[] = { "fallbacks",
                           "--plan",
                           "p1",
                           "--graph",
                           "g1",
                           "--model",
                           "m1",
                           "--source",
                           "node-1",
                           "--requested",
                           "cuda",
                           "--executed",
                           "cpu",
                           "--since",
                           "2026-11-30T04:00:00Z",
                           "--until",
                           "1796011260000",
                           "--limit",
                           "50",
                           "--group-by",
                           "backends",
                           "--format",
                           "json",
                           NULL };
    const char *args2[] = { "receipts", "--status", "unproven", "--before-id",
                            "1000",     "--format", "csv",      NULL };
    struct run r;
    char *log;

    run_ctl(&r, fake.path, args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    log = fake_log_copy();
    ck_assert_str_eq(log, "query {\"kind\":\"fallbacks\",\"plan\":\"p1\","
                          "\"graph\":\"g1\",\"model\":\"m1\",\"source\":"
                          "\"node-1\",\"requested\":\"cuda\",\"executed\":"
                          "\"cpu\",\"group_by\":\"backends\",\"since\":"
                          "1796011200000,\"until\":1796011260000,\"limit\":"
                          "50}\n");
    free(log);
    /* The fake's answer carries 2^64-1, which must survive to the JSON. */
    ck_assert_ptr_nonnull(strstr(r.out, "\"receipts\": 18446744073709551615"));
    run_free(&r);

    run_ctl(&r, fake.path, args2);
    ck_assert_msg(r.status == 0, "%s", r.err);
    log = fake_log_copy();
    ck_assert_ptr_nonnull(strstr(log, "query {\"kind\":\"receipts\","
                                      "\"status\":\"unproven\","
                                      "\"before_id\":1000}\n"));
    free(log);
    /* receipts CSV has its fixed header whatever the rows hold; a field
     * outside it (the fake's `receipts`) lands in `extra`, exact. */
    ck_assert_ptr_nonnull(strstr(r.out, "receipt_id,received_at,source,"));
    ck_assert_ptr_nonnull(strstr(r.out, ",plan-a,"));
    ck_assert_ptr_nonnull(
        strstr(r.out, "\"{\"\"receipts\"\":18446744073709551615}\"\n"));
    ck_assert_int_eq(e2e_count_lines(r.out), 2);
    run_free(&r);
}
END_TEST

START_TEST(test_ctl_ping_says_hello_first)
{
    const char *args[] = { "ping", NULL };
    struct run r;
    char *log;

    run_ctl(&r, fake.path, args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "fake/9.9.9"));
    log = fake_log_copy();
    ck_assert_str_eq(log, "hello {\"protocol\":1}\nping -\n");
    free(log);
    run_free(&r);
}
END_TEST

/* Every query subcommand in every format: the right request goes out and
 * the answer comes back as a table, one JSON document, or CSV. */
struct cmd_case {
    const char *args[12];
    const char *logged; /* the request line the fake must have seen */
};

static const struct cmd_case cmd_cases[] = {
    { { "fallbacks", NULL }, "query {\"kind\":\"fallbacks\"}" },
    { { "coverage", "--group-by", "model", NULL },
      "query {\"kind\":\"coverage\",\"group_by\":\"model\"}" },
    { { "receipts", "--limit", "7", NULL },
      "query {\"kind\":\"receipts\",\"limit\":7}" },
    { { "gaps", "--source", "n1", NULL },
      "query {\"kind\":\"gaps\",\"source\":\"n1\"}" },
    { { "quarantine", "--since", "0", NULL },
      "query {\"kind\":\"quarantine\",\"since\":0}" },
    { { "plans", NULL }, "query {\"kind\":\"plans\"}" },
    { { "retained", "--plan", "p", "--graph", "g", NULL },
      "query {\"kind\":\"retained\",\"plan\":\"p\",\"graph\":\"g\"}" },
    { { "stats", NULL }, "query {\"kind\":\"stats\"}" },
    { { "readback-check", "--plan", "p", "--value", "v", "--element-type",
        "f32", "--count", "4", NULL },
      "readback {\"prepared_plan_id\":\"p\",\"graph_hash\":\"\","
      "\"value_id\":\"v\",\"participant_index\":0,\"output_layout\":"
      "{\"element_type\":\"f32\",\"element_count\":4}}" },
};

START_TEST(test_ctl_every_command_in_every_format)
{
    static const char *const formats[] = { "table", "json", "csv" };
    const struct cmd_case *c = &cmd_cases[_i];
    const char *args[16];
    struct json_object *j;
    struct run r;
    size_t f, n;
    char *log;

    for (f = 0; f < 3; f++) {
        for (n = 0; c->args[n] != NULL; n++)
            args[n] = c->args[n];
        args[n++] = "--format";
        args[n++] = formats[f];
        args[n] = NULL;
        run_ctl(&r, fake.path, args);
        ck_assert_msg(r.status == 0, "%s %s: exit %d: %s", c->args[0],
                      formats[f], r.status, r.err);
        ck_assert_str_eq(r.err, "");
        ck_assert_uint_gt(strlen(r.out), 0);
        if (f == 1) {
            j = json_tokener_parse(r.out);
            ck_assert_msg(j != NULL, "not JSON: %s", r.out);
            ck_assert_ptr_nonnull(json_object_object_get(j, "rows"));
            json_object_put(j);
        }
        if (f == 2)
            ck_assert_int_ge(e2e_count_lines(r.out), 2);
        run_free(&r);
    }
    log = fake_log_copy();
    ck_assert_msg(strstr(log, c->logged) != NULL, "sent:\n%s\nwant: %s", log,
                  c->logged);
    free(log);
}
END_TEST

/* --tcp connects to HOST:PORT and --token goes into hello. */
START_TEST(test_ctl_tcp_sends_token_in_hello)
{
    char hp[64];
    const char *args[] = { "receipts", "--tcp",   hp,  "--token",
                           "s3cret",   "--limit", "1", NULL };
    struct run r;
    char *log;

    snprintf(hp, sizeof(hp), "127.0.0.1:%d", fake.tcp_port);
    run_ctl(&r, NULL, args);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    log = fake_log_copy();
    ck_assert_str_eq(log, "hello {\"protocol\":1,\"token\":\"s3cret\"}\n"
                          "query {\"kind\":\"receipts\",\"limit\":1}\n");
    free(log);
    run_free(&r);
}
END_TEST

/* A daemon that never answers: --timeout bounds the wait, exit 3. */
START_TEST(test_ctl_timeout_exits_3)
{
    const char *args[] = {
        "receipts", "--plan", "hang", "--timeout", "1", NULL
    };
    struct timespec t0, t1;
    struct run r;
    double secs;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    run_ctl(&r, fake.path, args);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    secs = (double)(t1.tv_sec - t0.tv_sec) +
           (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    ck_assert_int_eq(r.status, 3);
    ck_assert_ptr_nonnull(strstr(r.err, "no answer from"));
    ck_assert_msg(secs >= 0.9 && secs < 5.0, "took %.2f s", secs);
    run_free(&r);
}
END_TEST

/* "-" reads the receipts from standard input. */
START_TEST(test_ctl_import_from_stdin)
{
    const char *args[] = { "import", "-", NULL };
    int fd, saved;
    struct run r;

    fd = open(IMPORTS "lines.jsonl", O_RDONLY);
    ck_assert_int_ge(fd, 0);
    saved = dup(0);
    dup2(fd, 0);
    run_ctl(&r, fake.path, args);
    dup2(saved, 0);
    close(fd);
    close(saved);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.out, "accepted 5, rejected 0\n");
    run_free(&r);
}
END_TEST

/* Five receipts with --batch 2: hello with the source, then batches of 2,
 * 2 and 1, and the fake's rejection reported with its file and index. */
START_TEST(test_ctl_import_batches_and_reports_rejections)
{
    char file[300], *log;
    const char *args[] = { "import", "--batch", "2", file, NULL };
    struct run r;
    FILE *f;
    char *lines = read_all(IMPORTS "lines.jsonl"), *p;

    /* Item 3 gets a model the fake rejects. */
    p = strstr(lines, "\n");
    ck_assert_ptr_nonnull(p);
    p = strstr(p + 1, "\n");
    p = strstr(p + 1, "\n");
    p = strstr(p + 1, "\"model_instance_id\":\"");
    ck_assert_ptr_nonnull(p);
    snprintf(file, sizeof(file), "%s/five.jsonl", tmpdir);
    f = fopen(file, "w");
    fwrite(lines, 1, (size_t)(p - lines), f);
    fputs("\"model_instance_id\":\"daemon-rejects\",\"ignored_model\":\"", f);
    fputs(p + strlen("\"model_instance_id\":\""), f);
    fclose(f);
    free(lines);

    run_ctl(&r, fake.path, args);
    ck_assert_msg(r.status == 1, "exit %d: %s", r.status, r.err);
    log = fake_log_copy();
    ck_assert_msg(strncmp(log,
                          "hello {\"protocol\":1,\"source\":"
                          "\"receiptctl/",
                          41) == 0,
                  "%s", log);
    ck_assert_ptr_nonnull(
        strstr(log, "}\nreceipts 2\nreceipts 2\nreceipts 1\n"));
    free(log);
    ck_assert_ptr_nonnull(strstr(r.out, "five.jsonl:4: invalid: "
                                        "model_instance_id: rejected by the "
                                        "fake daemon\n"));
    ck_assert_ptr_nonnull(strstr(r.out, "accepted 4, rejected 1\n"));
    run_free(&r);
}
END_TEST

/* The daemon's max_batch (from hello) caps --batch. */
START_TEST(test_ctl_import_respects_max_batch)
{
    const char *args[] = { "import", IMPORTS "array.json", NULL };
    struct run r;
    char *log;

    fake.max_batch = 2;
    run_ctl(&r, fake.path, args);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    log = fake_log_copy();
    ck_assert_ptr_nonnull(strstr(log, "receipts 2\nreceipts 2\nreceipts 1\n"));
    ck_assert_ptr_nonnull(strstr(log, "\"source\":\"receiptctl/"));
    free(log);
    ck_assert_str_eq(r.out, "accepted 5, rejected 0\n");
    run_free(&r);
}
END_TEST

START_TEST(test_ctl_import_json_output)
{
    const char *args[] = { "import", "--format", "json",
                           IMPORTS "bad_item.jsonl", NULL };
    struct json_object *j, *rej, *e;
    struct run r;

    run_ctl(&r, fake.path, args);
    ck_assert_int_eq(r.status, 1);
    j = json_tokener_parse(r.out);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(
        json_object_get_uint64(json_object_object_get(j, "accepted")), 2);
    rej = json_object_object_get(j, "rejected");
    ck_assert_uint_eq(json_object_array_length(rej), 1);
    e = json_object_array_get_idx(rej, 0);
    ck_assert_uint_eq(
        json_object_get_uint64(json_object_object_get(e, "index")), 1);
    ck_assert_str_eq(json_object_get_string(json_object_object_get(e, "path")),
                     "counters.decode_steps");
    ck_assert_str_eq(json_object_get_string(json_object_object_get(e, "code")),
                     "invalid");
    json_object_put(j);
    run_free(&r);
}
END_TEST

/* Each JSON item is parsed on its own, strictly: a too-large integer, a
 * repeated key or a non-receipt is reported at its index, and the items
 * around it still go through; a file cut short keeps its complete items. */
START_TEST(test_ctl_import_reports_each_bad_json_item)
{
    char file[300], cut[300];
    const char *args[] = { "import", file, cut, NULL };
    char *good = read_all(VECTORS "s2_backend_cpu.json"), *p;
    struct run r;
    FILE *f;

    while ((p = strchr(good, '\n')) != NULL)
        *p = ' ';
    p = strstr(good, "\"decode_steps\":10");
    ck_assert_ptr_nonnull(p);
    snprintf(file, sizeof(file), "%s/mixed.json", tmpdir);
    f = fopen(file, "w");
    fprintf(f, "[%s,\n", good);
    fprintf(f, "%.*s\"decode_steps\":18446744073709551616%s,\n",
            (int)(p - good), good, p + strlen("\"decode_steps\":10"));
    p = strstr(good, "\"stop_reason\":");
    ck_assert_ptr_nonnull(p);
    fprintf(f, "%.*s\"stop_reason\":\"x\",%s,\n", (int)(p - good), good, p);
    fprintf(f, "\"a string\", {\"tricky\": \"]},\\\"\"}, %s]\n", good);
    fclose(f);
    snprintf(cut, sizeof(cut), "%s/cut.json", tmpdir);
    f = fopen(cut, "w");
    fprintf(f, "[%s, %s", good, good);
    fclose(f);
    free(good);

    run_ctl(&r, fake.path, args);
    ck_assert_int_eq(r.status, 1);
    /* Items of a JSON array: their line (1-based), and their index. */
    ck_assert_msg(strstr(r.out, "mixed.json:2: item 1: invalid: "
                                "counters.decode_steps: expected an unsigned "
                                "integer") != NULL,
                  "%s", r.out);
    ck_assert_ptr_nonnull(
        strstr(r.out, "mixed.json:3: item 2: invalid: stop_reason: "));
    ck_assert_ptr_nonnull(strstr(r.out, "mixed.json:4: item 3: invalid: "));
    ck_assert_ptr_nonnull(strstr(r.out, "mixed.json:4: item 4: invalid: "));
    ck_assert_ptr_nonnull(strstr(r.out, "cut.json:1: item 2: malformed: "));
    ck_assert_ptr_null(strstr(r.out, "item 0:"));
    ck_assert_ptr_null(strstr(r.out, "item 5:"));
    ck_assert_msg(strstr(r.out, "accepted 4, rejected 5\n") != NULL, "%s",
                  r.out);
    run_free(&r);
}
END_TEST

/* Replay asks for the raw bytes, then sends them as the payload's own
 * source; a payload that is not one msgpack object is refused locally. */
START_TEST(test_ctl_quarantine_replay)
{
    const char *args[] = { "quarantine", "replay", "5", NULL };
    const char *bad[] = { "quarantine", "replay", "6", "5", NULL };
    struct run r;
    char *log;

    run_ctl(&r, fake.path, args);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.out, "quarantine 5: replayed as receipt, receipt 77 "
                            "(clean)\n");
    log = fake_log_copy();
    ck_assert_str_eq(log, "query {\"kind\":\"quarantine\",\"id\":5,\"raw\":"
                          "true}\nhello {\"protocol\":1,\"source\":"
                          "\"node-9/rt-1\"}\nreceipt model-cpu replay_of "
                          "5\n");
    free(log);
    run_free(&r);

    /* The row must be the one asked for. */
    {
        const char *other[] = { "quarantine", "replay", "8", NULL };

        run_ctl(&r, fake.path, other);
        ck_assert_int_eq(r.status, 1);
        ck_assert_str_eq(r.err, "receiptctl: quarantine 8: the daemon "
                                "answered with another payload\n");
        ck_assert_str_eq(r.out, "");
        run_free(&r);
    }

    /* A batch payload goes back as `receipts`; an item refused again is
     * reported with its index and path, and the exit is 1. */
    {
        const char *batch[] = { "quarantine", "replay", "7", NULL };

        run_ctl(&r, fake.path, batch);
        ck_assert_int_eq(r.status, 1);
        ck_assert_str_eq(r.out, "quarantine 7: replayed as receipts, "
                                "accepted 1, rejected 1\n");
        ck_assert_str_eq(r.err, "receiptctl: quarantine 7: [1]: invalid: "
                                "model_instance_id: rejected by the fake "
                                "daemon\n");
        run_free(&r);
    }

    run_ctl(&r, fake.path, bad);
    ck_assert_int_eq(r.status, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "quarantine 6: cannot be replayed"));
    /* The good one after it was still replayed. */
    ck_assert_ptr_nonnull(strstr(r.out, "quarantine 5: replayed"));
    run_free(&r);

    /* For scripts: one JSON document with the daemon's result, the
     * refused items in it, and the same exit status; one id at a time. */
    {
        const char *json[] = { "quarantine", "replay", "7",
                               "--format",   "json",   NULL };
        const char *two[] = { "quarantine", "replay", "7", "5",
                              "--format",   "json",   NULL };
        struct json_object *j, *row, *rej;

        run_ctl(&r, fake.path, json);
        ck_assert_int_eq(r.status, 1);
        j = json_tokener_parse(r.out);
        ck_assert_msg(j != NULL, "not JSON: %s", r.out);
        row = json_object_array_get_idx(json_object_object_get(j, "rows"), 0);
        ck_assert_ptr_nonnull(row);
        ck_assert_int_eq(
            json_object_get_int(json_object_object_get(row, "quarantine_id")),
            7);
        ck_assert_str_eq(
            json_object_get_string(json_object_object_get(row, "replayed_as")),
            "receipts");
        ck_assert_int_eq(
            json_object_get_int(json_object_object_get(row, "accepted")), 1);
        rej = json_object_object_get(row, "rejected");
        ck_assert_int_eq(json_object_array_length(rej), 1);
        json_object_put(j);
        run_free(&r);

        run_ctl(&r, fake.path, two);
        ck_assert_int_eq(r.status, 2);
        ck_assert_ptr_nonnull(strstr(r.err, "give one id"));
        run_free(&r);
    }
}
END_TEST

/* show: the row without its raw bytes, plus the payload decoded; bytes
 * that are not msgpack stay bytes (base64 in JSON). */
START_TEST(test_ctl_quarantine_show)
{
    const char *table[] = { "quarantine", "show", "5", "6", NULL };
    const char *json[] = {
        "quarantine", "show", "5", "--format", "json", NULL
    };
    const char *json_bad[] = { "quarantine", "show", "6",
                               "--format",   "json", NULL };
    const char *two_json[] = { "quarantine", "show", "5", "6",
                               "--format",   "json", NULL };
    struct json_object *j, *row, *payload;
    struct run r;

    run_ctl(&r, fake.path, table);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "\nsource "));
    ck_assert_ptr_nonnull(strstr(r.out, "node-9/rt-1\n"));
    ck_assert_ptr_nonnull(strstr(r.out, "payload.model_instance_id"));
    ck_assert_ptr_nonnull(strstr(r.out, "model-cpu\n"));
    ck_assert_ptr_nonnull(strstr(r.out, "payload.counters.decode_steps"));
    ck_assert_ptr_nonnull(strstr(r.out, "<2 bytes>\n"));
    ck_assert_ptr_null(strstr(r.out, "raw"));
    /* Two records, one blank line between them. */
    ck_assert_ptr_nonnull(strstr(r.out, "\n\nid "));
    run_free(&r);

    run_ctl(&r, fake.path, json);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    j = json_tokener_parse(r.out);
    ck_assert_ptr_nonnull(j);
    row = json_object_array_get_idx(json_object_object_get(j, "rows"), 0);
    ck_assert_ptr_null(json_object_object_get(row, "raw"));
    payload = json_object_object_get(row, "payload");
    ck_assert(json_object_is_type(payload, json_type_object));
    ck_assert_str_eq(json_object_get_string(
                         json_object_object_get(payload, "model_instance_id")),
                     "model-cpu");
    json_object_put(j);
    run_free(&r);

    run_ctl(&r, fake.path, json_bad);
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "\"payload\": \"wQE=\""));
    run_free(&r);

    run_ctl(&r, fake.path, two_json);
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "give one id"));
    run_free(&r);
}
END_TEST

/* ---- the real daemon ---- */

#ifdef E2E_HAVE_DAEMON
/* The daemon runs in e2e_util's own temporary directory; tmpdir (for
 * receiptctl's captured output) is separate. */
static struct e2e_daemon daemon_d;
static const char *daemon_sock = daemon_d.sock;

static void
setup_daemon(void)
{
    static const char *const extra[] = { "--log-level", "warning", NULL };

    setup_dir();
    if (e2e_start(&daemon_d, extra) != 0) {
        size_t len;
        char *log = e2e_read_file(daemon_d.log, &len);

        ck_abort_msg("receiptd did not start: %s", log ? log : "(no log)");
    }
}

static void
teardown_daemon(void)
{
    int st = 0;

    /* A clean SIGTERM exit is part of every test against the daemon. */
    ck_assert_int_eq(e2e_stop(&daemon_d, SIGTERM, 10000, &st), 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    e2e_cleanup(&daemon_d);
    teardown_dir();
}

START_TEST(test_ctl_real_ping)
{
    const char *args[] = { "ping", NULL };
    struct run r;

    run_ctl(&r, daemon_sock, args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "ok: receiptd/"));
    run_free(&r);
}
END_TEST

START_TEST(test_ctl_real_stats_in_every_format)
{
    const char *table[] = { "stats", NULL };
    const char *json[] = { "stats", "--format", "json", NULL };
    const char *csv[] = { "stats", "--format", "csv", NULL };
    const char *prom[] = { "stats", "--format", "prometheus", NULL };
    struct json_object *j, *row;
    struct run r;

    run_ctl(&r, daemon_sock, table);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "uptime_ms "));
    run_free(&r);

    run_ctl(&r, daemon_sock, json);
    ck_assert_msg(r.status == 0, "%s", r.err);
    j = json_tokener_parse(r.out);
    ck_assert_ptr_nonnull(j);
    row = json_object_array_get_idx(json_object_object_get(j, "rows"), 0);
    ck_assert_ptr_nonnull(row);
    ck_assert(json_object_is_type(json_object_object_get(row, "accepted"),
                                  json_type_int));
    json_object_put(j);
    run_free(&r);

    run_ctl(&r, daemon_sock, csv);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_int_eq(e2e_count_lines(r.out), 2);
    ck_assert_ptr_nonnull(strstr(r.out, "uptime_ms"));
    run_free(&r);

    run_ctl(&r, daemon_sock, prom);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(
        strstr(r.out, "# TYPE receiptd_receipts_accepted_total counter\n"
                      "receiptd_receipts_accepted_total 0\n"));
    ck_assert_ptr_nonnull(strstr(r.out, "# HELP receiptd_start_time_seconds "));
    ck_assert_ptr_nonnull(strstr(r.out, "receiptd_up 1\n"));
    ck_assert_ptr_nonnull(strstr(r.out, "receiptd_store_failing 0\n"));
    run_free(&r);

    /* No daemon there: the scrape says so, and the exit status too. */
    {
        char gone[400];

        snprintf(gone, sizeof(gone), "%s/no-daemon.sock", tmpdir);
        run_ctl(&r, gone, prom);
        ck_assert_int_ne(r.status, 0);
        ck_assert_msg(strstr(r.out, "# TYPE receiptd_up gauge\n"
                                    "receiptd_up 0\n") != NULL,
                      "no receiptd_up 0 in: %s", r.out);
        ck_assert_ptr_null(strstr(r.out, "receiptd_receipts_accepted"));
        run_free(&r);
    }
}
END_TEST

/* The number of receipts the daemon holds, through `receipts` as CSV. */
static int
stored_receipts(void)
{
    const char *args[] = { "receipts", "--limit", "10000",
                           "--format", "csv",     NULL };
    struct run r;
    int n;

    run_ctl(&r, daemon_sock, args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    n = e2e_count_lines(r.out) - 1;
    run_free(&r);
    return n;
}

static const char *const vector_forms[] = { ".json", ".named.msgpack",
                                            ".compact.msgpack" };

/* Every shared vector, in each of its three encodings, is accepted. */
START_TEST(test_ctl_real_import_vectors)
{
    const char *suffix = vector_forms[_i];
    const char *args[64];
    char names[40][300], want[64];
    struct dirent *e;
    struct run r;
    DIR *d;
    int n = 0;

    args[n++] = "import";
    d = opendir(VECTORS);
    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL && n < 40) {
        size_t len = strlen(e->d_name), sl = strlen(suffix);

        if (len > sl && strcmp(e->d_name + len - sl, suffix) == 0 &&
            strncmp(e->d_name, "s", 1) == 0 &&
            (strcmp(suffix, ".json") != 0 ||
             strcmp(e->d_name, "index.json") != 0)) {
            snprintf(names[n], sizeof(names[n]), VECTORS "%s", e->d_name);
            args[n] = names[n];
            n++;
        }
    }
    closedir(d);
    args[n] = NULL;
    ck_assert_int_ge(n - 1, 20);

    run_ctl(&r, daemon_sock, args);
    ck_assert_msg(r.status == 0, "exit %d: %s%s", r.status, r.out, r.err);
    snprintf(want, sizeof(want), "accepted %d, rejected 0\n", n - 1);
    ck_assert_str_eq(r.out, want);
    run_free(&r);
    ck_assert_int_eq(stored_receipts(), n - 1);
}
END_TEST

/* A JSON array, JSON lines and a msgpack array of receipts. */
START_TEST(test_ctl_real_import_arrays_and_lines)
{
    const char *args[] = { "import",
                           "--source",
                           "e2e/arrays",
                           IMPORTS "array.json",
                           IMPORTS "lines.jsonl",
                           IMPORTS "array.msgpack",
                           NULL };
    const char *q[] = { "receipts", "--source", "e2e/arrays", "--format",
                        "json",     "--limit",  "100",        NULL };
    struct json_object *j, *rows;
    struct run r;
    size_t i;

    run_ctl(&r, daemon_sock, args);
    ck_assert_msg(r.status == 0, "exit %d: %s%s", r.status, r.out, r.err);
    ck_assert_str_eq(r.out, "accepted 14, already stored 0, rejected 0\n");
    run_free(&r);

    run_ctl(&r, daemon_sock, q);
    ck_assert_msg(r.status == 0, "%s", r.err);
    j = json_tokener_parse(r.out);
    ck_assert_ptr_nonnull(j);
    rows = json_object_object_get(j, "rows");
    ck_assert_uint_eq(json_object_array_length(rows), 14);
    for (i = 0; i < 14; i++)
        ck_assert_str_eq(json_object_get_string(json_object_object_get(
                             json_object_array_get_idx(rows, i), "source")),
                         "e2e/arrays");
    /* s2_u64_max went through JSON and msgpack: its counters stay exact. */
    ck_assert_ptr_nonnull(
        strstr(r.out, "\"decode_steps\": 18446744073709551615"));
    json_object_put(j);
    run_free(&r);
}
END_TEST

START_TEST(test_ctl_real_import_reports_bad_item_path)
{
    const char *args[] = { "import", IMPORTS "bad_item.jsonl", NULL };
    struct run r;

    run_ctl(&r, daemon_sock, args);
    ck_assert_int_eq(r.status, 1);
    /* JSON lines: the line of the bad item, 1-based. */
    ck_assert_msg(strstr(r.out, "bad_item.jsonl:2: invalid: "
                                "counters.decode_steps: ") != NULL,
                  "%s", r.out);
    ck_assert_ptr_nonnull(strstr(r.out, "accepted 2, rejected 1\n"));
    run_free(&r);
    ck_assert_int_eq(stored_receipts(), 2);
}
END_TEST

/* Paging with --before-id walks every receipt exactly once. */
START_TEST(test_ctl_real_receipts_paging)
{
    const char *imp[] = { "import", IMPORTS "array.json", IMPORTS "lines.jsonl",
                          NULL };
    char before[32];
    const char *page[] = { "receipts", "--limit",  "3",    "--before-id",
                           before,     "--format", "json", NULL };
    const char *first[] = {
        "receipts", "--limit", "3", "--format", "json", NULL
    };
    uint64_t last = UINT64_MAX, id;
    struct json_object *j, *rows;
    struct run r;
    int seen = 0, pages = 0;
    size_t i;

    run_ctl(&r, daemon_sock, imp);
    ck_assert_msg(r.status == 0, "%s%s", r.out, r.err);
    run_free(&r);
    for (;;) {
        run_ctl(&r, daemon_sock, pages == 0 ? first : page);
        ck_assert_msg(r.status == 0, "%s", r.err);
        j = json_tokener_parse(r.out);
        ck_assert_ptr_nonnull(j);
        rows = json_object_object_get(j, "rows");
        for (i = 0; i < json_object_array_length(rows); i++) {
            id = json_object_get_uint64(json_object_object_get(
                json_object_array_get_idx(rows, i), "receipt_id"));
            ck_assert_uint_lt(id, last);
            last = id;
            seen++;
        }
        pages++;
        if (!json_object_get_boolean(json_object_object_get(j, "truncated"))) {
            json_object_put(j);
            run_free(&r);
            break;
        }
        json_object_put(j);
        run_free(&r);
        snprintf(before, sizeof(before), "%llu", (unsigned long long)last);
        ck_assert_int_lt(pages, 10);
    }
    ck_assert_int_eq(seen, 10);
    ck_assert_int_ge(pages, 4);
}
END_TEST

/* Rows of `receipts --status S` as JSON. */
static size_t
status_rows(const char *status)
{
    const char *args[] = { "receipts", "--status", status, "--limit",
                           "10000",    "--format", "json", NULL };
    struct json_object *j, *rows;
    struct run r;
    size_t n, i;

    run_ctl(&r, daemon_sock, args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    j = json_tokener_parse(r.out);
    ck_assert_ptr_nonnull(j);
    rows = json_object_object_get(j, "rows");
    n = json_object_array_length(rows);
    for (i = 0; i < n; i++)
        ck_assert_str_eq(json_object_get_string(json_object_object_get(
                             json_object_array_get_idx(rows, i), "fallback")),
                         status);
    json_object_put(j);
    run_free(&r);
    return n;
}

/*
 * After importing every JSON vector, the receipts of each fallback status
 * match what the vectors' index says independently: backend_matches_request
 * false is a fallback; true with coverage bit 6 set is clean, else
 * unproven. The Prometheus counters agree with the total.
 */
START_TEST(test_ctl_real_receipts_status_counts)
{
    const char *args[64];
    const char *prom[] = { "stats", "--format", "prometheus", NULL };
    char names[64][300], want[64];
    struct json_object *idx, *vecs, *v, *exp;
    size_t i, n, fb = 0, clean = 0, unproven = 0;
    struct run r;
    int k = 0;

    idx = json_object_from_file(VECTORS "index.json");
    ck_assert_ptr_nonnull(idx);
    vecs = json_object_object_get(idx, "vectors");
    n = json_object_array_length(vecs);
    ck_assert_uint_gt(n, 0);
    ck_assert_uint_lt(n, 60);
    args[k++] = "import";
    for (i = 0; i < n; i++) {
        v = json_object_array_get_idx(vecs, i);
        exp = json_object_object_get(v, "expected");
        snprintf(names[i], sizeof(names[i]), VECTORS "%s.json",
                 json_object_get_string(json_object_object_get(v, "name")));
        args[k++] = names[i];
        if (!json_object_get_boolean(
                json_object_object_get(v, "backend_matches_request")))
            fb++;
        else if (json_object_get_uint64(
                     json_object_object_get(exp, "counter_coverage")) &
                 (1u << 6))
            clean++;
        else
            unproven++;
    }
    args[k] = NULL;
    json_object_put(idx);

    run_ctl(&r, daemon_sock, args);
    ck_assert_msg(r.status == 0, "exit %d: %s%s", r.status, r.out, r.err);
    run_free(&r);
    ck_assert_uint_eq(status_rows("fallback"), fb);
    ck_assert_uint_eq(status_rows("clean"), clean);
    ck_assert_uint_eq(status_rows("unproven"), unproven);

    run_ctl(&r, daemon_sock, prom);
    ck_assert_msg(r.status == 0, "%s", r.err);
    snprintf(want, sizeof(want), "\nreceiptd_receipts_accepted_total %zu\n", n);
    ck_assert_msg(strstr(r.out, want) != NULL, "%s", r.out);
    run_free(&r);
}
END_TEST

/* One receipt of the generated fleet, as the test itself sees it. */
struct fleet_item {
    int plan, graph, model, pair, fb_count, bit6;
    int batch; /* 0: imported before the mid time, 1: after */
    uint64_t coverage;
    uint64_t decode_steps;  /* bit 0; unknown on every fourth receipt */
    uint64_t compile_calls; /* bit 8; 2^64-1 on every fiftieth */
};

static const char *const fleet_pairs[][2] = {
    { "cuda", "cuda" },        { "cuda", "cpu" },
    { "cpu", "cpu" },          { "wgpu-vulkan", "wgpu-vulkan" },
    { "metal", "wgpu-metal" },
};

#define FLEET_N 400

static void
fleet_item_make(struct fleet_item *it, int i)
{
    it->plan = i % 5;
    it->graph = (i / 5) % 3;
    it->model = (i * 7) % 4;
    it->pair = (i / 2) % 5;
    it->fb_count = i % 11 == 0;
    it->bit6 = i % 3 != 0;
    it->batch = i >= FLEET_N * 3 / 4;
    it->coverage = 0x3ffffffu;
    if (!it->bit6)
        it->coverage &= ~(1u << 6);
    /* Unknown but non-zero: must not count as measured, nor as zero. */
    if (i % 4 == 0)
        it->coverage &= ~1u;
    if (i % 5 == 0)
        it->coverage &= ~(1u << 23);
    it->decode_steps = (uint64_t)i * 1000 + 7;
    it->compile_calls = i % 50 == 0 ? UINT64_MAX : (uint64_t)i;
}

static const char *
fleet_status(const struct fleet_item *it)
{
    if (strcmp(fleet_pairs[it->pair][0], fleet_pairs[it->pair][1]) != 0 ||
        it->fb_count)
        return "fallback";
    return it->bit6 ? "clean" : "unproven";
}

/* Writes items [from, to) as JSON lines, built from a vector's JSON. */
static void
fleet_write(const char *path, const struct fleet_item *items, int from, int to)
{
    struct json_object *t, *ctr;
    char buf[64];
    FILE *f = fopen(path, "w");
    int i;

    ck_assert_ptr_nonnull(f);
    t = json_object_from_file(VECTORS "s3_full_coverage_latency.json");
    ck_assert_ptr_nonnull(t);
    for (i = from; i < to; i++) {
        const struct fleet_item *it = &items[i];

        snprintf(buf, sizeof(buf), "plan-%d", it->plan);
        json_object_object_add(t, "prepared_plan_id",
                               json_object_new_string(buf));
        snprintf(buf, sizeof(buf), "graph-%d", it->graph);
        json_object_object_add(t, "graph_hash", json_object_new_string(buf));
        snprintf(buf, sizeof(buf), "model-%d", it->model);
        json_object_object_add(t, "model_instance_id",
                               json_object_new_string(buf));
        json_object_object_add(
            t, "requested_backend",
            json_object_new_string(fleet_pairs[it->pair][0]));
        json_object_object_add(
            t, "executed_backend",
            json_object_new_string(fleet_pairs[it->pair][1]));
        json_object_object_add(t, "counter_coverage",
                               json_object_new_uint64(it->coverage));
        ctr = json_object_object_get(t, "counters");
        json_object_object_add(ctr, "fallback_count",
                               json_object_new_uint64((uint64_t)it->fb_count));
        json_object_object_add(ctr, "decode_steps",
                               json_object_new_uint64(it->decode_steps));
        json_object_object_add(ctr, "compile_calls",
                               json_object_new_uint64(it->compile_calls));
        fprintf(f, "%s\n",
                json_object_to_json_string_ext(t, JSON_C_TO_STRING_PLAIN));
    }
    json_object_put(t);
    fclose(f);
}

struct filter_case {
    const char *flags[8];
    int plan, graph, model, pair, batch; /* -1: any */
    const char *status;                  /* NULL: any */
};

static const struct filter_case filter_cases[] = {
    { { NULL }, -1, -1, -1, -1, -1, NULL },
    { { "--plan", "plan-1", NULL }, 1, -1, -1, -1, -1, NULL },
    { { "--graph", "graph-2", NULL }, -1, 2, -1, -1, -1, NULL },
    { { "--model", "model-3", "--plan", "plan-0", NULL },
      0,
      -1,
      3,
      -1,
      -1,
      NULL },
    { { "--requested", "cuda", "--executed", "cpu", NULL },
      -1,
      -1,
      -1,
      1,
      -1,
      NULL },
    { { "--executed", "wgpu-metal", NULL }, -1, -1, -1, 4, -1, NULL },
    { { "--source", "fleet/late", NULL }, -1, -1, -1, -1, 1, NULL },
    { { "--status", "fallback", NULL }, -1, -1, -1, -1, -1, "fallback" },
    { { "--status", "unproven", "--plan", "plan-2", NULL },
      2,
      -1,
      -1,
      -1,
      -1,
      "unproven" },
    { { "--status", "clean", "--source", "fleet/early", NULL },
      -1,
      -1,
      -1,
      -1,
      0,
      "clean" },
};

static int
fleet_match(const struct filter_case *fc, const struct fleet_item *it)
{
    return (fc->plan < 0 || fc->plan == it->plan) &&
           (fc->graph < 0 || fc->graph == it->graph) &&
           (fc->model < 0 || fc->model == it->model) &&
           (fc->pair < 0 || fc->pair == it->pair) &&
           (fc->batch < 0 || fc->batch == it->batch) &&
           (fc->status == NULL || strcmp(fc->status, fleet_status(it)) == 0);
}

/* Rows and truncation of a `receipts` query with extra flags. */
static size_t
receipts_count(const char *const *flags, const char *more1, const char *more2)
{
    const char *args[24];
    struct json_object *j;
    struct run r;
    size_t n = 0, i;

    args[n++] = "receipts";
    args[n++] = "--limit";
    args[n++] = "10000";
    args[n++] = "--format";
    args[n++] = "json";
    for (i = 0; flags[i] != NULL; i++)
        args[n++] = flags[i];
    if (more1 != NULL) {
        args[n++] = more1;
        args[n++] = more2;
    }
    args[n] = NULL;
    run_ctl(&r, daemon_sock, args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    j = json_tokener_parse(r.out);
    ck_assert_ptr_nonnull(j);
    ck_assert(!json_object_get_boolean(json_object_object_get(j, "truncated")));
    n = json_object_array_length(json_object_object_get(j, "rows"));
    json_object_put(j);
    run_free(&r);
    return n;
}

/*
 * A generated fleet (plans, graphs, models, backend pairs, two sources, all
 * three statuses) imported in two rounds; every filter flag of `receipts`
 * gives the number of receipts the test computes on its own, and
 * --since/--until split the rounds at a time taken between them.
 */
START_TEST(test_ctl_real_receipts_filters_match_the_fleet)
{
    static struct fleet_item items[FLEET_N];
    char early[300], late[300], mid[32];
    const char *imp1[] = { "import", "--source", "fleet/early", early, NULL };
    const char *imp2[] = { "import", "--source", "fleet/late", late, NULL };
    const char *none[] = { NULL };
    size_t i, k, want;
    struct timespec ts;
    struct run r;

    for (i = 0; i < FLEET_N; i++)
        fleet_item_make(&items[i], (int)i);
    snprintf(early, sizeof(early), "%s/early.jsonl", tmpdir);
    snprintf(late, sizeof(late), "%s/late.jsonl", tmpdir);
    fleet_write(early, items, 0, FLEET_N * 3 / 4);
    fleet_write(late, items, FLEET_N * 3 / 4, FLEET_N);

    run_ctl(&r, daemon_sock, imp1);
    ck_assert_msg(r.status == 0, "%s%s", r.out, r.err);
    run_free(&r);
    /* Receive times are the daemon's clock, the same as ours here; a
     * margin on both sides keeps the split exact. */
    usleep(30000);
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(mid, sizeof(mid), "%llu",
             (unsigned long long)ts.tv_sec * 1000ull +
                 (unsigned long long)ts.tv_nsec / 1000000ull);
    usleep(30000);
    run_ctl(&r, daemon_sock, imp2);
    ck_assert_msg(r.status == 0, "%s%s", r.out, r.err);
    run_free(&r);

    for (k = 0; k < sizeof(filter_cases) / sizeof(filter_cases[0]); k++) {
        const struct filter_case *fc = &filter_cases[k];

        for (want = 0, i = 0; i < FLEET_N; i++)
            want += fleet_match(fc, &items[i]);
        /* Each filter keeps some receipts and drops others. */
        ck_assert(k == 0 || (want > 0 && want < FLEET_N));
        ck_assert_msg(receipts_count(fc->flags, NULL, NULL) == want,
                      "case %zu: want %zu", k, want);
    }
    ck_assert_uint_eq(receipts_count(none, "--since", mid), FLEET_N / 4);
    ck_assert_uint_eq(receipts_count(none, "--until", mid), FLEET_N * 3 / 4);
}
END_TEST

/* A counter's value in a fleet receipt: the varied ones, else the
 * template's. */
static uint64_t
fleet_value(const struct fleet_item *it, struct json_object *tmpl, unsigned bit)
{
    const char *path = receipt_counters[bit].path;
    const char *dot = strchr(path, '.');
    char group[16];

    if (bit == 0)
        return it->decode_steps;
    if (bit == 6)
        return (uint64_t)it->fb_count;
    if (bit == 8)
        return it->compile_calls;
    snprintf(group, sizeof(group), "%.*s", (int)(dot - path), path);
    return json_object_get_uint64(
        json_object_object_get(json_object_object_get(tmpl, group), dot + 1));
}

static void
u128_dec(unsigned __int128 v, char *out, size_t len)
{
    char tmp[48];
    size_t n = 0;

    do {
        tmp[n++] = (char)('0' + (int)(v % 10));
        v /= 10;
    } while (v > 0 && n < sizeof(tmp));
    for (size_t i = 0; i < n && i + 1 < len; i++)
        out[i] = tmp[n - 1 - i];
    out[n < len ? n : len - 1] = '\0';
}

/* Runs `receiptctl KIND --format json --limit 10000 FLAGS...` and returns
 * the parsed document (the caller puts it). */
static struct json_object *
query_json(const char *kind, const char *const *flags)
{
    const char *args[16];
    struct json_object *j;
    struct run r;
    size_t n = 0, i;

    args[n++] = kind;
    args[n++] = "--format";
    args[n++] = "json";
    args[n++] = "--limit";
    args[n++] = "10000";
    for (i = 0; flags[i] != NULL; i++)
        args[n++] = flags[i];
    args[n] = NULL;
    run_ctl(&r, daemon_sock, args);
    ck_assert_msg(r.status == 0, "%s: %s", kind, r.err);
    j = json_tokener_parse(r.out);
    ck_assert_msg(j != NULL, "%s", r.out);
    ck_assert(!json_object_get_boolean(json_object_object_get(j, "truncated")));
    run_free(&r);
    return j;
}

static uint64_t
row_u64(struct json_object *row, const char *key)
{
    struct json_object *v = json_object_object_get(row, key);

    ck_assert_msg(v != NULL && json_object_is_type(v, json_type_int),
                  "%s is not an integer", key);
    return json_object_get_uint64(v);
}

static void
check_ratio(struct json_object *row, const char *key, double want)
{
    double got = json_object_get_double(json_object_object_get(row, key));

    ck_assert_msg(got > want - 1e-9 && got < want + 1e-9, "%s: %f != %f", key,
                  got, want);
}

/* The group of a fleet receipt under --group-by by, as a row names it. */
static void
fleet_group(const struct fleet_item *it, const char *by, char *out, size_t len)
{
    if (strcmp(by, "plan") == 0)
        snprintf(out, len, "plan-%d", it->plan);
    else if (strcmp(by, "graph") == 0)
        snprintf(out, len, "graph-%d", it->graph);
    else if (strcmp(by, "model") == 0)
        snprintf(out, len, "model-%d", it->model);
    else if (strcmp(by, "backends") == 0)
        snprintf(out, len, "%s>%s", fleet_pairs[it->pair][0],
                 fleet_pairs[it->pair][1]);
    else if (strcmp(by, "source") == 0)
        snprintf(out, len, "fleet/all");
    else
        out[0] = '\0';
}

static const char *
row_str(struct json_object *row, const char *key)
{
    struct json_object *v = json_object_object_get(row, key);

    ck_assert_msg(v != NULL && json_object_is_type(v, json_type_string),
                  "row has no string %s", key);
    return json_object_get_string(v);
}

static void
row_group(struct json_object *row, const char *by, char *out, size_t len)
{
    if (strcmp(by, "plan") == 0)
        snprintf(out, len, "%s", row_str(row, "prepared_plan_id"));
    else if (strcmp(by, "graph") == 0)
        snprintf(out, len, "%s", row_str(row, "graph_hash"));
    else if (strcmp(by, "model") == 0)
        snprintf(out, len, "%s", row_str(row, "model_instance_id"));
    else if (strcmp(by, "backends") == 0)
        snprintf(out, len, "%s>%s", row_str(row, "requested_backend"),
                 row_str(row, "executed_backend"));
    else if (strcmp(by, "source") == 0)
        snprintf(out, len, "%s", row_str(row, "source"));
    else
        out[0] = '\0';
}

/* The number of distinct groups among the fleet's receipts. */
static size_t
fleet_groups(const struct fleet_item *items, const char *by)
{
    char seen[32][64], key[64];
    size_t n = 0, i, k;

    for (i = 0; i < FLEET_N; i++) {
        fleet_group(&items[i], by, key, sizeof(key));
        for (k = 0; k < n && strcmp(seen[k], key) != 0; k++)
            ;
        if (k == n) {
            ck_assert_uint_lt(n, 32);
            snprintf(seen[n++], sizeof(seen[0]), "%s", key);
        }
    }
    return n;
}

static void
check_fallbacks(const struct fleet_item *items, const char *by)
{
    const char *flags[] = { "--group-by", by, NULL };
    struct json_object *j, *rows, *row;
    char key[64], ik[64];
    size_t i, k, n;

    j = query_json("fallbacks", flags);
    rows = json_object_object_get(j, "rows");
    n = json_object_array_length(rows);
    ck_assert_msg(n == fleet_groups(items, by), "%s: %zu rows", by, n);
    for (k = 0; k < n; k++) {
        size_t want[3] = { 0, 0, 0 }, tot = 0; /* fallback clean unproven */

        row = json_object_array_get_idx(rows, k);
        row_group(row, by, key, sizeof(key));
        for (i = 0; i < FLEET_N; i++) {
            const char *st = fleet_status(&items[i]);

            fleet_group(&items[i], by, ik, sizeof(ik));
            if (strcmp(ik, key) != 0)
                continue;
            tot++;
            want[strcmp(st, "fallback") == 0 ? 0
                 : strcmp(st, "clean") == 0  ? 1
                                             : 2]++;
        }
        ck_assert_msg(tot > 0, "%s: unknown group %s", by, key);
        ck_assert_uint_eq(row_u64(row, "receipts"), tot);
        ck_assert_uint_eq(row_u64(row, "fallback"), want[0]);
        ck_assert_uint_eq(row_u64(row, "clean"), want[1]);
        ck_assert_uint_eq(row_u64(row, "unproven"), want[2]);
        check_ratio(row, "fallback_rate", (double)want[0] / (double)tot);
    }
    json_object_put(j);
}

static void
check_coverage(const struct fleet_item *items, struct json_object *tmpl,
               const char *by)
{
    const char *flags[] = { "--group-by", by, NULL };
    struct json_object *j, *rows, *row, *js;
    char key[64], ik[64], dec[48];
    size_t i, k, n, tot;
    unsigned b;

    j = query_json("coverage", flags);
    rows = json_object_object_get(j, "rows");
    n = json_object_array_length(rows);
    ck_assert_msg(n == fleet_groups(items, by) * RECEIPT_NCOUNTERS,
                  "%s: %zu rows", by, n);
    for (k = 0; k < n; k++) {
        unsigned __int128 sum = 0;
        uint64_t min = UINT64_MAX, max = 0, measured = 0, v;
        double mean, want;

        row = json_object_array_get_idx(rows, k);
        row_group(row, by, key, sizeof(key));
        b = (unsigned)row_u64(row, "bit");
        ck_assert_uint_lt(b, RECEIPT_NCOUNTERS);
        ck_assert_str_eq(row_str(row, "counter"), receipt_counters[b].path);
        for (tot = 0, i = 0; i < FLEET_N; i++) {
            fleet_group(&items[i], by, ik, sizeof(ik));
            if (strcmp(ik, key) != 0)
                continue;
            tot++;
            if (!(items[i].coverage >> b & 1))
                continue;
            v = fleet_value(&items[i], tmpl, b);
            measured++;
            sum += v;
            min = v < min ? v : min;
            max = v > max ? v : max;
        }
        ck_assert_msg(tot > 0, "%s: unknown group %s", by, key);
        ck_assert_uint_eq(row_u64(row, "receipts"), tot);
        ck_assert_uint_eq(row_u64(row, "measured"), measured);
        ck_assert_uint_eq(row_u64(row, "unknown"), tot - measured);
        check_ratio(row, "coverage", (double)measured / (double)tot);
        js = json_object_object_get(row, "sum");
        if (sum > UINT64_MAX) {
            u128_dec(sum, dec, sizeof(dec));
            ck_assert(json_object_is_type(js, json_type_string));
            ck_assert_str_eq(json_object_get_string(js), dec);
        } else {
            ck_assert_uint_eq(row_u64(row, "sum"), (uint64_t)sum);
        }
        if (measured == 0) {
            ck_assert(json_object_object_get(row, "min") == NULL);
            ck_assert(json_object_object_get(row, "mean") == NULL);
            continue;
        }
        ck_assert_uint_eq(row_u64(row, "min"), min);
        ck_assert_uint_eq(row_u64(row, "max"), max);
        mean = json_object_get_double(json_object_object_get(row, "mean"));
        want = (double)sum / (double)measured;
        ck_assert_msg(mean > want * (1 - 1e-12) && mean < want * (1 + 1e-12),
                      "%s %s bit %u: mean %f != %f", by, key, b, mean, want);
    }
    json_object_put(j);
}

/*
 * `fallbacks` and `coverage` over the generated fleet, under every
 * --group-by, equal what this test computes from the receipts it wrote:
 * counts by status and rates per group; per group and counter the measured
 * and unknown receipts and the exact sum (a decimal string past 2^64), min,
 * max and mean over measured receipts only. `fallbacks --group-by none` is
 * the fallback receipts themselves.
 */
START_TEST(test_ctl_real_fallbacks_and_coverage_match_the_fleet)
{
    static struct fleet_item items[FLEET_N];
    static const char *const fb_by[] = { "plan", "graph", "model", "backends",
                                         "source" };
    static const char *const cov_by[] = { "none", "model", "backends" };
    const char *imp[] = { "import", "--source", "fleet/all", NULL, NULL };
    const char *none_flags[] = { "--group-by", "none", NULL };
    struct json_object *j, *tmpl;
    size_t i, want = 0;
    char path[300];
    struct run r;

    for (i = 0; i < FLEET_N; i++)
        fleet_item_make(&items[i], (int)i);
    snprintf(path, sizeof(path), "%s/fleet.jsonl", tmpdir);
    fleet_write(path, items, 0, FLEET_N);
    imp[3] = path;
    run_ctl(&r, daemon_sock, imp);
    ck_assert_msg(r.status == 0, "%s%s", r.out, r.err);
    run_free(&r);

    for (i = 0; i < sizeof(fb_by) / sizeof(fb_by[0]); i++)
        check_fallbacks(items, fb_by[i]);
    j = query_json("fallbacks", none_flags);
    for (i = 0; i < FLEET_N; i++)
        want += strcmp(fleet_status(&items[i]), "fallback") == 0;
    ck_assert_uint_eq(
        json_object_array_length(json_object_object_get(j, "rows")), want);
    json_object_put(j);

    tmpl = json_object_from_file(VECTORS "s3_full_coverage_latency.json");
    ck_assert_ptr_nonnull(tmpl);
    for (i = 0; i < sizeof(cov_by) / sizeof(cov_by[0]); i++)
        check_coverage(items, tmpl, cov_by[i]);
    json_object_put(tmpl);
}
END_TEST

/* Sends op with body[0..len) on fd and reads its reply (which the caller
 * releases). */
static void
raw_request(int fd, int op, uint64_t id, const char *body, size_t len,
            struct e2e_reply *rep)
{
    ck_assert_int_eq(e2e_request(fd, op, id, 0, 0, body, len), 0);
    ck_assert_int_eq(e2e_recv(fd, 10000, rep), 0);
    ck_assert_uint_eq(rep->r.id, id);
}

/* The `stats` figure key, as an unsigned integer. */
static uint64_t
stats_u64(const char *key)
{
    const char *args[] = { "stats", "--format", "json", NULL };
    struct json_object *j, *row;
    struct run r;
    uint64_t v;

    run_ctl(&r, daemon_sock, args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    j = json_tokener_parse(r.out);
    ck_assert_ptr_nonnull(j);
    row = json_object_array_get_idx(json_object_object_get(j, "rows"), 0);
    ck_assert_ptr_nonnull(json_object_object_get(row, key));
    v = json_object_get_uint64(json_object_object_get(row, key));
    json_object_put(j);
    run_free(&r);
    return v;
}

/*
 * Payloads the daemon refused (sent around receiptctl, which would have
 * refused them itself) are listed by `quarantine`, shown decoded by
 * `quarantine show`, and `quarantine replay` sends them again as their own
 * source and reports the new refusal with its code and path (exit 1). A
 * payload refused again stays in its own row, which counts the attempts,
 * instead of being kept a second time.
 */
START_TEST(test_ctl_real_quarantine_show_and_replay)
{
    static const struct e2e_receipt good = { 3,          "plan-q", "g",
                                             "m",        "cuda",   "cuda",
                                             0x3ffffffu, 5,        0 };
    const char *list[] = { "quarantine", "--format", "json", NULL };
    char id1[32], id2[32];
    const char *show[] = { "quarantine", "show", id1, NULL };
    const char *replay1[] = { "quarantine", "replay", id1, NULL };
    const char *replay2[] = { "quarantine", "replay", id2, NULL };
    struct json_object *j, *rows, *row;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct e2e_reply rep;
    char *gb;
    size_t glen, i, n;
    uint64_t qbytes;
    struct run r;
    int fd;

    /* One refused `receipt` (schema 9), one refused item of a batch. */
    fd = e2e_connect(&daemon_d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "prod/7"), 0);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    envelope_pack_cstr(&pk, "schema_version");
    msgpack_pack_uint64(&pk, 9);
    raw_request(fd, PROTO_OP_RECEIPT, 10, sb.data, sb.size, &rep);
    ck_assert(!rep.r.ok);
    e2e_reply_free(&rep);

    gb = e2e_receipt_bytes(&good, &glen);
    ck_assert_ptr_nonnull(gb);
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_array(&pk, 2);
    msgpack_sbuffer_write(&sb, gb, glen);
    msgpack_pack_map(&pk, 1);
    envelope_pack_cstr(&pk, "schema_version");
    msgpack_pack_str_with_body(&pk, "two", 3);
    raw_request(fd, PROTO_OP_RECEIPTS, 11, sb.data, sb.size, &rep);
    ck_assert(rep.r.ok);
    ck_assert_uint_eq(e2e_get_uint(rep.r.result, "accepted"), 1);
    e2e_reply_free(&rep);
    free(gb);
    msgpack_sbuffer_destroy(&sb);
    close(fd);

    run_ctl(&r, daemon_sock, list);
    ck_assert_msg(r.status == 0, "%s", r.err);
    j = json_tokener_parse(r.out);
    ck_assert_ptr_nonnull(j);
    rows = json_object_object_get(j, "rows");
    n = json_object_array_length(rows);
    ck_assert_uint_eq(n, 2);
    id1[0] = id2[0] = '\0';
    for (i = 0; i < n; i++) {
        const char *code;

        row = json_object_array_get_idx(rows, i);
        ck_assert_str_eq(
            json_object_get_string(json_object_object_get(row, "source")),
            "prod/7");
        /* The listing does not carry the bytes. */
        ck_assert_ptr_null(json_object_object_get(row, "raw"));
        code = json_object_get_string(json_object_object_get(row, "code"));
        snprintf(strcmp(code, "unsupported_schema") == 0 ? id1 : id2, 32,
                 "%llu",
                 (unsigned long long)json_object_get_uint64(
                     json_object_object_get(row, "id")));
    }
    ck_assert_msg(id1[0] != '\0' && id2[0] != '\0', "%s", r.out);
    json_object_put(j);
    run_free(&r);
    qbytes = stats_u64("quarantine_bytes");

    run_ctl(&r, daemon_sock, show);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "payload.schema_version"));
    ck_assert_ptr_nonnull(strstr(r.out, "unsupported_schema"));
    run_free(&r);

    run_ctl(&r, daemon_sock, replay1);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "unsupported_schema") != NULL, "%s", r.err);
    ck_assert_int_eq(e2e_count_lines(r.err), 1);
    ck_assert_msg(strstr(r.out, "refused again, attempt 2") != NULL, "%s",
                  r.out);
    run_free(&r);

    run_ctl(&r, daemon_sock, replay2);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "schema_version") != NULL, "%s%s", r.out,
                  r.err);
    ck_assert_msg(strstr(r.out, "refused again, attempt 2") != NULL, "%s",
                  r.out);
    run_free(&r);

    /* Both were refused again: still 2 rows, the same ids, each with 2
     * attempts and the bytes counted once. */
    run_ctl(&r, daemon_sock, list);
    ck_assert_msg(r.status == 0, "%s", r.err);
    j = json_tokener_parse(r.out);
    ck_assert_ptr_nonnull(j);
    rows = json_object_object_get(j, "rows");
    ck_assert_msg(json_object_array_length(rows) == 2, "%s", r.out);
    for (i = 0; i < 2; i++) {
        char id[32];
        uint64_t t, last;

        row = json_object_array_get_idx(rows, i);
        snprintf(id, sizeof(id), "%llu",
                 (unsigned long long)json_object_get_uint64(
                     json_object_object_get(row, "id")));
        ck_assert_msg(strcmp(id, id1) == 0 || strcmp(id, id2) == 0, "%s",
                      r.out);
        ck_assert_msg(json_object_get_uint64(
                          json_object_object_get(row, "attempts")) == 2,
                      "%s", r.out);
        t = json_object_get_uint64(json_object_object_get(row, "time"));
        last = json_object_get_uint64(
            json_object_object_get(row, "last_attempt_at"));
        ck_assert_msg(last >= t, "%s", r.out);
    }
    json_object_put(j);
    run_free(&r);
    ck_assert_uint_eq(stats_u64("quarantine_rows"), 2);
    ck_assert_uint_eq(stats_u64("quarantine_bytes"), qbytes);
}
END_TEST

/*
 * A replay the daemon accepts (a receipt quarantined as a conflict of its
 * seq, resent without one) is stored like any write, replay_of and all,
 * and leaves its row as it was: attempts 1.
 */
START_TEST(test_ctl_real_quarantine_replay_accepted)
{
    static const struct e2e_receipt a = { 3,          "plan-r", "g",
                                          "m-first",  "cuda",   "cuda",
                                          0x3ffffffu, 5,        0 };
    static const struct e2e_receipt b = { 3,          "plan-r", "g",
                                          "m-second", "cuda",   "cpu",
                                          0x3ffffffu, 5,        0 };
    const char *list[] = { "quarantine", "--format", "json", NULL };
    const char *count[] = { "receipts", "--plan", "plan-r",
                            "--format", "json",   NULL };
    char id[32];
    const char *replay[] = { "quarantine", "replay", id, NULL };
    const struct e2e_receipt *both[] = { &a, &b };
    struct json_object *j, *rows, *row;
    struct e2e_reply rep;
    struct run r;
    size_t len;
    char *body;
    int fd, i;

    fd = e2e_connect(&daemon_d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "prod/r"), 0);
    for (i = 0; i < 2; i++) {
        body = e2e_receipt_bytes(both[i], &len);
        ck_assert_ptr_nonnull(body);
        ck_assert_int_eq(
            e2e_request(fd, PROTO_OP_RECEIPT, 20 + i, 1, 1, body, len), 0);
        ck_assert_int_eq(e2e_recv(fd, 10000, &rep), 0);
        ck_assert_int_eq(rep.r.ok, i == 0);
        e2e_reply_free(&rep);
        free(body);
    }
    close(fd);

    run_ctl(&r, daemon_sock, list);
    ck_assert_msg(r.status == 0, "%s", r.err);
    j = json_tokener_parse(r.out);
    rows = json_object_object_get(j, "rows");
    ck_assert_msg(json_object_array_length(rows) == 1, "%s", r.out);
    snprintf(
        id, sizeof(id), "%llu",
        (unsigned long long)row_u64(json_object_array_get_idx(rows, 0), "id"));
    json_object_put(j);
    run_free(&r);

    run_ctl(&r, daemon_sock, replay);
    ck_assert_msg(r.status == 0, "%s%s", r.out, r.err);
    ck_assert_msg(strstr(r.out, "replayed as receipt, receipt ") != NULL &&
                      strstr(r.out, "(fallback)") != NULL,
                  "%s", r.out);
    ck_assert_ptr_null(strstr(r.out, "refused again"));
    run_free(&r);

    run_ctl(&r, daemon_sock, count);
    ck_assert_msg(r.status == 0, "%s", r.err);
    j = json_tokener_parse(r.out);
    ck_assert_uint_eq(
        json_object_array_length(json_object_object_get(j, "rows")), 2);
    json_object_put(j);
    run_free(&r);

    run_ctl(&r, daemon_sock, list);
    j = json_tokener_parse(r.out);
    rows = json_object_object_get(j, "rows");
    ck_assert_uint_eq(json_object_array_length(rows), 1);
    row = json_object_array_get_idx(rows, 0);
    ck_assert_uint_eq(row_u64(row, "attempts"), 1);
    ck_assert_str_eq(
        json_object_get_string(json_object_object_get(row, "code")),
        "conflict");
    json_object_put(j);
    run_free(&r);
}
END_TEST

/*
 * A refused payload nested 31 deep (as deep as a frame can carry it: the
 * envelope is the 32nd level) is shown, in a table and as JSON, not
 * reported as "out of memory" (msgpack's unpacker stops at 32 levels, and
 * the printed document puts the payload 3 levels down).
 */
START_TEST(test_ctl_real_quarantine_show_deep_payload)
{
    const char *table[] = { "quarantine", "show", "1", NULL };
    const char *json[] = {
        "quarantine", "show", "1", "--format", "json", NULL
    };
    struct json_tokener *tok;
    struct json_object *j, *v;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct e2e_reply rep;
    struct run r;
    int fd, i;

    /* {"schema_version": 3, "deep": [[...[nil]...]]}: 1 + 30 levels. */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    envelope_pack_cstr(&pk, "schema_version");
    msgpack_pack_uint64(&pk, 3);
    envelope_pack_cstr(&pk, "deep");
    for (i = 0; i < 30; i++)
        msgpack_pack_array(&pk, 1);
    msgpack_pack_nil(&pk);
    fd = e2e_connect(&daemon_d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "prod/deep"), 0);
    raw_request(fd, PROTO_OP_RECEIPT, 10, sb.data, sb.size, &rep);
    ck_assert(!rep.r.ok);
    e2e_reply_free(&rep);
    msgpack_sbuffer_destroy(&sb);
    close(fd);

    run_ctl(&r, daemon_sock, table);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_ptr_null(strstr(r.err, "out of memory"));
    ck_assert_msg(strstr(r.out, "payload.schema_version") != NULL, "%s", r.out);
    ck_assert_msg(strstr(r.out, "prod/deep") != NULL, "%s", r.out);
    run_free(&r);

    run_ctl(&r, daemon_sock, json);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    tok = json_tokener_new_ex(64);
    ck_assert_ptr_nonnull(tok);
    j = json_tokener_parse_ex(tok, r.out, (int)strlen(r.out));
    ck_assert_msg(j != NULL, "not JSON: %s", r.out);
    v = json_object_object_get(
        json_object_array_get_idx(json_object_object_get(j, "rows"), 0),
        "payload");
    v = json_object_object_get(v, "deep");
    for (i = 0; i < 29; i++)
        v = json_object_array_get_idx(v, 0);
    ck_assert_msg(json_object_is_type(v, json_type_array) &&
                      json_object_array_length(v) == 1 &&
                      json_object_array_get_idx(v, 0) == NULL,
                  "the payload's innermost level is not [null]: %s", r.out);
    json_object_put(j);
    json_tokener_free(tok);
    run_free(&r);
}
END_TEST

/* A producer that lost seq 4, 7 and 8 shows up in `gaps`, as exact
 * ranges in JSON and as "4,7-8" in the table. */
START_TEST(test_ctl_real_gaps)
{
    static const struct e2e_receipt good = { 2,     "plan-g", "g", "m", "cpu",
                                             "cpu", 0x3ffu,   1,   0 };
    static const uint64_t seqs[] = { 1, 2, 3, 5, 6, 9 };
    const char *json[] = { "gaps",     "--source", "gappy/1",
                           "--format", "json",     NULL };
    const char *table[] = { "gaps", "--source", "gappy/1", NULL };
    struct json_object *j, *row;
    struct e2e_reply rep;
    struct run r;
    size_t i, len;
    char *body;
    int fd;

    body = e2e_receipt_bytes(&good, &len);
    ck_assert_ptr_nonnull(body);
    fd = e2e_connect(&daemon_d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "gappy/1"), 0);
    for (i = 0; i < sizeof(seqs) / sizeof(seqs[0]); i++) {
        ck_assert_int_eq(
            e2e_request(fd, PROTO_OP_RECEIPT, 100 + i, 1, seqs[i], body, len),
            0);
        ck_assert_int_eq(e2e_recv(fd, 10000, &rep), 0);
        ck_assert(rep.r.ok);
        e2e_reply_free(&rep);
    }
    close(fd);
    free(body);

    run_ctl(&r, daemon_sock, json);
    ck_assert_msg(r.status == 0, "%s", r.err);
    j = json_tokener_parse(r.out);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(
        json_object_array_length(json_object_object_get(j, "rows")), 1);
    row = json_object_array_get_idx(json_object_object_get(j, "rows"), 0);
    ck_assert_uint_eq(row_u64(row, "first_seq"), 1);
    ck_assert_uint_eq(row_u64(row, "last_seq"), 9);
    ck_assert_uint_eq(row_u64(row, "received"), 6);
    ck_assert_str_eq(
        json_object_to_json_string_ext(json_object_object_get(row, "missing"),
                                       JSON_C_TO_STRING_PLAIN),
        "[[4,4],[7,8]]");
    json_object_put(j);
    run_free(&r);

    run_ctl(&r, daemon_sock, table);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_msg(strstr(r.out, "  4,7-8\n") != NULL, "%s", r.out);
    run_free(&r);
}
END_TEST

/* A loopback port that was free a moment ago. */
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

/* Over TCP the daemon wants a token in hello: the right one works, a wrong
 * one is the daemon's error (exit 1), not a connection failure. */
START_TEST(test_ctl_real_tcp_token)
{
    char conf[300], listen_at[64];
    const char *extra[] = { "--config",        conf,          "--tcp",
                            listen_at,         "--log-level", "warning",
                            "--tcp-plaintext", "true",        NULL };
    const char *good[] = {
        "ping", "--tcp", listen_at, "--token", "test", NULL
    };
    const char *bad[] = {
        "stats", "--tcp", listen_at, "--token", "nope", NULL
    };
    struct run r;
    FILE *f;
    int st = 0;

    snprintf(conf, sizeof(conf), "%s/tcp.conf", tmpdir);
    f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    /* SHA-256 of "test". */
    fputs("access: {\n  tokens = ( { name = \"ctl\"; sha256 = "
          "\"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
          "\"; } );\n};\n",
          f);
    fclose(f);
    snprintf(listen_at, sizeof(listen_at), "127.0.0.1:%d", free_port());
    if (e2e_start(&daemon_d, extra) != 0) {
        size_t len;
        char *log = e2e_read_file(daemon_d.log, &len);

        ck_abort_msg("receiptd did not start: %s", log ? log : "(no log)");
    }

    run_ctl(&r, NULL, good);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "ok: receiptd/"));
    run_free(&r);

    run_ctl(&r, NULL, bad);
    ck_assert_msg(r.status == 1, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "unauthorized") != NULL, "%s", r.err);
    ck_assert_int_eq(e2e_count_lines(r.err), 1);
    run_free(&r);

    ck_assert_int_eq(e2e_stop(&daemon_d, SIGTERM, 10000, &st), 0);
    e2e_cleanup(&daemon_d);
}
END_TEST

/* A request the daemon refuses: exit 1 and its code on stderr. */
START_TEST(test_ctl_real_daemon_error_exits_1)
{
    const char *args[] = {
        "readback-check", "--plan", "no-such-plan", "--value", "v",
        "--element-type", "f32",    "--count",      "1",       NULL
    };
    struct run r;

    run_ctl(&r, daemon_sock, args);
    ck_assert_msg(r.status == 1, "exit %d: %s", r.status, r.err);
    ck_assert_int_eq(strncmp(r.err, "receiptctl: ", 12), 0);
    ck_assert_int_eq(e2e_count_lines(r.err), 1);
    ck_assert_str_eq(r.out, "");
    run_free(&r);
}
END_TEST
#endif

static Suite *
e2e_client_suite(void)
{
    Suite *s = suite_create("e2e_client");
    TCase *tc;

    tc = tcase_create("usage");
    tcase_set_timeout(tc, 30);
    tcase_add_checked_fixture(tc, setup_dir, teardown_dir);
    tcase_add_loop_test(tc, test_ctl_usage_error_exits_2, 0,
                        (int)(sizeof(usage_cases) / sizeof(usage_cases[0])));
    tcase_add_test(tc, test_ctl_no_command_prints_usage_and_exits_2);
    suite_add_tcase(s, tc);

    tc = tcase_create("help");
    tcase_set_timeout(tc, 30);
    tcase_add_checked_fixture(tc, setup_dir, teardown_dir);
    tcase_add_loop_test(tc, test_ctl_help_for_every_command, 0,
                        (int)(sizeof(commands) / sizeof(commands[0])));
    tcase_add_test(tc, test_ctl_help_lists_every_command);
    suite_add_tcase(s, tc);

    tc = tcase_create("connect");
    tcase_set_timeout(tc, 30);
    tcase_add_checked_fixture(tc, setup_dir, teardown_dir);
    tcase_add_test(tc, test_ctl_cannot_connect_exits_3);
    tcase_add_test(tc, test_ctl_import_dry_run_needs_no_daemon);
    suite_add_tcase(s, tc);

    tc = tcase_create("fake_daemon");
    tcase_set_timeout(tc, 30);
    tcase_add_checked_fixture(tc, setup_fake, teardown_fake);
    tcase_add_test(tc, test_ctl_daemon_error_exits_1_with_path);
    tcase_add_test(tc, test_ctl_query_sends_filters);
    tcase_add_test(tc, test_ctl_ping_says_hello_first);
    tcase_add_test(tc, test_ctl_tcp_sends_token_in_hello);
    tcase_add_loop_test(tc, test_ctl_every_command_in_every_format, 0,
                        (int)(sizeof(cmd_cases) / sizeof(cmd_cases[0])));
    tcase_add_test(tc, test_ctl_timeout_exits_3);
    suite_add_tcase(s, tc);

    tc = tcase_create("fake_import");
    tcase_set_timeout(tc, 30);
    tcase_add_checked_fixture(tc, setup_fake, teardown_fake);
    tcase_add_test(tc, test_ctl_import_batches_and_reports_rejections);
    tcase_add_test(tc, test_ctl_import_respects_max_batch);
    tcase_add_test(tc, test_ctl_import_json_output);
    tcase_add_test(tc, test_ctl_import_reports_each_bad_json_item);
    tcase_add_test(tc, test_ctl_import_from_stdin);
    suite_add_tcase(s, tc);

    tc = tcase_create("fake_replay");
    tcase_set_timeout(tc, 30);
    tcase_add_checked_fixture(tc, setup_fake, teardown_fake);
    tcase_add_test(tc, test_ctl_quarantine_replay);
    tcase_add_test(tc, test_ctl_quarantine_show);
    suite_add_tcase(s, tc);

#ifdef E2E_HAVE_DAEMON
    tc = tcase_create("daemon");
    tcase_add_checked_fixture(tc, setup_daemon, teardown_daemon);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_ctl_real_ping);
    tcase_add_test(tc, test_ctl_real_stats_in_every_format);
    tcase_add_test(tc, test_ctl_real_daemon_error_exits_1);
    tcase_add_test(tc, test_ctl_real_quarantine_show_and_replay);
    tcase_add_test(tc, test_ctl_real_quarantine_replay_accepted);
    tcase_add_test(tc, test_ctl_real_quarantine_show_deep_payload);
    tcase_add_test(tc, test_ctl_real_gaps);
    suite_add_tcase(s, tc);

    tc = tcase_create("daemon_tcp");
    tcase_add_checked_fixture(tc, setup_dir, teardown_dir);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_ctl_real_tcp_token);
    suite_add_tcase(s, tc);

    tc = tcase_create("daemon_import");
    tcase_add_checked_fixture(tc, setup_daemon, teardown_daemon);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_ctl_real_import_vectors, 0,
                        (int)(sizeof(vector_forms) / sizeof(vector_forms[0])));
    tcase_add_test(tc, test_ctl_real_import_arrays_and_lines);
    tcase_add_test(tc, test_ctl_real_import_reports_bad_item_path);
    tcase_add_test(tc, test_ctl_real_receipts_paging);
    tcase_add_test(tc, test_ctl_real_receipts_status_counts);
    tcase_add_test(tc, test_ctl_real_receipts_filters_match_the_fleet);
    tcase_add_test(tc, test_ctl_real_fallbacks_and_coverage_match_the_fleet);
    suite_add_tcase(s, tc);
#endif
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(e2e_client_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
