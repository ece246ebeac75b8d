/*
 * cli.h: what receiptctl's subcommands share: the parsed options, the exit
 * codes, one-line error messages, the connection with its hello, and
 * request/reply round trips. Every function that fails prints one line on
 * stderr and returns the exit code for it. Single-threaded.
 */
#ifndef RECEIPTD_CLIENT_CLI_H
#define RECEIPTD_CLIENT_CLI_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "envelope.h"
#include "net.h"

/* Exit codes; 0 is success. */
#define CLI_EXIT_DAEMON  1 /* the daemon answered with an error */
#define CLI_EXIT_USAGE   2 /* bad command line or unreadable input */
#define CLI_EXIT_CONNECT 3 /* cannot connect, or the connection failed */
#define CLI_EXIT_TRUNCATED                                                     \
    4 /* --fail-on-truncate: the answer was cut at --limit */

#define CLI_DEFAULT_SOCKET "/run/receiptd/receiptd.sock"

/* The command line, parsed. Strings borrow argv. */
struct cli_opts {
    const char *prog; /* the subcommand's name, for messages */
    const char *socket;
    const char *tcp;
    const char *token;      /* --token (visible to ps: prefer the next two) */
    const char *token_file; /* --token-file */
    int tls;                /* --tls: TLS over --tcp */
    const char *ca_file;    /* --ca: verify the daemon against it */
    const char *cert, *key; /* --cert, --key: for mutual TLS */
    int timeout_ms;
    int format;
    const char *plan, *graph, *model, *source, *requested, *executed;
    const char *origin; /* receipts at a center: relayed by this node */
    const char *status, *group_by, *value, *element_type;
    int has_since, has_until, has_limit, has_before, has_count;
    uint64_t since, until, limit, before_id, participant, count;
    int has_after; /* receipts: --after-id, oldest first above it */
    uint64_t after_id;
    int follow; /* receipts: --follow */
    uint32_t batch;
    int has_batch;        /* --batch was given */
    int dry_run;          /* import: check locally, send nothing */
    int fail_on_truncate; /* queries: exit CLI_EXIT_TRUNCATED when cut */
    const char *columns;  /* --columns, for tables and CSV */
    int only_missing;     /* gaps: only sources with missing seqs */
    int has_quiet_for;    /* gaps: only sources quiet for quiet_for ms */
    uint64_t quiet_for;
    int only_fallbacks; /* fallbacks: only groups with a fallback */
    int has_min_rate;   /* fallbacks: only groups at min_rate or above */
    double min_rate;
    char **args; /* positional arguments after the subcommand */
    int nargs;
};

/*
 * Prints "receiptctl: PROG: <message> (see 'receiptctl help PROG')" on
 * stderr; prog may be NULL for no subcommand.
 */
void cli_usage_err(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * Prints a daemon's error reply as "receiptctl: [WHAT: ]code[: path]:
 * message". what may be NULL; r is borrowed.
 */
void cli_daemon_err(const char *what, const struct envelope_reply *r);

/* The longest token the daemon accepts (access.h's ACCESS_TOKEN_MAX). */
#define CLI_TOKEN_MAX 1024

/*
 * Connects c to --tcp, --socket, $RECEIPTD_SOCKET or the packaged default,
 * in that order, and says hello when want_hello, a token or a source
 * (borrowed, may be NULL) asks for it. The token comes from --token, then
 * --token-file (its first line), then $RECEIPTD_TOKEN; a copy read from a
 * file is wiped once hello is answered. Returns 0 (close c with net_close)
 * or an exit code, printed, with c closed.
 */
int cli_open_conn(struct cli_opts *o, struct net_conn *c, const char *source,
                  int want_hello);

/* Reads a decimal u64 within [min, max]; -1 on anything else. */
int cli_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* Pack a string key and a string or u64 value. Return 0 or non-zero. */
int cli_pack_str(msgpack_packer *pk, const char *k, const char *v);
int cli_pack_u64(msgpack_packer *pk, const char *k, uint64_t v);

/*
 * Sends one request of op whose body pack_body packs (NULL: no body; arg
 * is passed to it) and waits for its reply. Returns 0 with rep holding an
 * ok reply, or an exit code (printed; what names the request in the
 * message). rep must be released with net_reply_free() in every case.
 */
int cli_request(struct net_conn *c, int op, const char *what,
                int (*pack_body)(msgpack_packer *, const void *),
                const void *arg, struct net_reply *rep);

/* The same; when name_errors, a daemon's error line starts with what
 * ("receiptctl: quarantine 7: invalid: ...") for commands that send
 * several requests. */
int cli_request_named(struct net_conn *c, int op, const char *what,
                      int name_errors,
                      int (*pack_body)(msgpack_packer *, const void *),
                      const void *arg, struct net_reply *rep);

/* cli_request_named() with name_errors for a write that resends
 * quarantine row replay_of (not 0): the envelope says so ("replay_of"),
 * so a daemon that refuses the payload again updates that row instead of
 * keeping another copy. */
int cli_request_replay(struct net_conn *c, int op, uint64_t replay_of,
                       const char *what,
                       int (*pack_body)(msgpack_packer *, const void *),
                       const void *arg, struct net_reply *rep);

/* Prints a query result in o->format to stdout. Returns 0 or an exit
 * code (printed). result is borrowed. */
int cli_print_result(const struct cli_opts *o, const char *kind,
                     const msgpack_object *result);

/* Reports that memory ran out and exits with CLI_EXIT_DAEMON. */
void cli_oom(void) __attribute__((noreturn));

/* Copies the string at key of map m into dst (cap bytes, truncated,
 * NUL-terminated); "" when absent or not a string. */
void cli_copy_str(char *dst, size_t cap, const msgpack_object *m,
                  const char *key);

#endif
