/*
 * e2e_powerloss.c: the real daemon loses its power at every sync point.
 *
 * receiptd runs with vfs_fault_preload.so preloaded: at its K-th sync of the
 * database, WAL or journal, the library writes the state the disk would hold
 * after a power cut (unsynced writes dropped, or garbled) and ends the
 * process at once. A client sends receipts one at a time, each with a seq,
 * and records which were acknowledged. After the cut the file must pass
 * integrity_check and hold every acknowledged receipt exactly once; then
 * the daemon, started again without the library, must recover the file,
 * accept the unacknowledged receipts when they are resent, and end with
 * every seq stored exactly once.
 *
 * A first run without a cut counts the sync points N; the test cuts at
 * K = 1..N (the daemon's start-up, with its migrations, included).
 *
 * The second case injects I/O errors into the daemon the same way: the
 * N-th read, write, sync or truncate fails, N = 1, 1 + S, 1 + 2S, ... until
 * a run completes without the fault firing (S = RELIABILITY_FAULT_STRIDE,
 * default 5 in CI; scripts/reliability-long.sh uses 1). The client resends
 * a receipt answered `unavailable`; at exit the power is cut, with the
 * writes of a failed fsync lost as on Linux. The daemon must stay up (or,
 * for a fault during start-up, exit with an error), never acknowledge what
 * it did not commit, and keep the file intact.
 *
 * Thread: single-threaded; Check forks the test.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "e2e_util.h"
#include "relpack.h"

#define T         5000
#define NRECEIPTS 24
/* Chunks of 8: the 24 receipts make three, so power is also cut while the
 * writer turns its tail into a chunk (migrations/0007). */
static const char *const small_chunks[] = { "--chunk-receipts", "8", NULL };
/* The power-cut sweep runs for both places the WAL is synced: the
 * writer's syncer thread (the default) and SQLite's COMMIT. */
static const char *const in_commit[] = { "--chunk-receipts", "8",
                                         "--sync-in-commit", "true", NULL };
static const char *const *const sync_modes[] = { small_chunks, in_commit };
static const char *const *args = small_chunks;
#define SOURCE "powerloss-e2e"

static struct e2e_daemon d;
static char count_path[300];

static void
teardown(void)
{
    e2e_cleanup(&d);
    if (count_path[0] != '\0')
        unlink(count_path);
}

static void
preload(unsigned long cut_at, unsigned garble)
{
    char v[32];

    e2e_preload("vfs_fault_preload", NULL);
    snprintf(v, sizeof(v), "%lu", cut_at);
    setenv("RECEIPTD_CUT_AT_SYNC", v, 1);
    snprintf(v, sizeof(v), "%u", garble);
    setenv("RECEIPTD_CUT_GARBLE", v, 1);
    setenv("RECEIPTD_SYNC_COUNT", count_path, 1);
}

static void
no_preload(void)
{
    e2e_preload_end();
    unsetenv("RECEIPTD_CUT_AT_SYNC");
    unsetenv("RECEIPTD_CUT_GARBLE");
    unsetenv("RECEIPTD_SYNC_COUNT");
    unsetenv("RECEIPTD_FAULT_OP");
    unsetenv("RECEIPTD_FAULT_NTH");
    unsetenv("RECEIPTD_FAULT_CODE");
    unsetenv("RECEIPTD_CUT_AT_EXIT");
}

/* Reads the preload's "SYNCS FIRED" file; returns 0 or -1. */
static int
read_count(unsigned long *syncs, int *fired)
{
    FILE *f = fopen(count_path, "r");
    int n;

    if (f == NULL)
        return -1;
    n = fscanf(f, "%lu %d", syncs, fired);
    fclose(f);
    unlink(count_path);
    return n == 2 ? 0 : -1;
}

/*
 * Sends the receipts whose acked[] is 0, one at a time, each waiting for
 * its reply; stops at the first failure (the daemon is gone). Returns the
 * number acknowledged now.
 */
