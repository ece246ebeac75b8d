/*
 * e2e_query.c: end-to-end tests of the query kinds fallbacks, coverage,
 * gaps and quarantine against the real receiptd, on a generated fleet.
 *
 * The fleet is built once, before the tests fork: a database is created at
 * the schema version before the rollups (store_open with max_version) and
 * filled with "historic" receipts spread over 48 hours by plain SQL; the
 * daemon then migrates it, which backfills the rollups from those rows.
 * More receipts are sent live over the wire, in batches with sources and
 * seqs (with holes, and seqs past 2^63), and a few invalid ones that land
 * in quarantine. Every receipt mixes schemas 2 and 3, measured zeros,
 * unknown non-zero counters, meaningless coverage bits and values near
 * 2^64 so that sums pass 2^64.
 *
 * The test keeps every receipt it stored and computes each expected answer
 * itself (its own status rule, 128-bit sums with unsigned __int128, its own
 * ordering), then compares the daemon's rows field by field, for every
 * group_by, filters and time ranges that cut hours. A last test compares
 * the rollup-based aggregates with a forced full scan of the same file.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "e2e_util.h"
#include "receipt.h"
#include "store.h"
#include "store_agg.h"

#define T      10000 /* reply timeout, ms */
#define HOUR   3600000LL
#define DAY    (24 * HOUR)
#define N_HIST 3000
#define N_LIVE 2000
#define BATCH  100
#define N_ALL  (N_HIST + N_LIVE)
#define NC     26

typedef unsigned __int128 u128;

/* The test's own names, in coverage-bit order (PROTOCOL section 4). */
static const char *const counter_names[NC] = {
    "counters.decode_steps",
    "counters.graph_launches",
    "counters.compute_dispatches",
    "counters.device_fences",
    "counters.host_to_device_bytes",
    "counters.device_to_host_bytes",
    "counters.fallback_count",
    "counters.hot_path_allocations",
    "counters.compile_calls",
    "counters.immutable_upload_bytes",
    "counters.submitted_prefill_tokens",
    "counters.committed_prefill_tokens",
    "counters.cached_prefill_tokens",
    "counters.queued_requests",
    "counters.admitted_requests",
    "counters.cow_copies",
    "counters.evictions",
    "counters.unique_freed_pages",
    "counters.pool_high_water_bytes",
    "counters.cancellations",
    "counters.graph_bucket_tokens",
    "counters.graph_padding_tokens",
    "counters.rebuild_outcomes",
    "latency.queue_delay_us",
    "latency.time_to_first_token_us",
    "latency.inter_token_latency_us",
};

/* Backends in the order of their enum values on disk. */
static const char *const backends[] = {
    "cpu", "wgpu-dx12", "wgpu-vulkan", "wgpu-metal", "cuda", "metal", "unknown"
};
#define NBACKENDS 7

static const char *const plans[] = { "plan-a", "plan-b", "plan-c", "plan-d",
                                     "plan-e" };
static const char *const graphs[] = { "", "g-1", "g-2" };
static const char *const models[] = { "m-1", "m-2", "m-3", "m-4" };
/* Source 3 never says hello: an empty source and no seqs. */
static const char *const sources[] = { "node-a/rt-1", "node-b/rt-2",
                                       "node-c/rt-3", "" };
#define NPLANS   5
#define NGRAPHS  3
#define NMODELS  4
#define NSOURCES 4

struct rec {
    int64_t at; /* received_at; live: 0 until known to be in a window */
    int live;
    int plan, graph, model, source, req, exec;
    unsigned schema;
    uint64_t coverage;
    uint64_t c[NC];
};

static struct rec fleet[N_ALL];
static int64_t base_ms;               /* first historic hour, not aligned */
static int64_t live_from, live_until; /* every live receipt is inside */

/* Seqs per source (sources 0-2), as sent. */
#define MAXSEQ 64
static uint64_t seqs[3][MAXSEQ];
static int nseqs[3];

/* The quarantined payloads, newest last. */
#define NQ 3
static char *qraw[NQ];
static size_t qlen[NQ];

static struct e2e_daemon d;
static char notify_path[256];
static int notify_fd = -1;
/* The notifications up to READY=1, a line each (build_fleet). */
static char notified[8192];
static int fleet_ok;

