/*
 * store.c: opening, pragmas, migrations and writes of the SQLite store.
 *
 * Invariants: a read-write store is used only by the writer thread, and
 * every write happens between store_begin() and store_commit(); a read-only
 * store is used by one query thread at a time (store_query.c). String ids
 * are cached in a small table (the same few models and plans repeat across
 * a fleet); the cache is dropped on every rollback because a rolled-back
 * insert takes its id with it.
 */
#include "store.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "clock.h"
#include "store_internal.h"
#include "store_sqlite.h"
#include "store_relay.h"
#include "store_rollup.h"
#include "store_tail.h"
#include "store_seq.h"
#include "store_migrations.h"
#include "store_row.h"
#include "wal_gather.h"

#define CACHE_SLOTS   2048 /* 1024 sets of two */
#define CACHE_STR_MAX 256

enum {
    ST_INTERN_GET,
    ST_INTERN_PUT,
    ST_RECEIPT_PUT,
    ST_DEDUPE_GET,
    ST_DEDUPE_MAX,
    ST_DEDUPE_PUT,
    ST_COUNTER_GET,
    ST_COUNTER_ADD,
    ST_COUNTER_SET,
    ST_QUARANTINE_OLDEST,
    ST_QUARANTINE_DEL,
    ST_QUARANTINE_PUT,
    ST_QUARANTINE_AGAIN,
    ST_BEGIN,
    ST_COMMIT,
    ST_SAVEPOINT,
    ST_RELEASE,
    ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
    [ST_INTERN_GET] = "SELECT id FROM strings WHERE value = ?1",
    [ST_INTERN_PUT] = "INSERT INTO strings (value) VALUES (?1)",
    [ST_RECEIPT_PUT] = NULL, /* built from the coverage table */
    [ST_DEDUPE_GET] = "SELECT op, receipt_id, status, outcome, payload_hash "
                      "FROM dedupe WHERE source_id = ?1 AND seq = ?2",
    [ST_DEDUPE_PUT] = "INSERT INTO dedupe (source_id, seq, op, receipt_id, "
                      "status, outcome, payload_hash) VALUES (?1, ?2, ?3, "
                      "?4, ?5, ?6, ?7)",
    /* The highest seq below 2^63 (stored as a signed integer) of a
     * source: one seek of the primary key. */
    [ST_DEDUPE_MAX] = "SELECT max(seq) FROM dedupe WHERE source_id = ?1 AND "
                      "seq >= 0",
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_SAVEPOINT] = "SAVEPOINT job",
    [ST_RELEASE] = "RELEASE job",
    [ST_COUNTER_GET] = "SELECT value FROM counters WHERE name = ?1",
    [ST_COUNTER_ADD] = "UPDATE counters SET value = value + ?2 WHERE name = ?1",
    [ST_COUNTER_SET] = "INSERT INTO counters (name, value) VALUES (?1, ?2) ON "
                       "CONFLICT (name) DO UPDATE SET value = excluded.value",
    [ST_QUARANTINE_OLDEST] = "SELECT id, size FROM quarantine ORDER BY id "
                             "LIMIT 1",
    [ST_QUARANTINE_DEL] = "DELETE FROM quarantine WHERE id = ?1",
    [ST_QUARANTINE_PUT] = "INSERT INTO quarantine (received_at, source_id, op, "
                          "code, path, message, size, raw) VALUES (?1, ?2, "
                          "?3, ?4, ?5, ?6, ?7, ?8)",
    /* A replayed payload refused again: its row, only if it still holds
     * what was replayed (?9, of ?10 bytes) from the same source. */
    [ST_QUARANTINE_AGAIN] = "UPDATE quarantine SET last_attempt_at = ?1, "
                            "attempts = attempts + 1, op = ?3, code = ?4, "
                            "path = ?5, message = ?6, size = ?7, raw = ?8 "
                            "WHERE id = ?11 AND source_id = ?2 AND size = "
                            "?10 AND raw = ?9",
};

/* Receipts inserted by one statement: 2^k rows for k < PUT_LEVELS, the
 * statement k = 0 being st[ST_RECEIPT_PUT] (put_stmt). One multi-row
 * INSERT opens its cursor, seeks the right edge and halts once for all
 * its rows, which cost about a third as much as binding a row
 * (docs/ingest.md). */
#define PUT_LEVELS 6

/* Rows of single-receipt writes outside a savepoint wait for one INSERT
 * of many (put_rows): a transaction of single receipts from many
 * connections pays the statement once per this many, as a batch does. */
#define PUT_DEFER_MAX 32

/* Per source, the highest seq its dedupe records hold (below 2^63): a
 * write with a higher seq cannot be a resend, so it needs no lookup. An
 * entry is never below the truth (it starts from the table and only
 * rises with records written), so a rolled-back record costs at most a
 * lookup that finds nothing. */
#define SEQMARK_SLOTS 4096

struct seqmark {
    int64_t source_id; /* 0 = free */
    int64_t hwm;       /* -1: the source has no record below 2^63 */
};

struct cache_slot {
    uint64_t hash;
    int64_t id;
    size_t len;
    char val[CACHE_STR_MAX];
};

/* One receipt's row, from its binding to its tail; single receipts'
 * rows wait in the store for one INSERT of many (put_receipts). */
struct put_row {
    int64_t id;
    int64_t ids[5]; /* model, plan, graph, tuning, stop reason */
    int64_t received_at, source_id;
    uint64_t seq, coverage;
    int has_seq, status, schema_version, requested, executed;
    size_t counters_len, extra_len;
    const void *extra; /* the receipt's, or own_extra */
    void *own_extra;   /* a waiting row's copy */
    unsigned char counters[STORE_COUNTERS_MAX]; /* bound until the step */
    /* A waiting row's receipt for the tail (tail_row), its figures only:
     * no strings, no extra. */
    struct receipt r;
};

/* A read transaction of the store's own (held_read_take). */
struct held_read {
    sqlite3 *db;
    sqlite3_stmt *st; /* stepped once: held; reset: let go */
    int held;
};

struct store {
    struct store_base base; /* first: store_ops.h */
    sqlite3 *db;
    char *path;
    int readonly;
    int broken;
    int busy_ms;    /* the connection's busy timeout, as set at open */
    int page_limit; /* PRAGMA max_page_count was set (store_opts.max_pages) */
    uint64_t quarantine_max;
    int rollup_chunks;           /* store_opts.rollup_chunks */
    int relay_wait;              /* store_opts.relay_wait */
    int relay_drop;              /* store_opts.relay_drop */
    struct store_shared *shared; /* store_opts.shared, a reference */
    sqlite3_stmt *st[ST_COUNT];
    sqlite3_stmt *put[PUT_LEVELS]; /* multi-row receipt inserts */
    struct cache_slot *cache;      /* CACHE_SLOTS entries; read-write only */
    struct seqmark *marks;         /* SEQMARK_SLOTS entries; read-write only */
    size_t n_marks;
    uint64_t deadline_ms;        /* for the progress handler of queries */
    struct store_rollup *rollup; /* statements of store_rollup.c */
    struct store_seq *seqs;      /* statements of store_seq.c */
    struct store_tail *tail;     /* read-write only: store_tail.c */
    int tail_stale;              /* a rollback left the tail to reload */
    int wal_frames;              /* frames in the WAL after the last commit */
    int wal_copied;              /* of them, copied by the last checkpoint */
    int restart_at;              /* frames for the next restart (or 0) */
    int sync_pipelined;          /* store_opts.sync_pipelined, once open */
    sqlite3_file *wal_file;      /* its WAL, for store_wal_sync */
    /* Checkpoints whose sync of the database is store_db_sync's (store.h
     * STORE_WAL_RESTART_FRAMES): the pin is a read transaction on a
     * connection of its own, held from such a checkpoint until the sync
     * of its copy, so that SQLite cannot restart the WAL over frames the
     * disk may not hold anywhere else. Writer thread, except the atomics
     * and db_file's sync. */
    struct held_read pin;
    /* The ceiling (store.h store_ceiling_take): a read transaction begun
     * right after a commit, so that a checkpoint copies nothing committed
     * after it. Writer thread. */
    struct held_read ceiling;
    int ckpt_deferred;           /* the last checkpoint left its sync */
    uint64_t pin_gen;            /* ckpt_gen of the last checkpoint pinned */
    _Atomic uint64_t ckpt_gen;   /* checkpoints that left their sync */
    _Atomic uint64_t synced_gen; /* of them, covered by a database sync */
    atomic_int db_sync_failed;   /* final: store.h store_db_sync */
    sqlite3_file *db_file;       /* the database's, for store_db_sync */
    int in_savepoint;            /* a job's savepoint is open */
    struct put_row *rows;        /* PUT_DEFER_MAX single receipts' rows */
    size_t n_rows;               /* waiting for their INSERT */
    /* The id SQLite would give the next row inserted without one (the
     * newest id + 1) as far as the writer knows, or 0: unknown after a
     * rollback or a prune (insert_rows). */
    int64_t append_next;
    /* The relay's reads (store_relay.c), made on first use. */
    struct store_relay_cache *relay;
};

static int put_rows(struct store *s, struct proto_err *err);
static void drop_rows(struct store *s);

uint64_t
store_now_ms(void)
{
    return mono_ms();
}

