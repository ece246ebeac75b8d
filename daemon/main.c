/*
 * main.c: receiptd's entry point: flags, configuration, the store, the
 * writer thread, the listeners, signals and sd_notify.
 *
 * Precedence: built-in defaults, then --config FILE, then flags. Runs in
 * the foreground and logs to stderr. SIGTERM and SIGINT drain (stop
 * accepting, commit and answer what was read, close) and exit 0; SIGHUP is
 * the configuration reload hook. Everything here runs on the loop thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <sqlite3.h>
#include <uv.h>

#include "access.h"
#include "config.h"
#include "conn.h"
#include "listen.h"
#include "http.h"
#include "log.h"
#include "pool.h"
#include "notify.h"
#include "query.h"
#include "relay.h"
#include "server.h"
#include "store.h"
#include "tls.h"
#include "writer.h"

#define DRAIN_GRACE_MS 5000

/*
 * The flags with no file key. Every other flag is a key of config_keys[]
 * (config.h): its getopt value is OPT_KEY plus its index there, and its
 * argument goes through that key's parser and range, as the file's value
 * does.
 */
enum {
    OPT_CONFIG = 256,
    OPT_MAX_DB_PAGES,
    OPT_PRUNE_IDLE,
    OPT_CHECK_CONFIG,
    OPT_PRINT,
    OPT_FOR_RELOAD,
    OPT_HASH_TOKEN,
    OPT_VERSION,
    OPT_HELP,
    OPT_KEY = 512,
    OPT_ALIAS = 1024, /* plus the index of the key whose older name it is */
};

static const struct special {
    struct option opt;
    const char *arg;  /* in --help; NULL for none */
    const char *help; /* in --help */
} specials[] = {
    { { "config", required_argument, NULL, OPT_CONFIG },
      "FILE",
      "libconfig file (receiptd.conf(5)); flags override it" },
    { { "max-db-pages", required_argument, NULL, OPT_MAX_DB_PAGES },
      "N",
      "cap the database at N pages (PRAGMA max_page_count; 0 = no cap)" },
    { { "prune-idle-ms", required_argument, NULL, OPT_PRUNE_IDLE },
      "N",
      "writer idle time in ms before a prune batch (1000; small values for "
      "tests)" },
    { { "check-config", no_argument, NULL, OPT_CHECK_CONFIG },
      NULL,
      "check the configuration as start would (values, directories, "
      "listeners, no daemon on the socket) and exit" },
    { { "print", no_argument, NULL, OPT_PRINT },
      NULL,
      "with --check-config: print the effective configuration (defaults, "
      "file and flags) in the file's syntax" },
    { { "for-reload", no_argument, NULL, OPT_FOR_RELOAD },
      NULL,
      "with --check-config: check for a SIGHUP of the daemon that serves "
      "the socket, not for a start beside it" },
    { { "hash-token", no_argument, NULL, OPT_HASH_TOKEN },
      NULL,
      "read a TCP token on stdin, print its SHA-256 for access.tokens, and "
      "exit" },
    { { "version", no_argument, NULL, OPT_VERSION },
      NULL,
      "print the version and exit" },
    { { "help", no_argument, NULL, OPT_HELP },
      NULL,
      "print this help and exit" },
};

#define N_SPECIALS (sizeof(specials) / sizeof(specials[0]))

/* getopt_long's options: the specials, then every key with a flag. */
static struct option *options;

static void
options_init(void)
{
    size_t n = 0, i;

    options = calloc(N_SPECIALS + 2 * config_n_keys + 1, sizeof(*options));
    if (options == NULL)
        fatal("calloc");
    for (i = 0; i < N_SPECIALS; i++)
        options[n++] = specials[i].opt;
    for (i = 0; i < config_n_keys; i++) {
        if (config_keys[i].flag == NULL)
            continue;
        options[n].name = config_keys[i].flag;
        options[n].has_arg = required_argument;
        options[n].val = OPT_KEY + (int)i;
        n++;
        if (config_keys[i].alias == NULL)
            continue;
        options[n].name = config_keys[i].alias;
        options[n].has_arg = required_argument;
        options[n].val = OPT_ALIAS + (int)i;
        n++;
    }
}

#define HELP_COL   30
#define HELP_WIDTH 79

