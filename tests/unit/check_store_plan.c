/*
 * check_store_plan.c: unit tests of the store's plan functions
 * (daemon/store_plan.c and store_query_plan.c) on a real SQLite file:
 * lookup and insert inside a transaction, idempotent retention, the plans
 * and retained queries with their filters, order and limit, the readback
 * lookup, and the counts of the stats query.
 *
 * The bytes stored here are opaque to the store, so the tests use short
 * made-up blobs; what the daemon puts in them is covered by e2e_plan.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store.h"
#include "store_plan.h"
#include "e2e_util.h"

static char dir[512];
static char path[600];

static void
setup(void)
{
    snprintf(dir, sizeof(dir), "%s/check_store_plan-XXXXXX", TEST_BINARY_DIR);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/t.db", dir);
}

static void
teardown(void)
{
    e2e_rmtree(dir);
}

static struct proto_str
S(const char *s) {
    struct proto_str v = { s, strlen(s) };

    return v;
}

static struct store *
open_store(int readonly)
{
    struct store_opts o;
    struct proto_err err;
    struct store *s = NULL;

    memset(&o, 0, sizeof(o));
    o.readonly = readonly;
    o.quarantine_max_bytes = 1 << 20;
    ck_assert_msg(store_open(path, &o, &s, &err) == 0, "%s", err.message);
    return s;
}

/* Registers plan/graph with canonical bytes blob; returns its row id. */
static int64_t
put_plan(struct store *s, const char *plan, const char *graph, const char *blob,
         int64_t at)
{
    struct store_plan_new np;
    struct proto_err err;
    int64_t id = 0;

    memset(&np, 0, sizeof(np));
    np.key.plan = S(plan);
    np.key.graph = S(graph);
    np.registered_at = at;
    np.source = S("src");
    np.nodes = 3;
    np.values = 10;
    np.canonical = blob;
    np.len = strlen(blob);
    ck_assert_int_eq(store_plan_put(s, &np, &id, &err), 0);
    ck_assert_int_gt(id, 0);
    return id;
}

static void
retain(struct store *s, int64_t plan_id, const char *value, const char *blob,
       int64_t at)
{
    struct proto_err err;

    ck_assert_int_eq(
        store_plan_retain(s, plan_id, S(value), at, blob, strlen(blob), &err),
        0);
}

/* A database with two plans of one id and one other plan, and values. */
static void
populate(void)
{
    struct store *s = open_store(0);
    struct proto_err err;
    int64_t a, b;

    ck_assert_int_eq(store_begin(s, &err), 0);
    a = put_plan(s, "p1", "g1", "canon-a", 1000);
    b = put_plan(s, "p1", "g2", "canon-b", 2000);
    put_plan(s, "p2", "", "canon-c", 3000);
    retain(s, a, "logits", "v-logits", 10);
    retain(s, a, "hidden0", "v-hidden0", 11);
    retain(s, a, "hidden1", "v-hidden1", 12);
    retain(s, b, "out", "v-out", 13);
    ck_assert_int_eq(store_commit(s, &err), 0);
    store_free(s);
}

START_TEST(test_store_plan_get_put_and_retain_again)
{
    struct store *s = open_store(0);
    struct store_plan_key k = { S("p1"), S("") };
    struct proto_err err;
    void *blob = NULL;
    size_t len = 0;
    int64_t id = -1, id2;
    int found;

    ck_assert_int_eq(store_begin(s, &err), 0);
    ck_assert_int_eq(store_plan_get(s, &k, &id, &blob, &len, &err), 0);
    ck_assert_int_eq(id, 0);
    ck_assert_ptr_null(blob);
    id2 = put_plan(s, "p1", "", "canonical bytes", 5);
    ck_assert_int_eq(store_plan_get(s, &k, &id, &blob, &len, &err), 0);
    ck_assert_int_eq(id, id2);
    ck_assert_uint_eq(len, strlen("canonical bytes"));
    ck_assert_mem_eq(blob, "canonical bytes", len);
    free(blob);
    /* The same value twice keeps the first row, time included. */
    retain(s, id, "v", "first", 100);
    retain(s, id, "v", "second", 200);
    ck_assert_int_eq(store_commit(s, &err), 0);
    store_free(s);

    s = open_store(1);
    ck_assert_int_eq(
        store_plan_readback(s, &k, S("v"), 0, &found, &blob, &len, &err), 0);
    ck_assert_int_eq(found, 1);
    ck_assert_uint_eq(len, 5);
    ck_assert_mem_eq(blob, "first", 5);
    free(blob);
    store_free(s);
}
END_TEST

