/*
 * timespec.c: --since/--until parsing for receiptctl.
 *
 * Every arithmetic step is checked: a spec that would overflow u64 or fall
 * before the epoch is refused rather than wrapped, because a silently wrong
 * time range gives a plausible but wrong answer. Calendar conversion uses
 * the proleptic Gregorian days-from-civil algorithm, so no time zone
 * database or global state (timegm, TZ) is involved. Pure; any thread.
 */
#include "timespec.h"

#include "clock.h"
#include "duration.h"
#include "error.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define MS_PER_S   1000ull
#define MS_PER_MIN (60ull * MS_PER_S)
#define MS_PER_H   (60ull * MS_PER_MIN)
#define MS_PER_D   (24ull * MS_PER_H)
#define MS_PER_W   (7ull * MS_PER_D)

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant). */
static int64_t
days_from_civil(int64_t y, unsigned m, unsigned d)
{
    int64_t era;
    unsigned yoe, doy, doe;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = (unsigned)(y - era * 400);
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static void
civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    int64_t era;
    unsigned doe, yoe, doy, mp;

    z += 719468;
    era = (z >= 0 ? z : z - 146096) / 146097;
    doe = (unsigned)(z - era * 146097);
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

static int
is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static unsigned
month_days(int64_t y, unsigned m)
{
    static const unsigned days[12] = { 31, 28, 31, 30, 31, 30,
                                       31, 31, 30, 31, 30, 31 };

    return m == 2 && is_leap(y) ? 29 : days[m - 1];
}

/* Reads exactly n decimal digits at *p; advances *p. */
static int
digits(const char **p, int n, unsigned *out)
{
    unsigned v = 0;
    int i;

    for (i = 0; i < n; i++) {
        if (!isdigit((unsigned char)(*p)[i]))
            return -1;
        v = v * 10 + (unsigned)((*p)[i] - '0');
    }
    *p += n;
    *out = v;
    return 0;
}

int
timespec_parse_rfc3339(const char *s, uint64_t *out, char *err, size_t err_len)
{
    const char *p = s;
    unsigned year, mon, day, hour, min, sec, oh = 0, om = 0, ms = 0;
    int sign = 0, nfrac = 0;
    int64_t days, total_ms;

    if (digits(&p, 4, &year) != 0 || *p++ != '-' || digits(&p, 2, &mon) != 0 ||
        *p++ != '-' || digits(&p, 2, &day) != 0)
        return proto_errbuf(err, err_len,
                            "\"%s\" is not an RFC 3339 timestamp "
                            "(expected YYYY-MM-DDTHH:MM:SSZ)",
                            s);
    if (*p != 'T' && *p != 't' && *p != ' ')
        return proto_errbuf(
            err, err_len, "\"%s\": expected 'T' and a time after the date", s);
    p++;
    if (digits(&p, 2, &hour) != 0 || *p++ != ':' || digits(&p, 2, &min) != 0 ||
        *p++ != ':' || digits(&p, 2, &sec) != 0)
        return proto_errbuf(
            err, err_len,
            "\"%s\": expected the time as HH:MM:SS after the date", s);
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return proto_errbuf(
                err, err_len, "\"%s\": expected digits after the decimal point",
                s);
        /* Sub-millisecond digits are truncated: receive times are whole
         * milliseconds on the wire. */
        while (isdigit((unsigned char)*p)) {
            if (nfrac < 3)
                ms = ms * 10 + (unsigned)(*p - '0');
            nfrac++;
            p++;
        }
        while (nfrac < 3) {
            ms *= 10;
            nfrac++;
        }
    }
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        sign = *p == '-' ? -1 : 1;
        p++;
        if (digits(&p, 2, &oh) != 0 || *p++ != ':' || digits(&p, 2, &om) != 0)
            return proto_errbuf(
                err, err_len, "\"%s\": expected the offset as +HH:MM or -HH:MM",
                s);
    } else {
        return proto_errbuf(
            err, err_len,
            "\"%s\": expected 'Z' or an offset like +02:00 after the "
            "time",
            s);
    }
    if (*p != '\0')
        return proto_errbuf(err, err_len,
                            "\"%s\": unexpected characters after the timestamp",
                            s);
    if (mon < 1 || mon > 12)
        return proto_errbuf(err, err_len, "\"%s\": month %u is not 01-12", s,
                            mon);
    if (day < 1 || day > month_days(year, mon))
        return proto_errbuf(err, err_len,
                            "\"%s\": day %u does not exist in %04u-%02u", s,
                            day, year, mon);
    /* Second 60 is RFC 3339's leap second; it counts as the next second,
     * as POSIX time has no room for it. */
    if (hour > 23 || min > 59 || sec > 60)
        return proto_errbuf(err, err_len, "\"%s\": time of day out of range",
                            s);
    if (oh > 23 || om > 59)
        return proto_errbuf(err, err_len, "\"%s\": offset out of range", s);

    days = days_from_civil(year, mon, day);
    total_ms = days * (int64_t)MS_PER_D + (int64_t)hour * (int64_t)MS_PER_H +
               (int64_t)min * (int64_t)MS_PER_MIN +
               (int64_t)sec * (int64_t)MS_PER_S + (int64_t)ms;
    /* A positive offset means local time is ahead of UTC. */
    total_ms -= sign * ((int64_t)oh * (int64_t)MS_PER_H +
                        (int64_t)om * (int64_t)MS_PER_MIN);
    if (total_ms < 0)
        return proto_errbuf(err, err_len,
                            "\"%s\" is before 1970-01-01T00:00:00Z", s);
    *out = (uint64_t)total_ms;
    return 0;
}

