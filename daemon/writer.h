/*
 * writer.h: the single SQLite writer, on its own thread, with group commit.
 *
 * The event loop hands over write jobs with writer_submit(), which never
 * blocks on the disk: it links the job into a list of the loop's, which
 * goes onto the writer's queue, under a mutex, by the group rather than by
 * the job (at the end of the loop's pass, or once WRITER_KICK_ITEMS
 * receipts wait), and wakes the writer then. The
 * writer thread takes everything queued (bounded by commit_max_items and
 * commit_max_bytes), runs BEGIN IMMEDIATE, applies each job (plans and
 * retention specs in a SAVEPOINT of their own), COMMITs, and only then hands
 * the jobs back to the loop through a uv_async_t, where each job's done
 * callback sends its reply. When the store fails (disk full, I/O error, a
 * failed COMMIT) the group is rolled back and every job in it is answered
 * PROTO_EUNAVAILABLE; the next group tries again, so writes resume by
 * themselves when the store accepts them.
 */
#ifndef RECEIPTD_DAEMON_WRITER_H
#define RECEIPTD_DAEMON_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "histo.h"
#include "store.h"

struct writer;

struct writer_job;

/*
 * What one kind of write does besides being stored; each handler that
 * makes jobs has one (dispatch.c, dispatch_plan.c).
 */
struct writer_job_ops {
    /* Writer thread, inside the group's transaction: applies the job to s.
     * NULL means store_apply(s, &job->w, err). Returns like store_apply. */
    int (*apply)(struct writer_job *job, struct store *s,
                 struct proto_err *err);
    /* Loop thread, once the job's group committed (job->rc 0) or failed:
     * answers the request and frees the job. */
    void (*done)(struct writer_job *job);
    /* The job may fail in the store on its own (a plan that conflicts):
     * it runs in a savepoint, so that the rest of its group is kept. */
    int own_savepoint;
};

/*
 * One write. The loop fills w (its pointers point into the owned buffers
 * below), ops, ctx and the accounting fields; the writer fills rc and err.
 * Everything the job owns is released by writer_job_free().
 */
struct writer_job {
    struct writer_job *next;
    const struct writer_job_ops *ops;
    void *ctx; /* the ops' own data (malloc'd, freed with the job) */
    struct store_write w;
    size_t items; /* receipts plus quarantine items, for commit_max_items */
    size_t bytes; /* memory held, for commit_max_bytes and backpressure */
    uint64_t submitted_us; /* when writer_submit() queued it (monotonic) */

    /* Owned buffers. */
    char *frame; /* the request frame; receipts borrow its strings */
    struct receipt *receipts;
    /* Nonzero: ctx, or receipts (one), came from pool_zalloc() with this
     * size (pool.h) and go back there; frame from pool_alloc(). */
    size_t ctx_pooled, receipts_pooled, frame_pooled;
    struct store_quarantine_item *quarantine;
    char *outcome;          /* encoded result, for dedupe (receipts op) */
    struct proto_err *errs; /* per-item errors the quarantine points into */
    /* What is kept of the payload should its (source, seq) turn out to
     * name another write (w.conflict_q points here). */
    struct store_quarantine_item conflict_q;

    /* Outputs. */
    int rc; /* 0 or PROTO_EUNAVAILABLE/PROTO_ENOMEM */
    struct proto_err err;
};

/*
 * Called on the loop thread around each delivery of finished jobs: with
 * end 0 and the bytes the delivered jobs held before the first job's done,
 * and with end 1 after the last one's, so that replies can leave as one
 * write per connection.
 */
typedef void (*writer_delivery_cb)(void *arg, int end, size_t bytes);

/* A new zeroed job, or NULL. */
struct writer_job *writer_job_new(void);

/* Frees the job and everything it owns (receipt extras included). NULL is
 * a no-op. */
void writer_job_free(struct writer_job *job);

/*
 * Starts the writer thread on store (taken: the writer frees it in
 * writer_free). The uv_async_t lives in the writer and is registered on
 * loop. Returns 0 or a negative PROTO_E* code; on failure store is still the
 * caller's.
 */
