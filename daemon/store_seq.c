/*
 * store_seq.c: the seqs of `receipt` writes as runs, one row per source
 * and chunk (store_seq.h, migrations/0009).
 *
 * Under 0007 each such seq became a `dedupe` row when its chunk was
 * written: a B-tree insert of about 8,600 instructions, a third of the
 * writer's work for single receipts from 64 sources. A run is one insert
 * per source and chunk, and its entries cost a few bytes each.
 */
#include "store_seq.h"

#include <stdlib.h>
#include <string.h>

#include "invariant.h"
#include "store_internal.h"

enum { SQ_PUT, SQ_FIND, SQ_MAX, SQ_COUNT };

static const char *const sq_sql[SQ_COUNT] = {
    [SQ_PUT] = "INSERT INTO seq_runs (source_id, hi, chunk, lo, n, entries) "
               "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    /* The runs whose range may hold ?2, the likeliest (lowest hi) first:
     * for a source whose seqs rise, the first is the one. */
    [SQ_FIND] = "SELECT chunk, lo, entries FROM seq_runs WHERE source_id = "
                "?1 AND hi >= ?2 ORDER BY hi, chunk",
    [SQ_MAX] = "SELECT max(hi) FROM seq_runs WHERE source_id = ?1 AND "
               "hi >= 0",
};

struct store_seq {
    sqlite3_stmt *st[SQ_COUNT];
};

void
store_seq_free(struct store_seq *q)
{
    int i;

    if (q == NULL)
        return;
    for (i = 0; i < SQ_COUNT; i++)
        sqlite3_finalize(q->st[i]);
    free(q);
}

/* The statement which, prepared on first use. */
static int
stmt(struct store *s, int which, sqlite3_stmt **out, struct proto_err *err)
{
    struct store_seq **q = store_seqs(s);
    int rc;

    if (*q == NULL && (*q = calloc(1, sizeof(**q))) == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    if ((*q)->st[which] == NULL) {
        rc = sqlite3_prepare_v3(store_db(s), sq_sql[which], -1,
                                SQLITE_PREPARE_PERSISTENT, &(*q)->st[which],
                                NULL);
        if (rc != SQLITE_OK)
            return store_fail(s, rc, err, "prepare the seqs");
    }
    *out = (*q)->st[which];
    return 0;
}

int
store_seq_run_init(struct store_seq_run *c, const void *blob, size_t len,
                   int64_t chunk, int64_t lo)
{
    const unsigned char *p = blob;

    if (len < 1 || p[0] != STORE_SEQ_FORMAT)
        return -1;
    c->p = p + 1;
    c->end = p + len;
    c->chunk = chunk;
    c->seq = lo;
    c->first = 1;
    return 0;
}

int
store_seq_run_next(struct store_seq_run *c, struct store_seq_entry *e)
{
    uint64_t d, idst;

    if (c->p == c->end)
        return 0;
    if ((c->p = store_varint_get(c->p, c->end, &d)) == NULL ||
        (c->p = store_varint_get(c->p, c->end, &idst)) == NULL ||
        c->end - c->p < 4 || (!c->first && d == 0) || (idst & 3) == 3)
        return -1;
    c->seq = (int64_t)((uint64_t)c->seq + d);
    c->first = 0;
    e->seq = c->seq;
    e->receipt_id = c->chunk + (int64_t)(idst >> 2);
    e->status = (int)(idst & 3);
    e->hash = (uint32_t)c->p[0] | (uint32_t)c->p[1] << 8 |
              (uint32_t)c->p[2] << 16 | (uint32_t)c->p[3] << 24;
    c->p += 4;
    return 1;
}

/* One source's entries e[0..n) as a run. */
static int
put_run(struct store *s, sqlite3_stmt *st, int64_t chunk,
        const struct store_seq_entry *const *e, size_t n, unsigned char *buf,
        struct proto_err *err)
{
    unsigned char *p = buf;
    int64_t prev = e[0]->seq;
    size_t i;
    int rc;

    *p++ = STORE_SEQ_FORMAT;
    for (i = 0; i < n; i++) {
        /* The tail holds only its own receipts' records. */
        if (NEVER(e[i]->receipt_id < chunk || e[i]->status < 0 ||
                  e[i]->status > 2))
            return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                                 "a seq record outside its chunk");
        p = store_varint_put(p, (uint64_t)e[i]->seq - (uint64_t)prev);
        p = store_varint_put(p, (uint64_t)(e[i]->receipt_id - chunk) << 2 |
                                    (uint64_t)e[i]->status);
        p[0] = (unsigned char)e[i]->hash;
        p[1] = (unsigned char)(e[i]->hash >> 8);
        p[2] = (unsigned char)(e[i]->hash >> 16);
        p[3] = (unsigned char)(e[i]->hash >> 24);
        p += 4;
        prev = e[i]->seq;
    }
    sqlite3_bind_int64(st, 1, e[0]->source_id);
    sqlite3_bind_int64(st, 2, e[n - 1]->seq);
    sqlite3_bind_int64(st, 3, chunk);
    sqlite3_bind_int64(st, 4, e[0]->seq);
    sqlite3_bind_int64(st, 5, (int64_t)n);
    sqlite3_bind_blob(st, 6, buf, (int)(p - buf), SQLITE_STATIC);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? 0 : store_fail(s, rc, err, "record the seqs");
}

