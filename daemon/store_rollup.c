/*
 * store_rollup.c: keeps the per-hour and per-day rollups of
 * migrations/0004 up to date, inside the writer's transaction.
 *
 * Runs on the writer thread only, with the read-write store. A rollup row
 * is read, the receipt is added in C (128-bit sums carried by hand, u64
 * extremes compared as unsigned: SQLite has neither), and the row is
 * written back; because all of it happens in the transaction (and the
 * savepoint) that writes them, a rollback undoes both. Since migration
 * 0007 the rollups cover exactly the receipts below tail_from
 * (store_tail.c): the sums of the tail are kept here in memory, one entry
 * per key and hour, across commits, and written when the tail becomes a
 * chunk, so a key costs one row update per chunk however many receipts
 * share it. A rollback drops them all, and the tail re-adds what its rows
 * still say.
 *
 * Pruning (store_prune.c) rewrites the rollup rows of the buckets it
 * touched from the receipts left in them.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_agg.h"
#include "store_internal.h"

/* Columns per counter in the rollups table: _n, _lo, _hi, _min, _max. */
#define PER_COUNTER 5

/* Distinct keys the tail may hold in memory (about 1 KiB each); a full
 * table makes the tail a chunk early (store_rollup_full). */
#define TXN_MAX   8192
#define TXN_SLOTS 16384 /* a power of two, twice TXN_MAX */

struct pending {
    struct store_rollup_key k; /* received_at holds the bucket start */
    struct store_agg_group g;
};

/* The statements of one rollups table. */
struct level {
    sqlite3_stmt *get, *put, *upd;
};

/* Hours and days (migrations/0004): every receipt counts in one row of
 * each. */
static const struct {
    const char *table;
    int64_t ms;
} levels[STORE_LEVELS] = {
    { "rollups", STORE_BUCKET_MS },
    { "rollups_day", STORE_DAY_MS },
};

struct store_rollup {
    struct level lv[STORE_LEVELS];
    struct pending *txn; /* TXN_MAX: sums of the tail's receipts */
    int *slots;          /* TXN_SLOTS: index of txn by key, -1 = free */
    int n_txn;
};

void
store_agg_counter_add(struct store_agg_counter *c, uint64_t v)
{
    uint64_t lo = c->sum_lo + v;

    c->sum_hi += lo < c->sum_lo;
    c->sum_lo = lo;
    if (c->measured == 0 || v < c->min)
        c->min = v;
    if (c->measured == 0 || v > c->max)
        c->max = v;
    c->measured++;
}

void
store_agg_counter_merge(struct store_agg_counter *c,
                        const struct store_agg_counter *o)
{
    uint64_t lo;

    if (o->measured == 0)
        return;
    lo = c->sum_lo + o->sum_lo;
    c->sum_hi += o->sum_hi + (lo < c->sum_lo);
    c->sum_lo = lo;
    if (c->measured == 0 || o->min < c->min)
        c->min = o->min;
    if (c->measured == 0 || o->max > c->max)
        c->max = o->max;
    c->measured += o->measured;
}

size_t
store_rollup_columns(char *sql, size_t cap, const char *prefix)
{
    size_t n = 0;
    int i;

#define ADD(...)                                                               \
    n += (size_t)snprintf(sql + n, n < cap ? cap - n : 0, __VA_ARGS__)
    ADD("%sreceipts, %sfallback, %sclean, %sunproven", prefix, prefix, prefix,
        prefix);
    for (i = 0; i < RECEIPT_NCOUNTERS; i++) {
        const char *f = receipt_counters[i].field;
        ADD(", %s%s_n, %s%s_lo, %s%s_hi, %s%s_min, %s%s_max", prefix, f, prefix,
            f, prefix, f, prefix, f, prefix, f);
    }
#undef ADD
    return n;
}

