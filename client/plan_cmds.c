/*
 * plan_cmds.c: plan files for `receiptctl import`.
 *
 * A plan file is told from a receipt file by its top-level keys: a map
 * with "nodes" is a plan, whatever its encoding. A JSON plan is decoded
 * with plan_decode_json() and sent in its canonical msgpack form; a
 * msgpack plan is checked with plan_decode() and sent as it is, so the
 * daemon sees (and would quarantine) the producer's own bytes. Plans are
 * sent one request at a time: a deployment has a few and each is
 * acknowledged only after the daemon committed it. Single-threaded.
 */
#include "plan_cmds.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <msgpack.h>

#include "envelope.h"
#include "mpcheck.h"
#include "mpobj.h"
#include "plan.h"
#include "plan_json.h"
#include "receipt.h"
#include "receipt_json.h"

/* A plan file larger than the protocol's hard frame ceiling could not be
 * sent anyway, so it is refused before it is read into memory. */
#define PLAN_FILE_MAX (64u << 20)

struct body {
    const char *p;
    size_t len;
};

static int
pack_raw_cb(msgpack_packer *pk, const void *arg)
{
    const struct body *b = arg;

    return pk->callback(pk->data, b->p, b->len);
}

/* Reads path into a malloc'd buffer. Returns 0, 1 when it is too large to
 * be a plan (left to the receipt import), or -1 with errno set. */
static int
read_file(const char *path, char **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    long n;

    *buf = NULL;
    *len = 0;
    if (f == NULL)
        return -1;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return -1;
    }
    if ((unsigned long)n > PLAN_FILE_MAX) {
        fclose(f);
        return 1;
    }
    *buf = malloc((size_t)n + 1);
    if (*buf == NULL) {
        fclose(f);
        errno = ENOMEM;
        return -1;
    }
    if (fread(*buf, 1, (size_t)n, f) != (size_t)n) {
        free(*buf);
        *buf = NULL;
        fclose(f);
        errno = EIO;
        return -1;
    }
    fclose(f);
    *len = (size_t)n;
    return 0;
}

/* The decoded plan file and the bytes to send. */
struct plan_file {
    struct plan *plan;
    struct json_object *json;
    msgpack_unpacked up;
    msgpack_sbuffer canon; /* JSON plans: the canonical encoding */
    struct body body;
};

static void
plan_file_clear(struct plan_file *pf)
{
    plan_free(pf->plan);
    pf->plan = NULL;
    if (pf->json != NULL)
        json_object_put(pf->json);
    pf->json = NULL;
    msgpack_unpacked_destroy(&pf->up);
    msgpack_sbuffer_destroy(&pf->canon);
}

/* A new outcome object for out: the file and, when p is not NULL, the
 * plan's id. Exits on no memory. */
static struct json_object *
outcome(const char *path, const struct plan *p)
{
    struct json_object *e = json_object_new_object();

    if (e == NULL)
        cli_oom();
    json_object_object_add(e, "file", json_object_new_string(path));
    if (p != NULL)
        json_object_object_add(
            e, "prepared_plan_id",
            json_object_new_string_len(p->prepared_plan_id.ptr,
                                       (int)p->prepared_plan_id.len));
    return e;
}

/*
 * Decodes buf when it holds a plan. Returns 0 when it is not a plan file,
 * 1 when it is one and pf is ready, 2 when it is one that breaks a rule
 * (printed, or added to out when out is not NULL).
 */
static int
load_plan(const char *path, const char *buf, size_t len, struct plan_file *pf,
          struct json_object *out)
{
    struct proto_err err;
    msgpack_packer pk;
    size_t off = 0;
    int rc;

    proto_err_clear(&err);
    if (len >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0)
        off = 3;
    while (off < len && strchr(" \t\r\n", buf[off]) != NULL)
        off++;
    if (off < len && buf[off] == '{') {
        if (receipt_json_parse(buf + off, len - off, &pf->json, &err) != 0 ||
            !json_object_is_type(pf->json, json_type_object) ||
            !json_object_object_get_ex(pf->json, "nodes", NULL))
            return 0;
        rc = plan_decode_json(pf->json, &pf->plan, &err);
        if (rc == 0) {
            msgpack_packer_init(&pk, &pf->canon, msgpack_sbuffer_write);
            if (plan_encode_canonical(pf->plan, &pk) != 0)
                cli_oom();
            pf->body.p = pf->canon.data;
            pf->body.len = pf->canon.size;
        }
    } else {
        off = 0;
        if (len == 0 || mpcheck(buf, len, &err) != 0 ||
            msgpack_unpack_next(&pf->up, buf, len, &off) !=
                MSGPACK_UNPACK_SUCCESS ||
            pf->up.data.type != MSGPACK_OBJECT_MAP ||
            mpobj_map_get(&pf->up.data, "nodes", NULL) == NULL)
            return 0;
        rc = plan_decode(&pf->up.data, &pf->plan, &err);
        pf->body.p = buf;
        pf->body.len = len;
    }
    if (rc == PROTO_ENOMEM)
        cli_oom();
    if (rc != 0) {
        if (out != NULL) {
            struct json_object *e = outcome(path, NULL);

            json_object_object_add(e, "code",
                                   json_object_new_string(proto_code_name(rc)));
            json_object_object_add(e, "path", json_object_new_string(err.path));
            json_object_object_add(e, "message",
                                   json_object_new_string(err.message));
            json_object_array_add(out, e);
        } else {
            printf("%s: %s: %s%s%s\n", path, proto_code_name(rc), err.path,
                   err.path[0] ? ": " : "", err.message);
        }
        return 2;
    }
    return 1;
}

