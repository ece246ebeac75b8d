/*
 * follow.c: `receipts` queries that stay open (docs/protocol.md
 * "Following new receipts").
 *
 * A follower is a cursor (the highest receipt id it was sent, or that
 * did not match its filters) and the filters of its request; it holds no
 * rows. After each delivery of the writer that stored receipts
 * (server_delivery_cb), and once a second in case another process
 * committed (a PostgreSQL store shared by central instances), every
 * follower reads what lies past its cursor on the query pool, through the
 * store interface, as a `receipts` query after an id: first the newest id
 * the store holds (every lower id is committed), then, once the writer
 * says those are durable, the matching rows up to it, oldest first, at
 * most `limit` of them. A page that found rows
 * is one reply frame carrying the request's id; one that found none sends
 * nothing. One fetch per follower runs at a time; commits meanwhile mark
 * it to look again.
 *
 * A follower with a backlog (after_id far behind) takes a page each time
 * its unsent replies fall under half of max_unsent: the rows wait in the
 * store, not in memory. Once it has caught up it gets each page as soon as
 * it is committed, and when what it was sent but did not read passes
 * max_unsent it is cut off: an `overloaded` reply at `follow` says why,
 * and the connection closes once that is written. The writer never waits
 * for a follower.
 *
 * Loop thread, but for fetch_run (a query thread).
 */
#include "follow.h"

#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "conn.h"
#include "envelope.h"
#include "log.h"
#include "query.h"
#include "query_kind.h"
#include "reply.h"
#include "server.h"
#include "store.h"
#include "writer.h"

#define FOLLOW_LOOK_MS 1000
/* How long a fetch waits for what it is about to read to be durable
 * (writer_wait_durable: a sync takes milliseconds); past it the rows wait
 * for the next look. */
#define FOLLOW_DURABLE_WAIT_MS 1000

struct follower {
    struct follower *prev, *next; /* the server's list, while it follows */
    struct server *srv;
    struct conn *c; /* NULL once the connection closed */
    int has_id;
    uint64_t id;
    struct store_filter f; /* its strings are strs */
    char *strs[5];
    uint64_t cursor;
    int from_now;   /* no after_id: the first fetch only finds the cursor */
    int listed;     /* on the server's list */
    int busy;       /* a fetch is queued or running */
    int submitting; /* inside query_submit */
    int more;       /* the last page was full: rows wait */
    int again;      /* commits since the fetch began */
    int live;       /* caught up once */
    int ended;
};

struct fetch {
    struct follower *fl;
    struct writer *writer; /* NULL: nothing to wait for */
    struct store_filter f; /* the follower's, after its cursor */
    int from_now;
    int silent;  /* a page after the first: nothing found, nothing sent */
    int ran, rc; /* set by fetch_run */
    uint64_t cursor;
    int truncated;
};

static void
follower_free(struct follower *fl)
{
    int i;

    for (i = 0; i < 5; i++)
        free(fl->strs[i]);
    free(fl);
}

static void
unlist(struct follower *fl)
{
    struct server *srv = fl->srv;

    if (!fl->listed)
        return;
    fl->listed = 0;
    if (fl->prev != NULL)
        fl->prev->next = fl->next;
    else
        srv->followers = fl->next;
    if (fl->next != NULL)
        fl->next->prev = fl->prev;
    srv->n_followers--;
    if (srv->followers == NULL && srv->follow_timer_on == 1)
        uv_timer_stop(&srv->follow_timer);
}

/* Packs {"rows": [], "truncated": false, "last_id": id}. */
static int
pack_empty(msgpack_packer *pk, uint64_t id)
{
    return msgpack_pack_map(pk, 3) != 0 ||
           envelope_pack_cstr(pk, "rows") != 0 ||
           msgpack_pack_array(pk, 0) != 0 ||
           envelope_pack_cstr(pk, "truncated") != 0 ||
           msgpack_pack_false(pk) != 0 || reply_kv_uint(pk, "last_id", id) != 0;
}

/* A query thread: the rows past the cursor, up to the newest id. */
static int
fetch_run(void *arg, struct store *s, uint64_t deadline_ms, msgpack_packer *pk,
          struct proto_err *err)
{
    struct fetch *fe = arg;
    struct query_rows_info info;
    struct query_args a;
    uint64_t top = 0;
    int rc;

