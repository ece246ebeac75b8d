/*
 * store_rollup.c: keeps the per-hour and per-day rollups of
 * migrations/0004 up to date, inside the writer's transaction.
 *
 * Runs on the writer thread only, with the read-write store, except the
 * registry of published sums (store_shared), which query threads read,
 * and the fold of a chunk's sums into the waiting ones, which a thread of
 * its own does while the writer goes on (bg_run). A
 * rollup row is read, the receipt is added in C (128-bit sums carried by
 * hand, u64 extremes compared as unsigned: SQLite has neither), and the
 * row is written back; because all of it happens in the transaction (and
 * the savepoint) that writes them, a rollback undoes both. The sums of
 * the tail are kept here in memory, one entry per key and hour, across
 * commits; when the tail becomes a chunk they become the chunk's view, and
 * store_opts.rollup_chunks chunks are sealed together and merged into the
 * rollup rows over the commits that follow (migrations/0008 and the
 * rollup_end counter), so a key costs one row update per that many
 * chunks however many receipts share it. A rollback drops them all, and
 * the tail re-adds what the rows still say (store_tail.c).
 *
 * Pruning (store_prune.c) rewrites the rollup rows of the buckets it
 * touched from the receipts left in them.
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "invariant.h"
#include "store_agg.h"
#include "store_internal.h"
#include "store_rollup.h"
#include "store_tail.h"

/* Words per measured counter in the figures blob. */
#define PER_COUNTER 5

/* Distinct keys the tail may hold in memory (about 1 KiB each); a full
 * table makes the tail a chunk early (store_rollup_full). */
#define TXN_MAX 8192
/* The distinct keys of the chunks waiting to be sealed together (their
 * sums are kept added per key as each chunk is written), so at most the
 * keys of the sums being merged: a tail that could pass it seals them
 * first. Keys that recur from chunk to chunk count once, so the bench's
 * single receipts (6,400 keys a chunk, the same ones all hour) wait
 * store_opts.rollup_chunks chunks like its batches. */
#define WAIT_MAX (2 * TXN_MAX)

struct pending {
    struct store_rollup_key k; /* received_at holds the bucket start */
    struct store_agg_group g;
};

/*
 * The sums of the receipts [from, end), once made never changed again: a
 * chunk's (the tail's sums as the chunk was written), the sealed ones (the
 * chunks sealed together, summed), or what a reload rebuilt (after a
 * reload in the middle of a merge, only the keys after `after`).
 * Reference-counted: the writer, the registry and queries each hold one;
 * while the writer builds one (struct sums) it holds the only reference.
 */
struct view_arrays;
struct store_rollup_view {
    atomic_int refs;
    int64_t from, end;
    int has_after;
    struct store_rollup_key after;
    int n, alloc;
    struct pending *p;        /* alloc entries, n in use; owned */
    struct view_arrays *keep; /* where p goes when the view does (a ref) */
};

/*
 * Entry arrays of views nobody holds any more, kept for the next views. A
 * tail's view grows to megabytes every chunk (7.5 MB for the bench's 6,400
 * keys), and so does each copy of the waiting sums that a fold makes
 * (sums_own). Freed, glibc gives arrays that large back to the kernel, and
 * the next one is paged in again: a page fault for every 4 KiB written
 * the first time, each a stall of the receipts in flight (docs/ingest.md,
 * "Entry arrays kept for the next view"). Views are let go on any thread
 * (queries hold them too), so the arrays kept have a lock and live as
 * long as the last view: the store_rollup holds a reference, and every
 * view another. At most KEEP_ARRAYS arrays and KEEP_BYTES bytes.
 */
#define KEEP_ARRAYS 3
#if defined(__SANITIZE_ADDRESS__)
#define KEEP_BYTES 0 /* AddressSanitizer sees every array's use after free */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KEEP_BYTES 0
#endif
#endif
#ifndef KEEP_BYTES
#define KEEP_BYTES ((size_t)48 << 20)
#endif
struct view_arrays {
    atomic_int refs;
    pthread_mutex_t mu;
    int n;
    size_t bytes;
    struct {
        struct pending *p;
        int alloc;
    } a[KEEP_ARRAYS];
};

/* Sums per key being built into a view, found through an open-addressing
 * index. The entries grow with use up to cap. */
struct sums {
    struct store_rollup_view *v;
    int *slots; /* mask + 1 (a power of two, at least 2 * cap): index
                   into v->p by key, -1 = free */
    size_t mask;
    int cap;
    int last; /* the entry the last receipt went to, -1: none */
};

/* What the writer published after its last commit: views that tile
 * [rollup_from, tail_from) of the committed store, in id order. */
#define SHARED_VIEWS_MAX STORE_ROLLUP_VIEWS_MAX
struct store_shared {
    atomic_int refs;
    atomic_ullong hits, misses; /* queries answered from views, or not */
    pthread_mutex_t mu;
    struct store_rollup_view *v[SHARED_VIEWS_MAX];
    int n;
};

/* The statements of one rollups table. */
struct level {
    sqlite3_stmt *put;
};

/* The day rollups hold the hour rows of buckets below the counter
 * days_from (an hour bucket), merged by day. */

/* Hours and days (migrations/0004): every receipt counts in one row of
 * each. */
static const struct {
    const char *table;
    int64_t ms;
} levels[STORE_LEVELS] = {
    { "rollups", STORE_BUCKET_MS },
    { "rollups_day", STORE_DAY_MS },
};

/*
 * The sums of the tail; the sums of the chunks written since the last
 * seal, added per key as each is written (`waiting`: the ids [wait_from,
 * wait_end), wait_chunks chunks); and the sealed sums, being merged into
 * the rollup rows (migrations/0008), in key order through `order`, of
 * which the first `merged` are written, the ids [sealed_from,
 * sealed_end). Chunks are sealed span at a time, so a key that recurs in
 * every chunk costs one row update per span chunks. `scratch` is where a
 * reload rebuilds the chunks waiting. With a registry (shared), the
 * sealed view and the waiting one are published at the next commit
 * (dirty); a published view is never changed, so the chunk that follows
 * adds to a copy of it (wait_add).
 */
struct chunk_fold;
static void chunk_fold_free(struct chunk_fold *f);
struct store_rollup;
static void bg_stop(struct store_rollup *ru);

struct store_rollup {
    struct level lv[STORE_LEVELS];
    struct sums tail, waiting, sealed, scratch;
    struct view_arrays *keep; /* of every view the sums make */
    /* The waiting view published before the last chunk was added, for a
     * query whose snapshot is a chunk behind; NULL: none. (The one before
     * it goes, and its memory to `keep` once nobody holds it, for the
     * next copy: a fresh one would be paged in again.) */
    struct store_rollup_view *wait_prev;
    /* The fold of a chunk's sums into the waiting ones, on a thread of
     * its own (bg_run) while the writer goes on: from the hand-off to
     * bg_settle, `waiting` and wait_prev are that thread's,
     * and the writer publishes the waiting view as it was (bg_base, NULL
     * when none waited) and the chunk's (bg_chunk) beside it. */
    struct {
        pthread_t thread;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        int started; /* the thread runs (mu and cv made) */
        int stop;
        int job;  /* a fold handed over and not taken by bg_run yet */
        int done; /* the fold handed over has ended, with rc */
        int rc;
        int first; /* the job's chunk is the first waiting */
        int held;  /* handed over while store_rollup_test_hold was on */
        int64_t from, end;
    } bg;
    int bg_pending; /* a fold is handed over, not settled */
    int bg_failed;  /* a fold ran out of memory: reload (bg_settle) */
    struct store_rollup_view *bg_base, *bg_chunk;
    struct pending **order; /* WAIT_MAX */
    int merged;
    int64_t sealed_from, sealed_end;
    int64_t wait_from, wait_end;
    int wait_chunks, span;
    struct store_shared *shared;
    int dirty;
    uint64_t added;          /* receipts the tail took since the last step */
    sqlite3_stmt *hours;     /* hour rows of a bucket range, for folding */
    sqlite3_stmt *set_merge; /* the rollup_merge row */
    sqlite3_stmt *put_sums;  /* a chunk's chunk_sums row */
    struct chunk_fold *fold; /* chunk_sums_put's scratch */
};

