/*
 * check_config.c: the configuration file (daemon/config.c).
 *
 * Golden files in tests/data/config: every good/NAME.conf loaded over the
 * defaults must dump (config_dump) to exactly good/NAME.expected, and every
 * bad/NAME.conf must fail with exactly the message in bad/NAME.expected
 * (the directory part of the path is stripped before comparing).
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "config.h"

#define CONF_DIR     TEST_DATA_DIR "/config"
#define EXAMPLE_CONF TEST_DATA_DIR "/../../systemd/receiptd.conf"

static char *
slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    char *buf;
    long len;

    ck_assert_msg(f != NULL, "cannot open %s: %s", path, strerror(errno));
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    len = ftell(f);
    ck_assert_int_ge(len, 0);
    rewind(f);
    buf = malloc((size_t)len + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
    buf[len] = '\0';
    fclose(f);
    return buf;
}

static char *
dump(const struct config *c)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(config_dump(c, f), 0);
    fclose(f);
    return text;
}

/* The names (without .conf) of the golden files in dir, sorted. */
static int
conf_filter(const struct dirent *d)
{
    size_t n = strlen(d->d_name);

    return n > 5 && strcmp(d->d_name + n - 5, ".conf") == 0;
}

static struct dirent **
list_dir(const char *dir, int *n)
{
    struct dirent **names;

    *n = scandir(dir, &names, conf_filter, alphasort);
    ck_assert_msg(*n > 0, "no golden files in %s", dir);
    return names;
}