    fe->ran = 1;
    fe->cursor = fe->f.after_id;
    if ((rc = store_last_receipt_id(s, &fe->f, deadline_ms, &top, err)) != 0)
        return fe->rc = rc;
    /* Committed is not yet durable when the writer syncs after its
     * commits: a follower must never hold a receipt a power cut could take
     * back, whose id would then be given out again. Every row up to top
     * was committed before this wait, so it is durable after it. */
    if (top > fe->f.after_id && fe->writer != NULL &&
        writer_wait_durable(fe->writer, FOLLOW_DURABLE_WAIT_MS) != 0) {
        if (fe->from_now)
            return fe->rc = proto_err_set(
                       err, PROTO_EUNAVAILABLE, NULL,
                       "the store did not sync within %d ms; follow later",
                       FOLLOW_DURABLE_WAIT_MS);
        top = fe->f.after_id;
    }
    if (fe->from_now) {
        fe->cursor = top;
        if (pack_empty(pk, top) != 0)
            rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
        return fe->rc = rc;
    }
    /* Nothing committed past the cursor (the first page answers all the
     * same). */
    if (top <= fe->f.after_id && fe->silent)
        return fe->rc = QUERY_RUN_SILENT;
    memset(&a, 0, sizeof(a));
    a.f = fe->f;
    a.f.has_before_id = 1;
    a.f.before_id = top + 1;
    a.deadline_ms = deadline_ms;
    rc = query_pack_receipts(&a, s, pk, 1, fe->silent, &info, err);
    if (rc == 0 || rc == QUERY_RUN_SILENT) {
        fe->truncated = info.truncated;
        fe->cursor = info.truncated         ? info.last_id
                     : top > fe->f.after_id ? top
                                            : fe->f.after_id;
    }
    if (rc == 0 && reply_kv_uint(pk, "last_id", fe->cursor) != 0)
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    return fe->rc = rc;
}

static void pump(struct follower *fl);

/* Ends the follow: why (when not NULL) is its last reply, and the
 * connection closes once what it was sent is written. */
static void
follow_end(struct follower *fl, const struct proto_err *why)
{
    struct conn *c = fl->c;
    struct conn_slot *slot;
    char *reply;
    size_t len;

    if (fl->ended || c == NULL)
        return;
    fl->ended = 1;
    unlist(fl);
    if (why != NULL && (slot = conn_slot_new(c)) != NULL) {
        reply = reply_error(fl->has_id, fl->id, why, &len);
        conn_slot_complete(slot, reply, len);
    }
    if (!c->closing)
        conn_close_after_replies(c);
}

/* The loop thread, after the fetch's reply went into its slot (or, inside
 * query_submit, when it could not be queued). */
static void
fetch_done(void *arg)
{
    struct fetch *fe = arg;
    struct follower *fl = fe->fl;

    if (fl->submitting) {
        free(fe);
        return;
    }
    fl->busy = 0;
    if (fl->c == NULL) {
        follower_free(fl);
        free(fe);
        return;
    }
    if (!fe->ran || (fe->rc != 0 && fe->rc != QUERY_RUN_SILENT)) {
        /* Cancelled at stop, or failed: its reply said why. */
        follow_end(fl, NULL);
        free(fe);
        return;
    }
    if (fe->cursor > fl->cursor)
        fl->cursor = fe->cursor;
    fl->from_now = 0;
    if (fe->truncated)
        fl->more = 1;
    else
        fl->live = 1;
    free(fe);
    pump(fl);
}

/* Queues a fetch on slot; the first (the request's own slot) always
 * answers. Returns 0 or the error to reply on slot. */
static int
fetch(struct follower *fl, struct conn_slot *slot, int first,
      struct proto_err *err)
{
    struct fetch *fe = calloc(1, sizeof(*fe));
    int rc;

