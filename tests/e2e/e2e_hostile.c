/*
 * e2e_hostile.c: the hostile corpus (tests/hostile/) sent to the real
 * receiptd binary, one connection per frame.
 *
 * Each frame must be answered as its README.txt line says, promptly: an
 * error reply then a close, a reply on a connection that stays open (a ping
 * afterwards is answered), or, for a frame that never completes, a close
 * once the client stops sending. The daemon's resident memory must stay
 * within a small multiple of max_frame above its level before the corpus,
 * and a valid receipt must still land afterwards.
 *
 * Thread: single-threaded; Check forks each test, and each test starts its
 * own daemon (e2e_util.c).
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "e2e_util.h"
#include "frame.h"
#include "hostile_list.h"
#include "relpack.h"

#define T_REPLY   5000 /* ms for a reply */
#define T_CLOSE   3000 /* ms for a close after a fatal frame */
#define T_FRAME   3000 /* the daemon's --frame-timeout-ms here */
#define MAX_FRAME (1u << 20)

/* Peak resident growth allowed over the corpus, in multiples of max_frame.
 * Measured: about 25 x, all of it from 106-wide-nil-array.bin: msgpack-c
 * unpacks each 1-byte nil into a 24-byte msgpack_object, so a frame of a
 * million nils costs 24 MiB while it is decoded (every other frame stays
 * under 0.3 MiB). That tree lives only while its frame is decoded, one
 * frame at a time on the loop; no queued job keeps one (e2e_overload's
 * plan flood checks that). A cap on objects per frame would also refuse
 * valid compact frames, which can hold an object per byte. AddressSanitizer
 * keeps freed memory in quarantine (256 MiB by default) and adds shadow
 * memory, so its bound is looser. */
#ifdef __SANITIZE_ADDRESS__
#define RSS_FRAMES 300
#else
#define RSS_FRAMES 32
#endif

static struct hostile_case cases[HOSTILE_MAX];
static int ncases;
static struct e2e_daemon d;
static long slowest_ms; /* longest wait for an answer or a close */
static char slowest[128];

static void
note_time(const char *file, long t0)
{
    long dt = e2e_now_ms() - t0;

    if (dt > slowest_ms) {
        slowest_ms = dt;
        snprintf(slowest, sizeof(slowest), "%s", file);
    }
}

static void
start(void)
{
    static const char *const flags[] = { "--frame-timeout-ms", "3000", NULL };

    ck_assert_msg(e2e_start(&d, flags) == 0, "receiptd did not start");
}

static void
teardown(void)
{
    e2e_cleanup(&d);
}

/* Sends one valid receipt with a seq on a new connection; 0 when it is
 * acknowledged. */
static int
send_valid(uint64_t seq)
{
    msgpack_sbuffer sb;
    struct e2e_reply rep;
    int fd, rc = -1;

    fd = e2e_connect(&d);
    if (fd < 0)
        return -1;
    msgpack_sbuffer_init(&sb);
    if (e2e_hello(fd, "hostile-test") == 0 &&
        relpack_receipt_frame(&sb, seq, 1, seq, seq, 0) == 0 &&
        e2e_send_all(fd, sb.data, sb.size) == 0 &&
        e2e_recv(fd, T_REPLY, &rep) == 0) {
        rc = rep.r.ok ? 0 : -1;
        e2e_reply_free(&rep);
    }
    msgpack_sbuffer_destroy(&sb);
    close(fd);
    return rc;
}

/*
 * Sends case i on a fresh connection and checks the outcome. Returns 0, or
 * -1 with why[] saying what went wrong.
 */