static int
count_dir(const char *dir)
{
    struct dirent **names;
    int i, n = scandir(dir, &names, conf_filter, alphasort);

    for (i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return n < 0 ? 0 : n;
}

static void
golden_path(char *out, size_t len, const char *dir, const char *conf,
            const char *ext)
{
    size_t stem = strlen(conf) - strlen(".conf");

    snprintf(out, len, "%s/%.*s%s", dir, (int)stem, conf, ext);
}

START_TEST(test_config_good_files_match_golden_dump)
{
    struct dirent **names;
    char conf[512], want_path[512], err[CONFIG_ERR_MAX] = "";
    struct config c;
    char *want, *got;
    int n, rc;

    names = list_dir(CONF_DIR "/good", &n);
    ck_assert_int_lt(_i, n);
    golden_path(conf, sizeof(conf), CONF_DIR "/good", names[_i]->d_name,
                ".conf");
    golden_path(want_path, sizeof(want_path), CONF_DIR "/good",
                names[_i]->d_name, ".expected");
    ck_assert_int_eq(config_defaults(&c), 0);
    rc = config_load_file(&c, conf, err);
    ck_assert_msg(rc == 0, "%s: %s", conf, err);
    got = dump(&c);
    want = slurp(want_path);
    ck_assert_msg(strcmp(got, want) == 0, "%s dumps as\n%s\nexpected\n%s", conf,
                  got, want);
    free(got);
    free(want);
    config_free(&c);
    for (rc = 0; rc < n; rc++)
        free(names[rc]);
    free(names);
}
END_TEST

START_TEST(test_config_bad_files_give_file_line_reason)
{
    struct dirent **names;
    char conf[512], want_path[512], err[CONFIG_ERR_MAX] = "";
    struct config c;
    char *want, *got, *nl;
    const char *base;
    int n, i;

    names = list_dir(CONF_DIR "/bad", &n);
    ck_assert_int_lt(_i, n);
    golden_path(conf, sizeof(conf), CONF_DIR "/bad", names[_i]->d_name,
                ".conf");
    golden_path(want_path, sizeof(want_path), CONF_DIR "/bad",
                names[_i]->d_name, ".expected");
    ck_assert_int_eq(config_defaults(&c), 0);
    ck_assert_msg(config_load_file(&c, conf, err) == -1, "%s was accepted",
                  conf);
    want = slurp(want_path);
    if ((nl = strchr(want, '\n')) != NULL)
        *nl = '\0';
    /* Messages name the file as it was given; compare from its base name
     * on, so the test does not depend on where the tree is. */
    base = err;
    if (strncmp(err, CONF_DIR "/bad/", strlen(CONF_DIR "/bad/")) == 0)
        base = err + strlen(CONF_DIR "/bad/");
    got = strdup(base);
    ck_assert_msg(strcmp(got, want) == 0, "%s:\n got: %s\nwant: %s", conf, got,
                  want);
    free(got);
    free(want);
    config_free(&c);
    for (i = 0; i < n; i++)
        free(names[i]);
    free(names);
}
END_TEST

START_TEST(test_config_load_failure_leaves_config_unchanged)
{
    char err[CONFIG_ERR_MAX] = "";
    struct config c;
    char *before, *after;

    ck_assert_int_eq(config_defaults(&c), 0);
    ck_assert_int_eq(config_load_file(&c, CONF_DIR "/good/full.conf", err), 0);
    before = dump(&c);
    /* Each of these fails after some keys were already applied to the
     * working copy (the bad key comes last), so a half-applied result
     * would show up in the dump. */
    ck_assert_int_eq(
        config_load_file(&c, CONF_DIR "/bad/token-same-hash.conf", err), -1);
    ck_assert_int_eq(
        config_load_file(&c, CONF_DIR "/bad/groups-twice.conf", err), -1);
    ck_assert_int_eq(
        config_load_file(&c, CONF_DIR "/bad/section-not-group.conf", err), -1);
    ck_assert_int_eq(
        config_load_file(&c, CONF_DIR "/bad/unknown-in-section.conf", err), -1);
    after = dump(&c);
    ck_assert_str_eq(after, before);
    free(before);
    free(after);
    config_free(&c);
}
END_TEST

START_TEST(test_config_load_overlays_only_keys_present)
{
    char err[CONFIG_ERR_MAX] = "";
    struct config c;

    ck_assert_int_eq(config_defaults(&c), 0);
    ck_assert_int_eq(config_load_file(&c, CONF_DIR "/good/full.conf", err), 0);
    ck_assert_uint_eq(c.n_tokens, 2);
    /* minimal.conf sets only the socket and the store path. */
    ck_assert_int_eq(config_load_file(&c, CONF_DIR "/good/minimal.conf", err),
                     0);
    ck_assert_uint_eq(c.max_frame, 2u << 20);
    ck_assert_uint_eq(c.n_tokens, 2);
    ck_assert_uint_eq(c.n_writer_groups, 2);
    ck_assert_str_eq(c.writer_groups[1], "inference");
    ck_assert_int_eq(c.log_level, LOG_DEBUG);
    ck_assert_uint_eq(c.retention_max_age_s, 90u * 86400u);
    ck_assert_uint_eq(c.hello_timeout_ms, 2000);
    ck_assert_uint_eq(c.socket_mode, 0660);
    config_free(&c);
}
END_TEST

START_TEST(test_config_dump_round_trips)
{
    char path[512], err[CONFIG_ERR_MAX] = "";
    struct config c, d;
    char *first, *second;
    FILE *f;

    ck_assert_int_eq(config_defaults(&c), 0);
    ck_assert_int_eq(config_load_file(&c, CONF_DIR "/good/units.conf", err), 0);
    first = dump(&c);
    snprintf(path, sizeof(path), "%s/check_config_roundtrip_%ld.conf",
             TEST_BINARY_DIR, (long)getpid());
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(first, f);
    fclose(f);
    ck_assert_int_eq(config_defaults(&d), 0);
    ck_assert_msg(config_load_file(&d, path, err) == 0, "%s", err);
    second = dump(&d);
    unlink(path);
    ck_assert_str_eq(second, first);
    ck_assert_uint_eq(d.max_frame, 64000);
    ck_assert_uint_eq(d.frame_timeout_ms, 250);
    ck_assert_uint_eq(d.max_unsent_bytes, 1000000000u);
    ck_assert_ptr_null(d.socket_path);
    free(first);
    free(second);
    config_free(&c);
    config_free(&d);
}
END_TEST

START_TEST(test_config_missing_file_names_errno)
{
    char err[CONFIG_ERR_MAX] = "";
    struct config c;

    ck_assert_int_eq(config_defaults(&c), 0);
    ck_assert_int_eq(config_load_file(&c, CONF_DIR "/no-such.conf", err), -1);
    ck_assert_str_eq(err, CONF_DIR "/no-such.conf: No such file or directory");
    config_free(&c);
}
END_TEST

START_TEST(test_config_shipped_example_is_valid_and_shows_defaults)
{
    char err[CONFIG_ERR_MAX] = "";
    struct config c, d;
    char *got, *want;

    /* The example installed as /etc/receiptd/receiptd.conf must load,
     * validate, and list every key at its built-in default (it sets only
     * the socket and the database path, which have none). */
    ck_assert_int_eq(config_defaults(&c), 0);
    ck_assert_msg(config_load_file(&c, EXAMPLE_CONF, err) == 0, "%s", err);
    ck_assert_msg(config_validate(&c, err) == 0, "%s", err);
    ck_assert_int_eq(config_defaults(&d), 0);
    d.socket_path = strdup("/run/receiptd/receiptd.sock");
    d.db_path = strdup("/var/lib/receiptd/receipts.db");
    got = dump(&c);
    want = dump(&d);
    ck_assert_str_eq(got, want);
    free(got);
    free(want);
    config_free(&c);
    config_free(&d);
}
END_TEST

static const struct size_case {
    const char *text;
    int ok;
    unsigned long long bytes;
} size_cases[] = {
    { "0", 1, 0 },
    { "4096", 1, 4096 },
    { "512B", 1, 512 },
    { "64MiB", 1, 64ull << 20 },
    { " 64 MiB ", 1, 64ull << 20 },
    { "1KiB", 1, 1024 },
    { "3GiB", 1, 3ull << 30 },
    { "2TiB", 1, 2ull << 40 },
    { "1kB", 1, 1000 },
    { "1KB", 1, 1000 },
    { "5MB", 1, 5000000 },
    { "7GB", 1, 7000000000ull },
    { "1TB", 1, 1000000000000ull },
    { "18446744073709551615", 1, 18446744073709551615ull },
    { "18446744073709551616", 0, 0 },
    { "16777216TiB", 0, 0 },
    { "", 0, 0 },
    { "MiB", 0, 0 },
    { "-1", 0, 0 },
    { "1.5MiB", 0, 0 },
    { "64Mb", 0, 0 },
    { "64mib", 0, 0 },
    { "64 MiB extra", 0, 0 },
    { "0x10", 0, 0 },
};

START_TEST(test_config_parse_size_table)
{
    const struct size_case *t = &size_cases[_i];
    uint64_t v = 12345;
    int rc = config_parse_size(t->text, &v);

    ck_assert_msg((rc == 0) == t->ok, "\"%s\": rc %d", t->text, rc);
    if (t->ok)
        ck_assert_msg(v == t->bytes, "\"%s\": %llu", t->text,
                      (unsigned long long)v);
    else
        ck_assert_msg(v == 12345, "\"%s\" wrote a value on failure", t->text);
}
END_TEST

static const struct duration_case {
    const char *text;
    int ok;
    unsigned long long ms;
} duration_cases[] = {
    { "10", 1, 10000 },
    { "0", 1, 0 },
    { "250ms", 1, 250 },
    { "10s", 1, 10000 },
    { "5m", 1, 300000 },
    { "5min", 1, 300000 },
    { "2h", 1, 7200000 },
    { "7d", 1, 604800000 },
    { "1w", 1, 604800000 },
    { "1h30m", 1, 5400000 },
    { "1h 30m 15s", 1, 5415000 },
    { "1s500ms", 1, 1500 },
    { "", 0, 0 },
    { "s", 0, 0 },
    { "10 sec", 0, 0 },
    { "1h30", 0, 0 },
    { "-5s", 0, 0 },
    { "1.5h", 0, 0 },
    { "99999999999999999999w", 0, 0 },
    { "30000000000000w", 0, 0 },
};

START_TEST(test_config_parse_duration_table)
{
    const struct duration_case *t = &duration_cases[_i];
    uint64_t v = 12345;
    int rc = config_parse_duration_ms(t->text, &v);

    ck_assert_msg((rc == 0) == t->ok, "\"%s\": rc %d", t->text, rc);
    if (t->ok)
        ck_assert_msg(v == t->ms, "\"%s\": %llu", t->text,
                      (unsigned long long)v);
    else
        ck_assert_msg(v == 12345, "\"%s\" wrote a value on failure", t->text);
}
END_TEST

/* Cross-field rules of config_validate, each case one change to a valid
 * configuration. */
static void
valid_base(struct config *c)
{
    ck_assert_int_eq(config_defaults(c), 0);
    c->socket_path = strdup("/run/receiptd/receiptd.sock");
    c->db_path = strdup("/var/lib/receiptd/receipts.db");
}

enum {
    V_OK,
    V_NO_LISTENER,
    V_NO_DB,
    V_FRAME_SMALL,
    V_FRAME_LARGE,
    V_BATCH_ZERO,
    V_CONN_ZERO,
    V_WORLD_MODE,
    V_TCP_NO_TOKEN,
    V_TCP_WITH_TOKEN,
    V_TCP_PLAIN_UNSAID,
    V_TLS_CERT_NO_KEY,
    V_TLS_CA_NO_CERT,
    V_TLS_REQUIRE_NO_CA,
    V_TLS_AND_PLAIN,
    V_TLS_WITH_TOKEN,
    V_QUARANTINE_SMALL,
    V_PENDING_SMALL,
    V_PG_NO_DB,
    V_BACKEND_BAD,
    V_PG_NO_CONNINFO,
    V_RELAY_RETENTION_BAD,
    V_RELAY_RETENTION_DROP,
    V_RELAY_PRIORITY_BAD,
    V_RELAY_PRIORITY_LOW,
    V_COUNT
};

static const char *const validate_want[V_COUNT] = {
    [V_OK] = "",
    [V_NO_LISTENER] =
        "listen.socket: no listener: set a Unix socket path or a TCP address",
    [V_NO_DB] = "store.path: no database path",
    [V_FRAME_SMALL] =
        "limits.max_frame: max_frame 63 is outside 64..67108864 bytes",
    [V_FRAME_LARGE] =
        "limits.max_frame: max_frame 67108865 is outside 64..67108864 bytes",
    [V_BATCH_ZERO] = "limits.max_batch: max_batch 0 is outside 1..1000000",
    [V_CONN_ZERO] =
        "limits.max_connections: max_connections must be at least 1",
    [V_WORLD_MODE] = "listen.socket_mode: socket mode 0666 gives access to "
                     "every local user",
    [V_TCP_NO_TOKEN] = "listen.tcp: TCP listener 0.0.0.0:7411 needs at least "
                       "one token in access.tokens",
    [V_TCP_WITH_TOKEN] = "",
    [V_TCP_PLAIN_UNSAID] =
        "listen.tcp: TCP listener 0.0.0.0:7411 needs TLS: set "
        "listen.tls_cert and listen.tls_key (--tls-cert, --tls-key), or "
        "listen.tcp_plaintext = true to send tokens and receipts in plain "
        "text",
    [V_TLS_CERT_NO_KEY] =
        "listen.tls_cert: listen.tls_cert and listen.tls_key go together",
    [V_TLS_CA_NO_CERT] = "listen.tls_client_ca: client certificates need "
                         "TLS: set listen.tls_cert and listen.tls_key",
    [V_TLS_REQUIRE_NO_CA] =
        "listen.tls_require_client_cert: requiring client certificates "
        "needs listen.tls_client_ca to verify them",
    [V_TLS_AND_PLAIN] = "listen.tcp_plaintext: listen.tcp_plaintext and "
                        "listen.tls_cert exclude each other",
    [V_TLS_WITH_TOKEN] = "",
    [V_QUARANTINE_SMALL] = "store.quarantine_max: store.quarantine_max "
                           "(1048576 bytes) is smaller than limits.max_frame "
                           "(2097152 bytes)",
    [V_PENDING_SMALL] = "limits.max_pending: limits.max_pending (1048576 "
                        "bytes) is smaller than limits.max_unsent (4194304 "
                        "bytes)",
    [V_PG_NO_DB] = "",
    [V_BACKEND_BAD] = "store.backend: \"mysql\" is not a store backend: "
                      "\"sqlite\" or \"postgresql\"",
    [V_PG_NO_CONNINFO] = "store.conninfo: the postgresql backend needs a "
                         "conninfo",
    [V_RELAY_RETENTION_BAD] = "store.relay_retention: \"keep\" is not a "
                              "relay retention: \"wait\" or \"drop\"",
    [V_RELAY_RETENTION_DROP] = "",
    [V_RELAY_PRIORITY_BAD] = "upstream.priority: \"nice\" is not a relay "
                             "priority: \"idle\", \"low\" or \"normal\"",
    [V_RELAY_PRIORITY_LOW] = "",
};

START_TEST(test_config_validate_cross_field_table)
{
    char err[CONFIG_ERR_MAX] = "";
    struct config c;
    int rc;

    valid_base(&c);
    switch (_i) {
    case V_NO_LISTENER:
        free(c.socket_path);
        c.socket_path = NULL;
        break;
    case V_NO_DB:
        free(c.db_path);
        c.db_path = strdup("");
        break;
    case V_PG_NO_DB: /* --pg alone: no SQLite path needed */
        free(c.db_path);
        c.db_path = strdup("");
        c.pg_conninfo = strdup("host=/run/postgresql dbname=receipts");
        break;
    case V_BACKEND_BAD:
        c.store_backend = strdup("mysql");
        break;
    case V_PG_NO_CONNINFO:
        c.store_backend = strdup("postgresql");
        break;
    case V_RELAY_RETENTION_BAD:
        c.relay_retention = strdup("keep");
        break;
    case V_RELAY_RETENTION_DROP:
        c.relay_retention = strdup("drop");
        break;
    case V_RELAY_PRIORITY_BAD:
        c.upstream_priority = strdup("nice");
        break;
    case V_RELAY_PRIORITY_LOW:
        c.upstream_priority = strdup("low");
        break;
    case V_FRAME_SMALL:
        c.max_frame = 63;
        break;
    case V_FRAME_LARGE:
        c.max_frame = (64u << 20) + 1;
        break;
    case V_BATCH_ZERO:
        c.max_batch = 0;
        break;
    case V_CONN_ZERO:
        c.max_connections = 0;
        break;
    case V_WORLD_MODE:
        c.socket_mode = 0666;
        break;
    case V_TCP_NO_TOKEN:
        c.tcp_listen = strdup("0.0.0.0:7411");
        break;
    case V_TCP_WITH_TOKEN:
    case V_TCP_PLAIN_UNSAID:
    case V_TLS_WITH_TOKEN:
        c.tcp_listen = strdup("0.0.0.0:7411");
        c.tokens = calloc(1, sizeof(*c.tokens));
        c.tokens[0].name = strdup("node");
        c.n_tokens = 1;
        c.tcp_plaintext = _i == V_TCP_WITH_TOKEN;
        if (_i == V_TLS_WITH_TOKEN) {
            c.tls_cert = strdup("server.pem");
            c.tls_key = strdup("server.key");
            c.tls_client_ca = strdup("clients.pem");
            c.tls_require_client_cert = 1;
        }
        break;
    case V_TLS_CERT_NO_KEY:
        c.tls_cert = strdup("server.pem");
        break;
    case V_TLS_CA_NO_CERT:
        c.tls_client_ca = strdup("clients.pem");
        break;
    case V_TLS_REQUIRE_NO_CA:
        c.tls_cert = strdup("server.pem");
        c.tls_key = strdup("server.key");
        c.tls_require_client_cert = 1;
        break;
    case V_TLS_AND_PLAIN:
        c.tls_cert = strdup("server.pem");
        c.tls_key = strdup("server.key");
        c.tcp_plaintext = 1;
        break;
    case V_QUARANTINE_SMALL:
        c.max_frame = 2u << 20;
        c.quarantine_max_bytes = 1u << 20;
        break;
    case V_PENDING_SMALL:
        c.max_pending_bytes = 1u << 20;
        break;
    }
    rc = config_validate(&c, err);
    if (validate_want[_i][0] == '\0') {
        ck_assert_msg(rc == 0, "case %d rejected: %s", _i, err);
    } else {
        ck_assert_int_eq(rc, -1);
        ck_assert_str_eq(err, validate_want[_i]);
    }
    config_free(&c);
}
END_TEST

static const struct config_key *key_by_flag(const char *flag);

/* A cross-field error names where the value at fault was set: the file's
 * line, or the flag that overrode it. */
START_TEST(test_config_validate_names_the_line_or_flag)
{
    char path[] = "/tmp/check-config-XXXXXX", err[CONFIG_ERR_MAX] = "",
         want[CONFIG_ERR_MAX];
    struct config c;
    FILE *f;
    int fd;

    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    f = fdopen(fd, "w");
    fputs("# receiptd\nlisten: {\n    socket = \"/run/r.sock\";\n"
          "    tcp = \"127.0.0.1:7411\";\n};\n"
          "store: { path = \"/var/lib/r.db\"; };\n"
          "limits: {\n    max_frame = \"4MiB\";\n};\n",
          f);
    fclose(f);
    ck_assert_int_eq(config_defaults(&c), 0);
    ck_assert_int_eq(config_load_file(&c, path, err), 0);
    ck_assert_int_eq(config_validate(&c, err), -1);
    snprintf(want, sizeof(want),
             "%s:4: listen.tcp: TCP listener 127.0.0.1:7411 needs at least "
             "one token in access.tokens",
             path);
    ck_assert_str_eq(err, want);
    free(c.tcp_listen);
    c.tcp_listen = NULL;
    /* quarantine_max keeps its default: the line that broke it is
     * max_frame's. */
    c.quarantine_max_bytes = 1u << 20;
    ck_assert_int_eq(config_validate(&c, err), -1);
    snprintf(want, sizeof(want), "%s:8: limits.max_frame: ", path);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
    ck_assert_int_eq(config_set_flag(&c, key_by_flag("max-frame"), "8MiB", err),
                     0);
    ck_assert_int_eq(config_validate(&c, err), -1);
    ck_assert_msg(strncmp(err, "--max-frame: ", 13) == 0, "%s", err);
    config_free(&c);
    unlink(path);
}
END_TEST

START_TEST(test_config_restart_needed_names_fixed_settings)
{
    char what[CONFIG_ERR_MAX] = "x";
    struct config a, b;

    valid_base(&a);
    ck_assert_int_eq(config_copy(&b, &a), 0);
    ck_assert_int_eq(config_restart_needed(&a, &b, what), 0);
    ck_assert_str_eq(what, "");
    /* Limits apply on reload; NULL and "" are the same "none". */
    b.max_frame = 4096;
    b.socket_group = strdup("");
    ck_assert_int_eq(config_restart_needed(&a, &b, what), 0);
    free(b.db_path);
    b.db_path = strdup("/elsewhere.db");
    b.tcp_listen = strdup("127.0.0.1:7411");
    b.query_threads = 8;
    b.chunk_receipts = 1024;
    ck_assert_int_eq(config_restart_needed(&a, &b, what), 4);
    ck_assert_str_eq(what, "listen.tcp, store.path, limits.query_threads, "
                           "store.chunk_receipts");
    config_free(&a);
    config_free(&b);
}
END_TEST

struct flags {
    uint32_t max_batch; /* 0 = not given */
};

static void
apply_flags_cb(struct config *c, void *arg)
{
    const struct flags *f = arg;

    if (f->max_batch != 0)
        c->max_batch = f->max_batch;
}

START_TEST(test_config_reload_keeps_flags_and_running_listeners)
{
    char err[CONFIG_ERR_MAX] = "", restart[CONFIG_ERR_MAX] = "x";
    struct flags flags = { 7 };
    struct config running, next;

    ck_assert_int_eq(config_defaults(&running), 0);
    ck_assert_int_eq(
        config_load_file(&running, CONF_DIR "/good/full.conf", err), 0);
    running.max_batch = 7;
    /* include.conf: the same socket and path, no TCP, a week's retention,
     * one writer group and no tokens. */
    ck_assert_msg(config_reload(&running, CONF_DIR "/good/include.conf",
                                apply_flags_cb, &flags, &next, err,
                                restart) == -1,
                  "accepted a TCP listener without tokens");
    /* The running TCP listener stays, and include.conf has no token for
     * it, so the reload must be refused as a whole. */
    ck_assert_str_eq(err, "listen.tcp: TCP listener 0.0.0.0:7411 needs at "
                          "least one token in access.tokens");
    ck_assert_ptr_null(next.db_path);

    free(running.tcp_listen);
    running.tcp_listen = NULL;
    running.query_threads = 3;
    ck_assert_msg(config_reload(&running, CONF_DIR "/good/include.conf",
                                apply_flags_cb, &flags, &next, err,
                                restart) == 0,
                  "%s", err);
    /* full.conf's chunk_receipts is 4096, include.conf's the default. */
    ck_assert_str_eq(restart, "listen.socket_group, limits.query_threads, "
                              "store.chunk_receipts, upstream.endpoints, "
                              "upstream.token_file, upstream.ca_file, "
                              "upstream.name, upstream.window, "
                              "upstream.priority, store.relay_retention");
    /* The relay runs as it started. */
    ck_assert_uint_eq(next.n_upstream, 2);
    ck_assert_str_eq(next.upstream_name, "node-17");
    ck_assert_uint_eq(next.upstream_window, 8);
    ck_assert_str_eq(next.upstream_priority, "low");
    ck_assert_str_eq(next.relay_retention, "drop");
    ck_assert_uint_eq(next.query_threads, 3);
    ck_assert_uint_eq(next.chunk_receipts, 4096);
    ck_assert_uint_eq(next.max_batch, 7);                /* the flag */
    ck_assert_uint_eq(next.max_frame, 1u << 20);         /* the default */
    ck_assert_uint_eq(next.retention_max_age_s, 604800); /* the file */
    ck_assert_uint_eq(next.n_writer_groups, 1);
    ck_assert_uint_eq(next.n_tokens, 0);
    ck_assert_str_eq(next.socket_group, "receiptd"); /* kept from running */
    config_free(&next);

    ck_assert_int_eq(config_reload(&running, CONF_DIR "/bad/syntax.conf", NULL,
                                   NULL, &next, err, restart),
                     -1);
    ck_assert_str_eq(err + strlen(err) - strlen("syntax.conf:3: syntax error"),
                     "syntax.conf:3: syntax error");
    config_free(&running);
}
END_TEST

START_TEST(test_config_copy_is_deep)
{
    char err[CONFIG_ERR_MAX] = "";
    struct config c, d;
    char *a, *b;

    ck_assert_int_eq(config_defaults(&c), 0);
    ck_assert_int_eq(config_load_file(&c, CONF_DIR "/good/full.conf", err), 0);
    ck_assert_int_eq(config_copy(&d, &c), 0);
    ck_assert_ptr_ne(d.socket_path, c.socket_path);
    ck_assert_ptr_ne(d.writer_groups, c.writer_groups);
    ck_assert_ptr_ne(d.writer_groups[0], c.writer_groups[0]);
    ck_assert_ptr_ne(d.tokens, c.tokens);
    ck_assert_ptr_ne(d.tokens[1].name, c.tokens[1].name);
    a = dump(&c);
    config_free(&c);
    /* d must survive c being freed (ASan would catch a shared pointer). */
    b = dump(&d);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    config_free(&d);
    config_free(NULL);
}
END_TEST

START_TEST(test_config_init_name_still_gives_defaults)
{
    struct config c;

    memset(&c, 0xa5, sizeof(c));
    /* The compatibility macro of config.h, for callers of the old name. */
    ck_assert_int_eq(config_init(&c), 0);
    ck_assert_uint_eq(c.max_frame, 1u << 20);
    ck_assert_uint_eq(c.socket_mode, 0660);
    ck_assert_ptr_null(c.socket_path);
    ck_assert_int_eq(c.log_level, LOG_INFO);
    config_free(&c);
}
END_TEST

/* ---- The key table: a flag and its file key accept the same values. ---- */

static const struct config_key *
key_by_flag(const char *flag)
{
    size_t i;

    for (i = 0; i < config_n_keys; i++)
        if (config_keys[i].flag != NULL &&
            strcmp(config_keys[i].flag, flag) == 0)
            return &config_keys[i];
    ck_abort_msg("no key has the flag --%s", flag);
    return NULL;
}

/* Loads a file holding only "k = literal;" over the defaults into c. */
static int
load_literal(const struct config_key *k, const char *literal, struct config *c,
             char err[CONFIG_ERR_MAX])
{
    char path[512];
    FILE *f;
    int rc;

    snprintf(path, sizeof(path), "%s/check_config_key_%ld.conf",
             TEST_BINARY_DIR, (long)getpid());
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    if (k->section != NULL)
        fprintf(f, "%s: {\n    %s = %s;\n};\n", k->section, k->name, literal);
    else
        fprintf(f, "%s = %s;\n", k->name, literal);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(config_defaults(c), 0);
    rc = config_load_file(c, path, err);
    unlink(path);
    return rc;
}

/* The reason of a refusal, after "--flag: " or "file:line: key: ". */
static const char *
reason(const struct config_key *k, const char *err)
{
    char prefix[128];
    const char *p;

    if (strncmp(err, "--", 2) == 0) {
        snprintf(prefix, sizeof(prefix), "--%s: ", k->flag);
        ck_assert_msg(strncmp(err, prefix, strlen(prefix)) == 0, "%s", err);
        return err + strlen(prefix);
    }
    snprintf(prefix, sizeof(prefix),
             "%s%s%s: ", k->section != NULL ? k->section : "",
             k->section != NULL ? "." : "", k->name);
    p = strstr(err, prefix);
    ck_assert_msg(p != NULL, "%s", err);
    return p + strlen(prefix);
}

/* One value as a flag and as the file spell it, and whether k takes it.
 * same_reason: both refusals must give the same reason (a range). */
struct spelling {
    char flag[4200];
    char file[4200];
    int ok;
    int same_reason;
};

#define SPELLINGS_MAX 48

static struct spelling spellings[SPELLINGS_MAX];
static size_t n_spellings;

static void
spell(const char *flag, const char *file, int ok, int same_reason)
{
    struct spelling *sp;

    ck_assert_uint_lt(n_spellings, SPELLINGS_MAX);
    sp = &spellings[n_spellings++];
    snprintf(sp->flag, sizeof(sp->flag), "%s", flag);
    snprintf(sp->file, sizeof(sp->file), "%s", file);
    sp->ok = ok;
    sp->same_reason = same_reason;
}

/* The same text for the flag and, quoted, for the file. */
static void
spell_text(const char *text, int ok)
{
    char quoted[4200];

    ck_assert_uint_lt(strlen(text) + 2, sizeof(quoted));
    quoted[0] = '"';
    memcpy(quoted + 1, text, strlen(text));
    memcpy(quoted + 1 + strlen(text), "\"", 2);
    spell(text, quoted, ok, 1);
}

static void
spell_long(char first, size_t len, int ok)
{
    char text[4100];

    ck_assert_uint_lt(len, sizeof(text));
    memset(text, 'a', len);
    text[0] = first;
    text[len] = '\0';
    spell_text(text, ok);
}

/* An integer literal as libconfig reads it whole (L past 32 bits). */
static void
int_literal(char *out, size_t len, unsigned long long v)
{
    snprintf(out, len, "%llu%s", v, v > 2147483647ull ? "L" : "");
}

/* A number v of k (in the member's unit) in every spelling both take. */
static void
spell_number(const struct config_key *k, unsigned long long v)
{
    int ok = (v >= k->min && v <= k->max) || (v == 0 && k->zero_ok);
    char flag[64], file[64];

    switch (k->kind) {
    case CONFIG_KIND_COUNT:
        snprintf(flag, sizeof(flag), "%llu", v);
        int_literal(file, sizeof(file), v);
        spell(flag, file, ok, 1);
        break;
    case CONFIG_KIND_SIZE:
        snprintf(flag, sizeof(flag), "%llu", v);
        int_literal(file, sizeof(file), v);
        spell(flag, file, ok, 1);
        snprintf(flag, sizeof(flag), "%lluB", v);
        snprintf(file, sizeof(file), "\"%lluB\"", v);
        spell(flag, file, ok, 1);
        break;
    case CONFIG_KIND_MSEC:
        /* A flag reads a duration as the file does: a plain number is
         * seconds (the alias's milliseconds are checked on their own). */
        snprintf(flag, sizeof(flag), "%llums", v);
        snprintf(file, sizeof(file), "\"%llums\"", v);
        spell(flag, file, ok, 1);
        if (v % 1000 == 0) {
            snprintf(flag, sizeof(flag), "%llu", v / 1000);
            int_literal(file, sizeof(file), v / 1000);
            spell(flag, file, ok, 1);
        }
        break;
    case CONFIG_KIND_SEC:
        snprintf(flag, sizeof(flag), "%llus", v);
        snprintf(file, sizeof(file), "\"%llus\"", v);
        spell(flag, file, ok, 1);
        /* Plain numbers have a rule of their own (below), the same for
         * the flag and the file. */
        snprintf(flag, sizeof(flag), "%llu", v);
        int_literal(file, sizeof(file), v);
        spell(flag, file, ok && (v == 0 || v >= k->plain_min), 1);
        break;
    default:
        ck_abort_msg("%s is not a number", k->name);
    }
}

/* The cases of key k: its range's edges, 0 and bad spellings for numbers;
 * good and bad values for the others. */
static void
spell_key(const struct config_key *k)
{
    n_spellings = 0;
    switch (k->kind) {
    case CONFIG_KIND_COUNT:
    case CONFIG_KIND_SIZE:
    case CONFIG_KIND_MSEC:
    case CONFIG_KIND_SEC:
        spell_number(k, 0);
        if (k->min > 1)
            spell_number(k, k->min - 1);
        spell_number(k, k->min);
        spell_number(k, k->max);
        spell_number(k, k->max + 1);
        spell("-1", "-1", 0, 0);
        spell("1.5", "1.5", 0, 0);
        spell("", "\"\"", 0, 0);
        spell("10Mb", "\"10Mb\"", 0, 0);
        spell("10 sec", "\"10 sec\"", 0, 0);
        spell("99999999999999999999", "\"99999999999999999999\"", 0, 0);
        if (k->kind == CONFIG_KIND_SEC)
            spell("1500ms", "\"1500ms\"", 0, 1);
        break;
    case CONFIG_KIND_MODE:
        spell_text("0660", 1);
        spell_text("0770", 1);
        spell_text("0600", 1);
        spell_text("660", 1);
        spell_text("0666", 0);
        spell_text("0661", 0);
        spell_text("0060", 0);
        spell_text("0680", 0);
        spell_text("07777", 0);
        spell_text("", 0);
        break;
    case CONFIG_KIND_SOCKET:
        spell_text("", 1);
        spell_text("/run/receiptd/receiptd.sock", 1);
        spell_text("receiptd.sock", 0);
        spell_long('/', 107, 1);
        spell_long('/', 108, 0);
        break;
    case CONFIG_KIND_PATH:
        spell_text("", 1);
        spell_text("/var/lib/receiptd/receipts.db", 1);
        spell_text("receipts.db", 1);
        spell_long('/', 4096, 1);
        spell_long('/', 4097, 0);
        break;
    case CONFIG_KIND_TCP:
        spell_text("", 1);
        spell_text("127.0.0.1:7411", 1);
        spell_text("[::1]:7411", 1);
        spell_text("127.0.0.1:65535", 1);
        /* Host names are not resolved: start would refuse them. */
        spell_text("host:65535", 0);
        spell_text("[::1x]:7411", 0);
        spell_text("::1:7411", 0);
        spell_text("localhost", 0);
        spell_text("host:0", 0);
        spell_text("host:65536", 0);
        break;
    case CONFIG_KIND_STRING:
        spell_text("", 1);
        spell_text("receiptd", 1);
        spell_long('g', 256, 1);
        spell_long('g', 257, 0);
        break;
    case CONFIG_KIND_LOGLEVEL:
        spell_text("err", 1);
        spell_text("error", 1);
        spell_text("warning", 1);
        spell_text("warn", 1);
        spell_text("notice", 1);
        spell_text("info", 1);
        spell_text("debug", 1);
        spell_text("verbose", 0);
        spell_text("ERR", 0);
        spell_text("", 0);
        break;
    case CONFIG_KIND_BOOL:
        spell("true", "true", 1, 1);
        spell("false", "false", 1, 1);
        spell("yes", "\"yes\"", 0, 0);
        spell("1", "1", 0, 0);
        spell("", "\"\"", 0, 0);
        break;
    case CONFIG_KIND_ENDPOINTS:
        /* A list in the file, one value a flag (which repeats). */
        spell("", "[ ]", 1, 1);
        spell("127.0.0.1:7411", "[ \"127.0.0.1:7411\" ]", 1, 1);
        spell("[::1]:7411", "[ \"[::1]:7411\" ]", 1, 1);
        spell("center-1.example:7411", "[ \"center-1.example:7411\" ]", 1, 1);
        spell("host:0", "[ \"host:0\" ]", 0, 0);
        spell("host:65536", "[ \"host:65536\" ]", 0, 0);
        spell("a b:7411", "[ \"a b:7411\" ]", 0, 0);
        spell("localhost", "[ \"localhost\" ]", 0, 0);
        spell("[::1x]:7411", "[ \"[::1x]:7411\" ]", 0, 0);
        break;
    case CONFIG_KIND_GROUPS:
    case CONFIG_KIND_TOKENS:
        break;
    }
}

START_TEST(test_config_flag_and_file_key_accept_the_same_values)
{
    const struct config_key *k = &config_keys[_i];
    char ferr[CONFIG_ERR_MAX], lerr[CONFIG_ERR_MAX];
    struct config a, b;
    size_t i;

    if (k->flag == NULL) {
        /* Lists have no single-value flag. */
        ck_assert(k->kind == CONFIG_KIND_GROUPS ||
                  k->kind == CONFIG_KIND_TOKENS);
        return;
    }
    spell_key(k);
    ck_assert_uint_gt(n_spellings, 0);
    for (i = 0; i < n_spellings; i++) {
        const struct spelling *sp = &spellings[i];
        int rf, rl;

        ferr[0] = lerr[0] = '\0';
        ck_assert_int_eq(config_defaults(&a), 0);
        rf = config_set_flag(&a, k, sp->flag, ferr);
        rl = load_literal(k, sp->file, &b, lerr);
        ck_assert_msg((rf == 0) == sp->ok, "--%s \"%s\": %s", k->flag, sp->flag,
                      rf == 0 ? "accepted" : ferr);
        ck_assert_msg((rl == 0) == sp->ok, "%s = %s: %s", k->name, sp->file,
                      rl == 0 ? "accepted" : lerr);
        if (sp->ok) {
            char *da = dump(&a), *db = dump(&b);

            ck_assert_msg(strcmp(da, db) == 0,
                          "--%s \"%s\" gives\n%s\nbut %s = %s gives\n%s",
                          k->flag, sp->flag, da, k->name, sp->file, db);
            free(da);
            free(db);
        } else if (sp->same_reason) {
            ck_assert_str_eq(reason(k, ferr), reason(k, lerr));
        }
        config_free(&a);
        config_free(&b);
    }
}
END_TEST

START_TEST(test_config_key_table_is_complete_and_consistent)
{
    struct config d;
    size_t i, j;

    ck_assert_int_eq(config_defaults(&d), 0);
    for (i = 0; i < config_n_keys; i++) {
        const struct config_key *k = &config_keys[i];
        int number = k->kind == CONFIG_KIND_COUNT ||
                     k->kind == CONFIG_KIND_SIZE ||
                     k->kind == CONFIG_KIND_MSEC || k->kind == CONFIG_KIND_SEC;
        size_t n = k->flag != NULL ? strlen(k->flag) : 0;

        if (k->kind != CONFIG_KIND_GROUPS && k->kind != CONFIG_KIND_TOKENS)
            ck_assert_msg(k->flag != NULL && k->arg != NULL && k->help != NULL,
                          "%s has no flag, argument or help", k->name);
        for (j = 0; j < i; j++) {
            ck_assert_msg(k->flag == NULL || config_keys[j].flag == NULL ||
                              strcmp(k->flag, config_keys[j].flag) != 0,
                          "--%s twice", k->flag);
            ck_assert_msg(
                !(strcmp(k->name, config_keys[j].name) == 0 &&
                  ((k->section == NULL && config_keys[j].section == NULL) ||
                   (k->section != NULL && config_keys[j].section != NULL &&
                    strcmp(k->section, config_keys[j].section) == 0))),
                "%s twice", k->name);
        }
        /* A duration flag reads plain numbers as seconds, as the file
         * does; only its older name (alias) says another unit. */
        if (k->kind == CONFIG_KIND_MSEC) {
            ck_assert_msg(!(n > 3 && strcmp(k->flag + n - 3, "-ms") == 0),
                          "--%s", k->flag);
            ck_assert_msg(
                k->alias == NULL ||
                    (strlen(k->alias) > 3 &&
                     strcmp(k->alias + strlen(k->alias) - 3, "-ms") == 0),
                "--%s", k->alias);
        }
        if (k->kind == CONFIG_KIND_SEC)
            ck_assert_msg(
                k->alias == NULL ||
                    (strlen(k->alias) > 2 &&
                     strcmp(k->alias + strlen(k->alias) - 2, "-s") == 0),
                "--%s", k->alias);
        if (k->plain_min != 0)
            ck_assert_int_eq(k->kind, CONFIG_KIND_SEC);
        if (number) {
            uint64_t v = 0;

            ck_assert_uint_le(k->min, k->max);
            ck_assert_msg(k->width == 8 || k->max <= UINT32_MAX,
                          "%s: max does not fit its member", k->name);
            memcpy(&v, (const char *)&d + k->off, k->width);
            if (k->width == 4) {
                uint32_t v32;

                memcpy(&v32, (const char *)&d + k->off, 4);
                v = v32;
            }
            ck_assert_msg((v >= k->min && v <= k->max) ||
                              (v == 0 && k->zero_ok),
                          "%s: the default is out of range", k->name);
        }
    }
    config_free(&d);
}
END_TEST

/* Issue 13: the file refused max_unsent = 0, the flag took it. */
START_TEST(test_config_flag_max_unsent_zero_is_refused_like_the_file)
{
    const struct config_key *k = key_by_flag("max-unsent-bytes");
    char err[CONFIG_ERR_MAX] = "";
    struct config c;

    ck_assert_int_eq(config_defaults(&c), 0);
    ck_assert_int_eq(config_set_flag(&c, k, "0", err), -1);
    ck_assert_str_eq(err, "--max-unsent-bytes: out of range: must be 4KiB to "
                          "1GiB");
    ck_assert_uint_eq(c.max_unsent_bytes, 4u << 20);
    ck_assert_int_eq(config_set_flag(&c, k, "4096", err), 0);
    ck_assert_uint_eq(c.max_unsent_bytes, 4096);
    config_free(&c);
    ck_assert_int_eq(load_literal(k, "0", &c, err), -1);
    ck_assert_str_eq(reason(k, err), "out of range: must be 4KiB to 1GiB");
    config_free(&c);
}
END_TEST

/* Issue 13: the file refused query_timeout = 0, the flag took it. */
START_TEST(test_config_flag_query_timeout_zero_is_refused_like_the_file)
{
    const struct config_key *k = key_by_flag("query-timeout");
    char err[CONFIG_ERR_MAX] = "";
    struct config c;

    ck_assert_int_eq(config_defaults(&c), 0);
    ck_assert_int_eq(config_set_flag(&c, k, "0", err), -1);
    ck_assert_str_eq(err, "--query-timeout: out of range: must be 1ms to "
                          "1h");
    ck_assert_int_eq(config_set_alias(&c, k, "0", err), -1);
    ck_assert_str_eq(err, "--query-timeout-ms: out of range: must be 1ms to "
                          "1h");
    ck_assert_int_eq(config_set_alias(&c, k, "1", err), 0);
    ck_assert_uint_eq(c.query_timeout_ms, 1);
    ck_assert_int_eq(config_set_flag(&c, k, "1", err), 0);
    ck_assert_uint_eq(c.query_timeout_ms, 1000);
    config_free(&c);
    ck_assert_int_eq(load_literal(k, "0", &c, err), -1);
    ck_assert_str_eq(reason(k, err), "out of range: must be 1ms to 1h");
    ck_assert_int_eq(load_literal(k, "\"1ms\"", &c, err), 0);
    ck_assert_uint_eq(c.query_timeout_ms, 1);
    config_free(&c);
}
END_TEST

/* Issue 13: the file took log_level = "err", the flag only "error". */
START_TEST(test_config_flag_log_level_takes_the_file_names)
{
    static const struct {
        const char *name;
        int level;
    } names[] = {
        { "err", LOG_ERR },         { "error", LOG_ERR },
        { "warning", LOG_WARNING }, { "warn", LOG_WARNING },
        { "notice", LOG_NOTICE },   { "info", LOG_INFO },
        { "debug", LOG_DEBUG },
    };
    const struct config_key *k = key_by_flag("log-level");
    char err[CONFIG_ERR_MAX] = "", literal[32];
    struct config c;
    size_t i;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        ck_assert_int_eq(config_defaults(&c), 0);
        ck_assert_msg(config_set_flag(&c, k, names[i].name, err) == 0, "%s",
                      err);
        ck_assert_int_eq(c.log_level, names[i].level);
        config_free(&c);
        snprintf(literal, sizeof(literal), "\"%s\"", names[i].name);
        ck_assert_msg(load_literal(k, literal, &c, err) == 0, "%s", err);
        ck_assert_int_eq(c.log_level, names[i].level);
        config_free(&c);
    }
    ck_assert_int_eq(config_defaults(&c), 0);
    ck_assert_int_eq(config_set_flag(&c, k, "verbose", err), -1);
    ck_assert_str_eq(err, "--log-level: expected one of \"err\", \"warning\", "
                          "\"notice\", \"info\", \"debug\"");
    ck_assert_int_eq(c.log_level, LOG_INFO);
    config_free(&c);
}
END_TEST

