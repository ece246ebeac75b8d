/*
 * listen.c: Unix and TCP listeners.
 *
 * Loop thread only. When accept(2) runs out of descriptors, libuv's
 * reserve descriptor accepts and closes the waiting peers itself, so the
 * loop never spins on a listening socket it cannot serve; only when that
 * trick is unavailable does an error reach connection_cb, where it is
 * counted and logged at most once a second. main.c raises the descriptor
 * limit so that max_connections fit. Unix peers are checked against the
 * access policy before any frame is read.
 */
#include "listen.h"

#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "access.h"
#include "conn.h"
#include "log.h"

struct listener {
    union {
        uv_handle_t handle;
        uv_stream_t stream;
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } u;
    struct server *srv;
    int kind;
    char *path; /* Unix socket path, removed on close */
    dev_t dev;
    ino_t ino;
    uint64_t last_emfile_log;
};

static void
connection_cb(uv_stream_t *server, int status)
{
    struct listener *l = server->data;
    struct server *srv = l->srv;
    struct conn *c;

    if (status < 0) {
        uint64_t now = uv_now(srv->loop);
        srv->n.connections_refused++;
        if (now - l->last_emfile_log >= 1000) {
            l->last_emfile_log = now;
            log_warnx("accept: %s; refusing connections until descriptors "
                      "are free",
                      uv_strerror(status));
        }
        return;
    }
    c = conn_new(srv, l->kind);
    if (c == NULL) {
        srv->n.connections_refused++;
        log_warnx("accept: out of memory for a connection");
        return;
    }
    if (uv_accept(server, &c->u.stream) != 0) {
        srv->n.connections_refused++;
        conn_close(c);
        return;
    }
    if (srv->n_conns > srv->cfg->max_connections || srv->draining) {
        /* Over the limit: accepted only to be closed, so the peer learns
         * at once instead of waiting in the backlog. */
        srv->n.connections_refused++;
        if (!srv->draining)
            server_refused(srv, "limits.max_connections reached");
        conn_close(c);
        return;
    }
    if (l->kind == CONN_TCP) {
        /* Until its hello, a TCP peer is nobody: such peers share a small
         * budget of their own, so they cannot fill max_connections. */
        if (srv->n_unauth >= server_unauth_budget(srv)) {
            srv->n.connections_refused++;
            srv->n.unauthenticated_refused++;
            server_refused(srv, "too many TCP peers have not authenticated "
                                "yet");
            conn_close(c);
            return;
        }
        c->unauth = 1;
        srv->n_unauth++;
    }
    if (l->kind == CONN_UNIX) {
        struct access_peer peer;
        struct proto_err err;
        uv_os_fd_t fd;

        /* Credentials are checked before any frame is read. */
        proto_err_clear(&err);
        if (uv_fileno(&c->u.handle, &fd) != 0 ||
            access_peer(srv->access, fd, &peer, &err) != 0) {
            srv->n.connections_refused++;
            log_info("refused a local peer: %s", err.message);
            conn_close(c);
            return;
        }
        c->level = (int)peer.level;
    }
    srv->n.connections_total++;
    conn_start(c);
}

static void
close_cb(uv_handle_t *h)
{
    struct listener *l = h->data;

    free(l->path);
    free(l);
}

void
listen_close(struct listener *l)
{
    struct stat sb;

    /* Remove the socket only if it is still ours: another daemon may have
     * replaced a file we no longer own. */
    if (l->path != NULL && stat(l->path, &sb) == 0 && sb.st_dev == l->dev &&
        sb.st_ino == l->ino)
        unlink(l->path);
    uv_close(&l->u.handle, close_cb);
}

/* 1 when something accepts connections at path, 0 when not (a stale file
 * or nothing), -1 when path exists and is not a socket. */
static int
socket_live(const char *path)
{
    struct sockaddr_un sa;
    struct stat sb;
    int fd, rc;

    if (lstat(path, &sb) != 0)
        return 0;
    if (!S_ISSOCK(sb.st_mode))
        return -1;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 1; /* cannot tell: do not steal it */
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    close(fd);
    if (rc == 0)
        return 1;
    return errno == ECONNREFUSED || errno == ENOENT ? 0 : 1;
}

