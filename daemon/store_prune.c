/*
 * store_prune.c: retention pruning, one bounded batch per call.
 *
 * Runs on the writer thread only, with the read-write store and no
 * transaction open (the writer calls it in its quiet moments, between
 * group commits). A batch selects the oldest due receipts below tail_from
 * (the tail is not in the rollups yet, and is never pruned) in id order,
 * within the chunks whose times reach below the cutoff, and deletes them.
 * Then each hour rollup row they counted in is rewritten from the receipts
 * left in its hour: one rowid range scan (the chunks of that hour) per hour
 * touched, summing only the touched keys. Min and max cannot be subtracted, and
 * recomputing the whole row costs the same scan while keeping counts and
 * 128-bit sums exact by construction, so nothing is subtracted. Each day row
 * touched is then the merge of its (already rewritten) hour rows, at most 24
 * index rows, so no day of receipts is ever rescanned. Rows left empty are
 * deleted. All of it, the postings and chunks the batch emptied, and the
 * `prunes` record, happens in one transaction: a failure rolls everything back
 * and the rollups remain exactly the sum of the stored receipts below
 * tail_from. A chunk only partly pruned keeps its postings; a query skips the
 * ids whose receipts are gone.
 *
 * Dedupe records are never pruned: a producer that resends a pruned
 * (source, seq) must still be told it is a duplicate, not store it again.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store_agg.h"
#include "clock.h"
#include "store_internal.h"
#include "store_sqlite.h"
#include "store_relay.h"
#include "store_rollup.h"
#include "store_row.h"
#include "store_tail.h"
#include "store_prune.h"

/* One removed receipt, reduced to what locates its rollup rows. */
struct victim {
    int64_t id;
    struct store_rollup_key k; /* received_at: the receipt's own */
};

static const struct {
    const char *table;
    int64_t ms;
} prune_levels[STORE_LEVELS] = {
    { "rollups", STORE_BUCKET_MS },
    { "rollups_day", STORE_DAY_MS },
};

static int
key_cmp_cb(const void *pa, const void *pb)
{
    const struct store_rollup_key *a = pa, *b = pb;

#define CMP(f)                                                                 \
    if (a->f != b->f)                                                          \
        return a->f < b->f ? -1 : 1;
    CMP(received_at)
    CMP(plan_id)
    CMP(graph_id)
    CMP(model_id)
    CMP(source_id)
    CMP(requested)
    CMP(executed)
#undef CMP
    return 0;
}

static void
bind_key(sqlite3_stmt *st, const struct store_rollup_key *k)
{
    sqlite3_bind_int64(st, 1, k->plan_id);
    sqlite3_bind_int64(st, 2, k->graph_id);
    sqlite3_bind_int64(st, 3, k->model_id);
    sqlite3_bind_int(st, 4, k->requested);
    sqlite3_bind_int(st, 5, k->executed);
    sqlite3_bind_int64(st, 6, k->source_id);
}

#define KEY_WHERE                                                              \
    "plan_id = ?1 AND graph_id = ?2 AND model_id = ?3 AND "                    \
    "requested_backend = ?4 AND executed_backend = ?5 AND source_id = ?6"

/* Sums the receipts in [lo, hi) whose keys are among keys[0..n) (sorted,
 * all of bucket lo / ms) into g[0..n): one rowid range scan per bucket,
 * however many keys it touched. */
static int
recompute(struct store *s, sqlite3_stmt *scan,
          const struct store_rollup_key *keys, size_t n, int64_t bucket,
          int64_t lo, int64_t hi, struct store_agg_group *g,
          struct proto_err *err)
{
    int rc, i;