void
store_rollup_read(sqlite3_stmt *st, int col, struct store_agg_group *g)
{
    int i;

    g->receipts += (uint64_t)sqlite3_column_int64(st, col);
    g->fallback += (uint64_t)sqlite3_column_int64(st, col + 1);
    g->clean += (uint64_t)sqlite3_column_int64(st, col + 2);
    g->unproven += (uint64_t)sqlite3_column_int64(st, col + 3);
    col += 4;
    for (i = 0; i < RECEIPT_NCOUNTERS; i++, col += PER_COUNTER) {
        struct store_agg_counter c;

        c.measured = (uint64_t)sqlite3_column_int64(st, col);
        c.sum_lo = (uint64_t)sqlite3_column_int64(st, col + 1);
        c.sum_hi = (uint64_t)sqlite3_column_int64(st, col + 2);
        c.min = (uint64_t)sqlite3_column_int64(st, col + 3);
        c.max = (uint64_t)sqlite3_column_int64(st, col + 4);
        store_agg_counter_merge(&g->c[i], &c);
    }
}

/* Binds the figures of g from parameter index col on. */
static void
bind_figures(sqlite3_stmt *st, int col, const struct store_agg_group *g)
{
    int i;

    sqlite3_bind_int64(st, col, (int64_t)g->receipts);
    sqlite3_bind_int64(st, col + 1, (int64_t)g->fallback);
    sqlite3_bind_int64(st, col + 2, (int64_t)g->clean);
    sqlite3_bind_int64(st, col + 3, (int64_t)g->unproven);
    col += 4;
    for (i = 0; i < RECEIPT_NCOUNTERS; i++, col += PER_COUNTER) {
        const struct store_agg_counter *c = &g->c[i];

        sqlite3_bind_int64(st, col, (int64_t)c->measured);
        /* Bit patterns: the u64 values read back by casting. */
        sqlite3_bind_int64(st, col + 1, (int64_t)c->sum_lo);
        sqlite3_bind_int64(st, col + 2, (int64_t)c->sum_hi);
        if (c->measured > 0) {
            sqlite3_bind_int64(st, col + 3, (int64_t)c->min);
            sqlite3_bind_int64(st, col + 4, (int64_t)c->max);
        } else {
            sqlite3_bind_null(st, col + 3);
            sqlite3_bind_null(st, col + 4);
        }
    }
}

#define KEY_WHERE                                                              \
    "plan_id = ?1 AND graph_id = ?2 AND model_id = ?3 AND "                    \
    "requested_backend = ?4 AND executed_backend = ?5 AND source_id = ?6 "     \
    "AND bucket = ?7"

static int
prepare(struct store *s, struct level *ru, const char *table,
        struct proto_err *err)
{
    char cols[8192], sql[20000];
    size_t n;
    int rc, i, nparams;

    if (store_rollup_columns(cols, sizeof(cols), "") >= sizeof(cols))
        return proto_err_set(err, PROTO_ENOMEM, NULL, "rollup SQL too long");
    snprintf(sql, sizeof(sql), "SELECT id, %s FROM %s WHERE " KEY_WHERE, cols,
             table);
    rc = sqlite3_prepare_v3(store_db(s), sql, -1, SQLITE_PREPARE_PERSISTENT,
                            &ru->get, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "prepare the rollup lookup");

    nparams = 4 + RECEIPT_NCOUNTERS * PER_COUNTER;
    n = (size_t)snprintf(sql, sizeof(sql),
                         "INSERT INTO %s (plan_id, graph_id, model_id, "
                         "requested_backend, executed_backend, source_id, "
                         "bucket, %s) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7",
                         table, cols);
    for (i = 0; i < nparams; i++)
        n += (size_t)snprintf(sql + n, sizeof(sql) - n, ", ?%d", 8 + i);
    snprintf(sql + n, sizeof(sql) - n, ")");
    rc = sqlite3_prepare_v3(store_db(s), sql, -1, SQLITE_PREPARE_PERSISTENT,
                            &ru->put, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "prepare the rollup insert");

