/*
 * e2e_harden.c: the attacks and accidents of issue 17, each against the
 * real receiptd binary on a real socket and SQLite file: two daemons on one
 * store, a store SQLite can only read, a clean stop after a query, a
 * database deleted or replaced under the daemon, unauthenticated TCP peers
 * filling the connection cap, work before authentication and failed
 * authentication.
 *
 * Each test starts its own daemon (e2e_util.c) in Check's fork mode and
 * is single-threaded. docs/reliability.md ("Hardening") gives each
 * attack's figure before and after its fix.
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
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "e2e_util.h"
#include "frame.h"
#include "skip.h"

#define T 5000 /* reply timeout, ms */

static struct e2e_daemon d;

static void
start(const char *const *extra)
{
    ck_assert_msg(e2e_start(&d, extra) == 0, "receiptd did not start");
}

/* Every test that leaves its daemon running ends with a clean SIGTERM. */
static void
teardown(void)
{
    e2e_stop_clean(&d);
}

/* Sends one receipt with seq and returns the reply's code: 0 for ok, else
 * the error's code. */
static int
send_receipt(int fd, uint64_t id, uint64_t seq)
{
    struct e2e_receipt r = { .schema = 3 };
    struct e2e_reply rep;
    size_t len;
    char *body = e2e_receipt_bytes(&r, &len);
    int code;

    ck_assert_ptr_nonnull(body);
    ck_assert_int_eq(e2e_request(fd, PROTO_OP_RECEIPT, id, 1, seq, body, len),
                     0);
    free(body);
    ck_assert_msg(e2e_recv(fd, T, &rep) == 0, "receipt %llu unanswered",
                  (unsigned long long)id);
    code = rep.r.ok ? 0 : rep.r.err.code;
    e2e_reply_free(&rep);
    return code;
}

/* Sends a query {kind}; the reply stays in rep for the caller. */
static void
query(int fd, uint64_t id, const char *kind, struct e2e_reply *rep)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    envelope_pack_cstr(&pk, "kind");
    envelope_pack_cstr(&pk, kind);
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_QUERY, id, 0, 0, sb.data, sb.size), 0);
    msgpack_sbuffer_destroy(&sb);
    ck_assert_int_eq(e2e_recv(fd, T, rep), 0);
    ck_assert_msg(rep->r.ok, "query %s: %s: %s", kind,
                  proto_code_name(rep->r.err.code), rep->r.err.message);
}

/* 1 when the daemon's log holds s. */
static int
log_has(const char *path, const char *s)
{
    size_t len;
    char *text = e2e_read_file(path, &len);
    int found = text != NULL && strstr(text, s) != NULL;

    free(text);
    return found;
}

/* The receipts in a database file opened on its own, or -1 when it has no
 * receipts table (or does not open). */
static long
count_receipts(const char *path)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    long n = -1;

    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "SELECT count(*) FROM receipts", -1, &st,
                           NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        n = (long)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* Copies the file at from to to (only that file, as a naive backup does). */
static void
copy_file(const char *from, const char *to)
{
    size_t len;
    char *buf = e2e_read_file(from, &len);
    FILE *f;

    ck_assert_ptr_nonnull(buf);
    f = fopen(to, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
    free(buf);
}

/* ---- item 9: one daemon per database ---- */

/*
 * A second daemon on the same --db (its own socket) must refuse to start,
 * saying why, while the first keeps working; and a daemon whose lock is
 * held must not create or migrate the database at all.
 */
START_TEST(test_e2e_harden_second_daemon_on_one_store_refused)
{
    struct e2e_daemon d2;
    char lock[320], db[300];
    int fd, lfd, status;

    start(NULL);
    d2 = d;
    d2.pid = 0;
    snprintf(d2.sock, sizeof(d2.sock), "%s/s2", d.dir);
    snprintf(d2.log, sizeof(d2.log), "%s/receiptd2.log", d.dir);
    ck_assert_msg(e2e_restart(&d2, NULL) != 0 && !e2e_alive(&d2),
                  "a second daemon started on the same database");
    ck_assert_msg(log_has(d2.log, "in use by another receiptd"),
                  "the second daemon did not say why it refused");
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(send_receipt(fd, 1, 1), 0);
    close(fd);
    ck_assert_int_eq(e2e_stop(&d, SIGTERM, 10000, &status), 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* The lock held by someone else on a store that does not exist yet:
     * the daemon refuses before creating or migrating anything. */
    snprintf(db, sizeof(db), "%s/fresh.db", d.dir);
    snprintf(lock, sizeof(lock), "%s.lock", db);
    lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ck_assert_int_ge(lfd, 0);
    ck_assert_int_eq(flock(lfd, LOCK_EX | LOCK_NB), 0);
    {
        const char *extra[] = { "--db", db, NULL };

        ck_assert_msg(e2e_restart(&d, extra) != 0 && !e2e_alive(&d),
                      "the daemon started on a locked store");
    }
    ck_assert_msg(access(db, F_OK) != 0,
                  "the database was created although its lock was held");
    close(lfd);
    /* Released: the same daemon starts. */
    {
        const char *extra[] = { "--db", db, NULL };

        ck_assert_int_eq(e2e_restart(&d, extra), 0);
    }
}
END_TEST

/* ---- item 10: ready only when writable ---- */

/*
 * The store exists but the daemon's user may not write it (a root-owned
 * file under the service user): the daemon must refuse to start and say
 * why, not log ready and answer every write unavailable. As root the
 * daemon runs as nobody; as another user the file is made read-only.
 */
START_TEST(test_e2e_harden_readonly_store_refused)
{
    char bin[512], path[300];
    const char *argv[12];
    int status, fd, i;
    long deadline;
    pid_t pid;

    start(NULL);
    ck_assert_int_eq(e2e_stop(&d, SIGTERM, 10000, &status), 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_int_eq(chmod(d.db, 0644), 0);
    if (geteuid() != 0)
        ck_assert_int_eq(chmod(d.db, 0444), 0);
    else {
        /* nobody needs the directory (lock, socket, WAL) and the binary. */
        ck_assert_int_eq(chmod(d.dir, 0777), 0);
        unlink(d.sock);
    }
    unlink(d.log); /* the first run's "ready" */
    snprintf(bin, sizeof(bin), "%s/daemon/receiptd", TEST_BINARY_DIR);
    i = 0;
    argv[i++] = bin;
    argv[i++] = "--socket";
    argv[i++] = d.sock;
    argv[i++] = "--db";
    argv[i++] = d.db;
    argv[i] = NULL;
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        fd = open(d.log, O_WRONLY | O_CREAT | O_APPEND, 0666);
        if (fd >= 0) {
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setgid(65534) != 0 ||
                               setuid(65534) != 0))
            _exit(126);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    deadline = e2e_now_ms() + 10000;
    while (e2e_now_ms() < deadline) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            break;
        usleep(10000);
    }
    if (e2e_now_ms() >= deadline) {
        fd = e2e_connect(&d);
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        ck_abort_msg("receiptd kept running on a store it cannot write "
                     "(socket %s)",
                     fd >= 0 ? "accepting" : "not accepting");
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        skip_now("nobody cannot execute %s", bin);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) != 0,
                  "receiptd exited 0 on a store it cannot write");
    ck_assert_msg(log_has(d.log, "not writable"),
                  "receiptd did not say the store is not writable");
    ck_assert_msg(!log_has(d.log, " ready:"), "receiptd logged ready");
    snprintf(path, sizeof(path), "%s", d.db);
    ck_assert_int_eq(chmod(path, 0644), 0);
}
END_TEST

