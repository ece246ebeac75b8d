/*
 * store_pg.c: the PostgreSQL backend (docs/fleet.md, "The central tier on
 * PostgreSQL"): the connection, the migrations of migrations/pg/ applied
 * under an advisory lock, the writer's transactions and its writes.
 *
 * A group's receipts are not sent one by one: store_apply appends each as
 * a COPY (FORMAT binary) tuple to a buffer and keeps its rollup key and
 * figures; the commit creates the partitions the group needs, sends the
 * buffer with one COPY into receipts (the relay's cut and the dedupe
 * check made every row new; a row stored twice fails the group on the
 * primary key), appends the group's rollup sums to rollup_pending (one
 * INSERT for all its keys and hours; merged into rollup_hours every few
 * groups and when idle, pg_merge) and commits. What
 * goes to the server before the commit are the (source, seq) look-ups and
 * records, quarantine, plans and the id blocks. Nothing is answered before
 * COMMIT returned (writer.c).
 *
 * Writer thread for a read-write store; a query thread for a read-only
 * one (store_pg_query.c).
 */
#include "store_pg.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "store_migrations.h"
#include "varint.h"

/* The advisory locks' keys: the migrations, partition creation, and the
 * ids of receipts sent to a center itself (next_id). */
#define LOCK_MIGRATE   0x72637074 /* "rcpt" */
#define LOCK_PARTITION 0x72637075
#define LOCK_IDS       0x72637076

#define DAY_MS     INT64_C(86400000)
#define HOUR_MS    INT64_C(3600000)
#define ID_BLOCK   1024 /* the sequence's increment (migration 0001) */
#define COPY_NCOLS 18
#define COPY_SLICE ((size_t)1 << 20)
#define HWM_MAX    65536 /* sources whose highest seq is kept */

extern const struct store_migration store_pg_migrations[];
extern const int store_pg_migrations_count;

/* One receipt of the open group: its rollup key (strings in the arena)
 * and what it adds to the key's hour. */
struct store_pg_row {
    int64_t hour;
    size_t plan, graph, model, source; /* offsets into the arena */
    uint8_t requested, executed, status;
    uint8_t schema3; /* a schema-3 receipt: it has every counter */
    uint64_t coverage;
    uint64_t counters[RECEIPT_NCOUNTERS];
};

static void hwm_clear(struct store_pg *p);

int
store_pg_schema_version(void)
{
    return store_pg_migrations_count;
}

int64_t
store_pg_i64(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;
    uint64_t v = 0;
    int i;

    for (i = 0; i < 8; i++)
        v = v << 8 | u[i];
    return (int64_t)v;
}

int32_t
store_pg_i32(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;

    return (int32_t)((uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 |
                     (uint32_t)u[2] << 8 | u[3]);
}

int16_t
store_pg_i16(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;

    return (int16_t)((unsigned)u[0] << 8 | u[1]);
}

int
store_pg_fail(struct store_pg *p, PGresult *r, struct proto_err *err,
              const char *what)
{
    const char *state =
        r != NULL ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    const char *msg = r != NULL ? PQresultErrorMessage(r) : "";
    char text[PROTO_ERR_MSG_MAX];
    size_t n;

    if (msg == NULL || msg[0] == '\0')
        msg = PQerrorMessage(p->pc);
    snprintf(text, sizeof(text), "%s", msg != NULL ? msg : "");
    n = strlen(text);
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' '))
        text[--n] = '\0';
    p->broken = 1;
    if (state != NULL && strcmp(state, "57014") == 0)
        return proto_err_set(err, PROTO_EOVERLOADED, NULL,
                             "the query ran past query_timeout_ms; narrow "
                             "it with filters or a time range");
    return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                         "PostgreSQL could not %s: %s", what, text);
}

/*
 * A group's rollup sums are appended to rollup_pending (migrations/pg/0003)
 * with one COPY (FORMAT binary), a row per key and hour (put_rollup). The
 * pending rows are merged into rollup_hours every PG_MERGE_GROUPS groups
 * and when the writer is quiet (pg_merge_idle): deleted (merge_take, at most
 * MERGE_ROWS a round), summed per key here (up to MERGE_KEYS keys), and
 * added with one upsert (ROLLUP_STMT), in one transaction, so a query reading
 * both tables (store_pg_query.c) counts each receipt once. Until the pending
 * table, every group upserted its keys' rows itself: about 1,600 row updates of
 * rows about 700 bytes wide a group in the central bench, as much of the
 * server's time as the group's COPY; summing the pending rows in SQL
 * (GROUP BY, an aggregate per array element) cost the server about as
 * much again (docs/fleet.md). The upsert's earlier steps, each a large
 * part of the server's time: one statement per key, parsed and planned
 * each time; the counters' arrays added in four subqueries (unnest ...
 * array_agg ORDER BY) per row, now element by element in expressions
 * (rollup_sql); the keys' figures sent as text (array_in, numeric_in).
 */
#define ROLLUP_STMT       "receiptd_rollup"
#define ROLLUP_SQL_MAX    16384
#define PG_MERGE_GROUPS   8     /* groups appended between merges under load */
#define PG_MERGE_QUIET_MS 1000  /* and when no group came for this long */
#define MERGE_ROWS        4096  /* pending rows a round takes (merge_take) */
#define MERGE_KEYS        16384 /* keys summed before an upsert */
#define MERGE_ROUNDS      64    /* rounds a merge's transaction */
#define LOCK_MERGE        0x72637076
static const char rollup_head[] =
    "INSERT INTO rollup_hours AS r SELECT * FROM unnest($1::rollup_hours[]) "
    "ON CONFLICT (hour, plan, graph, model, source, requested_backend, "
    "executed_backend) DO UPDATE SET receipts = "
    "r.receipts + excluded.receipts, fallback = r.fallback + "
    "excluded.fallback, clean = r.clean + excluded.clean, unproven = "
    "r.unproven + excluded.unproven, schema3 = r.schema3 + "
    "excluded.schema3";
/* Takes a round's rows (its LIMIT is MERGE_ROWS), their columns in order
 * (put_pending, merge_row). */
static const char merge_take[] =
    "DELETE FROM rollup_pending WHERE ctid = ANY (ARRAY(SELECT ctid FROM "
    "rollup_pending LIMIT 4096)) RETURNING hour, plan, graph, model, source, "
    "requested_backend, executed_backend, receipts, fallback, clean, "
    "unproven, schema3, sums";

static int one_int(struct store_pg *p, const char *sql, int64_t dflt,
                   int64_t *v, struct proto_err *err, const char *what);

/* The upsert's text into buf: rollup_head, then each array column as
 * ARRAY[f(r.c[1], excluded.c[1]), ...] over RECEIPT_NCOUNTERS elements
 * (least and greatest skip a NULL: min and max of nothing measured). */
static void
rollup_sql(char *buf, size_t cap)
{
    static const char *const cols[4] = { "measured", "sum", "min", "max" };
    static const char *const fns[4] = { NULL, NULL, "least", "greatest" };
    size_t o = (size_t)snprintf(buf, cap, "%s", rollup_head);
    unsigned c, b;

    for (c = 0; c < 4 && o < cap; c++) {
        o += (size_t)snprintf(buf + o, cap - o, ", %s = ARRAY[", cols[c]);
        for (b = 1; b <= RECEIPT_NCOUNTERS && o < cap; b++) {
            if (b > 1)
                o += (size_t)snprintf(buf + o, cap - o, ", ");
            if (o < cap && fns[c] != NULL)
                o += (size_t)snprintf(buf + o, cap - o,
                                      "%s(r.%s[%u], excluded.%s[%u])", fns[c],
                                      cols[c], b, cols[c], b);
            else if (o < cap)
                o += (size_t)snprintf(buf + o, cap - o,
                                      "r.%s[%u] + excluded.%s[%u]", cols[c], b,
                                      cols[c], b);
        }
        if (o < cap)
            o += (size_t)snprintf(buf + o, cap - o, "]");
    }
}

/*
 * What each session needs, at open and after a reconnect: durable commits
 * whatever the server's default, no NOTICE lines in the daemon's log (IF
 * NOT EXISTS says one each time), and the writer's prepared rollup
 * upsert (the merge's) or a query connection's read-only default.
 */
static int
session_setup(struct store_pg *p, struct proto_err *err)
{
    char sql[ROLLUP_SQL_MAX];
    PGresult *r;
    int64_t oid;
    int rc;

    if ((rc = store_pg_exec(p,
                            "SET synchronous_commit = on; SET "
                            "client_min_messages = warning",
                            err, "set up the session")))
        return rc;
    if (p->readonly)
        return store_pg_exec(p, "SET default_transaction_read_only = on", err,
                             "make the connection read-only");
    /* Relayed seqs go to dedupe through a staging table of their own
     * (ON CONFLICT DO NOTHING: a resend, another node, another instance). */
    if ((rc = store_pg_exec(p,
                            "CREATE TEMP TABLE IF NOT EXISTS seq_staging "
                            "(LIKE dedupe) ON COMMIT DELETE ROWS",
                            err, "make the staging table")))
        return rc;
    /* A generic plan from the first execution on: the upsert's plan does
     * not depend on its values. */
    if ((rc = store_pg_exec(p, "SET plan_cache_mode = force_generic_plan", err,
                            "set up the session")))
        return rc;
    /* The row type's id, which each element of the parameter names. */
    if ((rc = one_int(p, "SELECT 'rollup_hours'::regtype::oid", 0, &oid, err,
                      "read the rollup row type")))
        return rc;
    p->rollup_oid = (uint32_t)oid;
    rollup_sql(sql, sizeof(sql));
    r = PQprepare(p->pc, ROLLUP_STMT, sql, 1, NULL);
    rc = PQresultStatus(r) == PGRES_COMMAND_OK
             ? 0
             : store_pg_fail(p, r, err, "prepare the rollup upsert");
    PQclear(r);
    return rc;
}

int
store_pg_ready(struct store_pg *p, struct proto_err *err)
{
    if (PQstatus(p->pc) == CONNECTION_OK)
        return 0;
    PQreset(p->pc);
    if (PQstatus(p->pc) != CONNECTION_OK)
        return store_pg_fail(p, NULL, err, "connect");
    p->n_days = 0; /* another server may lack them: asked again */
    p->in_txn = 0;
    return session_setup(p, err);
}

