/*
 * relay.h: a node's relay to a center (docs/fleet.md): everything the
 * node committed, forwarded in commit order, in batches, from a cursor.
 *
 * The relay runs on a thread of its own with a read-only connection to
 * the store and a blocking connection to the center (client/net.c, TLS
 * through proto/tls.h when upstream.ca_file is set). It never writes:
 * when the center has acknowledged a batch (after the center's COMMIT)
 * it wakes the loop, which advances the cursor through the writer in a
 * small transaction of its own. Local writes never wait for it.
 */
#ifndef RECEIPTD_DAEMON_RELAY_H
#define RECEIPTD_DAEMON_RELAY_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

struct config;
struct server;
struct relay;

/* Backoff between connection attempts: full jitter over a bound that
 * doubles from RELAY_BACKOFF_MIN_MS to RELAY_BACKOFF_MAX_MS. */
#define RELAY_BACKOFF_MIN_MS 100
#define RELAY_BACKOFF_MAX_MS 30000
/* A batch: at most this many records, and at most half the center's
 * max_frame (and 8 MiB) of encoded records. */
#define RELAY_BATCH_RECORDS 1000
/* How long the relay waits for the center's reply, or to connect. */
#define RELAY_REPLY_TIMEOUT_MS   30000
#define RELAY_CONNECT_TIMEOUT_MS 5000

/* What the relay reports (stats, STATUS=, metrics); a copy. */
struct relay_stats {
    char endpoint[256];       /* the one in use or tried last; "" before */
    int connected;            /* said hello and may send */
    uint64_t acked_id;        /* the cursor as the center acknowledged it */
    uint64_t backlog_records; /* receipts past it */
    uint64_t backlog_bytes;   /* estimated: records x mean encoded size */
    uint64_t oldest_ms;       /* age of the oldest undelivered; 0 none */
    uint64_t last_success_ms; /* unix ms of the last acknowledged batch */
    uint64_t relayed;         /* receipts the center acknowledged since
                                 start */
    uint64_t plans_relayed;   /* plans, the same */
    uint64_t values_relayed;  /* retained values, the same */
    uint64_t batches;         /* batches acknowledged since start */
    uint64_t connects;        /* connections that said hello */
    uint64_t failures;        /* attempts or batches that failed */
    char error[256];          /* the last failure; "" when none */
};

/*
 * Starts the relay of srv's store as cfg says (cfg->upstream, the token
 * file, ca_file, name; all copied): reads the token, makes the TLS
 * context, starts the thread. Returns 0 with *out, or -1 with err set
 * (nothing started). Loop thread.
 */
int relay_start(uv_loop_t *loop, struct server *srv, const struct config *cfg,
                struct relay **out, char *err, size_t err_len);

/*
 * Stops the thread (an attempt or a wait in progress is cut short) and
 * joins it; submits the last acknowledged cursor to the writer if it was
 * not stored yet, and frees the relay once that job is done (the server
 * is held until then). r may be NULL. Loop thread, before the writer
 * stops.
 */
void relay_stop(struct relay *r);

/* A copy of the figures; those of the last look when the relay thread
 * holds them at that moment (the loop never waits for it). Loop thread. */
void relay_get_stats(struct relay *r, struct relay_stats *st);

#endif
