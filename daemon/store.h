/*
 * store.h: the store, the one module that touches a database. It never
 * sees libuv or msgpack: callers pass decoded struct receipt values and
 * plain bytes.
 *
 * A store has a backend chosen at open (store_opts.backend): SQLite, the
 * embedded default this header describes, or PostgreSQL for the central
 * tier (docs/fleet.md). store_ops.h lists what a backend must do; every
 * function here calls its backend's operation.
 *
 * A struct store is one connection, used by one thread at a time:
 * the writer thread owns the single read-write connection, and each query
 * thread borrows a read-only one. Every function returns 0 or a negative
 * PROTO_E* code (PROTO_EUNAVAILABLE for anything SQLite refused) with the
 * detail copied into a caller-owned struct proto_err at once, before
 * another SQLite call can overwrite it.
 *
 * Idempotency: a write with a source and a seq records its first outcome in
 * the `dedupe` table, in columns for `receipt` (receipt id and fallback
 * status) and as an opaque blob for `receipts` (the msgpack result map the
 * dispatcher encoded; the store does not read it). A `receipt` record
 * waits with the tail and reaches the table with its chunk
 * (store_tail.c); the lookups see both.
 *
 * Layout (migrations/0007, docs/ingest.md): receipts are appended in id
 * order; postings, chunks and rollups are built by the writer in memory
 * and written once per chunk of the tail, and every query reads the tail
 * directly, so answers are exact at every commit.
 */
#ifndef RECEIPTD_DAEMON_STORE_H
#define RECEIPTD_DAEMON_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "op.h"
#include "receipt_types.h"

struct store;
struct store_shared;

enum store_backend {
    STORE_BACKEND_SQLITE,    /* where is a file path (the default) */
    STORE_BACKEND_POSTGRESQL /* where is a libpq conninfo */
};

struct store_opts {
    int backend;         /* enum store_backend */
    int readonly;        /* SQLITE_OPEN_READONLY, no migrations */
    int max_version;     /* migrate only up to this version (tests); 0 =
                            every embedded migration */
    uint64_t max_pages;  /* PRAGMA max_page_count when non-zero (tests and
                            operators who cap the file) */
    int busy_timeout_ms; /* default 5000 when 0 */
    uint64_t quarantine_max_bytes; /* total raw bytes kept in quarantine */
    /* Receipts in the tail before it becomes a chunk (store_tail.c); 0 =
     * STORE_CHUNK_RECEIPTS. Tests make it small to reach chunks fast. */
    uint32_t chunk_receipts;
    /* Chunks whose rollup sums are merged into the rollup rows together
     * (store_rollup.c): a key that recurs in every chunk costs one row
     * update per this many chunks; queries read the sums of the chunks
     * not merged yet from their rows. 0 = STORE_ROLLUP_CHUNKS. */
    uint32_t rollup_chunks;
    /* Called, when set, as migrations start and then about every
     * STORE_MIGRATING_EVERY_MS while they run (an index over a large store
     * takes minutes): the daemon logs and extends systemd's start timeout.
     * From the opening thread, inside SQLite: it must not use the store. */
    void (*migrating)(void *arg, int from, int to, uint64_t elapsed_ms);
    void *migrating_arg;
    /* Where the writer's store publishes, and queries' stores read, the
     * rollup sums not merged yet (store_rollup.c), so that a query need
     * not read those receipts' rows; NULL = none (queries read the rows).
     * Borrowed: the store takes a reference of its own. */
    struct store_shared *shared;
    /* A node that relays (relay.c): retention never prunes a receipt past
     * the relay's cursor, what the center has not acknowledged
     * (store_relay.h, docs/fleet.md). */
    int relay_wait;
    /* Pipelined durability (SQLite): COMMIT does not sync the WAL
     * (synchronous=NORMAL after the migrations), and the writer makes
     * each group durable with store_wal_sync before it answers, on a
     * thread of its own while the next group is applied (writer.c,
     * docs/ingest.md). 0: synchronous=FULL, each COMMIT syncs. */
    int sync_pipelined;
    /* store.relay_retention = "drop": retention prunes past the cursor
     * too, and counts what it took there in prunes.undelivered. */
    int relay_drop;
};

/* The registry of store_opts.shared: made with one reference, which the
 * caller drops with store_shared_unref; every store opened with it holds
 * one more. Thread-safe. */
struct store_shared *store_shared_new(void);
struct store_shared *store_shared_ref(struct store_shared *sh);
void store_shared_unref(struct store_shared *sh);
/* Aggregate queries that read the sums not merged yet from sh, and those
 * that found them gone (the writer had moved on) and read rows. */