/* Issue 13: --prune-batch took 0 to 10000, prune_batch 1 to 1000000; the
 * writer caps a batch at 10000 anyway. */
START_TEST(test_config_prune_batch_has_one_range)
{
    const struct config_key *k = key_by_flag("prune-batch");
    char err[CONFIG_ERR_MAX] = "";
    struct config c;

    ck_assert_ptr_eq(k, key_by_flag("prune-batch"));
    ck_assert_str_eq(k->name, "prune_batch");
    ck_assert_int_eq(config_defaults(&c), 0);
    ck_assert_int_eq(config_set_flag(&c, k, "0", err), -1);
    ck_assert_str_eq(err, "--prune-batch: out of range: must be 1 to 10000");
    ck_assert_int_eq(config_set_flag(&c, k, "10001", err), -1);
    ck_assert_int_eq(config_set_flag(&c, k, "10000", err), 0);
    ck_assert_uint_eq(c.prune_batch, 10000);
    config_free(&c);
    ck_assert_int_eq(load_literal(k, "0", &c, err), -1);
    ck_assert_int_eq(load_literal(k, "20000", &c, err), -1);
    ck_assert_str_eq(reason(k, err), "out of range: must be 1 to 10000");
    ck_assert_int_eq(load_literal(k, "10000", &c, err), 0);
    ck_assert_uint_eq(c.prune_batch, 10000);
    config_free(&c);
}
END_TEST

