/*
 * e2e_util.h: end-to-end test helpers: start the real receiptd binary on a
 * temporary socket and database (fork/exec), connect, send request frames
 * built with proto/envelope.h, and read replies.
 *
 * The binary is TEST_BINARY_DIR/daemon/receiptd; temporary directories are
 * made under TEST_BINARY_DIR (or $TMPDIR when that path is too long for a
 * Unix socket). Every function reports failure by return value; tests
 * assert on it.
 */
#ifndef RECEIPTD_TESTS_E2E_UTIL_H
#define RECEIPTD_TESTS_E2E_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <msgpack.h>

#include "envelope.h"

struct e2e_daemon {
    pid_t pid;
    char dir[200];
    char sock[256];
    char db[256];
    char log[256];
};

/* Makes a fresh directory and starts the daemon with extra flags (a
 * NULL-terminated list, may be NULL). Waits until the socket accepts.
 * Returns 0 or -1. */
int e2e_start(struct e2e_daemon *d, const char *const *extra);

/* Starts the daemon again on the same directory (after e2e_stop). */
int e2e_restart(struct e2e_daemon *d, const char *const *extra);

/* How long, at least, e2e_stop waits for a process it sent SIGKILL. */
#define E2E_KILL_WAIT_MS 60000

/* Sends sig and waits up to timeout_ms (for SIGKILL, E2E_KILL_WAIT_MS at
 * least) for the exit; *status gets the waitpid status. Returns 0, or -1
 * on timeout (the process is then killed, its threads described on
 * stderr). */
int e2e_stop(struct e2e_daemon *d, int sig, int timeout_ms, int *status);

/* A test's teardown: stops d with SIGTERM (10 s) if it runs, cleans up,
 * and fails the test unless it stopped in time and exited 0 (a drain that
 * hangs, a crash, a sanitizer's leak report at exit). */
void e2e_stop_clean(struct e2e_daemon *d);

/* CLOCK_MONOTONIC in milliseconds. */
long e2e_now_ms(void);

/* True while the daemon process runs. */
int e2e_alive(struct e2e_daemon *d);

/* A thread of a process, as /proc/PID/task/TID/stat says: its name, its
 * state (field 3), nice value (19) and scheduling policy (41). */
struct e2e_thread {
    char name[32];
    char state;
    int nice, policy;
};

/* Reads thread tid (a decimal string) of pid into *t: 0, or -1. */
int e2e_thread_stat(pid_t pid, const char *tid, struct e2e_thread *t);

/* Stops the daemon if it still runs and removes the directory. */
void e2e_cleanup(struct e2e_daemon *d);

/* Removes dir and everything in it, unless E2E_KEEP is set (to look at
 * what a failed test left). */
void e2e_rmtree(const char *dir);

/* A connected socket, or -1. */
int e2e_connect(const struct e2e_daemon *d);

/* A TCP connection to 127.0.0.1:port, or -1. */
int e2e_connect_tcp(int port);

/* Writes all of buf. Returns 0 or -1. */
int e2e_send_all(int fd, const void *buf, size_t len);

/* Sends one frame holding body[0..len). */
int e2e_send_frame(int fd, const void *body, size_t len);

/*
 * Sends a request: the envelope of envelope_request() and, when body is
 * not NULL, body_len bytes of an already encoded msgpack body.
 */
int e2e_request(int fd, int op, uint64_t id, int has_seq, uint64_t seq,
                const void *body, size_t body_len);

/* A received reply: the frame bytes, the unpacked object, the envelope. */
struct e2e_reply {
    char *buf;
    size_t len;
    msgpack_unpacked up;
    struct envelope_reply r;
};

/* Reads one reply frame within timeout_ms. Returns 0, or -1 on EOF,
 * timeout or a reply that is not a reply envelope. */
int e2e_recv(int fd, int timeout_ms, struct e2e_reply *rep);

void e2e_reply_free(struct e2e_reply *rep);

/* 1 when the peer closed the connection within timeout_ms (EOF or
 * reset), 0 otherwise. Discards bytes read meanwhile. */
int e2e_wait_closed(int fd, int timeout_ms);

/* Looks up key in a map object; NULL when absent or o is not a map. */
const msgpack_object *e2e_get(const msgpack_object *o, const char *key);

/* The unsigned integer at key, or UINT64_MAX when absent or not one. */
uint64_t e2e_get_uint(const msgpack_object *o, const char *key);

