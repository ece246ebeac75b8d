/*
 * fuzz_conn.c: libFuzzer target for the connection state machine
 * (daemon/conn.c) and everything behind it: dispatch.c, dispatch_plan.c,
 * the writer thread, the query pool and the store, on a real SQLite file
 * in a temporary directory, assembled as daemon/main.c assembles them.
 *
 * The input is one connection. Its first byte picks the peer (a Unix peer
 * that may write, a read-only Unix peer, or a TCP peer that must send
 * hello with the token "fuzz-token") and how the rest arrives (in one
 * piece, one byte at a time, or in chunks whose sizes come from the
 * input), and whether the loop runs what is ready between two pieces. The
 * rest is the byte stream the peer sends. It is handed to conn_read(), the
 * body of the read callback, only while the connection is reading, as
 * libuv would; while it is not (a limit stashed the rest of a read), the
 * loop runs until it reads again. The end of the stream is a
 * real shutdown(SHUT_WR) of the client's end of a socketpair, so EOF comes
 * through libuv's own read callback exactly when the daemon reads again.
 * Replies are read from that client end in the same loop.
 *
 * The limits are small so that short inputs reach them: max_frame 4096,
 * max_batch 64, max_unsent_bytes 1024 and max_pending_bytes 4096 (below
 * the configuration file's minimums, which exist for production sizing;
 * config_validate() accepts them), quarantine capped at 64 KiB so that
 * eviction happens in a long run. The timeouts are an hour, so no timer
 * fires inside an input (the 5 s bound below ends an input long before),
 * except in the timed mode.
 *
 * The timed mode (bit m / 18 % 2 of the mode byte m; the seeds written
 * before it have m < 18) reaches conn.c's deadlines and the drain of
 * SIGTERM. Six more bytes (0 when missing) set, for this input only, the
 * frame, hello and idle timeouts to 1..16 ms; how long the harness sleeps
 * (0..3 ms, then the loop runs what is due) after every 1st..4th piece,
 * at most FUZZ_MAX_SLEEPS times; whether the client takes its replies
 * only once the connection is gone (a peer that reads nothing); how the
 * stream ends: shutdown(SHUT_WR) as in the other modes, nothing (only a
 * deadline ends the connection), server_drain() with a grace of 0..15 ms,
 * or server_drain() then shutdown(); and after which piece the drain
 * starts (0: after the last). A deadline or the grace timer closes the
 * connection with replies unwritten, so this mode holds the replies to
 * less: they are a prefix of what was dispatched (reply i still answers
 * request i, with the same rules for ok), at most one framing error is
 * answered, the frame deadline's as malformed, and the reply stream may end
 * inside a frame that the close cut off. The connection must still be
 * freed, with no bytes counted, within the same bounds: every deadline is
 * finite here, so even a peer that reads nothing must be let go.
 *
 * The stream is also read by a bare frame reader, whole, which gives the
 * requests to expect. This target used to feed that reader whole, by bytes
 * and in chunks and compare: that check is dropped, since the same three
 * feedings now go through conn.c's reader and are held to the replies,
 * and it cost more CPU than conn.c's own read path.
 *
 * A finding is a sanitizer report or an abort() below:
 *  - replies must be whole frames, each a reply envelope, one for every
 *    frame the connection dispatched and one more for a framing error
 *    (every op replies; only a failed allocation leaves a slot empty);
 *  - reply i carries request i's id (nil when the request had none), a
 *    request that is not a valid envelope is never answered ok, a TCP peer
 *    gets no ok before a hello that succeeded, a read-only peer never gets
 *    ok to a write, and a framing error is answered with its code;
 *  - the connection stops dispatching early only after a refused TCP
 *    hello;
 *  - a read-only peer adds nothing to the quarantine;
 *  - afterwards the connection is freed, no write job's bytes are still
 *    counted, and all of it happens within 100000 loop turns and 5 s.
 *
 * The store persists across the inputs of one process (dedupe, plans and
 * quarantine evictions depend on earlier inputs), and is made afresh every
 * FUZZ_RESET_EVERY inputs (the daemon's own shutdown, then a new setup);
 * check_fuzz_replay_conn runs each corpus file in a fresh process, so a
 * crasher replays from an empty store. Built with -fsanitize=fuzzer by
 * tests/fuzz/CMakeLists.txt over an instrumented copy of the daemon core, and
 * compiled into check_fuzz_replay_conn in every build.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <msgpack.h>
#include <sqlite3.h>
#include <uv.h>

#include "access.h"
#include "config.h"
#include "conn.h"
#include "envelope.h"
#include "frame.h"
#include "fuzz.h"
#include "log.h"
#include "query.h"
#include "server.h"
#include "store.h"
#include "writer.h"

/* Small, so that too_large frames are within reach of short inputs. */
#define FUZZ_MAX_FRAME 4096
#define FUZZ_TOKEN     "fuzz-token"
#define FUZZ_HOUR_MS   3600000u
#define FUZZ_MAX_TURNS 100000
#define FUZZ_MAX_NS    5000000000ull
/* Sleeps of the timed mode an input: at most 24 ms, so that it stays
 * cheap. */
