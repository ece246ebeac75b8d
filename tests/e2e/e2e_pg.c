/*
 * e2e_pg.c: the real receiptd on the PostgreSQL backend (--pg) against a
 * real private cluster (tests/lib/pg_cluster.h): receipts sent over its
 * socket, the daemon killed with SIGKILL while writes are in flight and
 * restarted, and at the end every acknowledged receipt stored exactly
 * once, every one resent stored once, and the query kinds answering from
 * PostgreSQL. PostgreSQL itself crashing under the daemon: writes answer
 * unavailable, then succeed again once it is back, on the same daemon.
 * Two instances on one database: each answers for the other's writes.
 *
 * Reports SKIP where PostgreSQL 15 is not installed (a failure when
 * RECEIPTD_CI is set).
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "e2e_util.h"
#include "error.h"
#include "op.h"
#include "pg_cluster.h"
#include "skip.h"

#define T      10000
#define WINDOW 32
#define ROUNDS 3
#define PER    300 /* seqs a round sends before the kill */
#define MAXSEQ (ROUNDS * (PER + WINDOW) + 1)

static struct e2e_daemon d;
static struct pg_scratch pg;
static char db[700];
static const char *extra[3];

/* One cluster for the binary, in its parent process (an unchecked
 * fixture), so that it is stopped whatever the tests do: a failed
 * assertion ends a test's process before its own teardown. */
static void
cluster_up(void)
{
    pg_scratch_up(&pg, "e2e-pg");
}

static void
cluster_down(void)
{
    pg_scratch_down(&pg);
}

/* Each test: a database of its own and a daemon on it. */
static void
setup(void)
{
    char name[32];

    memset(&d, 0, sizeof(d));
    snprintf(d.dir, sizeof(d.dir), "%s/d-XXXXXX", pg.base);
    ck_assert_ptr_nonnull(mkdtemp(d.dir));
    snprintf(d.sock, sizeof(d.sock), "%s/s", d.dir);
    snprintf(d.db, sizeof(d.db), "%s/unused.db", d.dir);
    snprintf(d.log, sizeof(d.log), "%s/receiptd.log", d.dir);
    snprintf(name, sizeof(name), "central_%ld", (long)getpid());
    pg_cluster_database(pg.conninfo, name, db, sizeof(db));
    extra[0] = "--pg";
    extra[1] = db;
    extra[2] = NULL;
    ck_assert_msg(e2e_restart(&d, extra) == 0, "receiptd --pg did not start");
}

static void
teardown(void)
{
    if (d.pid > 0)
        e2e_stop(&d, SIGKILL, 5000, NULL);
    d.pid = 0;
    e2e_cleanup(&d);
}

static const struct e2e_receipt rec = {
    .schema = 3,
    .plan = "plan-a",
    .graph = "g",
    .model = "m",
    .requested = "cuda",
    .executed = "cpu",
    .coverage = 0x41,
    .decode_steps = 12,
    .fallback_count = 1,
};

static int
send_seq(int fd, uint64_t seq)
{
    size_t len;
    char *body = e2e_receipt_bytes(&rec, &len);
    int rc;

    ck_assert_ptr_nonnull(body);
    rc = e2e_request(fd, PROTO_OP_RECEIPT, seq, 1, seq, body, len);
    free(body);
    return rc;
}

static int64_t
scalar(const char *sql)
{
    PGconn *pc = PQconnectdb(db);
    PGresult *r;
    int64_t v;

    ck_assert_msg(PQstatus(pc) == CONNECTION_OK, "%s", PQerrorMessage(pc));
    r = PQexec(pc, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql,
                  PQerrorMessage(pc));
    v = PQgetisnull(r, 0, 0) ? -1 : strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    PQfinish(pc);
    return v;
}

/* Sends seqs [from, to) pipelined, WINDOW at a time, marking those
 * acknowledged ok; then sends tail more without reading their replies.
 * Returns the next seq not sent. */