int
store_schema_version(void)
{
    return store_migrations_count;
}

/* Copies SQLite's error text now, before another call replaces it. */
/*
 * Whether rc comes from a full filesystem: the operating system said so
 * (ENOSPC, or EDQUOT for a quota); SQLITE_FULL, which SQLite's own VFS
 * gives for ENOSPC without keeping the errno, unless a page limit
 * (--max-db-pages) may be what is full; or the WAL index (-shm) could not
 * grow without saying why, which is what a full disk gives at start.
 * Returns that errno, or 0.
 */
static int
disk_full(struct store *s, int rc)
{
    int e = s->db != NULL ? sqlite3_system_errno(s->db) : 0;

    if ((rc & 0xff) != SQLITE_FULL && (rc & 0xff) != SQLITE_IOERR)
        return 0;
    if (e == ENOSPC || e == EDQUOT)
        return e;
    if (e != 0)
        return 0;
    return (rc == SQLITE_FULL && !s->page_limit) || rc == SQLITE_IOERR_SHMSIZE
               ? ENOSPC
               : 0;
}

int
store_fail(struct store *s, int rc, struct proto_err *err, const char *what)
{
    int prim = rc & 0xff, full;

    if (prim == SQLITE_FULL || prim == SQLITE_IOERR || prim == SQLITE_CORRUPT ||
        prim == SQLITE_NOMEM || prim == SQLITE_NOTADB ||
        prim == SQLITE_CANTOPEN || prim == SQLITE_READONLY ||
        (s->db != NULL && !s->readonly && sqlite3_get_autocommit(s->db)))
        s->broken = 1;
    if (prim == SQLITE_INTERRUPT)
        return proto_err_set(err, PROTO_EOVERLOADED, NULL,
                             "the query ran past query_timeout_ms; narrow "
                             "its filters or lower its limit");
    if ((full = disk_full(s, rc)) != 0)
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "the store cannot %s: the disk is full (%s; "
                             "SQLite error %d)",
                             what, strerror(full), rc);
    return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                         "the store cannot %s: %s (SQLite error %d)", what,
                         s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc),
                         rc);
}

int
store_exec(struct store *s, const char *sql, struct proto_err *err,
           const char *what)
{
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);

    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, what);
    return 0;
}

static int
pragma_text(struct store *s, const char *sql, char *out, size_t cap,
            struct proto_err *err)
{
    sqlite3_stmt *st;
    int rc;

    out[0] = '\0';
    rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "read a pragma");
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        snprintf(out, cap, "%s", t ? (const char *)t : "");
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_OK) {
        store_fail(s, rc, err, "read a pragma");
        sqlite3_finalize(st);
        return err ? err->code : PROTO_EUNAVAILABLE;
    }
    sqlite3_finalize(st);
    return 0;
}

int
store_sqlite_user_version(struct store *s, int *version, struct proto_err *err)
{
    char buf[32];
    int rc;

    if ((rc = pragma_text(s, "PRAGMA user_version", buf, sizeof(buf), err)))
        return rc;
    *version = atoi(buf);
    return 0;
}

static int
wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
    struct store *s = arg;

    /* Fewer frames than the last checkpoint copied: the WAL started over. */
    if (frames < s->wal_copied) {
        s->wal_copied = 0;
        s->restart_at = 0;
    }
    s->wal_frames = frames;
    /* Pipelined: the writer checkpoints past the bound itself, once every
     * frame is synced (writer.c), never over frames not synced yet. */
    if (frames >= STORE_WAL_HARD_FRAMES && !s->sync_pipelined &&
        sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL,
                                  NULL) == SQLITE_OK)
        s->wal_copied = frames;
    return SQLITE_OK;
}

int
store_sqlite_wal_frames(const struct store *s)
{
    return s->wal_frames - s->wal_copied;
}

int
store_sqlite_wal_length(const struct store *s)
{
    return s->wal_frames;
}

int
store_sqlite_wal_restart_due(const struct store *s)
{
    return s->sync_pipelined && s->db_file != NULL &&
           !atomic_load(&s->db_sync_failed) && s->ckpt_deferred &&
           s->wal_frames >= STORE_WAL_RESTART_FRAMES &&
           s->wal_frames >= s->restart_at &&
           (!s->pin.held || atomic_load(&s->synced_gen) >= s->pin_gen);
}

/* A read transaction of the store's own on a read-only connection of its
 * own (the pin, the ceiling): begun by stepping its statement to its row,
 * ended by resetting it. 0, or -1 when it cannot be had now. */
static int
held_read_take(struct store *s, struct held_read *r)
{
    int rc;

    if (r->held)
        return 0;
    if (r->st == NULL) {
        if (r->db == NULL &&
            sqlite3_open_v2(s->path, &r->db,
                            SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX,
                            NULL) != SQLITE_OK)
            return -1;
        if (sqlite3_prepare_v2(r->db, "SELECT 1 FROM sqlite_schema LIMIT 1", -1,
                               &r->st, NULL) != SQLITE_OK)
            return -1;
    }
    rc = sqlite3_step(r->st);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(r->st);
        return -1;
    }
    r->held = 1;
    return 0;
}

static void
held_read_let_go(struct held_read *r)
{
    if (r->held) {
        sqlite3_reset(r->st);
        r->held = 0;
    }
}

static void
held_read_close(struct held_read *r)
{
    sqlite3_finalize(r->st);
    sqlite3_close(r->db);
    r->st = NULL;
    r->db = NULL;
    r->held = 0;
}

/* The pin's read transaction begins: 0, or -1 when it cannot be had now
 * (then the checkpoint syncs its own copy). */
static int
pin_take(struct store *s)
{
    return held_read_take(s, &s->pin);
}

static void
pin_let_go(struct store *s)
{
    held_read_let_go(&s->pin);
}

/* The pin goes once its checkpoints' copy is on the disk. */
static void
pin_settle(struct store *s)
{
    if (s->pin.held && !atomic_load(&s->db_sync_failed) &&
        atomic_load(&s->synced_gen) >= s->pin_gen)
        pin_let_go(s);
}

static int
set_synchronous(struct store *s, const char *sql)
{
    return sqlite3_exec(s->db, sql, NULL, NULL, NULL);
}

/* A restarting checkpoint's wait for the readers still in the WAL: a
 * short sleep per try, so that the writer goes on as soon as they end. */
static int
restart_busy(void *arg, int tries)
{
    const struct timespec ts = { 0, STORE_WAL_RESTART_SLEEP_US * 1000L };

    (void)arg;
    if (tries >= STORE_WAL_RESTART_WAIT_US / STORE_WAL_RESTART_SLEEP_US)
        return 0;
    nanosleep(&ts, NULL);
    return 1;
}

int
store_sqlite_checkpoint(struct store *s, struct proto_err *err)
{
    int rc, copied = 0, frames = -1, defer, restart;

    if (atomic_load(&s->db_sync_failed))
        return 0; /* the WAL stays whole: store.h store_db_sync */
    pin_settle(s);
    /* Without a pin held, past the bound: SQLite syncs the copy itself
     * and may restart the WAL at the next commit. */
    defer = s->sync_pipelined && s->db_file != NULL &&
            (s->pin.held || s->ceiling.held ||
             s->wal_frames < STORE_WAL_RESTART_FRAMES || !s->ckpt_deferred) &&
            pin_take(s) == 0;
    s->ckpt_deferred = defer;
    if (defer &&
        (rc = set_synchronous(s, "PRAGMA synchronous = OFF")) != SQLITE_OK)
        return store_fail(s, rc, err, "checkpoint its WAL");
    /* Past the bound, a checkpoint that syncs its own copy restarts the
     * WAL itself (SQLITE_CHECKPOINT_RESTART), waiting a little for the
     * readers still in it: queries that never pause would otherwise keep
     * some snapshot in the WAL at every commit, and a PASSIVE checkpoint
     * would leave its restart to chance (store.h). Readers that begin once
     * every frame is copied read the database alone and do not hold it up.
     * SQLITE_BUSY: readers stayed; what could be copied was. */
    restart = !defer && !s->ceiling.held &&
              s->wal_frames >= STORE_WAL_RESTART_FRAMES &&
              s->wal_frames >= s->restart_at;
    if (restart)
        sqlite3_busy_handler(s->db, restart_busy, NULL);
    rc = sqlite3_wal_checkpoint_v2(s->db, NULL,
                                   restart ? SQLITE_CHECKPOINT_RESTART
                                           : SQLITE_CHECKPOINT_PASSIVE,
                                   &frames, &copied);
    if (restart) {
        sqlite3_busy_timeout(s->db, s->busy_ms);
        /* A reader that outlasted the wait may hold its snapshot for
         * long (a backup, a shell's open transaction): the next try
         * waits until the WAL has grown as much again, so that such a
         * reader costs the writer a wait per STORE_WAL_RESTART_FRAMES,
         * not one per checkpoint. */
        s->restart_at =
            rc == SQLITE_BUSY ? s->wal_frames + STORE_WAL_RESTART_FRAMES : 0;
        if (rc == SQLITE_BUSY)
            rc = SQLITE_OK;
    }
    if (defer) {
        int rc2 = set_synchronous(s, "PRAGMA synchronous = NORMAL");

        if (rc == SQLITE_OK && copied > s->wal_copied)
            s->pin_gen = atomic_fetch_add(&s->ckpt_gen, 1) + 1;
        else
            pin_settle(s); /* nothing copied: nothing to sync */
        if (rc == SQLITE_OK && rc2 != SQLITE_OK) {
            /* Left at OFF, a commit would skip the WAL header's sync
             * after a restart; the store is unusable rather than that. */
            s->broken = 1;
            rc = rc2;
        }
    }
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "checkpoint its WAL");
    s->wal_copied = copied > 0 ? copied : 0;
    if (frames >= 0)
        s->wal_frames = frames; /* a restart shows at the next commit */
    return 0;
}