START_TEST(test_store_plan_same_key_twice_is_refused)
{
    struct store *s = open_store(0);
    struct store_plan_new np;
    struct proto_err err;
    int64_t id;

    ck_assert_int_eq(store_begin(s, &err), 0);
    put_plan(s, "p1", "g", "x", 1);
    memset(&np, 0, sizeof(np));
    np.key.plan = S("p1");
    np.key.graph = S("g");
    np.canonical = "y";
    np.len = 1;
    /* The caller looks the key up first; a second insert is a bug the
     * UNIQUE constraint catches rather than a silent second row. */
    ck_assert_int_eq(store_plan_put(s, &np, &id, &err), PROTO_EUNAVAILABLE);
    ck_assert(err.message[0] != '\0');
    store_rollback(s);
    store_free(s);
}
END_TEST

struct prow {
    char plan[16], graph[16];
    uint64_t retained;
};

struct pcollect {
    struct prow rows[8];
    int n;
};

static int
plan_row_cb(void *arg, const struct store_plan_row *row)
{
    struct pcollect *c = arg;
    struct prow *r = &c->rows[c->n++];

    snprintf(r->plan, sizeof(r->plan), "%.*s", (int)row->plan.len,
             row->plan.ptr);
    snprintf(r->graph, sizeof(r->graph), "%.*s", (int)row->graph.len,
             row->graph.ptr);
    r->retained = row->retained;
    ck_assert_uint_eq(row->nodes, 3);
    ck_assert_uint_eq(row->values, 10);
    ck_assert_int_eq((int)row->source.len, 3);
    return 0;
}

START_TEST(test_store_query_plans_filters_order_and_limit)
{
    struct store_filter f;
    struct pcollect c;
    struct proto_err err;
    struct store *s;
    int truncated;

    populate();
    s = open_store(1);
    memset(&f, 0, sizeof(f));
    f.limit = 100;
    memset(&c, 0, sizeof(c));
    ck_assert_int_eq(
        store_query_plans(s, &f, 0, plan_row_cb, &c, &truncated, &err), 0);
    ck_assert_int_eq(c.n, 3);
    ck_assert_int_eq(truncated, 0);
    /* Newest first. */
    ck_assert_str_eq(c.rows[0].plan, "p2");
    ck_assert_str_eq(c.rows[2].graph, "g1");
    ck_assert_uint_eq(c.rows[2].retained, 3);
    ck_assert_uint_eq(c.rows[1].retained, 1);

    f.plan = "p1";
    f.plan_len = 2;
    f.limit = 1;
    memset(&c, 0, sizeof(c));
    ck_assert_int_eq(
        store_query_plans(s, &f, 0, plan_row_cb, &c, &truncated, &err), 0);
    ck_assert_int_eq(c.n, 1);
    ck_assert_int_eq(truncated, 1);
    ck_assert_str_eq(c.rows[0].graph, "g2");

    f.limit = 100;
    f.has_since = 1;
    f.since = 1500;
    f.has_until = 1;
    f.until = 2500;
    memset(&c, 0, sizeof(c));
    ck_assert_int_eq(
        store_query_plans(s, &f, 0, plan_row_cb, &c, &truncated, &err), 0);
    ck_assert_int_eq(c.n, 1);
    ck_assert_str_eq(c.rows[0].graph, "g2");
    store_free(s);
}
END_TEST