int writer_new(uv_loop_t *loop, struct store *store, uint32_t max_items,
               uint64_t max_bytes, writer_delivery_cb cb, void *arg,
               struct writer **out, struct proto_err *err);

/* Receipts (job items) queued before writer_submit wakes the writer
 * without waiting for the end of the loop's pass: a batch frame wakes it
 * at once, single receipts by the group. */
#define WRITER_KICK_ITEMS 64

/* Queues job (taken); the writer starts on it at the latest when the
 * loop's pass ends. Loop thread only; never blocks on the disk. */
void writer_submit(struct writer *w, struct writer_job *job);

/*
 * Finishes every queued job, delivers it, stops and joins the thread, and
 * closes the loop's handles; the writer is freed (with its store) in the
 * last one's close callback. Loop thread only; call once, when nothing more
 * will be submitted.
 */
void writer_stop(struct writer *w);

/*
 * Retention: when max_age_ms > 0, the writer prunes receipts received more
 * than max_age_ms ago, at most batch rows (capped at STORE_PRUNE_MAX_ROWS)
 * per quiet moment, a quiet moment being idle_ms with an empty queue (about
 * 1000 in production; tests pass a few ms). A queued write never waits for
 * a batch to start; it may wait for one already running. max_age_ms 0
 * turns pruning off. Any thread, any time (reload).
 */
void writer_set_retention(struct writer *w, uint64_t max_age_ms, uint32_t batch,
                          uint32_t idle_ms);

/* Changes the bounds of a commit group (as writer_new takes them; 0 means
 * 1). The next group taken obeys them. Any thread, any time (reload). */
/*
 * Waits, at most timeout_ms, until every group that began to commit
 * before the call is durable (synced, when the store's durability is
 * pipelined) or failed. A reader that calls it after its read knows that
 * what it read survives a power cut. Any thread but the writer's: it
 * takes no lock (it polls), so a thread of low priority may call it.
 * Returns 0, or -1 when the time ran out.
 */
int writer_wait_durable(struct writer *w, uint64_t timeout_ms);

void writer_set_limits(struct writer *w, uint32_t max_items,
                       uint64_t max_bytes);

/* Commit figures, readable from any thread. */
struct writer_stats {
    uint64_t groups;        /* groups committed (a progress counter for the
                               watchdog: it moves while writes succeed) */
    uint64_t failures;      /* groups rolled back */
    uint64_t last_us;       /* duration of the last commit group */
    uint64_t total_us;      /* sum over committed groups */
    uint64_t max_us;        /* the longest */
    uint64_t queued;        /* jobs waiting for the writer right now */
    uint64_t cpu_us;        /* writer thread CPU time spent in commit
                               groups, committed or rolled back */
    uint64_t checkpoints;   /* WAL checkpoints run in quiet moments */
    uint64_t checkpoint_us; /* their total duration */
    uint64_t syncs;         /* WAL syncs of the syncer thread (pipelined
                               durability; 0 when COMMIT syncs) */
    uint64_t sync_us;       /* their total duration */
    uint64_t pruned;        /* receipts removed by retention since start */
    /* Of pruned, receipts the center had not acknowledged (with
     * store.relay_retention = "drop"). */
    uint64_t pruned_undelivered;
    uint64_t prune_runs;      /* prune batches that removed something */
    uint64_t prune_failures;  /* prune batches rolled back */
    int failing;              /* the last commit group was rolled back */
    struct histo_snap commit; /* committed groups' durations */
    struct histo_snap ack;    /* jobs' time from writer_submit() to their
                                 answer, committed or not */
    uint64_t stalled_ms;      /* how long writes have waited for the writer
                                 to finish a group: since it last finished
                                 one or got work while idle; 0 when it has
                                 nothing to do */
    char last_error[PROTO_ERR_MSG_MAX]; /* why the last failed group
                                           failed; "" when none has */
};

void writer_get_stats(struct writer *w, struct writer_stats *st);

#endif
