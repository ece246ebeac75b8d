/*
 * check_checkpoint.c: a checkpoint that leaves its sync of the database to
 * the syncer (store.h store_db_sync) never lets SQLite write over the WAL
 * frames it copied before that sync, so a power cut loses nothing.
 *
 * The store is driven as the writer drives it when pipelined: commits, a
 * store_wal_sync after each (the syncer's), store_checkpoint in a quiet
 * moment, more commits. Power is cut through lib/vfs_fault.c, which drops
 * every write not synced since; the file is then opened with the real VFS
 * and every committed receipt must be in it. The negative control does
 * the same with plain SQLite and no pin: its WAL starts over on the frames
 * whose copy was not synced, and receipts are lost, or the scenario would
 * prove nothing.
 *
 * Thread: single-threaded; Check forks each test.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "e2e_util.h"
#include "error.h"
#include "op.h"
#include "receipt.h"
#include "store.h"
#include "vfs_fault.h"

#define PER_COMMIT 40
/* Enough frames for checkpoints to copy (store.h STORE_WAL_SOFT_FRAMES). */
#define FRAMES_BEFORE 300
#define RECEIPTS      "SELECT count(*) FROM receipts"

static char dir[1024];
static char db_path[1100];
static char wal_path[1110];

static void
setup(void)
{
    snprintf(dir, sizeof(dir), "%s/checkpoint-tmp-XXXXXX", TEST_BINARY_DIR);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(db_path, sizeof(db_path), "%s/receipts.db", dir);
    snprintf(wal_path, sizeof(wal_path), "%s-wal", db_path);
    ck_assert_int_eq(vfs_fault_register(1), SQLITE_OK);
    vfs_fault_reset();
}

static void
teardown(void)
{
    static const char *const sfx[] = { "", "-wal", "-shm", "-journal" };
    char p[1200];
    size_t i;

    for (i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
        snprintf(p, sizeof(p), "%s%s", db_path, sfx[i]);
        unlink(p);
    }
    rmdir(dir);
    vfs_fault_unregister();
}

#define PLANS 97

static void
make_receipt(struct receipt *r, long n)
{
    static char plans[PLANS][16];
    int i = (int)(n % PLANS);

    memset(r, 0, sizeof(*r));
    snprintf(plans[i], sizeof(plans[i]), "plan-%d", i);
    r->schema_version = 3;
    r->requested_backend = RECEIPT_BACKEND_CUDA;
    r->executed_backend = RECEIPT_BACKEND_CPU;
    r->model_instance_id = (struct proto_str){ "model", 5 };
    r->prepared_plan_id = (struct proto_str){ plans[i], strlen(plans[i]) };
    r->graph_hash = (struct proto_str){ "", 0 };
    r->tuning_profile = (struct proto_str){ "tp", 2 };
    r->stop_reason = (struct proto_str){ "eos", 3 };
    r->counter_coverage = UINT64_MAX;
    for (i = 0; i < RECEIPT_NCOUNTERS; i++)
        r->counters[i] = (uint64_t)n * 1000u + (uint64_t)i;
}

/* One group of count receipts (at most LARGE_COMMIT), committed and not
 * synced yet; *n counts the receipts committed. */
#define LARGE_COMMIT 3000

static void
commit_unsynced(struct store *s, long *n, int count)
{
    static struct receipt r[LARGE_COMMIT];
    struct store_write w;
    struct proto_err err;
    int i;

    for (i = 0; i < count; i++)
        make_receipt(&r[i], *n + i);
    memset(&w, 0, sizeof(w));
    w.op = PROTO_OP_RECEIPTS;
    w.source = "";
    w.received_at = 1700000000000 + *n;
    w.receipts = r;
    w.n_receipts = (size_t)count;
    proto_err_clear(&err);
    ck_assert_int_eq(store_begin(s, &err), 0);
    ck_assert_msg(store_apply(s, &w, &err) == 0, "apply: %s", err.message);
    ck_assert_msg(store_commit(s, &err) == 0, "commit: %s", err.message);
    *n += count;
}

static void
wal_sync(struct store *s)
{
    struct proto_err err;

    proto_err_clear(&err);
    ck_assert_msg(store_wal_sync(s, &err) == 0, "sync: %s", err.message);
}

/* groups groups of PER_COMMIT receipts, each committed and then synced as
 * the syncer syncs it. */