int
store_pg_begin(struct store_pg *p, struct proto_err *err)
{
    int rc;

    if ((rc = store_pg_ready(p, err)))
        return rc;
    rc = store_pg_exec(p, "BEGIN", err, "begin a transaction");
    /* libpq learns that the server went away (restarted, failed over)
     * only when a command fails: the first BEGIN after it, which is
     * tried once more on a new connection. */
    if (rc && PQstatus(p->pc) != CONNECTION_OK &&
        (rc = store_pg_ready(p, err)) == 0)
        rc = store_pg_exec(p, "BEGIN", err, "begin a transaction");
    if (rc == 0)
        p->broken = 0;
    return rc;
}

int
store_pg_exec(struct store_pg *p, const char *sql, struct proto_err *err,
              const char *what)
{
    PGresult *r = PQexec(p->pc, sql);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK ||
             PQresultStatus(r) == PGRES_TUPLES_OK;
    int rc = ok ? 0 : store_pg_fail(p, r, err, what);

    PQclear(r);
    return rc;
}

/* The first column of sql's first row as an integer (text result), dflt
 * when there is none or it is NULL. */
static int
one_int(struct store_pg *p, const char *sql, int64_t dflt, int64_t *v,
        struct proto_err *err, const char *what)
{
    PGresult *r = PQexec(p->pc, sql);

    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        int rc = store_pg_fail(p, r, err, what);
        PQclear(r);
        return rc;
    }
    *v = PQntuples(r) > 0 && !PQgetisnull(r, 0, 0)
             ? strtoll(PQgetvalue(r, 0, 0), NULL, 10)
             : dflt;
    PQclear(r);
    return 0;
}

/* ---- migrations ---- */

/*
 * Applies the migrations the database lacks, each in a transaction of its
 * own that records its version, under a session advisory lock: instances
 * starting together wait for the first, then find nothing to do. A
 * database newer than this binary is refused.
 */
static int
migrate(struct store_pg *p, const struct store_opts *opts,
        struct proto_err *err)
{
    char sql[128];
    int64_t have;
    int rc, i, target = store_pg_migrations_count;

    if (opts->max_version > 0 && opts->max_version < target)
        target = opts->max_version;
    snprintf(sql, sizeof(sql), "SELECT pg_advisory_lock(%d)", LOCK_MIGRATE);
    if ((rc = store_pg_exec(p, sql, err, "take the migration lock")))
        return rc;
    if ((rc = store_pg_exec(p,
                            "CREATE TABLE IF NOT EXISTS receiptd_migrations ("
                            "version integer PRIMARY KEY, name text NOT NULL, "
                            "applied_at timestamptz NOT NULL DEFAULT now())",
                            err, "make the migrations table")) ||
        (rc = one_int(p, "SELECT max(version) FROM receiptd_migrations", 0,
                      &have, err, "read the schema version")))
        goto out;
    if (have > store_pg_migrations_count) {
        rc = proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                           "the database has schema version %" PRId64
                           ", newer than this receiptd's %d",
                           have, store_pg_migrations_count);
        goto out;
    }
    for (i = (int)have; i < target; i++) {
        const struct store_migration *m = &store_pg_migrations[i];
        const char *params[2];
        char version[16];
        PGresult *r;

        if (opts->migrating != NULL)
            opts->migrating(opts->migrating_arg, (int)have, target, 0);
        snprintf(version, sizeof(version), "%d", m->version);
        params[0] = version;
        params[1] = m->name;
        if ((rc = store_pg_exec(p, "BEGIN", err, "begin a migration")) ||
            (rc = store_pg_exec(p, m->sql, err, "apply a migration")))
            goto undo;
        r = PQexecParams(p->pc,
                         "INSERT INTO receiptd_migrations (version, name) "
                         "VALUES ($1, $2)",
                         2, NULL, params, NULL, NULL, 0);
        rc = PQresultStatus(r) == PGRES_COMMAND_OK
                 ? 0
                 : store_pg_fail(p, r, err, "record a migration");
        PQclear(r);
        if (rc || (rc = store_pg_exec(p, "COMMIT", err, "commit a migration")))
            goto undo;
    }
    goto out;
undo:
    PQclear(PQexec(p->pc, "ROLLBACK"));
out:
    snprintf(sql, sizeof(sql), "SELECT pg_advisory_unlock(%d)", LOCK_MIGRATE);
    PQclear(PQexec(p->pc, sql));
    return rc;
}

/* ---- the connection ---- */

static void
pg_free(struct store *s)
{
    struct store_pg *p = store_pg_of(s);

    PQfinish(p->pc);
    free(p->where);
    free(p->copy.p);
    free(p->seqs_copy.p);
    free(p->relay_seqs.p);
    free(p->recs);
    hwm_clear(p);
    free(p->hwm);
    free(p->rows);
    free(p->arena);
    free(p->days);
    free(p);
}

static int
pg_open(const char *where, const struct store_opts *opts, struct store **out,
        struct proto_err *err)
{
    static const struct store_opts defaults;
    struct store_pg *p;
    char desc[256];
    int64_t version;
    int rc;

    *out = NULL;
    if (opts == NULL)
        opts = &defaults;
    if ((p = calloc(1, sizeof(*p))) == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    p->base.ops = &store_pg_ops;
    p->readonly = opts->readonly;
    p->quarantine_max = opts->quarantine_max_bytes;
    p->pc = PQconnectdb(where);
    if (p->pc == NULL) {
        free(p);
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    }
    if (PQstatus(p->pc) != CONNECTION_OK) {
        /* libpq's message names the server, never the password. */
        rc = store_pg_fail(p, NULL, err, "connect");
        pg_free((struct store *)(void *)p);
        return rc;
    }
    snprintf(desc, sizeof(desc), "PostgreSQL database %s on %s",
             PQdb(p->pc) ? PQdb(p->pc) : "?",
             PQhost(p->pc) ? PQhost(p->pc) : "?");
    if ((p->where = strdup(desc)) == NULL) {
        pg_free((struct store *)(void *)p);
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    }
    if ((rc = store_pg_exec(p, "SET client_min_messages = warning", err,
                            "set up the session")))
        goto fail;
    if (!p->readonly && (rc = migrate(p, opts, err)))
        goto fail;
    if ((rc = one_int(p, "SELECT max(version) FROM receiptd_migrations", 0,
                      &version, err, "read the schema version")) != 0) {
        /* No migrations table yet: a query connection before any writer. */
        version = 0;
        p->broken = 0;
        rc = 0;
    }
    if (version > store_pg_migrations_count) {
        rc = proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                           "the database has schema version %" PRId64
                           ", newer than this receiptd's %d",
                           version, store_pg_migrations_count);
        goto fail;
    }
    rc = session_setup(p, err);
    p->pending_groups = !p->readonly; /* what an earlier run left */
    if (rc)
        goto fail;
    p->broken = 0;
    *out = (struct store *)(void *)p;
    return 0;
fail:
    pg_free((struct store *)(void *)p);
    return rc;
}

static int
pg_user_version(struct store *s, int *version, struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    int64_t v;
    int rc;

    if ((rc = store_pg_ready(p, err)) ||
        (rc = one_int(p, "SELECT max(version) FROM receiptd_migrations", 0, &v,
                      err, "read the schema version")))
        return rc;
    *version = (int)v;
    return 0;
}

static const char *
pg_path(struct store *s)
{
    return store_pg_of(s)->where;
}

/* ---- transactions ---- */

static void
drop_group(struct store_pg *p)
{
    /* The ids' lock is the transaction's (next_id). */
    p->ids_locked = 0;
    p->copy.len = 0;
    p->seqs_copy.len = 0;
    p->relay_seqs.len = 0;
    p->n_relay_seqs = 0;
    p->n_rows = 0;
    p->n_recs = 0;
    p->arena_len = 0;
    memset(&p->sp, 0, sizeof(p->sp));
}

static int pg_merge(struct store_pg *p, struct proto_err *err);

static int
pg_begin(struct store *s, struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    int rc;

    drop_group(p);
    p->broken = 0;
    /* Under load the writer is never idle: the pending rollups are
     * merged every PG_MERGE_GROUPS groups, before the next one begins. A
     * merge that fails changes nothing (the rows stay pending); the
     * transaction below then reports a connection that is gone. */
    if (p->pending_groups >= PG_MERGE_GROUPS) {
        struct proto_err merr;

        proto_err_clear(&merr);
        (void)pg_merge(p, &merr);
    }
    if ((rc = store_pg_begin(p, err)))
        return rc;
    p->in_txn = 1;
    return 0;
}

static void
pg_rollback(struct store *s)
{
    struct store_pg *p = store_pg_of(s);

    drop_group(p);
    hwm_clear(p); /* they may hold the group's seqs */
    if (p->in_txn && PQstatus(p->pc) == CONNECTION_OK)
        PQclear(PQexec(p->pc, "ROLLBACK"));
    p->in_txn = 0;
}

static int
pg_savepoint(struct store *s, struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);

    p->sp.copy = p->copy.len;
    p->sp.seqs_copy = p->seqs_copy.len;
    p->sp.relay_seqs = p->relay_seqs.len;
    p->sp.n_relay_seqs = p->n_relay_seqs;
    p->sp.rows = p->n_rows;
    p->sp.recs = p->n_recs;
    p->sp.arena = p->arena_len;
    return store_pg_exec(p, "SAVEPOINT job", err, "open a savepoint");
}

static int
pg_savepoint_release(struct store *s, struct proto_err *err)
{
    return store_pg_exec(store_pg_of(s), "RELEASE job", err,
                         "release a savepoint");
}

static void
pg_savepoint_rollback(struct store *s)
{
    struct store_pg *p = store_pg_of(s);
    struct proto_err err;

    p->copy.len = p->sp.copy;
    p->seqs_copy.len = p->sp.seqs_copy;
    p->relay_seqs.len = p->sp.relay_seqs;
    p->n_relay_seqs = p->sp.n_relay_seqs;
    p->n_rows = p->sp.rows;
    p->n_recs = p->sp.recs;
    p->arena_len = p->sp.arena;
    hwm_clear(p);
    /* A lock taken inside the savepoint goes with it: the next id takes
     * it again. */
    p->ids_locked = 0;
    if (store_pg_exec(p, "ROLLBACK TO job", &err, "roll back a savepoint") ||
        store_pg_exec(p, "RELEASE job", &err, "release a savepoint"))
        p->broken = 1;
    else
        p->broken = 0;
}

