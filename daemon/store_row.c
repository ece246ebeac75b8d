/*
 * store_row.c: the receipts row's `counters` blob (store_row.h).
 */
#include <string.h>

#include "store_row.h"

size_t
store_counters_pack(const struct receipt *r,
                    unsigned char out[STORE_COUNTERS_MAX])
{
    unsigned char *p = out;
    int i;

    *p++ = RECEIPT_NCOUNTERS;
    for (i = 0; i < RECEIPT_NCOUNTERS; i++)
        p = store_varint_put(p, r->counters[i]);
    *p++ = RECEIPT_NARTIFACTS;
    for (i = 0; i < RECEIPT_NARTIFACTS; i++)
        p = store_varint_put(p, r->artifacts[i]);
    return (size_t)(p - out);
}

/* n values of [p, end) into v[0..want), the rest skipped; the byte after
 * them, NULL when cut. */
static const unsigned char *
get_values(const unsigned char *p, const unsigned char *end, uint64_t *v,
           unsigned want)
{
    unsigned n, i;
    uint64_t x;

    if (p == NULL || p >= end)
        return NULL;
    n = *p++;
    /* A value cut short reads as 0, as a missing one does. */
    for (i = 0; i < n && (p = store_varint_get(p, end, &x)) != NULL; i++)
        if (i < want)
            v[i] = x;
    return p;
}

void
store_counters_column(sqlite3_stmt *st, int col, struct receipt *r)
{
    const unsigned char *p = sqlite3_column_blob(st, col);
    const unsigned char *end = p + sqlite3_column_bytes(st, col);

    memset(r->counters, 0, sizeof(r->counters));
    memset(r->artifacts, 0, sizeof(r->artifacts));
    if (p == NULL)
        return;
    p = get_values(p, end, r->counters, RECEIPT_NCOUNTERS);
    get_values(p, end, r->artifacts, RECEIPT_NARTIFACTS);
}

static void
pack_counters_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    unsigned char out[STORE_COUNTERS_MAX];
    struct receipt r;
    int i;

    memset(&r, 0, sizeof(r));
    for (i = 0; i < argc; i++) {
        /* u64 values keep their bit pattern in SQLite's signed integers. */
        uint64_t v = (uint64_t)sqlite3_value_int64(argv[i]);

        if (i < RECEIPT_NCOUNTERS)
            r.counters[i] = v;
        else
            r.artifacts[i - RECEIPT_NCOUNTERS] = v;
    }
    sqlite3_result_blob(ctx, out, (int)store_counters_pack(&r, out),
                        SQLITE_TRANSIENT);
}

int
store_counters_sql_function(sqlite3 *db)
{
    return sqlite3_create_function(
        db, "receiptd_pack_counters", RECEIPT_NCOUNTERS + RECEIPT_NARTIFACTS,
        SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_DIRECTONLY, NULL,
        pack_counters_fn, NULL, NULL);
}
