/*
 * e2e_access.c: issue 6 end to end, on the real receiptd binary.
 *
 * - Unix peers: a forked client takes a made-up uid and group list (needs
 *   root) and connects; writers write, readers only query, strangers are
 *   disconnected before a frame is read.
 * - TCP tokens: hello with a wrong or missing token is refused and the
 *   connection closed; a silent peer is closed after the hello timeout; the
 *   right token lets the peer write.
 * - systemd's side without systemd: the daemon runs under
 *   systemd-socket-activate on a Unix and a TCP socket, with NOTIFY_SOCKET
 *   and WATCHDOG_USEC pointing at this test, which checks READY=1,
 *   STATUS=, WATCHDOG=1 and STOPPING=1.
 *
 * Configuration files are written into the daemon's temporary directory.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "e2e_util.h"
#include "skip.h"

/* A made-up uid and primary group, in no list of the configuration. */
#define PEER_UID 61500
#define PEER_GID 61201

/* The TCP token; its hash comes from `receiptd --hash-token`. */
#define TOKEN "s3cret-token"

static char token_hash[65];

static void
write_file(const char *path, const char *text)
{
    ck_assert_msg(e2e_write_file(path, text) == 0, "%s: %s", path,
                  strerror(errno));
}

/* The hash of token, computed by the daemon binary itself. */
static void
hash_with_daemon(const char *token, char out[65])
{
    char cmd[600];
    FILE *p;

    snprintf(cmd, sizeof(cmd),
             "printf '%%s\\n' '%s' | %s/daemon/receiptd --hash-token", token,
             TEST_BINARY_DIR);
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(fgets(out, 65, p));
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_uint_eq(strlen(out), 64);
}

static void
hash_token_with_daemon(void)
{
    hash_with_daemon(TOKEN, token_hash);
}

static int
free_port(void)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

/* Sends hello with the given token (NULL for none); returns the reply. */
static int
hello(int fd, const char *token, struct e2e_reply *rep)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, token != NULL ? 3 : 2);
    envelope_pack_cstr(&pk, "protocol");
    msgpack_pack_uint64(&pk, 1);
    envelope_pack_cstr(&pk, "source");
    envelope_pack_cstr(&pk, "node-17/runtime-1");
    if (token != NULL) {
        envelope_pack_cstr(&pk, "token");
        envelope_pack_cstr(&pk, token);
    }
    rc = e2e_request(fd, PROTO_OP_HELLO, 1, 0, 0, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    if (rc != 0)
        return -1;
    return e2e_recv(fd, 5000, rep);
}

/* One request, one reply: 1 when ok, 0 when refused with code, -1 else. */
static int
ask(int fd, int op, uint64_t id, const void *body, size_t len, int code)
{
    struct e2e_reply rep;
    int rc = -1;

    if (e2e_request(fd, op, id, 0, 0, body, len) != 0 ||
        e2e_recv(fd, 5000, &rep) != 0) {
        fprintf(stderr, "request %llu: no reply (%s)\n", (unsigned long long)id,
                strerror(errno));
        return -1;
    }
    if (rep.r.id == id && rep.r.ok)
        rc = 1;
    else if (rep.r.id == id && !rep.r.ok && rep.r.err.code == code)
        rc = 0;
    else
        fprintf(stderr, "request %llu: ok %d, %s at \"%s\": %s\n",
                (unsigned long long)id, rep.r.ok,
                proto_code_name(rep.r.err.code), rep.r.err.path,
                rep.r.err.message);
    e2e_reply_free(&rep);
    return rc;
}

static char *
receipt_body(size_t *len)
{
    struct e2e_receipt r = {
        .schema = 3,
        .plan = "plan-1",
        .graph = "graph-1",
        .model = "model-1",
        .requested = "cuda",
        .executed = "cuda",
        .coverage = 0x7f,
        .decode_steps = 12,
        .fallback_count = 0,
    };

    return e2e_receipt_bytes(&r, len);
}

