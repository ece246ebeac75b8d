/*
 * check_invariant.c: ALWAYS and NEVER (proto/invariant.h) in both builds:
 * a broken invariant aborts where RECEIPTD_CHECK_INVARIANTS is defined
 * (the sanitizer build), and is only a value in a release build.
 */
#include <check.h>
#include <signal.h>
#include <stdlib.h>

#include "invariant.h"

/* Through a volatile, so the compiler cannot fold the conditions. */
static volatile int yes = 1, no = 0;

START_TEST(test_invariant_holds)
{
    ck_assert_int_eq(ALWAYS(yes), 1);
    ck_assert_int_eq(NEVER(no), 0);
    ck_assert_int_eq(ALWAYS(yes == 1) && !NEVER(no == 1), 1);
}
END_TEST

#ifdef RECEIPTD_CHECK_INVARIANTS
START_TEST(test_broken_never_aborts)
{
    (void)NEVER(yes);
}
END_TEST

START_TEST(test_broken_always_aborts)
{
    (void)ALWAYS(no);
}
END_TEST
#else
/* A release build keeps going with the condition's value, so the code
 * around it can recover. */
START_TEST(test_broken_is_a_value)
{
    ck_assert_int_eq(NEVER(yes), 1);
    ck_assert_int_eq(ALWAYS(no), 0);
}
END_TEST
#endif

int
main(void)
{
    Suite *s = suite_create("invariant");
    TCase *tc = tcase_create("invariant");
    SRunner *sr;
    int failed;

    tcase_add_test(tc, test_invariant_holds);
#ifdef RECEIPTD_CHECK_INVARIANTS
    tcase_add_test_raise_signal(tc, test_broken_never_aborts, SIGABRT);
    tcase_add_test_raise_signal(tc, test_broken_always_aborts, SIGABRT);
#else
    tcase_add_test(tc, test_broken_is_a_value);
#endif
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    /* The aborting cases need a process of their own. */
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
