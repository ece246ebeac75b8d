/*
 * server.h: the daemon's shared state on the loop thread: configuration,
 * the writer, the query pool, the listeners, every live connection, the
 * global backpressure switch and the counters reported by the `stats`
 * query. Everything here is touched only on the loop thread.
 */
#ifndef RECEIPTD_DAEMON_SERVER_H
#define RECEIPTD_DAEMON_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include <sys/socket.h>

#include <uv.h>

#include "config.h"
#include "ratelog.h"
#include "error.h"

struct access_policy;
struct conn;
struct writer;
struct writer_job;
struct query_pool;
struct relay;
struct listener;
struct tls_ctx;
struct follower;

#define SERVER_READ_BUF (64u << 10)

struct server_counters {
    uint64_t connections_total; /* accepted since start */
    uint64_t connections_refused;
    uint64_t frames;
    uint64_t accepted;   /* receipts stored */
    uint64_t rejected;   /* receipts refused (invalid or unsupported) */
    uint64_t duplicates; /* writes answered from dedupe */
    uint64_t conflicts;  /* writes whose (source, seq) named another */
    uint64_t quarantined;
    uint64_t quarantine_evictions; /* since start */
    uint64_t stray_coverage;       /* receipts with meaningless coverage
                                      bits set */
    uint64_t unavailable;          /* writes answered unavailable */
    uint64_t framing_errors;
    uint64_t auth_failures;           /* TCP hellos refused (token) */
    uint64_t unauthenticated_refused; /* TCP peers over their budget */
    uint64_t tls_handshakes;          /* TLS sessions established */
    uint64_t tls_failures;      /* handshakes that failed (garbage included) */
    uint64_t followers_total;   /* follows started (follow.c) */
    uint64_t followers_cut_off; /* ... ended for reading too slowly */
};

/* Recent authentication failures by peer address (server_auth_failed). */
#define SERVER_AUTH_SLOTS 256

struct server_auth_slot {
    unsigned char addr[16]; /* IPv4-mapped or IPv6; all zero = free */
    uint32_t fails;         /* in a row, forgotten after a quiet minute */
    uint64_t last_ms;       /* uv_now() of the latest */
};

struct server {
    uv_loop_t *loop;
    const struct config *cfg;
    const struct access_policy *access; /* who may do what */
    struct writer *writer;
    struct query_pool *queries;
    struct relay *relay; /* the node's relay to a center; NULL when off */
    struct listener *listeners[2];
    size_t n_listeners;
    /* The TLS settings new TCP connections get (tls.h; one reference
     * held here, one by each connection), NULL for plain text. A reload
     * replaces it; established connections keep theirs. */
    struct tls_ctx *tls;

    struct conn *conns; /* doubly linked, every connection not yet freed */
    size_t n_conns;     /* open (not closing) connections */
    size_t n_alive;     /* allocated connections, closing ones included,
                           and held jobs (server_hold) */
    size_t n_unauth;    /* open TCP connections not yet authenticated */

    uint64_t pending_bytes; /* bytes held by jobs not yet delivered back */
    uint64_t unsent_bytes;  /* replies of every connection not yet written
                               out (conn.c); past max_pending_bytes new
                               queries are refused (query.c) */
    /* While the writer's jobs are delivered, replies wait in their
     * connections (listed here) and leave when the batch ends. */
    int corked;
    struct conn *corked_conns;
    int paused;   /* backpressure: every connection stops reading */
    int draining; /* SIGTERM: no new frames */

    uv_timer_t grace; /* drain deadline */
    int grace_active;

    uint64_t started_ms; /* unix ms */
    struct server_counters n;
    /* follow.c: the open followers, the count of accepted receipts they
     * were last woken for, and the timer that looks each second. */
    struct follower *followers;
    size_t n_followers;
    uint64_t follow_seen;
    uv_timer_t follow_timer;
    int follow_timer_on;
    struct server_auth_slot auth[SERVER_AUTH_SLOTS];
    /* What an operator must know, at most a line per interval each
     * (ratelog.h); flushed by server_log_flush(). */
    struct ratelog log_auth;        /* failed authentication: peer, reason */
    struct ratelog log_quarantine;  /* payloads put in quarantine */
    struct ratelog log_refused;     /* connections refused at a cap */
    struct ratelog log_unavailable; /* writes answered unavailable */
    struct ratelog log_tls;         /* failed TLS handshakes: peer, reason */
    uint64_t store_failing_ms;      /* uv_now when writes began to be answered
                                       unavailable; 0 while they are not */
    uint64_t store_failed_writes;   /* since then */
    char readbuf[SERVER_READ_BUF];  /* shared by every read callback: each
                                       read is consumed before the next */
    char plainbuf[SERVER_READ_BUF]; /* the same for what TLS decrypts */

