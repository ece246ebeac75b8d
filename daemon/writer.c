/*
 * writer.c: the writer thread and its queue.
 *
 * Threads: writer_submit(), writer_stop() and the async callback run on the
 * loop thread; run() runs on the writer thread and is the only user of the
 * store but for one call. The mutex guards the lists (queued, to sync,
 * done) and the flags; the store is touched without it. Jobs come back in
 * submission order because a group is taken from the head of the queue
 * and appended whole to the next list.
 *
 * Pipelined durability (store_sync_pipelined): a committed group is not
 * durable yet. It waits in the sync list for the syncer thread (sync_run),
 * whose one store_wal_sync makes every group committed before it durable,
 * and only then moves to the done list and is answered; meanwhile the
 * writer applies and commits the next groups. A failed sync fails every
 * group it was for and every group committed after it (their frames
 * follow frames the disk may have lost), and the writer writes the WAL
 * again (store_wal_rewrite) before it commits anything else. A
 * checkpoint under the store's ceiling (store.h store_ceiling_take) runs
 * once the commit the ceiling was taken after is synced, beside the syncs
 * of later ones; any other waits until every commit is synced.
 *
 * Handing jobs over (writer_submit, publish): jobs submitted on the loop
 * wait in a list of the loop's own and go onto the queue together, waking
 * the writer, once WRITER_KICK_ITEMS receipts wait, else when the loop's
 * pass ends (its check phase, or its prepare phase before it polls
 * again). One pass reads and decodes every readable connection's frames;
 * woken at the first of them, an idle writer used to commit four or five
 * single receipts a group, each group with its COMMIT, WAL frames and
 * sync, while the rest of the pass queued behind it.
 */
#include "writer.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "envelope.h"
#include "log.h"
#include "pool.h"
#include "store_prune.h"

/* Nothing queued for this long: a quiet moment for a slice of the rollup
 * merge (wait_for_work). */
#define WRITER_MERGE_IDLE_NS 20000000u

/*
 * Retention against a wall clock that jumps (writer thread only): the
 * cutoff of the last prune batch and the monotonic time it was computed
 * at. A cutoff may advance only as far as monotonic time did since; a
 * clock that stays ahead for PRUNE_TRUST_MS is believed (an RTC that was
 * wrong at boot, then corrected by NTP).
 */
#define PRUNE_SLACK_MS 2000u
/* Under a load that never leaves the writer idle for prune_idle_ms, a
 * prune batch still runs between commit groups this often, so retention
 * keeps up (one batch, bounded by prune_batch, delays the next group). */
#define PRUNE_MAX_DELAY_MS 5000u
#define PRUNE_TRUST_MS     (10u * 60u * 1000u)

struct prune_clock {
    int set;
    int64_t cutoff;
    uint64_t mono_ms;
    uint64_t ahead_since_ms; /* monotonic; 0 = the clock is not ahead */
};

/*
 * Pipelined, up to WRITER_SYNCERS syncs of the WAL are under way at once:
 * a group committed while a sync runs starts its own instead of waiting
 * for that one to end (the disk takes two flushes about as fast as one).
 * Each sync is a slot with a ticket; results are handed on in ticket
 * order, so a group is answered only when it and every group committed
 * before it are durable.
 */
#define WRITER_SYNCERS 2
/* How long a sync runs before a second may start beside it. */
#define WRITER_SYNC_OVERLAP_US 500u

struct sync_slot {
    int busy; /* claimed; its result not handed on yet */
    int done; /* its sync returned (rc, err) */
    uint64_t ticket, start_us;
    struct writer_job *head, *tail;
    uint64_t commits, seq;
    int rc;
    struct proto_err err;
};

struct writer {
    uv_loop_t *loop;
    uv_async_t async;
    /* The end of the loop's pass (publish): check runs after its I/O
     * callbacks, prepare before it blocks in poll again, so a job queued
     * by a timer or a close callback does not wait for the next event. */
    uv_check_t kick_check;
    uv_prepare_t kick_prepare;
    int handles_open; /* loop thread: closed when 0 (close_cb) */
    /* Loop thread: jobs submitted and not handed to the writer yet, and
     * their items. They go onto the queue together (publish), so the loop
     * takes the queue's mutex once for up to WRITER_KICK_ITEMS receipts,
     * not once a frame: with the writer and two syncers on it, a lock
     * for every frame was contended often enough that its futex waits
     * and wakes were about 5% of the loop's time (docs/ingest.md). */
    struct writer_job *l_head, *l_tail;
    uint64_t unkicked;
    /* The jobs in that list: written by the loop only, read by
     * writer_get_stats from any thread. */
    _Atomic uint64_t l_jobs;
    uv_thread_t thread;
    int thread_started;
    struct store *store;
    uint32_t max_items;
    uint64_t max_bytes;
    writer_delivery_cb cb;
    void *cb_arg;

    uv_mutex_t mu;
    uv_cond_t cond;
    struct writer_job *q_head, *q_tail; /* guarded by mu */
    struct writer_job *d_head, *d_tail; /* guarded by mu */
    int stop;                           /* guarded by mu */
    /* Retention (writer_set_retention), guarded by mu: 0 = never prune. */
    uint64_t prune_age_ms;
    uint32_t prune_batch, prune_idle_ms;

    /* Pipelined durability, guarded by mu but for the atomics: the
     * groups committed and not synced yet (s_commits of them committed,
     * the newest numbered s_seq), whether a sync is under way or failed
     * (the WAL is written again before the next commit), the syncer's
     * stop flag. commit_seq numbers every group before it commits, so
     * that a commit a reader can see has a number at most commit_seq
     * read after the read; durable_seq is the newest number whose group,
     * and every one before it, is durable or failed. */
    int pipelined;
    uv_thread_t sync_threads[WRITER_SYNCERS];
    int n_syncers;         /* started */
    uv_cond_t sync_cond;   /* work for a syncer */
    uv_cond_t synced_cond; /* a sync ended; durable_seq moved */
    struct writer_job *s_head, *s_tail;
    uint64_t s_commits, s_seq;
    /* The syncs under way (syncing of them) and their tickets: results
     * are handed on in ticket order (sync_complete). */
    struct sync_slot slots[WRITER_SYNCERS];
    uint64_t next_ticket, next_done;
    int syncing, synced_once, sync_broken, sync_stop;
    int db_syncing; /* a syncer syncs a checkpoint's copy (db_sync) */
    _Atomic uint64_t commit_seq, durable_seq;
    _Atomic uint64_t syncs, sync_us;
    _Atomic uint64_t sync_start_us; /* the sync under way began; 0: none */
    uint64_t ckpt_seq; /* commit_seq at the last quiet checkpoint (mu) */
    /* The store's ceiling (store.h store_ceiling_take) is held, taken
     * right after the commit numbered ceiling_seq; set by the writer with mu
     * held, read by the syncers to wake it once that commit is durable. */
    int ceiling;
    uint64_t ceiling_seq;

