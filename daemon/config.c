/*
 * config.c: built-in defaults, the configuration file and the cross-field
 * checks of config.h. Runs on the main thread only.
 *
 * The file is parsed by libconfig; this module only walks the parsed tree.
 * One table (config_keys[]) names every key the file may hold, its flag,
 * its type, where it lands in struct config, its range and its help, so the
 * parser, the flags, the unknown-key check, --help and config_dump() cannot
 * disagree: a file's string and a flag's argument go through one function,
 * set_text(). Every file error names the file and line libconfig recorded
 * for the offending setting.
 *
 * Invariant: config_load_file() works on a deep copy and swaps it in only
 * when the whole file was accepted, so a bad file (or a reload with a bad
 * file) never leaves a half-applied configuration behind.
 */
#include <libconfig.h>

#include "config.h"
#include "duration.h"

/* The compatibility macro of config.h would hide libconfig's own
 * config_init(), which this file calls. */
#undef config_init

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <syslog.h>

#include "frame.h"

int
config_defaults(struct config *c)
{
    memset(c, 0, sizeof(*c));
    c->socket_mode = 0660;
    c->quarantine_max_bytes = 256u << 20;
    c->prune_batch = 1000;
    c->chunk_receipts = 16384;
    c->rollup_chunks = 16;
    c->upstream_window = 4;
    c->max_frame = FRAME_MAX_DEFAULT;
    c->max_batch = 10000;
    c->max_connections = 1024;
    c->idle_timeout_ms = 300000;
    c->frame_timeout_ms = 10000;
    c->hello_timeout_ms = 5000;
    c->max_unsent_bytes = 4u << 20;
    c->max_pending_bytes = 64u << 20;
    c->commit_max_items = 20000;
    c->commit_max_bytes = 16u << 20;
    c->query_timeout_ms = 10000;
    c->query_threads = 2;
    c->max_followers = 64;
    c->health_stall_ms = 10000;
    c->log_level = LOG_INFO;
    return 0;
}

