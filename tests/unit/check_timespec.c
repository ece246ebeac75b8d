/*
 * check_timespec.c: --since/--until parsing (client/timespec.c): every
 * duration unit, plain unix milliseconds, RFC 3339 with Z and offsets, and
 * the inputs that must be refused. Expected instants were computed with an
 * independent implementation (Python's datetime), not with this code.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "timespec.h"

#define NOW 1700000000000ull /* 2023-11-14T22:13:20Z */
#define S   1000ull
#define MIN (60 * S)
#define H   (60 * MIN)
#define D   (24 * H)

struct good {
    const char *in;
    uint64_t want;
};

static const struct good goods[] = {
    { "250ms", NOW - 250 },
    { "90s", NOW - 90 * S },
    { "30m", NOW - 30 * MIN },
    { "1h", NOW - H },
    { "7d", NOW - 7 * D },
    { "2w", NOW - 14 * D },
    { "1h30m", NOW - H - 30 * MIN },
    /* The grammar every duration shares (proto/duration.h) allows spaces
     * between a number and its unit, and "min". */
    { "1 h", NOW - H },
    { "1h 30min", NOW - H - 30 * MIN },
    { "1d12h", NOW - D - 12 * H },
    { "0s", NOW },
    { "now", NOW },
    { "0", 0 },
    { "1", 1 },
    { "1796011200000", 1796011200000ull },
    { "18446744073709551615", UINT64_MAX },
    { "1970-01-01T00:00:00Z", 0 },
    { "2026-11-30T04:00:00Z", 1796011200000ull },
    { "2026-11-30t04:00:00z", 1796011200000ull },
    { "2026-11-30 04:00:00Z", 1796011200000ull },
    { "2026-11-30T06:00:00+02:00", 1796011200000ull },
    { "2026-11-29T23:00:00-05:00", 1796011200000ull },
    { "2026-11-30T09:30:00+05:30", 1796011200000ull },
    { "2026-11-30T04:00:00+00:00", 1796011200000ull },
    { "2026-11-30T04:00:00-00:00", 1796011200000ull },
    { "2026-11-30T04:00:00.5Z", 1796011200500ull },
    { "2026-11-30T04:00:00.123Z", 1796011200123ull },
    { "2026-11-30T04:00:00.123999Z", 1796011200123ull },
    { "2026-11-30T04:00:00.007+00:00", 1796011200007ull },
    { "2024-02-29T00:00:00Z", 1709164800000ull },
    { "2000-02-29T12:00:00Z", 951825600000ull },
    { "1999-12-31T23:59:59Z", 946684799000ull },
    { "1999-12-31T23:59:60Z", 946684800000ull },
    { "2038-01-19T03:14:08Z", 2147483648000ull },
    { "9999-12-31T23:59:59Z", 253402300799000ull },
    { "1970-01-01T01:00:00+01:00", 0 },
};

static const char *const bads[] = {
    "",
    "1x",
    "h",
    "1h2",
    "-1h",
    "+1h",
    "1.5h",
    "ms",
    "1hh",
    "yesterday",
    "18446744073709551616",
    "99999999999999999999",
    "999999999999w",
    "2000000000w",
    "2023-02-29T00:00:00Z",
    "1900-02-29T00:00:00Z",
    "2026-13-01T00:00:00Z",
    "2026-00-01T00:00:00Z",
    "2026-11-31T00:00:00Z",
    "2026-11-00T00:00:00Z",
    "2026-11-30T24:00:00Z",
    "2026-11-30T04:60:00Z",
    "2026-11-30T04:00:61Z",
    "2026-11-30T04:00:00",
    "2026-11-30T04:00Z",
    "2026-11-30T4:00:00Z",
    "2026-11-30",
    "2026-11-30T04:00:00+2:00",
    "2026-11-30T04:00:00+0200",
    "2026-11-30T04:00:00+24:00",
    "2026-11-30T04:00:00+02:60",
    "2026-11-30T04:00:00.Z",
    "2026-11-30T04:00:00Zjunk",
    "2026-11-30T04:00:00Z ",
    "2026-11-30X04:00:00Z",
    "26-11-30T04:00:00Z",
    "1969-12-31T23:59:59Z",
    "1970-01-01T00:30:00+01:00",
};

START_TEST(test_timespec_parse_accepts_good_specs)
{
    const struct good *g = &goods[_i];
    char err[TIMESPEC_ERR_MAX] = "";
    uint64_t out = 12345;

    ck_assert_msg(timespec_parse(g->in, NOW, &out, err, sizeof(err)) == 0,
                  "\"%s\" refused: %s", g->in, err);
    ck_assert_msg(out == g->want, "\"%s\": got %llu, want %llu", g->in,
                  (unsigned long long)out, (unsigned long long)g->want);
}
END_TEST

