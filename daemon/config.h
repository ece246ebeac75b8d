/*
 * config.h: receiptd's settings, their defaults, and the configuration file
 * (libconfig syntax, /etc/receiptd/receiptd.conf when packaged; the keys are
 * documented in receiptd.conf(5)).
 *
 * Precedence: built-in defaults, then the file, then command-line flags
 * (main.c applies those last). A struct config owns every string and array
 * it holds; config_free() releases them. Loaded on the main thread only;
 * a reload builds a new struct and swaps it in only when it is valid.
 *
 * Naming: libconfig itself exports config_init(), config_write() and the
 * other config_* functions of <libconfig.h>, so this module must never
 * define a function of the same name (the linker would pick one for both).
 * Ours is config_defaults(); only config.c includes <libconfig.h>.
 */
#ifndef RECEIPTD_DAEMON_CONFIG_H
#define RECEIPTD_DAEMON_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CONFIG_ERR_MAX 512

/* Where the packaged daemon reads its configuration by default. */
#define CONFIG_DEFAULT_PATH "/etc/receiptd/receiptd.conf"

struct config_token {
    char *name;               /* who holds it, for logs */
    unsigned char sha256[32]; /* SHA-256 of the token's bytes */
};

#define CONFIG_KEYS_MAX  48  /* config_keys[] holds fewer (check_config) */
#define CONFIG_WHERE_MAX 300 /* "file:line"; a longer path is cut */

struct config {
    /* Listeners. */
    char *socket_path;    /* Unix socket; NULL or "" = none */
    uint32_t socket_mode; /* default 0660; never writable by others */
    char *socket_group;   /* group owning the socket; NULL = ours */
    char *tcp_listen;     /* "HOST:PORT"; NULL = TCP off (default) */
    char *http_listen;    /* /metrics and /healthz; NULL = off (default) */
    /* TLS on the TCP listener (tls.h): the certificate chain and key, PEM;
     * with tls_client_ca, client certificates are verified against it
     * (and required with tls_require_client_cert). A TCP listener without
     * a certificate needs tcp_plaintext set, and says so in the log. */
    char *tls_cert;
    char *tls_key;
    char *tls_client_ca;
    uint32_t tls_require_client_cert; /* 0 or 1 */
    uint32_t tcp_plaintext;           /* 0 or 1 */

    /* Store. */
    char *db_path;
    /* The backend (config_store_pg): "sqlite" or "postgresql"; NULL:
     * PostgreSQL when pg_conninfo is set, else SQLite at db_path. */
    char *store_backend;
    char *pg_conninfo; /* libpq conninfo of the PostgreSQL backend */
    uint64_t quarantine_max_bytes; /* default 256 MiB; oldest evicted */
    uint64_t retention_max_age_s;  /* 0 = keep receipts forever */
    uint32_t prune_batch;          /* rows per prune step, default 1000 */
    uint32_t chunk_receipts;       /* receipts per chunk, default 16384 */
    uint32_t rollup_chunks;        /* chunks merged together, default 4 */
    /* 1: SQLite syncs the WAL inside each COMMIT (synchronous=FULL); 0,
     * the default: the writer's syncer thread syncs it after each commit
     * group, before its replies (store_opts.sync_pipelined). */
    uint32_t sync_in_commit;

    /* Limits. */
    uint32_t max_frame;         /* default 1 MiB, ceiling 64 MiB */
    uint32_t max_batch;         /* default 10,000 */
    uint32_t max_connections;   /* default 1,024 */
    uint32_t idle_timeout_ms;   /* default 300,000; 0 = never */
    uint32_t frame_timeout_ms;  /* a started frame must finish; 10,000 */
    uint32_t hello_timeout_ms;  /* TCP auth deadline; 5,000 */
    uint64_t max_unsent_bytes;  /* per connection; default 4 MiB */
    uint64_t max_pending_bytes; /* all queued writes; default 64 MiB */
    uint32_t commit_max_items;  /* receipts per group commit; 20,000 */
    uint64_t commit_max_bytes;  /* default 16 MiB */
    uint32_t query_timeout_ms;  /* default 10,000 */
    uint32_t query_threads;     /* read-only connections; default 2 */
    uint32_t max_followers;     /* receipts queries that follow; 64 */