#define FUZZ_MAX_SLEEPS 8
/* Bytes after the mode byte that configure the timed mode. */
#define FUZZ_TIMED_PARAMS 6
/* Inputs between fresh stores: aggregate queries scan every receipt, so a
 * store that grew without end would slow each input down. */
#define FUZZ_RESET_EVERY 500

enum peer { PEER_WRITE, PEER_READ, PEER_TCP };
enum feeding { FEED_WHOLE, FEED_BYTES, FEED_CHUNKS };
/* How a timed input ends. */
enum ending { END_SHUTDOWN, END_WAIT, END_DRAIN, END_DRAIN_SHUTDOWN };

/* The timed mode's choices; on is 0 in the other modes. */
struct timed {
    int on;
    uint32_t frame_ms, hello_ms, idle_ms;
    unsigned sleep_ms, sleep_every;
    int deaf; /* the client reads only once the connection is gone */
    enum ending end;
    uint32_t grace_ms;
    size_t drain_after; /* pieces fed before the drain; 0: all of them */
};

#define FINDING(...)                                                           \
    do {                                                                       \
        fprintf(stderr, "fuzz_conn: " __VA_ARGS__);                            \
        fputc('\n', stderr);                                                   \
        abort();                                                               \
    } while (0)

/* ---- the model: the stream through a bare frame reader ---- */

/* One request frame, as envelope_parse() and so dispatch_frame() sees it. */
struct req {
    int rc;
    int op;
    int has_id;
    uint64_t id;
};

/* What the stream holds: its whole frames and the framing error that ends
 * it, if any. */
struct model {
    size_t frames;
    int error; /* the framing error's code, or 0 */
};

/* Reads data[0..size) as the daemon's frame reader does, into m and the
 * requests out (room for size / 5 + 1: a frame takes at least 5 bytes). */
static void
model_read(const uint8_t *data, size_t size, struct model *m, struct req *out)
{
    struct frame_reader fr;
    struct envelope env;
    struct proto_err err;
    msgpack_unpacked up;
    const char *buf = (const char *)data;
    size_t from = 0, used;
    uint32_t flen;
    char *frame;
    int rc;

    memset(m, 0, sizeof(*m));
    frame_reader_init(&fr, FUZZ_MAX_FRAME);
    while (from < size) {
        proto_err_clear(&err);
        rc = frame_reader_feed(&fr, buf + from, size - from, &used, &frame,
                               &flen, &err);
        if (used > size - from)
            FINDING("the frame reader consumed more than it was given");
        from += used;
        if (rc != 0) {
            if (err.code != rc || frame != NULL)
                FINDING("a framing error without its code");
            m->error = rc;
            break;
        }
        if (frame == NULL)
            break;
        if (flen == 0 || flen > FUZZ_MAX_FRAME)
            FINDING("the frame reader returned a frame of %lu bytes",
                    (unsigned long)flen);
        msgpack_unpacked_init(&up);
        proto_err_clear(&err);
        memset(&out[m->frames], 0, sizeof(out[m->frames]));
        rc = envelope_parse(frame, flen, &up, &env, &err);
        if (rc != 0 && (err.code != rc || err.message[0] == '\0'))
            FINDING("envelope_parse failed without its error");
        out[m->frames].rc = rc;
        out[m->frames].op = env.op;
        out[m->frames].has_id = env.has_id;
        out[m->frames].id = env.has_id ? env.id : 0;
        msgpack_unpacked_destroy(&up);
        free(frame);
        m->frames++;
    }
    /* Memory held for a partial frame is bounded by max_frame, whatever
     * its header claims. */
    if (frame_reader_buffered(&fr) > FUZZ_MAX_FRAME)
        FINDING("a partial frame holds more than max_frame");
    frame_reader_close(&fr);
}