struct rcollect {
    char ids[8][16];
    int n;
};

static int
retained_row_cb(void *arg, const struct store_retained_row *row)
{
    struct rcollect *c = arg;

    snprintf(c->ids[c->n++], 16, "%.*s", (int)row->value_id.len,
             row->value_id.ptr);
    ck_assert_uint_eq(row->len, row->value_id.len + 2);
    ck_assert_mem_eq((const char *)row->value + 2, row->value_id.ptr,
                     row->value_id.len);
    return 0;
}

START_TEST(test_store_query_retained_by_plan_in_byte_order)
{
    struct store_filter f;
    struct rcollect c;
    struct proto_err err;
    struct store *s;
    int truncated;

    populate();
    s = open_store(1);
    memset(&f, 0, sizeof(f));
    f.limit = 100;
    /* A plan is required. */
    ck_assert_int_eq(
        store_query_retained(s, &f, 0, retained_row_cb, &c, &truncated, &err),
        PROTO_EINVALID);
    ck_assert_str_eq(err.path, "plan");

    f.plan = "p1";
    f.plan_len = 2;
    f.graph = "g1";
    f.graph_len = 2;
    memset(&c, 0, sizeof(c));
    ck_assert_int_eq(
        store_query_retained(s, &f, 0, retained_row_cb, &c, &truncated, &err),
        0);
    ck_assert_int_eq(c.n, 3);
    ck_assert_str_eq(c.ids[0], "hidden0");
    ck_assert_str_eq(c.ids[1], "hidden1");
    ck_assert_str_eq(c.ids[2], "logits");

    /* Without a graph: every plan of that id, plan by plan. */
    f.graph = NULL;
    f.graph_len = 0;
    f.limit = 3;
    memset(&c, 0, sizeof(c));
    ck_assert_int_eq(
        store_query_retained(s, &f, 0, retained_row_cb, &c, &truncated, &err),
        0);
    ck_assert_int_eq(c.n, 3);
    ck_assert_int_eq(truncated, 1);
    store_free(s);
}
END_TEST

START_TEST(test_store_plan_readback_lookup_and_counts)
{
    struct store_plan_key k = { S("p1"), S("g1") };
    struct store_plan_key none = { S("p1"), S("g9") };
    struct proto_err err;
    struct store *s;
    uint64_t plans, retained;
    void *blob;
    size_t len;
    int found;

    populate();
    s = open_store(1);
    ck_assert_int_eq(
        store_plan_readback(s, &k, S("logits"), 0, &found, &blob, &len, &err),
        0);
    ck_assert_int_eq(found, 1);
    ck_assert_ptr_nonnull(blob);
    ck_assert_mem_eq(blob, "v-logits", len);
    free(blob);
    /* A plan without that value: found, no value. */
    ck_assert_int_eq(
        store_plan_readback(s, &k, S("out"), 0, &found, &blob, &len, &err), 0);
    ck_assert_int_eq(found, 1);
    ck_assert_ptr_null(blob);
    ck_assert_int_eq(store_plan_readback(s, &none, S("logits"), 0, &found,
                                         &blob, &len, &err),
                     0);
    ck_assert_int_eq(found, 0);
    ck_assert_ptr_null(blob);
    ck_assert_int_eq(store_plan_counts(s, &plans, &retained, &err), 0);
    ck_assert_uint_eq(plans, 3);
    ck_assert_uint_eq(retained, 4);
    store_free(s);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("store_plan");
    struct {
        const char *name;
        const TTest *t;
    } cases[] = {
        { "get_put_retain", test_store_plan_get_put_and_retain_again },
        { "same_key_twice", test_store_plan_same_key_twice_is_refused },
        { "query_plans", test_store_query_plans_filters_order_and_limit },
        { "query_retained", test_store_query_retained_by_plan_in_byte_order },
        { "readback_counts", test_store_plan_readback_lookup_and_counts },
    };
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 30);
        tcase_add_checked_fixture(tc, setup, teardown);
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
