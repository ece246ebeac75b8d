/*
 * check_writer.c: the writer thread (daemon/writer.c) on a real store and
 * a real libuv loop: jobs come back in submission order after their
 * COMMIT, a failing store answers a whole group `unavailable` and the
 * writer resumes when the store accepts writes again (and its stats say
 * why it failed), new group bounds apply to the next groups, the writer
 * wakes by the group rather than by the job, and stopping
 * the writer delivers everything queued and leaves the loop with no live
 * handles.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>
#include <uv.h>

#include "envelope.h"
#include "writer.h"
#include "e2e_util.h"

#define NJOBS 200

static char dir[512];
static char path[600];

struct seen {
    int n;
    int order_ok;
    int failed;
    int batches;    /* deliveries ended */
    int delivering; /* between a delivery's start and end */
    int64_t last_id;
    struct writer_job *expect[NJOBS];
};

static void
setup(void)
{
    snprintf(dir, sizeof(dir), "%s/check_writer-XXXXXX", TEST_BINARY_DIR);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/w.db", dir);
}

static void
teardown(void)
{
    e2e_rmtree(dir);
}

/* The jobs' done (writer_job_ops) has no argument but the job: the test
 * that runs points this at its record. */
static struct seen *cur;

static void
delivery_cb(void *arg, int end, size_t bytes)
{
    struct seen *s = arg;

    if (!end) {
        /* A delivery starts with what its jobs held (100 bytes each). */
        ck_assert_uint_gt(bytes, 0);
        ck_assert_uint_eq(bytes % 100, 0);
        s->delivering = 1;
        return;
    }
    /* The end of a delivery: it follows at least one job. */
    ck_assert(s->delivering);
    ck_assert_int_gt(s->n, 0);
    s->delivering = 0;
    s->batches++;
}

static void
job_done(struct writer_job *job)
{
    struct seen *s = cur;

    ck_assert(s->delivering);
    if (s->n >= NJOBS || s->expect[s->n] != job)
        s->order_ok = 0;
    if (job->rc != 0) {
        ck_assert_int_eq(job->rc, PROTO_EUNAVAILABLE);
        ck_assert_int_eq(job->err.code, PROTO_EUNAVAILABLE);
        s->failed++;
    } else {
        if (job->w.receipt_id <= s->last_id)
            s->order_ok = 0;
        s->last_id = job->w.receipt_id;
    }
    s->n++;
    /* The job owns nothing but its receipt here. */
    job->receipts = NULL;
    writer_job_free(job);
}

static const struct writer_job_ops test_ops = { NULL, job_done, 0 };

static struct receipt rcpt;
/* Unknown keys are stored as an opaque blob: a large one fills pages fast. */
static char extra[1500];

static struct writer_job *
job(uint64_t seq)
{
    struct writer_job *j = writer_job_new();

    ck_assert_ptr_nonnull(j);
    j->ops = &test_ops;
    j->w.op = PROTO_OP_RECEIPT;
    j->w.source = "writer-test";
    j->w.source_len = strlen(j->w.source);
    j->w.has_seq = 1;
    j->w.seq = seq;
    j->w.received_at = 1;
    j->w.receipts = &rcpt;
    j->w.n_receipts = 1;
    j->items = 1;
    j->bytes = 100;
    return j;
}

static void
make_receipt(void)
{
    memset(&rcpt, 0, sizeof(rcpt));
    rcpt.schema_version = 2;
    rcpt.model_instance_id = (struct proto_str){ "m", 1 };
    rcpt.prepared_plan_id = (struct proto_str){ "p", 1 };
    rcpt.graph_hash = (struct proto_str){ "g", 1 };
    rcpt.tuning_profile = (struct proto_str){ "", 0 };
    rcpt.stop_reason = (struct proto_str){ "eos", 3 };
    rcpt.extra = extra;
    rcpt.extra_len = sizeof(extra);
}

/* A writer (at most max_items a group) on a new store at path, on loop;
 * its jobs are recorded in s. */
static struct writer *
start(uv_loop_t *loop, struct seen *s, const struct store_opts *o,
      uint32_t max_items)
{
    struct proto_err err;
    struct store *store;
    struct writer *w;

    cur = s;
    make_receipt();
    ck_assert_int_eq(uv_loop_init(loop), 0);
    ck_assert_int_eq(store_open(path, o, &store, &err), 0);
    ck_assert_int_eq(
        writer_new(loop, store, max_items, 1 << 20, delivery_cb, s, &w, &err),
        0);
    return w;
}

/* After writer_stop: the loop closes its handles and has none left. */
static void
finish(uv_loop_t *loop)
{
    uv_run(loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(loop), 0);
}

