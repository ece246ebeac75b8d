/*
 * bench_query.c: latency of the `fallbacks` and `coverage` queries on a
 * large store, next to a plain full-scan SQL query that computes the same
 * figures from the receipts table, on the same file in the same run.
 *
 *   bench_query [--receipts 10000000] [--hours 168] [--sources 64]
 *               [--runs 30] [--scan-runs 3] [--db PATH] [--verify]
 *               (--scan-runs 0: no baseline, for a quick look)
 *
 * 1. Build: unless --db names a file that already holds the receipts, a
 *    fresh store is filled through the store module (store_apply, the
 *    writer's own path, rollups included) in large transactions: receipts
 *    spread evenly over `hours` hours of received_at, each source running
 *    one plan (of 8; a plan fixes its graph and model), with three backend
 *    pairs (matched, a fallback to cpu, wgpu-vulkan) and mixed schemas and
 *    coverage.
 *    The cases include series (`every` one hour over the week up to the
 *    newest receipt) and the windows `--since 1h` and `--since 15m` (up to
 *    the newest receipt), whose partial hours are read mostly from the
 *    chunks' sums (by source they would be read from the receipts).
 * 2. Queries: with a read-only store, each case runs `runs` times through
 *    query_agg (the daemon's code: rollups, edge scans, sorting, msgpack
 *    encoding); p50 and p99 in milliseconds, and the p50 of the thread's
 *    CPU time (what the query costs, whatever else the machine runs).
 * 3. Baseline: the same case as one plain SQL statement over the receipts
 *    (GROUP BY, with total() for sums since SQLite's sum() fails past
 *    2^63), `scan-runs` times; p50, p99 and the ratio of the p50s.
 * 4. --verify: compares the rollup answer of every case with the store's
 *    forced full scan (STORE_AGG_SCAN) and prints whether they are equal.
 * 5. Listing: the newest page (100 rows) of the `receipts` query through
 *    store_query_receipts, with every filter alone and every pair of them
 *    (plan, graph, model, source, status, backend pair, a 24 h window),
 *    `runs` times; p50, p99 and the ratio of the p50 to that of the
 *    unfiltered page (the baseline: a walk down the primary key).
 *
 * A benchmark asserts nothing; it prints figures. Single-threaded.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <msgpack.h>
#include <sqlite3.h>

#include "bench_util.h"
#include "envelope.h"
#include "query_agg.h"
#include "receipt.h"
#include "store.h"
#include "store_agg.h"

#define HOUR_MS 3600000LL
#define PER_TXN 16400 /* a chunk a commit, as a busy daemon writes them */
#define PER_JOB 100

static long opt_receipts = 10000000, opt_hours = 168, opt_sources = 64;
static int opt_runs = 30, opt_scan_runs = 3, opt_verify, opt_busy;
static const char *opt_db;

static void
fail(const char *what, const struct proto_err *err)
{
    fprintf(stderr, "bench_query: %s: %s\n", what, err->message);
    exit(1);
}

static const char *const plans[] = { "plan-a", "plan-b", "plan-c", "plan-d",
                                     "plan-e", "plan-f", "plan-g", "plan-h" };
static const char *const graphs[] = { "g-1", "g-2", "g-3", "" };
static const char *const models[] = { "llama-8b", "llama-70b", "mistral-7b",
                                      "qwen-14b", "phi-3",     "gemma-9b" };

static void
set_str(struct proto_str *s, const char *p)
{
    s->ptr = p;
    s->len = strlen(p);
}

static void
make_receipt(struct receipt *r, long src)
{
    static const uint8_t pairs[3][2] = {
        { RECEIPT_BACKEND_CUDA, RECEIPT_BACKEND_CUDA },
        { RECEIPT_BACKEND_CUDA, RECEIPT_BACKEND_CPU },
        { RECEIPT_BACKEND_WGPU_VULKAN, RECEIPT_BACKEND_WGPU_VULKAN },
    };
    uint64_t x = bench_next();
    int i, p = x % 100 < 80 ? 0 : x % 100 < 90 ? 1 : 2;

    memset(r, 0, sizeof(*r));
    r->schema_version = (x >> 8) % 4 == 0 ? 2 : 3;
    r->requested_backend = pairs[p][0];
    r->executed_backend = pairs[p][1];
    /* A plan fixes its graph and model (as a prepared plan does). */
    set_str(&r->model_instance_id, models[src % 8 % 6]);
    set_str(&r->prepared_plan_id, plans[src % 8]);
    set_str(&r->graph_hash, graphs[(src % 8 * 3 + 2) % 4]);
    set_str(&r->tuning_profile, "default");
    set_str(&r->stop_reason, "eos");
    r->counter_coverage =
        bench_next() & receipt_meaningful_bits(r->schema_version);
    for (i = 0; i < RECEIPT_NCOUNTERS; i++)
        r->counters[i] = i == 6 ? (p == 1) : bench_next() >> (i % 40 + 20);
}

