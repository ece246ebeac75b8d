/*
 * check_access.c: peer credentials and tokens (daemon/access.c).
 *
 * The end-to-end peer test forks a client that drops to a made-up uid, gid
 * and group list before connecting, so the daemon side sees real
 * SO_PEERCRED and SO_PEERGROUPS values; that needs root (setuid), and is
 * reported as skipped otherwise.
 */
#include <check.h>
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "access.h"
#include "envelope.h"
#include "skip.h"

/* Made-up ids no test machine gives to a real account. */
#define W1   61001 /* writer group */
#define W2   61002 /* writer group */
#define R1   61101 /* reader group */
#define XG   61201 /* in no list */
#define USER 61500
#define SELF 61600

static gid_t writers[] = { W1, W2 };
static gid_t readers[] = { R1 };

static void
fake_policy(struct access_policy *p, int with_writers, int with_readers)
{
    memset(p, 0, sizeof(*p));
    p->self_uid = SELF;
    if (with_writers) {
        p->writer_gids = writers;
        p->n_writer_gids = 2;
    }
    if (with_readers) {
        p->reader_gids = readers;
        p->n_reader_gids = 1;
    }
    p->open = !with_writers && !with_readers;
}

static const struct level_case {
    const char *what;
    int writers, readers; /* which lists the policy has */
    uid_t uid;
    gid_t gid;
    gid_t groups[3];
    size_t n;
    enum access_level want;
} level_cases[] = {
    { "root", 1, 1, 0, XG, { 0 }, 0, ACCESS_WRITE },
    { "the daemon's own uid", 1, 1, SELF, XG, { 0 }, 0, ACCESS_WRITE },
    { "primary gid in writers", 1, 1, USER, W2, { 0 }, 0, ACCESS_WRITE },
    { "primary gid in readers", 1, 1, USER, R1, { 0 }, 0, ACCESS_READ },
    { "supplementary reader", 1, 1, USER, XG, { XG, R1 }, 2, ACCESS_READ },
    { "supplementary writer", 1, 1, USER, XG, { W1 }, 1, ACCESS_WRITE },
    { "reader then writer", 1, 1, USER, XG, { R1, W2 }, 2, ACCESS_WRITE },
    { "reader gid, writer group", 1, 1, USER, R1, { W1 }, 1, ACCESS_WRITE },
    { "in no list", 1, 1, USER, XG, { XG, XG + 1 }, 2, ACCESS_NONE },
    { "no groups at all", 1, 1, USER, XG, { 0 }, 0, ACCESS_NONE },
    { "both lists empty", 0, 0, USER, XG, { 0 }, 0, ACCESS_WRITE },
    { "readers only, reader", 0, 1, USER, XG, { R1 }, 1, ACCESS_READ },
    { "readers only, stranger", 0, 1, USER, XG, { XG }, 1, ACCESS_NONE },
    { "writers only, stranger", 1, 0, USER, R1, { R1 }, 1, ACCESS_NONE },
};

START_TEST(test_access_level_for_table)
{
    const struct level_case *t = &level_cases[_i];
    struct access_policy p;
    enum access_level got;

    fake_policy(&p, t->writers, t->readers);
    got = access_level_for(&p, t->uid, t->gid, t->groups, t->n);
    ck_assert_msg(got == t->want, "%s: got %d, want %d", t->what, got, t->want);
}
END_TEST

START_TEST(test_access_level_of_user_real_ids)
{
    struct access_policy p;
    struct group *gr;

    /* The running uid is the daemon's own uid here. */
    fake_policy(&p, 1, 1);
    p.self_uid = geteuid();
    ck_assert_int_eq(access_level_of_user(&p, getuid(), getgid()),
                     ACCESS_WRITE);

    /* "nobody" exists on every Debian system, with primary group
     * "nogroup"; listing that group as readers makes nobody a reader
     * through the group database, and a stranger without it. */
    gr = getgrnam("nogroup");
    if (gr == NULL)
        return;
    readers[0] = gr->gr_gid;
    ck_assert_int_eq(access_level_of_user(&p, 65534, gr->gr_gid), ACCESS_READ);
    readers[0] = R1;
    ck_assert_int_eq(access_level_of_user(&p, 65534, gr->gr_gid), ACCESS_NONE);
    /* A uid with no passwd entry is judged on its gid alone. */
    ck_assert_int_eq(access_level_of_user(&p, USER, W1), ACCESS_WRITE);
    ck_assert_int_eq(access_level_of_user(&p, USER, XG), ACCESS_NONE);
}
END_TEST