int
store_sqlite_ceiling_take(struct store *s)
{
    if (!s->sync_pipelined || s->db_file == NULL ||
        atomic_load(&s->db_sync_failed))
        return -1;
    return held_read_take(s, &s->ceiling);
}

void
store_sqlite_ceiling_let_go(struct store *s)
{
    held_read_let_go(&s->ceiling);
}

int
store_sqlite_db_sync_owed(const struct store *s)
{
    return !atomic_load(&s->db_sync_failed) &&
           atomic_load(&s->synced_gen) < atomic_load(&s->ckpt_gen);
}

/* Another thread than the writer's may call this (writer.c's syncer), as
 * store_sqlite_wal_sync: it touches only the database's file object, whose
 * sync SQLite's unix VFS does with fsync (no flag of the file's is
 * changed: a database file has no directory to sync). */
int
store_sqlite_db_sync(struct store *s, struct proto_err *err)
{
    uint64_t gen = atomic_load(&s->ckpt_gen);
    int rc;

    if (atomic_load(&s->db_sync_failed))
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "a sync of the database file failed before");
    if (gen <= atomic_load(&s->synced_gen))
        return 0;
    rc = s->db_file->pMethods->xSync(s->db_file, SQLITE_SYNC_NORMAL);
    if (rc != SQLITE_OK) {
        atomic_store(&s->db_sync_failed, 1);
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "cannot sync the database file: %s (SQLite "
                             "error %d)",
                             sqlite3_errstr(rc), rc);
    }
    atomic_store(&s->synced_gen, gen);
    return 0;
}

int
store_sqlite_checkpoint_final(struct store *s, struct proto_err *err)
{
    int rc, log = -1, done = -1;

    if (atomic_load(&s->db_sync_failed)) {
        /* Closing must not checkpoint either: SQLite would then delete
         * the WAL, the one copy of what the failed sync may have lost. */
        sqlite3_db_config(s->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "a sync of the database file failed; the WAL "
                             "is kept whole for the next start");
    }
    /* TRUNCATE syncs the copy before it empties the WAL. */
    held_read_let_go(&s->ceiling);
    pin_let_go(s);
    rc = sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE,
                                   &log, &done);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "checkpoint its WAL");
    if (log != done)
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "%d of %d WAL frames were copied into the "
                             "database",
                             done, log);
    s->wal_frames = s->wal_copied = 0;
    return 0;
}

int
store_sqlite_file_check(struct store *s, struct proto_err *err)
{
    int moved = 0;

    /* The unix VFS stats the path and compares the inode with the open
     * file's: one stat(2), once per commit group. A VFS that does not
     * know the control (SQLITE_NOTFOUND) leaves moved at 0. */
    if (sqlite3_file_control(s->db, "main", SQLITE_FCNTL_HAS_MOVED, &moved) ==
            SQLITE_OK &&
        moved)
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "the database file was deleted or replaced "
                             "while the daemon had it open; what it commits "
                             "now would be lost at the next start");
    return 0;
}

static int
set_pragmas(struct store *s, const struct store_opts *o, struct proto_err *err)
{
    char sql[96], buf[32];
    int rc;

    s->busy_ms = o->busy_timeout_ms > 0 ? o->busy_timeout_ms : 5000;
    snprintf(sql, sizeof(sql), "PRAGMA busy_timeout = %d", s->busy_ms);
    if ((rc = pragma_text(s, sql, buf, sizeof(buf), err)))
        return rc;
    if (s->readonly)
        return pragma_text(s, "PRAGMA query_only = 1", buf, sizeof(buf), err);

    if ((rc = pragma_text(s, "PRAGMA journal_mode = WAL", buf, sizeof(buf),
                          err)))
        return rc;
    if ((rc = pragma_text(s, "PRAGMA journal_mode", buf, sizeof(buf), err)))
        return rc;
    if (strcmp(buf, "wal") != 0)
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "journal_mode is \"%s\" after asking for WAL; "
                             "refusing to run without it",
                             buf);
    if ((rc = store_exec(s, "PRAGMA synchronous = FULL", err,
                         "set synchronous")))
        return rc;
    if ((rc = pragma_text(s, "PRAGMA synchronous", buf, sizeof(buf), err)))
        return rc;
    if (atoi(buf) != 2)
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "synchronous is %s after asking for FULL (2); "
                             "refusing to acknowledge writes that are not "
                             "durable",
                             buf);
    /* Checkpoints run from the writer in its quiet moments
     * (store_checkpoint); the hook below only records the WAL's length,
     * and checkpoints in the commit itself past STORE_WAL_HARD_FRAMES, the
     * bound when the writer is never quiet. */
    sqlite3_wal_hook(s->db, wal_hook, s);
    /* A page cache larger than SQLite's 2 MiB default holds a commit
     * group's dirty pages and the rollup rows a chunk updates. */
    if ((rc = store_exec(s, "PRAGMA cache_size = -65536", err,
                         "size the page cache")))
        return rc;
    if ((rc = store_exec(s, "PRAGMA foreign_keys = ON", err,
                         "enable foreign keys")))
        return rc;
    if ((rc = pragma_text(s, "PRAGMA foreign_keys", buf, sizeof(buf), err)))
        return rc;
    if (atoi(buf) != 1)
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "foreign keys could not be enabled");
    if (o->max_pages > 0) {
        s->page_limit = 1;
        snprintf(sql, sizeof(sql), "PRAGMA max_page_count = %llu",
                 (unsigned long long)o->max_pages);
        if ((rc = pragma_text(s, sql, buf, sizeof(buf), err)))
            return rc;
    }
    return 0;
}

/*
 * Pipelined durability (store_opts.sync_pipelined), after the migrations,
 * which commit with FULL: COMMIT writes the WAL frames without syncing
 * them (synchronous=NORMAL, which keeps the file consistent whatever is
 * lost) and store_wal_sync makes them durable. WAL mode syncs the WAL
 * before every checkpoint under NORMAL as under FULL, so a checkpoint
 * never copies a frame that is not on the disk.
 */
static int
set_pipelined(struct store *s, const struct store_opts *o,
              struct proto_err *err)
{
    char buf[32];
    int rc;

    if (s->readonly || !o->sync_pipelined)
        return 0;
    if ((rc = store_exec(s, "PRAGMA synchronous = NORMAL", err,
                         "set synchronous")) ||
        (rc = pragma_text(s, "PRAGMA synchronous", buf, sizeof(buf), err)))
        return rc;
    if (atoi(buf) != 1)
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "synchronous is %s after asking for NORMAL (1)",
                             buf);
    s->sync_pipelined = 1;
    return 0;
}

int
store_sqlite_sync_pipelined(const struct store *s)
{
    return s->sync_pipelined;
}

/*
 * The WAL's file, found on the writer's thread after a commit: SQLite
 * opens it with the connection's first transaction and keeps it while
 * the connection is open. The first commit into a new WAL syncs its
 * header (and the directory) itself, on the writer's thread.
 */
static int
find_wal(struct store *s, struct proto_err *err)
{
    sqlite3_file *f = NULL;
    int rc;

    rc = sqlite3_file_control(s->db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &f);
    if (rc != SQLITE_OK || f == NULL || f->pMethods == NULL)
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "cannot find the WAL file to sync (SQLite "
                             "error %d)",
                             rc);
    s->wal_file = f;
    /* Its frames written a commit at a time (wal_gather.h); without the
     * memory, a frame at a time as before. */
    (void)wal_gather_install(f);
    f = NULL;
    rc = sqlite3_file_control(s->db, "main", SQLITE_FCNTL_FILE_POINTER, &f);
    if (rc == SQLITE_OK && f != NULL && f->pMethods != NULL)
        s->db_file = f; /* else checkpoints sync their own copy */
    return 0;
}

/* Another thread than the writer's may call this (writer.c's syncer):
 * it touches only the WAL's file object, whose sync SQLite's unix VFS
 * does with fsync on a descriptor that stays open. No store_fail: that
 * reads the connection's error state, the writer's. */
int
store_sqlite_wal_sync(struct store *s, struct proto_err *err)
{
    int rc;

    if (s->wal_file == NULL)
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "no WAL file to sync");
    rc = s->wal_file->pMethods->xSync(s->wal_file, SQLITE_SYNC_NORMAL);
    if (rc != SQLITE_OK)
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "cannot sync the WAL: %s (SQLite error %d)",
                             sqlite3_errstr(rc), rc);
    return 0;
}

