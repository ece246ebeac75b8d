/*
 * fuzz_plan_check.h: the canonical-form invariant of a decoded plan, shared
 * by the plan targets over msgpack (fuzz_plan.c) and JSON (fuzz_json.c):
 * its canonical encoding decodes again to a plan with the same canonical
 * bytes and the same number of values. Aborts (a finding) otherwise. Each
 * target is its own program, so the function is static here.
 */
#ifndef RECEIPTD_TESTS_FUZZ_PLAN_CHECK_H
#define RECEIPTD_TESTS_FUZZ_PLAN_CHECK_H

#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "plan.h"

static void
fuzz_check_canonical(const struct plan *p)
{
    msgpack_sbuffer a, b;
    msgpack_packer pk;
    msgpack_unpacked up;
    struct proto_err err;
    struct plan *q;
    size_t off = 0;

    msgpack_sbuffer_init(&a);
    msgpack_sbuffer_init(&b);
    msgpack_packer_init(&pk, &a, msgpack_sbuffer_write);
    if (plan_encode_canonical(p, &pk) != 0)
        abort();
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, a.data, a.size, &off) !=
        MSGPACK_UNPACK_SUCCESS)
        abort();
    if (plan_decode(&up.data, &q, &err) != 0)
        abort();
    msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
    if (plan_encode_canonical(q, &pk) != 0 || a.size != b.size ||
        memcmp(a.data, b.data, a.size) != 0 || q->nvalues != p->nvalues)
        abort();
    plan_free(q);
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&a);
    msgpack_sbuffer_destroy(&b);
}

#endif
