/*
 * access.h: who may talk to receiptd.
 *
 * Unix socket: the peer's credentials (SO_PEERCRED, and the supplementary
 * groups the peer process actually holds) are checked against the writer
 * and reader groups of the configuration before any frame is read. TCP:
 * the token in `hello` is hashed with SHA-256 and compared in constant time
 * with the hashes of the configuration.
 *
 * A struct access_policy is built from a struct config once (at start and
 * on every reload, on the main thread: resolving group names may block on
 * NSS) and is then read-only, so any thread may use it.
 */
#ifndef RECEIPTD_DAEMON_ACCESS_H
#define RECEIPTD_DAEMON_ACCESS_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "config.h"
#include "error.h"

/* The longest token a peer may present; longer ones are refused unhashed. */
#define ACCESS_TOKEN_MAX 1024

/* The most supplementary groups looked at for one peer (NGROUPS_MAX). */
#define ACCESS_GROUPS_MAX 65536

enum access_level {
    ACCESS_NONE = 0,  /* refused: close the connection */
    ACCESS_READ = 1,  /* hello, ping, readback, query */
    ACCESS_WRITE = 2, /* everything */
};

struct access_policy {
    uid_t self_uid; /* the daemon's own uid: always ACCESS_WRITE */
    int open;       /* both group lists empty: the socket's mode decides */
    gid_t *writer_gids;
    size_t n_writer_gids;
    gid_t *reader_gids;
    size_t n_reader_gids;
    struct config_token *tokens; /* copies of the configured hashes */
    size_t n_tokens;
};

/* What access_peer() learnt about a Unix socket peer. */
struct access_peer {
    pid_t pid;
    uid_t uid;
    gid_t gid;
    enum access_level level;
};

/*
 * Builds p from c: resolves every group name of c to its gid (getgrnam_r)
 * and copies the token hashes; self_uid is geteuid(). c is borrowed (p
 * keeps no pointer into it). Returns 0, or -1 with "access.writer_groups:
 * no group named \"x\"" or "out of memory" in err; on failure p needs no
 * close. Blocking (NSS): main thread, at start and on reload.
 */
int access_policy_init(struct access_policy *p, const struct config *c,
                       char err[CONFIG_ERR_MAX]);

/* Frees what p owns and zeroes it. p may be NULL. */
void access_policy_close(struct access_policy *p);

/*
 * The decision itself, pure: uid 0 and p->self_uid get ACCESS_WRITE; with
 * both lists empty (p->open) everyone who could connect gets ACCESS_WRITE;
 * otherwise a primary gid or a supplementary group in the writer list gives
 * ACCESS_WRITE, one in the reader list ACCESS_READ, and anything else
 * ACCESS_NONE. groups (n entries, may be NULL when n is 0) is borrowed.
 */
enum access_level access_level_for(const struct access_policy *p, uid_t uid,
                                   gid_t gid, const gid_t *groups, size_t n);

/*
 * The level of a local user by the group database: looks uid up with
 * getpwuid_r and its supplementary groups with getgrouplist(), then asks
 * access_level_for(). A uid without a passwd entry is judged on gid alone.
 * Blocking (NSS).
 */
enum access_level access_level_of_user(const struct access_policy *p, uid_t uid,
                                       gid_t gid);

/*
 * Checks the peer of the connected Unix socket fd: reads SO_PEERCRED, then
 * the groups the peer process holds (SO_PEERGROUPS; getgrouplist() on
 * kernels without it), and fills peer. Returns 0 when peer->level is READ
 * or WRITE; PROTO_EUNAUTHORIZED when the peer may not connect; and
 * PROTO_EUNAVAILABLE when the credentials cannot be read (err names the
 * system call); PROTO_ENOMEM when a large group list finds no memory. In
 * every failure case the connection is to be closed. Call once, right after
 * accept(), before reading a frame. fd is borrowed. Allocates only for a peer
 * with more than 256 groups and in the getgrouplist() fallback.
 */
int access_peer(const struct access_policy *p, int fd, struct access_peer *peer,
                struct proto_err *err);

/*
 * Whether level allows op (enum proto_op): writes need ACCESS_WRITE, the
 * other ops ACCESS_READ. Returns 0 or PROTO_EUNAUTHORIZED with a message.
 */
int access_op_allowed(enum access_level level, int op, struct proto_err *err);

/* SHA-256 of the len bytes of token into out. token is borrowed. */
void access_token_hash(const void *token, size_t len, unsigned char out[32]);

/*
 * Checks a token from `hello` (len bytes, not NUL-terminated, borrowed):
 * hashes it and compares the hash with every configured one in constant
 * time (every hash is compared, whatever matches). Returns 0 and sets
 * *name (borrowed from p; name may be NULL) to the holder, or
 * PROTO_EUNAUTHORIZED for an empty, too long or unknown token.
 */
int access_check_token(const struct access_policy *p, const char *token,
                       size_t len, const char **name, struct proto_err *err);

/*
 * The hash of the configured token named name (NUL-terminated) into
 * sha256: 0, or -1 when no token has that name. A verified TLS client
 * certificate whose common name is a token's name stands in for that
 * token (do_hello).
 */
int access_token_named(const struct access_policy *p, const char *name,
                       unsigned char sha256[32]);

/*
 * `receiptd --hash-token`: reads one token from in (up to
 * ACCESS_TOKEN_MAX bytes; one trailing newline is not part of it) and
 * writes its SHA-256 as 64 lowercase hex digits and a newline to out.
 * Returns 0, or -1 with a reason in err (empty or too long token, read or
 * write error). in and out are borrowed.
 */
int access_hash_token_stream(FILE *in, FILE *out, char err[CONFIG_ERR_MAX]);

#endif
