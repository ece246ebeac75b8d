/*
 * plan_cmds.h: plan files for `receiptctl import` (PROTOCOL section 5).
 */
#ifndef RECEIPTD_CLIENT_PLAN_CMDS_H
#define RECEIPTD_CLIENT_PLAN_CMDS_H

#include "cli.h"

/*
 * Finds the plan files among o->args: msgpack or serde_json files whose
 * top-level value is a map with a "nodes" key. Each is decoded and
 * validated locally with proto/plan.h (a refusal prints "FILE: code: path:
 * message" and nothing is sent), then registered with one `plan` request,
 * printing "FILE: plan ID created|exists (N nodes, M values)" (a dry run
 * prints "valid" and sends nothing). The plan files are removed from
 * o->args (the array is reordered in place), so import_run() handles what
 * is left as receipts; "-" (stdin) is always left to it. Returns 0,
 * CLI_EXIT_DAEMON when a plan was refused, CLI_EXIT_USAGE when a file
 * cannot be read, or CLI_EXIT_CONNECT; every failure is printed.
 *
 * With out (a json-c array) each plan's outcome is added to it instead of
 * printed, for the import's JSON and CSV output: {"file",
 * "prepared_plan_id", "created", "nodes", "values"}, {"file",
 * "prepared_plan_id", "dry_run": true}, or {"file", "code", "path",
 * "message"} for a refusal. Failures to read a file or reach the daemon
 * still go to stderr.
 */
struct json_object;
int plan_cmds_import(struct cli_opts *o, struct json_object *out);

#endif