    memset(g, 0, n * sizeof(*g));
    sqlite3_bind_int64(scan, 1, lo);
    sqlite3_bind_int64(scan, 2, hi);
    while ((rc = sqlite3_step(scan)) == SQLITE_ROW) {
        struct store_rollup_key k;
        const struct store_rollup_key *hit;
        struct store_agg_group *gp;
        int status = sqlite3_column_int(scan, 6);
        unsigned schema = (unsigned)sqlite3_column_int(scan, 7);
        uint64_t bits = (uint64_t)sqlite3_column_int64(scan, 8);

        memset(&k, 0, sizeof(k));
        k.plan_id = sqlite3_column_int64(scan, 0);
        k.graph_id = sqlite3_column_int64(scan, 1);
        k.model_id = sqlite3_column_int64(scan, 2);
        k.requested = sqlite3_column_int(scan, 3);
        k.executed = sqlite3_column_int(scan, 4);
        k.source_id = sqlite3_column_int64(scan, 5);
        k.received_at = bucket;
        hit = bsearch(&k, keys, n, sizeof(*keys), key_cmp_cb);
        if (hit == NULL)
            continue; /* a key this batch did not touch */
        gp = &g[hit - keys];
        gp->receipts++;
        gp->fallback += status == RECEIPT_STATUS_FALLBACK;
        gp->clean += status == RECEIPT_STATUS_CLEAN;
        gp->unproven += status == RECEIPT_STATUS_UNPROVEN;
        gp->schema3 += schema == 3;
        /* The same rule as store_rollup_add: bits beyond the receipt's
         * schema count as neither measured nor a value. */
        bits &= receipt_meaningful_bits(schema);
        if (bits != 0) {
            struct receipt r;

            store_counters_column(scan, 9, &r);
            for (i = 0; i < RECEIPT_NCOUNTERS; i++)
                if (bits >> i & 1)
                    store_agg_counter_add(&gp->c[i], r.counters[i]);
        }
    }
    sqlite3_reset(scan);
    sqlite3_clear_bindings(scan);
    if (rc != SQLITE_DONE)
        return store_fail(s, rc, err, "recompute a rollup");
    return 0;
}

/* Writes g over the rollup row of k and bucket b, or deletes the row when
 * no receipt is left in it. */
static int
rewrite(struct store *s, sqlite3_stmt *upd, sqlite3_stmt *del,
        const struct store_rollup_key *k, int64_t b,
        const struct store_agg_group *g, struct proto_err *err)
{
    sqlite3_stmt *st = g->receipts == 0 ? del : upd;
    unsigned char buf[STORE_ROLLUP_FIGURES_MAX];
    int rc;

    bind_key(st, k);
    sqlite3_bind_int64(st, 7, b);
    if (st == upd)
        store_rollup_bind(st, 8, g, buf);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc != SQLITE_DONE)
        return store_fail(s, rc, err, "rewrite a rollup");
    return 0;
}

/* Sums the hour rows of key k within day d into g. A day row is exactly
 * the merge of its 24 hour rows (counts and sums add, extremes take the
 * extreme), and the hours were rewritten first, so this reads at most 24
 * rows of the rollups_key index instead of a day of receipts. */
static int
day_from_hours(struct store *s, sqlite3_stmt *hours,
               const struct store_rollup_key *k, int64_t d, int64_t days_from,
               struct store_agg_group *g, struct proto_err *err)
{
    const int64_t per_day = STORE_DAY_MS / STORE_BUCKET_MS;
    int64_t end = (d + 1) * per_day;
    int rc;

    /* A day row holds only the hours below days_from (store_rollup.c). */
    if (end > days_from)
        end = days_from;
    memset(g, 0, sizeof(*g));
    bind_key(hours, k);
    sqlite3_bind_int64(hours, 7, d * per_day);
    sqlite3_bind_int64(hours, 8, end);
    while ((rc = sqlite3_step(hours)) == SQLITE_ROW)
        store_rollup_read(hours, 0, g);
    sqlite3_reset(hours);
    sqlite3_clear_bindings(hours);
    if (rc != SQLITE_DONE)
        return store_fail(s, rc, err, "sum a day's hour rollups");
    return 0;
}

static int
prepare(struct store *s, const char *sql, sqlite3_stmt **st,
        struct proto_err *err)
{
    int rc = sqlite3_prepare_v2(store_db(s), sql, -1, st, NULL);

    return rc == SQLITE_OK ? 0 : store_fail(s, rc, err, "prepare a prune");
}

/* Rewrites the rollup rows of one level for the n removed receipts in v
 * (their keys are sorted and deduplicated in keys, n entries of room). */
static int
adjust_level(struct store *s, int l, const struct victim *v, size_t n,
             struct store_rollup_key *keys, int64_t days_from,
             struct proto_err *err)
{
    sqlite3_stmt *scan = NULL, *upd = NULL, *del = NULL, *hours = NULL;
    struct store_agg_group *g = NULL;
    char sql[20000];
    size_t i, e, m = 0, len;
    int64_t ms = prune_levels[l].ms;
    int rc;