/* ---- generation ---- */

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t
next(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int
status_of(const struct rec *r)
{
    if (r->req != r->exec || r->c[6] > 0)
        return RECEIPT_STATUS_FALLBACK;
    return (r->coverage >> 6 & 1) ? RECEIPT_STATUS_CLEAN
                                  : RECEIPT_STATUS_UNPROVEN;
}

static int
measured(const struct rec *r, int bit)
{
    return (r->coverage >> bit & 1) && (bit < 10 || r->schema == 3);
}

static uint64_t
value(void)
{
    switch (next() % 10) {
    case 0:
        return 0;
    case 1:
    case 2:
        return UINT64_MAX - next() % 1000;
    case 3:
        return ((uint64_t)1 << 63) + next() % 1000;
    default:
        return next() % 100000;
    }
}

static void
gen(struct rec *r)
{
    static const int reqs[] = { 4, 2, 0, 5 };
    int i;

    memset(r, 0, sizeof(*r));
    r->plan = (int)(next() % NPLANS);
    r->graph = (int)(next() % NGRAPHS);
    r->model = (int)(next() % NMODELS);
    r->req = reqs[next() % 4];
    r->exec = next() % 100 < 85 ? r->req : (int)(next() % NBACKENDS);
    r->schema = next() % 2 ? 3 : 2;
    for (i = 0; i < NC; i++)
        if (next() % 10 < 7)
            r->coverage |= (uint64_t)1 << i;
    if (next() % 20 == 0)
        r->coverage |= (uint64_t)1 << 40; /* stray: means nothing */
    for (i = 0; i < NC; i++) {
        /* A schema-2 receipt has no fields beyond bit 9 to send. */
        if (r->schema == 2 && i >= 10)
            break;
        r->c[i] = value();
    }
    /* Mostly no fallbacks, so that clean and unproven show up. */
    r->c[6] = next() % 100 < 85 ? 0 : 1 + next() % 5;
}

/* Packs r as a map-form receipt body. */
static int
pack_rec(msgpack_packer *pk, const struct rec *r)
{
    static const char *const arts[] = { "temp_created_bytes",
                                        "temp_removed_bytes",
                                        "temp_retained_bytes",
                                        "temp_cleanup_failures" };
    int i, nctr = r->schema == 3 ? 23 : 10, rc = 0;

#define S(s)                                                                   \
    (msgpack_pack_str(pk, strlen(s)) || msgpack_pack_str_body(pk, s, strlen(s)))
    rc |= msgpack_pack_map(pk, r->schema == 3 ? 12 : 11);
    rc |= S("schema_version") || msgpack_pack_uint16(pk, (uint16_t)r->schema);
    rc |= S("requested_backend") || S(backends[r->req]);
    rc |= S("executed_backend") || S(backends[r->exec]);
    rc |= S("model_instance_id") || S(models[r->model]);
    rc |= S("prepared_plan_id") || S(plans[r->plan]);
    rc |= S("graph_hash") || S(graphs[r->graph]);
    rc |= S("tuning_profile") || S("t");
    rc |= S("stop_reason") || S("eos");
    rc |= S("counter_coverage") || msgpack_pack_uint64(pk, r->coverage);
    rc |= S("counters") || msgpack_pack_map(pk, (size_t)nctr);
    for (i = 0; i < nctr; i++)
        rc |= S(strchr(counter_names[i], '.') + 1) ||
              msgpack_pack_uint64(pk, r->c[i]);
    if (r->schema == 3) {
        rc |= S("latency") || msgpack_pack_map(pk, 3);
        for (i = 23; i < NC; i++)
            rc |= S(strchr(counter_names[i], '.') + 1) ||
                  msgpack_pack_uint64(pk, r->c[i]);
    }
    rc |= S("artifacts") || msgpack_pack_map(pk, 4);
    for (i = 0; i < 4; i++)
        rc |= S(arts[i]) || msgpack_pack_uint64(pk, (uint64_t)i);
#undef S
    return rc ? -1 : 0;
}

static int64_t
now_ms(void)
{
    struct timeval tv;

    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* ---- building the fleet (before any test forks) ---- */

static int64_t
string_id(sqlite3 *db, const char *s)
{
    sqlite3_stmt *st;
    int64_t id = -1;

    sqlite3_prepare_v2(db, "INSERT OR IGNORE INTO strings (value) VALUES (?1)",
                       -1, &st, NULL);
    sqlite3_bind_blob(st, 1, s, (int)strlen(s), SQLITE_STATIC);
    sqlite3_step(st);
    sqlite3_finalize(st);
    sqlite3_prepare_v2(db, "SELECT id FROM strings WHERE value = ?1", -1, &st,
                       NULL);
    sqlite3_bind_blob(st, 1, s, (int)strlen(s), SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW)
        id = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return id;
}

/* Historic receipts, written as the ingest path of the previous schema
 * version would have: they reach the rollups only through the backfill. */
static int
write_history(const char *path)
{
    struct store_opts o = { .quarantine_max_bytes = 1 << 20 };
    struct proto_err err;
    struct store *s;
    sqlite3 *db;
    sqlite3_stmt *st;
    char sql[4096];
    size_t n;
    int i, j, rc = 0;

    /* 3: the version before migrations/0004 added the rollups (later
     * migrations come after it, so not store_schema_version() - 1). */
    o.max_version = 3;
    if (store_open(path, &o, &s, &err) != 0)
        return -1;
    store_free(s);
    if (sqlite3_open(path, &db) != SQLITE_OK)
        return -1;
    sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
    n = (size_t)snprintf(sql, sizeof(sql),
                         "INSERT INTO receipts (received_at, source_id, seq, "
                         "schema_version, requested_backend, "
                         "executed_backend, status, model_id, plan_id, "
                         "graph_id, tuning_id, stop_reason_id, "
                         "counter_coverage");
    for (i = 0; i < NC; i++)
        n += (size_t)snprintf(sql + n, sizeof(sql) - n, ", %s",
                              strchr(counter_names[i], '.') + 1);
    n += (size_t)snprintf(sql + n, sizeof(sql) - n,
                          ", temp_created_bytes, temp_removed_bytes, "
                          "temp_retained_bytes, temp_cleanup_failures) "
                          "VALUES (?1, ?2, NULL, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
                          "?10, ?11, ?12");
    for (i = 0; i < NC + 4; i++)
        n += (size_t)snprintf(sql + n, sizeof(sql) - n, ", ?%d", 13 + i);
    snprintf(sql + n, sizeof(sql) - n, ")");
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "prepare: %s\n", sqlite3_errmsg(db));
        sqlite3_close(db);
        return -1;
    }
    for (i = 0; i < N_HIST && rc == 0; i++) {
        const struct rec *r = &fleet[i];

        sqlite3_bind_int64(st, 1, r->at);
        sqlite3_bind_int64(st, 2, string_id(db, sources[r->source]));
        sqlite3_bind_int(st, 3, (int)r->schema);
        sqlite3_bind_int(st, 4, r->req);
        sqlite3_bind_int(st, 5, r->exec);
        sqlite3_bind_int(st, 6, status_of(r));
        sqlite3_bind_int64(st, 7, string_id(db, models[r->model]));
        sqlite3_bind_int64(st, 8, string_id(db, plans[r->plan]));
        sqlite3_bind_int64(st, 9, string_id(db, graphs[r->graph]));
        sqlite3_bind_int64(st, 10, string_id(db, "t"));
        sqlite3_bind_int64(st, 11, string_id(db, "eos"));
        sqlite3_bind_int64(st, 12, (int64_t)r->coverage);
        for (j = 0; j < NC; j++)
            sqlite3_bind_int64(st, 13 + j, (int64_t)r->c[j]);
        for (j = 0; j < 4; j++)
            sqlite3_bind_int64(st, 13 + NC + j, j);
        if (sqlite3_step(st) != SQLITE_DONE) {
            fprintf(stderr, "insert: %s\n", sqlite3_errmsg(db));
            rc = -1;
        }
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    sqlite3_exec(db, rc == 0 ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(db);
    return rc;
}

/* The seqs of source s for its k-th batch: holes, and for source 2 seqs
 * on both sides of 2^63 and the largest u64. */
static uint64_t
seq_for(int s, int k)
{
    static const uint64_t high[] = {
        ((uint64_t)1 << 63) - 3,
        ((uint64_t)1 << 63) - 2,
        ((uint64_t)1 << 63) - 1,
        ((uint64_t)1 << 63) + 1,
        ((uint64_t)1 << 63) + 2,
        UINT64_MAX - 1,
        UINT64_MAX,
    };
    if (s == 0)
        return (uint64_t)(1 + k + (k >= 2) + 3 * (k >= 4));
    if (s == 1)
        return (uint64_t)(100 + 2 * k);
    static const int pick[] = { 0, 2, 3, 5, 6 };

    return high[pick[k % 5]];
}

static int
send_live(void)
{
    int fd, batch, s, i, k[3] = { 0, 0, 0 }, rc = 0;
    int fds[NSOURCES];
    uint64_t id = 1;

    for (s = 0; s < NSOURCES; s++) {
        fds[s] = e2e_connect(&d);
        if (fds[s] < 0)
            return -1;
        if (sources[s][0] != '\0' && e2e_hello(fds[s], sources[s]) != 0)
            return -1;
    }
    live_from = now_ms();
    for (batch = 0; batch < N_LIVE / BATCH && rc == 0; batch++) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        struct e2e_reply rep;
        int has_seq;
        uint64_t seq = 0;

        s = batch % NSOURCES;
        fd = fds[s];
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_array(&pk, BATCH);
        for (i = 0; i < BATCH; i++) {
            struct rec *r = &fleet[N_HIST + batch * BATCH + i];
            r->source = s;
            r->live = 1;
            pack_rec(&pk, r);
        }
        has_seq = s < 3;
        if (has_seq) {
            seq = seq_for(s, k[s]++);
            seqs[s][nseqs[s]++] = seq;
        }
        if (e2e_request(fd, PROTO_OP_RECEIPTS, id, has_seq, seq, sb.data,
                        sb.size) != 0 ||
            e2e_recv(fd, T, &rep) != 0 || !rep.r.ok ||
            e2e_get_uint(rep.r.result, "accepted") != BATCH)
            rc = -1;
        else
            e2e_reply_free(&rep);
        msgpack_sbuffer_destroy(&sb);
        id++;
    }
    /* Invalid receipts for the quarantine, from source 1: a string
     * counter, an unknown schema, and a body that is not a receipt. */
    for (i = 0; i < NQ && rc == 0; i++) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        struct e2e_reply rep;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (i == 0) {
            msgpack_pack_map(&pk, 1);
            msgpack_pack_str_with_body(&pk, "schema_version", 14);
            msgpack_pack_uint16(&pk, 9);
        } else if (i == 1) {
            msgpack_pack_array(&pk, 2);
            msgpack_pack_str_with_body(&pk, "x", 1);
            msgpack_pack_uint8(&pk, 7);
        } else {
            msgpack_pack_str_with_body(&pk, "not a receipt", 13);
        }
        qraw[i] = malloc(sb.size);
        memcpy(qraw[i], sb.data, sb.size);
        qlen[i] = sb.size;
        if (e2e_request(fds[1], PROTO_OP_RECEIPT, id++, 0, 0, sb.data,
                        sb.size) != 0 ||
            e2e_recv(fds[1], T, &rep) != 0 || rep.r.ok)
            rc = -1;
        else
            e2e_reply_free(&rep);
        msgpack_sbuffer_destroy(&sb);
    }
    live_until = now_ms() + 1;
    for (s = 0; s < NSOURCES; s++)
        close(fds[s]);
    return rc;
}