/* With --busy the writer's store stays open while queries run, and
 * publishes its sums not merged yet as the daemon's does. */
static struct store_shared *shared;
static struct store *writer;

static void
build(const char *path)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20, .shared = shared };
    struct receipt rs[PER_JOB];
    struct store_write w;
    struct proto_err err;
    struct store *s;
    char source[32];
    long done = 0, src;
    int64_t t0 = (int64_t)time(NULL) * 1000 - opt_hours * HOUR_MS;
    double start = bench_now_ms();
    int i;

    if (store_open(path, &o, &s, &err) != 0)
        fail("open", &err);
    while (done < opt_receipts) {
        if (store_begin(s, &err) != 0)
            fail("begin", &err);
        for (i = 0; i < PER_TXN / PER_JOB && done < opt_receipts; i++) {
            int j, n = opt_receipts - done < PER_JOB
                           ? (int)(opt_receipts - done)
                           : PER_JOB;

            src = (long)(bench_next() % (uint64_t)opt_sources);
            snprintf(source, sizeof(source), "node-%ld/rt-1", src);
            for (j = 0; j < n; j++)
                make_receipt(&rs[j], src);
            memset(&w, 0, sizeof(w));
            w.op = PROTO_OP_RECEIPTS;
            w.source = source;
            w.source_len = strlen(source);
            w.received_at = t0 + (int64_t)((double)done / (double)opt_receipts *
                                           (double)(opt_hours * HOUR_MS));
            w.receipts = rs;
            w.n_receipts = (size_t)n;
            if (store_apply(s, &w, &err) != 0)
                fail("apply", &err);
            done += n;
        }
        if (store_commit(s, &err) != 0)
            fail("commit", &err);
        if (done % 1000000 < PER_TXN)
            fprintf(stderr, "  built %ld receipts, %.0f/s\n", done,
                    (double)done / (bench_now_ms() - start) * 1e3);
    }
    /* What the writer does in its quiet moments: the last chunks' rollup
     * sums go into the rollup rows. --busy leaves the store as a writer
     * under constant load does, with the chunks not merged yet. */
    i = 0;
    while (!opt_busy &&
           (i = store_merge_idle(s, STORE_MERGE_IDLE_KEYS, &err)) > 0)
        ;
    if (i < 0)
        fail("merge the rollups", &err);
    printf("build: %ld receipts in %.1f s (%.0f receipts/s, rollups "
           "included)\n",
           opt_receipts, (bench_now_ms() - start) / 1e3,
           (double)opt_receipts / (bench_now_ms() - start) * 1e3);
    if (opt_busy)
        writer = s;
    else
        store_free(s);
}

struct bcase {
    const char *name;
    int coverage; /* else fallbacks */
    int group_by;
    const char *plan, *model;
    /* RANGE_DAY: the last day, cut off the hour on both sides;
     * RANGE_WEEK: the week up to the newest receipt; RANGE_HOUR, RANGE_15M:
     * the last hour or 15 minutes up to it (`--since 1h`, its edge read
     * from the receipts) */
    int ranged;
    int hourly; /* a series: `every` one hour */
    const char *sql_group, *sql_where;
};

enum { RANGE_ALL, RANGE_DAY, RANGE_WEEK, RANGE_HOUR, RANGE_15M };