void store_shared_counts(struct store_shared *sh, uint64_t *hits,
                         uint64_t *misses);

#define STORE_MIGRATING_EVERY_MS 5000
#define STORE_ROLLUP_CHUNKS      16 /* as config.c's store.rollup_chunks */

/* The newest schema version this binary knows (its last migration). */
int store_schema_version(void);

/*
 * Opens the store at where (borrowed; copied) with opts->backend (opts may
 * be NULL: SQLite, read-write). SQLite: the database file at the path
 * where; a read-write open sets
 * WAL, synchronous=FULL, foreign keys and busy_timeout, reads each back and
 * refuses (PROTO_EUNAVAILABLE, message saying which) when journal_mode is
 * not wal or synchronous is not FULL, then applies the missing migrations
 * in one transaction, and with opts->sync_pipelined sets synchronous to
 * NORMAL after them (store_wal_sync then makes commits durable). A database
 * whose user_version is newer than store_schema_version() is refused on both
 * kinds of open. On success *out is a new store the caller frees with
 * store_free(); on failure *out is NULL. A backend this build lacks is
 * PROTO_EINVALID.
 */
int store_open(const char *where, const struct store_opts *opts,
               struct store **out, struct proto_err *err);

/* Closes the connection and frees s. NULL is a no-op. */
void store_free(struct store *s);

/* The name of s's backend ("sqlite", "postgresql"), static. */
const char *store_backend_name(const struct store *s);

/* PRAGMA user_version of the open database. */
int store_user_version(struct store *s, int *version, struct proto_err *err);

/*
 * Transactions, for the writer: BEGIN IMMEDIATE, COMMIT, ROLLBACK, and one
 * level of SAVEPOINT per job. store_rollback() and store_savepoint_rollback()
 * cannot fail in a way the caller could act on; they log nothing and forget
 * every cached string id that the rollback may have undone.
 */
int store_begin(struct store *s, struct proto_err *err);
int store_commit(struct store *s, struct proto_err *err);
void store_rollback(struct store *s);
int store_savepoint(struct store *s, struct proto_err *err);
int store_savepoint_release(struct store *s, struct proto_err *err);
void store_savepoint_rollback(struct store *s);

/*
 * True when the last failure left the connection unable to continue the
 * current transaction (disk full, I/O error, corruption, out of memory, or
 * SQLite rolled the transaction back by itself): the whole group must be
 * rolled back and answered `unavailable`.
 */
int store_txn_broken(struct store *s);

/* One rejected payload for the quarantine table. Every pointer borrowed. */
struct store_quarantine_item {
    const void *raw;
    size_t len;
    const char *op; /* wire op name, "" when unknown */
    int code;       /* PROTO_E* */
    const char *path;
    const char *message;
};

/*
 * One write job. Inputs are borrowed for the duration of store_apply();
 * outputs are filled by it.
 */
struct store_write {
    int op; /* PROTO_OP_RECEIPT, PROTO_OP_RECEIPTS, or -1: quarantine only */
    const char *source; /* "" when the connection never said hello */
    size_t source_len;
    int has_seq; /* dedupe applies only with a seq and a non-empty source */
    uint64_t seq;
    /* A record relayed from a node (dispatch_relay.c): source and seq are
     * the producer's, kept in the row. Exactly-once at a center is the
     * origin's mark (store_relay.h), so the (source, seq) is never a
     * duplicate of the write: it is recorded (for `gaps`) unless it is
     * recorded already (seq_seen below: two nodes carried the source, or
     * a `receipts` batch's rows share its seq), and the row is stored
     * either way. origin (origin_len bytes) is the node's name and
     * origin_id the node's id of the row: a backend that keeps rows
     * under (origin, id) (PostgreSQL) stores them so, SQLite gives the
     * row an id of its own (receipt_id) and the relay records the batch
     * in relay_ranges. */
    int relayed;
    const char *origin;
    size_t origin_len;
    uint64_t origin_id;
    int64_t received_at; /* unix milliseconds */
    const struct receipt *receipts;
    size_t n_receipts;
    const struct store_quarantine_item *quarantine;
    size_t n_quarantine;
    const void *outcome; /* PROTO_OP_RECEIPTS: the result to record */
    size_t outcome_len;
    /* The payload's proto_hash32, recorded with the seq; 0: none. A later
     * write of the (source, seq) with another op, or another hash where
     * both are known, is a conflict: nothing of it is stored but
     * conflict_q, its payload kept in quarantine. */
    uint32_t payload_hash;
    const struct store_quarantine_item *conflict_q;
    /* A replay of quarantine row replay_of (0: none) whose body is
     * replay_body[0, replay_body_len): when its payload is refused again,
     * that row takes the new refusal instead of a new row being made, if
     * it is still there with the write's source and exactly those bytes
     * (attempts + 1, last_attempt_at the write's received_at). */
    uint64_t replay_of;
    const void *replay_body;
    size_t replay_body_len;
    /* Relayed, with the (source, seq) of the write just before it in the
     * same transaction, which recorded it or found it recorded: a backend
     * may take it as seen without looking (the receipts of one `receipts`
     * frame share their seq, and reach a center one after another). */
    int seq_as_before;