/* ---- item 5: a clean stop leaves the data in the main file ---- */

/*
 * After a query (which opens the read-only connections), SIGTERM must
 * checkpoint the WAL into the main file: a backup that copies the .db
 * alone holds every receipt.
 */
START_TEST(test_e2e_harden_clean_stop_checkpoints_into_main_file)
{
    char wal[300], copy[300];
    struct e2e_reply rep;
    struct stat st;
    int fd, status, i;

    start(NULL);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "backup"), 0);
    for (i = 1; i <= 50; i++)
        ck_assert_int_eq(send_receipt(fd, (uint64_t)i, (uint64_t)i), 0);
    query(fd, 100, "stats", &rep);
    e2e_reply_free(&rep);
    close(fd);
    ck_assert_int_eq(e2e_stop(&d, SIGTERM, 10000, &status), 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    snprintf(wal, sizeof(wal), "%s-wal", d.db);
    ck_assert_msg(stat(wal, &st) != 0 || st.st_size == 0,
                  "the WAL still holds %lld bytes after a clean stop",
                  (long long)st.st_size);
    snprintf(copy, sizeof(copy), "%s/copy.db", d.dir);
    copy_file(d.db, copy);
    ck_assert_int_eq(count_receipts(copy), 50);
    ck_assert_msg(!log_has(d.log, "final checkpoint did not complete"),
                  "the final checkpoint was reported incomplete");
}
END_TEST

/* ---- item 6: a deleted or replaced database is not acknowledged ---- */

/*
 * With the file removed (variant 0) or replaced by another file (variant
 * 1) under the running daemon, no later write may be answered ok: they are
 * answered unavailable and the log says why.
 */
START_TEST(test_e2e_harden_deleted_store_answers_unavailable)
{
    char path[300], other[300];
    uint64_t id = 1, seq = 1;
    int fd, i, ok = 0, unavailable = 0, code;

    start(NULL);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "victim"), 0);
    for (i = 0; i < 10; i++)
        ck_assert_int_eq(send_receipt(fd, id++, seq++), 0);
    if (_i == 0) {
        struct e2e_reply rep;
        msgpack_sbuffer sb;
        msgpack_packer pk;

        ck_assert_int_eq(unlink(d.db), 0);
        snprintf(path, sizeof(path), "%s-wal", d.db);
        unlink(path);
        snprintf(path, sizeof(path), "%s-shm", d.db);
        unlink(path);
        /* A query now opens the first read-only connection, which fails:
         * the error a client reads must not show the server's paths. */
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 1);
        envelope_pack_cstr(&pk, "kind");
        envelope_pack_cstr(&pk, "receipts");
        ck_assert_int_eq(
            e2e_request(fd, PROTO_OP_QUERY, 9999, 0, 0, sb.data, sb.size), 0);
        msgpack_sbuffer_destroy(&sb);
        ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
        ck_assert(!rep.r.ok);
        ck_assert_msg(strstr(rep.r.err.message, d.dir) == NULL,
                      "a client was told the server's path: %s",
                      rep.r.err.message);
        e2e_reply_free(&rep);
    } else {
        snprintf(other, sizeof(other), "%s/other.db", d.dir);
        copy_file(d.db, other);
        ck_assert_int_eq(rename(other, d.db), 0);
    }
    for (i = 0; i < 100; i++) {
        code = send_receipt(fd, id++, seq++);
        ok += code == 0;
        unavailable += code == PROTO_EUNAVAILABLE;
    }
    close(fd);
    ck_assert_msg(ok == 0,
                  "%d of 100 writes acknowledged after the store "
                  "was %s",
                  ok, _i == 0 ? "deleted" : "replaced");
    ck_assert_int_eq(unavailable, 100);
    ck_assert_msg(log_has(d.log, "was deleted or replaced"),
                  "the log does not say the database is gone");
}
END_TEST

/* ---- TCP: items 1, 3 and 4 ---- */

#define TOKEN "s3cret-token"

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

/* Starts the daemon with TCP on a free port, TOKEN's hash (from the
 * binary itself) as its one token, and the extra flags. */
static int
start_tcp(const char *limits, const char *const *more)
{
    char cmd[600], hash[80], conf[300], text[600], tcp[64];
    const char *extra[18] = { "--config",        conf,  "--tcp", tcp,
                              "--tcp-plaintext", "true" };
    int port = free_port(), i, n = 6;
    FILE *p;

    snprintf(cmd, sizeof(cmd),
             "printf '%%s\\n' '%s' | %s/daemon/receiptd --hash-token", TOKEN,
             TEST_BINARY_DIR);
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(fgets(hash, sizeof(hash), p));
    ck_assert_int_eq(pclose(p), 0);
    hash[strcspn(hash, "\n")] = '\0';
    snprintf(tcp, sizeof(tcp), "127.0.0.1:%d", port);
    snprintf(conf, sizeof(conf), "%s/e2e_harden_%ld.conf", TEST_BINARY_DIR,
             (long)getpid());
    snprintf(text, sizeof(text),
             "limits: { %s };\n"
             "access: { tokens = ( { name = \"n\"; sha256 = \"%s\"; } ); };\n",
             limits != NULL ? limits : "", hash);
    ck_assert_int_eq(e2e_write_file(conf, text), 0);
    for (i = 0; more != NULL && more[i] != NULL && n < 17; i++)
        extra[n++] = more[i];
    extra[n] = NULL;
    start(extra);
    unlink(conf);
    /* start() waits for the Unix socket, which the daemon binds after
     * the TCP one. */
    return port;
}

/* Sends hello with token (NULL: none); returns the reply's code (0 ok), or
 * -1 when there was no reply. */