static struct bcase cases[] = {
    { "fallbacks by plan, all", 0, STORE_GROUP_PLAN, NULL, NULL, RANGE_ALL, 0,
      "plan_id", "" },
    { "fallbacks by backends, plan + 24h", 0, STORE_GROUP_BACKENDS, "plan-c",
      NULL, RANGE_DAY, 0, "requested_backend, executed_backend", "" },
    { "coverage, all", 1, STORE_GROUP_NONE, NULL, NULL, RANGE_ALL, 0, NULL,
      "" },
    { "coverage by model, all", 1, STORE_GROUP_MODEL, NULL, NULL, RANGE_ALL, 0,
      "model_id", "" },
    { "coverage, model + 24h", 1, STORE_GROUP_NONE, NULL, "mistral-7b",
      RANGE_DAY, 0, NULL, "" },
    { "fallbacks by plan, 7d hourly", 0, STORE_GROUP_PLAN, NULL, NULL,
      RANGE_WEEK, 1, "plan_id", "" },
    { "fallbacks by backends, 7d hourly", 0, STORE_GROUP_BACKENDS, NULL, NULL,
      RANGE_WEEK, 1, "requested_backend, executed_backend", "" },
    { "coverage, 7d hourly", 1, STORE_GROUP_NONE, NULL, NULL, RANGE_WEEK, 1,
      NULL, "" },
    { "fallbacks by plan, last 1h", 0, STORE_GROUP_PLAN, NULL, NULL, RANGE_HOUR,
      0, "plan_id", "" },
    { "fallbacks by plan, last 15m", 0, STORE_GROUP_PLAN, NULL, NULL, RANGE_15M,
      0, "plan_id", "" },
    { "fallbacks by backends, last 1h", 0, STORE_GROUP_BACKENDS, NULL, NULL,
      RANGE_HOUR, 0, "requested_backend, executed_backend", "" },
    { "fallbacks by backends, last 15m", 0, STORE_GROUP_BACKENDS, NULL, NULL,
      RANGE_15M, 0, "requested_backend, executed_backend", "" },
    { "coverage, last 1h", 1, STORE_GROUP_NONE, NULL, NULL, RANGE_HOUR, 0, NULL,
      "" },
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

static int64_t range_since, range_until, newest;

static void
filter_of(const struct bcase *c, struct store_filter *f)
{
    memset(f, 0, sizeof(*f));
    f->requested = f->executed = f->status = -1;
    f->limit = 10000;
    if (c->plan) {
        f->plan = c->plan;
        f->plan_len = strlen(c->plan);
    }
    if (c->model) {
        f->model = c->model;
        f->model_len = strlen(c->model);
    }
    if (c->ranged == RANGE_DAY) {
        f->has_since = f->has_until = 1;
        f->since = (uint64_t)range_since;
        f->until = (uint64_t)range_until;
    } else if (c->ranged != RANGE_ALL) {
        f->has_since = f->has_until = 1;
        f->until = (uint64_t)newest + 1;
        f->since =
            f->until - (uint64_t)(c->ranged == RANGE_WEEK   ? 168 * HOUR_MS
                                  : c->ranged == RANGE_HOUR ? HOUR_MS
                                                            : 15 * 60000);
    }
    if (c->hourly)
        f->every = HOUR_MS;
}

/* counter(blob, i): counter i of a receipts row's counters blob (a count
 * byte, then LEB128 values; migrations/0010), NULL past its end. The plain
 * SQL needs it since the counters are one column. */
static void
counter_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    const unsigned char *p = sqlite3_value_blob(argv[0]);
    int len = sqlite3_value_bytes(argv[0]);
    const unsigned char *end = p + (p != NULL ? len : 0);
    int want = sqlite3_value_int(argv[1]), i, n;

    (void)argc;
    if (p == NULL || p >= end)
        return;
    n = *p++;
    for (i = 0; i < n && i <= want; i++) {
        uint64_t v = 0;
        unsigned shift = 0;

        while (p < end && shift < 64) {
            v |= (uint64_t)(*p & 0x7f) << shift;
            shift += 7;
            if (!(*p++ & 0x80))
                break;
        }
        if (i == want) {
            sqlite3_result_int64(ctx, (int64_t)v);
            return;
        }
    }
}