static int
pg_txn_broken(struct store *s)
{
    struct store_pg *p = store_pg_of(s);

    return p->broken || !p->in_txn || PQstatus(p->pc) != CONNECTION_OK;
}

/* ---- the group's receipts ---- */

static int
grow(void **buf, size_t *cap, size_t need, size_t size)
{
    size_t n = *cap ? *cap : 64;
    void *q;

    if (need <= *cap)
        return 0;
    while (n < need)
        n *= 2;
    if ((q = realloc(*buf, n * size)) == NULL)
        return -1;
    *buf = q;
    *cap = n;
    return 0;
}

static int
put_bytes(struct store_pg_buf *o, const void *b, size_t n)
{
    if (grow((void **)&o->p, &o->cap, o->len + n, 1) != 0)
        return -1;
    if (n > 0)
        memcpy(o->p + o->len, b, n);
    o->len += n;
    return 0;
}

static int
put_be(struct store_pg_buf *p, uint64_t v, int bytes)
{
    unsigned char b[8];
    int i;

    for (i = 0; i < bytes; i++)
        b[i] = (unsigned char)(v >> (8 * (bytes - 1 - i)));
    return put_bytes(p, b, (size_t)bytes);
}

/* Overwrites the 4 bytes at `at` with v, big-endian (a length written
 * once what it counts is). */
static void
patch_be32(struct store_pg_buf *p, size_t at, uint64_t v)
{
    p->p[at] = (unsigned char)(v >> 24);
    p->p[at + 1] = (unsigned char)(v >> 16);
    p->p[at + 2] = (unsigned char)(v >> 8);
    p->p[at + 3] = (unsigned char)v;
}

/* A field of a COPY tuple: its length, then its bytes. */
static int
field(struct store_pg_buf *p, const void *b, size_t n)
{
    return put_be(p, (uint32_t)n, 4) || put_bytes(p, b, n);
}

static int
field_i64(struct store_pg_buf *p, uint64_t v)
{
    return put_be(p, 8, 4) || put_be(p, v, 8);
}

static int
field_i16(struct store_pg_buf *p, unsigned v)
{
    return put_be(p, 2, 4) || put_be(p, v, 2);
}

/* A one-dimensional bigint[] in the binary array format. */
static int
field_i64s(struct store_pg_buf *p, const uint64_t *v, unsigned n)
{
    unsigned i;

    if (put_be(p, 20 + (uint64_t)n * 12, 4) || put_be(p, 1, 4) ||
        put_be(p, 0, 4) || put_be(p, 20 /* INT8OID */, 4) || put_be(p, n, 4) ||
        put_be(p, 1, 4))
        return -1;
    for (i = 0; i < n; i++)
        if (put_be(p, 8, 4) || put_be(p, v[i], 8))
            return -1;
    return 0;
}

/* SQL NULL as a COPY field. */
static int
field_null(struct store_pg_buf *p)
{
    return put_be(p, 0xffffffffu, 4);
}

static int
arena_put(struct store_pg *p, const char *s, size_t n, size_t *off)
{
    if (grow((void **)&p->arena, &p->arena_cap, p->arena_len + n + 1, 1) != 0)
        return -1;
    *off = p->arena_len;
    if (n > 0)
        memcpy(p->arena + p->arena_len, s, n);
    p->arena[p->arena_len + n] = '\0';
    p->arena_len += n + 1;
    return 0;
}

/*
 * The next id of a receipt sent to this instance (a relayed one keeps its
 * node's). Ids rise in commit order across the instances sharing the
 * database, so that a cursor by id (a follower's, `after_id`) never
 * passes a receipt that commits later: a transaction's first such id
 * takes a transaction advisory lock, held to its COMMIT, and draws from
 * the shared sequence under it. Its block of ID_BLOCK ids serves later
 * transactions too while it is the newest drawn (the sequence's
 * last_value, read under the lock, is its start), since every id
 * committed elsewhere is then below it; once another instance drew
 * after it, what is left of it is never used. So instances that take
 * receipts directly commit their groups one at a time; relayed groups
 * never take the lock.
 */
static int
next_id(struct store_pg *p, int64_t *id, struct proto_err *err)
{
    char sql[128];
    int64_t last;
    int rc;

    if (!p->ids_locked) {
        snprintf(sql, sizeof(sql),
                 "SELECT pg_advisory_xact_lock(%d); SELECT last_value FROM "
                 "receipt_ids",
                 LOCK_IDS);
        if ((rc = one_int(p, sql, 0, &last, err, "lock the receipt ids")))
            return rc;
        if (last != p->id_start)
            p->id_next = p->id_end = 0;
        p->ids_locked = 1;
    }
    if (p->id_next >= p->id_end) {
        if ((rc = one_int(p, "SELECT nextval('receipt_ids')", 0, &p->id_start,
                          err, "draw receipt ids")))
            return rc;
        p->id_next = p->id_start;
        p->id_end = p->id_start + ID_BLOCK;
    }
    *id = p->id_next++;
    return 0;
}

/* Text PostgreSQL can store: no NUL byte (the decoder checked UTF-8). */
static int
text_ok(const char *s, size_t n)
{
    return n == 0 || memchr(s, '\0', n) == NULL;
}

/* Appends one receipt of w as a COPY tuple and a rollup row. */
static int
put_receipt(struct store_pg *p, const struct store_write *w,
            const struct receipt *r, int64_t id, struct proto_err *err)
{
    struct store_pg_row *row;
    const struct proto_str *strs[5] = {
        &r->model_instance_id, &r->prepared_plan_id, &r->graph_hash,
        &r->tuning_profile,    &r->stop_reason,
    };
    struct store_pg_buf *c = &p->copy;
    int i, status = receipt_status(r);

    for (i = 0; i < 5; i++)
        if (!text_ok(strs[i]->ptr, strs[i]->len))
            return proto_err_set(err, PROTO_EINVALID, NULL,
                                 "a string holds a NUL character, which "
                                 "PostgreSQL cannot store");
    if (!text_ok(w->source, w->source_len))
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "the source holds a NUL character");
    if (w->relayed && !text_ok(w->origin, w->origin_len))
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "the origin holds a NUL character");
    if (grow((void **)&p->rows, &p->cap_rows, p->n_rows + 1,
             sizeof(*p->rows)) != 0)
        goto nomem;
    row = &p->rows[p->n_rows];
    memset(row, 0, sizeof(*row));
    /* A receipt sent here has origin ''; a relayed one its node's name. */
    if (put_be(c, COPY_NCOLS, 2) ||
        (w->relayed ? field(c, w->origin, w->origin_len) : field(c, "", 0)) ||
        field_i64(c, (uint64_t)id) || field_i64(c, (uint64_t)w->received_at) ||
        field(c, w->source, w->source_len))
        goto nomem;
    if (w->has_seq ? field_i64(c, w->seq) : field_null(c))
        goto nomem;
    if (field_i16(c, r->schema_version) || field_i16(c, r->requested_backend) ||
        field_i16(c, r->executed_backend) || field_i16(c, (unsigned)status))
        goto nomem;
    for (i = 0; i < 5; i++)
        if (field(c, strs[i]->ptr, strs[i]->len))
            goto nomem;
    if (field_i64(c, r->counter_coverage) ||
        field_i64s(c, r->counters, RECEIPT_NCOUNTERS) ||
        field_i64s(c, r->artifacts, RECEIPT_NARTIFACTS) ||
        (r->extra != NULL ? field(c, r->extra, r->extra_len) : field_null(c)))
        goto nomem;
    row->hour = w->received_at >= 0 ? w->received_at / HOUR_MS
                                    : (w->received_at - HOUR_MS + 1) / HOUR_MS;
    if (arena_put(p, r->prepared_plan_id.ptr, r->prepared_plan_id.len,
                  &row->plan) ||
        arena_put(p, r->graph_hash.ptr, r->graph_hash.len, &row->graph) ||
        arena_put(p, r->model_instance_id.ptr, r->model_instance_id.len,
                  &row->model) ||
        arena_put(p, w->source, w->source_len, &row->source))
        goto nomem;
    row->requested = r->requested_backend;
    row->executed = r->executed_backend;
    row->status = (uint8_t)status;
    row->schema3 = r->schema_version == 3;
    /* Bits past the schema's counters measure nothing (store_rollup.c). */
    row->coverage =
        r->counter_coverage & receipt_meaningful_bits(r->schema_version);
    memcpy(row->counters, r->counters, sizeof(row->counters));
    p->n_rows++;
    return 0;
nomem:
    return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
}

/* ---- (source, seq) records and quarantine ---- */

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

static int
put_quarantine(struct store_pg *p, const struct store_write *w,
               const struct store_quarantine_item *q, struct proto_err *err)
{
    char at[24], code[16], max[24];
    const char *v[8];
    int len[8], fmt[8] = { 0, 0, 0, 0, 0, 0, 1, 0 };
    PGresult *r;
    int rc;

    if ((uint64_t)q->len > p->quarantine_max)
        return 0; /* larger than the whole bound: not kept */
    if (!text_ok(w->source, w->source_len))
        return 0;
    snprintf(at, sizeof(at), "%" PRId64, w->received_at);
    snprintf(code, sizeof(code), "%d", q->code);
    snprintf(max, sizeof(max), "%" PRIu64,
             p->quarantine_max - (uint64_t)q->len);
    v[0] = at;
    v[1] = w->source;
    len[1] = (int)w->source_len;
    v[2] = q->op != NULL ? q->op : "";
    v[3] = code;
    v[4] = q->path != NULL ? q->path : "";
    v[5] = q->message != NULL ? q->message : "";
    v[6] = q->raw != NULL ? q->raw : "";
    len[6] = (int)q->len;
    v[7] = max;
    /* The oldest rows go while the others and this one would pass the
     * bound; then the new row. */
    r = PQexecParams(p->pc,
                     "WITH k AS (SELECT id, sum(length(raw)) OVER (ORDER BY id "
                     "DESC) AS total FROM quarantine), d AS (DELETE FROM "
                     "quarantine WHERE id IN (SELECT id FROM k WHERE total > "
                     "$8::bigint)) INSERT INTO quarantine (received_at, "
                     "source, op, code, path, message, raw, last_attempt_at) "
                     "VALUES ($1::bigint, convert_from($2::bytea, 'UTF8'), $3, "
                     "$4::integer, $5, $6, $7, $1::bigint)",
                     8, NULL, v, len, fmt, 0);
    rc = PQresultStatus(r) == PGRES_COMMAND_OK
             ? 0
             : store_pg_fail(p, r, err, "store a quarantined payload");
    PQclear(r);
    return rc;
}

