/*
 * config.h: receiptd's settings, their defaults, and the configuration file
 * (libconfig syntax, /etc/receiptd/receiptd.conf when packaged).
 *
 * Precedence: built-in defaults, then the file, then command-line flags
 * (main.c applies those last). A struct config owns every string and array
 * it holds; config_free() releases them. Loaded on the main thread only;
 * a reload builds a new struct and swaps it in only when it is valid.
 */
#ifndef RECEIPTD_DAEMON_CONFIG_H
#define RECEIPTD_DAEMON_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define CONFIG_ERR_MAX 512

struct config_token {
    char *name;               /* who holds it, for logs */
    unsigned char sha256[32]; /* SHA-256 of the token's bytes */
};

struct config {
    /* Listeners. */
    char *socket_path;    /* Unix socket; NULL or "" = none */
    uint32_t socket_mode; /* default 0660 */
    char *socket_group;   /* group owning the socket; NULL = ours */
    char *tcp_listen;     /* "HOST:PORT"; NULL = TCP off (default) */

    /* Store. */
    char *db_path;
    uint64_t quarantine_max_bytes; /* default 256 MiB; oldest evicted */
    uint64_t retention_max_age_s;  /* 0 = keep receipts forever */
    uint32_t prune_batch;          /* rows per prune step, default 1000 */

    /* Limits. */
    uint32_t max_frame;         /* default 1 MiB, ceiling 64 MiB */
    uint32_t max_batch;         /* default 10,000 */
    uint32_t max_connections;   /* default 1,024 */
    uint32_t idle_timeout_ms;   /* default 300,000 */
    uint32_t frame_timeout_ms;  /* a started frame must finish; 10,000 */
    uint32_t hello_timeout_ms;  /* TCP auth deadline; 5,000 */
    uint64_t max_unsent_bytes;  /* per connection; default 4 MiB */
    uint64_t max_pending_bytes; /* all queued writes; default 64 MiB */
    uint32_t commit_max_items;  /* receipts per group commit; 20,000 */
    uint64_t commit_max_bytes;  /* default 16 MiB */
    uint32_t query_timeout_ms;  /* default 10,000 */
    uint32_t query_threads;     /* read-only connections; default 2 */

    /* Access control. Empty lists mean: the owner and root only for
     * writers and readers alike (Unix); TCP needs a token when any is set. */
    char **writer_groups;
    size_t n_writer_groups;
    char **reader_groups;
    size_t n_reader_groups;
    struct config_token *tokens;
    size_t n_tokens;

    int log_level; /* LOG_ERR..LOG_DEBUG of syslog.h */
};

/* Fills c with the built-in defaults (strings allocated; may fail only on
 * memory: returns 0 or -1). */
int config_init(struct config *c);

/* Frees every owned member and zeroes c. c may be NULL. */
void config_free(struct config *c);

/*
 * Reads the file at path over the values already in c. On failure returns
 * -1, leaves c as it was, and writes "file:line: reason" into err. Unknown
 * keys and out-of-range values are errors.
 */
int config_load_file(struct config *c, const char *path,
                     char err[CONFIG_ERR_MAX]);

/* Checks cross-field rules (a listener exists, limits within ceilings).
 * Returns 0, or -1 with a reason in err. */
int config_validate(const struct config *c, char err[CONFIG_ERR_MAX]);

#endif