static int
build_fleet(void)
{
    const char *base = TEST_BINARY_DIR;
    int i;

    memset(&d, 0, sizeof(d));
    if (strlen(base) > 70)
        base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(d.dir, sizeof(d.dir), "%s/e2e-XXXXXX", base);
    if (mkdtemp(d.dir) == NULL)
        return -1;
    snprintf(d.sock, sizeof(d.sock), "%s/s", d.dir);
    snprintf(d.db, sizeof(d.db), "%s/receipts.db", d.dir);
    snprintf(d.log, sizeof(d.log), "%s/receiptd.log", d.dir);

    /* 96 hours ago, off any hour boundary, spread over 48 hours: the
     * history ends a day or more before the live receipts arrive. */
    base_ms = (now_ms() / HOUR - 96) * HOUR + 1234567;
    for (i = 0; i < N_ALL; i++) {
        gen(&fleet[i]);
        if (i < N_HIST) {
            fleet[i].at = base_ms + (int64_t)(next() % (48 * HOUR));
            fleet[i].source = (int)(next() % NSOURCES);
        }
    }
    /* A few receipts exactly on hour boundaries, where off-by-one errors
     * in the bucket edges would show. */
    for (i = 0; i < 24; i++)
        fleet[i].at = (base_ms / HOUR + 1 + i) * HOUR - (i % 2);
    if (write_history(d.db) != 0)
        return -1;
    /* What the daemon tells systemd while it migrates (test "migration"). */
    snprintf(notify_path, sizeof(notify_path), "%s/notify", d.dir);
    if ((notify_fd = e2e_notify_bind(notify_path)) < 0 ||
        setenv("NOTIFY_SOCKET", notify_path, 1) != 0)
        return -1;
    i = e2e_restart(&d, NULL);
    unsetenv("NOTIFY_SOCKET");
    if (i != 0)
        return -1;
    /* Keep what came up to READY=1, then stop listening: a manager that
     * never reads would fill the socket's queue (10 datagrams here) with
     * the STATUS= lines of a long run, and sd_notify() would block the
     * daemon's loop on the eleventh. */
    for (;;) {
        char got[1024];
        size_t n = strlen(notified);

        if (e2e_notify_await(notify_fd, "=", 5000, got, sizeof(got)) != 0)
            break;
        snprintf(notified + n, sizeof(notified) - n, "%s\n", got);
        if (strstr(got, "READY=1") != NULL)
            break;
    }
    close(notify_fd);
    notify_fd = -1;
    unlink(notify_path);
    return send_live();
}

/* ---- queries ---- */

struct q {
    const char *kind;
    const char *group_by;           /* NULL: the kind's default */
    int plan, graph, model, source; /* index or -1 */
    int req, exec;                  /* enum or -1 */
    int has_since, has_until;
    int64_t since, until;
    uint32_t limit; /* 0: the default of 100 */
    uint64_t every; /* a series of buckets of that many ms; 0: none */
};

static void
q_init(struct q *q, const char *kind)
{
    memset(q, 0, sizeof(*q));
    q->kind = kind;
    q->plan = q->graph = q->model = q->source = q->req = q->exec = -1;
}

static void
pack_cstr(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str_with_body(pk, s, strlen(s));
}

/* Sends q and receives its answer, whatever it is. */
static void
send_q(const struct q *q, struct e2e_reply *rep)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int n = 1, fd;

    n += !!q->group_by + (q->plan >= 0) + (q->graph >= 0) + (q->model >= 0) +
         (q->source >= 0) + (q->req >= 0) + (q->exec >= 0) + q->has_since +
         q->has_until + (q->limit > 0) + (q->every > 0);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, (size_t)n);
    pack_cstr(&pk, "kind");
    pack_cstr(&pk, q->kind);
#define KV(key, val)                                                           \
    do {                                                                       \
        pack_cstr(&pk, key);                                                   \
        pack_cstr(&pk, val);                                                   \
    } while (0)
    if (q->group_by)
        KV("group_by", q->group_by);
    if (q->plan >= 0)
        KV("plan", plans[q->plan]);
    if (q->graph >= 0)
        KV("graph", graphs[q->graph]);
    if (q->model >= 0)
        KV("model", models[q->model]);
    if (q->source >= 0)
        KV("source", sources[q->source]);
    if (q->req >= 0)
        KV("requested", backends[q->req]);
    if (q->exec >= 0)
        KV("executed", backends[q->exec]);
#undef KV
    if (q->has_since) {
        pack_cstr(&pk, "since");
        msgpack_pack_uint64(&pk, (uint64_t)q->since);
    }
    if (q->has_until) {
        pack_cstr(&pk, "until");
        msgpack_pack_uint64(&pk, (uint64_t)q->until);
    }
    if (q->limit > 0) {
        pack_cstr(&pk, "limit");
        msgpack_pack_uint32(&pk, q->limit);
    }
    if (q->every > 0) {
        pack_cstr(&pk, "every");
        msgpack_pack_uint64(&pk, q->every);
    }
    fd = e2e_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(e2e_request(fd, PROTO_OP_QUERY, 7, 0, 0, sb.data, sb.size),
                     0);
    ck_assert_int_eq(e2e_recv(fd, T, rep), 0);
    close(fd);
    msgpack_sbuffer_destroy(&sb);
}

static void
ask(const struct q *q, struct e2e_reply *rep)
{
    send_q(q, rep);
    ck_assert_msg(rep->r.ok, "query %s: %s at %s: %s", q->kind,
                  proto_code_name(rep->r.err.code), rep->r.err.path,
                  rep->r.err.message);
}

/* Whether fleet receipt r matches the filters of q. A live receipt's time
 * is known only to lie in [live_from, live_until): a range must hold all
 * of that window or none of it. */
static int
matches(const struct q *q, const struct rec *r)
{
    if ((q->plan >= 0 && r->plan != q->plan) ||
        (q->graph >= 0 && r->graph != q->graph) ||
        (q->model >= 0 && r->model != q->model) ||
        (q->source >= 0 && r->source != q->source) ||
        (q->req >= 0 && r->req != q->req) ||
        (q->exec >= 0 && r->exec != q->exec))
        return 0;
    if (r->live) {
        int in_since = !q->has_since || q->since <= live_from;
        int in_until = !q->has_until || q->until >= live_until;
        int out = (q->has_since && q->since >= live_until) ||
                  (q->has_until && q->until <= live_from);
        ck_assert_msg((in_since && in_until) || out,
                      "a time range cuts the live window");
        return in_since && in_until;
    }
    return (!q->has_since || r->at >= q->since) &&
           (!q->has_until || r->at < q->until);
}

struct ctr {
    uint64_t measured;
    u128 sum;
    uint64_t min, max;
};

struct grp {
    /* Fleet indexes, backend enums, or 0; a pair (group_of above 10):
     * the key's index, then the requested and executed backends. */
    int k1, k2, k3;
    uint64_t receipts, fallback, clean, unproven;
    uint64_t schema3; /* receipts of schema 3, which has bits 10 and up */
    struct ctr c[NC];
};

static int g_by; /* for the comparators */

static int
group_of(const char *g)
{
    const char *comma = g ? strchr(g, ',') : NULL;

    if (comma != NULL) { /* a key with backends, as "plan,backends" */
        char key[16];

        if (strncmp(g, "backends,", 9) == 0)
            snprintf(key, sizeof(key), "%s", comma + 1);
        else
            snprintf(key, sizeof(key), "%.*s", (int)(comma - g), g);
        return 10 + group_of(key);
    }
    if (g == NULL)
        return -1;
    if (strcmp(g, "plan") == 0)
        return 1;
    if (strcmp(g, "graph") == 0)
        return 2;
    if (strcmp(g, "model") == 0)
        return 3;
    if (strcmp(g, "backends") == 0)
        return 4;
    if (strcmp(g, "source") == 0)
        return 5;
    return 0;
}

static const char *
name1(const struct grp *g)
{
    switch (g_by % 10) {
    case 1:
        return plans[g->k1];
    case 2:
        return graphs[g->k1];
    case 3:
        return models[g->k1];
    case 4:
        return backends[g->k1];
    case 5:
        return sources[g->k1];
    }
    return "";
}

static int
cmp_name(const struct grp *a, const struct grp *b)
{
    int c = strcmp(name1(a), name1(b));

    if (c == 0 && (g_by == 4 || g_by > 10))
        c = strcmp(backends[a->k2], backends[b->k2]);
    if (c == 0 && g_by > 10)
        c = strcmp(backends[a->k3], backends[b->k3]);
    return c;
}

