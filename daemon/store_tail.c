/*
 * store_tail.c: the tail of the receipts table and the chunks it becomes
 * (migrations/0007).
 *
 * Runs on the writer thread only, with the read-write store. Receipts with
 * id >= tail_from are the tail: the writer holds, in memory, what they add
 * to the postings (ids per key value) and to the rollups (sums per key and
 * hour, store_rollup.c), and nothing else is written for them but their
 * rows. When the tail reaches STORE_CHUNK_RECEIPTS receipts (or the rollups
 * hold as many keys as they may, or retention wants one of its receipts
 * gone), store_tail_flush() writes it as one
 * chunk: a `chunks` row, one `postings` row per key value, the rollup sums,
 * and the new tail_from, all inside the caller's transaction. So the cost
 * of every secondary structure is paid once per chunk and key, not once
 * per receipt.
 *
 * The memory is a cache of what the tail rows say, and is rebuilt from
 * them whenever it may disagree: at open, and after any rollback (a
 * savepoint's or a transaction's), since a rolled-back insert or flush
 * takes its part with it. That costs one read of at most a chunk of rows,
 * and keeps the invariant simple: postings and rollups cover exactly the
 * receipts below tail_from, and the tail is exactly what the memory holds.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <roaring/roaring.h>

#include "store_internal.h"
#include "store_rollup.h"
#include "store_row.h"
#include "store_tail.h"
#include "store_seq.h"

/* One key value's receipts in the tail, as offsets from the tail's first
 * id, ascending (ids are assigned in order). */
struct list {
    int kind;
    int64_t value;
    uint32_t *ids;
    size_t n, cap;
};

struct store_tail {
    int64_t first_id;          /* tail_from */
    int64_t next_id;           /* the id the next receipt gets */
    int64_t first_at, last_at; /* received_at range of the tail */
    int64_t prev_at;           /* received_at of the newest receipt */
    int ordered;               /* received_at never fell from id to id */
    uint64_t n;                /* receipts in the tail */
    uint64_t chunk;            /* receipts that make a chunk */
    struct list *lists;
    size_t nlists, cap;
    size_t *slots; /* open addressing into lists; nslots a power of two */
    size_t nslots;
    /* Per kind, 1 + the list the last receipt went to (0: none): the
     * receipts of one write mostly share their source, status, model. */
    size_t last[STORE_KIND_COUNT];
    sqlite3_stmt *put_posting, *put_chunk;
    /* The records of the tail's `receipt` writes: written with the chunk
     * as one run per source (store_seq.c) instead of one B-tree leaf per
     * source in every commit. They are what the rows say (source, seq,
     * id, status), so a reload rebuilds them like the rest. In the order
     * they came (nlog of them), and an index by (source, seq) of the
     * first `indexed` (open addressing, idxcap a power of two, each slot
     * 1 + a record's place, 0 free). A record whose seq is above its
     * source's mark cannot be there already, so it is only appended; the
     * index catches up when a lookup needs it, which under producers
     * that send each seq once is never. */
    struct store_seq_entry *log;
    size_t nlog, logcap, indexed;
    uint32_t *idx;
    size_t idxcap;
    int64_t empty_source; /* the string id of "" (no hello): no dedupe */
};

static size_t
slot_of(int kind, int64_t value, size_t nslots)
{
    uint64_t h = ((uint64_t)value * 0x9e3779b97f4a7c15ull) ^ (uint64_t)kind;

    h *= 0xbf58476d1ce4e5b9ull;
    return (size_t)(h >> 29) & (nslots - 1);
}

static void
clear_lists(struct store_tail *t)
{
    size_t i;

    for (i = 0; i < t->nlists; i++)
        free(t->lists[i].ids);
    t->nlists = 0;
    memset(t->last, 0, sizeof(t->last));
    if (t->slots != NULL)
        memset(t->slots, 0xff, t->nslots * sizeof(*t->slots));
    if (t->indexed > 0)
        memset(t->idx, 0, t->idxcap * sizeof(*t->idx));
    t->nlog = t->indexed = 0;
}

static size_t
seq_slot(int64_t source_id, int64_t seq, size_t cap)
{
    uint64_t h = ((uint64_t)source_id * 0x9e3779b97f4a7c15ull) ^ (uint64_t)seq;

    h *= 0xbf58476d1ce4e5b9ull;
    return (size_t)(h >> 29) & (cap - 1);
}

