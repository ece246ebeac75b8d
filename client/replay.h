/*
 * replay.h: `receiptctl quarantine replay ID...`.
 */
#ifndef RECEIPTD_CLIENT_REPLAY_H
#define RECEIPTD_CLIENT_REPLAY_H

#include "cli.h"

/*
 * Replays the quarantined payloads whose ids follow "replay" in o->args
 * (o->args[0] is "replay"). Prints one line per replayed payload; keeps
 * going after a payload is refused again. Returns 0, CLI_EXIT_USAGE for a
 * bad id, CLI_EXIT_DAEMON when any payload was refused or missing, or
 * CLI_EXIT_CONNECT when the daemon went away (then it stops).
 */
int replay_run(struct cli_opts *o);

#endif