static uint64_t
round_of(int fd, uint64_t from, uint64_t to, uint64_t tail,
         unsigned char *acked)
{
    uint64_t next = from, waiting = 0;
    struct e2e_reply rep;

    while (next < to || waiting > 0) {
        while (next < to && waiting < WINDOW) {
            ck_assert_int_eq(send_seq(fd, next++), 0);
            waiting++;
        }
        ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
        ck_assert_msg(rep.r.ok, "seq %llu: %s", (unsigned long long)rep.r.id,
                      rep.r.err.message);
        ck_assert_uint_lt(rep.r.id, MAXSEQ);
        acked[rep.r.id] = 1;
        e2e_reply_free(&rep);
        waiting--;
    }
    for (; next < to + tail; next++)
        ck_assert_int_eq(send_seq(fd, next), 0);
    return next;
}

static const msgpack_object *
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
    ck_assert_msg(rep->r.ok, "query %s: %s", kind, rep->r.err.message);
    return e2e_get(rep->r.result, "rows");
}

/* A series (`every` one hour over the last three hours and a bit):
 * rows of the one plan group, one per hour, the empty ones included. */
static const msgpack_object *
query_series(int fd, uint64_t id, const char *kind, struct e2e_reply *rep)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    envelope_pack_cstr(&pk, "kind");
    envelope_pack_cstr(&pk, kind);
    envelope_pack_cstr(&pk, "every");
    msgpack_pack_uint64(&pk, 3600000);
    envelope_pack_cstr(&pk, "since");
    msgpack_pack_uint64(&pk, (uint64_t)time(NULL) * 1000 - 3 * 3600000 - 60000);
    envelope_pack_cstr(&pk, "limit");
    msgpack_pack_uint64(&pk, 10000);
    ck_assert_int_eq(
        e2e_request(fd, PROTO_OP_QUERY, id, 0, 0, sb.data, sb.size), 0);
    msgpack_sbuffer_destroy(&sb);
    ck_assert_int_eq(e2e_recv(fd, T, rep), 0);
    ck_assert_msg(rep->r.ok, "query %s: %s", kind, rep->r.err.message);
    return e2e_get(rep->r.result, "rows");
}