static struct view_arrays *
arrays_new(void)
{
    struct view_arrays *ka = calloc(1, sizeof(*ka));

    if (ka == NULL)
        return NULL;
    if (pthread_mutex_init(&ka->mu, NULL) != 0) {
        free(ka);
        return NULL;
    }
    atomic_init(&ka->refs, 1);
    return ka;
}

static struct view_arrays *
arrays_ref(struct view_arrays *ka)
{
    if (ka != NULL)
        atomic_fetch_add(&ka->refs, 1);
    return ka;
}

static void
arrays_unref(struct view_arrays *ka)
{
    int i;

    if (ka == NULL || atomic_fetch_sub(&ka->refs, 1) != 1)
        return;
    for (i = 0; i < ka->n; i++)
        free(ka->a[i].p);
    pthread_mutex_destroy(&ka->mu);
    free(ka);
}

/* The place in ka of its smallest array; ka holds one at least. */
static int
arrays_smallest(const struct view_arrays *ka)
{
    int i, small = 0;

    for (i = 1; i < ka->n; i++)
        if (ka->a[i].alloc < ka->a[small].alloc)
            small = i;
    return small;
}

/* Keeps the array p (alloc entries) in ka, or frees it. Room is made by
 * letting smaller arrays go: the next tail wants the largest. */
static void
arrays_give(struct view_arrays *ka, struct pending *p, int alloc)
{
    size_t bytes = (size_t)alloc * sizeof(*p);
    int small;

    if (ka == NULL || p == NULL || bytes > KEEP_BYTES) {
        free(p);
        return;
    }
    pthread_mutex_lock(&ka->mu);
    while (ka->n == KEEP_ARRAYS || ka->bytes + bytes > KEEP_BYTES) {
        small = arrays_smallest(ka);
        if (ka->a[small].alloc >= alloc)
            break;
        free(ka->a[small].p);
        ka->bytes -= (size_t)ka->a[small].alloc * sizeof(*p);
        ka->a[small] = ka->a[--ka->n];
    }
    if (ka->n < KEEP_ARRAYS && ka->bytes + bytes <= KEEP_BYTES) {
        ka->a[ka->n].p = p;
        ka->a[ka->n++].alloc = alloc;
        ka->bytes += bytes;
        p = NULL;
    }
    pthread_mutex_unlock(&ka->mu);
    free(p);
}

/* The smallest array kept in ka with room for want entries (*alloc set),
 * taken out of it; NULL when none has. */
static struct pending *
arrays_take(struct view_arrays *ka, int want, int *alloc)
{
    struct pending *p = NULL;
    int i, best = -1;

    if (ka == NULL)
        return NULL;
    pthread_mutex_lock(&ka->mu);
    for (i = 0; i < ka->n; i++)
        if (ka->a[i].alloc >= want &&
            (best < 0 || ka->a[i].alloc < ka->a[best].alloc))
            best = i;
    if (best >= 0) {
        p = ka->a[best].p;
        *alloc = ka->a[best].alloc;
        ka->bytes -= (size_t)*alloc * sizeof(*p);
        ka->a[best] = ka->a[--ka->n];
    }
    pthread_mutex_unlock(&ka->mu);
    return p;
}

static void
view_unref(struct store_rollup_view *v)
{
    if (v != NULL && atomic_fetch_sub(&v->refs, 1) == 1) {
        arrays_give(v->keep, v->p, v->alloc);
        arrays_unref(v->keep);
        free(v);
    }
}

static struct store_rollup_view *
view_ref(struct store_rollup_view *v)
{
    atomic_fetch_add(&v->refs, 1);
    return v;
}

/* An empty view whose arrays come from and go to ka (may be NULL); NULL
 * when out of memory. */
static struct store_rollup_view *
view_new(struct view_arrays *ka)
{
    struct store_rollup_view *v = calloc(1, sizeof(*v));

    if (v != NULL) {
        atomic_init(&v->refs, 1);
        v->keep = arrays_ref(ka);
    }
    return v;
}

/* Makes room in v for at least want entries: an array kept (the entries
 * copied over, the old array given back), or realloc's. -1 when out of
 * memory. */
static int
view_reserve(struct store_rollup_view *v, int want)
{
    struct pending *p;
    int alloc;

    if (v->alloc >= want)
        return 0;
    if ((p = arrays_take(v->keep, want, &alloc)) != NULL) {
        if (v->n > 0)
            memcpy(p, v->p, (size_t)v->n * sizeof(*p));
        arrays_give(v->keep, v->p, v->alloc);
    } else {
        if ((p = realloc(v->p, (size_t)want * sizeof(*p))) == NULL)
            return -1;
        alloc = want;
    }
    v->p = p;
    v->alloc = alloc;
    return 0;
}

struct store_shared *
store_shared_new(void)
{
    struct store_shared *sh = calloc(1, sizeof(*sh));

    if (sh == NULL)
        return NULL;
    atomic_init(&sh->refs, 1);
    pthread_mutex_init(&sh->mu, NULL);
    return sh;
}

struct store_shared *
store_shared_ref(struct store_shared *sh)
{
    if (sh != NULL)
        atomic_fetch_add(&sh->refs, 1);
    return sh;
}

void
store_shared_unref(struct store_shared *sh)
{
    int i;

    if (sh == NULL || atomic_fetch_sub(&sh->refs, 1) != 1)
        return;
    for (i = 0; i < sh->n; i++)
        view_unref(sh->v[i]);
    pthread_mutex_destroy(&sh->mu);
    free(sh);
}

/* Replaces what sh offers with the n views in v (references taken). */
static void
shared_set(struct store_shared *sh, struct store_rollup_view *const *v, int n)
{
    struct store_rollup_view *old[SHARED_VIEWS_MAX];
    int i, nold;

    for (i = 0; i < n; i++)
        view_ref(v[i]);
    pthread_mutex_lock(&sh->mu);
    nold = sh->n;
    for (i = 0; i < nold; i++)
        old[i] = sh->v[i];
    for (i = 0; i < n; i++)
        sh->v[i] = v[i];
    sh->n = n;
    pthread_mutex_unlock(&sh->mu);
    for (i = 0; i < nold; i++)
        view_unref(old[i]);
}

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
    return (size_t)snprintf(sql, cap,
                            "%sreceipts, %sfallback, %sclean, %sunproven, "
                            "%sfigures, %sschema3",
                            prefix, prefix, prefix, prefix, prefix, prefix);
}

/* The figures blob: a little-endian u32 with bit i set for every counter
 * i measured at least once, then for each of them, in bit order, five
 * LEB128 varints: measured, sum low word, sum high word, min, max. A
 * counter never measured takes no room, and typical figures about half of
 * eight bytes a word, so a rollup row stays small enough to live in one
 * page of its B-tree. */
static void
read_figures(const unsigned char *p, size_t n, struct store_agg_group *g)
{
    const unsigned char *end = p + n;
    uint32_t mask;
    int i, w;

    if (p == NULL || n < 4)
        return;
    mask = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
    p += 4;
    for (i = 0; i < RECEIPT_NCOUNTERS && p != NULL; i++) {
        uint64_t v[PER_COUNTER];
        struct store_agg_counter c;

        if (!(mask >> i & 1))
            continue;
        for (w = 0; w < PER_COUNTER && p != NULL; w++)
            p = store_varint_get(p, end, &v[w]);
        if (p == NULL)
            break;
        c.measured = v[0];
        c.sum_lo = v[1];
        c.sum_hi = v[2];
        c.min = v[3];
        c.max = v[4];
        store_agg_counter_merge(&g->c[i], &c);
    }
}

size_t
store_rollup_figures(const struct store_agg_group *g,
                     unsigned char out[STORE_ROLLUP_FIGURES_MAX])
{
    unsigned char *p = out + 4;
    uint32_t mask = 0;
    int i;

    for (i = 0; i < RECEIPT_NCOUNTERS; i++) {
        const struct store_agg_counter *c = &g->c[i];

        if (c->measured == 0)
            continue;
        mask |= (uint32_t)1 << i;
        p = store_varint_put(p, c->measured);
        p = store_varint_put(p, c->sum_lo);
        p = store_varint_put(p, c->sum_hi);
        p = store_varint_put(p, c->min);
        p = store_varint_put(p, c->max);
    }
    out[0] = (unsigned char)mask;
    out[1] = (unsigned char)(mask >> 8);
    out[2] = (unsigned char)(mask >> 16);
    out[3] = (unsigned char)(mask >> 24);
    return (size_t)(p - out);
}

