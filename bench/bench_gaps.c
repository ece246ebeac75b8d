/*
 * bench_gaps.c: latency of the `gaps` query on a store of many sources,
 * next to a plain SQL query over the receipts table that computes the
 * same figures per source (without the ranges), on the same file in the
 * same run.
 *
 *   bench_gaps [--receipts 2000000] [--sources 10000] [--hours 48]
 *              [--runs 20] [--scan-runs 3] [--db PATH]
 *
 * 1. Build: unless --db names a file that already holds the receipts, a
 *    fresh store is filled through the store module (store_apply, the
 *    writer's own path) with single `receipt` writes, each with its
 *    source's next seq, round robin over the sources and spread evenly
 *    over `hours` hours of received_at. About one seq in 500 is skipped (a
 *    gap), and a tenth of the sources stop sending after the first half.
 * 2. Queries: with a read-only store, each case runs `runs` times through
 *    query_agg_gaps (the daemon's code: the seq walk of every source, the
 *    last receive times, the sort, msgpack encoding); p50 and p99 in ms.
 * 3. Baseline: one GROUP BY over the receipts (min and max seq, distinct
 *    seqs, newest received_at per source, sorted by missing seqs),
 *    `scan-runs` times.
 *
 * A benchmark asserts nothing; it prints figures. Single-threaded.
 */
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
#define PER_TXN 20000

static long opt_receipts = 2000000, opt_sources = 10000, opt_hours = 48;
static int opt_runs = 20, opt_scan_runs = 3;
static const char *opt_db;

static void
fail(const char *what, const struct proto_err *err)
{
    fprintf(stderr, "bench_gaps: %s: %s\n", what, err->message);
    exit(1);
}

static void
set_str(struct proto_str *s, const char *p)
{
    s->ptr = p;
    s->len = strlen(p);
}

static void
make_receipt(struct receipt *r)
{
    memset(r, 0, sizeof(*r));
    r->schema_version = 3;
    r->requested_backend = RECEIPT_BACKEND_CUDA;
    r->executed_backend = RECEIPT_BACKEND_CUDA;
    set_str(&r->model_instance_id, "llama-8b");
    set_str(&r->prepared_plan_id, "plan-a");
    set_str(&r->graph_hash, "g-1");
    set_str(&r->tuning_profile, "default");
    set_str(&r->stop_reason, "eos");
    r->counter_coverage = receipt_meaningful_bits(3);
}

static void
build(const char *path)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    int64_t t0 = (int64_t)time(NULL) * 1000 - opt_hours * HOUR_MS;
    uint64_t *seq = calloc((size_t)opt_sources, sizeof(*seq));
    double start = bench_now_ms();
    struct store_write w;
    struct proto_err err;
    struct receipt r;
    struct store *s;
    char source[32];
    long done = 0, k = 0, n, src;

    if (seq == NULL)
        exit(1);
    if (store_open(path, &o, &s, &err) != 0)
        fail("open", &err);
    make_receipt(&r);
    while (done < opt_receipts) {
        if (store_begin(s, &err) != 0)
            fail("begin", &err);
        for (n = 0; n < PER_TXN && done < opt_receipts; k++) {
            src = k % opt_sources;
            /* A tenth of the sources stop half way. */
            if (src % 10 == 9 && done > opt_receipts / 2)
                continue;
            seq[src] += bench_next() % 500 == 0 ? 2 : 1;
            snprintf(source, sizeof(source), "node-%ld/rt-1", src);
            memset(&w, 0, sizeof(w));
            w.op = PROTO_OP_RECEIPT;
            w.source = source;
            w.source_len = strlen(source);
            w.has_seq = 1;
            w.seq = seq[src];
            w.payload_hash = (uint32_t)bench_next() | 1;
            w.received_at = t0 + (int64_t)((double)done / (double)opt_receipts *
                                           (double)(opt_hours * HOUR_MS));
            w.receipts = &r;
            w.n_receipts = 1;
            if (store_apply(s, &w, &err) != 0)
                fail("apply", &err);
            done++;
            n++;
        }
        if (store_commit(s, &err) != 0)
            fail("commit", &err);
    }
    printf("build: %ld single receipts with seqs from %ld sources in %.1f s\n",
           opt_receipts, opt_sources, (bench_now_ms() - start) / 1e3);
    free(seq);
    store_free(s);
}

struct gcase {
    const char *name;
    struct store_gap_select sel;
    int one_source, quiet; /* --source node-7/rt-1; --quiet-for 1h */
};

