/*
 * check_oom.c: allocation-failure injection. Fail the Nth allocation,
 * N = 1, 2, ... until the operation completes: every run must end in success
 * or a clean error, never a crash, a leak or a damaged database.
 *
 * Two allocators are hooked. SQLite's, through SQLITE_CONFIG_MALLOC, for the
 * store's whole write path (open, migrations, a batch of inserts, COMMIT).
 * Ours in proto/, through the linker: this binary is linked with
 * -Wl,--wrap=malloc,--wrap=realloc,--wrap=calloc, which redirects the calls
 * made by the statically linked receiptproto objects (and by this file) to
 * the __wrap_ functions below, without touching proto's sources. Allocations
 * made inside the shared libmsgpackc (the unpacker's zone) are not hooked.
 * Leaks: the SQLite hook counts live allocations, and under AddressSanitizer
 * LeakSanitizer checks the process at exit.
 *
 * Thread: single-threaded; Check forks each test.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <msgpack.h>
#include <sqlite3.h>

#include "envelope.h"
#include "frame.h"
#include "receipt.h"
#include "relpack.h"
#include "relwork.h"
#include "vfs_fault.h"

/* ---- SQLite's allocator ---- */

static sqlite3_mem_methods real_mem;
static long sq_count, sq_fail_at, sq_live;
static int sq_persistent;

static int
sq_should_fail(void)
{
    if (sq_fail_at == 0)
        return 0;
    sq_count++;
    return sq_persistent ? sq_count >= sq_fail_at : sq_count == sq_fail_at;
}

static void *
sq_malloc(int n)
{
    void *p;

    if (sq_should_fail())
        return NULL;
    p = real_mem.xMalloc(n);
    if (p != NULL)
        sq_live++;
    return p;
}

static void
sq_free(void *p)
{
    if (p != NULL)
        sq_live--;
    real_mem.xFree(p);
}

static void *
sq_realloc(void *p, int n)
{
    if (sq_should_fail())
        return NULL;
    return real_mem.xRealloc(p, n);
}

static int
sq_size(void *p)
{
    return real_mem.xSize(p);
}

static int
sq_roundup(int n)
{
    return real_mem.xRoundup(n);
}

static int
sq_init(void *arg)
{
    return real_mem.xInit(arg);
}

static void
sq_shutdown(void *arg)
{
    real_mem.xShutdown(arg);
}

static void
hook_sqlite(void)
{
    static sqlite3_mem_methods m;

    /* sqlite3_config() works only while the library is shut down. */
    ck_assert_int_eq(sqlite3_shutdown(), SQLITE_OK);
    ck_assert_int_eq(sqlite3_config(SQLITE_CONFIG_GETMALLOC, &real_mem),
                     SQLITE_OK);
    m = real_mem;
    m.xMalloc = sq_malloc;
    m.xFree = sq_free;
    m.xRealloc = sq_realloc;
    m.xSize = sq_size;
    m.xRoundup = sq_roundup;
    m.xInit = sq_init;
    m.xShutdown = sq_shutdown;
    ck_assert_int_eq(sqlite3_config(SQLITE_CONFIG_MALLOC, &m), SQLITE_OK);
    /* Lookaside would hide small allocations from the hook. */
    ck_assert_int_eq(sqlite3_config(SQLITE_CONFIG_LOOKASIDE, 0, 0), SQLITE_OK);
    ck_assert_int_eq(sqlite3_initialize(), SQLITE_OK);
}

/* ---- our allocator, through the linker ---- */

void *__real_malloc(size_t n);
void *__real_realloc(void *p, size_t n);
void *__real_calloc(size_t n, size_t size);
void *__wrap_malloc(size_t n);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_calloc(size_t n, size_t size);

static long my_count, my_fail_at;

static int
my_should_fail(void)
{
    if (my_fail_at == 0)
        return 0;
    return ++my_count == my_fail_at;
}

void *
__wrap_malloc(size_t n)
{
    return my_should_fail() ? NULL : __real_malloc(n);
}

void *
__wrap_realloc(void *p, size_t n)
{
    return my_should_fail() ? NULL : __real_realloc(p, n);
}

void *
__wrap_calloc(size_t n, size_t size)
{
    return my_should_fail() ? NULL : __real_calloc(n, size);
}

/* ---- the store's write path ---- */

static char dir[1024];
static char db_path[1100];

static void
remove_db(void)
{
    static const char *const sfx[] = { "", "-wal", "-shm", "-journal" };
    char p[1200];
    size_t i;

    for (i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
        snprintf(p, sizeof(p), "%s%s", db_path, sfx[i]);
        unlink(p);
    }
}

static void
setup(void)
{
    snprintf(dir, sizeof(dir), "%s/reliability-tmp-XXXXXX", TEST_BINARY_DIR);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(db_path, sizeof(db_path), "%s/receipts.db", dir);
}