/* The index slot of (source_id, seq): its record's, or the free one it
 * would take. */
static size_t
idx_find(const struct store_tail *t, int64_t source_id, int64_t seq)
{
    size_t j = seq_slot(source_id, seq, t->idxcap);

    while (t->idx[j] != 0) {
        const struct store_seq_entry *e = &t->log[t->idx[j] - 1];

        if (e->source_id == source_id && e->seq == seq)
            return j;
        j = (j + 1) & (t->idxcap - 1);
    }
    return j;
}

/* Indexes every record, with room for one more. */
static int
idx_catch_up(struct store_tail *t, struct proto_err *err)
{
    size_t j;

    if ((t->nlog + 1) * 2 > t->idxcap) {
        size_t cap = t->idxcap ? t->idxcap : 1024;
        uint32_t *n;

        while ((t->nlog + 1) * 2 > cap)
            cap *= 2;
        if ((n = calloc(cap, sizeof(*n))) == NULL)
            return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        free(t->idx);
        t->idx = n;
        t->idxcap = cap;
        t->indexed = 0;
    }
    for (; t->indexed < t->nlog; t->indexed++) {
        const struct store_seq_entry *e = &t->log[t->indexed];

        j = idx_find(t, e->source_id, e->seq);
        if (t->idx[j] == 0)
            t->idx[j] = (uint32_t)t->indexed + 1;
    }
    return 0;
}

int
store_tail_seq_add(struct store_tail *t, int64_t source_id, uint64_t seq,
                   int64_t receipt_id, int status, uint32_t hash, int is_new,
                   struct proto_err *err)
{
    struct store_seq_entry *e;
    size_t j = 0;

    if (source_id == t->empty_source)
        return 0;
    if (!is_new) {
        if (idx_catch_up(t, err) != 0)
            return -1;
        j = idx_find(t, source_id, (int64_t)seq);
        if (t->idx[j] != 0)
            return 0; /* the first write of a seq is its outcome */
    }
    if (t->nlog == t->logcap) {
        size_t cap = t->logcap ? t->logcap * 2 : 1024;

        if ((e = realloc(t->log, cap * sizeof(*e))) == NULL)
            return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        t->log = e;
        t->logcap = cap;
    }
    e = &t->log[t->nlog++];
    e->source_id = source_id;
    e->seq = (int64_t)seq;
    e->receipt_id = receipt_id;
    e->status = status;
    e->hash = hash;
    if (!is_new) {
        /* Caught up above, with room for it: it stays caught up. */
        t->idx[j] = (uint32_t)t->nlog;
        t->indexed = t->nlog;
    }
    return 0;
}

int
store_tail_seq_get(struct store_tail *t, int64_t source_id, uint64_t seq,
                   const struct store_seq_entry **out, struct proto_err *err)
{
    size_t j;

    *out = NULL;
    if (t->nlog == 0)
        return 0;
    if (idx_catch_up(t, err) != 0)
        return -1;
    j = idx_find(t, source_id, (int64_t)seq);
    if (t->idx[j] != 0)
        *out = &t->log[t->idx[j] - 1];
    return 0;
}

int64_t
store_tail_seq_max(const struct store_tail *t, int64_t source_id)
{
    int64_t max = -1;
    size_t i;

    for (i = 0; i < t->nlog; i++)
        if (t->log[i].source_id == source_id && t->log[i].seq > max)
            max = t->log[i].seq;
    return max;
}

static int
seqent_cmp(const struct store_seq_entry *a, const struct store_seq_entry *b)
{
    if (a->source_id != b->source_id)
        return a->source_id < b->source_id ? -1 : 1;
    if (a->seq != b->seq)
        return a->seq < b->seq ? -1 : 1;
    /* The same record twice (never expected): the first that came. */
    return a < b ? -1 : a > b;
}

static int
seqent_cmp_cb(const void *pa, const void *pb)
{
    return seqent_cmp(*(const struct store_seq_entry *const *)pa,
                      *(const struct store_seq_entry *const *)pb);
}

/* Sources a chunk's records are grouped by before falling back to one
 * sort of them all, and the out-of-order pairs a source's run is put in
 * order with an insertion sort before falling back to a sort. */