static const unsigned char stats_query[] = { 0x81, 0xa4, 'k', 'i', 'n', 'd',
                                             0xa5, 's',  't', 'a', 't', 's' };

/*
 * A write that cannot be read: {"id": 7, "op": "receipt"} and a stray
 * byte. A writer's is kept in quarantine; anyone else's is only answered,
 * so a peer that may not write cannot fill the bounded quarantine and push
 * out evidence. Returns the reply's code (0 for ok), or -1.
 */
static int
bad_write(int fd)
{
    static const unsigned char f[] = { 0x82, 0xa2, 'i',  'd', 0x07, 0xa2,
                                       'o',  'p',  0xa7, 'r', 'e',  'c',
                                       'e',  'i',  'p',  't', 0xc0 };
    struct e2e_reply rep;
    int code;

    if (e2e_send_frame(fd, f, sizeof(f)) != 0 || e2e_recv(fd, 5000, &rep) != 0)
        return -1;
    code = rep.r.ok ? 0 : rep.r.err.code;
    e2e_reply_free(&rep);
    return code;
}

/* ---- Unix peers by group. ---- */

enum role { ROLE_WRITER, ROLE_READER, ROLE_STRANGER, ROLE_COUNT };

/* Runs in the forked client after it took its credentials: 0 when the
 * daemon treated it as its role deserves, else the failing step. */
static int
unix_client(const struct e2e_daemon *d, int role)
{
    struct e2e_reply rep;
    size_t len;
    char *body;
    int fd = e2e_connect(d), rc;

    if (fd < 0)
        return 10;
    if (role == ROLE_STRANGER)
        return e2e_wait_closed(fd, 5000) == 1 ? 0 : 11;
    if (hello(fd, NULL, &rep) != 0 || !rep.r.ok)
        return 12;
    e2e_reply_free(&rep);
    if (ask(fd, PROTO_OP_PING, 2, NULL, 0, 0) != 1)
        return 13;
    if (ask(fd, PROTO_OP_QUERY, 3, stats_query, sizeof(stats_query), 0) != 1)
        return 14;
    body = receipt_body(&len);
    if (body == NULL)
        return 15;
    rc = ask(fd, PROTO_OP_RECEIPT, 4, body, len, PROTO_EUNAUTHORIZED);
    free(body);
    if (rc != (role == ROLE_WRITER ? 1 : 0))
        return 16;
    if (bad_write(fd) != PROTO_EMALFORMED)
        return 18;
    if (e2e_stat(fd, 6, "quarantine_rows") != (role == ROLE_WRITER ? 1u : 0u))
        return 19;
    /* A refused write is the reader's mistake: the connection stays. */
    if (ask(fd, PROTO_OP_PING, 5, NULL, 0, 0) != 1)
        return 17;
    close(fd);
    return 0;
}

START_TEST(test_e2e_unix_peer_roles_by_group)
{
    struct e2e_daemon d;
    struct group *gr;
    gid_t writer_gid, reader_gid;
    char conf[300], text[256];
    const char *extra[] = { "--config", conf, NULL };
    gid_t groups[2];
    int status;
    pid_t child;

    if (geteuid() != 0)
        skip_now("needs root to take other credentials");
    /* getgrnam returns a static buffer: copy each gid at once. */
    gr = getgrnam("daemon");
    ck_assert_msg(gr != NULL, "Debian's group daemon is missing");
    writer_gid = gr->gr_gid;
    gr = getgrnam("nogroup");
    ck_assert_msg(gr != NULL, "Debian's group nogroup is missing");
    reader_gid = gr->gr_gid;
    /* The configuration goes where the daemon will not look for it
     * before it exists: a file beside the build. */
    snprintf(conf, sizeof(conf), "%s/e2e_access_%ld.conf", TEST_BINARY_DIR,
             (long)getpid());
    snprintf(text, sizeof(text),
             "access: {\n    writer_groups = [ \"daemon\" ];\n"
             "    reader_groups = [ \"nogroup\" ];\n};\n");
    write_file(conf, text);
    ck_assert_int_eq(e2e_start(&d, extra), 0);
    unlink(conf);
    /* The client must reach the socket: its directory is private. */
    ck_assert_int_eq(chmod(d.dir, 0755), 0);

    child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        /* Group root opens the 0660 root:root socket file; the second
         * group decides the role (none for the stranger). */
        groups[0] = 0;
        groups[1] = _i == ROLE_WRITER ? writer_gid : reader_gid;
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (setgroups(_i == ROLE_STRANGER ? 1 : 2, groups) != 0 ||
            setgid(PEER_GID) != 0 || setuid(PEER_UID) != 0)
            _exit(2);
        _exit(unix_client(&d, _i));
    }
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "role %d: client failed at step %d (daemon log %s)", _i,
                  WIFEXITED(status) ? WEXITSTATUS(status) : -1, d.log);
    ck_assert_int_eq(e2e_stop(&d, SIGTERM, 10000, &status), 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    e2e_cleanup(&d);
}
END_TEST

