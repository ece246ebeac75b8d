/*
 * check_fault.c: I/O and fsync errors injected at the Nth operation.
 *
 * For each kind of operation (read, write, sync, truncate) and error code,
 * the workload of relwork.h runs with the Nth call failing, for N = 1, 2, ...
 * until a run completes without the injection firing. The workload resends a
 * failed transaction whole, as a producer that got `unavailable` would. After
 * each run the power is cut (unsynced writes dropped) and the file reopened
 * with the real VFS: every acknowledged receipt must be there exactly once,
 * nothing unexpected, integrity_check ok.
 *
 * Sync errors follow Linux after a failed fsync ("fsyncgate"): the file's
 * unsynced writes are lost at the cut even if a later sync succeeds, so code
 * that retries COMMIT after an fsync failure and then acknowledges loses
 * receipts here. A negative control does exactly that and must lose some.
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

/* A workload cannot need more operations of one kind than this; the loop
 * stops there to bound a runaway. */
#define MAX_N 20000

static char dir[1024];
static char db_path[1100];
static char template_path[1200]; /* a migrated file; "" = start empty */

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
    static const char *const sfx[] = { "", "-wal", "-shm", "-journal" };
    char p[1200];
    size_t i;

    for (i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
        snprintf(p, sizeof(p), "%s%s", db_path, sfx[i]);
        unlink(p);
    }
}

static void
teardown(void)
{
    if (template_path[0] != '\0')
        unlink(template_path);
    template_path[0] = '\0';
    remove_db();
    rmdir(dir);
    vfs_fault_unregister();
}

static void
init_work(struct relwork *w)
{
    memset(w, 0, sizeof(*w));
    w->path = db_path;
    w->synchronous = 2;
    w->autocheckpoint = 4;
    w->ntx = 10;
    w->per_tx = 4;
    w->attempts = 3;
}

struct tally {
    unsigned long runs;     /* values of N tried */
    unsigned long injected; /* runs where the fault fired */
    unsigned long failed_tx;
    unsigned long acked;
    unsigned long lost;
    unsigned long bad;
    char first_bad[900];
};

static void
copy_file(const char *from, const char *to)
{
    char buf[65536];
    size_t n;
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");

    ck_assert_ptr_nonnull(in);
    ck_assert_ptr_nonnull(out);
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
        ck_assert_uint_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    ck_assert_int_eq(fclose(out), 0);
}

/* Makes template_path: the schema applied by w's driver, no receipts. A
 * clean close checkpoints and deletes the WAL, so it is one file. */
static void
make_template(const struct relwork *like)
{
    struct relwork w = *like;

    snprintf(template_path, sizeof(template_path), "%s.migrated", db_path);
    w.path = template_path;
    w.ntx = 0;
    vfs_fault_reset();
    ck_assert_int_eq(relwork_run(&w), 0);
}

/* One run with the nth op failing; returns 1 when the fault fired. */
static int
run_one(struct relwork *w, int op, unsigned long nth, int code, int sticky,
        struct tally *t)
{
    struct relwork_result res;
    int fired, i;

    remove_db();
    /* A copy of the template counts as durable: the VFS takes a file's
     * state on disk when it first sees it after a reset. */
    if (template_path[0] != '\0')
        copy_file(template_path, db_path);
    vfs_fault_reset();
    vfs_fault_sticky_sync_loss(sticky);
    vfs_fault_inject(op, nth, code);
    relwork_run(w);
    fired = vfs_fault_fired();
    ck_assert_int_eq(vfs_fault_restore(0, 0), 0);
    t->runs++;
    t->injected += (unsigned long)fired;
    t->failed_tx += (unsigned long)w->failures;
    for (i = 0; i < w->ntx; i++)
        if (w->state[i] == RELWORK_ACKED)
            t->acked += (unsigned long)w->per_tx;
    if (relwork_check(w, &res) != 0 || (!fired && !w->completed)) {
        char d[400];

        relwork_describe(&res, d, sizeof(d));
        t->bad++;
        t->lost += (unsigned long)res.missing_acked;
        if (t->first_bad[0] == '\0')
            snprintf(t->first_bad, sizeof(t->first_bad),
                     "N=%lu fired=%d completed=%d: %s (workload: %s)", nth,
                     fired, w->completed, d, w->first_error);
    }
    return fired;
}