static int
tcp_hello_send(int fd, const char *token)
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
    envelope_pack_cstr(&pk, "tcp-producer");
    if (token != NULL) {
        envelope_pack_cstr(&pk, "token");
        envelope_pack_cstr(&pk, token);
    }
    rc = e2e_request(fd, PROTO_OP_HELLO, 1, 0, 0, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

static int
tcp_hello(int fd, const char *token, long *ms)
{
    struct e2e_reply rep;
    long t0 = e2e_now_ms();
    int code;

    if (tcp_hello_send(fd, token) != 0 || e2e_recv(fd, T, &rep) != 0)
        return -1;
    if (ms != NULL)
        *ms = e2e_now_ms() - t0;
    code = rep.r.ok ? 0 : rep.r.err.code;
    e2e_reply_free(&rep);
    return code;
}

/* A receipt that may not be answered: its code, or -1 with no reply. */
static int
try_receipt(int fd, uint64_t id)
{
    struct e2e_receipt r = { .schema = 3 };
    struct e2e_reply rep;
    size_t len;
    char *body = e2e_receipt_bytes(&r, &len);
    int code = -1;

    ck_assert_ptr_nonnull(body);
    if (e2e_request(fd, PROTO_OP_RECEIPT, id, 0, 0, body, len) == 0 &&
        e2e_recv(fd, 2000, &rep) == 0) {
        code = rep.r.ok ? 0 : rep.r.err.code;
        e2e_reply_free(&rep);
    }
    free(body);
    return code;
}

#define SILENT_PEERS 150

/*
 * Item 1: TCP peers that never send a byte, more than max_connections of
 * them, must not keep honest producers out: 20 local producers and one
 * authenticated TCP producer all get their receipts stored.
 */
START_TEST(test_e2e_harden_unauthenticated_peers_do_not_fill_the_cap)
{
    const char *more[] = { "--max-connections", "100", NULL };
    int silent[SILENT_PEERS], honest[20], port, authed, i, ok = 0, n = 0;

    port = start_tcp(NULL, more);
    authed = e2e_connect_tcp(port);
    ck_assert_int_ge(authed, 0);
    ck_assert_int_eq(tcp_hello(authed, TOKEN, NULL), 0);
    for (i = 0; i < SILENT_PEERS; i++) {
        silent[i] = e2e_connect_tcp(port);
        n += silent[i] >= 0;
    }
    ck_assert_int_eq(n, SILENT_PEERS);
    usleep(300 * 1000); /* every one accepted (or refused) */
    for (i = 0; i < 20; i++) {
        honest[i] = e2e_connect(&d);
        ck_assert_int_ge(honest[i], 0);
    }
    for (i = 0; i < 20; i++) {
        ok += e2e_hello(honest[i], "honest") == 0 &&
              try_receipt(honest[i], 2) == 0;
        close(honest[i]);
    }
    printf("unauth_cap: %d of 20 local producers stored a receipt past %d "
           "silent TCP peers (max_connections 100)\n",
           ok, SILENT_PEERS);
    ck_assert_msg(ok == 20,
                  "%d of 20 local producers got in past %d silent TCP peers",
                  ok, SILENT_PEERS);
    ck_assert_int_eq(try_receipt(authed, 3), 0);
    close(authed);
    for (i = 0; i < SILENT_PEERS; i++)
        close(silent[i]);
}
END_TEST

/*
 * Item 3: before hello authenticates it, a TCP peer may send only a small
 * frame (variant 0: a 1 MiB frame is refused as soon as its length is
 * read); a Unix peer that sends no request is closed after hello_timeout,
 * not after the idle timeout (variant 1).
 */
START_TEST(test_e2e_harden_no_work_before_authentication)
{
    const char *more[] = { "--hello-timeout-ms", "1000", NULL };
    unsigned char hdr[FRAME_HEADER_SIZE];
    char nils[1000];
    struct e2e_reply rep;
    long t0;
    int port, fd;

    port = start_tcp(NULL, more);
    if (_i == 0) {
        fd = e2e_connect_tcp(port);
        ck_assert_int_ge(fd, 0);
        frame_put_header(hdr, 1u << 20);
        memset(nils, 0xc0, sizeof(nils));
        nils[0] = (char)0xdd; /* array 32 of what follows */
        ck_assert_int_eq(e2e_send_all(fd, hdr, sizeof(hdr)), 0);
        ck_assert_int_eq(e2e_send_all(fd, nils, sizeof(nils)), 0);
        ck_assert_msg(e2e_recv(fd, 500, &rep) == 0,
                      "no reply to a 1 MiB frame before hello");
        ck_assert(!rep.r.ok);
        ck_assert_int_eq(rep.r.err.code, PROTO_ETOO_LARGE);
        e2e_reply_free(&rep);
        ck_assert(e2e_wait_closed(fd, 1000));
        close(fd);
        /* Authenticated, the same frame size is the daemon's max_frame
         * again: a 64 KiB batch goes through. */
        fd = e2e_connect_tcp(port);
        ck_assert_int_eq(tcp_hello(fd, TOKEN, NULL), 0);
        {
            msgpack_sbuffer sb;
            msgpack_packer pk;
            struct e2e_receipt r = { .schema = 3 };
            int i;

            msgpack_sbuffer_init(&sb);
            msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
            msgpack_pack_array(&pk, 100);
            for (i = 0; i < 100; i++)
                ck_assert_int_eq(e2e_pack_receipt(&pk, &r), 0);
            ck_assert_uint_gt(sb.size, 8192);
            ck_assert_int_eq(
                e2e_request(fd, PROTO_OP_RECEIPTS, 2, 0, 0, sb.data, sb.size),
                0);
            msgpack_sbuffer_destroy(&sb);
            ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
            ck_assert(rep.r.ok);
            e2e_reply_free(&rep);
        }
        close(fd);
    } else {
        fd = e2e_connect(&d);
        ck_assert_int_ge(fd, 0);
        t0 = e2e_now_ms();
        ck_assert_msg(e2e_wait_closed(fd, 5000),
                      "a silent Unix peer was still open after 5 s");
        printf("preauth: a silent Unix peer was closed after %ld ms "
               "(hello_timeout 1000 ms)\n",
               e2e_now_ms() - t0);
        ck_assert_int_ge(e2e_now_ms() - t0, 800);
        close(fd);
        /* One that sent a request (a ping, no hello) keeps the idle
         * timeout. */
        fd = e2e_connect(&d);
        ck_assert_int_eq(e2e_request(fd, PROTO_OP_PING, 1, 0, 0, NULL, 0), 0);
        ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
        e2e_reply_free(&rep);
        ck_assert_msg(!e2e_wait_closed(fd, 2000),
                      "a Unix peer that sent a request was closed within 2 s");
        close(fd);
    }
}
END_TEST

/*
 * Item 4: wrong tokens are counted in stats, logged (rate-limited: one
 * line for a burst) and, from one address, answered later each time; the
 * right token from that address is answered at once.
 */
START_TEST(test_e2e_harden_failed_authentication_counted_logged_slowed)
{
    long ms = 0, total = 0, last = 0;
    size_t len;
    char *text, *p;
    int port, fd, i, lines = 0;

    port = start_tcp(NULL, NULL);
    for (i = 0; i < 8; i++) {
        fd = e2e_connect_tcp(port);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(tcp_hello(fd, "wrong", &ms), PROTO_EUNAUTHORIZED);
        total += ms;
        last = ms;
        close(fd);
    }
    printf("auth_fail: 8 wrong tokens from one address took %ld ms, the "
           "last %ld ms\n",
           total, last);
    ck_assert_msg(total >= 1000 && last >= 500,
                  "8 wrong tokens took %ld ms, the last %ld ms", total, last);
    fd = e2e_connect_tcp(port);
    ck_assert_int_eq(tcp_hello(fd, TOKEN, &ms), 0);
    ck_assert_msg(ms < 300, "the right token waited %ld ms", ms);
    ck_assert_uint_eq(e2e_stat(fd, 9, "auth_failures"), 8);
    close(fd);
    text = e2e_read_file(d.log, &len);
    ck_assert_ptr_nonnull(text);
    for (p = text; (p = strstr(p, "authentication failed")) != NULL; p++)
        lines++;
    free(text);
    ck_assert_msg(lines == 1, "%d log lines for 8 failures in a burst", lines);
}
END_TEST

/* ---- item 8: retention and the wall clock ---- */

/*
 * With retention on (an hour), the daemon's wall clock steps 2 days ahead
 * for 3 s (lib/clockstep_preload.c) while receipts keep arriving: nothing
 * under a minute old may be pruned, and the jump is logged.
 */
START_TEST(test_e2e_harden_retention_ignores_a_clock_step)
{
    const char *flags[] = { "--retention-age-s", "3600", "--prune-idle-ms",
                            "50", NULL };
    char clockf[300];
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct e2e_receipt r = { .schema = 3 };
    struct e2e_reply rep;
    uint64_t pruned, accepted;
    int fd, i;

    snprintf(clockf, sizeof(clockf), "%s/e2e_harden_clock_%ld", TEST_BINARY_DIR,
             (long)getpid());
    unlink(clockf);
    e2e_preload("clockstep_preload", NULL);
    setenv("RECEIPTD_CLOCK_FILE", clockf, 1);
    start(flags);
    e2e_preload_end();

    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "clock"), 0);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 1000);
    for (i = 0; i < 1000; i++)
        ck_assert_int_eq(e2e_pack_receipt(&pk, &r), 0);
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_RECEIPTS, 1, 1, 1, sb.data, sb.size), 0);
    msgpack_sbuffer_destroy(&sb);
    ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
    ck_assert(rep.r.ok);
    e2e_reply_free(&rep);
    usleep(300 * 1000); /* a few quiet moments at the right time */

    ck_assert_int_eq(e2e_write_file(clockf, "172800000\n"), 0);
    for (i = 0; i < 30; i++) {
        ck_assert_int_eq(
            send_receipt(fd, (uint64_t)(10 + i), (uint64_t)(10 + i)), 0);
        usleep(100 * 1000);
    }
    ck_assert_int_eq(e2e_write_file(clockf, "0\n"), 0);
    usleep(500 * 1000);
    unlink(clockf);
    pruned = e2e_stat(fd, 100, "pruned");
    accepted = e2e_stat(fd, 101, "accepted");
    close(fd);
    printf("retention: a +2 d clock step for 3 s pruned %llu of %llu "
           "receipts under a minute old\n",
           (unsigned long long)pruned, (unsigned long long)accepted);
    ck_assert_uint_eq(accepted, 1030);
    ck_assert_uint_eq(pruned, 0);
    ck_assert_msg(log_has(d.log, "wall clock moved"),
                  "the clock jump was not logged");
}
END_TEST