void
store_rollup_read(sqlite3_stmt *st, int col, struct store_agg_group *g)
{
    g->receipts += (uint64_t)sqlite3_column_int64(st, col);
    g->fallback += (uint64_t)sqlite3_column_int64(st, col + 1);
    g->clean += (uint64_t)sqlite3_column_int64(st, col + 2);
    g->unproven += (uint64_t)sqlite3_column_int64(st, col + 3);
    g->schema3 += (uint64_t)sqlite3_column_int64(st, col + 5);
    read_figures(sqlite3_column_blob(st, col + 4),
                 (size_t)sqlite3_column_bytes(st, col + 4), g);
}

void
store_rollup_bind(sqlite3_stmt *st, int col, const struct store_agg_group *g,
                  unsigned char buf[STORE_ROLLUP_FIGURES_MAX])
{
    size_t n = store_rollup_figures(g, buf);

    sqlite3_bind_int64(st, col, (int64_t)g->receipts);
    sqlite3_bind_int64(st, col + 1, (int64_t)g->fallback);
    sqlite3_bind_int64(st, col + 2, (int64_t)g->clean);
    sqlite3_bind_int64(st, col + 3, (int64_t)g->unproven);
    sqlite3_bind_int64(st, col + 5, (int64_t)g->schema3);
    sqlite3_bind_blob(st, col + 4, buf, (int)n, SQLITE_STATIC);
}

/* rollup_merge(a, b): the figures blob of the merge of two (SQL). */
static void
merge_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    unsigned char buf[STORE_ROLLUP_FIGURES_MAX];
    struct store_agg_group g;
    size_t n;
    int i;

    memset(&g, 0, sizeof(g));
    for (i = 0; i < argc; i++)
        read_figures(sqlite3_value_blob(argv[i]),
                     (size_t)sqlite3_value_bytes(argv[i]), &g);
    n = store_rollup_figures(&g, buf);
    sqlite3_result_blob(ctx, buf, (int)n, SQLITE_TRANSIENT);
}

/* One statement per level adds a key's sums to its row, or makes the row:
 * a single B-tree seek. */
static int
prepare(struct store *s, struct level *ru, const char *table,
        struct proto_err *err)
{
    char sql[1024];
    int rc;

    snprintf(sql, sizeof(sql),
             "INSERT INTO %s (plan_id, graph_id, model_id, "
             "requested_backend, executed_backend, source_id, bucket, "
             "receipts, fallback, clean, unproven, figures, schema3) VALUES "
             "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) ON "
             "CONFLICT (plan_id, graph_id, model_id, requested_backend, "
             "executed_backend, source_id, bucket) DO UPDATE SET receipts = "
             "receipts + excluded.receipts, fallback = fallback + "
             "excluded.fallback, clean = clean + excluded.clean, unproven = "
             "unproven + excluded.unproven, figures = rollup_merge(figures, "
             "excluded.figures), schema3 = schema3 + excluded.schema3",
             table);
    rc = sqlite3_prepare_v3(store_db(s), sql, -1, SQLITE_PREPARE_PERSISTENT,
                            &ru->put, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "prepare the rollup upsert");
    return 0;
}

static void
sums_free(struct sums *m)
{
    view_unref(m->v);
    free(m->slots);
    memset(m, 0, sizeof(*m));
}

void
store_rollup_free(struct store_rollup *ru)
{
    int i;

    if (ru == NULL)
        return;
    bg_stop(ru);
    for (i = 0; i < STORE_LEVELS; i++)
        sqlite3_finalize(ru->lv[i].put);
    sqlite3_finalize(ru->hours);
    sqlite3_finalize(ru->set_merge);
    sqlite3_finalize(ru->put_sums);
    chunk_fold_free(ru->fold);
    sums_free(&ru->tail);
    view_unref(ru->wait_prev);
    sums_free(&ru->waiting);
    sums_free(&ru->sealed);
    sums_free(&ru->scratch);
    arrays_unref(ru->keep);
    free(ru->order);
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

/* Adds one pending key's sums to its row. */
static int
write_pending(struct store *s, const struct level *ru, int64_t ms,
              const struct pending *p, struct proto_err *err)
{
    unsigned char buf[STORE_ROLLUP_FIGURES_MAX];
    sqlite3_stmt *st = ru->put;
    int rc;

    bind_key(st, &p->k, ms);
    store_rollup_bind(st, 8, &p->g, buf);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return store_fail(s, rc, err, "update a rollup");
    return 0;
}

static int
key_cmp(const struct store_rollup_key *a, const struct store_rollup_key *b)
{
#define CMP(f)                                                                 \
    if (a->f != b->f)                                                          \
        return a->f < b->f ? -1 : 1;
    CMP(plan_id)
    CMP(graph_id)
    CMP(model_id)
    CMP(requested)
    CMP(executed)
    CMP(source_id)
    CMP(received_at)
#undef CMP
    return 0;
}

static int
key_cmp_cb(const void *pa, const void *pb)
{
    return key_cmp(&(*(const struct pending *const *)pa)->k,
                   &(*(const struct pending *const *)pb)->k);
}

/* Adds the hour rows of buckets [from, to) to the day rollups. */
static int
fold_hours(struct store *s, struct store_rollup *ru, int64_t from, int64_t to,
           struct proto_err *err)
{
    sqlite3_stmt *st = ru->hours, *put = ru->lv[1].put;
    int rc;

    sqlite3_bind_int64(st, 1, from);
    sqlite3_bind_int64(st, 2, to);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int i;

        /* The hour row's key and figures, its bucket as a day. */
        for (i = 0; i < 6; i++)
            sqlite3_bind_value(put, 1 + i, sqlite3_column_value(st, i));
        sqlite3_bind_int64(put, 7,
                           sqlite3_column_int64(st, 6) * STORE_BUCKET_MS /
                               STORE_DAY_MS);
        for (i = 0; i < 6; i++)
            sqlite3_bind_value(put, 8 + i, sqlite3_column_value(st, 7 + i));
        rc = sqlite3_step(put);
        sqlite3_reset(put);
        if (rc != SQLITE_DONE)
            break;
    }
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? 0 : store_fail(s, rc, err, "fold the hours");
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
    return (size_t)(h >> 32);
}

/* The slot of key k in m: its entry's, or the free one it would take. */
static size_t
slot_find(const struct sums *m, const struct store_rollup_key *k)
{
    size_t j = key_slot(k) & m->mask;

    while (m->slots[j] >= 0 && !key_eq(&m->v->p[m->slots[j]].k, k))
        j = (j + 1) & m->mask;
    return j;
}

/* The entry of key k (a bucket start) in m, made empty when new; NULL
 * when m holds cap keys or no memory is left. */
static struct pending *
sums_entry(struct sums *m, const struct store_rollup_key *k)
{
    size_t j = slot_find(m, k);
    struct store_rollup_view *v = m->v;
    struct pending *p;

    if (m->slots[j] >= 0)
        return &v->p[m->slots[j]];
    if (v->n >= m->cap)
        return NULL;
    if (v->n == v->alloc) {
        int alloc = v->alloc ? v->alloc * 2 : 256;

        if (view_reserve(v, alloc < m->cap ? alloc : m->cap) != 0)
            return NULL;
    }
    m->slots[j] = v->n;
    p = &v->p[v->n++];
    memset(p, 0, sizeof(*p));
    p->k = *k;
    return p;
}

/* Empties m. Its view, when somebody else holds it too, is left to them
 * and m starts a new one: -1 when out of memory for it. */
static int
sums_clear(struct sums *m)
{
    struct store_rollup_view *v;

    memset(m->slots, 0xff, (m->mask + 1) * sizeof(*m->slots));
    m->last = -1;
    if (atomic_load(&m->v->refs) == 1) {
        m->v->n = 0;
        m->v->from = m->v->end = 0;
        m->v->has_after = 0;
        return 0;
    }
    if ((v = view_new(m->v->keep)) == NULL)
        return -1;
    view_unref(m->v);
    m->v = v;
    return 0;
}

/* Hands m's view over (from, end set), and starts m on a new one; NULL
 * when out of memory (m keeps its view then). */
static struct store_rollup_view *
sums_take(struct sums *m, int64_t from, int64_t end)
{
    struct store_rollup_view *v = m->v, *fresh = view_new(v->keep);

    if (fresh == NULL)
        return NULL;
    v->from = from;
    v->end = end;
    m->v = fresh;
    memset(m->slots, 0xff, (m->mask + 1) * sizeof(*m->slots));
    m->last = -1;
    return v;
}

