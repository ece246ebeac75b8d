/*
 * bench_util.h: what the query benchmarks share: a monotonic clock in
 * milliseconds, a fixed pseudo-random sequence (so every run builds the
 * same store) and percentiles of latencies. Single-threaded.
 */
#ifndef RECEIPTD_BENCH_UTIL_H
#define RECEIPTD_BENCH_UTIL_H

#include <stdint.h>

/* CLOCK_MONOTONIC in milliseconds. */
double bench_now_ms(void);
/* The calling thread's CPU time, ms (CLOCK_THREAD_CPUTIME_ID): what a
 * measurement costs whatever else the machine runs. */
double bench_thread_cpu_ms(void);

/* The next value of one splitmix64 sequence, the same in every run. */
uint64_t bench_next(void);

/* The p-th quantile (0 to 1) of v[0..n), which it sorts. */
double bench_pct(double *v, int n, double p);

/* Where the options both query benchmarks take go: --receipts,
 * --sources, --hours, --runs, --scan-runs and --db, each with a value. */
struct bench_opts {
    long *receipts, *sources, *hours;
    int *runs, *scan_runs;
    const char **db;
};

/* Reads argv[*i] if it is one of them, moving *i past its value: 1, or 0
 * when it is not one of them or its value is missing. */
int bench_opt(const struct bench_opts *o, int argc, char **argv, int *i);

#endif