static int
send_receipts(unsigned char acked[NRECEIPTS], unsigned char sent[NRECEIPTS],
              int tries, unsigned long *unavailable)
{
    struct e2e_reply rep;
    msgpack_sbuffer sb;
    int fd, n = 0, seq, t;

    fd = e2e_connect(&d);
    if (fd < 0)
        return 0;
    if (e2e_hello(fd, SOURCE) != 0) {
        close(fd);
        return 0;
    }
    msgpack_sbuffer_init(&sb);
    for (seq = 0, t = 0; seq < NRECEIPTS; seq++, t = 0) {
    again:
        if (acked[seq])
            continue;
        sb.size = 0;
        if (relpack_receipt_frame(&sb, (uint64_t)seq, 1, (uint64_t)seq,
                                  (uint64_t)seq, 0) != 0 ||
            e2e_send_all(fd, sb.data, sb.size) != 0)
            break;
        sent[seq] = 1;
        if (e2e_recv(fd, T, &rep) != 0)
            break;
        ck_assert_msg(rep.r.ok || rep.r.err.code == PROTO_EUNAVAILABLE,
                      "seq %d: %s: %s", seq, proto_code_name(rep.r.err.code),
                      rep.r.err.message);
        if (rep.r.ok) {
            acked[seq] = 1;
            n++;
        }
        e2e_reply_free(&rep);
        /* `unavailable`: the producer tries again later. */
        if (!acked[seq] && ++t < tries) {
            if (unavailable != NULL)
                (*unavailable)++;
            goto again;
        }
    }
    msgpack_sbuffer_destroy(&sb);
    close(fd);
    return n;
}

/*
 * Checks the file: integrity ok, every acknowledged seq exactly once, no
 * seq that was never sent. Returns the rows found; -1 when the file does
 * not exist (the cut came before it was created).
 */
