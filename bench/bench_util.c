/*
 * bench_util.c: what the query benchmarks share (bench_util.h).
 */
#include "bench_util.h"

#include <stdlib.h>
#include <time.h>

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
