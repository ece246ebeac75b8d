/*
 * listen.h: the listening sockets: a Unix socket (mode from the
 * configuration, removed on exit, a stale file from a crash replaced, a
 * live one never stolen) and TCP (HOST:PORT, IPv4 or IPv6). New
 * connections beyond max_connections are accepted and closed at once, and
 * counted. Loop thread only.
 */
#ifndef RECEIPTD_DAEMON_LISTEN_H
#define RECEIPTD_DAEMON_LISTEN_H

#include <uv.h>

#include "server.h"

#define LISTEN_ERR_MAX 512

struct listener;

/*
 * Binds and listens on the Unix socket at path (borrowed; copied) with
 * permissions mode, owned by group when group is neither NULL nor ""
 * (borrowed). Returns a listener, or NULL with a reason in err.
 */
struct listener *listen_unix(struct server *srv, const char *path,
                             unsigned mode, const char *group,
                             char err[LISTEN_ERR_MAX]);

/* Binds and listens on "HOST:PORT" ("[::1]:7000" for IPv6). */
struct listener *listen_tcp(struct server *srv, const char *hostport,
                            char err[LISTEN_ERR_MAX]);

/*
 * Listens on an inherited, already listening socket (systemd socket
 * activation): kind is CONN_UNIX or CONN_TCP; fd is taken. The socket file
 * of an inherited Unix socket belongs to systemd and is left in place.
 */
struct listener *listen_adopt(struct server *srv, int fd, int kind,
                              char err[LISTEN_ERR_MAX]);

/* Stops listening, removes the Unix socket file, and frees l in its close
 * callback. */
void listen_close(struct listener *l);

#endif