    _Atomic uint64_t groups, failures, last_us, total_us, max_us, queued;
    _Atomic uint64_t cpu_us;
    _Atomic uint64_t checkpoints, checkpoint_us;
    _Atomic uint64_t pruned, prune_runs, prune_failures;
    _Atomic uint64_t pruned_undelivered;
    _Atomic int failing;
    /* For a health check (writer_stats.stalled_ms): whether the writer
     * holds a group, and when it last finished one or got work after
     * holding none (monotonic us). */
    _Atomic int in_group;
    _Atomic uint64_t beat_us;
    struct histo commit_hist;  /* committed groups' durations */
    struct histo ack_hist;     /* submit to answer, on the loop thread */
    _Atomic int file_gone;     /* logged that the database file went away */
    int merge_failing;         /* writer thread only */
    struct prune_clock pclock; /* writer thread only */
    uint64_t pruned_ms;        /* writer thread: monotonic, last batch */
    char last_error[PROTO_ERR_MSG_MAX]; /* guarded by mu */
};

struct writer_job *
writer_job_new(void)
{
    return pool_zalloc(sizeof(struct writer_job));
}

void
writer_job_free(struct writer_job *job)
{
    size_t i;

    if (job == NULL)
        return;
    for (i = 0; job->receipts != NULL && i < job->w.n_receipts; i++)
        receipt_clear(&job->receipts[i]);
    if (job->receipts_pooled)
        pool_free(job->receipts, job->receipts_pooled);
    else
        free(job->receipts);
    free(job->quarantine);
    if (job->frame_pooled)
        pool_free(job->frame, job->frame_pooled);
    else
        free(job->frame);
    free(job->outcome);
    free(job->errs);
    if (job->ctx_pooled)
        pool_free(job->ctx, job->ctx_pooled);
    else
        free(job->ctx);
    free(job->w.dup_outcome);
    pool_free(job, sizeof(*job));
}

/* This thread's CPU time alone, so the loop's and the query threads' work
 * does not count as the writer's. */
