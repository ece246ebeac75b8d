/*
 * skip.h: tests that cannot run here (not root, a tool missing) say so
 * instead of passing. A skipped test process exits SKIP_CODE, which CTest
 * reports as skipped (SKIP_RETURN_CODE, set on every Check test by
 * tests/CMakeLists.txt).
 *
 * Such tests sit in a TCase of their own, tagged (tcase_set_tags), which
 * CTest runs as a test of its own; the binary's main run leaves the tag out
 * (receiptd_check_tagged in tests/CMakeLists.txt), so the other cases still
 * report passed or failed.
 */
#ifndef RECEIPTD_TESTS_SKIP_H
#define RECEIPTD_TESTS_SKIP_H

#include <check.h>

#define SKIP_CODE 77

/*
 * Ends the running test as skipped: prints "SKIP: " and the reason on
 * stderr and exits the test's process with SKIP_CODE (in Check's fork
 * mode, the forked child; without fork, the whole binary). Never returns.
 */
void skip_now(const char *fmt, ...)
    __attribute__((noreturn, format(printf, 1, 2)));

/*
 * The exit status for main() after srunner_run_all(): EXIT_SUCCESS when
 * every test passed, SKIP_CODE when every test that did not pass was
 * skipped by skip_now(), EXIT_FAILURE otherwise. sr is borrowed.
 */
int skip_status(SRunner *sr);

#endif