/*
 * After a failed sync the kernel may have dropped the WAL's unsynced
 * pages while keeping them readable ("fsyncgate"): a later sync would
 * report success for data that is not on the disk. Writing the whole WAL
 * again from what reads back, then syncing it, puts every committed
 * frame on the disk. Written a run of whole frames at a time (a frame is
 * a 24-byte header and a page; the WAL's own header is 32 bytes), so
 * that each write covers whole frames as SQLite wrote them, and at most
 * WAL_REWRITE_BYTES (SQLite's unix VFS writes at most 128 KiB in one
 * call). Writer thread, with no sync under way.
 */
#define WAL_HEADER        32
#define WAL_FRAME_HEADER  24
#define WAL_REWRITE_BYTES (128 * 1024)

int
store_sqlite_wal_rewrite(struct store *s, struct proto_err *err)
{
    sqlite3_file *f = s->wal_file;
    sqlite3_int64 size = 0, off, n;
    unsigned char hdr[WAL_HEADER], *buf;
    uint32_t page;
    size_t frame, run;
    int rc;

    if (f == NULL)
        return 0;
    if ((rc = f->pMethods->xFileSize(f, &size)) != SQLITE_OK)
        return store_fail(s, rc, err, "read its WAL's size");
    if (size >= WAL_HEADER) {
        if ((rc = f->pMethods->xRead(f, hdr, WAL_HEADER, 0)) != SQLITE_OK)
            return store_fail(s, rc, err, "read its WAL");
        page = (uint32_t)hdr[8] << 24 | (uint32_t)hdr[9] << 16 |
               (uint32_t)hdr[10] << 8 | hdr[11];
        if (page == 1)
            page = 65536; /* the WAL format's way to say 64 KiB */
        if (page < 512 || page > 65536 || (page & (page - 1)) != 0)
            return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                                 "the WAL's header names a page size of "
                                 "%u bytes",
                                 page);
        frame = WAL_FRAME_HEADER + (size_t)page;
        run = (WAL_REWRITE_BYTES / frame) * frame; /* one frame at least */
        if ((buf = malloc(run)) == NULL)
            return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        rc = f->pMethods->xWrite(f, hdr, WAL_HEADER, 0);
        for (off = WAL_HEADER; rc == SQLITE_OK && off < size; off += n) {
            n = size - off;
            if (n > (sqlite3_int64)run)
                n = (sqlite3_int64)run;
            rc = f->pMethods->xRead(f, buf, (int)n, off);
            if (rc == SQLITE_OK)
                rc = f->pMethods->xWrite(f, buf, (int)n, off);
        }
        free(buf);
        if (rc != SQLITE_OK)
            return store_fail(s, rc, err, "write its WAL again");
    }
    if ((rc = f->pMethods->xSync(f, SQLITE_SYNC_NORMAL)) != SQLITE_OK)
        return store_fail(s, rc, err, "sync its WAL");
    return 0;
}

struct migrating {
    const struct store_opts *o;
    int from, to;
    uint64_t start_ms, next_ms;
};

/* SQLite's progress handler while migrations run: tells opts->migrating
 * every STORE_MIGRATING_EVERY_MS. Never interrupts. */
static int
migrating_cb(void *arg)
{
    struct migrating *m = arg;
    uint64_t now = store_now_ms();

    if (now >= m->next_ms) {
        m->next_ms = now + STORE_MIGRATING_EVERY_MS;
        m->o->migrating(m->o->migrating_arg, m->from, m->to, now - m->start_ms);
    }
    return 0;
}

static int
migrate(struct store *s, const struct store_opts *opts, int target,
        struct proto_err *err)
{
    struct migrating m = { opts, 0, target, 0, 0 };
    char sql[64];
    int have, rc, i;

    if ((rc = store_user_version(s, &have, err)))
        return rc;
    if (have > store_migrations_count)
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "the database is at schema version %d but this "
                             "receiptd knows versions up to %d; run a newer "
                             "receiptd (the file was left untouched)",
                             have, store_migrations_count);
    if (s->readonly || have >= target)
        return 0;
    if (opts->migrating != NULL) {
        m.from = have;
        m.start_ms = store_now_ms();
        migrating_cb(&m);
        sqlite3_progress_handler(s->db, 100000, migrating_cb, &m);
    }
    /* All missing migrations in one transaction: a crash half-way leaves
     * the file at its old version, never between two. */
    if ((rc = store_exec(s, "BEGIN IMMEDIATE", err, "begin a migration")))
        goto done;
    for (i = have; i < target; i++) {
        if ((rc = store_exec(s, store_migrations[i].sql, err, "migrate"))) {
            char msg[PROTO_ERR_MSG_MAX];
            snprintf(msg, sizeof(msg), "%s", err ? err->message : "");
            store_rollback(s);
            rc = proto_err_set(err, rc, NULL, "migration %s failed: %s",
                               store_migrations[i].name, msg);
            goto done;
        }
    }
    snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", target);
    if ((rc = store_exec(s, sql, err, "record the schema version")) ||
        (rc = store_exec(s, "COMMIT", err, "commit a migration")))
        store_rollback(s);
done:
    sqlite3_progress_handler(s->db, 0, NULL, NULL);
    return rc;
}

/* Parameters a receipts row binds. */
#define RECEIPT_COLS (1 + STORE_RECEIPT_FIXED_COLS + 2)

/* The INSERT of rows receipts, one VALUES tuple each. */
static char *
receipt_insert_sql(int rows)
{
    size_t cap = 1024 + (size_t)rows * RECEIPT_COLS * 3, n;
    char *sql = malloc(cap);
    int i, j, cols;

    if (sql == NULL)
        return NULL;
    n = (size_t)snprintf(
        sql, cap,
        "INSERT INTO receipts (id, received_at, source_id, seq, "
        "schema_version, requested_backend, executed_backend, "
        "status, model_id, plan_id, graph_id, tuning_id, "
        "stop_reason_id, counter_coverage, counters, extra) VALUES ");
    cols = RECEIPT_COLS;
    for (j = 0; j < rows; j++) {
        n += (size_t)snprintf(sql + n, cap - n, "%s(?", j ? ", " : "");
        for (i = 1; i < cols; i++)
            n += (size_t)snprintf(sql + n, cap - n, ", ?");
        n += (size_t)snprintf(sql + n, cap - n, ")");
    }
    return sql;
}

static int
prepare_all(struct store *s, struct proto_err *err)
{
    char *rsql;
    int i, rc;

    rsql = receipt_insert_sql(1);
    if (rsql == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    for (i = 0; i < ST_COUNT; i++) {
        const char *sql = i == ST_RECEIPT_PUT ? rsql : stmt_sql[i];
        rc = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT,
                                &s->st[i], NULL);
        if (rc != SQLITE_OK) {
            store_fail(s, rc, err, "prepare its statements");
            free(rsql);
            return PROTO_EUNAVAILABLE;
        }
    }
    free(rsql);
    return 0;
}

/*
 * A read-write store that SQLite could open only for reading (a file the
 * daemon's user may not write: SQLite falls back to read-only without an
 * error) would answer every write unavailable; refuse it now, with the
 * reason, before anything is migrated or the daemon says it is ready.
 */
static int
writable_check(struct store *s, struct proto_err *err)
{
    if (s->readonly || sqlite3_db_readonly(s->db, "main") != 1)
        return 0;
    return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                         "the database file is not writable by this user "
                         "(SQLite opened it read-only); check its owner and "
                         "mode");
}

int
store_sqlite_open(const char *path, const struct store_opts *opts,
                  struct store **out, struct proto_err *err)
{
    static const struct store_opts defaults;
    struct store *s;
    int flags, rc, target;

