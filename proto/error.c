/*
 * error.c: the error-code table and field-path building of error.h.
 * Pure functions; safe on any thread.
 */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const names[] = {
    "ok",           "malformed",          "too_large",
    "unknown_op",   "unsupported_schema", "invalid",
    "unknown_plan", "not_retained",       "conflict",
    "mismatch",     "unauthorized",       "overloaded",
    "unavailable",
};

const char *
proto_code_name(int code)
{
    if (code == PROTO_ENOMEM)
        return "overloaded";
    if (code > 0 || -code >= (int)(sizeof(names) / sizeof(names[0])))
        return "internal";
    return names[-code];
}

int
proto_code_from_name(const char *name, size_t len)
{
    size_t i;

    for (i = 1; i < sizeof(names) / sizeof(names[0]); i++)
        if (strlen(names[i]) == len && memcmp(names[i], name, len) == 0)
            return -(int)i;
    return PROTO_OK;
}

void
proto_err_clear(struct proto_err *err)
{
    if (err == NULL)
        return;
    err->code = PROTO_OK;
    err->path[0] = '\0';
    err->message[0] = '\0';
}

/*
 * Cuts a UTF-8 sequence that truncation left incomplete at the end of s.
 * Paths and messages go back to the peer in msgpack strs, which must be
 * UTF-8, and they may quote keys that arrived; a cut inside a character
 * would make the reply itself invalid.
 */
static void
trim_utf8(char *s)
{
    size_t n = strlen(s), i = n, need;
    unsigned char lead;

    while (i > 0 && n - i < 3 && ((unsigned char)s[i - 1] & 0xc0) == 0x80)
        i--;
    if (i == 0)
        return;
    lead = (unsigned char)s[i - 1];
    if (lead < 0xc0)
        return;
    need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
    if (n - (i - 1) < need)
        s[i - 1] = '\0';
}

int
proto_err_set(struct proto_err *err, int code, const char *path,
              const char *fmt, ...)
{
    va_list ap;

    if (err == NULL)
        return code;
    err->code = code;
    if ((size_t)snprintf(err->path, sizeof(err->path), "%s",
                         path ? path : "") >= sizeof(err->path))
        trim_utf8(err->path);
    va_start(ap, fmt);
    if (vsnprintf(err->message, sizeof(err->message), fmt, ap) >=
        (int)sizeof(err->message))
        trim_utf8(err->message);
    va_end(ap);
    return code;
}

/* Appends src to dst[*at..cap-1), truncating, and keeps dst terminated. */
static void
append(char *dst, size_t cap, size_t *at, const char *src)
{
    size_t n = strlen(src);

    if (n > cap - 1 - *at)
        n = cap - 1 - *at;
    memcpy(dst + *at, src, n);
    *at += n;
    dst[*at] = '\0';
}

/* Prepends head and, when the old path needs one, sep. Truncates at the
 * end, never at the front, so the outermost names survive. (Built by hand
 * rather than with snprintf, whose truncation GCC rightly warns about.) */
static void
prepend(struct proto_err *err, const char *head)
{
    char old[PROTO_ERR_PATH_MAX];
    size_t at = 0;

    memcpy(old, err->path, sizeof(old));
    old[sizeof(old) - 1] = '\0';
    err->path[0] = '\0';
    append(err->path, sizeof(err->path), &at, head);
    if (old[0] != '\0' && old[0] != '[')
        append(err->path, sizeof(err->path), &at, ".");
    append(err->path, sizeof(err->path), &at, old);
    if (at == sizeof(err->path) - 1)
        trim_utf8(err->path);
}

void
proto_err_prefix_field(struct proto_err *err, const char *name)
{
    if (err == NULL)
        return;
    prepend(err, name);
}

void
proto_err_prefix_index(struct proto_err *err, size_t index)
{
    char head[32];

    if (err == NULL)
        return;
    snprintf(head, sizeof(head), "[%zu]", index);
    prepend(err, head);
}

int
proto_errbuf(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;

    if (err != NULL && err_len > 0) {
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return -1;
}