/* Looks up the first outcome of (w->source, w->seq); 1 when found. */
static int
dedupe_get(struct store_pg *p, struct store_write *w, struct proto_err *err)
{
    char seq[24];
    const char *v[2] = { w->source, seq };
    int len[2] = { (int)w->source_len, 0 }, fmt[2] = { 1, 0 };
    PGresult *r;
    int rc = 0;

    snprintf(seq, sizeof(seq), "%" PRId64, (int64_t)w->seq);
    r = PQexecParams(p->pc,
                     "SELECT op, receipt_id, status, hash, outcome FROM dedupe "
                     "WHERE source = convert_from($1::bytea, 'UTF8') AND seq "
                     "= $2::bigint",
                     2, NULL, v, len, fmt, 1);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        rc = store_pg_fail(p, r, err, "look up a seq");
        goto out;
    }
    if (PQntuples(r) == 0)
        goto out;
    rc = 1;
    if (other_payload(w, store_pg_i16(PQgetvalue(r, 0, 0)),
                      (uint32_t)store_pg_i64(PQgetvalue(r, 0, 3))))
        goto out;
    w->duplicate = 1;
    w->receipt_id = store_pg_i64(PQgetvalue(r, 0, 1));
    w->status = store_pg_i16(PQgetvalue(r, 0, 2));
    if (!PQgetisnull(r, 0, 4)) {
        size_t n = (size_t)PQgetlength(r, 0, 4);

        if ((w->dup_outcome = malloc(n ? n : 1)) == NULL) {
            rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
            goto out;
        }
        memcpy(w->dup_outcome, PQgetvalue(r, 0, 4), n);
        w->dup_outcome_len = n;
    }
out:
    PQclear(r);
    return rc;
}

/* ---- the seqs' high-water marks ---- */

