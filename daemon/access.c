/*
 * access.c: peer credentials on the Unix socket and token checks on TCP.
 *
 * Invariants: a policy is immutable once built, so the decision functions
 * may run on any thread; the token comparison touches every configured
 * hash whatever the outcome, so its time does not tell which hash (or how
 * much of one) matched. Tokens are never kept or logged in clear, only
 * their SHA-256 (nettle).
 */
#include "access.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nettle/memops.h>
#include <nettle/sha2.h>

#include "envelope.h"

/* Groups read from the kernel without allocating; more is rare. */
#define INLINE_GROUPS 256

static int
resolve_groups(char *const *names, size_t n, gid_t **out, const char *key,
               char err[CONFIG_ERR_MAX])
{
    struct group gr, *res;
    char *buf;
    long sz = sysconf(_SC_GETGR_R_SIZE_MAX);
    size_t bufsz = sz > 0 ? (size_t)sz : 16384;
    size_t i;
    int rc;

    *out = NULL;
    if (n == 0)
        return 0;
    if ((*out = calloc(n, sizeof(**out))) == NULL) {
        snprintf(err, CONFIG_ERR_MAX, "out of memory");
        return -1;
    }
    for (i = 0; i < n; i++) {
        /* A group with many members needs a larger buffer: grow it as
         * getgrnam_r asks, up to a bound no sane group database reaches. */
        for (;;) {
            if ((buf = malloc(bufsz)) == NULL) {
                snprintf(err, CONFIG_ERR_MAX, "out of memory");
                goto fail;
            }
            rc = getgrnam_r(names[i], &gr, buf, bufsz, &res);
            if (rc != ERANGE || bufsz >= (1u << 24))
                break;
            free(buf);
            bufsz *= 2;
        }
        if (rc != 0 || res == NULL) {
            free(buf);
            if (rc != 0)
                snprintf(err, CONFIG_ERR_MAX,
                         "access.%s: cannot look up group \"%s\": %s", key,
                         names[i], strerror(rc));
            else
                snprintf(err, CONFIG_ERR_MAX,
                         "access.%s: no group named \"%s\"", key, names[i]);
            goto fail;
        }
        (*out)[i] = gr.gr_gid;
        free(buf);
    }
    return 0;
fail:
    free(*out);
    *out = NULL;
    return -1;
}

int
access_policy_init(struct access_policy *p, const struct config *c,
                   char err[CONFIG_ERR_MAX])
{
    size_t i;

    memset(p, 0, sizeof(*p));
    p->self_uid = geteuid();
    p->open = c->n_writer_groups == 0 && c->n_reader_groups == 0;
    if (resolve_groups(c->writer_groups, c->n_writer_groups, &p->writer_gids,
                       "writer_groups", err) < 0)
        goto fail;
    p->n_writer_gids = c->n_writer_groups;
    if (resolve_groups(c->reader_groups, c->n_reader_groups, &p->reader_gids,
                       "reader_groups", err) < 0)
        goto fail;
    p->n_reader_gids = c->n_reader_groups;
    if (c->n_tokens > 0) {
        p->tokens = calloc(c->n_tokens, sizeof(*p->tokens));
        if (p->tokens == NULL)
            goto nomem;
        p->n_tokens = c->n_tokens;
        for (i = 0; i < c->n_tokens; i++) {
            memcpy(p->tokens[i].sha256, c->tokens[i].sha256,
                   sizeof(p->tokens[i].sha256));
            p->tokens[i].name = strdup(c->tokens[i].name);
            if (p->tokens[i].name == NULL)
                goto nomem;
        }
    }
    return 0;
nomem:
    snprintf(err, CONFIG_ERR_MAX, "out of memory");
fail:
    access_policy_close(p);
    return -1;
}

void
access_policy_close(struct access_policy *p)
{
    size_t i;

    if (p == NULL)
        return;
    free(p->writer_gids);
    free(p->reader_gids);
    for (i = 0; i < p->n_tokens; i++)
        free(p->tokens[i].name);
    free(p->tokens);
    memset(p, 0, sizeof(*p));
}

static int
in_list(const gid_t *list, size_t n, gid_t gid)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (list[i] == gid)
            return 1;
    return 0;
}

