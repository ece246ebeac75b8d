/*
 * plan_json.h: prepared plans from the serde_json form (json-c), for plan
 * files. Part of the receiptproto_json library, which the client and the
 * tests link and the daemon does not.
 */
#ifndef RECEIPTD_PROTO_PLAN_JSON_H
#define RECEIPTD_PROTO_PLAN_JSON_H

#include "error.h"
#include "plan.h"

struct json_object;

/*
 * The same as plan_decode() from a JSON plan file (serde_json's form of the
 * same body), with the same rules, codes and paths. The plan owns copies of
 * everything it needs: o may be freed as soon as this returns. Integers up
 * to 2^64-1 are read exactly; negative or fractional numbers are rejected
 * where an integer is expected. Parse the file's text with
 * receipt_json_parse() (receipt_json.h), which refuses integers json-c
 * would saturate and repeated keys json-c would drop. JSON nested deeper
 * than 32 levels is PROTO_EINVALID. Free the plan with plan_free().
 */
int plan_decode_json(struct json_object *o, struct plan **out,
                     struct proto_err *err);

#endif