#define ORDER_SOURCES  128
#define ORDER_SLOTS    256 /* a power of two above ORDER_SOURCES */
#define ORDER_UNSORTED 64

/*
 * order[0..n) = the addresses of log[0..n) in seqent_cmp order, as qsort
 * would put them, in about linear time for the usual chunk: a few sources,
 * each one's seqs logged in order (a connection's frames are applied in
 * the order they came). The records are grouped by source, keeping their
 * order, and a source's run that is not in order is sorted. Returns 0, or
 * -1 when there are more than ORDER_SOURCES sources or no memory (order
 * is not filled: the caller sorts). The qsort of 16,384 records was 1.1-1.6
 * ms of the writer's chunk (a stall of every group behind it).
 */
static int
order_by_source(const struct store_seq_entry *log, size_t n,
                const struct store_seq_entry **order)
{
    struct {
        int64_t id;
        size_t n, at;
    } src[ORDER_SOURCES];
    int16_t slot[ORDER_SLOTS];
    unsigned char *of;
    size_t nsrc = 0, i, k, at;

    if ((of = malloc(n)) == NULL)
        return -1;
    memset(slot, 0xff, sizeof(slot));
    for (i = 0; i < n; i++) {
        uint64_t h = (uint64_t)log[i].source_id * 0x9e3779b97f4a7c15u;
        size_t x = (size_t)(h >> 56) & (ORDER_SLOTS - 1);

        while (slot[x] >= 0 && src[slot[x]].id != log[i].source_id)
            x = (x + 1) & (ORDER_SLOTS - 1);
        if (slot[x] < 0) {
            if (nsrc == ORDER_SOURCES) {
                free(of);
                return -1;
            }
            src[nsrc].id = log[i].source_id;
            src[nsrc].n = 0;
            slot[x] = (int16_t)nsrc++;
        }
        of[i] = (unsigned char)slot[x];
        src[slot[x]].n++;
    }
    /* Each source's place: after the sources of lower id. */
    for (k = 0; k < nsrc; k++) {
        for (at = 0, i = 0; i < nsrc; i++)
            if (src[i].id < src[k].id)
                at += src[i].n;
        src[k].at = at;
    }
    for (i = 0; i < n; i++)
        order[src[of[i]].at++] = &log[i];
    free(of);
    for (k = 0; k < nsrc; k++) {
        const struct store_seq_entry **run = order + src[k].at - src[k].n;
        size_t m = src[k].n, descents = 0;

        for (i = 1; i < m; i++)
            descents += seqent_cmp(run[i - 1], run[i]) > 0;
        if (descents > ORDER_UNSORTED) {
            qsort(run, m, sizeof(*run), seqent_cmp_cb);
            continue;
        }
        for (i = 1; i < m && descents > 0; i++) {
            const struct store_seq_entry *e = run[i];
            size_t j = i;

            for (; j > 0 && seqent_cmp(run[j - 1], e) > 0; j--)
                run[j] = run[j - 1];
            run[j] = e;
        }
    }
    return 0;
}

/* Empties the memory for a tail that starts at first_id. */
static void
reset(struct store_tail *t, int64_t first_id)
{
    clear_lists(t);
    t->first_id = first_id;
    t->n = 0;
    t->first_at = INT64_MAX;
    t->last_at = INT64_MIN;
    t->prev_at = INT64_MIN;
    t->ordered = 1;
}

static int
grow_slots(struct store_tail *t)
{
    size_t n = t->nslots ? t->nslots * 2 : 1024, i, j;
    size_t *slots = malloc(n * sizeof(*slots));

    if (slots == NULL)
        return -1;
    memset(slots, 0xff, n * sizeof(*slots));
    for (i = 0; i < t->nlists; i++) {
        j = slot_of(t->lists[i].kind, t->lists[i].value, n);
        while (slots[j] != (size_t)-1)
            j = (j + 1) & (n - 1);
        slots[j] = i;
    }
    free(t->slots);
    t->slots = slots;
    t->nslots = n;
    return 0;
}