static long
check_file(const unsigned char acked[NRECEIPTS],
           const unsigned char sent[NRECEIPTS], const char *when)
{
    int count[NRECEIPTS] = { 0 };
    char integrity[256] = "";
    sqlite3_stmt *st;
    sqlite3 *db;
    long rows = 0, seq;
    int i;

    if (access(d.db, F_OK) != 0)
        return -1;
    ck_assert_int_eq(sqlite3_open_v2(d.db, &db, SQLITE_OPEN_READWRITE, NULL),
                     SQLITE_OK);
    if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) ==
        SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            snprintf(integrity, sizeof(integrity), "%s",
                     (const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
    } else {
        snprintf(integrity, sizeof(integrity), "%s", sqlite3_errmsg(db));
    }
    ck_assert_msg(strcmp(integrity, "ok") == 0, "%s: integrity_check: %s", when,
                  integrity);
    if (sqlite3_prepare_v2(db,
                           "SELECT r.seq FROM receipts r JOIN strings s ON "
                           "s.id = r.source_id WHERE CAST(s.value AS BLOB) "
                           "= CAST(? AS BLOB)",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, SOURCE, -1, SQLITE_STATIC);
        while (sqlite3_step(st) == SQLITE_ROW) {
            seq = (long)sqlite3_column_int64(st, 0);
            ck_assert_msg(seq >= 0 && seq < NRECEIPTS && sent[seq],
                          "%s: seq %ld was never sent", when, seq);
            count[seq]++;
            rows++;
        }
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    for (i = 0; i < NRECEIPTS; i++) {
        ck_assert_msg(count[i] <= 1, "%s: seq %d stored %d times", when, i,
                      count[i]);
        ck_assert_msg(!acked[i] || count[i] == 1,
                      "%s: acknowledged seq %d is missing", when, i);
    }
    return rows;
}

static unsigned long
count_syncs(void)
{
    unsigned char acked[NRECEIPTS] = { 0 }, sent[NRECEIPTS] = { 0 };
    unsigned long n = 0;
    int status, fired;

    preload(0, 0);
    ck_assert_msg(e2e_start(&d, args) == 0, "receiptd did not start");
    no_preload();
    ck_assert_int_eq(send_receipts(acked, sent, 1, NULL), NRECEIPTS);
    ck_assert_int_eq(e2e_stop(&d, SIGTERM, 10000, &status), 0);
    ck_assert_int_eq(check_file(acked, sent, "no cut"), NRECEIPTS);
    ck_assert_msg(read_count(&n, &fired) == 0,
                  "the preloaded VFS wrote no sync count");
    e2e_cleanup(&d);
    return n;
}

START_TEST(test_e2e_powerloss_daemon_keeps_every_acknowledged_receipt)
{
    unsigned char acked[NRECEIPTS], sent[NRECEIPTS];
    unsigned long n, k, cut_in_startup = 0, acked_total = 0, resent = 0;
    int status, started, i, missing;
    char when[96];
    long rows;

    args = sync_modes[_i];
    snprintf(count_path, sizeof(count_path), "%s/powerloss-e2e-%d.count",
             TEST_BINARY_DIR, (int)getpid());
    n = count_syncs();
    ck_assert_uint_gt(n, NRECEIPTS);
    for (k = 1; k <= n; k++) {
        memset(acked, 0, sizeof(acked));
        memset(sent, 0, sizeof(sent));
        snprintf(when, sizeof(when), "cut at sync %lu of %lu%s", k, n,
                 k % 2 ? "" : " (garbled)");
        /* Even cuts garble the unsynced writes instead of dropping them. */
        preload(k, k % 2 ? 0 : (unsigned)k);
        started = e2e_start(&d, args) == 0;
        no_preload();
        if (started)
            send_receipts(acked, sent, 1, NULL);
        else
            cut_in_startup++;
        /* The process must have ended itself at the cut, with the
         * preload's exit status. */
        if (d.pid > 0) {
            /* The last sync points come from the clean stop's checkpoint:
             * a daemon that got through every receipt is stopped (a
             * signal to a process that already ended is harmless). */
            kill(d.pid, SIGTERM);
            status = 0;
            for (i = 0; i < 500 && waitpid(d.pid, &status, WNOHANG) == 0; i++)
                usleep(10000);
            if (i == 500) {
                e2e_stop(&d, SIGKILL, 5000, NULL);
                ck_abort_msg("%s: the daemon never reached the cut", when);
            }
            d.pid = 0;
            ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 99,
                          "%s: the daemon ended with status %d, not by the "
                          "cut",
                          when, status);
        }
        for (i = 0; i < NRECEIPTS; i++)
            acked_total += acked[i];
        check_file(acked, sent, when);

        /* Start-up after the cut recovers the file; the producer resends
         * what was not acknowledged, and everything lands exactly once. */
        ck_assert_msg(e2e_restart(&d, args) == 0,
                      "%s: receiptd does not start on the file", when);
        missing = 0;
        for (i = 0; i < NRECEIPTS; i++) {
            resent += sent[i] && !acked[i];
            missing += !acked[i];
        }
        memset(sent, 1, sizeof(sent));
        ck_assert_int_eq(send_receipts(acked, sent, 1, NULL), missing);
        ck_assert_int_eq(e2e_stop(&d, SIGTERM, 10000, &status), 0);
        rows = check_file(acked, sent, when);
        ck_assert_int_eq(rows, NRECEIPTS);
        e2e_cleanup(&d);
    }
    printf("e2e_powerloss[%s]: receiptd lost its power at each of %lu "
           "sync points (%lu during start-up, half garbled); %lu "
           "acknowledged receipts checked, %lu unacknowledged resent, 0 "
           "lost\n",
           args == in_commit ? "sync in COMMIT" : "syncer thread", n,
           cut_in_startup, acked_total, resent);
    fflush(stdout);
}
END_TEST