static int
by_name(const void *pa, const void *pb)
{
    return cmp_name(pa, pb);
}

static int
by_fallbacks(const void *pa, const void *pb)
{
    const struct grp *a = pa, *b = pb;

    if (a->fallback != b->fallback)
        return a->fallback > b->fallback ? -1 : 1;
    if (a->receipts != b->receipts)
        return a->receipts > b->receipts ? -1 : 1;
    return cmp_name(a, b);
}

/* The expected groups of q, grouped by gb (0 none .. 5 source; 10 + a
 * string key with backends). */
static size_t
expect(const struct q *q, int gb, struct grp *out, size_t cap)
{
    size_t n = 0, j;
    int i, b;

    for (i = 0; i < N_ALL; i++) {
        const struct rec *r = &fleet[i];
        int k1 = 0, k2 = 0, k3 = 0, st;
        struct grp *g = NULL;

        if (!matches(q, r))
            continue;
        if (gb % 10 == 1)
            k1 = r->plan;
        else if (gb % 10 == 2)
            k1 = r->graph;
        else if (gb % 10 == 3)
            k1 = r->model;
        else if (gb == 4)
            k1 = r->req, k2 = r->exec;
        else if (gb % 10 == 5)
            k1 = r->source;
        if (gb > 10)
            k2 = r->req, k3 = r->exec;
        for (j = 0; j < n; j++)
            if (out[j].k1 == k1 && out[j].k2 == k2 && out[j].k3 == k3)
                g = &out[j];
        if (g == NULL) {
            ck_assert_uint_lt(n, cap);
            g = &out[n++];
            memset(g, 0, sizeof(*g));
            g->k1 = k1;
            g->k2 = k2;
            g->k3 = k3;
        }
        st = status_of(r);
        g->receipts++;
        g->fallback += st == RECEIPT_STATUS_FALLBACK;
        g->clean += st == RECEIPT_STATUS_CLEAN;
        g->unproven += st == RECEIPT_STATUS_UNPROVEN;
        g->schema3 += r->schema == 3;
        for (b = 0; b < NC; b++) {
            struct ctr *c = &g->c[b];
            if (!measured(r, b))
                continue;
            if (c->measured == 0 || r->c[b] < c->min)
                c->min = r->c[b];
            if (c->measured == 0 || r->c[b] > c->max)
                c->max = r->c[b];
            c->sum += r->c[b];
            c->measured++;
        }
    }
    return n;
}

static void
check_str(const msgpack_object *row, const char *key, const char *want)
{
    const msgpack_object *v = e2e_get(row, key);

    ck_assert_msg(v != NULL && v->type == MSGPACK_OBJECT_STR, "%s missing",
                  key);
    ck_assert_msg(v->via.str.size == strlen(want) &&
                      memcmp(v->via.str.ptr, want, v->via.str.size) == 0,
                  "%s: got \"%.*s\", want \"%s\"", key, (int)v->via.str.size,
                  v->via.str.ptr, want);
}

static void
check_keys(const msgpack_object *row, int gb, const struct grp *g)
{
    static const char *const fields[] = { NULL,         "prepared_plan_id",
                                          "graph_hash", "model_instance_id",
                                          NULL,         "source" };

    if (gb == 4) {
        check_str(row, "requested_backend", backends[g->k1]);
        check_str(row, "executed_backend", backends[g->k2]);
    } else if (gb > 10) {
        check_str(row, fields[gb - 10], name1(g));
        check_str(row, "requested_backend", backends[g->k2]);
        check_str(row, "executed_backend", backends[g->k3]);
    } else if (gb > 0) {
        check_str(row, fields[gb], name1(g));
    }
}

static double
get_double(const msgpack_object *row, const char *key)
{
    const msgpack_object *v = e2e_get(row, key);

    ck_assert_msg(v != NULL && (v->type == MSGPACK_OBJECT_FLOAT64 ||
                                v->type == MSGPACK_OBJECT_FLOAT32),
                  "%s is not a float", key);
    return v->via.f64;
}

static const msgpack_object *
rows_of(const struct e2e_reply *rep, int *truncated)
{
    const msgpack_object *rows = e2e_get(rep->r.result, "rows");
    const msgpack_object *t = e2e_get(rep->r.result, "truncated");

    ck_assert_ptr_nonnull(rows);
    ck_assert_int_eq(rows->type, MSGPACK_OBJECT_ARRAY);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->type, MSGPACK_OBJECT_BOOLEAN);
    *truncated = t->via.boolean;
    return rows;
}

#define MAXG 512

static void
check_fallbacks(const struct q *q)
{
    static struct grp want[MAXG];
    struct e2e_reply rep;
    const msgpack_object *rows;
    uint32_t limit = q->limit ? q->limit : 100, i;
    int gb = q->group_by ? group_of(q->group_by) : 1, truncated;
    size_t n = expect(q, gb, want, MAXG);

    g_by = gb;
    qsort(want, n, sizeof(*want), by_fallbacks);
    ask(q, &rep);
    rows = rows_of(&rep, &truncated);
    ck_assert_uint_eq(rows->via.array.size, n < limit ? n : limit);
    ck_assert_int_eq(truncated, n > limit);
    for (i = 0; i < rows->via.array.size; i++) {
        const msgpack_object *row = &rows->via.array.ptr[i];
        const struct grp *g = &want[i];

        check_keys(row, gb, g);
        ck_assert_uint_eq(e2e_get_uint(row, "receipts"), g->receipts);
        ck_assert_uint_eq(e2e_get_uint(row, "fallback"), g->fallback);
        ck_assert_uint_eq(e2e_get_uint(row, "clean"), g->clean);
        ck_assert_uint_eq(e2e_get_uint(row, "unproven"), g->unproven);
        ck_assert(get_double(row, "fallback_rate") ==
                  (double)g->fallback / (double)g->receipts);
    }
    e2e_reply_free(&rep);
}