static uint64_t
hwm_hash(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    size_t i;

    for (i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

static void
hwm_clear(struct store_pg *p)
{
    size_t i;

    for (i = 0; i < p->n_hwm_slots; i++) {
        free(p->hwm[i].source);
        p->hwm[i].source = NULL;
    }
    p->n_hwm = 0;
}

/* The mark of source, made (unknown) when new; NULL when out of memory.
 * Past HWM_MAX sources the marks start again, so memory stays bounded. */
static struct store_pg_hwm *
hwm_get(struct store_pg *p, const char *src, size_t len)
{
    struct store_pg_hwm *m;
    size_t j;

    if (p->n_hwm >= HWM_MAX)
        hwm_clear(p);
    if (p->hwm == NULL) {
        if ((p->hwm = calloc(HWM_MAX * 2, sizeof(*p->hwm))) == NULL)
            return NULL;
        p->n_hwm_slots = HWM_MAX * 2;
    }
    j = hwm_hash(src, len) & (p->n_hwm_slots - 1);
    for (;; j = (j + 1) & (p->n_hwm_slots - 1)) {
        m = &p->hwm[j];
        if (m->source == NULL)
            break;
        if (m->len == len && memcmp(m->source, src, len) == 0)
            return m;
    }
    if ((m->source = malloc(len + 1)) == NULL)
        return NULL;
    memcpy(m->source, src, len);
    m->source[len] = '\0';
    m->len = len;
    m->known = 0;
    m->has = 0;
    m->seq = 0;
    p->n_hwm++;
    return m;
}

/* Reads source's highest recorded seq into m. */
static int
hwm_load(struct store_pg *p, struct store_pg_hwm *m, struct proto_err *err)
{
    const char *v[1] = { m->source };
    int len[1] = { (int)m->len }, fmt[1] = { 1 };
    PGresult *r = PQexecParams(p->pc,
                               "SELECT max(seq) FROM dedupe WHERE source = "
                               "convert_from($1::bytea, 'UTF8')",
                               1, NULL, v, len, fmt, 1);
    int rc = 0;

    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        rc = store_pg_fail(p, r, err, "look up a source's seqs");
    else {
        m->known = 1;
        m->has = !PQgetisnull(r, 0, 0);
        m->seq = m->has ? (uint64_t)store_pg_i64(PQgetvalue(r, 0, 0)) : 0;
    }
    PQclear(r);
    return rc;
}

/* A record of the open group with w's (source, seq); 1 when found, with
 * w set as a duplicate or conflict. */
static int
group_record(struct store_pg *p, struct store_write *w, struct proto_err *err)
{
    size_t i = p->n_recs;

    while (i-- > 0) {
        const struct store_pg_rec *e = &p->recs[i];

        if (e->seq != w->seq || e->source_len != w->source_len ||
            memcmp(p->arena + e->source, w->source, w->source_len) != 0)
            continue;
        if (other_payload(w, e->op, e->hash))
            return 1;
        w->duplicate = 1;
        w->receipt_id = e->receipt_id;
        w->status = e->status;
        if (e->has_outcome) {
            if ((w->dup_outcome =
                     malloc(e->outcome_len ? e->outcome_len : 1)) == NULL)
                return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
            memcpy(w->dup_outcome, p->arena + e->outcome, e->outcome_len);
            w->dup_outcome_len = e->outcome_len;
        }
        return 1;
    }
    return 0;
}

/* Keeps w's first outcome for the commit's COPY into dedupe. */
static int
put_record(struct store_pg *p, const struct store_write *w,
           struct proto_err *err)
{
    struct store_pg_buf *c = &p->seqs_copy;
    struct store_pg_rec *e;

    if (grow((void **)&p->recs, &p->cap_recs, p->n_recs + 1,
             sizeof(*p->recs)) != 0)
        goto nomem;
    e = &p->recs[p->n_recs];
    memset(e, 0, sizeof(*e));
    e->seq = w->seq;
    e->source_len = w->source_len;
    e->op = w->op;
    e->receipt_id = w->receipt_id;
    e->status = w->status;
    e->hash = w->payload_hash;
    e->has_outcome = w->outcome != NULL;
    e->outcome_len = w->outcome_len;
    if (arena_put(p, w->source, w->source_len, &e->source) ||
        (e->has_outcome &&
         arena_put(p, w->outcome, w->outcome_len, &e->outcome)))
        goto nomem;
    if (put_be(c, 7, 2) || field(c, w->source, w->source_len) ||
        field_i64(c, w->seq) || field_i16(c, (unsigned)w->op) ||
        field_i64(c, (uint64_t)w->receipt_id) ||
        field_i16(c, (unsigned)w->status) || field_i64(c, w->payload_hash) ||
        (w->outcome != NULL ? field(c, w->outcome, w->outcome_len)
                            : field_null(c)))
        goto nomem;
    p->n_recs++;
    return 0;
nomem:
    return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
}

static int
has_record(const struct store_write *w)
{
    return w->has_seq && w->source_len > 0 && w->op >= 0;
}

/* Keeps a relayed receipt's (source, seq) for the commit, which adds it
 * to dedupe unless a record is there (flush_group): the first node to
 * relay a seq of a source is the one recorded, with its id. */
static int
put_relay_seq(struct store_pg *p, const struct store_write *w,
              struct proto_err *err)
{
    struct store_pg_buf *c = &p->relay_seqs;

    if (put_be(c, 7, 2) || field(c, w->source, w->source_len) ||
        field_i64(c, w->seq) || field_i16(c, (unsigned)w->op) ||
        field_i64(c, (uint64_t)w->receipt_id) ||
        field_i16(c, (unsigned)w->status) || field_i64(c, 0) || field_null(c))
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    p->n_relay_seqs++;
    return 0;
}

/*
 * The (source, seq) check costs no round trip for a new seq: each source's
 * highest recorded seq is read once (hwm_load) and kept, with the open
 * group's records on top. Only a seq at or below it (a resend, or an
 * older seq arriving late) is looked up: in the group, then in dedupe. A
 * seq another instance recorded since the mark was read makes the
 * commit's COPY into dedupe fail on its key (flush_group).
 */
static int
pg_write_begin(struct store *s, struct store_write *w, int64_t *source_id,
               struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    struct store_pg_hwm *m;
    int rc;

    w->duplicate = 0;
    w->conflict = 0;
    w->receipt_id = 0;
    w->evicted = 0;
    w->refused = 0;
    w->seq_seen = 0;
    *source_id = 0; /* sources are stored as text here */
    /* A relayed receipt is never a duplicate (the origin's mark is): its
     * record is added at the commit where none is, without a look-up. */
    if (!has_record(w) || !text_ok(w->source, w->source_len) || w->relayed)
        return 0;
    if ((m = hwm_get(p, w->source, w->source_len)) == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    if (!m->known && (rc = hwm_load(p, m, err)))
        return rc;
    rc = 0;
    if (m->has && w->seq <= m->seq) {
        /* A resend, or a late seq: in the group, else in dedupe. */
        if ((rc = group_record(p, w, err)) == 0)
            rc = dedupe_get(p, w, err);
    }
    if (rc == 1 && w->conflict && w->conflict_q != NULL &&
        (rc = put_quarantine(p, w, w->conflict_q, err)) == 0)
        rc = 1;
    return rc;
}

static int
pg_write_end(struct store *s, struct store_write *w, int64_t source_id,
             struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    struct store_pg_hwm *m;
    size_t i;
    int rc;

    (void)source_id;
    for (i = 0; i < w->n_quarantine; i++)
        if ((rc = put_quarantine(p, w, &w->quarantine[i], err)))
            return rc;
    if (!has_record(w) || w->refused || !text_ok(w->source, w->source_len))
        return 0;
    if ((rc = w->relayed ? put_relay_seq(p, w, err) : put_record(p, w, err)))
        return rc;
    if ((m = hwm_get(p, w->source, w->source_len)) != NULL && m->known &&
        (!m->has || w->seq > m->seq)) {
        m->has = 1;
        m->seq = w->seq;
    }
    return 0;
}

static int
pg_apply(struct store *s, struct store_write *w, struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    int64_t source_id, id;
    size_t i;
    int rc;

    if ((rc = pg_write_begin(s, w, &source_id, err)))
        return rc == 1 ? 0 : rc;
    for (i = 0; i < w->n_receipts; i++) {
        /* A relayed receipt keeps its node's id (one receipt a write). */
        if (w->relayed)
            id = store_pg_clamp(w->origin_id + i);
        else if ((rc = next_id(p, &id, err)))
            return rc;
        if ((rc = put_receipt(p, w, &w->receipts[i], id, err)))
            return rc;
        if (i == 0) {
            w->receipt_id = id;
            w->status = receipt_status(&w->receipts[0]);
        }
    }
    return pg_write_end(s, w, source_id, err);
}

/* ---- the commit ---- */

static int
day_known(const struct store_pg *p, int64_t day)
{
    size_t i;

    for (i = 0; i < p->n_days; i++)
        if (p->days[i] == day)
            return 1;
    return 0;
}

/* Creates the partition of day (received_at / DAY_MS) unless it exists,
 * under a transaction advisory lock, so instances do not race on it. */
static int
make_partition(struct store_pg *p, int64_t day, struct proto_err *err)
{
    char sql[320];
    int rc;

    if (day_known(p, day))
        return 0;
    snprintf(sql, sizeof(sql),
             "SELECT pg_advisory_xact_lock(%d); CREATE TABLE IF NOT EXISTS "
             "receipts_d%" PRId64 " PARTITION OF receipts FOR VALUES FROM "
             "(%" PRId64 ") TO (%" PRId64 ")",
             LOCK_PARTITION, day, day * DAY_MS, (day + 1) * DAY_MS);
    if ((rc = store_pg_exec(p, sql, err, "make a day's partition")))
        return rc;
    if (grow((void **)&p->days, &p->cap_days, p->n_days + 1,
             sizeof(*p->days)) != 0)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    p->days[p->n_days++] = day;
    return 0;
}

/* qsort has no argument: the arena of the rows being sorted. Only the
 * writer thread sorts, one group at a time. */
static const char *sort_arena;

/* Orders rows by their rollup key: hour, strings, backends. */
static int
cmp_rows(const void *a, const void *b)
{
    const struct store_pg_row *x = a, *y = b;
    const char *ar = sort_arena;
    int c;

    if (x->hour != y->hour)
        return x->hour < y->hour ? -1 : 1;
    if ((c = strcmp(ar + x->plan, ar + y->plan)) ||
        (c = strcmp(ar + x->graph, ar + y->graph)) ||
        (c = strcmp(ar + x->model, ar + y->model)) ||
        (c = strcmp(ar + x->source, ar + y->source)))
        return c;
    if (x->requested != y->requested)
        return x->requested < y->requested ? -1 : 1;
    return (x->executed > y->executed) - (x->executed < y->executed);
}

/* 128 bits as a numeric in binary (numeric_recv): base-10000 digits,
 * most significant first, without trailing zero digits. */
static int
put_numeric(struct store_pg_buf *b, unsigned __int128 v)
{
    uint16_t d[10]; /* 2^128 < 10000^10 */
    int n = 0, w, i;

    while (v > 0) {
        d[n++] = (uint16_t)(v % 10000);
        v /= 10000;
    }
    w = n - 1;
    for (i = 0; i < n && d[i] == 0; i++)
        ;
    if (put_be(b, (uint64_t)(n - i), 2) ||
        put_be(b, (uint64_t)(uint16_t)(n > 0 ? w : 0), 2) || put_be(b, 0, 2) ||
        put_be(b, 0, 2))
        return -1;
    for (w = n - 1; w >= i; w--)
        if (put_be(b, d[w], 2))
            return -1;
    return 0;
}

/* A numeric[] of n values as a field (binary), NULL where !has[k]. */
static int
field_numerics(struct store_pg_buf *b, const unsigned __int128 *v,
               const int *has, unsigned n)
{
    size_t at = b->len, at2;
    unsigned k;
    int nulls = 0;

    for (k = 0; k < n; k++)
        nulls |= !has[k];
    if (put_be(b, 0, 4) || put_be(b, 1, 4) || put_be(b, (uint64_t)nulls, 4) ||
        put_be(b, 1700 /* NUMERICOID */, 4) || put_be(b, n, 4) ||
        put_be(b, 1, 4))
        return -1;
    for (k = 0; k < n; k++) {
        if (!has[k]) {
            if (field_null(b))
                return -1;
            continue;
        }
        at2 = b->len;
        if (put_be(b, 0, 4) || put_numeric(b, v[k]))
            return -1;
        patch_be32(b, at2, b->len - at2 - 4);
    }
    patch_be32(b, at, b->len - at - 4);
    return 0;
}

/* One key's sums: what a rollup row holds. The strings point into the
 * arena (a group's) or the merge's map. */
struct pg_sums {
    int64_t hour;
    const char *str[4]; /* plan, graph, model, source */
    size_t len[4];
    unsigned requested, executed;
    uint64_t receipts, counts[3], schema3;
    struct store_agg_counter c[RECEIPT_NCOUNTERS];
};

/* A sums blob (rollup_pending.sums, migrations/pg/0003): for each counter
 * measured, its bit (one byte), then measured, the sum's high and low
 * words, min and max, each an unsigned LEB128 varint (7 bits a byte, low
 * first, at most 10 bytes): about 15 bytes a counter of small figures
 * where fixed words took 41 (varint.h). */
int
store_pg_sums_add(const char *b, int len, struct store_agg_counter *c)
{
    const unsigned char *p = (const unsigned char *)b;
    const unsigned char *end = p + (len > 0 ? len : 0);

    if (len < 0)
        return -1;
    while (p < end) {
        unsigned j = *p++;
        struct store_agg_counter o;

        if (j >= RECEIPT_NCOUNTERS ||
            (p = store_varint_get(p, end, &o.measured)) == NULL ||
            (p = store_varint_get(p, end, &o.sum_hi)) == NULL ||
            (p = store_varint_get(p, end, &o.sum_lo)) == NULL ||
            (p = store_varint_get(p, end, &o.min)) == NULL ||
            (p = store_varint_get(p, end, &o.max)) == NULL)
            return -1;
        store_agg_counter_merge(&c[j], &o);
    }
    return 0;
}

static int
put_varint(struct store_pg_buf *b, uint64_t v)
{
    unsigned char t[10];

    return put_bytes(b, t, (size_t)(store_varint_put(t, v) - t));
}

/* The sums blob of c[RECEIPT_NCOUNTERS] as a field. */
static int
field_sums(struct store_pg_buf *b, const struct store_agg_counter *c)
{
    size_t at = b->len;
    unsigned j;

    if (put_be(b, 0, 4))
        return -1;
    for (j = 0; j < RECEIPT_NCOUNTERS; j++)
        if (c[j].measured > 0 &&
            (put_be(b, j, 1) || put_varint(b, c[j].measured) ||
             put_varint(b, c[j].sum_hi) || put_varint(b, c[j].sum_lo) ||
             put_varint(b, c[j].min) || put_varint(b, c[j].max)))
            return -1;
    patch_be32(b, at, b->len - at - 4);
    return 0;
}

/* Appends k to b as a COPY (FORMAT binary) tuple of rollup_pending: its 13
 * columns in order (migrations/pg/0003), the counters in one blob. */
static int
put_pending(struct store_pg_buf *b, const struct pg_sums *k)
{
    unsigned j;

    if (put_be(b, 13, 2) || field_i64(b, (uint64_t)k->hour))
        return -1;
    for (j = 0; j < 4; j++)
        if (field(b, k->str[j], k->len[j]))
            return -1;
    if (field_i16(b, k->requested) || field_i16(b, k->executed) ||
        field_i64(b, k->receipts) ||
        field_i64(b, k->counts[RECEIPT_STATUS_FALLBACK]) ||
        field_i64(b, k->counts[RECEIPT_STATUS_CLEAN]) ||
        field_i64(b, k->counts[RECEIPT_STATUS_UNPROVEN]) ||
        field_i64(b, k->schema3) || field_sums(b, k->c))
        return -1;
    return 0;
}

/*
 * Appends k to b as a rollup_hours row (its 16 columns in order,
 * migrations/pg/0001) in binary (record_recv: each column's type before
 * it), an element of the upsert's rollup_hours[].
 */
static int
put_rollup_row(struct store_pg_buf *b, const struct pg_sums *k)
{
    uint64_t measured[RECEIPT_NCOUNTERS];
    unsigned __int128 v[3][RECEIPT_NCOUNTERS];
    int has[RECEIPT_NCOUNTERS], all[RECEIPT_NCOUNTERS];
    size_t at = b->len;
    unsigned j;

    for (j = 0; j < RECEIPT_NCOUNTERS; j++) {
        measured[j] = k->c[j].measured;
        v[0][j] = (unsigned __int128)k->c[j].sum_hi << 64 | k->c[j].sum_lo;
        v[1][j] = k->c[j].min;
        v[2][j] = k->c[j].max;
        has[j] = k->c[j].measured > 0;
        all[j] = 1;
    }
#define COL(oid) put_be(b, (oid), 4)
    if (put_be(b, 0, 4) || put_be(b, 16, 4) || COL(20) ||
        field_i64(b, (uint64_t)k->hour))
        return -1;
    for (j = 0; j < 4; j++)
        if (COL(25) || field(b, k->str[j], k->len[j]))
            return -1;
    if (COL(21) || field_i16(b, k->requested) || COL(21) ||
        field_i16(b, k->executed) || COL(20) || field_i64(b, k->receipts) ||
        COL(20) || field_i64(b, k->counts[RECEIPT_STATUS_FALLBACK]) ||
        COL(20) || field_i64(b, k->counts[RECEIPT_STATUS_CLEAN]) || COL(20) ||
        field_i64(b, k->counts[RECEIPT_STATUS_UNPROVEN]) ||
        COL(1016 /* bigint[] */) ||
        field_i64s(b, measured, RECEIPT_NCOUNTERS) ||
        COL(1231 /* numeric[] */) ||
        field_numerics(b, v[0], all, RECEIPT_NCOUNTERS) || COL(1231) ||
        field_numerics(b, v[1], has, RECEIPT_NCOUNTERS) || COL(1231) ||
        field_numerics(b, v[2], has, RECEIPT_NCOUNTERS) || COL(20) ||
        field_i64(b, k->schema3))
        return -1;
#undef COL
    patch_be32(b, at, b->len - at - 4);
    return 0;
}

/* Appends the sums of rows [from, to), which share a key, to b as one
 * COPY tuple of rollup_pending (put_pending). */
static int
put_rollup(struct store_pg *p, const struct store_pg_row *rows, size_t from,
           size_t to, struct store_pg_buf *b, struct proto_err *err)
{
    const struct store_pg_row *r = &rows[from];
    struct pg_sums k;
    size_t i;
    unsigned j;

    memset(&k, 0, sizeof(k));
    k.hour = r->hour;
    k.str[0] = p->arena + r->plan;
    k.str[1] = p->arena + r->graph;
    k.str[2] = p->arena + r->model;
    k.str[3] = p->arena + r->source;
    for (j = 0; j < 4; j++)
        k.len[j] = strlen(k.str[j]);
    k.requested = r->requested;
    k.executed = r->executed;
    k.receipts = to - from;
    for (i = from; i < to; i++) {
        k.counts[rows[i].status < 3 ? rows[i].status : 2]++;
        k.schema3 += rows[i].schema3;
        for (j = 0; j < RECEIPT_NCOUNTERS; j++)
            if (rows[i].coverage >> j & 1)
                store_agg_counter_add(&k.c[j], rows[i].counters[j]);
    }
    if (put_pending(b, &k))
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    return 0;
}

/* The group's rollup_pending rows (put_rollup), one per key of the
 * sorted rows, as COPY tuples. */
static int
rollup_cols(struct store_pg *p, struct store_pg_buf *b, struct proto_err *err)
{
    size_t i, from;
    int rc = 0;

    for (from = 0, i = 1; rc == 0 && i <= p->n_rows; i++)
        if (i == p->n_rows || cmp_rows(&p->rows[from], &p->rows[i]) != 0) {
            rc = put_rollup(p, p->rows, from, i, b, err);
            from = i;
        }
    return rc;
}

/* The keys a merge sums before an upsert: dense in keys, found by a hash
 * in slots (open addressing, MERGE_SLOTS, twice MERGE_KEYS); at most
 * MERGE_KEYS keys, about 19 MiB of sums. Each key's strings are one block
 * of its own (str[0]). */
#define MERGE_SLOTS (2 * MERGE_KEYS)
struct pg_merge_map {
    uint32_t *slots; /* 0: free, else the key's index + 1 */
    struct pg_sums *keys;
    size_t n, cap;
};

static uint32_t
merge_hash(int64_t hour, const char **str, const int *len, unsigned req,
           unsigned exe)
{
    uint32_t h = 2166136261u;
    unsigned j;
    int i;

#define MIX(x) (h = (h ^ (uint32_t)(x)) * 16777619u)
    for (i = 0; i < 8; i++)
        MIX((uint64_t)hour >> (8 * i) & 0xff);
    for (j = 0; j < 4; j++) {
        for (i = 0; i < len[j]; i++)
            MIX((unsigned char)str[j][i]);
        MIX(0x100 + j);
    }
    MIX(req);
    MIX(exe);
#undef MIX
    return h;
}

static void
merge_map_clear(struct pg_merge_map *m)
{
    size_t i;

    for (i = 0; i < m->n; i++)
        free((void *)m->keys[i].str[0]);
    m->n = 0;
    if (m->slots != NULL)
        memset(m->slots, 0, MERGE_SLOTS * sizeof(*m->slots));
}

/* Adds row i of a merge_take result to its key's sums in m. */
static int
merge_row(struct pg_merge_map *m, PGresult *r, int i, struct proto_err *err)
{
    const char *str[4];
    int len[4];
    int64_t hour = store_pg_i64(PQgetvalue(r, i, 0));
    unsigned req = (uint16_t)store_pg_i16(PQgetvalue(r, i, 5));
    unsigned exe = (uint16_t)store_pg_i16(PQgetvalue(r, i, 6));
    struct pg_sums *k = NULL;
    uint32_t h, at;
    unsigned j;

    for (j = 0; j < 4; j++) {
        str[j] = PQgetvalue(r, i, 1 + (int)j);
        len[j] = PQgetlength(r, i, 1 + (int)j);
    }
    h = merge_hash(hour, str, len, req, exe);
    for (at = h & (MERGE_SLOTS - 1); m->slots[at] != 0;
         at = (at + 1) & (MERGE_SLOTS - 1)) {
        struct pg_sums *c = &m->keys[m->slots[at] - 1];

        if (c->hour == hour && c->requested == req && c->executed == exe &&
            c->len[0] == (size_t)len[0] && c->len[1] == (size_t)len[1] &&
            c->len[2] == (size_t)len[2] && c->len[3] == (size_t)len[3] &&
            memcmp(c->str[0], str[0], (size_t)len[0]) == 0 &&
            memcmp(c->str[1], str[1], (size_t)len[1]) == 0 &&
            memcmp(c->str[2], str[2], (size_t)len[2]) == 0 &&
            memcmp(c->str[3], str[3], (size_t)len[3]) == 0) {
            k = c;
            break;
        }
    }
    if (k == NULL) {
        char *block;
        size_t o = 0;

        if (m->n >= MERGE_KEYS ||
            grow((void **)&m->keys, &m->cap, m->n + 1, sizeof(*m->keys)) != 0 ||
            (block = malloc((size_t)len[0] + (size_t)len[1] + (size_t)len[2] +
                            (size_t)len[3] + 1)) == NULL)
            return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        k = &m->keys[m->n++];
        memset(k, 0, sizeof(*k));
        for (j = 0; j < 4; j++) {
            memcpy(block + o, str[j], (size_t)len[j]);
            k->str[j] = block + o;
            k->len[j] = (size_t)len[j];
            o += (size_t)len[j];
        }
        k->hour = hour;
        k->requested = req;
        k->executed = exe;
        m->slots[at] = (uint32_t)m->n;
    }
    k->receipts += (uint64_t)store_pg_i64(PQgetvalue(r, i, 7));
    for (j = 0; j < 3; j++)
        k->counts[j] += (uint64_t)store_pg_i64(PQgetvalue(r, i, 8 + (int)j));
    k->schema3 += (uint64_t)store_pg_i64(PQgetvalue(r, i, 11));
    if (store_pg_sums_add(PQgetvalue(r, i, 12), PQgetlength(r, i, 12), k->c) !=
        0)
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "a pending rollup row's sums are malformed");
    return 0;
}

/* One round of a merge: up to MERGE_ROWS pending rows deleted, their
 * rows streamed one at a time and summed into m. *more: the round took
 * MERGE_ROWS, others may wait. */
static int
merge_round(struct store_pg *p, struct pg_merge_map *m, int *more,
            struct proto_err *err)
{
    PGresult *r;
    int rc = 0, rows = 0;

    *more = 0;
    if (!PQsendQueryParams(p->pc, merge_take, 0, NULL, NULL, NULL, NULL, 1) ||
        !PQsetSingleRowMode(p->pc))
        return store_pg_fail(p, NULL, err, "take the pending rollups");
    while ((r = PQgetResult(p->pc)) != NULL) {
        if (rc == 0 && PQresultStatus(r) == PGRES_SINGLE_TUPLE) {
            rc = merge_row(m, r, 0, err);
            rows++;
        } else if (rc == 0 && PQresultStatus(r) != PGRES_TUPLES_OK)
            rc = store_pg_fail(p, r, err, "take the pending rollups");
        PQclear(r);
    }
    *more = rc == 0 && rows >= MERGE_ROWS;
    return rc;
}

/* Adds the sums of m's keys to rollup_hours with one upsert (ROLLUP_STMT)
 * and empties m. */
static int
merge_flush(struct store_pg *p, struct pg_merge_map *m, struct proto_err *err)
{
    struct store_pg_buf b;
    PGresult *r;
    const char *v;
    int rc = 0, len, fmt = 1;
    size_t i;

    if (m->n == 0)
        return 0;
    memset(&b, 0, sizeof(b));
    if (put_be(&b, 1, 4) || put_be(&b, 0, 4) || put_be(&b, p->rollup_oid, 4) ||
        put_be(&b, m->n, 4) || put_be(&b, 1, 4))
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    for (i = 0; rc == 0 && i < m->n; i++)
        if (put_rollup_row(&b, &m->keys[i]))
            rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    if (rc == 0 && b.len > INT32_MAX)
        rc = proto_err_set(err, PROTO_ETOO_LARGE, NULL,
                           "a merge's rollups are over 2 GiB");
    if (rc == 0) {
        v = (const char *)b.p;
        len = (int)b.len;
        r = PQexecPrepared(p->pc, ROLLUP_STMT, 1, &v, &len, &fmt, 0);
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            rc = store_pg_fail(p, r, err, "merge the rollups");
        PQclear(r);
    }
    free(b.p);
    merge_map_clear(m);
    return rc;
}

/*
 * Merges the pending rollup rows into rollup_hours, up to MERGE_ROUNDS
 * rounds (merge_round; merge_flush upserts the keys summed) in a
 * transaction of its own, under a transaction
 * advisory lock: every committed pending row, whichever instance appended
 * it, is merged; rows of groups not committed yet are not seen and stay.
 * When another instance holds the lock it is merging: this one leaves it
 * and asks again at its next chance (its count is kept, as when rows
 * remain after the last round). Writer thread, no transaction open.
 */
static int
pg_merge(struct store_pg *p, struct proto_err *err)
{
    struct pg_merge_map m;
    char sql[96];
    PGresult *r;
    int rc, got = 0, more = 0, round;

    memset(&m, 0, sizeof(m));
    if ((rc = store_pg_begin(p, err)))
        return rc;
    p->in_txn = 1;
    snprintf(sql, sizeof(sql), "SELECT pg_try_advisory_xact_lock(%d)",
             LOCK_MERGE);
    r = PQexec(p->pc, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        rc = store_pg_fail(p, r, err, "lock the rollup merge");
        PQclear(r);
        goto out;
    }
    got = PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    if (!got)
        goto out; /* another instance merges */
    if ((m.slots = calloc(MERGE_SLOTS, sizeof(*m.slots))) == NULL) {
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        goto out;
    }
    /* Each key's sums go in once a merge while they fit in the map: an
     * upsert only when the next round might not. */
    for (round = 0; rc == 0 && round < MERGE_ROUNDS; round++) {
        if (m.n + MERGE_ROWS > MERGE_KEYS)
            rc = merge_flush(p, &m, err);
        if (rc != 0 || (rc = merge_round(p, &m, &more, err)) != 0 || !more)
            break;
    }
    if (rc == 0)
        rc = merge_flush(p, &m, err);
    if (rc == 0 &&
        (rc = store_pg_exec(p, "COMMIT", err, "commit the rollup merge")) == 0)
        p->in_txn = 0;
out:
    if (p->in_txn && PQstatus(p->pc) == CONNECTION_OK)
        PQclear(PQexec(p->pc, "ROLLBACK"));
    p->in_txn = 0;
    merge_map_clear(&m);
    free(m.slots);
    free(m.keys);
    /* Merged, or failed: asked again after PG_MERGE_GROUPS more groups
     * (the rows stay pending, queries read them); rows left: at once. */
    if (got || rc != 0)
        p->pending_groups = rc == 0 && more ? PG_MERGE_GROUPS : 0;
    return rc;
}

/* store_merge_pending: groups appended since this instance's last merge
 * (or since it opened: what an earlier run left). */
static int
pg_merge_pending(const struct store *s)
{
    const struct store_pg *p = (const struct store_pg *)(const void *)s;

    return !p->readonly && p->pending_groups > 0;
}

/* store_merge_idle: the whole merge at once (keys is SQLite's slice),
 * once PG_MERGE_QUIET_MS passed since this instance's last group: 0 when
 * done, 1 when not yet quiet or another instance held the lock (asked
 * again), or
 * the failure (the rows stay pending until the next merge, after
 * PG_MERGE_GROUPS groups or a quiet moment after one). */
static int
pg_merge_idle(struct store *s, unsigned keys, struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    int rc;

    (void)keys;
    if (!pg_merge_pending(s))
        return 0;
    /* A writer between groups of a light load waits for PG_MERGE_GROUPS
     * of them, as under load: it merges alone only once quiet. */
    if (p->pending_groups < PG_MERGE_GROUPS &&
        store_now_ms() - p->appended_ms < PG_MERGE_QUIET_MS)
        return 1;
    rc = pg_merge(p, err);
    return rc != 0 ? rc : pg_merge_pending(s);
}

/* Sends sql, a COPY ... FROM STDIN (FORMAT binary), with the tuples of
 * b between the format's header and trailer; copy_end reads its
 * outcome, so that the caller may work while the server does. */
static int
copy_send(struct store_pg *p, const char *sql, const struct store_pg_buf *b,
          struct proto_err *err, const char *what)
{
    static const unsigned char header[19] = "PGCOPY\n\377\r\n\0\0\0\0\0\0\0\0";
    static const unsigned char trailer[2] = { 0xff, 0xff };
    PGresult *r = PQexec(p->pc, sql);
    size_t i;
    int rc, ok;

    if (PQresultStatus(r) != PGRES_COPY_IN) {
        rc = store_pg_fail(p, r, err, what);
        PQclear(r);
        return rc;
    }
    PQclear(r);
    /* libpq takes an int's worth at a time: the buffer goes in slices. */
    ok = PQputCopyData(p->pc, (const char *)header, sizeof(header)) == 1;
    for (i = 0; ok && i < b->len; i += COPY_SLICE)
        ok = PQputCopyData(
                 p->pc, (const char *)b->p + i,
                 (int)(b->len - i < COPY_SLICE ? b->len - i : COPY_SLICE)) == 1;
    if (!ok ||
        PQputCopyData(p->pc, (const char *)trailer, sizeof(trailer)) != 1 ||
        PQputCopyEnd(p->pc, NULL) != 1)
        return store_pg_fail(p, NULL, err, what);
    return 0;
}

static int
copy_end(struct store_pg *p, struct proto_err *err, const char *what)
{
    PGresult *r = PQgetResult(p->pc);
    int rc;

    rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0
                                               : store_pg_fail(p, r, err, what);
    PQclear(r);
    while ((r = PQgetResult(p->pc)) != NULL)
        PQclear(r);
    return rc;
}

static int
copy_in(struct store_pg *p, const char *sql, const struct store_pg_buf *b,
        struct proto_err *err, const char *what)
{
    int rc = copy_send(p, sql, b, err, what);

    return rc != 0 ? rc : copy_end(p, err, what);
}

/* Sends the group's seq records, receipts and rollups (see the file's
 * comment). A seq another instance recorded meanwhile fails the group on
 * dedupe's key; the writer then answers it as the duplicate it is
 * (writer.c answer_committed). */
static int
flush_group(struct store_pg *p, struct proto_err *err)
{
    struct store_pg_buf cols;
    size_t i;
    int rc, rc2;

    if (p->n_recs > 0 &&
        (rc = copy_in(p,
                      "COPY dedupe (source, seq, op, receipt_id, status, "
                      "hash, outcome) FROM STDIN (FORMAT binary)",
                      &p->seqs_copy, err, "record the seqs")))
        return rc;
    /* Relayed seqs: another node may have carried the source, a batch's
     * rows share its seq, a failover resends: a record there stays. */
    if (p->n_relay_seqs > 0 &&
        ((rc = copy_in(p,
                       "COPY seq_staging (source, seq, op, receipt_id, "
                       "status, hash, outcome) FROM STDIN (FORMAT binary)",
                       &p->relay_seqs, err, "record the relayed seqs")) ||
         (rc = store_pg_exec(p,
                             "INSERT INTO dedupe (source, seq, op, "
                             "receipt_id, status, hash, outcome) SELECT "
                             "source, seq, op, receipt_id, status, hash, "
                             "outcome FROM seq_staging ON CONFLICT DO "
                             "NOTHING",
                             err, "record the relayed seqs"))))
        return rc;
    if (p->n_rows == 0)
        return 0;
    for (i = 0; i < p->n_rows; i++) {
        int64_t h = p->rows[i].hour;
        int64_t day = h >= 0 ? h / 24 : (h - 23) / 24;

        if ((rc = make_partition(p, day, err)))
            return rc;
    }
    /* The rollup's arrays are made while the server takes the COPY. */
    memset(&cols, 0, sizeof(cols));
    if ((rc = copy_send(p, "COPY receipts FROM STDIN (FORMAT binary)", &p->copy,
                        err, "COPY the receipts")) == 0) {
        sort_arena = p->arena;
        qsort(p->rows, p->n_rows, sizeof(*p->rows), cmp_rows);
        rc2 = rollup_cols(p, &cols, err);
        rc = copy_end(p, err, "COPY the receipts");
        if (rc == 0 && (rc = rc2) == 0)
            rc = copy_in(p, "COPY rollup_pending FROM STDIN (FORMAT binary)",
                         &cols, err, "add to the rollups");
        if (rc == 0) {
            p->pending_groups++;
            p->appended_ms = store_now_ms();
        }
    }
    free(cols.p);
    return rc;
}

static int
pg_commit(struct store *s, struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    int rc;

    if ((rc = flush_group(p, err)) ||
        (rc = store_pg_exec(p, "COMMIT", err, "commit")))
        return rc;
    p->in_txn = 0;
    drop_group(p);
    return 0;
}

/* ---- plans ---- */

static int
params_result(struct store_pg *p, PGresult *r, ExecStatusType want,
              struct proto_err *err, const char *what)
{
    int rc = PQresultStatus(r) == want ? 0 : store_pg_fail(p, r, err, what);

    if (rc)
        PQclear(r);
    return rc;
}

static int
pg_plan_get(struct store *s, const struct store_plan_key *k, int64_t *id,
            void **canonical, size_t *len, struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    const char *v[2] = { k->plan.ptr ? k->plan.ptr : "",
                         k->graph.ptr ? k->graph.ptr : "" };
    int l[2] = { (int)k->plan.len, (int)k->graph.len }, fmt[2] = { 1, 1 };
    PGresult *r;
    int rc;

    *id = 0;
    *canonical = NULL;
    *len = 0;
    r = PQexecParams(p->pc,
                     "SELECT id, canonical FROM plans WHERE plan = "
                     "convert_from($1::bytea, 'UTF8') AND graph = "
                     "convert_from($2::bytea, 'UTF8')",
                     2, NULL, v, l, fmt, 1);
    if ((rc = params_result(p, r, PGRES_TUPLES_OK, err, "look up a plan")))
        return rc;
    if (PQntuples(r) > 0) {
        size_t n = (size_t)PQgetlength(r, 0, 1);

        if ((*canonical = malloc(n ? n : 1)) == NULL) {
            PQclear(r);
            return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        }
        memcpy(*canonical, PQgetvalue(r, 0, 1), n);
        *len = n;
        *id = store_pg_i64(PQgetvalue(r, 0, 0));
    }
    PQclear(r);
    return 0;
}

static int
pg_plan_put(struct store *s, const struct store_plan_new *n, int64_t *id,
            struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    char at[24], nodes[24], values[24];
    const char *v[7] = { n->key.plan.ptr,
                         n->key.graph.ptr ? n->key.graph.ptr : "",
                         at,
                         n->source.ptr ? n->source.ptr : "",
                         nodes,
                         values,
                         n->canonical };
    int l[7] = { (int)n->key.plan.len,
                 (int)n->key.graph.len,
                 0,
                 (int)n->source.len,
                 0,
                 0,
                 (int)n->len };
    int fmt[7] = { 1, 1, 0, 1, 0, 0, 1 };
    PGresult *r;
    int rc;

    snprintf(at, sizeof(at), "%" PRId64, n->registered_at);
    snprintf(nodes, sizeof(nodes), "%" PRIu64, n->nodes);
    snprintf(values, sizeof(values), "%" PRIu64, n->values);
    r = PQexecParams(
        p->pc,
        "INSERT INTO plans (plan, graph, registered_at, source, "
        "nodes, nvalues, canonical) VALUES (convert_from($1::bytea, "
        "'UTF8'), convert_from($2::bytea, 'UTF8'), $3::bigint, "
        "convert_from($4::bytea, 'UTF8'), $5::bigint, $6::bigint, "
        "$7::bytea) RETURNING id",
        7, NULL, v, l, fmt, 1);
    if ((rc = params_result(p, r, PGRES_TUPLES_OK, err, "store a plan")))
        return rc;
    *id = store_pg_i64(PQgetvalue(r, 0, 0));
    PQclear(r);
    return 0;
}

static int
pg_plan_retain(struct store *s, int64_t plan_id, struct proto_str value_id,
               int64_t retained_at, const void *value, size_t len,
               struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    char id[24], at[24];
    const char *v[4] = { id, value_id.ptr ? value_id.ptr : "", at, value };
    int l[4] = { 0, (int)value_id.len, 0, (int)len }, fmt[4] = { 0, 1, 0, 1 };
    PGresult *r;
    int rc;

    snprintf(id, sizeof(id), "%" PRId64, plan_id);
    snprintf(at, sizeof(at), "%" PRId64, retained_at);
    r = PQexecParams(p->pc,
                     "INSERT INTO retained (plan_id, value_id, retained_at, "
                     "value) VALUES ($1::bigint, convert_from($2::bytea, "
                     "'UTF8'), $3::bigint, $4::bytea) ON CONFLICT DO NOTHING",
                     4, NULL, v, l, fmt, 0);
    if ((rc = params_result(p, r, PGRES_COMMAND_OK, err, "retain a value")))
        return rc;
    PQclear(r);
    return 0;
}

/* ---- the relay, at a center ---- */

/*
 * The origin's mark for stream, its row made at 0 when new and locked
 * until the group's COMMIT (an upsert that changes nothing takes the
 * row's lock and returns the newest committed value): a second instance
 * given the same origin's batch (a node that failed over while this one
 * held it) waits here, then reads the mark this one raised and cuts the
 * batch to nothing. The unique key (origin, id, received_at) stands
 * behind it.
 */
static int
pg_relay_origin_get(struct store *s, const char *origin, size_t len,
                    const char *stream, uint64_t *committed,
                    struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    const char *v[2] = { origin, stream };
    int l[2] = { (int)len, 0 }, fmt[2] = { 1, 0 };
    PGresult *r;
    int64_t c;
    int rc;

    *committed = 0;
    if (!text_ok(origin, len))
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "the origin holds a NUL character");
    r = PQexecParams(p->pc,
                     "INSERT INTO relay_origins AS o (origin, stream, "
                     "committed_id) VALUES (convert_from($1::bytea, 'UTF8'), "
                     "$2, 0) ON CONFLICT (origin, stream) DO UPDATE SET "
                     "committed_id = o.committed_id RETURNING committed_id",
                     2, NULL, v, l, fmt, 1);
    if ((rc = params_result(p, r, PGRES_TUPLES_OK, err,
                            "read an origin's relayed mark")))
        return rc;
    c = PQntuples(r) > 0 ? store_pg_i64(PQgetvalue(r, 0, 0)) : 0;
    PQclear(r);
    *committed = c > 0 ? (uint64_t)c : 0;
    return 0;
}

static int
pg_relay_origin_set(struct store *s, const char *origin, size_t len,
                    const char *stream, uint64_t committed,
                    struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    char id[24];
    const char *v[3] = { origin, stream, id };
    int l[3] = { (int)len, 0, 0 }, fmt[3] = { 1, 0, 0 };
    PGresult *r;
    int rc;

    if (!text_ok(origin, len))
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "the origin holds a NUL character");
    snprintf(id, sizeof(id), "%" PRId64, store_pg_clamp(committed));
    r = PQexecParams(p->pc,
                     "INSERT INTO relay_origins AS o (origin, stream, "
                     "committed_id) VALUES (convert_from($1::bytea, 'UTF8'), "
                     "$2, $3::bigint) ON CONFLICT (origin, stream) DO UPDATE "
                     "SET committed_id = greatest(o.committed_id, "
                     "excluded.committed_id)",
                     3, NULL, v, l, fmt, 0);
    if ((rc = params_result(p, r, PGRES_COMMAND_OK, err,
                            "record an origin's relayed mark")))
        return rc;
    PQclear(r);
    return 0;
}

