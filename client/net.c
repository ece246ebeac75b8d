/*
 * net.c: receiptctl's blocking client connection.
 *
 * Reads go through a fixed buffer into a frame_reader whose ceiling is the
 * protocol's hard 64 MiB, not the daemon's max_frame: max_frame bounds
 * requests, and a query reply with thousands of receipt rows may be larger.
 * Every reply frame passes mpcheck() before msgpack-c unpacks it, so a
 * broken or hostile peer cannot make the client reserve memory its bytes do
 * not justify. Each wait on the socket is bounded by timeout_ms with poll().
 * SIGPIPE is avoided per call (MSG_NOSIGNAL), so a daemon that goes away
 * gives an error message rather than a silent death. With TLS (tls.h over
 * the same blocking socket) the frame reader is fed what TLS decrypts,
 * and requests are encrypted on their way out. Single-threaded.
 */
#include "net.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "mpcheck.h"
#include "mpobj.h"
#include "tls.h"

static int seterr(char *err, size_t err_len, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int
seterr(char *err, size_t err_len, int code, const char *fmt, ...)
{
    va_list ap;

    if (err != NULL && err_len > 0) {
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return code;
}

static int
connect_unix(const char *path, char *err, size_t err_len)
{
    struct sockaddr_un sun;
    int fd;

    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sun.sun_path))
        return seterr(err, err_len, NET_ECONNECT,
                      "cannot connect to %s: the path is longer than a Unix "
                      "socket address allows (%zu bytes)",
                      path, sizeof(sun.sun_path) - 1);
    memcpy(sun.sun_path, path, strlen(path));
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return seterr(err, err_len, NET_ECONNECT, "socket: %s",
                      strerror(errno));
    if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0) {
        int e = errno;

        close(fd);
        return seterr(err, err_len, NET_ECONNECT, "cannot connect to %s: %s",
                      path, strerror(e));
    }
    return fd;
}

static int
connect_tcp(const char *hostport, char *err, size_t err_len)
{
    char host[256];
    const char *colon = strrchr(hostport, ':'), *h = hostport, *port;
    size_t hlen;
    struct addrinfo hints, *res = NULL, *ai;
    int fd = -1, rc, e = 0;

    if (colon == NULL || colon[1] == '\0')
        return seterr(err, err_len, NET_ECONNECT,
                      "cannot connect to %s: expected HOST:PORT", hostport);
    port = colon + 1;
    hlen = (size_t)(colon - hostport);
    /* "[::1]:7000": the brackets keep an IPv6 address's colons apart from
     * the port's. */
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    if (hlen == 0 || hlen >= sizeof(host))
        return seterr(err, err_len, NET_ECONNECT,
                      "cannot connect to %s: bad host", hostport);
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0)
        return seterr(err, err_len, NET_ECONNECT, "cannot resolve %s: %s",
                      hostport, gai_strerror(rc));
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        e = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return seterr(err, err_len, NET_ECONNECT, "cannot connect to %s: %s",
                      hostport, strerror(e));
    return fd;
}

int
net_connect(struct net_conn *c, const char *unix_path, const char *tcp,
            int timeout_ms, char *err, size_t err_len)
{
    int fd;

    memset(c, 0, sizeof(*c));
    c->fd = -1;
    fd = tcp != NULL ? connect_tcp(tcp, err, err_len)
                     : connect_unix(unix_path, err, err_len);
    if (fd < 0)
        return fd;
    if ((fd = net_adopt(c, fd, tcp ? tcp : unix_path, timeout_ms, err,
                        err_len)) == 0)
        c->tcp = tcp != NULL;
    return fd;
}

int
net_adopt(struct net_conn *c, int fd, const char *peer, int timeout_ms,
          char *err, size_t err_len)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    c->rbuf = malloc(NET_READ_CHUNK);
    if (c->rbuf == NULL) {
        close(fd);
        return seterr(err, err_len, NET_ENOMEM, "out of memory");
    }
    c->fd = fd;
    c->timeout_ms = timeout_ms;
    c->next_id = 1;
    c->max_frame = FRAME_MAX_DEFAULT;
    c->max_batch = 10000;
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    frame_reader_init(&c->fr, FRAME_MAX_CEILING);
    return 0;
}

void
net_close(struct net_conn *c)
{
    if (c->rbuf == NULL && c->fd <= 0)
        return;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    tls_conn_free(c->tls);
    c->tls = NULL;
    frame_reader_close(&c->fr);
    free(c->rbuf);
    c->rbuf = NULL;
}