/* One option of --help: "  --name ARG" and its text, wrapped. */
static void
usage_option(FILE *f, const char *name, const char *arg, const char *text)
{
    const char *p = text, *end;
    int col, first = 1;
    size_t w;

    col = fprintf(f, "  --%s%s%s", name, arg != NULL ? " " : "",
                  arg != NULL ? arg : "");
    if (col < HELP_COL)
        col += fprintf(f, "%*s", HELP_COL - col, "");
    else
        col += fprintf(f, "  ");
    while (*p != '\0') {
        while (*p == ' ')
            p++;
        for (end = p; *end != '\0' && *end != ' '; end++)
            ;
        if (end == p)
            break;
        w = (size_t)(end - p);
        if (!first && col + 1 + (int)w > HELP_WIDTH) {
            col = fprintf(f, "\n%*s", HELP_COL, "") - 1;
            first = 1;
        }
        if (!first)
            col += fprintf(f, " ");
        col += fprintf(f, "%.*s", (int)w, p);
        first = 0;
        p = end;
    }
    fprintf(f, "\n");
}

static void
usage(FILE *f)
{
    struct config defaults;
    char text[2 * CONFIG_ERR_MAX], what[CONFIG_ERR_MAX];
    size_t i;

    if (config_defaults(&defaults) != 0)
        fatalx("out of memory");
    fprintf(f, "usage: receiptd --socket PATH --db PATH [options]\n"
               "\n"
               "Collects execution receipts over length-prefixed msgpack "
               "frames\n"
               "and stores them durably in one SQLite file. Runs in the\n"
               "foreground and logs to stderr.\n"
               "\n"
               "Each flag but the last few sets a key of the configuration "
               "file,\n"
               "shown with its default and range, and accepts what the file "
               "does.\n"
               "SIZE is bytes or a number with a unit (64KiB, 1MB); "
               "DURATION is\n"
               "seconds or numbers with units (250ms, 5m, 1h30m, 7d).\n"
               "\n");
    usage_option(f, specials[0].opt.name, specials[0].arg, specials[0].help);
    for (i = 0; i < config_n_keys; i++) {
        const struct config_key *k = &config_keys[i];

        if (k->flag == NULL)
            continue;
        config_key_describe(k, &defaults, what, sizeof(what));
        if (k->alias != NULL)
            snprintf(text, sizeof(text), "%s (%s; formerly --%s)", k->help,
                     what, k->alias);
        else
            snprintf(text, sizeof(text), "%s (%s)", k->help, what);
        usage_option(f, k->flag, k->arg, text);
    }
    for (i = 1; i < N_SPECIALS; i++)
        usage_option(f, specials[i].opt.name, specials[i].arg,
                     specials[i].help);
    config_free(&defaults);
}

/* A number for the flags with no file key. */
static uint64_t
num(const char *flag, const char *s, uint64_t max)
{
    unsigned long long v;
    char *end;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v > max)
        fatalx("--%s: \"%s\" is not a number in 0..%" PRIu64, flag, s, max);
    return (uint64_t)v;
}

/* What the command line says beyond struct config. */
struct flags {
    int argc;
    char **argv;
    const char *config_file;
    uint64_t max_pages;
    uint32_t prune_idle_ms; /* idle time before a prune batch; 0 = 1000 */
    int check_only;
    int print;
    int for_reload;
    int hash_token;
};

struct main_state {
    struct server srv;
    uv_signal_t sigterm, sigint, sighup;
    uv_timer_t watchdog;
    int watchdog_on;
    uv_timer_t status; /* STATUS= for `systemctl status`, every 10 s */
    struct notify_watchdog wd;
    struct store *store;
    struct access_policy access;
    struct config *cfg; /* the running configuration; swapped on reload */
    struct flags flags;
    struct http *http; /* listen.http; NULL when off */
};

static struct main_state ms;

static void
signal_close_cb(uv_handle_t *h)
{
    (void)h;
}

static void
drained_cb(struct server *srv)
{
    log_info("drained; stopping the writer");
    /* Every connection is gone, so nothing more will be submitted and no
     * query runs. The query connections close first: the writer's final
     * checkpoint must be the store's last connection for the WAL to be
     * emptied into the database file. */
    query_pool_free(srv->queries);
    srv->queries = NULL;
    writer_stop(srv->writer);
    srv->writer = NULL;
    if (ms.watchdog_on)
        uv_close((uv_handle_t *)&ms.watchdog, signal_close_cb);
    uv_close((uv_handle_t *)&ms.status, signal_close_cb);
    uv_close((uv_handle_t *)&ms.sigterm, signal_close_cb);
    uv_close((uv_handle_t *)&ms.sigint, signal_close_cb);
    uv_close((uv_handle_t *)&ms.sighup, signal_close_cb);
}

