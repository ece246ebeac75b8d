/*
 * invariant.h: our own invariants, as SQLite writes them.
 *
 *   if (NEVER(cond)) recover;   cond cannot be true
 *   if (ALWAYS(cond)) go on;    cond cannot be false
 *
 * In a build with RECEIPTD_CHECK_INVARIANTS (the sanitizer build, which the
 * suite also runs) a broken invariant aborts at once, with the condition
 * and its place; in a release build the condition is only evaluated, and
 * the code around it keeps the daemon up. So a "cannot happen" branch is
 * tested by every sanitizer run and still does something sane in
 * production, and it never reaches a producer disguised as another error.
 */
#ifndef RECEIPTD_PROTO_INVARIANT_H
#define RECEIPTD_PROTO_INVARIANT_H

#ifdef RECEIPTD_CHECK_INVARIANTS
#include <stdio.h>
#include <stdlib.h>

static inline int
invariant_broken(const char *cond, const char *file, int line)
{
    fprintf(stderr, "%s:%d: invariant broken: %s\n", file, line, cond);
    abort();
    return 1;
}

#define ALWAYS(x)                                                              \
    ((x) ? 1 : !invariant_broken("ALWAYS(" #x ")", __FILE__, __LINE__))
#define NEVER(x)                                                               \
    ((x) ? invariant_broken("NEVER(" #x ")", __FILE__, __LINE__) : 0)
#else
#define ALWAYS(x) (x)
#define NEVER(x)  (x)
#endif

#endif