static int
env_int(const char *name, int dflt)
{
    const char *v = getenv(name);

    return v != NULL && *v != '\0' ? atoi(v) : dflt;
}

static const struct {
    const char *op;
    int code;
    const char *name;
} faults[] = {
    { "read", SQLITE_IOERR_READ, "SQLITE_IOERR_READ" },
    { "write", SQLITE_IOERR_WRITE, "SQLITE_IOERR_WRITE" },
    { "write", SQLITE_FULL, "SQLITE_FULL" },
    { "sync", SQLITE_IOERR_FSYNC, "SQLITE_IOERR_FSYNC" },
    { "truncate", SQLITE_IOERR_TRUNCATE, "SQLITE_IOERR_TRUNCATE" },
};

START_TEST(test_e2e_powerloss_daemon_io_fault_never_acknowledges_a_loss)
{
    unsigned char acked[NRECEIPTS], sent[NRECEIPTS];
    unsigned long nth, syncs, runs = 0, injected = 0, unavailable = 0;
    unsigned long failed_start = 0, acked_total = 0;
    int stride = env_int("RELIABILITY_FAULT_STRIDE", 5), fired = 1;
    int status = 0, started, missing, i;
    char v[32], when[128];

    snprintf(count_path, sizeof(count_path), "%s/powerloss-e2e-%d.count",
             TEST_BINARY_DIR, (int)getpid());
    if (stride < 1)
        stride = 1;
    for (nth = 1; fired; nth += (unsigned long)stride) {
        memset(acked, 0, sizeof(acked));
        memset(sent, 0, sizeof(sent));
        snprintf(when, sizeof(when), "%s %s at call %lu", faults[_i].op,
                 faults[_i].name, nth);
        preload(0, 0);
        setenv("RECEIPTD_FAULT_OP", faults[_i].op, 1);
        snprintf(v, sizeof(v), "%lu", nth);
        setenv("RECEIPTD_FAULT_NTH", v, 1);
        snprintf(v, sizeof(v), "%d", faults[_i].code);
        setenv("RECEIPTD_FAULT_CODE", v, 1);
        setenv("RECEIPTD_CUT_AT_EXIT", "1", 1);
        started = e2e_start(&d, small_chunks) == 0;
        no_preload();
        if (started) {
            send_receipts(acked, sent, 3, &unavailable);
            ck_assert_msg(e2e_alive(&d), "%s: receiptd died", when);
            ck_assert_int_eq(e2e_stop(&d, SIGTERM, 10000, &status), 0);
        } else {
            /* A fault in start-up may stop it with an error, never a
             * crash: the count file below is written only by exit(). */
            failed_start++;
            if (d.pid > 0)
                ck_assert_int_eq(e2e_stop(&d, SIGKILL, 5000, &status), 0);
        }
        ck_assert_msg(!started || WIFEXITED(status),
                      "%s: receiptd ended by signal %d", when,
                      WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        ck_assert_msg(read_count(&syncs, &fired) == 0,
                      "%s: receiptd did not exit through exit() (a crash?)",
                      when);
        runs++;
        injected += (unsigned long)fired;
        for (i = 0; i < NRECEIPTS; i++)
            acked_total += acked[i];
        check_file(acked, sent, when);

        /* Restarted without faults, it takes the resends. */
        ck_assert_msg(e2e_restart(&d, small_chunks) == 0,
                      "%s: receiptd does not start on the file", when);
        missing = 0;
        for (i = 0; i < NRECEIPTS; i++)
            missing += !acked[i];
        memset(sent, 1, sizeof(sent));
        ck_assert_int_eq(send_receipts(acked, sent, 1, NULL), missing);
        ck_assert_int_eq(e2e_stop(&d, SIGTERM, 10000, &status), 0);
        ck_assert_int_eq(check_file(acked, sent, when), NRECEIPTS);
        e2e_cleanup(&d);
    }
    printf("e2e_powerloss[%s -> %s, every %d]: %lu runs, %lu faults "
           "injected (%lu stopped start-up), %lu unavailable replies "
           "resent, %lu acknowledged receipts checked, 0 lost\n",
           faults[_i].op, faults[_i].name, stride, runs, injected, failed_start,
           unavailable, acked_total);
    fflush(stdout);
    ck_assert_uint_gt(injected, 0);
}
END_TEST

/*
 * A failed sync, then the power cut a sync or two later. After a failed
 * fsync Linux may drop the pages it had (the preload keeps them lost
 * whatever later syncs say), so a daemon that went on committing after
 * the frames it failed to sync would acknowledge receipts the WAL cannot
 * reach after the cut (recovery stops at the lost frames). The writer
 * writes the WAL again before its next commit (writer.c heal); without
 * that this test loses acknowledged receipts.
 */
START_TEST(test_e2e_powerloss_daemon_sync_fault_then_cut)
{
    unsigned char acked[NRECEIPTS], sent[NRECEIPTS];
    unsigned long n, nth, runs = 0, acked_total = 0;
    int stride = env_int("RELIABILITY_FAULT_STRIDE", 5), status, started, i;
    unsigned long after = (unsigned long)_i;
    char v[32], when[128];

    args = small_chunks;
    snprintf(count_path, sizeof(count_path), "%s/powerloss-e2e-%d.count",
             TEST_BINARY_DIR, (int)getpid());
    n = count_syncs();
    if (stride < 1)
        stride = 1;
    for (nth = 1; nth + after <= n; nth += (unsigned long)stride) {
        memset(acked, 0, sizeof(acked));
        memset(sent, 0, sizeof(sent));
        snprintf(when, sizeof(when), "sync %lu failed, power cut at sync %lu",
                 nth, nth + after);
        preload(nth + after, 0);
        setenv("RECEIPTD_FAULT_OP", "sync", 1);
        snprintf(v, sizeof(v), "%lu", nth);
        setenv("RECEIPTD_FAULT_NTH", v, 1);
        snprintf(v, sizeof(v), "%d", SQLITE_IOERR_FSYNC);
        setenv("RECEIPTD_FAULT_CODE", v, 1);
        started = e2e_start(&d, args) == 0;
        no_preload();
        if (started)
            send_receipts(acked, sent, 3, NULL);
        if (d.pid > 0) {
            kill(d.pid, SIGTERM);
            status = 0;
            for (i = 0; i < 500 && waitpid(d.pid, &status, WNOHANG) == 0; i++)
                usleep(10000);
            if (i == 500)
                e2e_stop(&d, SIGKILL, 5000, NULL);
            d.pid = 0;
        }
        for (i = 0; i < NRECEIPTS; i++)
            acked_total += acked[i];
        check_file(acked, sent, when);
        e2e_cleanup(&d);
        runs++;
    }
    printf("e2e_powerloss[sync fault, cut %lu syncs later, every %d]: %lu "
           "runs, %lu acknowledged receipts checked, 0 lost\n",
           after, stride, runs, acked_total);
    fflush(stdout);
    ck_assert_uint_gt(runs, 0);
}
END_TEST

static Suite *
powerloss_suite(void)
{
    Suite *s = suite_create("e2e_powerloss");
    TCase *tc = tcase_create("daemon_power_cut");

    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(
        tc, test_e2e_powerloss_daemon_keeps_every_acknowledged_receipt, 0,
        (int)(sizeof(sync_modes) / sizeof(sync_modes[0])));
    suite_add_tcase(s, tc);

    tc = tcase_create("daemon_sync_fault_then_cut");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_e2e_powerloss_daemon_sync_fault_then_cut, 1,
                        4);
    suite_add_tcase(s, tc);

    tc = tcase_create("daemon_io_faults");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(
        tc, test_e2e_powerloss_daemon_io_fault_never_acknowledges_a_loss, 0,
        (int)(sizeof(faults) / sizeof(faults[0])));
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(powerloss_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
