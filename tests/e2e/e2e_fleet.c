/*
 * e2e_fleet.c: a simulated fleet on one machine (docs/fleet.md, step 5).
 *
 * Ten node daemons (the real binary, each on its own SQLite file) carry
 * 1,000 producer sources, 100 each, which send `receipts` batches with
 * seqs, plus receipts without seq or hello. Every node relays to two
 * central instances (`receiptd --pg`) on one private PostgreSQL cluster,
 * listing both as upstream endpoints (half of them in the other order).
 * While the producers write, the test kills with SIGKILL a central
 * instance, a node, and PostgreSQL itself (an immediate stop: a crash),
 * each at a random moment and started again, in a random order. At the
 * end:
 *
 * - every record a node acknowledged to its producer is in PostgreSQL
 *   exactly once (libpq: every (source, seq) holds its batch's receipts
 *   once; every acknowledged receipt without seq once, none twice), and
 *   each node's receipts are the center's by origin (the query op);
 * - `gaps` at a center is empty for every source (1,000 sources, none
 *   missing a seq);
 * - the fleet-wide `fallbacks` (by source and by plan) and `coverage` at
 *   a center equal the sums of the nodes' answers, asked of both centers.
 *
 * FLEET_ROUNDS sets the batches per source (16 by default). Reports SKIP
 * where PostgreSQL 15 is not installed (a failure when RECEIPTD_CI is
 * set).
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include <libpq-fe.h>
#include <msgpack.h>

#include "e2e_util.h"
#include "envelope.h"
#include "pg_cluster.h"
#include "skip.h"

#define NODES   10
#define CENTERS 2
#define PER     100 /* sources a node carries */
#define SOURCES (NODES * PER)
#define BATCH   5  /* receipts a batch (one seq) */
#define UNSEQ   20 /* receipts without seq a node gets, per round */
#define TOKEN   "fleet-token"
#define TOKEN_HASH                                                             \
    "233a1f78caac55c3cde9d5b2e2b5b001b018c84de79ef9a1819e46678e275749"
#define NCOUNTERS 26
#define KILLS     6 /* a center, a node, PostgreSQL, and three of any */

static struct e2e_daemon nodes[NODES], centers[CENTERS];
static char chost[CENTERS][64];
static struct pg_scratch pg;
static char db[700];
static char conf[300], tokfile[300];
static unsigned rounds_per_source = 16;

/* ---- The cluster, the centers, the nodes. ---- */

/* One cluster for the binary, in its parent process (an unchecked
 * fixture), so that it is stopped whatever the test does. */
static void
cluster_up(void)
{
    pg_scratch_up(&pg, "e2e-fleet");
}

static void
cluster_down(void)
{
    pg_scratch_down(&pg);
}

static void
center_spawn(int i, int first)
{
    const char *flags[] = { "--config", conf, "--tcp", chost[i],
                            "--pg",     db,   NULL };
    long until;
    int fd, port;

    if (first) {
        port = e2e_free_port();
        ck_assert_int_gt(port, 0);
        snprintf(chost[i], sizeof(chost[i]), "127.0.0.1:%d", port);
        ck_assert_msg(e2e_start(&centers[i], flags) == 0,
                      "central instance %d did not start", i);
    } else
        ck_assert_msg(e2e_restart(&centers[i], flags) == 0,
                      "central instance %d did not start again", i);
    port = atoi(strchr(chost[i], ':') + 1);
    for (until = e2e_now_ms() + 10000; e2e_now_ms() < until;) {
        if ((fd = e2e_connect_tcp(port)) >= 0) {
            close(fd);
            return;
        }
        usleep(10000);
    }
    ck_abort_msg("central instance %d's TCP listener did not come up", i);
}

