/*
 * replay.h: `receiptctl quarantine replay|show ID...`.
 */
#ifndef RECEIPTD_CLIENT_REPLAY_H
#define RECEIPTD_CLIENT_REPLAY_H

#include "cli.h"

/*
 * o->args[0] is "replay" or "show", followed by quarantine ids.
 * replay: re-submits each payload and prints one line per payload; keeps
 * going after a payload is refused again. show: prints each payload's row
 * and its bytes decoded ("payload"), as a name/value listing, or as JSON or
 * CSV for a single id. Returns 0, CLI_EXIT_USAGE for a bad id,
 * CLI_EXIT_DAEMON when any payload was refused or missing, or
 * CLI_EXIT_CONNECT when the daemon went away (then it stops).
 */
int replay_run(struct cli_opts *o);

#endif