    /* Called once, when draining and the last connection is freed. */
    void (*drained_cb)(struct server *srv);
};

/* Something that is not a connection but uses the writer or the query
 * pool (an HTTP request's job) keeps the drain from finishing until it is
 * released, as a connection does until it is freed. Loop thread. */
void server_hold(struct server *srv);
void server_release(struct server *srv);

/* Wall clock in unix milliseconds. */
uint64_t server_now_unix_ms(void);

/* Initialises srv (embedded object). cfg and loop are borrowed and must
 * outlive it. */
void server_init(struct server *srv, uv_loop_t *loop, const struct config *cfg);

/* Hands a job to the writer and accounts its bytes (job taken). */
void server_submit(struct server *srv, struct writer_job *job);

/* Counts a finished write in srv->n, for every handler alike: an
 * unavailable store, what went to quarantine and was evicted, a
 * duplicate. The handler counts its own op's figures (accepted,
 * rejected). */
void server_count_write(struct server *srv, const struct writer_job *job);

/* The writer's delivery callback (writer.h), arg the server: the bytes
 * delivered leave the backpressure account, and replies wait until the
 * delivery ends to leave as one write per connection. */
void server_delivery_cb(void *arg, int end, size_t bytes);

/* Re-evaluates the global backpressure switch after pending_bytes moved. */
void server_backpressure(struct server *srv);

/*
 * How many TCP connections may wait unauthenticated at once: an eighth of
 * max_connections (at least 1), so peers without a token can never take
 * the slots of local and authenticated producers.
 */
size_t server_unauth_budget(const struct server *srv);

/*
 * A TCP hello was refused (wrong or missing token) from addr (borrowed;
 * NULL when unknown): counts it, logs it (the first at once, then at most
 * one line every 10 s with the count), and returns how long to hold the
 * refusal, in ms: nothing for an address's first failure, then 25 ms
 * doubling up to 1 s for each failure in a row from that address (a quiet
 * minute forgets them).
 */
uint64_t server_auth_failed(struct server *srv, const struct sockaddr *addr,
                            const char *reason);

/* A connection refused at a cap: logged at most every 10 s with how many
 * were refused; why says which cap. Loop thread. */
void server_refused(struct server *srv, const char *why);

/*
 * The TLS settings of cfg's TCP listener (borrowed): 0 with *out a new
 * context (one reference), or NULL when cfg has no certificate; -1 with
 * the file and reason in err when the certificate, key or client CA does
 * not load. Start, --check-config and SIGHUP use it.
 */
int server_tls_load(const struct config *cfg, struct tls_ctx **out,
                    char err[CONFIG_ERR_MAX]);

/* New TCP connections get ctx (taken; may be NULL for plain text); the
 * context they had is released, and freed by its last connection. */
void server_tls_set(struct server *srv, struct tls_ctx *ctx);

/* A TLS handshake failed (peer names the address, reason says why; both
 * borrowed): counted in tls_failures and logged at most every 10 s, so
 * peers that send garbage cannot fill the journal. Loop thread. */
void server_tls_failed(struct server *srv, const char *peer,
                       const char *reason);

/* Logs the summaries of rate-limited warnings whose interval is over; the
 * status timer calls it. Loop thread. */
void server_log_flush(struct server *srv);

/*
 * After a reload replaced srv->access: every TCP connection whose token is
 * no longer configured is closed once the replies it is owed are written
 * (nothing more of it is read), as "applied at once" promises. Logs how
 * many.
 */
void server_tokens_reloaded(struct server *srv);

/* Connection registry, for conn.c. */
void server_conn_add(struct server *srv, struct conn *c);
void server_conn_closing(struct server *srv, struct conn *c);
void server_conn_freed(struct server *srv, struct conn *c);

/*
 * Starts the drain of SIGTERM: listeners closed, reading stopped, every
 * connection closed once the replies for what it sent are written (or
 * after grace_ms). drained_cb runs when the last connection is gone.
 */
void server_drain(struct server *srv, uint32_t grace_ms);

#endif
