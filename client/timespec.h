/*
 * timespec.h: the time specifications receiptctl accepts for --since and
 * --until, turned into unix milliseconds (the unit of PROTOCOL section 9).
 *
 * Accepted forms:
 *  - a duration before now: a number and a unit, repeatable ("90s", "30m",
 *    "1h", "7d", "2w", "1h30m"), units ms, s, m, h, d, w;
 *  - "now";
 *  - plain unix milliseconds ("1764460800000");
 *  - an RFC 3339 timestamp ("2026-11-30T04:00:00Z",
 *    "2026-11-30T06:00:00.250+02:00"), 'T', 't' or a space between date and
 *    time, 'Z' or 'z' or a numeric offset, fractions of a second truncated to
 *    milliseconds.
 * Pure functions; any thread.
 */
#ifndef RECEIPTD_CLIENT_TIMESPEC_H
#define RECEIPTD_CLIENT_TIMESPEC_H

#include <stddef.h>
#include <stdint.h>

#define TIMESPEC_ERR_MAX 160

/*
 * Parses s (NUL-terminated, borrowed) relative to now_ms. On success returns
 * 0 and stores unix milliseconds in *out. On failure returns -1, leaves *out
 * alone and writes one sentence into err (err_len bytes, may be truncated):
 * a malformed spec, an out-of-range field, a time before 1970, or a duration
 * longer than the time since 1970.
 */
int timespec_parse(const char *s, uint64_t now_ms, uint64_t *out, char *err,
                   size_t err_len);

/*
 * Parses only the RFC 3339 form; the same contract as timespec_parse().
 */
int timespec_parse_rfc3339(const char *s, uint64_t *out, char *err,
                           size_t err_len);

/*
 * Formats unix milliseconds as RFC 3339 in UTC with millisecond precision
 * ("2026-11-30T04:00:00.000Z") into buf, which needs at least
 * TIMESPEC_RFC3339_MAX bytes. Returns buf.
 */
#define TIMESPEC_RFC3339_MAX 32
char *timespec_format(uint64_t ms, char *buf, size_t len);

/* The current time in unix milliseconds (CLOCK_REALTIME). */
uint64_t timespec_now_ms(void);

#endif
