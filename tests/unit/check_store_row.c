/*
 * check_store_row.c: the receipts row's counters blob (daemon/store_row.c,
 * migrations/0010). Every value survives a round trip through a real
 * SQLite column, the smallest and largest u64 and the LEB128 byte edges
 * among them; the bytes are fixed (stores written by one version are read
 * by the next); the migration's SQL function writes the same bytes as the
 * writer; a blob cut anywhere reads what it holds and zeros, never past
 * its end; a blob a later version wrote with more values reads the known
 * ones; NULL reads as zeros.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_row.h"

static sqlite3 *
memdb(void)
{
    sqlite3 *db = NULL;

    ck_assert_int_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
    ck_assert_int_eq(store_counters_sql_function(db), SQLITE_OK);
    return db;
}

/* Reads blob (n bytes; NULL: an SQL NULL) back through a column into r. */
static void
read_back(sqlite3 *db, const void *blob, size_t n, struct receipt *r)
{
    sqlite3_stmt *st;

    ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT ?1", -1, &st, NULL),
                     SQLITE_OK);
    if (blob != NULL)
        sqlite3_bind_blob(st, 1, blob, (int)n, SQLITE_STATIC);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    memset(r, 0xa5, sizeof(*r));
    store_counters_column(st, 0, r);
    sqlite3_finalize(st);
}

static void
fill(struct receipt *r)
{
    static const uint64_t edges[] = {
        0, 1, 127, 128, 16383, 16384, (uint64_t)1 << 63, UINT64_MAX
    };
    int i;

    memset(r, 0, sizeof(*r));
    for (i = 0; i < RECEIPT_NCOUNTERS; i++)
        r->counters[i] = edges[i % 8] ^ (uint64_t)i;
    for (i = 0; i < RECEIPT_NARTIFACTS; i++)
        r->artifacts[i] = edges[(i + 5) % 8];
}

START_TEST(test_row_round_trip)
{
    unsigned char out[STORE_COUNTERS_MAX];
    struct receipt r, back;
    sqlite3 *db = memdb();
    size_t n;

    fill(&r);
    n = store_counters_pack(&r, out);
    ck_assert_uint_le(n, STORE_COUNTERS_MAX);
    read_back(db, out, n, &back);
    ck_assert_mem_eq(back.counters, r.counters, sizeof(r.counters));
    ck_assert_mem_eq(back.artifacts, r.artifacts, sizeof(r.artifacts));
    /* Every value at its largest: the bound is reached, not passed. */
    memset(r.counters, 0xff, sizeof(r.counters));
    memset(r.artifacts, 0xff, sizeof(r.artifacts));
    ck_assert_uint_eq(store_counters_pack(&r, out), STORE_COUNTERS_MAX);
    read_back(db, out, STORE_COUNTERS_MAX, &back);
    ck_assert_mem_eq(back.counters, r.counters, sizeof(r.counters));
    ck_assert_mem_eq(back.artifacts, r.artifacts, sizeof(r.artifacts));
    read_back(db, NULL, 0, &back);
    ck_assert_uint_eq(back.counters[0] | back.counters[25] | back.artifacts[3],
                      0);
    sqlite3_close(db);
}
END_TEST

START_TEST(test_row_bytes_are_fixed)
{
    unsigned char out[STORE_COUNTERS_MAX];
    struct receipt r;
    size_t n;

    memset(&r, 0, sizeof(r));
    r.counters[0] = 300;
    r.counters[25] = 1;
    r.artifacts[3] = 128;
    n = store_counters_pack(&r, out);
    ck_assert_uint_eq(n, 1 + 2 + 24 + 1 + 1 + 3 + 2);
    ck_assert_uint_eq(out[0], 26);
    ck_assert_uint_eq(out[1], 0xac);
    ck_assert_uint_eq(out[2], 0x02);
    ck_assert_uint_eq(out[3], 0);
    ck_assert_uint_eq(out[27], 1);
    ck_assert_uint_eq(out[28], 4);
    ck_assert_uint_eq(out[32], 0x80);
    ck_assert_uint_eq(out[33], 0x01);
}
END_TEST