    *out = NULL;
    if (opts == NULL)
        opts = &defaults;
    s = calloc(1, sizeof(*s));
    if (s == NULL || (s->path = strdup(path)) == NULL) {
        free(s);
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    }
    s->base.ops = &store_sqlite_ops;
    s->readonly = opts->readonly;
    s->quarantine_max = opts->quarantine_max_bytes;
    s->relay_wait = opts->relay_wait;
    s->relay_drop = opts->relay_drop;
    s->rollup_chunks =
        opts->rollup_chunks ? (int)opts->rollup_chunks : STORE_ROLLUP_CHUNKS;
    s->shared = store_shared_ref(opts->shared);
    flags = SQLITE_OPEN_NOMUTEX |
            (s->readonly ? SQLITE_OPEN_READONLY
                         : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    rc = sqlite3_open_v2(path, &s->db, flags, NULL);
    if (rc != SQLITE_OK) {
        /* No path: this text reaches clients (a query's connection), and
         * the daemon's own messages name the store. */
        proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                      "cannot open the database: %s",
                      s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
        store_free(s);
        return PROTO_EUNAVAILABLE;
    }
    sqlite3_extended_result_codes(s->db, 1);
    if ((rc = writable_check(s, err)) != 0)
        goto fail;
    target = opts->max_version > 0 && opts->max_version < store_migrations_count
                 ? opts->max_version
                 : store_migrations_count;
    if (!s->readonly &&
        (rc = store_counters_sql_function(s->db)) != SQLITE_OK) {
        rc = store_fail(s, rc, err, "register the migration's function");
        goto fail;
    }
    if ((rc = set_pragmas(s, opts, err)) ||
        (rc = migrate(s, opts, target, err)) ||
        (rc = set_pipelined(s, opts, err)))
        goto fail;
    if (!s->readonly && target == store_migrations_count) {
        s->cache = calloc(CACHE_SLOTS, sizeof(*s->cache));
        s->marks = calloc(SEQMARK_SLOTS, sizeof(*s->marks));
        s->rows = calloc(PUT_DEFER_MAX, sizeof(*s->rows));
        if (s->cache == NULL || s->marks == NULL || s->rows == NULL) {
            rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
            goto fail;
        }
        if ((rc = prepare_all(s, err)) ||
            (rc = store_tail_open(s, opts, &s->tail, err)))
            goto fail;
    }
    s->broken = 0;
    *out = s;
    return 0;
fail:
    store_free(s);
    return rc;
}

void
store_sqlite_free(struct store *s)
{
    int i;

    if (s == NULL)
        return;
    for (i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(s->st[i]);
    for (i = 0; i < PUT_LEVELS; i++)
        sqlite3_finalize(s->put[i]);
    if (s->rows != NULL)
        drop_rows(s);
    free(s->rows);
    store_tail_free(s->tail);
    store_rollup_free(s->rollup);
    store_shared_unref(s->shared);
    store_seq_free(s->seqs);
    store_relay_cache_free(s->relay);
    held_read_close(&s->ceiling);
    held_read_close(&s->pin);
    if (atomic_load(&s->db_sync_failed))
        sqlite3_db_config(s->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
    sqlite3_close(s->db);
    free(s->cache);
    free(s->marks);
    free(s->path);
    free(s);
}

static void
cache_clear(struct store *s)
{
    if (s->cache != NULL)
        memset(s->cache, 0, CACHE_SLOTS * sizeof(*s->cache));
}

/* Steps one of the prepared statements without parameters (the writer's
 * transaction control, compiled once instead of at every group). */
static int
run(struct store *s, int which, struct proto_err *err, const char *what)
{
    int rc = sqlite3_step(s->st[which]);

    sqlite3_reset(s->st[which]);
    return rc == SQLITE_DONE ? 0 : store_fail(s, rc, err, what);
}

int
store_one_int(struct store *s, const char *sql, const char *param, size_t len,
              int as_blob, int64_t dflt, int64_t *v, struct proto_err *err,
              const char *what)
{
    sqlite3_stmt *st;
    int rc;

    *v = dflt;
    rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, what);
    /* An empty blob still needs a non-NULL pointer, or SQLite would bind
     * NULL; a text compares unequal to a blob, so each binds as stored. */
    if (param != NULL && as_blob)
        sqlite3_bind_blob(st, 1, len ? param : "", (int)len, SQLITE_STATIC);
    else if (param != NULL)
        sqlite3_bind_text(st, 1, param, (int)len, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *v = sqlite3_column_int64(st, 0);
        rc = SQLITE_DONE;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : store_fail(s, rc, err, what);
}

int
store_string_id(struct store *s, const char *p, size_t n, int64_t *id,
                struct proto_err *err)
{
    return store_one_int(s, "SELECT id FROM strings WHERE value = ?1", p, n, 1,
                         0, id, err, "look up a string");
}

int
store_counter(struct store *s, const char *name, int64_t dflt, int64_t *v,
              struct proto_err *err)
{
    sqlite3_stmt *st = s->st[ST_COUNTER_GET];
    int rc;

    /* A read-only store prepares no statements: it reads its few counters
     * once a query. */
    if (st == NULL)
        return store_one_int(s, "SELECT value FROM counters WHERE name = ?1",
                             name, strlen(name), 0, dflt, v, err,
                             "read a counter");
    *v = dflt;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *v = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return store_fail(s, rc, err, "read a counter");
    return 0;
}

struct store_tail *
store_tail_of(struct store *s)
{
    return s->tail;
}

struct store_rollup **
store_rollups(struct store *s)
{
    return &s->rollup;
}

struct store_shared *
store_shared_of(struct store *s)
{
    return s->shared;
}

int
store_rollup_span(struct store *s)
{
    return s->rollup_chunks;
}

struct store_seq **
store_seqs(struct store *s)
{
    return &s->seqs;
}

struct store_relay_cache **
store_relay_cache_of(struct store *s)
{
    return &s->relay;
}

int
store_sqlite_begin(struct store *s, struct proto_err *err)
{
    int rc;

    s->broken = 0;
    pin_settle(s);
    rc = run(s, ST_BEGIN, err, "begin a transaction");
    if (rc == 0 && s->tail != NULL && s->tail_stale) {
        /* The last transaction was rolled back: the tail in memory may
         * hold what it took back. */
        rc = store_tail_reload(s, s->tail, err);
        if (rc == 0)
            s->tail_stale = 0;
        else
            s->broken = 1;
    }
    return rc;
}

int
store_sqlite_commit(struct store *s, struct proto_err *err)
{
    int rc = 0;

    rc = put_rows(s, err);
    /* A long enough tail becomes a chunk in this transaction, and the
     * last chunk's sums go on into the rollups by another slice. */
    if (rc == 0 && s->tail != NULL && store_tail_due(s->tail))
        rc = store_tail_flush(s, s->tail, err);
    if (rc == 0)
        rc = store_rollup_merge_step(s, s->rollup, err);
    if (rc == 0)
        rc = run(s, ST_COMMIT, err, "commit");
    if (rc == 0)
        store_rollup_publish(s->rollup);
    if (rc == 0 && s->sync_pipelined && s->wal_file == NULL)
        rc = find_wal(s, err);

    /* A failed COMMIT is never retried: the group is rolled back and its
     * producers resend, because after an fsync error the state of the file
     * is unknown and acknowledging on a second try could lie. */
    if (rc != 0)
        s->broken = 1;
    return rc;
}

int
store_sqlite_merge_pending(const struct store *s)
{
    return store_rollup_merging(s->rollup) || store_rollup_waiting(s->rollup);
}

int
store_sqlite_merge_idle(struct store *s, unsigned keys, struct proto_err *err)
{
    int rc;

    if (!store_merge_pending(s))
        return 0;
    /* A quiet writer seals the chunks that wait, so that an idle store
     * has nothing left for queries to read from the receipts. */
    if ((rc = store_begin(s, err)) != 0 ||
        (rc = store_rollup_seal_waiting(s, s->rollup, err)) != 0 ||
        (rc = store_rollup_merge_keys(
             s, s->rollup, keys > INT_MAX ? INT_MAX : (int)keys, err)) != 0 ||
        (rc = run(s, ST_COMMIT, err, "commit")) != 0) {
        store_rollback(s);
        return rc;
    }
    store_rollup_publish(s->rollup);
    return store_merge_pending(s);
}

void
store_rows_deleted(struct store *s)
{
    s->append_next = 0;
}

void
store_sqlite_rollback(struct store *s)
{
    drop_rows(s);
    s->append_next = 0;
    s->in_savepoint = 0;
    cache_clear(s);
    store_rollup_discard_all(s->rollup);
    s->tail_stale = 1;
    if (!sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

int
store_sqlite_savepoint(struct store *s, struct proto_err *err)
{
    int rc;

    /* The rows waiting belong to the jobs before it. */
    if ((rc = put_rows(s, err)) == 0 &&
        (rc = run(s, ST_SAVEPOINT, err, "open a savepoint")) == 0)
        s->in_savepoint = 1;
    return rc;
}

int
store_sqlite_savepoint_release(struct store *s, struct proto_err *err)
{
    s->in_savepoint = 0;
    return run(s, ST_RELEASE, err, "release a savepoint");
}

void
store_sqlite_savepoint_rollback(struct store *s)
{
    struct proto_err err;

    s->in_savepoint = 0;
    s->append_next = 0;
    cache_clear(s);
    if (!sqlite3_get_autocommit(s->db)) {
        sqlite3_exec(s->db, "ROLLBACK TO job", NULL, NULL, NULL);
        sqlite3_exec(s->db, "RELEASE job", NULL, NULL, NULL);
    }
    /* The job's receipts left the tail with it. */
    if (s->tail != NULL && store_tail_reload(s, s->tail, &err) != 0)
        s->broken = 1;
}

int
store_sqlite_txn_broken(struct store *s)
{
    return s->broken || sqlite3_get_autocommit(s->db);
}

/* The cache's hash of a string: eight bytes a step (strings here are ids
 * and hashes of 20 to 70 bytes), mixed as in splitmix64. */
static uint64_t
str_hash(const char *p, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n, w = 0;
    size_t i, len = n;

    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    if (n > 0) {
        /* The last eight bytes, overlapping the step before, when there
         * are eight: a copy of a few bytes into w and a load of all of it
         * stalls the load (no store forwarding), a third of the writer's
         * interning time. */
        if (len >= 8)
            memcpy(&w, p + n - 8, 8);
        else
            for (i = 0; i < n; i++)
                w |= (uint64_t)(unsigned char)p[i] << (8 * i);
        h = (h ^ w) * 0x94d049bb133111ebull;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 32);
}

/* Runs a statement to completion, for inserts and updates. */
static int
step_done(struct store *s, sqlite3_stmt *st, struct proto_err *err,
          const char *what)
{
    int rc = sqlite3_step(st);

    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return store_fail(s, rc, err, what);
    return 0;
}

int
store_counter_set(struct store *s, const char *name, int64_t v,
                  struct proto_err *err)
{
    sqlite3_stmt *st = s->st[ST_COUNTER_SET];

    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, v);
    return step_done(s, st, err, "set a counter");
}

static int
intern(struct store *s, const char *p, size_t n, int64_t *id,
       struct proto_err *err)
{
    uint64_t h = str_hash(p, n);
    /* Two ways a set: a few hundred distinct strings (plans, graphs,
     * models) would often collide in one slot and each evict the other. */
    struct cache_slot *c = &s->cache[h % (CACHE_SLOTS / 2) * 2];
    sqlite3_stmt *st;
    int rc, way;

    for (way = 0; way < 2; way++)
        if (c[way].id != 0 && c[way].hash == h && c[way].len == n &&
            memcmp(c[way].val, p, n) == 0) {
            *id = c[way].id;
            return 0;
        }
    st = s->st[ST_INTERN_GET];
    /* An empty string still needs a non-NULL pointer for a zero-length
     * blob, or SQLite would bind NULL. */
    sqlite3_bind_blob(st, 1, n ? p : "", (int)n, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *id = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
    } else {
        sqlite3_reset(st);
        if (rc != SQLITE_DONE)
            return store_fail(s, rc, err, "look up a string");
        st = s->st[ST_INTERN_PUT];
        sqlite3_bind_blob(st, 1, n ? p : "", (int)n, SQLITE_STATIC);
        if ((rc = step_done(s, st, err, "store a string")))
            return rc;
        *id = sqlite3_last_insert_rowid(s->db);
    }
    if (n <= CACHE_STR_MAX) {
        /* The newest in way 0, the one it replaces in way 1. */
        if (c[0].id != 0)
            c[1] = c[0];
        c->hash = h;
        c->id = *id;
        c->len = n;
        memcpy(c->val, p, n);
    }
    return 0;
}

static int
put_stmt(struct store *s, int k, sqlite3_stmt **out, struct proto_err *err)
{
    char *sql;
    int rc;

    if (k == 0) {
        *out = s->st[ST_RECEIPT_PUT];
        return 0;
    }
    if (s->put[k] == NULL) {
        if ((sql = receipt_insert_sql(1 << k)) == NULL)
            return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        rc = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT,
                                &s->put[k], NULL);
        free(sql);
        if (rc != SQLITE_OK)
            return store_fail(s, rc, err, "prepare its statements");
    }
    *out = s->put[k];
    return 0;
}

/* Interns r's strings, takes an id, and makes its row. */
static int
make_row(struct store *s, const struct store_write *w, int64_t source_id,
         const struct receipt *r, struct put_row *row, struct proto_err *err)
{
    const struct proto_str *strs[5] = { &r->model_instance_id,
                                        &r->prepared_plan_id, &r->graph_hash,
                                        &r->tuning_profile, &r->stop_reason };
    int i, rc;

    for (i = 0; i < 5; i++)
        if ((rc = intern(s, strs[i]->ptr, strs[i]->len, &row->ids[i], err)))
            return rc;
    row->id = store_tail_next_id(s->tail);
    row->status = receipt_status(r);
    row->received_at = w->received_at;
    row->source_id = source_id;
    row->has_seq = w->has_seq;
    row->seq = w->seq;
    row->schema_version = r->schema_version;
    row->requested = r->requested_backend;
    row->executed = r->executed_backend;
    row->coverage = r->counter_coverage;
    row->counters_len = store_counters_pack(r, row->counters);
    row->extra = r->extra;
    row->extra_len = r->extra_len;
    row->own_extra = NULL;
    return 0;
}

/* Binds row at parameter base (0-based) of st; its id NULL when the row
 * appends (insert_rows). */
static void
bind_row(sqlite3_stmt *st, int base, const struct put_row *row, int append)
{
    int i, col;

    if (append)
        sqlite3_bind_null(st, base + 1);
    else
        sqlite3_bind_int64(st, base + 1, row->id);
    sqlite3_bind_int64(st, base + 2, row->received_at);
    sqlite3_bind_int64(st, base + 3, row->source_id);
    if (row->has_seq)
        sqlite3_bind_int64(st, base + 4, (int64_t)row->seq);
    else
        sqlite3_bind_null(st, base + 4);
    sqlite3_bind_int(st, base + 5, row->schema_version);
    sqlite3_bind_int(st, base + 6, row->requested);
    sqlite3_bind_int(st, base + 7, row->executed);
    sqlite3_bind_int(st, base + 8, row->status);
    for (i = 0; i < 5; i++)
        sqlite3_bind_int64(st, base + 9 + i, row->ids[i]);
    /* u64 values keep their bit pattern in SQLite's signed integers. */
    sqlite3_bind_int64(st, base + 14, (int64_t)row->coverage);
    col = base + 1 + STORE_RECEIPT_FIXED_COLS + 1;
    sqlite3_bind_blob(st, col++, row->counters, (int)row->counters_len,
                      SQLITE_STATIC);
    if (row->extra != NULL)
        sqlite3_bind_blob(st, col, row->extra, (int)row->extra_len,
                          SQLITE_STATIC);
    else
        sqlite3_bind_null(st, col);
}

/*
 * Whether rows[0..n) are the next ids in order: then they go in without
 * their ids, as SQLite's own next rowids. With an id given, SQLite seeks
 * the table's B-tree from its root for every row (to refuse a taken id):
 * about 1,300 instructions of a batched receipt's 10,900 in the writer.
 * Without one it appends at the cursor it holds. Either way the rows get
 * the same ids; insert_rows checks that they did.
 */
static int
appends(const struct store *s, const struct put_row *rows, size_t n)
{
    size_t j;

    if (s->append_next <= 0 || rows[0].id != s->append_next)
        return 0;
    for (j = 1; j < n; j++)
        if (rows[j].id != rows[0].id + (int64_t)j)
            return 0;
    return 1;
}

/* Inserts rows[0..n) with as few statements as the powers of two in n. */
static int
insert_rows(struct store *s, const struct put_row *rows, size_t n,
            struct proto_err *err)
{
    sqlite3_stmt *st = NULL;
    size_t done = 0, j, g;
    int k, rc, append;

    while (done < n) {
        for (k = PUT_LEVELS - 1; (size_t)1 << k > n - done; k--)
            ;
        g = (size_t)1 << k;
        if ((rc = put_stmt(s, k, &st, err)))
            return rc;
        append = appends(s, rows + done, g);
        for (j = 0; j < g; j++)
            bind_row(st, (int)j * RECEIPT_COLS, &rows[done + j], append);
        s->append_next = 0;
        if ((rc = step_done(s, st, err, "store a receipt")))
            return rc;
        if (append && sqlite3_last_insert_rowid(s->db) != rows[done + g - 1].id)
            /* Never expected: the group is rolled back and answered
             * unavailable, and the next one gives the ids again. */
            return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                                 "the store gave receipt ids out of step "
                                 "(%lld, expected %lld)",
                                 (long long)sqlite3_last_insert_rowid(s->db),
                                 (long long)rows[done + g - 1].id);
        s->append_next = rows[done + g - 1].id + 1;
        done += g;
    }
    return 0;
}

static void
drop_rows(struct store *s)
{
    size_t i;

    for (i = 0; i < s->n_rows; i++)
        free(s->rows[i].own_extra);
    s->n_rows = 0;
}

/* The rollup key of row. */
static struct store_rollup_key
row_key(const struct put_row *row)
{
    struct store_rollup_key k = { row->ids[1],     row->ids[2],
                                  row->ids[0],     row->source_id,
                                  row->requested,  row->executed,
                                  row->received_at };

    return k;
}

/* The receipt r whose row was just written, into the tail's postings and
 * rollups (in memory until the tail becomes a chunk, in the same
 * transaction as some later commit). */
static int
tail_row(struct store *s, const struct put_row *row, const struct receipt *r,
         struct proto_err *err)
{
    int64_t keys[STORE_KIND_COUNT];
    struct store_rollup_key k = row_key(row);

    keys[0] = 0;
    keys[STORE_KIND_PLAN] = row->ids[1];
    keys[STORE_KIND_GRAPH] = row->ids[2];
    keys[STORE_KIND_MODEL] = row->ids[0];
    keys[STORE_KIND_SOURCE] = row->source_id;
    keys[STORE_KIND_STATUS] = row->status;
    keys[STORE_KIND_REQUESTED] = row->requested;
    keys[STORE_KIND_EXECUTED] = row->executed;
    return store_tail_add(s, s->tail, row->id, row->received_at, keys, &k, r,
                          err);
}

/* Inserts the single receipts' rows that wait, then adds them to the
 * tail in their order, the rollup entries they add to asked for first
 * (store_rollup_prefetch): from many sources in turn, each entry is
 * elsewhere and out of the cache. */
static int
put_rows(struct store *s, struct proto_err *err)
{
    struct store_rollup_key keys[PUT_DEFER_MAX];
    const struct receipt *r[PUT_DEFER_MAX];
    size_t i;
    int rc;

    if (s->n_rows == 0)
        return 0;
    rc = insert_rows(s, s->rows, s->n_rows, err);
    if (rc == 0) {
        for (i = 0; i < s->n_rows; i++) {
            keys[i] = row_key(&s->rows[i]);
            r[i] = &s->rows[i].r;
        }
        store_rollup_prefetch(s->rollup, keys, r, s->n_rows);
    }
    for (i = 0; rc == 0 && i < s->n_rows; i++)
        rc = tail_row(s, &s->rows[i], &s->rows[i].r, err);
    drop_rows(s);
    return rc;
}

/* Appends w's receipts, as few statements as the powers of two in their
 * number; w->receipt_id and w->status are the first one's. Every
 * parameter is bound again for the next rows: no clear. A single receipt
 * outside a savepoint waits for the next INSERT of many (put_rows), and
 * goes into the tail after it, with a copy of its figures: the tail and
 * the rows take it at once. (Its seq record goes into the tail now, in
 * store_write, so that the writes after it see it.) */
static int
put_receipts(struct store *s, struct store_write *w, int64_t source_id,
             struct proto_err *err)
{
    struct put_row rows[1 << (PUT_LEVELS - 1)];
    size_t done = 0, j, g;
    int rc;

    if (w->n_receipts == 1 && !s->in_savepoint && s->rows != NULL) {
        struct put_row *row = &s->rows[s->n_rows];
        const struct receipt *r = &w->receipts[0];

        if ((rc = make_row(s, w, source_id, r, row, err)))
            return rc;
        if (row->extra != NULL) {
            if ((row->own_extra = malloc(row->extra_len)) == NULL)
                return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
            memcpy(row->own_extra, row->extra, row->extra_len);
            row->extra = row->own_extra;
        }
        row->r = *r;
        row->r.model_instance_id = row->r.prepared_plan_id = row->r.graph_hash =
            row->r.tuning_profile = row->r.stop_reason =
                (struct proto_str){ NULL, 0 };
        row->r.extra = NULL;
        row->r.extra_len = 0;
        s->n_rows++;
        w->receipt_id = row->id;
        w->status = row->status;
        return s->n_rows == PUT_DEFER_MAX ? put_rows(s, err) : 0;
    }
    if ((rc = put_rows(s, err)))
        return rc;
    while (done < w->n_receipts) {
        g = w->n_receipts - done;
        if (g > (size_t)1 << (PUT_LEVELS - 1))
            g = (size_t)1 << (PUT_LEVELS - 1);
        for (j = 0; j < g; j++) {
            if (done + j + RECEIPT_PREFETCH_AHEAD < w->n_receipts)
                receipt_prefetch(
                    &w->receipts[done + j + RECEIPT_PREFETCH_AHEAD]);
            if ((rc = make_row(s, w, source_id, &w->receipts[done + j],
                               &rows[j], err)))
                return rc;
        }
        if ((rc = insert_rows(s, rows, g, err)))
            return rc;
        for (j = 0; j < g; j++)
            if ((rc = tail_row(s, &rows[j], &w->receipts[done + j], err)))
                return rc;
        if (done == 0) {
            w->receipt_id = rows[0].id;
            w->status = rows[0].status;
        }
        done += g;
    }
    return 0;
}

static int
counter_add(struct store *s, const char *name, int64_t delta,
            struct proto_err *err)
{
    sqlite3_stmt *st = s->st[ST_COUNTER_ADD];

    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, delta);
    return step_done(s, st, err, "update a counter");
}

/* Binds what both quarantine statements store of q (?1-?8). */
static void
bind_quarantine(sqlite3_stmt *st, const struct store_write *w,
                int64_t source_id, const struct store_quarantine_item *q)
{
    sqlite3_bind_int64(st, 1, w->received_at);
    sqlite3_bind_int64(st, 2, source_id);
    sqlite3_bind_text(st, 3, q->op, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, proto_code_name(q->code), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, q->path ? q->path : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 6, q->message ? q->message : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 7, (int64_t)q->len);
    sqlite3_bind_blob(st, 8, q->len ? q->raw : "", (int)q->len, SQLITE_STATIC);
}

/*
 * A replay refused again takes its row: returns 1 when the row was
 * updated, 0 when it is gone or holds something else (then a new row is
 * made, as for any refusal), or an error. What is still refused is at
 * most what was replayed (a batch keeps only its refused items), so the
 * quarantine does not grow and nothing is evicted.
 */
static int
requarantine(struct store *s, const struct store_write *w, int64_t source_id,
             const struct store_quarantine_item *q, struct proto_err *err)
{
    sqlite3_stmt *st = s->st[ST_QUARANTINE_AGAIN];
    int rc;

    if (w->replay_of == 0 || w->replay_of > INT64_MAX ||
        q->len > w->replay_body_len)
        return 0;
    bind_quarantine(st, w, source_id, q);
    sqlite3_bind_blob(st, 9, w->replay_body_len ? w->replay_body : "",
                      (int)w->replay_body_len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 10, (int64_t)w->replay_body_len);
    sqlite3_bind_int64(st, 11, (int64_t)w->replay_of);
    rc = step_done(s, st, err, "update a quarantined payload");
    sqlite3_clear_bindings(st);
    if (rc)
        return rc;
    if (sqlite3_changes(s->db) == 0)
        return 0;
    if ((rc = counter_add(s, "quarantine_bytes",
                          (int64_t)q->len - (int64_t)w->replay_body_len, err)))
        return rc;
    return 1;
}

static int
put_quarantine(struct store *s, const struct store_write *w, int64_t source_id,
               const struct store_quarantine_item *q, struct proto_err *err)
{
    sqlite3_stmt *st;
    int64_t total, freed = 0, evicted = 0;
    int rc;

    if ((rc = requarantine(s, w, source_id, q, err)) != 0)
        return rc < 0 ? rc : 0;
    if ((rc = store_counter(s, "quarantine_bytes", 0, &total, err)))
        return rc;
    if ((uint64_t)q->len > s->quarantine_max) {
        /* Too large for the whole bound: keeping it would evict everything
         * else and still overflow. It is counted as evicted at once. */
        return counter_add(s, "quarantine_evictions", 1, err);
    }
    while ((uint64_t)total + q->len > s->quarantine_max) {
        int64_t id, size;
        st = s->st[ST_QUARANTINE_OLDEST];
        rc = sqlite3_step(st);
        if (rc != SQLITE_ROW) {
            sqlite3_reset(st);
            if (rc != SQLITE_DONE)
                return store_fail(s, rc, err, "find the oldest quarantine");
            total = 0; /* the counter drifted; the table is empty */
            break;
        }
        id = sqlite3_column_int64(st, 0);
        size = sqlite3_column_int64(st, 1);
        sqlite3_reset(st);
        st = s->st[ST_QUARANTINE_DEL];
        sqlite3_bind_int64(st, 1, id);
        if ((rc = step_done(s, st, err, "evict from quarantine")))
            return rc;
        total -= size;
        freed += size;
        evicted++;
    }
    st = s->st[ST_QUARANTINE_PUT];
    bind_quarantine(st, w, source_id, q);
    rc = step_done(s, st, err, "store a quarantined payload");
    sqlite3_clear_bindings(st);
    if (rc)
        return rc;
    if ((rc = counter_add(s, "quarantine_bytes", (int64_t)q->len - freed, err)))
        return rc;
    if (evicted > 0 &&
        (rc = counter_add(s, "quarantine_evictions", evicted, err)))
        return rc;
    ((struct store_write *)w)->evicted += (uint64_t)evicted;
    return 0;
}

/* Whether the recorded write of w's (source, seq), of op and payload
 * hash (0: not known), was another write than w; sets w->conflict. */
static int
other_payload(struct store_write *w, int op, uint32_t hash)
{
    if (op == w->op &&
        (hash == 0 || w->payload_hash == 0 || hash == w->payload_hash))
        return 0;
    w->conflict = 1;
    w->conflict_op = op;
    return 1;
}

/* Looks up a recorded outcome; returns 1 when found (a duplicate, or a
 * conflict), 0 when not. */
static int
dedupe_get(struct store *s, struct store_write *w, int64_t source_id,
           struct proto_err *err)
{
    sqlite3_stmt *st = s->st[ST_DEDUPE_GET];
    int rc;