static int
sums_alloc(struct sums *m, int cap, struct view_arrays *ka)
{
    size_t n = 1;

    while (n < 2 * (size_t)cap)
        n *= 2;
    m->cap = cap;
    m->mask = n - 1;
    m->last = -1;
    m->v = view_new(ka);
    m->slots = malloc(n * sizeof(*m->slots));
    if (m->v == NULL || m->slots == NULL)
        return -1;
    memset(m->slots, 0xff, n * sizeof(*m->slots));
    return 0;
}

/* Adds the sums of every key of v to m; -1 when m cannot take them all
 * (the caller checks there is room first). */
static int
sums_fold(struct sums *m, const struct store_rollup_view *v)
{
    int i, c;

    for (i = 0; i < v->n; i++) {
        const struct pending *q = &v->p[i];
        struct pending *p = sums_entry(m, &q->k);

        if (p == NULL)
            return -1;
        p->g.receipts += q->g.receipts;
        p->g.fallback += q->g.fallback;
        p->g.clean += q->g.clean;
        p->g.unproven += q->g.unproven;
        p->g.schema3 += q->g.schema3;
        for (c = 0; c < RECEIPT_NCOUNTERS; c++)
            store_agg_counter_merge(&p->g.c[c], &q->g.c[c]);
    }
    m->last = -1;
    return 0;
}

/* Gives m a view of its own with the same entries, when somebody else
 * holds its view too (a published one is never changed), in an array
 * kept when one is large enough. Its index stays valid. -1 when out of
 * memory. */
static int
sums_own(struct sums *m)
{
    struct store_rollup_view *old = m->v, *v;

    if (atomic_load(&old->refs) == 1)
        return 0;
    if ((v = view_new(old->keep)) == NULL)
        return -1;
    if (old->n > 0 && view_reserve(v, old->alloc) != 0) {
        view_unref(v);
        return -1;
    }
    if (old->n > 0)
        memcpy(v->p, old->p, (size_t)old->n * sizeof(*v->p));
    v->n = old->n;
    v->from = old->from;
    v->end = old->end;
    v->has_after = 0;
    m->v = v;
    view_unref(old);
    return 0;
}

/* Exchanges the sums of a and b, views and indexes. */
static void
sums_swap(struct sums *a, struct sums *b)
{
    struct sums t = *a;

    *a = *b;
    *b = t;
}

/* The part of wait_add that touches the sums (first: no chunk waited
 * before v), on the writer's thread or bg_run's; the waiting view ends as
 * [wait_from, end). */
static int
wait_fold(struct store_rollup *ru, const struct store_rollup_view *v, int first,
          int64_t wait_from, int64_t end)
{
    struct store_rollup_view *old = ru->waiting.v;

    /* Published: kept for the queries a chunk behind, until the next. */
    if (!first && atomic_load(&old->refs) > 1) {
        view_unref(ru->wait_prev);
        ru->wait_prev = view_ref(old);
    }
    if (sums_own(&ru->waiting) != 0 || sums_fold(&ru->waiting, v) != 0)
        return -1;
    ru->waiting.v->from = wait_from;
    ru->waiting.v->end = end;
    return 0;
}

/* Adds the sums of the chunk [from, end), v, to the ones waiting. -1 when
 * out of memory (the transaction is rolled back then, and the tail's
 * reload makes the waiting sums again). */
static int
wait_add(struct store_rollup *ru, const struct store_rollup_view *v,
         int64_t from, int64_t end)
{
    if (wait_fold(ru, v, ru->wait_chunks == 0,
                  ru->wait_chunks == 0 ? from : ru->wait_from, end) != 0)
        return -1;
    if (ru->wait_chunks++ == 0)
        ru->wait_from = from;
    ru->wait_end = end;
    ru->dirty = 1;
    return 0;
}

static atomic_int bg_hold; /* store_rollup_test_hold */

void
store_rollup_test_hold(int on)
{
    atomic_store(&bg_hold, on);
}

/*
 * The fold off the writer's thread. A chunk's sums are added to the
 * waiting ones by copying those (a published view is never changed:
 * 7.5 MB for the bench's 6,400 keys) and folding the chunk's into the
 * copy: 2-4 ms on the project's machine, and 20-30 ms while the copies
 * still land in memory the process never touched, every such millisecond
 * a stall of every receipt in flight (docs/ingest.md). The writer hands
 * the fold to bg_run and goes on; queries meanwhile read the waiting view
 * as it was and the chunk's own beside it, which together say the same.
 */
static void *
bg_run(void *arg)
{
    const struct timespec ms = { 0, 1000000 };
    struct store_rollup *ru = arg;
    int rc, held;

    (void)pthread_setname_np(pthread_self(), "rollup");
    pthread_mutex_lock(&ru->bg.mu);
    for (;;) {
        while (!ru->bg.stop && !ru->bg.job)
            pthread_cond_wait(&ru->bg.cv, &ru->bg.mu);
        if (!ru->bg.job)
            break;
        ru->bg.job = 0;
        held = ru->bg.held;
        pthread_mutex_unlock(&ru->bg.mu);
        while (held && atomic_load(&bg_hold))
            nanosleep(&ms, NULL);
        rc = wait_fold(ru, ru->bg_chunk, ru->bg.first, ru->bg.from, ru->bg.end);
        pthread_mutex_lock(&ru->bg.mu);
        ru->bg.rc = rc;
        ru->bg.done = 1;
        pthread_cond_broadcast(&ru->bg.cv);
    }
    pthread_mutex_unlock(&ru->bg.mu);
    return NULL;
}

/* Starts bg_run once: 0, or -1 (the folds then stay on the writer). */
static int
bg_start(struct store_rollup *ru)
{
    if (ru->bg.started)
        return 0;
    if (pthread_mutex_init(&ru->bg.mu, NULL) != 0)
        return -1;
    if (pthread_cond_init(&ru->bg.cv, NULL) != 0) {
        pthread_mutex_destroy(&ru->bg.mu);
        return -1;
    }
    if (pthread_create(&ru->bg.thread, NULL, bg_run, ru) != 0) {
        pthread_cond_destroy(&ru->bg.cv);
        pthread_mutex_destroy(&ru->bg.mu);
        return -1;
    }
    ru->bg.started = 1;
    return 0;
}

/* Whether the fold handed over has ended (without waiting for it). */
static int
bg_ended(struct store_rollup *ru)
{
    int done;

    pthread_mutex_lock(&ru->bg.mu);
    done = ru->bg.done;
    pthread_mutex_unlock(&ru->bg.mu);
    return done;
}

/* Lets go of the views published while a fold was under way. */
static void
bg_release(struct store_rollup *ru)
{
    view_unref(ru->bg_base);
    view_unref(ru->bg_chunk);
    ru->bg_base = ru->bg_chunk = NULL;
}

/* Waits for the fold handed over, if any: 0, or -1 when one ran out of
 * memory (now or before): the waiting sums are then half made, the
 * writer's transaction fails, and the rollback's reload makes them again
 * from the rows (store_rollup_rewaited, store_rollup_discard_all). Till
 * then queries read bg_base and bg_chunk, which still say the truth. */
static int
bg_settle(struct store_rollup *ru)
{
    if (ru->bg_pending) {
        pthread_mutex_lock(&ru->bg.mu);
        while (!ru->bg.done)
            pthread_cond_wait(&ru->bg.cv, &ru->bg.mu);
        ru->bg.done = 0;
        ru->bg_failed = ru->bg.rc != 0;
        pthread_mutex_unlock(&ru->bg.mu);
        ru->bg_pending = 0;
        ru->dirty = 1;
    }
    if (ru->bg_failed)
        return -1;
    bg_release(ru);
    return 0;
}

/* After a reload or a discard: a failed fold's views go. */
static void
bg_forget(struct store_rollup *ru)
{
    (void)bg_settle(ru);
    ru->bg_failed = 0;
    bg_release(ru);
}

/* wait_add with the fold handed to bg_run; v is the caller's, and a
 * reference to it is taken. Falls back to wait_add on the writer when the
 * thread cannot be had. */