size_t
net_frame_begin(struct net_conn *c, msgpack_sbuffer *sb, msgpack_packer *pk,
                int op, int has_body, uint64_t *id)
{
    return net_frame_begin_seq(c, sb, pk, op, 0, 0, has_body, id);
}

size_t
net_frame_begin_seq(struct net_conn *c, msgpack_sbuffer *sb, msgpack_packer *pk,
                    int op, int has_seq, uint64_t seq, int has_body,
                    uint64_t *id)
{
    size_t start = frame_sbuffer_begin(sb);

    if (start == (size_t)-1)
        return start;
    *id = c->next_id++;
    if (envelope_request(pk, op, *id, has_seq, seq, has_body) != 0)
        return (size_t)-1;
    return start;
}

int
net_frame_finish(struct net_conn *c, msgpack_sbuffer *sb, size_t start)
{
    if (sb->size - start - FRAME_HEADER_SIZE > c->max_frame)
        return -1;
    frame_sbuffer_finish(sb, start);
    return 0;
}

static int
wait_fd(struct net_conn *c, short events, char *err, size_t err_len)
{
    struct pollfd p[3] = { { .fd = c->fd, .events = events } };
    int n, nfds = 1, out = -1, stop = -1;

    if (c->watch_stdout) {
        out = nfds;
        p[nfds++] = (struct pollfd){ .fd = STDOUT_FILENO, .events = 0 };
    }
    if (c->stop != NULL && c->stop_fd >= 0) {
        stop = nfds;
        p[nfds++] = (struct pollfd){ .fd = c->stop_fd, .events = POLLIN };
    }
    for (;;) {
        if (c->stop != NULL && *c->stop)
            return seterr(err, err_len, NET_EIO, "interrupted");
        n = poll(p, (nfds_t)nfds, c->timeout_ms > 0 ? c->timeout_ms : -1);
        if (n > 0 && out >= 0 &&
            (p[out].revents & (POLLERR | POLLHUP | POLLNVAL))) {
            c->stdout_closed = 1;
            return seterr(err, err_len, NET_EIO, "stdout was closed");
        }
        if (n > 0 && stop >= 0 && p[stop].revents != 0)
            continue; /* *c->stop is set: the check above ends the wait */
        if (n > 0)
            return 0;
        if (n == 0)
            return seterr(err, err_len, NET_EIO,
                          "no answer from %s within %d ms", c->peer,
                          c->timeout_ms);
        if (errno != EINTR)
            return seterr(err, err_len, NET_EIO, "poll: %s", strerror(errno));
        if (c->stop != NULL && *c->stop)
            return seterr(err, err_len, NET_EIO, "interrupted");
    }
}