static struct list *
list_for(struct store_tail *t, int kind, int64_t value)
{
    struct list *l;
    size_t j;

    if (t->nlists * 2 >= t->nslots && grow_slots(t) != 0)
        return NULL;
    j = slot_of(kind, value, t->nslots);
    while (t->slots[j] != (size_t)-1) {
        l = &t->lists[t->slots[j]];
        if (l->kind == kind && l->value == value)
            return l;
        j = (j + 1) & (t->nslots - 1);
    }
    if (t->nlists == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        struct list *nl = realloc(t->lists, cap * sizeof(*nl));
        if (nl == NULL)
            return NULL;
        t->lists = nl;
        t->cap = cap;
    }
    l = &t->lists[t->nlists];
    memset(l, 0, sizeof(*l));
    l->kind = kind;
    l->value = value;
    t->slots[j] = t->nlists++;
    return l;
}

static int
list_add(struct list *l, uint32_t off)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        uint32_t *ids = realloc(l->ids, cap * sizeof(*ids));
        if (ids == NULL)
            return -1;
        l->ids = ids;
        l->cap = cap;
    }
    l->ids[l->n++] = off;
    return 0;
}

/* Adds one receipt's keys to the lists of t. */
static int
add_keys(struct store_tail *t, int64_t id, int64_t received_at,
         const int64_t keys[STORE_KIND_COUNT], struct proto_err *err)
{
    uint32_t off;
    int k;

    /* A chunk never spans 2^32 ids: it closes after STORE_CHUNK_RECEIPTS
     * receipts, and ids only skip the few a rollback took back. */
    assert(id >= t->first_id && id - t->first_id < UINT32_MAX);
    off = (uint32_t)(id - t->first_id);
    for (k = 1; k < STORE_KIND_COUNT; k++) {
        struct list *l = t->last[k] ? &t->lists[t->last[k] - 1] : NULL;

        if (l == NULL || l->value != keys[k]) {
            if ((l = list_for(t, k, keys[k])) == NULL)
                return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
            t->last[k] = (size_t)(l - t->lists) + 1;
        }
        if (list_add(l, off) != 0)
            return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    }
    t->n++;
    if (received_at < t->prev_at)
        t->ordered = 0;
    t->prev_at = received_at;
    if (received_at < t->first_at)
        t->first_at = received_at;
    if (received_at > t->last_at)
        t->last_at = received_at;
    return 0;
}

static int
prepare(struct store *s, const char *sql, sqlite3_stmt **st,
        struct proto_err *err)
{
    int rc;

    if (*st != NULL)
        return 0;
    rc = sqlite3_prepare_v3(store_db(s), sql, -1, SQLITE_PREPARE_PERSISTENT, st,
                            NULL);
    return rc == SQLITE_OK ? 0 : store_fail(s, rc, err, "prepare the chunks");
}

static int
list_cmp_cb(const void *pa, const void *pb)
{
    const struct list *a = *(const struct list *const *)pa;
    const struct list *b = *(const struct list *const *)pb;

    if (a->kind != b->kind)
        return a->kind < b->kind ? -1 : 1;
    return a->value < b->value ? -1 : a->value > b->value;
}

/* Writes the chunk [t->first_id, end_id) and the postings of t's lists,
 * in key order: appended to the end of `postings`, which is ordered by
 * chunk first (migrations/0008). */
static int
write_chunk(struct store *s, struct store_tail *t, int64_t end_id,
            struct proto_err *err)
{
    const struct list **order;
    char *buf = NULL;
    size_t cap = 0, i;
    int rc;