/* ---- TCP tokens. ---- */

static void
start_tcp_daemon(struct e2e_daemon *d, int *port)
{
    char conf[300], text[512], tcp[64];
    const char *extra[] = { "--config",        conf,   "--tcp", tcp,
                            "--tcp-plaintext", "true", NULL };

    hash_token_with_daemon();
    *port = free_port();
    snprintf(tcp, sizeof(tcp), "127.0.0.1:%d", *port);
    snprintf(conf, sizeof(conf), "%s/e2e_access_tcp_%ld.conf", TEST_BINARY_DIR,
             (long)getpid());
    snprintf(text, sizeof(text),
             "limits: { hello_timeout = \"1s\"; };\n"
             "access: {\n    tokens = (\n"
             "        { name = \"node-17\"; sha256 = \"%s\"; }\n    );\n};\n",
             token_hash);
    write_file(conf, text);
    ck_assert_int_eq(e2e_start(d, extra), 0);
    unlink(conf);
}

START_TEST(test_e2e_tcp_token_rules)
{
    struct e2e_daemon d;
    struct e2e_reply rep;
    size_t len;
    char *body;
    int port, fd, local, status;

    start_tcp_daemon(&d, &port);

    /* A wrong token: refused, then closed. */
    fd = e2e_connect_tcp(port);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(hello(fd, "s3cret-tokem", &rep), 0);
    ck_assert(!rep.r.ok);
    ck_assert_int_eq(rep.r.err.code, PROTO_EUNAUTHORIZED);
    ck_assert_str_eq(rep.r.err.path, "token");
    e2e_reply_free(&rep);
    ck_assert_int_eq(e2e_wait_closed(fd, 5000), 1);
    close(fd);

    /* No token at all: the same. */
    fd = e2e_connect_tcp(port);
    ck_assert_int_eq(hello(fd, NULL, &rep), 0);
    ck_assert(!rep.r.ok);
    ck_assert_int_eq(rep.r.err.code, PROTO_EUNAUTHORIZED);
    e2e_reply_free(&rep);
    ck_assert_int_eq(e2e_wait_closed(fd, 5000), 1);
    close(fd);

    /* Anything before hello is refused; the hello deadline (1 s here)
     * then closes the connection. A write it cannot read is answered but
     * not quarantined (the local peer, the daemon's own uid, looks). */
    fd = e2e_connect_tcp(port);
    ck_assert_int_eq(ask(fd, PROTO_OP_PING, 9, NULL, 0, PROTO_EUNAUTHORIZED),
                     0);
    ck_assert_int_eq(bad_write(fd), PROTO_EMALFORMED);
    local = e2e_connect(&d);
    ck_assert_int_ge(local, 0);
    ck_assert_uint_eq(e2e_stat(local, 1, "quarantine_rows"), 0);
    ck_assert_int_eq(e2e_wait_closed(fd, 5000), 1);
    close(fd);

    /* The right token: the peer may write. */
    fd = e2e_connect_tcp(port);
    ck_assert_int_eq(hello(fd, TOKEN, &rep), 0);
    ck_assert_msg(rep.r.ok, "hello refused: %s", rep.r.err.message);
    e2e_reply_free(&rep);
    ck_assert_int_eq(ask(fd, PROTO_OP_PING, 2, NULL, 0, 0), 1);
    body = receipt_body(&len);
    ck_assert_ptr_nonnull(body);
    ck_assert_int_eq(ask(fd, PROTO_OP_RECEIPT, 3, body, len, 0), 1);
    free(body);
    /* ... and its unreadable write is kept. */
    ck_assert_int_eq(bad_write(fd), PROTO_EMALFORMED);
    ck_assert_uint_eq(e2e_stat(local, 2, "quarantine_rows"), 1);
    close(fd);
    close(local);

    ck_assert_int_eq(e2e_stop(&d, SIGTERM, 10000, &status), 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    e2e_cleanup(&d);
}
END_TEST

/* ---- Socket activation, readiness and the watchdog. ---- */

START_TEST(test_e2e_socket_activation_and_notify)
{
    const char *tool = "/usr/bin/systemd-socket-activate";
    char dir[200], sock[256], db[256], conf[256], log[256], notify[256];
    char tcp[64], bin[300], text[1024], got[512];
    char env_notify[300], env_wd[64], env_wdpid[64];
    struct e2e_daemon d;
    struct e2e_reply rep;
    int nfd, port, fd, status, logfd;
    pid_t child;

    if (access(tool, X_OK) != 0)
        skip_now("%s not installed (Debian package systemd)", tool);
    hash_token_with_daemon();
    snprintf(dir, sizeof(dir), "%s/e2e-act-XXXXXX",
             strlen(TEST_BINARY_DIR) > 70 ? "/tmp" : TEST_BINARY_DIR);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(sock, sizeof(sock), "%s/s", dir);
    snprintf(db, sizeof(db), "%s/receipts.db", dir);
    snprintf(conf, sizeof(conf), "%s/receiptd.conf", dir);
    snprintf(log, sizeof(log), "%s/receiptd.log", dir);
    snprintf(notify, sizeof(notify), "%s/notify", dir);
    snprintf(bin, sizeof(bin), "%s/daemon/receiptd", TEST_BINARY_DIR);
    port = free_port();
    snprintf(tcp, sizeof(tcp), "127.0.0.1:%d", port);
    /* Loop 0: systemd passes both sockets. Loop 1: it passes only the Unix
     * socket, and the daemon binds the TCP listener of its configuration
     * itself. */
    snprintf(text, sizeof(text),
             "listen: { socket = \"%s\"; tcp_plaintext = true; %s%s%s };\n"
             "store: { path = \"%s\"; };\n"
             "access: { tokens = ( { name = \"n\"; sha256 = \"%s\"; } ); };\n",
             sock, _i == 1 ? "tcp = \"" : "", _i == 1 ? tcp : "",
             _i == 1 ? "\";" : "", db, token_hash);
    write_file(conf, text);

    /* Our own NOTIFY_SOCKET. */
    nfd = e2e_notify_bind(notify);
    ck_assert_int_ge(nfd, 0);

    child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        logfd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (logfd >= 0) {
            dup2(logfd, STDERR_FILENO);
            dup2(logfd, STDOUT_FILENO);
        }
        /* Without --accept the tool execs the daemon in this very
         * process, so the watchdog is meant for our child's pid. */
        snprintf(env_notify, sizeof(env_notify), "NOTIFY_SOCKET=%s", notify);
        snprintf(env_wd, sizeof(env_wd), "WATCHDOG_USEC=400000");
        snprintf(env_wdpid, sizeof(env_wdpid), "WATCHDOG_PID=%ld",
                 (long)getpid());
        if (_i == 1)
            execl(tool, tool, "-l", sock, "--fdname=unix", "-E", env_notify,
                  "-E", env_wd, "-E", env_wdpid, bin, "--config", conf,
                  (char *)NULL);
        else
            execl(tool, tool, "-l", sock, "-l", tcp, "--fdname=unix:tcp", "-E",
                  env_notify, "-E", env_wd, "-E", env_wdpid, bin, "--config",
                  conf, (char *)NULL);
        _exit(127);
    }
    memset(&d, 0, sizeof(d));
    snprintf(d.sock, sizeof(d.sock), "%s", sock);

    /* The tool listens first; our connection starts the daemon, which
     * then accepts it from the inherited socket. */
    for (fd = -1; fd < 0;) {
        fd = e2e_connect(&d);
        if (fd < 0)
            usleep(20000);
        ck_assert_int_eq(waitpid(child, &status, WNOHANG), 0);
    }
    ck_assert_int_eq(e2e_notify_await(nfd, "READY=1", 10000, got, sizeof(got)),
                     0);
    ck_assert_int_eq(ask(fd, PROTO_OP_PING, 1, NULL, 0, 0), 1);
    close(fd);
    ck_assert_int_eq(
        e2e_notify_await(nfd, "WATCHDOG=1", 2000, got, sizeof(got)), 0);

    /* The TCP socket came from the tool (loop 0) or the configuration
     * (loop 1); either way it needs the token. */
    fd = e2e_connect_tcp(port);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(hello(fd, TOKEN, &rep), 0);
    ck_assert_msg(rep.r.ok, "hello refused: %s", rep.r.err.message);
    e2e_reply_free(&rep);
    ck_assert_int_eq(ask(fd, PROTO_OP_PING, 2, NULL, 0, 0), 1);
    close(fd);

    kill(child, SIGTERM);
    ck_assert_int_eq(
        e2e_notify_await(nfd, "STOPPING=1", 10000, got, sizeof(got)), 0);
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "daemon status %d, log %s", status, log);
    {
        size_t len;
        char *logtext = e2e_read_file(log, &len);

        ck_assert_ptr_nonnull(logtext);
        ck_assert_msg(strstr(logtext, "listening sockets from systemd") != NULL,
                      "the daemon did not adopt the sockets:\n%s", logtext);
        free(logtext);
    }
    close(nfd);
    unlink(notify);
    unlink(conf);
    unlink(log);
    unlink(db);
    {
        char extra_file[300];

        snprintf(extra_file, sizeof(extra_file), "%s-wal", db);
        unlink(extra_file);
        snprintf(extra_file, sizeof(extra_file), "%s-shm", db);
        unlink(extra_file);
    }
    unlink(sock);
    rmdir(dir);
}
END_TEST

