/*
 * check_powerloss.c: acknowledged means durable, proven by cutting the power
 * at every sync point of a workload.
 *
 * Each case runs the workload of relwork.h once to count its sync points N,
 * then N + 1 more times, cutting the power at sync point K = 1..N and once
 * after the last sync; the unsynced writes are dropped (or garbled), the file
 * is reopened with the real VFS, and every acknowledged receipt must be there.
 * The negative controls run the same loop with the durability promise broken
 * on purpose and must lose acknowledged receipts, or the test has no teeth.
 *
 * Thread: single-threaded; Check forks each test.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "relwork.h"
#include "vfs_fault.h"

/* Sums over all cut points of one case, printed for docs/reliability.md. */
struct sweep {
    unsigned long cuts;
    unsigned long acked;
    unsigned long lost; /* acknowledged receipts missing after a cut */
    unsigned long bad;  /* cut points whose check failed for any reason */
    unsigned long undo_bytes;
    unsigned long garbled;
    char first_bad[800];
};

static char dir[1024];
static char db_path[1100];

static void
setup(void)
{
    snprintf(dir, sizeof(dir), "%s/reliability-tmp-XXXXXX", TEST_BINARY_DIR);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(db_path, sizeof(db_path), "%s/receipts.db", dir);
    ck_assert_int_eq(vfs_fault_register(1), SQLITE_OK);
}

static void
remove_db(void)
{
    char p[1200];

    unlink(db_path);
    snprintf(p, sizeof(p), "%s-wal", db_path);
    unlink(p);
    snprintf(p, sizeof(p), "%s-shm", db_path);
    unlink(p);
    snprintf(p, sizeof(p), "%s-journal", db_path);
    unlink(p);
}

static void
teardown(void)
{
    remove_db();
    rmdir(dir);
    vfs_fault_unregister();
}

static void
init_work(struct relwork *w, int synchronous, int autockpt)
{
    memset(w, 0, sizeof(*w));
    w->path = db_path;
    w->synchronous = synchronous;
    w->autocheckpoint = autockpt;
    w->ntx = 24;
    w->per_tx = 4;
    w->attempts = 1;
}

/*
 * Runs the workload with the power cut at sync point k (k == 0: after the
 * workload), restores the disk and checks it. Returns the check's verdict.
 */
static int
cut_once(struct relwork *w, unsigned long k, int garble, unsigned seed,
         struct sweep *sw)
{
    struct relwork_result res;
    struct vfs_fault_stats st;
    unsigned long i;
    int ok;

    remove_db();
    vfs_fault_reset();
    vfs_fault_cut_at_sync(k);
    relwork_run(w);
    ck_assert_int_eq(vfs_fault_restore(garble, seed), 0);
    vfs_fault_stats(&st);
    ok = relwork_check(w, &res) == 0;
    sw->cuts++;
    sw->undo_bytes += (unsigned long)st.undo_bytes;
    sw->garbled += st.garbled;
    for (i = 0; i < (unsigned long)w->ntx; i++)
        if (w->state[i] == RELWORK_ACKED)
            sw->acked += (unsigned long)w->per_tx;
    sw->lost += (unsigned long)res.missing_acked;
    if (!ok) {
        sw->bad++;
        if (sw->first_bad[0] == '\0') {
            char d[400];
            relwork_describe(&res, d, sizeof(d));
            snprintf(sw->first_bad, sizeof(sw->first_bad),
                     "cut at sync %lu: %s (workload: %s)", k, d,
                     w->first_error);
        }
    }
    return ok;
}

/* Counts the sync points of a clean run, which must itself pass. */
static unsigned long
count_syncs(struct relwork *w)
{
    struct vfs_fault_stats st;
    struct relwork_result res;
    char d[400];

    remove_db();
    vfs_fault_reset();
    ck_assert_int_eq(relwork_run(w), 0);
    vfs_fault_stats(&st);
    if (relwork_check(w, &res) != 0) {
        relwork_describe(&res, d, sizeof(d));
        ck_abort_msg("clean run fails its check: %s", d);
    }
    return st.ops[VFS_FAULT_SYNC];
}

static void
sweep(struct relwork *w, int garble, struct sweep *sw, unsigned long *nsync)
{
    unsigned long n = count_syncs(w), k;

    *nsync = n;
    memset(sw, 0, sizeof(*sw));
    for (k = 1; k <= n + 1; k++)
        cut_once(w, k <= n ? k : 0, garble, (unsigned)(k * 7919u), sw);
}

/* "sql" drives SQLite directly with the daemon's settings; "store" drives
 * daemon/store.h, the code the daemon runs. Reopening closes the database,
 * which checkpoints and deletes the WAL, then opens it again. */
static const struct {
    const char *name;
    int store;
    int autockpt;
    int reopen;
    int garble;
} cases[] = {
    { "sql, default checkpoints, dropped", 0, 0, 0, 0 },
    { "sql, checkpoint every 4 pages, dropped", 0, 4, 0, 0 },
    { "sql, default checkpoints, garbled", 0, 0, 0, 1 },
    { "sql, checkpoint every 4 pages, garbled", 0, 4, 0, 1 },
    { "sql, reopen every 8 commits, dropped", 0, 0, 8, 0 },
    { "store, dropped", 1, 0, 0, 0 },
    { "store, reopen every 8 commits, dropped", 1, 0, 8, 0 },
    { "store, reopen every 8 commits, garbled", 1, 0, 8, 1 },
};