static int
wait_hand_over(struct store_rollup *ru, struct store_rollup_view *v,
               int64_t from, int64_t end)
{
    if (bg_start(ru) != 0)
        return wait_add(ru, v, from, end);
    ru->bg_base = ru->wait_chunks > 0 ? view_ref(ru->waiting.v) : NULL;
    ru->bg_chunk = view_ref(v);
    pthread_mutex_lock(&ru->bg.mu);
    ru->bg.first = ru->wait_chunks == 0;
    ru->bg.from = ru->wait_chunks == 0 ? from : ru->wait_from;
    ru->bg.end = end;
    ru->bg.held = atomic_load(&bg_hold);
    ru->bg.job = 1;
    pthread_cond_signal(&ru->bg.cv);
    pthread_mutex_unlock(&ru->bg.mu);
    ru->bg_pending = 1;
    if (ru->wait_chunks++ == 0)
        ru->wait_from = from;
    ru->wait_end = end;
    ru->dirty = 1;
    return 0;
}

/* Ends bg_run (after its fold). */
static void
bg_stop(struct store_rollup *ru)
{
    if (!ru->bg.started)
        return;
    bg_forget(ru);
    pthread_mutex_lock(&ru->bg.mu);
    ru->bg.stop = 1;
    pthread_cond_signal(&ru->bg.cv);
    pthread_mutex_unlock(&ru->bg.mu);
    pthread_join(ru->bg.thread, NULL);
    pthread_cond_destroy(&ru->bg.cv);
    pthread_mutex_destroy(&ru->bg.mu);
    ru->bg.started = 0;
}

/* Empties the sums waiting; -1 when out of memory for a new view. */
static int
wait_clear(struct store_rollup *ru)
{
    ru->wait_chunks = 0;
    view_unref(ru->wait_prev);
    ru->wait_prev = NULL;
    return sums_clear(&ru->waiting);
}

/* The key k of a receipt (received_at its time) as its sums are kept:
 * received_at at the start of its bucket. */
static struct store_rollup_key
bucket_key(const struct store_rollup_key *k)
{
    struct store_rollup_key bk = *k;

    bk.received_at = k->received_at / STORE_BUCKET_MS * STORE_BUCKET_MS;
    return bk;
}

