/*
 * duration.c: the duration grammar of duration.h, shared by the daemon's
 * configuration (file and flags) and receiptctl, so "1h30m" means the same
 * wherever it is written. Pure; any thread.
 */
#include "duration.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "error.h"

static const struct {
    const char *name;
    uint64_t ms;
} units[] = {
    { "ms", 1 },      { "s", 1000 },     { "m", 60000 },     { "min", 60000 },
    { "h", 3600000 }, { "d", 86400000 }, { "w", 604800000 },
};

#define N_UNITS (sizeof(units) / sizeof(units[0]))

/* Reads decimal digits at *p; 0, -1 when there are none, -2 on overflow. */
static int
number(const char **p, uint64_t *v)
{
    const char *q = *p;
    uint64_t n = 0;

    if (*q < '0' || *q > '9')
        return -1;
    for (; *q >= '0' && *q <= '9'; q++) {
        if (n > (UINT64_MAX - (uint64_t)(*q - '0')) / 10)
            return -2;
        n = n * 10 + (uint64_t)(*q - '0');
    }
    *p = q;
    *v = n;
    return 0;
}

int
duration_parse(const char *s, uint64_t plain_ms, uint64_t *ms, char *err,
               size_t err_len)
{
    const char *p = s, *u;
    uint64_t total = 0, n, mult;
    size_t len, i;
    int parts = 0, rc;

    while (*p == ' ')
        p++;
    if (*p == '\0')
        return proto_errbuf(err, err_len,
                            "\"%s\" is not a duration: it is empty", s);
    while (*p != '\0') {
        if ((rc = number(&p, &n)) == -2)
            return proto_errbuf(err, err_len, "\"%s\": duration too long", s);
        if (rc != 0)
            return proto_errbuf(
                err, err_len,
                "\"%s\" is not a duration: expected numbers with "
                "units (" DURATION_UNITS "), e.g. 500ms, 10s, 1h30m",
                s);
        while (*p == ' ')
            p++;
        if (*p == '\0' && parts == 0 && plain_ms != 0) {
            if (n > UINT64_MAX / plain_ms)
                return proto_errbuf(err, err_len, "\"%s\": duration too long",
                                    s);
            *ms = n * plain_ms;
            return 0;
        }
        u = p;
        while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))
            p++;
        len = (size_t)(p - u);
        for (i = 0; i < N_UNITS; i++)
            if (strlen(units[i].name) == len &&
                memcmp(units[i].name, u, len) == 0)
                break;
        if (i == N_UNITS)
            return proto_errbuf(
                err, err_len,
                "\"%s\": unknown or missing unit \"%.*s\" (expected "
                "ms, s, m, h, d or w)",
                s, (int)len, u);
        mult = units[i].ms;
        if (n > UINT64_MAX / mult || total > UINT64_MAX - n * mult)
            return proto_errbuf(err, err_len, "\"%s\": duration too long", s);
        total += n * mult;
        parts++;
        while (*p == ' ')
            p++;
    }
    *ms = total;
    return 0;
}

char *
duration_format(uint64_t ms, char *buf, size_t len)
{
    static const struct {
        const char *name;
        uint64_t ms;
    } big[] = {
        { "w", 604800000 }, { "d", 86400000 }, { "h", 3600000 },
        { "m", 60000 },     { "s", 1000 },
    };
    size_t i;

    for (i = 0; i < sizeof(big) / sizeof(big[0]); i++)
        if (ms != 0 && ms % big[i].ms == 0) {
            snprintf(buf, len, "%" PRIu64 "%s", ms / big[i].ms, big[i].name);
            return buf;
        }
    snprintf(buf, len, "%" PRIu64 "ms", ms);
    return buf;
}