static void
stop_cb(uv_signal_t *h, int signum)
{
    struct relay *relay;

    (void)h;
    log_info("signal %d: draining", signum);
    notify_stopping();
    notify_status("draining: answering what was read, then exiting");
    ms.srv.drained_cb = drained_cb;
    /* Before the drain: no HTTP request may start a job after it. */
    http_stop(ms.http);
    ms.http = NULL;
    /* The relay's last acknowledged cursor is stored before the writer
     * stops (the drain waits for it). */
    relay = ms.srv.relay;
    ms.srv.relay = NULL;
    relay_stop(relay);
    server_drain(&ms.srv, DRAIN_GRACE_MS);
}

/* Pings systemd's watchdog only while the writer makes progress or has
 * nothing to do, so a stuck disk gets the daemon restarted. */
static void
watchdog_cb(uv_timer_t *t)
{
    struct writer_stats st;

    (void)t;
    if (ms.srv.writer == NULL)
        return;
    writer_get_stats(ms.srv.writer, &st);
    if (notify_watchdog_due(&ms.wd, st.groups + st.failures,
                            st.queued > 0 || ms.srv.pending_bytes > 0))
        notify_watchdog_ping();
}

/* Every 10 s: the ingest rate since the last line, the writer's queue, and
 * the store's health, for `systemctl status`. */
static void
status_cb(uv_timer_t *t)
{
    static uint64_t last_accepted, last_failures, last_ms, last_dropped;
    const struct server_counters *n = &ms.srv.n;
    struct writer_stats st;
    uint64_t now = uv_now(t->loop);
    double rate = 0;

    server_log_flush(&ms.srv);
    memset(&st, 0, sizeof(st));
    if (ms.srv.writer != NULL)
        writer_get_stats(ms.srv.writer, &st);
    if (last_ms != 0 && now > last_ms)
        rate = (double)(n->accepted - last_accepted) * 1000.0 /
               (double)(now - last_ms);
    /* Failing now, or a failure since the last line that a later commit
     * hid: the operator sees why first, since systemd keeps one short
     * line. */
    if (st.failing || st.failures > last_failures)
        notify_status("STORE FAILING: %s; writes answered unavailable, %llu "
                      "unavailable since start; %llu writes queued, %zu "
                      "connections",
                      st.last_error, (unsigned long long)n->unavailable,
                      (unsigned long long)st.queued, ms.srv.n_conns);
    else
        notify_status("%.0f receipts/s, %llu writes queued (%llu KiB), %zu "
                      "connections; store ok; %llu receipts stored, %llu "
                      "rejected, %llu duplicates, %llu unavailable since "
                      "start",
                      rate, (unsigned long long)st.queued,
                      (unsigned long long)(ms.srv.pending_bytes / 1024),
                      ms.srv.n_conns, (unsigned long long)n->accepted,
                      (unsigned long long)n->rejected,
                      (unsigned long long)n->duplicates,
                      (unsigned long long)n->unavailable);
    /* A node's relay, in a line of its own (the manager keeps the last). */
    if (ms.srv.relay != NULL && !st.failing && st.failures <= last_failures) {
        struct relay_stats rs;

        relay_get_stats(ms.srv.relay, &rs);
        notify_status("%.0f receipts/s, %zu connections; store ok; %llu "
                      "receipts stored since start; relay to %s %s: %llu "
                      "receipts (%llu KiB) waiting, oldest %llu s%s%s",
                      rate, ms.srv.n_conns, (unsigned long long)n->accepted,
                      rs.endpoint[0] ? rs.endpoint : "-",
                      rs.connected ? "connected" : "not connected",
                      (unsigned long long)rs.backlog_records,
                      (unsigned long long)(rs.backlog_bytes / 1024),
                      (unsigned long long)(rs.oldest_ms / 1000),
                      rs.error[0] ? "; " : "", rs.error);
    }
    /* Said once per 10 s at most: the manager may be stuck, and STATUS=
     * lines are dropped rather than block the loop. */
    if (notify_dropped() > last_dropped)
        log_warnx("the service manager is not reading its notify socket: "
                  "%llu notifications dropped since start",
                  (unsigned long long)notify_dropped());
    last_dropped = notify_dropped();
    last_accepted = n->accepted;
    last_failures = st.failures;
    last_ms = now;
}

/*
 * Listens on the sockets systemd passed, if any. Returns how many, and sets
 * *kinds to a mask of (1 << CONN_UNIX) and (1 << CONN_TCP) for the kinds it
 * passed, so the configured listeners of the other kinds are still bound.
 */
