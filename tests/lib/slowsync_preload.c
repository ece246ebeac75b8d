/*
 * slowsync_preload.c: an LD_PRELOAD library for tests that makes the disk
 * slow: every fsync() and fdatasync() of the process sleeps
 * RECEIPTD_SYNC_DELAY_MS milliseconds before the real call. SQLite syncs
 * through these (its unix VFS calls libc), so the daemon's writer commits
 * a few times a second and producers outrun it, which is what the
 * backpressure tests need to see.
 *
 * When RECEIPTD_SYNC_GATE names a file, every sync also waits while that
 * file exists: a test creates it to hold the writer inside a commit, so
 * producers outrun it however fast or busy the machine is, and deletes it
 * to let the writer go on.
 *
 * Thread: any; each call sleeps on its own thread.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h> /* access, and the prototypes of fsync and fdatasync */

typedef int (*sync_fn)(int);

static void
sleep_ms(unsigned long ms)
{
    struct timespec ts;

    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void
delay(void)
{
    const char *v = getenv("RECEIPTD_SYNC_DELAY_MS");
    const char *gate = getenv("RECEIPTD_SYNC_GATE");
    unsigned long ms = v != NULL ? strtoul(v, NULL, 10) : 0;

    if (ms > 0)
        sleep_ms(ms);
    while (gate != NULL && access(gate, F_OK) == 0)
        sleep_ms(1);
}

int
fsync(int fd)
{
    sync_fn real = (sync_fn)(uintptr_t)dlsym(RTLD_NEXT, "fsync");

    delay();
    return real != NULL ? real(fd) : -1;
}

int
fdatasync(int fd)
{
    sync_fn real = (sync_fn)(uintptr_t)dlsym(RTLD_NEXT, "fdatasync");

    delay();
    return real != NULL ? real(fd) : -1;
}
