/*
 * check_duration.c: proto/duration.c, the duration grammar the daemon's
 * flags and file and receiptctl share.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "duration.h"

static const struct {
    const char *in;
    uint64_t plain;
    uint64_t ms;
} good[] = {
    { "500ms", 1000, 500 },
    { "10s", 1000, 10000 },
    { "5m", 1000, 300000 },
    { "5min", 1000, 300000 },
    { "1h30m", 1000, 5400000 },
    { "1h 30m", 1000, 5400000 },
    { " 2d ", 1000, 172800000 },
    { "1w", 1000, 604800000 },
    { "60", 1000, 60000 },
    { "60", 1, 60 },
    { "0", 1000, 0 },
    { "18446744073709551615ms", 1000, UINT64_MAX },
};

START_TEST(test_duration_parse_accepts)
{
    uint64_t ms = 7;
    char err[DURATION_ERR_MAX] = "";

    ck_assert_msg(
        duration_parse(good[_i].in, good[_i].plain, &ms, err, sizeof(err)) == 0,
        "%s: %s", good[_i].in, err);
    ck_assert_uint_eq(ms, good[_i].ms);
}
END_TEST

static const struct {
    const char *in;
    uint64_t plain;
    const char *want;
} bad[] = {
    { "", 1000, "\"\" is not a duration: it is empty" },
    { "x", 1000, "\"x\" is not a duration: expected numbers with units" },
    { "1y", 1000, "\"1y\": unknown or missing unit \"y\"" },
    { "1h30", 1000, "\"1h30\": unknown or missing unit \"\"" },
    { "60", 0, "\"60\": unknown or missing unit \"\"" },
    { "-1s", 1000, "is not a duration" },
    { "1.5s", 1000, "unknown or missing unit \"\"" },
    { "99999999999999999999", 1000, "duration too long" },
    { "18446744073709551615", 1000, "duration too long" },
    { "18446744073709551615s", 1000, "duration too long" },
    { "18446744073709551615ms1ms", 1000, "duration too long" },
};

START_TEST(test_duration_parse_refuses_with_a_reason)
{
    uint64_t ms = 7;
    char err[DURATION_ERR_MAX] = "";

    ck_assert_int_eq(
        duration_parse(bad[_i].in, bad[_i].plain, &ms, err, sizeof(err)), -1);
    ck_assert_uint_eq(ms, 7);
    ck_assert_msg(strstr(err, bad[_i].want) != NULL, "%s: %s", bad[_i].in, err);
    /* err may be NULL. */
    ck_assert_int_eq(duration_parse(bad[_i].in, bad[_i].plain, &ms, NULL, 0),
                     -1);
}
END_TEST

START_TEST(test_duration_format_largest_exact_unit)
{
    char buf[32];

    ck_assert_str_eq(duration_format(0, buf, sizeof(buf)), "0ms");
    ck_assert_str_eq(duration_format(1500, buf, sizeof(buf)), "1500ms");
    ck_assert_str_eq(duration_format(90000, buf, sizeof(buf)), "90s");
    ck_assert_str_eq(duration_format(300000, buf, sizeof(buf)), "5m");
    ck_assert_str_eq(duration_format(604800000, buf, sizeof(buf)), "1w");
    ck_assert_str_eq(duration_format(UINT64_MAX, buf, sizeof(buf)),
                     "18446744073709551615ms");
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("duration");
    TCase *tc = tcase_create("duration");
    SRunner *sr;
    int failed;

    tcase_add_loop_test(tc, test_duration_parse_accepts, 0,
                        (int)(sizeof(good) / sizeof(good[0])));
    tcase_add_loop_test(tc, test_duration_parse_refuses_with_a_reason, 0,
                        (int)(sizeof(bad) / sizeof(bad[0])));
    tcase_add_test(tc, test_duration_format_largest_exact_unit);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