START_TEST(test_row_sql_function_writes_the_same_bytes)
{
    unsigned char out[STORE_COUNTERS_MAX];
    char sql[1024];
    struct receipt r;
    sqlite3 *db = memdb();
    sqlite3_stmt *st;
    size_t n, len;
    int i;

    fill(&r);
    n = store_counters_pack(&r, out);
    len = (size_t)snprintf(sql, sizeof(sql), "SELECT receiptd_pack_counters(");
    for (i = 0; i < RECEIPT_NCOUNTERS + RECEIPT_NARTIFACTS; i++)
        len += (size_t)snprintf(sql + len, sizeof(sql) - len, "%s?",
                                i ? ", " : "");
    snprintf(sql + len, sizeof(sql) - len, ")");
    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    for (i = 0; i < RECEIPT_NCOUNTERS; i++)
        sqlite3_bind_int64(st, i + 1, (sqlite3_int64)r.counters[i]);
    for (i = 0; i < RECEIPT_NARTIFACTS; i++)
        sqlite3_bind_int64(st, RECEIPT_NCOUNTERS + i + 1,
                           (sqlite3_int64)r.artifacts[i]);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_bytes(st, 0), (int)n);
    ck_assert_mem_eq(sqlite3_column_blob(st, 0), out, n);
    sqlite3_finalize(st);
    sqlite3_close(db);
}
END_TEST

START_TEST(test_row_cut_blob_reads_what_it_holds)
{
    unsigned char out[STORE_COUNTERS_MAX], *copy;
    struct receipt r, back;
    sqlite3 *db = memdb();
    size_t n, cut;
    int i;

    memset(&r, 0, sizeof(r));
    for (i = 0; i < RECEIPT_NCOUNTERS; i++)
        r.counters[i] = 1000 + (uint64_t)i; /* two bytes each */
    n = store_counters_pack(&r, out);
    for (cut = 0; cut < n; cut++) {
        /* A heap copy of exactly cut bytes: ASan sees a read past it. */
        copy = malloc(cut ? cut : 1);
        ck_assert_ptr_nonnull(copy);
        memcpy(copy, out, cut);
        read_back(db, copy, cut, &back);
        for (i = 0; i < RECEIPT_NCOUNTERS; i++) {
            int whole = cut >= 1 + 2 * (size_t)(i + 1);

            ck_assert_uint_eq(back.counters[i], whole ? r.counters[i] : 0);
        }
        free(copy);
    }
    sqlite3_close(db);
}
END_TEST

START_TEST(test_row_reads_a_longer_blob)
{
    unsigned char blob[64], *p = blob;
    struct receipt back;
    sqlite3 *db = memdb();
    int i;

    /* 28 counters, then 5 artifacts: a later version's blob. */
    *p++ = 28;
    for (i = 0; i < 28; i++)
        *p++ = (unsigned char)i;
    *p++ = 5;
    for (i = 0; i < 5; i++)
        *p++ = (unsigned char)(100 + i);
    read_back(db, blob, (size_t)(p - blob), &back);
    for (i = 0; i < RECEIPT_NCOUNTERS; i++)
        ck_assert_uint_eq(back.counters[i], (uint64_t)i);
    for (i = 0; i < RECEIPT_NARTIFACTS; i++)
        ck_assert_uint_eq(back.artifacts[i], 100 + (uint64_t)i);
    sqlite3_close(db);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("store_row");
    TCase *tc = tcase_create("counters");

    tcase_add_test(tc, test_row_round_trip);
    tcase_add_test(tc, test_row_bytes_are_fixed);
    tcase_add_test(tc, test_row_sql_function_writes_the_same_bytes);
    tcase_add_test(tc, test_row_cut_blob_reads_what_it_holds);
    tcase_add_test(tc, test_row_reads_a_longer_blob);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