/* ---- item 2: reply memory ---- */

#ifdef __SANITIZE_ADDRESS__
#define REPLY_RSS_LIMIT_KB (640 * 1024)
#else
#define REPLY_RSS_LIMIT_KB (200 * 1024)
#endif
#define HEAVY_READERS 10
#define HEAVY_QUERIES 16

/*
 * Readers that pipeline heavy `receipts` queries (10,000 rows, several MB
 * each) and never read: with max_unsent 64 KiB the daemon's memory must
 * stay bounded (one connection owes at most its max_unsent and one reply;
 * all of them together max_pending), while a producer keeps writing.
 */
START_TEST(test_e2e_harden_reply_memory_bounded)
{
    const char *flags[] = { "--max-unsent-bytes", "64KiB", NULL };
    msgpack_sbuffer sb, qb;
    msgpack_packer pk;
    struct e2e_receipt r = { .schema = 3 };
    struct e2e_reply rep;
    int fd, readers[HEAVY_READERS], i, j, rcv = 4096;
    long rss, peak = 0, base, t0;

    start(flags);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "heavy"), 0);
    msgpack_sbuffer_init(&sb);
    for (i = 0; i < 10; i++) {
        sb.size = 0;
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_array(&pk, 1000);
        for (j = 0; j < 1000; j++)
            ck_assert_int_eq(e2e_pack_receipt(&pk, &r), 0);
        ck_assert_int_eq(e2e_request(fd, PROTO_OP_RECEIPTS, (uint64_t)i + 1, 0,
                                     0, sb.data, sb.size),
                         0);
        ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
        ck_assert(rep.r.ok);
        e2e_reply_free(&rep);
    }
    msgpack_sbuffer_destroy(&sb);
    base = e2e_proc_kb(d.pid, "VmRSS:");

    msgpack_sbuffer_init(&qb);
    msgpack_packer_init(&pk, &qb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    envelope_pack_cstr(&pk, "kind");
    envelope_pack_cstr(&pk, "receipts");
    envelope_pack_cstr(&pk, "limit");
    msgpack_pack_uint64(&pk, 10000);
    for (i = 0; i < HEAVY_READERS; i++) {
        readers[i] = e2e_connect(&d);
        ck_assert_int_ge(readers[i], 0);
        setsockopt(readers[i], SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
        for (j = 0; j < HEAVY_QUERIES; j++)
            ck_assert_int_eq(e2e_request(readers[i], PROTO_OP_QUERY,
                                         (uint64_t)j + 1, 0, 0, qb.data,
                                         qb.size),
                             0);
    }
    msgpack_sbuffer_destroy(&qb);
    /* Whatever the daemon will compute for them is computed within a few
     * seconds; the peak is what they hold. A producer still writes. */
    t0 = e2e_now_ms();
    i = 100;
    while (e2e_now_ms() - t0 < 6000) {
        rss = e2e_proc_kb(d.pid, "VmRSS:");
        if (rss > peak)
            peak = rss;
        ck_assert_int_eq(send_receipt(fd, (uint64_t)i, (uint64_t)i), 0);
        i++;
        usleep(200 * 1000);
    }
    printf("reply_memory: %d readers x %d pipelined 10,000-row queries, "
           "never read, max_unsent 64 KiB: peak RSS %ld MiB (%ld MiB "
           "before they came)\n",
           HEAVY_READERS, HEAVY_QUERIES, peak / 1024, base / 1024);
    for (i = 0; i < HEAVY_READERS; i++)
        close(readers[i]);
    close(fd);
    ck_assert_msg(peak < REPLY_RSS_LIMIT_KB,
                  "the daemon reached %ld MiB for readers that never read",
                  peak / 1024);
}
END_TEST

/* ---- item 12: quarantine amplification ---- */

/*
 * One `receipts` frame of 10,000 nil items (10 KB) must make one
 * quarantine row, not 10,000, and a reply of the same order as the
 * request; the row holds the rejected items as one array (replayable as a
 * batch), the reply names the first 100 and counts them all.
 */
START_TEST(test_e2e_harden_quarantine_one_row_per_batch)
{
    char *nils;
    size_t nlen = 3 + 10000;
    msgpack_sbuffer sb, qb;
    msgpack_packer pk;
    struct e2e_receipt r = { .schema = 3 };
    struct e2e_reply rep;
    const msgpack_object *rej, *rows, *raw;
    msgpack_unpacked up;
    uint64_t qid;
    size_t replylen;
    int fd;

    start(NULL);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "nils"), 0);
    nils = malloc(nlen);
    ck_assert_ptr_nonnull(nils);
    nils[0] = (char)0xdc; /* array 16 of 10,000 */
    nils[1] = (char)(10000 >> 8);
    nils[2] = (char)(10000 & 0xff);
    memset(nils + 3, 0xc0, 10000);
    ck_assert_int_eq(e2e_request(fd, PROTO_OP_RECEIPTS, 1, 0, 0, nils, nlen),
                     0);
    free(nils);
    ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
    ck_assert(rep.r.ok);
    replylen = rep.len;
    rej = e2e_get(rep.r.result, "rejected");
    ck_assert_ptr_nonnull(rej);
    ck_assert_uint_eq(rej->via.array.size, 100);
    ck_assert_uint_eq(e2e_get_uint(rep.r.result, "rejected_count"), 10000);
    e2e_reply_free(&rep);
    printf("quarantine: 10,000 nil items (10 KB) made %llu quarantine row(s) "
           "and a reply of %zu bytes\n",
           (unsigned long long)e2e_stat(fd, 2, "quarantine_rows"), replylen);
    ck_assert_uint_eq(e2e_stat(fd, 3, "quarantine_rows"), 1);
    ck_assert_uint_lt(replylen, 20000);

    /* Two bad items among good ones: one row, holding both as an array. */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 4);
    ck_assert_int_eq(e2e_pack_receipt(&pk, &r), 0);
    msgpack_pack_nil(&pk);
    ck_assert_int_eq(e2e_pack_receipt(&pk, &r), 0);
    msgpack_pack_uint64(&pk, 5);
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_RECEIPTS, 4, 0, 0, sb.data, sb.size), 0);
    msgpack_sbuffer_destroy(&sb);
    ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
    ck_assert(rep.r.ok);
    ck_assert_uint_eq(e2e_get_uint(rep.r.result, "accepted"), 2);
    ck_assert_uint_eq(e2e_get(rep.r.result, "rejected")->via.array.size, 2);
    e2e_reply_free(&rep);
    ck_assert_uint_eq(e2e_stat(fd, 5, "quarantine_rows"), 2);
    query(fd, 6, "quarantine", &rep);
    rows = e2e_get(rep.r.result, "rows");
    ck_assert_ptr_nonnull(rows);
    ck_assert_uint_eq(rows->via.array.size, 2);
    qid = e2e_get_uint(&rows->via.array.ptr[0], "id");
    ck_assert(e2e_get_str_eq(&rows->via.array.ptr[0], "path", "[1]"));
    e2e_reply_free(&rep);
    msgpack_sbuffer_init(&qb);
    msgpack_packer_init(&pk, &qb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    envelope_pack_cstr(&pk, "kind");
    envelope_pack_cstr(&pk, "quarantine");
    envelope_pack_cstr(&pk, "id");
    msgpack_pack_uint64(&pk, qid);
    envelope_pack_cstr(&pk, "raw");
    msgpack_pack_true(&pk);
    ck_assert_int_eq(e2e_request(fd, PROTO_OP_QUERY, 7, 0, 0, qb.data, qb.size),
                     0);
    msgpack_sbuffer_destroy(&qb);
    ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
    ck_assert(rep.r.ok);
    rows = e2e_get(rep.r.result, "rows");
    ck_assert_uint_eq(rows->via.array.size, 1);
    raw = e2e_get(&rows->via.array.ptr[0], "raw");
    ck_assert_ptr_nonnull(raw);
    ck_assert_int_eq(raw->type, MSGPACK_OBJECT_BIN);
    msgpack_unpacked_init(&up);
    ck_assert_int_eq(
        msgpack_unpack_next(&up, raw->via.bin.ptr, raw->via.bin.size, NULL),
        MSGPACK_UNPACK_SUCCESS);
    ck_assert_int_eq(up.data.type, MSGPACK_OBJECT_ARRAY);
    ck_assert_uint_eq(up.data.via.array.size, 2);
    ck_assert_int_eq(up.data.via.array.ptr[0].type, MSGPACK_OBJECT_NIL);
    ck_assert_uint_eq(up.data.via.array.ptr[1].via.u64, 5);
    msgpack_unpacked_destroy(&up);
    e2e_reply_free(&rep);
    close(fd);
}
END_TEST