    /* Outputs. */
    int duplicate;      /* (source, seq) had a recorded outcome */
    int conflict;       /* (source, seq) was a write of another payload */
    int conflict_op;    /* that write's op */
    int64_t receipt_id; /* PROTO_OP_RECEIPT: id of the (first) row */
    int status;         /* PROTO_OP_RECEIPT: its fallback status */
    void *dup_outcome;  /* PROTO_OP_RECEIPTS duplicate: malloc'd copy of the
                           first outcome; the caller frees it */
    size_t dup_outcome_len;
    uint64_t evicted; /* quarantine rows evicted by this write */
    int refused;      /* set between store_write_begin and _end: the write was
                         refused, so no dedupe record */
    int seq_seen;     /* relayed: the (source, seq) was recorded already, so
                         store_write_end records nothing */
    int seq_new;      /* the seq is above its source's mark: no record of it
                         exists, so the tail looks for none */
};

/*
 * Applies w inside the caller's transaction: the dedupe check (the table
 * when the seq is not above the source's high-water mark, then the tail),
 * then the receipts, the quarantine items (a replay's row updated as
 * w->replay_of says, else a new row, evicting the oldest rows while the
 * total would pass quarantine_max_bytes; a payload larger than the whole
 * bound is not kept and counts as an eviction), then the dedupe
 * record (a single receipt's with the tail). Returns 0 or
 * PROTO_EUNAVAILABLE (PROTO_ENOMEM when a duplicate's outcome could not be
 * copied); check store_txn_broken() after a failure.
 */
int store_apply(struct store *s, struct store_write *w, struct proto_err *err);

/*
 * store_apply in two halves, for writes that store something else than
 * receipts in between (plans and retention specs, dispatch_plan.c):
 * store_write_begin interns the source and runs the dedupe check; it
 * returns 1 when (source, seq) was seen (w->duplicate set: nothing more
 * to do), 0 to go on, or an error. store_write_end stores the quarantine
 * items and the dedupe record (none when w->refused). source_id passes
 * from one to the other.
 */
int store_write_begin(struct store *s, struct store_write *w,
                      int64_t *source_id, struct proto_err *err);
int store_write_end(struct store *s, struct store_write *w, int64_t source_id,
                    struct proto_err *err);

/* Filters of the `receipts` query (PROTOCOL section 9). Strings borrowed. */
struct store_filter {
    const char *plan, *graph, *model, *source; /* NULL = any */
    size_t plan_len, graph_len, model_len, source_len;
    /* `receipts` at a center: only those relayed by this node (its hello
     * source; relay_ranges, store_relay.h); NULL = any. */
    const char *origin;
    size_t origin_len;
    int requested, executed, status; /* -1 = any */
    int has_since, has_until, has_before_id;
    uint64_t since, until; /* since <= received_at < until */
    uint64_t before_id;
    /* `receipts` only: the ids above after_id, oldest first (a forward
     * cursor: export, follow.c); with before_id too, the ids between. */
    int has_after_id;
    uint64_t after_id;
    uint32_t limit; /* 1..10000 */
    /* `fallbacks` and `coverage`: buckets of this many ms (a multiple of
     * STORE_EVERY_UNIT_MS, aligned on the unix epoch); 0 = one bucket. */
    uint64_t every;
};

/* A row handed to a store_row_cb: strings and r borrow SQLite's memory and
 * are valid only during the callback. r->extra is borrowed as well. */
struct store_row {
    int64_t receipt_id;
    int64_t received_at;
    struct proto_str source;
    int has_seq;
    uint64_t seq;
    int status;
    struct receipt r;
};

/* Returns 0 to continue, or a negative PROTO_E* code to stop the query
 * with that code. */
typedef int (*store_row_cb)(void *arg, const struct store_row *row);