static uint64_t
thread_cpu_us(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void
fail_group(struct writer_job *head, const struct proto_err *why)
{
    struct writer_job *j;

    for (j = head; j != NULL; j = j->next) {
        /* A duplicate found inside a rolled-back group is not an outcome
         * either: the producer resends and asks again. */
        free(j->w.dup_outcome);
        j->w.dup_outcome = NULL;
        j->w.duplicate = 0;
        j->rc = PROTO_EUNAVAILABLE;
        j->err = *why;
        j->err.code = PROTO_EUNAVAILABLE;
        j->err.path[0] = '\0';
    }
}

/*
 * Applies the jobs of one group inside the open transaction. A job that
 * can fail on its own after it has written something (a plan or a
 * retention spec: ops->own_savepoint) runs in a savepoint, so that
 * only its part is undone; receipts and quarantine need none, since what
 * could refuse them was checked on the loop before they were queued, and
 * a savepoint costs about as much as a receipt. Should such a job fail
 * anyway (no memory for a duplicate's outcome), *redo asks for the group
 * to be rolled back and run again with a savepoint around every job.
 * Returns 0, or -1 with err set when the transaction is broken.
 */
static int
apply_jobs(struct writer *w, struct writer_job *head, int all_savepoints,
           int *redo, struct proto_err *err)
{
    struct writer_job *j;

    for (j = head; j != NULL; j = j->next) {
        int sp = all_savepoints || j->ops->own_savepoint;

        j->rc = 0;
        proto_err_clear(&j->err);
        free(j->w.dup_outcome);
        j->w.dup_outcome = NULL;
        if (sp && store_savepoint(w->store, err) != 0)
            return -1;
        j->rc = j->ops->apply != NULL ? j->ops->apply(j, w->store, &j->err)
                                      : store_apply(w->store, &j->w, &j->err);
        if (j->rc != 0) {
            if (store_txn_broken(w->store)) {
                *err = j->err;
                return -1;
            }
            if (!sp) {
                *redo = 1;
                return 0;
            }
            /* Only this job failed: undo its part and keep the others. */
            store_savepoint_rollback(w->store);
            continue;
        }
        if (sp && store_savepoint_release(w->store, err) != 0)
            return -1;
    }
    return 0;
}

/*
 * The group committed, but into a file that is no longer the database
 * (deleted or replaced under the daemon): nothing of it would survive a
 * restart, so it is answered unavailable like a failed group. Logged as
 * an error once, until a group commits into the right file again.
 */
static void
file_gone(struct writer *w, struct writer_job *head,
          const struct proto_err *why)
{
    uv_mutex_lock(&w->mu);
    snprintf(w->last_error, sizeof(w->last_error), "%s", why->message);
    uv_mutex_unlock(&w->mu);
    if (!atomic_exchange(&w->file_gone, 1))
        log_errx("writer: %s; every write is answered unavailable until the "
                 "daemon is restarted on the database",
                 why->message);
    atomic_store(&w->failing, 1);
    atomic_fetch_add(&w->failures, 1);
    fail_group(head, why);
}

/*
 * After a group failed and was rolled back: a write whose (source, seq)
 * was committed before the group is a duplicate whatever else failed, so
 * it is answered with its first outcome, not `unavailable` (a producer
 * would resend it forever while the disk stays full). The records are
 * looked up again in a transaction of their own that writes nothing
 * (rolled back), since in the failed one a record could have been an
 * earlier job's of the same group, and the jobs after the failure were
 * never looked at. A conflict stays unavailable: answering it means
 * quarantining its payload, a write.
 */
static void
answer_committed(struct writer *w, struct writer_job *head)
{
    const struct store_quarantine_item *q;
    struct proto_err err;
    struct writer_job *j;
    int64_t source_id;
    int open = 0, rc;

    for (j = head; j != NULL; j = j->next) {
        if (j->w.op < 0 || !j->w.has_seq || j->w.source_len == 0)
            continue;
        if (!open) {
            if (store_begin(w->store, &err) != 0) {
                store_rollback(w->store);
                return;
            }
            open = 1;
        }
        q = j->w.conflict_q;
        j->w.conflict_q = NULL;
        rc = store_write_begin(w->store, &j->w, &source_id, &err);
        j->w.conflict_q = q;
        if (rc == 1 && j->w.duplicate && !j->w.conflict) {
            j->rc = 0;
            proto_err_clear(&j->err);
            continue;
        }
        free(j->w.dup_outcome);
        j->w.dup_outcome = NULL;
        j->w.duplicate = 0;
        j->w.conflict = 0;
        if (rc != 0 && rc != 1 && store_txn_broken(w->store)) {
            store_rollback(w->store);
            open = 0;
        }
    }
    if (open)
        store_rollback(w->store);
}

/* Applies one group in one transaction. Returns 1 when it committed
 * (durable at once, or once synced when pipelined), 0 when it failed. */
static int
commit_group(struct writer *w, struct writer_job *head)
{
    struct proto_err err;
    uint64_t t0 = mono_us(), dt, max;
    int redo = 0;

    proto_err_clear(&err);
    if (store_begin(w->store, &err) != 0 ||
        apply_jobs(w, head, 0, &redo, &err) != 0)
        goto failed;
    if (redo) {
        store_rollback(w->store);
        redo = 0;
        if (store_begin(w->store, &err) != 0 ||
            apply_jobs(w, head, 1, &redo, &err) != 0)
            goto failed;
    }
    if (store_commit(w->store, &err) != 0)
        goto failed;
    if (store_file_check(w->store, &err) != 0) {
        file_gone(w, head, &err);
        return 0;
    }
    dt = mono_us() - t0;
    atomic_store(&w->last_us, dt);
    atomic_fetch_add(&w->total_us, dt);
    histo_observe(&w->commit_hist, dt);
    max = atomic_load(&w->max_us);
    if (dt > max)
        atomic_store(&w->max_us, dt);
    atomic_fetch_add(&w->groups, 1);
    atomic_store(&w->failing, 0);
    atomic_store(&w->file_gone, 0);
    return 1;
failed:
    store_rollback(w->store);
    uv_mutex_lock(&w->mu);
    snprintf(w->last_error, sizeof(w->last_error), "%s", err.message);
    uv_mutex_unlock(&w->mu);
    atomic_store(&w->failing, 1);
    atomic_fetch_add(&w->failures, 1);
    /* Names the store that failed; the loop's rate-limited lines
     * (server.c) say what it means for writes. */
    log_warnx("writer: a group of writes to %s was rolled back and answered "
              "unavailable: %s",
              store_path(w->store), err.message);
    fail_group(head, &err);
    answer_committed(w, head);
    return 0;
}

/* The start of the oldest sync under way, for the health check (0:
 * none). With mu held. */
static void
note_sync_start(struct writer *w)
{
    uint64_t oldest = 0;
    int i;

    for (i = 0; i < WRITER_SYNCERS; i++)
        if (w->slots[i].busy && !w->slots[i].done &&
            (oldest == 0 || w->slots[i].start_us < oldest))
            oldest = w->slots[i].start_us;
    atomic_store(&w->sync_start_us, oldest);
}

/* With mu held: the ceiling is held and the commit it was taken after is
 * durable, so a checkpoint copies only frames on the disk. */
static int
ceiling_ripe(const struct writer *w)
{
    return w->ceiling && !w->sync_broken &&
           atomic_load(&w->durable_seq) >= w->ceiling_seq;
}

/* After the commit numbered seq, once the WAL holds a checkpoint's worth
 * of frames no checkpoint copied: the ceiling, for the checkpoint that will
 * copy them (store.h store_ceiling_take). Writer thread. */
static void
ceiling_take(struct writer *w, uint64_t seq)
{
    if (!w->pipelined || w->ceiling ||
        store_wal_frames(w->store) < STORE_WAL_SOFT_FRAMES ||
        store_ceiling_take(w->store) != 0)
        return;
    uv_mutex_lock(&w->mu);
    w->ceiling = 1;
    w->ceiling_seq = seq;
    uv_mutex_unlock(&w->mu);
}

/* Writer thread, without mu. */
static void
ceiling_let_go(struct writer *w)
{
    if (!w->ceiling)
        return;
    store_ceiling_let_go(w->store);
    uv_mutex_lock(&w->mu);
    w->ceiling = 0;
    uv_mutex_unlock(&w->mu);
}

/*
 * Hands on, in ticket order, the syncs that have ended, with mu held. A
 * failed sync fails its groups; so does a successful one that follows a
 * failed one (sync_broken): its groups were committed after frames the
 * disk may have dropped.
 */
static void
sync_complete(struct writer *w)
{
    struct sync_slot *sl;
    int i;

    for (;;) {
        for (i = 0, sl = NULL; i < WRITER_SYNCERS && sl == NULL; i++)
            if (w->slots[i].busy && w->slots[i].ticket == w->next_done)
                sl = &w->slots[i];
        if (sl == NULL || !sl->done)
            return;
        if (sl->rc == 0 && w->sync_broken && sl->commits > 0)
            sl->rc = proto_err_set(&sl->err, PROTO_EUNAVAILABLE, NULL,
                                   "committed after a failed sync of the "
                                   "WAL");
        if (sl->rc != 0) {
            if (!w->sync_broken)
                log_errx("writer: a sync of the WAL of %s failed: %s; its "
                         "groups are answered unavailable and the WAL is "
                         "written again before the next commit",
                         store_path(w->store), sl->err.message);
            w->sync_broken = 1;
            snprintf(w->last_error, sizeof(w->last_error), "%s",
                     sl->err.message);
            atomic_store(&w->failing, 1);
            atomic_fetch_add(&w->failures, 1);
            fail_group(sl->head, &sl->err);
        } else if (!w->sync_broken) {
            atomic_store(&w->durable_seq, sl->seq);
        }
        if (w->d_tail != NULL)
            w->d_tail->next = sl->head;
        else
            w->d_head = sl->head;
        w->d_tail = sl->tail;
        sl->busy = 0;
        w->syncing--;
        w->next_done++;
    }
}

/* A checkpoint's copy into the database onto the disk (store.h
 * store_db_sync), on a syncer's thread. */
static void
db_sync(struct writer *w)
{
    struct proto_err err;

    proto_err_clear(&err);
    if (store_db_sync(w->store, &err) != 0)
        log_warnx("writer: %s; from now on the WAL keeps every frame (no "
                  "more checkpoints) until the daemon stops, and the next "
                  "start copies it again",
                  err.message);
}

/*
 * A syncer thread (pipelined durability): takes what the writer committed
 * since the last sync began, syncs the WAL once for all of it, and hands
 * it on to be answered (sync_complete). After a failed sync (sync_broken)
 * it syncs nothing until the writer has written the WAL again: groups
 * committed meanwhile are failed without a sync, since their frames
 * follow frames the disk may have dropped. The first sync runs alone:
 * SQLite's unix VFS syncs a new file's directory then, and clears a flag
 * of the file's. With no WAL sync waiting, a syncer also syncs what a
 * checkpoint copied into the database (db_sync).
 */
static void
sync_run(void *arg)
{
    struct writer *w = arg;
    struct sync_slot *sl;
    uint64_t t0;
    int i, rc, broken, ripe;

    /* Named for top -H and perf: a thread's CPU is told apart by it. */
    (void)pthread_setname_np(pthread_self(), "syncer");
    uv_mutex_lock(&w->mu);
    for (;;) {
        int room = w->syncing < (w->synced_once ? WRITER_SYNCERS : 1);
        uint64_t age, wait_ns = 0;

        /* A second sync only once the one under way has run a while: on
         * a disk whose syncs are quick that one ends first and its syncer
         * takes the new groups itself (a sync more costs CPU for
         * nothing); on a slow one the second overlaps it. */
        if (room && w->syncing > 0 && w->s_head != NULL &&
            (age = mono_us() - atomic_load(&w->sync_start_us)) <
                WRITER_SYNC_OVERLAP_US) {
            room = 0;
            wait_ns = (WRITER_SYNC_OVERLAP_US - age) * 1000u;
        }
        if (w->s_head == NULL && !w->sync_stop && !w->db_syncing &&
            store_db_sync_owed(w->store)) {
            /* Only with no WAL sync waiting: replies wait on those. */
            w->db_syncing = 1;
            uv_mutex_unlock(&w->mu);
            db_sync(w);
            uv_mutex_lock(&w->mu);
            w->db_syncing = 0;
            continue;
        }
        if (w->s_head == NULL || !room) {
            if (w->s_head == NULL && w->sync_stop)
                break;
            if (wait_ns > 0)
                (void)uv_cond_timedwait(&w->sync_cond, &w->mu, wait_ns);
            else
                uv_cond_wait(&w->sync_cond, &w->mu);
            continue;
        }
        for (i = 0; w->slots[i].busy; i++)
            ;
        sl = &w->slots[i];
        sl->busy = 1;
        sl->done = 0;
        sl->ticket = w->next_ticket++;
        sl->head = w->s_head;
        sl->tail = w->s_tail;
        sl->commits = w->s_commits;
        sl->seq = w->s_seq;
        sl->start_us = t0 = mono_us();
        w->s_head = w->s_tail = NULL;
        w->s_commits = 0;
        w->syncing++;
        broken = w->sync_broken;
        note_sync_start(w);
        uv_mutex_unlock(&w->mu);

        rc = 0;
        proto_err_clear(&sl->err);
        if (sl->commits > 0 && broken) {
            rc = proto_err_set(&sl->err, PROTO_EUNAVAILABLE, NULL,
                               "committed after a failed sync of the WAL");
        } else if (sl->commits > 0) {
            rc = store_wal_sync(w->store, &sl->err);
            atomic_fetch_add(&w->syncs, 1);
            atomic_fetch_add(&w->sync_us, mono_us() - t0);
        }

        uv_mutex_lock(&w->mu);
        sl->rc = rc;
        sl->done = 1;
        w->synced_once = 1;
        ripe = ceiling_ripe(w);
        sync_complete(w);
        note_sync_start(w);
        uv_cond_broadcast(&w->synced_cond);
        /* The other syncer may take work that waited for room, or a
         * checkpoint's copy. Only then: a syncer woken for nothing costs
         * two context switches, and a sync ends every few hundred
         * microseconds under load. */
        if (w->s_head != NULL || store_db_sync_owed(w->store))
            uv_cond_signal(&w->sync_cond);
        /* A writer waiting for work may checkpoint now (wait_for_work),
         * once no sync is under way or waiting. (Jobs queued woke it when
         * they were handed over: publish.) */
        if ((w->syncing == 0 && w->s_head == NULL) ||
            (!ripe && ceiling_ripe(w)))
            uv_cond_signal(&w->cond);
        uv_mutex_unlock(&w->mu);
        uv_async_send(&w->async);
        uv_mutex_lock(&w->mu);
    }
    uv_mutex_unlock(&w->mu);
}

/* Ends the syncer threads once they have handed on all they hold. */
static void
stop_syncer(struct writer *w)
{
    if (w->n_syncers == 0)
        return;
    uv_mutex_lock(&w->mu);
    w->sync_stop = 1;
    uv_cond_broadcast(&w->sync_cond);
    uv_mutex_unlock(&w->mu);
    while (w->n_syncers > 0)
        uv_thread_join(&w->sync_threads[--w->n_syncers]);
}

/* Waits, with mu held, until every group handed to the syncer is synced
 * (or failed). */
static void
wait_synced(struct writer *w)
{
    while (w->s_head != NULL || w->syncing)
        uv_cond_wait(&w->synced_cond, &w->mu);
}

/*
 * After a failed sync, before the next commit: writes the WAL again and
 * syncs it (store_wal_rewrite). Returns 0 when every commit so far is
 * durable, else -1 with err set: the group is answered unavailable
 * without touching the store, and the next one tries again.
 */
static int
heal(struct writer *w, struct proto_err *err)
{
    int rc;

    uv_mutex_lock(&w->mu);
    wait_synced(w);
    uv_mutex_unlock(&w->mu);
    proto_err_clear(err);
    if ((rc = store_wal_rewrite(w->store, err)) != 0)
        return -1;
    uv_mutex_lock(&w->mu);
    w->sync_broken = 0;
    atomic_store(&w->durable_seq, atomic_load(&w->commit_seq));
    uv_cond_broadcast(&w->synced_cond);
    uv_mutex_unlock(&w->mu);
    log_info("writer: the WAL of %s was written again and synced; writes "
             "are committed again",
             store_path(w->store));
    return 0;
}

/*
 * Bounds the wall clock's cutoff (issue 17): never past the newest stored
 * receipt minus the age, and never further from the last batch's cutoff
 * than the monotonic time elapsed since (plus a little slack), so a clock
 * step forward (a bad RTC, then NTP) prunes nothing early. A jump is
 * logged when it begins and when it is believed. Returns 0 (with *cutoff
 * bounded; INT64_MIN when nothing is stored) or the store's error.
 */
static int
prune_cutoff(struct writer *w, uint64_t age_ms, int64_t *cutoff,
             struct proto_err *err)
{
    struct prune_clock *pc = &w->pclock;
    uint64_t mono = mono_us() / 1000u;
    int64_t newest, limit;
    int rc;

    if ((rc = store_prune_newest(w->store, &newest, err)) != 0)
        return rc;
    if (newest == INT64_MIN) {
        *cutoff = INT64_MIN; /* nothing stored: nothing to prune */
        return 0;
    }
    if (newest - (int64_t)age_ms < *cutoff)
        *cutoff = newest - (int64_t)age_ms;
    if (pc->set) {
        limit = pc->cutoff + (int64_t)(mono - pc->mono_ms) + PRUNE_SLACK_MS;
        if (*cutoff > limit) {
            if (pc->ahead_since_ms == 0) {
                pc->ahead_since_ms = mono;
                log_warnx("writer: retention: the wall clock moved %lld s "
                          "further than the %llu s that passed; pruning "
                          "follows the elapsed time (the clock is believed "
                          "if it stays so for %u minutes)",
                          (long long)((*cutoff - limit) / 1000),
                          (unsigned long long)((mono - pc->mono_ms) / 1000),
                          PRUNE_TRUST_MS / 60000u);
            }
            if (mono - pc->ahead_since_ms < PRUNE_TRUST_MS)
                *cutoff = limit - PRUNE_SLACK_MS;
            else {
                log_warnx("writer: retention: the wall clock stayed ahead "
                          "for %u minutes; believing it",
                          PRUNE_TRUST_MS / 60000u);
                pc->ahead_since_ms = 0;
            }
        } else
            pc->ahead_since_ms = 0;
    }
    pc->set = 1;
    pc->cutoff = *cutoff;
    pc->mono_ms = mono;
    return 0;
}

/* One prune batch, in its own transaction; called without mu, with an
 * empty queue. Returns whether more receipts may be due. */
static int
prune_step(struct writer *w, uint64_t age_ms, uint32_t batch)
{
    struct store_prune_result r;
    struct proto_err err;
    int64_t cutoff;

    /* received_at is unix milliseconds, so the cutoff is too. */
    cutoff = (int64_t)unix_ms() - (int64_t)age_ms;

    w->pruned_ms = mono_us() / 1000u;
    proto_err_clear(&err);
    if (prune_cutoff(w, age_ms, &cutoff, &err) != 0) {
        atomic_fetch_add(&w->prune_failures, 1);
        log_warnx("writer: pruning old receipts failed: %s", err.message);
        return 0;
    }
    if (cutoff == INT64_MIN)
        return 0;
    if (store_prune(w->store, cutoff, batch, &r, &err) != 0) {
        atomic_fetch_add(&w->prune_failures, 1);
        log_warnx("writer: pruning old receipts failed: %s", err.message);
        return 0;
    }
    if (r.rows > 0) {
        atomic_fetch_add(&w->pruned, r.rows);
        atomic_fetch_add(&w->prune_runs, 1);
        if (r.undelivered > 0) {
            atomic_fetch_add(&w->pruned_undelivered, r.undelivered);
            log_warnx("writer: retention pruned %llu receipts the center "
                      "had not acknowledged (store.relay_retention = "
                      "\"drop\")",
                      (unsigned long long)r.undelivered);
        }
        log_debug("writer: pruned %llu receipts received before %lld",
                  (unsigned long long)r.rows, (long long)cutoff);
    }
    return r.more;
}

/* One slice of the rollup merge in a quiet moment. A failing store is
 * logged once until a slice succeeds again (the next quiet moment comes
 * 20 ms later). */
static void
merge_idle(struct writer *w)
{
    struct proto_err err;

    proto_err_clear(&err);
    if (store_merge_idle(w->store, STORE_MERGE_IDLE_KEYS, &err) >= 0) {
        w->merge_failing = 0;
        return;
    }
    if (!w->merge_failing)
        log_warnx("writer: merging the rollups failed: %s", err.message);
    w->merge_failing = 1;
}

static void checkpoint(struct writer *w);

/*
 * Waits, with mu held, until a job is queued or stop is set. With
 * retention on, a wait that times out (the writer was idle for
 * prune_idle_ms) is a quiet moment: one prune batch runs, without mu, and
 * the queue is checked again before the next. While more receipts are due
 * the next quiet moment comes after a tenth of the idle time, so a backlog
 * drains steadily, yet every batch starts only with an empty queue.
 */
static void
wait_for_work(struct writer *w)
{
    int more = 0;

    while (w->q_head == NULL && !w->stop) {
        uint64_t idle_ns, age = w->prune_age_ms;
        uint32_t batch = w->prune_batch;

        /* Pipelined: the quiet moment's checkpoint waits here until the
         * syncer has synced every commit, or at least the commit the
         * ceiling was taken after (a syncer wakes this wait), so that work
         * arriving meanwhile is taken first instead of waiting behind a
         * sync and a checkpoint. */
        if (w->pipelined && !w->sync_broken &&
            w->ckpt_seq != atomic_load(&w->commit_seq)) {
            int synced = !w->syncing && w->s_head == NULL;
            int frames = store_wal_frames(w->store) >= STORE_WAL_SOFT_FRAMES;

            if ((synced && (frames || store_wal_restart_due(w->store))) ||
                (frames && ceiling_ripe(w))) {
                /* Once per commit: a checkpoint that fails is not
                 * retried in a loop. */
                w->ckpt_seq = atomic_load(&w->commit_seq);
                uv_mutex_unlock(&w->mu);
                /* Every commit synced: the whole WAL may be copied, and
                 * the WAL may start over. */
                if (synced)
                    ceiling_let_go(w);
                checkpoint(w);
                ceiling_let_go(w);
                uv_mutex_lock(&w->mu);
                continue;
            }
        }

        /* The last chunk's rollups not all merged yet: after
         * WRITER_MERGE_IDLE_NS with nothing queued, a slice. Under load
         * the commits merge them as they go; this is for a writer that
         * went idle in the middle. */
        if (store_merge_pending(w->store)) {
            if (uv_cond_timedwait(&w->cond, &w->mu, WRITER_MERGE_IDLE_NS) ==
                    UV_ETIMEDOUT &&
                w->q_head == NULL && !w->stop) {
                uv_mutex_unlock(&w->mu);
                merge_idle(w);
                uv_mutex_lock(&w->mu);
            }
            continue;
        }
        if (age == 0 || batch == 0) {
            uv_cond_wait(&w->cond, &w->mu);
            continue;
        }
        idle_ns = (uint64_t)w->prune_idle_ms * 1000000u;
        if (more)
            idle_ns /= 10;
        if (uv_cond_timedwait(&w->cond, &w->mu, idle_ns ? idle_ns : 1) !=
                UV_ETIMEDOUT ||
            w->q_head != NULL || w->stop)
            continue;
        uv_mutex_unlock(&w->mu);
        more = prune_step(w, age, batch);
        uv_mutex_lock(&w->mu);
    }
}

static void
checkpoint(struct writer *w)
{
    struct proto_err err;
    uint64_t t0 = mono_us();

    proto_err_clear(&err);
    if (store_checkpoint(w->store, &err) != 0) {
        log_warnx("writer: checkpoint failed: %s", err.message);
        return;
    }
    atomic_fetch_add(&w->checkpoints, 1);
    atomic_fetch_add(&w->checkpoint_us, mono_us() - t0);
    if (store_db_sync_owed(w->store)) {
        uv_mutex_lock(&w->mu);
        uv_cond_signal(&w->sync_cond);
        uv_mutex_unlock(&w->mu);
    }
}

/*
 * Hands a group on: to the done list when each COMMIT is durable, else to
 * the syncer. seq is the group's commit number, committed whether it
 * committed.
 */
static void
hand_on(struct writer *w, struct writer_job *head, struct writer_job *tail,
        uint64_t seq, int committed)
{
    uv_mutex_lock(&w->mu);
    if (w->pipelined) {
        if (w->s_tail != NULL)
            w->s_tail->next = head;
        else
            w->s_head = head;
        w->s_tail = tail;
        w->s_seq = seq;
        w->s_commits += committed ? 1 : 0;
        uv_cond_signal(&w->sync_cond);
        uv_mutex_unlock(&w->mu);
        return;
    }
    if (w->d_tail != NULL)
        w->d_tail->next = head;
    else
        w->d_head = head;
    w->d_tail = tail;
    atomic_store(&w->durable_seq, seq);
    uv_cond_broadcast(&w->synced_cond);
    uv_mutex_unlock(&w->mu);
    uv_async_send(&w->async);
}

/* A checkpoint when pipelined waits for the syncs owed (a checkpoint
 * syncs the WAL itself, but after a failed sync it could copy what the
 * disk dropped); none while the WAL waits to be written again. */
static void
checkpoint_synced(struct writer *w)
{
    int broken;

    uv_mutex_lock(&w->mu);
    wait_synced(w);
    broken = w->sync_broken;
    uv_mutex_unlock(&w->mu);
    ceiling_let_go(w);
    if (!broken)
        checkpoint(w);
}

static void
run(void *arg)
{
    struct writer *w = arg;
    struct writer_job *head, *tail, *j;
    struct proto_err err;
    uint64_t items, bytes, n, cpu0, age, seq;
    uint32_t batch;
    int quiet, committed, broken;

    (void)pthread_setname_np(pthread_self(), "writer");
    for (;;) {
        uv_mutex_lock(&w->mu);
        wait_for_work(w);
        if (w->q_head == NULL && w->stop) {
            uv_mutex_unlock(&w->mu);
            break;
        }
        /* Take a bounded prefix of the queue: at least one job, so one
         * oversized job cannot stall the queue. */
        head = tail = w->q_head;
        items = head->items;
        bytes = head->bytes;
        n = 1;
        for (j = head->next; j != NULL; j = j->next) {
            if (items + j->items > w->max_items ||
                bytes + j->bytes > w->max_bytes)
                break;
            items += j->items;
            bytes += j->bytes;
            tail = j;
            n++;
        }
        w->q_head = tail->next;
        if (w->q_head == NULL)
            w->q_tail = NULL;
        tail->next = NULL;
        atomic_fetch_sub(&w->queued, n);
        atomic_store(&w->in_group, 1);
        uv_mutex_unlock(&w->mu);

        uv_mutex_lock(&w->mu);
        broken = w->sync_broken;
        uv_mutex_unlock(&w->mu);

        /* Rolled-back groups count too: their CPU was spent all the
         * same, and a cost per stored receipt should show it. */
        cpu0 = thread_cpu_us();
        seq = atomic_fetch_add(&w->commit_seq, 1) + 1;
        if (broken && heal(w, &err) != 0) {
            atomic_fetch_add(&w->failures, 1);
            fail_group(head, &err);
            committed = 0;
        } else
            committed = commit_group(w, head);
        atomic_fetch_add(&w->cpu_us, thread_cpu_us() - cpu0);
        atomic_store(&w->beat_us, mono_us());
        atomic_store(&w->in_group, 0);
        hand_on(w, head, tail, seq, committed);
        if (committed)
            ceiling_take(w, seq);

        uv_mutex_lock(&w->mu);
        quiet = w->q_head == NULL;
        age = w->prune_age_ms;
        batch = w->prune_batch;
        uv_mutex_unlock(&w->mu);
        /* Retention under constant load, when the idle moments never
         * come (a write more often than prune_idle_ms). */
        if (age > 0 && batch > 0 &&
            mono_us() / 1000u - w->pruned_ms >= PRUNE_MAX_DELAY_MS)
            prune_step(w, age, batch);
        /* Replies are on their way; with nothing waiting, this is the
         * moment to copy the WAL into the database, out of any commit's
         * latency. Pipelined, the WAL's bound is the writer's to keep
         * (store.h STORE_WAL_HARD_FRAMES). */
        if (!w->pipelined) {
            if (quiet && store_wal_frames(w->store) >= STORE_WAL_SOFT_FRAMES)
                checkpoint(w);
        } else if (store_wal_frames(w->store) >= STORE_WAL_HARD_FRAMES ||
                   (store_wal_restart_due(w->store) &&
                    store_wal_length(w->store) >= STORE_WAL_HARD_FRAMES))
            /* Quiet moments: wait_for_work. Here, past the hard bound:
             * frames no checkpoint copied, or a WAL whose checkpoints
             * under the ceiling kept up but that never had a moment
             * with no sync under way to start over. */
            checkpoint_synced(w);
    }
    stop_syncer(w);
}

static void
deliver(struct writer *w)
{
    struct writer_job *j, *next;
    size_t bytes = 0;
    uint64_t now;

    uv_mutex_lock(&w->mu);
    j = w->d_head;
    w->d_head = w->d_tail = NULL;
    uv_mutex_unlock(&w->mu);
    if (j == NULL)
        return;
    for (next = j; next != NULL; next = next->next)
        bytes += next->bytes;
    w->cb(w->cb_arg, 0, bytes);
    now = mono_us();
    for (; j != NULL; j = next) {
        next = j->next;
        j->next = NULL;
        histo_observe(&w->ack_hist, now - j->submitted_us);
        j->ops->done(j);
    }
    /* The end of what arrived together: replies can go out as one write
     * per connection. */
    w->cb(w->cb_arg, 1, 0);
}

static void
async_cb(uv_async_t *h)
{
    deliver(h->data);
}

/* Hands the jobs submitted since the last time to the writer, and wakes
 * it (loop thread). */
static void
publish(struct writer *w)
{
    uint64_t n = atomic_load_explicit(&w->l_jobs, memory_order_relaxed);

    if (w->l_head == NULL)
        return;
    uv_mutex_lock(&w->mu);
    if (w->q_tail != NULL)
        w->q_tail->next = w->l_head;
    else
        w->q_head = w->l_head;
    w->q_tail = w->l_tail;
    /* Work for an idle writer: the stall clock starts now. */
    if (atomic_fetch_add(&w->queued, n) == 0 && !atomic_load(&w->in_group))
        atomic_store(&w->beat_us, mono_us());
    uv_cond_signal(&w->cond);
    uv_mutex_unlock(&w->mu);
    w->l_head = w->l_tail = NULL;
    atomic_store_explicit(&w->l_jobs, 0, memory_order_relaxed);
    w->unkicked = 0;
}

static void
kick_check_cb(uv_check_t *h)
{
    publish(h->data);
}

static void
kick_prepare_cb(uv_prepare_t *h)
{
    publish(h->data);
}

int
writer_new(uv_loop_t *loop, struct store *store, uint32_t max_items,
           uint64_t max_bytes, writer_delivery_cb cb, void *arg,
           struct writer **out, struct proto_err *err)
{
    struct writer *w;

    *out = NULL;
    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    w->loop = loop;
    w->store = store;
    w->max_items = max_items ? max_items : 1;
    w->max_bytes = max_bytes ? max_bytes : 1;
    w->cb = cb;
    w->cb_arg = arg;
    w->pruned_ms = mono_us() / 1000u;
    atomic_init(&w->beat_us, mono_us());
    histo_init(&w->commit_hist);
    histo_init(&w->ack_hist);
    if (uv_mutex_init(&w->mu) != 0) {
        free(w);
        return proto_err_set(err, PROTO_ENOMEM, NULL, "cannot create a mutex");
    }
    if (uv_cond_init(&w->cond) != 0) {
        uv_mutex_destroy(&w->mu);
        free(w);
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "cannot create a condition variable");
    }
    if (uv_cond_init(&w->sync_cond) != 0) {
        uv_cond_destroy(&w->cond);
        uv_mutex_destroy(&w->mu);
        free(w);
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "cannot create a condition variable");
    }
    if (uv_cond_init(&w->synced_cond) != 0) {
        uv_cond_destroy(&w->sync_cond);
        uv_cond_destroy(&w->cond);
        uv_mutex_destroy(&w->mu);
        free(w);
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "cannot create a condition variable");
    }
    if (uv_async_init(loop, &w->async, async_cb) != 0) {
        uv_cond_destroy(&w->synced_cond);
        uv_cond_destroy(&w->sync_cond);
        uv_cond_destroy(&w->cond);
        uv_mutex_destroy(&w->mu);
        free(w);
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "cannot create an async handle");
    }
    w->async.data = w;
    w->handles_open = 3;
    (void)uv_check_init(loop, &w->kick_check);
    (void)uv_prepare_init(loop, &w->kick_prepare);
    w->kick_check.data = w;
    w->kick_prepare.data = w;
    (void)uv_check_start(&w->kick_check, kick_check_cb);
    (void)uv_prepare_start(&w->kick_prepare, kick_prepare_cb);
    /* They keep the loop polling no more than the async handle does. */
    uv_unref((uv_handle_t *)&w->kick_check);
    uv_unref((uv_handle_t *)&w->kick_prepare);
    w->pipelined = store_sync_pipelined(store);
    while (w->pipelined && w->n_syncers < WRITER_SYNCERS) {
        if (uv_thread_create(&w->sync_threads[w->n_syncers], sync_run, w) !=
            0) {
            stop_syncer(w);
            w->store = NULL;
            writer_stop(w);
            return proto_err_set(err, PROTO_ENOMEM, NULL,
                                 "cannot start the syncer threads");
        }
        w->n_syncers++;
    }
    if (uv_thread_create(&w->thread, run, w) != 0) {
        /* The handle is registered; it must be closed, and the writer is
         * freed in that close callback without its store. */
        stop_syncer(w);
        w->store = NULL;
        writer_stop(w);
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "cannot start the writer thread");
    }
    w->thread_started = 1;
    *out = w;
    return 0;
}

