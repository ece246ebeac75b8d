/*
 * follow.h: `receiptctl receipts --follow`: one `receipts` query with
 * follow: true, whose replies keep coming as receipts are committed
 * (docs/protocol.md "Following new receipts").
 */
#ifndef RECEIPTD_CLIENT_FOLLOW_H
#define RECEIPTD_CLIENT_FOLLOW_H

#include <msgpack.h>

#include "cli.h"

/*
 * Sends the query pack_body packs (arg passed to it; it must ask for
 * follow) and prints every reply's rows as they come, in o->format (json
 * as JSON lines; tables and CSV with their header once), until the
 * daemon ends the follow, the connection is lost, Ctrl-C or SIGTERM, or
 * stdout is closed (`| head`). Returns 0 for a stop asked by the user or
 * a closed stdout, otherwise the exit code of what ended it, after a
 * line saying how to resume (--after-id).
 */
int follow_receipts(struct cli_opts *o,
                    int (*pack_body)(msgpack_packer *, const void *),
                    const void *arg);

#endif