static void
teardown(void)
{
    char p[1200];

    remove_db();
    snprintf(p, sizeof(p), "%s.migrated", db_path);
    unlink(p);
    rmdir(dir);
}

/*
 * From an empty file the path is open + migrations + two transactions,
 * some 15,000 to 19,000 allocations with the rollup migrations, and on a
 * migrated file about 6,000 (the store prepares every statement at open).
 * Each N costs a whole run, so CI tries every stride-th N: 64 from empty,
 * 8 on a migrated file. RELIABILITY_OOM_EXHAUSTIVE=1 tries every N
 * (scripts/reliability-long.sh; about half an hour).
 */
static const struct {
    const char *name;
    int store;      /* drive daemon/store.h instead of hand-written SQL */
    int persistent; /* every allocation from the Nth on fails */
    int attempts;   /* tries per step: 2 shows the connection recovers */
    int migrated;   /* start from a migrated copy of the file */
    long stride;    /* in CI */
} sq_cases[] = {
    { "sql, from empty, one failure, then a retry", 0, 0, 2, 0, 64 },
    { "store, from empty, one failure, then a retry", 1, 0, 2, 0, 64 },
    { "store, from empty, every allocation from N on", 1, 1, 1, 0, 64 },
    { "store, migrated file, one failure, then a retry", 1, 0, 2, 1, 8 },
    { "store, migrated file, every allocation from N on", 1, 1, 1, 1, 8 },
};

static int
env_int(const char *name, int dflt)
{
    const char *v = getenv(name);

    return v != NULL && *v != '\0' ? atoi(v) : dflt;
}

static void
copy_file(const char *from, const char *to)
{
    char buf[65536];
    size_t n;
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");

    ck_assert_ptr_nonnull(in);
    ck_assert_ptr_nonnull(out);
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
        ck_assert_uint_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    ck_assert_int_eq(fclose(out), 0);
}

START_TEST(test_oom_sqlite_write_path_fails_cleanly)
{
    struct relwork w;
    struct relwork_result res;
    long n, base, runs = 0, errors = 0, acked_total = 0;
    long stride =
        env_int("RELIABILITY_OOM_EXHAUSTIVE", 0) ? 1 : sq_cases[_i].stride;
    char d[400], template[1200];
    int i, done = 0;

    if (sq_cases[_i].store)
        ck_assert_msg(relwork_have_store(),
                      "built without daemon/store.h (receiptd_core)");
    if (stride < 1)
        stride = 1;
    hook_sqlite();
    /* The fault VFS, never armed here, skips the real fsync: thousands of
     * runs then take seconds, not minutes. */
    ck_assert_int_eq(vfs_fault_register(1), SQLITE_OK);
    snprintf(template, sizeof(template), "%s.migrated", db_path);
    if (sq_cases[_i].migrated) {
        /* A clean close checkpoints and deletes the WAL: the template is
         * one file. */
        memset(&w, 0, sizeof(w));
        w.path = template;
        w.synchronous = 2;
        w.use_store = sq_cases[_i].store;
        w.attempts = 1;
        remove_db();
        ck_assert_int_eq(relwork_run(&w), 0);
    }
    base = sq_live;
    for (n = 1; n < 1000000 && !done; n += stride) {
        memset(&w, 0, sizeof(w));
        w.path = db_path;
        w.synchronous = 2;
        w.ntx = 2;
        w.per_tx = 4;
        w.attempts = sq_cases[_i].attempts;
        w.use_store = sq_cases[_i].store;
        remove_db();
        if (sq_cases[_i].migrated)
            copy_file(template, db_path);
        vfs_fault_reset();
        sq_count = 0;
        sq_persistent = sq_cases[_i].persistent;
        sq_fail_at = n;
        relwork_run(&w);
        done = sq_count < n; /* the failure point was never reached */
        sq_fail_at = 0;
        runs++;
        errors += w.first_error[0] != '\0';
        ck_assert_msg(sq_live == base, "N=%ld: %ld SQLite allocations leaked",
                      n, sq_live - base);
        for (i = 0; i < w.ntx; i++)
            acked_total += w.state[i] == RELWORK_ACKED;
        if (relwork_check(&w, &res) != 0 &&
            (res.opened || res.missing_acked > 0)) {
            relwork_describe(&res, d, sizeof(d));
            ck_abort_msg("N=%ld (%s): %s (workload: %s)", n, sq_cases[_i].name,
                         d, w.first_error);
        }
        ck_assert_msg(sq_live == base, "N=%ld: the check leaked", n);
    }
    unlink(template);
    ck_assert_msg(done, "the write path never completed");
    ck_assert_int_eq(w.completed, 1);
    printf("oom[sqlite, %s]: about %ld allocations, %ld of them failed in "
           "turn (every %ld), %ld runs saw a clean error, %ld transactions "
           "acknowledged and found\n",
           sq_cases[_i].name, n - stride, runs, stride, errors, acked_total);
    ck_assert_int_gt(errors, 0);
}
END_TEST