void
writer_submit(struct writer *w, struct writer_job *job)
{
    job->next = NULL;
    job->submitted_us = mono_us();
    if (w->l_tail != NULL)
        w->l_tail->next = job;
    else
        w->l_head = job;
    w->l_tail = job;
    atomic_store_explicit(
        &w->l_jobs, atomic_load_explicit(&w->l_jobs, memory_order_relaxed) + 1,
        memory_order_relaxed);
    w->unkicked += job->items > 0 ? job->items : 1;
    if (w->unkicked >= WRITER_KICK_ITEMS)
        publish(w);
}

static void
close_cb(uv_handle_t *h)
{
    struct writer *w = h->data;

    if (--w->handles_open > 0)
        return;
    store_free(w->store);
    uv_cond_destroy(&w->synced_cond);
    uv_cond_destroy(&w->sync_cond);
    uv_cond_destroy(&w->cond);
    uv_mutex_destroy(&w->mu);
    free(w);
}

/* The thread has ended, so the store is the loop's now. Nothing was
 * lost if this fails (the WAL holds the rest and the next start reads it),
 * but a backup that copies the database file alone would miss it. */
static void
final_checkpoint(struct writer *w)
{
    struct proto_err err;
    uint64_t t0 = mono_us();

    proto_err_clear(&err);
    if (w->store == NULL || !store_has_wal(w->store))
        return;
    if (store_checkpoint_final(w->store, &err) != 0)
        log_warnx("writer: the final checkpoint did not complete: %s; the "
                  "rest of the store stays in its -wal file until the next "
                  "start (a copy of the database file alone would miss it)",
                  err.message);
    else
        log_info("the WAL is checkpointed into the database (%.1f ms)",
                 (double)(mono_us() - t0) / 1000.0);
}