    if (t->n == 0)
        return 0;
    if ((rc = prepare(s,
                      "INSERT INTO chunks (first_id, end_id, first_at, "
                      "last_at, receipts, ordered) VALUES (?1, ?2, ?3, ?4, "
                      "?5, ?6)",
                      &t->put_chunk, err)) ||
        (rc = prepare(s,
                      "INSERT INTO postings (chunk, kind, value, ids) "
                      "VALUES (?1, ?2, ?3, ?4)",
                      &t->put_posting, err)))
        return rc;
    sqlite3_bind_int64(t->put_chunk, 1, t->first_id);
    sqlite3_bind_int64(t->put_chunk, 2, end_id);
    sqlite3_bind_int64(t->put_chunk, 3, t->first_at);
    sqlite3_bind_int64(t->put_chunk, 4, t->last_at);
    sqlite3_bind_int64(t->put_chunk, 5, (int64_t)t->n);
    sqlite3_bind_int(t->put_chunk, 6, t->ordered);
    rc = sqlite3_step(t->put_chunk);
    sqlite3_reset(t->put_chunk);
    if (rc != SQLITE_DONE)
        return store_fail(s, rc, err, "store a chunk");
    if ((order = malloc(t->nlists * sizeof(*order))) == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    for (i = 0; i < t->nlists; i++)
        order[i] = &t->lists[i];
    qsort(order, t->nlists, sizeof(*order), list_cmp_cb);
    for (i = 0; i < t->nlists && rc == SQLITE_DONE; i++) {
        const struct list *l = order[i];
        roaring_bitmap_t *b = roaring_bitmap_of_ptr(l->n, l->ids);
        size_t len;

        if (b == NULL)
            break;
        roaring_bitmap_run_optimize(b);
        len = roaring_bitmap_portable_size_in_bytes(b);
        if (len > cap) {
            char *nb = realloc(buf, len);
            if (nb == NULL) {
                roaring_bitmap_free(b);
                break;
            }
            buf = nb;
            cap = len;
        }
        len = roaring_bitmap_portable_serialize(b, buf);
        roaring_bitmap_free(b);
        sqlite3_bind_int64(t->put_posting, 1, t->first_id);
        sqlite3_bind_int(t->put_posting, 2, l->kind);
        sqlite3_bind_int64(t->put_posting, 3, l->value);
        sqlite3_bind_blob(t->put_posting, 4, buf, (int)len, SQLITE_STATIC);
        rc = sqlite3_step(t->put_posting);
        sqlite3_reset(t->put_posting);
    }
    free(buf);
    free(order);
    if (i < t->nlists && rc == SQLITE_DONE)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    if (rc != SQLITE_DONE)
        return store_fail(s, rc, err, "store a posting");
    return 0;
}

/* Writes the tail's `receipt` records as runs, in key order. A reload
 * also lists the rows of a `receipts` batch, whose record went to the
 * dedupe table with the batch: a lookup asks that table first. */
static int
write_seqs(struct store *s, struct store_tail *t, struct proto_err *err)
{
    const struct store_seq_entry **order;
    size_t i, j;
    int rc;

    if (t->nlog == 0)
        return 0;
    if ((order = malloc(t->nlog * sizeof(*order))) == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    if (order_by_source(t->log, t->nlog, order) != 0) {
        for (i = 0; i < t->nlog; i++)
            order[i] = &t->log[i];
        qsort(order, t->nlog, sizeof(*order), seqent_cmp_cb);
    }
    for (i = j = 1; i < t->nlog; i++)
        if (order[i]->source_id != order[j - 1]->source_id ||
            order[i]->seq != order[j - 1]->seq)
            order[j++] = order[i];
    rc = store_seq_write(s, t->first_id, order, j, err);
    free(order);
    return rc;
}

/* The columns a tail row is read back with, in this order. */
#define ROW_COLS                                                               \
    "id, received_at, plan_id, graph_id, model_id, source_id, status, "        \
    "requested_backend, executed_backend, schema_version, counter_coverage, "  \
    "seq"
#define ROW_NCOLS 12

/* The row's (source, seq), when it has a seq, into the tail's records. */
static int
add_row_seq(struct store_tail *t, sqlite3_stmt *st, struct proto_err *err)
{
    if (sqlite3_column_type(st, 11) == SQLITE_NULL)
        return 0;
    return store_tail_seq_add(
        t, sqlite3_column_int64(st, 5), (uint64_t)sqlite3_column_int64(st, 11),
        sqlite3_column_int64(st, 0), sqlite3_column_int(st, 6), 0, 0, err);
}

static int
row_sql(char *sql, size_t cap, const char *where)
{
    size_t n = (size_t)snprintf(sql, cap, "SELECT " ROW_COLS ", counters");

    if (n < cap)
        n += (size_t)snprintf(sql + n, cap - n, " FROM receipts WHERE %s",
                              where);
    return n < cap ? 0 : -1;
}

/* Reads the row at st into keys, the rollup key and r (what the rollups
 * read of a receipt). */
static void
read_row(sqlite3_stmt *st, int64_t *id, int64_t *at,
         int64_t keys[STORE_KIND_COUNT], struct store_rollup_key *rk,
         struct receipt *r)
{
    int i;

    *id = sqlite3_column_int64(st, 0);
    *at = sqlite3_column_int64(st, 1);
    for (i = 1; i < STORE_KIND_COUNT; i++)
        keys[i] = sqlite3_column_int64(st, 1 + i);
    memset(r, 0, sizeof(*r));
    r->requested_backend = (uint8_t)keys[STORE_KIND_REQUESTED];
    r->executed_backend = (uint8_t)keys[STORE_KIND_EXECUTED];
    r->schema_version = (uint16_t)sqlite3_column_int(st, 9);
    r->counter_coverage = (uint64_t)sqlite3_column_int64(st, 10);
    store_counters_column(st, ROW_NCOLS, r);
    rk->plan_id = keys[STORE_KIND_PLAN];
    rk->graph_id = keys[STORE_KIND_GRAPH];
    rk->model_id = keys[STORE_KIND_MODEL];
    rk->source_id = keys[STORE_KIND_SOURCE];
    rk->requested = r->requested_backend;
    rk->executed = r->executed_backend;
    rk->received_at = *at;
}

/* Reads the tail rows (id >= t->first_id) back into t and the rollups. */
static int
reload_rows(struct store *s, struct store_tail *t, struct proto_err *err)
{
    sqlite3_stmt *st;
    char sql[2048];
    int rc;

    if (row_sql(sql, sizeof(sql), "id >= ?1 ORDER BY id") != 0)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "SQL too long");
    rc = sqlite3_prepare_v2(store_db(s), sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "read the tail");
    sqlite3_bind_int64(st, 1, t->first_id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id, at, keys[STORE_KIND_COUNT];
        struct store_rollup_key rk;
        struct receipt r;

        read_row(st, &id, &at, keys, &rk, &r);
        if ((rc = add_keys(t, id, at, keys, err)) ||
            (rc = add_row_seq(t, st, err)) ||
            (rc = store_rollup_add(s, store_rollups(s), &rk, &r, err))) {
            sqlite3_finalize(st);
            return rc;
        }
        if (id >= t->next_id)
            t->next_id = id + 1;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : store_fail(s, rc, err, "read the tail");
}

/* Adds the rows [from, to) to the sealed sums (past the merge's key, as
 * m says) or to the waiting ones. */
static int
reload_range(struct store *s, int64_t from, int64_t to,
             const struct store_rollup_merge *m, struct proto_err *err)
{
    sqlite3_stmt *st;
    char sql[2048];
    int rc;

    if (row_sql(sql, sizeof(sql), "id >= ?1 AND id < ?2") != 0)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "SQL too long");
    rc = sqlite3_prepare_v2(store_db(s), sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "read the chunks to merge");
    sqlite3_bind_int64(st, 1, from);
    sqlite3_bind_int64(st, 2, to);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id, at, keys[STORE_KIND_COUNT];
        struct store_rollup_key rk;
        struct receipt r;

        read_row(st, &id, &at, keys, &rk, &r);
        if (m != NULL && m->has_key && !store_rollup_key_after(&rk, &m->key))
            continue;
        rc = m != NULL
                 ? store_rollup_add_sealed(*store_rollups(s), &rk, &r, err)
                 : store_rollup_add_waiting(*store_rollups(s), &rk, &r, err);
        if (rc != 0) {
            sqlite3_finalize(st);
            return rc;
        }
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE
               ? 0
               : store_fail(s, rc, err, "read the chunks to merge");
}

/*
 * Rebuilds the sums of the chunks below the tail that the rollups do not
 * hold whole (store_rollup.c) from their rows: those being merged, of
 * [rollup_from, rollup_end) whose key comes after the last one merged,
 * and those waiting to be sealed, [rollup_end, tail_from).
 */
static int reload_waiting(struct store *s, const struct store_rollup_merge *m,
                          struct proto_err *err);

static int
reload_sealed(struct store *s, struct proto_err *err)
{
    struct store_rollup_merge m;
    int rc;

    if ((rc = store_rollup_merge_state(s, &m, err)))
        return rc;
    if (m.from < m.end &&
        ((rc = store_rollup_reseal(s, store_rollups(s), m.from, m.end, err)) ||
         (rc = reload_range(s, m.from, m.end, &m, err))))
        return rc;
    store_rollup_resealed(*store_rollups(s), &m);
    if (m.end < m.tail && (rc = reload_waiting(s, &m, err)))
        return rc;
    store_rollup_reloaded(s, *store_rollups(s));
    return 0;
}

/* The chunks [rollup_end, tail_from), waiting to be sealed. */
static int
reload_waiting(struct store *s, const struct store_rollup_merge *m,
               struct proto_err *err)
{
    int64_t chunks = 0;
    int rc;