/* ---- the daemon, set up once per process ---- */

static struct {
    int ready;
    uv_loop_t loop;
    struct config cfg;
    struct access_policy access;
    struct server srv;
    uv_timer_t tick; /* wakes the loop, so a hang is seen */
    char dir[PATH_MAX];
    char db[PATH_MAX + 16];
} fz;

/* The client's end of the connection. */
static struct {
    uv_pipe_t pipe;
    char *buf;
    size_t len, cap;
    int eof;
    int closed;
    int reading;
} cl;

static void
remove_store(void)
{
    static const char *const suffix[] = { "", "-wal", "-shm", "-journal" };
    char path[PATH_MAX + 32];
    size_t i;

    for (i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
        snprintf(path, sizeof(path), "%s%s", fz.db, suffix[i]);
        unlink(path);
    }
    rmdir(fz.dir);
}

static void
noop_close_cb(uv_handle_t *h)
{
    (void)h;
}

/* At exit: the daemon's own shutdown order (main.c), then the files. */
static void
teardown(void)
{
    if (!fz.ready)
        return;
    fz.ready = 0;
    writer_stop(fz.srv.writer);
    uv_close((uv_handle_t *)&fz.tick, noop_close_cb);
    uv_run(&fz.loop, UV_RUN_DEFAULT);
    query_pool_free(fz.srv.queries);
    access_policy_close(&fz.access);
    if (uv_loop_close(&fz.loop) != 0)
        FINDING("a handle outlived the writer and the connections");
    config_free(&fz.cfg);
    remove_store();
}

/* Where the store's directory goes: FUZZ_CONN_TMPDIR when set (scripts/
 * fuzz.sh points it at a directory it removes, so a crashed run leaves no
 * store behind), else tmpfs when there is one, so that every commit's
 * fsync is cheap, else $TMPDIR or /tmp. */
static const char *
scratch_base(void)
{
    const char *d = getenv("FUZZ_CONN_TMPDIR"), *t = getenv("TMPDIR");

    if (d != NULL && d[0] != '\0')
        return d;
    if (access("/dev/shm", W_OK) == 0)
        return "/dev/shm";
    return t != NULL && t[0] != '\0' ? t : "/tmp";
}