/* ---- item 11: unknown keys validated ---- */

/* A valid receipt with one more key, key, whose value is depth arrays
 * around a string (bad_utf8: the bytes ff fe). Returns the code of the
 * reply (0 ok) and its path in path. */
static int
receipt_with_unknown(int fd, uint64_t id, const char *key, int depth,
                     int bad_utf8, char *path, size_t cap)
{
    struct e2e_receipt r = { .schema = 3 };
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct e2e_reply rep;
    size_t len;
    char *body = e2e_receipt_bytes(&r, &len);
    int i, code;

    ck_assert_ptr_nonnull(body);
    /* The receipt is a fixmap: one more entry. */
    ck_assert_uint_eq((unsigned char)body[0] & 0xf0u, 0x80u);
    ck_assert_uint_lt((unsigned char)body[0] & 0x0fu, 15);
    body[0]++;
    msgpack_sbuffer_init(&sb);
    msgpack_sbuffer_write(&sb, body, len);
    free(body);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    envelope_pack_cstr(&pk, key);
    for (i = 0; i < depth; i++)
        msgpack_pack_array(&pk, 1);
    if (bad_utf8) {
        msgpack_pack_str(&pk, 2);
        msgpack_pack_str_body(&pk, "\xff\xfe", 2);
    } else
        envelope_pack_cstr(&pk, "ok");
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_RECEIPT, id, 0, 0, sb.data, sb.size), 0);
    msgpack_sbuffer_destroy(&sb);
    ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
    code = rep.r.ok ? 0 : rep.r.err.code;
    snprintf(path, cap, "%s", rep.r.ok ? "" : rep.r.err.path);
    e2e_reply_free(&rep);
    return code;
}

/*
 * Unknown keys are kept and returned by queries, so their values must be
 * what the readers of a reply accept: invalid UTF-8 is refused naming the
 * key, and so is a value nested deeper than the reply leaves room for;
 * the deepest accepted one comes back through receiptctl as JSON.
 */
START_TEST(test_e2e_harden_unknown_keys_validated)
{
    char path[300], cmd[900], out[256];
    FILE *p;
    int fd, rc;

    start(NULL);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(
        receipt_with_unknown(fd, 1, "x_bad", 0, 1, path, sizeof(path)),
        PROTO_EINVALID);
    ck_assert_str_eq(path, "x_bad");
    ck_assert_int_eq(
        receipt_with_unknown(fd, 2, "x_deep", 28, 0, path, sizeof(path)),
        PROTO_EINVALID);
    ck_assert_str_eq(path, "x_deep");
    ck_assert_int_eq(
        receipt_with_unknown(fd, 3, "x_deep", 27, 0, path, sizeof(path)), 0);
    close(fd);
    snprintf(cmd, sizeof(cmd),
             "%s/client/receiptctl --socket '%s' receipts --format json "
             ">/dev/null 2>&1; echo $?",
             TEST_BINARY_DIR, d.sock);
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(fgets(out, sizeof(out), p));
    pclose(p);
    rc = atoi(out);
    ck_assert_msg(rc == 0,
                  "receiptctl receipts exited %d on the deepest accepted "
                  "unknown value",
                  rc);
}
END_TEST

/* ---- smaller items ---- */

/* Run by hand with umask 0, the daemon's store files are still not
 * readable by others nor writable by the group (the lock file, which holds
 * only a pid, is 0644 on purpose). */
START_TEST(test_e2e_harden_store_files_private_whatever_the_umask)
{
    const char *suffix[] = { "", "-wal", "-shm" };
    char path[320];
    struct stat st;
    mode_t old = umask(0);
    size_t i;
    int fd;

    start(NULL);
    umask(old);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(send_receipt(fd, 1, 1), 0);
    for (i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
        snprintf(path, sizeof(path), "%s%s", d.db, suffix[i]);
        if (stat(path, &st) != 0)
            continue;
        ck_assert_msg((st.st_mode & 0027) == 0, "%s has mode %04o", path,
                      (unsigned)(st.st_mode & 07777));
    }
    close(fd);
}
END_TEST