START_TEST(test_access_policy_init_resolves_groups)
{
    char err[CONFIG_ERR_MAX] = "";
    struct access_policy p;
    struct config c;
    struct group *gr = getgrgid(getgid());
    char *names[1];

    ck_assert_ptr_nonnull(gr);
    ck_assert_int_eq(config_defaults(&c), 0);
    ck_assert_int_eq(access_policy_init(&p, &c, err), 0);
    ck_assert_int_eq(p.open, 1);
    ck_assert_uint_eq(p.self_uid, geteuid());
    access_policy_close(&p);

    names[0] = gr->gr_name;
    c.reader_groups = names;
    c.n_reader_groups = 1;
    c.tokens = calloc(1, sizeof(*c.tokens));
    c.tokens[0].name = strdup("node-17");
    c.tokens[0].sha256[31] = 7;
    c.n_tokens = 1;
    ck_assert_msg(access_policy_init(&p, &c, err) == 0, "%s", err);
    ck_assert_int_eq(p.open, 0);
    ck_assert_uint_eq(p.n_reader_gids, 1);
    ck_assert_uint_eq(p.reader_gids[0], getgid());
    ck_assert_uint_eq(p.n_writer_gids, 0);
    ck_assert_uint_eq(p.n_tokens, 1);
    ck_assert_str_eq(p.tokens[0].name, "node-17");
    ck_assert_ptr_ne(p.tokens[0].name, c.tokens[0].name);
    ck_assert_uint_eq(p.tokens[0].sha256[31], 7);
    access_policy_close(&p);
    access_policy_close(NULL);

    names[0] = "receiptd-check-no-such-group";
    c.writer_groups = names;
    c.n_writer_groups = 1;
    c.reader_groups = NULL;
    c.n_reader_groups = 0;
    ck_assert_int_eq(access_policy_init(&p, &c, err), -1);
    ck_assert_str_eq(err, "access.writer_groups: no group named "
                          "\"receiptd-check-no-such-group\"");
    free(c.tokens[0].name);
    free(c.tokens);
}
END_TEST

/* ---- End to end: a real client with made-up credentials. ---- */

static const struct peer_case {
    const char *what;
    gid_t gid;
    gid_t groups[2];
    int n;
    enum access_level want;
    int rc;
} peer_cases[] = {
    { "writer by supplementary group", XG, { R1, W2 }, 2, ACCESS_WRITE, 0 },
    { "reader by supplementary group", XG, { R1 }, 1, ACCESS_READ, 0 },
    { "reader by primary gid", R1, { 0 }, 0, ACCESS_READ, 0 },
    { "stranger", XG, { XG + 1 }, 1, ACCESS_NONE, PROTO_EUNAUTHORIZED },
};

START_TEST(test_access_peer_sees_real_credentials)
{
    const struct peer_case *t = &peer_cases[_i];
    struct sockaddr_un sa;
    socklen_t salen;
    struct access_policy p;
    struct access_peer peer;
    struct proto_err err;
    int lfd, cfd, status, rc;
    pid_t child;
    char byte = 0;

    if (geteuid() != 0)
        skip_now("%s: needs root to take other credentials", t->what);
    fake_policy(&p, 1, 1);
    /* An abstract socket: no file for the unprivileged child to reach. */
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1,
             "receiptd-check-access-%ld", (long)getpid());
    salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                        strlen(sa.sun_path + 1));
    lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_ge(lfd, 0);
    ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, salen), 0);
    ck_assert_int_eq(listen(lfd, 1), 0);

    child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        int fd;

        if (setgroups((size_t)t->n, t->groups) < 0 || setgid(t->gid) < 0 ||
            setuid(USER) < 0)
            _exit(2);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, salen) < 0)
            _exit(3);
        /* Stay connected until the parent has looked. */
        if (read(fd, &byte, 1) < 0)
            _exit(4);
        _exit(0);
    }
    cfd = accept(lfd, NULL, NULL);
    ck_assert_int_ge(cfd, 0);
    proto_err_clear(&err);
    rc = access_peer(&p, cfd, &peer, &err);
    ck_assert_int_eq(write(cfd, &byte, 1), 1);
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "client failed: status %d", status);
    ck_assert_msg(rc == t->rc, "%s: rc %d (%s)", t->what, rc, err.message);
    ck_assert_uint_eq(peer.uid, USER);
    ck_assert_uint_eq(peer.gid, t->gid);
    ck_assert_int_eq(peer.pid, child);
    ck_assert_msg(peer.level == t->want, "%s: level %d", t->what, peer.level);
    if (rc != 0)
        ck_assert_str_eq(err.message, "uid 61500 (gid 61201) is in neither a "
                                      "writer nor a reader group");
    close(cfd);
    close(lfd);
}
END_TEST

