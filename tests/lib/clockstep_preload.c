/*
 * clockstep_preload.c: an LD_PRELOAD library for tests that steps the
 * process's wall clock: CLOCK_REALTIME (and its coarse variant) read
 * through clock_gettime() is shifted by the number of milliseconds written
 * in the file RECEIPTD_CLOCK_FILE (absent or empty: no shift). The file is
 * read again at most every 20 ms of monotonic time, so a test steps the
 * daemon's clock forward and back by rewriting it. Monotonic clocks are
 * untouched, as a real clock step leaves them.
 *
 * Thread: any; the cached offset is read and written atomically.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*clock_fn)(clockid_t, struct timespec *);

static _Atomic long long offset_ms;
static _Atomic long long read_at_ms = -1000000;

int clock_gettime(clockid_t id, struct timespec *ts);

static void
refresh(clock_fn real)
{
    const char *path = getenv("RECEIPTD_CLOCK_FILE");
    struct timespec now;
    long long now_ms, v = 0;
    FILE *f;

    if (path == NULL || real(CLOCK_MONOTONIC, &now) != 0)
        return;
    now_ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    if (now_ms - atomic_load(&read_at_ms) < 20)
        return;
    atomic_store(&read_at_ms, now_ms);
    f = fopen(path, "r");
    if (f != NULL) {
        if (fscanf(f, "%lld", &v) != 1)
            v = 0;
        fclose(f);
    }
    atomic_store(&offset_ms, v);
}

int
clock_gettime(clockid_t id, struct timespec *ts)
{
    static clock_fn real;
    long long off, ns;
    int rc;

    if (real == NULL)
        real = (clock_fn)dlsym(RTLD_NEXT, "clock_gettime");
    rc = real(id, ts);
    if (rc != 0 || (id != CLOCK_REALTIME && id != CLOCK_REALTIME_COARSE))
        return rc;
    refresh(real);
    off = atomic_load(&offset_ms);
    if (off != 0) {
        ns = (long long)ts->tv_nsec + (off % 1000) * 1000000;
        ts->tv_sec += (time_t)(off / 1000 + ns / 1000000000);
        ts->tv_nsec = (long)(ns % 1000000000);
        if (ts->tv_nsec < 0) {
            ts->tv_nsec += 1000000000;
            ts->tv_sec--;
        }
    }
    return rc;
}
