/*
 * store_query_gaps.c: the `gaps` walk (store_agg.h).
 *
 * A source's recorded seqs live in three places: the `dedupe` table
 * (batches, plans, retention specs, and `receipt` writes recorded before
 * migrations/0009), the seq runs of `receipt` writes, one row per source
 * and chunk (store_seq.h), and the tail's rows, whose records are still in
 * the writer's memory. The walk merges the three in unsigned order: the
 * seqs below 2^63 first, then those stored negative. Runs are opened when
 * the walk reaches their lowest seq, so memory holds the runs that
 * overlap, not a source's seqs.
 *
 * Runs on a query thread with a read-only store, in one read transaction,
 * under the query's deadline.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store_agg.h"
#include "store_internal.h"
#include "store_seq.h"

struct walk {
    struct store_gap g;
    uint64_t (*ranges)[2];
    size_t cap;
    int any;
    uint64_t prev;
};

static void
walk_seq(struct walk *w, uint64_t v)
{
    /* A seq two places hold (a batch's rows are in the tail and its
     * record in the dedupe table) is one write. */
    if (w->any && v == w->prev)
        return;
    if (!w->any) {
        w->any = 1;
        w->g.first_seq = v;
    } else if (v > w->prev + 1) {
        w->g.missing += v - w->prev - 1;
        if (w->g.n_ranges < w->cap) {
            w->ranges[w->g.n_ranges][0] = w->prev + 1;
            w->ranges[w->g.n_ranges][1] = v - 1;
            w->g.n_ranges++;
        } else {
            w->g.ranges_truncated = 1;
        }
    }
    w->prev = v;
    w->g.last_seq = v;
    w->g.received++;
}

/* The seqs of the tail's rows, whose `receipt` records are not written
 * yet (store_tail.c): sorted by source, then seq as stored. */
struct tail_seqs {
    struct {
        int64_t source_id, seq;
    } * v;
    size_t n;
};

static int
load_tail_seqs(struct store *s, struct tail_seqs *ts, struct proto_err *err)
{
    sqlite3_stmt *st;
    int64_t from;
    size_t cap = 0;
    int rc;

    memset(ts, 0, sizeof(*ts));
    if ((rc = store_counter(s, "tail_from", 1, &from, err)))
        return rc;
    rc = sqlite3_prepare_v2(
        store_db(s),
        "SELECT source_id, seq FROM receipts WHERE id >= ?1 AND seq IS NOT "
        "NULL AND source_id <> coalesce((SELECT id FROM strings WHERE value "
        "= x''), 0) ORDER BY source_id, seq",
        -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "prepare a query");
    sqlite3_bind_int64(st, 1, from);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (ts->n == cap) {
            void *nv;

            cap = cap ? cap * 2 : 256;
            if ((nv = realloc(ts->v, cap * sizeof(*ts->v))) == NULL) {
                sqlite3_finalize(st);
                return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
            }
            ts->v = nv;
        }
        ts->v[ts->n].source_id = sqlite3_column_int64(st, 0);
        ts->v[ts->n].seq = sqlite3_column_int64(st, 1);
        ts->n++;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : store_fail(s, rc, err, "run a query");
}

