/*
 * check_dispatch.c: the op table of daemon/dispatch.c and the access rule
 * it carries: every op has its row and handler, only hello is open, and
 * which level may send which op, as a literal matrix, so a change to
 * proto/'s list of writing ops or to the table shows up here. Requests
 * themselves are driven end to end (e2e_ingest, e2e_access, fuzz_conn).
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "access.h"
#include "dispatch.h"
#include "envelope.h"

START_TEST(test_dispatch_op_table_has_every_op)
{
    const struct dispatch_op *o;
    int op;

    for (op = 0; op < PROTO_OP_COUNT; op++) {
        o = dispatch_op_find(op);
        ck_assert_ptr_nonnull(o);
        ck_assert_int_eq(o->op, op);
        ck_assert_msg(o->handle != NULL, "op %s has no handler",
                      envelope_op_name(op));
        ck_assert_int_eq(o->open, op == PROTO_OP_HELLO);
    }
    ck_assert_ptr_null(dispatch_op_find(-1));
    ck_assert_ptr_null(dispatch_op_find(PROTO_OP_COUNT));
}
END_TEST

/* Who may send what: 1 allowed, 0 refused as unauthorized. */
static const struct {
    int op;
    int none, read, write;
} rule[] = {
    { PROTO_OP_HELLO, 1, 1, 1 },    { PROTO_OP_PING, 0, 1, 1 },
    { PROTO_OP_RECEIPT, 0, 0, 1 },  { PROTO_OP_RECEIPTS, 0, 0, 1 },
    { PROTO_OP_PLAN, 0, 0, 1 },     { PROTO_OP_RETENTION, 0, 0, 1 },
    { PROTO_OP_READBACK, 0, 1, 1 }, { PROTO_OP_QUERY, 0, 1, 1 },
    { PROTO_OP_RELAY, 0, 0, 1 },
};

START_TEST(test_dispatch_op_allowed_matrix)
{
    static const enum access_level levels[] = { ACCESS_NONE, ACCESS_READ,
                                                ACCESS_WRITE };
    int want[3] = { rule[_i].none, rule[_i].read, rule[_i].write };
    struct proto_err err;
    int l, rc;

    ck_assert_int_eq(sizeof(rule) / sizeof(rule[0]), PROTO_OP_COUNT);
    for (l = 0; l < 3; l++) {
        proto_err_clear(&err);
        rc = dispatch_op_allowed(levels[l], rule[_i].op, &err);
        ck_assert_msg(rc == (want[l] ? 0 : PROTO_EUNAUTHORIZED),
                      "op %s at level %d: rc %d", envelope_op_name(rule[_i].op),
                      (int)levels[l], rc);
        if (!want[l])
            ck_assert(err.message[0] != '\0');
    }
    /* A reader is refused exactly the ops proto/ says write. */
    ck_assert_int_eq(!rule[_i].read, envelope_op_writes(rule[_i].op));
}
END_TEST

START_TEST(test_dispatch_op_allowed_messages_and_unknown_ops)
{
    struct proto_err err;

    ck_assert_int_eq(dispatch_op_allowed(ACCESS_NONE, PROTO_OP_PING, &err),
                     PROTO_EUNAUTHORIZED);
    ck_assert_str_eq(err.message, "this connection may not use ping");
    ck_assert_int_eq(dispatch_op_allowed(ACCESS_READ, PROTO_OP_PLAN, &err),
                     PROTO_EUNAUTHORIZED);
    ck_assert_str_eq(err.message, "this connection may not write: plan");
    /* An op outside the table is refused at every level, even WRITE. */
    ck_assert_int_eq(dispatch_op_allowed(ACCESS_WRITE, -1, &err),
                     PROTO_EUNKNOWN_OP);
    ck_assert_str_eq(err.path, "op");
    ck_assert_int_eq(dispatch_op_allowed(ACCESS_WRITE, PROTO_OP_COUNT, &err),
                     PROTO_EUNKNOWN_OP);
    ck_assert_int_eq(dispatch_op_allowed(ACCESS_NONE, PROTO_OP_COUNT, &err),
                     PROTO_EUNKNOWN_OP);
}
END_TEST

static Suite *
dispatch_suite(void)
{
    Suite *s = suite_create("dispatch");
    TCase *tc;

    tc = tcase_create("op_table");
    tcase_add_test(tc, test_dispatch_op_table_has_every_op);
    suite_add_tcase(s, tc);
    tc = tcase_create("access_rule");
    tcase_add_loop_test(tc, test_dispatch_op_allowed_matrix, 0,
                        (int)(sizeof(rule) / sizeof(rule[0])));
    tcase_add_test(tc, test_dispatch_op_allowed_messages_and_unknown_ops);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(dispatch_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