/* A retention under an hour needs its unit in the file ("7" is a likely
 * slip for days); the flag's name gives it. */
START_TEST(test_config_retention_plain_number_needs_an_hour_in_the_file)
{
    const struct config_key *k = key_by_flag("retention");
    char err[CONFIG_ERR_MAX] = "";
    struct config c;

    ck_assert_int_eq(load_literal(k, "7", &c, err), -1);
    ck_assert_int_eq(load_literal(k, "\"7\"", &c, err), -1);
    ck_assert_str_eq(reason(k, err),
                     "7 without a unit is seconds: must be 0 (off) or at "
                     "least 1h; write \"7s\" if that is meant");
    ck_assert_int_eq(load_literal(k, "\"7s\"", &c, err), 0);
    ck_assert_uint_eq(c.retention_max_age_s, 7);
    ck_assert_int_eq(load_literal(k, "3600", &c, err), 0);
    ck_assert_uint_eq(c.retention_max_age_s, 3600);
    ck_assert_int_eq(load_literal(k, "0", &c, err), 0);
    ck_assert_uint_eq(c.retention_max_age_s, 0);
    config_free(&c);
    ck_assert_int_eq(config_defaults(&c), 0);
    /* The flag reads what the file does; its old name gives the unit. */
    ck_assert_int_eq(config_set_flag(&c, k, "7", err), -1);
    ck_assert_int_eq(config_set_alias(&c, k, "7", err), 0);
    ck_assert_uint_eq(c.retention_max_age_s, 7);
    ck_assert_int_eq(config_set_flag(&c, k, "7d", err), 0);
    ck_assert_uint_eq(c.retention_max_age_s, 7 * 86400);
    config_free(&c);
}
END_TEST

