/*
 * store_query_prune.c: the `prunes` query, what retention removed and when.
 *
 * Runs on a query thread with its read-only connection. The records of
 * migrations/0005 are read newest first by their id (the order in which
 * the writer added them), at most f->limit plus one to learn whether more
 * matched; query.c packs them. A progress handler interrupts SQLite past the
 * deadline.
 */
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"
#include "store_sqlite.h"
#include "store_prune.h"

/* One record into recs[*n] (store_query_rows stops at the limit). */
static int
prune_row_cb(sqlite3_stmt *st, void *recs, void *n)
{
    struct store_prune_rec *r = &((struct store_prune_rec *)recs)[*(size_t *)n];

    r->id = sqlite3_column_int64(st, 0);
    r->pruned_at = sqlite3_column_int64(st, 1);
    r->cutoff = sqlite3_column_int64(st, 2);
    r->rows = sqlite3_column_int64(st, 3);
    r->oldest = sqlite3_column_int64(st, 4);
    r->newest = sqlite3_column_int64(st, 5);
    r->undelivered = sqlite3_column_int64(st, 6);
    ++*(size_t *)n;
    return 0;
}

int
store_sqlite_query_prunes(struct store *s, const struct store_filter *f,
                          uint64_t deadline_ms, struct store_prune_rec **out,
                          size_t *nout, int *truncated, struct proto_err *err)
{
    struct store_prune_rec *recs;
    sqlite3_stmt *st = NULL;
    size_t n = 0;
    int rc;

    *out = NULL;
    *nout = 0;
    *truncated = 0;
    if (f->limit < 1 || f->limit > 10000)
        return proto_err_set(err, PROTO_EINVALID, "limit",
                             "limit is outside 1..10000");
    /* The limit is bounded above, so this is at most about 480 KiB. */
    recs = malloc((size_t)f->limit * sizeof(*recs));
    if (recs == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    rc = sqlite3_prepare_v2(
        store_db(s),
        "SELECT id, pruned_at, cutoff, rows, oldest, "
        "newest, undelivered FROM prunes WHERE pruned_at >= ?1 AND "
        "pruned_at < ?2 ORDER BY id DESC LIMIT ?3",
        -1, &st, NULL);
    if (rc != SQLITE_OK) {
        free(recs);
        return store_fail(s, rc, err, "prepare the prunes query");
    }
    /* since and until are u64 on the wire; beyond INT64_MAX they mean
     * "no bound" for a column of unix milliseconds. */
    sqlite3_bind_int64(st, 1,
                       f->has_since && f->since <= INT64_MAX
                           ? (int64_t)f->since
                           : (f->has_since ? INT64_MAX : INT64_MIN));
    sqlite3_bind_int64(st, 2,
                       f->has_until && f->until <= INT64_MAX ? (int64_t)f->until
                                                             : INT64_MAX);
    sqlite3_bind_int64(st, 3, (int64_t)f->limit + 1);
    rc = store_query_rows(s, st, f->limit, deadline_ms, prune_row_cb, recs, &n,
                          truncated, err);
    if (rc != 0) {
        free(recs);
        return rc;
    }
    *out = recs;
    *nout = n;
    return 0;
}