    for (i = 0; i < n; i++) {
        keys[i] = v[i].k;
        keys[i].received_at = v[i].k.received_at / ms;
    }
    qsort(keys, n, sizeof(*keys), key_cmp_cb);
    for (i = 0; i < n; i++)
        if (m == 0 || key_cmp_cb(&keys[m - 1], &keys[i]) != 0)
            keys[m++] = keys[i];

    len = (size_t)snprintf(sql, sizeof(sql),
                           "SELECT plan_id, graph_id, model_id, "
                           "requested_backend, executed_backend, source_id, "
                           "status, schema_version, counter_coverage, "
                           "counters");
    /* The chunks end below tail_from: the tail is not in the rollups. */
    snprintf(sql + len, sizeof(sql) - len,
             " FROM receipts WHERE id >= (SELECT coalesce(min(first_id), 0) "
             "FROM chunks WHERE last_at >= ?1 AND first_at < ?2) AND id < "
             "(SELECT coalesce(max(end_id), 0) FROM chunks WHERE last_at >= "
             "?1 AND first_at < ?2) AND received_at >= ?1 AND received_at < "
             "?2");
    if ((rc = prepare(s, sql, &scan, err)) != 0)
        goto out;
    if (l == 1) {
        char cols[8192];

        if (store_rollup_columns(cols, sizeof(cols), "") >= sizeof(cols)) {
            rc = proto_err_set(err, PROTO_ENOMEM, NULL, "SQL too long");
            goto out;
        }
        snprintf(sql, sizeof(sql),
                 "SELECT %s FROM rollups WHERE " KEY_WHERE
                 " AND bucket >= ?7 AND bucket < ?8",
                 cols);
        if ((rc = prepare(s, sql, &hours, err)) != 0)
            goto out;
    }

    len = (size_t)snprintf(sql, sizeof(sql),
                           "UPDATE %s SET receipts = ?8, fallback = ?9, "
                           "clean = ?10, unproven = ?11, figures = ?12, "
                           "schema3 = ?13",
                           prune_levels[l].table);
    snprintf(sql + len, sizeof(sql) - len,
             " WHERE " KEY_WHERE " AND bucket = ?7");
    if ((rc = prepare(s, sql, &upd, err)) != 0)
        goto out;
    snprintf(sql, sizeof(sql),
             "DELETE FROM %s WHERE " KEY_WHERE " AND bucket = ?7",
             prune_levels[l].table);
    if ((rc = prepare(s, sql, &del, err)) != 0)
        goto out;

    /* At most m (<= STORE_PRUNE_MAX_ROWS) groups of about 1 KiB. */
    g = malloc(m * sizeof(*g));
    if (g == NULL) {
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        goto out;
    }
    /* keys is sorted by bucket first: each run of one bucket is summed in
     * one scan, then each of its rows rewritten. */
    for (i = 0; i < m && rc == 0; i = e) {
        int64_t b = keys[i].received_at;
        size_t k;

        for (e = i; e < m && keys[e].received_at == b; e++)
            ;
        if (hours == NULL)
            rc = recompute(s, scan, keys + i, e - i, b, b * ms, (b + 1) * ms, g,
                           err);
        for (k = i; k < e && rc == 0; k++) {
            if (hours != NULL)
                rc = day_from_hours(s, hours, &keys[k], b, days_from, &g[k - i],
                                    err);
            if (rc == 0)
                rc = rewrite(s, upd, del, &keys[k], b, &g[k - i], err);
        }
    }
out:
    free(g);
    sqlite3_finalize(scan);
    sqlite3_finalize(hours);
    sqlite3_finalize(upd);
    sqlite3_finalize(del);
    return rc;
}

/* Selects the batch into v (room for max_rows) and deletes it; with
 * store_opts.relay_drop, *undelivered counts those past the relay's
 * cursor. */
static int
take_batch(struct store *s, int64_t cutoff_ms, uint32_t max_rows,
           struct victim *v, size_t *n, uint64_t *undelivered,
           struct proto_err *err)
{
    sqlite3_stmt *sel = NULL, *del = NULL;
    int64_t cursor = INT64_MAX;
    size_t i;
    int rc;

