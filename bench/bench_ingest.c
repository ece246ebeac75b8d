/*
 * bench_ingest.c: durable ingest through receiptd against a bare append
 * and PostgreSQL COPY, all measured in one run (issue 11).
 *
 *   bench_ingest [--total 200000] [--connections 16] [--batch 100]
 *                [--single-connections 64] [--pipeline 8] [--idle 1000]
 *                [--daemon PATH] [--pg-bin DIR] [--relay-window 8]
 *                [--relay-runs 3] [--relay-center-nice N]
 *                [--relay-center-dir DIR] [--rounds 1] [--half-rate N]
 *                [--only bare,pg,batch,half,single,idle,tls,central,relay]
 *                [--daemon-arg ARG]...
 *
 * 1. Bare append: the rows the daemon stores for these receipts (the 13
 *    integer columns of `receipts`, strings as interned ids, and the
 *    counters blob of migrations/0010) inserted with plain sqlite3 calls
 *    into a table with only its integer primary key, WAL,
 *    synchronous=FULL, 10,000 rows per transaction, one prepared
 *    statement. Nothing is decoded: the store's own cost is what the
 *    daemon's figure is compared with. The ratios use this row; the same
 *    append of one column per field (43 integers, the layout before 0010
 *    and what a plain schema would have) is printed beside it.
 * 2. PostgreSQL COPY (with libpq and PostgreSQL 15 installed, else a
 *    note): the same rows (integers as bigint, the counters as bytea),
 *    COPY binary of 10,000 rows each, into a table with two indexes
 *    ((plan_id, id), (received_at); id is given, not a key), on a private
 *    cluster started here on loopback with fsync and synchronous_commit
 *    on; as root the server runs as postgres (or nobody). Also the wide
 *    row, printed beside it.
 * 3. Batch: the real daemon on a temporary directory, driven over its Unix
 *    socket. Each connection says hello with its own source and keeps
 *    `pipeline` `receipts` frames (each `batch` receipts, with an
 *    increasing seq) in flight. Durable receipts/s is counted from
 *    acknowledgements, which the daemon sends only after COMMIT; p50/p99
 *    latency per frame. A daemon's first measured phase follows a
 *    warm-up of a fifth of its receipts, not measured (warm_up).
 * 4. Half load: the batch load paced at half the rate of 3 (or at
 *    --half-rate receipts/s: two builds compared at one offered load).
 * 5. Single: `receipt` frames (one receipt, with a seq) over more
 *    connections, with the same pipeline. With --rounds N, N - 1 more
 *    rounds of 3 and 5, each on a fresh daemon and alternating which goes
 *    first, each after a bare append and a COPY of its own (1 and 2, the
 *    daemon's row) and with its own half load (4) after its batch: each
 *    round's single / batch, batch / bare append, batch / COPY and
 *    half-load p99, and their medians (a run's rates move by a fifth on a
 *    shared machine, and its phases not always together: one run's first
 *    batch ran at 345k receipts/s and its last two at 475k and 487k).
 * 6. Memory: the daemon's peak RSS after 3-5; a fresh daemon's RSS with
 *    `idle` connections that said hello.
 * 7. Writer CPU per receipt: the stats query's writer_cpu_us and accepted,
 *    read before and after each load phase.
 *    Each load phase also prints the WAL syncs it took and the CPU per
 *    receipt of the whole daemon (every thread, user and system, from
 *    /proc) and of this process, the client (getrusage), and the
 *    daemon's part of a round trip: the mean from the loop's submit of a
 *    write to its answer, and a commit group's mean duration (the stats'
 *    ack_mean_ms and commit_mean_ms, as sums over the phase).
 * 8. TLS (issue 16): the batch load of 3 over TCP on 127.0.0.1, plain
 *    text then TLS 1.3 (a certificate made here by openssl), each on a
 *    daemon of its own, as a ratio; then `idle` TLS connections that said
 *    hello, and the resident memory they add against as many plain ones.
 *    Skipped with a note without openssl.
 * 9. The central tier (issue 12): on one private cluster, the rows the
 *    batch load sends as the center stores them, COPY binary of 10,000
 *    each into the center's own receipts table (its schema made by the
 *    daemon's migrations: partitioned, primary key and 3 indexes), then
 *    the real daemon with --pg under the batch load of 3; the CPU of the
 *    cluster's processes and of the daemon over each, from /proc.
 * 10. The relay (issue 12): a center on SQLite over TCP with a token; the
 *    batch load on a node without upstream and on a node relaying to the
 *    center, --relay-runs of each (3), alternating which goes first, each
 *    on a fresh store: each pair's on / off and the median. Beside the
 *    rates, what is steadier on a shared machine: the node's CPU a
 *    receipt by thread (loop and pool, writer, syncer, relay; from
 *    /proc/PID/task, the daemon names its threads), over the load when
 *    off and from the load's start to all delivered when on, and the
 *    center's over the same time. With --relay-center-nice N the pairs
 *    run again with the center at nice N, standing in for a center on
 *    other machines: its own lines, beside the shared-core ones, never
 *    instead; with --relay-center-dir DIR as well, that center keeps its
 *    store in a fresh directory under DIR (another file system, such as
 *    /dev/shm: a center elsewhere does not sync on the node's disk).
 *    Then the first node's store relayed whole from cursor 0 with one
 *    batch in flight and with --relay-window: records/s.
 *
 * A benchmark asserts nothing; it prints figures. Single-threaded.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <msgpack.h>
#include <sqlite3.h>
#ifdef HAVE_LIBPQ
#include <libpq-fe.h>
#endif

#include "envelope.h"
#include "frame.h"
#include "mpobj.h"
#include "receipt.h"
#include "tls.h"

#ifndef BENCH_BINARY_DIR
#define BENCH_BINARY_DIR "."
#endif

/* Rows per transaction (bare append) and per COPY (PostgreSQL). */
#define BENCH_GROUP_ROWS 10000
#define BENCH_PLANS      100
#define BENCH_MODELS     10
/* Distinct request bodies a load phase cycles through: as many as there
 * are plans, so that single receipts cover every plan too. */
#define BENCH_BODIES BENCH_PLANS
/* Columns of `receipts` besides id: 13 scalars, the counters, the
 * artifacts, extra. */
#define BENCH_NHEAD 13
#define BENCH_NINT  (BENCH_NHEAD + RECEIPT_NCOUNTERS + RECEIPT_NARTIFACTS)
/* The largest counters blob: two count bytes and 30 LEB128 values. */
#define BENCH_BLOB_MAX (2 + (RECEIPT_NCOUNTERS + RECEIPT_NARTIFACTS) * 10)

/* Which row the baselines write: the daemon's (13 integers, the counters
 * blob, extra) or one column per field (43 integers, extra). */
static int wide;
/* The wide row's rates, printed beside the daemon's row's. */
static double bare_wide = -1, pg_wide = -1;
#define BENCH_NCOLS (wide ? BENCH_NINT + 1 : BENCH_NHEAD + 2)
/* Integer columns: the rest are blobs. */
#define BENCH_NINTCOLS (wide ? BENCH_NINT : BENCH_NHEAD)

static int opt_conns = 16, opt_batch = 100, opt_single_conns = 64;
static int opt_pipeline = 8, opt_idle = 1000, opt_relay_window = 8;
static long opt_total = 200000;
static double opt_half_rate; /* receipts/s; 0: half the batch rate */
static const char *opt_daemon = BENCH_BINARY_DIR "/daemon/receiptd";
static const char *opt_pg_bin = "/usr/lib/postgresql/15/bin";
/* --only bare,pg,batch,half,single,idle,tls,central,relay */
static const char *opt_only;
/* --daemon-arg, repeatable: more arguments for every daemon started (to
 * compare settings, e.g. "--sync-in-commit true"). */
#define MAX_DAEMON_ARGS 8
static const char *opt_daemon_args[MAX_DAEMON_ARGS];
static int n_daemon_args;
static char tmpdir[256];

/* How load and idle connections reach the daemon: its Unix socket, or TCP
 * on 127.0.0.1 in plain text or TLS (the stats queries always use the
 * socket). */
enum transport { T_UNIX, T_TCP, T_TLS };
static enum transport transport;
static int tcp_port;
static struct tls_ctx *tls_client; /* trusts the certificate made here */
#define BENCH_TOKEN "bench"

