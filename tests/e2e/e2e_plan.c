/*
 * e2e_plan.c: end-to-end tests of the ops plan, retention and readback and
 * of the query kinds plans and retained: the real receiptd on a temporary
 * socket and SQLite file, driven over the wire, and the real receiptctl
 * for its plan subcommands.
 *
 * Bodies come from the checked-in fixtures (tests/data/plans/) or from
 * the fixture builder (plan_fixture.h) with one field changed. Each test
 * starts its own daemon in Check's fork mode and ends with a clean SIGTERM.
 * The quarantine is read with a read-only SQLite connection on the
 * daemon's file.
 */
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>
#include <msgpack.h>
#include <sqlite3.h>

#include "e2e_util.h"
#include "plan_fixture.h"

#define T   5000 /* reply timeout, ms */
#define CTL TEST_BINARY_DIR "/client/receiptctl"

#define PLAN_ID "plan:fixture/1"
#define GRAPH   "sha256:0f1e2d3c"

static struct e2e_daemon d;

static void
start(void)
{
    ck_assert_msg(e2e_start(&d, NULL) == 0, "receiptd did not start");
}

static void
teardown(void)
{
    int status = 0, rc = 0;

    if (e2e_alive(&d))
        rc = e2e_stop(&d, SIGTERM, 10000, &status);
    e2e_cleanup(&d);
    fx_done();
    ck_assert_msg(rc == 0, "receiptd did not stop within 10 s of SIGTERM");
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "receiptd did not exit cleanly (status %d)", status);
}

static int
connect_hello(const char *source)
{
    int fd = e2e_connect(&d);

    ck_assert_int_ge(fd, 0);
    if (source != NULL)
        ck_assert_int_eq(e2e_hello(fd, source), 0);
    return fd;
}

/* Sends op with body and reads its reply into rep. */
static void
call(int fd, int op, uint64_t id, int has_seq, uint64_t seq, const void *body,
     size_t len, struct e2e_reply *rep)
{
    ck_assert_int_eq(e2e_request(fd, op, id, has_seq, seq, body, len), 0);
    ck_assert_int_eq(e2e_recv(fd, T, rep), 0);
    ck_assert(rep->r.has_id);
    ck_assert_uint_eq(rep->r.id, id);
}

static void
expect_ok(const struct e2e_reply *rep)
{
    ck_assert_msg(rep->r.ok, "%s at %s: %s", proto_code_name(rep->r.err.code),
                  rep->r.err.path, rep->r.err.message);
}

static void
expect_err(const struct e2e_reply *rep, int code, const char *path)
{
    ck_assert_msg(!rep->r.ok, "expected %s, got ok", proto_code_name(code));
    ck_assert_str_eq(proto_code_name(rep->r.err.code), proto_code_name(code));
    if (path != NULL)
        ck_assert_str_eq(rep->r.err.path, path);
    ck_assert(rep->r.err.message[0] != '\0');
}

static int
get_bool(const msgpack_object *o, const char *key)
{
    const msgpack_object *v = e2e_get(o, key);

    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(v->type, MSGPACK_OBJECT_BOOLEAN);
    return v->via.boolean;
}

/* A checked-in fixture's bytes (zone memory). */
static const char *
data(const char *rel, size_t *len)
{
    const char *p = fx_read_data(rel, len);

    ck_assert_msg(p != NULL, "missing tests/data/%s", rel);
    return p;
}

/* The unpacked object of a checked-in fixture. */
static msgpack_object *
data_obj(const char *rel)
{
    size_t len;
    const char *p = data(rel, &len);
    msgpack_object *o = fx_unpack(p, len);

    ck_assert_ptr_nonnull(o);
    return o;
}

static void
register_fixture(int fd, uint64_t id, int want_created)
{
    struct e2e_reply rep;
    size_t len;
    const char *body = data("plans/fixture.msgpack", &len);

    call(fd, PROTO_OP_PLAN, id, 0, 0, body, len, &rep);
    expect_ok(&rep);
    ck_assert_int_eq(get_bool(rep.r.result, "created"), want_created);
    ck_assert_uint_eq(e2e_get_uint(rep.r.result, "nodes"), 3);
    ck_assert_uint_eq(e2e_get_uint(rep.r.result, "values"), 10);
    e2e_reply_free(&rep);
}