    *n = 0;
    *undelivered = 0;
    if (store_relay_drops(s) &&
        (rc = store_one_int(s,
                            "SELECT coalesce(max(acked_id), 0) FROM "
                            "relay_cursor WHERE stream = 'receipts'",
                            NULL, 0, 0, 0, &cursor, err,
                            "read the relay cursor")))
        return rc;
    /* Oldest ids first, up to the last chunk that reaches below the cutoff
     * (chunks end below tail_from): received_at follows the clock, so this
     * reads little more than the batch, and a receipt stamped by a clock
     * that stepped back is still taken when it is due. */
    rc = prepare(s,
                 "SELECT id, received_at, plan_id, graph_id, model_id, "
                 "requested_backend, executed_backend, source_id FROM receipts "
                 "WHERE id < (SELECT coalesce(max(end_id), 0) FROM chunks "
                 "WHERE first_at < ?1) AND received_at < ?1 AND (?3 = 0 OR "
                 "id <= (SELECT coalesce(max(acked_id), 0) FROM relay_cursor "
                 "WHERE stream = 'receipts')) ORDER BY id LIMIT ?2",
                 &sel, err);
    if (rc == 0)
        rc = prepare(s, "DELETE FROM receipts WHERE id = ?1", &del, err);
    if (rc != 0)
        goto out;
    sqlite3_bind_int64(sel, 1, cutoff_ms);
    sqlite3_bind_int64(sel, 2, max_rows);
    /* A node that relays keeps what the center has not acknowledged. */
    sqlite3_bind_int(sel, 3, store_relay_waits(s));
    while ((rc = sqlite3_step(sel)) == SQLITE_ROW && *n < max_rows) {
        struct store_rollup_key *k = &v[*n].k;

        k->received_at = sqlite3_column_int64(sel, 1);
        k->plan_id = sqlite3_column_int64(sel, 2);
        k->graph_id = sqlite3_column_int64(sel, 3);
        k->model_id = sqlite3_column_int64(sel, 4);
        k->requested = sqlite3_column_int(sel, 5);
        k->executed = sqlite3_column_int(sel, 6);
        k->source_id = sqlite3_column_int64(sel, 7);
        v[*n].id = sqlite3_column_int64(sel, 0);
        *undelivered += v[*n].id > cursor;
        (*n)++;
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        rc = store_fail(s, rc, err, "select receipts to prune");
        goto out;
    }
    sqlite3_reset(sel);
    /* Deleted after the scan: a table is not changed under its own
     * running SELECT. */
    if (*n > 0)
        store_rows_deleted(s);
    for (i = 0; i < *n; i++) {
        sqlite3_bind_int64(del, 1, v[i].id);
        rc = sqlite3_step(del);
        sqlite3_reset(del);
        if (rc != SQLITE_DONE) {
            rc = store_fail(s, rc, err, "prune receipts");
            goto out;
        }
    }
    rc = 0;
out:
    sqlite3_finalize(sel);
    sqlite3_finalize(del);
    return rc;
}

/* Drops the chunks, and their postings, that no receipt is left in. */
static int
drop_empty_chunks(struct store *s, struct proto_err *err)
{
    static const char *const sql[2] = {
        "DELETE FROM postings WHERE chunk IN (SELECT first_id FROM chunks "
        "WHERE end_id <= (SELECT coalesce(min(id), 1 << 62) FROM receipts))",
        "DELETE FROM chunks WHERE end_id <= (SELECT coalesce(min(id), 1 << 62) "
        "FROM receipts)",
    };
    int i, rc;

    for (i = 0; i < 2; i++)
        if ((rc = store_exec(s, sql[i], err, "drop pruned chunks")))
            return rc;
    return 0;
}

/* The sums of the chunks the batch took receipts from no longer hold
 * (migrations/0014): those chunks are read from their rows from now on.
 * Every such chunk starts at or below the highest id taken. */
static int
drop_chunk_sums(struct store *s, const struct victim *v, size_t n,
                struct proto_err *err)
{
    sqlite3_stmt *st = NULL;
    int64_t top = 0;
    size_t i;
    int rc;

    for (i = 0; i < n; i++)
        if (v[i].id > top)
            top = v[i].id;
    if ((rc = prepare(s, "DELETE FROM chunk_sums WHERE chunk <= ?1", &st, err)))
        return rc;
    sqlite3_bind_int64(st, 1, top);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : store_fail(s, rc, err, "prune chunk sums");
}