    sqlite3_bind_int64(st, 1, source_id);
    sqlite3_bind_int64(st, 2, (int64_t)w->seq);
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        sqlite3_reset(st);
        return 0;
    }
    if (rc != SQLITE_ROW) {
        sqlite3_reset(st);
        return store_fail(s, rc, err, "look up a seq");
    }
    if (other_payload(w, sqlite3_column_int(st, 0),
                      (uint32_t)sqlite3_column_int64(st, 4))) {
        sqlite3_reset(st);
        return 1;
    }
    w->duplicate = 1;
    w->receipt_id = sqlite3_column_int64(st, 1);
    w->status = sqlite3_column_int(st, 2);
    if (sqlite3_column_type(st, 3) == SQLITE_BLOB) {
        size_t n = (size_t)sqlite3_column_bytes(st, 3);
        const void *p = sqlite3_column_blob(st, 3);
        w->dup_outcome = malloc(n ? n : 1);
        if (w->dup_outcome == NULL) {
            sqlite3_reset(st);
            return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        }
        memcpy(w->dup_outcome, p, n);
        w->dup_outcome_len = n;
    }
    sqlite3_reset(st);
    return 1;
}

/* The same for a `receipt` of an earlier chunk (store_seq.c). */
static int
seq_run_get(struct store *s, struct store_write *w, int64_t source_id,
            struct proto_err *err)
{
    struct store_seq_entry e;
    int rc = store_seq_find(s, source_id, w->seq, &e, err);