static size_t
adopt_listeners(unsigned *kinds)
{
    struct notify_fd fds[NOTIFY_FDS_MAX];
    char err[NOTIFY_ERR_MAX], lerr[LISTEN_ERR_MAX];
    size_t n = 0, i;
    int kind;

    *kinds = 0;
    if (notify_listen_fds(fds, NOTIFY_FDS_MAX, &n, err) != 0)
        fatalx("socket activation: %s", err);
    for (i = 0; i < n; i++) {
        struct listener *l;
        if (ms.srv.n_listeners ==
            sizeof(ms.srv.listeners) / sizeof(ms.srv.listeners[0]))
            fatalx("socket activation: more sockets than receiptd uses");
        kind = fds[i].kind == NOTIFY_FD_TCP ? CONN_TCP : CONN_UNIX;
        l = listen_adopt(&ms.srv, fds[i].fd, kind, lerr);
        if (l == NULL)
            fatalx("%s", lerr);
        ms.srv.listeners[ms.srv.n_listeners++] = l;
        *kinds |= 1u << kind;
    }
    return n;
}

/*
 * Applies the command-line flags to c (after the defaults and the file),
 * at start and again on every reload so that flags keep overriding the
 * file. Returns 0; -1 on an unknown flag or argument (getopt or this
 * function has said which); 1 on a value its key refuses, with
 * "--flag: reason" in err.
 */
static int
parse_flags(struct config *c, struct flags *f, char err[CONFIG_ERR_MAX])
{
    int argc = f->argc, ch;
    char **argv = f->argv;

    optind = 0;
    opterr = 1;
    while ((ch = getopt_long(argc, argv, "", options, NULL)) != -1) {
        if (ch >= OPT_KEY && ch < OPT_KEY + (int)config_n_keys) {
            if (config_set_flag(c, &config_keys[ch - OPT_KEY], optarg, err) !=
                0)
                return 1;
            continue;
        }
        if (ch >= OPT_ALIAS && ch < OPT_ALIAS + (int)config_n_keys) {
            if (config_set_alias(c, &config_keys[ch - OPT_ALIAS], optarg,
                                 err) != 0)
                return 1;
            continue;
        }
        switch (ch) {
        case OPT_CONFIG:
            break;
        case OPT_MAX_DB_PAGES:
            f->max_pages = num("max-db-pages", optarg, UINT32_MAX);
            break;
        case OPT_PRUNE_IDLE:
            f->prune_idle_ms = (uint32_t)num("prune-idle-ms", optarg, 3600000);
            break;
        case OPT_CHECK_CONFIG:
            f->check_only = 1;
            break;
        case OPT_PRINT:
            f->print = 1;
            break;
        case OPT_FOR_RELOAD:
            f->for_reload = 1;
            break;
        case OPT_HASH_TOKEN:
            f->hash_token = 1;
            break;
        default:
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "receiptd: unexpected argument \"%s\"\n", argv[optind]);
        return -1;
    }
    return 0;
}

static void
reapply_flags_cb(struct config *next, void *arg)
{
    struct flags f = *(struct flags *)arg;
    char err[CONFIG_ERR_MAX] = "";

    /* The same arguments parsed successfully at start, and a flag's value
     * is judged on its own, whatever the file says. */
    if (parse_flags(next, &f, err) != 0)
        log_warnx("reload: the command line no longer parses %s", err);
}

/* What store_migrating saw, for the line after the store opened. */
struct migrated {
    int from, to;
    uint64_t start_ms, logged_ms;
};

#define MIGRATING_LOG_EVERY_MS (30 * 1000)
#define MIGRATING_EXTEND_USEC  (30 * 1000000ull)

/*
 * The store is migrating (opts.migrating): building an index over a large
 * store takes minutes, so say so, every 30 s while it lasts, and keep
 * systemd's start timeout 30 s ahead as long as SQLite makes progress.
 */
static void
store_migrating(void *arg, int from, int to, uint64_t elapsed_ms)
{
    struct migrated *m = arg;

    if (m->to == 0) {
        m->from = from;
        m->to = to;
        m->start_ms = store_now_ms() - elapsed_ms;
        log_info("migrating the store from schema version %d to %d; on a "
                 "large store this can take minutes",
                 from, to);
    } else if (elapsed_ms >= m->logged_ms + MIGRATING_LOG_EVERY_MS) {
        m->logged_ms = elapsed_ms;
        log_info("still migrating the store (%" PRIu64 " s)",
                 elapsed_ms / 1000);
    }
    notify_extend_timeout(MIGRATING_EXTEND_USEC);
}