/* ---- retention ---- */

static int
pg_prune_newest(struct store *s, int64_t *ms, struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    int rc;

    if ((rc = store_pg_ready(p, err)))
        return rc;
    /* Receipts sent here have ids in commit order; the newest day's
     * partition is searched first. */
    return one_int(p, "SELECT max(received_at) FROM receipts", INT64_MIN, ms,
                   err, "find the newest receipt");
}

/*
 * Retention drops whole days: the partitions that end at or before
 * cutoff_ms, with their hours' rollup rows, in one transaction; max_rows
 * does not split a day (a partition is dropped whole or kept).
 */
static int
pg_prune(struct store *s, int64_t cutoff_ms, uint32_t max_rows,
         struct store_prune_result *out, struct proto_err *err)
{
    struct store_pg *p = store_pg_of(s);
    char sql[512];
    PGresult *r;
    int64_t day, rows, oldest, newest;
    int rc, i, n;

    memset(out, 0, sizeof(*out));
    if (max_rows < 1 || max_rows > STORE_PRUNE_MAX_ROWS)
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "max_rows must be 1 to %d", STORE_PRUNE_MAX_ROWS);
    if ((rc = pg_begin(s, err)))
        return rc;
    snprintf(sql, sizeof(sql),
             "SELECT substr(c.relname, 11)::bigint AS day FROM pg_inherits i "
             "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = "
             "'receipts'::regclass AND c.relname ~ '^receipts_d[0-9]+$' AND "
             "(substr(c.relname, 11)::bigint + 1) * %" PRId64 " <= %" PRId64
             " ORDER BY day LIMIT 1",
             DAY_MS, cutoff_ms);
    r = PQexec(p->pc, sql);
    if ((rc = params_result(p, r, PGRES_TUPLES_OK, err, "list partitions")))
        goto fail;
    n = PQntuples(r);
    day = n > 0 ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : 0;
    PQclear(r);
    if (n == 0) {
        pg_rollback(s);
        return 0;
    }
    snprintf(sql, sizeof(sql),
             "SELECT count(*), min(received_at), max(received_at) FROM "
             "receipts_d%" PRId64,
             day);
    r = PQexec(p->pc, sql);
    if ((rc = params_result(p, r, PGRES_TUPLES_OK, err, "count a day")))
        goto fail;
    rows = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    oldest = PQgetisnull(r, 0, 1) ? 0 : strtoll(PQgetvalue(r, 0, 1), NULL, 10);
    newest = PQgetisnull(r, 0, 2) ? 0 : strtoll(PQgetvalue(r, 0, 2), NULL, 10);
    PQclear(r);
    snprintf(sql, sizeof(sql),
             "SELECT pg_advisory_xact_lock(%d); "
             "ALTER TABLE receipts DETACH PARTITION receipts_d%" PRId64
             "; DROP TABLE receipts_d%" PRId64
             "; DELETE FROM rollup_pending WHERE hour >= %" PRId64
             " AND hour < %" PRId64
             "; DELETE FROM rollup_hours WHERE hour >= %" PRId64
             " AND hour < %" PRId64,
             LOCK_MERGE, day, day, day * 24, (day + 1) * 24, day * 24,
             (day + 1) * 24);
    if ((rc = store_pg_exec(p, sql, err, "drop a day")))
        goto fail;
    if (rows > 0) {
        snprintf(sql, sizeof(sql),
                 "INSERT INTO prunes (pruned_at, cutoff, rows, oldest, "
                 "newest) VALUES ((extract(epoch FROM now()) * 1000)::bigint, "
                 "%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ")",
                 cutoff_ms, rows, oldest, newest);
        if ((rc = store_pg_exec(p, sql, err, "record a prune")))
            goto fail;
    }
    if ((rc = store_pg_exec(p, "COMMIT", err, "commit a prune")))
        goto fail;
    p->in_txn = 0;
    for (i = 0; i < (int)p->n_days; i++)
        if (p->days[i] == day)
            p->days[i] = p->days[--p->n_days];
    out->rows = (uint64_t)rows;
    out->oldest = oldest;
    out->newest = newest;
    out->more = 1; /* another day may be due: asked again */
    (void)max_rows;
    return 0;