/* Parses a run of decimal digits into a u64 with overflow checks. */
static int
number(const char **p, uint64_t *out)
{
    uint64_t v = 0;
    const char *q = *p;

    if (!isdigit((unsigned char)*q))
        return -1;
    while (isdigit((unsigned char)*q)) {
        unsigned dgt = (unsigned)(*q - '0');

        if (v > (UINT64_MAX - dgt) / 10)
            return -2;
        v = v * 10 + dgt;
        q++;
    }
    *p = q;
    *out = v;
    return 0;
}

/* A duration before now, in the grammar every duration shares
 * (proto/duration.h); a plain number here is unix milliseconds instead. */
static int
duration(const char *s, uint64_t *out, char *err, size_t err_len)
{
    if (!isdigit((unsigned char)*s))
        return proto_errbuf(
            err, err_len,
            "\"%s\" is not a time: expected a duration like 1h, "
            "30m, 7d or 2w, unix milliseconds, or an RFC 3339 "
            "timestamp",
            s);
    return duration_parse(s, 0, out, err, err_len);
}

int
timespec_parse(const char *s, uint64_t now_ms, uint64_t *out, char *err,
               size_t err_len)
{
    const char *p = s;
    uint64_t v;
    int rc;

    if (*s == '\0')
        return proto_errbuf(err, err_len,
                            "empty time; expected a duration like 1h, "
                            "unix milliseconds, or RFC 3339");
    if (strcmp(s, "now") == 0) {
        *out = now_ms;
        return 0;
    }
    /* Four digits and a dash can only be the start of a date. */
    if (strlen(s) > 4 && isdigit((unsigned char)s[0]) &&
        isdigit((unsigned char)s[1]) && isdigit((unsigned char)s[2]) &&
        isdigit((unsigned char)s[3]) && s[4] == '-')
        return timespec_parse_rfc3339(s, out, err, err_len);
    rc = number(&p, &v);
    if (rc == -2)
        return proto_errbuf(err, err_len, "\"%s\": number too large", s);
    if (rc == 0 && *p == '\0') {
        *out = v;
        return 0;
    }
    if (duration(s, &v, err, err_len) != 0)
        return -1;
    if (v > now_ms)
        return proto_errbuf(err, err_len, "\"%s\" ago is before 1970", s);
    *out = now_ms - v;
    return 0;
}

char *
timespec_format(uint64_t ms, char *buf, size_t len)
{
    int64_t days = (int64_t)(ms / MS_PER_D), y;
    uint64_t rem = ms % MS_PER_D;
    unsigned m, d;

    civil_from_days(days, &y, &m, &d);
    snprintf(
        buf, len, "%04lld-%02u-%02uT%02u:%02u:%02u.%03uZ", (long long)y, m, d,
        (unsigned)(rem / MS_PER_H), (unsigned)(rem % MS_PER_H / MS_PER_MIN),
        (unsigned)(rem % MS_PER_MIN / MS_PER_S), (unsigned)(rem % MS_PER_S));
    return buf;
}

uint64_t
timespec_now_ms(void)
{
    return unix_ms();
}