/* The plain SQL of a case: one GROUP BY over the receipts table. */
static void
plain_sql(const struct bcase *c, char *sql, size_t cap)
{
    size_t n = 0;
    int i;

#define ADD(...)                                                               \
    n += (size_t)snprintf(sql + n, n < cap ? cap - n : 0, __VA_ARGS__)
    ADD("SELECT %s%scount(*), sum(status = 0), sum(status = 1), "
        "sum(status = 2)",
        c->sql_group ? c->sql_group : "", c->sql_group ? ", " : "");
    if (c->coverage)
        for (i = 0; i < RECEIPT_NCOUNTERS; i++) {
            char f[40], cond[96];

            snprintf(f, sizeof(f), "counter(counters, %d)", i);

            if (i < 10)
                snprintf(cond, sizeof(cond), "(counter_coverage >> %d & 1)", i);
            else
                snprintf(cond, sizeof(cond),
                         "(counter_coverage >> %d & 1 AND schema_version >= "
                         "3)",
                         i);
            ADD(", sum(%s), total(CASE WHEN %s THEN %s END), min(CASE WHEN "
                "%s THEN %s END), max(CASE WHEN %s THEN %s END)",
                cond, cond, f, cond, f, cond, f);
        }
    ADD(" FROM receipts WHERE 1");
    if (c->plan)
        ADD(" AND plan_id = (SELECT id FROM strings WHERE value = "
            "CAST('%s' AS BLOB))",
            c->plan);
    if (c->model)
        ADD(" AND model_id = (SELECT id FROM strings WHERE value = "
            "CAST('%s' AS BLOB))",
            c->model);
    if (c->ranged != RANGE_ALL) {
        struct store_filter f;

        filter_of(c, &f);
        ADD(" AND received_at >= %lld AND received_at < %lld",
            (long long)f.since, (long long)f.until);
    }
    if (c->sql_group || c->hourly)
        ADD(" GROUP BY %s%s%s", c->sql_group ? c->sql_group : "",
            c->sql_group && c->hourly ? ", " : "",
            c->hourly ? "received_at / 3600000" : "");
#undef ADD
}

static double
run_plain(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    double t = bench_now_ms();
    int rc, rows = 0;

    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "bench_query: %s\n", sqlite3_errmsg(db));
        exit(1);
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        rows++;
    if (rc != SQLITE_DONE) {
        fprintf(stderr, "bench_query: %s\n", sqlite3_errmsg(db));
        exit(1);
    }
    sqlite3_finalize(st);
    return bench_now_ms() - t;
}

static int
same(struct store *s, const struct bcase *c)
{
    struct store_agg a = { 0 }, b = { 0 };
    struct store_filter f;
    struct proto_err err;
    size_t i, j;
    int ok = 1;
    unsigned fl = c->coverage ? STORE_AGG_COUNTERS : 0;

    filter_of(c, &f);
    if (store_query_agg(s, &f, c->group_by, fl, 0, &a, &err) != 0 ||
        store_query_agg(s, &f, c->group_by, fl | STORE_AGG_SCAN, 0, &b, &err) !=
            0)
        fail("verify", &err);
    ok = a.n == b.n;
    for (i = 0; i < a.n && ok; i++) {
        for (j = 0; j < b.n; j++)
            if (a.groups[i].k1 == b.groups[j].k1 &&
                a.groups[i].k2 == b.groups[j].k2 &&
                a.groups[i].bucket == b.groups[j].bucket)
                break;
        ok = j < b.n && a.groups[i].receipts == b.groups[j].receipts &&
             a.groups[i].fallback == b.groups[j].fallback &&
             a.groups[i].clean == b.groups[j].clean &&
             a.groups[i].unproven == b.groups[j].unproven &&
             memcmp(a.groups[i].c, b.groups[j].c, sizeof(a.groups[i].c)) == 0;
    }
    store_agg_free(&a);
    store_agg_free(&b);
    return ok;
}

/* ---- listing: the first page of the `receipts` query ---- */

/* The filters a page can be asked by, alone and in every pair. Sources
 * run plans[src % 8] on graphs[(src % 8 * 3 + 2) % 4] with
 * models[src % 8 % 6]:
 * node-2 runs plan-c on g-1 with mistral-7b, so every pair of the first
 * four has matches; a tenth of all receipts fell back from cuda to cpu. */
enum {
    L_PLAN,
    L_GRAPH,
    L_MODEL,
    L_SOURCE,
    L_STATUS,
    L_BACKENDS,
    L_WINDOW,
    L_COUNT
};
static const char *const lnames[L_COUNT] = {
    "plan",      "graph",       "model", "source", "status fallback",
    "cuda->cpu", "24 h window",
};
#define LPAGE 100

static int
count_row(void *arg, const struct store_row *row)
{
    (void)row;
    (*(uint32_t *)arg)++;
    return 0;
}

