/*
 * check_error.c: the error-code table and field-path building of error.h.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "mpobj.h"

static const struct {
    int code;
    const char *name;
} codes[] = {
    { PROTO_EMALFORMED, "malformed" },
    { PROTO_ETOO_LARGE, "too_large" },
    { PROTO_EUNKNOWN_OP, "unknown_op" },
    { PROTO_EUNSUPPORTED_SCHEMA, "unsupported_schema" },
    { PROTO_EINVALID, "invalid" },
    { PROTO_EUNKNOWN_PLAN, "unknown_plan" },
    { PROTO_ENOT_RETAINED, "not_retained" },
    { PROTO_ECONFLICT, "conflict" },
    { PROTO_EMISMATCH, "mismatch" },
    { PROTO_EUNAUTHORIZED, "unauthorized" },
    { PROTO_EOVERLOADED, "overloaded" },
    { PROTO_EUNAVAILABLE, "unavailable" },
};

START_TEST(test_error_code_names_roundtrip)
{
    const char *name = proto_code_name(codes[_i].code);

    ck_assert_str_eq(name, codes[_i].name);
    ck_assert_int_eq(proto_code_from_name(name, strlen(name)), codes[_i].code);
}
END_TEST

START_TEST(test_error_code_names_outside_table)
{
    ck_assert_str_eq(proto_code_name(PROTO_ENOMEM), "overloaded");
    ck_assert_str_eq(proto_code_name(PROTO_OK), "ok");
    ck_assert_str_eq(proto_code_name(1), "internal");
    ck_assert_str_eq(proto_code_name(-14), "internal");
    ck_assert_str_eq(proto_code_name(-1000), "internal");
    ck_assert_int_eq(proto_code_from_name("ok", 2), PROTO_OK);
    ck_assert_int_eq(proto_code_from_name("invali", 6), PROTO_OK);
    ck_assert_int_eq(proto_code_from_name("invalid!", 8), PROTO_OK);
    ck_assert_int_eq(proto_code_from_name("invalid!", 7), PROTO_EINVALID);
    ck_assert_int_eq(proto_code_from_name("", 0), PROTO_OK);
}
END_TEST

START_TEST(test_error_set_and_clear)
{
    struct proto_err err;
    char longmsg[600];

    ck_assert_int_eq(proto_err_set(NULL, PROTO_EINVALID, "x", "y"),
                     PROTO_EINVALID);
    ck_assert_int_eq(proto_err_set(&err, PROTO_EINVALID, NULL, "got %d", 7),
                     PROTO_EINVALID);
    ck_assert_int_eq(err.code, PROTO_EINVALID);
    ck_assert_str_eq(err.path, "");
    ck_assert_str_eq(err.message, "got 7");
    memset(longmsg, 'm', sizeof(longmsg) - 1);
    longmsg[sizeof(longmsg) - 1] = '\0';
    proto_err_set(&err, PROTO_EMALFORMED, longmsg, "%s", longmsg);
    ck_assert_uint_eq(strlen(err.path), PROTO_ERR_PATH_MAX - 1);
    ck_assert_uint_eq(strlen(err.message), PROTO_ERR_MSG_MAX - 1);
    proto_err_clear(&err);
    ck_assert_int_eq(err.code, PROTO_OK);
    ck_assert_str_eq(err.path, "");
    ck_assert_str_eq(err.message, "");
    proto_err_clear(NULL);
    proto_err_prefix_field(NULL, "a");
    proto_err_prefix_index(NULL, 1);
}
END_TEST

/* Paths grow from the inside out, as each level returns. */
static const struct {
    const char *start;
    const char *field; /* NULL: prefix an index instead */
    size_t index;
    const char *want;
} prefixes[] = {
    { "", "counters", 0, "counters" },
    { "decode_steps", "counters", 0, "counters.decode_steps" },
    { "[2].values", "nodes", 0, "nodes[2].values" },
    { "executed_backend", NULL, 17, "[17].executed_backend" },
    { "", NULL, 3, "[3]" },
    { "[1]", NULL, 0, "[0][1]" },
    { "storage.components", NULL, 0, "[0].storage.components" },
};