static void
check_sum(const msgpack_object *row, u128 want)
{
    const msgpack_object *v = e2e_get(row, "sum");
    char buf[48], tmp[48];
    size_t n = 0, i;

    ck_assert_ptr_nonnull(v);
    if (want <= UINT64_MAX) {
        ck_assert_int_eq(v->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
        ck_assert_uint_eq(v->via.u64, (uint64_t)want);
        return;
    }
    do {
        tmp[n++] = (char)('0' + (int)(want % 10));
        want /= 10;
    } while (want);
    for (i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    buf[n] = '\0';
    check_str(row, "sum", buf);
}

static void
check_coverage(const struct q *q)
{
    static struct grp want[MAXG];
    struct e2e_reply rep;
    const msgpack_object *rows;
    uint32_t limit = q->limit ? q->limit : 100, i;
    int gb = q->group_by ? group_of(q->group_by) : 0, truncated;
    size_t n = expect(q, gb, want, MAXG), total;

    g_by = gb;
    qsort(want, n, sizeof(*want), by_name);
    total = n * NC;
    ask(q, &rep);
    rows = rows_of(&rep, &truncated);
    ck_assert_uint_eq(rows->via.array.size, total < limit ? total : limit);
    ck_assert_int_eq(truncated, total > limit);
    for (i = 0; i < rows->via.array.size; i++) {
        const msgpack_object *row = &rows->via.array.ptr[i];
        const struct grp *g = &want[i / NC];
        const struct ctr *c = &g->c[i % NC];
        uint64_t na;

        check_keys(row, gb, g);
        check_str(row, "counter", counter_names[i % NC]);
        ck_assert_uint_eq(e2e_get_uint(row, "bit"), i % NC);
        ck_assert_uint_eq(e2e_get_uint(row, "receipts"), g->receipts);
        ck_assert_uint_eq(e2e_get_uint(row, "measured"), c->measured);
        /* A schema-2 receipt has no counter of bit 10 or more: it is not
         * applicable there, not unknown. */
        na = i % NC < 10 ? 0 : g->receipts - g->schema3;
        ck_assert_uint_eq(e2e_get_uint(row, "not_applicable"), na);
        ck_assert_uint_eq(e2e_get_uint(row, "unknown"),
                          g->receipts - na - c->measured);
        ck_assert(get_double(row, "coverage") ==
                  (g->receipts - na
                       ? (double)c->measured / (double)(g->receipts - na)
                       : 0.0));
        check_sum(row, c->sum);
        if (c->measured == 0) {
            ck_assert_int_eq(e2e_get(row, "min")->type, MSGPACK_OBJECT_NIL);
            ck_assert_int_eq(e2e_get(row, "max")->type, MSGPACK_OBJECT_NIL);
            ck_assert_int_eq(e2e_get(row, "mean")->type, MSGPACK_OBJECT_NIL);
        } else {
            ck_assert_uint_eq(e2e_get_uint(row, "min"), c->min);
            ck_assert_uint_eq(e2e_get_uint(row, "max"), c->max);
            ck_assert(get_double(row, "mean") ==
                      (double)c->sum / (double)c->measured);
        }
    }
    e2e_reply_free(&rep);
}

/* A series (`every`): per group, most fallbacks over the window first,
 * one row per bucket from the one holding since to the one holding
 * until - 1, each with the figures of the receipts in that bucket clipped
 * to the window (empty ones included); "total" one map per bucket. q's
 * window must not cut the live receipts' window inside a bucket. */
static void
check_fallbacks_series(const struct q *q)
{
    static struct grp want[MAXG], got_b[MAXG];
    struct e2e_reply rep;
    const msgpack_object *rows, *total;
    int64_t e = (int64_t)q->every, b0 = q->since / e * e, b1;
    int gb = q->group_by ? group_of(q->group_by) : 1, truncated;
    size_t n = expect(q, gb, want, MAXG), i, k, nb;

    b1 = (q->until - 1) / e * e;
    nb = (size_t)((b1 - b0) / e + 1);
    g_by = gb;
    qsort(want, n, sizeof(*want), by_fallbacks);
    ask(q, &rep);
    rows = rows_of(&rep, &truncated);
    ck_assert_int_eq(truncated, 0);
    ck_assert_uint_eq(rows->via.array.size, n * nb);
    total = e2e_get(rep.r.result, "total");
    ck_assert_ptr_nonnull(total);
    ck_assert_int_eq(total->type, MSGPACK_OBJECT_ARRAY);
    ck_assert_uint_eq(total->via.array.size, nb);
    /* Rows go group by group, each through every bucket; the buckets'
     * expected sums are made once each (a scan of the fleet), outside the
     * loop over the groups. */
    for (k = 0; k < nb; k++) {
        struct q qb = *q;
        size_t m, j;

        /* The bucket, clipped to the window. */
        qb.since =
            b0 + (int64_t)k * e > q->since ? b0 + (int64_t)k * e : q->since;
        qb.until = b0 + (int64_t)(k + 1) * e < q->until
                       ? b0 + (int64_t)(k + 1) * e
                       : q->until;
        m = expect(&qb, gb, got_b, MAXG);
        for (i = 0; i < n; i++) {
            const msgpack_object *r = &rows->via.array.ptr[i * nb + k];
            const struct grp *w = NULL;

            for (j = 0; j < m; j++)
                if (got_b[j].k1 == want[i].k1 && got_b[j].k2 == want[i].k2 &&
                    got_b[j].k3 == want[i].k3)
                    w = &got_b[j];
            check_keys(r, gb, &want[i]);
            ck_assert_uint_eq(e2e_get_uint(r, "bucket"),
                              (uint64_t)(b0 + (int64_t)k * e));
            ck_assert_uint_eq(e2e_get_uint(r, "receipts"), w ? w->receipts : 0);
            ck_assert_uint_eq(e2e_get_uint(r, "fallback"), w ? w->fallback : 0);
            ck_assert_uint_eq(e2e_get_uint(r, "clean"), w ? w->clean : 0);
            ck_assert_uint_eq(e2e_get_uint(r, "unproven"), w ? w->unproven : 0);
            if (i == 0) {
                const msgpack_object *t = &total->via.array.ptr[k];
                uint64_t all = 0, fb = 0;

                for (j = 0; j < m; j++) {
                    all += got_b[j].receipts;
                    fb += got_b[j].fallback;
                }
                ck_assert_uint_eq(e2e_get_uint(t, "bucket"),
                                  (uint64_t)(b0 + (int64_t)k * e));
                ck_assert_uint_eq(e2e_get_uint(t, "receipts"), all);
                ck_assert_uint_eq(e2e_get_uint(t, "fallback"), fb);
            }
        }
    }
    e2e_reply_free(&rep);
}

/* The same for coverage without groups: per counter, one row per bucket. */
static void
check_coverage_series(const struct q *q)
{
    static struct grp got_b[MAXG];
    struct e2e_reply rep;
    const msgpack_object *rows;
    int64_t e = (int64_t)q->every, b0 = q->since / e * e, b1;
    size_t i, k, nb, m;
    int truncated;

    b1 = (q->until - 1) / e * e;
    nb = (size_t)((b1 - b0) / e + 1);
    g_by = 0;
    ask(q, &rep);
    rows = rows_of(&rep, &truncated);
    ck_assert_int_eq(truncated, 0);
    ck_assert_uint_eq(rows->via.array.size, NC * nb);
    /* As in check_fallbacks_series: a scan of the fleet a bucket. */
    for (k = 0; k < nb; k++) {
        struct q qb = *q;

        qb.since =
            b0 + (int64_t)k * e > q->since ? b0 + (int64_t)k * e : q->since;
        qb.until = b0 + (int64_t)(k + 1) * e < q->until
                       ? b0 + (int64_t)(k + 1) * e
                       : q->until;
        m = expect(&qb, 0, got_b, MAXG);
        for (i = 0; i < NC; i++) {
            const msgpack_object *r = &rows->via.array.ptr[i * nb + k];

            check_str(r, "counter", counter_names[i]);
            ck_assert_uint_eq(e2e_get_uint(r, "bucket"),
                              (uint64_t)(b0 + (int64_t)k * e));
            ck_assert_uint_eq(e2e_get_uint(r, "receipts"),
                              m ? got_b[0].receipts : 0);
            ck_assert_uint_eq(e2e_get_uint(r, "measured"),
                              m ? got_b[0].c[i].measured : 0);
            if (m == 0 || got_b[0].c[i].measured == 0)
                ck_assert_int_eq(e2e_get(r, "min")->type, MSGPACK_OBJECT_NIL);
            else
                ck_assert_uint_eq(e2e_get_uint(r, "min"), got_b[0].c[i].min);
        }
    }
    e2e_reply_free(&rep);
}

/* ---- tests ---- */

/* Each key, and pairs of a string key with backends (either order). */
static const char *const group_bys[] = {
    NULL,
    "plan",
    "graph",
    "model",
    "backends",
    "source",
    "none",
    "plan,backends",
    "backends,model",
    "graph,backends",
    "source,backends",
};
#define NGROUP_BYS 11

START_TEST(test_query_fleet_was_built)
{
    ck_assert_msg(fleet_ok, "the fleet could not be built; see the log in "
                            "E2E_KEEP's directory");
}
END_TEST

START_TEST(test_query_fallbacks_groups_match_the_fleet)
{
    struct q q;

    q_init(&q, "fallbacks");
    q.group_by = group_bys[_i];
    if (q.group_by != NULL && strcmp(q.group_by, "none") == 0)
        return; /* receipt rows: their own test */
    check_fallbacks(&q);
}
END_TEST

START_TEST(test_query_coverage_groups_match_the_fleet)
{
    struct q q;

    q_init(&q, "coverage");
    q.group_by = group_bys[_i];
    q.limit = 10000;
    check_coverage(&q);
}
END_TEST

/* Filter sets applied to both kinds. */
static void
filter_case(int i, struct q *q)
{
    switch (i) {
    case 0:
        q->plan = 1;
        break;
    case 1:
        q->graph = 0; /* the empty graph hash */
        break;
    case 2:
        q->model = 2;
        q->req = 4;
        break;
    case 3:
        q->source = 3; /* no hello */
        break;
    case 4:
        q->req = 4;
        q->exec = 0;
        break;
    case 5:
        q->plan = 0;
        q->graph = 2;
        q->model = 1;
        q->source = 1;
        break;
    case 6:
        q->plan = 4;
        q->exec = 6; /* matches few or none */
        break;
    }
}

START_TEST(test_query_filters_match_the_fleet)
{
    struct q q;

    q_init(&q, "fallbacks");
    filter_case(_i, &q);
    check_fallbacks(&q);
    q.group_by = "backends";
    check_fallbacks(&q);
    q_init(&q, "coverage");
    filter_case(_i, &q);
    q.limit = 10000;
    check_coverage(&q);
    q.group_by = "source";
    check_coverage(&q);
}
END_TEST

/* Time ranges relative to the history: most cut hours at both ends. */
#define NRANGES 11
static void
range_case(int i, struct q *q)
{
    int64_t h0 = (base_ms / HOUR + 1) * HOUR; /* first whole hour */

    switch (i) {
    case 0: /* cuts both edges, whole hours between */
        q->has_since = q->has_until = 1;
        q->since = base_ms + 5 * HOUR + 17 * 60000;
        q->until = base_ms + 30 * HOUR + 3 * 60000;
        break;
    case 1: /* inside one hour */
        q->has_since = q->has_until = 1;
        q->since = h0 + 40 * HOUR + 60000;
        q->until = h0 + 40 * HOUR + 50 * 60000;
        break;
    case 2: /* across one hour boundary, no whole hour */
        q->has_since = q->has_until = 1;
        q->since = h0 + 10 * HOUR - 20 * 60000;
        q->until = h0 + 10 * HOUR + 20 * 60000;
        break;
    case 3: /* aligned to hours on both sides */
        q->has_since = q->has_until = 1;
        q->since = h0 + 3 * HOUR;
        q->until = h0 + 20 * HOUR;
        break;
    case 4: /* since only, cut; includes the live receipts */
        q->has_since = 1;
        q->since = base_ms + 20 * HOUR + 1;
        break;
    case 5: /* until only, cut */
        q->has_until = 1;
        q->until = base_ms + 9 * HOUR + 999;
        break;
    case 6: /* empty */
        q->has_since = q->has_until = 1;
        q->since = base_ms + 9 * HOUR;
        q->until = base_ms + 9 * HOUR;
        break;
    case 7: /* exactly the boundary receipts: h0 + k hours minus 0 or 1 */
        q->has_since = q->has_until = 1;
        q->since = h0 + 2 * HOUR - 1;
        q->until = h0 + 2 * HOUR;
        break;
    case 8: /* since after every receipt */
        q->has_since = 1;
        q->since = live_until + HOUR;
        break;
    case 9: /* a whole day, whole hours and partial hours on both sides */
        q->has_since = q->has_until = 1;
        q->since = (base_ms / DAY + 1) * DAY - 3 * HOUR - 5 * 60000;
        q->until = (base_ms / DAY + 2) * DAY + 2 * HOUR + 60000;
        break;
    case 10: /* exactly one day */
        q->has_since = q->has_until = 1;
        q->since = (base_ms / DAY + 1) * DAY;
        q->until = (base_ms / DAY + 2) * DAY;
        break;
    }
}

START_TEST(test_query_time_ranges_cutting_hours_are_exact)
{
    struct q q;

    q_init(&q, "fallbacks");
    range_case(_i, &q);
    q.group_by = "model";
    check_fallbacks(&q);
    q_init(&q, "coverage");
    range_case(_i, &q);
    q.limit = 10000;
    check_coverage(&q);
    q.group_by = "plan";
    q.plan = 2;
    check_coverage(&q);
}
END_TEST

START_TEST(test_query_limit_truncates_rows)
{
    struct q q;

    q_init(&q, "coverage");
    q.group_by = "model";
    q.limit = 30;
    check_coverage(&q);
    q_init(&q, "fallbacks");
    q.group_by = "backends";
    q.limit = 2;
    check_fallbacks(&q);
}
END_TEST

START_TEST(test_query_fallbacks_none_lists_fallback_receipts)
{
    struct e2e_reply rep;
    const msgpack_object *rows;
    uint64_t prev = UINT64_MAX;
    size_t want = 0;
    struct q q;
    uint32_t i;
    int truncated, j;

    q_init(&q, "fallbacks");
    q.group_by = "none";
    q.plan = 3;
    q.limit = 10000;
    for (j = 0; j < N_ALL; j++)
        want += fleet[j].plan == 3 &&
                status_of(&fleet[j]) == RECEIPT_STATUS_FALLBACK;
    ask(&q, &rep);
    rows = rows_of(&rep, &truncated);
    ck_assert_uint_eq(rows->via.array.size, want);
    ck_assert(!truncated);
    for (i = 0; i < rows->via.array.size; i++) {
        const msgpack_object *row = &rows->via.array.ptr[i];
        uint64_t id = e2e_get_uint(row, "receipt_id");
        ck_assert_uint_lt(id, prev); /* newest first */
        prev = id;
        check_str(row, "fallback", "fallback");
        check_str(row, "prepared_plan_id", plans[3]);
    }
    e2e_reply_free(&rep);
}
END_TEST

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

START_TEST(test_query_gaps_match_the_seqs_sent)
{
    struct e2e_reply rep;
    const msgpack_object *rows;
    struct q q;
    int truncated, s, found = 0;
    uint32_t i, k;

    q_init(&q, "gaps");
    q.limit = _i == 0 ? 100 : 1;
    ask(&q, &rep);
    rows = rows_of(&rep, &truncated);
    for (s = 0; s < 3; s++) {
        uint64_t v[MAXSEQ], ranges[MAXSEQ][2], missing = 0;
        size_t n = (size_t)nseqs[s], nr = 0, j;

        memcpy(v, seqs[s], n * sizeof(*v));
        qsort(v, n, sizeof(*v), cmp_u64);
        for (j = 1; j < n; j++)
            if (v[j] > v[j - 1] + 1) {
                ranges[nr][0] = v[j - 1] + 1;
                ranges[nr][1] = v[j] - 1;
                missing += v[j] - v[j - 1] - 1;
                nr++;
            }
        for (i = 0; i < rows->via.array.size; i++) {
            const msgpack_object *row = &rows->via.array.ptr[i];
            const msgpack_object *m = e2e_get(row, "missing");
            const msgpack_object *src = e2e_get(row, "source");
            uint32_t want_nr = nr < q.limit ? (uint32_t)nr : q.limit;

            if (src->via.str.size != strlen(sources[s]) ||
                memcmp(src->via.str.ptr, sources[s], src->via.str.size))
                continue;
            found++;
            ck_assert_uint_eq(e2e_get_uint(row, "first_seq"), v[0]);
            ck_assert_uint_eq(e2e_get_uint(row, "last_seq"), v[n - 1]);
            ck_assert_uint_eq(e2e_get_uint(row, "received"), n);
            ck_assert_uint_eq(e2e_get_uint(row, "missing_seqs"), missing);
            ck_assert_int_eq(e2e_get(row, "missing_truncated")->via.boolean,
                             nr > q.limit);
            ck_assert_uint_eq(m->via.array.size, want_nr);
            for (k = 0; k < want_nr; k++) {
                const msgpack_object *p = &m->via.array.ptr[k];
                ck_assert_uint_eq(p->via.array.ptr[0].via.u64, ranges[k][0]);
                ck_assert_uint_eq(p->via.array.ptr[1].via.u64, ranges[k][1]);
            }
        }
    }
    /* The source without hello has no seqs and no row. */
    ck_assert_int_eq(found, _i == 0 ? 3 : 1);
    ck_assert_uint_eq(rows->via.array.size, _i == 0 ? 3 : 1);
    ck_assert_int_eq(truncated, _i != 0);
    e2e_reply_free(&rep);
}
END_TEST

START_TEST(test_query_quarantine_rows_and_raw_bytes)
{
    struct e2e_reply rep, one;
    const msgpack_object *rows, *raw;
    struct q q;
    int truncated, i;
    uint64_t id;

    q_init(&q, "quarantine");
    ask(&q, &rep);
    rows = rows_of(&rep, &truncated);
    ck_assert_uint_eq(rows->via.array.size, NQ);
    ck_assert(!truncated);
    for (i = 0; i < NQ; i++) {
        const msgpack_object *row = &rows->via.array.ptr[i];
        int k = NQ - 1 - i; /* newest first */
        int64_t t = (int64_t)e2e_get_uint(row, "time");

        check_str(row, "source", sources[1]);
        check_str(row, "op", "receipt");
        ck_assert_uint_eq(e2e_get_uint(row, "size"), qlen[k]);
        ck_assert(t >= live_from && t < live_until);
        ck_assert_ptr_null(e2e_get(row, "raw"));
        ck_assert_ptr_nonnull(e2e_get(row, "code"));
        ck_assert_ptr_nonnull(e2e_get(row, "path"));
        ck_assert_ptr_nonnull(e2e_get(row, "message"));
    }
    check_str(&rows->via.array.ptr[NQ - 1], "code", "unsupported_schema");
    id = e2e_get_uint(&rows->via.array.ptr[1], "id");

    /* One row by id, with its bytes exactly as sent. */
    {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        int fd = e2e_connect(&d);

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 3);
        pack_cstr(&pk, "kind");
        pack_cstr(&pk, "quarantine");
        pack_cstr(&pk, "id");
        msgpack_pack_uint64(&pk, id);
        pack_cstr(&pk, "raw");
        msgpack_pack_true(&pk);
        ck_assert_int_eq(
            e2e_request(fd, PROTO_OP_QUERY, 9, 0, 0, sb.data, sb.size), 0);
        ck_assert_int_eq(e2e_recv(fd, T, &one), 0);
        ck_assert(one.r.ok);
        rows = rows_of(&one, &truncated);
        ck_assert_uint_eq(rows->via.array.size, 1);
        ck_assert_uint_eq(e2e_get_uint(&rows->via.array.ptr[0], "id"), id);
        raw = e2e_get(&rows->via.array.ptr[0], "raw");
        ck_assert_ptr_nonnull(raw);
        ck_assert_int_eq(raw->type, MSGPACK_OBJECT_BIN);
        ck_assert_uint_eq(raw->via.bin.size, qlen[1]);
        ck_assert(memcmp(raw->via.bin.ptr, qraw[1], qlen[1]) == 0);
        e2e_reply_free(&one);
        msgpack_sbuffer_destroy(&sb);
        close(fd);
    }
    e2e_reply_free(&rep);

    /* Filters: another source has none; limit 1 truncates. */
    q.source = 0;
    ask(&q, &rep);
    rows = rows_of(&rep, &truncated);
    ck_assert_uint_eq(rows->via.array.size, 0);
    e2e_reply_free(&rep);
    q.source = -1;
    q.limit = 1;
    ask(&q, &rep);
    rows = rows_of(&rep, &truncated);
    ck_assert_uint_eq(rows->via.array.size, 1);
    ck_assert(truncated);
    e2e_reply_free(&rep);
}
END_TEST

/* Series over the historic receipts: windows cut inside an hour and a
 * day, with empty buckets before and after the receipts; hours, hours
 * that do not divide a day, days. */
START_TEST(test_query_series_match_the_fleet)
{
    static const uint64_t everys[] = { HOUR, 5 * HOUR, DAY };
    struct q q;
    int gb;

    /* Each key, and two pairs (the sums' model, and plan). */
    for (gb = 0; gb < 7; gb++) {
        q_init(&q, "fallbacks");
        q.group_by = gb < 5    ? group_bys[gb + 1]
                     : gb == 5 ? "backends,model"
                               : "plan,backends";
        q.has_since = q.has_until = 1;
        q.since = base_ms - 3 * HOUR - 17 * 60000;
        q.until = base_ms + 50 * HOUR + 5 * 60000;
        q.every = everys[_i];
        q.limit = 1000;
        check_fallbacks_series(&q);
    }
    q_init(&q, "fallbacks");
    q.has_since = q.has_until = 1;
    q.since = base_ms + 7 * HOUR + 1;
    q.until = base_ms + 31 * HOUR - 1;
    q.every = everys[_i];
    q.plan = 2;
    q.group_by = "backends";
    check_fallbacks_series(&q);
    q_init(&q, "coverage");
    q.has_since = q.has_until = 1;
    q.since = base_ms - HOUR;
    q.until = base_ms + 49 * HOUR + 7;
    q.every = everys[_i];
    q.limit = 10000;
    check_coverage_series(&q);
}
END_TEST

/* A series' limit counts groups, each sent whole. */
START_TEST(test_query_series_limit_counts_groups)
{
    struct e2e_reply rep;
    const msgpack_object *rows;
    struct q q;
    int truncated;

    q_init(&q, "fallbacks");
    q.group_by = "plan";
    q.has_since = q.has_until = 1;
    q.since = base_ms;
    q.until = base_ms + 10 * HOUR;
    q.every = HOUR;
    q.limit = 2;
    ask(&q, &rep);
    rows = rows_of(&rep, &truncated);
    ck_assert_int_eq(truncated, 1);
    ck_assert_uint_eq(rows->via.array.size, 2 * 11);
    e2e_reply_free(&rep);
}
END_TEST

/* every: whole hours, with since, at most 2,000 buckets; the error names
 * the field. */
START_TEST(test_query_series_rejects_bad_every)
{
    static const struct {
        uint64_t every;
        int has_since;
        int64_t span;
        const char *path;
    } bad[] = {
        { 60000, 1, HOUR, "every" },       /* a minute */
        { HOUR + 1, 1, HOUR, "every" },    /* not whole hours */
        { HOUR, 0, 0, "since" },           /* no start */
        { HOUR, 1, 2001 * HOUR, "every" }, /* too many buckets */
    };
    struct e2e_reply rep;
    struct q q;
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        q_init(&q, i % 2 ? "fallbacks" : "coverage");
        q.every = bad[i].every;
        q.has_since = bad[i].has_since;
        q.has_until = bad[i].has_since;
        q.since = base_ms;
        q.until = base_ms + bad[i].span;
        send_q(&q, &rep);
        ck_assert_msg(!rep.r.ok, "case %zu was accepted", i);
        ck_assert_str_eq(proto_code_name(rep.r.err.code), "invalid");
        ck_assert_str_eq(rep.r.err.path, bad[i].path);
        e2e_reply_free(&rep);
    }
    /* fallbacks without groups lists receipts: no series. */
    q_init(&q, "fallbacks");
    q.group_by = "none";
    q.every = HOUR;
    q.has_since = 1;
    q.since = base_ms;
    send_q(&q, &rep);
    ck_assert(!rep.r.ok);
    ck_assert_str_eq(rep.r.err.path, "every");
    e2e_reply_free(&rep);
}
END_TEST

