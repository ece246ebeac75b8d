/*
 * duration.h: the one duration grammar of receiptd's flags, its
 * configuration file and receiptctl (--timeout, --since 1h30m).
 *
 * A duration is one or more "<digits><unit>" parts, optionally separated
 * by spaces ("1h30m", "1h 30m", "500ms"), units ms, s, m (or min), h, d, w;
 * a lone number without a unit is read in a unit its caller names (seconds
 * in the file and on most flags). Every step is checked against u64
 * overflow. Pure functions; any thread.
 */
#ifndef RECEIPTD_PROTO_DURATION_H
#define RECEIPTD_PROTO_DURATION_H

#include <stddef.h>
#include <stdint.h>

#define DURATION_ERR_MAX 160

/* The units, as --help and error messages list them. */
#define DURATION_UNITS "ms, s, m, h, d, w"

/*
 * Parses s (NUL-terminated, borrowed) into milliseconds. A lone number is
 * plain_ms milliseconds each (1000: seconds; 0: a unit is required). On
 * success returns 0 and sets *ms; on failure returns -1, leaves *ms alone
 * and writes one sentence naming s into err (err_len bytes; err may be
 * NULL).
 */
int duration_parse(const char *s, uint64_t plain_ms, uint64_t *ms, char *err,
                   size_t err_len);

/*
 * Writes ms in its largest exact unit ("5m", "90s", "1500ms"; 0 is "0ms")
 * into buf (len bytes, at least 24 for every value). Returns buf.
 */
char *duration_format(uint64_t ms, char *buf, size_t len);

#endif