static void
setup(void)
{
    static int registered;
    struct store_opts sopts;
    struct store *store = NULL;
    struct proto_err err;
    char cerr[CONFIG_ERR_MAX];

    signal(SIGPIPE, SIG_IGN);
    log_set_level(LOG_ERR);
    if (!registered) {
        int hdr = 0;
        /* SQLite's page caches in one block taken now, not a malloc per
         * page as the store grows: libFuzzer runs a whole leak scan after
         * every input that ends with more mallocs than frees, and page
         * cache growth made that most inputs (three times slower). The
         * writer's cache_size is 16 MiB of 4 KiB pages; the query
         * connections' are smaller. Past this, SQLite mallocs again. */
        sqlite3_config(SQLITE_CONFIG_PCACHE_HDRSZ, &hdr);
        sqlite3_config(SQLITE_CONFIG_PAGECACHE, NULL, 4096 + hdr, 6000);
    }
    snprintf(fz.dir, sizeof(fz.dir), "%s/receiptd-fuzz-conn-XXXXXX",
             scratch_base());
    if (mkdtemp(fz.dir) == NULL)
        FINDING("mkdtemp %s: %s", fz.dir, strerror(errno));
    snprintf(fz.db, sizeof(fz.db), "%s/receipts.db", fz.dir);

    /* The struct directly, not a file: these limits are under the file's
     * minimums on purpose (see the header comment). */
    if (config_defaults(&fz.cfg) != 0)
        FINDING("config_defaults: out of memory");
    free(fz.cfg.db_path);
    fz.cfg.db_path = strdup(fz.db);
    free(fz.cfg.socket_path);
    fz.cfg.socket_path = strdup("fuzz.sock"); /* never bound */
    fz.cfg.max_frame = FUZZ_MAX_FRAME;
    fz.cfg.max_batch = 64;
    fz.cfg.max_unsent_bytes = 1024;
    fz.cfg.max_pending_bytes = 4096;
    fz.cfg.quarantine_max_bytes = 64 << 10;
    fz.cfg.idle_timeout_ms = FUZZ_HOUR_MS;
    fz.cfg.frame_timeout_ms = FUZZ_HOUR_MS;
    fz.cfg.hello_timeout_ms = FUZZ_HOUR_MS;
    fz.cfg.tokens = calloc(1, sizeof(*fz.cfg.tokens));
    if (fz.cfg.db_path == NULL || fz.cfg.socket_path == NULL ||
        fz.cfg.tokens == NULL)
        FINDING("setup: out of memory");
    fz.cfg.n_tokens = 1;
    fz.cfg.tokens[0].name = strdup("fuzz");
    access_token_hash(FUZZ_TOKEN, strlen(FUZZ_TOKEN), fz.cfg.tokens[0].sha256);
    if (config_validate(&fz.cfg, cerr) != 0)
        FINDING("config_validate: %s", cerr);
    if (access_policy_init(&fz.access, &fz.cfg, cerr) != 0)
        FINDING("access_policy_init: %s", cerr);

    if (uv_loop_init(&fz.loop) != 0)
        FINDING("uv_loop_init failed");
    memset(&sopts, 0, sizeof(sopts));
    sopts.quarantine_max_bytes = fz.cfg.quarantine_max_bytes;
    proto_err_clear(&err);
    if (store_open(fz.db, &sopts, &store, &err) != 0)
        FINDING("store_open %s: %s", fz.db, err.message);
    server_init(&fz.srv, &fz.loop, &fz.cfg);
    fz.srv.access = &fz.access;
    if (writer_new(&fz.loop, store, fz.cfg.commit_max_items,
                   fz.cfg.commit_max_bytes, server_delivery_cb, &fz.srv,
                   &fz.srv.writer, &err) != 0)
        FINDING("writer_new: %s", err.message);
    writer_set_retention(fz.srv.writer, fz.cfg.retention_max_age_s * 1000u,
                         fz.cfg.prune_batch, 1000);
    if (query_pool_new(fz.db, fz.cfg.query_threads, fz.cfg.query_timeout_ms,
                       &fz.srv.queries, &err) != 0)
        FINDING("query_pool_new: %s", err.message);
    uv_timer_init(&fz.loop, &fz.tick);
    fz.ready = 1;
    if (!registered && atexit(teardown) == 0)
        registered = 1;
}

/* ---- one connection ---- */

static uint64_t turns, started_ns;

static void
tick_cb(uv_timer_t *t)
{
    (void)t;
}

/* One turn of the loop; a hang is a finding. */
static void
turn(void)
{
    uv_run(&fz.loop, UV_RUN_ONCE);
    if (++turns > FUZZ_MAX_TURNS)
        FINDING("the connection did not finish within %d loop turns",
                FUZZ_MAX_TURNS);
    if (uv_hrtime() - started_ns > FUZZ_MAX_NS)
        FINDING("the connection did not finish within 5 s");
}

static void
client_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    static char rbuf[64 << 10];

    (void)h;
    (void)suggested;
    buf->base = rbuf;
    buf->len = sizeof(rbuf);
}

