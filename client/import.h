/*
 * import.h: `receiptctl import FILE...`.
 */
#ifndef RECEIPTD_CLIENT_IMPORT_H
#define RECEIPTD_CLIENT_IMPORT_H

#include "cli.h"

/*
 * Imports the files named by o->args ("-" is stdin): msgpack (one receipt
 * or an array of receipts) or serde_json (one object, an array, or JSON
 * lines). Prints each rejected item and the counts in o->format. Returns 0
 * when every item was accepted, CLI_EXIT_DAEMON when any was rejected,
 * CLI_EXIT_USAGE for a file that cannot be read, CLI_EXIT_CONNECT when the
 * daemon could not be reached or the connection failed (the counts are
 * still printed, with the items not acknowledged).
 */
int import_run(struct cli_opts *o);

#endif
