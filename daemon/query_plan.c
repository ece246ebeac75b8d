/*
 * query_plan.c: the `plans` and `retained` kinds of the `query` op
 * (PROTOCOL section 9), as query_agg.c is for the aggregates: what query.c
 * parsed, run on a query thread against store_query_plan.c and encoded
 * as {"rows": [...], "truncated": bool}.
 */
#include "query_plan.h"

#include <string.h>

#include "envelope.h"
#include "query_kind.h"
#include "reply.h"
#include "store_plan.h"

struct rows {
    msgpack_sbuffer sb; /* the rows, packed one after another */
    msgpack_packer pk;
    uint32_t n;
};

static int
plans_row_cb(void *arg, const struct store_plan_row *row)
{
    struct rows *rs = arg;
    msgpack_packer *pk = &rs->pk;

    if (msgpack_pack_map(pk, 7) != 0 ||
        reply_kv_str(pk, "prepared_plan_id", row->plan) != 0 ||
        reply_kv_str(pk, "graph_hash", row->graph) != 0 ||
        reply_kv_uint(pk, "registered_at", (uint64_t)row->registered_at) != 0 ||
        reply_kv_str(pk, "source", row->source) != 0 ||
        reply_kv_uint(pk, "nodes", row->nodes) != 0 ||
        reply_kv_uint(pk, "values", row->values) != 0 ||
        reply_kv_uint(pk, "retained", row->retained) != 0)
        return PROTO_ENOMEM;
    rs->n++;
    return 0;
}

static int
retained_row_cb(void *arg, const struct store_retained_row *row)
{
    struct rows *rs = arg;
    msgpack_packer *pk = &rs->pk;
    msgpack_unpacked up;
    const msgpack_object *o;
    size_t off = 0;
    uint32_t i;
    int failed;

    /* A row is the stored RetainedCompletionValue with its plan's key and
     * the time it was first retained in front. */
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, row->value, row->len, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        up.data.type != MSGPACK_OBJECT_MAP) {
        msgpack_unpacked_destroy(&up);
        return PROTO_EUNAVAILABLE;
    }
    o = &up.data;
    failed = msgpack_pack_map(pk, 3 + o->via.map.size) != 0 ||
             reply_kv_str(pk, "prepared_plan_id", row->plan) != 0 ||
             reply_kv_str(pk, "graph_hash", row->graph) != 0 ||
             reply_kv_uint(pk, "retained_at", (uint64_t)row->retained_at) != 0;
    for (i = 0; i < o->via.map.size && !failed; i++)
        failed = msgpack_pack_object(pk, o->via.map.ptr[i].key) != 0 ||
                 msgpack_pack_object(pk, o->via.map.ptr[i].val) != 0;
    msgpack_unpacked_destroy(&up);
    if (failed)
        return PROTO_ENOMEM;
    rs->n++;
    return 0;
}

/* The result around the rows of rs, and an error of the rows' making. */
static int
finish_rows(struct rows *rs, int rc, int truncated, msgpack_packer *pk,
            struct proto_err *err)
{
    if (rc == PROTO_ENOMEM)
        proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    else if (rc == PROTO_EUNAVAILABLE && err->message[0] == '\0')
        proto_err_set(err, PROTO_EUNAVAILABLE, NULL,
                      "a stored retained value does not decode");
    if (rc == 0 && reply_rows(pk, &rs->sb, rs->n, truncated) != 0)
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    msgpack_sbuffer_destroy(&rs->sb);
    return rc;
}

int
query_plan_plans(struct store *s, const struct store_filter *f,
                 uint64_t deadline_ms, msgpack_packer *pk,
                 struct proto_err *err)
{
    struct rows rs;
    int truncated = 0, rc;

    memset(&rs, 0, sizeof(rs));
    msgpack_sbuffer_init(&rs.sb);
    msgpack_packer_init(&rs.pk, &rs.sb, msgpack_sbuffer_write);
    proto_err_clear(err);
    rc = store_query_plans(s, f, deadline_ms, plans_row_cb, &rs, &truncated,
                           err);
    return finish_rows(&rs, rc, truncated, pk, err);
}

int
query_plan_retained(struct store *s, const struct store_filter *f,
                    uint64_t deadline_ms, msgpack_packer *pk,
                    struct proto_err *err)
{
    struct rows rs;
    int truncated = 0, rc;

    memset(&rs, 0, sizeof(rs));
    msgpack_sbuffer_init(&rs.sb);
    msgpack_packer_init(&rs.pk, &rs.sb, msgpack_sbuffer_write);
    proto_err_clear(err);
    rc = store_query_retained(s, f, deadline_ms, retained_row_cb, &rs,
                              &truncated, err);
    return finish_rows(&rs, rc, truncated, pk, err);
}

/* ---- the kinds (query_kind.h) ---- */

static int
parse_retained(struct query_args *a, const msgpack_object *body,
               struct proto_err *err)
{
    int rc = query_parse_common(a, body, err);

    if (rc == 0 && a->f.plan == NULL)
        return proto_err_set(err, PROTO_EINVALID, "plan",
                             "the retained query needs a plan");
    return rc;
}

static int
run_plans(struct query_args *a, struct store *s, msgpack_packer *pk,
          struct proto_err *err)
{
    return query_plan_plans(s, &a->f, a->deadline_ms, pk, err);
}

static int
run_retained(struct query_args *a, struct store *s, msgpack_packer *pk,
             struct proto_err *err)
{
    return query_plan_retained(s, &a->f, a->deadline_ms, pk, err);
}

const struct query_kind query_kind_plans = { "plans", query_parse_common,
                                             run_plans };
const struct query_kind query_kind_retained = { "retained", parse_retained,
                                                run_retained };