static void
commit_synced(struct store *s, long *n, int groups)
{
    while (groups-- > 0) {
        commit_unsynced(s, n, PER_COMMIT);
        wal_sync(s);
    }
}

static struct store *
open_pipelined(void)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20,
                            .sync_pipelined = 1 };
    struct proto_err err;
    struct store *s = NULL;

    proto_err_clear(&err);
    ck_assert_msg(store_open(db_path, &o, &s, &err) == 0, "open: %s",
                  err.message);
    ck_assert(store_sync_pipelined(s));
    return s;
}

/* Commits until the WAL holds frames no checkpoint copied. */
static void
fill_wal(struct store *s, long *n)
{
    while (store_wal_frames(s) < FRAMES_BEFORE)
        commit_synced(s, n, 1);
}

/* The count sql gives on a connection of its own (-1: cannot read). */
static long
count_rows(const char *sql, int flags, const char *vfs)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    long rows = -1;

    if (sqlite3_open_v2(db_path, &db, flags, vfs) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        rows = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rows;
}

/* After the cut: what the real VFS finds, as after a reboot. */
static long
count_after_cut(const char *sql)
{
    ck_assert_int_eq(vfs_fault_restore(0, 1), 0);
    return count_rows(sql, SQLITE_OPEN_READWRITE, "unix");
}

/* What another connection reads now. */
static long
count_now(const char *sql)
{
    return count_rows(sql, SQLITE_OPEN_READONLY, NULL);
}

/*
 * A checkpoint in a quiet moment copies without syncing; the commits after
 * it find the WAL pinned and append to it. Cut before the database's sync:
 * every receipt is there, the copied ones from the WAL.
 */
START_TEST(test_cut_before_the_database_sync)
{
    struct proto_err err;
    struct store *s = open_pipelined();
    long n = 0;
    int before;

    fill_wal(s, &n);
    before = store_wal_frames(s);
    ck_assert_int_eq(store_checkpoint(s, &err), 0);
    ck_assert_msg(store_db_sync_owed(s), "the checkpoint synced its copy");
    ck_assert_int_lt(store_wal_frames(s), before);
    commit_synced(s, &n, 20);
    vfs_fault_cut_now();
    store_free(s);
    ck_assert_int_eq(count_after_cut(RECEIPTS), n);
}
END_TEST

/*
 * Once store_db_sync put the copy on the disk, the pin goes and the next
 * commit starts the WAL over (its header counts one restart more); what the
 * copy holds is on the disk, so the cut loses nothing. A store_db_sync that did
 * not sync would lose the receipts of the overwritten frames here.
 */
START_TEST(test_cut_after_the_database_sync_and_a_restart)
{
    struct proto_err err;
    struct store *s = open_pipelined();
    long n = 0, restarts;

    fill_wal(s, &n);
    ck_assert_int_eq(store_checkpoint(s, &err), 0);
    ck_assert(store_db_sync_owed(s));
    ck_assert_msg(store_db_sync(s, &err) == 0, "db sync: %s", err.message);
    ck_assert(!store_db_sync_owed(s));
    restarts = e2e_wal_restarts(wal_path);
    commit_synced(s, &n, 1);
    ck_assert_int_eq(e2e_wal_restarts(wal_path), restarts + 1);
    commit_synced(s, &n, 20);
    vfs_fault_cut_now();
    store_free(s);
    ck_assert_int_eq(count_after_cut(RECEIPTS), n);
}
END_TEST

/*
 * store_wal_restart_due: the WAL past STORE_WAL_RESTART_FRAMES with the
 * last checkpoint deferred and its copy synced, while fewer frames than
 * STORE_WAL_SOFT_FRAMES wait for a copy (the writer then checkpoints in
 * its next quiet moment, not at the soft bound). That checkpoint starts
 * the WAL over at the next commit, and a power cut after it loses
 * nothing.
 */
