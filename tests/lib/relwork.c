/*
 * relwork.c: the reliability workload and its check (relwork.h).
 *
 * The receipts INSERT is built from PRAGMA table_info(receipts), so the
 * workload follows the real schema in migrations/ (read from the source tree
 * through the RELWORK_MIGRATIONS_DIR compile definition) without copying its
 * column list: "*_id" columns reference interned strings, `seq` and `extra`
 * carry the receipt's identity and a payload derived from it, every other
 * column gets an integer derived from seq. The check recomputes the payload
 * to find rows that are present but damaged.
 *
 * Thread: single-threaded.
 */
#include "relwork.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#ifdef RELWORK_WITH_STORE
#include <msgpack.h>

#include "envelope.h"
#include "receipt.h"
#include "relpack.h"
#include "store.h"
#include "store_row.h"
#include "store_seq.h"
#endif

#ifndef RELWORK_MIGRATIONS_DIR
#error "RELWORK_MIGRATIONS_DIR must name the migrations/ directory"
#endif

#define SOURCE   "node-1/runtime-1"
#define MAX_COLS 96
#define PAYLOAD  96

struct ctx {
    struct relwork *w;
    sqlite3 *db;
    sqlite3_stmt *intern, *lookup, *ins, *dedupe;
    int ncols;
    char colkind[MAX_COLS]; /* 's'ource, 'r'ef, 'q' seq, 'x' extra, 'i' */
};

static void
payload(long seq, unsigned char out[PAYLOAD])
{
    uint32_t x = (uint32_t)seq * 2654435761u + 1;
    int i;

    for (i = 0; i < PAYLOAD; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        out[i] = (unsigned char)x;
    }
}

static void
note(struct relwork *w, sqlite3 *db, const char *what)
{
    if (w->first_error[0] == '\0')
        snprintf(w->first_error, sizeof(w->first_error), "%s: %s", what,
                 db ? sqlite3_errmsg(db) : "no connection");
}

static int
name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *
slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;

    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0 || (buf = malloc((size_t)n + 1)) == NULL) {
        fclose(f);
        return NULL;
    }
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return NULL;
    }
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Applies migrations/NNNN_*.sql above user_version, each in its own
 * transaction with its user_version, as the daemon does. */