/* The store's own allocations (and proto's, and the workload's): every
 * malloc, realloc and calloc of the statically linked code fails in turn
 * while SQLite's allocator works. */
START_TEST(test_oom_store_own_allocations_fail_cleanly)
{
    struct relwork w;
    struct relwork_result res;
    long n, errors = 0;
    int done = 0;
    char d[400];

    ck_assert_msg(relwork_have_store(),
                  "built without daemon/store.h (receiptd_core)");
    ck_assert_int_eq(vfs_fault_register(1), SQLITE_OK);
    for (n = 1; n < 100000 && !done; n++) {
        memset(&w, 0, sizeof(w));
        w.path = db_path;
        w.synchronous = 2;
        w.ntx = 2;
        w.per_tx = 4;
        w.attempts = 1;
        w.use_store = 1;
        remove_db();
        vfs_fault_reset();
        my_count = 0;
        my_fail_at = n;
        relwork_run(&w);
        done = my_count < n;
        my_fail_at = 0;
        errors += !w.completed;
        if (relwork_check(&w, &res) != 0 &&
            (res.opened || res.missing_acked > 0)) {
            relwork_describe(&res, d, sizeof(d));
            ck_abort_msg("N=%ld: %s (workload: %s)", n, d, w.first_error);
        }
    }
    ck_assert_msg(done, "the store's write path never completed");
    ck_assert_int_eq(w.completed, 1);
    printf("oom[malloc, store]: %ld allocations failed in turn, %ld runs "
           "ended in a clean error\n",
           n - 2, errors);
    ck_assert_int_gt(errors, 0);
}
END_TEST

/* ---- proto: frame reader, envelope, receipt with extra keys ---- */

static int
proto_once(const char *wire, size_t len)
{
    struct frame_reader fr;
    struct proto_err err;
    struct envelope env;
    struct receipt r;
    msgpack_unpacked up;
    char *frame = NULL;
    uint32_t flen = 0;
    size_t off = 0, used;
    int rc = 0;

    frame_reader_init(&fr, FRAME_MAX_DEFAULT);
    /* Byte by byte, so the body buffer grows several times. */
    while (off < len && frame == NULL && rc == 0) {
        rc = frame_reader_feed(&fr, wire + off, 1, &used, &frame, &flen, &err);
        off += used;
    }
    frame_reader_close(&fr);
    /* No ck_assert while a failure is armed: Check allocates as it records
     * each assertion, and its static library is wrapped too. */
    if (rc != 0)
        return rc;
    if (frame == NULL)
        return PROTO_EMALFORMED;
    msgpack_unpacked_init(&up);
    rc = envelope_parse(frame, flen, &up, &env, &err);
    if (rc == 0) {
        rc = receipt_decode(env.body, &r, &err);
        if (rc == 0) {
            /* The unknown keys must have been kept. */
            rc = r.extra == NULL ? PROTO_EINVALID : 0;
            receipt_clear(&r);
        }
    }
    msgpack_unpacked_destroy(&up);
    free(frame);
    return rc;
}

START_TEST(test_oom_proto_decode_path_fails_cleanly)
{
    msgpack_sbuffer sb;
    long n, nomem = 0;
    int rc = -1;

    msgpack_sbuffer_init(&sb);
    ck_assert_int_eq(relpack_receipt_frame(&sb, 7, 1, 7, 7, 1), 0);
    for (n = 1; n < 100000; n++) {
        my_count = 0;
        my_fail_at = n;
        rc = proto_once(sb.data, sb.size);
        my_fail_at = 0;
        if (rc == 0 && my_count < n)
            break;
        ck_assert_msg(rc == PROTO_ENOMEM || rc == 0,
                      "N=%ld: got %s instead of a clean out-of-memory", n,
                      proto_code_name(rc));
        nomem += rc == PROTO_ENOMEM;
    }
    msgpack_sbuffer_destroy(&sb);
    ck_assert_int_eq(rc, 0);
    printf("oom[proto frame+envelope+receipt]: %ld allocations failed in "
           "turn, %ld clean out-of-memory errors\n",
           n - 1, nomem);
    ck_assert_int_gt(nomem, 0);
}
END_TEST

static Suite *
oom_suite(void)
{
    Suite *s = suite_create("oom");
    TCase *tc;

    tc = tcase_create("sqlite_write_path");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc,
                      env_int("RELIABILITY_OOM_EXHAUSTIVE", 0) ? 7200 : 600);
    tcase_add_loop_test(tc, test_oom_sqlite_write_path_fails_cleanly, 0,
                        (int)(sizeof(sq_cases) / sizeof(sq_cases[0])));
    suite_add_tcase(s, tc);

    tc = tcase_create("store_own_allocations");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_oom_store_own_allocations_fail_cleanly);
    suite_add_tcase(s, tc);

    tc = tcase_create("proto_decode_path");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_oom_proto_decode_path_fails_cleanly);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(oom_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