    if ((rc = store_one_int(s,
                            "SELECT count(*) FROM chunks WHERE first_id >= "
                            "(SELECT value FROM counters WHERE name = "
                            "'rollup_end')",
                            NULL, 0, 0, 0, &chunks, err,
                            "count the chunks to merge")) ||
        (rc = store_rollup_rewait(s, store_rollups(s), err)) ||
        (rc = reload_range(s, m->end, m->tail, NULL, err)))
        return rc;
    return store_rollup_rewaited(*store_rollups(s), m->end, m->tail,
                                 chunks > INT32_MAX ? INT32_MAX : (int)chunks,
                                 err);
}

int
store_tail_reload(struct store *s, struct store_tail *t, struct proto_err *err)
{
    int64_t from = 1;
    int rc;

    store_rollup_discard_all(*store_rollups(s));
    if ((rc = store_counter(s, "tail_from", 1, &from, err)) ||
        (rc = store_string_id(s, "", 0, &t->empty_source, err)) ||
        (rc = reload_sealed(s, err)))
        return rc;
    reset(t, from);
    if (t->next_id < from)
        t->next_id = from;
    return reload_rows(s, t, err);
}

/*
 * Writes a tail longer than a chunk as chunks, a chunk per transaction, so
 * that a restart resumes where it stopped: what migrations/0007 leaves of
 * a store that had receipts (they are all tail), or a tail that grew past
 * a chunk in the last commit groups before a stop. No transaction may be
 * open.
 */
static int
catch_up(struct store *s, struct store_tail *t, const struct store_opts *o,
         struct proto_err *err)
{
    uint64_t start = store_now_ms(), next = start + STORE_MIGRATING_EVERY_MS;
    sqlite3_stmt *st = NULL;
    char sql[2048];
    int rc, more = 1, first = 1;