/* Adds r, under the key k (whose received_at is the receipt's), to m. */
static int
sums_add(struct sums *m, const struct store_rollup_key *k,
         const struct receipt *r, struct proto_err *err)
{
    struct store_rollup_key bk = bucket_key(k);
    struct pending *p;
    uint64_t bits;
    int i, status;

    /* Receipts of one write share their time and source and mostly their
     * model, plan and backends: summing them here first turns a chunk into
     * one row update per key instead of one per receipt. */
    if (m->last >= 0 && key_eq(&m->v->p[m->last].k, &bk)) {
        p = &m->v->p[m->last];
        goto add;
    }
    /* The tail checks store_rollup_full() before every receipt, and the
     * sealed sums hold chunks of the tail, no more keys than fit: NULL is
     * a failed allocation. */
    if ((p = sums_entry(m, &bk)) == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    m->last = (int)(p - m->v->p);
add:
    status = receipt_status(r);
    p->g.receipts++;
    p->g.fallback += status == RECEIPT_STATUS_FALLBACK;
    p->g.clean += status == RECEIPT_STATUS_CLEAN;
    p->g.unproven += status == RECEIPT_STATUS_UNPROVEN;
    p->g.schema3 += r->schema_version == 3;
    /* Bits beyond the receipt's schema are kept in the receipt but mean
     * nothing, so they count as neither measured nor a value. */
    bits = r->counter_coverage & receipt_meaningful_bits(r->schema_version);
    for (i = 0; i < RECEIPT_NCOUNTERS; i++)
        if (bits >> i & 1)
            store_agg_counter_add(&p->g.c[i], r->counters[i]);
    return 0;
}

/* Asks the CPU for the entries of m that receipts r[0..n) under keys
 * k[0..n) will add to (sums_add), in two passes over them: the index
 * slots first, then each key's entry and the counters its receipt
 * measured. A run of single receipts from many sources finds each entry
 * out of the cache (thousands of keys of 1,170 bytes); asked for
 * together, their misses overlap instead of following one another. */
static void
sums_prefetch(const struct sums *m, const struct store_rollup_key *k,
              const struct receipt *const *r, size_t n)
{
    size_t slot[STORE_ROLLUP_PREFETCH_MAX], i;
    struct store_rollup_key bk;
    const struct pending *p;
    uint64_t bits;
    int idx, b;

    if (n > STORE_ROLLUP_PREFETCH_MAX)
        n = STORE_ROLLUP_PREFETCH_MAX;
    for (i = 0; i < n; i++) {
        bk = bucket_key(&k[i]);
        slot[i] = key_slot(&bk) & m->mask;
        __builtin_prefetch(&m->slots[slot[i]]);
    }
    for (i = 0; i < n; i++) {
        if ((idx = m->slots[slot[i]]) < 0)
            continue;
        p = &m->v->p[idx];
        __builtin_prefetch(&p->k);
        __builtin_prefetch(&p->g.receipts, 1);
        bits = r[i]->counter_coverage &
               receipt_meaningful_bits(r[i]->schema_version);
        for (b = 0; b < RECEIPT_NCOUNTERS; b++)
            if (bits >> b & 1)
                __builtin_prefetch(&p->g.c[b], 1);
    }
}

void
store_rollup_prefetch(const struct store_rollup *ru,
                      const struct store_rollup_key *k,
                      const struct receipt *const *r, size_t n)
{
    if (ru != NULL)
        sums_prefetch(&ru->tail, k, r, n);
}

/* Records in rollup_merge how far the merge is: rollup_from, and the last
 * key merged of [rollup_from, tail_from) (none when k is NULL). */
static int
set_merge(struct store *s, struct store_rollup *ru, int64_t from,
          const struct store_rollup_key *k, struct proto_err *err)
{
    sqlite3_stmt *st = ru->set_merge;
    int rc;

    sqlite3_bind_int64(st, 1, from);
    if (k != NULL) {
        sqlite3_bind_int64(st, 2, k->plan_id);
        sqlite3_bind_int64(st, 3, k->graph_id);
        sqlite3_bind_int64(st, 4, k->model_id);
        sqlite3_bind_int(st, 5, k->requested);
        sqlite3_bind_int(st, 6, k->executed);
        sqlite3_bind_int64(st, 7, k->source_id);
        sqlite3_bind_int64(st, 8, k->received_at / STORE_BUCKET_MS);
    } else {
        int i;

        for (i = 2; i <= 8; i++)
            sqlite3_bind_null(st, i);
    }
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return store_fail(s, rc, err, "record the rollup merge");
    return 0;
}

/* Sorts the sealed sums by key, for merging. */
static void
order_sealed(struct store_rollup *ru)
{
    int i;

    for (i = 0; i < ru->sealed.v->n; i++)
        ru->order[i] = &ru->sealed.v->p[i];
    qsort(ru->order, (size_t)ru->sealed.v->n, sizeof(*ru->order), key_cmp_cb);
    ru->merged = 0;
}

/*
 * Writes up to quota more of the sealed sums into the rollup rows, in key
 * order, and records how far it got; the last slice closes the merge:
 * rollup_from reaches the end of the sealed chunk, and the hours before
 * the newest one it reached, which are over, go into their days (once,
 * instead of every chunk updating both levels).
 */
static int
merge(struct store *s, struct store_rollup *ru, int quota,
      struct proto_err *err)
{
    int64_t days_from, now_hour = INT64_MIN;
    int end, n, i, rc;

    if (ru->sealed_end <= ru->sealed_from)
        return 0;
    if ((rc = store_counter(s, "days_from", 0, &days_from, err)))
        return rc;
    n = ru->sealed.v->n;
    end = n - ru->merged <= quota ? n : ru->merged + quota;
    /* A key of an hour folded already (a clock that stepped back) adds
     * to its day row too. */
    for (i = ru->merged; i < end && rc == 0; i++) {
        const struct pending *p = ru->order[i];

        rc = write_pending(s, &ru->lv[0], levels[0].ms, p, err);
        if (rc == 0 && p->k.received_at / STORE_BUCKET_MS < days_from)
            rc = write_pending(s, &ru->lv[1], levels[1].ms, p, err);
    }
    if (rc != 0)
        return rc;
    ru->merged = end;
    if (end < n)
        return set_merge(s, ru, ru->sealed_from, &ru->order[end - 1]->k, err);
    for (i = 0; i < n; i++)
        if (ru->sealed.v->p[i].k.received_at / STORE_BUCKET_MS > now_hour)
            now_hour = ru->sealed.v->p[i].k.received_at / STORE_BUCKET_MS;
    if ((rc = set_merge(s, ru, ru->sealed_end, NULL, err)))
        return rc;
    if (now_hour > days_from) {
        if ((rc = fold_hours(s, ru, days_from, now_hour, err)) ||
            (rc = store_counter_set(s, "days_from", now_hour, err)))
            return rc;
    }
    ru->merged = 0;
    ru->sealed_from = ru->sealed_end;
    ru->dirty = 1;
    if (sums_clear(&ru->sealed) != 0)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    return 0;
}

/* Where the sums not yet sealed start (the rollup_end counter): queries
 * read the receipts of [rollup_end, tail_from) from their rows. */
static int
set_end(struct store *s, struct store_rollup *ru, struct proto_err *err)
{
    return store_counter_set(s, "rollup_end", ru->wait_from, err);
}

/* Seals the chunks waiting: what is left of the last merge goes now, and
 * their sums, summed per key, become the ones merged over the commits that
 * follow. */
static int
seal(struct store *s, struct store_rollup *ru, struct proto_err *err)
{
    int rc;

    if (bg_settle(ru) != 0)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    if (ru->wait_chunks == 0)
        return 0;
    if ((rc = merge(s, ru, INT_MAX, err)))
        return rc;
    /* The waiting sums (their view already says [wait_from, wait_end))
     * become the sealed ones, and the sealed ones, all merged, the empty
     * waiting ones. */
    sums_swap(&ru->sealed, &ru->waiting);
    ru->sealed_from = ru->wait_from;
    ru->sealed_end = ru->wait_end;
    ru->wait_from = ru->wait_end;
    if (wait_clear(ru) != 0)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    ru->added = 0;
    ru->dirty = 1;
    order_sealed(ru);
    if ((rc = set_merge(s, ru, ru->sealed_from, NULL, err)))
        return rc;
    return set_end(s, ru, err);
}

/* ---- sums per chunk (migrations/0014, keyed by plan since 0017) ---- */

/* The most entries a chunk's sums row holds: 100 plans, each with a few
 * backend pairs, over two hours fit. A chunk with more (many plans, or a
 * span of many hours) gets no row and is read from its rows. The slots
 * are int16_t indexes, so at most 32,768 of them. */
#define CHUNK_SUMS_MAX   4096
#define CHUNK_SUMS_SLOTS 8192

struct narrow {
    struct store_rollup_key k; /* all but source_id */
    struct store_agg_group g;
};

/* The writer's scratch for folding a chunk's view (kept between chunks). */
struct chunk_fold {
    struct narrow *e; /* alloc entries */
    int alloc;
    int16_t slots[CHUNK_SUMS_SLOTS];
};

static void
chunk_fold_free(struct chunk_fold *f)
{
    if (f != NULL)
        free(f->e);
    free(f);
}

static int
narrow_eq(const struct store_rollup_key *a, const struct store_rollup_key *b)
{
    return a->plan_id == b->plan_id && a->requested == b->requested &&
           a->executed == b->executed && a->received_at == b->received_at &&
           a->model_id == b->model_id && a->graph_id == b->graph_id;
}

/* The sums entry of the view's entry q in f (n in use), made when new; -1
 * when f is full (the chunk gets no row) or out of memory (-2). */
static int
fold_slot(struct chunk_fold *f, int *n, const struct pending *q)
{
    /* A plan fixes its graph and model: the plan and backends spread the
     * keys; the hour seldom differs within a chunk. */
    unsigned j =
        (unsigned)(((uint64_t)q->k.plan_id * 0x9e3779b97f4a7c15ull ^
                    (uint64_t)(q->k.requested * 8 + q->k.executed) *
                        0xff51afd7ed558ccdull ^
                    (uint64_t)q->k.received_at * 0xc2b2ae3d27d4eb4full) >>
                   40) &
        (CHUNK_SUMS_SLOTS - 1);
    struct narrow *e;

    while (f->slots[j] >= 0) {
        e = &f->e[f->slots[j]];
        if (narrow_eq(&e->k, &q->k))
            return f->slots[j];
        j = (j + 1) & (CHUNK_SUMS_SLOTS - 1);
    }
    if (*n == CHUNK_SUMS_MAX)
        return -1;
    if (*n == f->alloc) {
        int alloc = f->alloc ? f->alloc * 2 : 256;

        if ((e = realloc(f->e, (size_t)alloc * sizeof(*e))) == NULL)
            return -2;
        f->e = e;
        f->alloc = alloc;
    }
    e = &f->e[*n];
    e->k = q->k;
    e->k.source_id = 0;
    memset(&e->g, 0, sizeof(e->g));
    f->slots[j] = (int16_t)*n;
    return (*n)++;
}

/* Folds the view of chunk first_id to plan (with its graph and model),
 * backends and hour, and writes it as the chunk's row of chunk_sums.
 * Inside the writer's transaction, with the chunk's own row. */
static int
chunk_sums_put(struct store *s, struct store_rollup *ru, int64_t first_id,
               const struct store_rollup_view *v, struct proto_err *err)
{
    struct chunk_fold *f = ru->fold;
    unsigned char *buf, *p;
    size_t counts;
    int n = 0, i, rc = 0;

    if (ru->put_sums == NULL &&
        (rc = sqlite3_prepare_v3(store_db(s),
                                 "INSERT INTO chunk_sums (chunk, sums, "
                                 "figures) VALUES (?1, ?2, ?3)",
                                 -1, SQLITE_PREPARE_PERSISTENT, &ru->put_sums,
                                 NULL)) != SQLITE_OK)
        return store_fail(s, rc, err, "prepare a query");
    if (f == NULL && (f = ru->fold = calloc(1, sizeof(*f))) == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    memset(f->slots, 0xff, sizeof(f->slots));
    for (i = 0; i < v->n; i++) {
        const struct pending *q = &v->p[i];
        struct store_agg_group *g;
        int j = fold_slot(f, &n, q), c;

        if (j == -1)
            return 0; /* no row: the chunk is read from its rows */
        if (j < 0)
            return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        g = &f->e[j].g;
        g->receipts += q->g.receipts;
        g->fallback += q->g.fallback;
        g->clean += q->g.clean;
        g->unproven += q->g.unproven;
        g->schema3 += q->g.schema3;
        for (c = 0; c < RECEIPT_NCOUNTERS; c++)
            if (q->g.c[c].measured != 0)
                store_agg_counter_merge(&g->c[c], &q->g.c[c]);
    }
    /* The keys and counts first, the figures in a column of their own
     * after them: `fallbacks` reads the first alone (a short column at
     * the start of the record, whatever the overflow pages hold). */
    if ((buf = malloc(10 + (size_t)n * (11 * 10 + 3 +
                                        STORE_ROLLUP_FIGURES_MAX))) == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    p = store_varint_put(buf, (uint64_t)n);
    for (i = 0; i < n; i++) {
        const struct narrow *e = &f->e[i];

        p = store_varint_put(p, (uint64_t)e->k.plan_id);
        p = store_varint_put(p, (uint64_t)e->k.graph_id);
        p = store_varint_put(p, (uint64_t)e->k.model_id);
        p = store_varint_put(p, (uint64_t)e->k.requested);
        p = store_varint_put(p, (uint64_t)e->k.executed);
        p = store_varint_put(p, (uint64_t)(e->k.received_at / STORE_BUCKET_MS));
        p = store_varint_put(p, e->g.receipts);
        p = store_varint_put(p, e->g.fallback);
        p = store_varint_put(p, e->g.clean);
        p = store_varint_put(p, e->g.unproven);
        p = store_varint_put(p, e->g.schema3);
    }
    counts = (size_t)(p - buf);
    for (i = 0; i < n; i++) {
        unsigned char fig[STORE_ROLLUP_FIGURES_MAX];
        size_t fl = store_rollup_figures(&f->e[i].g, fig);

        p = store_varint_put(p, (uint64_t)fl);
        memcpy(p, fig, fl);
        p += fl;
    }
    sqlite3_bind_int64(ru->put_sums, 1, first_id);
    sqlite3_bind_blob(ru->put_sums, 2, buf, (int)counts, SQLITE_STATIC);
    sqlite3_bind_blob(ru->put_sums, 3, buf + counts, (int)(p - buf - counts),
                      SQLITE_STATIC);
    rc = sqlite3_step(ru->put_sums);
    sqlite3_reset(ru->put_sums);
    rc = rc == SQLITE_DONE ? 0 : store_fail(s, rc, err, "store a chunk's sums");
    free(buf);
    return rc;
}

int
store_rollup_chunk_sums_walk(const void *sums, size_t len, const void *figures,
                             size_t flen, store_rollup_walk_cb cb, void *arg)
{
    const unsigned char *p = sums, *end = p + len;
    const unsigned char *q = figures, *qend = q + flen;
    uint64_t n, i, v[11], fl;
    int w, rc;

    if (p == NULL || (p = store_varint_get(p, end, &n)) == NULL)
        return 0;
    for (i = 0; i < n; i++) {
        struct store_rollup_key k = { 0 };
        struct store_agg_group g;

        for (w = 0; w < 11 && p != NULL; w++)
            p = store_varint_get(p, end, &v[w]);
        if (p == NULL)
            return 0;
        memset(&g, 0, sizeof(g));
        k.plan_id = (int64_t)v[0];
        k.graph_id = (int64_t)v[1];
        k.model_id = (int64_t)v[2];
        k.requested = (int)v[3];
        k.executed = (int)v[4];
        k.received_at = (int64_t)v[5] * STORE_BUCKET_MS;
        g.receipts = v[6];
        g.fallback = v[7];
        g.clean = v[8];
        g.unproven = v[9];
        g.schema3 = v[10];
        if (q != NULL) {
            if ((q = store_varint_get(q, qend, &fl)) == NULL ||
                fl > (uint64_t)(qend - q))
                return 0;
            read_figures(q, (size_t)fl, &g);
            q += fl;
        }
        if ((rc = cb(arg, &k, &g)) != 0)
            return rc;
    }
    return 0;
}

int
store_rollup_chunk(struct store *s, struct store_rollup *ru, int64_t first_id,
                   int64_t end_id, struct proto_err *err)
{
    struct store_rollup_view *v;
    int rc;

    if (ru == NULL)
        return 0;
    if (bg_settle(ru) != 0)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    /* The tail's sums wait with those of the chunks before it, or, when
     * the keys of all might not fit, after those are sealed. */
    if (ru->waiting.v->n + ru->tail.v->n > WAIT_MAX && (rc = seal(s, ru, err)))
        return rc;
    if ((v = sums_take(&ru->tail, first_id, end_id)) == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    if ((rc = chunk_sums_put(s, ru, first_id, v, err)) == 0 &&
        wait_hand_over(ru, v, first_id, end_id) != 0)
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    view_unref(v);
    if (rc != 0)
        return rc;
    if (ru->wait_chunks >= ru->span)
        return seal(s, ru, err);
    return set_end(s, ru, err);
}

int
store_rollup_seal_all(struct store *s, struct store_rollup *ru,
                      struct proto_err *err)
{
    int rc;

    if (ru == NULL)
        return 0;
    if ((rc = merge(s, ru, INT_MAX, err)) || (rc = seal(s, ru, err)))
        return rc;
    return merge(s, ru, INT_MAX, err);
}

/* Keys per slice at least. A key costs a row update of about 5-10 us, so
 * a slice of this many adds well under a millisecond to a commit. */
#define MERGE_MIN_KEYS 32

int
store_rollup_merge_step(struct store *s, struct store_rollup *ru,
                        struct proto_err *err)
{
    uint64_t quota, span;

    if (ru == NULL || ru->sealed_end <= ru->sealed_from)
        return 0;
    /* Paced by what arrives: a commit of k receipts merges the keys of k
     * receipts of the sealed chunks, and a quarter more, so that the
     * merge is done when four fifths as many have arrived, before the
     * next chunks are sealed; at least MERGE_MIN_KEYS, so that a light
     * load, whose commits are many and small, is done long before. */
    span = (uint64_t)(ru->sealed_end - ru->sealed_from);
    quota = (uint64_t)ru->sealed.v->n * 5 * ru->added / 4 / (span ? span : 1);
    ru->added = 0;
    if (quota < MERGE_MIN_KEYS)
        quota = MERGE_MIN_KEYS;
    return merge(s, ru, quota > INT_MAX ? INT_MAX : (int)quota, err);
}

int
store_rollup_merge_keys(struct store *s, struct store_rollup *ru, int keys,
                        struct proto_err *err)
{
    return ru == NULL ? 0 : merge(s, ru, keys, err);
}

int
store_rollup_merging(const struct store_rollup *ru)
{
    return ru != NULL && ru->sealed_end > ru->sealed_from;
}

int
store_rollup_waiting(const struct store_rollup *ru)
{
    return ru != NULL && ru->wait_chunks > 0;
}

int
store_rollup_seal_waiting(struct store *s, struct store_rollup *ru,
                          struct proto_err *err)
{
    if (ru == NULL || store_rollup_merging(ru))
        return 0;
    return seal(s, ru, err);
}

void
store_rollup_discard_all(struct store_rollup *ru)
{
    if (ru == NULL)
        return;
    bg_forget(ru);
    ru->dirty = 0;
    /* A view another holds is left to them: what fails to get new memory
     * here fails again at its next use. */
    (void)wait_clear(ru);
    (void)sums_clear(&ru->tail);
    (void)sums_clear(&ru->sealed);
    (void)sums_clear(&ru->scratch);
    ru->merged = 0;
    ru->sealed_from = ru->sealed_end = 0;
    ru->wait_from = ru->wait_end = 0;
    ru->added = 0;
}

int
store_rollup_full(const struct store_rollup *ru)
{
    return ru != NULL && ru->tail.v->n >= TXN_MAX;
}

static int
rollup_open(struct store *s, struct store_rollup **rup, struct proto_err *err)
{
    struct store_rollup *ru;
    int rc, i;

    if (*rup != NULL)
        return 0;
    ru = calloc(1, sizeof(*ru));
    if (ru == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    ru->span = store_rollup_span(s);
    ru->shared = store_shared_of(s);
    ru->order = malloc(WAIT_MAX * sizeof(*ru->order));
    ru->keep = arrays_new();
    if (ru->order == NULL || ru->keep == NULL ||
        sums_alloc(&ru->tail, TXN_MAX, ru->keep) != 0 ||
        sums_alloc(&ru->waiting, WAIT_MAX, ru->keep) != 0 ||
        sums_alloc(&ru->scratch, WAIT_MAX, ru->keep) != 0 ||
        sums_alloc(&ru->sealed, WAIT_MAX, ru->keep) != 0) {
        store_rollup_free(ru);
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    }
    rc = sqlite3_create_function(store_db(s), "rollup_merge", 2,
                                 SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL,
                                 merge_fn, NULL, NULL);
    if (rc != SQLITE_OK) {
        store_rollup_free(ru);
        return store_fail(s, rc, err, "register rollup_merge");
    }
    for (i = 0; i < STORE_LEVELS; i++)
        if ((rc = prepare(s, &ru->lv[i], levels[i].table, err)) != 0) {
            store_rollup_free(ru);
            return rc;
        }
    if ((rc = sqlite3_prepare_v3(
             store_db(s),
             "SELECT plan_id, graph_id, model_id, requested_backend, "
             "executed_backend, source_id, bucket, receipts, fallback, "
             "clean, unproven, figures, schema3 FROM rollups WHERE bucket "
             ">= ?1 "
             "AND bucket < ?2",
             -1, SQLITE_PREPARE_PERSISTENT, &ru->hours, NULL)) ||
        (rc = sqlite3_prepare_v3(
             store_db(s),
             "UPDATE rollup_merge SET rollup_from = ?1, plan_id = ?2, "
             "graph_id = ?3, model_id = ?4, requested_backend = ?5, "
             "executed_backend = ?6, source_id = ?7, bucket = ?8",
             -1, SQLITE_PREPARE_PERSISTENT, &ru->set_merge, NULL))) {
        rc = store_fail(s, rc, err, "prepare the rollups");
        store_rollup_free(ru);
        return rc;
    }
    *rup = ru;
    return 0;
}

int
store_rollup_add(struct store *s, struct store_rollup **rup,
                 const struct store_rollup_key *k, const struct receipt *r,
                 struct proto_err *err)
{
    int rc;

    if ((rc = rollup_open(s, rup, err)))
        return rc;
    (*rup)->added++;
    return sums_add(&(*rup)->tail, k, r, err);
}

int
store_rollup_merge_state(struct store *s, struct store_rollup_merge *m,
                         struct proto_err *err)
{
    sqlite3_stmt *st;
    int rc;

    memset(m, 0, sizeof(*m));
    rc = sqlite3_prepare_v2(store_db(s),
                            "SELECT rollup_from, plan_id, graph_id, model_id, "
                            "requested_backend, executed_backend, source_id, "
                            "bucket FROM rollup_merge",
                            -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "read the rollup merge");
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        m->from = sqlite3_column_int64(st, 0);
        m->has_key = sqlite3_column_type(st, 1) != SQLITE_NULL;
        m->key.plan_id = sqlite3_column_int64(st, 1);
        m->key.graph_id = sqlite3_column_int64(st, 2);
        m->key.model_id = sqlite3_column_int64(st, 3);
        m->key.requested = sqlite3_column_int(st, 4);
        m->key.executed = sqlite3_column_int(st, 5);
        m->key.source_id = sqlite3_column_int64(st, 6);
        m->key.received_at = sqlite3_column_int64(st, 7) * STORE_BUCKET_MS;
        rc = SQLITE_DONE;
    } else if (rc == SQLITE_DONE) {
        m->from = INT64_MAX; /* no row: nothing is being merged */
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return store_fail(s, rc, err, "read the rollup merge");
    /* Before rollup_end was kept, every chunk was sealed as it was
     * written: the sums not sealed were the tail's. */
    if ((rc = store_counter(s, "tail_from", 1, &m->tail, err)) ||
        (rc = store_counter(s, "rollup_end", m->tail, &m->end, err)))
        return rc;
    if (m->end > m->tail)
        m->end = m->tail;
    if (m->from > m->end)
        m->from = m->end;
    return 0;
}

int
store_rollup_key_after(const struct store_rollup_key *k,
                       const struct store_rollup_key *last)
{
    struct store_rollup_key bk = bucket_key(k);

    return key_cmp(&bk, last) > 0;
}

int
store_rollup_reseal(struct store *s, struct store_rollup **rup,
                    int64_t first_id, int64_t end_id, struct proto_err *err)
{
    int rc;

    if ((rc = rollup_open(s, rup, err)))
        return rc;
    if (sums_clear(&(*rup)->sealed) != 0)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    (*rup)->merged = 0;
    (*rup)->sealed.v->from = (*rup)->sealed_from = first_id;
    (*rup)->sealed.v->end = (*rup)->sealed_end = end_id;
    return 0;
}

int
store_rollup_add_sealed(struct store_rollup *ru,
                        const struct store_rollup_key *k,
                        const struct receipt *r, struct proto_err *err)
{
    return sums_add(&ru->sealed, k, r, err);
}

void
store_rollup_resealed(struct store_rollup *ru,
                      const struct store_rollup_merge *m)
{
    if (ru == NULL || ru->sealed_end <= ru->sealed_from)
        return;
    /* Rebuilt from the keys after the merge's: it holds no others. */
    ru->sealed.v->has_after = m->has_key;
    ru->sealed.v->after = m->key;
    order_sealed(ru);
}

int
store_rollup_rewait(struct store *s, struct store_rollup **rup,
                    struct proto_err *err)
{
    int rc;

    if ((rc = rollup_open(s, rup, err)))
        return rc;
    return sums_clear(&(*rup)->scratch) == 0
               ? 0
               : proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
}

int
store_rollup_add_waiting(struct store_rollup *ru,
                         const struct store_rollup_key *k,
                         const struct receipt *r, struct proto_err *err)
{
    return sums_add(&ru->scratch, k, r, err);
}

int
store_rollup_rewaited(struct store_rollup *ru, int64_t first_id, int64_t end_id,
                      int chunks, struct proto_err *err)
{
    /* What the scratch rebuilt becomes the waiting sums. */
    bg_forget(ru);
    if (wait_clear(ru) != 0)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    sums_swap(&ru->waiting, &ru->scratch);
    ru->waiting.v->from = first_id;
    ru->waiting.v->end = end_id;
    ru->wait_from = first_id;
    ru->wait_end = end_id;
    ru->wait_chunks = chunks < 1 ? 1 : chunks;
    return 0;
}

/* The views the writer holds, in id order, into v; their number. */
static int
views_of(struct store_rollup *ru, struct store_rollup_view **v)
{
    int n = 0;

    if (ru->sealed_end > ru->sealed_from)
        v[n++] = ru->sealed.v;
    if (ru->bg_pending || ru->bg_failed) {
        /* The waiting sums are bg_run's: what they were, and the chunk
         * being added to them. */
        if (ru->bg_base != NULL)
            v[n++] = ru->bg_base;
        v[n++] = ru->bg_chunk;
        return n;
    }
    if (ru->wait_prev != NULL)
        v[n++] = ru->wait_prev;
    if (ru->wait_chunks > 0)
        v[n++] = ru->waiting.v;
    return n;
}

void
store_rollup_publish(struct store_rollup *ru)
{
    struct store_rollup_view *v[SHARED_VIEWS_MAX];

    if (ru == NULL)
        return;
    /* A fold that has ended: its view goes out now. */
    if (ru->bg_pending && bg_ended(ru))
        (void)bg_settle(ru);
    if (ru->shared == NULL || !ru->dirty)
        return;
    shared_set(ru->shared, v, views_of(ru, v));
    ru->dirty = 0;
}

void
store_rollup_reloaded(struct store *s, struct store_rollup *ru)
{
    struct store_shared *sh = store_shared_of(s);

    if (sh == NULL)
        return;
    if (ru == NULL) {
        shared_set(sh, NULL, 0);
        return;
    }
    ru->dirty = 1;
    store_rollup_publish(ru);
}

int
store_rollup_views(struct store_shared *sh, const struct store_rollup_merge *m,
                   struct store_rollup_view **v, int *n)
{
    int64_t next = m->from;
    int i, ok = 1;

    *n = 0;
    if (sh == NULL)
        return 0;
    if (m->from >= m->tail) {
        atomic_fetch_add(&sh->hits, 1);
        return 1;
    }
    pthread_mutex_lock(&sh->mu);
    while (next < m->tail && ok) {
        struct store_rollup_view *w = NULL;

        /* Of the views from next (the waiting sums before and after the
         * last chunk), the longest this snapshot sees all of. */
        for (i = 0; i < sh->n; i++)
            if (sh->v[i]->from == next && sh->v[i]->end <= m->tail &&
                (w == NULL || sh->v[i]->end > w->end))
                w = sh->v[i];
        /* Each view on one side of rollup_end; a reloaded one starts at a
         * key this snapshot has merged already. */
        ok =
            w != NULL && w->end > next &&
            (w->end <= m->end || w->from >= m->end) &&
            (!w->has_after || (m->has_key && key_cmp(&m->key, &w->after) >= 0));
        if (ok) {
            v[(*n)++] = view_ref(w);
            next = w->end;
        }
    }
    pthread_mutex_unlock(&sh->mu);
    if (ok && next == m->tail) {
        atomic_fetch_add(&sh->hits, 1);
        return 1;
    }
    atomic_fetch_add(&sh->misses, 1);
    store_rollup_views_release(v, *n);
    *n = 0;
    return 0;
}

void
store_shared_counts(struct store_shared *sh, uint64_t *hits, uint64_t *misses)
{
    *hits = sh ? atomic_load(&sh->hits) : 0;
    *misses = sh ? atomic_load(&sh->misses) : 0;
}

void
store_rollup_views_release(struct store_rollup_view **v, int n)
{
    int i;

    for (i = 0; i < n; i++)
        view_unref(v[i]);
}

int
store_rollup_views_walk(struct store_rollup_view *const *v, int n,
                        const struct store_rollup_merge *m,
                        store_rollup_walk_cb cb, void *arg)
{
    int i, j, rc;

    for (i = 0; i < n; i++) {
        int merging = v[i]->end <= m->end && m->has_key;

        for (j = 0; j < v[i]->n; j++) {
            const struct pending *p = &v[i]->p[j];

            if (merging && key_cmp(&p->k, &m->key) <= 0)
                continue;
            if ((rc = cb(arg, &p->k, &p->g)) != 0)
                return rc;
        }
    }
    return 0;
}