static void
free_list(char **list, size_t n)
{
    size_t i;

    if (list == NULL)
        return;
    for (i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

static void
free_tokens(struct config_token *t, size_t n)
{
    size_t i;

    if (t == NULL)
        return;
    for (i = 0; i < n; i++)
        free(t[i].name);
    free(t);
}

void
config_free(struct config *c)
{
    if (c == NULL)
        return;
    free(c->socket_path);
    free(c->socket_group);
    free(c->tcp_listen);
    free(c->http_listen);
    free(c->tls_cert);
    free(c->tls_key);
    free(c->tls_client_ca);
    free(c->db_path);
    free(c->store_backend);
    free(c->pg_conninfo);
    free_list(c->writer_groups, c->n_writer_groups);
    free_list(c->reader_groups, c->n_reader_groups);
    free_tokens(c->tokens, c->n_tokens);
    free_list(c->upstream, c->n_upstream);
    free(c->upstream_token_file);
    free(c->upstream_ca_file);
    free(c->upstream_name);
    free(c->upstream_priority);
    free(c->relay_retention);
    memset(c, 0, sizeof(*c));
}

/* strdup that keeps NULL as NULL; *ok is cleared on allocation failure. */
static char *
dup_or_null(const char *s, int *ok)
{
    char *d;

    if (s == NULL)
        return NULL;
    if ((d = strdup(s)) == NULL)
        *ok = 0;
    return d;
}

static char **
dup_list(char *const *list, size_t n, int *ok)
{
    char **d;
    size_t i;

    if (n == 0)
        return NULL;
    if ((d = calloc(n, sizeof(*d))) == NULL) {
        *ok = 0;
        return NULL;
    }
    for (i = 0; i < n; i++)
        d[i] = dup_or_null(list[i], ok);
    return d;
}

int
config_copy(struct config *dst, const struct config *src)
{
    int ok = 1;
    size_t i;

    *dst = *src;
    dst->socket_path = dup_or_null(src->socket_path, &ok);
    dst->socket_group = dup_or_null(src->socket_group, &ok);
    dst->tcp_listen = dup_or_null(src->tcp_listen, &ok);
    dst->http_listen = dup_or_null(src->http_listen, &ok);
    dst->tls_cert = dup_or_null(src->tls_cert, &ok);
    dst->tls_key = dup_or_null(src->tls_key, &ok);
    dst->tls_client_ca = dup_or_null(src->tls_client_ca, &ok);
    dst->db_path = dup_or_null(src->db_path, &ok);
    dst->store_backend = dup_or_null(src->store_backend, &ok);
    dst->pg_conninfo = dup_or_null(src->pg_conninfo, &ok);
    dst->writer_groups =
        dup_list(src->writer_groups, src->n_writer_groups, &ok);
    dst->reader_groups =
        dup_list(src->reader_groups, src->n_reader_groups, &ok);
    dst->upstream = dup_list(src->upstream, src->n_upstream, &ok);
    dst->upstream_token_file = dup_or_null(src->upstream_token_file, &ok);
    dst->upstream_ca_file = dup_or_null(src->upstream_ca_file, &ok);
    dst->upstream_name = dup_or_null(src->upstream_name, &ok);
    dst->upstream_priority = dup_or_null(src->upstream_priority, &ok);
    dst->relay_retention = dup_or_null(src->relay_retention, &ok);
    dst->tokens = NULL;
    if (src->n_tokens > 0) {
        dst->tokens = calloc(src->n_tokens, sizeof(*dst->tokens));
        if (dst->tokens == NULL)
            ok = 0;
        for (i = 0; dst->tokens != NULL && i < src->n_tokens; i++) {
            dst->tokens[i].name = dup_or_null(src->tokens[i].name, &ok);
            memcpy(dst->tokens[i].sha256, src->tokens[i].sha256,
                   sizeof(dst->tokens[i].sha256));
        }
    }
    if (!ok) {
        /* The counts are still src's, so config_free() walks exactly the
         * arrays that were allocated (NULL entries are fine for free). */
        if (dst->writer_groups == NULL)
            dst->n_writer_groups = 0;
        if (dst->reader_groups == NULL)
            dst->n_reader_groups = 0;
        if (dst->tokens == NULL)
            dst->n_tokens = 0;
        if (dst->upstream == NULL)
            dst->n_upstream = 0;
        config_free(dst);
        return -1;
    }
    return 0;
}

/* ---- Sizes and durations. ---- */

static const struct unit {
    const char *name;
    uint64_t mult;
} size_units[] = {
    { "", 1 },
    { "B", 1 },
    { "KiB", 1ull << 10 },
    { "MiB", 1ull << 20 },
    { "GiB", 1ull << 30 },
    { "TiB", 1ull << 40 },
    { "kB", 1000ull },
    { "KB", 1000ull },
    { "MB", 1000000ull },
    { "GB", 1000000000ull },
    { "TB", 1000000000000ull },
};

/* Reads decimal digits at *p into *v; 0, or -1 when there are none or the
 * value overflows. */
static int
read_number(const char **p, uint64_t *v)
{
    const char *s = *p;
    uint64_t n = 0;

    if (*s < '0' || *s > '9')
        return -1;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (n > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return -1;
        n = n * 10 + (uint64_t)(*s - '0');
    }
    *p = s;
    *v = n;
    return 0;
}

/* Finds the unit spelled by the letters at *p (advancing past them). */
static const struct unit *
read_unit(const char **p, const struct unit *units, size_t n_units)
{
    const char *s = *p;
    size_t len = 0, i;

    while ((s[len] >= 'a' && s[len] <= 'z') || (s[len] >= 'A' && s[len] <= 'Z'))
        len++;
    for (i = 0; i < n_units; i++) {
        if (strlen(units[i].name) == len &&
            strncmp(units[i].name, s, len) == 0) {
            *p = s + len;
            return &units[i];
        }
    }
    return NULL;
}

int
config_parse_size(const char *s, uint64_t *bytes)
{
    const struct unit *u;
    uint64_t n;

    while (*s == ' ')
        s++;
    if (read_number(&s, &n) < 0)
        return -1;
    while (*s == ' ')
        s++;
    u = read_unit(&s, size_units, sizeof(size_units) / sizeof(size_units[0]));
    if (u == NULL)
        return -1;
    while (*s == ' ')
        s++;
    if (*s != '\0')
        return -1;
    if (n > UINT64_MAX / u->mult)
        return -1;
    *bytes = n * u->mult;
    return 0;
}

int
config_parse_duration_ms(const char *s, uint64_t *ms)
{
    return duration_parse(s, 1000, ms, NULL, 0);
}

/* ---- The key table. ---- */

#define M(member)                                                              \
    .off = offsetof(struct config, member),                                    \
    .width = sizeof(((struct config *)0)->member)

#define KIB  (1ull << 10)
#define MIB  (1ull << 20)
#define GIB  (1ull << 30)
#define TIB  (1ull << 40)
#define SEC  1000ull
#define MIN  (60 * SEC)
#define HOUR (60 * MIN)
#define DAY  (24 * HOUR)

/*
 * Where a flag and its file key once disagreed, the range is the file's
 * unless the tests (or the store) show a smaller value is sound: 1 ms
 * query timeouts, 500 ms idle timeouts, 4 KiB reply budgets and chunks of
 * 8 receipts are what the end-to-end tests run with, and a prune batch is
 * capped at STORE_PRUNE_MAX_ROWS (10,000) by the writer anyway.
 */
const struct config_key config_keys[] = {
    { .section = "listen",
      .name = "socket",
      .flag = "socket",
      .arg = "PATH",
      .kind = CONFIG_KIND_SOCKET,
      M(socket_path),
      .help = "Unix socket to listen on (\"\" for none)" },
    { .section = "listen",
      .name = "socket_mode",
      .flag = "socket-mode",
      .arg = "MODE",
      .kind = CONFIG_KIND_MODE,
      M(socket_mode),
      .max = 0777,
      .help = "its permissions, octal; never open to other users" },
    { .section = "listen",
      .name = "socket_group",
      .flag = "socket-group",
      .arg = "GROUP",
      .kind = CONFIG_KIND_STRING,
      M(socket_group),
      .help = "group owning the socket (default: the daemon's)" },
    { .section = "listen",
      .name = "tcp",
      .flag = "tcp",
      .arg = "HOST:PORT",
      .kind = CONFIG_KIND_TCP,
      M(tcp_listen),
      .help = "also listen on TCP (numeric address; [::1]:7411 for IPv6); "
              "needs access.tokens, and tls_cert or tcp_plaintext" },
    { .section = "listen",
      .name = "tls_cert",
      .flag = "tls-cert",
      .arg = "FILE",
      .kind = CONFIG_KIND_PATH,
      M(tls_cert),
      .help = "the TCP listener's certificate chain (PEM); reloaded on "
              "SIGHUP" },
    { .section = "listen",
      .name = "tls_key",
      .flag = "tls-key",
      .arg = "FILE",
      .kind = CONFIG_KIND_PATH,
      M(tls_key),
      .help = "its private key (PEM); reloaded on SIGHUP" },
    { .section = "listen",
      .name = "tls_client_ca",
      .flag = "tls-client-ca",
      .arg = "FILE",
      .kind = CONFIG_KIND_PATH,
      M(tls_client_ca),
      .help = "verify TCP clients' certificates against these CAs (PEM)" },
    { .section = "listen",
      .name = "tls_require_client_cert",
      .flag = "tls-require-client-cert",
      .arg = "BOOL",
      .kind = CONFIG_KIND_BOOL,
      M(tls_require_client_cert),
      .help = "refuse TLS clients without a certificate that verifies "
              "against tls_client_ca (true or false)" },
    { .section = "listen",
      .name = "tcp_plaintext",
      .flag = "tcp-plaintext",
      .arg = "BOOL",
      .kind = CONFIG_KIND_BOOL,
      M(tcp_plaintext),
      .help = "let the TCP listener speak plain text, without TLS (true or "
              "false; logged as a warning)" },
    { .section = "listen",
      .name = "http",
      .flag = "http",
      .arg = "HOST:PORT",
      .kind = CONFIG_KIND_TCP,
      M(http_listen),
      .help = "serve /metrics and /healthz over HTTP on this numeric "
              "address (no authentication: keep it local); \"\" for off" },

    { .section = "store",
      .name = "path",
      .flag = "db",
      .arg = "PATH",
      .kind = CONFIG_KIND_PATH,
      M(db_path),
      .help = "SQLite database (created if missing)" },
    { .section = "store",
      .name = "backend",
      .flag = "store-backend",
      .arg = "NAME",
      .kind = CONFIG_KIND_STRING,
      M(store_backend),
      .help = "\"sqlite\" (the default: store.path) or \"postgresql\" "
              "(store.conninfo; the central tier)" },
    { .section = "store",
      .name = "conninfo",
      .flag = "pg",
      .arg = "CONNINFO",
      .kind = CONFIG_KIND_PATH,
      M(pg_conninfo),
      .help = "store in PostgreSQL through this libpq conninfo instead of "
              "SQLite (keep a password in a passfile, not here)" },
    { .section = "store",
      .name = "quarantine_max",
      .flag = "quarantine-max-bytes",
      .arg = "SIZE",
      .kind = CONFIG_KIND_SIZE,
      M(quarantine_max_bytes),
      .min = MIB,
      .max = TIB,
      .help = "raw bytes of rejected payloads kept, oldest evicted" },
    /* 0 keeps receipts forever. A number without a unit under an hour is
     * refused in the file, so a slip ("7" meant as days, read as seconds)
     * cannot wipe the store; "7s" says seconds are meant, as the flag's
     * name does. */
    { .section = "store",
      .name = "retention",
      .flag = "retention",
      .alias = "retention-age-s",
      .arg = "DURATION",
      .kind = CONFIG_KIND_SEC,
      M(retention_max_age_s),
      .min = 1,
      .max = 100 * 366 * DAY / SEC,
      .zero_ok = 1,
      .plain_min = HOUR / SEC,
      .help = "prune receipts older than this" },
    { .section = "store",
      .name = "relay_retention",
      .flag = "relay-retention",
      .arg = "MODE",
      .kind = CONFIG_KIND_STRING,
      M(relay_retention),
      .help = "with an upstream: \"wait\" (the default) prunes only what "
              "the center acknowledged; \"drop\" prunes anyway and counts "
              "what was not delivered in prunes.undelivered" },
    { .section = "store",
      .name = "prune_batch",
      .flag = "prune-batch",
      .arg = "N",
      .kind = CONFIG_KIND_COUNT,
      M(prune_batch),
      .min = 1,
      .max = 10000,
      .help = "receipts per prune batch" },
    { .section = "store",
      .name = "chunk_receipts",
      .flag = "chunk-receipts",
      .arg = "N",
      .kind = CONFIG_KIND_COUNT,
      M(chunk_receipts),
      .min = 1,
      .max = 1000000,
      .help = "receipts the writer gathers before it writes their postings "
              "and rollups; read at start only" },
    { .section = "store",
      .name = "rollup_chunks",
      .flag = "rollup-chunks",
      .arg = "N",
      .kind = CONFIG_KIND_COUNT,
      M(rollup_chunks),
      .min = 1,
      .max = 64,
      .help = "chunks whose rollup sums are merged together; read at start "
              "only" },
    { .section = "store",
      .name = "sync_in_commit",
      .flag = "sync-in-commit",
      .arg = "BOOL",
      .kind = CONFIG_KIND_BOOL,
      M(sync_in_commit),
      .help = "sync the WAL inside each COMMIT (SQLite synchronous=FULL) "
              "instead of on a thread of its own while the next group is "
              "applied; replies wait for the sync either way (true or "
              "false; read at start only)" },

    { .section = "limits",
      .name = "max_frame",
      .flag = "max-frame",
      .arg = "SIZE",
      .kind = CONFIG_KIND_SIZE,
      M(max_frame),
      .min = 64,
      .max = FRAME_MAX_CEILING,
      .help = "largest frame" },
    { .section = "limits",
      .name = "max_batch",
      .flag = "max-batch",
      .arg = "N",
      .kind = CONFIG_KIND_COUNT,
      M(max_batch),
      .min = 1,
      .max = 1000000,
      .help = "receipts per `receipts` op" },
    { .section = "limits",
      .name = "max_connections",
      .flag = "max-connections",
      .arg = "N",
      .kind = CONFIG_KIND_COUNT,
      M(max_connections),
      .min = 1,
      .max = 1000000,
      .help = "open connections" },
    { .section = "limits",
      .name = "idle_timeout",
      .flag = "idle-timeout",
      .alias = "idle-timeout-ms",
      .arg = "DURATION",
      .kind = CONFIG_KIND_MSEC,
      M(idle_timeout_ms),
      .min = 100,
      .max = 7 * DAY,
      .zero_ok = 1,
      .help = "close a connection that sent nothing, or took none of its "
              "replies, for this long" },
    { .section = "limits",
      .name = "frame_timeout",
      .flag = "frame-timeout",
      .alias = "frame-timeout-ms",
      .arg = "DURATION",
      .kind = CONFIG_KIND_MSEC,
      M(frame_timeout_ms),
      .min = 100,
      .max = HOUR,
      .help = "a started frame must complete within this" },
    { .section = "limits",
      .name = "hello_timeout",
      .flag = "hello-timeout",
      .alias = "hello-timeout-ms",
      .arg = "DURATION",
      .kind = CONFIG_KIND_MSEC,
      M(hello_timeout_ms),
      .min = 100,
      .max = 5 * MIN,
      .help = "a TCP connection must authenticate within this" },
    { .section = "limits",
      .name = "max_unsent",
      .flag = "max-unsent-bytes",
      .arg = "SIZE",
      .kind = CONFIG_KIND_SIZE,
      M(max_unsent_bytes),
      .min = 4 * KIB,
      .max = GIB,
      .help = "unread replies per connection before it stops being read" },
    { .section = "limits",
      .name = "max_pending",
      .flag = "max-pending-bytes",
      .arg = "SIZE",
      .kind = CONFIG_KIND_SIZE,
      M(max_pending_bytes),
      .min = 4 * KIB,
      .max = 64 * GIB,
      .help = "queued writes before every connection stops being read" },
    { .section = "limits",
      .name = "commit_max_items",
      .flag = "commit-max-items",
      .arg = "N",
      .kind = CONFIG_KIND_COUNT,
      M(commit_max_items),
      .min = 1,
      .max = 1000000,
      .help = "receipts per group commit" },
    { .section = "limits",
      .name = "commit_max_bytes",
      .flag = "commit-max-bytes",
      .arg = "SIZE",
      .kind = CONFIG_KIND_SIZE,
      M(commit_max_bytes),
      .min = 64 * KIB,
      .max = GIB,
      .help = "bytes per group commit" },
    { .section = "limits",
      .name = "query_timeout",
      .flag = "query-timeout",
      .alias = "query-timeout-ms",
      .arg = "DURATION",
      .kind = CONFIG_KIND_MSEC,
      M(query_timeout_ms),
      .min = 1,
      .max = HOUR,
      .help = "longest query" },
    { .section = "limits",
      .name = "query_threads",
      .flag = "query-threads",
      .arg = "N",
      .kind = CONFIG_KIND_COUNT,
      M(query_threads),
      .min = 1,
      .max = 64,
      .help = "read-only store connections; read at start only" },
    { .section = "limits",
      .name = "max_followers",
      .flag = "max-followers",
      .arg = "N",
      .kind = CONFIG_KIND_COUNT,
      M(max_followers),
      .min = 1,
      .max = 100000,
      .help = "`receipts` queries that follow new receipts at once" },

    { .section = "access",
      .name = "writer_groups",
      .kind = CONFIG_KIND_GROUPS,
      M(writer_groups) },
    { .section = "access",
      .name = "reader_groups",
      .kind = CONFIG_KIND_GROUPS,
      M(reader_groups) },
    { .section = "access",
      .name = "tokens",
      .kind = CONFIG_KIND_TOKENS,
      M(tokens) },

    { .section = "upstream",
      .name = "endpoints",
      .flag = "upstream",
      .arg = "HOST:PORT",
      .kind = CONFIG_KIND_ENDPOINTS,
      M(upstream),
      .help = "relay everything committed to this center (repeat the flag "
              "for others to fail over to); needs upstream.token_file" },
    { .section = "upstream",
      .name = "token_file",
      .flag = "upstream-token-file",
      .arg = "FILE",
      .kind = CONFIG_KIND_PATH,
      M(upstream_token_file),
      .help = "a file holding the center's TCP token" },
    { .section = "upstream",
      .name = "ca_file",
      .flag = "upstream-ca-file",
      .arg = "FILE",
      .kind = CONFIG_KIND_PATH,
      M(upstream_ca_file),
      .help = "speak TLS to the center and verify it against these CAs "
              "(PEM) and its name; unset: plain text" },
    { .section = "upstream",
      .name = "name",
      .flag = "upstream-name",
      .arg = "NAME",
      .kind = CONFIG_KIND_STRING,
      M(upstream_name),
      .help = "this node's name at the center (default: the host name)" },
    { .section = "upstream",
      .name = "window",
      .flag = "upstream-window",
      .arg = "N",
      .kind = CONFIG_KIND_COUNT,
      M(upstream_window),
      .min = 1,
      .max = 64,
      .help = "batches sent to the center before the first is "
              "acknowledged" },
    { .section = "upstream",
      .name = "priority",
      .flag = "upstream-priority",
      .arg = "MODE",
      .kind = CONFIG_KIND_STRING,
      M(upstream_priority),
      .help = "the relay thread's CPU priority: \"idle\" (the default, "
              "SCHED_IDLE, lifted to nice 10 after 5 s without a core) "
              "gives way to any other thread, \"low\" is nice 10, "
              "\"normal\" the daemon's own" },

    { .section = "metrics",
      .name = "model_series",
      .flag = "metrics-model-series",
      .arg = "N",
      .kind = CONFIG_KIND_COUNT,
      M(metrics_model_series),
      .min = 1,
      .max = 1000,
      .zero_ok = 1,
      .help = "label the stored-receipt metrics by model for the N models "
              "with most receipts (0: no model label)" },
    { .section = "metrics",
      .name = "health_stall",
      .flag = "health-stall",
      .arg = "DURATION",
      .kind = CONFIG_KIND_MSEC,
      M(health_stall_ms),
      .min = 1000,
      .max = 3600000,
      .help = "/healthz fails once writes have waited this long for the "
              "writer to finish a group" },
    { .name = "log_level",
      .flag = "log-level",
      .arg = "LEVEL",
      .kind = CONFIG_KIND_LOGLEVEL,
      M(log_level),
      .help = "err (or error), warning (or warn), notice, info or debug" },
};

const size_t config_n_keys = sizeof(config_keys) / sizeof(config_keys[0]);

#define N_KEYS (sizeof(config_keys) / sizeof(config_keys[0]))

_Static_assert(N_KEYS <= CONFIG_KEYS_MAX,
               "struct config's where[] must have a row per key");

static const struct {
    const char *name;
    int level;
} log_levels[] = {
    { "err", LOG_ERR },         { "error", LOG_ERR },
    { "warning", LOG_WARNING }, { "warn", LOG_WARNING },
    { "notice", LOG_NOTICE },   { "info", LOG_INFO },
    { "debug", LOG_DEBUG },
};

/* Limits for strings the file may hold: group and token names are short
 * identifiers, paths are bounded by PATH_MAX on Linux. */
#define NAME_MAX_LEN 256
#define PATH_MAX_LEN 4096
#define GROUPS_MAX   64
#define TOKENS_MAX   4096

/* ---- Walking the parsed file. ---- */

struct load {
    const char *path; /* the top-level file, for settings without a file */
    const char *dir;  /* its directory, where @include names are resolved */
    char *err;        /* CONFIG_ERR_MAX bytes */
};

/* Writes "file:line: section.key: reason" for setting s. Returns -1. */
static int fail(struct load *ld, const config_setting_t *s, const char *section,
                const char *name, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int
fail(struct load *ld, const config_setting_t *s, const char *section,
     const char *name, const char *fmt, ...)
{
    const char *file = ld->path;
    va_list ap;
    size_t used;
    int line = 0;

    if (s != NULL) {
        if (config_setting_source_file(s) != NULL)
            file = config_setting_source_file(s);
        line = config_setting_source_line(s);
    }
    if (name == NULL)
        snprintf(ld->err, CONFIG_ERR_MAX, "%s:%d: ", file, line);
    else if (section == NULL)
        snprintf(ld->err, CONFIG_ERR_MAX, "%s:%d: %s: ", file, line, name);
    else
        snprintf(ld->err, CONFIG_ERR_MAX, "%s:%d: %s.%s: ", file, line, section,
                 name);
    /* The reason goes after the prefix, cut if the whole is too long. */
    used = strlen(ld->err);
    va_start(ap, fmt);
    vsnprintf(ld->err + used, CONFIG_ERR_MAX - used, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *
type_name(const config_setting_t *s)
{
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_GROUP:
        return "a group";
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        return "an integer";
    case CONFIG_TYPE_FLOAT:
        return "a float";
    case CONFIG_TYPE_STRING:
        return "a string";
    case CONFIG_TYPE_BOOL:
        return "a boolean";
    case CONFIG_TYPE_ARRAY:
        return "an array";
    case CONFIG_TYPE_LIST:
        return "a list";
    default:
        return "an unknown type";
    }
}

static int
is_int(const config_setting_t *s)
{
    return config_setting_type(s) == CONFIG_TYPE_INT ||
           config_setting_type(s) == CONFIG_TYPE_INT64;
}

static void
set_number(struct config *c, const struct config_key *k, uint64_t v)
{
    char *p = (char *)c + k->off;

    if (k->width == sizeof(uint32_t)) {
        uint32_t v32 = (uint32_t)v;
        memcpy(p, &v32, sizeof(v32));
    } else {
        memcpy(p, &v, sizeof(v));
    }
}

static uint64_t
get_number(const struct config *c, const struct config_key *k)
{
    const char *p = (const char *)c + k->off;

    if (k->width == sizeof(uint32_t)) {
        uint32_t v32;
        memcpy(&v32, p, sizeof(v32));
        return v32;
    }
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* Formats a number of the key's kind in its largest exact unit. */
static void
format_value(const struct config_key *k, uint64_t v, char *buf, size_t len)
{
    static const struct unit bin[] = {
        { "TiB", 1ull << 40 },
        { "GiB", 1ull << 30 },
        { "MiB", 1ull << 20 },
        { "KiB", 1ull << 10 },
    };
    const struct unit *u = NULL;
    size_t i, n = 0;

    if (k->kind == CONFIG_KIND_MSEC || k->kind == CONFIG_KIND_SEC) {
        /* Seconds fit milliseconds for every value the table allows. */
        duration_format(k->kind == CONFIG_KIND_SEC ? v * 1000 : v, buf, len);
        return;
    }
    if (k->kind == CONFIG_KIND_SIZE) {
        u = bin;
        n = sizeof(bin) / sizeof(bin[0]);
    }
    for (i = 0; i < n; i++) {
        if (v != 0 && v % u[i].mult == 0) {
            snprintf(buf, len, "%" PRIu64 "%s", v / u[i].mult, u[i].name);
            return;
        }
    }
    if (k->kind == CONFIG_KIND_SIZE)
        snprintf(buf, len, "%" PRIu64 "B", v);
    else
        snprintf(buf, len, "%" PRIu64, v);
}

/*
 * libconfig 1.5 (Debian 12) reads an integer literal without an L suffix
 * into 32 bits and silently drops the high bits: 5000000000 becomes
 * 705032704, which may well be in range. The parsed tree keeps no text, so
 * the literal is read again from the setting's source line. Returns 1 and
 * copies the literal into text when it does not fit 32 bits, 0 when it
 * fits or cannot be found (the parsed value then stands).
 */
static int
wider_than_int(struct load *ld, const config_setting_t *s, char *text,
               size_t len)
{
    const char *file = config_setting_source_file(s);
    const char *name = config_setting_name(s);
    char full[PATH_MAX_LEN + 2 * NAME_MAX_LEN];
    char *line = NULL, *p;
    size_t cap = 0, nlen;
    unsigned long long v;
    int at = 0, want = config_setting_source_line(s), wide = 0;
    FILE *f;

    if (config_setting_type(s) != CONFIG_TYPE_INT || name == NULL)
        return 0;
    if (file == NULL || strcmp(file, ld->path) == 0 || file[0] == '/')
        snprintf(full, sizeof(full), "%s", file != NULL ? file : ld->path);
    else
        snprintf(full, sizeof(full), "%s/%s", ld->dir, file);
    if ((f = fopen(full, "r")) == NULL)
        return 0;
    while (at < want && getline(&line, &cap, f) >= 0)
        at++;
    fclose(f);
    nlen = strlen(name);
    for (p = line; at == want && p != NULL && (p = strstr(p, name)) != NULL;
         p += nlen) {
        const char *q = p + nlen, *digits;
        char *end;

        /* The name as a whole word, then "=" or ":", then the literal. */
        if (p > line && (isalnum((unsigned char)p[-1]) || p[-1] == '_' ||
                         p[-1] == '-' || p[-1] == '*'))
            continue;
        while (*q == ' ' || *q == '\t')
            q++;
        if (*q != '=' && *q != ':')
            continue;
        q++;
        while (*q == ' ' || *q == '\t')
            q++;
        digits = *q == '-' || *q == '+' ? q + 1 : q;
        if (*digits < '0' || *digits > '9')
            break;
        errno = 0;
        if (digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X'))
            v = strtoull(digits + 2, &end, 16);
        else
            v = strtoull(digits, &end, 10);
        wide =
            errno == ERANGE || v > (*q == '-' ? 2147483648ull : 2147483647ull);
        if (wide)
            snprintf(text, len, "%.*s", (int)(end - q), q);
        break;
    }
    free(line);
    return wide;
}

/* ---- One parser and range per key, for the file and the flags. ---- */

/* Where a value comes from: in the file and on a flag a number written
 * without a unit is bytes or seconds; the old name of a duration flag
 * (its alias, "idle-timeout-ms") gives the unit of such a number. */
enum source { FROM_FILE, FROM_ALIAS };

/* Checks v, in the member's unit, against k's range. */
static int
check_range(const struct config_key *k, uint64_t v, char *why, size_t len)
{
    char lo[32], hi[32];

    if ((v >= k->min && v <= k->max) || (v == 0 && k->zero_ok))
        return 0;
    format_value(k, k->min, lo, sizeof(lo));
    format_value(k, k->max, hi, sizeof(hi));
    snprintf(why, len, "out of range: must be %s%s to %s",
             k->zero_ok ? "0 (off) or " : "", lo, hi);
    return -1;
}

/* k's rule for a number the file writes without a unit (plain_min). */
static int
check_plain(const struct config_key *k, uint64_t v, char *why, size_t len)
{
    char lo[32];

    if (k->plain_min == 0 || v == 0 || v >= k->plain_min)
        return 0;
    format_value(k, k->plain_min, lo, sizeof(lo));
    snprintf(why, len,
             "%" PRIu64 " without a unit is seconds: must be 0 (off) or at "
             "least %s; write \"%" PRIu64 "s\" if that is meant",
             v, lo, v);
    return -1;
}

static int
has_unit(const char *text)
{
    for (; *text != '\0'; text++)
        if (isalpha((unsigned char)*text))
            return 1;
    return 0;
}

/* Reads text as a count, size or duration of k, in the member's unit. */
static int
parse_number(const struct config_key *k, const char *text, enum source from,
             uint64_t *v, char *why, size_t len)
{
    static const struct unit none[] = { { "", 1 } };
    const char *p = text;
    uint64_t ms;

    switch (k->kind) {
    case CONFIG_KIND_COUNT:
        while (*p == ' ')
            p++;
        if (read_number(&p, v) == 0 && read_unit(&p, none, 1) != NULL) {
            while (*p == ' ')
                p++;
            if (*p == '\0')
                return 0;
        }
        snprintf(why, len, "\"%s\" is not a whole number", text);
        return -1;
    case CONFIG_KIND_SIZE:
        if (config_parse_size(text, v) == 0)
            return 0;
        snprintf(why, len,
                 "\"%s\" is not a size: write bytes as an integer or a "
                 "number with a unit (B, KiB, MiB, GiB, TiB, kB, MB, GB, TB), "
                 "e.g. \"64MiB\"",
                 text);
        return -1;
    case CONFIG_KIND_MSEC:
    case CONFIG_KIND_SEC:
        if (duration_parse(
                text,
                from == FROM_ALIAS && k->kind == CONFIG_KIND_MSEC ? 1 : 1000,
                &ms, NULL, 0) < 0) {
            snprintf(why, len,
                     "\"%s\" is not a duration: write %s as an integer or "
                     "numbers with units (ms, s, m, h, d, w), e.g. \"10s\", "
                     "\"7d\", \"1h30m\"",
                     text,
                     from == FROM_ALIAS && k->kind == CONFIG_KIND_MSEC
                         ? "milliseconds"
                         : "seconds");
            return -1;
        }
        if (k->kind == CONFIG_KIND_MSEC) {
            *v = ms;
            return 0;
        }
        if (ms % 1000 != 0) {
            snprintf(why, len, "must be a whole number of seconds");
            return -1;
        }
        *v = ms / 1000;
        return 0;
    default:
        break;
    }
    snprintf(why, len, "not a number");
    return -1;
}

static int
check_tcp(const char *a)
{
    const char *colon, *port;
    char *end, host[INET6_ADDRSTRLEN + 1];
    struct in6_addr in6;
    struct in_addr in4;
    unsigned long p;

    if (a[0] == '[') {
        const char *close = strchr(a, ']');

        if (close == NULL || close == a + 1 || close[1] != ':')
            return -1;
        colon = close + 1;
    } else {
        colon = strrchr(a, ':');
        if (colon == NULL || colon == a || memchr(a, ':', (size_t)(colon - a)))
            return -1;
    }
    port = colon + 1;
    if (*port < '0' || *port > '9')
        return -1;
    errno = 0;
    p = strtoul(port, &end, 10);
    if (errno != 0 || *end != '\0' || p < 1 || p > 65535)
        return -1;
    /* Host names are not resolved (README, design choices): the host is a
     * numeric address, or start would refuse it after opening the store. */
    if (a[0] == '[') {
        if ((size_t)(colon - a) - 2 >= sizeof(host))
            return -2;
        memcpy(host, a + 1, (size_t)(colon - a) - 2);
        host[colon - a - 2] = '\0';
        return inet_pton(AF_INET6, host, &in6) == 1 ? 0 : -2;
    }
    if ((size_t)(colon - a) >= sizeof(host))
        return -2;
    memcpy(host, a, (size_t)(colon - a));
    host[colon - a] = '\0';
    return inet_pton(AF_INET, host, &in4) == 1 ? 0 : -2;
}

/* An upstream endpoint: HOST:PORT where HOST is a numeric address (IPv6
 * in brackets) or a name (letters, digits, '-' and '.'), resolved when
 * the relay connects. */
static int
check_endpoint(const char *a)
{
    const char *colon = strrchr(a, ':'), *p;
    int rc = check_tcp(a);

    if (rc != -2 || a[0] == '[')
        return rc == 0 ? 0 : -1;
    if (colon == NULL || colon == a || colon - a > 253)
        return -1;
    for (p = a; p < colon; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '.')
            return -1;
    return 0;
}

#define UPSTREAM_MAX 16

static int check_string(const struct config_key *k, const char *v, char *why,
                        size_t len);

/*
 * A flag's endpoint: the first --upstream replaces the file's list, each
 * further one adds to it, "" empties it.
 */
static int
add_endpoint(struct config *c, const struct config_key *k, const char *text,
             char *why, size_t len)
{
    int from_flag = c->where[k - config_keys][0] == '-';
    char **list, *copy;

    if (check_string(k, text, why, len) < 0)
        return -1;
    if (!from_flag || text[0] == '\0') {
        free_list(c->upstream, c->n_upstream);
        c->upstream = NULL;
        c->n_upstream = 0;
        if (text[0] == '\0')
            return 0;
    }
    if (c->n_upstream >= UPSTREAM_MAX) {
        snprintf(why, len, "at most %d endpoints", UPSTREAM_MAX);
        return -1;
    }
    list = realloc(c->upstream, (c->n_upstream + 1) * sizeof(*list));
    if (list == NULL || (copy = strdup(text)) == NULL) {
        if (list != NULL)
            c->upstream = list;
        snprintf(why, len, "out of memory");
        return -1;
    }
    list[c->n_upstream++] = copy;
    c->upstream = list;
    return 0;
}

/* Checks a string value of k (a name, path, socket or TCP address). */
static int
check_string(const struct config_key *k, const char *v, char *why, size_t len)
{
    size_t n = strlen(v);
    int rc = 0;

    switch (k->kind) {
    case CONFIG_KIND_SOCKET:
        /* The path must fit sockaddr_un, or bind() would truncate it. */
        if (n >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
            snprintf(why, len,
                     "a Unix socket path is at most %zu bytes, got %zu",
                     sizeof(((struct sockaddr_un *)0)->sun_path) - 1, n);
            return -1;
        }
        if (n > 0 && v[0] != '/') {
            snprintf(why, len, "must be an absolute path, got \"%s\"", v);
            return -1;
        }
        return 0;
    case CONFIG_KIND_PATH:
        if (n > PATH_MAX_LEN) {
            snprintf(why, len, "a path is at most %d bytes, got %zu",
                     PATH_MAX_LEN, n);
            return -1;
        }
        return 0;
    case CONFIG_KIND_ENDPOINTS:
        if (n > 0 && check_endpoint(v) < 0) {
            snprintf(why, len,
                     "\"%s\" is not HOST:PORT (a name or a numeric address, "
                     "port 1-65535; an IPv6 address in brackets)",
                     v);
            return -1;
        }
        return 0;
    case CONFIG_KIND_TCP:
        if (n > 0 && (rc = check_tcp(v)) == -2) {
            snprintf(why, len,
                     "\"%s\": the host must be a numeric address "
                     "(\"127.0.0.1:7411\", \"[::1]:7411\"); names are not "
                     "resolved",
                     v);
            return -1;
        }
        if (n > 0 && rc < 0) {
            snprintf(why, len,
                     "\"%s\" is not HOST:PORT (port 1-65535; an IPv6 address "
                     "in brackets, \"[::1]:7411\")",
                     v);
            return -1;
        }
        return 0;
    default:
        if (n > NAME_MAX_LEN) {
            snprintf(why, len, "at most %d bytes, got %zu", NAME_MAX_LEN, n);
            return -1;
        }
        return 0;
    }
}

static int
parse_mode(const char *v, uint32_t *out, char *why, size_t len)
{
    const char *p;
    uint32_t mode = 0;

    for (p = v; *p != '\0'; p++) {
        if (*p < '0' || *p > '7' || mode > 0777)
            break;
        mode = mode * 8 + (uint32_t)(*p - '0');
    }
    if (*p != '\0' || p == v || mode > 0777) {
        snprintf(why, len, "\"%s\" is not an octal mode such as \"0660\"", v);
        return -1;
    }
    if ((mode & 0007) != 0) {
        snprintf(why, len,
                 "%04o gives access to every local user: use groups "
                 "(\"0660\" or \"0770\")",
                 (unsigned)mode);
        return -1;
    }
    if ((mode & 0600) != 0600) {
        snprintf(why, len, "%04o must let the daemon's own user read and write",
                 (unsigned)mode);
        return -1;
    }
    *out = mode;
    return 0;
}

static int
parse_loglevel(const char *v, int *level, char *why, size_t len)
{
    size_t i;

    for (i = 0; i < sizeof(log_levels) / sizeof(log_levels[0]); i++) {
        if (strcmp(v, log_levels[i].name) == 0) {
            *level = log_levels[i].level;
            return 0;
        }
    }
    snprintf(why, len,
             "expected one of \"err\", \"warning\", \"notice\", \"info\", "
             "\"debug\"");
    return -1;
}

/*
 * Reads text as the value of k and stores it in c: the one parser and
 * range behind the file's strings and every flag. On failure c is
 * unchanged and why holds the reason.
 */
static int
set_text(struct config *c, const struct config_key *k, const char *text,
         enum source from, char *why, size_t len)
{
    char **slot;
    char *copy = NULL;
    uint64_t v;
    uint32_t mode;
    int level;

    switch (k->kind) {
    case CONFIG_KIND_STRING:
    case CONFIG_KIND_PATH:
    case CONFIG_KIND_SOCKET:
    case CONFIG_KIND_TCP:
        if (check_string(k, text, why, len) < 0)
            return -1;
        /* An empty string means "none", which struct config spells NULL. */
        if (text[0] != '\0' && (copy = strdup(text)) == NULL) {
            snprintf(why, len, "out of memory");
            return -1;
        }
        slot = (char **)(void *)((char *)c + k->off);
        free(*slot);
        *slot = copy;
        return 0;
    case CONFIG_KIND_MODE:
        if (parse_mode(text, &mode, why, len) < 0)
            return -1;
        set_number(c, k, mode);
        return 0;
    case CONFIG_KIND_COUNT:
    case CONFIG_KIND_SIZE:
    case CONFIG_KIND_MSEC:
    case CONFIG_KIND_SEC:
        if (parse_number(k, text, from, &v, why, len) < 0 ||
            (from != FROM_ALIAS && !has_unit(text) &&
             check_plain(k, v, why, len) < 0) ||
            check_range(k, v, why, len) < 0)
            return -1;
        set_number(c, k, v);
        return 0;
    case CONFIG_KIND_LOGLEVEL:
        if (parse_loglevel(text, &level, why, len) < 0)
            return -1;
        c->log_level = level;
        return 0;
    case CONFIG_KIND_BOOL:
        if (strcmp(text, "true") != 0 && strcmp(text, "false") != 0) {
            snprintf(why, len, "expected true or false, got \"%s\"", text);
            return -1;
        }
        set_number(c, k, text[0] == 't');
        return 0;
    case CONFIG_KIND_ENDPOINTS:
        return add_endpoint(c, k, text, why, len);
    case CONFIG_KIND_GROUPS:
    case CONFIG_KIND_TOKENS:
        break;
    }
    snprintf(why, len, "has no single-value form");
    return -1;
}

/* Reads an integer-or-string number (count, size or duration) of key k. */
static int
load_number(struct load *ld, const config_setting_t *s,
            const struct config_key *k, struct config *c)
{
    char why[CONFIG_ERR_MAX];
    uint64_t v;

    if (is_int(s)) {
        long long raw = config_setting_get_int64(s);
        char literal[64];

        if (wider_than_int(ld, s, literal, sizeof(literal)))
            return fail(ld, s, k->section, k->name,
                        "%s does not fit the 32-bit integers of this "
                        "libconfig (it would be read as %lld): write it as a "
                        "string with a unit, e.g. \"5GB\", or with an L "
                        "suffix",
                        literal, raw);
        if (raw < 0)
            return fail(ld, s, k->section, k->name,
                        "must not be negative, got %lld", raw);
        v = (uint64_t)raw;
        /* An integer duration is in seconds; kept in milliseconds. */
        if (k->kind == CONFIG_KIND_MSEC) {
            if (v > UINT64_MAX / 1000) {
                check_range(k, UINT64_MAX, why, sizeof(why));
                return fail(ld, s, k->section, k->name, "%s", why);
            }
            v *= 1000;
        }
        if (check_plain(k, v, why, sizeof(why)) < 0 ||
            check_range(k, v, why, sizeof(why)) < 0)
            return fail(ld, s, k->section, k->name, "%s", why);
        set_number(c, k, v);
        return 0;
    }
    if (config_setting_type(s) == CONFIG_TYPE_STRING &&
        k->kind != CONFIG_KIND_COUNT) {
        if (set_text(c, k, config_setting_get_string(s), FROM_FILE, why,
                     sizeof(why)) < 0)
            return fail(ld, s, k->section, k->name, "%s", why);
        return 0;
    }
    return fail(ld, s, k->section, k->name, "expected %s, got %s",
                k->kind == CONFIG_KIND_COUNT ? "an integer"
                : k->kind == CONFIG_KIND_SIZE
                    ? "a size (an integer or a string)"
                    : "a duration (an integer or a string)",
                type_name(s));
}

/* Reads a string-valued key: a name, path, socket, address, mode or log
 * level. */
static int
load_text(struct load *ld, const config_setting_t *s,
          const struct config_key *k, struct config *c)
{
    char why[CONFIG_ERR_MAX];

    if (config_setting_type(s) != CONFIG_TYPE_STRING) {
        if (k->kind == CONFIG_KIND_MODE)
            return fail(ld, s, k->section, k->name,
                        "expected an octal string such as \"0660\", got %s "
                        "(libconfig reads 0660 as the decimal 660)",
                        type_name(s));
        if (k->kind == CONFIG_KIND_LOGLEVEL)
            return fail(ld, s, k->section, k->name,
                        "expected one of \"err\", \"warning\", \"notice\", "
                        "\"info\", \"debug\"");
        return fail(ld, s, k->section, k->name, "expected a string, got %s",
                    type_name(s));
    }
    if (set_text(c, k, config_setting_get_string(s), FROM_FILE, why,
                 sizeof(why)) < 0)
        return fail(ld, s, k->section, k->name, "%s", why);
    return 0;
}

static int
check_name(const char *v)
{
    size_t len = strlen(v);

    return len == 0 || len > NAME_MAX_LEN ? -1 : 0;
}

static int
load_endpoints(struct load *ld, const config_setting_t *s,
               const struct config_key *k, struct config *c)
{
    char why[CONFIG_ERR_MAX];
    char **list = NULL;
    int n, i;

    if (config_setting_type(s) != CONFIG_TYPE_ARRAY &&
        config_setting_type(s) != CONFIG_TYPE_LIST)
        return fail(ld, s, k->section, k->name,
                    "expected an array such as [ \"center.example:7411\" ], "
                    "got %s",
                    type_name(s));
    n = config_setting_length(s);
    if (n > UPSTREAM_MAX)
        return fail(ld, s, k->section, k->name, "at most %d endpoints, got %d",
                    UPSTREAM_MAX, n);
    if (n > 0 && (list = calloc((size_t)n, sizeof(*list))) == NULL)
        return fail(ld, s, k->section, k->name, "out of memory");
    for (i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        const char *v = config_setting_type(e) == CONFIG_TYPE_STRING
                            ? config_setting_get_string(e)
                            : NULL;

        if (v == NULL || v[0] == '\0' || check_string(k, v, why, sizeof(why))) {
            free_list(list, (size_t)n);
            return fail(ld, e, k->section, k->name, "element %d: %s", i,
                        v == NULL || v[0] == '\0' ? "expected HOST:PORT" : why);
        }
        if ((list[i] = strdup(v)) == NULL) {
            free_list(list, (size_t)n);
            return fail(ld, e, k->section, k->name, "out of memory");
        }
    }
    free_list(c->upstream, c->n_upstream);
    c->upstream = list;
    c->n_upstream = (size_t)n;
    return 0;
}

static int
load_groups(struct load *ld, const config_setting_t *s,
            const struct config_key *k, struct config *c)
{
    int writers = k->off == offsetof(struct config, writer_groups);
    char ***slot = writers ? &c->writer_groups : &c->reader_groups;
    size_t *count = writers ? &c->n_writer_groups : &c->n_reader_groups;
    char **list = NULL;
    int n, i, j;

    if (config_setting_type(s) != CONFIG_TYPE_ARRAY &&
        config_setting_type(s) != CONFIG_TYPE_LIST)
        return fail(ld, s, k->section, k->name,
                    "expected an array of group names such as "
                    "[ \"receiptd\" ], got %s",
                    type_name(s));
    n = config_setting_length(s);
    if (n > GROUPS_MAX)
        return fail(ld, s, k->section, k->name, "at most %d groups, got %d",
                    GROUPS_MAX, n);
    if (n > 0 && (list = calloc((size_t)n, sizeof(*list))) == NULL)
        return fail(ld, s, k->section, k->name, "out of memory");
    for (i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        const char *v;

        if (config_setting_type(e) != CONFIG_TYPE_STRING) {
            free_list(list, (size_t)n);
            return fail(ld, e, k->section, k->name,
                        "element %d: expected a group name, got %s", i,
                        type_name(e));
        }
        v = config_setting_get_string(e);
        if (check_name(v) < 0) {
            free_list(list, (size_t)n);
            return fail(ld, e, k->section, k->name,
                        "element %d: a group name is 1 to %d bytes", i,
                        NAME_MAX_LEN);
        }
        for (j = 0; j < i; j++) {
            if (strcmp(list[j], v) == 0) {
                free_list(list, (size_t)n);
                return fail(ld, e, k->section, k->name,
                            "group \"%s\" is listed twice", v);
            }
        }
        if ((list[i] = strdup(v)) == NULL) {
            free_list(list, (size_t)n);
            return fail(ld, e, k->section, k->name, "out of memory");
        }
    }
    free_list(*slot, *count);
    *slot = list;
    *count = (size_t)n;
    return 0;
}

static int
hex_value(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

static int
load_token(struct load *ld, const config_setting_t *e, int index,
           struct config_token *t)
{
    const config_setting_t *name = NULL, *hash = NULL;
    const char *v;
    int i, n;

    if (!config_setting_is_group(e))
        return fail(ld, e, "access", "tokens",
                    "element %d: expected a group "
                    "{ name = \"...\"; sha256 = \"...\"; }, got %s",
                    index, type_name(e));
    n = config_setting_length(e);
    for (i = 0; i < n; i++) {
        const config_setting_t *m = config_setting_get_elem(e, (unsigned)i);

        if (strcmp(config_setting_name(m), "name") == 0)
            name = m;
        else if (strcmp(config_setting_name(m), "sha256") == 0)
            hash = m;
        else
            return fail(ld, m, "access", "tokens",
                        "element %d: unknown key \"%s\" (a token has name "
                        "and sha256)",
                        index, config_setting_name(m));
    }
    if (name == NULL || hash == NULL)
        return fail(ld, e, "access", "tokens", "element %d: missing %s", index,
                    name == NULL ? "name" : "sha256");
    if (config_setting_type(name) != CONFIG_TYPE_STRING ||
        check_name(config_setting_get_string(name)) < 0)
        return fail(ld, name, "access", "tokens",
                    "element %d: name must be a string of 1 to %d bytes", index,
                    NAME_MAX_LEN);
    if (config_setting_type(hash) != CONFIG_TYPE_STRING)
        return fail(ld, hash, "access", "tokens",
                    "element %d: sha256 must be a string of 64 hex digits, "
                    "got %s",
                    index, type_name(hash));
    v = config_setting_get_string(hash);
    if (strlen(v) != 64)
        return fail(ld, hash, "access", "tokens",
                    "element %d: sha256 must be 64 hex digits (the output of "
                    "receiptd --hash-token), got %zu characters",
                    index, strlen(v));
    for (i = 0; i < 32; i++) {
        int hi = hex_value(v[2 * i]), lo = hex_value(v[2 * i + 1]);

        if (hi < 0 || lo < 0)
            return fail(ld, hash, "access", "tokens",
                        "element %d: sha256 holds a character that is not a "
                        "hex digit",
                        index);
        t->sha256[i] = (unsigned char)(hi << 4 | lo);
    }
    if ((t->name = strdup(config_setting_get_string(name))) == NULL)
        return fail(ld, e, "access", "tokens", "out of memory");
    return 0;
}

static int
load_tokens(struct load *ld, const config_setting_t *s, struct config *c)
{
    struct config_token *t = NULL;
    int n, i, j;

    if (config_setting_type(s) != CONFIG_TYPE_LIST)
        return fail(ld, s, "access", "tokens",
                    "expected a list ( { name = \"...\"; sha256 = \"...\"; }, "
                    "... ), got %s",
                    type_name(s));
    n = config_setting_length(s);
    if (n > TOKENS_MAX)
        return fail(ld, s, "access", "tokens", "at most %d tokens, got %d",
                    TOKENS_MAX, n);
    if (n > 0 && (t = calloc((size_t)n, sizeof(*t))) == NULL)
        return fail(ld, s, "access", "tokens", "out of memory");
    for (i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);

        if (load_token(ld, e, i, &t[i]) < 0) {
            free_tokens(t, (size_t)n);
            return -1;
        }
        /* Two entries with one name make logs ambiguous; two with one
         * hash mean the same secret was handed out twice. */
        for (j = 0; j < i; j++) {
            if (strcmp(t[j].name, t[i].name) == 0 ||
                memcmp(t[j].sha256, t[i].sha256, 32) == 0) {
                int same_name = strcmp(t[j].name, t[i].name) == 0;

                free_tokens(t, (size_t)n);
                return fail(ld, e, "access", "tokens",
                            "element %d: %s as element %d", i,
                            same_name ? "same name" : "same sha256", j);
            }
        }
    }
    free_tokens(c->tokens, c->n_tokens);
    c->tokens = t;
    c->n_tokens = (size_t)n;
    return 0;
}

static int
load_key(struct load *ld, const config_setting_t *s, const struct config_key *k,
         struct config *c)
{
    const char *file = config_setting_source_file(s);

    snprintf(c->where[k - config_keys], CONFIG_WHERE_MAX, "%s:%d",
             file != NULL ? file : ld->path, config_setting_source_line(s));
    switch (k->kind) {
    case CONFIG_KIND_STRING:
    case CONFIG_KIND_PATH:
    case CONFIG_KIND_SOCKET:
    case CONFIG_KIND_TCP:
    case CONFIG_KIND_MODE:
    case CONFIG_KIND_LOGLEVEL:
        return load_text(ld, s, k, c);
    case CONFIG_KIND_COUNT:
    case CONFIG_KIND_SIZE:
    case CONFIG_KIND_MSEC:
    case CONFIG_KIND_SEC:
        return load_number(ld, s, k, c);
    case CONFIG_KIND_GROUPS:
        return load_groups(ld, s, k, c);
    case CONFIG_KIND_ENDPOINTS:
        return load_endpoints(ld, s, k, c);
    case CONFIG_KIND_TOKENS:
        return load_tokens(ld, s, c);
    case CONFIG_KIND_BOOL:
        if (config_setting_type(s) != CONFIG_TYPE_BOOL)
            return fail(ld, s, k->section, k->name,
                        "expected true or false, got %s", type_name(s));
        set_number(c, k, config_setting_get_bool(s) != 0);
        return 0;
    }
    return -1;
}

static const struct config_key *
find_key(const char *section, const char *name)
{
    size_t i;

    for (i = 0; i < N_KEYS; i++) {
        if (((section == NULL && config_keys[i].section == NULL) ||
             (section != NULL && config_keys[i].section != NULL &&
              strcmp(section, config_keys[i].section) == 0)) &&
            strcmp(name, config_keys[i].name) == 0)
            return &config_keys[i];
    }
    return NULL;
}

static int
is_section(const char *name)
{
    size_t i;

    for (i = 0; i < N_KEYS; i++)
        if (config_keys[i].section != NULL &&
            strcmp(config_keys[i].section, name) == 0)
            return 1;
    return 0;
}

/* Suggests the key the writer probably meant, for a key in the wrong
 * section ("max_frame" at the top level). */
static const char *
section_of(const char *name)
{
    size_t i;

    for (i = 0; i < N_KEYS; i++)
        if (strcmp(config_keys[i].name, name) == 0)
            return config_keys[i].section;
    return NULL;
}

static int
unknown_key(struct load *ld, const config_setting_t *s, const char *section)
{
    const char *name = config_setting_name(s);
    const char *home = section_of(name);

    if (home != NULL)
        return fail(ld, s, section, name,
                    "unknown key here; it belongs in "
                    "the \"%s\" section",
                    home);
    if (section == NULL)
        return fail(ld, s, NULL, name,
                    "unknown key (sections: listen, store, limits, access; "
                    "top-level keys: log_level)");
    return fail(ld, s, section, name, "unknown key");
}

static int
load_tree(struct load *ld, const config_setting_t *root, struct config *c)
{
    int n, i, m, j;

    n = config_setting_length(root);
    for (i = 0; i < n; i++) {
        const config_setting_t *s = config_setting_get_elem(root, (unsigned)i);
        const char *name = config_setting_name(s);
        const struct config_key *k;

        if (is_section(name)) {
            if (!config_setting_is_group(s))
                return fail(ld, s, NULL, name,
                            "expected a group { ... }, got %s", type_name(s));
            m = config_setting_length(s);
            for (j = 0; j < m; j++) {
                const config_setting_t *e =
                    config_setting_get_elem(s, (unsigned)j);

                if ((k = find_key(name, config_setting_name(e))) == NULL)
                    return unknown_key(ld, e, name);
                if (load_key(ld, e, k, c) < 0)
                    return -1;
            }
            continue;
        }
        if ((k = find_key(NULL, name)) == NULL)
            return unknown_key(ld, s, NULL);
        if (load_key(ld, s, k, c) < 0)
            return -1;
    }
    return 0;
}

int
config_load_file(struct config *c, const char *path, char err[CONFIG_ERR_MAX])
{
    struct load ld = { path, NULL, err };
    struct config next;
    config_t lc;
    char *dir, *slash;
    int rc;

    if (config_copy(&next, c) < 0) {
        snprintf(err, CONFIG_ERR_MAX, "%s: out of memory", path);
        return -1;
    }
    /* "@include" resolves relative to the including file's directory. */
    if ((dir = strdup(path)) == NULL) {
        config_free(&next);
        snprintf(err, CONFIG_ERR_MAX, "%s: out of memory", path);
        return -1;
    }
    slash = strrchr(dir, '/');
    if (slash == NULL)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';

    ld.dir = dir;
    config_init(&lc);
    config_set_include_dir(&lc, dir);
    if (config_read_file(&lc, path) != CONFIG_TRUE) {
        if (config_error_type(&lc) == CONFIG_ERR_FILE_IO) {
            /* libconfig does not keep errno; ask the system directly. */
            FILE *f = fopen(path, "r");
            int e = errno;

            if (f != NULL) {
                fclose(f);
                snprintf(err, CONFIG_ERR_MAX, "%s: cannot read the file", path);
            } else {
                snprintf(err, CONFIG_ERR_MAX, "%s: %s", path, strerror(e));
            }
        } else {
            snprintf(err, CONFIG_ERR_MAX, "%s:%d: %s",
                     config_error_file(&lc) != NULL ? config_error_file(&lc)
                                                    : path,
                     config_error_line(&lc), config_error_text(&lc));
        }
        rc = -1;
    } else {
        rc = load_tree(&ld, config_root_setting(&lc), &next);
    }
    config_destroy(&lc);
    free(dir);
    if (rc < 0) {
        config_free(&next);
        return -1;
    }
    config_free(c);
    *c = next;
    return 0;
}

/* The key of the struct config member at offset off. */
static const struct config_key *
key_of(size_t off)
{
    size_t i;

    for (i = 0; i < N_KEYS; i++)
        if (config_keys[i].off == off)
            return &config_keys[i];
    return NULL;
}

#define KEY(member) key_of(offsetof(struct config, member))

static int blame(const struct config *c, char err[CONFIG_ERR_MAX],
                 const struct config_key *k1, const struct config_key *k2,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/*
 * Writes "where: section.key: reason" into err for the key at fault: k1,
 * or k2 (may be NULL) when only k2 was set, so a cross-field error points
 * at the line that made it. A value from a flag reads "--flag: reason";
 * a default "section.key: reason". Returns -1.
 */
static int
blame(const struct config *c, char err[CONFIG_ERR_MAX],
      const struct config_key *k1, const struct config_key *k2, const char *fmt,
      ...)
{
    const struct config_key *k = k1;
    const char *where;
    va_list ap;
    size_t used;

    if (k2 != NULL && c->where[k1 - config_keys][0] == '\0' &&
        c->where[k2 - config_keys][0] != '\0')
        k = k2;
    where = c->where[k - config_keys];
    if (where[0] == '-')
        snprintf(err, CONFIG_ERR_MAX, "%s: ", where);
    else
        snprintf(err, CONFIG_ERR_MAX, "%s%s%s%s%s: ", where,
                 where[0] != '\0' ? ": " : "",
                 k->section != NULL ? k->section : "",
                 k->section != NULL ? "." : "", k->name);
    used = strlen(err);
    va_start(ap, fmt);
    vsnprintf(err + used, CONFIG_ERR_MAX - used, fmt, ap);
    va_end(ap);
    return -1;
}

int
config_store_pg(const struct config *c)
{
    if (c->store_backend != NULL && c->store_backend[0] != '\0')
        return strcmp(c->store_backend, "postgresql") == 0;
    return c->pg_conninfo != NULL && c->pg_conninfo[0] != '\0';
}

int
config_validate(const struct config *c, char err[CONFIG_ERR_MAX])
{
    if ((c->socket_path == NULL || c->socket_path[0] == '\0') &&
        (c->tcp_listen == NULL || c->tcp_listen[0] == '\0'))
        return blame(c, err, KEY(socket_path), KEY(tcp_listen),
                     "no listener: set a Unix socket path or a TCP address");
    if (c->store_backend != NULL && c->store_backend[0] != '\0' &&
        strcmp(c->store_backend, "sqlite") != 0 &&
        strcmp(c->store_backend, "postgresql") != 0)
        return blame(c, err, KEY(store_backend), NULL,
                     "\"%s\" is not a store backend: \"sqlite\" or "
                     "\"postgresql\"",
                     c->store_backend);
    if (c->relay_retention != NULL && c->relay_retention[0] != '\0' &&
        strcmp(c->relay_retention, "wait") != 0 &&
        strcmp(c->relay_retention, "drop") != 0)
        return blame(c, err, KEY(relay_retention), NULL,
                     "\"%s\" is not a relay retention: \"wait\" or "
                     "\"drop\"",
                     c->relay_retention);
    if (c->upstream_priority != NULL && c->upstream_priority[0] != '\0' &&
        strcmp(c->upstream_priority, "idle") != 0 &&
        strcmp(c->upstream_priority, "low") != 0 &&
        strcmp(c->upstream_priority, "normal") != 0)
        return blame(c, err, KEY(upstream_priority), NULL,
                     "\"%s\" is not a relay priority: \"idle\", \"low\" "
                     "or \"normal\"",
                     c->upstream_priority);
    if (config_store_pg(c)) {
        if (c->pg_conninfo == NULL || c->pg_conninfo[0] == '\0')
            return blame(c, err, KEY(pg_conninfo), KEY(store_backend),
                         "the postgresql backend needs a conninfo");
    } else if (c->db_path == NULL || c->db_path[0] == '\0')
        return blame(c, err, KEY(db_path), NULL, "no database path");
    if (c->max_frame < 64 || c->max_frame > FRAME_MAX_CEILING)
        return blame(c, err, KEY(max_frame), NULL,
                     "max_frame %lu is outside 64..%lu bytes",
                     (unsigned long)c->max_frame,
                     (unsigned long)FRAME_MAX_CEILING);
    if (c->max_batch < 1 || c->max_batch > 1000000)
        return blame(c, err, KEY(max_batch), NULL,
                     "max_batch %lu is outside 1..1000000",
                     (unsigned long)c->max_batch);
    if (c->max_connections < 1)
        return blame(c, err, KEY(max_connections), NULL,
                     "max_connections must be at least 1");
    if ((c->socket_mode & 0007) != 0 || c->socket_mode > 0777)
        return blame(c, err, KEY(socket_mode), NULL,
                     "socket mode %04o gives access to every local user",
                     (unsigned)c->socket_mode);
    /* TCP is off by default; a TCP listener with no token would let no one
     * in (every connection must authenticate), which is never intended. */
    if (c->tcp_listen != NULL && c->tcp_listen[0] != '\0' && c->n_tokens == 0)
        return blame(c, err, KEY(tcp_listen), NULL,
                     "TCP listener %s needs at least one token in "
                     "access.tokens",
                     c->tcp_listen);
    if ((c->tls_cert == NULL) != (c->tls_key == NULL))
        return blame(c, err, c->tls_cert == NULL ? KEY(tls_key) : KEY(tls_cert),
                     NULL, "listen.tls_cert and listen.tls_key go together");
    if (c->tls_client_ca != NULL && c->tls_cert == NULL)
        return blame(c, err, KEY(tls_client_ca), NULL,
                     "client certificates need TLS: set listen.tls_cert and "
                     "listen.tls_key");
    if (c->tls_require_client_cert && c->tls_client_ca == NULL)
        return blame(c, err, KEY(tls_require_client_cert), NULL,
                     "requiring client certificates needs "
                     "listen.tls_client_ca to verify them");
    if (c->tls_cert != NULL && c->tcp_plaintext)
        return blame(c, err, KEY(tcp_plaintext), KEY(tls_cert),
                     "listen.tcp_plaintext and listen.tls_cert exclude each "
                     "other");
    /* Tokens and receipts cross networks: plain text only when asked. */
    if (c->tcp_listen != NULL && c->tcp_listen[0] != '\0' &&
        c->tls_cert == NULL && !c->tcp_plaintext)
        return blame(c, err, KEY(tcp_listen), NULL,
                     "TCP listener %s needs TLS: set listen.tls_cert and "
                     "listen.tls_key (--tls-cert, --tls-key), or "
                     "listen.tcp_plaintext = true to send tokens and "
                     "receipts in plain text",
                     c->tcp_listen);
    if (c->n_upstream > 0 && c->upstream_token_file == NULL)
        return blame(c, err, KEY(upstream), NULL,
                     "relaying needs the center's token: set "
                     "upstream.token_file (--upstream-token-file)");
    /* A node relays what its embedded store committed; a central instance
     * on PostgreSQL relays nothing further (yet). */
    if (c->n_upstream > 0 && config_store_pg(c))
        return blame(c, err, KEY(upstream), KEY(store_backend),
                     "relaying reads the embedded SQLite store: a "
                     "postgresql store has no relay yet");
    /* A rejected frame of the largest allowed size must fit quarantine, and
     * one connection's unsent replies must fit the global budget. */
    if (c->quarantine_max_bytes < c->max_frame)
        return blame(c, err, KEY(quarantine_max_bytes), KEY(max_frame),
                     "store.quarantine_max (%" PRIu64 " bytes) is smaller "
                     "than limits.max_frame (%lu bytes)",
                     c->quarantine_max_bytes, (unsigned long)c->max_frame);
    if (c->max_pending_bytes < c->max_unsent_bytes)
        return blame(c, err, KEY(max_pending_bytes), KEY(max_unsent_bytes),
                     "limits.max_pending (%" PRIu64 " bytes) is smaller than "
                     "limits.max_unsent (%" PRIu64 " bytes)",
                     c->max_pending_bytes, c->max_unsent_bytes);
    return 0;
}

/* ---- What start would refuse. ---- */

/* The directory of path (a copy in dir, len bytes). */
static void
dir_of(const char *path, char *dir, size_t len)
{
    const char *slash = strrchr(path, '/');

    if (slash == NULL)
        snprintf(dir, len, ".");
    else if (slash == path)
        snprintf(dir, len, "/");
    else
        snprintf(dir, len, "%.*s", (int)(slash - path), path);
}

/* The directory that will hold path exists and the daemon may create files
 * in it. */
static int
check_dir(const struct config *c, const struct config_key *k, const char *path,
          char err[CONFIG_ERR_MAX])
{
    char dir[PATH_MAX_LEN + 1];
    struct stat st;

    dir_of(path, dir, sizeof(dir));
    if (stat(dir, &st) != 0)
        return blame(c, err, k, NULL, "the directory %s: %s", dir,
                     strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return blame(c, err, k, NULL, "%s is not a directory", dir);
    if (access(dir, W_OK | X_OK) != 0)
        return blame(c, err, k, NULL, "cannot create files in %s: %s", dir,
                     strerror(errno));
    return 0;
}

static int
check_socket(const struct config *c, enum config_preflight mode,
             char err[CONFIG_ERR_MAX])
{
    const struct config_key *k = KEY(socket_path);
    struct sockaddr_un sun;
    int fd, rc;

    if (check_dir(c, k, c->socket_path, err) != 0)
        return -1;
    /* A socket file that accepts is a daemon already serving it; one that
     * refuses is left over from a crash and start replaces it. */
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", c->socket_path);
    if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
        return blame(c, err, k, NULL, "socket: %s", strerror(errno));
    rc = connect(fd, (struct sockaddr *)&sun, sizeof(sun));
    close(fd);
    if (rc == 0 && mode == CONFIG_PREFLIGHT_START)
        return blame(c, err, k, NULL,
                     "a daemon already serves %s, so start would refuse "
                     "(--for-reload checks a file for the running one)",
                     c->socket_path);
    if (rc != 0 && mode == CONFIG_PREFLIGHT_RELOAD)
        return blame(c, err, k, NULL, "no daemon serves %s to reload",
                     c->socket_path);
    return 0;
}

static int
check_tcp_bind(const struct config *c, char err[CONFIG_ERR_MAX])
{
    const struct config_key *k = KEY(tcp_listen);
    const char *a = c->tcp_listen, *colon;
    struct sockaddr_storage ss;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    char host[INET6_ADDRSTRLEN + 1];
    socklen_t sl;
    int fd, one = 1, rc;
    unsigned long port;

    /* The syntax was checked when the value was read. */
    memset(&ss, 0, sizeof(ss));
    if (a[0] == '[') {
        colon = strchr(a, ']') + 1;
        snprintf(host, sizeof(host), "%.*s", (int)(colon - a - 2), a + 1);
        v6->sin6_family = AF_INET6;
        if (inet_pton(AF_INET6, host, &v6->sin6_addr) != 1)
            return blame(c, err, k, NULL, "\"%s\" is not an address", a);
        sl = sizeof(*v6);
    } else {
        colon = strrchr(a, ':');
        snprintf(host, sizeof(host), "%.*s", (int)(colon - a), a);
        v4->sin_family = AF_INET;
        if (inet_pton(AF_INET, host, &v4->sin_addr) != 1)
            return blame(c, err, k, NULL, "\"%s\" is not an address", a);
        sl = sizeof(*v4);
    }
    port = strtoul(colon + 1, NULL, 10);
    if (ss.ss_family == AF_INET6)
        v6->sin6_port = htons((uint16_t)port);
    else
        v4->sin_port = htons((uint16_t)port);
    if ((fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
        return blame(c, err, k, NULL, "socket: %s", strerror(errno));
    /* As libuv binds: SO_REUSEADDR, so a port in TIME_WAIT is no error. */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    rc = bind(fd, (struct sockaddr *)&ss, sl);
    if (rc != 0) {
        rc = errno;
        close(fd);
        return blame(c, err, k, NULL, "cannot listen on %s: %s%s", a,
                     strerror(rc),
                     rc == EADDRINUSE ? " (another process has it)" : "");
    }
    close(fd);
    return 0;
}

int
config_preflight(const struct config *c, enum config_preflight mode,
                 char err[CONFIG_ERR_MAX])
{
    const struct config_key *k = KEY(db_path);

    /* The relay reads these at start; a file it cannot read would stop
     * the start after the store was opened. A reload keeps the running
     * relay, which read them already. */
    if (mode != CONFIG_PREFLIGHT_RELOAD && c->n_upstream > 0 &&
        c->upstream_token_file != NULL &&
        access(c->upstream_token_file, R_OK) != 0)
        return blame(c, err, KEY(upstream_token_file), NULL,
                     "cannot read %s: %s", c->upstream_token_file,
                     strerror(errno));
    if (mode != CONFIG_PREFLIGHT_RELOAD && c->n_upstream > 0 &&
        c->upstream_ca_file != NULL && access(c->upstream_ca_file, R_OK) != 0)
        return blame(c, err, KEY(upstream_ca_file), NULL, "cannot read %s: %s",
                     c->upstream_ca_file, strerror(errno));
    if (mode != CONFIG_PREFLIGHT_ADOPTED && c->socket_path != NULL &&
        c->socket_path[0] != '\0' && check_socket(c, mode, err) != 0)
        return -1;
    /* A reloading daemon keeps the address it holds (restart-only). */
    if (mode == CONFIG_PREFLIGHT_START && c->tcp_listen != NULL &&
        c->tcp_listen[0] != '\0' && check_tcp_bind(c, err) != 0)
        return -1;
    if (config_store_pg(c))
        return 0; /* the server is asked when the store opens */
    if (access(c->db_path, F_OK) == 0) {
        if (access(c->db_path, R_OK | W_OK) != 0)
            return blame(c, err, k, NULL,
                         "the database file %s is not writable by this "
                         "user: %s",
                         c->db_path, strerror(errno));
        /* SQLite creates its -wal and -shm files beside it. */
        return check_dir(c, k, c->db_path, err);
    }
    return check_dir(c, k, c->db_path, err);
}

/* NULL and "" both mean "none". */
static int
same_str(const char *a, const char *b)
{
    return strcmp(a != NULL ? a : "", b != NULL ? b : "") == 0;
}

static int
same_list(char *const *a, size_t na, char *const *b, size_t nb)
{
    size_t i;

    if (na != nb)
        return 0;
    for (i = 0; i < na; i++)
        if (!same_str(a[i], b[i]))
            return 0;
    return 1;
}

static void
add_name(char *what, int *n, const char *name)
{
    size_t used = strlen(what);

    snprintf(what + used, CONFIG_ERR_MAX - used, "%s%s", *n > 0 ? ", " : "",
             name);
    (*n)++;
}

int
config_restart_needed(const struct config *old, const struct config *next,
                      char what[CONFIG_ERR_MAX])
{
    int n = 0;

    what[0] = '\0';
    if (!same_str(old->socket_path, next->socket_path))
        add_name(what, &n, "listen.socket");
    if (old->socket_mode != next->socket_mode)
        add_name(what, &n, "listen.socket_mode");
    if (!same_str(old->socket_group, next->socket_group))
        add_name(what, &n, "listen.socket_group");
    if (!same_str(old->tcp_listen, next->tcp_listen))
        add_name(what, &n, "listen.tcp");
    if (!same_str(old->http_listen, next->http_listen))
        add_name(what, &n, "listen.http");
    if (!same_str(old->db_path, next->db_path))
        add_name(what, &n, "store.path");
    if (!same_str(old->store_backend, next->store_backend))
        add_name(what, &n, "store.backend");
    if (!same_str(old->pg_conninfo, next->pg_conninfo))
        add_name(what, &n, "store.conninfo");
    if (old->query_threads != next->query_threads)
        add_name(what, &n, "limits.query_threads");
    if (old->chunk_receipts != next->chunk_receipts)
        add_name(what, &n, "store.chunk_receipts");
    if (old->rollup_chunks != next->rollup_chunks)
        add_name(what, &n, "store.rollup_chunks");
    if (old->sync_in_commit != next->sync_in_commit)
        add_name(what, &n, "store.sync_in_commit");
    if (!same_list(old->upstream, old->n_upstream, next->upstream,
                   next->n_upstream))
        add_name(what, &n, "upstream.endpoints");
    if (!same_str(old->upstream_token_file, next->upstream_token_file))
        add_name(what, &n, "upstream.token_file");
    if (!same_str(old->upstream_ca_file, next->upstream_ca_file))
        add_name(what, &n, "upstream.ca_file");
    if (!same_str(old->upstream_name, next->upstream_name))
        add_name(what, &n, "upstream.name");
    if (old->upstream_window != next->upstream_window)
        add_name(what, &n, "upstream.window");
    if (!same_str(old->upstream_priority, next->upstream_priority))
        add_name(what, &n, "upstream.priority");
    if (!same_str(old->relay_retention, next->relay_retention))
        add_name(what, &n, "store.relay_retention");
    return n;
}

/* Replaces *dst with a copy of src (NULL stays NULL). 0, or -1 on memory. */
static int
keep_str(char **dst, const char *src)
{
    char *copy = NULL;

    if (src != NULL && (copy = strdup(src)) == NULL)
        return -1;
    free(*dst);
    *dst = copy;
    return 0;
}

/* Replaces the list *dst (*n entries) with a copy of src. */
static int
keep_list(char ***dst, size_t *n, char *const *src, size_t n_src)
{
    int ok = 1;
    char **copy = dup_list(src, n_src, &ok);

    if (!ok) {
        free_list(copy, copy != NULL ? n_src : 0);
        return -1;
    }
    free_list(*dst, *n);
    *dst = copy;
    *n = n_src;
    return 0;
}

int
config_reload(const struct config *running, const char *path,
              void (*apply)(struct config *next, void *arg), void *arg,
              struct config *next, char err[CONFIG_ERR_MAX],
              char restart[CONFIG_ERR_MAX])
{
    restart[0] = '\0';
    if (config_defaults(next) < 0) {
        snprintf(err, CONFIG_ERR_MAX, "out of memory");
        return -1;
    }
    if (config_load_file(next, path, err) < 0)
        goto fail;
    if (apply != NULL)
        apply(next, arg);
    config_restart_needed(running, next, restart);
    /* The listeners, the database and the reader threads were set up at
     * start; next must describe what actually runs. */
    if (keep_str(&next->socket_path, running->socket_path) < 0 ||
        keep_str(&next->socket_group, running->socket_group) < 0 ||
        keep_str(&next->tcp_listen, running->tcp_listen) < 0 ||
        keep_str(&next->http_listen, running->http_listen) < 0 ||
        keep_str(&next->db_path, running->db_path) < 0 ||
        keep_str(&next->store_backend, running->store_backend) < 0 ||
        keep_str(&next->pg_conninfo, running->pg_conninfo) < 0 ||
        keep_str(&next->upstream_token_file, running->upstream_token_file) <
            0 ||
        keep_str(&next->upstream_ca_file, running->upstream_ca_file) < 0 ||
        keep_str(&next->upstream_name, running->upstream_name) < 0 ||
        keep_str(&next->upstream_priority, running->upstream_priority) < 0 ||
        keep_str(&next->relay_retention, running->relay_retention) < 0 ||
        keep_list(&next->upstream, &next->n_upstream, running->upstream,
                  running->n_upstream) < 0) {
        snprintf(err, CONFIG_ERR_MAX, "out of memory");
        goto fail;
    }
    next->socket_mode = running->socket_mode;
    next->query_threads = running->query_threads;
    next->chunk_receipts = running->chunk_receipts;
    next->rollup_chunks = running->rollup_chunks;
    next->sync_in_commit = running->sync_in_commit;
    next->upstream_window = running->upstream_window;
    if (config_validate(next, err) < 0)
        goto fail;
    return 0;
fail:
    config_free(next);
    return -1;
}

/* ---- Writing the effective configuration back out. ---- */

/* Writes s as a libconfig string literal, escaping what the syntax needs. */
static void
put_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; s != NULL && *s != '\0'; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(out, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(out, "\\x%02x", (unsigned char)*s);
        else
            fputc(*s, out);
    }
    fputc('"', out);
}

static void
dump_key(const struct config *c, const struct config_key *k, FILE *out)
{
    const char *indent = k->section != NULL ? "    " : "";
    char buf[64];
    size_t i;

    fprintf(out, "%s%s = ", indent, k->name);
    switch (k->kind) {
    case CONFIG_KIND_STRING:
    case CONFIG_KIND_PATH:
    case CONFIG_KIND_SOCKET:
    case CONFIG_KIND_TCP:
        put_string(out,
                   *(char *const *)(const void *)((const char *)c + k->off));
        break;
    case CONFIG_KIND_MODE:
        fprintf(out, "\"%04o\"", (unsigned)c->socket_mode);
        break;
    case CONFIG_KIND_COUNT:
        fprintf(out, "%" PRIu64, get_number(c, k));
        break;
    case CONFIG_KIND_SIZE:
    case CONFIG_KIND_MSEC:
    case CONFIG_KIND_SEC:
        format_value(k, get_number(c, k), buf, sizeof(buf));
        if (get_number(c, k) == 0)
            fprintf(out, "0");
        else
            fprintf(out, "\"%s\"", buf);
        break;
    case CONFIG_KIND_GROUPS: {
        char *const *list = k->off == offsetof(struct config, writer_groups)
                                ? c->writer_groups
                                : c->reader_groups;
        size_t n = k->off == offsetof(struct config, writer_groups)
                       ? c->n_writer_groups
                       : c->n_reader_groups;

        fprintf(out, "[");
        for (i = 0; i < n; i++) {
            fprintf(out, i == 0 ? " " : ", ");
            put_string(out, list[i]);
        }
        fprintf(out, n > 0 ? " ]" : "]");
        break;
    }
    case CONFIG_KIND_ENDPOINTS:
        fprintf(out, "[");
        for (i = 0; i < c->n_upstream; i++) {
            fprintf(out, i == 0 ? " " : ", ");
            put_string(out, c->upstream[i]);
        }
        fprintf(out, c->n_upstream > 0 ? " ]" : "]");
        break;
    case CONFIG_KIND_TOKENS:
        fprintf(out, "(");
        for (i = 0; i < c->n_tokens; i++) {
            size_t j;

            fprintf(out, "%s\n%s    { name = ", i == 0 ? "" : ",", indent);
            put_string(out, c->tokens[i].name);
            fprintf(out, "; sha256 = \"");
            for (j = 0; j < 32; j++)
                fprintf(out, "%02x", c->tokens[i].sha256[j]);
            fprintf(out, "\"; }");
        }
        fprintf(out, c->n_tokens > 0 ? "\n%s)" : ")", indent);
        break;
    case CONFIG_KIND_LOGLEVEL: {
        const char *name = "info";

        for (i = 0; i < sizeof(log_levels) / sizeof(log_levels[0]); i++) {
            if (log_levels[i].level == c->log_level) {
                name = log_levels[i].name;
                break;
            }
        }
        fprintf(out, "\"%s\"", name);
        break;
    }
    case CONFIG_KIND_BOOL:
        fprintf(out, "%s", get_number(c, k) ? "true" : "false");
        break;
    }
    fprintf(out, ";\n");
}

int
config_dump(const struct config *c, FILE *out)
{
    const char *open = NULL;
    size_t i;

    for (i = 0; i < N_KEYS; i++) {
        const struct config_key *k = &config_keys[i];

        if (open != NULL &&
            (k->section == NULL || strcmp(open, k->section) != 0)) {
            fprintf(out, "};\n");
            open = NULL;
        }
        if (k->section != NULL && open == NULL) {
            fprintf(out, "%s: {\n", k->section);
            open = k->section;
        }
        dump_key(c, k, out);
    }
    if (open != NULL)
        fprintf(out, "};\n");
    return ferror(out) ? -1 : 0;
}

/* ---- Flags and --help. ---- */

int
config_set_flag(struct config *c, const struct config_key *k, const char *text,
                char err[CONFIG_ERR_MAX])
{
    int n;

    /* The reason goes after the flag's name, cut if the whole is too
     * long. */
    n = snprintf(err, CONFIG_ERR_MAX,
                 "--%s: ", k->flag != NULL ? k->flag : k->name);
    if (n < 0 || n >= CONFIG_ERR_MAX)
        n = 0;
    if (set_text(c, k, text, FROM_FILE, err + n, CONFIG_ERR_MAX - (size_t)n) !=
        0)
        return -1;
    snprintf(c->where[k - config_keys], CONFIG_WHERE_MAX, "--%s",
             k->flag != NULL ? k->flag : k->name);
    return 0;
}

int
config_set_alias(struct config *c, const struct config_key *k, const char *text,
                 char err[CONFIG_ERR_MAX])
{
    int n;

    n = snprintf(err, CONFIG_ERR_MAX,
                 "--%s: ", k->alias != NULL ? k->alias : k->name);
    if (n < 0 || n >= CONFIG_ERR_MAX)
        n = 0;
    if (set_text(c, k, text, k->alias != NULL ? FROM_ALIAS : FROM_FILE, err + n,
                 CONFIG_ERR_MAX - (size_t)n) != 0)
        return -1;
    snprintf(c->where[k - config_keys], CONFIG_WHERE_MAX, "--%s",
             k->alias != NULL ? k->alias : k->name);
    return 0;
}
void
config_key_describe(const struct config_key *k, const struct config *c,
                    char *buf, size_t len)
{
    char value[64] = "", lo[32], hi[32];
    const char *str;
    uint64_t v;
    size_t i;

    switch (k->kind) {
    case CONFIG_KIND_STRING:
    case CONFIG_KIND_PATH:
    case CONFIG_KIND_SOCKET:
    case CONFIG_KIND_TCP:
        str = *(char *const *)(const void *)((const char *)c + k->off);
        if (str != NULL && strlen(str) < sizeof(value))
            snprintf(value, sizeof(value), "%s", str);
        break;
    case CONFIG_KIND_MODE:
        snprintf(value, sizeof(value), "%04o", (unsigned)get_number(c, k));
        break;
    case CONFIG_KIND_COUNT:
    case CONFIG_KIND_SIZE:
    case CONFIG_KIND_MSEC:
    case CONFIG_KIND_SEC:
        v = get_number(c, k);
        if (v == 0)
            snprintf(value, sizeof(value), "0");
        else
            format_value(k, v, value, sizeof(value));
        break;
    case CONFIG_KIND_LOGLEVEL:
        for (i = 0; i < sizeof(log_levels) / sizeof(log_levels[0]); i++) {
            if (log_levels[i].level == c->log_level) {
                snprintf(value, sizeof(value), "%s", log_levels[i].name);
                break;
            }
        }
        break;
    case CONFIG_KIND_BOOL:
        snprintf(value, sizeof(value), "%s",
                 get_number(c, k) ? "true" : "false");
        break;
    case CONFIG_KIND_GROUPS:
    case CONFIG_KIND_TOKENS:
    case CONFIG_KIND_ENDPOINTS:
        break;
    }
    snprintf(buf, len, "%s%s%s%s%s", k->section != NULL ? k->section : "",
             k->section != NULL ? "." : "", k->name,
             value[0] != '\0' ? " = " : "", value);
    if (k->kind == CONFIG_KIND_COUNT || k->kind == CONFIG_KIND_SIZE ||
        k->kind == CONFIG_KIND_MSEC || k->kind == CONFIG_KIND_SEC) {
        size_t used = strlen(buf);

        format_value(k, k->min, lo, sizeof(lo));
        format_value(k, k->max, hi, sizeof(hi));
        snprintf(buf + used, len - used, "; %s%s to %s",
                 k->zero_ok ? "0 = off, or " : "", lo, hi);
    }
}
