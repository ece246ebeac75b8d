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
 * Every source is walked once for its figures, kept as one summary; the
 * summaries are filtered and sorted (most missing first), and only the
 * sources listed with gaps are walked again, for their ranges. A source's
 * last receive time is its newest receipt's: in the tail, read directly,
 * or else in the newest chunk whose postings name it (the highest id of
 * that posting), found by going down the chunks from the newest until
 * every source has one or none are left.
 *
 * Runs on a query thread with a read-only store, in one read transaction,
 * under the query's deadline.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <roaring/roaring.h>

#include "invariant.h"
#include "store_agg.h"
#include "store_internal.h"
#include "store_sqlite.h"
#include "store_seq.h"
#include "store_tail.h"

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

/* A run [lo, hi] of n distinct seqs that nothing else falls inside, as
 * walk_seq() of each would count it, without its ranges: for the first
 * walk, which needs only the figures. */
static void
walk_block(struct walk *w, uint64_t lo, uint64_t hi, uint64_t n)
{
    walk_seq(w, lo);
    if (hi == lo)
        return;
    w->g.missing += hi - lo + 1 - n;
    if (hi - lo + 1 > n)
        w->g.ranges_truncated = 1;
    w->g.received += n - 1;
    w->prev = hi;
    w->g.last_seq = hi;
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
    GS_TAIL_AT, /* per source, its newest receipt in the tail */
    GS_CHUNKS,  /* the chunks, newest first */
    GS_SOURCES, /* the source postings of a chunk */
    GS_POSTING, /* one source's posting in a chunk */
    GS_AT,      /* a receipt's receive time */
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
    /* In key order, which is lo order too unless runs overlap: runs_load
     * sorts only then (SQLite's sorter would cost each source more than
     * reading its runs). */
    [GS_RUNS] = "SELECT lo, hi, chunk, n FROM seq_runs WHERE source_id = ?1 "
                "AND hi >= ?2 AND lo <= ?3 ORDER BY hi, chunk",
    [GS_ENTRIES] = "SELECT entries FROM seq_runs WHERE source_id = ?1 AND "
                   "hi = ?2 AND chunk = ?3",
    [GS_TAIL_AT] = "SELECT source_id, max(received_at) FROM receipts WHERE "
                   "id >= ?1 GROUP BY source_id",
    [GS_CHUNKS] = "SELECT first_id FROM chunks ORDER BY first_id DESC",
    [GS_SOURCES] = "SELECT value, ids FROM postings WHERE chunk = ?1 AND "
                   "kind = ?2",
    [GS_POSTING] = "SELECT ids FROM postings WHERE chunk = ?1 AND kind = ?2 "
                   "AND value = ?3",
    [GS_AT] = "SELECT received_at FROM receipts WHERE id = ?1",
};

/* One run the walk has reached: a copy of its entries and a cursor. */
struct open_run {
    unsigned char *blob;
    struct store_seq_run c;
    int64_t cur; /* its next seq in the half */
};

/* The runs of one source within one half [min, max] of the signed seqs,
 * merged: headers by lo, each opened when the walk reaches its lo. */
/* A run's header: its seqs' range, its chunk and how many it holds. */
struct run_head {
    int64_t lo, hi, chunk, n;
};