    if (rc == 1 && !other_payload(w, PROTO_OP_RECEIPT, e.hash)) {
        w->duplicate = 1;
        w->receipt_id = e.receipt_id;
        w->status = e.status;
    }
    return rc;
}

static struct seqmark *
seqmark_slot(struct store *s, int64_t source_id)
{
    size_t j = (size_t)((uint64_t)source_id * 0x9e3779b97f4a7c15ull >> 52) &
               (SEQMARK_SLOTS - 1);

    while (s->marks[j].source_id != 0 && s->marks[j].source_id != source_id)
        j = (j + 1) & (SEQMARK_SLOTS - 1);
    return &s->marks[j];
}

/* Whether (source, seq) may have a record, so that it must be looked up. */
static int
seq_maybe_seen(struct store *s, int64_t source_id, uint64_t seq,
               struct proto_err *err)
{
    struct seqmark *m;
    sqlite3_stmt *st;
    int64_t runs;
    int rc;

    if (seq > (uint64_t)INT64_MAX)
        return 1; /* stored negative: outside what the mark knows */
    m = seqmark_slot(s, source_id);
    if (m->source_id == 0) {
        if (s->n_marks >= SEQMARK_SLOTS / 2) {
            /* Many sources: start again rather than grow. */
            memset(s->marks, 0, SEQMARK_SLOTS * sizeof(*s->marks));
            s->n_marks = 0;
            m = seqmark_slot(s, source_id);
        }
        st = s->st[ST_DEDUPE_MAX];
        sqlite3_bind_int64(st, 1, source_id);
        rc = sqlite3_step(st);
        if (rc != SQLITE_ROW) {
            sqlite3_reset(st);
            return store_fail(s, rc, err, "look up a seq");
        }
        m->hwm = sqlite3_column_type(st, 0) == SQLITE_NULL
                     ? -1
                     : sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
        if ((rc = store_seq_max(s, source_id, &runs, err)))
            return rc;
        if (runs > m->hwm)
            m->hwm = runs;
        /* The tail's `receipt` records are not in the table yet. */
        if (store_tail_seq_max(s->tail, source_id) > m->hwm)
            m->hwm = store_tail_seq_max(s->tail, source_id);
        m->source_id = source_id;
        s->n_marks++;
    }
    return (int64_t)seq <= m->hwm;
}