static const char *const head_cols[BENCH_NHEAD] = {
    "received_at",       "source_id",        "seq",       "schema_version",
    "requested_backend", "executed_backend", "status",    "model_id",
    "plan_id",           "graph_id",         "tuning_id", "stop_reason_id",
    "counter_coverage",
};

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int64_t
unix_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
die(const char *what)
{
    fprintf(stderr, "bench_ingest: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void
dief(const char *what, const char *detail)
{
    fprintf(stderr, "bench_ingest: %s: %s\n", what, detail);
    exit(1);
}

static void
write_all(int fd, const void *p, size_t n)
{
    const char *c = p;

    while (n > 0) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            die("write");
        c += k;
        n -= (size_t)k;
    }
}

static void
read_all(int fd, void *p, size_t n)
{
    char *c = p;

    while (n > 0) {
        ssize_t k = read(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k == 0)
            dief("read", "the daemon closed the connection");
        if (k < 0)
            die("read");
        c += k;
        n -= (size_t)k;
    }
}

/* ---- the receipts ---- */

/*
 * Receipt i, defined once for the daemon's frames and the baselines' rows:
 * BENCH_PLANS plans, BENCH_MODELS models, a fallback now and then, and
 * counters that vary so that no column compresses to one value.
 */
static const char *const backends[] = { "cuda", "cpu", "wgpu-vulkan", "metal" };

static const char *
requested_of(unsigned i)
{
    return backends[i % 4];
}

static const char *
executed_of(unsigned i)
{
    return i % 97 == 0 ? "cpu" : backends[i % 4];
}

static uint64_t
counter_of(unsigned i, int k)
{
    /* fallback_count: mostly 0, so that most receipts come out clean. */
    if (k == 6)
        return i % 97 == 0;
    return (uint64_t)i * 31u + (unsigned)k;
}

static void
kstr(msgpack_packer *pk, const char *k, const char *v)
{
    envelope_pack_cstr(pk, k);
    envelope_pack_cstr(pk, v);
}

static void
kuint(msgpack_packer *pk, const char *k, uint64_t v)
{
    envelope_pack_cstr(pk, k);
    msgpack_pack_uint64(pk, v);
}

/* Receipt i, schema 3, in map form (rmp-serde's to_vec_named). */
static void
pack_receipt(msgpack_packer *pk, unsigned i)
{
    char plan[32], model[32], graph[32];
    int k;

    snprintf(plan, sizeof(plan), "plan-%u", i % BENCH_PLANS);
    snprintf(model, sizeof(model), "model-%u", i % BENCH_MODELS);
    snprintf(graph, sizeof(graph), "%016x", (i % BENCH_PLANS) * 2654435761u);
    msgpack_pack_map(pk, 12);
    kuint(pk, "schema_version", 3);
    kstr(pk, "requested_backend", requested_of(i));
    kstr(pk, "executed_backend", executed_of(i));
    kstr(pk, "model_instance_id", model);
    kstr(pk, "prepared_plan_id", plan);
    kstr(pk, "graph_hash", graph);
    kstr(pk, "tuning_profile", "default");
    kstr(pk, "stop_reason", i % 3 ? "eos" : "max_tokens");
    kuint(pk, "counter_coverage", 0x3ffffff);
    envelope_pack_cstr(pk, "counters");
    msgpack_pack_map(pk, RECEIPT_NCOUNTERS_V3);
    for (k = 0; k < RECEIPT_NCOUNTERS_V3; k++)
        kuint(pk, receipt_counters[k].field, counter_of(i, k));
    envelope_pack_cstr(pk, "latency");
    msgpack_pack_map(pk, RECEIPT_NLATENCY);
    for (k = RECEIPT_NCOUNTERS_V3; k < RECEIPT_NCOUNTERS; k++)
        kuint(pk, receipt_counters[k].field, counter_of(i, k));
    envelope_pack_cstr(pk, "artifacts");
    msgpack_pack_map(pk, RECEIPT_NARTIFACTS);
    for (k = 0; k < RECEIPT_NARTIFACTS; k++)
        kuint(pk, receipt_artifact_names[k], (uint64_t)k);
}

/* A request body: receipt `first` alone (op receipt), or an array of n
 * receipts from `first` on (op receipts). */
static void
make_body(msgpack_sbuffer *sb, int op, unsigned first, int n)
{
    msgpack_packer pk;
    int i;

    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    if (op == PROTO_OP_RECEIPT) {
        pack_receipt(&pk, first);
        return;
    }
    msgpack_pack_array(&pk, (size_t)n);
    for (i = 0; i < n; i++)
        pack_receipt(&pk, first + (unsigned)i);
}

/*
 * The integer columns the store writes for receipt i, in head_cols order
 * then counters and artifacts. Interned strings become the small ids the
 * strings table would give them: what matters for the cost is that they
 * are integers of that size.
 */
static void
row_of(long row, int64_t received_at, int64_t v[BENCH_NINT])
{
    unsigned i = (unsigned)(row % ((long)BENCH_PLANS * BENCH_MODELS * 97));
    int req =
        receipt_backend_from_name(requested_of(i), strlen(requested_of(i)));
    int exe = receipt_backend_from_name(executed_of(i), strlen(executed_of(i)));
    int k;

    v[0] = received_at;
    v[1] = 1 + (row / opt_batch) % opt_conns; /* source */
    v[2] = row / opt_batch / opt_conns;       /* that source's seq */
    v[3] = 3;
    v[4] = req;
    v[5] = exe;
    v[6] = req != exe || counter_of(i, 6) > 0 ? RECEIPT_STATUS_FALLBACK
                                              : RECEIPT_STATUS_CLEAN;
    v[7] = 100 + i % BENCH_MODELS;
    v[8] = 200 + i % BENCH_PLANS;
    v[9] = 300 + i % BENCH_PLANS;
    v[10] = 400;                   /* "default" */
    v[11] = 401 + (i % 3 ? 0 : 1); /* "eos", "max_tokens" */
    v[12] = 0x3ffffff;
    for (k = 0; k < RECEIPT_NCOUNTERS; k++)
        v[BENCH_NHEAD + k] = (int64_t)counter_of(i, k);
    for (k = 0; k < RECEIPT_NARTIFACTS; k++)
        v[BENCH_NHEAD + RECEIPT_NCOUNTERS + k] = k;
}

/*
 * The counters blob of migrations/0010 for the values v[BENCH_NHEAD..]:
 * written here, not by the store module, whose cost is what the baseline
 * is compared with. Returns its length.
 */
static size_t
counters_blob(const int64_t v[BENCH_NINT], unsigned char out[BENCH_BLOB_MAX])
{
    unsigned char *p = out;
    int k;

    for (k = BENCH_NHEAD; k < BENCH_NINT; k++) {
        uint64_t x = (uint64_t)v[k];

        if (k == BENCH_NHEAD || k == BENCH_NHEAD + RECEIPT_NCOUNTERS)
            *p++ = k == BENCH_NHEAD ? RECEIPT_NCOUNTERS : RECEIPT_NARTIFACTS;
        for (; x >= 0x80; x >>= 7)
            *p++ = (unsigned char)(x | 0x80);
        *p++ = (unsigned char)x;
    }
    return (size_t)(p - out);
}

static const char *
col_name(int c)
{
    if (c < BENCH_NHEAD)
        return head_cols[c];
    if (!wide)
        return c == BENCH_NHEAD ? "counters" : "extra";
    if (c < BENCH_NHEAD + RECEIPT_NCOUNTERS)
        return receipt_counters[c - BENCH_NHEAD].field;
    if (c < BENCH_NINT)
        return receipt_artifact_names[c - BENCH_NHEAD - RECEIPT_NCOUNTERS];
    return "extra";
}

/* "CREATE TABLE receipts (id <id_type>, received_at <int_type> NOT NULL,
 * ..., extra <blob_type>)" into buf. */
static void
create_sql(char *buf, size_t size, const char *id_type, const char *int_type,
           const char *blob_type)
{
    size_t n =
        (size_t)snprintf(buf, size, "CREATE TABLE receipts (id %s", id_type);
    int c;

    for (c = 0; c < BENCH_NCOLS && n < size; c++)
        n +=
            (size_t)snprintf(buf + n, size - n, ", %s %s%s", col_name(c),
                             c < BENCH_NINTCOLS ? int_type : blob_type,
                             c != 2 && c != BENCH_NCOLS - 1 ? " NOT NULL" : "");
    if (n < size)
        snprintf(buf + n, size - n, ")");
}

/* ---- 1. bare append ---- */

static void
sql_exec(sqlite3 *db, const char *sql)
{
    char *msg = NULL;

    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
        dief(sql, msg ? msg : sqlite3_errmsg(db));
}

/* Rows per second. */
/* Removes path + suffix, if it is there. */
static void
remove_under(const char *path, const char *suffix)
{
    char p[600];

    snprintf(p, sizeof(p), "%s%s", path, suffix);
    unlink(p);
}

static double
bare_append(void)
{
    char path[300], sql[4096];
    sqlite3 *db;
    sqlite3_stmt *st;
    int64_t v[BENCH_NINT];
    unsigned char blob[BENCH_BLOB_MAX];
    size_t n;
    long row;
    double t0, dt;
    int c;

    snprintf(path, sizeof(path), "%s/bare.db", tmpdir);
    if (sqlite3_open(path, &db) != SQLITE_OK)
        dief(path, sqlite3_errmsg(db));
    sql_exec(db, "PRAGMA journal_mode=WAL");
    sql_exec(db, "PRAGMA synchronous=FULL");
    create_sql(sql, sizeof(sql), "INTEGER PRIMARY KEY", "INTEGER", "BLOB");
    sql_exec(db, sql);
    n = (size_t)snprintf(sql, sizeof(sql), "INSERT INTO receipts (");
    for (c = 0; c < BENCH_NCOLS; c++)
        n += (size_t)snprintf(sql + n, sizeof(sql) - n, "%s%s", c ? ", " : "",
                              col_name(c));
    n += (size_t)snprintf(sql + n, sizeof(sql) - n, ") VALUES (");
    for (c = 0; c < BENCH_NCOLS; c++)
        n += (size_t)snprintf(sql + n, sizeof(sql) - n, "%s?", c ? ", " : "");
    snprintf(sql + n, sizeof(sql) - n, ")");
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        dief("prepare", sqlite3_errmsg(db));

    t0 = now_s();
    for (row = 0; row < opt_total; row++) {
        if (row % BENCH_GROUP_ROWS == 0)
            sql_exec(db, "BEGIN");
        row_of(row, unix_ms(), v);
        for (c = 0; c < BENCH_NINTCOLS; c++)
            sqlite3_bind_int64(st, c + 1, v[c]);
        if (!wide)
            sqlite3_bind_blob(st, BENCH_NHEAD + 1, blob,
                              (int)counters_blob(v, blob), SQLITE_STATIC);
        sqlite3_bind_null(st, BENCH_NCOLS);
        if (sqlite3_step(st) != SQLITE_DONE)
            dief("insert", sqlite3_errmsg(db));
        sqlite3_reset(st);
        if (row % BENCH_GROUP_ROWS == BENCH_GROUP_ROWS - 1 ||
            row == opt_total - 1)
            sql_exec(db, "COMMIT");
    }
    dt = now_s() - t0;
    sqlite3_finalize(st);
    sqlite3_close(db);
    /* Measured: its files go, so the daemon's phases do not share the
     * disk and the page cache with them. */
    remove_under(path, "");
    remove_under(path, "-wal");
    remove_under(path, "-shm");
    return (double)opt_total / dt;
}

/* A TCP port on loopback that was free a moment ago. */
static int
free_port(void)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* ---- 2. PostgreSQL COPY ---- */

#ifdef HAVE_LIBPQ

/*
 * Runs argv (a NULL-terminated list) and waits for it, its output going to
 * tmpdir/pg.log. PostgreSQL refuses to run as root, so as root it runs as
 * user, through runuser. Returns the exit status, or -1.
 */
static int
run(const char *user, char *const argv[])
{
    char log[300];
    pid_t pid;
    int st, fd;

    snprintf(log, sizeof(log), "%s/pg.log", tmpdir);
    if ((pid = fork()) < 0)
        return -1;
    if (pid == 0) {
        fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        /* The unprivileged user may not be allowed into our cwd. */
        if (chdir("/") != 0)
            _exit(127);
        if (user != NULL) {
            char *ru[16] = { "runuser", "-u", (char *)user, "--" };
            int i;

            for (i = 0; argv[i] != NULL && i + 5 < 16; i++)
                ru[4 + i] = argv[i];
            ru[4 + i] = NULL;
            execvp(ru[0], ru);
        } else {
            /* By PATH: pg_down's "rm" has no directory. */
            execvp(argv[0], argv);
        }
        _exit(127);
    }
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int
pg_ok(PGconn *pc, const char *sql)
{
    PGresult *r = PQexec(pc, sql);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK;

    if (!ok)
        printf("  note: PostgreSQL: %s: %s", sql, PQerrorMessage(pc));
    PQclear(r);
    return ok;
}

static unsigned char *
put_be(unsigned char *p, uint64_t v, int bytes)
{
    int i;

    for (i = bytes - 1; i >= 0; i--)
        *p++ = (unsigned char)(v >> (8 * i));
    return p;
}

/*
 * One COPY binary stream of rows [first, first + n): signature, flags,
 * header extension length, then per tuple a field count and each field
 * as length and big-endian bytes (-1 for NULL), then the trailer -1.
 * Returns its length; buf must hold copy_size(n).
 */
static size_t
copy_stream(unsigned char *buf, long first, long n, int64_t received_at)
{
    static const unsigned char sig[11] = "PGCOPY\n\377\r\n";
    unsigned char *p = buf;
    int64_t v[BENCH_NINT];
    unsigned char blob[BENCH_BLOB_MAX];
    long row;
    int c;

    memcpy(p, sig, sizeof(sig));
    p = put_be(p + sizeof(sig), 0, 4);
    p = put_be(p, 0, 4);
    for (row = first; row < first + n; row++) {
        row_of(row, received_at, v);
        p = put_be(p, 1 + BENCH_NCOLS, 2);
        p = put_be(put_be(p, 8, 4), (uint64_t)(row + 1), 8);
        for (c = 0; c < BENCH_NINTCOLS; c++)
            p = put_be(put_be(p, 8, 4), (uint64_t)v[c], 8);
        if (!wide) {
            size_t len = counters_blob(v, blob);

            p = put_be(p, len, 4);
            memcpy(p, blob, len);
            p += len;
        }
        p = put_be(p, 0xffffffffu, 4);
    }
    p = put_be(p, 0xffff, 2);
    return (size_t)(p - buf);
}

/*
 * COPY (binary) of opt_total rows, BENCH_GROUP_ROWS at a time, each COPY
 * its own transaction (it returns after its commit record was flushed:
 * synchronous_commit=on); stream() writes a COPY's rows into buf.
 * Returns 0, or -1 (PQerrorMessage says why).
 */
static int
copy_all(PGconn *pc, unsigned char *buf,
         size_t (*stream)(unsigned char *, long, long, int64_t))
{
    long row, n;

    for (row = 0; row < opt_total; row += n) {
        PGresult *r;
        size_t len;
        int ok;

        n = opt_total - row < BENCH_GROUP_ROWS ? opt_total - row
                                               : BENCH_GROUP_ROWS;
        r = PQexec(pc, "COPY receipts FROM STDIN (FORMAT binary)");
        ok = PQresultStatus(r) == PGRES_COPY_IN;
        PQclear(r);
        len = stream(buf, row, n, unix_ms());
        if (!ok || PQputCopyData(pc, (const char *)buf, (int)len) != 1 ||
            PQputCopyEnd(pc, NULL) != 1)
            return -1;
        ok = 1;
        while ((r = PQgetResult(pc)) != NULL) {
            ok &= PQresultStatus(r) == PGRES_COMMAND_OK;
            PQclear(r);
        }
        if (!ok)
            return -1;
    }
    return 0;
}

static size_t
copy_size(long n)
{
    return 11 + 8 +
           (size_t)n * (2 + 12 * (1 + BENCH_NINT) + 4 + 4 + BENCH_BLOB_MAX) + 2;
}

/* The COPY loop on a connected server. Rows per second, or -1. */
static double
pg_copy_rows(PGconn *pc)
{
    char sql[4096];
    unsigned char *buf = malloc(copy_size(BENCH_GROUP_ROWS));
    double t0, dt = -1;

    create_sql(sql, sizeof(sql), "bigint NOT NULL", "bigint", "bytea");
    /* The DROP's notice that there was no table is not a figure. */
    if (buf == NULL || !pg_ok(pc, "SET client_min_messages = warning") ||
        !pg_ok(pc, "DROP TABLE IF EXISTS receipts") || !pg_ok(pc, sql) ||
        !pg_ok(pc, "CREATE INDEX receipts_plan ON receipts (plan_id, id)") ||
        !pg_ok(pc, "CREATE INDEX receipts_received_at ON receipts "
                   "(received_at)")) {
        free(buf);
        return -1;
    }
    t0 = now_s();
    if (copy_all(pc, buf, copy_stream) != 0) {
        printf("  note: PostgreSQL COPY: %s", PQerrorMessage(pc));
        free(buf);
        return -1;
    }
    dt = now_s() - t0;
    free(buf);
    return (double)opt_total / dt;
}

/* The private cluster while it runs (pg_up). */
static char pg_data[300];
static const char *pg_user;
static int pg_port = -1;

/*
 * Starts a private cluster in tmpdir/pg on loopback, fsync and
 * synchronous_commit on. 0, or -1 after printing why not (what: the
 * phase that needed it).
 */
static int
pg_up(const char *what)
{
    char initdb[300], pg_ctl[300], slog[300], conf[300];
    struct passwd *pw = NULL;
    FILE *f;

    snprintf(initdb, sizeof(initdb), "%s/initdb", opt_pg_bin);
    snprintf(pg_ctl, sizeof(pg_ctl), "%s/pg_ctl", opt_pg_bin);
    snprintf(pg_data, sizeof(pg_data), "%s/pg", tmpdir);
    snprintf(slog, sizeof(slog), "%s/pg/server.log", tmpdir);
    snprintf(conf, sizeof(conf), "%s/pg/postgresql.conf", tmpdir);
    pg_user = NULL;
    if (access(initdb, X_OK) != 0 || access(pg_ctl, X_OK) != 0) {
        printf("  note: %s skipped: no %s (Debian: apt-get "
               "install postgresql-15)\n",
               what, initdb);
        return -1;
    }
    if (geteuid() == 0) {
        if ((pw = getpwnam("postgres")) == NULL)
            pw = getpwnam("nobody");
        if (pw == NULL) {
            printf("  note: %s skipped: running as root and "
                   "there is neither a postgres nor a nobody user\n",
                   what);
            return -1;
        }
        pg_user = pw->pw_name;
    }
    if (mkdir(pg_data, 0700) != 0)
        die(pg_data);
    if (pw != NULL && (chown(pg_data, pw->pw_uid, pw->pw_gid) != 0 ||
                       chmod(tmpdir, 0711) != 0))
        die(pg_data);
    {
        char *argv[] = { initdb, "-D",    pg_data,     "-U", "bench",
                         "-A",   "trust", "--no-sync", NULL };
        if (run(pg_user, argv) != 0) {
            printf("  note: %s skipped: initdb failed (see "
                   "%s/pg.log)\n",
                   what, tmpdir);
            return -1;
        }
    }
    /* Durability as the daemon has it; loopback only, no Unix socket. */
    pg_port = free_port();
    if (pg_port < 0 || (f = fopen(conf, "a")) == NULL)
        die("postgresql.conf");
    fprintf(f,
            "listen_addresses = '127.0.0.1'\nport = %d\n"
            "unix_socket_directories = ''\nfsync = on\n"
            "synchronous_commit = on\n",
            pg_port);
    fclose(f);
    {
        char *argv[] = {
            pg_ctl, "-D", pg_data, "-l", slog, "-w", "start", NULL
        };
        if (run(pg_user, argv) != 0) {
            printf("  note: %s skipped: the server did not "
                   "start (see %s)\n",
                   what, slog);
            return -1;
        }
    }
    return 0;
}

/* A connection string for database db of the cluster pg_up started. */
static void
pg_conninfo(char *buf, size_t size, const char *db)
{
    snprintf(buf, size, "host=127.0.0.1 port=%d user=bench dbname=%s", pg_port,
             db);
}

/* Stops the cluster and removes its files. */
static void
pg_down(void)
{
    char pg_ctl[300];

    snprintf(pg_ctl, sizeof(pg_ctl), "%s/pg_ctl", opt_pg_bin);
    {
        char *argv[] = {
            pg_ctl, "-D", pg_data, "-m", "fast", "-w", "stop", NULL
        };
        if (run(pg_user, argv) != 0)
            printf("  note: pg_ctl stop failed (see %s/pg.log)\n", tmpdir);
        else {
            char *rm[] = { "rm", "-rf", pg_data, NULL };
            run(NULL, rm);
        }
    }
    pg_port = -1;
}

/*
 * Starts a private cluster, runs the COPY loop and stops the cluster.
 * Rows per second, or -1 after printing why not.
 */
static double
pg_copy(void)
{
    char conninfo[128];
    PGconn *pc;
    double rate = -1;

    if (pg_up("PostgreSQL COPY") != 0)
        return -1;
    pg_conninfo(conninfo, sizeof(conninfo), "postgres");
    pc = PQconnectdb(conninfo);
    if (PQstatus(pc) != CONNECTION_OK)
        printf("  note: PostgreSQL: %s", PQerrorMessage(pc));
    else if ((rate = pg_copy_rows(pc)) > 0) {
        wide = 1;
        pg_wide = pg_copy_rows(pc);
        wide = 0;
    }
    PQfinish(pc);
    pg_down();
    return rate;
}

#endif /* HAVE_LIBPQ */

/* ---- the daemon ---- */

static void
sock_path(char *buf, size_t size, const char *name)
{
    struct sockaddr_un sa;

    snprintf(buf, size, "%s/%s.sock", tmpdir, name);
    if (strlen(buf) >= sizeof(sa.sun_path))
        dief(buf, "too long for a Unix socket");
}

static int
try_connect(const char *name)
{
    struct sockaddr_un sa;
    char path[300];
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);

    if (fd < 0)
        die("socket");
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    sock_path(path, sizeof(path), name);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int
connect_to(const char *name)
{
    int fd = try_connect(name);

    if (fd < 0)
        die("connect");
    return fd;
}

/* A TCP connection to the daemon's port, blocking; with T_TLS the
 * handshake is done (*tls set). */
static int
connect_tcp(struct tls_conn **tls)
{
    struct sockaddr_in sa;
    char buf[16384];
    ssize_t n;
    int fd = socket(AF_INET, SOCK_STREAM, 0), rc;

    if (fd < 0)
        die("socket");
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)tcp_port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        die("connect");
    *tls = NULL;
    if (transport != T_TLS)
        return fd;
    if ((*tls = tls_conn_new(tls_client, "127.0.0.1")) == NULL)
        die("tls_conn_new");
    for (;;) {
        rc = tls_conn_handshake(*tls);
        while ((n = (ssize_t)tls_conn_take(*tls, buf, sizeof(buf))) > 0)
            write_all(fd, buf, (size_t)n);
        if (rc == 0)
            return fd;
        if (rc != TLS_EWANT)
            dief("TLS", tls_conn_error(*tls));
        if ((n = read(fd, buf, sizeof(buf))) <= 0)
            dief("TLS", "the daemon closed the connection in the handshake");
        if (tls_conn_feed(*tls, buf, (size_t)n) != 0)
            dief("TLS", "too much input");
    }
}

/* Writes p[0..n) to the daemon on fd: encrypted when tls is set, into out
 * (appended with append_out) or straight to fd when out is NULL. */
static void append_out(void *out, const void *p, size_t n);

static void
emit(int fd, struct tls_conn *tls, void *out, const void *p, size_t n)
{
    char buf[16384];
    size_t k;

    if (tls == NULL) {
        if (out != NULL)
            append_out(out, p, n);
        else
            write_all(fd, p, n);
        return;
    }
    if (tls_conn_write(tls, p, n) != 0)
        dief("TLS", tls_conn_error(tls));
    while ((k = tls_conn_take(tls, buf, sizeof(buf))) > 0) {
        if (out != NULL)
            append_out(out, buf, k);
        else
            write_all(fd, buf, k);
    }
}

/* Reads from fd into buf (up to cap), through tls when set: the bytes
 * read, 0 at the end of the stream, -1 when nothing is there yet (a
 * non-blocking fd). */
static ssize_t
receive(int fd, struct tls_conn *tls, void *buf, size_t cap)
{
    char raw[16384];
    size_t got;
    ssize_t n;
    int rc;

    if (tls == NULL)
        return read(fd, buf, cap);
    for (;;) {
        rc = tls_conn_read(tls, buf, cap, &got);
        if (rc == 0)
            return (ssize_t)got;
        if (rc == TLS_ECLOSED)
            return 0;
        if (rc != TLS_EWANT)
            dief("TLS", tls_conn_error(tls));
        if ((n = read(fd, raw, sizeof(raw))) <= 0)
            return n;
        if (tls_conn_feed(tls, raw, (size_t)n) != 0)
            dief("TLS", "too much input");
    }
}

/* What start_daemon adds: --pg with this connection string instead of
 * --db (the central phase), and these flags (NULL-terminated, at most
 * 8: the relay phase's upstream). */
static const char *daemon_pg;
static const char *const *daemon_extra;
/* The nice value a daemon started now runs at (the relay phase's center
 * at a lower priority, standing in for one on another machine). */
static int daemon_nice;
/* Where a daemon started now keeps its store; NULL: tmpdir. */
static const char *daemon_dir;

/* The daemons started, by name, for the CPU a load phase costs them. */
static struct {
    char name[32];
    pid_t pid;
} started[16];

static void
remember_daemon(const char *name, pid_t pid)
{
    size_t i;

    for (i = 0; i < sizeof(started) / sizeof(started[0]); i++)
        if (started[i].pid == 0 || strcmp(started[i].name, name) == 0) {
            snprintf(started[i].name, sizeof(started[i].name), "%s", name);
            started[i].pid = pid;
            return;
        }
}

static pid_t
daemon_pid(const char *name)
{
    size_t i;

    for (i = 0; i < sizeof(started) / sizeof(started[0]); i++)
        if (started[i].pid != 0 && strcmp(started[i].name, name) == 0)
            return started[i].pid;
    return 0;
}

static pid_t
start_daemon(const char *name)
{
    char sock[300], db[300], log[300], tcp[64], conf[300], text[300];
    char cert[300], key[300];
    const char *argv[48];
    pid_t pid;
    int i, fd, n = 0;

    sock_path(sock, sizeof(sock), name);
    snprintf(db, sizeof(db), "%s/%s.db", daemon_dir ? daemon_dir : tmpdir,
             name);
    snprintf(log, sizeof(log), "%s/%s.log", tmpdir, name);
    argv[n++] = opt_daemon;
    argv[n++] = "--socket";
    argv[n++] = sock;
    if (daemon_pg != NULL) {
        argv[n++] = "--pg";
        argv[n++] = daemon_pg;
    } else {
        argv[n++] = "--db";
        argv[n++] = db;
    }
    argv[n++] = "--max-connections";
    argv[n++] = "4096";
    for (i = 0; i < n_daemon_args; i++)
        argv[n++] = opt_daemon_args[i];
    if (transport != T_UNIX) {
        /* SHA-256 of "bench". */
        snprintf(conf, sizeof(conf), "%s/%s.conf", tmpdir, name);
        snprintf(text, sizeof(text),
                 "access: { tokens = ( { name = \"bench\"; sha256 = "
                 "\"%s\"; } ); };\n",
                 "1b32c28cb38c05480eccc1bd60ff97029b57a05c96718b96dad7e9d848"
                 "94f549");
        fd = open(conf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0)
            die(conf);
        write_all(fd, text, strlen(text));
        close(fd);
        snprintf(tcp, sizeof(tcp), "127.0.0.1:%d", tcp_port);
        snprintf(cert, sizeof(cert), "%s/cert.pem", tmpdir);
        snprintf(key, sizeof(key), "%s/key.pem", tmpdir);
        argv[n++] = "--config";
        argv[n++] = conf;
        argv[n++] = "--tcp";
        argv[n++] = tcp;
        if (transport == T_TLS) {
            argv[n++] = "--tls-cert";
            argv[n++] = cert;
            argv[n++] = "--tls-key";
            argv[n++] = key;
        } else {
            argv[n++] = "--tcp-plaintext";
            argv[n++] = "true";
        }
    }
    for (i = 0; daemon_extra != NULL && daemon_extra[i] != NULL && i < 8; i++)
        argv[n++] = daemon_extra[i];
    argv[n] = NULL;
    if ((pid = fork()) < 0)
        die("fork");
    if (pid == 0) {
        fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0)
            dup2(fd, 2);
        if (daemon_nice != 0 && setpriority(PRIO_PROCESS, 0, daemon_nice) != 0)
            _exit(127);
        execv(opt_daemon, (char *const *)argv);
        _exit(127);
    }
    for (i = 0; i < 500; i++) {
        if ((fd = try_connect(name)) >= 0) {
            close(fd);
            remember_daemon(name, pid);
            return pid;
        }
        usleep(10000);
    }
    fprintf(stderr, "bench_ingest: the daemon did not start (see %s)\n", log);
    exit(1);
}