struct runs {
    sqlite3_stmt *const *st;
    int64_t source_id, min, max;
    struct run_head *h;
    size_t nh, caph, next;
    struct open_run *open;
    size_t nopen, capopen;
    /* whole: a run that overlaps no other may be offered unopened, as the
     * block h[next] (block set; the seq given is its lo), for the caller
     * to take whole (next++) or to open (runs_open_next) when something
     * else falls inside it. */
    int whole, block;
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

/* Whether run h[next], within the half, overlaps no run after it (none
 * is open) and holds as many seqs as its header says it can. */
static int
alone(const struct runs *r)
{
    const size_t k = r->next;

    return r->h[k].lo >= r->min && r->h[k].hi <= r->max && r->h[k].n >= 1 &&
           (uint64_t)(r->h[k].hi - r->h[k].lo) >= (uint64_t)r->h[k].n - 1 &&
           (k + 1 == r->nh || r->h[k + 1].lo > r->h[k].hi);
}

/* The next seq of the runs into *v: 1, 0 when none is left, or an SQLite
 * error. Equal seqs of overlapping runs come one after the other. With
 * r->whole, r->block says when *v is the lo of a run not opened. */
static int
runs_next(struct runs *r, int64_t *v)
{
    size_t i, best;
    int rc;

    r->block = 0;
    for (;;) {
        best = r->nopen;
        for (i = 0; i < r->nopen; i++)
            if (best == r->nopen || r->open[i].cur < r->open[best].cur)
                best = i;
        if (r->next < r->nh &&
            (best == r->nopen || r->h[r->next].lo <= r->open[best].cur)) {
            if (r->whole && r->nopen == 0 && alone(r)) {
                r->block = 1;
                *v = r->h[r->next].lo;
                return 1;
            }
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
by_lo(const void *a, const void *b)
{
    const struct run_head *x = a, *y = b;

    if (x->lo != y->lo)
        return x->lo < y->lo ? -1 : 1;
    if (x->hi != y->hi)
        return x->hi < y->hi ? -1 : 1;
    return (x->chunk > y->chunk) - (x->chunk < y->chunk);
}

/* The headers of the source's runs that reach into the half, by lo. */
static int
runs_load(struct runs *r)
{
    sqlite3_stmt *st = r->st[GS_RUNS];
    int rc, sorted = 1;

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
        r->h[r->nh].n = sqlite3_column_int64(st, 3);
        if (r->nh > 0 && r->h[r->nh].lo < r->h[r->nh - 1].lo)
            sorted = 0;
        r->nh++;
    }
    sqlite3_reset(st);
    if (rc == SQLITE_DONE && !sorted)
        qsort(r->h, r->nh, sizeof(*r->h), by_lo);
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
 * tail, in signed order within the half. With whole (for the figures
 * only), a run that nothing else falls inside is counted from its header,
 * not read. */
static int
walk_source(struct store *s, sqlite3_stmt *const *st, int64_t source_id,
            const struct tail_seqs *ts, int whole, struct walk *w,
            struct proto_err *err)
{
    size_t first = tail_first(ts, source_id), end = first, neg;
    struct runs r;
    int k, rc = 0;

    memset(&r, 0, sizeof(r));
    r.st = st;
    r.source_id = source_id;
    r.whole = whole;
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
            } else if (hr && (t == te || rv <= ts->v[t].seq) && r.block) {
                int64_t hi = r.h[r.next].hi;

                if ((!hd || dv > hi) && (t == te || ts->v[t].seq > hi)) {
                    walk_block(w, (uint64_t)rv, (uint64_t)hi,
                               (uint64_t)r.h[r.next].n);
                    r.next++;
                } else if ((hr = runs_open_next(&r)) != 0) {
                    /* A seq of the table or the tail falls inside the
                     * run: it is read after all. */
                    rc = hr;
                    break;
                }
                hr = runs_next(&r, &rv);
                continue;
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

/* What the first walk keeps of a source. */
struct gap_sum {
    int64_t source_id;
    uint64_t first_seq, last_seq, received, missing;
    int has_last;
    int64_t last_at;
    char *name;
    size_t name_len;
};

struct sums {
    struct gap_sum *v;
    size_t n, cap, timeless; /* timeless: those without a time yet */
};

static void
sums_free(struct sums *ss)
{
    size_t i;

    for (i = 0; i < ss->n; i++)
        free(ss->v[i].name);
    free(ss->v);
}

/* The summary of source_id (ss is in source id order), or NULL. */
static struct gap_sum *
sums_find(struct sums *ss, int64_t source_id)
{
    size_t lo = 0, hi = ss->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (ss->v[mid].source_id < source_id)
            lo = mid + 1;
        else if (ss->v[mid].source_id > source_id)
            hi = mid;
        else
            return &ss->v[mid];
    }
    return NULL;
}

static void
set_last(struct sums *ss, struct gap_sum *g, int64_t at)
{
    if (g == NULL || g->has_last)
        return;
    g->has_last = 1;
    g->last_at = at;
    ss->timeless--;
}

/* Source g's newest receipt in chunk, from its posting there (blob, n
 * bytes): its time, or none when it is gone (retention pruned it, and so
 * every older one). Returns 0 or an SQLite code. */
static int
take_posting(sqlite3_stmt *const *st, struct sums *ss, struct gap_sum *g,
             int64_t chunk, const void *blob, size_t n)
{
    sqlite3_stmt *at = st[GS_AT];
    roaring_bitmap_t *b = roaring_bitmap_portable_deserialize_safe(blob, n);
    int rc;

    if (b == NULL)
        return SQLITE_CORRUPT;
    sqlite3_bind_int64(at, 1, chunk + (int64_t)roaring_bitmap_maximum(b));
    roaring_bitmap_free(b);
    rc = sqlite3_step(at);
    if (rc == SQLITE_ROW) {
        set_last(ss, g, sqlite3_column_int64(at, 0));
    } else if (rc == SQLITE_DONE) {
        g->has_last = -1;
        ss->timeless--;
    }
    sqlite3_reset(at);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : rc;
}

/* One chunk's source postings, for the sources still without a time:
 * all of them read while many are left, else each one looked up (the
 * chunks of a fleet where a few sources stopped long ago hold a posting
 * for every other source). Returns 0 or an SQLite code. */
static int
chunk_times(sqlite3_stmt *const *st, struct sums *ss, struct gap_sum **need,
            size_t *nneed, int64_t chunk)
{
    sqlite3_stmt *p;
    size_t i, k;
    int rc = 0;

    if (*nneed * 8 >= ss->n) {
        p = st[GS_SOURCES];
        sqlite3_bind_int64(p, 1, chunk);
        sqlite3_bind_int(p, 2, STORE_KIND_SOURCE);
        while (rc == 0 && (rc = sqlite3_step(p)) == SQLITE_ROW) {
            struct gap_sum *g = sums_find(ss, sqlite3_column_int64(p, 0));

            rc = g == NULL || g->has_last
                     ? 0
                     : take_posting(st, ss, g, chunk, sqlite3_column_blob(p, 1),
                                    (size_t)sqlite3_column_bytes(p, 1));
        }
        sqlite3_reset(p);
    } else {
        p = st[GS_POSTING];
        for (i = 0; i < *nneed && (rc == 0 || rc == SQLITE_DONE); i++) {
            sqlite3_bind_int64(p, 1, chunk);
            sqlite3_bind_int(p, 2, STORE_KIND_SOURCE);
            sqlite3_bind_int64(p, 3, need[i]->source_id);
            rc = sqlite3_step(p);
            if (rc == SQLITE_ROW)
                rc = take_posting(st, ss, need[i], chunk,
                                  sqlite3_column_blob(p, 0),
                                  (size_t)sqlite3_column_bytes(p, 0));
            sqlite3_reset(p);
        }
    }
    if (rc != 0 && rc != SQLITE_DONE)
        return rc;
    for (i = k = 0; i < *nneed; i++)
        if (!need[i]->has_last)
            need[k++] = need[i];
    *nneed = k;
    return 0;
}

/* The last receive time of every source of ss that has a stored receipt:
 * the tail's first, then the chunks' newest first. Returns an SQLite
 * code. */
static int
last_times(sqlite3_stmt *const *st, int64_t tail_from, struct sums *ss)
{
    sqlite3_stmt *q = st[GS_TAIL_AT], *c = st[GS_CHUNKS];
    struct gap_sum **need;
    size_t i, nneed = 0;
    int rc;

    ss->timeless = ss->n;
    sqlite3_bind_int64(q, 1, tail_from);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW)
        set_last(ss, sums_find(ss, sqlite3_column_int64(q, 0)),
                 sqlite3_column_int64(q, 1));
    sqlite3_reset(q);
    if (rc != SQLITE_DONE || ss->timeless == 0)
        return rc == SQLITE_DONE ? 0 : rc;
    if ((need = malloc(ss->timeless * sizeof(*need))) == NULL)
        return SQLITE_NOMEM;
    for (i = 0; i < ss->n; i++)
        if (!ss->v[i].has_last)
            need[nneed++] = &ss->v[i];
    while (nneed > 0 && (rc = sqlite3_step(c)) == SQLITE_ROW)
        if ((rc =
                 chunk_times(st, ss, need, &nneed, sqlite3_column_int64(c, 0))))
            break;
    sqlite3_reset(c);
    free(need);
    return rc == 0 || rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : rc;
}

/* Most missing seqs first, then by source name. */
static int
by_missing(const void *a, const void *b)
{
    const struct gap_sum *x = a, *y = b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c;

    if (x->missing != y->missing)
        return x->missing > y->missing ? -1 : 1;
    if ((c = memcmp(x->name, y->name, n)) != 0)
        return c;
    return x->name_len < y->name_len ? -1 : x->name_len > y->name_len;
}

static int
selected(const struct store_gap_select *sel, const struct gap_sum *g)
{
    if (sel->only_missing && g->missing == 0)
        return 0;
    if (sel->has_quiet_before && g->has_last == 1 &&
        g->last_at >= sel->quiet_before)
        return 0;
    return 1;
}

/* Keeps the name of source g->source_id. Returns 0 or an error. */
static int
name_source(struct store *s, sqlite3_stmt *const *st, struct gap_sum *g,
            struct proto_err *err)
{
    sqlite3_stmt *q = st[GS_NAME];
    const void *p;
    int rc;

    sqlite3_bind_int64(q, 1, g->source_id);
    rc = sqlite3_step(q);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(q);
        return store_fail(s, rc == SQLITE_DONE ? SQLITE_CORRUPT : rc, err,
                          "name a source");
    }
    p = sqlite3_column_blob(q, 0);
    g->name_len = (size_t)sqlite3_column_bytes(q, 0);
    g->name = malloc(g->name_len ? g->name_len : 1);
    if (g->name != NULL && g->name_len > 0)
        memcpy(g->name, p, g->name_len);
    sqlite3_reset(q);
    return g->name == NULL
               ? proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory")
               : 0;
}

int
store_sqlite_query_gaps(struct store *s, const struct store_filter *f,
                        const struct store_gap_select *sel,
                        uint64_t deadline_ms, store_gap_cb cb, void *arg,
                        int *truncated, struct proto_err *err)
{
    sqlite3_stmt *st[GS_COUNT] = { 0 };
    struct tail_seqs ts = { NULL, 0 };
    struct sums ss = { 0 };
    struct walk w;
    int64_t id = 0, tail_from;
    size_t i, n;
    int rc = 0;

    *truncated = 0;
    memset(&w, 0, sizeof(w));
    w.ranges = malloc(f->limit * sizeof(*w.ranges));
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
    if ((rc = store_counter(s, "tail_from", 1, &tail_from, err)) != 0 ||
        (rc = load_tail_seqs(s, &ts, err)) != 0)
        goto end;
    /* The figures of every source, without ranges. */
    for (;;) {
        struct gap_sum *g;

        if ((rc = next_source(s, st, f, &ts, id, &id, err)) != 0 || id == 0)
            break;
        memset(&w.g, 0, sizeof(w.g));
        w.any = 0;
        w.cap = 0;
        if ((rc = walk_source(s, st, id, &ts, 1, &w, err)) != 0)
            break;
        if (ss.n == ss.cap) {
            size_t cap = ss.cap ? ss.cap * 2 : 64;
            void *nv = realloc(ss.v, cap * sizeof(*ss.v));

            if (nv == NULL) {
                rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
                break;
            }
            ss.v = nv;
            ss.cap = cap;
        }
        g = &ss.v[ss.n++];
        memset(g, 0, sizeof(*g));
        g->source_id = id;
        g->first_seq = w.g.first_seq;
        g->last_seq = w.g.last_seq;
        g->received = w.g.received;
        g->missing = w.g.missing;
    }
    if (rc != 0)
        goto end;
    if ((rc = last_times(st, tail_from, &ss)) != 0) {
        rc = store_fail(s, rc, err, "find when sources last sent");
        goto end;
    }
    /* The selected ones, named, most missing first. */
    for (i = n = 0; i < ss.n; i++) {
        if (!selected(sel, &ss.v[i]))
            continue;
        if (n != i) {
            struct gap_sum t = ss.v[n];

            ss.v[n] = ss.v[i];
            ss.v[i] = t;
        }
        if ((rc = name_source(s, st, &ss.v[n++], err)) != 0)
            goto end;
    }
    /* No sources means no array: qsort must not be handed NULL. */
    if (n > 0)
        qsort(ss.v, n, sizeof(*ss.v), by_missing);
    if (n > f->limit) {
        *truncated = 1;
        n = f->limit;
    }
    w.cap = f->limit;
    for (i = 0; i < n; i++) {
        struct gap_sum *g = &ss.v[i];

        memset(&w.g, 0, sizeof(w.g));
        w.any = 0;
        /* Only a source with gaps has ranges to walk for. */
        if (g->missing > 0 &&
            (rc = walk_source(s, st, g->source_id, &ts, 0, &w, err)) != 0)
            break;
        /* The second walk reads every seq the first counted whole. */
        if (g->missing > 0 &&
            NEVER(w.g.missing != g->missing || w.g.received != g->received)) {
            rc = proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                               "the seqs of a source were counted two ways");
            break;
        }
        w.g.first_seq = g->first_seq;
        w.g.last_seq = g->last_seq;
        w.g.received = g->received;
        w.g.missing = g->missing;
        w.g.ranges = (const uint64_t(*)[2])w.ranges;
        w.g.source.ptr = g->name_len ? g->name : "";
        w.g.source.len = g->name_len;
        w.g.has_last_received = g->has_last == 1;
        w.g.last_received_at = g->last_at;
        if (w.g.ranges_truncated)
            *truncated = 1;
        if ((rc = cb(arg, &w.g)) != 0)
            break;
    }
end:
    for (i = 0; i < GS_COUNT; i++)
        sqlite3_finalize(st[i]);
    sqlite3_exec(store_db(s), "COMMIT", NULL, NULL, NULL);
out:
    store_deadline_disarm(s);
    sums_free(&ss);
    free(ts.v);
    free(w.ranges);
    return rc;
}