    /* The update binds the row id as ?1 and the figures from ?2 on, in the
     * column order of store_rollup_columns(). */
    n = (size_t)snprintf(sql, sizeof(sql),
                         "UPDATE %s SET receipts = ?2, "
                         "fallback = ?3, clean = ?4, "
                         "unproven = ?5",
                         table);
    for (i = 0; i < RECEIPT_NCOUNTERS; i++) {
        const char *f = receipt_counters[i].field;
        int p = 6 + i * PER_COUNTER;
        n += (size_t)snprintf(sql + n, sizeof(sql) - n,
                              ", %s_n = ?%d, %s_lo = ?%d, %s_hi = ?%d, "
                              "%s_min = ?%d, %s_max = ?%d",
                              f, p, f, p + 1, f, p + 2, f, p + 3, f, p + 4);
    }
    snprintf(sql + n, sizeof(sql) - n, " WHERE id = ?1");
    rc = sqlite3_prepare_v3(store_db(s), sql, -1, SQLITE_PREPARE_PERSISTENT,
                            &ru->upd, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "prepare the rollup update");
    return 0;
}

void
store_rollup_free(struct store_rollup *ru)
{
    int i;

    if (ru == NULL)
        return;
    for (i = 0; i < STORE_LEVELS; i++) {
        sqlite3_finalize(ru->lv[i].get);
        sqlite3_finalize(ru->lv[i].put);
        sqlite3_finalize(ru->lv[i].upd);
    }
    free(ru->txn);
    free(ru->slots);
    free(ru);
}

static void
bind_key(sqlite3_stmt *st, const struct store_rollup_key *k, int64_t ms)
{
    sqlite3_bind_int64(st, 1, k->plan_id);
    sqlite3_bind_int64(st, 2, k->graph_id);
    sqlite3_bind_int64(st, 3, k->model_id);
    sqlite3_bind_int(st, 4, k->requested);
    sqlite3_bind_int(st, 5, k->executed);
    sqlite3_bind_int64(st, 6, k->source_id);
    sqlite3_bind_int64(st, 7, k->received_at / ms);
}

static int
key_eq(const struct store_rollup_key *a, const struct store_rollup_key *b)
{
    return a->plan_id == b->plan_id && a->graph_id == b->graph_id &&
           a->model_id == b->model_id && a->source_id == b->source_id &&
           a->requested == b->requested && a->executed == b->executed &&
           a->received_at == b->received_at;
}

/* Merges one pending key into its row: read, add, write back. */
static int
write_pending(struct store *s, const struct level *ru, int64_t ms,
              const struct pending *p, struct proto_err *err)
{
    struct store_agg_group g;
    int64_t id = 0;
    sqlite3_stmt *st;
    int rc, i;

    memset(&g, 0, sizeof(g));
    st = ru->get;
    bind_key(st, &p->k, ms);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        id = sqlite3_column_int64(st, 0);
        store_rollup_read(st, 1, &g);
        rc = SQLITE_DONE;
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return store_fail(s, rc, err, "read a rollup");
    g.receipts += p->g.receipts;
    g.fallback += p->g.fallback;
    g.clean += p->g.clean;
    g.unproven += p->g.unproven;
    for (i = 0; i < RECEIPT_NCOUNTERS; i++)
        store_agg_counter_merge(&g.c[i], &p->g.c[i]);
    if (id != 0) {
        st = ru->upd;
        sqlite3_bind_int64(st, 1, id);
        bind_figures(st, 2, &g);
    } else {
        st = ru->put;
        bind_key(st, &p->k, ms);
        bind_figures(st, 8, &g);
    }
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc != SQLITE_DONE)
        return store_fail(s, rc, err, "update a rollup");
    return 0;
}

/* Writes n pending sums into both tables. */
static int
write_all(struct store *s, struct store_rollup *ru, const struct pending *p,
          int n, struct proto_err *err)
{
    int i, l, rc = 0;

    for (i = 0; i < n && rc == 0; i++)
        for (l = 0; l < STORE_LEVELS && rc == 0; l++)
            rc = write_pending(s, &ru->lv[l], levels[l].ms, &p[i], err);
    return rc;
}

static void
clear_txn(struct store_rollup *ru)
{
    int i;

    for (i = 0; i < TXN_SLOTS; i++)
        ru->slots[i] = -1;
    ru->n_txn = 0;
}