START_TEST(test_pg_kill9_keeps_every_ack_once)
{
    static unsigned char acked[MAXSEQ];
    char sql[256];
    struct e2e_reply rep;
    const msgpack_object *rows;
    uint64_t next = 1, seq, n_acked = 0;
    int round, fd;

    memset(acked, 0, sizeof(acked));
    for (round = 0; round < ROUNDS; round++) {
        fd = e2e_connect(&d);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(e2e_hello(fd, "producer-1"), 0);
        next = round_of(fd, next, next + PER, WINDOW, acked);
        /* Writes in flight, some committed and unanswered: kill -9. */
        ck_assert_int_eq(e2e_stop(&d, SIGKILL, 5000, NULL), 0);
        close(fd);
        ck_assert_msg(e2e_restart(&d, extra) == 0, "no restart");
    }
    /* Every acknowledged receipt is there, none twice. */
    for (seq = 1; seq < next; seq++) {
        if (!acked[seq])
            continue;
        n_acked++;
        snprintf(sql, sizeof(sql),
                 "SELECT count(*) FROM receipts WHERE source = 'producer-1' "
                 "AND seq = %llu",
                 (unsigned long long)seq);
        ck_assert_msg(scalar(sql) == 1,
                      "acknowledged seq %llu stored %lld "
                      "times",
                      (unsigned long long)seq, (long long)scalar(sql));
    }
    ck_assert_uint_eq(n_acked, ROUNDS * PER);
    /* No SQLite file: the daemon stored in PostgreSQL only. */
    ck_assert_int_ne(access(d.db, F_OK), 0);
    ck_assert_int_eq(scalar("SELECT count(*) - count(DISTINCT seq) FROM "
                            "receipts"),
                     0);
    /* The producer resends everything it sent: stored once each. */
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "producer-1"), 0);
    memset(acked, 0, sizeof(acked));
    round_of(fd, 1, next, 0, acked);
    for (seq = 1; seq < next; seq++)
        ck_assert_msg(acked[seq], "resent seq %llu not acknowledged",
                      (unsigned long long)seq);
    ck_assert_int_eq(scalar("SELECT count(*) - count(DISTINCT seq) FROM "
                            "receipts"),
                     0);
    ck_assert_int_eq(scalar("SELECT count(*) FROM receipts"),
                     (int64_t)(next - 1));
    /* The query kinds answer from PostgreSQL. */
    rows = query(fd, 100000, "fallbacks", &rep);
    ck_assert_ptr_nonnull(rows);
    ck_assert_uint_eq(rows->via.array.size, 1);
    ck_assert_uint_eq(e2e_get_uint(&rows->via.array.ptr[0], "receipts"),
                      (uint64_t)scalar("SELECT count(*) FROM receipts"));
    e2e_reply_free(&rep);
    /* As a series: four or five hours, the receipts in the last one or
     * two (sent within the last minutes). */
    rows = query_series(fd, 100003, "fallbacks", &rep);
    ck_assert_ptr_nonnull(rows);
    ck_assert_msg(rows->via.array.size == 4 || rows->via.array.size == 5,
                  "%u rows", rows->via.array.size);
    {
        uint64_t sum = 0, last = 0;
        uint32_t i;

        for (i = 0; i < rows->via.array.size; i++) {
            const msgpack_object *r = &rows->via.array.ptr[i];

            ck_assert_uint_eq(e2e_get_uint(r, "bucket") % 3600000, 0);
            ck_assert_uint_gt(e2e_get_uint(r, "bucket"), last);
            last = e2e_get_uint(r, "bucket");
            sum += e2e_get_uint(r, "receipts");
        }
        ck_assert_uint_eq(e2e_get_uint(&rows->via.array.ptr[0], "receipts"), 0);
        ck_assert_uint_eq(sum,
                          (uint64_t)scalar("SELECT count(*) FROM receipts"));
    }
    e2e_reply_free(&rep);
    rows = query_series(fd, 100004, "coverage", &rep);
    ck_assert_uint_eq(rows->via.array.size % 26, 0);
    ck_assert_uint_ge(rows->via.array.size, 4 * 26);
    e2e_reply_free(&rep);
    rows = query(fd, 100001, "gaps", &rep);
    ck_assert_uint_eq(rows->via.array.size, 1);
    ck_assert_uint_eq(e2e_get_uint(&rows->via.array.ptr[0], "first_seq"), 1);
    e2e_reply_free(&rep);
    rows = query(fd, 100002, "receipts", &rep);
    ck_assert_uint_gt(rows->via.array.size, 0);
    e2e_reply_free(&rep);
    close(fd);
}
END_TEST

/* PostgreSQL crashes under a running daemon: writes are answered
 * unavailable (never ok), and once it is back the same daemon stores
 * again, having reconnected by itself; restarted under an idle daemon, it
 * costs no failed write or query. */
START_TEST(test_pg_server_crash_then_back)
{
    struct e2e_reply rep;
    char again[512];
    int fd, i, ok = 0;

    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_hello(fd, "producer-2"), 0);
    ck_assert_int_eq(send_seq(fd, 1), 0);
    ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
    ck_assert(rep.r.ok);
    e2e_reply_free(&rep);
    ck_assert_int_eq(pg_cluster_stop(pg.dir, "immediate"), 0);
    ck_assert_int_eq(send_seq(fd, 2), 0);
    ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
    ck_assert(!rep.r.ok);
    ck_assert_int_eq(rep.r.err.code, PROTO_EUNAVAILABLE);
    e2e_reply_free(&rep);
    pg_cluster_start(pg.dir, again, sizeof(again));
    /* The writer reconnects at its next group. */
    for (i = 0; i < 50 && !ok; i++) {
        ck_assert_int_eq(send_seq(fd, 2), 0);
        ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
        ok = rep.r.ok;
        e2e_reply_free(&rep);
        if (!ok)
            usleep(100000);
    }
    ck_assert_msg(ok, "writes did not recover after PostgreSQL came back");
    /* Restarted while the daemon is idle: the connections it holds are
     * gone without its knowing; the next write and query still succeed at
     * the first attempt. */
    ck_assert_int_eq(pg_cluster_stop(pg.dir, "fast"), 0);
    pg_cluster_start(pg.dir, again, sizeof(again));
    ck_assert_int_eq(send_seq(fd, 3), 0);
    ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
    ck_assert_msg(rep.r.ok, "the first write after a restart: %s",
                  rep.r.err.message);
    e2e_reply_free(&rep);
    query(fd, 900, "fallbacks", &rep);
    e2e_reply_free(&rep);
    ck_assert_int_eq(scalar("SELECT count(*) FROM receipts WHERE source = "
                            "'producer-2'"),
                     3);
    close(fd);
}
END_TEST