static int
run_case(int i, int eof, char *why, size_t whylen)
{
    const struct hostile_case *e = &cases[i];
    struct e2e_reply rep;
    const char *got;
    char *buf;
    size_t len = 0;
    int fd, rc = -1;
    long t0;

    buf = hostile_list_read(HOSTILE_DIR, e->file, &len);
    if (buf == NULL) {
        snprintf(why, whylen, "%s: cannot read", e->file);
        return -1;
    }
    fd = e2e_connect(&d);
    if (fd < 0) {
        snprintf(why, whylen, "%s: cannot connect", e->file);
        free(buf);
        return -1;
    }
    /* The daemon may close before reading everything (a bad length):
     * a failed send is not a failure of the test. */
    (void)e2e_send_all(fd, buf, len);
    free(buf);
    t0 = e2e_now_ms();

    if (strcmp(e->outcome, HOSTILE_WAIT) == 0) {
        /* The peer stops sending mid-frame: the daemon must close, at EOF
         * (eof) or else by its frame timeout (3 s here). */
        if (eof)
            shutdown(fd, SHUT_WR);
        if (e2e_wait_closed(fd, T_FRAME + 2000)) {
            note_time(e->file, t0);
            rc = 0;
        } else
            snprintf(why, whylen, "%s: not closed after EOF mid-frame",
                     e->file);
        close(fd);
        return rc;
    }
    if (e2e_recv(fd, T_REPLY, &rep) != 0) {
        snprintf(why, whylen, "%s: no reply", e->file);
        close(fd);
        return -1;
    }
    note_time(e->file, t0);
    got = rep.r.ok ? "ok" : proto_code_name(rep.r.err.code);
    if (strcmp(got, e->code) != 0) {
        snprintf(why, whylen, "%s: expected %s, got %s (%.100s: %.200s)",
                 e->file, e->code, got, rep.r.err.path, rep.r.err.message);
    } else if (e->check_path && !rep.r.ok &&
               strcmp(rep.r.err.path, e->path) != 0) {
        snprintf(why, whylen, "%s: expected path \"%s\", got \"%.200s\"",
                 e->file, e->path, rep.r.err.path);
    } else {
        rc = 0;
    }
    e2e_reply_free(&rep);
    if (rc == 0 && strcmp(e->outcome, HOSTILE_CLOSE) == 0 &&
        !e2e_wait_closed(fd, T_CLOSE)) {
        snprintf(why, whylen, "%s: connection not closed after %s", e->file,
                 got);
        rc = -1;
    }
    if (rc == 0 && strcmp(e->outcome, HOSTILE_REPLY) == 0) {
        /* The stream is still in step: a ping is answered. */
        if (e2e_request(fd, PROTO_OP_PING, 99, 0, 0, NULL, 0) != 0 ||
            e2e_recv(fd, T_REPLY, &rep) != 0) {
            snprintf(why, whylen, "%s: no answer to a ping afterwards",
                     e->file);
            rc = -1;
        } else {
            if (!rep.r.ok || rep.r.id != 99) {
                snprintf(why, whylen, "%s: bad ping reply afterwards", e->file);
                rc = -1;
            }
            e2e_reply_free(&rep);
        }
    }
    close(fd);
    return rc;
}

START_TEST(test_e2e_hostile_frame_gets_expected_outcome)
{
    char why[512] = "";

    start();
    /* Without EOF: a frame that never completes is cut off by the frame
     * timeout, as a slow or stuck peer would be. */
    ck_assert_msg(run_case(_i, 0, why, sizeof(why)) == 0, "%s", why);
    ck_assert_msg(e2e_alive(&d), "receiptd died on %s", cases[_i].file);
}
END_TEST

/* The whole corpus against one daemon: memory stays bounded and a valid
 * receipt lands afterwards. */