    /* Access control (access.h applies it). Unix socket: with both group
     * lists empty the socket file's mode and group decide alone (every
     * peer that can connect may write); once either list is set, root and
     * the daemon's own uid may do anything, writer groups write and query,
     * reader groups only query, everyone else is refused. TCP: every
     * connection needs one of the tokens, so a TCP listener needs at least
     * one token. */
    char **writer_groups;
    size_t n_writer_groups;
    char **reader_groups;
    size_t n_reader_groups;
    struct config_token *tokens;
    size_t n_tokens;

    /* The node's relay to a center (relay.c, docs/fleet.md): off while
     * no endpoint is set. */
    char **upstream; /* "HOST:PORT" each, tried in turn */
    size_t n_upstream;
    char *upstream_token_file; /* the center's TCP token, in a file */
    char *upstream_ca_file;    /* TLS: verify the center against it */
    char *upstream_name;       /* the node's name there; NULL = hostname */
    uint32_t upstream_window;  /* batches in flight, default 4 */
    /* The relay thread's scheduling: "idle" (NULL or "", the default:
     * SCHED_IDLE, lifted to nice 10 when starved), "low" (nice 10) or
     * "normal" (the daemon's own). */
    char *upstream_priority;
    /* Retention with an upstream: "wait" (NULL or "", the default) keeps
     * what was not delivered; "drop" prunes it and counts it in prunes. */
    char *relay_retention;

    /* Metrics (metrics.c). */
    uint32_t metrics_model_series; /* models as labels; 0 = none (default) */
    uint32_t health_stall_ms;      /* /healthz: longest writer stall */

    int log_level; /* LOG_ERR..LOG_DEBUG of syslog.h */

    /* Where each key's value came from, by its index in config_keys[]:
     * "file:line" for the file, "--flag" for a flag, "" for the default.
     * Errors about the value, cross-field ones included, start with it. */
    char where[CONFIG_KEYS_MAX][CONFIG_WHERE_MAX];
};

/*
 * The configuration keys. One table, config_keys[], is the single source of
 * every setting's file key, long option, parser, range and help text:
 * config_load_file() reads the file through it, config_set_flag() reads a
 * flag's argument through the same parser and range, and main.c builds
 * getopt_long's options and --help from it. So a flag and its file key
 * cannot accept different values.
 *
 * Units: the file writes a size as bytes or a string with a unit ("64MiB")
 * and a duration as seconds or a string with units ("250ms", "1h30m";
 * the grammar of proto/duration.h, which receiptctl shares). A flag takes
 * exactly the same ("--idle-timeout 5m", "--idle-timeout 300"). The older
 * flag names of durations ("--idle-timeout-ms") stay as aliases whose
 * plain number is in the unit they name: milliseconds for "-ms", seconds
 * for "-s".
 */
enum config_kind {
    CONFIG_KIND_STRING,   /* a name such as a group; "" means none */
    CONFIG_KIND_PATH,     /* a file path; "" means none */
    CONFIG_KIND_SOCKET,   /* an absolute Unix socket path fitting sun_path */
    CONFIG_KIND_TCP,      /* "HOST:PORT" or "[V6]:PORT"; "" means off */
    CONFIG_KIND_MODE,     /* an octal string, "0660" */
    CONFIG_KIND_COUNT,    /* a whole number */
    CONFIG_KIND_SIZE,     /* bytes */
    CONFIG_KIND_MSEC,     /* a duration kept in milliseconds */
    CONFIG_KIND_SEC,      /* a duration kept in whole seconds */
    CONFIG_KIND_GROUPS,   /* an array of group names (file only) */
    CONFIG_KIND_TOKENS,   /* a list of { name; sha256; } groups (file only) */
    CONFIG_KIND_LOGLEVEL, /* "err", "warning", "notice", "info", "debug" */
    CONFIG_KIND_BOOL,     /* true or false */
    CONFIG_KIND_ENDPOINTS /* an array of "HOST:PORT" (a name or a numeric
                             address); the flag is repeatable */
};