/*
 * Runs the `receipts` query, newest first (oldest first with
 * f->has_after_id), calling cb for at most
 * f->limit rows; *truncated tells whether more matched. The query is
 * interrupted (PROTO_EOVERLOADED) when CLOCK_MONOTONIC passes
 * deadline_ms. For read-only stores.
 */
int store_query_receipts(struct store *s, const struct store_filter *f,
                         uint64_t deadline_ms, store_row_cb cb, void *arg,
                         int *truncated, struct proto_err *err);

/*
 * The newest receipt id the store holds now among those f's receipts
 * query after an id reads (0 when none): every receipt of a lower id
 * this instance wrote is committed. On PostgreSQL that is the ids of
 * f->origin's relayed rows, or of the center's own (origin '') without
 * one, since relayed rows keep their node's ids. A follower reads up to
 * it (follow.c). For read-only stores.
 */
int store_last_receipt_id(struct store *s, const struct store_filter *f,
                          uint64_t deadline_ms, uint64_t *id,
                          struct proto_err *err);

/* What the store itself knows for the `stats` query. */
struct store_stats {
    uint64_t last_receipt_id;      /* newest receipt id, 0 when none */
    uint64_t quarantined;          /* rows in quarantine now */
    uint64_t quarantine_bytes;     /* their raw bytes */
    uint64_t quarantine_evictions; /* since the database was created */
    uint64_t size_bytes;           /* database file plus its WAL */
};

int store_query_stats(struct store *s, uint64_t deadline_ms,
                      struct store_stats *st, struct proto_err *err);

/*
 * The WAL: frames it holds after the last commit that no checkpoint has
 * copied yet, and a PASSIVE checkpoint
 * (copies what no reader still needs into the database; never waits for
 * readers). The writer checkpoints in its quiet moments, once the WAL holds
 * STORE_WAL_SOFT_FRAMES; a commit that leaves STORE_WAL_HARD_FRAMES
 * checkpoints by itself, so the WAL stays bounded under constant load.
 * Writer thread only. A backend without a WAL (PostgreSQL) has 0 frames
 * and its checkpoints succeed at once, as do store_checkpoint_final and
 * store_file_check below.
 */
#define STORE_WAL_SOFT_FRAMES 256
#define STORE_WAL_HARD_FRAMES 8192

int store_wal_frames(const struct store *s);
/* Every frame the WAL holds, copied or not: what a restart would let go
 * (store_wal_restart_due). Writer thread. */
int store_wal_length(const struct store *s);
/* Whether s's backend has a WAL to checkpoint (SQLite), for the daemon's
 * messages about checkpoints. */
int store_has_wal(const struct store *s);
int store_checkpoint(struct store *s, struct proto_err *err);

/* The database's path as opened, for the daemon's own messages (never
 * for clients' errors); borrowed, valid until store_free(). */
const char *store_path(struct store *s);

/*
 * Whether the database file is still the one opened: 0, or
 * PROTO_EUNAVAILABLE with err set when its path is gone or names another
 * file (deleted, or replaced by a rename), when nothing committed from now
 * on survives a restart. Costs one stat(2). Writer thread.
 */
int store_file_check(struct store *s, struct proto_err *err);

/*
 * The last checkpoint, when the writer stops: copies the whole WAL into the
 * database and truncates it (TRUNCATE: waits up to the busy timeout for
 * readers), so that the main file alone holds the store. Returns 0 only
 * when every frame was copied; else an error saying why (SQLite's reason,
 * such as a full disk, or how many frames stayed behind). Call when no
 * other connection of the process reads (the query pool is closed).
 * Writer thread, or the loop once the writer thread has ended.
 */
int store_checkpoint_final(struct store *s, struct proto_err *err);

/*
 * Pipelined durability (store_opts.sync_pipelined): whether s commits
 * without syncing; then every COMMIT is durable only after a later
 * store_wal_sync returned 0. store_wal_sync may run on another thread
 * than the writer's, at the same time as its transactions and as a
 * checkpoint under the ceiling (store_ceiling_take), which copies only
 * commits already synced; any other checkpoint (and
 * store_checkpoint_final) runs only while no sync is under way or owed,
 * since after a failed sync it could copy pages the disk lost. After a failed
 * sync, store_wal_rewrite (writer thread, no sync under way) writes the
 * WAL again and syncs it: once it returned 0 every commit so far is
 * durable. Both return 0 for a backend whose COMMIT is durable.
 */
int store_sync_pipelined(const struct store *s);
int store_wal_sync(struct store *s, struct proto_err *err);
int store_wal_rewrite(struct store *s, struct proto_err *err);