START_TEST(test_access_peer_of_own_socketpair)
{
    struct access_policy p;
    struct access_peer peer;
    struct proto_err err;
    int sv[2];

    fake_policy(&p, 1, 1);
    p.self_uid = geteuid();
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(access_peer(&p, sv[0], &peer, &err), 0);
    ck_assert_uint_eq(peer.uid, getuid());
    ck_assert_uint_eq(peer.gid, getgid());
    ck_assert_int_eq(peer.pid, getpid());
    ck_assert_int_eq(peer.level, ACCESS_WRITE);
    close(sv[0]);
    close(sv[1]);

    /* Not a socket: the credentials cannot be read. */
    ck_assert_int_eq(access_peer(&p, 0 - 1, &peer, &err), PROTO_EUNAVAILABLE);
}
END_TEST

START_TEST(test_access_op_allowed_by_level)
{
    struct proto_err err;
    int op;

    for (op = 0; op < PROTO_OP_COUNT; op++) {
        ck_assert_int_eq(access_op_allowed(ACCESS_WRITE, op, &err), 0);
        ck_assert_int_eq(access_op_allowed(ACCESS_READ, op, &err),
                         envelope_op_writes(op) ? PROTO_EUNAUTHORIZED : 0);
        ck_assert_int_eq(access_op_allowed(ACCESS_NONE, op, &err),
                         PROTO_EUNAUTHORIZED);
    }
    ck_assert_int_eq(access_op_allowed(ACCESS_READ, PROTO_OP_QUERY, &err), 0);
    ck_assert_int_eq(access_op_allowed(ACCESS_READ, PROTO_OP_RECEIPTS, &err),
                     PROTO_EUNAUTHORIZED);
    ck_assert_str_eq(err.message, "this connection may not write: receipts");
}
END_TEST

/*
 * The rule as a literal table: a reader may send what does not write, and
 * which ops write is proto/'s op table, so both are checked against it
 * here. (hello's exemption for unauthenticated peers is the daemon's op
 * table: check_dispatch.)
 */
START_TEST(test_access_op_allowed_follows_op_table)
{
    static const struct {
        int op;
        int writes;
    } ops[] = {
        { PROTO_OP_HELLO, 0 },    { PROTO_OP_PING, 0 },
        { PROTO_OP_RECEIPT, 1 },  { PROTO_OP_RECEIPTS, 1 },
        { PROTO_OP_PLAN, 1 },     { PROTO_OP_RETENTION, 1 },
        { PROTO_OP_READBACK, 0 }, { PROTO_OP_QUERY, 0 },
        { PROTO_OP_RELAY, 1 },
    };
    struct proto_err err;
    size_t i;

    ck_assert_int_eq(sizeof(ops) / sizeof(ops[0]), PROTO_OP_COUNT);
    for (i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        ck_assert_int_eq(envelope_op_writes(ops[i].op), ops[i].writes);
        ck_assert_int_eq(access_op_allowed(ACCESS_READ, ops[i].op, &err),
                         ops[i].writes ? PROTO_EUNAUTHORIZED : 0);
        ck_assert_int_eq(access_op_allowed(ACCESS_WRITE, ops[i].op, &err), 0);
    }
    ck_assert_int_eq(access_op_allowed(ACCESS_NONE, PROTO_OP_PING, &err),
                     PROTO_EUNAUTHORIZED);
    ck_assert_str_eq(err.message, "this connection may not use ping");
    ck_assert_int_eq(envelope_op_writes(-1), 0);
    ck_assert_int_eq(envelope_op_writes(PROTO_OP_COUNT), 0);
}
END_TEST

