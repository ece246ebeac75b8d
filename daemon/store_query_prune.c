/*
 * store_query_prune.c: the `prunes` query, what retention removed and when.
 *
 * Runs on a query thread with its read-only connection. The records of
 * migrations/0005 are read newest first by their id (the order in which
 * the writer added them), at most f->limit plus one to learn whether more
 * matched, and packed only once all were read, because the array header
 * needs the count. A progress handler interrupts SQLite past the deadline.
 */
#include <stdlib.h>
#include <string.h>

#include "envelope.h"
#include "store_internal.h"
#include "store_prune.h"

struct prune_rec {
    int64_t id, pruned_at, cutoff, rows, oldest, newest;
};

static int
progress_cb(void *arg)
{
    const uint64_t *deadline = arg;

    return *deadline != 0 && store_now_ms() > *deadline;
}

static int
pack_rec(msgpack_packer *pk, const struct prune_rec *r)
{
    static const char *const keys[6] = {
        "id",   "pruned_at",          "cutoff_at",
        "rows", "oldest_received_at", "newest_received_at"
    };
    const int64_t v[6] = { r->id,   r->pruned_at, r->cutoff,
                           r->rows, r->oldest,    r->newest };
    int i;

    if (msgpack_pack_map(pk, 6) != 0)
        return -1;
    for (i = 0; i < 6; i++)
        if (envelope_pack_cstr(pk, keys[i]) != 0 ||
            msgpack_pack_int64(pk, v[i]) != 0)
            return -1;
    return 0;
}

int
store_query_prunes(struct store *s, const struct store_filter *f,
                   uint64_t deadline_ms, msgpack_packer *pk,
                   struct proto_err *err)
{
    struct prune_rec *recs;
    sqlite3_stmt *st = NULL;
    size_t n = 0, i;
    int rc, truncated;

    if (f->limit < 1 || f->limit > 10000)
        return proto_err_set(err, PROTO_EINVALID, "limit",
                             "limit is outside 1..10000");
    /* The limit is bounded above, so this is at most about 480 KiB. */
    recs = malloc(((size_t)f->limit + 1) * sizeof(*recs));
    if (recs == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    rc = sqlite3_prepare_v2(store_db(s),
                            "SELECT id, pruned_at, cutoff, rows, oldest, "
                            "newest FROM prunes WHERE pruned_at >= ?1 AND "
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
    *store_deadline(s) = deadline_ms;
    sqlite3_progress_handler(store_db(s), 1000, progress_cb, store_deadline(s));
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct prune_rec *r = &recs[n++];

        r->id = sqlite3_column_int64(st, 0);
        r->pruned_at = sqlite3_column_int64(st, 1);
        r->cutoff = sqlite3_column_int64(st, 2);
        r->rows = sqlite3_column_int64(st, 3);
        r->oldest = sqlite3_column_int64(st, 4);
        r->newest = sqlite3_column_int64(st, 5);
    }
    sqlite3_progress_handler(store_db(s), 0, NULL, NULL);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        free(recs);
        return store_fail(s, rc, err, "read the prune records");
    }
    truncated = n > f->limit;
    if (truncated)
        n = f->limit;
    rc = msgpack_pack_map(pk, 2) != 0 || envelope_pack_cstr(pk, "rows") != 0 ||
         msgpack_pack_array(pk, (uint32_t)n) != 0;
    for (i = 0; i < n && rc == 0; i++)
        rc = pack_rec(pk, &recs[i]) != 0;
    if (rc == 0)
        rc = envelope_pack_cstr(pk, "truncated") != 0 ||
             (truncated ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) != 0;
    free(recs);
    if (rc != 0)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    return 0;
}