/* ---- SIGHUP reload. ---- */

/* hello over TCP with token: 1 and the result's max_frame and max_batch
 * when accepted, 0 when refused as unauthorized, -1 otherwise. */
static int
tcp_hello(int port, const char *token, uint64_t *max_frame, uint64_t *max_batch)
{
    struct e2e_reply rep;
    int fd = e2e_connect_tcp(port), rc = -1;

    if (fd < 0 || hello(fd, token, &rep) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (rep.r.ok) {
        *max_frame = e2e_get_uint(rep.r.result, "max_frame");
        *max_batch = e2e_get_uint(rep.r.result, "max_batch");
        rc = 1;
    } else if (rep.r.err.code == PROTO_EUNAUTHORIZED) {
        rc = 0;
    }
    e2e_reply_free(&rep);
    close(fd);
    return rc;
}

START_TEST(test_e2e_sighup_reload_applies_or_keeps)
{
    char conf[300], notify[300], text[1024], tcp[64], got[512];
    char second_hash[65];
    const char *extra[] = { "--config",    conf, "--tcp",           tcp,
                            "--max-batch", "7",  "--tcp-plaintext", "true",
                            NULL };
    uint64_t frame = 0, batch = 0;
    struct e2e_daemon d;
    size_t len;
    char *log;
    int nfd, port, status;

    hash_token_with_daemon();
    hash_with_daemon("second-token", second_hash);
    port = free_port();
    snprintf(tcp, sizeof(tcp), "127.0.0.1:%d", port);
    snprintf(conf, sizeof(conf), "%s/e2e_reload_%ld.conf", TEST_BINARY_DIR,
             (long)getpid());
    snprintf(notify, sizeof(notify), "%s/e2e_reload_%ld.notify",
             TEST_BINARY_DIR, (long)getpid());
    snprintf(text, sizeof(text),
             "limits: { max_batch = 100; };\n"
             "access: { tokens = ( { name = \"a\"; sha256 = \"%s\"; } ); };\n",
             token_hash);
    write_file(conf, text);
    nfd = e2e_notify_bind(notify);
    ck_assert_int_ge(nfd, 0);
    /* The daemon inherits our environment. */
    ck_assert_int_eq(setenv("NOTIFY_SOCKET", notify, 1), 0);
    ck_assert_int_eq(e2e_start(&d, extra), 0);
    ck_assert_int_eq(e2e_notify_await(nfd, "READY=1", 10000, got, sizeof(got)),
                     0);
    ck_assert_int_eq(tcp_hello(port, TOKEN, &frame, &batch), 1);
    ck_assert_uint_eq(batch, 7); /* the flag beats the file */
    ck_assert_uint_eq(frame, 1u << 20);

    /* A new token list and a new max_frame, applied by SIGHUP. */
    snprintf(text, sizeof(text),
             "limits: { max_batch = 100; max_frame = \"2MiB\"; };\n"
             "access: { tokens = ( { name = \"b\"; sha256 = \"%s\"; } ); };\n",
             second_hash);
    write_file(conf, text);
    ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
    ck_assert_int_eq(
        e2e_notify_await(nfd, "RELOADING=1", 10000, got, sizeof(got)), 0);
    ck_assert_int_eq(e2e_notify_await(nfd, "READY=1", 10000, got, sizeof(got)),
                     0);
    ck_assert_int_eq(tcp_hello(port, "second-token", &frame, &batch), 1);
    ck_assert_uint_eq(frame, 2u << 20);
    ck_assert_uint_eq(batch, 7); /* still the flag */
    ck_assert_int_eq(tcp_hello(port, TOKEN, &frame, &batch), 0);

    /* A broken file changes nothing. */
    write_file(conf, "limits: { max_frame = ; };\n");
    ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
    ck_assert_int_eq(
        e2e_notify_await(nfd, "RELOADING=1", 10000, got, sizeof(got)), 0);
    ck_assert_int_eq(e2e_notify_await(nfd, "READY=1", 10000, got, sizeof(got)),
                     0);
    ck_assert_int_eq(tcp_hello(port, "second-token", &frame, &batch), 1);
    ck_assert_uint_eq(frame, 2u << 20);
    log = e2e_read_file(d.log, &len);
    ck_assert_ptr_nonnull(log);
    ck_assert_msg(strstr(log, ":1: syntax error; keeping the running "
                              "configuration") != NULL,
                  "no rejection in the log:\n%s", log);
    free(log);

    ck_assert_int_eq(e2e_stop(&d, SIGTERM, 10000, &status), 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_int_eq(
        e2e_notify_await(nfd, "STOPPING=1", 10000, got, sizeof(got)), 0);
    e2e_cleanup(&d);
    close(nfd);
    unlink(notify);
    unlink(conf);
}
END_TEST

static Suite *
e2e_access_suite(void)
{
    Suite *s = suite_create("e2e_access");
    TCase *tc;

    tc = tcase_create("unix_roles");
    tcase_set_tags(tc, "as_root");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_e2e_unix_peer_roles_by_group, 0, ROLE_COUNT);
    suite_add_tcase(s, tc);

    tc = tcase_create("tcp_tokens");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_e2e_tcp_token_rules);
    suite_add_tcase(s, tc);

    tc = tcase_create("sighup_reload");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_e2e_sighup_reload_applies_or_keeps);
    suite_add_tcase(s, tc);

    tc = tcase_create("socket_activation");
    tcase_set_tags(tc, "socket_activate");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_e2e_socket_activation_and_notify, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(e2e_access_suite());
    int status;

    srunner_run_all(sr, CK_NORMAL);
    status = skip_status(sr);
    srunner_free(sr);
    return status;
}