/* ---- Tokens. ---- */

static void
hex(const unsigned char d[32], char out[65])
{
    int i;

    for (i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* FIPS 180-2 and common test vectors. */
static const struct {
    const char *in;
    const char *sha256;
} vectors[] = {
    { "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
    { "abc",
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
    { "test",
      "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" },
};

START_TEST(test_access_token_hash_vectors)
{
    unsigned char d[32];
    char h[65];

    access_token_hash(vectors[_i].in, strlen(vectors[_i].in), d);
    hex(d, h);
    ck_assert_str_eq(h, vectors[_i].sha256);
}
END_TEST

static const char *const held[] = { "alpha-secret", "bravo-secret",
                                    "charlie-secret" };
static const char *const holders[] = { "node-1", "node-2", "node-3" };

static void
token_policy(struct access_policy *p, struct config_token *t)
{
    size_t i;

    fake_policy(p, 0, 0);
    for (i = 0; i < 3; i++) {
        t[i].name = (char *)holders[i];
        access_token_hash(held[i], strlen(held[i]), t[i].sha256);
    }
    p->tokens = t;
    p->n_tokens = 3;
}

static const struct token_case {
    const char *token;
    size_t len; /* 0 = strlen */
    const char *want;
} token_cases[] = {
    { "alpha-secret", 0, "node-1" },
    { "bravo-secret", 0, "node-2" },
    { "charlie-secret", 0, "node-3" },
    { "delta-secret", 0, NULL },
    { "bravo-secre", 0, NULL },
    { "bravo-secret ", 0, NULL },
    { "BRAVO-SECRET", 0, NULL },
    { "", 0, NULL },
    /* The bytes of a known token followed by a NUL: length matters. */
    { "alpha-secret", 13, NULL },
};

START_TEST(test_access_check_token_table)
{
    const struct token_case *t = &token_cases[_i];
    struct config_token tokens[3];
    struct access_policy p;
    struct proto_err err;
    const char *name = "unset";
    size_t len = t->len != 0 ? t->len : strlen(t->token);
    int rc;

    token_policy(&p, tokens);
    rc = access_check_token(&p, t->token, len, &name, &err);
    if (t->want != NULL) {
        ck_assert_int_eq(rc, 0);
        ck_assert_str_eq(name, t->want);
    } else {
        ck_assert_int_eq(rc, PROTO_EUNAUTHORIZED);
        ck_assert_ptr_null(name);
        ck_assert_str_eq(err.path, "token");
    }
}
END_TEST

START_TEST(test_access_check_token_refuses_oversize_and_no_tokens)
{
    struct config_token tokens[3];
    struct access_policy p;
    struct proto_err err;
    char big[ACCESS_TOKEN_MAX + 1];

    token_policy(&p, tokens);
    memset(big, 'a', sizeof(big));
    ck_assert_int_eq(access_check_token(&p, big, sizeof(big), NULL, &err),
                     PROTO_EUNAUTHORIZED);
    ck_assert_str_eq(err.message, "a token is 1 to 1024 bytes");
    /* The longest allowed length is hashed and compared (and misses). */
    ck_assert_int_eq(access_check_token(&p, big, ACCESS_TOKEN_MAX, NULL, &err),
                     PROTO_EUNAUTHORIZED);
    ck_assert_str_eq(err.message, "the token is not one this daemon accepts");
    p.n_tokens = 0;
    ck_assert_int_eq(access_check_token(&p, "alpha-secret", 12, NULL, &err),
                     PROTO_EUNAUTHORIZED);
}
END_TEST

static const struct stream_case {
    const char *in;
    size_t len;      /* 0 = strlen */
    const char *out; /* NULL = error */
} stream_cases[] = {
    { "test", 0,
      "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n" },
    { "test\n", 0,
      "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n" },
    { "test\r\n", 0,
      "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n" },
    { "abc\n", 0,
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n" },
    { "", 0, NULL },
    { "\n", 0, NULL },
    { NULL, ACCESS_TOKEN_MAX + 1, NULL },
    { NULL, ACCESS_TOKEN_MAX, "" },
};

START_TEST(test_access_hash_token_stream_table)
{
    const struct stream_case *t = &stream_cases[_i];
    char err[CONFIG_ERR_MAX] = "";
    char *text = NULL, *buf;
    size_t len, outlen = 0;
    FILE *in, *out;
    int rc;

    len = t->in != NULL ? strlen(t->in) : t->len;
    buf = malloc(len + 1);
    ck_assert_ptr_nonnull(buf);
    if (t->in != NULL)
        memcpy(buf, t->in, len);
    else
        memset(buf, 'x', len);
    /* fmemopen cannot open an empty buffer for reading on every libc. */
    in = len > 0 ? fmemopen(buf, len, "r") : fopen("/dev/null", "r");
    ck_assert_ptr_nonnull(in);
    out = open_memstream(&text, &outlen);
    ck_assert_ptr_nonnull(out);
    rc = access_hash_token_stream(in, out, err);
    fclose(in);
    fclose(out);
    if (t->out == NULL) {
        ck_assert_int_eq(rc, -1);
        ck_assert_str_eq(err, "a token is 1 to 1024 bytes on standard input");
        ck_assert_uint_eq(outlen, 0);
    } else if (t->out[0] == '\0') {
        /* The longest token: its hash, whatever it is, in the format. */
        ck_assert_msg(rc == 0, "%s", err);
        ck_assert_uint_eq(outlen, 65);
        ck_assert_int_eq(text[64], '\n');
    } else {
        ck_assert_msg(rc == 0, "%s", err);
        ck_assert_str_eq(text, t->out);
    }
    free(text);
    free(buf);
}
END_TEST

static Suite *
access_suite(void)
{
    Suite *s = suite_create("access");
    TCase *tc;

    tc = tcase_create("level_for");
    tcase_add_loop_test(tc, test_access_level_for_table, 0,
                        sizeof(level_cases) / sizeof(level_cases[0]));
    suite_add_tcase(s, tc);

    tc = tcase_create("level_of_user");
    tcase_add_test(tc, test_access_level_of_user_real_ids);
    suite_add_tcase(s, tc);

    tc = tcase_create("policy_init");
    tcase_add_test(tc, test_access_policy_init_resolves_groups);
    suite_add_tcase(s, tc);

    tc = tcase_create("peer_end_to_end");
    tcase_set_tags(tc, "as_root");
    tcase_add_loop_test(tc, test_access_peer_sees_real_credentials, 0,
                        sizeof(peer_cases) / sizeof(peer_cases[0]));
    suite_add_tcase(s, tc);

    tc = tcase_create("peer_socketpair");
    tcase_add_test(tc, test_access_peer_of_own_socketpair);
    suite_add_tcase(s, tc);

    tc = tcase_create("op_allowed");
    tcase_add_test(tc, test_access_op_allowed_by_level);
    tcase_add_test(tc, test_access_op_allowed_follows_op_table);
    suite_add_tcase(s, tc);

    tc = tcase_create("token_hash");
    tcase_add_loop_test(tc, test_access_token_hash_vectors, 0,
                        sizeof(vectors) / sizeof(vectors[0]));
    suite_add_tcase(s, tc);

    tc = tcase_create("check_token");
    tcase_add_loop_test(tc, test_access_check_token_table, 0,
                        sizeof(token_cases) / sizeof(token_cases[0]));
    tcase_add_test(tc, test_access_check_token_refuses_oversize_and_no_tokens);
    suite_add_tcase(s, tc);

    tc = tcase_create("hash_token_stream");
    tcase_add_loop_test(tc, test_access_hash_token_stream_table, 0,
                        sizeof(stream_cases) / sizeof(stream_cases[0]));
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(access_suite());
    int status;

    srunner_run_all(sr, CK_NORMAL);
    status = skip_status(sr);
    srunner_free(sr);
    return status;
}