static void
seq_record(struct store *s, int64_t source_id, uint64_t seq)
{
    struct seqmark *m;

    if (seq > (uint64_t)INT64_MAX)
        return;
    m = seqmark_slot(s, source_id);
    if (m->source_id == source_id && (int64_t)seq > m->hwm)
        m->hwm = (int64_t)seq;
}

static int
dedupe_put(struct store *s, const struct store_write *w, int64_t source_id,
           struct proto_err *err)
{
    sqlite3_stmt *st = s->st[ST_DEDUPE_PUT];
    int rc;

    sqlite3_bind_int64(st, 1, source_id);
    sqlite3_bind_int64(st, 2, (int64_t)w->seq);
    sqlite3_bind_int(st, 3, w->op);
    if (w->op == PROTO_OP_RECEIPT) {
        sqlite3_bind_int64(st, 4, w->receipt_id);
        sqlite3_bind_int(st, 5, w->status);
        sqlite3_bind_null(st, 6);
    } else {
        sqlite3_bind_null(st, 4);
        sqlite3_bind_null(st, 5);
        sqlite3_bind_blob(st, 6, w->outcome_len ? w->outcome : "",
                          (int)w->outcome_len, SQLITE_STATIC);
    }
    if (w->payload_hash != 0)
        sqlite3_bind_int64(st, 7, w->payload_hash);
    else
        sqlite3_bind_null(st, 7);
    rc = step_done(s, st, err, "record a seq");
    sqlite3_clear_bindings(st);
    return rc;
}

int
store_sqlite_write_begin(struct store *s, struct store_write *w,
                         int64_t *source_id, struct proto_err *err)
{
    const struct store_seq_entry *e;
    int rc, maybe;

    w->duplicate = 0;
    w->conflict = 0;
    w->receipt_id = 0;
    w->evicted = 0;
    w->refused = 0;
    w->seq_seen = 0;
    w->seq_new = 0;
    if ((rc = intern(s, w->source_len ? w->source : "", w->source_len,
                     source_id, err)))
        return rc;
    if (!(w->has_seq && w->source_len > 0 && w->op >= 0))
        return 0;
    if (w->relayed && w->seq_as_before) {
        w->seq_seen = 1;
        return 0;
    }
    /* Above the source's mark, a seq is in no record: not in the
     * table, its runs or the tail (the mark counts the tail's). */
    rc = seq_maybe_seen(s, *source_id, w->seq, err);
    maybe = rc > 0;
    w->seq_new = rc == 0;
    if (rc > 0 && (rc = dedupe_get(s, w, *source_id, err)) == 0)
        rc = seq_run_get(s, w, *source_id, err);
    if (rc == 0 && maybe &&
        (rc = store_tail_seq_get(s->tail, *source_id, w->seq, &e, err)) == 0 &&
        e != NULL) {
        /* A `receipt` of the tail, recorded with the tail. */
        rc = 1;
        if (!other_payload(w, PROTO_OP_RECEIPT, e->hash)) {
            w->duplicate = 1;
            w->receipt_id = e->receipt_id;
            w->status = e->status;
        }
    }
    if (w->relayed) {
        /* Never a duplicate (the origin's mark is): the row is stored,
         * and the record written only when the seq is new here. */
        free(w->dup_outcome);
        w->dup_outcome = NULL;
        w->dup_outcome_len = 0;
        w->duplicate = 0;
        w->conflict = 0;
        w->receipt_id = 0;
        w->seq_seen = rc == 1;
        return rc == 1 ? 0 : rc;
    }
    if (rc == 1 && w->conflict && w->conflict_q != NULL &&
        (rc = put_quarantine(s, w, *source_id, w->conflict_q, err)) == 0)
        rc = 1;
    return rc;
}

int
store_sqlite_write_end(struct store *s, struct store_write *w,
                       int64_t source_id, struct proto_err *err)
{
    size_t i;
    int rc;

    for (i = 0; i < w->n_quarantine; i++)
        if ((rc = put_quarantine(s, w, source_id, &w->quarantine[i], err)))
            return rc;
    if (!(w->has_seq && w->source_len > 0 && w->op >= 0) || w->refused ||
        w->seq_seen)
        return 0;
    /* A single receipt's record is what its row says: it waits with the
     * tail and is written with the chunk (store_tail.c). */
    if (w->op == PROTO_OP_RECEIPT && w->n_receipts == 1)
        rc = store_tail_seq_add(s->tail, source_id, w->seq, w->receipt_id,
                                w->status, w->payload_hash, w->seq_new, err);
    else
        rc = dedupe_put(s, w, source_id, err);
    if (rc)
        return rc;
    seq_record(s, source_id, w->seq);
    return 0;
}

int
store_sqlite_apply(struct store *s, struct store_write *w,
                   struct proto_err *err)
{
    int64_t source_id;
    int rc;

    if ((rc = store_write_begin(s, w, &source_id, err)))
        return rc == 1 ? 0 : rc;
    if ((rc = put_receipts(s, w, source_id, err)))
        return rc;
    return store_write_end(s, w, source_id, err);
}

int
store_relay_waits(const struct store *s)
{
    return s->relay_wait;
}

int
store_relay_drops(const struct store *s)
{
    return s->relay_drop;
}

sqlite3 *
store_db(struct store *s)
{
    return s->db;
}

const char *
store_sqlite_path(struct store *s)
{
    return s->path;
}

uint64_t *
store_deadline(struct store *s)
{
    return &s->deadline_ms;
}

static int
deadline_cb(void *arg)
{
    const uint64_t *deadline = arg;

    return *deadline != 0 && store_now_ms() > *deadline;
}

void
store_deadline_arm(struct store *s, uint64_t deadline_ms)
{
    s->deadline_ms = deadline_ms;
    sqlite3_progress_handler(s->db, 1000, deadline_cb, &s->deadline_ms);
}

void
store_deadline_disarm(struct store *s)
{
    sqlite3_progress_handler(s->db, 0, NULL, NULL);
}

void
store_bind_blob(sqlite3_stmt *st, const char *name, const char *p, size_t n)
{
    int i = sqlite3_bind_parameter_index(st, name);

    if (i > 0)
        sqlite3_bind_blob(st, i, n ? p : "", (int)n, SQLITE_STATIC);
}

void
store_bind_i64(sqlite3_stmt *st, const char *name, int64_t v)
{
    int i = sqlite3_bind_parameter_index(st, name);

    if (i > 0)
        sqlite3_bind_int64(st, i, v);
}

int64_t
store_clamp_i64(uint64_t v)
{
    return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
}

void
store_column_str(sqlite3_stmt *st, int col, struct proto_str *out)
{
    out->ptr = sqlite3_column_blob(st, col);
    out->len = (size_t)sqlite3_column_bytes(st, col);
    if (out->ptr == NULL)
        out->ptr = "";
}