struct listener *
listen_unix(struct server *srv, const char *path, unsigned mode,
            const char *group, char err[LISTEN_ERR_MAX])
{
    struct listener *l;
    struct sockaddr_un sa;
    struct stat sb;
    mode_t old;
    int rc, live;

    if (strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(err, LISTEN_ERR_MAX, "socket path %s is longer than %zu bytes",
                 path, sizeof(sa.sun_path) - 1);
        return NULL;
    }
    live = socket_live(path);
    if (live < 0) {
        snprintf(err, LISTEN_ERR_MAX,
                 "%s exists and is not a socket; refusing to replace it", path);
        return NULL;
    }
    if (live > 0) {
        snprintf(err, LISTEN_ERR_MAX,
                 "%s is in use by a running process (another receiptd?)", path);
        return NULL;
    }
    /* A socket file that refuses connections was left by a crash. */
    if (unlink(path) != 0 && errno != ENOENT) {
        snprintf(err, LISTEN_ERR_MAX, "cannot remove stale socket %s: %s", path,
                 strerror(errno));
        return NULL;
    }
    l = calloc(1, sizeof(*l));
    if (l == NULL || (l->path = strdup(path)) == NULL) {
        free(l);
        snprintf(err, LISTEN_ERR_MAX, "out of memory");
        return NULL;
    }
    l->srv = srv;
    l->kind = CONN_UNIX;
    uv_pipe_init(srv->loop, &l->u.pipe, 0);
    l->u.handle.data = l;
    /* The umask closes the window between bind and chmod in which the
     * socket would carry looser permissions. */
    old = umask(0777 & ~mode);
    rc = uv_pipe_bind(&l->u.pipe, path);
    umask(old);
    if (rc == 0 && chmod(path, mode) != 0)
        rc = uv_translate_sys_error(errno);
    if (rc == 0 && group != NULL && group[0] != '\0') {
        struct group *gr = getgrnam(group);
        /* Writers and readers reach the socket through its group, so a
         * group that does not exist is a configuration error, not a
         * socket that silently keeps our own group. */
        if (gr == NULL) {
            snprintf(err, LISTEN_ERR_MAX, "socket group %s does not exist",
                     group);
            free(l->path);
            l->path = NULL;
            uv_close(&l->u.handle, close_cb);
            return NULL;
        }
        if (chown(path, (uid_t)-1, gr->gr_gid) != 0)
            rc = uv_translate_sys_error(errno);
    }
    if (rc == 0)
        rc = uv_listen(&l->u.stream, 511, connection_cb);
    if (rc != 0) {
        snprintf(err, LISTEN_ERR_MAX, "cannot listen on %s: %s", path,
                 uv_strerror(rc));
        free(l->path);
        l->path = NULL;
        uv_close(&l->u.handle, close_cb);
        return NULL;
    }
    if (stat(path, &sb) == 0) {
        l->dev = sb.st_dev;
        l->ino = sb.st_ino;
    }
    return l;
}

struct listener *
listen_adopt(struct server *srv, int fd, int kind, char err[LISTEN_ERR_MAX])
{
    struct listener *l = calloc(1, sizeof(*l));
    int rc;

    if (l == NULL) {
        snprintf(err, LISTEN_ERR_MAX, "out of memory");
        return NULL;
    }
    l->srv = srv;
    l->kind = kind;
    if (kind == CONN_TCP) {
        uv_tcp_init(srv->loop, &l->u.tcp);
        rc = uv_tcp_open(&l->u.tcp, fd);
    } else {
        uv_pipe_init(srv->loop, &l->u.pipe, 0);
        rc = uv_pipe_open(&l->u.pipe, fd);
    }
    l->u.handle.data = l;
    if (rc == 0)
        rc = uv_listen(&l->u.stream, 511, connection_cb);
    if (rc != 0) {
        snprintf(err, LISTEN_ERR_MAX, "cannot listen on inherited fd %d: %s",
                 fd, uv_strerror(rc));
        uv_close(&l->u.handle, close_cb);
        return NULL;
    }
    return l;
}

struct listener *
listen_tcp(struct server *srv, const char *hostport, char err[LISTEN_ERR_MAX])
{
    struct sockaddr_storage ss;
    struct listener *l;
    char host[256];
    const char *colon, *h;
    size_t hlen;
    long port;
    char *end;
    int rc;

    colon = strrchr(hostport, ':');
    if (colon == NULL) {
        snprintf(err, LISTEN_ERR_MAX, "TCP address \"%s\" is not HOST:PORT",
                 hostport);
        return NULL;
    }
    h = hostport;
    hlen = (size_t)(colon - hostport);
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    port = strtol(colon + 1, &end, 10);
    if (hlen == 0 || hlen >= sizeof(host) || *end != '\0' || port < 0 ||
        port > 65535 || end == colon + 1) {
        snprintf(err, LISTEN_ERR_MAX, "TCP address \"%s\" is not HOST:PORT",
                 hostport);
        return NULL;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)&ss) != 0) {
        snprintf(err, LISTEN_ERR_MAX,
                 "TCP host \"%s\" is not a numeric IPv4 or IPv6 address", host);
        return NULL;
    }
    l = calloc(1, sizeof(*l));
    if (l == NULL) {
        snprintf(err, LISTEN_ERR_MAX, "out of memory");
        return NULL;
    }
    l->srv = srv;
    l->kind = CONN_TCP;
    uv_tcp_init(srv->loop, &l->u.tcp);
    l->u.handle.data = l;
    rc = uv_tcp_bind(&l->u.tcp, (struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen(&l->u.stream, 511, connection_cb);
    if (rc != 0) {
        snprintf(err, LISTEN_ERR_MAX, "cannot listen on %s: %s", hostport,
                 uv_strerror(rc));
        uv_close(&l->u.handle, close_cb);
        return NULL;
    }
    return l;
}
