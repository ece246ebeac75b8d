/*
 * ratelog.c: rate-limited operator warnings (ratelog.h). One thread per
 * ratelog; the lines go through log.c.
 */
#include "ratelog.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

void
ratelog_init(struct ratelog *r, int level, uint32_t every_ms, const char *what)
{
    memset(r, 0, sizeof(*r));
    r->level = level;
    r->every_ms = every_ms;
    r->what = what;
}

static void
summary(struct ratelog *r, uint64_t now_ms)
{
    log_at(r->level, "%llu more %s in the last %llu s; the first: %s",
           (unsigned long long)r->held, r->what,
           (unsigned long long)((now_ms - r->last_ms + 999) / 1000), r->first);
    r->held = 0;
    r->first[0] = '\0';
}

int
ratelog_event(struct ratelog *r, uint64_t now_ms, const char *fmt, ...)
{
    char detail[RATELOG_DETAIL_MAX];
    int due = r->last_ms == 0 || now_ms - r->last_ms >= r->every_ms;
    va_list ap;

    if (!due && r->held > 0) {
        r->held++;
        return 0;
    }
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    if (!due) {
        r->held = 1;
        memcpy(r->first, detail, sizeof(r->first));
        return 0;
    }
    if (r->held > 0)
        summary(r, now_ms);
    log_at(r->level, "%s", detail);
    r->last_ms = now_ms > 0 ? now_ms : 1;
    return 1;
}

int
ratelog_flush(struct ratelog *r, uint64_t now_ms)
{
    if (r->held == 0 || now_ms - r->last_ms < r->every_ms)
        return 0;
    summary(r, now_ms);
    r->last_ms = now_ms > 0 ? now_ms : 1;
    return 1;
}

void
ratelog_finish(struct ratelog *r, uint64_t now_ms)
{
    if (r->held > 0)
        summary(r, now_ms);
    r->last_ms = 0;
}