/* 1 when the str at key equals s. */
int e2e_get_str_eq(const msgpack_object *o, const char *key, const char *s);

/* Options for e2e_pack_receipt: a schema-3 (or 2) receipt in map form. */
struct e2e_receipt {
    unsigned schema;   /* 2 or 3 */
    const char *plan;  /* prepared_plan_id */
    const char *graph; /* graph_hash */
    const char *model;
    const char *requested, *executed;
    uint64_t coverage;
    uint64_t decode_steps;
    uint64_t fallback_count;
};

/* Packs a valid receipt body in map form. Returns 0 or -1. */
int e2e_pack_receipt(msgpack_packer *pk, const struct e2e_receipt *r);

/* Encodes a receipt body into a malloc'd buffer; *len set. */
char *e2e_receipt_bytes(const struct e2e_receipt *r, size_t *len);

/* Sends r as a `receipt` with id and seq both seq on fd and reads the
 * reply: 0 when it was ok, -1 otherwise. */
int e2e_send_receipt(int fd, uint64_t seq, const struct e2e_receipt *r);

/* The unsigned field key of the `stats` query's single row, asked on fd
 * with request id; UINT64_MAX when there is no reply, an error, or no such
 * field. */
uint64_t e2e_stat(int fd, uint64_t id, const char *key);

/* Sends hello with source; reads and checks its reply. Returns 0/-1. */
int e2e_hello(int fd, const char *source);

/* Reads a whole file into a malloc'd buffer. */
char *e2e_read_file(const char *path, size_t *len);

/* A datagram socket bound at path (replaced if it exists), or at an
 * abstract name when path begins with '@', to pass as NOTIFY_SOCKET.
 * Returns the descriptor or -1. */
int e2e_notify_bind(const char *path);

/* Reads datagrams from fd until one contains s, within timeout_ms; the
 * last one read is left in got. Returns 0, or -1 on timeout or error. */
int e2e_notify_await(int fd, const char *s, int timeout_ms, char *got,
                     size_t len);

/* Writes text to path, replacing the file. Returns 0 or -1. */
int e2e_write_file(const char *path, const char *text);

/*
 * Runs the program at path with argv (NULL-terminated, argv[0] included),
 * stdin from in_path (NULL: /dev/null) and RECEIPTD_SOCKET set to sock
 * (NULL: removed); waits for it. *out gets its stdout and *err its stderr
 * (malloc'd, NUL-terminated; either pointer may be NULL to drop them).
 * Returns the exit status, 127 when it could not run, -1 when killed by a
 * signal or on a failure of the test's own (fork, files).
 */
int e2e_run(const char *path, const char *const *argv, const char *in_path,
            const char *sock, char **out, char **err);

/* A TCP port on 127.0.0.1 that was free a moment ago. */
int e2e_free_port(void);

/* A program's path found in PATH, copied into buf; -1 when none is. */
int e2e_which(const char *name, char *buf, size_t len);

/*
 * From now on, every program this test starts preloads tests/lib/lib<name>.so
 * (built beside the tests; the test fails when it is missing), until
 * e2e_preload_end(). ASan wants its runtime first in the library list,
 * which a preload breaks harmlessly: ASAN_OPTIONS says so, followed by
 * asan_more (or NULL). The options stay set after the end.
 */
void e2e_preload(const char *name, const char *asan_more);
void e2e_preload_end(void);

/* Reads a "/proc/PID/status" field such as "VmRSS:" in kB, or -1. */
long e2e_proc_kb(pid_t pid, const char *field);

/*
 * How many times the bytes s[0..len) occur in the writable memory of
 * process pid (its heap, stacks, data and anonymous mappings, read through
 * /proc/PID/mem), or -1 when that memory cannot be read (no permission to
 * trace the process). Occurrences that straddle two mappings are missed.
 * The main thread's stack is scanned only with stack set.
 */
long e2e_proc_mem_count(pid_t pid, const void *s, size_t len, int stack);

/* The newlines in s: the lines of a program's output. */
int e2e_count_lines(const char *s);

/*
 * The checkpoint sequence number in the header of the WAL at wal_path (a
 * big-endian u32 at offset 12): SQLite adds one each time a writer
 * restarts the WAL from its start after a complete checkpoint. -1 when
 * there is no header yet.
 */
long e2e_wal_restarts(const char *wal_path);

#endif
