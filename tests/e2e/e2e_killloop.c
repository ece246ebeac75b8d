/*
 * e2e_killloop.c: the daemon is SIGKILLed at random moments, including
 * during start-up, and restarted each time, while clients over Unix and TCP
 * keep sending receipts with unique (source, seq) and resend whatever was
 * not acknowledged. At the end every acknowledged receipt is in the file
 * exactly once, nothing else is, and PRAGMA integrity_check is ok.
 *
 * RELIABILITY_KILLS sets the number of kills (default 100, the CI variant;
 * scripts/reliability-long.sh runs 1,000) and RELIABILITY_SEED the random
 * seed (default: the time; printed, so a failure can be replayed).
 *
 * Thread: the test's main thread kills and restarts the daemon; one thread
 * per client. Client state is owned by its thread until it is joined.
 */
#include <check.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "e2e_util.h"
#include "relpack.h"

#define NCLIENTS 6 /* the first NTCP use TCP, the others the Unix socket */
#define NTCP     2
#define WINDOW   16        /* requests in flight per connection */
#define MAX_SEQ  (1 << 18) /* per client */
#define T_REPLY  3000
#define T_DRAIN  60000 /* ms for the clients to finish after the kills */

struct client {
    pthread_t thread;
    int index;
    int tcp;
    char source[32];
    unsigned char *acked; /* per seq: 1 once an ok reply came back */
    uint64_t sent_max;    /* seqs below this were sent at least once */
    unsigned long replies, errors, reconnects, resent;
    char failure[256]; /* a reply that must never happen */
    atomic_int done;   /* set by the client thread when it has finished */
};

/* TCP needs a token: the daemon gets its SHA-256 in a configuration
 * file, the TCP clients send it in hello. */
#define TOKEN "kill-token"
#define TOKEN_SHA256                                                           \
    "9ad3acf503c395249dfda9d6fa1a75dc322adfc51a1ca8dc520eafcfe7fc07e7"

static struct e2e_daemon d;
static char conf_path[300];
static struct client clients[NCLIENTS];
static int tcp_port;
static atomic_int stop_new; /* no new seqs once the kills are done */
static atomic_int give_up;  /* the drain timed out */
static char port_arg[32];

/*
 * A free port below the ephemeral range. The daemon is restarted on the
 * same port hundreds of times, and while it is down the clients keep
 * connecting; a port inside the ephemeral range could meanwhile be taken as
 * some socket's local port (even by a TCP self-connect of our own client),
 * and the restart would fail to bind.
 */
static int
free_tcp_port(void)
{
    struct sockaddr_in sa;
    int lo = 32768, hi = 60999, tries, port, fd, ok;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");

    if (f != NULL) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2)
            lo = 32768;
        fclose(f);
    }
    (void)hi;
    if (lo <= 11000)
        return -1;
    for (tries = 0; tries < 200; tries++) {
        port = 10000 + (int)((unsigned)rand() % (unsigned)(lo - 10000));
        if ((fd = socket(AF_INET, SOCK_STREAM, 0)) < 0)
            return -1;
        memset(&sa, 0, sizeof(sa));
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sa.sin_port = htons((uint16_t)port);
        ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
        close(fd);
        if (ok)
            return port;
    }
    return -1;
}

static int
connect_tcp(void)
{
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)tcp_port);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The lowest seq below sent_max still unacknowledged, from *from on. */
static uint64_t
next_unacked(const struct client *c, uint64_t from)
{
    while (from < c->sent_max && c->acked[from])
        from++;
    return from;
}

static int
all_acked(const struct client *c)
{
    return next_unacked(c, 0) >= c->sent_max;
}

/* hello with source and, over TCP, the token. Returns 0 or -1. */
static int
hello(const struct client *c, int fd)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct e2e_reply rep;
    int rc = -1;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (msgpack_pack_map(&pk, c->tcp ? 3 : 2) != 0 ||
        envelope_pack_cstr(&pk, "protocol") != 0 ||
        msgpack_pack_uint64(&pk, 1) != 0 ||
        envelope_pack_cstr(&pk, "source") != 0 ||
        envelope_pack_cstr(&pk, c->source) != 0 ||
        (c->tcp && (envelope_pack_cstr(&pk, "token") != 0 ||
                    envelope_pack_cstr(&pk, TOKEN) != 0)))
        goto out;
    if (e2e_request(fd, PROTO_OP_HELLO, 0, 0, 0, sb.data, sb.size) != 0 ||
        e2e_recv(fd, T_REPLY, &rep) != 0)
        goto out;
    rc = rep.r.ok ? 0 : -1;
    e2e_reply_free(&rep);
