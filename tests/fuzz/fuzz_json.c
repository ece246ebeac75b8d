/*
 * fuzz_json.c: libFuzzer target for the serde_json forms of receipts and
 * plans (the files `receiptctl import` reads): the strict parse (json-c
 * plus the scan for saturated integers and repeated keys), then
 * receipt_decode_json, encode to msgpack and decode again, and
 * plan_decode_json on the same tree.
 *
 * A finding is a sanitizer report, or an abort() below: a failure must
 * leave nothing behind and carry its code; a receipt that decoded must
 * encode, and decode again to the same struct with byte-identical extra; a
 * plan that decoded must keep its canonical form (fuzz_plan_check.h).
 * Built with -fsanitize=fuzzer by tests/fuzz/CMakeLists.txt, and compiled into
 * check_fuzz_replay_json in every build. Single-threaded.
 */
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <msgpack.h>

#include "fuzz.h"
#include "fuzz_receipt_check.h"
#include "fuzz_plan_check.h"
#include "plan.h"
#include "plan_json.h"
#include "receipt.h"
#include "receipt_json.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct json_object *j;
    struct receipt r;
    struct plan *p = NULL;
    struct proto_err err;
    int rc;

    proto_err_clear(&err);
    rc = receipt_json_parse((const char *)data, size, &j, &err);
    if (rc != 0) {
        if (j != NULL || err.code != rc || err.message[0] == '\0')
            abort();
        return 0;
    }
    rc = receipt_decode_json(j, &r, &err);
    if (rc == 0)
        fuzz_check_receipt_roundtrip(&r);
    else if (r.extra != NULL || err.code != rc || err.message[0] == '\0')
        abort();
    receipt_clear(&r);
    proto_err_clear(&err);
    rc = plan_decode_json(j, &p, &err);
    if (rc == 0) {
        /* The plan owns its storage: the tree may go first. */
        json_object_put(j);
        fuzz_check_canonical(p);
        plan_free(p);
        return 0;
    }
    if (p != NULL || err.code != rc || err.message[0] == '\0')
        abort();
    json_object_put(j);
    return 0;
}