struct config_key {
    const char *section; /* NULL for a top-level key */
    const char *name;    /* the key inside its section: "chunk_receipts" */
    const char *flag;    /* the long option without "--"; NULL: file only */
    const char *alias;   /* an older name of the flag whose plain number is
                          * in the unit it says ("idle-timeout-ms"); NULL */
    const char *arg;     /* the flag's argument in --help: "SIZE", "MS" */
    enum config_kind kind;
    size_t off;         /* offset of the member in struct config */
    size_t width;       /* its size: 4 or 8 for numbers */
    uint64_t min, max;  /* a number's range, in the member's unit */
    int zero_ok;        /* 0 is also accepted (it means "off") */
    uint64_t plain_min; /* a number written without a unit must be 0 or at
                         * least this (0: no such rule); an alias names its
                         * unit, so it does not apply there */
    const char *help;   /* what the setting does, for --help */
};

/* Every key, in the order of the file's sections and of config_dump(). */
extern const struct config_key config_keys[];
extern const size_t config_n_keys;

/*
 * Sets the member of c that k names from text, a flag's argument, with the
 * parser and range of k's file key. k must have a flag. Returns 0, or -1
 * with c unchanged and "--flag: reason" in err (a string member may also
 * fail on memory). text is borrowed; a string value is copied.
 */
int config_set_flag(struct config *c, const struct config_key *k,
                    const char *text, char err[CONFIG_ERR_MAX]);

/*
 * The same for k's alias, the flag's older name: a number without a unit
 * is in the unit the alias names (milliseconds for "-ms"), as it always
 * was. "--alias: reason" in err.
 */
int config_set_alias(struct config *c, const struct config_key *k,
                     const char *text, char err[CONFIG_ERR_MAX]);

/*
 * For --help: writes k's file key, its value in c (the defaults, for
 * --help) and its range into buf, e.g. "limits.max_unsent = 4MiB; 4KiB to
 * 1GiB" or "listen.socket" when the value is none. buf is cut to len.
 */
void config_key_describe(const struct config_key *k, const struct config *c,
                         char *buf, size_t len);

/* Fills c with the built-in defaults (strings allocated; may fail only on
 * memory: returns 0 or -1). Any previous content of c is overwritten, not
 * freed. */
int config_defaults(struct config *c);

/*
 * The name this function had before libconfig was linked in. libconfig
 * exports a config_init() of its own, so the old name cannot be a function;
 * this macro keeps callers written against it compiling. New code calls
 * config_defaults().
 */
#define config_init(c) config_defaults(c)

/* Frees every owned member and zeroes c. c may be NULL. */
void config_free(struct config *c);

/*
 * Deep copy: dst gets its own copies of every string and array of src.
 * dst's previous content is overwritten, not freed. Returns 0, or -1 on
 * memory, with dst zeroed (nothing to free).
 */
int config_copy(struct config *dst, const struct config *src);

/*
 * Reads the file at path over the values already in c: every key present in
 * the file replaces the value in c (a list replaces the whole list), keys
 * absent keep theirs. On success returns 0. On failure returns -1, leaves c
 * exactly as it was, and writes "file:line: reason" into err (for a file
 * that cannot be opened, "file: reason"). Syntax errors, unknown keys,
 * wrong types and out-of-range values are all failures. path is borrowed.
 * "@include" directives are resolved relative to path's directory.
 */
