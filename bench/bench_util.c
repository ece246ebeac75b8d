/*
 * bench_util.c: what the query benchmarks share (bench_util.h).
 */
#include "bench_util.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

double
bench_thread_cpu_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

double
bench_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

uint64_t
bench_next(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

double
bench_pct(double *v, int n, double p)
{
    int i = (int)(p * (n - 1) + 0.5);

    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[i < n ? i : n - 1];
}

int
bench_opt(const struct bench_opts *o, int argc, char **argv, int *i)
{
    const char *a = argv[*i];

    if (*i + 1 >= argc)
        return 0;
    if (strcmp(a, "--receipts") == 0)
        *o->receipts = atol(argv[++*i]);
    else if (strcmp(a, "--sources") == 0)
        *o->sources = atol(argv[++*i]);
    else if (strcmp(a, "--hours") == 0)
        *o->hours = atol(argv[++*i]);
    else if (strcmp(a, "--runs") == 0)
        *o->runs = atoi(argv[++*i]);
    else if (strcmp(a, "--scan-runs") == 0)
        *o->scan_runs = atoi(argv[++*i]);
    else if (strcmp(a, "--db") == 0)
        *o->db = argv[++*i];
    else
        return 0;
    return 1;
}