static void
run_case(struct store *s, const struct gcase *c, double *lat)
{
    struct store_gap_select sel = c->sel;
    struct store_filter f;
    struct proto_err err;
    size_t rows = 0;
    int i;

    memset(&f, 0, sizeof(f));
    f.requested = f.executed = f.status = -1;
    f.limit = 100;
    if (c->one_source) {
        f.source = "node-7/rt-1";
        f.source_len = strlen(f.source);
    }
    if (c->quiet) {
        sel.has_quiet_before = 1;
        sel.quiet_before = (int64_t)time(NULL) * 1000 - HOUR_MS;
    }
    for (i = 0; i < opt_runs; i++) {
        msgpack_sbuffer out;
        msgpack_packer pk;
        double t;

        msgpack_sbuffer_init(&out);
        msgpack_packer_init(&pk, &out, msgpack_sbuffer_write);
        t = bench_now_ms();
        if (query_agg_gaps(s, &f, &sel, 0, &pk, &err) != 0)
            fail(c->name, &err);
        lat[i] = bench_now_ms() - t;
        rows = out.size;
        msgpack_sbuffer_destroy(&out);
    }
    printf("%-34s %10.1f %10.1f %10zu\n", c->name,
           bench_pct(lat, opt_runs, 0.5), bench_pct(lat, opt_runs, 0.99), rows);
}

static void
usage(void)
{
    fprintf(stderr, "usage: bench_gaps [--receipts N] [--sources N] "
                    "[--hours H] [--runs N] [--scan-runs N] [--db PATH]\n");
    exit(2);
}

int
main(int argc, char **argv)
{
    static const struct gcase cases[] = {
        { "gaps, all sources, limit 100", { 0, 0, 0 }, 0, 0 },
        { "gaps --only-missing", { 1, 0, 0 }, 0, 0 },
        { "gaps --quiet-for 1h", { 0, 0, 0 }, 0, 1 },
        { "gaps --source (one)", { 0, 0, 0 }, 1, 0 },
    };
    static const char *const plain =
        "SELECT source_id, max(seq) - min(seq) + 1 - count(DISTINCT seq) AS "
        "missing, min(seq), max(seq), count(DISTINCT seq), max(received_at) "
        "FROM receipts WHERE seq IS NOT NULL GROUP BY source_id ORDER BY "
        "missing DESC LIMIT 100";
    struct store_opts ro = { .readonly = 1 };
    struct proto_err err;
    struct store *s;
    struct stat sb;
    char path[512];
    sqlite3 *db;
    double *lat;
    size_t k;
    int i;

    const struct bench_opts bo = { &opt_receipts, &opt_sources,   &opt_hours,
                                   &opt_runs,     &opt_scan_runs, &opt_db };

    for (i = 1; i < argc; i++)
        if (bench_opt(&bo, argc, argv, &i) != 1)
            usage();
    if (opt_receipts < 1 || opt_sources < 10 || opt_hours < 2 || opt_runs < 1 ||
        opt_scan_runs < 1)
        usage();
    if (opt_db != NULL)
        snprintf(path, sizeof(path), "%s", opt_db);
    else
        snprintf(path, sizeof(path), "%s/bench_gaps-%ld.db",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid());
    if (stat(path, &sb) != 0)
        build(path);
    if (stat(path, &sb) == 0)
        printf("store: %s, %.0f MiB\n", path, (double)sb.st_size / 1048576.0);
    if (store_open(path, &ro, &s, &err) != 0)
        fail("open read-only", &err);
    lat = calloc((size_t)(opt_runs > opt_scan_runs ? opt_runs : opt_scan_runs),
                 sizeof(*lat));
    if (lat == NULL)
        return 1;
    printf("%-34s %10s %10s %10s\n", "case", "p50 ms", "p99 ms", "bytes");
    for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
        run_case(s, &cases[k], lat);
    store_free(s);

    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        return 1;
    for (i = 0; i < opt_scan_runs; i++) {
        sqlite3_stmt *st;
        double t = bench_now_ms();

        if (sqlite3_prepare_v2(db, plain, -1, &st, NULL) != SQLITE_OK)
            return 1;
        while (sqlite3_step(st) == SQLITE_ROW)
            ;
        sqlite3_finalize(st);
        lat[i] = bench_now_ms() - t;
    }
    printf("%-34s %10.1f %10.1f\n", "plain GROUP BY over receipts",
           bench_pct(lat, opt_scan_runs, 0.5),
           bench_pct(lat, opt_scan_runs, 0.99));
    sqlite3_close(db);
    free(lat);
    if (opt_db == NULL) {
        char side[600];

        unlink(path);
        snprintf(side, sizeof(side), "%s-wal", path);
        unlink(side);
        snprintf(side, sizeof(side), "%s-shm", path);
        unlink(side);
        snprintf(side, sizeof(side), "%s.lock", path);
        unlink(side);
    }
    return 0;
}