static size_t
key_slot(const struct store_rollup_key *k)
{
    uint64_t h = (uint64_t)k->plan_id * 0x9e3779b97f4a7c15ull;

    h = (h ^ (uint64_t)k->graph_id) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (uint64_t)k->model_id) * 0x94d049bb133111ebull;
    h = (h ^ (uint64_t)k->source_id) * 0x9e3779b97f4a7c15ull;
    h = (h ^ (uint64_t)(k->requested * 16 + k->executed)) *
        0xbf58476d1ce4e5b9ull;
    h = (h ^ (uint64_t)k->received_at) * 0x94d049bb133111ebull;
    return (size_t)(h >> 32) & (TXN_SLOTS - 1);
}

int
store_rollup_flush(struct store *s, struct store_rollup *ru,
                   struct proto_err *err)
{
    int rc;

    if (ru == NULL)
        return 0;
    rc = write_all(s, ru, ru->txn, ru->n_txn, err);
    /* On failure the caller rolls the transaction back, rows and rollups
     * alike, so what was pending is dropped either way. */
    clear_txn(ru);
    return rc;
}

void
store_rollup_discard_all(struct store_rollup *ru)
{
    if (ru != NULL)
        clear_txn(ru);
}

int
store_rollup_full(const struct store_rollup *ru)
{
    return ru != NULL && ru->n_txn >= TXN_MAX;
}

int
store_rollup_add(struct store *s, struct store_rollup **rup,
                 const struct store_rollup_key *k, const struct receipt *r,
                 struct proto_err *err)
{
    struct store_rollup *ru = *rup;
    struct store_rollup_key bk = *k;
    struct pending *p;
    uint64_t bits;
    int rc, i, status;
    size_t j;

    if (ru == NULL) {
        ru = calloc(1, sizeof(*ru));
        if (ru == NULL)
            return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        ru->txn = malloc(TXN_MAX * sizeof(*ru->txn));
        ru->slots = malloc(TXN_SLOTS * sizeof(*ru->slots));
        if (ru->txn == NULL || ru->slots == NULL) {
            store_rollup_free(ru);
            return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        }
        clear_txn(ru);
        for (i = 0; i < STORE_LEVELS; i++)
            if ((rc = prepare(s, &ru->lv[i], levels[i].table, err)) != 0) {
                store_rollup_free(ru);
                return rc;
            }
        *rup = ru;
    }
    /* Receipts of one write share their time and source and mostly their
     * model, plan and backends: summing them here first turns a chunk into
     * one row update per key instead of one per receipt. */
    bk.received_at = k->received_at / STORE_BUCKET_MS * STORE_BUCKET_MS;
    j = key_slot(&bk);
    while (ru->slots[j] >= 0 && !key_eq(&ru->txn[ru->slots[j]].k, &bk))
        j = (j + 1) & (TXN_SLOTS - 1);
    if (ru->slots[j] >= 0) {
        p = &ru->txn[ru->slots[j]];
    } else {
        /* The tail checks store_rollup_full() before every receipt. */
        assert(ru->n_txn < TXN_MAX);
        if (ru->n_txn >= TXN_MAX)
            return proto_err_set(err, PROTO_ENOMEM, NULL,
                                 "too many rollup keys in memory");
        ru->slots[j] = ru->n_txn;
        p = &ru->txn[ru->n_txn++];
        memset(p, 0, sizeof(*p));
        p->k = bk;
    }
    status = receipt_status(r);
    p->g.receipts++;
    p->g.fallback += status == RECEIPT_STATUS_FALLBACK;
    p->g.clean += status == RECEIPT_STATUS_CLEAN;
    p->g.unproven += status == RECEIPT_STATUS_UNPROVEN;
    /* Bits beyond the receipt's schema are kept in the receipt but mean
     * nothing, so they count as neither measured nor a value. */
    bits = r->counter_coverage & receipt_meaningful_bits(r->schema_version);
    for (i = 0; i < RECEIPT_NCOUNTERS; i++)
        if (bits >> i & 1)
            store_agg_counter_add(&p->g.c[i], r->counters[i]);
    return 0;
}