/* Unix milliseconds: the clock of received_at (store_now_ms() is the
 * monotonic one, for deadlines). */
static int
record(struct store *s, int64_t cutoff_ms, const struct store_prune_result *r,
       struct proto_err *err)
{
    sqlite3_stmt *st = NULL;
    int rc = prepare(s,
                     "INSERT INTO prunes (pruned_at, cutoff, rows, oldest, "
                     "newest, undelivered) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                     &st, err);

    if (rc != 0)
        return rc;
    sqlite3_bind_int64(st, 1, (int64_t)unix_ms());
    sqlite3_bind_int64(st, 2, cutoff_ms);
    sqlite3_bind_int64(st, 3, (int64_t)r->rows);
    sqlite3_bind_int64(st, 4, r->oldest);
    sqlite3_bind_int64(st, 5, r->newest);
    sqlite3_bind_int64(st, 6, (int64_t)r->undelivered);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : store_fail(s, rc, err, "record a prune");
}

int
store_sqlite_prune(struct store *s, int64_t cutoff_ms, uint32_t max_rows,
                   struct store_prune_result *out, struct proto_err *err)
{
    struct victim *v = NULL;
    struct store_rollup_key *keys = NULL;
    int64_t days_from = 0;
    uint64_t undelivered = 0;
    size_t n = 0;
    int rc, l;

    memset(out, 0, sizeof(*out));
    if (max_rows == 0 || max_rows > STORE_PRUNE_MAX_ROWS)
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "prune batch must be 1..%d rows",
                             STORE_PRUNE_MAX_ROWS);
    /* max_rows is bounded above, so these are at most a few MiB. */
    v = malloc((size_t)max_rows * sizeof(*v));
    keys = malloc((size_t)max_rows * sizeof(*keys));
    if (v == NULL || keys == NULL) {
        free(v);
        free(keys);
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    }
    if ((rc = store_begin(s, err)) != 0)
        goto out;
    /* Only chunks are pruned: a tail holding a due receipt (a daemon that
     * receives less than a chunk per retention age) becomes one first. */
    if (store_tail_of(s) != NULL &&
        store_tail_holds_before(store_tail_of(s), cutoff_ms))
        rc = store_tail_flush(s, store_tail_of(s), err);
    /* The rollup rows it rewrites must hold every chunk whole. */
    if (rc == 0)
        rc = store_rollup_seal_all(s, *store_rollups(s), err);
    if (rc == 0)
        rc = take_batch(s, cutoff_ms, max_rows, v, &n, &undelivered, err);
    if (rc == 0)
        rc = store_counter(s, "days_from", 0, &days_from, err);
    if (rc == 0 && n == 0) {
        /* Nothing due: an empty transaction, and no record. */
        rc = store_commit(s, err);
        goto out;
    }
    for (l = 0; l < STORE_LEVELS && rc == 0; l++)
        rc = adjust_level(s, l, v, n, keys, days_from, err);
    if (rc == 0)
        rc = drop_empty_chunks(s, err);
    if (rc == 0)
        rc = drop_chunk_sums(s, v, n, err);
    if (rc == 0) {
        size_t i;

        out->rows = n;
        out->oldest = out->newest = v[0].k.received_at;
        for (i = 1; i < n; i++) {
            if (v[i].k.received_at < out->oldest)
                out->oldest = v[i].k.received_at;
            if (v[i].k.received_at > out->newest)
                out->newest = v[i].k.received_at;
        }
        out->more = n == max_rows;
        out->undelivered = undelivered;
        rc = record(s, cutoff_ms, out, err);
    }
    if (rc == 0)
        rc = store_commit(s, err);
out:
    if (rc != 0) {
        store_rollback(s);
        memset(out, 0, sizeof(*out));
    }
    free(v);
    free(keys);
    return rc;
}

int
store_sqlite_prune_newest(struct store *s, int64_t *ms, struct proto_err *err)
{
    /* Ids are assigned in commit order, so the newest is the last row of
     * the table: one seek, whatever the clock did to received_at. */
    return store_one_int(s,
                         "SELECT received_at FROM receipts ORDER BY id DESC "
                         "LIMIT 1",
                         NULL, 0, 0, INT64_MIN, ms, err,
                         "read the newest receipt's time");
}