enum access_level
access_level_for(const struct access_policy *p, uid_t uid, gid_t gid,
                 const gid_t *groups, size_t n)
{
    enum access_level level = ACCESS_NONE;
    size_t i;

    if (uid == 0 || uid == p->self_uid || p->open)
        return ACCESS_WRITE;
    if (in_list(p->writer_gids, p->n_writer_gids, gid))
        return ACCESS_WRITE;
    if (in_list(p->reader_gids, p->n_reader_gids, gid))
        level = ACCESS_READ;
    for (i = 0; i < n; i++) {
        if (in_list(p->writer_gids, p->n_writer_gids, groups[i]))
            return ACCESS_WRITE;
        if (in_list(p->reader_gids, p->n_reader_gids, groups[i]))
            level = ACCESS_READ;
    }
    return level;
}

/*
 * The supplementary groups of uid by the group database. Returns a
 * malloc'ed array in *out (count in *n), or -1 when uid has no passwd
 * entry or memory runs out.
 */
static int
user_groups(uid_t uid, gid_t gid, gid_t **out, size_t *n)
{
    struct passwd pw, *res;
    char *buf;
    long sz = sysconf(_SC_GETPW_R_SIZE_MAX);
    size_t bufsz = sz > 0 ? (size_t)sz : 16384;
    gid_t *list = NULL, *grown;
    int ng = 64, rc;

    if ((buf = malloc(bufsz)) == NULL)
        return -1;
    rc = getpwuid_r(uid, &pw, buf, bufsz, &res);
    if (rc != 0 || res == NULL) {
        free(buf);
        return -1;
    }
    /* getgrouplist says how many groups there are when the array is too
     * small; grow once to that (bounded) size and ask again. */
    for (;;) {
        int want = ng;

        if ((grown = realloc(list, (size_t)ng * sizeof(*list))) == NULL)
            break;
        list = grown;
        if (getgrouplist(pw.pw_name, gid, list, &ng) >= 0) {
            free(buf);
            *out = list;
            *n = (size_t)ng;
            return 0;
        }
        if (ng <= want || ng > ACCESS_GROUPS_MAX)
            break;
    }
    free(list);
    free(buf);
    return -1;
}

enum access_level
access_level_of_user(const struct access_policy *p, uid_t uid, gid_t gid)
{
    enum access_level level;
    gid_t *groups = NULL;
    size_t n = 0;

    /* Root, ourselves and the open policy need no lookup. */
    level = access_level_for(p, uid, gid, NULL, 0);
    if (level == ACCESS_WRITE)
        return level;
    if (user_groups(uid, gid, &groups, &n) < 0)
        return level;
    level = access_level_for(p, uid, gid, groups, n);
    free(groups);
    return level;
}

int
access_peer(const struct access_policy *p, int fd, struct access_peer *peer,
            struct proto_err *err)
{
    gid_t inline_groups[INLINE_GROUPS], *groups = inline_groups;
    struct ucred cred;
    socklen_t len = sizeof(cred);
    size_t n;

    memset(peer, 0, sizeof(*peer));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
        len != sizeof(cred))
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "cannot read the peer's credentials: %s",
                             strerror(errno));
    peer->pid = cred.pid;
    peer->uid = cred.uid;
    peer->gid = cred.gid;
    peer->level = access_level_for(p, cred.uid, cred.gid, NULL, 0);
    if (peer->level == ACCESS_WRITE)
        return 0;

    /* The groups the peer process holds right now, as the kernel sees them
     * when it checks the socket file's permissions, rather than what the
     * group database says today (a user added to a group since login does
     * not have it yet, a service may have SupplementaryGroups=). */
    len = sizeof(inline_groups);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0) {
        if (errno == ERANGE && len <= ACCESS_GROUPS_MAX * sizeof(gid_t)) {
            if ((groups = malloc(len)) == NULL)
                return proto_err_set(err, PROTO_ENOMEM, NULL,
                                     "out of memory reading peer groups");
            if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0) {
                int e = errno;

                free(groups);
                return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                                     "cannot read the peer's groups: %s",
                                     strerror(e));
            }
        } else if (errno == ENOPROTOOPT) {
            /* Kernels before 4.13: fall back to the group database. */
            peer->level = access_level_of_user(p, cred.uid, cred.gid);
            goto decided;
        } else {
            return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                                 "cannot read the peer's groups: %s",
                                 strerror(errno));
        }
    }
    n = len / sizeof(gid_t);
    peer->level = access_level_for(p, cred.uid, cred.gid, groups, n);
    if (groups != inline_groups)
        free(groups);