    if (row_sql(sql, sizeof(sql), "id >= ?1 ORDER BY id LIMIT ?2") != 0)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "SQL too long");
    rc = sqlite3_prepare_v2(store_db(s), sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, err, "index the stored receipts");
    while (more) {
        uint64_t n = 0;
        int64_t from = 1;

        if ((rc = store_exec(s, "BEGIN IMMEDIATE", err, "index receipts")))
            break;
        if ((rc = store_counter(s, "tail_from", 1, &from, err)) ||
            (rc = store_string_id(s, "", 0, &t->empty_source, err)))
            goto rollback;
        /* The merge a crash left pending, once: after each commit below
         * the memory holds what the rows say (the seal swapped the tail's
         * sums in and emptied the tail's). */
        if (first) {
            store_rollup_discard_all(*store_rollups(s));
            if ((rc = reload_sealed(s, err)))
                goto rollback;
            first = 0;
        }
        reset(t, from);
        sqlite3_bind_int64(st, 1, from);
        sqlite3_bind_int64(st, 2, (int64_t)t->chunk + 1);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW && n < t->chunk) {
            int64_t id, at, keys[STORE_KIND_COUNT];
            struct store_rollup_key rk;
            struct receipt r;

            read_row(st, &id, &at, keys, &rk, &r);
            t->next_id = id + 1;
            if ((rc = store_tail_add(s, t, id, at, keys, &rk, &r, err)) ||
                (rc = add_row_seq(t, st, err)))
                break;
            n++;
        }
        /* A row beyond the chunk: this one is whole and more remain. */
        more = rc == SQLITE_ROW;
        sqlite3_reset(st);
        if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
            if (rc > 0)
                rc = store_fail(s, rc, err, "index receipts");
            goto rollback;
        }
        if (!more) {
            /* The rest stays the tail, read by store_tail_reload(). */
            sqlite3_exec(store_db(s), "ROLLBACK", NULL, NULL, NULL);
            rc = 0;
            break;
        }
        if ((rc = store_tail_flush(s, t, err)) ||
            (rc = store_exec(s, "COMMIT", err, "index receipts")))
            goto rollback;
        if (o->migrating != NULL && store_now_ms() >= next) {
            next = store_now_ms() + STORE_MIGRATING_EVERY_MS;
            o->migrating(o->migrating_arg, store_schema_version(),
                         store_schema_version(), store_now_ms() - start);
        }
        continue;
    rollback:
        sqlite3_exec(store_db(s), "ROLLBACK", NULL, NULL, NULL);
        break;
    }
    store_rollup_discard_all(*store_rollups(s));
    sqlite3_finalize(st);
    return rc;
}