START_TEST(test_error_prefix_builds_paths)
{
    struct proto_err err;

    proto_err_set(&err, PROTO_EINVALID, prefixes[_i].start, "m");
    if (prefixes[_i].field != NULL)
        proto_err_prefix_field(&err, prefixes[_i].field);
    else
        proto_err_prefix_index(&err, prefixes[_i].index);
    ck_assert_str_eq(err.path, prefixes[_i].want);
    ck_assert_str_eq(err.message, "m");
    ck_assert_int_eq(err.code, PROTO_EINVALID);
}
END_TEST

/* An overlong path is cut at the end: the outermost names survive. */
START_TEST(test_error_prefix_truncates_inner_end)
{
    struct proto_err err;
    char inner[PROTO_ERR_PATH_MAX];
    int i;

    memset(inner, 'x', sizeof(inner) - 1);
    inner[sizeof(inner) - 1] = '\0';
    proto_err_set(&err, PROTO_EINVALID, inner, "m");
    for (i = 0; i < 3; i++)
        proto_err_prefix_field(&err, "outer");
    proto_err_prefix_index(&err, 12);
    ck_assert_uint_eq(strlen(err.path), PROTO_ERR_PATH_MAX - 1);
    ck_assert_int_eq(strncmp(err.path, "[12].outer.outer.outer.xxx", 26), 0);
}
END_TEST

/* Truncation never cuts a character in two: the path and the message go
 * back to the peer in msgpack strs, which must be UTF-8. */
START_TEST(test_error_truncation_keeps_utf8)
{
    static const char *const tails[] = { "\xc3\xa9", "\xe2\x82\xac",
                                         "\xf0\x9f\x98\x80" };
    struct proto_err err;
    char path[PROTO_ERR_PATH_MAX + 8];
    size_t fill, len;
    int t;

    for (t = 0; t < 3; t++)
        for (fill = PROTO_ERR_PATH_MAX - 5; fill < PROTO_ERR_PATH_MAX; fill++) {
            memset(path, 'x', fill);
            strcpy(path + fill, tails[t]);
            proto_err_set(&err, PROTO_EINVALID, path, "%s", path);
            len = strlen(err.path);
            ck_assert_uint_le(len, PROTO_ERR_PATH_MAX - 1);
            ck_assert_msg(len == fill || len == fill + strlen(tails[t]),
                          "fill %zu: path cut to %zu", fill, len);
            ck_assert_msg(strlen(err.message) == fill ||
                              strlen(err.message) == fill + strlen(tails[t]),
                          "fill %zu: message cut to %zu", fill,
                          strlen(err.message));
            /* Prefixing pushes the tail out; what is left is UTF-8, and
             * no more than a character shorter than the limit. */
            proto_err_set(&err, PROTO_EINVALID, path, "m");
            proto_err_prefix_field(&err, "abc");
            len = strlen(err.path);
            ck_assert(mpobj_utf8_valid(err.path, len));
            ck_assert_uint_ge(len, PROTO_ERR_PATH_MAX - 4);
            ck_assert_int_eq(strncmp(err.path, "abc.xxx", 7), 0);
        }
}
END_TEST

static Suite *
error_suite(void)
{
    Suite *s = suite_create("error");
    TCase *tc;

    tc = tcase_create("codes");
    tcase_add_loop_test(tc, test_error_code_names_roundtrip, 0,
                        (int)(sizeof(codes) / sizeof(codes[0])));
    tcase_add_test(tc, test_error_code_names_outside_table);
    suite_add_tcase(s, tc);
    tc = tcase_create("set");
    tcase_add_test(tc, test_error_set_and_clear);
    suite_add_tcase(s, tc);
    tc = tcase_create("paths");
    tcase_add_loop_test(tc, test_error_prefix_builds_paths, 0,
                        (int)(sizeof(prefixes) / sizeof(prefixes[0])));
    tcase_add_test(tc, test_error_prefix_truncates_inner_end);
    tcase_add_test(tc, test_error_truncation_keeps_utf8);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(error_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