/*
 * Retention under a load that never leaves the writer idle for
 * prune_idle_ms (1 s): a write every 100 ms for 8 s. Receipts older than
 * the retention age (1 s) must still be pruned.
 */
START_TEST(test_e2e_harden_retention_prunes_under_constant_load)
{
    const char *flags[] = { "--retention-age-s", "1", "--prune-idle-ms", "1000",
                            NULL };
    uint64_t id = 1, pruned;
    long t0;
    int fd, i;

    start(flags);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "busy"), 0);
    for (i = 0; i < 50; i++, id++)
        ck_assert_int_eq(send_receipt(fd, id, id), 0);
    t0 = e2e_now_ms();
    while (e2e_now_ms() - t0 < 8000) {
        ck_assert_int_eq(send_receipt(fd, id, id), 0);
        id++;
        usleep(100 * 1000);
    }
    pruned = e2e_stat(fd, 1000000, "pruned");
    close(fd);
    printf("busy_prune: a write every 100 ms for 8 s, retention 1 s: %llu "
           "of %llu receipts pruned\n",
           (unsigned long long)pruned, (unsigned long long)(id - 1));
    ck_assert_uint_ge(pruned, 50);
}
END_TEST

/*
 * The daemon's loop stalls (SIGSTOP) past the hello and frame deadlines
 * while the peers' bytes arrive: on SIGCONT a TCP hello sent during the
 * stall is answered, and a Unix frame whose second half came during the
 * stall is answered too, instead of both connections being closed.
 */
START_TEST(test_e2e_harden_loop_stall_reads_before_deadlines)
{
    const char *more[] = { "--hello-timeout-ms", "500", "--frame-timeout-ms",
                           "500", NULL };
    unsigned char hdr[FRAME_HEADER_SIZE];
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct e2e_reply rep;
    int port, tfd, ufd;

    port = start_tcp(NULL, more);
    tfd = e2e_connect_tcp(port);
    ck_assert_int_ge(tfd, 0);
    ufd = e2e_connect(&d);
    ck_assert_int_ge(ufd, 0);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    envelope_request(&pk, PROTO_OP_PING, 7, 0, 0, 0);
    frame_put_header(hdr, (uint32_t)sb.size);
    ck_assert_int_eq(e2e_send_all(ufd, hdr, sizeof(hdr)), 0);
    usleep(100 * 1000); /* the frame has begun */
    ck_assert_int_eq(kill(d.pid, SIGSTOP), 0);
    ck_assert_int_eq(e2e_send_all(ufd, sb.data, sb.size), 0);
    msgpack_sbuffer_destroy(&sb);
    ck_assert_int_eq(tcp_hello_send(tfd, TOKEN), 0);
    usleep(1500 * 1000);
    ck_assert_int_eq(kill(d.pid, SIGCONT), 0);
    ck_assert_msg(e2e_recv(tfd, T, &rep) == 0,
                  "the hello sent during the stall was not answered");
    ck_assert_msg(rep.r.ok, "hello: %s", rep.r.err.message);
    e2e_reply_free(&rep);
    ck_assert_msg(e2e_recv(ufd, T, &rep) == 0,
                  "the frame completed during the stall was not answered");
    ck_assert(rep.r.ok);
    ck_assert_uint_eq(rep.r.id, 7);
    e2e_reply_free(&rep);
    close(tfd);
    close(ufd);
}
END_TEST

/* The SHA-256 of token in hex, from the binary itself. */
static void
hash_of(const char *token, char out[80])
{
    char cmd[600];
    FILE *p;

    snprintf(cmd, sizeof(cmd),
             "printf '%%s\\n' '%s' | %s/daemon/receiptd --hash-token", token,
             TEST_BINARY_DIR);
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(fgets(out, 80, p));
    ck_assert_int_eq(pclose(p), 0);
    out[strcspn(out, "\n")] = '\0';
}

/*
 * A token removed from the configuration by SIGHUP stops working on the
 * connections it already authenticated: they are closed; a connection of
 * a token that stays keeps working.
 */
START_TEST(test_e2e_harden_removed_token_closes_its_connections)
{
    char ha[80], hb[80], conf[300], text[600], tcp[64];
    const char *extra[] = { "--config",        conf,   "--tcp", tcp,
                            "--tcp-plaintext", "true", NULL };
    struct e2e_reply rep;
    int port = free_port(), fa, fb;

    hash_of("token-a", ha);
    hash_of("token-b", hb);
    snprintf(tcp, sizeof(tcp), "127.0.0.1:%d", port);
    snprintf(conf, sizeof(conf), "%s/e2e_harden_hup_%ld.conf", TEST_BINARY_DIR,
             (long)getpid());
    snprintf(text, sizeof(text),
             "access: { tokens = ( { name = \"a\"; sha256 = \"%s\"; },\n"
             "                     { name = \"b\"; sha256 = \"%s\"; } ); };\n",
             ha, hb);
    ck_assert_int_eq(e2e_write_file(conf, text), 0);
    start(extra);
    fa = e2e_connect_tcp(port);
    fb = e2e_connect_tcp(port);
    ck_assert_int_eq(tcp_hello(fa, "token-a", NULL), 0);
    ck_assert_int_eq(tcp_hello(fb, "token-b", NULL), 0);
    snprintf(text, sizeof(text),
             "access: { tokens = ( { name = \"b\"; sha256 = \"%s\"; } ); };\n",
             hb);
    ck_assert_int_eq(e2e_write_file(conf, text), 0);
    ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
    ck_assert_msg(e2e_wait_closed(fa, 3000),
                  "a connection of the removed token is still open");
    ck_assert_int_eq(e2e_request(fb, PROTO_OP_PING, 2, 0, 0, NULL, 0), 0);
    ck_assert_int_eq(e2e_recv(fb, T, &rep), 0);
    ck_assert(rep.r.ok);
    e2e_reply_free(&rep);
    close(fa);
    close(fb);
    unlink(conf);
}
END_TEST

/* A wrong-typed body and a key that is not UTF-8 name their field. */
START_TEST(test_e2e_harden_paths_never_empty)
{
    static const char str_body[] = { (char)0xa1, 'x' };
    /* {"schema_version": 3, "\xff": 1}: a key that is not UTF-8. */
    static const char bad_key[] = { (char)0x82, (char)0xae, 's',        'c',
                                    'h',        'e',        'm',        'a',
                                    '_',        'v',        'e',        'r',
                                    's',        'i',        'o',        'n',
                                    3,          (char)0xa1, (char)0xff, 1 };
    struct e2e_reply rep;
    int fd;

    start(NULL);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_RECEIPT, 1, 0, 0, str_body, sizeof(str_body)),
        0);
    ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
    ck_assert(!rep.r.ok);
    ck_assert_str_eq(rep.r.err.path, "body");
    e2e_reply_free(&rep);
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_RECEIPTS, 2, 0, 0, str_body, sizeof(str_body)),
        0);
    ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
    ck_assert(!rep.r.ok);
    ck_assert_str_eq(rep.r.err.path, "body");
    e2e_reply_free(&rep);
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_RECEIPT, 3, 0, 0, bad_key, sizeof(bad_key)),
        0);
    ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
    ck_assert(!rep.r.ok);
    ck_assert_str_eq(rep.r.err.path, "\\xff");
    e2e_reply_free(&rep);
    close(fd);
}
END_TEST

