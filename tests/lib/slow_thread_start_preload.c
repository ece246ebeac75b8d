/*
 * slow_thread_start_preload.c: an LD_PRELOAD library for e2e_relay that
 * makes every thread the process creates sleep for
 * RECEIPTD_TEST_THREAD_START_MS milliseconds before it runs: the wait
 * for a core that a new thread can have on a loaded machine. A daemon
 * whose threads name themselves then shows a thread without its name
 * for that long after it said it was ready; one that names them when it
 * creates them does not.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *),
                         void *);

struct start {
    void *(*fn)(void *);
    void *arg;
    long ms;
};

static void *
late_start(void *p)
{
    struct start s = *(struct start *)p;
    struct timespec ts = { s.ms / 1000, (s.ms % 1000) * 1000000L };

    free(p);
    nanosleep(&ts, NULL);
    return s.fn(s.arg);
}

int
pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
               void *arg)
{
    create_fn real = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
    const char *ms = getenv("RECEIPTD_TEST_THREAD_START_MS");
    struct start *s;
    int rc;

    if (ms == NULL || (s = malloc(sizeof(*s))) == NULL)
        return real(t, attr, fn, arg);
    s->fn = fn;
    s->arg = arg;
    s->ms = atol(ms);
    if ((rc = real(t, attr, late_start, s)) != 0)
        free(s);
    return rc;
}