static void
set_filter(struct store_filter *f, int which)
{
    switch (which) {
    case L_PLAN:
        f->plan = "plan-c", f->plan_len = 6;
        break;
    case L_GRAPH:
        f->graph = "g-1", f->graph_len = 3;
        break;
    case L_MODEL:
        f->model = "mistral-7b", f->model_len = 10;
        break;
    case L_SOURCE:
        f->source = "node-2/rt-1", f->source_len = 11;
        break;
    case L_STATUS:
        f->status = RECEIPT_STATUS_FALLBACK;
        break;
    case L_BACKENDS:
        f->requested = RECEIPT_BACKEND_CUDA;
        f->executed = RECEIPT_BACKEND_CPU;
        break;
    case L_WINDOW:
        f->has_since = f->has_until = 1;
        f->since = (uint64_t)range_since;
        f->until = (uint64_t)range_until;
        break;
    }
}

/* One case: filters a and b (b < 0: a alone; a < 0: none). */
static void
listing_case(struct store *s, int a, int b, double *lat, double *base)
{
    struct store_filter f;
    struct proto_err err;
    uint32_t rows = 0;
    char name[64];
    double p50, p99;
    int i, truncated;

    memset(&f, 0, sizeof(f));
    f.requested = f.executed = f.status = -1;
    f.limit = LPAGE;
    if (a >= 0)
        set_filter(&f, a);
    if (b >= 0)
        set_filter(&f, b);
    if (a < 0)
        snprintf(name, sizeof(name), "no filter (baseline)");
    else if (b < 0)
        snprintf(name, sizeof(name), "%s", lnames[a]);
    else
        snprintf(name, sizeof(name), "%s + %s", lnames[a], lnames[b]);
    for (i = 0; i < opt_runs; i++) {
        double t = bench_now_ms();

        rows = 0;
        if (store_query_receipts(s, &f, 0, count_row, &rows, &truncated,
                                 &err) != 0)
            fail(name, &err);
        lat[i] = bench_now_ms() - t;
    }
    p50 = bench_pct(lat, opt_runs, 0.5);
    p99 = bench_pct(lat, opt_runs, 0.99);
    if (a < 0)
        *base = p50;
    printf("%-36s %10.2f %10.2f %6u %8.1fx\n", name, p50, p99, rows,
           p50 / *base);
    fflush(stdout);
}

static void
run_listing(struct store *s, double *lat)
{
    double base = 0;
    int a, b;

    printf("\n%-36s %10s %10s %6s %9s\n", "receipts, first page of 100",
           "p50 ms", "p99 ms", "rows", "ratio");
    listing_case(s, -1, -1, lat, &base);
    for (a = 0; a < L_COUNT; a++)
        listing_case(s, a, -1, lat, &base);
    for (a = 0; a < L_COUNT; a++)
        for (b = a + 1; b < L_COUNT; b++)
            listing_case(s, a, b, lat, &base);
}

static int64_t
one_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    int64_t v = -1;

    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static void
usage(void)
{
    fprintf(stderr, "usage: bench_query [--receipts N] [--hours H] "
                    "[--sources N] [--runs N] [--scan-runs N] [--db PATH] "
                    "[--verify] [--busy]\n");
    exit(2);
}