/* The index of the first tail seq of a source at or after source_id. */
static size_t
tail_first(const struct tail_seqs *ts, int64_t source_id)
{
    size_t lo = 0, hi = ts->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (ts->v[mid].source_id < source_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

enum {
    GS_NEXT,      /* the next source with seqs in the dedupe table */
    GS_NEXT_RUNS, /* ... in the runs */
    GS_BYNAME,    /* the string id of the filter's source */
    GS_NAME,
    GS_WALK_LOW, /* the dedupe table's seqs of a source, by half */
    GS_WALK_HIGH,
    GS_RUNS,    /* the runs of a source that reach into a half, by lo */
    GS_ENTRIES, /* one run's entries */
    GS_COUNT
};

static const char *const gaps_sql[GS_COUNT] = {
    [GS_NEXT] = "SELECT min(source_id) FROM dedupe WHERE source_id > ?1",
    [GS_NEXT_RUNS] = "SELECT min(source_id) FROM seq_runs WHERE source_id > "
                     "?1",
    [GS_BYNAME] = "SELECT id FROM strings WHERE value = ?1",
    [GS_NAME] = "SELECT value FROM strings WHERE id = ?1",
    [GS_WALK_LOW] = "SELECT seq FROM dedupe WHERE source_id = ?1 AND seq >= 0 "
                    "ORDER BY seq",
    [GS_WALK_HIGH] = "SELECT seq FROM dedupe WHERE source_id = ?1 AND seq < 0 "
                     "ORDER BY seq",
    [GS_RUNS] = "SELECT lo, hi, chunk FROM seq_runs WHERE source_id = ?1 AND "
                "hi >= ?2 AND lo <= ?3 ORDER BY lo",
    [GS_ENTRIES] = "SELECT entries FROM seq_runs WHERE source_id = ?1 AND "
                   "hi = ?2 AND chunk = ?3",
};

/* One run the walk has reached: a copy of its entries and a cursor. */
struct open_run {
    unsigned char *blob;
    struct store_seq_run c;
    int64_t cur; /* its next seq in the half */
};

/* The runs of one source within one half [min, max] of the signed seqs,
 * merged: headers by lo, each opened when the walk reaches its lo. */
struct runs {
    sqlite3_stmt *const *st;
    int64_t source_id, min, max;
    struct {
        int64_t lo, hi, chunk;
    } * h;
    size_t nh, caph, next;
    struct open_run *open;
    size_t nopen, capopen;
};

static void
runs_close(struct runs *r, size_t i)
{
    free(r->open[i].blob);
    r->open[i] = r->open[--r->nopen];
}

/* Moves run i to its next seq in the half; closes it at the end. */
static int
runs_advance(struct runs *r, size_t i)
{
    struct store_seq_entry e;
    int got;

    while ((got = store_seq_run_next(&r->open[i].c, &e)) == 1 && e.seq < r->min)
        ;
    if (got < 0)
        return SQLITE_CORRUPT;
    if (got == 0 || e.seq > r->max)
        runs_close(r, i);
    else
        r->open[i].cur = e.seq;
    return 0;
}

static int
runs_open_next(struct runs *r)
{
    sqlite3_stmt *st = r->st[GS_ENTRIES];
    struct open_run *o;
    size_t n;
    int rc;

    if (r->nopen == r->capopen) {
        size_t cap = r->capopen ? r->capopen * 2 : 4;
        void *nv = realloc(r->open, cap * sizeof(*r->open));

        if (nv == NULL)
            return SQLITE_NOMEM;
        r->open = nv;
        r->capopen = cap;
    }
    sqlite3_bind_int64(st, 1, r->source_id);
    sqlite3_bind_int64(st, 2, r->h[r->next].hi);
    sqlite3_bind_int64(st, 3, r->h[r->next].chunk);
    if ((rc = sqlite3_step(st)) != SQLITE_ROW) {
        sqlite3_reset(st);
        return rc == SQLITE_DONE ? SQLITE_CORRUPT : rc;
    }
    o = &r->open[r->nopen];
    n = (size_t)sqlite3_column_bytes(st, 0);
    if ((o->blob = malloc(n ? n : 1)) == NULL) {
        sqlite3_reset(st);
        return SQLITE_NOMEM;
    }
    memcpy(o->blob, sqlite3_column_blob(st, 0), n);
    sqlite3_reset(st);
    if (store_seq_run_init(&o->c, o->blob, n, r->h[r->next].chunk,
                           r->h[r->next].lo) != 0) {
        free(o->blob);
        return SQLITE_CORRUPT;
    }
    r->nopen++;
    r->next++;
    return runs_advance(r, r->nopen - 1);
}

/* The next seq of the runs into *v: 1, 0 when none is left, or an SQLite
 * error. Equal seqs of overlapping runs come one after the other. */
static int
runs_next(struct runs *r, int64_t *v)
{
    size_t i, best;
    int rc;

    for (;;) {
        best = r->nopen;
        for (i = 0; i < r->nopen; i++)
            if (best == r->nopen || r->open[i].cur < r->open[best].cur)
                best = i;
        if (r->next < r->nh &&
            (best == r->nopen || r->h[r->next].lo <= r->open[best].cur)) {
            if ((rc = runs_open_next(r)) != 0)
                return rc;
            continue;
        }
        if (best == r->nopen)
            return 0;
        *v = r->open[best].cur;
        return runs_advance(r, best) == 0 ? 1 : SQLITE_CORRUPT;
    }
}

static int
runs_load(struct runs *r)
{
    sqlite3_stmt *st = r->st[GS_RUNS];
    int rc;

    r->nh = r->next = 0;
    sqlite3_bind_int64(st, 1, r->source_id);
    sqlite3_bind_int64(st, 2, r->min);
    sqlite3_bind_int64(st, 3, r->max);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (r->nh == r->caph) {
            size_t cap = r->caph ? r->caph * 2 : 16;
            void *nv = realloc(r->h, cap * sizeof(*r->h));

            if (nv == NULL) {
                rc = SQLITE_NOMEM;
                break;
            }
            r->h = nv;
            r->caph = cap;
        }
        r->h[r->nh].lo = sqlite3_column_int64(st, 0);
        r->h[r->nh].hi = sqlite3_column_int64(st, 1);
        r->h[r->nh].chunk = sqlite3_column_int64(st, 2);
        r->nh++;
    }
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? 0 : rc;
}

static void
runs_free(struct runs *r)
{
    while (r->nopen > 0)
        runs_close(r, 0);
    free(r->open);
    free(r->h);
}

/* One source: each half merged from the dedupe table, the runs and the
 * tail, in signed order within the half. */
static int
walk_source(struct store *s, sqlite3_stmt *const *st, int64_t source_id,
            const struct tail_seqs *ts, struct walk *w, struct proto_err *err)
{
    size_t first = tail_first(ts, source_id), end = first, neg;
    struct runs r;
    int k, rc = 0;

    memset(&r, 0, sizeof(r));
    r.st = st;
    r.source_id = source_id;
    while (end < ts->n && ts->v[end].source_id == source_id)
        end++;
    /* The tail's run is in signed order: the negative ones come first. */
    for (neg = first; neg < end && ts->v[neg].seq < 0; neg++)
        ;
    for (k = 0; k < 2 && rc == 0; k++) {
        sqlite3_stmt *dst = st[k == 0 ? GS_WALK_LOW : GS_WALK_HIGH];
        size_t t = k == 0 ? neg : first, te = k == 0 ? end : neg;
        int64_t dv = 0, rv = 0;
        int hd, hr;

        r.min = k == 0 ? 0 : INT64_MIN;
        r.max = k == 0 ? INT64_MAX : -1;
        if ((rc = runs_load(&r)) != 0)
            break;
        sqlite3_bind_int64(dst, 1, source_id);
        hd = (rc = sqlite3_step(dst)) == SQLITE_ROW;
        if (hd)
            dv = sqlite3_column_int64(dst, 0);
        hr = rc == SQLITE_ROW || rc == SQLITE_DONE ? runs_next(&r, &rv) : 0;
        while (rc == SQLITE_ROW || rc == SQLITE_DONE) {
            int64_t v;

            if (hr < 0 || hr > 1) {
                rc = hr;
                break;
            }
            /* The least of the three heads. */
            if (hd && (!hr || dv <= rv) && (t == te || dv <= ts->v[t].seq)) {
                v = dv;
                hd = (rc = sqlite3_step(dst)) == SQLITE_ROW;
                if (hd)
                    dv = sqlite3_column_int64(dst, 0);
            } else if (hr && (t == te || rv <= ts->v[t].seq)) {
                v = rv;
                hr = runs_next(&r, &rv);
            } else if (t < te) {
                v = ts->v[t++].seq;
            } else {
                rc = SQLITE_DONE;
                break;
            }
            walk_seq(w, (uint64_t)v);
        }
        sqlite3_reset(dst);
        rc = rc == SQLITE_DONE ? 0 : rc;
    }
    runs_free(&r);
    if (rc == SQLITE_NOMEM)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    return rc == 0 ? 0 : store_fail(s, rc, err, "walk the seqs of a source");
}

/* Whether a source has recorded seqs anywhere. */
static int
has_seqs(sqlite3_stmt *const *st, const struct tail_seqs *ts, int64_t id)
{
    size_t t = tail_first(ts, id);
    int k, any = 0;

    if (t < ts->n && ts->v[t].source_id == id)
        return 1;
    for (k = 0; k < 2 && !any; k++) {
        sqlite3_stmt *q = st[k == 0 ? GS_NEXT : GS_NEXT_RUNS];

        sqlite3_bind_int64(q, 1, id - 1);
        any = sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int64(q, 0) == id;
        sqlite3_reset(q);
    }
    return any;
}

/* The next source id after prev (the filter's only source when f->source);
 * 0 when there is none. */
static int
next_source(struct store *s, sqlite3_stmt *const *st,
            const struct store_filter *f, const struct tail_seqs *ts,
            int64_t prev, int64_t *id, struct proto_err *err)
{
    size_t t;
    int k, rc = SQLITE_DONE;

    *id = 0;
    if (f->source) {
        sqlite3_stmt *q = st[GS_BYNAME];
        int64_t sid = 0;

        if (prev != 0)
            return 0;
        sqlite3_bind_blob(q, 1, f->source_len ? f->source : "",
                          (int)f->source_len, SQLITE_STATIC);
        rc = sqlite3_step(q);
        if (rc == SQLITE_ROW)
            sid = sqlite3_column_int64(q, 0);
        sqlite3_reset(q);
        if (rc != SQLITE_ROW && rc != SQLITE_DONE)
            return store_fail(s, rc, err, "find a source");
        if (sid != 0 && has_seqs(st, ts, sid))
            *id = sid;
        return 0;
    }
    for (k = 0; k < 2; k++) {
        sqlite3_stmt *q = st[k == 0 ? GS_NEXT : GS_NEXT_RUNS];

        sqlite3_bind_int64(q, 1, prev);
        rc = sqlite3_step(q);
        if (rc == SQLITE_ROW) {
            int64_t v = sqlite3_column_int64(q, 0);

            if (sqlite3_column_type(q, 0) != SQLITE_NULL &&
                (*id == 0 || v < *id))
                *id = v;
            rc = SQLITE_DONE;
        }
        sqlite3_reset(q);
        if (rc != SQLITE_DONE)
            return store_fail(s, rc, err, "find a source");
    }
    t = tail_first(ts, prev + 1);
    if (t < ts->n && (*id == 0 || ts->v[t].source_id < *id))
        *id = ts->v[t].source_id;
    return 0;
}

int
store_query_gaps(struct store *s, const struct store_filter *f,
                 uint64_t deadline_ms, store_gap_cb cb, void *arg,
                 int *truncated, struct proto_err *err)
{
    sqlite3_stmt *st[GS_COUNT] = { 0 };
    struct tail_seqs ts = { NULL, 0 };
    struct walk w;
    int64_t id = 0;
    uint32_t got = 0;
    int rc = 0, i;

    *truncated = 0;
    memset(&w, 0, sizeof(w));
    w.cap = f->limit;
    w.ranges = malloc(w.cap * sizeof(*w.ranges));
    if (w.ranges == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    store_deadline_arm(s, deadline_ms);
    if ((rc = store_exec(s, "BEGIN", err, "begin a read")) != 0)
        goto out;
    for (i = 0; i < GS_COUNT; i++) {
        int prc =
            sqlite3_prepare_v2(store_db(s), gaps_sql[i], -1, &st[i], NULL);
        if (prc != SQLITE_OK) {
            rc = store_fail(s, prc, err, "prepare a query");
            goto end;
        }
    }
    if ((rc = load_tail_seqs(s, &ts, err)) != 0)
        goto end;
    for (;;) {
        if ((rc = next_source(s, st, f, &ts, id, &id, err)) != 0 || id == 0)
            break;
        if (got == f->limit) {
            *truncated = 1;
            break;
        }
        memset(&w.g, 0, sizeof(w.g));
        w.any = 0;
        w.g.ranges = (const uint64_t(*)[2])w.ranges;
        if ((rc = walk_source(s, st, id, &ts, &w, err)) != 0)
            break;
        sqlite3_bind_int64(st[GS_NAME], 1, id);
        rc = sqlite3_step(st[GS_NAME]);
        if (rc != SQLITE_ROW) {
            sqlite3_reset(st[GS_NAME]);
            rc = store_fail(s, rc == SQLITE_DONE ? SQLITE_CORRUPT : rc, err,
                            "name a source");
            break;
        }
        w.g.source.ptr = sqlite3_column_blob(st[GS_NAME], 0);
        w.g.source.len = (size_t)sqlite3_column_bytes(st[GS_NAME], 0);
        if (w.g.source.ptr == NULL)
            w.g.source.ptr = "";
        if (w.g.ranges_truncated)
            *truncated = 1;
        got++;
        rc = cb(arg, &w.g);
        sqlite3_reset(st[GS_NAME]);
        if (rc != 0)
            break;
    }
end:
    for (i = 0; i < GS_COUNT; i++)
        sqlite3_finalize(st[i]);
    sqlite3_exec(store_db(s), "COMMIT", NULL, NULL, NULL);
out:
    store_deadline_disarm(s);
    free(ts.v);
    free(w.ranges);
    return rc;
}