static void
node_spawn(int i, int first)
{
    char name[32];
    /* Half the nodes list the centers the other way round. */
    const char *flags[] = { "--upstream",
                            chost[i % 2],
                            "--upstream",
                            chost[(i + 1) % 2],
                            "--upstream-token-file",
                            tokfile,
                            "--upstream-name",
                            name,
                            NULL };

    snprintf(name, sizeof(name), "node-%d", i);
    if (first)
        ck_assert_msg(e2e_start(&nodes[i], flags) == 0, "node %d did not start",
                      i);
    else
        ck_assert_msg(e2e_restart(&nodes[i], flags) == 0,
                      "node %d did not start again", i);
}

/* ---- The producers: one process per node. ---- */

static void
ack_path(int node, char *buf, size_t len)
{
    snprintf(buf, len, "%s/acked-%d", pg.base, node);
}

/* Connects to the node's socket and says hello as source (none when
 * NULL), retrying while the node restarts: -1 after 60 s. */
static int
connect_node(int node, const char *source)
{
    long until = e2e_now_ms() + 60000;
    int fd;

    while (e2e_now_ms() < until) {
        if ((fd = e2e_connect(&nodes[node])) >= 0) {
            if (source == NULL || e2e_hello(fd, source) == 0)
                return fd;
            close(fd);
        }
        usleep(20000);
    }
    return -1;
}

/* The receipts' figures: a fallback for some, counters measured for
 * others, so fallbacks and coverage have something to sum. */
static void
receipt_of(struct e2e_receipt *r, unsigned n, char *plan, size_t len)
{
    snprintf(plan, len, "plan-%u", n % 4);
    memset(r, 0, sizeof(*r));
    r->schema = n % 5 ? 3 : 2;
    r->plan = plan;
    r->graph = "g";
    r->model = "m";
    r->requested = "cuda";
    r->executed = n % 3 ? "cuda" : "cpu";
    r->coverage = n % 2 ? 0x41 : 0x1;
    r->decode_steps = n;
    r->fallback_count = n % 3 ? 0 : 1;
}

/* Sends source's batch seq and waits for its acknowledgement; 0 when
 * acknowledged, 1 when the connection failed (resend), -1 refused. */
static int
send_batch(int fd, unsigned src, uint64_t seq)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct e2e_reply rep;
    struct e2e_receipt r;
    char plan[16];
    unsigned k;
    int rc = 1;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, BATCH);
    for (k = 0; k < BATCH; k++) {
        receipt_of(&r, src * 7 + (unsigned)seq * 3 + k, plan, sizeof(plan));
        if (e2e_pack_receipt(&pk, &r) != 0)
            _exit(3);
    }
    if (e2e_request(fd, PROTO_OP_RECEIPTS, seq, 1, seq, sb.data, sb.size) ==
            0 &&
        e2e_recv(fd, 20000, &rep) == 0) {
        rc = rep.r.ok ? 0 : -1;
        if (!rep.r.ok)
            fprintf(stderr, "fleet: source %u seq %llu refused: %s\n", src,
                    (unsigned long long)seq, rep.r.err.message);
        e2e_reply_free(&rep);
    }
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

/* Receipts without seq or hello, each a model of its own ("u-N-K"); the
 * acknowledged ones are appended to the node's ack file. */
static int
send_unsequenced(int node, unsigned round, FILE *acks)
{
    struct e2e_receipt r;
    struct e2e_reply rep;
    char plan[16], model[32];
    size_t len;
    unsigned k;
    int fd = connect_node(node, NULL);

    if (fd < 0)
        return -1;
    for (k = 0; k < UNSEQ; k++) {
        char *body;

        receipt_of(&r, round * UNSEQ + k, plan, sizeof(plan));
        snprintf(model, sizeof(model), "u-%d-%u", node, round * UNSEQ + k);
        r.model = model;
        body = e2e_receipt_bytes(&r, &len);
        if (body == NULL)
            return -1;
        if (e2e_request(fd, PROTO_OP_RECEIPT, k + 1, 0, 0, body, len) != 0 ||
            e2e_recv(fd, 20000, &rep) != 0) {
            /* The node died: this one may or may not be stored, and is
             * not acknowledged; the next goes to the node restarted. */
            free(body);
            close(fd);
            if ((fd = connect_node(node, NULL)) < 0)
                return -1;
            continue;
        }
        free(body);
        if (rep.r.ok) {
            fprintf(acks, "%s\n", model);
            fflush(acks);
        }
        e2e_reply_free(&rep);
    }
    close(fd);
    return 0;
}