fail:
    pg_rollback(s);
    return rc;
}

const struct store_ops store_pg_ops = {
    .name = "postgresql",
    .open = pg_open,
    .free = pg_free,
    .user_version = pg_user_version,
    .path = pg_path,
    .begin = pg_begin,
    .commit = pg_commit,
    .rollback = pg_rollback,
    .savepoint = pg_savepoint,
    .savepoint_release = pg_savepoint_release,
    .savepoint_rollback = pg_savepoint_rollback,
    .txn_broken = pg_txn_broken,
    .apply = pg_apply,
    .write_begin = pg_write_begin,
    .write_end = pg_write_end,
    .plan_get = pg_plan_get,
    .plan_put = pg_plan_put,
    .plan_retain = pg_plan_retain,
    .relay_origin_get = pg_relay_origin_get,
    .relay_origin_set = pg_relay_origin_set,
    /* relay_range_add: NULL, each row holds its origin. */
    .prune = pg_prune,
    .prune_newest = pg_prune_newest,
    .query_receipts = store_pg_query_receipts,
    .query_stats = store_pg_query_stats,
    .last_receipt_id = store_pg_last_receipt_id,
    .query_agg = store_pg_query_agg,
    .query_gaps = store_pg_query_gaps,
    .query_quarantine = store_pg_query_quarantine,
    .query_plans = store_pg_query_plans,
    .query_retained = store_pg_query_retained,
    .plan_readback = store_pg_plan_readback,
    .plan_counts = store_pg_plan_counts,
    .query_prunes = store_pg_query_prunes,
    /* The pending rollups' merge; no WAL, checkpoints or file: NULL. */
    .merge_idle = pg_merge_idle,
    .merge_pending = pg_merge_pending,
};