decided:
    if (peer->level == ACCESS_NONE)
        return proto_err_set(err, PROTO_EUNAUTHORIZED, NULL,
                             "uid %lu (gid %lu) is in neither a writer nor a "
                             "reader group",
                             (unsigned long)cred.uid, (unsigned long)cred.gid);
    return 0;
}

int
access_op_allowed(enum access_level level, int op, struct proto_err *err)
{
    const char *name = envelope_op_name(op);

    if (level == ACCESS_WRITE)
        return 0;
    if (level == ACCESS_READ && !envelope_op_writes(op))
        return 0;
    return proto_err_set(err, PROTO_EUNAUTHORIZED, NULL,
                         "this connection may not %s%s",
                         level == ACCESS_READ ? "write: " : "use ",
                         name != NULL ? name : "this op");
}

void
access_token_hash(const void *token, size_t len, unsigned char out[32])
{
    struct sha256_ctx ctx;

    sha256_init(&ctx);
    sha256_update(&ctx, len, token);
    sha256_digest(&ctx, SHA256_DIGEST_SIZE, out);
    /* The context's block buffer still holds the token's bytes. */
    explicit_bzero(&ctx, sizeof(ctx));
}

int
access_token_named(const struct access_policy *p, const char *name,
                   unsigned char sha256[32])
{
    size_t i;

    for (i = 0; i < p->n_tokens; i++)
        if (p->tokens[i].name != NULL && strcmp(p->tokens[i].name, name) == 0) {
            memcpy(sha256, p->tokens[i].sha256, 32);
            return 0;
        }
    return -1;
}

int
access_check_token(const struct access_policy *p, const char *token, size_t len,
                   const char **name, struct proto_err *err)
{
    unsigned char digest[SHA256_DIGEST_SIZE];
    size_t i, found = 0;
    int match = 0;

    if (name != NULL)
        *name = NULL;
    if (len == 0 || len > ACCESS_TOKEN_MAX)
        return proto_err_set(err, PROTO_EUNAUTHORIZED, "token",
                             "a token is 1 to %d bytes", ACCESS_TOKEN_MAX);
    access_token_hash(token, len, digest);
    /* No early exit, and the match is recorded without a branch on the
     * secret-dependent comparison, so the time is the same for a hit on
     * the first hash, on the last, or a miss. */
    for (i = 0; i < p->n_tokens; i++) {
        int eq = memeql_sec(digest, p->tokens[i].sha256, SHA256_DIGEST_SIZE);
        size_t mask = (size_t)0 - (size_t)eq;

        found = (found & ~mask) | (i & mask);
        match |= eq;
    }
    if (!match)
        return proto_err_set(err, PROTO_EUNAUTHORIZED, "token",
                             "the token is not one this daemon accepts");
    if (name != NULL)
        *name = p->tokens[found].name;
    return 0;
}

int
access_hash_token_stream(FILE *in, FILE *out, char err[CONFIG_ERR_MAX])
{
    /* One byte more than the longest token, to notice a longer one; and
     * room for a trailing "\r\n". */
    char buf[ACCESS_TOKEN_MAX + 3];
    unsigned char digest[SHA256_DIGEST_SIZE];
    size_t len, i;

    len = fread(buf, 1, sizeof(buf), in);
    if (ferror(in)) {
        snprintf(err, CONFIG_ERR_MAX, "cannot read the token: %s",
                 strerror(errno));
        return -1;
    }
    if (len > 0 && buf[len - 1] == '\n')
        len--;
    if (len > 0 && buf[len - 1] == '\r')
        len--;
    if (len == 0 || len > ACCESS_TOKEN_MAX || !feof(in)) {
        snprintf(err, CONFIG_ERR_MAX,
                 "a token is 1 to %d bytes on standard input",
                 ACCESS_TOKEN_MAX);
        return -1;
    }
    access_token_hash(buf, len, digest);
    explicit_bzero(buf, sizeof(buf));
    for (i = 0; i < sizeof(digest); i++)
        fprintf(out, "%02x", digest[i]);
    fputc('\n', out);
    if (fflush(out) != 0 || ferror(out)) {
        snprintf(err, CONFIG_ERR_MAX, "cannot write the hash: %s",
                 strerror(errno));
        return -1;
    }
    return 0;
}