/* The producers of node: each source's batches 1..rounds, resent until
 * acknowledged, and the unsequenced receipts after each round. The
 * child's exit status says whether everything was acknowledged. */
static void
producer(int node)
{
    char path[400], source[32];
    unsigned round, j, src;
    FILE *acks;
    int fd, rc;

    ack_path(node, path, sizeof(path));
    if ((acks = fopen(path, "w")) == NULL)
        _exit(2);
    for (round = 1; round <= rounds_per_source; round++) {
        for (j = 0; j < PER; j++) {
            src = (unsigned)node * PER + j;
            snprintf(source, sizeof(source), "src-%u", src);
            for (;;) {
                if ((fd = connect_node(node, source)) < 0)
                    _exit(4);
                rc = send_batch(fd, src, round);
                close(fd);
                if (rc < 0)
                    _exit(5);
                if (rc == 0)
                    break;
            }
        }
        if (send_unsequenced(node, round, acks) != 0)
            _exit(6);
    }
    fclose(acks);
    _exit(0);
}

/* ---- Chaos. ---- */

enum { KILL_CENTER, KILL_NODE, KILL_PG };

static void
kill_one(int what)
{
    int i;

    switch (what) {
    case KILL_CENTER:
        i = rand() % CENTERS;
        ck_assert_int_eq(e2e_stop(&centers[i], SIGKILL, 5000, NULL), 0);
        usleep((useconds_t)(rand() % 500000));
        center_spawn(i, 0);
        break;
    case KILL_NODE:
        i = rand() % NODES;
        ck_assert_int_eq(e2e_stop(&nodes[i], SIGKILL, 5000, NULL), 0);
        usleep((useconds_t)(rand() % 200000));
        node_spawn(i, 0);
        break;
    default:
        /* PostgreSQL crashes: the server recovers from its WAL. */
        ck_assert_int_eq(pg_cluster_stop(pg.dir, "immediate"), 0);
        usleep((useconds_t)(rand() % 500000));
        pg_cluster_start(pg.dir, pg.conninfo, sizeof(pg.conninfo));
        break;
    }
}

/* Reaps node's producer (waiting for it when wait is set): 1 when it
 * exited, having had everything acknowledged, 0 while it runs. */
static int
reap(pid_t *kids, int node, int wait)
{
    int status;
    pid_t p;

    if (kids[node] == 0)
        return 1;
    p = waitpid(kids[node], &status, wait ? 0 : WNOHANG);
    if (p == 0)
        return 0;
    ck_assert_int_eq(p, kids[node]);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "the producers of node %d failed (status %d)", node, status);
    kids[node] = 0;
    return 1;
}

/* ---- Queries. ---- */

/* A query body {kind, group_by?, limit: 10000, only_missing?} on d;
 * retried for a while (a center whose database just came back). */