static void
stop_daemon(pid_t pid)
{
    int st;

    kill(pid, SIGTERM);
    waitpid(pid, &st, 0);
}

static long
proc_kb(pid_t pid, const char *field)
{
    char path[64], line[256];
    long v = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, field, strlen(field)) == 0)
            v = strtol(line + strlen(field), NULL, 10);
    fclose(f);
    return v;
}

/* Sends one frame holding the request in sb. */
static void
send_frame(int fd, const msgpack_sbuffer *sb)
{
    unsigned char hdr[FRAME_HEADER_SIZE];

    frame_put_header(hdr, (uint32_t)sb->size);
    write_all(fd, hdr, sizeof(hdr));
    write_all(fd, sb->data, sb->size);
}

/* The hello of a producer named src, id 0, with the token over TCP. */
static void
pack_hello(msgpack_sbuffer *sb, const char *src)
{
    msgpack_packer pk;

    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    envelope_request(&pk, PROTO_OP_HELLO, 0, 0, 0, 1);
    msgpack_pack_map(&pk, transport != T_UNIX ? 3 : 2);
    kuint(&pk, "protocol", 1);
    kstr(&pk, "source", src);
    if (transport != T_UNIX)
        kstr(&pk, "token", BENCH_TOKEN);
}

/* One frame of sb, whole, on fd (through tls when set). */
static void
send_frame_on(int fd, struct tls_conn *tls, const msgpack_sbuffer *sb)
{
    unsigned char frame[FRAME_HEADER_SIZE + 512];

    if (sb->size > sizeof(frame) - FRAME_HEADER_SIZE)
        dief("hello", "too large");
    frame_put_header(frame, (uint32_t)sb->size);
    memcpy(frame + FRAME_HEADER_SIZE, sb->data, sb->size);
    emit(fd, tls, NULL, frame, FRAME_HEADER_SIZE + sb->size);
}