START_TEST(test_restart_due_below_the_soft_bound)
{
    struct proto_err err;
    struct store *s = open_pipelined();
    long n = 0, restarts = e2e_wal_restarts(wal_path);
    int i;

    proto_err_clear(&err);
    /* As under load: a checkpoint at the soft bound, a commit before the
     * syncer's sync of its copy, so frames stay uncopied. */
    for (i = 0; i < 10000 && !store_wal_restart_due(s); i++) {
        commit_synced(s, &n, 1);
        if (store_wal_frames(s) >= STORE_WAL_SOFT_FRAMES) {
            ck_assert_int_eq(store_checkpoint(s, &err), 0);
            ck_assert(!store_wal_restart_due(s)); /* its copy not synced */
            commit_synced(s, &n, 1);
            ck_assert_msg(store_db_sync(s, &err) == 0, "db sync: %s",
                          err.message);
        }
    }
    ck_assert_msg(store_wal_restart_due(s), "no restart due after %d groups",
                  i);
    ck_assert_int_lt(store_wal_frames(s), STORE_WAL_SOFT_FRAMES);
    ck_assert_int_eq(e2e_wal_restarts(wal_path), restarts);
    ck_assert_int_eq(store_checkpoint(s, &err), 0);
    ck_assert(!store_wal_restart_due(s));
    commit_synced(s, &n, 1);
    ck_assert_int_eq(e2e_wal_restarts(wal_path), restarts + 1);
    ck_assert(!store_wal_restart_due(s));
    commit_synced(s, &n, 20);
    vfs_fault_cut_now();
    store_free(s);
    ck_assert_int_eq(count_after_cut(RECEIPTS), n);
}
END_TEST

/* A WAL to copy, the ceiling taken after its last (synced) commit, then
 * 10 groups committed and not synced. *synced: the receipts committed
 * before the ceiling; returns the frames of the 10 groups. */
static int
ceiling_then_unsynced(struct store *s, long *n, long *synced)
{
    int at_ceiling, i;

    fill_wal(s, n);
    ck_assert_int_eq(store_ceiling_take(s), 0);
    at_ceiling = store_wal_frames(s);
    *synced = *n;
    for (i = 0; i < 10; i++)
        commit_unsynced(s, n, PER_COMMIT);
    return store_wal_frames(s) - at_ceiling;
}

/*
 * The ceiling (store.h store_ceiling_take), taken after a synced commit,
 * keeps every commit after it out of a checkpoint's copy: the frames left
 * are exactly theirs. Let go, the next checkpoint copies them too, and a
 * cut after their sync loses nothing.
 */
START_TEST(test_ceiling_keeps_later_commits_out_of_the_copy)
{
    struct proto_err err;
    struct store *s = open_pipelined();
    long n = 0, synced;
    int later;

    proto_err_clear(&err);
    later = ceiling_then_unsynced(s, &n, &synced);
    ck_assert_int_eq(store_ceiling_take(s), 0); /* held already */
    ck_assert_int_gt(later, 0);
    ck_assert_int_eq(store_checkpoint(s, &err), 0);
    ck_assert_int_eq(store_wal_frames(s), later);
    store_ceiling_let_go(s);
    wal_sync(s);
    ck_assert_int_eq(store_checkpoint(s, &err), 0);
    ck_assert_int_eq(store_wal_frames(s), 0);
    commit_synced(s, &n, 5);
    vfs_fault_cut_now();
    store_free(s);
    ck_assert_int_eq(count_after_cut(RECEIPTS), n);
}
END_TEST

/*
 * What the ceiling is for: a checkpoint while the commits after it are not
 * synced yet (the writer's syncers at work). It copies only what is on
 * the disk (SQLite copies a page only if its newest frame is within the
 * ceiling, so the pages the later commits changed wait in the WAL for a
 * later checkpoint). Its copy synced and the power cut, the store holds
 * every receipt synced before the ceiling, none of the later ones, and
 * checks whole.
 */
START_TEST(test_ceiling_copies_only_synced_frames)
{
    struct proto_err err;
    struct store *s = open_pipelined();
    long n = 0, synced;

    proto_err_clear(&err);
    (void)ceiling_then_unsynced(s, &n, &synced);
    ck_assert_int_eq(store_checkpoint(s, &err), 0);
    ck_assert(store_db_sync_owed(s));
    ck_assert_msg(store_db_sync(s, &err) == 0, "db sync: %s", err.message);
    vfs_fault_cut_now();
    store_free(s);
    ck_assert_int_eq(count_after_cut(RECEIPTS), synced);
    ck_assert_int_eq(count_rows("SELECT count(*) FROM pragma_integrity_check "
                                "WHERE integrity_check <> 'ok'",
                                SQLITE_OPEN_READONLY, "unix"),
                     0);
}
END_TEST

/*
 * A failed sync of the database is final: the kernel may have dropped
 * the copy's pages (sticky loss), so the WAL keeps every frame, no
 * checkpoint runs again, the final one is refused and the close leaves
 * the WAL for the next start. Nothing committed is lost at the cut.
 */