/* Unknown keys, and pairs other than a string key with backends. */
START_TEST(test_query_rejects_unknown_group_by)
{
    static const char *const bad[] = {
        "colour",        "plan,model",          "backends,backends",
        "none,backends", "plan,backends,model", "plan,",
        ",backends",     "plan, backends",
    };
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct e2e_reply rep;
    int fd = e2e_connect(&d);
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 2);
        pack_cstr(&pk, "kind");
        pack_cstr(&pk, i % 2 ? "fallbacks" : "coverage");
        pack_cstr(&pk, "group_by");
        pack_cstr(&pk, bad[i]);
        ck_assert_int_eq(e2e_request(fd, PROTO_OP_QUERY, 3 + (uint32_t)i, 0, 0,
                                     sb.data, sb.size),
                         0);
        ck_assert_int_eq(e2e_recv(fd, T, &rep), 0);
        ck_assert_msg(!rep.r.ok, "group_by \"%s\" was answered", bad[i]);
        ck_assert_str_eq(proto_code_name(rep.r.err.code), "invalid");
        ck_assert_str_eq(rep.r.err.path, "group_by");
        e2e_reply_free(&rep);
        msgpack_sbuffer_destroy(&sb);
    }
    close(fd);
}
END_TEST

/* The rollups (backfilled and live) against a scan of every receipt, on
 * the daemon's file through the store module: identical groups. */
