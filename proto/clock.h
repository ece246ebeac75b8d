/*
 * clock.h: the clocks the project reads, in one place: monotonic time
 * for intervals and deadlines, wall-clock (unix) time for what is stored
 * and shown. Header only.
 */
#ifndef RECEIPTD_PROTO_CLOCK_H
#define RECEIPTD_PROTO_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t
clock_read_ns(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Monotonic milliseconds and microseconds (an unspecified origin). */
static inline uint64_t
mono_ms(void)
{
    return clock_read_ns(CLOCK_MONOTONIC) / 1000000u;
}

static inline uint64_t
mono_us(void)
{
    return clock_read_ns(CLOCK_MONOTONIC) / 1000u;
}

/* Unix milliseconds: the wall clock, which may step. */
static inline uint64_t
unix_ms(void)
{
    return clock_read_ns(CLOCK_REALTIME) / 1000000u;
}

#endif
