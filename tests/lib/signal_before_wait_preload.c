/*
 * signal_before_wait_preload.c: an LD_PRELOAD library for e2e_follow that
 * sends the process SIGTERM once, just before its first poll() that would
 * wait without a bound (timeout < 0): the signal of a `kill` that comes
 * after a client has checked its stop flag and before it waits. A client
 * that only notices a signal by poll()'s EINTR then waits for data that
 * never comes; one whose handler also wakes the wait (a pipe it polls)
 * stops. Active only while RECEIPTD_TEST_SIGNAL_BEFORE_WAIT is set.
 *
 * Thread: the first caller wins; receiptctl is single-threaded.
 */
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef int (*poll_fn)(struct pollfd *, nfds_t, int);

static atomic_int fired;

int
poll(struct pollfd *fds, nfds_t n, int timeout)
{
    poll_fn real = (poll_fn)dlsym(RTLD_NEXT, "poll");

    if (timeout < 0 && getenv("RECEIPTD_TEST_SIGNAL_BEFORE_WAIT") != NULL &&
        atomic_exchange(&fired, 1) == 0)
        raise(SIGTERM);
    return real(fds, n, timeout);
}
