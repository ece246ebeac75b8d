/*
 * ratelog.h: warnings an operator must see, at most one line per interval
 * each: the first event is logged at once; later ones within the interval
 * are counted, the first of them kept, and a summary ("57 more in the last
 * 10 s; the first: ...") is logged when the next event comes after the
 * interval or when ratelog_flush() finds the interval over. Loop thread
 * (or any one thread per ratelog).
 */
#ifndef RECEIPTD_DAEMON_RATELOG_H
#define RECEIPTD_DAEMON_RATELOG_H

#include <stdint.h>

#define RATELOG_DETAIL_MAX 400

struct ratelog {
    int level;         /* LOG_ERR, LOG_WARNING, ... */
    uint32_t every_ms; /* the interval */
    const char *what;  /* the events' name in a summary: "payloads put in
                          quarantine" */
    uint64_t last_ms;  /* when the last line was logged; 0: never */
    uint64_t held;     /* events since, not logged */
    char first[RATELOG_DETAIL_MAX]; /* the first of them */
};

/* Sets the fields above; the rest is zeroed. what is borrowed (a literal). */
void ratelog_init(struct ratelog *r, int level, uint32_t every_ms,
                  const char *what);

/*
 * One event, now_ms a monotonic clock (uv_now). Formats fmt into the
 * detail only when it will be logged or kept. Returns 1 when a line was
 * logged.
 */
int ratelog_event(struct ratelog *r, uint64_t now_ms, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Logs the summary of held events once the interval is over. Returns 1
 * when a line was logged. */
int ratelog_flush(struct ratelog *r, uint64_t now_ms);

/* The events are over (a failure ended): logs the summary of held ones
 * now, whatever the interval, and forgets the last line's time, so the
 * next event is logged at once. */
void ratelog_finish(struct ratelog *r, uint64_t now_ms);

#endif