int
main(int argc, char **argv)
{
    struct store_opts ro = { .readonly = 1 };
    uint64_t hits, misses;
    char path[512], sql[16384];
    struct proto_err err;
    struct store *s;
    struct stat sb;
    sqlite3 *db;
    double *lat, *cpu;
    size_t k;
    int i, built = 0;

    const struct bench_opts bo = { &opt_receipts, &opt_sources,   &opt_hours,
                                   &opt_runs,     &opt_scan_runs, &opt_db };

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--verify") == 0)
            opt_verify = 1;
        else if (strcmp(argv[i], "--busy") == 0)
            opt_busy = 1;
        else if (bench_opt(&bo, argc, argv, &i) != 1)
            usage();
    }
    if (opt_receipts < 1 || opt_hours < 2 || opt_sources < 1 || opt_runs < 1 ||
        opt_scan_runs < 0)
        usage();
    if (opt_db != NULL) {
        snprintf(path, sizeof(path), "%s", opt_db);
    } else {
        snprintf(path, sizeof(path), "%s/bench_query-%ld.db",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid());
    }
    if (opt_busy && (shared = store_shared_new()) == NULL)
        return 1;
    if (stat(path, &sb) != 0) {
        build(path);
        built = 1;
    }
    if (stat(path, &sb) == 0)
        printf("store: %s, %.0f MiB\n", path, (double)sb.st_size / 1048576.0);

    /* The last day, cut 17 minutes into an hour at both ends. */
    range_until =
        ((int64_t)time(NULL) * 1000 / HOUR_MS - 1) * HOUR_MS + 17 * 60000;
    range_since = range_until - 24 * HOUR_MS;

    ro.shared = shared;
    if (store_open(path, &ro, &s, &err) != 0)
        fail("open read-only", &err);
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_create_function(db, "counter", 2,
                                SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL,
                                counter_fn, NULL, NULL) != SQLITE_OK)
        return 1;
    newest = one_int(db, "SELECT coalesce(max(received_at), 0) FROM receipts");
    printf("receipts read from their rows by every aggregate: %lld\n",
           (long long)one_int(db, "SELECT coalesce(max(id) + 1, 0) - "
                                  "(SELECT rollup_from FROM rollup_merge) "
                                  "FROM receipts"));
    lat = calloc((size_t)(opt_runs > opt_scan_runs ? opt_runs : opt_scan_runs),
                 sizeof(*lat));
    if (lat == NULL)
        return 1;
    if ((cpu = calloc((size_t)opt_runs, sizeof(*cpu))) == NULL)
        return 1;
    printf("%-36s %10s %10s %10s %12s %12s %9s\n", "case", "p50 ms", "p99 ms",
           "cpu p50 ms", "scan p50 ms", "scan p99 ms", "speedup");
    for (k = 0; k < NCASES; k++) {
        const struct bcase *c = &cases[k];
        struct store_filter f;
        double p50, p99, s50, s99, c50;

        filter_of(c, &f);
        for (i = 0; i < opt_runs; i++) {
            msgpack_sbuffer out;
            msgpack_packer pk;
            double t, tc;
            int rc;

            msgpack_sbuffer_init(&out);
            msgpack_packer_init(&pk, &out, msgpack_sbuffer_write);
            tc = bench_thread_cpu_ms();
            t = bench_now_ms();
            rc = c->coverage
                     ? query_agg_coverage(s, &f, c->group_by, 0, &pk, &err)
                     : query_agg_fallbacks(s, &f, c->group_by, NULL, 0, &pk,
                                           &err);
            lat[i] = bench_now_ms() - t;
            cpu[i] = bench_thread_cpu_ms() - tc;
            msgpack_sbuffer_destroy(&out);
            if (rc != 0)
                fail(c->name, &err);
        }
        p50 = bench_pct(lat, opt_runs, 0.5);
        p99 = bench_pct(lat, opt_runs, 0.99);
        c50 = bench_pct(cpu, opt_runs, 0.5);
        plain_sql(c, sql, sizeof(sql));
        for (i = 0; i < opt_scan_runs; i++)
            lat[i] = run_plain(db, sql);
        /* --scan-runs 0: no baseline (a quick look; the ratio is nan). */
        s50 = opt_scan_runs ? bench_pct(lat, opt_scan_runs, 0.5) : 0.0 / 0.0;
        s99 = opt_scan_runs ? bench_pct(lat, opt_scan_runs, 0.99) : 0.0 / 0.0;
        printf("%-36s %10.2f %10.2f %10.2f %12.1f %12.1f %8.0fx\n", c->name,
               p50, p99, c50, s50, s99, s50 / p50);
        fflush(stdout);
    }
    if (opt_verify)
        for (k = 0; k < NCASES; k++)
            printf("verify %-36s rollups %s full scan\n", cases[k].name,
                   same(s, &cases[k]) ? "==" : "!=");
    run_listing(s, lat);
    store_shared_counts(shared, &hits, &misses);
    if (opt_busy)
        printf("aggregates that read the sums not merged yet from the "
               "writer's memory: %llu, from the rows: %llu\n",
               (unsigned long long)hits, (unsigned long long)misses);
    store_free(writer);
    store_shared_unref(shared);
    free(lat);
    free(cpu);
    sqlite3_close(db);
    store_free(s);
    if (built && opt_db == NULL) {
        unlink(path);
        snprintf(sql, sizeof(sql), "%s-wal", path);
        unlink(sql);
        snprintf(sql, sizeof(sql), "%s-shm", path);
        unlink(sql);
    }
    return 0;
}