/*
 * Raises the descriptor limit to its hard maximum so that max_connections
 * fit. When descriptors still run out, libuv's reserve descriptor accepts
 * and closes the waiting peers (they see the connection end) instead of
 * spinning on accept(2); the warning here says the limit is too low.
 */
static void
raise_fd_limit(const struct config *c)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY &&
        (uint64_t)c->max_connections + 64 > (uint64_t)rl.rlim_cur)
        log_warnx("max_connections %lu does not fit the descriptor limit "
                  "%llu; connections beyond it will be refused",
                  (unsigned long)c->max_connections,
                  (unsigned long long)rl.rlim_cur);
}

/*
 * One daemon per database: two writers on one WAL can corrupt it with
 * Debian's SQLite 3.40 (docs/plan.md). Takes flock(LOCK_EX) on DB.lock,
 * beside the database, before the store is opened or migrated, and keeps
 * the descriptor for the life of the process (the kernel releases the lock
 * at exit, however the process ends). The lock file holds the owner's pid,
 * for the message a second instance prints (0644: a pid is no secret, and
 * a daemon run as another user can still lock it); it is left in place.
 */
static void
lock_store(const char *db)
{
    char path[4096], pid[32] = "";
    ssize_t n;
    int fd, writable = 1;

    if (snprintf(path, sizeof(path), "%s.lock", db) >= (int)sizeof(path))
        fatalx("store %s: the path is too long", db);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    /* A lock file this user may only read (another user made it) locks as
     * well; the store's own check then says whether it is writable. */
    if (fd < 0 && errno == EACCES &&
        (fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) >= 0)
        writable = 0;
    if (fd < 0)
        fatal("store %s: cannot open its lock file %s", db, path);
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK)
            fatal("store %s: cannot lock %s", db, path);
        n = pread(fd, pid, sizeof(pid) - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        fatalx("store %s is in use by another receiptd%s%s (it holds %s); "
               "one daemon per database",
               db, pid[0] != '\0' ? ", pid " : "", pid, path);
    }
    if (!writable)
        return;
    /* Through the umask of main() the file would be 0640; the pid is for
     * anyone who wonders why their daemon refused. */
    (void)fchmod(fd, 0644);
    n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n)
        log_warn("store %s: cannot write the pid into %s", db, path);
}

/* Hands the retention settings to the writer (at start and on reload). */
static void
apply_retention(const struct config *c)
{
    uint32_t idle = ms.flags.prune_idle_ms ? ms.flags.prune_idle_ms : 1000;

    writer_set_retention(ms.srv.writer, c->retention_max_age_s * 1000u,
                         c->prune_batch, idle);
}

/*
 * SIGHUP: re-reads the configuration file and applies, without a restart,
 * what can change at run time (limits, timeouts, access control, the log
 * level). Settings that need a restart keep their running values and are
 * named in the log. A file that does not load or validate changes nothing.
 */
static void
hup_cb(uv_signal_t *h, int signum)
{
    char err[CONFIG_ERR_MAX], restart[CONFIG_ERR_MAX];
    struct access_policy access;
    struct tls_ctx *tls;
    struct config *next;

    (void)h;
    (void)signum;
    if (ms.flags.config_file == NULL) {
        log_info("SIGHUP: no --config file to reload");
        return;
    }
    notify_reloading();
    next = calloc(1, sizeof(*next));
    if (next == NULL) {
        log_warnx("reload: out of memory; keeping the running configuration");
        notify_ready();
        return;
    }
    if (config_reload(ms.cfg, ms.flags.config_file, reapply_flags_cb, &ms.flags,
                      next, err, restart) != 0) {
        log_warnx("reload: %s; keeping the running configuration", err);
        free(next);
        notify_ready();
        return;
    }
    if (access_policy_init(&access, next, err) != 0) {
        log_warnx("reload: %s; keeping the running configuration", err);
        config_free(next);
        free(next);
        notify_ready();
        return;
    }
    /* A new certificate serves new connections; established ones keep
     * the context they were made with. */
    if (server_tls_load(next, &tls, err) != 0) {
        log_warnx("reload: %s; keeping the running configuration", err);
        access_policy_close(&access);
        config_free(next);
        free(next);
        notify_ready();
        return;
    }
    if (next->tcp_listen != NULL && (tls == NULL) != (ms.srv.tls == NULL))
        log_warnx("reload: the TCP listener now speaks %s to new "
                  "connections",
                  tls != NULL ? "TLS" : "plain text (listen.tcp_plaintext)");
    server_tls_set(&ms.srv, tls);
    if (restart[0] != '\0')
        log_warnx("reload: %s change only after a restart", restart);
    /* Connections read the limits through srv->cfg at each use; the
     * writer and the query pool are told. */
    access_policy_close(&ms.access);
    ms.access = access;
    server_tokens_reloaded(&ms.srv);
    ms.srv.cfg = next;
    config_free(ms.cfg);
    free(ms.cfg);
    ms.cfg = next;
    log_set_level(next->log_level);
    apply_retention(next);
    writer_set_limits(ms.srv.writer, next->commit_max_items,
                      next->commit_max_bytes);
    query_pool_set_timeout(ms.srv.queries, next->query_timeout_ms);
    http_set_stall(ms.http, next->health_stall_ms);
    log_info("configuration reloaded from %s", ms.flags.config_file);
    notify_ready();
}

