/*
 * check_query.c: the request parsing of daemon/query.c. query_start()
 * reads the body (kind and filters) before it touches the pool or the
 * server, so every refusal is tested here with neither: the code, the path
 * and the message, and that nothing is left allocated (the sanitizer build
 * checks the owned filter copies). Accepted queries run end to end in
 * e2e_query, e2e_plan and e2e_prune.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "error.h"
#include "query.h"

/* One map entry of a body: a str, a uint, a negative int, a bool or nil. */
struct field {
    const char *key;
    char type; /* 's', 'u', 'i', 'b', 'n' */
    const char *s;
    int64_t v;
};

static const struct qcase {
    const char *what;
    struct field f[3];
    int nf;
    const char *path;
    const char *message; /* a part of the message */
} cases[] = {
    { "no kind", { { "plan", 's', "p", 0 } }, 1, "kind", "missing kind" },
    { "kind not a string",
      { { "kind", 'u', NULL, 3 } },
      1,
      "kind",
      "expected a string" },
    { "unknown kind",
      { { "kind", 's', "receipt", 0 } },
      1,
      "kind",
      "unknown query kind \"receipt\"; expected receipts, fallbacks" },
    { "plan filter not a string",
      { { "kind", 's', "receipts", 0 }, { "plan", 'u', NULL, 7 } },
      2,
      "plan",
      "expected a string" },
    { "limit 0",
      { { "kind", 's', "receipts", 0 }, { "limit", 'u', NULL, 0 } },
      2,
      "limit",
      "limit 0 is outside 1..10000" },
    { "limit above the maximum",
      { { "kind", 's', "fallbacks", 0 },
        { "limit", 'u', NULL, QUERY_LIMIT_MAX + 1 } },
      2,
      "limit",
      "limit 10001 is outside 1..10000" },
    { "negative since",
      { { "kind", 's', "receipts", 0 }, { "since", 'i', NULL, -1 } },
      2,
      "since",
      "" },
    { "unknown backend",
      { { "kind", 's', "coverage", 0 }, { "executed", 's', "tpu", 0 } },
      2,
      "executed",
      "unknown executed \"tpu\"; expected cpu, wgpu-dx12" },
    { "unknown status",
      { { "kind", 's', "receipts", 0 }, { "status", 's', "dirty", 0 } },
      2,
      "status",
      "expected fallback, clean or unproven" },
    { "unknown group_by",
      { { "kind", 's', "fallbacks", 0 }, { "group_by", 's', "colour", 0 } },
      2,
      "group_by",
      "expected plan, graph, model, backends, source, none, or plan, graph, "
      "model or source with backends (\"plan,backends\")" },
    { "two string keys",
      { { "kind", 's', "coverage", 0 }, { "group_by", 's', "plan,model", 0 } },
      2,
      "group_by",
      "unknown group_by \"plan,model\"" },
    { "raw not a boolean",
      { { "kind", 's', "quarantine", 0 }, { "raw", 'u', NULL, 1 } },
      2,
      "raw",
      "expected raw as a boolean" },
    { "quarantine id not an integer",
      { { "kind", 's', "quarantine", 0 }, { "id", 's', "4", 0 } },
      2,
      "id",
      "" },
    { "retained without a plan",
      { { "kind", 's', "retained", 0 }, { "graph", 's', "g", 0 } },
      2,
      "plan",
      "the retained query needs a plan" },
    { "a filter string after a copied one is refused",
      { { "kind", 's', "receipts", 0 },
        { "plan", 's', "p-1", 0 },
        { "model", 'b', NULL, 1 } },
      3,
      "model",
      "expected a string" },
};

static void
pack_field(msgpack_packer *pk, const struct field *f)
{
    msgpack_pack_str(pk, strlen(f->key));
    msgpack_pack_str_body(pk, f->key, strlen(f->key));
    switch (f->type) {
    case 's':
        msgpack_pack_str(pk, strlen(f->s));
        msgpack_pack_str_body(pk, f->s, strlen(f->s));
        break;
    case 'u':
        msgpack_pack_uint64(pk, (uint64_t)f->v);
        break;
    case 'i':
        msgpack_pack_int64(pk, f->v);
        break;
    case 'b':
        if (f->v)
            msgpack_pack_true(pk);
        else
            msgpack_pack_false(pk);
        break;
    default:
        msgpack_pack_nil(pk);
    }
}

START_TEST(test_query_start_refuses_bad_bodies)
{
    const struct qcase *c = &cases[_i];
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacked up;
    struct proto_err err;
    size_t off = 0;
    int k, rc;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, (uint32_t)c->nf);
    for (k = 0; k < c->nf; k++)
        pack_field(&pk, &c->f[k]);
    msgpack_unpacked_init(&up);
    ck_assert_int_eq(msgpack_unpack_next(&up, sb.data, sb.size, &off),
                     MSGPACK_UNPACK_SUCCESS);
    proto_err_clear(&err);
    /* No pool, server or slot: a refusal must come before any of them is
     * used. */
    rc = query_start(NULL, NULL, NULL, 1, 9, &up.data, &err);
    ck_assert_msg(rc == PROTO_EINVALID, "%s: rc %d (%s)", c->what, rc,
                  err.message);
    ck_assert_int_eq(err.code, PROTO_EINVALID);
    ck_assert_msg(strcmp(err.path, c->path) == 0, "%s: path \"%s\"", c->what,
                  err.path);
    ck_assert_msg(strstr(err.message, c->message) != NULL, "%s: message \"%s\"",
                  c->what, err.message);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(test_query_start_needs_a_map_body)
{
    msgpack_object nil = { .type = MSGPACK_OBJECT_NIL };
    msgpack_object arr = { .type = MSGPACK_OBJECT_ARRAY };
    struct proto_err err;

    proto_err_clear(&err);
    ck_assert_int_eq(query_start(NULL, NULL, NULL, 0, 0, NULL, &err),
                     PROTO_EINVALID);
    ck_assert_str_eq(err.path, "body");
    ck_assert_str_eq(err.message,
                     "expected the query body as a map with a \"kind\"");

    proto_err_clear(&err);
    ck_assert_int_eq(query_start(NULL, NULL, NULL, 0, 0, &nil, &err),
                     PROTO_EINVALID);
    ck_assert_str_eq(err.path, "");
    proto_err_clear(&err);
    ck_assert_int_eq(query_start(NULL, NULL, NULL, 0, 0, &arr, &err),
                     PROTO_EINVALID);
    ck_assert_str_eq(err.path, "");
}
END_TEST

static Suite *
query_suite(void)
{
    Suite *s = suite_create("query");
    TCase *tc;

    tc = tcase_create("parse_refusals");
    tcase_add_loop_test(tc, test_query_start_refuses_bad_bodies, 0,
                        sizeof(cases) / sizeof(cases[0]));
    tcase_add_test(tc, test_query_start_needs_a_map_body);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(query_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