START_TEST(test_config_flags_take_units_and_keep_c_on_failure)
{
    char err[CONFIG_ERR_MAX] = "";
    struct config c;

    ck_assert_int_eq(config_defaults(&c), 0);
    ck_assert_int_eq(config_set_flag(&c, key_by_flag("max-frame"), "2MiB", err),
                     0);
    ck_assert_uint_eq(c.max_frame, 2u << 20);
    ck_assert_int_eq(
        config_set_alias(&c, key_by_flag("idle-timeout"), "500", err), 0);
    ck_assert_uint_eq(c.idle_timeout_ms, 500);
    ck_assert_int_eq(
        config_set_flag(&c, key_by_flag("idle-timeout"), "500ms", err), 0);
    ck_assert_uint_eq(c.idle_timeout_ms, 500);
    ck_assert_int_eq(
        config_set_flag(&c, key_by_flag("idle-timeout"), "5m", err), 0);
    ck_assert_uint_eq(c.idle_timeout_ms, 300000);
    ck_assert_int_eq(
        config_set_flag(&c, key_by_flag("idle-timeout"), "1m30s", err), 0);
    ck_assert_uint_eq(c.idle_timeout_ms, 90000);
    ck_assert_int_eq(
        config_set_alias(&c, key_by_flag("idle-timeout"), "1h30", err), -1);
    ck_assert_str_eq(err, "--idle-timeout-ms: \"1h30\" is not a duration: "
                          "write milliseconds as an integer or numbers with "
                          "units (ms, s, m, h, d, w), e.g. \"10s\", \"7d\", "
                          "\"1h30m\"");
    ck_assert_uint_eq(c.idle_timeout_ms, 90000);
    ck_assert_int_eq(
        config_set_flag(&c, key_by_flag("socket"), "/run/r.sock", err), 0);
    ck_assert_int_eq(config_set_flag(&c, key_by_flag("socket"), "r.sock", err),
                     -1);
    ck_assert_str_eq(err, "--socket: must be an absolute path, got \"r.sock\"");
    ck_assert_str_eq(c.socket_path, "/run/r.sock");
    ck_assert_int_eq(config_set_flag(&c, key_by_flag("socket"), "", err), 0);
    ck_assert_ptr_null(c.socket_path);
    ck_assert_int_eq(
        config_set_flag(&c, key_by_flag("socket-mode"), "0060", err), -1);
    ck_assert_str_eq(err, "--socket-mode: 0060 must let the daemon's own user "
                          "read and write");
    ck_assert_uint_eq(c.socket_mode, 0660);
    config_free(&c);
}
END_TEST