static int
env_int(const char *name, int dflt)
{
    const char *v = getenv(name);

    return v != NULL && *v != '\0' ? atoi(v) : dflt;
}

/* N = 1, 1 + stride, ... until a run completes without the fault. */
static void
sweep(struct relwork *w, int op, int code, int sticky, unsigned long stride,
      struct tally *t)
{
    unsigned long n;

    memset(t, 0, sizeof(*t));
    for (n = 1; n <= MAX_N; n += stride)
        if (!run_one(w, op, n, code, sticky, t))
            break;
    ck_assert_msg(n <= MAX_N, "the workload never completed");
}

static const char *const op_names[VFS_FAULT_NOPS] = { "read", "write", "sync",
                                                      "truncate" };

/*
 * "sql" drives SQLite directly with the daemon's settings; "store" drives
 * daemon/store.h, reopening every 6 transactions so that the checkpoint
 * and the WAL's deletion at close are in the sweep too. Most cases start
 * from a migrated copy; the cases that start from an empty file put the
 * migrations (large, with the rollup triggers) in the sweep. Every N is
 * tried; RELIABILITY_FAULT_STRIDE=S tries every S-th instead, for a quick
 * run.
 */
static const struct {
    int store;
    int empty; /* start from an empty file: migrations included */
    unsigned long stride;
    int op;
    int code;
    const char *code_name;
} cases[] = {
    { 0, 0, 1, VFS_FAULT_READ, SQLITE_IOERR_READ, "SQLITE_IOERR_READ" },
    { 0, 0, 1, VFS_FAULT_WRITE, SQLITE_IOERR_WRITE, "SQLITE_IOERR_WRITE" },
    { 0, 0, 1, VFS_FAULT_WRITE, SQLITE_FULL, "SQLITE_FULL" },
    { 0, 0, 1, VFS_FAULT_SYNC, SQLITE_IOERR_FSYNC, "SQLITE_IOERR_FSYNC" },
    { 0, 0, 1, VFS_FAULT_TRUNCATE, SQLITE_IOERR_TRUNCATE,
      "SQLITE_IOERR_TRUNCATE" },
    { 1, 0, 1, VFS_FAULT_READ, SQLITE_IOERR_READ, "SQLITE_IOERR_READ" },
    { 1, 0, 1, VFS_FAULT_WRITE, SQLITE_IOERR_WRITE, "SQLITE_IOERR_WRITE" },
    { 1, 0, 1, VFS_FAULT_WRITE, SQLITE_FULL, "SQLITE_FULL" },
    { 1, 0, 1, VFS_FAULT_SYNC, SQLITE_IOERR_FSYNC, "SQLITE_IOERR_FSYNC" },
    { 1, 0, 1, VFS_FAULT_TRUNCATE, SQLITE_IOERR_TRUNCATE,
      "SQLITE_IOERR_TRUNCATE" },
    { 0, 1, 1, VFS_FAULT_READ, SQLITE_IOERR_READ, "SQLITE_IOERR_READ" },
    { 0, 1, 1, VFS_FAULT_WRITE, SQLITE_FULL, "SQLITE_FULL" },
    { 1, 1, 1, VFS_FAULT_WRITE, SQLITE_IOERR_WRITE, "SQLITE_IOERR_WRITE" },
    { 1, 1, 1, VFS_FAULT_SYNC, SQLITE_IOERR_FSYNC, "SQLITE_IOERR_FSYNC" },
};

