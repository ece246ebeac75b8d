/*
 * check_log.c: daemon/log.c: the sd-daemon prefixes only when stderr is
 * the journal (JOURNAL_STREAM names its device and inode), plain text
 * otherwise; and daemon/ratelog.c on top of it, with a fake clock.
 *
 * Each test points stderr at an anonymous file and reads back what the
 * functions wrote (Check's fork mode gives every test its own process).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "log.h"
#include "ratelog.h"
#include "skip.h"

static int out_fd = -1;

/* stderr into an anonymous file; JOURNAL_STREAM names it when journal. */
static void
capture(int journal)
{
    struct stat st;
    char js[64];

    out_fd = memfd_create("check_log", 0);
    ck_assert_int_ge(out_fd, 0);
    ck_assert_int_eq(dup2(out_fd, STDERR_FILENO), STDERR_FILENO);
    ck_assert_int_eq(fstat(STDERR_FILENO, &st), 0);
    if (journal) {
        snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino);
        setenv("JOURNAL_STREAM", js, 1);
    } else {
        /* Another stream's: a child whose stderr went elsewhere. */
        snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino + 1);
        setenv("JOURNAL_STREAM", js, 1);
    }
    log_init();
    log_set_level(LOG_DEBUG);
}

static char *
captured(void)
{
    static char buf[65536];
    ssize_t n = pread(out_fd, buf, sizeof(buf) - 1, 0);

    ck_assert_int_ge(n, 0);
    buf[n] = '\0';
    return buf;
}

START_TEST(test_log_prefixes_only_for_the_journal)
{
    capture(1);
    ck_assert(log_stderr_is_journal());
    log_warnx("disk %d", 3);
    log_info("ready");
    log_errx("broken");
    ck_assert_str_eq(captured(), "<4>disk 3\n<6>ready\n<3>broken\n");
}
END_TEST

START_TEST(test_log_plain_text_elsewhere)
{
    capture(0);
    ck_assert(!log_stderr_is_journal());
    log_warnx("disk %d", 3);
    log_info("ready");
    log_errx("broken");
    log_debug("detail");
    ck_assert_str_eq(captured(), "warning: disk 3\nready\nerror: broken\n"
                                 "debug: detail\n");
}
END_TEST

START_TEST(test_log_journal_stream_malformed_means_plain)
{
    capture(0);
    setenv("JOURNAL_STREAM", "garbage", 1);
    log_init();
    ck_assert(!log_stderr_is_journal());
    unsetenv("JOURNAL_STREAM");
    ck_assert(!log_stderr_is_journal());
}
END_TEST

static int
count(const char *text, const char *what)
{
    int n = 0;

    for (; (text = strstr(text, what)) != NULL; text++)
        n++;
    return n;
}

/* The first event at once; the rest of the interval counted, the first
 * of them kept; the summary when the interval is over. */
START_TEST(test_ratelog_one_line_per_interval)
{
    struct ratelog r;
    char *t;
    int i;

    capture(0);
    ratelog_init(&r, LOG_WARNING, 10000, "payloads put in quarantine");
    ck_assert_int_eq(ratelog_event(&r, 1000, "bad %d", 0), 1);
    for (i = 1; i <= 56; i++)
        ck_assert_int_eq(ratelog_event(&r, 1000 + (uint64_t)i, "bad %d", i), 0);
    ck_assert_int_eq(ratelog_flush(&r, 5000), 0);
    t = captured();
    ck_assert_str_eq(t, "warning: bad 0\n");
    ck_assert_int_eq(ratelog_flush(&r, 11000), 1);
    t = captured();
    ck_assert_int_eq(count(t, "\n"), 2);
    ck_assert_ptr_nonnull(strstr(
        t, "warning: 56 more payloads put in quarantine in the last 10 s; "
           "the first: bad 1\n"));
    /* Nothing held: nothing to say. */
    ck_assert_int_eq(ratelog_flush(&r, 30000), 0);
    /* The next event after the interval is logged at once. */
    ck_assert_int_eq(ratelog_event(&r, 30000, "bad again"), 1);
    ck_assert_ptr_nonnull(strstr(captured(), "warning: bad again\n"));
}
END_TEST

/* Held events come out before the next line when it is due, and at once
 * when the failure is over (ratelog_finish). */
START_TEST(test_ratelog_summary_before_the_next_line_and_at_finish)
{
    struct ratelog r;
    char *t;

    capture(0);
    ratelog_init(&r, LOG_ERR, 1000, "writes answered unavailable");
    ratelog_event(&r, 100, "disk full");
    ratelog_event(&r, 200, "disk full (2)");
    ratelog_event(&r, 300, "disk full (3)");
    ratelog_event(&r, 1500, "disk gone");
    t = captured();
    ck_assert_str_eq(t, "error: disk full\n"
                        "error: 2 more writes answered unavailable in the "
                        "last 2 s; the first: disk full (2)\n"
                        "error: disk gone\n");
    ratelog_event(&r, 1600, "again");
    ratelog_finish(&r, 1700);
    ck_assert_int_eq(count(captured(), "1 more writes"), 1);
    ck_assert_int_eq(ratelog_event(&r, 1800, "after"), 1);
}
END_TEST

static Suite *
suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("prefix");

    tcase_add_test(tc, test_log_prefixes_only_for_the_journal);
    tcase_add_test(tc, test_log_plain_text_elsewhere);
    tcase_add_test(tc, test_log_journal_stream_malformed_means_plain);
    suite_add_tcase(s, tc);
    tc = tcase_create("ratelog");
    tcase_add_test(tc, test_ratelog_one_line_per_interval);
    tcase_add_test(tc, test_ratelog_summary_before_the_next_line_and_at_finish);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(suite());
    int status;

    srunner_run_all(sr, CK_NORMAL);
    status = skip_status(sr);
    srunner_free(sr);
    return status;
}