/*
 * Pipelined, a checkpoint leaves its sync of the database file to the
 * syncer: it copies the frames without syncing (2-3 ms of the writer's
 * time under load went to that sync), and a reader of the store's own
 * (the pin) keeps SQLite from restarting the WAL over those frames until
 * store_db_sync has put the copy on the disk; the writer lets the pin go
 * at its next transaction after that. Until then a power cut leaves the
 * frames in the WAL, which the next start copies again. Once the WAL
 * holds STORE_WAL_RESTART_FRAMES, a checkpoint with no pin held syncs
 * its own copy as SQLite does, so that the WAL can start over.
 *
 * store_db_sync_owed: whether a checkpoint's copy waits for its sync
 * (any thread). store_db_sync: syncs the database file for every
 * checkpoint so far; may run on another thread than the writer's, beside
 * its transactions and checkpoints. A failed sync is final: the pin is
 * never let go and no checkpoint runs again, so the WAL keeps every frame
 * until the daemon stops, whose final checkpoint is skipped and whose
 * close leaves the WAL for the next start to copy again (the kernel may
 * have dropped the pages it failed to write). Both are 0 for a backend
 * without a WAL.
 */
#define STORE_WAL_RESTART_FRAMES 2048
/*
 * Whether the next checkpoint would be that one (the WAL at the bound,
 * the last checkpoint's copy synced, its pin free to go). Its time is
 * the copy of the frames no checkpoint copied yet and a sync of the
 * database for them, and every group behind it waits: the writer runs it
 * in the first quiet moment after a commit, below STORE_WAL_SOFT_FRAMES
 * too, when that copy is the frames of the groups since the last copy.
 * Waited for until the soft bound, it copied 250-500 frames and took 4-6
 * ms, after a burst 1,700 frames and 17-19 ms; now 80-600 frames and
 * 1.5-5 ms (half load, bench_ingest). Writer thread.
 */
int store_wal_restart_due(const struct store *s);
/* Such a checkpoint also restarts the WAL itself (SQLite's RESTART mode):
 * it waits up to STORE_WAL_RESTART_WAIT_US, trying again every
 * STORE_WAL_RESTART_SLEEP_US, for the queries that read the WAL to end.
 * Left to the next commit, a restart needs a moment with no query in the
 * WAL at all, which queries that never pause may not leave for long
 * stretches; those that begin after the copy read the database alone.
 * After a wait that ran out, the next waits for as many frames again. */
#define STORE_WAL_RESTART_WAIT_US  20000
#define STORE_WAL_RESTART_SLEEP_US 250

int store_db_sync_owed(const struct store *s);
int store_db_sync(struct store *s, struct proto_err *err);

/*
 * The ceiling (pipelined): a read transaction of the store's own, begun
 * right after a commit, before the next. A checkpoint copies no frame
 * past any reader's snapshot (and a page only if its newest frame is
 * within it), so while the ceiling is held a checkpoint copies nothing
 * committed after it: once that commit is durable, a checkpoint may run
 * while the syncs of later commits are under way and copy only frames
 * already on the disk. Without it a checkpoint waits for a moment with
 * no sync under way, which under a steady load comes seldom, and then
 * copies thousands of frames at once (11-23 ms at half load,
 * docs/ingest.md). A checkpoint with the ceiling held never restarts the
 * WAL, whose restart needs no reader in it: store_ceiling_let_go first.
 *
 * store_ceiling_take: 0 when held (now or already), -1 when not (no WAL,
 * not pipelined, a failed sync of the database, or SQLite refused the
 * read). Writer thread; take it only between transactions.
 */
int store_ceiling_take(struct store *s);
void store_ceiling_let_go(struct store *s);

/*
 * A quiet moment's share of the rollup merge (store_rollup.c): when the
 * last chunk's sums are not all in the rollup rows yet, merges up to keys
 * more in a transaction of its own, so that an idle store ends with none
 * pending and queries need not read the chunk's rows. Returns 1 while
 * more remain, 0 when none do, or a negative PROTO_E* code (the
 * transaction rolled back). Writer thread only, no transaction open.
 */
#define STORE_MERGE_IDLE_KEYS 256
int store_merge_idle(struct store *s, unsigned keys, struct proto_err *err);
/* Whether a merge is under way (store_merge_idle has work). PostgreSQL's
 * is the merge of its pending rollup rows (store_pg.c pg_merge). */
int store_merge_pending(const struct store *s);

/* CLOCK_MONOTONIC in milliseconds, for deadlines. */
uint64_t store_now_ms(void);

#endif