static int
cmp_group_cb(const void *pa, const void *pb)
{
    const struct store_agg_group *a = pa, *b = pb;

    if (a->k1 != b->k1)
        return a->k1 < b->k1 ? -1 : 1;
    return (a->k2 > b->k2) - (a->k2 < b->k2);
}

START_TEST(test_query_rollups_equal_a_full_scan)
{
    struct store_opts o = { .readonly = 1 };
    struct store_filter f;
    struct store_agg a = { 0 }, b = { 0 };
    struct proto_err err;
    struct store *s;
    size_t i;
    int r, gb = _i % STORE_GROUP_COUNT;

    memset(&f, 0, sizeof(f));
    f.requested = f.executed = f.status = -1;
    f.limit = 100;
    r = _i / STORE_GROUP_COUNT;
    if (r > 0) {
        struct q q;
        q_init(&q, "coverage");
        range_case(r - 1, &q);
        f.has_since = q.has_since;
        f.has_until = q.has_until;
        f.since = (uint64_t)q.since;
        f.until = (uint64_t)q.until;
    }
    ck_assert_int_eq(store_open(d.db, &o, &s, &err), 0);
    ck_assert_int_eq(
        store_query_agg(s, &f, gb, STORE_AGG_COUNTERS, 0, &a, &err), 0);
    ck_assert_int_eq(store_query_agg(s, &f, gb,
                                     STORE_AGG_COUNTERS | STORE_AGG_SCAN, 0, &b,
                                     &err),
                     0);
    store_free(s);
    ck_assert_uint_eq(a.n, b.n);
    /* An empty range has no groups array at all: qsort needs one. */
    if (a.n > 0) {
        qsort(a.groups, a.n, sizeof(*a.groups), cmp_group_cb);
        qsort(b.groups, b.n, sizeof(*b.groups), cmp_group_cb);
    }
    for (i = 0; i < a.n; i++) {
        ck_assert_int_eq(a.groups[i].k1, b.groups[i].k1);
        ck_assert_int_eq(a.groups[i].k2, b.groups[i].k2);
        ck_assert_uint_eq(a.groups[i].receipts, b.groups[i].receipts);
        ck_assert_uint_eq(a.groups[i].fallback, b.groups[i].fallback);
        ck_assert_uint_eq(a.groups[i].clean, b.groups[i].clean);
        ck_assert_uint_eq(a.groups[i].unproven, b.groups[i].unproven);
        ck_assert(memcmp(a.groups[i].c, b.groups[i].c, sizeof(a.groups[i].c)) ==
                  0);
    }
    store_agg_free(&a);
    store_agg_free(&b);
}
END_TEST