int
store_tail_open(struct store *s, const struct store_opts *o,
                struct store_tail **out, struct proto_err *err)
{
    struct store_tail *t = calloc(1, sizeof(*t));
    int64_t from = 1, floor = 1, max_id = 0;
    int rc;

    *out = NULL;
    if (t == NULL || grow_slots(t) != 0) {
        free(t);
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    }
    t->chunk = o->chunk_receipts ? o->chunk_receipts : STORE_CHUNK_RECEIPTS;
    if ((rc =
             store_one_int(s, "SELECT coalesce(max(id), 0) FROM receipts", NULL,
                           0, 0, 0, &max_id, err, "read the newest receipt")) ||
        (rc = store_counter(s, "tail_from", 1, &from, err)) ||
        (rc = store_counter(s, "id_floor", 1, &floor, err)))
        goto fail;
    /* Never an id that was used: not one below the tail (chunks covered
     * them, pruned or not), nor one AUTOINCREMENT handed out before
     * migrations/0007. */
    t->next_id = max_id + 1;
    if (t->next_id < from)
        t->next_id = from;
    if (t->next_id < floor)
        t->next_id = floor;
    floor = t->next_id;
    if ((rc = catch_up(s, t, o, err)))
        goto fail;
    t->next_id = floor;
    if ((rc = store_tail_reload(s, t, err)))
        goto fail;
    *out = t;
    return 0;
fail:
    store_tail_free(t);
    return rc;
}

void
store_tail_free(struct store_tail *t)
{
    if (t == NULL)
        return;
    clear_lists(t);
    free(t->lists);
    free(t->slots);
    sqlite3_finalize(t->put_posting);
    sqlite3_finalize(t->put_chunk);
    free(t->log);
    free(t->idx);
    free(t);
}

int64_t
store_tail_next_id(struct store_tail *t)
{
    return t->next_id++;
}

int
store_tail_flush(struct store *s, struct store_tail *t, struct proto_err *err)
{
    int64_t end = t->next_id;
    int rc;

    if (t->n == 0)
        return 0;
    if ((rc = write_chunk(s, t, end, err)) || (rc = write_seqs(s, t, err)) ||
        (rc =
             store_rollup_chunk(s, *store_rollups(s), t->first_id, end, err)) ||
        (rc = store_counter_set(s, "tail_from", end, err)))
        return rc;
    reset(t, end);
    return 0;
}

int
store_tail_add(struct store *s, struct store_tail *t, int64_t id,
               int64_t received_at, const int64_t keys[STORE_KIND_COUNT],
               const struct store_rollup_key *rk, const struct receipt *r,
               struct proto_err *err)
{
    int rc;

    /* The rollups hold a bounded number of keys: when they are full the
     * tail becomes a chunk now, before this receipt (whose row is already
     * written, so the chunk ends at its id). */
    if (store_rollup_full(*store_rollups(s))) {
        int64_t next = t->next_id; /* ids of rows after this one are taken */

        t->next_id = id;
        rc = store_tail_flush(s, t, err);
        t->next_id = next;
        if (rc != 0)
            return rc;
    }
    if ((rc = add_keys(t, id, received_at, keys, err)))
        return rc;
    return store_rollup_add(s, store_rollups(s), rk, r, err);
}

int
store_tail_due(const struct store_tail *t)
{
    return t->n >= t->chunk;
}

int
store_tail_holds_before(const struct store_tail *t, int64_t cutoff_ms)
{
    return t->n > 0 && t->first_at < cutoff_ms;
}