static void
query(struct e2e_daemon *d, const char *kind, const char *group_by,
      const char *origin, int only_missing, struct e2e_reply *rep)
{
    long until = e2e_now_ms() + 30000;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    char last[256] = "no answer";
    int fd;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2 + (group_by != NULL) + (origin != NULL) +
                              (only_missing != 0));
    msgpack_pack_str_with_body(&pk, "kind", 4);
    msgpack_pack_str_with_body(&pk, kind, strlen(kind));
    msgpack_pack_str_with_body(&pk, "limit", 5);
    msgpack_pack_uint32(&pk, 10000);
    if (group_by != NULL) {
        msgpack_pack_str_with_body(&pk, "group_by", 8);
        msgpack_pack_str_with_body(&pk, group_by, strlen(group_by));
    }
    if (origin != NULL) {
        msgpack_pack_str_with_body(&pk, "origin", 6);
        msgpack_pack_str_with_body(&pk, origin, strlen(origin));
    }
    if (only_missing) {
        msgpack_pack_str_with_body(&pk, "only_missing", 12);
        msgpack_pack_true(&pk);
    }
    while (e2e_now_ms() < until) {
        if ((fd = e2e_connect(d)) >= 0) {
            if (e2e_request(fd, PROTO_OP_QUERY, 1, 0, 0, sb.data, sb.size) ==
                    0 &&
                e2e_recv(fd, 30000, rep) == 0) {
                if (rep->r.ok) {
                    close(fd);
                    msgpack_sbuffer_destroy(&sb);
                    return;
                }
                snprintf(last, sizeof(last), "%s", rep->r.err.message);
                e2e_reply_free(rep);
            }
            close(fd);
        }
        usleep(200000);
    }
    ck_abort_msg("%s query failed: %s", kind, last);
}

static const msgpack_object *
rows_of(struct e2e_reply *rep)
{
    const msgpack_object *rows = e2e_get(rep->r.result, "rows");
    const msgpack_object *more = e2e_get(rep->r.result, "truncated");

    ck_assert(rows != NULL && rows->type == MSGPACK_OBJECT_ARRAY);
    ck_assert(more == NULL || more->type != MSGPACK_OBJECT_BOOLEAN ||
              !more->via.boolean);
    return rows;
}

/* The index of a `fallbacks` group: a source "src-N" (N), "" (SOURCES),
 * or a plan "plan-N" (N). */
static unsigned
group_index(const msgpack_object *row, const char *field)
{
    const msgpack_object *v = e2e_get(row, field);
    char buf[32];
    unsigned n;

    ck_assert(v != NULL && v->type == MSGPACK_OBJECT_STR);
    if (v->via.str.size == 0)
        return SOURCES;
    snprintf(buf, sizeof(buf), "%.*s", (int)v->via.str.size, v->via.str.ptr);
    ck_assert_msg(sscanf(buf, "%*[a-z]-%u", &n) == 1 && n < SOURCES, "%s", buf);
    return n;
}

struct figures {
    uint64_t by_source[SOURCES + 1][4]; /* receipts, fallback, clean,
                                           unproven */
    uint64_t by_plan[4][4];
    uint64_t cov[NCOUNTERS][4]; /* receipts, measured, unknown, sum */
};

static void
add_fallbacks(struct e2e_daemon *d, const char *group_by, uint64_t (*into)[4],
              unsigned n_groups)
{
    static const char *const keys[4] = { "receipts", "fallback", "clean",
                                         "unproven" };
    struct e2e_reply rep;
    const msgpack_object *rows;
    uint32_t i;
    unsigned g, k;

    query(d, "fallbacks", group_by, NULL, 0, &rep);
    rows = rows_of(&rep);
    for (i = 0; i < rows->via.array.size; i++) {
        g = group_index(&rows->via.array.ptr[i], strcmp(group_by, "plan") == 0
                                                     ? "prepared_plan_id"
                                                     : "source");
        ck_assert_uint_lt(g, n_groups);
        for (k = 0; k < 4; k++)
            into[g][k] += e2e_get_uint(&rows->via.array.ptr[i], keys[k]);
    }
    e2e_reply_free(&rep);
}