START_TEST(test_config_key_describe_shows_key_default_and_range)
{
    char buf[CONFIG_ERR_MAX];
    struct config c;

    ck_assert_int_eq(config_defaults(&c), 0);
    config_key_describe(key_by_flag("max-unsent-bytes"), &c, buf, sizeof(buf));
    ck_assert_str_eq(buf, "limits.max_unsent = 4MiB; 4KiB to 1GiB");
    config_key_describe(key_by_flag("idle-timeout"), &c, buf, sizeof(buf));
    ck_assert_str_eq(buf, "limits.idle_timeout = 5m; 0 = off, or 100ms to 1w");
    config_key_describe(key_by_flag("socket"), &c, buf, sizeof(buf));
    ck_assert_str_eq(buf, "listen.socket");
    config_key_describe(key_by_flag("log-level"), &c, buf, sizeof(buf));
    ck_assert_str_eq(buf, "log_level = info");
    config_key_describe(key_by_flag("socket-mode"), &c, buf, sizeof(buf));
    ck_assert_str_eq(buf, "listen.socket_mode = 0660");
    config_free(&c);
}
END_TEST

static Suite *
config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc;

    tc = tcase_create("good_files");
    tcase_add_loop_test(tc, test_config_good_files_match_golden_dump, 0,
                        count_dir(CONF_DIR "/good"));
    suite_add_tcase(s, tc);

    tc = tcase_create("bad_files");
    tcase_add_loop_test(tc, test_config_bad_files_give_file_line_reason, 0,
                        count_dir(CONF_DIR "/bad"));
    suite_add_tcase(s, tc);

    tc = tcase_create("failure_keeps_config");
    tcase_add_test(tc, test_config_load_failure_leaves_config_unchanged);
    suite_add_tcase(s, tc);

    tc = tcase_create("overlay");
    tcase_add_test(tc, test_config_load_overlays_only_keys_present);
    suite_add_tcase(s, tc);

    tc = tcase_create("round_trip");
    tcase_add_test(tc, test_config_dump_round_trips);
    suite_add_tcase(s, tc);

    tc = tcase_create("missing_file");
    tcase_add_test(tc, test_config_missing_file_names_errno);
    suite_add_tcase(s, tc);

    tc = tcase_create("shipped_example");
    tcase_add_test(tc, test_config_shipped_example_is_valid_and_shows_defaults);
    suite_add_tcase(s, tc);

    tc = tcase_create("sizes");
    tcase_add_loop_test(tc, test_config_parse_size_table, 0,
                        sizeof(size_cases) / sizeof(size_cases[0]));
    suite_add_tcase(s, tc);

    tc = tcase_create("durations");
    tcase_add_loop_test(tc, test_config_parse_duration_table, 0,
                        sizeof(duration_cases) / sizeof(duration_cases[0]));
    suite_add_tcase(s, tc);

    tc = tcase_create("validate");
    tcase_add_loop_test(tc, test_config_validate_cross_field_table, 0, V_COUNT);
    tcase_add_test(tc, test_config_validate_names_the_line_or_flag);
    suite_add_tcase(s, tc);

    tc = tcase_create("restart_needed");
    tcase_add_test(tc, test_config_restart_needed_names_fixed_settings);
    suite_add_tcase(s, tc);

    tc = tcase_create("reload");
    tcase_add_test(tc, test_config_reload_keeps_flags_and_running_listeners);
    suite_add_tcase(s, tc);

    tc = tcase_create("copy");
    tcase_add_test(tc, test_config_copy_is_deep);
    suite_add_tcase(s, tc);

    tc = tcase_create("flag_and_file");
    tcase_add_loop_test(tc,
                        test_config_flag_and_file_key_accept_the_same_values, 0,
                        (int)config_n_keys);
    suite_add_tcase(s, tc);

    tc = tcase_create("key_table");
    tcase_add_test(tc, test_config_key_table_is_complete_and_consistent);
    suite_add_tcase(s, tc);

    tc = tcase_create("issue13_flags");
    tcase_add_test(tc,
                   test_config_flag_max_unsent_zero_is_refused_like_the_file);
    tcase_add_test(
        tc, test_config_flag_query_timeout_zero_is_refused_like_the_file);
    tcase_add_test(tc, test_config_flag_log_level_takes_the_file_names);
    tcase_add_test(tc, test_config_prune_batch_has_one_range);
    suite_add_tcase(s, tc);

    tc = tcase_create("retention_plain");
    tcase_add_test(
        tc, test_config_retention_plain_number_needs_an_hour_in_the_file);
    suite_add_tcase(s, tc);

    tc = tcase_create("flag_units");
    tcase_add_test(tc, test_config_flags_take_units_and_keep_c_on_failure);
    suite_add_tcase(s, tc);

    tc = tcase_create("describe");
    tcase_add_test(tc, test_config_key_describe_shows_key_default_and_range);
    suite_add_tcase(s, tc);

    tc = tcase_create("compat_name");
    tcase_add_test(tc, test_config_init_name_still_gives_defaults);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(config_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
