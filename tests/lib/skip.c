/*
 * skip.c: skip_now() and skip_status() (skip.h). In fork mode Check
 * reports a child that exits on its own as an error with the message
 * "Early exit with return value N"; skip_status() counts exactly those
 * with N = SKIP_CODE as skipped, and any other result that is not a pass
 * as a failure.
 */
#include "skip.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void
skip_now(const char *fmt, ...)
{
    va_list ap;

    fputs("SKIP: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    /* _exit: no atexit handlers (LeakSanitizer's among them) in a child
     * that stops in the middle of a test. */
    _exit(SKIP_CODE);
}

int
skip_status(SRunner *sr)
{
    char skipped_msg[64];
    TestResult **r = srunner_results(sr);
    int i, n = srunner_ntests_run(sr), failed = 0, skipped = 0;

    snprintf(skipped_msg, sizeof(skipped_msg),
             "Early exit with return value %d", SKIP_CODE);
    for (i = 0; i < n; i++) {
        if (tr_rtype(r[i]) == CK_PASS)
            continue;
        if (tr_rtype(r[i]) == CK_ERROR &&
            strcmp(tr_msg(r[i]), skipped_msg) == 0)
            skipped++;
        else
            failed++;
    }
    free(r);
    if (failed)
        return EXIT_FAILURE;
    return skipped ? SKIP_CODE : EXIT_SUCCESS;
}