/* ---- a full disk ---- */

/* Sends a write with seq without reading its reply: a `receipts` batch
 * of n receipts, or one `receipt` when n is 0. */
static void
send_seq(int fd, uint64_t id, uint64_t seq, int n)
{
    struct e2e_receipt r = { .schema = 3 };
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int i;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (n > 0)
        msgpack_pack_array(&pk, (uint32_t)n);
    for (i = 0; i < (n > 0 ? n : 1); i++)
        ck_assert_int_eq(e2e_pack_receipt(&pk, &r), 0);
    ck_assert_int_eq(e2e_request(fd,
                                 n > 0 ? PROTO_OP_RECEIPTS : PROTO_OP_RECEIPT,
                                 id, 1, seq, sb.data, sb.size),
                     0);
    msgpack_sbuffer_destroy(&sb);
}

/* Reads the reply to id: 0 for ok, 1 for ok with duplicate, else the
 * error's code. */
static int
seq_reply(int fd, uint64_t id)
{
    struct e2e_reply rep;
    const msgpack_object *dup;
    int code;

    ck_assert_msg(e2e_recv(fd, T, &rep) == 0, "write %llu unanswered",
                  (unsigned long long)id);
    ck_assert_uint_eq(rep.r.id, id);
    dup = rep.r.ok ? e2e_get(rep.r.result, "duplicate") : NULL;
    code =
        !rep.r.ok ? rep.r.err.code
        : dup != NULL && dup->type == MSGPACK_OBJECT_BOOLEAN && dup->via.boolean
            ? 1
            : 0;
    e2e_reply_free(&rep);
    return code;
}

#define FULL_PAIRS 60

/*
 * The store is full (capped at 80 pages): a resend of a committed seq is
 * answered `duplicate` with its first outcome even when the writer groups
 * it with new writes that fail, whether its record is a batch's (the
 * dedupe table) or a single receipt's (the tail). New writes pipelined
 * between the resends are answered `unavailable`.
 */
START_TEST(test_e2e_harden_full_disk_resends_are_duplicates)
{
    const char *extra[] = { "--max-db-pages", "80", NULL };
    uint64_t id = 10, seq = 1, singles = 4, batches = 0, i;
    int fd, code, dups = 0, unavail = 0;

    start(extra);
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "harden/full"), 0);
    for (i = 0; i < singles; i++) {
        send_seq(fd, id, seq++, 0);
        ck_assert_int_eq(seq_reply(fd, id++), 0);
    }
    for (;;) {
        send_seq(fd, id, seq, 50);
        code = seq_reply(fd, id++);
        if (code != 0)
            break;
        batches++;
        seq++;
        ck_assert_msg(batches < 1000, "the store never filled up");
    }
    ck_assert_int_eq(code, PROTO_EUNAVAILABLE);
    ck_assert_uint_gt(batches, 0);
    fprintf(stderr,
            "e2e_harden: full after %llu single receipts and %llu batches\n",
            (unsigned long long)singles, (unsigned long long)batches);

    /* Pipelined: a new batch, then a resend of a committed seq, FULL_PAIRS
     * times; the writer takes them in groups. */
    for (i = 0; i < FULL_PAIRS; i++) {
        send_seq(fd, id + 2 * i, seq + 1 + i, 50);
        if (i % 2 == 0)
            send_seq(fd, id + 2 * i + 1, 1 + i % singles, 0);
        else
            send_seq(fd, id + 2 * i + 1, singles + 1 + i % batches, 50);
    }
    for (i = 0; i < FULL_PAIRS; i++) {
        code = seq_reply(fd, id + 2 * i);
        ck_assert_msg(code == PROTO_EUNAVAILABLE,
                      "new write %llu on a full store: %d",
                      (unsigned long long)i, code);
        unavail++;
        code = seq_reply(fd, id + 2 * i + 1);
        dups += code == 1;
        ck_assert_msg(code == 1,
                      "resend %llu of a committed seq (%s) answered %s, not "
                      "duplicate",
                      (unsigned long long)i, i % 2 ? "batch" : "single",
                      code == 0 ? "ok" : proto_code_name(code));
    }
    fprintf(stderr,
            "e2e_harden: full store: %d of %d resends duplicate, %d new "
            "writes unavailable\n",
            dups, FULL_PAIRS, unavail);
    ck_assert_uint_eq(e2e_stat(fd, 1, "duplicates"), (uint64_t)FULL_PAIRS);
    close(fd);
}
END_TEST

/* ---- a service manager that stops reading ---- */

/*
 * The daemon's notify socket is never read: its queue (10 datagrams by
 * default) fills with READY=1, STATUS= and watchdog pings (WATCHDOG_USEC
 * of 20 ms: one every 11 ms). The loop must not block on the next
 * notification: pings and writes are answered all along, and `stats`
 * counts the notifications dropped. READY=1 is in the queue.
 */
START_TEST(test_e2e_harden_notify_socket_never_read)
{
    char notify[300], got[256];
    uint64_t dropped;
    long t0, worst = 0;
    int nfd, fd, i;

    /* Variant 0: a path; variant 1: an abstract name. */
    if (_i == 0)
        snprintf(notify, sizeof(notify), "%s/e2e_harden_notify_%ld",
                 strlen(TEST_BINARY_DIR) > 70 ? "/tmp" : TEST_BINARY_DIR,
                 (long)getpid());
    else
        snprintf(notify, sizeof(notify), "@e2e_harden_notify_%ld",
                 (long)getpid());
    nfd = e2e_notify_bind(notify);
    ck_assert_int_ge(nfd, 0);
    ck_assert_int_eq(setenv("NOTIFY_SOCKET", notify, 1), 0);
    ck_assert_int_eq(setenv("WATCHDOG_USEC", "20000", 1), 0);
    start(NULL);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "harden/notify"), 0);
    /* Well past the queue's 10 datagrams. */
    usleep(500000);
    for (i = 0; i < 20; i++) {
        struct e2e_reply rep;

        t0 = e2e_now_ms();
        ck_assert_int_eq(e2e_request(fd, PROTO_OP_PING, 100 + i, 0, 0, NULL, 0),
                         0);
        ck_assert_msg(e2e_recv(fd, T, &rep) == 0,
                      "ping %d unanswered: the loop is blocked on the "
                      "notify socket",
                      i);
        e2e_reply_free(&rep);
        ck_assert_int_eq(send_receipt(fd, 200 + i, 1 + i), 0);
        if (e2e_now_ms() - t0 > worst)
            worst = e2e_now_ms() - t0;
        usleep(20000);
    }
    dropped = e2e_stat(fd, 300, "notify_dropped");
    fprintf(stderr,
            "e2e_harden: notify socket never read: 20 pings and writes "
            "answered (slowest %ld ms), %llu notifications dropped\n",
            worst, (unsigned long long)dropped);
    ck_assert_uint_ne(dropped, UINT64_MAX);
    ck_assert_uint_gt(dropped, 0);
    ck_assert_int_eq(e2e_notify_await(nfd, "READY=1", 1000, got, sizeof(got)),
                     0);
    ck_assert_msg(strcmp(got, "READY=1") == 0,
                  "the first notification is not READY=1: %s", got);
    close(fd);
    close(nfd);
    if (_i == 0)
        unlink(notify);
}
END_TEST