START_TEST(test_fault_nth_io_error_loses_nothing_acknowledged)
{
    struct relwork w;
    struct tally t;

    unsigned long stride = cases[_i].stride;

    if (env_int("RELIABILITY_FAULT_STRIDE", 0) > 0)
        stride = (unsigned long)env_int("RELIABILITY_FAULT_STRIDE", 0);
    init_work(&w);
    if (cases[_i].store) {
        ck_assert_msg(relwork_have_store(),
                      "built without daemon/store.h (receiptd_core)");
        w.use_store = 1;
        w.reopen_every = 6;
    }
    if (!cases[_i].empty)
        make_template(&w);
    sweep(&w, cases[_i].op, cases[_i].code, 1, stride, &t);
    printf("fault[%s, %s, %s -> %s, every %lu]: %lu runs, %lu faults "
           "injected, %lu transactions failed and resent, %lu acknowledged "
           "receipts checked, %lu bad runs\n",
           cases[_i].store ? "store" : "sql",
           cases[_i].empty ? "from empty" : "migrated file",
           op_names[cases[_i].op], cases[_i].code_name, stride, t.runs,
           t.injected, t.failed_tx, t.acked, t.bad);
    ck_assert_msg(t.bad == 0, "%s on %s: %lu of %lu runs failed; first: %s",
                  cases[_i].code_name, op_names[cases[_i].op], t.bad, t.runs,
                  t.first_bad);
    /* Reads, writes and syncs happen in every commit: a sweep that never
     * injected anything would prove nothing. */
    if (cases[_i].op != VFS_FAULT_TRUNCATE)
        ck_assert_uint_gt(t.injected, 0);
}
END_TEST

/* A failed commit is never acknowledged: with every sync failing after the
 * schema is in place, nothing may be acknowledged at all. */
START_TEST(test_fault_failed_commit_is_not_acknowledged)
{
    struct relwork w;
    struct relwork_result res;
    struct vfs_fault_stats st;
    unsigned long setup_syncs;
    int i, acked = 0;

    init_work(&w);
    w.ntx = 0;
    remove_db();
    vfs_fault_reset();
    ck_assert_int_eq(relwork_run(&w), 0);
    vfs_fault_stats(&st);
    setup_syncs = st.ops[VFS_FAULT_SYNC];

    /* Reopening an existing database does not sync; the first sync of
     * the second run is the first COMMIT's, and the power goes there. */
    init_work(&w);
    vfs_fault_reset();
    vfs_fault_cut_at_sync(1);
    ck_assert_int_eq(relwork_run(&w), 1);
    for (i = 0; i < w.ntx; i++)
        acked += w.state[i] == RELWORK_ACKED;
    ck_assert_int_eq(acked, 0);
    ck_assert_int_eq(w.state[0], RELWORK_TRIED);
    ck_assert_int_eq(vfs_fault_restore(0, 0), 0);
    ck_assert_int_eq(relwork_check(&w, &res), 0);
    ck_assert_int_eq(res.rows, 0);
    ck_assert_uint_gt(setup_syncs, 0);
}
END_TEST

/* Control: retrying COMMIT after an fsync failure and acknowledging must
 * lose acknowledged receipts under the fsyncgate model. */
START_TEST(test_fault_control_retry_commit_after_fsync_loses_acked)
{
    struct relwork w;
    struct tally t;

    init_work(&w);
    w.retry_commit = 1;
    make_template(&w);
    sweep(&w, VFS_FAULT_SYNC, SQLITE_IOERR_FSYNC, 1, 1, &t);
    printf("fault[control retry COMMIT after fsync error]: %lu runs, %lu "
           "bad runs, %lu acknowledged receipts lost\n",
           t.runs, t.bad, t.lost);
    ck_assert_msg(t.lost > 0, "retrying COMMIT after an fsync failure lost "
                              "nothing: the test has no teeth");
}
END_TEST

static Suite *
fault_suite(void)
{
    Suite *s = suite_create("fault");
    TCase *tc;

    tc = tcase_create("nth_io_error");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_fault_nth_io_error_loses_nothing_acknowledged,
                        0, (int)(sizeof(cases) / sizeof(cases[0])));
    suite_add_tcase(s, tc);

    tc = tcase_create("failed_commit");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_fault_failed_commit_is_not_acknowledged);
    suite_add_tcase(s, tc);

    tc = tcase_create("control_retry_commit");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_fault_control_retry_commit_after_fsync_loses_acked);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(fault_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