static void
client_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    if (nread < 0) {
        /* The daemon closed its end: EOF, or a reset when it closed with
         * bytes unread; either way nothing more comes. */
        cl.eof = 1;
        uv_read_stop(s);
        return;
    }
    if (cl.len + (size_t)nread > cl.cap) {
        size_t cap = cl.cap ? cl.cap : 4096;
        while (cap < cl.len + (size_t)nread)
            cap *= 2;
        cl.buf = realloc(cl.buf, cap);
        if (cl.buf == NULL)
            FINDING("client: out of memory");
        cl.cap = cap;
    }
    memcpy(cl.buf + cl.len, buf->base, (size_t)nread);
    cl.len += (size_t)nread;
}

static void
client_close_cb(uv_handle_t *h)
{
    (void)h;
    cl.closed = 1;
}

static void
client_read_start(void)
{
    if (uv_read_start((uv_stream_t *)&cl.pipe, client_alloc_cb,
                      client_read_cb) != 0)
        FINDING("client: uv_read_start failed");
    cl.reading = 1;
}

static int drained;

static void
drained_cb(struct server *srv)
{
    (void)srv;
    drained = 1;
}

/* SIGTERM's path in main.c: server_drain() with a callback for the end. */
static void
drain(uint32_t grace_ms)
{
    if (fz.srv.draining)
        return;
    fz.srv.drained_cb = drained_cb;
    server_drain(&fz.srv, grace_ms);
}

/* Lets ms pass, then runs what fell due in the meantime (a deadline, the
 * grace timer) before anything else: libuv runs due timers before it
 * polls, so a deadline fires ahead of the reads that would have beaten it
 * on a fast peer. */
static void
let_time_pass(unsigned ms)
{
    uv_sleep(ms);
    uv_update_time(&fz.loop);
    uv_run(&fz.loop, UV_RUN_NOWAIT);
}

/* The size of the next piece fed to conn_read. */
static size_t
piece_size(enum feeding how, const uint8_t *data, size_t size, size_t *k)
{
    uint8_t b;

    if (how == FEED_WHOLE)
        return size;
    if (how == FEED_BYTES)
        return 1;
    /* Mostly small chunks, which split headers and frames anywhere, and
     * now and then a large one, which fills a limit mid-read. */
    b = data[(*k)++ % size];
    return b < 192 ? (size_t)(1 + b % 23) : (size_t)(b - 191) * 512;
}

/* Runs the stream data[0..size) through a new connection of the given
 * peer; the replies end up in cl.buf. */