/* A second instance on the same database: it migrates nothing, answers
 * for what the first stored, and a (source, seq) the first stored is a
 * duplicate there; both store, neither twice. */
START_TEST(test_pg_two_instances_share_the_database)
{
    struct e2e_daemon d2;
    struct e2e_reply rep;
    const msgpack_object *rows;
    int fa, fb;
    uint64_t seq;

    memset(&d2, 0, sizeof(d2));
    snprintf(d2.dir, sizeof(d2.dir), "%s", d.dir);
    snprintf(d2.sock, sizeof(d2.sock), "%s/s2", d.dir);
    snprintf(d2.db, sizeof(d2.db), "%s/unused2.db", d.dir);
    snprintf(d2.log, sizeof(d2.log), "%s/receiptd2.log", d.dir);
    ck_assert_msg(e2e_restart(&d2, extra) == 0, "a second receiptd --pg");
    fa = e2e_connect(&d);
    fb = e2e_connect(&d2);
    ck_assert_int_ge(fa, 0);
    ck_assert_int_ge(fb, 0);
    ck_assert_int_eq(e2e_hello(fa, "producer-3"), 0);
    ck_assert_int_eq(e2e_hello(fb, "producer-3"), 0);
    for (seq = 1; seq <= 20; seq++) {
        int fd = seq % 2 ? fa : fb;

        ck_assert_int_eq(send_seq(fd, seq), 0);
        ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
        ck_assert_msg(rep.r.ok, "seq %llu: %s", (unsigned long long)seq,
                      rep.r.err.message);
        e2e_reply_free(&rep);
    }
    /* Each resends what the other stored. */
    for (seq = 1; seq <= 20; seq++) {
        int fd = seq % 2 ? fb : fa;

        ck_assert_int_eq(send_seq(fd, seq), 0);
        ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
        ck_assert(rep.r.ok);
        ck_assert_ptr_nonnull(e2e_get(rep.r.result, "duplicate"));
        e2e_reply_free(&rep);
    }
    ck_assert_int_eq(scalar("SELECT count(*) FROM receipts WHERE source = "
                            "'producer-3'"),
                     20);
    /* Each write was answered before the next was sent, so they committed
     * in seq order, and their ids rise with it: a follower's (or an
     * after_id's) cursor never passes a receipt committed after it. */
    ck_assert_int_eq(scalar("SELECT count(*) FROM (SELECT id < lag(id) OVER "
                            "(ORDER BY seq) AS back FROM receipts WHERE "
                            "source = 'producer-3') t WHERE back"),
                     0);
    ck_assert_int_eq(scalar("SELECT count(*) FROM receiptd_migrations"),
                     scalar("SELECT max(version) FROM receiptd_migrations"));
    /* Either answers for both. */
    rows = query(fb, 500, "gaps", &rep);
    ck_assert_uint_eq(rows->via.array.size, 1);
    ck_assert_uint_eq(e2e_get_uint(&rows->via.array.ptr[0], "received"), 20);
    ck_assert_uint_eq(e2e_get_uint(&rows->via.array.ptr[0], "last_seq"), 20);
    e2e_reply_free(&rep);
    close(fa);
    close(fb);
    e2e_stop(&d2, SIGKILL, 5000, NULL);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("e2e_pg");
    TCase *tc = tcase_create("pg");

    tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_pg_kill9_keeps_every_ack_once);
    tcase_add_test(tc, test_pg_server_crash_then_back);
    tcase_add_test(tc, test_pg_two_instances_share_the_database);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(suite());
    int rc;

    srunner_run_all(sr, CK_NORMAL);
    rc = skip_status(sr);
    srunner_free(sr);
    return rc;
}