static void
add_coverage(struct e2e_daemon *d, uint64_t (*into)[4])
{
    static const char *const keys[4] = { "receipts", "measured", "unknown",
                                         "sum" };
    struct e2e_reply rep;
    const msgpack_object *rows, *row;
    uint32_t i;
    uint64_t bit;
    unsigned k;

    query(d, "coverage", "none", NULL, 0, &rep);
    rows = rows_of(&rep);
    for (i = 0; i < rows->via.array.size; i++) {
        row = &rows->via.array.ptr[i];
        bit = e2e_get_uint(row, "bit");
        ck_assert_uint_lt(bit, NCOUNTERS);
        for (k = 0; k < 4; k++)
            into[bit][k] += e2e_get_uint(row, keys[k]);
    }
    e2e_reply_free(&rep);
}

static void
figures_of(struct e2e_daemon *ds, int n, struct figures *f)
{
    int i;

    memset(f, 0, sizeof(*f));
    for (i = 0; i < n; i++) {
        add_fallbacks(&ds[i], "source", f->by_source, SOURCES + 1);
        add_fallbacks(&ds[i], "plan", f->by_plan, 4);
        add_coverage(&ds[i], f->cov);
    }
}

/* How many receipts d's `receipts` query returns (origin: at a center,
 * those that node relayed); at most 10,000. */
static uint32_t
count_receipts(struct e2e_daemon *d, const char *origin)
{
    struct e2e_reply rep;
    uint32_t n;

    query(d, "receipts", NULL, origin, 0, &rep);
    n = rows_of(&rep)->via.array.size;
    e2e_reply_free(&rep);
    return n;
}

static long long
pg_scalar(PGconn *pc, const char *sql)
{
    PGresult *r = PQexec(pc, sql);
    long long v;

    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql,
                  PQerrorMessage(pc));
    v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

/* Waits until every node has nothing left to relay. */
static void
await_delivery(long ms)
{
    long until = e2e_now_ms() + ms;
    uint64_t backlog = 0;
    int i, fd, idle;

    while (e2e_now_ms() < until) {
        idle = 0;
        for (i = 0; i < NODES; i++) {
            if ((fd = e2e_connect(&nodes[i])) < 0)
                break;
            backlog = e2e_stat(fd, 2, "relay_backlog");
            close(fd);
            if (backlog != 0)
                break;
            idle++;
        }
        if (idle == NODES)
            return;
        usleep(200000);
    }
    ck_abort_msg("node %d still has %llu receipts to relay", idle,
                 (unsigned long long)backlog);
}

/* ---- The test. ---- */