static void
need_store(int store)
{
    if (store)
        ck_assert_msg(relwork_have_store(),
                      "built without daemon/store.h (receiptd_core)");
}

START_TEST(test_powerloss_keeps_every_acknowledged_receipt)
{
    struct relwork w;
    struct sweep sw;
    unsigned long n;

    need_store(cases[_i].store);
    init_work(&w, 2, cases[_i].autockpt);
    w.use_store = cases[_i].store;
    w.reopen_every = cases[_i].reopen;
    sweep(&w, cases[_i].garble, &sw, &n);
    printf("powerloss[%s]: %lu sync points, %lu cuts, %lu acknowledged "
           "receipts checked, %lu lost, %lu bytes unsynced, %lu ranges "
           "garbled\n",
           cases[_i].name, n, sw.cuts, sw.acked, sw.lost, sw.undo_bytes,
           sw.garbled);
    ck_assert_msg(n >= (unsigned long)w.ntx,
                  "only %lu sync points for %d commits", n, w.ntx);
    ck_assert_msg(sw.bad == 0, "%s: %lu of %lu cut points failed; first: %s",
                  cases[_i].name, sw.bad, sw.cuts, sw.first_bad);
    ck_assert_uint_gt(sw.acked, 0);
}
END_TEST

/* Repeats the garbled sweep with other seeds: each seed garbles the
 * unsynced ranges differently. */
START_TEST(test_powerloss_survives_garbled_writes_many_seeds)
{
    struct relwork w;
    struct sweep sw;
    unsigned long n, k;

    init_work(&w, 2, 4);
    n = count_syncs(&w);
    memset(&sw, 0, sizeof(sw));
    for (k = 1; k <= n + 1; k++)
        cut_once(&w, k <= n ? k : 0, 1, (unsigned)(_i * 100003u + k), &sw);
    ck_assert_msg(sw.bad == 0, "seed %d: %lu of %lu cut points failed; %s", _i,
                  sw.bad, sw.cuts, sw.first_bad);
    ck_assert_uint_gt(sw.garbled, 0);
}
END_TEST

/* Control: synchronous=NORMAL in WAL mode does not sync at COMMIT, so a
 * cut after an acknowledgement loses it. The sweep must see that. */
START_TEST(test_powerloss_control_synchronous_normal_loses_acked)
{
    struct relwork w;
    struct sweep sw;
    unsigned long n;

    init_work(&w, 1, 0);
    sweep(&w, 0, &sw, &n);
    printf("powerloss[control synchronous=NORMAL]: %lu sync points, %lu "
           "cuts, %lu acknowledged receipts lost\n",
           n, sw.cuts, sw.lost);
    ck_assert_msg(sw.lost > 0,
                  "synchronous=NORMAL lost nothing: the test has no teeth");
}
END_TEST

/* Control: acknowledging before COMMIT loses the receipts of the
 * transaction whose commit the power cut interrupts, through either
 * driver. */
START_TEST(test_powerloss_control_ack_before_commit_loses_acked)
{
    struct relwork w;
    struct sweep sw;
    unsigned long n;

    need_store(_i);
    init_work(&w, 2, 0);
    w.use_store = _i;
    w.ack_before_commit = 1;
    sweep(&w, 0, &sw, &n);
    printf("powerloss[control ack before COMMIT, %s]: %lu sync points, %lu "
           "cuts, %lu acknowledged receipts lost\n",
           _i ? "store" : "sql", n, sw.cuts, sw.lost);
    ck_assert_msg(sw.lost > 0,
                  "acknowledging before COMMIT lost nothing: the test has "
                  "no teeth");
}
END_TEST

/* The shim itself: a cut drops exactly the writes after the last sync. */
START_TEST(test_powerloss_shim_drops_only_unsynced_writes)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    int n = -1;

    remove_db();
    vfs_fault_reset();
    ck_assert_int_eq(sqlite3_open(db_path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db,
                                  "PRAGMA journal_mode=WAL;"
                                  "PRAGMA synchronous=FULL;"
                                  "CREATE TABLE t(x);"
                                  "INSERT INTO t VALUES (1);"
                                  "PRAGMA synchronous=OFF;"
                                  "INSERT INTO t VALUES (2);",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    /* The first row was synced by its COMMIT, the second was not: the cut
     * must keep exactly the first. The close fails to checkpoint, as it
     * would after a real power cut. */
    vfs_fault_cut_now();
    sqlite3_close(db);
    ck_assert_int_eq(vfs_fault_restore(0, 1), 0);
    ck_assert_int_eq(
        sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, "unix"),
        SQLITE_OK);
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL) ==
        SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            n = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    ck_assert_int_eq(n, 1);
}
END_TEST

static Suite *
powerloss_suite(void)
{
    Suite *s = suite_create("powerloss");
    TCase *tc;

    tc = tcase_create("keeps_acknowledged");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_powerloss_keeps_every_acknowledged_receipt, 0,
                        (int)(sizeof(cases) / sizeof(cases[0])));
    suite_add_tcase(s, tc);

    tc = tcase_create("garbled_seeds");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_powerloss_survives_garbled_writes_many_seeds,
                        1, 4);
    suite_add_tcase(s, tc);

    tc = tcase_create("control_normal");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_powerloss_control_synchronous_normal_loses_acked);
    suite_add_tcase(s, tc);

    tc = tcase_create("control_ack_early");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(
        tc, test_powerloss_control_ack_before_commit_loses_acked, 0, 2);
    suite_add_tcase(s, tc);

    tc = tcase_create("shim");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_powerloss_shim_drops_only_unsynced_writes);
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