/* What the stats query says about the writer. */
struct writer_figures {
    int has_cpu; /* an older daemon has no writer_cpu_us */
    uint64_t cpu_us, accepted;
    uint64_t groups, checkpoints, checkpoint_us; /* 0 when not reported */
    uint64_t syncs, sync_us; /* the syncer's WAL syncs (0: none) */
    /* The loop's submit to its answer (acks) and the groups' durations,
     * as sums in us (from the stats' means). */
    uint64_t acks;
    double ack_us, group_us;
};

static uint64_t
row_uint(const msgpack_object *row, const char *key, int *found)
{
    const msgpack_object *v = mpobj_map_get(row, key, NULL);

    *found = v != NULL && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER;
    return *found ? v->via.u64 : 0;
}

/* A float field (a mean) in thousandths, so that it travels as the others
 * do: stats_fields' keys[i] names it with a leading '~'. */
static uint64_t
row_milli(const msgpack_object *row, const char *key, int *found)
{
    const msgpack_object *v = mpobj_map_get(row, key, NULL);

    *found = v != NULL && v->type == MSGPACK_OBJECT_FLOAT64 && v->via.f64 >= 0;
    return *found ? (uint64_t)(v->via.f64 * 1000.0 + 0.5) : 0;
}

/* One `query` {"kind": "stats"} on a connection of its own: the fields
 * keys[0..n) of its row into v (0 when absent); returns a mask of those
 * found (bit i: keys[i]). */
static unsigned
stats_fields(const char *name, const char *const *keys, int n, uint64_t *v)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacked up;
    struct envelope_reply r;
    struct proto_err err;
    const msgpack_object *rows;
    unsigned char hdr[FRAME_HEADER_SIZE];
    uint32_t len;
    char *buf;
    size_t off = 0;
    unsigned mask = 0;
    int fd = connect_to(name), found, i;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    envelope_request(&pk, PROTO_OP_QUERY, 1, 0, 0, 1);
    msgpack_pack_map(&pk, 1);
    kstr(&pk, "kind", "stats");
    send_frame(fd, &sb);
    msgpack_sbuffer_destroy(&sb);
    read_all(fd, hdr, sizeof(hdr));
    len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 |
          (uint32_t)hdr[2] << 8 | hdr[3];
    if ((buf = malloc(len)) == NULL)
        die("malloc");
    read_all(fd, buf, len);
    close(fd);
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
        envelope_reply_decode(&up.data, &r, &err) != 0)
        dief("stats", "not a reply");
    if (!r.ok)
        dief("stats", r.err.message);
    rows = mpobj_map_get(r.result, "rows", NULL);
    if (rows == NULL || rows->type != MSGPACK_OBJECT_ARRAY ||
        rows->via.array.size != 1)
        dief("stats", "no row");
    for (i = 0; i < n; i++) {
        v[i] = keys[i][0] == '~'
                   ? row_milli(&rows->via.array.ptr[0], keys[i] + 1, &found)
                   : row_uint(&rows->via.array.ptr[0], keys[i], &found);
        mask |= (unsigned)found << i;
    }
    msgpack_unpacked_destroy(&up);
    free(buf);
    return mask;
}

/* One stats field of the daemon `name`, 0 when absent. */
static uint64_t
stat_of(const char *name, const char *key)
{
    uint64_t v;

    stats_fields(name, &key, 1, &v);
    return v;
}

static void
writer_figures(const char *name, struct writer_figures *wf)
{
    static const char *const keys[] = { "accepted",      "writer_cpu_us",
                                        "commit_groups", "checkpoints",
                                        "checkpoint_us", "wal_syncs",
                                        "wal_sync_us",   "acks",
                                        "~ack_mean_ms",  "~commit_mean_ms" };
    uint64_t v[10];
    unsigned mask = stats_fields(name, keys, 10, v);

    wf->accepted = v[0];
    wf->cpu_us = v[1];
    wf->has_cpu = (mask & 2) != 0;
    wf->groups = v[2];
    wf->checkpoints = v[3];
    wf->checkpoint_us = v[4];
    wf->syncs = v[5];
    wf->sync_us = v[6];
    wf->acks = v[7];
    /* The means are of all time: sums, so a phase's are differences. */
    wf->ack_us = (double)v[8] * (double)v[7];
    wf->group_us = (double)v[9] * (double)v[2];
}

/* Writer CPU microseconds per receipt stored between two readings, or
 * NAN when the daemon does not report it. */
static double
cpu_per_receipt(const struct writer_figures *a, const struct writer_figures *b)
{
    if (!a->has_cpu || !b->has_cpu || b->accepted == a->accepted)
        return NAN;
    return (double)(b->cpu_us - a->cpu_us) /
           (double)(b->accepted - a->accepted);
}

/* ---- 3-5. load ---- */

struct load_spec {
    const char *phase; /* part of each connection's source */
    int op;            /* PROTO_OP_RECEIPTS or PROTO_OP_RECEIPT */
    int conns;
    int per_frame; /* receipts per frame: 1 for PROTO_OP_RECEIPT */
    long frames;   /* per connection */
    double rate;   /* receipts/s offered, all connections together; 0 is
                      as fast as acknowledgements allow */
};

/* ---- CPU by process ---- */

/* One /proc stat file: the name in parentheses (into name, when not NULL)
 * and, after it, ppid and utime, stime, cutime, cstime in clock ticks.
 * -1 when it is gone or not in that form. */
static int
read_stat(const char *path, char *name, size_t nname, int *ppid,
          unsigned long long t[4])
{
    char line[1024], *p, *open;
    FILE *f;

    if ((f = fopen(path, "r")) == NULL)
        return -1;
    p = fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;
    fclose(f);
    /* After the name: state ppid pgrp session tty tpgid flags minflt
     * cminflt majflt cmajflt utime stime cutime cstime. */
    if (p == NULL || (open = strchr(line, '(')) == NULL ||
        sscanf(p + 2,
               "%*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
               "%llu %llu %llu %llu",
               ppid, &t[0], &t[1], &t[2], &t[3]) != 5)
        return -1;
    if (name != NULL)
        snprintf(name, nname, "%.*s", (int)(p - open - 1), open + 1);
    return 0;
}

/* User and system CPU seconds of process pid, with those of its children
 * it waited for when `reaped` is set; -1 when it is gone. */
static double
proc_cpu_s(pid_t pid, int reaped, pid_t *ppid)
{
    char path[64];
    unsigned long long t[4];
    int pp;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (read_stat(path, NULL, 0, &pp, t) != 0)
        return -1;
    if (ppid != NULL)
        *ppid = pp;
    return (double)(t[0] + t[1] + (reaped ? t[2] + t[3] : 0)) /
           (double)sysconf(_SC_CLK_TCK);
}

/* CPU seconds of this process. */
static double
self_cpu_s(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

struct load_result {
    double rate;     /* durable receipts/s */
    double p50, p99; /* acknowledgement latency, ms */
    double cpu_us;   /* writer CPU per receipt (NAN: not reported) */
    /* Where the latency goes: receipts per commit group, and the WAL
     * checkpoints the writer ran between groups. */
    double per_group;
    uint64_t checkpoints;
    double checkpoint_ms; /* mean */
    /* CPU per receipt of the whole daemon (every thread, user and
     * system) and of this process, the client (NAN: not known). */
    double daemon_us, client_us;
    uint64_t syncs;
    double sync_ms; /* mean */
    /* The daemon's part of the latency: the loop's submit to its answer,
     * and a commit group's duration (means, ms; 0: not reported). */
    double answer_ms, group_ms;
};

struct bconn {
    int fd;
    struct tls_conn *tls; /* T_TLS */
    int ready;            /* the hello was answered */
    long sent, acked;     /* frames */
    double *t_sent;       /* by frame id, 1-based */
    char *out;
    size_t out_len, out_off, out_cap;
    int want_out; /* registered for EPOLLOUT: a write was cut short */
    unsigned char in[1 << 16];
    size_t in_len;
};

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void
append_out(void *out, const void *p, size_t n)
{
    struct bconn *c = out;

    if (c->out_len + n > c->out_cap) {
        c->out_cap = (c->out_len + n) * 2;
        if ((c->out = realloc(c->out, c->out_cap)) == NULL)
            die("realloc");
    }
    memcpy(c->out + c->out_len, p, n);
    c->out_len += n;
}

/* Frame id (also its seq, the source being this connection's alone). */
static void
queue_frame(struct bconn *c, int op, long id, const msgpack_sbuffer *body)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    unsigned char hdr[FRAME_HEADER_SIZE] = { 0 };

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_sbuffer_write(&sb, (const char *)hdr, sizeof(hdr));
    envelope_request(&pk, op, (uint64_t)id, 1, (uint64_t)id, 1);
    msgpack_sbuffer_write(&sb, body->data, body->size);
    frame_put_header((unsigned char *)sb.data,
                     (uint32_t)(sb.size - FRAME_HEADER_SIZE));
    emit(c->fd, c->tls, c, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

/* Reads what came in on c and takes every whole reply; latencies go to
 * lat. Returns the number of frames acknowledged. */
static long
take_some(struct bconn *c, double *lat, long *nlat)
{
    long acks = 0;
    ssize_t n =
        receive(c->fd, c->tls, c->in + c->in_len, sizeof(c->in) - c->in_len);

    if (n == 0)
        dief("load", "the daemon closed a connection");
    if (n < 0)
        return 0;
    c->in_len += (size_t)n;
    for (;;) {
        struct envelope_reply r;
        struct proto_err err;
        msgpack_unpacked up;
        uint32_t flen;
        size_t off = 0;

        if (c->in_len < FRAME_HEADER_SIZE)
            break;
        flen = (uint32_t)c->in[0] << 24 | (uint32_t)c->in[1] << 16 |
               (uint32_t)c->in[2] << 8 | c->in[3];
        if (flen > sizeof(c->in) - FRAME_HEADER_SIZE)
            dief("load", "a reply larger than the read buffer");
        if (c->in_len < FRAME_HEADER_SIZE + flen)
            break;
        msgpack_unpacked_init(&up);
        if (msgpack_unpack_next(&up, (char *)c->in + FRAME_HEADER_SIZE, flen,
                                &off) != MSGPACK_UNPACK_SUCCESS ||
            envelope_reply_decode(&up.data, &r, &err) != 0)
            dief("load", "a reply that is not a reply envelope");
        if (!r.ok)
            dief("load: a request failed", r.err.message);
        msgpack_unpacked_destroy(&up);
        if (!c->ready) {
            c->ready = 1;
        } else {
            if (!r.has_id || r.id < 1 || r.id > (uint64_t)c->sent)
                dief("load", "a reply to a frame never sent");
            lat[(*nlat)++] = (now_s() - c->t_sent[r.id]) * 1000.0;
            c->acked++;
            acks++;
        }
        c->in_len -= FRAME_HEADER_SIZE + flen;
        memmove(c->in, c->in + FRAME_HEADER_SIZE + flen, c->in_len);
    }
    return acks;
}

/* take_some() until TLS holds nothing more: records decrypted one read at
 * a time would otherwise wait for a poll that never reports them. */
static long
take_replies(struct bconn *c, double *lat, long *nlat)
{
    long acks = 0;

    do
        acks += take_some(c, lat, nlat);
    while (c->tls != NULL && tls_conn_has_input(c->tls));
    return acks;
}

/* Writes what c has queued; what the socket does not take now waits for
 * EPOLLOUT on ep. */
static void
flush_out(int ep, struct bconn *c, int idx)
{
    struct epoll_event ev = { .data.u32 = (uint32_t)idx };

    while (c->out_off < c->out_len) {
        ssize_t n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN)
            die("write");
        if (n <= 0)
            break;
        c->out_off += (size_t)n;
    }
    if (c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    if ((c->out_len > 0) != c->want_out) {
        c->want_out = c->out_len > 0;
        ev.events = EPOLLIN | (c->want_out ? EPOLLOUT : 0);
        if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) != 0)
            die("epoll_ctl");
    }
}

/*
 * epoll_wait for at most wait_s seconds, to the microsecond with
 * epoll_pwait2 (Linux 5.11). The paced phase's frames fall due every half
 * millisecond or so, which epoll_wait's milliseconds round down to 0: the
 * client then spun a core that the daemon needs (at half load it took 5
 * us of CPU a receipt against 0.5 unpaced). Without epoll_pwait2 the wait
 * is rounded up to a millisecond instead.
 */
static int
wait_events(int ep, struct epoll_event *evs, int n, double wait_s)
{
    static int no_pwait2;
    struct timespec ts;
    int rc;

    if (wait_s < 0)
        wait_s = 0;
    if (!no_pwait2) {
        ts.tv_sec = (time_t)wait_s;
        ts.tv_nsec = (long)((wait_s - (double)ts.tv_sec) * 1e9);
        if ((rc = epoll_pwait2(ep, evs, n, &ts, NULL)) >= 0 || errno != ENOSYS)
            return rc;
        no_pwait2 = 1;
    }
    return epoll_wait(ep, evs, n, (int)ceil(wait_s * 1000.0));
}