/* Runs the loop until n jobs came back (or 10 s passed). */
static void
run_until(uv_loop_t *loop, struct seen *s, int n)
{
    int i;

    for (i = 0; i < 10000 && s->n < n; i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
}

START_TEST(test_writer_returns_jobs_in_order_after_commit)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct writer_stats st;
    struct seen s = { .order_ok = 1 };
    struct writer *w;
    uv_loop_t loop;
    int i;

    w = start(&loop, &s, &o, 50);
    for (i = 0; i < NJOBS; i++) {
        s.expect[i] = job((uint64_t)i);
        writer_submit(w, s.expect[i]);
    }
    run_until(&loop, &s, NJOBS);
    ck_assert_int_eq(s.n, NJOBS);
    ck_assert(s.order_ok);
    ck_assert_int_eq(s.failed, 0);
    /* Every delivery ended with the call without a job. */
    ck_assert_int_ge(s.batches, 1);
    ck_assert_int_le(s.batches, NJOBS);
    writer_get_stats(w, &st);
    /* bounded groups: at most 50 items each */
    ck_assert_uint_ge(st.groups, NJOBS / 50);
    ck_assert_uint_le(st.groups, NJOBS);
    ck_assert_uint_eq(st.queued, 0);
    writer_stop(w);
    finish(&loop);
}
END_TEST

START_TEST(test_writer_stop_delivers_everything_queued)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct seen s = { .order_ok = 1 };
    struct writer *w;
    uv_loop_t loop;
    int i;

    w = start(&loop, &s, &o, 7);
    for (i = 0; i < NJOBS; i++) {
        s.expect[i] = job((uint64_t)i);
        writer_submit(w, s.expect[i]);
    }
    /* Without running the loop first: stop must drain the queue. */
    writer_stop(w);
    ck_assert_int_eq(s.n, NJOBS);
    ck_assert(s.order_ok);
    finish(&loop);
}
END_TEST

START_TEST(test_writer_full_store_fails_group_then_resumes)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20, .max_pages = 30 };
    struct writer_stats st;
    struct seen s = { .order_ok = 1 };
    struct writer *w;
    uv_loop_t loop;
    sqlite3 *db;
    int i, n = 0, ok_before;

    w = start(&loop, &s, &o, 1);
    /* one job per group, until the store is full */
    for (i = 0; i < NJOBS && s.failed == 0; i++) {
        s.expect[n] = job((uint64_t)i);
        writer_submit(w, s.expect[n]);
        n++;
        run_until(&loop, &s, n);
    }
    ck_assert_int_gt(s.failed, 0);
    ok_before = s.n - s.failed;
    ck_assert_int_gt(ok_before, 0);
    /* The stats say it fails now, and why, in SQLite's words. */
    writer_get_stats(w, &st);
    ck_assert_int_eq(st.failing, 1);
    ck_assert_msg(strstr(st.last_error, "full") != NULL, "last_error: %s",
                  st.last_error);
    /* make room, as an operator would */
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    ck_assert_int_eq(sqlite3_exec(db, "DELETE FROM receipts", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    s.expect[n] = job((uint64_t)NJOBS + 1);
    writer_submit(w, s.expect[n]);
    n++;
    run_until(&loop, &s, n);
    ck_assert_int_eq(s.n, n);
    ck_assert_int_eq(s.failed, 1);
    ck_assert(s.order_ok);
    writer_get_stats(w, &st);
    ck_assert_int_eq(st.failing, 0);
    ck_assert_msg(strstr(st.last_error, "full") != NULL, "last_error: %s",
                  st.last_error);
    writer_stop(w);
    finish(&loop);
}
END_TEST

/*
 * Submits NJOBS jobs while another connection holds the write lock, so
 * that (but for the first, which the writer may take before the rest
 * arrive) they wait in the queue together, then releases it and returns
 * how many groups the writer committed for them.
 */
static uint64_t
groups_for_queued(uv_loop_t *loop, struct writer *w, struct seen *s)
{
    struct writer_stats before, after;
    sqlite3 *db;
    int i;

    writer_get_stats(w, &before);
    s->n = 0;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL),
                     SQLITE_OK);
    for (i = 0; i < NJOBS; i++) {
        s->expect[i] = job((uint64_t)s->last_id + 1000 + (uint64_t)i);
        writer_submit(w, s->expect[i]);
    }
    usleep(100000);
    ck_assert_int_eq(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    run_until(loop, s, NJOBS);
    ck_assert_int_eq(s->n, NJOBS);
    ck_assert_int_eq(s->failed, 0);
    ck_assert(s->order_ok);
    writer_get_stats(w, &after);
    return after.groups - before.groups;
}

