/*
 * error.h: the error codes of the wire protocol and the caller-owned error
 * struct that carries a code, the field path at fault and one sentence.
 *
 * Every function in proto/ (and the daemon's store) returns 0 on success or
 * one of the negative PROTO_E* codes below. Detail travels in a struct
 * proto_err the caller owns; it is filled where the failure happens and is
 * never allocated, so the error path cannot itself fail.
 *
 * Paths are built from the inside out: the function that finds the fault
 * sets the innermost name ("decode_steps"), and each caller on the way out
 * prepends its own part ("counters", then "[17]"), giving
 * "[17].counters.decode_steps".
 */
#ifndef RECEIPTD_PROTO_ERROR_H
#define RECEIPTD_PROTO_ERROR_H

#include <stddef.h>

/* The codes of PROTOCOL section 8, in that order. */
enum proto_code {
    PROTO_OK = 0,
    PROTO_EMALFORMED = -1,
    PROTO_ETOO_LARGE = -2,
    PROTO_EUNKNOWN_OP = -3,
    PROTO_EUNSUPPORTED_SCHEMA = -4,
    PROTO_EINVALID = -5,
    PROTO_EUNKNOWN_PLAN = -6,
    PROTO_ENOT_RETAINED = -7,
    PROTO_ECONFLICT = -8,
    PROTO_EMISMATCH = -9,
    PROTO_EUNAUTHORIZED = -10,
    PROTO_EOVERLOADED = -11,
    PROTO_EUNAVAILABLE = -12,
    /* Not on the wire: out of memory inside the daemon; replied to the
     * peer as "overloaded" (try again later). */
    PROTO_ENOMEM = -13,
};

#define PROTO_CODE_MIN     PROTO_ENOMEM
#define PROTO_ERR_PATH_MAX 256
#define PROTO_ERR_MSG_MAX  256

struct proto_err {
    int code;
    char path[PROTO_ERR_PATH_MAX];
    char message[PROTO_ERR_MSG_MAX];
};

/*
 * The wire name of a code ("invalid", "too_large"); "internal" for a code
 * outside the table. PROTO_ENOMEM is named "overloaded". Never NULL.
 */
const char *proto_code_name(int code);

/* The code for a wire name, or PROTO_OK when the name is unknown. */
int proto_code_from_name(const char *name, size_t len);

/* Resets err to no error, empty path and message. err may be NULL. */
void proto_err_clear(struct proto_err *err);

/*
 * Fills err with code, path (copied, may be NULL for none) and a printf-style
 * message, truncated to fit. Returns code, so a failing function can say
 * `return proto_err_set(err, PROTO_EINVALID, "stop_reason", "...")`.
 * err may be NULL, then only the code is returned.
 */
int proto_err_set(struct proto_err *err, int code, const char *path,
                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/*
 * Prepends a field name to err->path: "decode_steps" becomes
 * "counters.decode_steps", "[2].values" becomes "nodes[2].values", and an
 * empty path becomes the name itself. err may be NULL.
 */
void proto_err_prefix_field(struct proto_err *err, const char *name);

/* Prepends an index: "executed_backend" becomes "[17].executed_backend". */
void proto_err_prefix_index(struct proto_err *err, size_t index);

/* For parsers that report into a caller's buffer (durations, times,
 * output options): formats into err[0..err_len) when err is not NULL and
 * returns -1. */
int proto_errbuf(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