START_TEST(test_query_backfill_holds_the_history)
{
    static const char *const sql[] = {
        "SELECT sum(receipts), count(*) FROM rollups WHERE bucket < ?1",
        "SELECT sum(receipts), count(*) FROM rollups_day WHERE bucket < ?1",
    };
    const int64_t size[] = { HOUR, DAY };
    sqlite3 *db;
    sqlite3_stmt *st;
    int64_t n, rows;

    /* The history reached the rollups only through migration 0004: every
     * bucket before the live receipts' holds exactly the history. */
    ck_assert_int_eq(sqlite3_open_v2(d.db, &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, sql[_i], -1, &st, NULL), SQLITE_OK);
    /* History ends at least 47 hours before the live receipts, so every
     * historic hour and day is earlier than the live ones. */
    sqlite3_bind_int64(st, 1, live_from / size[_i]);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    n = sqlite3_column_int64(st, 0);
    rows = sqlite3_column_int64(st, 1);
    sqlite3_finalize(st);
    sqlite3_close(db);
    ck_assert_int_eq(n, N_HIST);
    ck_assert_int_gt(rows, _i == 0 ? 48 : 2); /* many buckets and keys */
}
END_TEST

/* The daemon migrated the historic store from version 3 at start, said so
 * in its log, and asked systemd for more start time before it was ready:
 * building the indexes of a large store takes minutes. */
START_TEST(test_query_migration_is_logged_and_extends_the_start)
{
    char want[128], *log;
    const char *extend, *ready;
    size_t len;

    ck_assert(fleet_ok);
    log = e2e_read_file(d.log, &len);
    ck_assert_ptr_nonnull(log);
    snprintf(want, sizeof(want),
             "migrating the store from schema version 3 to %d",
             store_schema_version());
    ck_assert_msg(strstr(log, want) != NULL, "the log has no \"%s\"", want);
    snprintf(want, sizeof(want), "store migrated from schema version 3 to %d",
             store_schema_version());
    ck_assert_msg(strstr(log, want) != NULL, "the log has no \"%s\"", want);
    free(log);
    /* EXTEND_TIMEOUT_USEC came, with a time, before READY=1. */
    extend = strstr(notified, "EXTEND_TIMEOUT_USEC=");
    ready = strstr(notified, "READY=1");
    ck_assert_msg(ready != NULL, "no READY=1 in: %s", notified);
    ck_assert_msg(extend != NULL && extend < ready,
                  "READY=1 came before EXTEND_TIMEOUT_USEC: %s", notified);
    ck_assert_int_gt(strtoull(extend + 20, NULL, 10), 0);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("query");
    TCase *tc;

#define ADD(name, fn)                                                          \
    do {                                                                       \
        tc = tcase_create(name);                                               \
        tcase_set_timeout(tc, 120);                                            \
        tcase_add_test(tc, fn);                                                \
        suite_add_tcase(s, tc);                                                \
    } while (0)
#define ADD_LOOP(name, fn, n)                                                  \
    do {                                                                       \
        tc = tcase_create(name);                                               \
        tcase_set_timeout(tc, 120);                                            \
        tcase_add_loop_test(tc, fn, 0, n);                                     \
        suite_add_tcase(s, tc);                                                \
    } while (0)
    ADD("fleet", test_query_fleet_was_built);
    ADD("migration", test_query_migration_is_logged_and_extends_the_start);
    ADD_LOOP("fallbacks", test_query_fallbacks_groups_match_the_fleet,
             NGROUP_BYS);
    ADD_LOOP("coverage", test_query_coverage_groups_match_the_fleet,
             NGROUP_BYS);
    ADD_LOOP("filters", test_query_filters_match_the_fleet, 7);
    ADD_LOOP("ranges", test_query_time_ranges_cutting_hours_are_exact, NRANGES);
    ADD("limit", test_query_limit_truncates_rows);
    ADD_LOOP("series", test_query_series_match_the_fleet, 3);
    ADD("series_limit", test_query_series_limit_counts_groups);
    ADD("series_bad", test_query_series_rejects_bad_every);
    ADD("fallbacks_none", test_query_fallbacks_none_lists_fallback_receipts);
    ADD_LOOP("gaps", test_query_gaps_match_the_seqs_sent, 2);
    ADD("quarantine", test_query_quarantine_rows_and_raw_bytes);
    ADD("group_by", test_query_rejects_unknown_group_by);
    ADD_LOOP("rollups_scan", test_query_rollups_equal_a_full_scan,
             STORE_GROUP_COUNT * (NRANGES + 1));
    ADD_LOOP("backfill", test_query_backfill_holds_the_history, 2);
#undef ADD
#undef ADD_LOOP
    return s;
}

int
main(void)
{
    SRunner *sr;
    int failed, status = 0, rc;

    /* The fleet is built once here; every forked test inherits what the
     * test sent and queries the same daemon. */
    fleet_ok = build_fleet() == 0;
    sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    /* The stop checkpoints the fleet's WAL into the database (TRUNCATE):
     * under the sanitizers, beside the fsync-heavy fault suites, that has
     * taken longer than 10 s. */
    if (!e2e_alive(&d)) {
        fprintf(stderr, "receiptd was gone before the stop\n");
        failed++;
    } else if ((rc = e2e_stop(&d, SIGTERM, 60000, &status)) != 0 ||
               !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "receiptd did not stop cleanly (%s, status %d)\n",
                rc != 0 ? "not within 60 s" : "exit status", status);
        failed++;
    }
    e2e_cleanup(&d);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