void
writer_stop(struct writer *w)
{
    if (w->thread_started) {
        publish(w);
        uv_mutex_lock(&w->mu);
        w->stop = 1;
        uv_cond_signal(&w->cond);
        uv_mutex_unlock(&w->mu);
        uv_thread_join(&w->thread);
        w->thread_started = 0;
        deliver(w);
        final_checkpoint(w);
    }
    uv_close((uv_handle_t *)&w->kick_check, close_cb);
    uv_close((uv_handle_t *)&w->kick_prepare, close_cb);
    uv_close((uv_handle_t *)&w->async, close_cb);
}

void
writer_set_retention(struct writer *w, uint64_t max_age_ms, uint32_t batch,
                     uint32_t idle_ms)
{
    if (batch > STORE_PRUNE_MAX_ROWS)
        batch = STORE_PRUNE_MAX_ROWS;
    uv_mutex_lock(&w->mu);
    w->prune_age_ms = max_age_ms;
    w->prune_batch = batch;
    w->prune_idle_ms = idle_ms;
    /* A waiting writer picks the new settings up at once. */
    uv_cond_signal(&w->cond);
    uv_mutex_unlock(&w->mu);
}

/* The wait polls durable_seq instead of waiting on synced_cond: that
 * condition's mutex is the queue's, which the loop takes for every frame,
 * and a caller of low priority (the relay thread, at nice 10 or SCHED_IDLE)
 * that a busier thread preempts while it holds it would stall the loop. */