/* Sends one plan; prints its outcome (or adds it to out when not NULL).
 * Returns 0 or an exit code. */
static int
send_plan(struct cli_opts *o, struct net_conn *c, int *open, const char *path,
          const struct plan_file *pf, struct json_object *out)
{
    const struct plan *p = pf->plan;
    const msgpack_object *created;
    struct net_reply rep;
    int rc, is_new;

    if (!*open) {
        if ((rc = cli_open_conn(o, c, o->source, 0)) != 0)
            return rc;
        *open = 1;
    }
    rc = cli_request(c, PROTO_OP_PLAN, "import", pack_raw_cb, &pf->body, &rep);
    if (rc == 0) {
        created = mpobj_map_get(rep.r.result, "created", NULL);
        is_new = created != NULL && created->type == MSGPACK_OBJECT_BOOLEAN &&
                 created->via.boolean;
        if (out != NULL) {
            struct json_object *e = outcome(path, p);

            json_object_object_add(e, "created",
                                   json_object_new_boolean(is_new));
            json_object_object_add(e, "nodes",
                                   json_object_new_uint64(p->nnodes));
            json_object_object_add(e, "values",
                                   json_object_new_uint64(p->nvalues));
            json_object_array_add(out, e);
        } else {
            printf("%s: plan %.*s %s (%" PRIu32 " nodes, %" PRIu64 " values)\n",
                   path, (int)p->prepared_plan_id.len, p->prepared_plan_id.ptr,
                   is_new ? "created" : "exists", p->nnodes, p->nvalues);
        }
    }
    net_reply_free(&rep);
    if (rc == CLI_EXIT_CONNECT) {
        net_close(c);
        *open = 0;
    }
    return rc;
}

int
plan_cmds_import(struct cli_opts *o, struct json_object *out)
{
    struct plan_file pf;
    struct net_conn c;
    int i, keep = 0, open = 0, rc = 0, r;
    size_t len;
    char *buf;

    memset(&c, 0, sizeof(c));
    for (i = 0; i < o->nargs; i++) {
        const char *path = o->args[i];

        if (strcmp(path, "-") == 0 || rc == CLI_EXIT_CONNECT) {
            o->args[keep++] = o->args[i];
            continue;
        }
        r = read_file(path, &buf, &len);
        if (r != 0) {
            if (r < 0) {
                fprintf(stderr, "receiptctl: import: %s: %s\n", path,
                        strerror(errno));
                rc = CLI_EXIT_USAGE;
            } else {
                o->args[keep++] = o->args[i];
            }
            continue;
        }
        memset(&pf, 0, sizeof(pf));
        msgpack_unpacked_init(&pf.up);
        msgpack_sbuffer_init(&pf.canon);
        r = load_plan(path, buf, len, &pf, out);
        if (r == 0) {
            o->args[keep++] = o->args[i];
        } else if (r == 2) {
            if (rc == 0)
                rc = CLI_EXIT_DAEMON;
        } else if (o->dry_run && out != NULL) {
            struct json_object *e = outcome(path, pf.plan);

            json_object_object_add(e, "dry_run", json_object_new_boolean(1));
            json_object_array_add(out, e);
        } else if (o->dry_run) {
            printf("%s: plan %.*s valid (dry run: nothing sent)\n", path,
                   (int)pf.plan->prepared_plan_id.len,
                   pf.plan->prepared_plan_id.ptr);
        } else {
            r = send_plan(o, &c, &open, path, &pf, out);
            if (r != 0 && (rc == 0 || r == CLI_EXIT_CONNECT))
                rc = r;
        }
        plan_file_clear(&pf);
        free(buf);
    }
    if (open)
        net_close(&c);
    o->nargs = keep;
    fflush(stdout);
    return rc;
}