/* ---- the token in the read buffer ---- */

/* Whether the daemon's stack is scanned too. Under AddressSanitizer its
 * runtime's own calls (and the dynamic linker's lazy binding, which saves
 * the vector registers) leave register spills in the dead part of the
 * stack, which the daemon cannot clear; the read buffer and the heap are
 * scanned in every build. */
#ifdef __SANITIZE_ADDRESS__
#define SCAN_STACK 0
#else
#define SCAN_STACK 1
#endif

/*
 * A TCP hello's plaintext token must not stay in the daemon's memory once
 * the hello is answered: neither in the frame (wiped before) nor in the
 * server's shared read buffer, whole or split over two reads (the token
 * in the first, the rest in a shorter second that overwrites less). Read
 * through /proc/PID/mem; the configuration holds only the token's hash.
 */
START_TEST(test_e2e_harden_hello_token_not_left_in_memory)
{
    msgpack_sbuffer body, frame;
    msgpack_packer pk;
    struct e2e_reply rep;
    unsigned char hdr[FRAME_HEADER_SIZE];
    size_t cut;
    long n;
    int port, whole, split;

    port = start_tcp(NULL, NULL);
    /* A wrong token of the same length first: the dynamic linker binds
     * the hash functions at their first call and saves the vector
     * registers (which held the token) on the stack while it does. */
    whole = e2e_connect_tcp(port);
    ck_assert_int_ge(whole, 0);
    ck_assert_int_eq(tcp_hello(whole, "wrong-token!", NULL),
                     PROTO_EUNAUTHORIZED);
    close(whole);
    whole = e2e_connect_tcp(port);
    ck_assert_int_ge(whole, 0);
    ck_assert_int_eq(tcp_hello(whole, TOKEN, NULL), 0);
    n = e2e_proc_mem_count(d.pid, TOKEN, strlen(TOKEN), SCAN_STACK);
    if (n < 0)
        skip_now("cannot read the daemon's memory (/proc/%d/mem)", (int)d.pid);
    fprintf(stderr, "e2e_harden: token copies after a whole hello: %ld\n", n);
    ck_assert_msg(n == 0,
                  "the token is %ld times in the daemon's memory "
                  "after a hello",
                  n);

    /* {"op": "hello", "id": 2, "body": {"protocol": 1, "token": TOKEN,
     * "source": ...}}, sent up to the token's end, then the rest. */
    msgpack_sbuffer_init(&body);
    msgpack_packer_init(&pk, &body, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    envelope_pack_cstr(&pk, "protocol");
    msgpack_pack_uint64(&pk, 1);
    envelope_pack_cstr(&pk, "token");
    envelope_pack_cstr(&pk, TOKEN);
    cut = body.size;
    envelope_pack_cstr(&pk, "source");
    envelope_pack_cstr(&pk, "tcp-split");
    msgpack_sbuffer_init(&frame);
    msgpack_packer_init(&pk, &frame, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    envelope_pack_cstr(&pk, "op");
    envelope_pack_cstr(&pk, "hello");
    envelope_pack_cstr(&pk, "id");
    msgpack_pack_uint64(&pk, 2);
    envelope_pack_cstr(&pk, "body");
    cut += frame.size;
    msgpack_sbuffer_write(&frame, body.data, body.size);
    frame_put_header(hdr, (uint32_t)frame.size);
    cut += sizeof(hdr);
    split = e2e_connect_tcp(port);
    ck_assert_int_ge(split, 0);
    ck_assert_int_eq(e2e_send_all(split, hdr, sizeof(hdr)), 0);
    ck_assert_int_eq(e2e_send_all(split, frame.data, cut - sizeof(hdr)), 0);
    usleep(200000);
    ck_assert_int_eq(e2e_send_all(split, frame.data + cut - sizeof(hdr),
                                  frame.size - (cut - sizeof(hdr))),
                     0);
    ck_assert_int_eq(e2e_recv(split, T, &rep), 0);
    ck_assert_msg(rep.r.ok, "split hello refused: %s", rep.r.err.message);
    e2e_reply_free(&rep);
    n = e2e_proc_mem_count(d.pid, TOKEN, strlen(TOKEN), SCAN_STACK);
    fprintf(stderr, "e2e_harden: token copies after a split hello: %ld\n", n);
    ck_assert_msg(n == 0,
                  "the token is %ld times in the daemon's memory "
                  "after a hello in two reads",
                  n);
    msgpack_sbuffer_destroy(&body);
    msgpack_sbuffer_destroy(&frame);
    close(whole);
    close(split);
}
END_TEST

static Suite *
harden_suite(void)
{
    Suite *s = suite_create("e2e_harden");
    const struct {
        const char *name;
        const TTest *fn;
        int loops;
    } tests[] = {
        { "one_daemon", test_e2e_harden_second_daemon_on_one_store_refused, 1 },
        { "readonly", test_e2e_harden_readonly_store_refused, 1 },
        { "clean_stop", test_e2e_harden_clean_stop_checkpoints_into_main_file,
          1 },
        { "deleted_db", test_e2e_harden_deleted_store_answers_unavailable, 2 },
        { "unauth_cap",
          test_e2e_harden_unauthenticated_peers_do_not_fill_the_cap, 1 },
        { "preauth", test_e2e_harden_no_work_before_authentication, 2 },
        { "reply_memory", test_e2e_harden_reply_memory_bounded, 1 },
        { "quarantine", test_e2e_harden_quarantine_one_row_per_batch, 1 },
        { "unknown_keys", test_e2e_harden_unknown_keys_validated, 1 },
        { "umask", test_e2e_harden_store_files_private_whatever_the_umask, 1 },
        { "busy_prune", test_e2e_harden_retention_prunes_under_constant_load,
          1 },
        { "loop_stall", test_e2e_harden_loop_stall_reads_before_deadlines, 1 },
        { "token_removed", test_e2e_harden_removed_token_closes_its_connections,
          1 },
        { "paths", test_e2e_harden_paths_never_empty, 1 },
        { "clock_step", test_e2e_harden_retention_ignores_a_clock_step, 1 },
        { "auth_fail",
          test_e2e_harden_failed_authentication_counted_logged_slowed, 1 },
        { "hello_wiped", test_e2e_harden_hello_token_not_left_in_memory, 1 },
        { "full_dups", test_e2e_harden_full_disk_resends_are_duplicates, 1 },
        { "notify_deaf", test_e2e_harden_notify_socket_never_read, 2 },
    };
    size_t i;

    for (i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        TCase *tc = tcase_create(tests[i].name);

        tcase_set_timeout(tc, 60);
        tcase_add_checked_fixture(tc, NULL, teardown);
        tcase_add_loop_test(tc, tests[i].fn, 0, tests[i].loops);
        suite_add_tcase(s, tc);
    }
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(harden_suite());
    int status;

    srunner_run_all(sr, CK_NORMAL);
    status = skip_status(sr);
    srunner_free(sr);
    return status;
}
