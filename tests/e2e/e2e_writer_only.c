/*
 * e2e_writer_only.c: only the writer connection ever opens the database
 * read-write. Debian 12's SQLite 3.40 has a WAL-reset corruption bug that
 * needs two connections that write or checkpoint; a read-only connection
 * can do neither, so the rule "one read-write open per daemon run" rules
 * the bug out.
 *
 * The real daemon runs with sqlite_open_spy.so preloaded, which logs every
 * sqlite3_open_v2() with its flags. The test writes, runs queries from
 * several connections at once (so that every query thread opens its
 * connection), restarts the daemon, and reads the log.
 *
 * Thread: single-threaded; Check forks the test.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "e2e_util.h"
#include "relpack.h"

#define T     5000
#define NCONN 4

static struct e2e_daemon d;
static char log_path[300];

static void
teardown(void)
{
    e2e_cleanup(&d);
    if (log_path[0] != '\0')
        unlink(log_path);
}

/* Sends receipts and, on NCONN connections at once, queries. */
static void
exercise(uint64_t base)
{
    static const char query[] = "\x81\xa4kind\xa8receipts"; /* {kind} */
    static const char stats[] = "\x81\xa4kind\xa5stats";
    struct e2e_reply rep;
    msgpack_sbuffer sb;
    int fd[NCONN], i;
    uint64_t k;

    fd[0] = e2e_connect(&d);
    ck_assert_int_ge(fd[0], 0);
    ck_assert_int_eq(e2e_hello(fd[0], "writer-only"), 0);
    msgpack_sbuffer_init(&sb);
    for (k = base; k < base + 20; k++)
        ck_assert_int_eq(relpack_receipt_frame(&sb, k, 1, k, k, 0), 0);
    ck_assert_int_eq(e2e_send_all(fd[0], sb.data, sb.size), 0);
    msgpack_sbuffer_destroy(&sb);
    for (k = 0; k < 20; k++) {
        ck_assert_int_eq(e2e_recv(fd[0], T, &rep), 0);
        ck_assert_msg(rep.r.ok, "receipt: %s", rep.r.err.message);
        e2e_reply_free(&rep);
    }
    for (i = 1; i < NCONN; i++) {
        fd[i] = e2e_connect(&d);
        ck_assert_int_ge(fd[i], 0);
    }
    /* Every connection sends its queries before any reply is read, so
     * the query threads run side by side. */
    for (i = 0; i < NCONN; i++) {
        for (k = 0; k < 8; k++)
            ck_assert_int_eq(
                e2e_request(fd[i], PROTO_OP_QUERY, k, 0, 0,
                            k % 2 ? stats : query,
                            k % 2 ? sizeof(stats) - 1 : sizeof(query) - 1),
                0);
    }
    for (i = 0; i < NCONN; i++) {
        for (k = 0; k < 8; k++) {
            ck_assert_int_eq(e2e_recv(fd[i], T, &rep), 0);
            ck_assert_msg(rep.r.ok, "query: %s", rep.r.err.message);
            e2e_reply_free(&rep);
        }
        close(fd[i]);
    }
}

START_TEST(test_e2e_writer_only_one_read_write_open_per_run)
{
    char line[1200], mode[8], file[1024];
    int flags, status, rw = 0, ro = 0, runs = 2, r;
    FILE *f;

    snprintf(log_path, sizeof(log_path), "%s/writer-only-%d.log",
             TEST_BINARY_DIR, (int)getpid());
    unlink(log_path);
    /* The daemon inherits these; the test process itself is not
     * affected (LD_PRELOAD acts at exec). */
    e2e_preload("sqlite_open_spy", NULL);
    setenv("RECEIPTD_OPEN_LOG", log_path, 1);
    ck_assert_msg(e2e_start(&d, NULL) == 0, "receiptd did not start");
    exercise(0);
    ck_assert_int_eq(e2e_stop(&d, SIGTERM, 10000, &status), 0);
    ck_assert_msg(e2e_restart(&d, NULL) == 0, "receiptd did not restart");
    exercise(100);
    ck_assert_int_eq(e2e_stop(&d, SIGTERM, 10000, &status), 0);
    e2e_preload_end();

    f = fopen(log_path, "r");
    ck_assert_msg(f != NULL, "the spy logged nothing: was it preloaded?");
    while (fgets(line, sizeof(line), f) != NULL) {
        r = sscanf(line, "%7s %d %1023s", mode, &flags, file);
        ck_assert_int_eq(r, 3);
        if (strcmp(file, d.db) != 0)
            continue;
        if (strcmp(mode, "rw") == 0)
            rw++;
        else
            ro++;
    }
    fclose(f);
    printf("e2e_writer_only: %d daemon runs, %d read-write opens, %d "
           "read-only opens of the database\n",
           runs, rw, ro);
    fflush(stdout);
    ck_assert_msg(rw == runs, "%d read-write opens in %d runs", rw, runs);
    /* Queries ran, so readers were opened, all read-only. */
    ck_assert_int_gt(ro, 0);
}
END_TEST

static Suite *
writer_only_suite(void)
{
    Suite *s = suite_create("e2e_writer_only");
    TCase *tc = tcase_create("read_write_opens");

    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_e2e_writer_only_one_read_write_open_per_run);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(writer_only_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