START_TEST(test_e2e_hostile_corpus_bounded_memory_then_valid_receipt)
{
    char why[512];
    long base, rss, peak = 0, hwm0, hwm, last_hwm;
    int i, bad = 0;
    sqlite3 *db;
    sqlite3_stmt *st;
    long rows = -1;

    start();
    ck_assert_int_eq(send_valid(1), 0);
    base = e2e_proc_kb(d.pid, "VmRSS:");
    hwm0 = e2e_proc_kb(d.pid, "VmHWM:");
    last_hwm = hwm0;
    ck_assert_int_gt(base, 0);
    for (i = 0; i < ncases; i++) {
        why[0] = '\0';
        if (run_case(i, 1, why, sizeof(why)) != 0) {
            bad++;
            fprintf(stderr, "e2e_hostile: %s\n", why);
        }
        ck_assert_msg(e2e_alive(&d), "receiptd died on %s", cases[i].file);
        rss = e2e_proc_kb(d.pid, "VmRSS:");
        hwm = e2e_proc_kb(d.pid, "VmHWM:");
        if (hwm > last_hwm) {
            /* Which frame raised the high-water mark, for the report. */
            fprintf(stderr, "e2e_hostile: %s raised VmHWM to %ld kB\n",
                    cases[i].file, hwm);
            last_hwm = hwm;
        }
        if (rss > peak)
            peak = rss;
    }
    hwm = e2e_proc_kb(d.pid, "VmHWM:");
    if (hwm > peak)
        peak = hwm;
    ck_assert_int_eq(send_valid(2), 0);
    printf("e2e_hostile: %d frames sent, %d wrong outcomes; slowest "
           "answer or close %ld ms (%s); RSS %ld kB before, peak %ld kB "
           "(growth %ld kB = %.1f x max_frame; HWM before %ld kB)\n",
           ncases, bad, slowest_ms, slowest, base, peak, peak - base,
           (double)(peak - base) / (MAX_FRAME / 1024), hwm0);
    fflush(stdout);
    ck_assert_int_eq(bad, 0);
    ck_assert_msg(peak - base <= (long)RSS_FRAMES * (MAX_FRAME / 1024),
                  "resident memory grew by %ld kB, over %d x max_frame",
                  peak - base, RSS_FRAMES);

    /* Both valid receipts are in the file after a clean stop. */
    ck_assert_int_eq(e2e_stop(&d, SIGTERM, 10000, NULL), 0);
    ck_assert_int_eq(sqlite3_open_v2(d.db, &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    if (sqlite3_prepare_v2(db,
                           "SELECT count(*) FROM receipts r JOIN strings s "
                           "ON s.id = r.source_id WHERE CAST(s.value AS "
                           "BLOB) = CAST('hostile-test' AS BLOB) AND r.seq "
                           "IN (1, 2)",
                           -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            rows = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    ck_assert_int_eq(rows, 2);
}
END_TEST

/* A valid request cut at every byte, each cut a whole frame (its length
 * patched), all pipelined on one connection: each is answered `malformed`
 * in order, the connection stays open, and a valid receipt follows. */
START_TEST(test_e2e_hostile_truncation_at_every_byte_is_answered)
{
    msgpack_sbuffer valid, all;
    struct e2e_reply rep;
    unsigned char hdr[FRAME_HEADER_SIZE];
    size_t body, cut;
    int fd;

    start();
    msgpack_sbuffer_init(&valid);
    msgpack_sbuffer_init(&all);
    ck_assert_int_eq(relpack_receipt_frame(&valid, 1, 1, 1, 1, 1), 0);
    body = valid.size - FRAME_HEADER_SIZE;
    for (cut = 1; cut < body; cut++) {
        frame_put_header(hdr, (uint32_t)cut);
        ck_assert_int_eq(
            msgpack_sbuffer_write(&all, (const char *)hdr, sizeof(hdr)), 0);
        ck_assert_int_eq(
            msgpack_sbuffer_write(&all, valid.data + FRAME_HEADER_SIZE, cut),
            0);
    }
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    /* The replies are small and the daemon keeps reading while they
     * queue, so one send of everything cannot deadlock. */
    ck_assert_int_eq(e2e_send_all(fd, all.data, all.size), 0);
    for (cut = 1; cut < body; cut++) {
        ck_assert_msg(e2e_recv(fd, T_REPLY, &rep) == 0,
                      "no reply to the cut at %zu of %zu bytes", cut, body);
        ck_assert_msg(!rep.r.ok && rep.r.err.code == PROTO_EMALFORMED,
                      "cut at %zu: %s", cut,
                      rep.r.ok ? "ok" : proto_code_name(rep.r.err.code));
        e2e_reply_free(&rep);
    }
    ck_assert_int_eq(e2e_send_all(fd, valid.data, valid.size), 0);
    ck_assert_int_eq(e2e_recv(fd, T_REPLY, &rep), 0);
    ck_assert_msg(rep.r.ok, "the valid receipt after the cuts: %s",
                  rep.r.err.message);
    e2e_reply_free(&rep);
    close(fd);
    printf("e2e_hostile: %zu truncations of a %zu-byte request answered "
           "malformed on one connection, then a receipt stored\n",
           body - 1, body);
    fflush(stdout);
    msgpack_sbuffer_destroy(&valid);
    msgpack_sbuffer_destroy(&all);
}
END_TEST

static Suite *
e2e_hostile_suite(void)
{
    Suite *s = suite_create("e2e_hostile");
    TCase *tc;

    tc = tcase_create("each_frame");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_e2e_hostile_frame_gets_expected_outcome, 0,
                        ncases);
    suite_add_tcase(s, tc);

    tc = tcase_create("truncation");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_e2e_hostile_truncation_at_every_byte_is_answered);
    suite_add_tcase(s, tc);

    tc = tcase_create("corpus_memory");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc,
                   test_e2e_hostile_corpus_bounded_memory_then_valid_receipt);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr;
    int failed;

    ncases = hostile_list_load(HOSTILE_DIR, cases, HOSTILE_MAX);
    if (ncases < 40) {
        fprintf(stderr, "%s/README.txt: %d cases, expected at least 40\n",
                HOSTILE_DIR, ncases);
        return EXIT_FAILURE;
    }
    sr = srunner_create(e2e_hostile_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