#define DURABLE_POLL_NS 100000

int
writer_wait_durable(struct writer *w, uint64_t timeout_ms)
{
    uint64_t target = atomic_load(&w->commit_seq);
    uint64_t end = mono_us() + timeout_ms * 1000u;
    const struct timespec nap = { 0, DURABLE_POLL_NS };

    while (atomic_load(&w->durable_seq) < target) {
        if (mono_us() >= end)
            return -1;
        (void)nanosleep(&nap, NULL);
    }
    return 0;
}

void
writer_set_limits(struct writer *w, uint32_t max_items, uint64_t max_bytes)
{
    uv_mutex_lock(&w->mu);
    w->max_items = max_items ? max_items : 1;
    w->max_bytes = max_bytes ? max_bytes : 1;
    uv_mutex_unlock(&w->mu);
}

void
writer_get_stats(struct writer *w, struct writer_stats *st)
{
    st->groups = atomic_load(&w->groups);
    st->failures = atomic_load(&w->failures);
    st->last_us = atomic_load(&w->last_us);
    st->total_us = atomic_load(&w->total_us);
    st->max_us = atomic_load(&w->max_us);
    st->queued = atomic_load(&w->queued);
    st->cpu_us = atomic_load(&w->cpu_us);
    st->checkpoints = atomic_load(&w->checkpoints);
    st->checkpoint_us = atomic_load(&w->checkpoint_us);
    st->syncs = atomic_load(&w->syncs);
    st->sync_us = atomic_load(&w->sync_us);
    st->pruned = atomic_load(&w->pruned);
    st->prune_runs = atomic_load(&w->prune_runs);
    st->pruned_undelivered = atomic_load(&w->pruned_undelivered);
    st->prune_failures = atomic_load(&w->prune_failures);
    st->failing = atomic_load(&w->failing);
    histo_read(&w->commit_hist, &st->commit);
    histo_read(&w->ack_hist, &st->ack);
    st->stalled_ms = 0;
    if (st->queued > 0 || atomic_load(&w->in_group)) {
        uint64_t beat = atomic_load(&w->beat_us), now = mono_us();

        st->stalled_ms = now > beat ? (now - beat) / 1000u : 0;
    }
    /* Pipelined, replies wait for the syncer too: a sync that does not
     * return stalls every write however well the writer goes on. */
    {
        uint64_t s0 = atomic_load(&w->sync_start_us), now = mono_us();

        if (s0 != 0 && now > s0 && (now - s0) / 1000u > st->stalled_ms)
            st->stalled_ms = (now - s0) / 1000u;
    }
    /* The loop's jobs not handed over yet wait too, for the end of its
     * pass at most: no stall of the writer's. */
    st->queued += atomic_load_explicit(&w->l_jobs, memory_order_relaxed);
    uv_mutex_lock(&w->mu);
    memcpy(st->last_error, w->last_error, sizeof(st->last_error));
    uv_mutex_unlock(&w->mu);
}