int
store_seq_write(struct store *s, int64_t chunk,
                const struct store_seq_entry *const *e, size_t n,
                struct proto_err *err)
{
    sqlite3_stmt *st = NULL;
    unsigned char *buf;
    size_t i, j;
    int rc = 0;

    if (n == 0)
        return 0;
    if ((rc = stmt(s, SQ_PUT, &st, err)))
        return rc;
    /* At most the whole chunk in one run. */
    if ((buf = malloc(1 + n * STORE_SEQ_ENTRY_MAX)) == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    for (i = 0; i < n && rc == 0; i = j) {
        for (j = i + 1; j < n && e[j]->source_id == e[i]->source_id; j++)
            ;
        rc = put_run(s, st, chunk, e + i, j - i, buf, err);
    }
    free(buf);
    return rc;
}

int
store_seq_find(struct store *s, int64_t source_id, uint64_t seq,
               struct store_seq_entry *e, struct proto_err *err)
{
    int64_t v = (int64_t)seq;
    sqlite3_stmt *st = NULL;
    int rc, found = 0;

    if ((rc = stmt(s, SQ_FIND, &st, err)))
        return rc;
    sqlite3_bind_int64(st, 1, source_id);
    sqlite3_bind_int64(st, 2, v);
    while (!found && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct store_seq_run c;
        int got;

        if (sqlite3_column_int64(st, 1) > v)
            continue; /* a run of later seqs that goes past v */
        if (store_seq_run_init(&c, sqlite3_column_blob(st, 2),
                               (size_t)sqlite3_column_bytes(st, 2),
                               sqlite3_column_int64(st, 0),
                               sqlite3_column_int64(st, 1)) != 0) {
            rc = SQLITE_CORRUPT;
            break;
        }
        while ((got = store_seq_run_next(&c, e)) == 1 && e->seq < v)
            ;
        if (got < 0) {
            rc = SQLITE_CORRUPT;
            break;
        }
        found = got == 1 && e->seq == v;
    }
    sqlite3_reset(st);
    if (found) {
        e->source_id = source_id;
        return 1;
    }
    return rc == SQLITE_DONE ? 0 : store_fail(s, rc, err, "look up a seq");
}

int
store_seq_max(struct store *s, int64_t source_id, int64_t *max,
              struct proto_err *err)
{
    sqlite3_stmt *st = NULL;
    int rc;

    if ((rc = stmt(s, SQ_MAX, &st, err)))
        return rc;
    sqlite3_bind_int64(st, 1, source_id);
    rc = sqlite3_step(st);
    *max = rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL
               ? sqlite3_column_int64(st, 0)
               : -1;
    sqlite3_reset(st);
    return rc == SQLITE_ROW ? 0 : store_fail(s, rc, err, "look up a seq");
}