out:
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

/*
 * One connection's life: hello, then keep WINDOW receipts in flight,
 * resending every unacknowledged seq below sent_max before new ones.
 * Returns when the connection breaks or there is nothing left to do.
 */
static void
session(struct client *c, int fd)
{
    uint64_t inflight[WINDOW], cursor = 0, seq;
    int head = 0, n = 0;
    msgpack_sbuffer sb;
    struct e2e_reply rep;

    if (hello(c, fd) != 0)
        return;
    msgpack_sbuffer_init(&sb);
    for (;;) {
        while (n < WINDOW) {
            cursor = next_unacked(c, cursor);
            if (cursor < c->sent_max) {
                seq = cursor++;
                c->resent++;
            } else if (!atomic_load(&stop_new) && c->sent_max < MAX_SEQ) {
                seq = c->sent_max++;
                cursor = c->sent_max;
            } else {
                break;
            }
            sb.size = 0;
            if (relpack_receipt_frame(&sb, seq, 1, seq, seq, 0) != 0 ||
                e2e_send_all(fd, sb.data, sb.size) != 0)
                goto out;
            inflight[(head + n) % WINDOW] = seq;
            n++;
        }
        if (n == 0)
            break;
        if (e2e_recv(fd, T_REPLY, &rep) != 0)
            goto out;
        c->replies++;
        seq = inflight[head];
        head = (head + 1) % WINDOW;
        n--;
        if (!rep.r.has_id || rep.r.id != seq) {
            snprintf(c->failure, sizeof(c->failure),
                     "reply id %llu where %llu was expected",
                     (unsigned long long)rep.r.id, (unsigned long long)seq);
        } else if (rep.r.ok) {
            c->acked[seq] = 1;
        } else if (rep.r.err.code == PROTO_EUNAVAILABLE ||
                   rep.r.err.code == PROTO_EOVERLOADED) {
            c->errors++; /* not stored; resent later */
        } else {
            snprintf(c->failure, sizeof(c->failure),
                     "seq %llu: %s (%.100s: %.100s)", (unsigned long long)seq,
                     proto_code_name(rep.r.err.code), rep.r.err.path,
                     rep.r.err.message);
        }
        e2e_reply_free(&rep);
        /* A resend that crossed the cursor is picked up on the next
         * pass from zero. */
        if (n == 0)
            cursor = 0;
    }
out:
    msgpack_sbuffer_destroy(&sb);
}

static void *
client_cb(void *arg)
{
    struct client *c = arg;
    int fd;

    while (!atomic_load(&give_up)) {
        if (atomic_load(&stop_new) && all_acked(c))
            break;
        fd = c->tcp ? connect_tcp() : e2e_connect(&d);
        if (fd < 0) {
            usleep(5000);
            continue;
        }
        c->reconnects++;
        session(c, fd);
        close(fd);
    }
    atomic_store(&c->done, 1);
    return NULL;
}

/* Starts the daemon without waiting for it to be ready, so that a kill
 * can land in its start-up (WAL recovery, migrations). */