int config_load_file(struct config *c, const char *path,
                     char err[CONFIG_ERR_MAX]);

/* Checks cross-field rules (a listener exists, limits within ceilings, a
 * TCP listener has tokens). Returns 0, or -1 with a reason in err, which
 * starts with where the value at fault was set ("file:line: section.key: "
 * or "--flag: "). */
/* Whether c stores in PostgreSQL (store.backend, or --pg alone). */
int config_store_pg(const struct config *c);

int config_validate(const struct config *c, char err[CONFIG_ERR_MAX]);

/* What config_preflight() checks of the listeners. */
enum config_preflight {
    CONFIG_PREFLIGHT_START,   /* free to take: no daemon on the socket, the
                               * TCP address can be bound */
    CONFIG_PREFLIGHT_RELOAD,  /* a daemon answers on the socket (the one a
                               * SIGHUP would reload); TCP not checked */
    CONFIG_PREFLIGHT_ADOPTED, /* sockets passed by systemd: not checked */
};

/*
 * What start would refuse beyond the values themselves, checked without
 * changing anything: the directories of the Unix socket and the database
 * exist and are writable (and the database file, when it exists), and the
 * listeners as mode says. Returns 0, or -1 with "where: section.key:
 * reason" in err.
 */
int config_preflight(const struct config *c, enum config_preflight mode,
                     char err[CONFIG_ERR_MAX]);

/*
 * For a reload: the settings that differ between the running configuration
 * old and the newly loaded next but take effect only after a restart
 * (listeners, socket mode and group, database path, query threads). Writes
 * their file names ("listen.socket, store.path") into what (empty when
 * none) and returns how many there are. The caller applies the rest and
 * logs what. old and next are borrowed.
 */
int config_restart_needed(const struct config *old, const struct config *next,
                          char what[CONFIG_ERR_MAX]);

/*
 * The SIGHUP path, up to the swap. Builds in next what the daemon would run
 * with if started now: the defaults, the file at path, then apply(next,
 * arg) (the caller's command-line flags, so they keep overriding the file;
 * apply may be NULL). Settings that take effect only after a restart keep
 * their running values in next, and their names go into restart (empty
 * when none changed) for the log. Then next is validated.
 *
 * Returns 0 with next ready to replace running (the caller frees the old
 * one). Returns -1 with "file:line: reason" or the validation failure in
 * err and next zeroed (nothing to free): the daemon logs err and keeps
 * running as it is. running, path and arg are borrowed.
 */
int config_reload(const struct config *running, const char *path,
                  void (*apply)(struct config *next, void *arg), void *arg,
                  struct config *next, char err[CONFIG_ERR_MAX],
                  char restart[CONFIG_ERR_MAX]);

/*
 * Writes every setting of c to out in the file's own syntax, sizes and
 * durations in their largest exact unit, so that loading the output over
 * the defaults gives back c. For `receiptd --check-config --verbose` and
 * the golden tests. Tokens are written as their hashes. Returns 0, or -1
 * when out reports a write error.
 */
int config_dump(const struct config *c, FILE *out);

/*
 * Parses a size ("64MiB", "1 GB", "4096", "512B") into bytes. Units: B,
 * KiB, MiB, GiB, TiB (powers of 1024) and kB, MB, GB, TB (powers of 1000);
 * no unit means bytes. Returns 0, or -1 on a malformed string or a value
 * over UINT64_MAX. s is borrowed.
 */
int config_parse_size(const char *s, uint64_t *bytes);

/*
 * Parses a duration ("10s", "5m", "7d", "1h30m", "250ms") into
 * milliseconds. Units: ms, s, m or min, h, d, w; several number-unit pairs
 * add up; a bare number means seconds. Returns 0, or -1 on a malformed
 * string or overflow. s is borrowed.
 */
int config_parse_duration_ms(const char *s, uint64_t *ms);

#endif