static void
retain_fixture(int fd, uint64_t id)
{
    struct e2e_reply rep;
    size_t len;
    const char *body = data("plans/retention.msgpack", &len);
    const msgpack_object *got;

    call(fd, PROTO_OP_RETENTION, id, 0, 0, body, len, &rep);
    expect_ok(&rep);
    got = e2e_get(rep.r.result, "retained");
    ck_assert_ptr_nonnull(got);
    ck_assert(msgpack_object_equal(*got, *data_obj("plans/retained.msgpack")));
    e2e_reply_free(&rep);
}

static sqlite3 *
open_ro(void)
{
    sqlite3 *db = NULL;

    ck_assert_int_eq(sqlite3_open_v2(d.db, &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    return db;
}

struct qrow {
    char op[32], code[32], path[256];
    int has_message;
    char *raw;
    size_t len;
};

/* Reads the quarantine rows, oldest first; returns how many (at most n). */
static int
quarantine(struct qrow *rows, int n)
{
    sqlite3 *db = open_ro();
    sqlite3_stmt *st;
    int got = 0;

    ck_assert_int_eq(sqlite3_prepare_v2(db,
                                        "SELECT op, code, path, message, raw "
                                        "FROM quarantine ORDER BY id",
                                        -1, &st, NULL),
                     SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW && got < n) {
        struct qrow *r = &rows[got++];
        snprintf(r->op, sizeof(r->op), "%s", sqlite3_column_text(st, 0));
        snprintf(r->code, sizeof(r->code), "%s", sqlite3_column_text(st, 1));
        snprintf(r->path, sizeof(r->path), "%s", sqlite3_column_text(st, 2));
        r->has_message = sqlite3_column_bytes(st, 3) > 0;
        r->len = (size_t)sqlite3_column_bytes(st, 4);
        r->raw = malloc(r->len + 1);
        ck_assert_ptr_nonnull(r->raw);
        memcpy(r->raw, sqlite3_column_blob(st, 4), r->len);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return got;
}

static void
qrows_free(struct qrow *rows, int n)
{
    int i;

    for (i = 0; i < n; i++)
        free(rows[i].raw);
}

/* Sends a query {kind, plan?, graph?} and returns its rows. */
static const msgpack_object *
query(int fd, uint64_t id, const char *kind, const char *plan,
      const char *graph, struct e2e_reply *rep)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    const msgpack_object *rows;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1 + (plan != NULL) + (graph != NULL));
    envelope_pack_cstr(&pk, "kind");
    envelope_pack_cstr(&pk, kind);
    if (plan != NULL) {
        envelope_pack_cstr(&pk, "plan");
        envelope_pack_cstr(&pk, plan);
    }
    if (graph != NULL) {
        envelope_pack_cstr(&pk, "graph");
        envelope_pack_cstr(&pk, graph);
    }
    call(fd, PROTO_OP_QUERY, id, 0, 0, sb.data, sb.size, rep);
    msgpack_sbuffer_destroy(&sb);
    expect_ok(rep);
    rows = e2e_get(rep->r.result, "rows");
    ck_assert_ptr_nonnull(rows);
    ck_assert_int_eq(rows->type, MSGPACK_OBJECT_ARRAY);
    return rows;
}

/* ---- plan ---- */

START_TEST(test_e2e_plan_register_again_conflict_invalid)
{
    struct e2e_reply rep;
    struct qrow q[4];
    msgpack_object *o;
    const char *body, *body2, *bad;
    size_t len, len2, blen;
    int fd, n;

    start();
    fd = connect_hello("plan-node");
    register_fixture(fd, 1, 1);
    register_fixture(fd, 2, 0);

    /* Same key, one offset moved (still a valid plan): a conflict. */
    o = fx_fixture();
    fx_set(o, "nodes[2].values[2].storage.components[0].offset_bytes", "136");
    body = fx_pack(o, &len);
    call(fd, PROTO_OP_PLAN, 3, 0, 0, body, len, &rep);
    expect_err(&rep, PROTO_ECONFLICT, "nodes[2].values[2]");
    e2e_reply_free(&rep);

    /* A node dropped: the node list itself differs. */
    o = fx_fixture();
    o->via.map.ptr[2].val.via.array.size = 2;
    ck_assert_ptr_eq(fx_at(o, "nodes"), &o->via.map.ptr[2].val);
    body2 = fx_pack(o, &len2);
    call(fd, PROTO_OP_PLAN, 6, 0, 0, body2, len2, &rep);
    expect_err(&rep, PROTO_ECONFLICT, "nodes");
    e2e_reply_free(&rep);

    /* A component of zero length breaks a storage rule: its exact path. */
    o = fx_fixture();
    fx_set(o, "nodes[2].values[0].storage.components[0].length_bytes", "0");
    bad = fx_pack(o, &blen);
    call(fd, PROTO_OP_PLAN, 4, 0, 0, bad, blen, &rep);
    expect_err(&rep, PROTO_EINVALID,
               "nodes[2].values[0].storage.components[0].length_bytes");
    e2e_reply_free(&rep);

    /* The registered plan is still the first one. */
    register_fixture(fd, 5, 0);

    n = quarantine(q, 4);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(q[0].op, "plan");
    ck_assert_str_eq(q[0].code, "conflict");
    ck_assert_str_eq(q[0].path, "nodes[2].values[2]");
    ck_assert(q[0].has_message);
    ck_assert_uint_eq(q[0].len, len);
    ck_assert_mem_eq(q[0].raw, body, len);
    ck_assert_str_eq(q[1].code, "conflict");
    ck_assert_uint_eq(q[1].len, len2);
    ck_assert_mem_eq(q[1].raw, body2, len2);
    ck_assert_str_eq(q[2].op, "plan");
    ck_assert_str_eq(q[2].code, "invalid");
    ck_assert_str_eq(q[2].path,
                     "nodes[2].values[0].storage.components[0].length_bytes");
    ck_assert_uint_eq(q[2].len, blen);
    ck_assert_mem_eq(q[2].raw, bad, blen);
    qrows_free(q, n);
    close(fd);
}
END_TEST

START_TEST(test_e2e_plan_without_body_is_invalid_and_quarantined)
{
    struct e2e_reply rep;
    struct qrow q[2];
    int fd, n;

    start();
    fd = connect_hello(NULL);
    call(fd, PROTO_OP_PLAN, 1, 0, 0, NULL, 0, &rep);
    expect_err(&rep, PROTO_EINVALID, "body");
    e2e_reply_free(&rep);
    call(fd, PROTO_OP_RETENTION, 2, 0, 0, "\x93\x01\x02\x03", 4, &rep);
    expect_err(&rep, PROTO_EINVALID, NULL);
    e2e_reply_free(&rep);
    n = quarantine(q, 2);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(q[0].op, "plan");
    ck_assert_str_eq(q[1].op, "retention");
    ck_assert_uint_eq(q[1].len, 4);
    ck_assert_mem_eq(q[1].raw, "\x93\x01\x02\x03", 4);
    qrows_free(q, n);
    close(fd);
}
END_TEST

/* ---- retention ---- */

START_TEST(test_e2e_retention_resolves_and_is_idempotent)
{
    struct e2e_reply rep;
    const msgpack_object *rows;
    int fd;

    start();
    fd = connect_hello("plan-node");
    register_fixture(fd, 1, 1);
    retain_fixture(fd, 2);
    /* Retaining the same values again changes nothing. */
    retain_fixture(fd, 3);
    rows = query(fd, 4, "retained", PLAN_ID, GRAPH, &rep);
    ck_assert_uint_eq(rows->via.array.size, 3);
    ck_assert(e2e_get_str_eq(&rows->via.array.ptr[0], "value_id", "hidden0"));
    ck_assert(e2e_get_str_eq(&rows->via.array.ptr[1], "value_id", "hidden1"));
    ck_assert(e2e_get_str_eq(&rows->via.array.ptr[2], "value_id", "logits"));
    e2e_reply_free(&rep);
    close(fd);
}
END_TEST

START_TEST(test_e2e_retention_determinism_outputs)
{
    struct e2e_reply rep;
    msgpack_object *o;
    const msgpack_object *got;
    const char *body;
    size_t len;
    int fd;

    start();
    fd = connect_hello(NULL);
    register_fixture(fd, 1, 1);
    /* The fixture's kv output is state, not activations: rule 2. */
    o = fx_json("{\"prepared_plan_id\": \"" PLAN_ID "\", \"graph_hash\": "
                "\"" GRAPH "\", \"determinism_outputs\": true}");
    body = fx_pack(o, &len);
    call(fd, PROTO_OP_RETENTION, 2, 0, 0, body, len, &rep);
    expect_err(&rep, PROTO_EINVALID, "determinism_outputs");
    e2e_reply_free(&rep);

    /* A plan whose every output is an activation retains all six. */
    o = fx_fixture();
    fx_set(o, "prepared_plan_id", "\"plan:fixture/det\"");
    fx_set(o, "nodes[1].values[2].usage", "\"activations\"");
    fx_set(o, "nodes[1].values[3].usage", "\"activations\"");
    fx_set(o, "nodes[2].values[2].usage", "\"activations\"");
    body = fx_pack(o, &len);
    call(fd, PROTO_OP_PLAN, 3, 0, 0, body, len, &rep);
    expect_ok(&rep);
    e2e_reply_free(&rep);
    o = fx_json("{\"prepared_plan_id\": \"plan:fixture/det\", "
                "\"graph_hash\": \"" GRAPH
                "\", \"determinism_outputs\": true}");
    body = fx_pack(o, &len);
    call(fd, PROTO_OP_RETENTION, 4, 0, 0, body, len, &rep);
    expect_ok(&rep);
    got = e2e_get(rep.r.result, "retained");
    ck_assert_ptr_nonnull(got);
    ck_assert_uint_eq(got->via.array.size, 6);
    ck_assert(e2e_get_str_eq(&got->via.array.ptr[0], "value_id", "hidden0"));
    ck_assert(e2e_get_str_eq(&got->via.array.ptr[5], "value_id", "tmp"));
    ck_assert(e2e_get_str_eq(&got->via.array.ptr[5], "resource_id", "pool/b"));
    e2e_reply_free(&rep);
    close(fd);
}
END_TEST

START_TEST(test_e2e_retention_claimed_forged_and_unknown_plan)
{
    struct e2e_reply rep;
    struct qrow q[4];
    msgpack_object *o;
    const char *body, *forged;
    size_t len, flen;
    int fd, n;

    start();
    fd = connect_hello(NULL);
    register_fixture(fd, 1, 1);

    /* The runtime's claimed resolution, as it is: accepted. */
    o = data_obj("plans/retention.msgpack");
    fx_add(o, "", "retained", "null");
    *fx_at(o, "retained") = *data_obj("plans/retained.msgpack");
    body = fx_pack(o, &len);
    call(fd, PROTO_OP_RETENTION, 2, 0, 0, body, len, &rep);
    expect_ok(&rep);
    e2e_reply_free(&rep);

    /* A forged offset: mismatch, quarantined. */
    fx_set(o, "retained[2].logical_offset_bytes", "0");
    forged = fx_pack(o, &flen);
    call(fd, PROTO_OP_RETENTION, 3, 0, 0, forged, flen, &rep);
    expect_err(&rep, PROTO_EMISMATCH, "retained[2].logical_offset_bytes");
    e2e_reply_free(&rep);

    /* A forged resource. */
    fx_set(o, "retained[2].logical_offset_bytes", "128");
    fx_set(o, "retained[0].resource_id", "\"pool/evil\"");
    body = fx_pack(o, &len);
    call(fd, PROTO_OP_RETENTION, 4, 0, 0, body, len, &rep);
    expect_err(&rep, PROTO_EMISMATCH, "retained[0].resource_id");
    e2e_reply_free(&rep);

    /* Unknown plan: answered, not quarantined (the payload is fine). */
    o = data_obj("plans/retention.msgpack");
    fx_set(o, "graph_hash", "\"sha256:other\"");
    body = fx_pack(o, &len);
    call(fd, PROTO_OP_RETENTION, 5, 0, 0, body, len, &rep);
    expect_err(&rep, PROTO_EUNKNOWN_PLAN, "prepared_plan_id");
    e2e_reply_free(&rep);

    /* A value that is not an output: a rule failure with its path. */
    o = data_obj("plans/retention.msgpack");
    fx_set(o, "values[1]", "\"tokens\"");
    body = fx_pack(o, &len);
    call(fd, PROTO_OP_RETENTION, 6, 0, 0, body, len, &rep);
    expect_err(&rep, PROTO_EINVALID, "values[1]");
    e2e_reply_free(&rep);

    n = quarantine(q, 4);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(q[0].op, "retention");
    ck_assert_str_eq(q[0].code, "mismatch");
    ck_assert_str_eq(q[0].path, "retained[2].logical_offset_bytes");
    ck_assert_uint_eq(q[0].len, flen);
    ck_assert_mem_eq(q[0].raw, forged, flen);
    ck_assert_str_eq(q[1].code, "mismatch");
    ck_assert_str_eq(q[2].code, "invalid");
    ck_assert_str_eq(q[2].path, "values[1]");
    qrows_free(q, n);
    close(fd);
}
END_TEST

/* ---- readback ---- */

struct rb_case {
    const char *field; /* NULL: the fixture as it is */
    const char *json;
    int code;
    const char *path;
};

static const struct rb_case rb_cases[] = {
    { NULL, NULL, 0, NULL },
    { "value_id", "\"tmp\"", PROTO_ENOT_RETAINED, "value_id" },
    { "value_id", "\"nope\"", PROTO_ENOT_RETAINED, "value_id" },
    { "value_id", "\"hidden1\"", PROTO_EINVALID, "value_id" },
    { "output_layout.element_type", "\"f16\"", PROTO_EINVALID,
      "output_layout.element_type" },
    { "output_layout.element_count", "9", PROTO_EINVALID,
      "output_layout.element_count" },
    { "output_layout.element_count", "0", PROTO_EINVALID,
      "output_layout.element_count" },
    { "prepared_plan_id", "\"plan:other\"", PROTO_EUNKNOWN_PLAN,
      "prepared_plan_id" },
};

START_TEST(test_e2e_readback_cases)
{
    const struct rb_case *c = &rb_cases[_i];
    struct e2e_reply rep;
    msgpack_object *o;
    const char *body;
    size_t len;
    struct qrow q[1];
    int fd;

    start();
    fd = connect_hello(NULL);
    register_fixture(fd, 1, 1);
    retain_fixture(fd, 2);
    o = data_obj("plans/readback.msgpack");
    if (c->field != NULL)
        fx_set(o, c->field, c->json);
    body = fx_pack(o, &len);
    call(fd, PROTO_OP_READBACK, 3, 0, 0, body, len, &rep);
    if (c->code == 0) {
        expect_ok(&rep);
        ck_assert(
            msgpack_object_equal(*e2e_get(rep.r.result, "request"),
                                 *data_obj("plans/readback-request.msgpack")));
    } else {
        expect_err(&rep, c->code, c->path);
    }
    e2e_reply_free(&rep);
    /* Nothing is stored for a readback, not even a refused one. */
    ck_assert_int_eq(quarantine(q, 1), 0);
    close(fd);
}
END_TEST

/* ---- queries ---- */

START_TEST(test_e2e_plans_and_retained_queries)
{
    struct e2e_reply rep;
    const msgpack_object *rows, *r;
    msgpack_object *o;
    const char *body;
    size_t len;
    int fd;

    start();
    fd = connect_hello("q-node");
    rows = query(fd, 1, "plans", NULL, NULL, &rep);
    ck_assert_uint_eq(rows->via.array.size, 0);
    e2e_reply_free(&rep);
    register_fixture(fd, 2, 1);
    retain_fixture(fd, 3);
    o = fx_fixture();
    fx_set(o, "graph_hash", "\"sha256:second\"");
    body = fx_pack(o, &len);
    call(fd, PROTO_OP_PLAN, 4, 0, 0, body, len, &rep);
    expect_ok(&rep);
    e2e_reply_free(&rep);

    /* Newest first, with counts. */
    rows = query(fd, 5, "plans", NULL, NULL, &rep);
    ck_assert_uint_eq(rows->via.array.size, 2);
    r = &rows->via.array.ptr[0];
    ck_assert(e2e_get_str_eq(r, "graph_hash", "sha256:second"));
    ck_assert_uint_eq(e2e_get_uint(r, "retained"), 0);
    r = &rows->via.array.ptr[1];
    ck_assert(e2e_get_str_eq(r, "prepared_plan_id", PLAN_ID));
    ck_assert(e2e_get_str_eq(r, "graph_hash", GRAPH));
    ck_assert(e2e_get_str_eq(r, "source", "q-node"));
    ck_assert_uint_eq(e2e_get_uint(r, "nodes"), 3);
    ck_assert_uint_eq(e2e_get_uint(r, "values"), 10);
    ck_assert_uint_eq(e2e_get_uint(r, "retained"), 3);
    ck_assert_uint_gt(e2e_get_uint(r, "registered_at"), 0);
    e2e_reply_free(&rep);

    rows = query(fd, 6, "plans", PLAN_ID, "sha256:second", &rep);
    ck_assert_uint_eq(rows->via.array.size, 1);
    e2e_reply_free(&rep);

    rows = query(fd, 7, "retained", PLAN_ID, GRAPH, &rep);
    ck_assert_uint_eq(rows->via.array.size, 3);
    r = &rows->via.array.ptr[2];
    ck_assert(e2e_get_str_eq(r, "prepared_plan_id", PLAN_ID));
    ck_assert(e2e_get_str_eq(r, "value_id", "logits"));
    ck_assert(e2e_get_str_eq(r, "producer_node_id", "head"));
    ck_assert(e2e_get_str_eq(r, "resource_id", "pool/a"));
    ck_assert_uint_eq(e2e_get_uint(r, "logical_offset_bytes"), 128);
    ck_assert_ptr_nonnull(e2e_get(r, "tensor"));
    e2e_reply_free(&rep);

    rows = query(fd, 8, "retained", PLAN_ID, "sha256:second", &rep);
    ck_assert_uint_eq(rows->via.array.size, 0);
    e2e_reply_free(&rep);

    /* retained needs a plan. */
    call(fd, PROTO_OP_QUERY, 9, 0, 0, "\x81\xa4kind\xa8retained", 15, &rep);
    expect_err(&rep, PROTO_EINVALID, "plan");
    e2e_reply_free(&rep);

    /* stats counts what the store holds. */
    rows = query(fd, 10, "stats", NULL, NULL, &rep);
    ck_assert_uint_eq(rows->via.array.size, 1);
    ck_assert_uint_eq(e2e_get_uint(&rows->via.array.ptr[0], "plans"), 2);
    ck_assert_uint_eq(e2e_get_uint(&rows->via.array.ptr[0], "retained_values"),
                      3);
    e2e_reply_free(&rep);
    close(fd);
}
END_TEST

/* ---- dedupe and restarts ---- */

START_TEST(test_e2e_plan_seq_dedupe_across_reconnect)
{
    struct e2e_reply rep;
    size_t len;
    const char *body = data("plans/fixture.msgpack", &len);
    const char *ret;
    size_t rlen;
    int fd;

    start();
    fd = connect_hello("dedupe-node");
    call(fd, PROTO_OP_PLAN, 1, 1, 7, body, len, &rep);
    expect_ok(&rep);
    ck_assert_int_eq(get_bool(rep.r.result, "created"), 1);
    ck_assert_ptr_null(e2e_get(rep.r.result, "duplicate"));
    e2e_reply_free(&rep);
    close(fd);

    /* The producer lost the reply and resends with the same seq: it gets
     * the first outcome back (created: true), marked duplicate. */
    fd = connect_hello("dedupe-node");
    call(fd, PROTO_OP_PLAN, 2, 1, 7, body, len, &rep);
    expect_ok(&rep);
    ck_assert_int_eq(get_bool(rep.r.result, "created"), 1);
    ck_assert_int_eq(get_bool(rep.r.result, "duplicate"), 1);
    e2e_reply_free(&rep);

    /* A new seq is a new write: the plan exists now. */
    call(fd, PROTO_OP_PLAN, 3, 1, 8, body, len, &rep);
    expect_ok(&rep);
    ck_assert_int_eq(get_bool(rep.r.result, "created"), 0);
    ck_assert_ptr_null(e2e_get(rep.r.result, "duplicate"));
    e2e_reply_free(&rep);

    ret = data("plans/retention.msgpack", &rlen);
    call(fd, PROTO_OP_RETENTION, 4, 1, 9, ret, rlen, &rep);
    expect_ok(&rep);
    e2e_reply_free(&rep);
    call(fd, PROTO_OP_RETENTION, 5, 1, 9, ret, rlen, &rep);
    expect_ok(&rep);
    ck_assert_int_eq(get_bool(rep.r.result, "duplicate"), 1);
    ck_assert_uint_eq(e2e_get(rep.r.result, "retained")->via.array.size, 3);
    e2e_reply_free(&rep);
    close(fd);
}
END_TEST

START_TEST(test_e2e_plans_survive_restart)
{
    struct e2e_reply rep;
    const msgpack_object *rows;
    size_t len;
    const char *rb;
    int fd, status = 0;

    start();
    fd = connect_hello(NULL);
    register_fixture(fd, 1, 1);
    retain_fixture(fd, 2);
    close(fd);
    ck_assert_int_eq(e2e_stop(&d, SIGTERM, 10000, &status), 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_int_eq(e2e_restart(&d, NULL), 0);

    fd = connect_hello(NULL);
    register_fixture(fd, 3, 0);
    rows = query(fd, 4, "plans", PLAN_ID, NULL, &rep);
    ck_assert_uint_eq(rows->via.array.size, 1);
    ck_assert_uint_eq(e2e_get_uint(&rows->via.array.ptr[0], "retained"), 3);
    e2e_reply_free(&rep);
    rb = data("plans/readback.msgpack", &len);
    call(fd, PROTO_OP_READBACK, 5, 0, 0, rb, len, &rep);
    expect_ok(&rep);
    ck_assert(
        msgpack_object_equal(*e2e_get(rep.r.result, "request"),
                             *data_obj("plans/readback-request.msgpack")));
    e2e_reply_free(&rep);
    close(fd);
}
END_TEST

/* ---- receiptctl ---- */

struct run {
    int status; /* exit code, or -1 when killed */
    char out[8192];
};

/* Runs receiptctl with args (without argv[0]) against the daemon. */
static void
run_ctl(struct run *r, const char *const *args)
{
    const char *argv[32];
    char path[300];
    pid_t pid;
    int st, i, fd;
    ssize_t n;

    argv[0] = "receiptctl";
    for (i = 0; args[i] != NULL && i < 30; i++)
        argv[i + 1] = args[i];
    argv[i + 1] = NULL;
    snprintf(path, sizeof(path), "%s/ctl.out", d.dir);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        setenv("RECEIPTD_SOCKET", d.sock, 1);
        execv(CTL, (char *const *)argv);
        _exit(127);
    }
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    n = read(fd, r->out, sizeof(r->out) - 1);
    close(fd);
    r->out[n > 0 ? n : 0] = '\0';
}

static void
expect_run(const char *const *args, int status, const char *want)
{
    struct run r;

    run_ctl(&r, args);
    ck_assert_msg(r.status == status, "%s: exit %d, want %d; output: %s",
                  args[0], r.status, status, r.out);
    if (want != NULL)
        ck_assert_msg(strstr(r.out, want) != NULL, "%s: no \"%s\" in: %s",
                      args[0], want, r.out);
}

START_TEST(test_e2e_receiptctl_plan_commands)
{
    static const char *const import_json[] = {
        "import", TEST_DATA_DIR "/plans/fixture.json", NULL
    };
    static const char *const import_mp[] = {
        "import", TEST_DATA_DIR "/plans/fixture.msgpack", NULL
    };
    static const char *const import_both_json[] = {
        "import",
        "--format",
        "json",
        TEST_DATA_DIR "/plans/fixture.json",
        TEST_DATA_DIR "/vectors/s1_fallback_mismatch.json",
        NULL
    };
    static const char *const plans[] = { "plans", NULL };
    static const char *const plans_json[] = { "plans", "--format", "json",
                                              NULL };
    static const char *const retained[] = { "retained", "--plan", PLAN_ID,
                                            "--graph",  GRAPH,    NULL };
    static const char *const rb_ok[] = { "readback-check",
                                         "--plan",
                                         PLAN_ID,
                                         "--graph",
                                         GRAPH,
                                         "--value",
                                         "logits",
                                         "--participant",
                                         "2",
                                         "--element-type",
                                         "f32",
                                         "--count",
                                         "8",
                                         NULL };
    static const char *const rb_tmp[] = { "readback-check",
                                          "--plan",
                                          PLAN_ID,
                                          "--graph",
                                          GRAPH,
                                          "--value",
                                          "tmp",
                                          "--participant",
                                          "0",
                                          "--element-type",
                                          "u8",
                                          "--count",
                                          "8",
                                          NULL };
    static const char *const rb_unknown[] = { "readback-check",
                                              "--plan",
                                              "plan:none",
                                              "--graph",
                                              GRAPH,
                                              "--value",
                                              "logits",
                                              "--participant",
                                              "0",
                                              "--element-type",
                                              "f32",
                                              "--count",
                                              "8",
                                              NULL };
    char bad[300];
    const char *import_bad[] = { "import", bad, NULL };
    const char *import_bad_csv[] = { "import", "--format", "csv", bad, NULL };
    struct json_object *j, *a, *e;
    struct run r;
    struct e2e_reply rep;
    FILE *f;
    int fd;

    start();
    expect_run(import_json, 0, "created");
    expect_run(import_mp, 0, "exists");
    /* With --format json the output is one document, the plan's outcome
     * in it beside the receipts'. */
    run_ctl(&r, import_both_json);
    ck_assert_msg(r.status == 0, "import --format json: exit %d: %s", r.status,
                  r.out);
    j = json_tokener_parse(r.out);
    ck_assert_msg(j != NULL, "not one JSON document: %s", r.out);
    ck_assert(json_object_object_get_ex(j, "plans", &a));
    ck_assert_uint_eq(json_object_array_length(a), 1);
    e = json_object_array_get_idx(a, 0);
    ck_assert_str_eq(
        json_object_get_string(json_object_object_get(e, "prepared_plan_id")),
        PLAN_ID);
    ck_assert(json_object_is_type(json_object_object_get(e, "created"),
                                  json_type_boolean));
    ck_assert(!json_object_get_boolean(json_object_object_get(e, "created")));
    ck_assert_int_eq(json_object_get_int(json_object_object_get(e, "nodes")),
                     3);
    ck_assert_int_eq(json_object_get_int(json_object_object_get(j, "accepted")),
                     1);
    json_object_put(j);
    expect_run(plans, 0, PLAN_ID);
    expect_run(plans_json, 0, "\"retained\"");
    expect_run(retained, 0, NULL);

    fd = connect_hello(NULL);
    retain_fixture(fd, 1);
    close(fd);
    expect_run(retained, 0, "logits");
    expect_run(rb_ok, 0, "pool/a");
    expect_run(rb_tmp, 1, "not_retained");
    expect_run(rb_unknown, 1, "unknown_plan");

    /* A plan file that breaks a rule is refused before anything is sent:
     * the daemon's quarantine stays empty. */
    snprintf(bad, sizeof(bad), "%s/bad-plan.json", d.dir);
    f = fopen(bad, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"prepared_plan_id\": \"plan:bad\", \"graph_hash\": \"\", "
          "\"nodes\": [{\"id\": \"n\", \"values\": 7}]}\n",
          f);
    fclose(f);
    expect_run(import_bad, 1, "nodes[0].values");
    /* ... and in CSV it is a rejected item like a receipt. */
    expect_run(import_bad_csv, 1, "bad-plan.json,,0,invalid,nodes[0].values,");

    fd = connect_hello(NULL);
    call(fd, PROTO_OP_PING, 9, 0, 0, NULL, 0, &rep);
    expect_ok(&rep);
    e2e_reply_free(&rep);
    close(fd);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("e2e_plan");
    struct {
        const char *name;
        const TTest *t;
        int loop;
    } cases[] = {
        { "plan_register", test_e2e_plan_register_again_conflict_invalid, 0 },
        { "plan_no_body", test_e2e_plan_without_body_is_invalid_and_quarantined,
          0 },
        { "retention", test_e2e_retention_resolves_and_is_idempotent, 0 },
        { "determinism", test_e2e_retention_determinism_outputs, 0 },
        { "claimed", test_e2e_retention_claimed_forged_and_unknown_plan, 0 },
        { "readback", test_e2e_readback_cases,
          (int)(sizeof(rb_cases) / sizeof(rb_cases[0])) },
        { "queries", test_e2e_plans_and_retained_queries, 0 },
        { "dedupe", test_e2e_plan_seq_dedupe_across_reconnect, 0 },
        { "restart", test_e2e_plans_survive_restart, 0 },
        { "receiptctl", test_e2e_receiptctl_plan_commands, 0 },
    };
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 60);
        tcase_add_checked_fixture(tc, NULL, teardown);
        if (cases[i].loop)
            tcase_add_loop_test(tc, cases[i].t, 0, cases[i].loop);
        else
            tcase_add_test(tc, cases[i].t);
        suite_add_tcase(s, tc);
    }
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