START_TEST(test_failed_database_sync_keeps_the_wal)
{
    struct vfs_fault_stats st;
    struct proto_err err;
    struct store *s = open_pipelined();
    long n = 0;
    int frames;

    fill_wal(s, &n);
    ck_assert_int_eq(store_checkpoint(s, &err), 0);
    ck_assert(store_db_sync_owed(s));
    vfs_fault_sticky_sync_loss(1);
    vfs_fault_stats(&st);
    vfs_fault_inject(VFS_FAULT_SYNC, st.ops[VFS_FAULT_SYNC] + 1,
                     SQLITE_IOERR_FSYNC);
    ck_assert_int_ne(store_db_sync(s, &err), 0);
    ck_assert(vfs_fault_fired());
    ck_assert(!store_db_sync_owed(s));
    commit_synced(s, &n, 20);
    fill_wal(s, &n);
    frames = store_wal_frames(s);
    ck_assert_int_eq(store_checkpoint(s, &err), 0);
    ck_assert_int_eq(store_wal_frames(s), frames); /* copied nothing */
    ck_assert_int_ne(store_checkpoint_final(s, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.message, "WAL"));
    store_free(s);
    ck_assert_int_eq(count_after_cut(RECEIPTS), n);
}
END_TEST

/*
 * The writer's WAL file writes a commit's frames together (wal_gather.h),
 * in parts below SQLite's largest write: a commit of 3,000 receipts (far
 * more frames than one part holds) between small ones, each synced, and
 * the power cut after them loses nothing; frames read back for the
 * checkpoint come from the file, not a buffer.
 */
START_TEST(test_large_commit_in_parts)
{
    struct proto_err err;
    struct store *s = open_pipelined();
    long n = 0;

    commit_synced(s, &n, 1);
    commit_unsynced(s, &n, LARGE_COMMIT);
    /* Another connection reads the commit before its sync: the frames
     * are in the file once the commit returned. */
    ck_assert_int_eq(count_now(RECEIPTS), n);
    wal_sync(s);
    commit_synced(s, &n, 1);
    ck_assert_int_gt(store_wal_frames(s), 100);
    ck_assert_int_eq(store_checkpoint(s, &err), 0);
    commit_synced(s, &n, 1);
    vfs_fault_cut_now();
    store_free(s);
    ck_assert_int_eq(count_after_cut(RECEIPTS), n);
}
END_TEST

/* A query on a connection of its own, ended on a thread of its own
 * READER_END_MS after the checkpoint synced the database (its second sync,
 * after the WAL's): after the checkpoint returned, well within the
 * restart's wait. */
#define READER_END_MS 10

struct reader {
    sqlite3 *db;
    unsigned long syncs; /* tracked files' syncs before the checkpoint */
};

static void *
reader_end(void *arg)
{
    const struct timespec poll = { 0, 100000L };
    const struct timespec ts = { 0, READER_END_MS * 1000000L };
    struct reader *r = arg;
    struct vfs_fault_stats st;

    do {
        nanosleep(&poll, NULL);
        vfs_fault_stats(&st);
    } while (st.ops[VFS_FAULT_SYNC] < r->syncs + 2);
    nanosleep(&ts, NULL);
    return (void *)(long)sqlite3_exec(r->db, "COMMIT", NULL, NULL, NULL);
}

/*
 * Past STORE_WAL_RESTART_FRAMES, the checkpoint that syncs its own copy
 * restarts the WAL: it waits for a query still reading the WAL (store.h
 * STORE_WAL_RESTART_WAIT_US), so the next commit starts the WAL over
 * although the query was open when the checkpoint began. Left to that
 * commit alone, the restart needs a moment with no query in the WAL,
 * which queries that never pause may not leave (a loaded CI run saw none
 * in 8 s). The cut after it loses nothing.
 */