static int
send_raw(struct net_conn *c, const char *buf, size_t len, char *err,
         size_t err_len)
{
    ssize_t n;
    int rc;

    while (len > 0) {
        if ((rc = wait_fd(c, POLLOUT, err, err_len)) != 0)
            return rc;
        n = send(c->fd, buf, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return seterr(err, err_len, NET_EIO, "sending to %s: %s", c->peer,
                          strerror(errno));
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Sends what TLS has for the server. */
static int
tls_flush(struct net_conn *c, char *err, size_t err_len)
{
    char buf[16384];
    size_t n;
    int rc;

    while ((n = tls_conn_take(c->tls, buf, sizeof(buf))) > 0)
        if ((rc = send_raw(c, buf, n, err, err_len)) != 0)
            return rc;
    return 0;
}

int
net_send(struct net_conn *c, const char *buf, size_t len, char *err,
         size_t err_len)
{
    size_t n;
    int rc;

    if (c->tls == NULL)
        return send_raw(c, buf, len, err, err_len);
    /* In pieces, so the encrypted copy stays small. */
    while (len > 0) {
        n = len < NET_READ_CHUNK ? len : NET_READ_CHUNK;
        if (tls_conn_write(c->tls, buf, n) != 0)
            return seterr(err, err_len, NET_EIO, "sending to %s: %s", c->peer,
                          tls_conn_error(c->tls));
        if ((rc = tls_flush(c, err, err_len)) != 0)
            return rc;
        buf += n;
        len -= n;
    }
    return 0;
}

/* Reads what the socket has into buf: 0 with *got (0 at the end of the
 * stream), or NET_EIO. */
static int
recv_raw(struct net_conn *c, char *buf, size_t cap, size_t *got, char *err,
         size_t err_len)
{
    ssize_t n;
    int rc;

    for (;;) {
        if ((rc = wait_fd(c, POLLIN, err, err_len)) != 0)
            return rc;
        n = recv(c->fd, buf, cap, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n < 0)
            return seterr(err, err_len, NET_EIO, "reading from %s: %s", c->peer,
                          strerror(errno));
        *got = (size_t)n;
        return 0;
    }
}

/* Fills c->rbuf with plaintext: 0 with c->rlen > 0 (or 0 at the end of
 * the stream), or a transport error. */
static int
fill(struct net_conn *c, char *err, size_t err_len)
{
    char buf[16384];
    size_t got;
    int rc;

    c->roff = c->rlen = 0;
    if (c->tls == NULL)
        return recv_raw(c, c->rbuf, NET_READ_CHUNK, &c->rlen, err, err_len);
    for (;;) {
        rc = tls_conn_read(c->tls, c->rbuf, NET_READ_CHUNK, &c->rlen);
        if (tls_flush(c, err, err_len) != 0)
            return NET_EIO;
        if (rc == 0 || rc == TLS_ECLOSED)
            return 0;
        if (rc != TLS_EWANT)
            return seterr(err, err_len, NET_EIO, "%s: %s", c->peer,
                          tls_conn_error(c->tls));
        if ((rc = recv_raw(c, buf, sizeof(buf), &got, err, err_len)) != 0)
            return rc;
        if (got == 0)
            return 0;
        if (tls_conn_feed(c->tls, buf, got) != 0)
            return seterr(err, err_len, NET_EIO, "%s: too much TLS input",
                          c->peer);
    }
}

int
net_tls_ctx(const struct net_tls *t, struct tls_ctx **out, char *err,
            size_t err_len)
{
    char why[TLS_ERR_MAX];

    if (tls_ctx_client_new(t->ca_file, t->cert, t->key, out, why,
                           sizeof(why)) != 0)
        return seterr(err, err_len, NET_ECONNECT, "TLS: %s", why);
    return 0;
}

int
net_start_tls(struct net_conn *c, struct tls_ctx *ctx, const char *hostport,
              char *err, size_t err_len)
{
    char host[256], buf[16384];
    const char *colon = strrchr(hostport, ':');
    size_t hlen = colon != NULL ? (size_t)(colon - hostport) : strlen(hostport),
           got;
    int rc;

    if (hlen >= 2 && hostport[0] == '[' && hostport[hlen - 1] == ']') {
        hostport++;
        hlen -= 2;
    }
    if (hlen >= sizeof(host))
        return seterr(err, err_len, NET_ECONNECT, "%s: bad host", hostport);
    memcpy(host, hostport, hlen);
    host[hlen] = '\0';
    if ((c->tls = tls_conn_new(ctx, host)) == NULL)
        return seterr(err, err_len, NET_ECONNECT, "TLS with %s: out of memory",
                      c->peer);
    for (;;) {
        rc = tls_conn_handshake(c->tls);
        if (tls_flush(c, err, err_len) != 0)
            return NET_ECONNECT;
        if (rc == 0)
            return 0;
        if (rc != TLS_EWANT)
            return seterr(err, err_len, NET_ECONNECT, "TLS with %s: %s",
                          c->peer, tls_conn_error(c->tls));
        if (recv_raw(c, buf, sizeof(buf), &got, err, err_len) != 0)
            return NET_ECONNECT;
        if (got == 0)
            return seterr(err, err_len, NET_ECONNECT,
                          "TLS with %s: the server closed the connection "
                          "during the handshake (is it a plain-text "
                          "listener?)",
                          c->peer);
        if (tls_conn_feed(c->tls, buf, got) != 0)
            return seterr(err, err_len, NET_ECONNECT,
                          "TLS with %s: too much TLS input", c->peer);
    }
}

void
net_reply_free(struct net_reply *rep)
{
    if (rep == NULL)
        return;
    msgpack_unpacked_destroy(&rep->up);
    free(rep->frame);
    rep->frame = NULL;
}

int
net_recv(struct net_conn *c, struct net_reply *rep, char *err, size_t err_len)
{
    struct proto_err perr;
    size_t consumed, off = 0;
    int rc;

    memset(rep, 0, sizeof(*rep));
    msgpack_unpacked_init(&rep->up);
    while (rep->frame == NULL) {
        if (c->roff == c->rlen) {
            if ((rc = fill(c, err, err_len)) != 0)
                return rc;
            if (c->rlen == 0)
                return seterr(err, err_len, NET_EIO,
                              "%s closed the connection before replying%s",
                              c->peer,
                              c->tcp && c->tls == NULL && !c->answered
                                  ? " (if it speaks TLS, connect with --tls)"
                                  : "");
        }
        rc = frame_reader_feed(&c->fr, c->rbuf + c->roff, c->rlen - c->roff,
                               &consumed, &rep->frame, &rep->frame_len, &perr);
        c->roff += consumed;
        if (rc == PROTO_ENOMEM)
            return seterr(err, err_len, NET_ENOMEM, "%s", perr.message);
        if (rc != 0)
            return seterr(err, err_len, NET_EPROTO, "bad reply frame: %s",
                          perr.message);
    }
    c->answered = 1;
    if (mpcheck(rep->frame, rep->frame_len, &perr) != 0)
        return seterr(err, err_len, NET_EPROTO, "bad reply: %s", perr.message);
    if (msgpack_unpack_next(&rep->up, rep->frame, rep->frame_len, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        off != rep->frame_len)
        return seterr(err, err_len, NET_EPROTO,
                      "bad reply: not one msgpack object");
    if (envelope_reply_decode(&rep->up.data, &rep->r, &perr) != 0)
        return seterr(err, err_len, NET_EPROTO, "bad reply: %s%s%s", perr.path,
                      perr.path[0] ? ": " : "", perr.message);
    return 0;
}

int
net_call(struct net_conn *c, const msgpack_sbuffer *sb, uint64_t want_id,
         struct net_reply *rep, char *err, size_t err_len)
{
    int rc;

    memset(rep, 0, sizeof(*rep));
    msgpack_unpacked_init(&rep->up);
    if ((rc = net_send(c, sb->data, sb->size, err, err_len)) != 0)
        return rc;
    msgpack_unpacked_destroy(&rep->up);
    if ((rc = net_recv(c, rep, err, err_len)) != 0)
        return rc;
    if (!rep->r.has_id || rep->r.id != want_id)
        return seterr(err, err_len, NET_EPROTO,
                      "the reply's id does not match request %llu",
                      (unsigned long long)want_id);
    return 0;
}

int
net_hello(struct net_conn *c, const char *source, const char *token,
          struct net_reply *rep, char *err, size_t err_len)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    const msgpack_object *v;
    uint64_t id, u;
    size_t start;
    int rc;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    start = net_frame_begin(c, &sb, &pk, PROTO_OP_HELLO, 1, &id);
    if (start == (size_t)-1 ||
        msgpack_pack_map(&pk, 1 + (source != NULL) + (token != NULL)) != 0 ||
        envelope_pack_cstr(&pk, "protocol") != 0 ||
        msgpack_pack_uint64(&pk, PROTO_VERSION) != 0 ||
        (source != NULL && (envelope_pack_cstr(&pk, "source") != 0 ||
                            envelope_pack_cstr(&pk, source) != 0)) ||
        (token != NULL && (envelope_pack_cstr(&pk, "token") != 0 ||
                           envelope_pack_cstr(&pk, token) != 0)) ||
        net_frame_finish(c, &sb, start) != 0) {
        if (token != NULL && sb.data != NULL)
            explicit_bzero(sb.data, sb.size);
        msgpack_sbuffer_destroy(&sb);
        memset(rep, 0, sizeof(*rep));
        msgpack_unpacked_init(&rep->up);
        return seterr(err, err_len, NET_ENOMEM, "cannot build hello");
    }
    rc = net_call(c, &sb, id, rep, err, err_len);
    /* The frame held the token: it is not left behind in freed memory. */
    if (token != NULL)
        explicit_bzero(sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    if (rc != 0)
        return rc;
    if (!rep->r.ok)
        return 1;
    if (rep->r.result == NULL || rep->r.result->type != MSGPACK_OBJECT_MAP)
        return 0;
    v = mpobj_map_get(rep->r.result, "max_frame", NULL);
    if (v != NULL && mpobj_uint(v, FRAME_MAX_CEILING, &u, NULL) == 0 && u > 0)
        c->max_frame = (uint32_t)u;
    v = mpobj_map_get(rep->r.result, "max_batch", NULL);
    if (v != NULL && mpobj_uint(v, UINT32_MAX, &u, NULL) == 0 && u > 0)
        c->max_batch = (uint32_t)u;
    v = mpobj_map_get(rep->r.result, "server", NULL);
    if (v != NULL && v->type == MSGPACK_OBJECT_STR)
        snprintf(c->server, sizeof(c->server), "%.*s",
                 (int)(v->via.str.size < 63 ? v->via.str.size : 63),
                 v->via.str.ptr);
    return 0;
}