START_TEST(test_timespec_parse_rejects_bad_specs)
{
    const char *in = bads[_i];
    char err[TIMESPEC_ERR_MAX] = "";
    uint64_t out = 12345;

    ck_assert_msg(timespec_parse(in, NOW, &out, err, sizeof(err)) == -1,
                  "\"%s\" accepted as %llu", in, (unsigned long long)out);
    ck_assert_msg(out == 12345, "\"%s\": *out changed on failure", in);
    ck_assert_msg(strlen(err) > 10, "\"%s\": no error message", in);
}
END_TEST

START_TEST(test_timespec_parse_error_names_input)
{
    char err[TIMESPEC_ERR_MAX] = "";
    uint64_t out;

    ck_assert_int_eq(
        timespec_parse("2026-02-30T00:00:00Z", NOW, &out, err, sizeof(err)),
        -1);
    ck_assert_ptr_nonnull(strstr(err, "2026-02-30T00:00:00Z"));
    ck_assert_ptr_nonnull(strstr(err, "day 30"));
    ck_assert_int_eq(timespec_parse("5y", NOW, &out, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "unit \"y\""));
}
END_TEST

START_TEST(test_timespec_parse_small_error_buffer_truncates)
{
    char err[8];
    uint64_t out;

    memset(err, 'x', sizeof(err));
    ck_assert_int_eq(timespec_parse("bogus", NOW, &out, err, sizeof(err)), -1);
    ck_assert_int_eq(err[sizeof(err) - 1], '\0');
    ck_assert_int_eq(timespec_parse("bogus", NOW, &out, NULL, 0), -1);
}
END_TEST

/* Formatting then parsing gives the same instant back, across leap years
 * and centuries. */
START_TEST(test_timespec_format_round_trips)
{
    static const uint64_t ms[] = {
        0,
        1,
        999,
        86399999,
        951825600000ull,
        951868800000ull, /* 2000-03-01 */
        1709164800000ull,
        1796011200123ull,
        253402300799999ull,
    };
    char buf[TIMESPEC_RFC3339_MAX], err[TIMESPEC_ERR_MAX];
    uint64_t back;
    size_t i;

    for (i = 0; i < sizeof(ms) / sizeof(ms[0]); i++) {
        timespec_format(ms[i], buf, sizeof(buf));
        ck_assert_msg(timespec_parse_rfc3339(buf, &back, err, sizeof(err)) == 0,
                      "%s: %s", buf, err);
        ck_assert_msg(back == ms[i], "%s: %llu != %llu", buf,
                      (unsigned long long)back, (unsigned long long)ms[i]);
    }
}
END_TEST

START_TEST(test_timespec_format_known_instants)
{
    char buf[TIMESPEC_RFC3339_MAX];

    ck_assert_str_eq(timespec_format(0, buf, sizeof(buf)),
                     "1970-01-01T00:00:00.000Z");
    ck_assert_str_eq(timespec_format(1796011200123ull, buf, sizeof(buf)),
                     "2026-11-30T04:00:00.123Z");
    ck_assert_str_eq(timespec_format(951825600000ull, buf, sizeof(buf)),
                     "2000-02-29T12:00:00.000Z");
    /* The largest value still formats without overflowing the buffer. */
    timespec_format(UINT64_MAX, buf, sizeof(buf));
    ck_assert_uint_lt(strlen(buf), sizeof(buf));
}
END_TEST

START_TEST(test_timespec_now_is_recent)
{
    /* After 2023-11-14 and before 2200: the clock is read in ms. */
    uint64_t now = timespec_now_ms();

    ck_assert_uint_gt(now, NOW);
    ck_assert_uint_lt(now, 7258118400000ull);
}
END_TEST

static Suite *
timespec_suite(void)
{
    Suite *s = suite_create("timespec");
    TCase *tc;

    tc = tcase_create("accepts");
    tcase_add_loop_test(tc, test_timespec_parse_accepts_good_specs, 0,
                        (int)(sizeof(goods) / sizeof(goods[0])));
    suite_add_tcase(s, tc);
    tc = tcase_create("rejects");
    tcase_add_loop_test(tc, test_timespec_parse_rejects_bad_specs, 0,
                        (int)(sizeof(bads) / sizeof(bads[0])));
    suite_add_tcase(s, tc);
    tc = tcase_create("messages");
    tcase_add_test(tc, test_timespec_parse_error_names_input);
    tcase_add_test(tc, test_timespec_parse_small_error_buffer_truncates);
    suite_add_tcase(s, tc);
    tc = tcase_create("format");
    tcase_add_test(tc, test_timespec_format_round_trips);
    tcase_add_test(tc, test_timespec_format_known_instants);
    tcase_add_test(tc, test_timespec_now_is_recent);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(timespec_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