START_TEST(test_fleet_relays_exactly_once_through_kills)
{
    const char *env = getenv("FLEET_ROUNDS");
    int order[KILLS] = { KILL_CENTER, KILL_NODE, KILL_PG };
    pid_t kids[NODES];
    struct figures *center_f, *nodes_f;
    char sql[512], path[400], line[64], name[32];
    uint64_t seqd, unseq_acked = 0;
    PGconn *pc;
    static const char *const what[] = { "a central instance", "a node",
                                        "PostgreSQL" };
    int i, j, kills = 0, t, writing;
    long t0 = e2e_now_ms();
    FILE *f;

    if (env != NULL && atoi(env) > 0)
        rounds_per_source = (unsigned)atoi(env);
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    pg_cluster_database(pg.conninfo, "fleet", db, sizeof(db));
    snprintf(conf, sizeof(conf), "%s/center.conf", pg.base);
    snprintf(tokfile, sizeof(tokfile), "%s/token", pg.base);
    ck_assert_int_eq(e2e_write_file(tokfile, TOKEN "\n"), 0);
    ck_assert_int_eq(e2e_write_file(conf,
                                    "listen: { tcp_plaintext = true; };\n"
                                    "access: { tokens = ( { name = \"nodes\"; "
                                    "sha256 = \"" TOKEN_HASH "\"; } ); };\n"),
                     0);
    for (i = 0; i < CENTERS; i++)
        center_spawn(i, 1);
    for (i = 0; i < NODES; i++)
        node_spawn(i, 1);
    for (i = 0; i < NODES; i++) {
        kids[i] = fork();
        ck_assert_int_ge(kids[i], 0);
        if (kids[i] == 0)
            producer(i);
    }
    /* A kill of each part, and more of any, in a random order, at random
     * moments while the producers write. */
    for (i = 3; i < KILLS; i++)
        order[i] = rand() % 3;
    for (i = KILLS - 1; i > 0; i--) {
        j = rand() % (i + 1);
        t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (kills = 0; kills < KILLS; kills++) {
        usleep((useconds_t)(200000 + rand() % 800000));
        kill_one(order[kills]);
        for (i = 0, writing = 0; i < NODES; i++)
            writing += reap(kids, i, 0) == 0;
        fprintf(stderr,
                "fleet: kill %d (%s) after %ld ms, %d producers "
                "writing\n",
                kills + 1, what[order[kills]], e2e_now_ms() - t0, writing);
    }
    for (i = 0; i < NODES; i++)
        reap(kids, i, 1);
    fprintf(stderr, "fleet: producers done after %ld ms\n", e2e_now_ms() - t0);
    await_delivery(90000);
    fprintf(stderr, "fleet: delivered after %ld ms\n", e2e_now_ms() - t0);

    /* PostgreSQL itself: every (source, seq) once with its batch, every
     * acknowledged receipt without seq once, nothing twice. */
    pc = PQconnectdb(db);
    ck_assert_msg(PQstatus(pc) == CONNECTION_OK, "%s", PQerrorMessage(pc));
    seqd = (uint64_t)SOURCES * rounds_per_source;
    ck_assert_int_eq(pg_scalar(pc, "SELECT count(*) FROM (SELECT DISTINCT "
                                   "source, seq FROM receipts WHERE seq IS "
                                   "NOT NULL) t"),
                     (long long)seqd);
    ck_assert_int_eq(pg_scalar(pc, "SELECT count(*) FROM receipts WHERE seq "
                                   "IS NOT NULL"),
                     (long long)(seqd * BATCH));
    ck_assert_int_eq(pg_scalar(pc, "SELECT count(*) FROM (SELECT source, seq "
                                   "FROM receipts WHERE seq IS NOT NULL "
                                   "GROUP BY source, seq HAVING count(*) <> "
                                   "5 OR count(DISTINCT origin) <> 1) t"),
                     0);
    ck_assert_int_eq(pg_scalar(pc, "SELECT count(*) FROM (SELECT model FROM "
                                   "receipts WHERE seq IS NULL GROUP BY "
                                   "model HAVING count(*) > 1) t"),
                     0);
    ck_assert_int_eq(pg_scalar(pc, "SELECT count(*) FROM receipts WHERE "
                                   "origin = ''"),
                     0);
    for (i = 0; i < NODES; i++) {
        ack_path(i, path, sizeof(path));
        f = fopen(path, "r");
        ck_assert_ptr_nonnull(f);
        while (fgets(line, sizeof(line), f) != NULL) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(sql, sizeof(sql),
                     "SELECT count(*) FROM receipts WHERE model = '%s' AND "
                     "origin = 'node-%d'",
                     line, i);
            ck_assert_msg(pg_scalar(pc, sql) == 1, "%s is not stored once",
                          line);
            unseq_acked++;
        }
        fclose(f);
    }
    /* Most of them were acknowledged (a kill loses a few replies). */
    ck_assert_uint_ge(unseq_acked,
                      (uint64_t)NODES * rounds_per_source * UNSEQ - 2 * UNSEQ);
    /* The origins' marks are each node's newest receipt. */
    ck_assert_int_eq(pg_scalar(pc, "SELECT count(*) FROM relay_origins WHERE "
                                   "stream = 'receipts'"),
                     NODES);
    ck_assert_int_eq(pg_scalar(pc, "SELECT count(*) FROM (SELECT origin FROM "
                                   "receipts GROUP BY origin HAVING max(id) "
                                   "<> (SELECT committed_id FROM "
                                   "relay_origins o WHERE o.origin = "
                                   "receipts.origin AND stream = "
                                   "'receipts')) t"),
                     0);
    PQfinish(pc);

    /* By node, through the query op: a node's receipts are the center's
     * of that origin, at either center. */
    for (i = 0; i < NODES; i++) {
        uint32_t here = count_receipts(&nodes[i], NULL);

        snprintf(name, sizeof(name), "node-%d", i);
        ck_assert_uint_eq(count_receipts(&centers[i % CENTERS], name), here);
    }

    /* gaps: every source, none missing, at both centers. */
    for (i = 0; i < CENTERS; i++) {
        struct e2e_reply rep;
        const msgpack_object *rows;
        uint32_t k;

        query(&centers[i], "gaps", NULL, NULL, 1, &rep);
        ck_assert_uint_eq(rows_of(&rep)->via.array.size, 0);
        e2e_reply_free(&rep);
        query(&centers[i], "gaps", NULL, NULL, 0, &rep);
        rows = rows_of(&rep);
        ck_assert_uint_eq(rows->via.array.size, SOURCES);
        for (k = 0; k < rows->via.array.size; k++) {
            ck_assert_uint_eq(
                e2e_get_uint(&rows->via.array.ptr[k], "missing_seqs"), 0);
            ck_assert_uint_eq(e2e_get_uint(&rows->via.array.ptr[k], "last_seq"),
                              rounds_per_source);
        }
        e2e_reply_free(&rep);
    }

    /* Fleet-wide fallbacks and coverage: each center's equal the sums of
     * the nodes'. */
    center_f = calloc(1, sizeof(*center_f));
    nodes_f = calloc(1, sizeof(*nodes_f));
    ck_assert(center_f != NULL && nodes_f != NULL);
    figures_of(nodes, NODES, nodes_f);
    /* The nodes hold every batch and their receipts without seq. */
    ck_assert_uint_eq(nodes_f->by_plan[0][0] + nodes_f->by_plan[1][0] +
                          nodes_f->by_plan[2][0] + nodes_f->by_plan[3][0],
                      seqd * BATCH + nodes_f->by_source[SOURCES][0]);
    ck_assert_uint_ge(nodes_f->by_source[SOURCES][0], unseq_acked);
    for (i = 0; i < CENTERS; i++) {
        figures_of(&centers[i], 1, center_f);
        ck_assert_msg(memcmp(center_f->by_source, nodes_f->by_source,
                             sizeof(nodes_f->by_source)) == 0,
                      "center %d: fallbacks by source differ from the nodes'",
                      i);
        ck_assert_msg(memcmp(center_f->by_plan, nodes_f->by_plan,
                             sizeof(nodes_f->by_plan)) == 0,
                      "center %d: fallbacks by plan differ from the nodes'", i);
        ck_assert_msg(
            memcmp(center_f->cov, nodes_f->cov, sizeof(nodes_f->cov)) == 0,
            "center %d: coverage differs from the nodes'", i);
    }
    ck_assert_uint_gt(nodes_f->by_plan[0][1], 0); /* fallbacks were summed */
    free(center_f);
    free(nodes_f);
    fprintf(stderr, "fleet: checked after %ld ms\n", e2e_now_ms() - t0);
    for (i = 0; i < NODES; i++)
        e2e_stop_clean(&nodes[i]);
    for (i = 0; i < CENTERS; i++)
        e2e_stop_clean(&centers[i]);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("e2e_fleet");
    TCase *tc = tcase_create("fleet");
    SRunner *sr;
    int rc;

    tcase_set_timeout(tc, 300);
    tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
    tcase_add_test(tc, test_fleet_relays_exactly_once_through_kills);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    rc = skip_status(sr);
    srunner_free(sr);
    return rc;
}