START_TEST(test_restart_waits_for_a_reader)
{
    struct proto_err err;
    struct store *s = open_pipelined();
    struct vfs_fault_stats st;
    struct reader rd = { NULL, 0 };
    pthread_t th;
    void *ret;
    long n = 0, restarts;

    /* A deferred checkpoint and its sync, then the WAL past the bound: the
     * next checkpoint lets the pin go and syncs its own copy. */
    fill_wal(s, &n);
    ck_assert_int_eq(store_checkpoint(s, &err), 0);
    ck_assert(store_db_sync_owed(s));
    ck_assert_msg(store_db_sync(s, &err) == 0, "db sync: %s", err.message);
    while (store_wal_frames(s) < STORE_WAL_RESTART_FRAMES)
        commit_synced(s, &n, 10);
    restarts = e2e_wal_restarts(wal_path);
    ck_assert_int_ge(restarts, 0);
    /* A query in the WAL as the checkpoint begins. */
    ck_assert_int_eq(
        sqlite3_open_v2(db_path, &rd.db, SQLITE_OPEN_READONLY, NULL),
        SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(rd.db, "BEGIN; " RECEIPTS, NULL, NULL, NULL),
                     SQLITE_OK);
    vfs_fault_stats(&st);
    rd.syncs = st.ops[VFS_FAULT_SYNC];
    ck_assert_int_eq(pthread_create(&th, NULL, reader_end, &rd), 0);
    ck_assert_int_eq(store_checkpoint(s, &err), 0);
    ck_assert(!store_db_sync_owed(s));
    commit_synced(s, &n, 1);
    ck_assert_int_eq(pthread_join(th, &ret), 0);
    ck_assert_int_eq((long)ret, SQLITE_OK);
    sqlite3_close(rd.db);
    ck_assert_msg(e2e_wal_restarts(wal_path) == restarts + 1,
                  "the WAL did not start over (restarts %ld, then %ld)",
                  restarts, e2e_wal_restarts(wal_path));
    commit_synced(s, &n, 20);
    vfs_fault_cut_now();
    store_free(s);
    ck_assert_int_eq(count_after_cut(RECEIPTS), n);
}
END_TEST

/*
 * The control: the same steps with plain SQLite, a checkpoint without its
 * sync (synchronous=OFF) and no pin. The next commit starts the WAL over
 * on the frames whose copy is not on the disk, and the cut loses rows
 * that were committed and synced.
 */
START_TEST(test_control_without_a_pin_loses_rows)
{
    sqlite3 *db = NULL;
    long n = 0, found;
    int i;

    ck_assert_int_eq(sqlite3_open_v2(db_path, &db,
                                     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                                     NULL),
                     SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db,
                                  "PRAGMA journal_mode = WAL;"
                                  "PRAGMA wal_autocheckpoint = 0;"
                                  "PRAGMA synchronous = FULL;"
                                  "CREATE TABLE t (x INTEGER PRIMARY KEY, "
                                  "pad BLOB)",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    for (i = 0; i < 20; i++, n += 50)
        ck_assert_int_eq(sqlite3_exec(db,
                                      "WITH RECURSIVE k(v) AS (SELECT 1 "
                                      "UNION ALL SELECT v + 1 FROM k WHERE "
                                      "v < 50) INSERT INTO t (pad) SELECT "
                                      "randomblob(200) FROM k",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
    ck_assert_int_eq(
        sqlite3_exec(db, "PRAGMA synchronous = OFF", NULL, NULL, NULL),
        SQLITE_OK);
    ck_assert_int_eq(sqlite3_wal_checkpoint_v2(
                         db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL),
                     SQLITE_OK);
    /* This commit starts the WAL over, synced. */
    ck_assert_int_eq(sqlite3_exec(db,
                                  "PRAGMA synchronous = FULL;"
                                  "INSERT INTO t (pad) VALUES (x'00')",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    n++;
    vfs_fault_cut_now();
    sqlite3_close(db);
    found = count_after_cut("SELECT count(*) FROM t");
    ck_assert_msg(found != n, "the control lost nothing (%ld of %ld)", found,
                  n);
}
END_TEST

static Suite *
checkpoint_suite(void)
{
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("deferred");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_cut_before_the_database_sync);
    tcase_add_test(tc, test_cut_after_the_database_sync_and_a_restart);
    tcase_add_test(tc, test_restart_due_below_the_soft_bound);
    tcase_add_test(tc, test_ceiling_keeps_later_commits_out_of_the_copy);
    tcase_add_test(tc, test_ceiling_copies_only_synced_frames);
    tcase_add_test(tc, test_failed_database_sync_keeps_the_wal);
    tcase_add_test(tc, test_large_commit_in_parts);
    tcase_add_test(tc, test_restart_waits_for_a_reader);
    tcase_add_test(tc, test_control_without_a_pin_loses_rows);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(checkpoint_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