static void
run_conn(enum peer peer, enum feeding how, int interleave,
         const struct timed *t, const uint8_t *data, size_t size)
{
    struct conn *c;
    size_t off = 0, k = 0, n, pieces = 0;
    unsigned sleeps = 0;
    char *rbuf;
    int sv[2];

    memset(&cl, 0, sizeof(cl));
    /* The loop's clock stands still between inputs (setup, the checks,
     * libFuzzer's own work); the daemon accepts right after a poll, which
     * updates it. A stale clock would put a timed input's deadlines in the
     * past before its first byte. */
    uv_update_time(&fz.loop);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        FINDING("socketpair: %s", strerror(errno));
    /* A pipe even for the TCP peer: conn.c treats both streams alike, and
     * what TCP changes (authentication by hello, its deadline) follows
     * c->kind, set after creation. */
    c = conn_new(&fz.srv, CONN_UNIX);
    if (c == NULL || uv_pipe_open(&c->u.pipe, sv[0]) != 0)
        FINDING("conn_new or uv_pipe_open failed");
    if (peer == PEER_TCP) {
        c->kind = CONN_TCP;
        c->level = ACCESS_NONE;
    } else {
        /* What listen.c sets from the peer's credentials. */
        c->level = peer == PEER_WRITE ? ACCESS_WRITE : ACCESS_READ;
    }
    fz.srv.n.connections_total++;
    conn_start(c);
    if (uv_pipe_init(&fz.loop, &cl.pipe, 0) != 0 ||
        uv_pipe_open(&cl.pipe, sv[1]) != 0)
        FINDING("client pipe setup failed");
    if (!t->deaf)
        client_read_start();

    /* Like the server's read buffer, but each piece is copied to its end,
     * so that a read past the piece is caught. */
    rbuf = malloc(SERVER_READ_BUF);
    if (rbuf == NULL)
        FINDING("out of memory");
    turns = 0;
    started_ns = uv_hrtime();
    uv_timer_start(&fz.tick, tick_cb, 50, 50);
    /* c stays allocated while srv.n_alive says so: it is the only
     * connection. */
    while (off < size && fz.srv.n_alive > 0 && !c->closing && !c->want_close) {
        if (!c->reading) {
            turn();
            continue;
        }
        n = piece_size(how, data + off, size - off, &k);
        if (n > size - off)
            n = size - off;
        if (n > SERVER_READ_BUF)
            n = SERVER_READ_BUF;
        memcpy(rbuf + SERVER_READ_BUF - n, data + off, n);
        conn_read(c, rbuf + SERVER_READ_BUF - n, (ssize_t)n);
        off += n;
        /* Whatever is ready (writes done, commits and queries delivered)
         * runs before the next read, as when reads come one poll apart.
         * Not a turn() that counts: it is bounded by the input. */
        if (interleave)
            uv_run(&fz.loop, UV_RUN_NOWAIT);
        if (!t->on)
            continue;
        pieces++;
        if (t->end >= END_DRAIN && t->drain_after == pieces)
            drain(t->grace_ms);
        if (t->sleep_ms > 0 && pieces % t->sleep_every == 0 &&
            sleeps < FUZZ_MAX_SLEEPS) {
            sleeps++;
            let_time_pass(t->sleep_ms);
        }
    }
    free(rbuf);
    if (t->on && t->end >= END_DRAIN)
        drain(t->grace_ms);
    /* The end of the stream, through the socket: the daemon sees EOF when
     * it reads again, not while a stash waits. A timed input may instead
     * leave the stream open, for a deadline or the drain to end. */
    if (!t->on || t->end == END_SHUTDOWN || t->end == END_DRAIN_SHUTDOWN)
        shutdown(sv[1], SHUT_WR);
    while (fz.srv.n_alive > 0 || !cl.eof) {
        /* A deaf peer takes its replies only from a closed connection. */
        if (!cl.reading && fz.srv.n_alive == 0)
            client_read_start();
        turn();
    }
    uv_timer_stop(&fz.tick);
    uv_close((uv_handle_t *)&cl.pipe, client_close_cb);
    while (!cl.closed)
        uv_run(&fz.loop, UV_RUN_NOWAIT);
}

/* ---- checking the replies ---- */

/* Checks the replies in cl.buf; returns how many were ok. With timed, a
 * deadline or the drain may have stopped the connection anywhere and
 * dropped the replies it had not written (see the header comment). */