/* writer_set_limits (a reload) bounds the next groups taken. */
START_TEST(test_writer_set_limits_applies_to_next_groups)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct seen s = { .order_ok = 1 };
    struct writer *w;
    uv_loop_t loop;
    uint64_t g;

    w = start(&loop, &s, &o, 1);
    /* Started at one item per group; raised to 50: the queued jobs go in
     * groups of 50 (and perhaps the first alone). */
    writer_set_limits(w, 50, 1 << 20);
    g = groups_for_queued(&loop, w, &s);
    ck_assert_msg(g >= NJOBS / 50 && g <= NJOBS / 50 + 1,
                  "%llu groups for %d jobs at 50 per group",
                  (unsigned long long)g, NJOBS);
    /* Lowered to one: a group per job. */
    writer_set_limits(w, 1, 1 << 20);
    g = groups_for_queued(&loop, w, &s);
    ck_assert_uint_eq(g, NJOBS);
    /* The byte bound too: 100-byte jobs, 250 bytes per group. */
    writer_set_limits(w, 1000, 250);
    g = groups_for_queued(&loop, w, &s);
    ck_assert_msg(g >= NJOBS / 2 && g <= NJOBS / 2 + 1,
                  "%llu groups for %d jobs at 2 per group",
                  (unsigned long long)g, NJOBS);
    writer_stop(w);
    finish(&loop);
}
END_TEST

/* Waits, without running the loop, until the writer has committed groups
 * groups (or 10 s passed); returns its stats. */
static void
wait_groups(struct writer *w, uint64_t groups, struct writer_stats *st)
{
    int i;

    for (i = 0; i < 10000; i++) {
        writer_get_stats(w, st);
        if (st->groups >= groups && st->queued == 0)
            return;
        usleep(1000);
    }
}

/* writer_submit wakes the writer by the group: fewer than
 * WRITER_KICK_ITEMS receipts queued in one pass of the loop wait for the
 * pass to end and go in one group; that many wake it at once, while the
 * loop is still busy. */
START_TEST(test_writer_wakes_by_the_group)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct writer_stats st;
    struct seen s = { .order_ok = 1 };
    struct writer *w;
    uv_loop_t loop;
    int i, n = WRITER_KICK_ITEMS - 1;

    w = start(&loop, &s, &o, 1000);
    /* A writer awake takes what is queued whenever it looks: this is
     * about waking one that waits, as the new thread does by now. */
    usleep(100000);
    for (i = 0; i < n; i++) {
        s.expect[i] = job((uint64_t)i);
        writer_submit(w, s.expect[i]);
    }
    /* The pass has not ended: nothing is taken. */
    usleep(100000);
    writer_get_stats(w, &st);
    ck_assert_uint_eq(st.groups, 0);
    ck_assert_uint_eq(st.queued, (uint64_t)n);
    /* It ends: the writer wakes once, for all of them. */
    run_until(&loop, &s, n);
    ck_assert_int_eq(s.n, n);
    ck_assert(s.order_ok);
    writer_get_stats(w, &st);
    ck_assert_uint_eq(st.groups, 1);

    /* A group's worth wakes it with the loop still in its pass. */
    s.n = 0;
    for (i = 0; i < WRITER_KICK_ITEMS; i++) {
        s.expect[i] = job((uint64_t)(n + i));
        writer_submit(w, s.expect[i]);
    }
    wait_groups(w, 2, &st);
    ck_assert_uint_eq(st.queued, 0);
    ck_assert_uint_eq(st.groups, 2);
    run_until(&loop, &s, WRITER_KICK_ITEMS);
    ck_assert_int_eq(s.n, WRITER_KICK_ITEMS);
    ck_assert(s.order_ok);
    ck_assert_int_eq(s.failed, 0);
    writer_stop(w);
    finish(&loop);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("writer");
    TCase *tc;

#define ADD(name, fn)                                                          \
    do {                                                                       \
        tc = tcase_create(name);                                               \
        tcase_add_checked_fixture(tc, setup, teardown);                        \
        tcase_set_timeout(tc, 60);                                             \
        tcase_add_test(tc, fn);                                                \
        suite_add_tcase(s, tc);                                                \
    } while (0)
    ADD("order", test_writer_returns_jobs_in_order_after_commit);
    ADD("stop", test_writer_stop_delivers_everything_queued);
    ADD("full", test_writer_full_store_fails_group_then_resumes);
    ADD("limits", test_writer_set_limits_applies_to_next_groups);
    ADD("wake", test_writer_wakes_by_the_group);
#undef ADD
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