static void
spawn_nowait(void)
{
    char bin[512];
    int fd;

    snprintf(bin, sizeof(bin), "%s/daemon/receiptd", TEST_BINARY_DIR);
    d.pid = fork();
    ck_assert_int_ge(d.pid, 0);
    if (d.pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        fd = open(d.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execl(bin, bin, "--socket", d.sock, "--db", d.db, "--config", conf_path,
              "--tcp", port_arg, "--tcp-plaintext", "true", "--log-level",
              "warning", (char *)NULL);
        _exit(127);
    }
}

/* Waits until the daemon accepts on its Unix socket; 0, or -1 if it died
 * or did not come up within 10 s. */
static int
wait_ready(void)
{
    long deadline = e2e_now_ms() + 10000;
    int fd;

    while (e2e_now_ms() < deadline) {
        if (!e2e_alive(&d))
            return -1;
        if ((fd = e2e_connect(&d)) >= 0) {
            close(fd);
            return 0;
        }
        usleep(2000);
    }
    return -1;
}

static void
kill_now(void)
{
    int st;

    /* kill(0) would hit our own process group. */
    if (d.pid <= 0)
        return;
    kill(d.pid, SIGKILL);
    waitpid(d.pid, &st, 0);
    d.pid = 0;
}

static int
env_int(const char *name, int dflt)
{
    const char *v = getenv(name);

    return v != NULL && *v != '\0' ? atoi(v) : dflt;
}

static long
count_query(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    long v = -1;

    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    return v;
}

/* The receipts the rollups cover (migrations/0007 and 0008): those below
 * rollup_from, and of the chunks being merged, below rollup_end, those up
 * to its key. */
#define COVERED_ROWS                                                           \
    "SELECT r.plan_id, r.graph_id, r.model_id, r.requested_backend, "          \
    "r.executed_backend, r.source_id, r.received_at / 3600000, count(*), "     \
    "sum(r.status = 0) FROM receipts r, rollup_merge m WHERE r.id < "          \
    "m.rollup_from OR (r.id < (SELECT value FROM counters WHERE name = "       \
    "'rollup_end') AND m.plan_id IS NOT NULL AND (r.plan_id, r.graph_id, "     \
    "r.model_id, r.requested_backend, r.executed_backend, r.source_id, "       \
    "r.received_at / 3600000) <= (m.plan_id, m.graph_id, m.model_id, "         \
    "m.requested_backend, m.executed_backend, m.source_id, m.bucket)) "        \
    "GROUP BY 1, 2, 3, 4, 5, 6, 7"
#define ROLLUP_ROWS                                                            \
    "SELECT plan_id, graph_id, model_id, requested_backend, "                  \
    "executed_backend, source_id, bucket, receipts, fallback FROM rollups"

/* However often the daemon was killed, mid-chunk or mid-merge, every hour
 * rollup row counts exactly the receipts it covers, and no row is missing
 * or left over. */
static void
check_rollups(sqlite3 *db)
{
    long missing = count_query(db, "SELECT count(*) FROM (" COVERED_ROWS
                                   " EXCEPT " ROLLUP_ROWS ")");
    long extra = count_query(db, "SELECT count(*) FROM (" ROLLUP_ROWS
                                 " EXCEPT " COVERED_ROWS ")");

    ck_assert_msg(missing == 0 && extra == 0,
                  "the rollups disagree with the receipts: %ld key-hours "
                  "missing or wrong, %ld left over",
                  missing, extra);
}

/*
 * Checks the file against what the clients saw acknowledged. With
 * all_sent_acked, every seq sent must have been acknowledged (the kill loop
 * resends until it is); without, a seq sent but never acknowledged may be
 * stored once or not at all (a stop cut its reply off).
 */
static void
check_store(int all_sent_acked, unsigned long *total_acked)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    char integrity[256] = "";
    long other, seq;
    int i;

    ck_assert_int_eq(sqlite3_open_v2(d.db, &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) ==
        SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            snprintf(integrity, sizeof(integrity), "%s",
                     (const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
    }
    ck_assert_str_eq(integrity, "ok");
    other = count_query(db, "SELECT count(*) FROM receipts r JOIN strings s "
                            "ON s.id = r.source_id WHERE CAST(s.value AS "
                            "TEXT) NOT LIKE 'kill-client-%'");
    ck_assert_msg(other == 0, "%ld receipts of unknown sources", other);
    check_rollups(db);
    *total_acked = 0;
    for (i = 0; i < NCLIENTS; i++) {
        struct client *c = &clients[i];
        unsigned char *count = calloc(MAX_SEQ, 1);

        ck_assert_ptr_nonnull(count);
        ck_assert_int_eq(
            sqlite3_prepare_v2(db,
                               "SELECT r.seq FROM receipts r JOIN strings s "
                               "ON s.id = r.source_id WHERE CAST(s.value AS "
                               "BLOB) = CAST(? AS BLOB)",
                               -1, &st, NULL),
            SQLITE_OK);
        sqlite3_bind_text(st, 1, c->source, -1, SQLITE_STATIC);
        while (sqlite3_step(st) == SQLITE_ROW) {
            seq = (long)sqlite3_column_int64(st, 0);
            ck_assert_msg(seq >= 0 && (uint64_t)seq < c->sent_max,
                          "%s: seq %ld was never sent", c->source, seq);
            ck_assert_msg(count[seq] == 0, "%s: seq %ld stored twice",
                          c->source, seq);
            count[seq] = 1;
        }
        sqlite3_finalize(st);
        for (seq = 0; (uint64_t)seq < c->sent_max; seq++) {
            ck_assert_msg(c->acked[seq] || !all_sent_acked,
                          "%s: seq %ld never acknowledged", c->source, seq);
            ck_assert_msg(count[seq] == 1 || !c->acked[seq],
                          "%s: acknowledged seq %ld is missing", c->source,
                          seq);
            *total_acked += c->acked[seq];
        }
        free(count);
    }
    sqlite3_close(db);
}

/* Writes the token configuration, starts the daemon with a TCP listener,
 * then the client threads. */
static void
start_all(void)
{
    const char *const flags[] = { "--config", conf_path,         "--tcp",
                                  port_arg,   "--tcp-plaintext", "true",
                                  NULL };
    FILE *f;
    int i, fd;

    tcp_port = free_tcp_port();
    ck_assert_int_gt(tcp_port, 0);
    snprintf(port_arg, sizeof(port_arg), "127.0.0.1:%d", tcp_port);
    snprintf(conf_path, sizeof(conf_path), "%s/killloop-XXXXXX.conf",
             TEST_BINARY_DIR);
    fd = mkstemps(conf_path, 5);
    ck_assert_int_ge(fd, 0);
    f = fdopen(fd, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "store: {\n    chunk_receipts = 100;\n};\n"
            "access: {\n    tokens = ( { name = \"killloop\"; "
            "sha256 = \"%s\"; } );\n};\n",
            TOKEN_SHA256);
    fclose(f);
    ck_assert_msg(e2e_start(&d, flags) == 0, "receiptd did not start");
    for (i = 0; i < NCLIENTS; i++) {
        clients[i].index = i;
        clients[i].tcp = i < NTCP;
        snprintf(clients[i].source, sizeof(clients[i].source), "kill-client-%d",
                 i);
        clients[i].acked = calloc(MAX_SEQ, 1);
        ck_assert_ptr_nonnull(clients[i].acked);
        ck_assert_int_eq(
            pthread_create(&clients[i].thread, NULL, client_cb, &clients[i]),
            0);
    }
}

START_TEST(test_e2e_killloop_every_acknowledged_receipt_once)
{
    int kills = env_int("RELIABILITY_KILLS", 100), k, i, fd, status = 0;
    unsigned seed = (unsigned)env_int("RELIABILITY_SEED", (int)time(NULL));
    unsigned long startup_kills = 0, total, replies = 0, reconnects = 0;
    unsigned long resent = 0, unavailable = 0;
    long t0 = e2e_now_ms(), deadline;

    printf("e2e_killloop: seed %u (RELIABILITY_SEED), %d kills\n", seed, kills);
    fflush(stdout);
    srand(seed);
    start_all();

    for (k = 0; k < kills; k++) {
        /* Mostly a while after start-up, under load; one kill in four
         * lands within the first 8 ms of start-up instead. */
        if (rand() % 4 == 0) {
            usleep((useconds_t)(rand() % 8000));
            if ((fd = e2e_connect(&d)) < 0)
                startup_kills++;
            else
                close(fd);
        } else {
            ck_assert_msg(wait_ready() == 0,
                          "receiptd did not come back after kill %d", k);
            usleep((useconds_t)(rand() % 250000));
        }
        ck_assert_msg(d.pid > 0, "receiptd exited by itself before kill %d", k);
        kill_now();
        spawn_nowait();
    }
    ck_assert_msg(wait_ready() == 0, "receiptd did not come back");
    atomic_store(&stop_new, 1);
    /* The clients own their state until joined: wait on their flags. */
    deadline = e2e_now_ms() + T_DRAIN;
    for (i = 0; i < NCLIENTS; i++) {
        while (!atomic_load(&clients[i].done) && e2e_now_ms() < deadline)
            usleep(10000);
    }
    for (i = 0; i < NCLIENTS; i++)
        if (!atomic_load(&clients[i].done))
            atomic_store(&give_up, 1);
    for (i = 0; i < NCLIENTS; i++) {
        pthread_join(clients[i].thread, NULL);
        ck_assert_msg(clients[i].failure[0] == '\0', "%s: %s",
                      clients[i].source, clients[i].failure);
        replies += clients[i].replies;
        reconnects += clients[i].reconnects;
        resent += clients[i].resent;
        unavailable += clients[i].errors;
    }
    ck_assert_msg(!atomic_load(&give_up),
                  "clients could not get everything acknowledged in time");

    /* A clean stop under no load, then the file itself. */
    ck_assert_int_eq(e2e_stop(&d, SIGTERM, 10000, &status), 0);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "receiptd did not exit 0 on SIGTERM");
    check_store(1, &total);
    printf("e2e_killloop: %d kills survived (%lu during start-up) in %.1f "
           "s; %lu receipts acknowledged and found exactly once; %lu "
           "replies, %lu connections, %lu resends, %lu unavailable\n",
           kills, startup_kills, (double)(e2e_now_ms() - t0) / 1000.0, total,
           replies, reconnects, resent, unavailable);
    fflush(stdout);
    ck_assert_uint_gt(total, 0);
    for (i = 0; i < NCLIENTS; i++)
        free(clients[i].acked);
}
END_TEST

/* SIGTERM while every client is sending: exit 0 within 10 s, every
 * acknowledged receipt in the file, and the WAL checkpointed away. */
START_TEST(test_e2e_killloop_graceful_stop_under_load)
{
    unsigned long total, replies = 0;
    char wal[300];
    struct stat stw;
    long t0;
    int i, status = 0;

    srand((unsigned)getpid() ^ (unsigned)time(NULL));
    start_all();
    usleep(1500000);
    t0 = e2e_now_ms();
    ck_assert_msg(e2e_stop(&d, SIGTERM, 10000, &status) == 0,
                  "receiptd did not exit within 10 s of SIGTERM under load");
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "receiptd did not exit 0 on SIGTERM (status %d)", status);
    atomic_store(&give_up, 1);
    for (i = 0; i < NCLIENTS; i++) {
        pthread_join(clients[i].thread, NULL);
        ck_assert_msg(clients[i].failure[0] == '\0', "%s: %s",
                      clients[i].source, clients[i].failure);
        replies += clients[i].replies;
    }
    snprintf(wal, sizeof(wal), "%s-wal", d.db);
    ck_assert_msg(stat(wal, &stw) != 0 || stw.st_size == 0,
                  "the WAL holds %lld bytes after a clean stop",
                  (long long)stw.st_size);
    check_store(0, &total);
    printf("e2e_killloop[graceful stop]: exit 0 after %ld ms under load; "
           "%lu receipts acknowledged and found, %lu replies\n",
           e2e_now_ms() - t0, total, replies);
    fflush(stdout);
    ck_assert_uint_gt(total, 0);
    for (i = 0; i < NCLIENTS; i++)
        free(clients[i].acked);
}
END_TEST

static void
teardown(void)
{
    e2e_cleanup(&d);
    if (conf_path[0] != '\0')
        unlink(conf_path);
}

static Suite *
killloop_suite(void)
{
    Suite *s = suite_create("e2e_killloop");
    TCase *tc = tcase_create("kill_restart");

    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 120 + 3 * env_int("RELIABILITY_KILLS", 100));
    tcase_add_test(tc, test_e2e_killloop_every_acknowledged_receipt_once);
    suite_add_tcase(s, tc);

    tc = tcase_create("graceful_stop");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_e2e_killloop_graceful_stop_under_load);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(killloop_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