static size_t
check_replies(enum peer peer, int timed, const struct req *reqs,
              const struct model *m, uint64_t frames, uint64_t framing_errors)
{
    struct frame_reader fr;
    struct envelope_reply r;
    struct proto_err err;
    msgpack_unpacked up;
    size_t off = 0, used, nr = 0, nok = 0, moff;
    uint32_t flen;
    char *frame;
    int authed = peer != PEER_TCP, early;

    if (framing_errors > 1 || frames > m->frames)
        FINDING("%llu frames and %llu framing errors dispatched, but the "
                "stream holds %zu frames",
                (unsigned long long)frames, (unsigned long long)framing_errors,
                m->frames);
    /* The frame deadline's error may come after any frame. */
    if (!timed && framing_errors == 1 && (frames != m->frames || m->error == 0))
        FINDING("a framing error after frame %llu of %zu",
                (unsigned long long)frames, m->frames);
    /* The only early stop (fewer frames than sent, or a framing error
     * never reached) is a refused TCP hello, but for a deadline or the
     * drain. */
    early = !timed &&
            (frames < m->frames || (m->error != 0 && framing_errors == 0));
    if (early && (peer != PEER_TCP || frames == 0 || reqs[frames - 1].rc != 0 ||
                  reqs[frames - 1].op != PROTO_OP_HELLO))
        FINDING("dispatch stopped after %llu of %zu frames without a "
                "refused hello",
                (unsigned long long)frames, m->frames);

    frame_reader_init(&fr, FRAME_MAX_CEILING);
    while (off < cl.len) {
        proto_err_clear(&err);
        if (frame_reader_feed(&fr, cl.buf + off, cl.len - off, &used, &frame,
                              &flen, &err) != 0)
            FINDING("reply %zu: bad framing: %s", nr, err.message);
        off += used;
        if (frame == NULL)
            break;
        msgpack_unpacked_init(&up);
        moff = 0;
        if (msgpack_unpack_next(&up, frame, flen, &moff) !=
                MSGPACK_UNPACK_SUCCESS ||
            moff != flen)
            FINDING("reply %zu is not one msgpack object", nr);
        proto_err_clear(&err);
        if (envelope_reply_decode(&up.data, &r, &err) != 0)
            FINDING("reply %zu is not a reply envelope: %s", nr, err.message);
        if (nr < frames) {
            const struct req *q = &reqs[nr];
            if (r.has_id != q->has_id || (q->has_id && r.id != q->id))
                FINDING("reply %zu has id %d/%llu, its request %d/%llu", nr,
                        r.has_id, (unsigned long long)r.id, q->has_id,
                        (unsigned long long)q->id);
            if (r.ok && q->rc != 0)
                FINDING("reply %zu is ok to a request that is not one", nr);
            if (r.ok && !authed && q->op != PROTO_OP_HELLO)
                FINDING("reply %zu is ok before the TCP peer said hello", nr);
            if (r.ok && peer == PEER_READ && envelope_op_writes(q->op))
                FINDING("reply %zu is ok to a write of a read-only peer", nr);
            if (r.ok && q->op == PROTO_OP_HELLO)
                authed = 1;
            if (early && nr == frames - 1 && r.ok)
                FINDING("dispatch stopped after an ok hello");
        } else if (nr == frames && framing_errors == 1) {
            /* The frame deadline's error is malformed; any other is the
             * stream's own, after its last whole frame. */
            int own = r.err.code == m->error && frames == m->frames;
            if (r.ok || r.has_id ||
                !(own || (timed && r.err.code == PROTO_EMALFORMED)))
                FINDING("the framing error's reply is error %d, not %d",
                        r.err.code, m->error);
        } else {
            FINDING("reply %zu is more than %llu frames and %llu framing "
                    "errors ask for",
                    nr, (unsigned long long)frames,
                    (unsigned long long)framing_errors);
        }
        msgpack_unpacked_destroy(&up);
        free(frame);
        nok += r.ok != 0;
        nr++;
    }
    /* A close mid-write cuts the last reply: only a deadline or the grace
     * timer closes a connection with replies unwritten. */
    if (!timed && frame_reader_in_frame(&fr))
        FINDING("the reply stream ends inside a frame");
    frame_reader_close(&fr);
    if (timed ? nr > frames + framing_errors : nr != frames + framing_errors)
        FINDING("%zu replies for %llu frames and %llu framing errors", nr,
                (unsigned long long)frames, (unsigned long long)framing_errors);
    return nok;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct model whole;
    struct req *reqs;
    uint64_t frames, framing_errors, quarantined;
    enum peer peer;
    enum feeding how;
    int interleave;
    struct timed t;
    uint8_t p[FUZZ_TIMED_PARAMS];
    uint32_t frame_ms, hello_ms, idle_ms;
    static unsigned long inputs;
    static int verbose = -1;
    size_t nok;

    if (size == 0)
        return 0;
    if (fz.ready && ++inputs % FUZZ_RESET_EVERY == 0)
        teardown();
    if (!fz.ready)
        setup();
    if (verbose < 0)
        verbose = getenv("FUZZ_CONN_VERBOSE") != NULL;
    peer = (enum peer)(data[0] % 3);
    how = (enum feeding)(data[0] / 3 % 3);
    interleave = data[0] / 9 % 2;
    memset(&t, 0, sizeof(t));
    t.on = data[0] / 18 % 2;
    data++;
    size--;
    if (t.on) {
        memset(p, 0, sizeof(p));
        memcpy(p, data, size < sizeof(p) ? size : sizeof(p));
        data += size < sizeof(p) ? size : sizeof(p);
        size -= size < sizeof(p) ? size : sizeof(p);
        t.frame_ms = 1 + p[0] % 16;
        t.hello_ms = 1 + p[1] % 16;
        t.idle_ms = 1 + p[2] % 16;
        t.sleep_ms = p[3] % 4;
        t.sleep_every = 1 + p[3] / 4 % 4;
        t.deaf = p[3] / 16 % 2;
        t.end = (enum ending)(p[4] % 4);
        t.grace_ms = p[4] / 4 % 16;
        t.drain_after = p[5];
    }

    reqs = malloc((size / 5 + 1) * sizeof(*reqs));
    if (reqs == NULL)
        FINDING("out of memory");
    model_read(data, size, &whole, reqs);

    frames = fz.srv.n.frames;
    framing_errors = fz.srv.n.framing_errors;
    quarantined = fz.srv.n.quarantined;
    /* conn.c reads srv->cfg at each use, so the timed mode's timeouts
     * hold for this input only; put back exactly, every other input runs
     * with the hour. */
    frame_ms = fz.cfg.frame_timeout_ms;
    hello_ms = fz.cfg.hello_timeout_ms;
    idle_ms = fz.cfg.idle_timeout_ms;
    if (t.on) {
        fz.cfg.frame_timeout_ms = t.frame_ms;
        fz.cfg.hello_timeout_ms = t.hello_ms;
        fz.cfg.idle_timeout_ms = t.idle_ms;
    }
    drained = 0;
    run_conn(peer, how, interleave, &t, data, size);
    fz.cfg.frame_timeout_ms = frame_ms;
    fz.cfg.hello_timeout_ms = hello_ms;
    fz.cfg.idle_timeout_ms = idle_ms;
    if (fz.srv.draining) {
        /* The last connection is gone, so the drain ended: its callback
         * ran and closed the grace timer, whose close callback has run
         * too (requested before the client's close, which run_conn waited
         * for). The daemon drains once; the harness starts over. */
        if (!drained || fz.srv.grace_active || fz.srv.drained_cb != NULL)
            FINDING("the drain did not finish with its last connection");
        fz.srv.draining = 0;
    }
    frames = fz.srv.n.frames - frames;
    framing_errors = fz.srv.n.framing_errors - framing_errors;
    /* The quarantine is bounded and evicts its oldest rows: a peer that
     * may not write must not be able to add to it. */
    if (peer == PEER_READ && fz.srv.n.quarantined != quarantined)
        FINDING("a read-only peer put %llu payloads in quarantine",
                (unsigned long long)(fz.srv.n.quarantined - quarantined));
    if (fz.srv.n_alive != 0 || fz.srv.n_conns != 0 || fz.srv.conns != NULL)
        FINDING("the connection outlived its stream");
    if (fz.srv.pending_bytes != 0 || fz.srv.paused)
        FINDING("%llu bytes of write jobs still counted after the "
                "connection",
                (unsigned long long)fz.srv.pending_bytes);
    nok = check_replies(peer, t.on, reqs, &whole, frames, framing_errors);
    /* FUZZ_CONN_VERBOSE=1 says what each input did, to check that a seed
     * reaches what it was written for. */
    if (verbose && t.on)
        fprintf(stderr,
                "fuzz_conn: timed: frame %u hello %u idle %u ms, sleep %u ms "
                "every %u pieces%s, end %d grace %u ms after piece %zu%s\n",
                (unsigned)t.frame_ms, (unsigned)t.hello_ms, (unsigned)t.idle_ms,
                t.sleep_ms, t.sleep_every, t.deaf ? ", deaf" : "", (int)t.end,
                (unsigned)t.grace_ms, t.drain_after,
                drained ? ", drained" : "");
    if (verbose)
        fprintf(stderr,
                "fuzz_conn: peer %d feeding %d%s: %llu frames, %llu framing "
                "errors, %zu ok, %zu bytes of replies\n",
                (int)peer, (int)how, interleave ? " interleaved" : "",
                (unsigned long long)frames, (unsigned long long)framing_errors,
                nok, cl.len);
    free(reqs);
    free(cl.buf);
    cl.buf = NULL;
    return 0;
}