/*
 * Runs one load phase on the daemon `name`: spec->frames frames on each
 * connection, at most opt_pipeline in flight each, paced when spec->rate
 * is set.
 *
 * The client is one thread on the daemon's machine, so its own cost is
 * kept low: epoll rather than a scan of every connection, and, unpaced, a
 * connection's next frames go out as soon as its replies are read, in the
 * same write, as a producer with frames waiting would send them.
 */
static void
load(const char *name, const struct load_spec *spec, struct load_result *res)
{
    struct bconn *cs = calloc((size_t)spec->conns, sizeof(*cs));
    struct epoll_event *evs = calloc((size_t)spec->conns, sizeof(*evs));
    long total = spec->frames * spec->conns, done = 0, nlat = 0;
    long scheduled = 0;
    double *lat = calloc((size_t)total, sizeof(double));
    double interval = spec->rate > 0 ? spec->per_frame / spec->rate : 0;
    double t0, next_send;
    msgpack_sbuffer bodies[BENCH_BODIES];
    struct writer_figures before, after;
    pid_t pid = daemon_pid(name);
    double cpu0, cpu1, self0;
    int i, ep;

    if (cs == NULL || evs == NULL || lat == NULL)
        die("calloc");
    if ((ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
        die("epoll_create1");
    for (i = 0; i < BENCH_BODIES; i++)
        make_body(&bodies[i], spec->op, (unsigned)(i * spec->per_frame),
                  spec->per_frame);
    for (i = 0; i < spec->conns; i++) {
        struct bconn *c = &cs[i];
        struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)i };
        msgpack_sbuffer sb;
        char src[96];

        c->fd = transport == T_UNIX ? connect_to(name) : connect_tcp(&c->tls);
        if ((c->t_sent = calloc((size_t)spec->frames + 1, sizeof(double))) ==
            NULL)
            die("calloc");
        snprintf(src, sizeof(src), "bench/%s/%d/%ld", spec->phase, i,
                 (long)getpid());
        pack_hello(&sb, src);
        send_frame_on(c->fd, c->tls, &sb);
        msgpack_sbuffer_destroy(&sb);
        fcntl(c->fd, F_SETFL, O_NONBLOCK);
        if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) != 0)
            die("epoll_ctl");
    }
    writer_figures(name, &before);
    cpu0 = pid > 0 ? proc_cpu_s(pid, 0, NULL) : -1;
    self0 = self_cpu_s();
    t0 = next_send = now_s();
    while (done < total) {
        double now = now_s(), wait = 0.05;
        int n;

        /* Unpaced, fill every pipeline; paced, send each frame when it is
         * due, round-robin over the connections that have room. */
        for (i = 0; i < spec->conns; i++) {
            int k = (int)((scheduled + i) % spec->conns);
            struct bconn *c = &cs[k];

            while (c->ready && c->sent < spec->frames &&
                   c->sent - c->acked < opt_pipeline &&
                   (spec->rate <= 0 || now >= next_send)) {
                c->sent++;
                c->t_sent[c->sent] = now_s();
                queue_frame(c, spec->op, c->sent,
                            &bodies[(scheduled + i) % BENCH_BODIES]);
                scheduled++;
                if (spec->rate > 0) {
                    next_send += interval;
                    break;
                }
            }
            if (c->out_len > 0 && !c->want_out)
                flush_out(ep, c, k);
        }
        if (spec->rate > 0 && (wait = next_send - now_s()) > 0.05)
            wait = 0.05;
        if ((n = wait_events(ep, evs, spec->conns, wait)) < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait");
        }
        for (i = 0; i < n; i++) {
            int k = (int)evs[i].data.u32;
            struct bconn *c = &cs[k];

            if (evs[i].events & EPOLLOUT)
                flush_out(ep, c, k);
            if (!(evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                continue;
            done += take_replies(c, lat, &nlat);
            if (spec->rate > 0)
                continue;
            now = now_s();
            while (c->ready && c->sent < spec->frames &&
                   c->sent - c->acked < opt_pipeline) {
                c->sent++;
                c->t_sent[c->sent] = now;
                queue_frame(c, spec->op, c->sent,
                            &bodies[scheduled % BENCH_BODIES]);
                scheduled++;
            }
            if (c->out_len > 0 && !c->want_out)
                flush_out(ep, c, k);
        }
    }
    res->rate = (double)(total * spec->per_frame) / (now_s() - t0);
    cpu1 = pid > 0 ? proc_cpu_s(pid, 0, NULL) : -1;
    res->client_us =
        (self_cpu_s() - self0) * 1e6 / (double)(total * spec->per_frame);
    res->daemon_us =
        cpu0 >= 0 && cpu1 >= 0
            ? (cpu1 - cpu0) * 1e6 / (double)(total * spec->per_frame)
            : NAN;
    writer_figures(name, &after);
    res->cpu_us = cpu_per_receipt(&before, &after);
    res->per_group = after.groups > before.groups
                         ? (double)(after.accepted - before.accepted) /
                               (double)(after.groups - before.groups)
                         : 0;
    res->answer_ms = after.acks > before.acks
                         ? (after.ack_us - before.ack_us) / 1000.0 /
                               (double)(after.acks - before.acks)
                         : 0;
    res->group_ms = after.groups > before.groups
                        ? (after.group_us - before.group_us) / 1000.0 /
                              (double)(after.groups - before.groups)
                        : 0;
    res->checkpoints = after.checkpoints - before.checkpoints;
    res->syncs = after.syncs - before.syncs;
    res->sync_ms = res->syncs ? (double)(after.sync_us - before.sync_us) /
                                    1000.0 / (double)res->syncs
                              : 0;
    res->checkpoint_ms =
        res->checkpoints
            ? (double)(after.checkpoint_us - before.checkpoint_us) / 1000.0 /
                  (double)res->checkpoints
            : 0;
    qsort(lat, (size_t)nlat, sizeof(double), cmp_double);
    res->p50 = lat[nlat / 2];
    res->p99 = lat[(size_t)((double)nlat * 0.99)];
    for (i = 0; i < spec->conns; i++) {
        close(cs[i].fd);
        tls_conn_free(cs[i].tls);
        free(cs[i].t_sent);
        free(cs[i].out);
    }
    for (i = 0; i < BENCH_BODIES; i++)
        msgpack_sbuffer_destroy(&bodies[i]);
    close(ep);
    free(cs);
    free(evs);
    free(lat);
}

/* ---- 6. idle connections ---- */

static void
idle(const char *name, long *rss, long *hwm, long *rss_before)
{
    pid_t pid = start_daemon(name);
    int *fds = calloc((size_t)opt_idle, sizeof(int));
    struct tls_conn **tls = calloc((size_t)opt_idle, sizeof(*tls));
    msgpack_sbuffer sb;
    unsigned char buf[256];
    int i;

    if (fds == NULL || tls == NULL)
        die("calloc");
    usleep(100000);
    *rss_before = proc_kb(pid, "VmRSS:");
    pack_hello(&sb, "idle");
    /* Each says hello before the next connects: TCP peers that have not
     * authenticated share a budget of max_connections / 8. */
    for (i = 0; i < opt_idle; i++) {
        fds[i] = transport == T_UNIX ? connect_to(name) : connect_tcp(&tls[i]);
        send_frame_on(fds[i], tls[i], &sb);
        if (receive(fds[i], tls[i], buf, sizeof(buf)) <= 0)
            die("hello reply");
    }
    usleep(200000);
    *rss = proc_kb(pid, "VmRSS:");
    *hwm = proc_kb(pid, "VmHWM:");
    for (i = 0; i < opt_idle; i++) {
        close(fds[i]);
        tls_conn_free(tls[i]);
    }
    free(fds);
    free(tls);
    msgpack_sbuffer_destroy(&sb);
    stop_daemon(pid);
}

static void
usage(void)
{
    fprintf(stderr,
            "usage: bench_ingest [--total N] [--connections N] [--batch N] "
            "[--single-connections N]\n"
            "                    [--pipeline N] [--idle N] [--daemon PATH] "
            "[--pg-bin DIR]\n"
            "                    [--relay-window N] [--relay-runs N] "
            "[--relay-center-nice N]\n"
            "                    [--relay-center-dir DIR] [--rounds N] "
            "[--half-rate N]\n"
            "                    [--only "
            "bare,pg,batch,half,single,idle,tls,central,relay]\n"
            "                    [--daemon-arg ARG]...\n");
    exit(2);
}

/* Between phases: what the last one left dirty in the page cache is
 * written out first, so that no phase pays for its predecessor's
 * writeback (PostgreSQL's especially), and the machine is given a moment
 * to go quiet. */
static void
settle(void)
{
    sync();
    usleep(500000);
}

/* Whether a phase runs: all by default, or those named in --only (for a
 * profile of one phase; the ratios then lack what was left out). */
static int
phase_on(const char *name)
{
    const char *p = opt_only;
    size_t n = strlen(name);

    if (p == NULL)
        return 1;
    while ((p = strstr(p, name)) != NULL) {
        if ((p == opt_only || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
            return 1;
        p += n;
    }
    return 0;
}

/* ---- 8. TLS ---- */

/* The batch load over TCP with transport t, on a daemon of its own. */
static void
tcp_load(enum transport t, const struct load_spec *spec,
         struct load_result *res)
{
    const char *name = t == T_TLS ? "tls" : "tcp";
    pid_t pid;

    transport = t;
    tcp_port = free_port();
    pid = start_daemon(name);
    usleep(100000);
    load(name, spec, res);
    stop_daemon(pid);
    transport = T_UNIX;
}

struct tls_figures {
    struct load_result tcp, tls;
    long idle_tcp, idle_tls, base_tcp, base_tls; /* RSS, kB */
};

/* Phase 8; 0, or -1 with a note when openssl could not make a
 * certificate. */
static int
tls_phase(const struct load_spec *batch, struct tls_figures *f)
{
    char cmd[1200], cert[300], err[TLS_ERR_MAX];
    long hwm;

    snprintf(cert, sizeof(cert), "%s/cert.pem", tmpdir);
    snprintf(cmd, sizeof(cmd),
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
             "-nodes -keyout '%s/key.pem' -out '%s' -days 1 -subj "
             "/CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 "
             ">/dev/null 2>&1",
             tmpdir, cert);
    if (system(cmd) != 0) {
        printf("  note: TLS skipped: openssl could not make a certificate "
               "(Debian: openssl)\n");
        return -1;
    }
    if (tls_ctx_client_new(cert, NULL, NULL, &tls_client, err, sizeof(err)) !=
        0)
        dief("TLS", err);
    settle();
    tcp_load(T_TCP, batch, &f->tcp);
    settle();
    tcp_load(T_TLS, batch, &f->tls);
    if (phase_on("idle") || opt_only != NULL) {
        transport = T_TCP;
        tcp_port = free_port();
        idle("idle-tcp", &f->idle_tcp, &hwm, &f->base_tcp);
        transport = T_TLS;
        tcp_port = free_port();
        idle("idle-tls", &f->idle_tls, &hwm, &f->base_tls);
        transport = T_UNIX;
    }
    tls_ctx_free(tls_client);
    tls_client = NULL;
    return 0;
}

static void print_load(const char *what, const struct load_result *r);

#ifdef HAVE_LIBPQ

/* ---- 9. the central tier ---- */

/* CPU seconds of the private cluster: the postmaster, the children it
 * reaped, and those alive now (backends, walwriter, checkpointer ...). */
static double
pg_cpu_s(void)
{
    char path[400], line[64];
    pid_t pm = 0, pp;
    double sum, c;
    struct dirent *de;
    DIR *d;
    FILE *f;

    snprintf(path, sizeof(path), "%s/postmaster.pid", pg_data);
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    if (fgets(line, sizeof(line), f))
        pm = (pid_t)atoi(line);
    fclose(f);
    if (pm <= 0 || (sum = proc_cpu_s(pm, 1, NULL)) < 0)
        return 0;
    if ((d = opendir("/proc")) == NULL)
        return sum;
    while ((de = readdir(d)) != NULL) {
        pid_t pid = (pid_t)atoi(de->d_name);

        if (pid > 0 && pid != pm && (c = proc_cpu_s(pid, 0, &pp)) >= 0 &&
            pp == pm)
            sum += c;
    }
    closedir(d);
    return sum;
}

static unsigned char *
put_text(unsigned char *p, const char *s)
{
    size_t n = strlen(s);

    p = put_be(p, n, 4);
    memcpy(p, s, n);
    return p + n;
}

static unsigned char *
put_i64s(unsigned char *p, const uint64_t *v, unsigned n)
{
    unsigned i;

    /* Length, then dimensions 1, no NULLs, int8, n elements from 1. */
    p = put_be(p, 20 + (uint64_t)n * 12, 4);
    p = put_be(put_be(put_be(p, 1, 4), 0, 4), 20, 4);
    p = put_be(put_be(p, n, 4), 1, 4);
    for (i = 0; i < n; i++)
        p = put_be(put_be(p, 8, 4), v[i], 8);
    return p;
}

#define CENTER_ROW_MAX 1024

/*
 * COPY binary of rows [first, first + n) as the center stores them
 * (migrations/pg/0001: origin '', the id, received_at, the producer's
 * source and seq, the receipt's fields, its strings as text and its
 * counters as bigint[]), the receipts the load phase sends, in the same
 * sources. Returns its length; buf must hold 21 + n * CENTER_ROW_MAX.
 */
static size_t
center_stream(unsigned char *buf, long first, long n, int64_t received_at)
{
    static const unsigned char sig[11] = "PGCOPY\n\377\r\n";
    unsigned char *p = buf;
    uint64_t counters[RECEIPT_NCOUNTERS], artifacts[RECEIPT_NARTIFACTS];
    char src[96], plan[32], model[32], graph[32];
    long row;
    int k;

    memcpy(p, sig, sizeof(sig));
    p = put_be(put_be(p + sizeof(sig), 0, 4), 0, 4);
    for (row = first; row < first + n; row++) {
        unsigned i = (unsigned)(row % ((long)BENCH_BODIES * opt_batch));
        int req =
            receipt_backend_from_name(requested_of(i), strlen(requested_of(i)));
        int exe =
            receipt_backend_from_name(executed_of(i), strlen(executed_of(i)));

        snprintf(src, sizeof(src), "bench/central/%ld/%ld",
                 (row / opt_batch) % opt_conns, (long)getpid());
        snprintf(plan, sizeof(plan), "plan-%u", i % BENCH_PLANS);
        snprintf(model, sizeof(model), "model-%u", i % BENCH_MODELS);
        snprintf(graph, sizeof(graph), "%016x",
                 (i % BENCH_PLANS) * 2654435761u);
        for (k = 0; k < RECEIPT_NCOUNTERS; k++)
            counters[k] = counter_of(i, k);
        for (k = 0; k < RECEIPT_NARTIFACTS; k++)
            artifacts[k] = (uint64_t)k;
        p = put_be(p, 18, 2);
        p = put_text(p, "");
        p = put_be(put_be(p, 8, 4), (uint64_t)(row + 1), 8);
        p = put_be(put_be(p, 8, 4), (uint64_t)received_at, 8);
        p = put_text(p, src);
        p = put_be(put_be(p, 8, 4), (uint64_t)(row / opt_batch / opt_conns), 8);
        p = put_be(put_be(p, 2, 4), 3, 2);
        p = put_be(put_be(p, 2, 4), (uint64_t)req, 2);
        p = put_be(put_be(p, 2, 4), (uint64_t)exe, 2);
        p = put_be(put_be(p, 2, 4),
                   req != exe || counter_of(i, 6) > 0 ? RECEIPT_STATUS_FALLBACK
                                                      : RECEIPT_STATUS_CLEAN,
                   2);
        p = put_text(p, model);
        p = put_text(p, plan);
        p = put_text(p, graph);
        p = put_text(p, "default");
        p = put_text(p, i % 3 ? "eos" : "max_tokens");
        p = put_be(put_be(p, 8, 4), 0x3ffffff, 8);
        p = put_i64s(p, counters, RECEIPT_NCOUNTERS);
        p = put_i64s(p, artifacts, RECEIPT_NARTIFACTS);
        p = put_be(p, 0xffffffffu, 4); /* extra: none */
    }
    p = put_be(p, 0xffff, 2);
    return (size_t)(p - buf);
}

/* The day partitions of today and tomorrow (UTC), as the writer names
 * them (store_pg.c make_partition). */
static int
center_partitions(PGconn *pc)
{
    int64_t day = unix_ms() / 86400000, d;
    char sql[256];

    for (d = day; d <= day + 1; d++) {
        snprintf(sql, sizeof(sql),
                 "CREATE TABLE IF NOT EXISTS receipts_d%lld PARTITION OF "
                 "receipts FOR VALUES FROM (%lld) TO (%lld)",
                 (long long)d, (long long)d * 86400000,
                 (long long)(d + 1) * 86400000);
        if (!pg_ok(pc, sql))
            return -1;
    }
    return 0;
}

struct central_figures {
    double copy_rate, copy_s, copy_pg_cpu, copy_client_cpu;
    struct load_result daemon;
    double daemon_s, daemon_cpu, daemon_pg_cpu, daemon_client_cpu;
};

/*
 * The COPY baseline into database `baseline`, whose schema a daemon made
 * (so the table and its indexes are the center's own), BENCH_GROUP_ROWS
 * rows per COPY, each its own transaction. 0 or -1.
 */
static int
center_copy(struct central_figures *f)
{
    char conninfo[160];
    unsigned char *buf = malloc(21 + (size_t)BENCH_GROUP_ROWS * CENTER_ROW_MAX);
    PGconn *pc;
    double t0, c0, s0;
    int rc = -1;

    pg_conninfo(conninfo, sizeof(conninfo), "baseline");
    pc = PQconnectdb(conninfo);
    if (buf == NULL || PQstatus(pc) != CONNECTION_OK ||
        center_partitions(pc) != 0)
        goto out;
    settle();
    c0 = pg_cpu_s();
    s0 = self_cpu_s();
    t0 = now_s();
    if (copy_all(pc, buf, center_stream) != 0)
        goto out;
    f->copy_s = now_s() - t0;
    f->copy_rate = (double)opt_total / f->copy_s;
    f->copy_pg_cpu = pg_cpu_s() - c0;
    f->copy_client_cpu = self_cpu_s() - s0;
    rc = 0;
out:
    if (rc != 0)
        printf("  note: central COPY: %s", PQerrorMessage(pc));
    PQfinish(pc);
    free(buf);
    return rc;
}

/*
 * Phase 9: on one private cluster, the COPY baseline (database
 * `baseline`), then the real daemon with --pg (database `center`) under
 * the batch load over its Unix socket; the CPU each side spent. 0, or -1
 * after a note.
 */
static int
central_phase(const struct load_spec *batch, struct central_figures *f)
{
    char conninfo[160];
    struct load_spec spec = *batch;
    PGconn *pc;
    pid_t pid;
    double t0, c0, d0, s0;
    int ok;

    if (pg_up("the central phase") != 0)
        return -1;
    pg_conninfo(conninfo, sizeof(conninfo), "postgres");
    pc = PQconnectdb(conninfo);
    ok = PQstatus(pc) == CONNECTION_OK &&
         pg_ok(pc, "CREATE DATABASE baseline") &&
         pg_ok(pc, "CREATE DATABASE center");
    PQfinish(pc);
    if (!ok) {
        pg_down();
        return -1;
    }
    /* The baseline's schema: the daemon's migrations, applied by it. */
    pg_conninfo(conninfo, sizeof(conninfo), "baseline");
    daemon_pg = conninfo;
    stop_daemon(start_daemon("schema"));
    daemon_pg = NULL;
    if (center_copy(f) != 0) {
        pg_down();
        return -1;
    }
    /* Measured: its autovacuum must not run beside the daemon's phase. */
    pg_conninfo(conninfo, sizeof(conninfo), "postgres");
    pc = PQconnectdb(conninfo);
    if (PQstatus(pc) == CONNECTION_OK)
        pg_ok(pc, "DROP DATABASE baseline WITH (FORCE)");
    PQfinish(pc);
    settle();
    pg_conninfo(conninfo, sizeof(conninfo), "center");
    daemon_pg = conninfo;
    pid = start_daemon("central");
    daemon_pg = NULL;
    usleep(100000);
    spec.phase = "central";
    c0 = pg_cpu_s();
    d0 = proc_cpu_s(pid, 0, NULL);
    s0 = self_cpu_s();
    t0 = now_s();
    load("central", &spec, &f->daemon);
    f->daemon_s = now_s() - t0;
    f->daemon_pg_cpu = pg_cpu_s() - c0;
    f->daemon_cpu = proc_cpu_s(pid, 0, NULL) - d0;
    f->daemon_client_cpu = self_cpu_s() - s0;
    stop_daemon(pid);
    pg_down();
    return 0;
}

static void
print_central(const struct central_figures *f)
{
    char label[64];

    printf("%-34s %9.0f rows/s (binary, %d rows per COPY, the center's "
           "receipts table: partitioned, primary key and 3 indexes)\n",
           "central: PostgreSQL COPY", f->copy_rate, BENCH_GROUP_ROWS);
    printf("%-34s CPU over %.1f s: postgres %.2f cores, client %.2f; "
           "per row: postgres %.1f us\n",
           "", f->copy_s, f->copy_pg_cpu / f->copy_s,
           f->copy_client_cpu / f->copy_s, f->copy_pg_cpu * 1e6 / opt_total);
    snprintf(label, sizeof(label), "central: daemon --pg, batch %d x %d",
             opt_batch, opt_conns);
    print_load(label, &f->daemon);
    printf("%-34s CPU over %.1f s: receiptd %.2f cores, postgres %.2f, "
           "client %.2f; per receipt: receiptd %.1f us, postgres %.1f us\n",
           "", f->daemon_s, f->daemon_cpu / f->daemon_s,
           f->daemon_pg_cpu / f->daemon_s, f->daemon_client_cpu / f->daemon_s,
           f->daemon_cpu * 1e6 / opt_total, f->daemon_pg_cpu * 1e6 / opt_total);
}

#endif /* HAVE_LIBPQ */

/* ---- 10. the relay ---- */

/* CPU seconds of a daemon's threads by name (the daemon names them:
 * the loop keeps the process's name, libuv's pool threads too). */
enum { TH_LOOP, TH_WRITER, TH_SYNCER, TH_RELAY, TH_ALL, TH_COUNT };

static void
thread_cpu_s(pid_t pid, double *v)
{
    char path[300], name[64];
    unsigned long long t[4];
    struct dirent *de;
    double c;
    DIR *d;
    int k, pp;

    memset(v, 0, TH_COUNT * sizeof(*v));
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    if ((d = opendir(path)) == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", (int)pid,
                 de->d_name);
        if (read_stat(path, name, sizeof(name), &pp, t) != 0)
            continue;
        c = (double)(t[0] + t[1]) / (double)sysconf(_SC_CLK_TCK);
        k = strcmp(name, "writer") == 0   ? TH_WRITER
            : strcmp(name, "syncer") == 0 ? TH_SYNCER
            : strcmp(name, "relay") == 0  ? TH_RELAY
                                          : TH_LOOP;
        v[k] += c;
        v[TH_ALL] += c;
    }
    closedir(d);
}

/* One run of a node under the batch load, relaying or not. */
struct relay_run {
    struct load_result load;
    double load_s;      /* the load's seconds */
    double delivered_s; /* from the load's start to all at the center; 0
                           when off, -1 when not within RELAY_WAIT_S */
    /* The node's CPU seconds by thread: over the load when off, from the
     * load's start to all delivered when on (what relaying cost it). */
    double cpu[TH_COUNT];
    double center_cpu; /* the center's, over the same time */
};

/* The node's ingest with relaying off and on (opt_relay_runs of each,
 * alternating), at the center's normal priority and, with
 * --relay-center-nice, at a lower one; and the relay's drain of a
 * backlog at a window of one batch and of opt_relay_window. */
#define RELAY_RUNS_MAX 16
struct relay_figures {
    struct relay_run off[RELAY_RUNS_MAX], on[RELAY_RUNS_MAX];
    struct relay_run nice_off[RELAY_RUNS_MAX], nice_on[RELAY_RUNS_MAX];
    int runs, nice_runs;
    double drain1, drainw; /* records/s node -> center */
};

static int opt_relay_runs = 3, opt_relay_center_nice;
static const char *opt_relay_center_dir;

/* Waits until the node `name` relayed n records; seconds since t0 (to a
 * tenth: each look is a stats query, whose CPU the node's figures
 * include), or -1 after RELAY_WAIT_S. */
#define RELAY_WAIT_S 600
static double
relayed_by(const char *name, uint64_t n, double t0)
{
    while (stat_of(name, "relay_relayed") < n) {
        if (now_s() - t0 > RELAY_WAIT_S)
            return -1;
        usleep(100000);
    }
    return now_s() - t0;
}

/* Removes the directory dir and what it holds; a failure is only said. */
static void
remove_tree(const char *dir)
{
    char cmd[700];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_ingest: could not remove %s\n", dir);
}

/* Copies tmpdir/from.db (a stopped daemon's store) to tmpdir/to.db. */
static void
copy_store(const char *from, const char *to)
{
    char cmd[2400];

    snprintf(cmd, sizeof(cmd),
             "cp '%s/%s.db' '%s/%s.db' && { [ ! -e '%s/%s.db-wal' ] || cp "
             "'%s/%s.db-wal' '%s/%s.db-wal'; }",
             tmpdir, from, tmpdir, to, tmpdir, from, tmpdir, from, tmpdir, to);
    if (system(cmd) != 0)
        dief("copy", cmd);
}

/* A node named name relaying to 127.0.0.1:port with window w (0: the
 * daemon's default). */
static pid_t
start_node(const char *name, int port, int w)
{
    static char up[64], tok[300], win[16];
    const char *extra[] = { "--upstream",
                            up,
                            "--upstream-token-file",
                            tok,
                            "--upstream-name",
                            name,
                            w > 0 ? "--upstream-window" : NULL,
                            win,
                            NULL };
    pid_t pid;

    snprintf(up, sizeof(up), "127.0.0.1:%d", port);
    snprintf(tok, sizeof(tok), "%s/token", tmpdir);
    snprintf(win, sizeof(win), "%d", w);
    daemon_extra = extra;
    pid = start_daemon(name);
    daemon_extra = NULL;
    return pid;
}

/* A drain of the store copied from `from`: records/s until the center
 * acknowledged all n, or -1. */
static double
drain(const char *from, const char *name, int port, int w, uint64_t n)
{
    double t0 = now_s(), dt;
    pid_t pid;

    copy_store(from, name);
    pid = start_node(name, port, w);
    dt = relayed_by(name, n, t0);
    stop_daemon(pid);
    return dt > 0 ? (double)n / dt : -1;
}

/* One run: a fresh node `name`, relaying to the center on port when port
 * is set, under the batch load. */
static void
relay_run(const struct load_spec *batch, const char *name, pid_t center,
          int port, struct relay_run *run)
{
    struct load_spec spec = *batch;
    uint64_t n = (uint64_t)(spec.frames * spec.conns * spec.per_frame);
    double c0[TH_COUNT], c1[TH_COUNT], cc0, t0;
    pid_t pid;
    int k;

    settle();
    spec.phase = name;
    pid = port ? start_node(name, port, 0) : start_daemon(name);
    usleep(100000);
    thread_cpu_s(pid, c0);
    cc0 = proc_cpu_s(center, 0, NULL);
    t0 = now_s();
    load(name, &spec, &run->load);
    run->load_s = now_s() - t0;
    run->delivered_s = port ? relayed_by(name, n, t0) : 0;
    thread_cpu_s(pid, c1);
    run->center_cpu = proc_cpu_s(center, 0, NULL) - cc0;
    for (k = 0; k < TH_COUNT; k++)
        run->cpu[k] = c1[k] - c0[k];
    stop_daemon(pid);
}

/* runs pairs of runs off and on, alternating which goes first; the node
 * names start with prefix. */
static void
relay_pairs(const struct load_spec *batch, pid_t center, int port,
            const char *prefix, int runs, struct relay_run *off,
            struct relay_run *on)
{
    char name[64];
    int i;

    for (i = 0; i < runs; i++) {
        snprintf(name, sizeof(name), "%soff-%d", prefix, i);
        if (i % 2 == 0)
            relay_run(batch, name, center, 0, &off[i]);
        snprintf(name, sizeof(name), "%son-%d", prefix, i);
        relay_run(batch, name, center, port, &on[i]);
        snprintf(name, sizeof(name), "%soff-%d", prefix, i);
        if (i % 2 == 1)
            relay_run(batch, name, center, 0, &off[i]);
    }
}

/* A center on SQLite listening on TCP with a token, started at nice. */
static pid_t
start_center(const char *name, int nice_value, int *port)
{
    pid_t pid;

    transport = T_TCP;
    *port = tcp_port = free_port();
    daemon_nice = nice_value;
    pid = start_daemon(name);
    daemon_nice = 0;
    transport = T_UNIX;
    return pid;
}

/*
 * Phase 10: a center on SQLite listening on TCP with a token; nodes
 * without upstream and nodes relaying to the center under the batch load,
 * opt_relay_runs of each, alternating (off, on; on, off; ...), each on a
 * fresh store; again with the center at nice opt_relay_center_nice when
 * that is set; then two copies of the first node's store relayed whole,
 * one batch in flight and opt_relay_window.
 */
static void
relay_phase(const struct load_spec *batch, struct relay_figures *f)
{
    uint64_t n = (uint64_t)(batch->frames * batch->conns * batch->per_frame);
    char tok[300];
    pid_t center;
    int port, fd;

    snprintf(tok, sizeof(tok), "%s/token", tmpdir);
    if ((fd = open(tok, O_WRONLY | O_CREAT | O_TRUNC, 0600)) < 0)
        die(tok);
    write_all(fd, BENCH_TOKEN "\n", strlen(BENCH_TOKEN) + 1);
    close(fd);
    f->runs = opt_relay_runs;
    center = start_center("center", 0, &port);
    relay_pairs(batch, center, port, "node-", f->runs, f->off, f->on);

    settle();
    f->drain1 = drain("node-off-0", "drain-1", port, 1, n);
    settle();
    f->drainw = drain("node-off-0", "drain-w", port, opt_relay_window, n);
    stop_daemon(center);

    if (opt_relay_center_nice > 0) {
        char dir[600];

        f->nice_runs = opt_relay_runs;
        if (opt_relay_center_dir != NULL) {
            snprintf(dir, sizeof(dir), "%s/bench-center-XXXXXX",
                     opt_relay_center_dir);
            if (mkdtemp(dir) == NULL)
                die(dir);
            daemon_dir = dir;
        }
        center = start_center("center-nice", opt_relay_center_nice, &port);
        daemon_dir = NULL;
        relay_pairs(batch, center, port, "nice-", f->nice_runs, f->nice_off,
                    f->nice_on);
        stop_daemon(center);
        if (opt_relay_center_dir != NULL)
            remove_tree(dir);
    }
}

static double
median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Microseconds of CPU a receipt: the median over runs of thread k's
 * (the node's; TH_COUNT: the center's). */
static double
cpu_us(const struct relay_run *r, int runs, int k)
{
    double v[RELAY_RUNS_MAX];
    int i;

    for (i = 0; i < runs; i++)
        v[i] = (k == TH_COUNT ? r[i].center_cpu : r[i].cpu[k]) * 1e6 /
               (double)opt_total;
    return median(v, runs);
}

/* Prints one set of alternating runs; returns the median of the pairs'
 * on / off ratios. */
static double
print_relay_runs(const char *what, const struct relay_run *off,
                 const struct relay_run *on, int runs)
{
    double roff[RELAY_RUNS_MAX], ron[RELAY_RUNS_MAX], ratio[RELAY_RUNS_MAX];
    double del[RELAY_RUNS_MAX], took[RELAY_RUNS_MAX], m;
    int i, late = 0;

    printf("%-34s", what);
    for (i = 0; i < runs; i++) {
        roff[i] = off[i].load.rate;
        ron[i] = on[i].load.rate;
        ratio[i] = roff[i] > 0 ? ron[i] / roff[i] : 0;
        del[i] = on[i].delivered_s;
        took[i] = on[i].load_s;
        late |= del[i] < 0;
        printf("%s %.2f (%.0f / %.0f)", i ? "," : "", ratio[i], ron[i],
               roff[i]);
    }
    m = median(ratio, runs);
    printf("\n%-34s median on / off %.2f; receipts/s median: off %.0f, on "
           "%.0f\n",
           "", m, median(roff, runs), median(ron, runs));
    if (late)
        printf("%-34s not all at the center after %d s in some runs\n", "",
               RELAY_WAIT_S);
    else
        printf("%-34s all at the center %.1f s after the load began "
               "(median; the load took %.1f s)\n",
               "", median(del, runs), median(took, runs));
    printf("%-34s node CPU a receipt, off (the load) / on (to all "
           "delivered): %.2f / %.2f us\n",
           "", cpu_us(off, runs, TH_ALL), cpu_us(on, runs, TH_ALL));
    printf("%-34s   by thread, off / on: loop+pool %.2f / %.2f, writer "
           "%.2f / %.2f, syncer %.2f / %.2f, relay %.2f us\n",
           "", cpu_us(off, runs, TH_LOOP), cpu_us(on, runs, TH_LOOP),
           cpu_us(off, runs, TH_WRITER), cpu_us(on, runs, TH_WRITER),
           cpu_us(off, runs, TH_SYNCER), cpu_us(on, runs, TH_SYNCER),
           cpu_us(on, runs, TH_RELAY));
    printf("%-34s center CPU a receipt (load start to all delivered): "
           "%.2f us\n",
           "", cpu_us(on, runs, TH_COUNT));
    return m;
}

static double relay_ratio = -1, relay_nice_ratio = -1;

static void
print_relay(const struct relay_figures *f)
{
    char label[80];

    snprintf(label, sizeof(label), "node relay on / off, batch %d x %d",
             opt_batch, opt_conns);
    relay_ratio = print_relay_runs(label, f->off, f->on, f->runs);
    if (f->nice_runs > 0) {
        snprintf(label, sizeof(label), "the same, center at nice %d%s",
                 opt_relay_center_nice,
                 opt_relay_center_dir ? ", own disk" : "");
        relay_nice_ratio =
            print_relay_runs(label, f->nice_off, f->nice_on, f->nice_runs);
    }
    printf("%-34s %9.0f records/s (a backlog of %ld, window 1)\n",
           "relay drain node -> center", f->drain1, opt_total);
    printf("%-34s %9.0f records/s (window %d)\n", "", f->drainw,
           opt_relay_window);
}

/* ---- rounds of batch and single (--rounds) ---- */

static void
print_ratio(const char *what, double a, double b)
{
    if (b > 0)
        printf("  %-32s %9.2f\n", what, a / b);
    else
        printf("  %-32s       n/a\n", what);
}

#define ROUNDS_MAX 9
static int opt_rounds = 1;

/* Each round's ratios (index 0: the first round's); a ratio whose
 * baseline was not measured is 0. */
struct round_ratios {
    double single_batch[ROUNDS_MAX];
    double batch_bare[ROUNDS_MAX];
    double batch_pg[ROUNDS_MAX];
    double half_p99[ROUNDS_MAX]; /* ms, at half of the round's batch rate */
};

/* The half load's offered rate: half of the batch rate rb measured, or
 * --half-rate. */
static double
half_rate(const struct load_result *rb)
{
    return opt_half_rate > 0 ? opt_half_rate : rb->rate / 2;
}

/* The half-load phase on daemon name: the batch load paced at
 * half_rate(). */
static void
half_load(const char *name, const struct load_spec *batch,
          const struct load_result *rb, struct load_result *rh)
{
    struct load_spec half = *batch;

    half.phase = "half";
    half.frames = batch->frames / 2;
    half.rate = half_rate(rb);
    load(name, &half, rh);
}

/*
 * A fresh daemon's first load pays what a running one paid long ago: its
 * WAL and database files growing to their working size, its caches and
 * pools filling. Measured second on the same daemon, batches ran about
 * 13% faster and single receipts about 8% (two runs of --rounds 5), so a
 * round's single / batch leaned by which phase came first. A warm-up of
 * a fifth of the phase's receipts, from sources of its own and not
 * measured, puts every measured phase on a daemon in its working state.
 */
static void
warm_up(const char *name, const struct load_spec *spec)
{
    struct load_spec w = *spec;
    struct load_result r;

    w.phase = "warmup";
    w.frames = spec->frames / 5 > 0 ? spec->frames / 5 : 1;
    memset(&r, 0, sizeof(r));
    load(name, &w, &r);
    settle();
}

/* The baselines of a round after the first, measured just before its
 * daemon: the machine's hour moves them as it moves the daemon, so each
 * round's batch is compared with the baselines of its own minutes. The
 * wide rows are the first round's alone. */
static void
round_baselines(int k, double *bare, double *pg)
{
    double keep_wide = pg_wide;

    *bare = *pg = -1;
    if (phase_on("bare")) {
        settle();
        *bare = bare_append();
    }
#ifdef HAVE_LIBPQ
    if (phase_on("pg")) {
        settle();
        *pg = pg_copy();
        pg_wide = keep_wide;
    }
#endif
    if (*bare > 0)
        printf("round %d: bare append %.0f rows/s\n", k, *bare);
    if (*pg > 0)
        printf("round %d: PostgreSQL COPY %.0f rows/s\n", k, *pg);
}

/*
 * Rounds 2..opt_rounds of the batch and single phases, each on a fresh
 * daemon whose store is removed after it, the single phase first in the
 * even rounds, each after its own bare append and COPY and with its own
 * half load after its batch: each round's figures into rr at [1..].
 */
static void
more_rounds(const struct load_spec *batch, const struct load_spec *single,
            struct round_ratios *rr)
{
    struct load_result rb, rh, rs;
    char name[32], label[64], db[300];
    double bare, pg;
    pid_t pid;
    int k;

    for (k = 2; k <= opt_rounds; k++) {
        snprintf(name, sizeof(name), "round%d", k);
        round_baselines(k, &bare, &pg);
        settle();
        pid = start_daemon(name);
        warm_up(name, k % 2 == 0 ? single : batch);
        memset(&rb, 0, sizeof(rb));
        memset(&rh, 0, sizeof(rh));
        memset(&rs, 0, sizeof(rs));
        if (k % 2 == 0) {
            load(name, single, &rs);
            settle();
        }
        load(name, batch, &rb);
        if (phase_on("half")) {
            settle();
            half_load(name, batch, &rb, &rh);
        }
        if (k % 2 != 0) {
            settle();
            load(name, single, &rs);
        }
        stop_daemon(pid);
        snprintf(db, sizeof(db), "%s/%s.db", tmpdir, name);
        remove_under(db, "");
        remove_under(db, "-wal");
        remove_under(db, "-shm");
        snprintf(label, sizeof(label), "round %d (%s first): batch", k,
                 k % 2 == 0 ? "single" : "batch");
        print_load(label, &rb);
        if (phase_on("half")) {
            snprintf(label, sizeof(label), "round %d: half load (%.0f/s)", k,
                     half_rate(&rb));
            print_load(label, &rh);
        }
        snprintf(label, sizeof(label), "round %d: single", k);
        print_load(label, &rs);
        rr->single_batch[k - 1] = rb.rate > 0 ? rs.rate / rb.rate : 0;
        rr->batch_bare[k - 1] = bare > 0 ? rb.rate / bare : 0;
        rr->batch_pg[k - 1] = pg > 0 ? rb.rate / pg : 0;
        rr->half_p99[k - 1] = phase_on("half") ? rh.p99 : 0;
    }
}

/* One figure's rounds and their median (of the rounds that measured
 * it): a ratio, or with ms set milliseconds. */
static void
print_rounds(const char *what, double *v, int ms)
{
    double m[ROUNDS_MAX];
    char label[64];
    int k, n = 0;

    printf("  %-32s", what);
    for (k = 0; k < opt_rounds; k++) {
        printf(v[k] <= 0 ? " n/a" : ms ? " %.1f" : " %.2f", v[k]);
        if (v[k] > 0)
            m[n++] = v[k];
    }
    printf("\n");
    snprintf(label, sizeof(label), "  median of %d", n);
    if (ms && n > 0)
        printf("  %-32s %9.1f ms\n", label, median(m, n));
    else
        print_ratio(label, n > 0 ? median(m, n) : 0, 1);
}

/* ---- main ---- */

static void
parse_args(int argc, char **argv)
{
    int i;

    for (i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (v == NULL)
            usage();
        if (strcmp(a, "--total") == 0)
            opt_total = atol(v);
        else if (strcmp(a, "--connections") == 0)
            opt_conns = atoi(v);
        else if (strcmp(a, "--batch") == 0)
            opt_batch = atoi(v);
        else if (strcmp(a, "--single-connections") == 0)
            opt_single_conns = atoi(v);
        else if (strcmp(a, "--pipeline") == 0)
            opt_pipeline = atoi(v);
        else if (strcmp(a, "--idle") == 0)
            opt_idle = atoi(v);
        else if (strcmp(a, "--relay-window") == 0)
            opt_relay_window = atoi(v);
        else if (strcmp(a, "--relay-runs") == 0)
            opt_relay_runs = atoi(v);
        else if (strcmp(a, "--rounds") == 0)
            opt_rounds = atoi(v);
        else if (strcmp(a, "--half-rate") == 0)
            opt_half_rate = atof(v);
        else if (strcmp(a, "--relay-center-nice") == 0)
            opt_relay_center_nice = atoi(v);
        else if (strcmp(a, "--relay-center-dir") == 0)
            opt_relay_center_dir = v;
        else if (strcmp(a, "--daemon") == 0)
            opt_daemon = v;
        else if (strcmp(a, "--pg-bin") == 0)
            opt_pg_bin = v;
        else if (strcmp(a, "--only") == 0)
            opt_only = v;
        else if (strcmp(a, "--daemon-arg") == 0 &&
                 n_daemon_args < MAX_DAEMON_ARGS)
            opt_daemon_args[n_daemon_args++] = v;
        else
            usage();
    }
    if (opt_conns < 1 || opt_batch < 1 || opt_single_conns < 1 ||
        opt_pipeline < 1 || opt_idle < 0 || opt_relay_window < 1 ||
        opt_relay_runs < 1 || opt_relay_runs > RELAY_RUNS_MAX ||
        opt_rounds < 1 || opt_rounds > ROUNDS_MAX ||
        opt_relay_center_nice < 0 || opt_relay_center_nice > 19 ||
        opt_total < (long)opt_conns * opt_batch * 2 ||
        opt_total < (long)opt_single_conns) {
        fprintf(stderr, "bench_ingest: --total must be at least 2 x "
                        "connections x batch and at least "
                        "--single-connections\n");
        exit(2);
    }
}

static void
print_load(const char *what, const struct load_result *r)
{
    printf("%-34s %9.0f receipts/s  ack p50 %6.2f ms  p99 %6.2f ms  "
           "writer %5.1f us/receipt\n",
           what, r->rate, r->p50, r->p99, r->cpu_us);
    printf("%-34s %9.0f receipts per commit group, %llu checkpoints of "
           "%.1f ms\n",
           "", r->per_group, (unsigned long long)r->checkpoints,
           r->checkpoint_ms);
    printf("%-34s %llu WAL syncs of %.2f ms; CPU per receipt: daemon "
           "%.1f us, client %.1f us\n",
           "", (unsigned long long)r->syncs, r->sync_ms, r->daemon_us,
           r->client_us);
    printf("%-34s in the daemon: submit to answer %.2f ms (a group %.2f "
           "ms), the rest of a round trip in the loop, the socket and the "
           "client\n",
           "", r->answer_ms, r->group_ms);
}

int
main(int argc, char **argv)
{
    struct load_spec batch, single;
    struct load_result rb, rh, rs;
    struct round_ratios rr;
    struct rlimit rl;
    double bare, pg = -1;
    long rss, hwm, rss0, peak;
    struct tls_figures tf;
    struct relay_figures rf;
#ifdef HAVE_LIBPQ
    struct central_figures cf;
#endif
    int tls_ok, central_ok = 0;
    char label[64];
    pid_t pid;

    parse_args(argc, argv);
    /* Idle connections need descriptors on both sides; the daemon
     * inherits this limit. */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGPIPE, SIG_IGN);
    snprintf(tmpdir, sizeof(tmpdir), "%s/bench-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(tmpdir) == NULL)
        die("mkdtemp");

    printf("receiptd ingest benchmark: %ld receipts per phase, %d frames in "
           "flight per connection\n",
           opt_total, opt_pipeline);
    setvbuf(stdout, NULL, _IOLBF, 0);
    settle();
    bare = phase_on("bare") ? bare_append() : -1;
    if (bare > 0) {
        printf(
            "%-34s %9.0f rows/s (sqlite3, WAL, synchronous=FULL, %d rows per "
            "transaction, no index; the daemon's row)\n",
            "bare append", bare, BENCH_GROUP_ROWS);
        settle();
        wide = 1;
        bare_wide = bare_append();
        wide = 0;
        printf("%-34s %9.0f rows/s (the same, one column per field)\n",
               "bare append, wide row", bare_wide);
    }
#ifdef HAVE_LIBPQ
    settle();
    pg = phase_on("pg") ? pg_copy() : -1;
    if (pg > 0)
        printf("%-34s %9.0f rows/s (binary, %d rows per COPY, 2 indexes, "
               "fsync and synchronous_commit on; the daemon's row)\n",
               "PostgreSQL COPY", pg, BENCH_GROUP_ROWS);
    if (pg_wide > 0)
        printf("%-34s %9.0f rows/s (the same, one column per field)\n",
               "PostgreSQL COPY, wide row", pg_wide);
#else
    printf("  note: PostgreSQL COPY skipped: built without libpq (Debian: "
           "libpq-dev)\n");
#endif

    settle();
    pid = start_daemon("load");
    batch = (struct load_spec){ "batch",
                                PROTO_OP_RECEIPTS,
                                opt_conns,
                                opt_batch,
                                opt_total / opt_batch / opt_conns,
                                0 };
    single = (struct load_spec){ "single",
                                 PROTO_OP_RECEIPT,
                                 opt_single_conns,
                                 1,
                                 opt_total / opt_single_conns,
                                 0 };
    memset(&rb, 0, sizeof(rb));
    memset(&rh, 0, sizeof(rh));
    memset(&rs, 0, sizeof(rs));
    if (phase_on("batch") || phase_on("half"))
        warm_up("load", &batch);
    else if (phase_on("single"))
        warm_up("load", &single);
    if (phase_on("batch") || phase_on("half")) {
        load("load", &batch, &rb);
        snprintf(label, sizeof(label), "daemon, batch %d x %d conns", opt_batch,
                 opt_conns);
        print_load(label, &rb);
    }
    if (phase_on("half")) {
        settle();
        half_load("load", &batch, &rb, &rh);
        snprintf(label, sizeof(label), "daemon, half load (%.0f/s offered)",
                 half_rate(&rb));
        print_load(label, &rh);
    }

    if (phase_on("single")) {
        settle();
        load("load", &single, &rs);
        snprintf(label, sizeof(label), "daemon, single x %d conns",
                 opt_single_conns);
        print_load(label, &rs);
    }
    peak = proc_kb(pid, "VmHWM:");
    stop_daemon(pid);
    if (opt_rounds > 1 && phase_on("batch") && phase_on("single")) {
        memset(&rr, 0, sizeof(rr));
        rr.single_batch[0] = rb.rate > 0 ? rs.rate / rb.rate : 0;
        rr.batch_bare[0] = bare > 0 ? rb.rate / bare : 0;
        rr.batch_pg[0] = pg > 0 ? rb.rate / pg : 0;
        rr.half_p99[0] = phase_on("half") ? rh.p99 : 0;
        more_rounds(&batch, &single, &rr);
    }

    rss = hwm = rss0 = 0;
    if (phase_on("idle"))
        idle("idle", &rss, &hwm, &rss0);
    memset(&tf, 0, sizeof(tf));
    tls_ok = phase_on("tls") && tls_phase(&batch, &tf) == 0;
    if (tls_ok) {
        snprintf(label, sizeof(label), "TCP plain, batch %d x %d conns",
                 opt_batch, opt_conns);
        print_load(label, &tf.tcp);
        snprintf(label, sizeof(label), "TCP TLS 1.3, batch %d x %d conns",
                 opt_batch, opt_conns);
        print_load(label, &tf.tls);
    }
#ifdef HAVE_LIBPQ
    memset(&cf, 0, sizeof(cf));
    if (phase_on("central")) {
        settle();
        central_ok = central_phase(&batch, &cf) == 0;
        if (central_ok)
            print_central(&cf);
    }
#else
    if (phase_on("central"))
        printf("  note: the central phase skipped: built without libpq "
               "(Debian: libpq-dev)\n");
#endif
    memset(&rf, 0, sizeof(rf));
    if (phase_on("relay")) {
        settle();
        relay_phase(&batch, &rf);
        print_relay(&rf);
    }
    printf("memory: peak RSS under load %.1f MiB\n", peak / 1024.0);
    if (tls_ok && tf.idle_tls > 0)
        printf("memory: %d idle TCP connections: RSS %.1f MiB (%.1f before); "
               "TLS: %.1f MiB (%.1f before), %.1f KiB per TLS connection, "
               "%.1f KiB more than plain\n",
               opt_idle, tf.idle_tcp / 1024.0, tf.base_tcp / 1024.0,
               tf.idle_tls / 1024.0, tf.base_tls / 1024.0,
               (double)(tf.idle_tls - tf.base_tls) / opt_idle,
               (double)((tf.idle_tls - tf.base_tls) -
                        (tf.idle_tcp - tf.base_tcp)) /
                   opt_idle);
    if (phase_on("idle"))
        printf("memory: %d idle connections: RSS %.1f MiB (%.1f MiB before), "
               "peak %.1f MiB\n",
               opt_idle, rss / 1024.0, rss0 / 1024.0, hwm / 1024.0);
    printf("ratios:\n");
    print_ratio("batch / bare append", rb.rate, bare);
    print_ratio("batch / PostgreSQL COPY", rb.rate, pg);
    print_ratio("batch / bare append, wide row", rb.rate, bare_wide);
    print_ratio("batch / PostgreSQL COPY, wide row", rb.rate, pg_wide);
    print_ratio("single / batch", rs.rate, rb.rate);
    if (opt_rounds > 1 && phase_on("batch") && phase_on("single")) {
        printf("  by round (each round's batch against its own "
               "baselines):\n");
        print_rounds("single / batch", rr.single_batch, 0);
        if (bare > 0)
            print_rounds("batch / bare append", rr.batch_bare, 0);
        if (pg > 0)
            print_rounds("batch / PostgreSQL COPY", rr.batch_pg, 0);
        if (phase_on("half"))
            print_rounds("half-load p99, ms", rr.half_p99, 1);
    }
    if (tls_ok)
        print_ratio("TLS / plain TCP, batch", tf.tls.rate, tf.tcp.rate);
#ifdef HAVE_LIBPQ
    if (central_ok)
        print_ratio("central daemon / COPY", cf.daemon.rate, cf.copy_rate);
#endif
    if (phase_on("relay")) {
        print_ratio("node relay on / off (median)", relay_ratio, 1);
        if (relay_nice_ratio >= 0) {
            snprintf(label, sizeof(label), "  center at nice %d%s",
                     opt_relay_center_nice,
                     opt_relay_center_dir ? ", own disk" : "");
            print_ratio(label, relay_nice_ratio, 1);
        }
        snprintf(label, sizeof(label), "relay drain window %d / 1",
                 opt_relay_window);
        print_ratio(label, rf.drainw, rf.drain1);
    }

    remove_tree(tmpdir);
    return 0;
}