static int
migrate(struct ctx *c)
{
    DIR *d = opendir(RELWORK_MIGRATIONS_DIR);
    struct dirent *e;
    char *names[64], path[1024], *sql, pragma[64];
    int n = 0, i, version = 0, num, rc = SQLITE_OK;
    sqlite3_stmt *st;

    if (d == NULL)
        return SQLITE_CANTOPEN;
    while ((e = readdir(d)) != NULL && n < 64) {
        size_t len = strlen(e->d_name);
        if (len > 9 && e->d_name[4] == '_' &&
            strcmp(e->d_name + len - 4, ".sql") == 0 &&
            (names[n] = strdup(e->d_name)) != NULL)
            n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof(names[0]), name_cmp);
#ifdef RELWORK_WITH_STORE
    /* 0010 copies the counters with the function the daemon registers. */
    rc = store_counters_sql_function(c->db);
#endif
    if (rc == SQLITE_OK && sqlite3_prepare_v2(c->db, "PRAGMA user_version", -1,
                                              &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            version = sqlite3_column_int(st, 0);
        rc = sqlite3_finalize(st);
    } else if (rc == SQLITE_OK) {
        rc = sqlite3_errcode(c->db);
    }
    for (i = 0; i < n && rc == SQLITE_OK; i++) {
        num = atoi(names[i]);
        if (num <= version)
            continue;
        snprintf(path, sizeof(path), "%s/%s", RELWORK_MIGRATIONS_DIR, names[i]);
        if ((sql = slurp(path)) == NULL) {
            rc = SQLITE_CANTOPEN;
            break;
        }
        snprintf(pragma, sizeof(pragma), "PRAGMA user_version = %d", num);
        rc = sqlite3_exec(c->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(c->db, pragma, NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL);
        if (rc != SQLITE_OK) {
            note(c->w, c->db, names[i]);
            sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
        }
        free(sql);
    }
    for (i = 0; i < n; i++)
        free(names[i]);
    return rc;
}

/* Builds the receipts INSERT from the table's columns. */
static int
prepare_insert(struct ctx *c)
{
    sqlite3_stmt *st;
    char sql[4096], vals[1024];
    size_t ls, lv;
    int rc;

    rc =
        sqlite3_prepare_v2(c->db, "PRAGMA table_info(receipts)", -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    ls = (size_t)snprintf(sql, sizeof(sql), "INSERT INTO receipts (");
    lv = (size_t)snprintf(vals, sizeof(vals), ") VALUES (");
    c->ncols = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 1);
        size_t len = strlen(name);
        char kind;

        if (sqlite3_column_int(st, 5) != 0) /* the INTEGER PRIMARY KEY */
            continue;
        if (c->ncols == MAX_COLS || ls + len + 8 >= sizeof(sql) ||
            lv + 8 >= sizeof(vals)) {
            sqlite3_finalize(st);
            return SQLITE_TOOBIG;
        }
        if (strcmp(name, "source_id") == 0)
            kind = 's';
        else if (len > 3 && strcmp(name + len - 3, "_id") == 0)
            kind = 'r';
        else if (strcmp(name, "seq") == 0)
            kind = 'q';
        else if (strcmp(name, "extra") == 0)
            kind = 'x';
        else
            kind = 'i';
        c->colkind[c->ncols++] = kind;
        ls += (size_t)snprintf(sql + ls, sizeof(sql) - ls, "%s%s",
                               c->ncols > 1 ? ", " : "", name);
        lv += (size_t)snprintf(vals + lv, sizeof(vals) - lv, "%s?",
                               c->ncols > 1 ? ", " : "");
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return rc;
    if (c->ncols == 0)
        return SQLITE_ERROR;
    snprintf(sql + ls, sizeof(sql) - ls, "%s)", vals);
    rc = sqlite3_prepare_v2(c->db, sql, -1, &c->ins, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(
            c->db, "INSERT OR IGNORE INTO strings (value) VALUES (?)", -1,
            &c->intern, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(c->db, "SELECT id FROM strings WHERE value = ?",
                                -1, &c->lookup, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(c->db,
                                "INSERT INTO dedupe (source_id, seq, op, "
                                "receipt_id, status) VALUES (?, ?, 2, ?, 0)",
                                -1, &c->dedupe, NULL);
    return rc;
}

static int
intern(struct ctx *c, const char *s, sqlite3_int64 *id)
{
    int rc;

    if ((rc = sqlite3_bind_blob(c->intern, 1, s, (int)strlen(s),
                                SQLITE_STATIC)) != SQLITE_OK)
        return rc;
    rc = sqlite3_step(c->intern);
    sqlite3_reset(c->intern);
    if (rc != SQLITE_DONE)
        return rc;
    if ((rc = sqlite3_bind_blob(c->lookup, 1, s, (int)strlen(s),
                                SQLITE_STATIC)) != SQLITE_OK)
        return rc;
    rc = sqlite3_step(c->lookup);
    if (rc == SQLITE_ROW) {
        *id = sqlite3_column_int64(c->lookup, 0);
        rc = SQLITE_OK;
    }
    sqlite3_reset(c->lookup);
    return rc;
}

/* One transaction: BEGIN IMMEDIATE, per_tx receipts, COMMIT. */
static int
one_tx(struct ctx *c, int tx)
{
    struct relwork *w = c->w;
    unsigned char pay[PAYLOAD];
    sqlite3_int64 src, ref;
    long seq;
    int i, k, rc;

    rc = sqlite3_exec(c->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = intern(c, SOURCE, &src);
    if (rc == SQLITE_OK)
        rc = intern(c, "ref", &ref);
    for (i = 0; i < w->per_tx && rc == SQLITE_OK; i++) {
        seq = (long)tx * w->per_tx + i;
        payload(seq, pay);
        /* A bind can fail (SQLITE_TRANSIENT copies, and the copy can run
         * out of memory); the column would then be NULL, so every result
         * is checked: the allocation-failure test found this. */
        for (k = 0; k < c->ncols && rc == SQLITE_OK; k++) {
            switch (c->colkind[k]) {
            case 's':
                rc = sqlite3_bind_int64(c->ins, k + 1, src);
                break;
            case 'r':
                rc = sqlite3_bind_int64(c->ins, k + 1, ref);
                break;
            case 'q':
                rc = sqlite3_bind_int64(c->ins, k + 1, seq);
                break;
            case 'x':
                rc = sqlite3_bind_blob(c->ins, k + 1, pay, PAYLOAD,
                                       SQLITE_TRANSIENT);
                break;
            default:
                rc = sqlite3_bind_int64(c->ins, k + 1, seq * 31 + k);
            }
        }
        if (rc != SQLITE_OK)
            break;
        rc = sqlite3_step(c->ins);
        sqlite3_reset(c->ins);
        if (rc != SQLITE_DONE)
            break;
        if ((rc = sqlite3_bind_int64(c->dedupe, 1, src)) != SQLITE_OK ||
            (rc = sqlite3_bind_int64(c->dedupe, 2, seq)) != SQLITE_OK ||
            (rc = sqlite3_bind_int64(
                 c->dedupe, 3, sqlite3_last_insert_rowid(c->db))) != SQLITE_OK)
            break;
        rc = sqlite3_step(c->dedupe);
        sqlite3_reset(c->dedupe);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    if (rc == SQLITE_OK && w->ack_before_commit)
        w->state[tx] = RELWORK_ACKED;
    if (rc == SQLITE_OK) {
        rc = sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL);
        if (rc != SQLITE_OK && w->retry_commit) {
            note(w, c->db, "commit (retried)");
            if (sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK ||
                sqlite3_get_autocommit(c->db))
                rc = SQLITE_OK;
        }
    }
    if (rc != SQLITE_OK) {
        note(w, c->db, "transaction");
        /* A failed COMMIT may already have rolled back; a second ROLLBACK
         * then only reports that no transaction is active. */
        sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
        return rc;
    }
    w->state[tx] = RELWORK_ACKED;
    return SQLITE_OK;
}

static void
close_ctx(struct ctx *c)
{
    sqlite3_finalize(c->intern);
    sqlite3_finalize(c->lookup);
    sqlite3_finalize(c->ins);
    sqlite3_finalize(c->dedupe);
    c->intern = c->lookup = c->ins = c->dedupe = NULL;
    sqlite3_close_v2(c->db);
    c->db = NULL;
}

/* Opens, sets the daemon's pragmas, migrates and prepares. */
static int
open_ctx(struct ctx *c)
{
    struct relwork *w = c->w;
    char sql[128];
    int rc;

    rc = sqlite3_open_v2(w->path, &c->db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(c->db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL);
    snprintf(sql, sizeof(sql), "PRAGMA synchronous = %d", w->synchronous);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
    if (rc == SQLITE_OK && w->autocheckpoint > 0) {
        snprintf(sql, sizeof(sql), "PRAGMA wal_autocheckpoint = %d",
                 w->autocheckpoint);
        rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
    }
    if (rc == SQLITE_OK)
        rc = migrate(c);
    if (rc == SQLITE_OK)
        rc = prepare_insert(c);
    if (rc != SQLITE_OK) {
        note(w, c->db, "open");
        close_ctx(c);
    }
    return rc;
}

int
relwork_have_store(void)
{
#ifdef RELWORK_WITH_STORE
    return 1;
#else
    return 0;
#endif
}

#ifdef RELWORK_WITH_STORE
/* One transaction through the daemon's store, the way writer.c commits a
 * group: BEGIN IMMEDIATE, a savepoint and a store_apply() per request, then
 * COMMIT; any failure rolls the whole group back. */
static int
store_tx(struct relwork *w, struct store *st, int tx)
{
    struct proto_err err;
    struct store_write sw;
    struct receipt r;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacked up;
    size_t off;
    long seq;
    int i, rc;

    proto_err_clear(&err);
    if ((rc = store_begin(st, &err)) != 0)
        goto failed;
    for (i = 0; i < w->per_tx; i++) {
        seq = (long)tx * w->per_tx + i;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_unpacked_init(&up);
        off = 0;
        rc = relpack_receipt(&pk, (uint64_t)seq, 1) != 0 ||
                     msgpack_unpack_next(&up, sb.data, sb.size, &off) !=
                         MSGPACK_UNPACK_SUCCESS
                 ? PROTO_ENOMEM
                 : receipt_decode(&up.data, &r, &err);
        if (rc == 0) {
            memset(&sw, 0, sizeof(sw));
            sw.op = PROTO_OP_RECEIPT;
            sw.source = SOURCE;
            sw.source_len = strlen(SOURCE);
            sw.has_seq = 1;
            sw.seq = (uint64_t)seq;
            sw.received_at = 1700000000000 + seq;
            sw.receipts = &r;
            sw.n_receipts = 1;
            rc = store_savepoint(st, &err);
            if (rc == 0)
                rc = store_apply(st, &sw, &err);
            if (rc == 0)
                rc = store_savepoint_release(st, &err);
            free(sw.dup_outcome);
            receipt_clear(&r);
        }
        msgpack_unpacked_destroy(&up);
        msgpack_sbuffer_destroy(&sb);
        if (rc != 0)
            goto failed;
    }
    if (w->ack_before_commit)
        w->state[tx] = RELWORK_ACKED;
    if ((rc = store_commit(st, &err)) != 0)
        goto failed;
    w->state[tx] = RELWORK_ACKED;
    return 0;
failed:
    if (w->first_error[0] == '\0')
        snprintf(w->first_error, sizeof(w->first_error), "store: %.200s",
                 err.message);
    store_rollback(st);
    return rc;
}

static int
run_store(struct relwork *w)
{
    struct proto_err err;
    struct store *st = NULL;
    int tx, tries, rc = -1;

    for (tries = 0; tries < w->attempts && st == NULL; tries++)
        if (store_open(w->path, NULL, &st, &err) != 0 &&
            w->first_error[0] == '\0')
            snprintf(w->first_error, sizeof(w->first_error),
                     "store_open: %.200s", err.message);
    if (st == NULL)
        return 1;
    rc = 0;
    for (tx = 0; tx < w->ntx; tx++) {
        if (w->reopen_every > 0 && tx > 0 && tx % w->reopen_every == 0) {
            store_free(st);
            if (store_open(w->path, NULL, &st, &err) != 0) {
                if (w->first_error[0] == '\0')
                    snprintf(w->first_error, sizeof(w->first_error),
                             "store_open: %.200s", err.message);
                return 1;
            }
        }
        for (tries = 0; tries < w->attempts; tries++) {
            if (w->state[tx] == RELWORK_NEVER)
                w->state[tx] = RELWORK_TRIED;
            if ((rc = store_tx(w, st, tx)) == 0)
                break;
            w->failures++;
        }
        if (rc != 0)
            break;
    }
    store_free(st);
    w->completed = rc == 0;
    return w->completed ? 0 : 1;
}
#endif

int
relwork_run(struct relwork *w)
{
    struct ctx c;
    int tx, tries, rc = SQLITE_OK;

    memset(&c, 0, sizeof(c));
    c.w = w;
    memset(w->state, 0, sizeof(w->state));
    w->failures = 0;
    w->completed = 0;
    w->first_error[0] = '\0';
    if (w->ntx > RELWORK_MAX_TX)
        w->ntx = RELWORK_MAX_TX;
    if (w->attempts < 1)
        w->attempts = 1;
#ifdef RELWORK_WITH_STORE
    if (w->use_store)
        return run_store(w);
#endif

    for (tries = 0; tries < w->attempts; tries++)
        if ((rc = open_ctx(&c)) == SQLITE_OK)
            break;
    if (rc != SQLITE_OK)
        return 1;
    for (tx = 0; tx < w->ntx; tx++) {
        if (w->reopen_every > 0 && tx > 0 && tx % w->reopen_every == 0) {
            close_ctx(&c);
            if (open_ctx(&c) != SQLITE_OK)
                return 1;
        }
        for (tries = 0; tries < w->attempts; tries++) {
            if (w->state[tx] == RELWORK_NEVER)
                w->state[tx] = RELWORK_TRIED;
            if ((rc = one_tx(&c, tx)) == SQLITE_OK)
                break;
            w->failures++;
        }
        if (rc != SQLITE_OK)
            break;
    }
    close_ctx(&c);
    w->completed = rc == SQLITE_OK;
    return w->completed ? 0 : 1;
}

static int
table_exists(sqlite3 *db, const char *name)
{
    sqlite3_stmt *st;
    int found = 0;

    if (sqlite3_prepare_v2(db,
                           "SELECT 1 FROM sqlite_schema WHERE type = 'table' "
                           "AND name = ?",
                           -1, &st, NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    found = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return found;
}

/* The decode_steps of the counters blob in column col (migrations/0010). */
static uint64_t
decode_steps(sqlite3_stmt *st, int col)
{
#ifdef RELWORK_WITH_STORE
    struct receipt r;

    store_counters_column(st, col, &r);
    return r.counters[0];
#else
    (void)st;
    (void)col;
    return UINT64_MAX;
#endif
}

int
relwork_check(const struct relwork *w, struct relwork_result *res)
{
    unsigned char seen[RELWORK_MAX_TX * 64], dd[RELWORK_MAX_TX * 64];
    unsigned char pay[PAYLOAD];
    sqlite3 *db = NULL;
    sqlite3_stmt *st;
    long nseq = (long)w->ntx * w->per_tx, seq, tx;
    int rc;

    memset(res, 0, sizeof(*res));
    memset(seen, 0, sizeof(seen));
    memset(dd, 0, sizeof(dd));
    if (nseq > (long)sizeof(seen))
        nseq = (long)sizeof(seen);
    rc = sqlite3_open_v2(w->path, &db, SQLITE_OPEN_READWRITE, "unix");
    if (rc != SQLITE_OK) {
        snprintf(res->integrity, sizeof(res->integrity), "open: %s",
                 db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close_v2(db);
        goto acked;
    }
    res->opened = 1;
    /* This connection only reads; its checkpoint at close need not be
     * durable, and skipping those fsyncs makes thousands of checks fast. */
    sqlite3_exec(db, "PRAGMA synchronous = OFF", NULL, NULL, NULL);
    rc = sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL);
    if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
        snprintf(res->integrity, sizeof(res->integrity), "%s",
                 (const char *)sqlite3_column_text(st, 0));
        res->integrity_ok = strcmp(res->integrity, "ok") == 0;
    } else {
        snprintf(res->integrity, sizeof(res->integrity), "%s",
                 sqlite3_errmsg(db));
    }
    sqlite3_finalize(st);

    if (table_exists(db, "receipts") &&
        sqlite3_prepare_v2(
            db,
            "SELECT r.seq, r.extra, r.counters FROM "
            "receipts r JOIN "
            "strings s ON s.id = r.source_id WHERE CAST(s.value AS BLOB) = "
            "CAST(? AS BLOB)",
            -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, SOURCE, -1, SQLITE_STATIC);
        while (sqlite3_step(st) == SQLITE_ROW) {
            res->rows++;
            seq = (long)sqlite3_column_int64(st, 0);
            if (seq < 0 || seq >= nseq) {
                res->unexpected++;
                continue;
            }
            tx = seq / w->per_tx;
            if (w->state[tx] == RELWORK_NEVER)
                res->unexpected++;
            if (seen[seq]++)
                res->duplicates++;
            /* The store writes relpack's receipt, whose decode_steps is
             * 3 * seq; the SQL driver writes payload(seq) as extra. */
            payload(seq, pay);
            if (w->use_store
                    ? decode_steps(st, 2) != 3 * (uint64_t)seq
                    : sqlite3_column_bytes(st, 1) != PAYLOAD ||
                          memcmp(sqlite3_column_blob(st, 1), pay, PAYLOAD) != 0)
                res->corrupt++;
        }
        sqlite3_finalize(st);
    }
    if (table_exists(db, "dedupe") &&
        sqlite3_prepare_v2(db,
                           "SELECT d.seq FROM dedupe d JOIN strings s ON "
                           "s.id = d.source_id WHERE CAST(s.value AS BLOB) "
                           "= CAST(?1 AS BLOB) UNION "
                           /* Since migrations/0007 a `receipt` write's
                            * record waits with the tail, as its row: the
                            * store finds it there until the chunk is
                            * written. */
                           "SELECT r.seq FROM receipts r JOIN strings s ON "
                           "s.id = r.source_id WHERE CAST(s.value AS BLOB) "
                           "= CAST(?1 AS BLOB) AND r.seq IS NOT NULL AND "
                           "r.id >= (SELECT value FROM counters WHERE name "
                           "= 'tail_from')",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, SOURCE, -1, SQLITE_STATIC);
        while (sqlite3_step(st) == SQLITE_ROW) {
            seq = (long)sqlite3_column_int64(st, 0);
            if (seq >= 0 && seq < nseq)
                dd[seq] = 1;
        }
        sqlite3_finalize(st);
    }
#ifdef RELWORK_WITH_STORE
    /* Since migrations/0009 the records of a chunk's `receipt` writes are
     * its seq runs, decoded as the store decodes them. */
    if (table_exists(db, "seq_runs") &&
        sqlite3_prepare_v2(db,
                           "SELECT r.chunk, r.lo, r.entries FROM seq_runs r "
                           "JOIN strings s ON s.id = r.source_id WHERE "
                           "CAST(s.value AS BLOB) = CAST(?1 AS BLOB)",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, SOURCE, -1, SQLITE_STATIC);
        while (sqlite3_step(st) == SQLITE_ROW) {
            struct store_seq_run c;
            struct store_seq_entry e;

            if (store_seq_run_init(&c, sqlite3_column_blob(st, 2),
                                   (size_t)sqlite3_column_bytes(st, 2),
                                   sqlite3_column_int64(st, 0),
                                   sqlite3_column_int64(st, 1)) != 0) {
                res->corrupt++;
                continue;
            }
            while (store_seq_run_next(&c, &e) == 1)
                if (e.seq >= 0 && e.seq < nseq)
                    dd[e.seq] = 1;
        }
        sqlite3_finalize(st);
    }
#endif
    sqlite3_close_v2(db);

acked:
    for (seq = 0; seq < nseq; seq++) {
        tx = seq / w->per_tx;
        if (w->state[tx] != RELWORK_ACKED)
            continue;
        if (!seen[seq])
            res->missing_acked++;
        if (!dd[seq])
            res->missing_dedupe++;
    }
    return res->opened && res->integrity_ok && res->missing_acked == 0 &&
                   res->missing_dedupe == 0 && res->unexpected == 0 &&
                   res->duplicates == 0 && res->corrupt == 0
               ? 0
               : -1;
}

void
relwork_describe(const struct relwork_result *res, char *buf, size_t len)
{
    snprintf(buf, len,
             "opened=%d integrity=\"%s\" rows=%ld missing_acked=%ld "
             "missing_dedupe=%ld unexpected=%ld duplicates=%ld corrupt=%ld",
             res->opened, res->integrity, res->rows, res->missing_acked,
             res->missing_dedupe, res->unexpected, res->duplicates,
             res->corrupt);
}