    if (fe == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    fe->fl = fl;
    fe->writer = fl->srv->writer;
    fe->f = fl->f;
    fe->f.has_after_id = 1;
    fe->f.after_id = fl->cursor;
    fe->from_now = fl->from_now;
    fe->silent = !first;
    fl->busy = 1;
    fl->submitting = 1;
    rc = query_submit(fl->srv->queries, fl->srv, slot, fl->has_id, fl->id,
                      fetch_run, fe, fetch_done, err);
    fl->submitting = 0;
    if (rc != 0)
        fl->busy = 0;
    return rc;
}

static void
fetch_next(struct follower *fl)
{
    struct conn_slot *slot = conn_slot_new(fl->c);
    struct proto_err err;
    char *reply;
    size_t len;

    proto_err_clear(&err);
    if (slot == NULL) {
        follow_end(fl, NULL);
        return;
    }
    if (fetch(fl, slot, 0, &err) != 0) {
        reply = reply_error(fl->has_id, fl->id, &err, &len);
        conn_slot_complete(slot, reply, len);
        follow_end(fl, NULL);
    }
}

static void
cut_off(struct follower *fl)
{
    struct conn *c = fl->c;
    struct proto_err err;

    fl->srv->n.followers_cut_off++;
    log_info("follow: connection %llu (source \"%s\") read too slowly: %llu "
             "bytes of rows unread, over max_unsent; cut off",
             (unsigned long long)c->id, c->source,
             (unsigned long long)c->unsent);
    proto_err_set(&err, PROTO_EOVERLOADED, "follow",
                  "this follower read too slowly: %llu bytes of rows sent "
                  "to it were not read, over max_unsent (%llu); follow again "
                  "with after_id set to the last receipt_id received",
                  (unsigned long long)c->unsent,
                  (unsigned long long)fl->srv->cfg->max_unsent_bytes);
    follow_end(fl, &err);
}

/* Takes the follower's next step: a fetch, a cut, or nothing yet. */
static void
pump(struct follower *fl)
{
    uint64_t cap = fl->srv->cfg->max_unsent_bytes;
    struct conn *c = fl->c;

    if (c == NULL || fl->ended || fl->busy || c->closing)
        return;
    if (c->want_close) {
        /* The peer half-closed (or broke framing): nothing more is
         * pushed, and the connection closes once it is written. */
        follow_end(fl, NULL);
        return;
    }
    if (fl->live && c->unsent > cap) {
        cut_off(fl);
        return;
    }
    if (fl->more) {
        /* Catching up: the next page once there is room for it. */
        if (!fl->live && c->unsent > cap / 2)
            return;
        fl->more = fl->again = 0;
        fetch_next(fl);
        return;
    }
    if (fl->again) {
        fl->again = 0;
        fetch_next(fl);
    }
}

static void
wake_all(struct server *srv)
{
    struct follower *fl, *next;

    for (fl = srv->followers; fl != NULL; fl = next) {
        next = fl->next;
        fl->again = 1;
        pump(fl);
    }
}

static void
look_cb(uv_timer_t *t)
{
    wake_all(t->data);
}

void
follow_committed(struct server *srv)
{
    if (srv->followers == NULL || srv->n.accepted == srv->follow_seen)
        return;
    srv->follow_seen = srv->n.accepted;
    wake_all(srv);
}

void
follow_writable(struct conn *c)
{
    struct follower *fl = c->follow;

    if (fl != NULL && fl->more && !fl->live)
        pump(fl);
}

void
follow_conn_closed(struct conn *c)
{
    struct follower *fl = c->follow;

    c->follow = NULL;
    unlist(fl);
    fl->c = NULL;
    if (!fl->busy)
        follower_free(fl);
}

void
follow_stop_all(struct server *srv)
{
    struct proto_err err;

    proto_err_set(&err, PROTO_EUNAVAILABLE, "follow",
                  "the daemon is stopping; follow again with after_id set "
                  "to the last receipt_id received once it is back");
    while (srv->followers != NULL)
        follow_end(srv->followers, &err);
    if (srv->follow_timer_on == 1) {
        srv->follow_timer_on = 2; /* closed */
        uv_close((uv_handle_t *)&srv->follow_timer, NULL);
    }
}

int
follow_start(struct server *srv, struct conn_slot *slot, int has_id,
             uint64_t id, struct query_args *a, struct proto_err *err)
{
    struct conn *c = slot->c;
    struct follower *fl;
    int i, rc;

    if (srv->draining || srv->queries == NULL)
        return proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                             "the daemon is stopping");
    if (c->follow != NULL)
        return proto_err_set(err, PROTO_EINVALID, "follow",
                             "this connection follows already; open another "
                             "connection for another follow");
    if (srv->n_followers >= srv->cfg->max_followers)
        return proto_err_set(err, PROTO_EOVERLOADED, "follow",
                             "%zu followers already, the daemon's "
                             "limits.max_followers; try later",
                             srv->n_followers);
    if ((fl = calloc(1, sizeof(*fl))) == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    fl->srv = srv;
    fl->c = c;
    fl->has_id = has_id;
    fl->id = id;
    fl->f = a->f;
    fl->f.has_before_id = 0;
    for (i = 0; i < 5; i++) {
        fl->strs[i] = a->strs[i];
        a->strs[i] = NULL;
    }
    fl->from_now = !a->f.has_after_id;
    fl->cursor = a->f.has_after_id ? a->f.after_id : 0;
    rc = fetch(fl, slot, 1, err);
    if (rc != 0) {
        follower_free(fl);
        return rc;
    }
    fl->listed = 1;
    fl->next = srv->followers;
    if (srv->followers != NULL)
        srv->followers->prev = fl;
    srv->followers = fl;
    srv->n_followers++;
    srv->n.followers_total++;
    c->follow = fl;
    if (srv->follow_timer_on == 0) {
        uv_timer_init(srv->loop, &srv->follow_timer);
        srv->follow_timer.data = srv;
        srv->follow_timer_on = 1;
    }
    if (srv->follow_timer_on == 1 &&
        !uv_is_active((uv_handle_t *)&srv->follow_timer))
        uv_timer_start(&srv->follow_timer, look_cb, FOLLOW_LOOK_MS,
                       FOLLOW_LOOK_MS);
    srv->follow_seen = srv->n.accepted;
    return 0;
}