/* For the exits before the daemon runs: frees cfg (ASan's leak check runs
 * the tests of --help and --check-config) and returns rc. */
static int
quit(struct config *cfg, int rc)
{
    config_free(cfg);
    free(cfg);
    return rc;
}

int
main(int argc, char **argv)
{
    struct store_opts sopts;
    const char *store_where;
    struct migrated migrated = { 0 };
    struct proto_err err;
    char cerr[CONFIG_ERR_MAX], lerr[LISTEN_ERR_MAX];
    struct tls_ctx *tls = NULL;
    struct config *cfg;
    uint64_t wd_usec;
    unsigned adopted;
    int ch, rc;
    uv_loop_t *loop;

    /* Before SQLite starts: without its memory statistics, which no
     * figure of ours reads, an allocation takes no process-wide mutex
     * (the writer, the readers and the relay thread allocate at once,
     * and the relay thread runs at a lower priority). */
    (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    cfg = calloc(1, sizeof(*cfg));
    if (cfg == NULL || config_defaults(cfg) != 0)
        fatalx("out of memory");
    ms.flags.argc = argc;
    ms.flags.argv = argv;
    options_init();
    /* First pass: only --config, --help and --version, so the file is
     * read before the flags that override it. */
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", options, NULL)) != -1) {
        if (ch == OPT_CONFIG)
            ms.flags.config_file = optarg;
        else if (ch == OPT_HELP) {
            usage(stdout);
            return quit(cfg, 0);
        } else if (ch == OPT_VERSION) {
            printf("receiptd %s\n", RECEIPTD_VERSION);
            return quit(cfg, 0);
        }
    }
    if (ms.flags.config_file != NULL &&
        config_load_file(cfg, ms.flags.config_file, cerr) != 0) {
        fprintf(stderr, "receiptd: %s\n", cerr);
        return quit(cfg, 1);
    }
    rc = parse_flags(cfg, &ms.flags, cerr);
    if (rc > 0) {
        fprintf(stderr, "receiptd: %s\n", cerr);
        return quit(cfg, 1);
    }
    if (rc < 0) {
        usage(stderr);
        return quit(cfg, 2);
    }
    if (ms.flags.hash_token) {
        rc = access_hash_token_stream(stdin, stdout, cerr);
        if (rc != 0)
            fprintf(stderr, "receiptd: %s\n", cerr);
        config_free(cfg);
        free(cfg);
        return rc != 0;
    }
    if (config_validate(cfg, cerr) != 0) {
        fprintf(stderr, "receiptd: %s\n", cerr);
        return quit(cfg, 1);
    }
    /* Group names resolve here, so --check-config catches unknown ones. */
    if (access_policy_init(&ms.access, cfg, cerr) != 0) {
        fprintf(stderr, "receiptd: %s\n", cerr);
        return quit(cfg, 1);
    }
    if ((ms.flags.print || ms.flags.for_reload) && !ms.flags.check_only) {
        fprintf(stderr, "receiptd: --%s goes with --check-config\n",
                ms.flags.print ? "print" : "for-reload");
        return quit(cfg, 2);
    }
    /* What start would refuse, refused before the store is created or
     * migrated; sockets systemd passes are its own to check. */
    if (config_preflight(cfg,
                         ms.flags.for_reload ? CONFIG_PREFLIGHT_RELOAD
                         : getenv("LISTEN_FDS") != NULL
                             ? CONFIG_PREFLIGHT_ADOPTED
                             : CONFIG_PREFLIGHT_START,
                         cerr) != 0) {
        fprintf(stderr, "receiptd: %s\n", cerr);
        access_policy_close(&ms.access);
        return quit(cfg, 1);
    }
    /* The certificate and key are read as start reads them. */
    if (server_tls_load(cfg, &tls, cerr) != 0) {
        fprintf(stderr, "receiptd: %s\n", cerr);
        access_policy_close(&ms.access);
        return quit(cfg, 1);
    }
    if (ms.flags.check_only) {
        tls_ctx_free(tls);
        if (ms.flags.print) {
            printf("# receiptd %s: the effective configuration\n",
                   RECEIPTD_VERSION);
            if (config_dump(cfg, stdout) != 0 || fflush(stdout) != 0) {
                access_policy_close(&ms.access);
                return quit(cfg, 1);
            }
            access_policy_close(&ms.access);
            config_free(cfg);
            free(cfg);
            return 0;
        }
        printf("receiptd: configuration OK\n");
        access_policy_close(&ms.access);
        config_free(cfg);
        free(cfg);
        return 0;
    }
    ms.cfg = cfg;
    log_set_level(cfg->log_level);
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit(cfg);

    loop = uv_default_loop();
    /* The store's files (database, -wal, -shm, the lock) are created
     * through the umask: 0640 at most whatever the caller's, since a
     * daemon run by hand lacks the unit's UMask=0077. */
    umask(umask(0) | 0027);
    /* PostgreSQL's store is shared by design (several central instances
     * on one database); an SQLite file has one daemon. */
    store_where = config_store_pg(cfg) ? cfg->pg_conninfo : cfg->db_path;
    if (!config_store_pg(cfg))
        lock_store(cfg->db_path);
    memset(&sopts, 0, sizeof(sopts));
    sopts.backend =
        config_store_pg(cfg) ? STORE_BACKEND_POSTGRESQL : STORE_BACKEND_SQLITE;
    sopts.max_pages = ms.flags.max_pages;
    sopts.quarantine_max_bytes = cfg->quarantine_max_bytes;
    sopts.chunk_receipts = cfg->chunk_receipts;
    sopts.rollup_chunks = cfg->rollup_chunks;
    sopts.sync_pipelined = !cfg->sync_in_commit;
    sopts.relay_drop = cfg->n_upstream > 0 && cfg->relay_retention != NULL &&
                       strcmp(cfg->relay_retention, "drop") == 0;
    sopts.relay_wait = cfg->n_upstream > 0 && !sopts.relay_drop;
    sopts.migrating = store_migrating;
    sopts.migrating_arg = &migrated;
    /* The writer's store publishes the rollup sums not merged yet there,
     * and the query pool's stores read them. */
    if ((sopts.shared = store_shared_new()) == NULL)
        fatalx("out of memory");
    proto_err_clear(&err);
    if (store_open(store_where, &sopts, &ms.store, &err) != 0)
        fatalx("store %s: %s",
               config_store_pg(cfg) ? "(PostgreSQL)" : cfg->db_path,
               err.message);
    if (migrated.to > 0)
        log_info("store migrated from schema version %d to %d in %.1f s",
                 migrated.from, migrated.to,
                 (double)(store_now_ms() - migrated.start_ms) / 1000.0);

    server_init(&ms.srv, loop, cfg);
    ms.srv.access = &ms.access;
    server_tls_set(&ms.srv, tls);
    if (cfg->tcp_listen != NULL && tls == NULL)
        log_warnx("listen.tcp %s speaks plain text (listen.tcp_plaintext): "
                  "tokens and receipts cross the network readable by anyone "
                  "on the path",
                  cfg->tcp_listen);
    if (writer_new(loop, ms.store, cfg->commit_max_items, cfg->commit_max_bytes,
                   server_delivery_cb, &ms.srv, &ms.srv.writer, &err) != 0)
        fatalx("writer: %s", err.message);
    apply_retention(cfg);
    if (query_pool_new(store_where, cfg->query_threads, cfg->query_timeout_ms,
                       &ms.srv.queries, &err) != 0)
        fatalx("queries: %s", err.message);
    query_pool_set_backend(ms.srv.queries, sopts.backend);
    query_pool_set_shared(ms.srv.queries, sopts.shared);
    store_shared_unref(sopts.shared);
    if (cfg->n_upstream > 0 && relay_start(loop, &ms.srv, cfg, &ms.srv.relay,
                                           lerr, LISTEN_ERR_MAX) != 0)
        fatalx("upstream: %s", lerr);

    /* The signals before any socket accepts: whoever finds one accepting
     * may stop the daemon at once, and a SIGTERM that came before the
     * handlers killed it without its drain (e2e_harden's teardown did,
     * once, under ASan). They wait for the loop to run. */
    uv_signal_init(loop, &ms.sigterm);
    uv_signal_init(loop, &ms.sigint);
    uv_signal_init(loop, &ms.sighup);
    uv_signal_start(&ms.sigterm, stop_cb, SIGTERM);
    uv_signal_start(&ms.sigint, stop_cb, SIGINT);
    uv_signal_start(&ms.sighup, hup_cb, SIGHUP);

    /* Sockets passed by systemd replace the configured ones of their kind;
     * a configured listener of a kind systemd did not pass is bound here,
     * so enabling TCP in the file works under socket activation too. */
    if (adopt_listeners(&adopted) > 0)
        log_info("using %zu listening sockets from systemd",
                 ms.srv.n_listeners);
    /* A TCP socket systemd passes speaks TLS or plain text as the file
     * says, like one bound here. */
    if ((adopted & (1u << CONN_TCP)) && tls == NULL && !cfg->tcp_plaintext)
        fatalx("the TCP socket from systemd needs TLS: set listen.tls_cert "
               "and listen.tls_key, or listen.tcp_plaintext = true");
    if ((adopted & (1u << CONN_TCP)) && tls == NULL && cfg->tcp_listen == NULL)
        log_warnx("the TCP socket from systemd speaks plain text "
                  "(listen.tcp_plaintext)");
    /* TCP and HTTP first: a client (or a test) that finds the Unix
     * socket accepting finds the other listeners ready too. An HTTP
     * listener bound last refused a test's /healthz, once, under ASan. */
    if (!(adopted & (1u << CONN_TCP)) && cfg->tcp_listen != NULL &&
        cfg->tcp_listen[0] != '\0') {
        ms.srv.listeners[ms.srv.n_listeners] =
            listen_tcp(&ms.srv, cfg->tcp_listen, lerr);
        if (ms.srv.listeners[ms.srv.n_listeners] == NULL)
            fatalx("%s", lerr);
        ms.srv.n_listeners++;
    }
    if (cfg->http_listen != NULL && cfg->http_listen[0] != '\0') {
        if (http_start(&ms.srv, cfg->http_listen, cfg->health_stall_ms,
                       &ms.http, lerr, LISTEN_ERR_MAX) != 0)
            fatalx("listen.http: %s", lerr);
        log_info("serving /metrics and /healthz on http://%s",
                 cfg->http_listen);
    }
    if (!(adopted & (1u << CONN_UNIX)) && cfg->socket_path != NULL &&
        cfg->socket_path[0] != '\0') {
        ms.srv.listeners[ms.srv.n_listeners] =
            listen_unix(&ms.srv, cfg->socket_path, cfg->socket_mode,
                        cfg->socket_group, lerr);
        if (ms.srv.listeners[ms.srv.n_listeners] == NULL)
            fatalx("%s", lerr);
        ms.srv.n_listeners++;
    }

    /* The store is open, migrated and writable, and the listeners are up:
     * only now may a supervisor send traffic. */
    notify_ready();
    notify_status("accepting receipts (schema %d)", store_schema_version());
    uv_timer_init(loop, &ms.status);
    uv_timer_start(&ms.status, status_cb, 10000, 10000);
    wd_usec = notify_watchdog_usec();
    if (wd_usec > 0) {
        notify_watchdog_init(&ms.wd);
        uv_timer_init(loop, &ms.watchdog);
        uv_timer_start(&ms.watchdog, watchdog_cb, wd_usec / 2000 + 1,
                       wd_usec / 2000 + 1);
        ms.watchdog_on = 1;
    }
    log_info("receiptd %s ready: socket %s, tcp %s, db %s", RECEIPTD_VERSION,
             cfg->socket_path ? cfg->socket_path : "-",
             cfg->tcp_listen ? cfg->tcp_listen : "-", store_path(ms.store));

    uv_run(loop, UV_RUN_DEFAULT);

    query_pool_free(ms.srv.queries);
    access_policy_close(&ms.access);
    server_tls_set(&ms.srv, NULL);
    rc = uv_loop_close(loop);
    if (rc != 0)
        log_warnx("event loop closed with live handles: %s", uv_strerror(rc));
    log_info("stopped");
    config_free(ms.cfg);
    free(ms.cfg);
    pool_drain();
    return 0;
}
