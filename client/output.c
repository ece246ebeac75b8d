/*
 * output.c: result formatting for receiptctl (tables, JSON, CSV,
 * Prometheus).
 *
 * A result's rows are msgpack maps. Tables and CSV flatten each row into
 * (dotted name, leaf object) pairs, collect the column names over all rows,
 * and order them with the kind's known columns first, so two runs over the
 * same data print the same columns in the same order even when the daemon
 * adds fields. Every cell is rendered once into an owned string before any
 * width is computed. Nothing here loses integer precision: integers are
 * printed from their u64/i64 values, never through a double. Single-threaded.
 */
#include "output.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <libsmartcols/libsmartcols.h>

#include "error.h"
#include "mpobj.h"
#include "receipt_types.h"
#include "timespec.h"

/* A growable byte string; always NUL-terminated when p != NULL. */
struct buf {
    char *p;
    size_t len;
    size_t cap;
    int oom;
};

static void
buf_add(struct buf *b, const char *s, size_t n)
{
    char *np;
    size_t cap;

    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        np = realloc(b->p, cap);
        if (np == NULL) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void
buf_puts(struct buf *b, const char *s)
{
    buf_add(b, s, strlen(s));
}

static void buf_printf(struct buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
buf_printf(struct buf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    buf_add(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* Takes the string out of b; NULL when memory ran out. */
static char *
buf_take(struct buf *b)
{
    char *p;

    if (b->oom) {
        free(b->p);
        return NULL;
    }
    if (b->p == NULL)
        return strdup("");
    p = b->p;
    b->p = NULL;
    return p;
}

int
output_format_from_name(const char *name)
{
    if (strcmp(name, "table") == 0)
        return OUTPUT_TABLE;
    if (strcmp(name, "json") == 0)
        return OUTPUT_JSON;
    if (strcmp(name, "csv") == 0)
        return OUTPUT_CSV;
    if (strcmp(name, "prometheus") == 0)
        return OUTPUT_PROMETHEUS;
    if (strcmp(name, "jsonl") == 0)
        return OUTPUT_JSONL;
    if (strcmp(name, "chart") == 0)
        return OUTPUT_CHART;
    return -1;
}

/* The shortest "%.*g" form that reads back as the same double, so JSON and
 * CSV neither lose precision nor print 0.10000000000000001. */
static void
double_repr(double d, char *out, size_t len, int json)
{
    int prec;

    if (isnan(d) || isinf(d)) {
        snprintf(out, len, "%s", isnan(d) ? "NaN" : d > 0 ? "+Inf" : "-Inf");
        return;
    }
    for (prec = 1; prec <= 17; prec++) {
        snprintf(out, len, "%.*g", prec, d);
        if (strtod(out, NULL) == d)
            break;
    }
    /* Keep a float looking like one in JSON, as serde_json does. */
    if (json && strpbrk(out, ".eE") == NULL)
        strncat(out, ".0", len - strlen(out) - 1);
}

static void
base64(struct buf *b, const unsigned char *p, size_t n)
{
    static const char tab[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char q[4];
    size_t i;

    for (i = 0; i + 2 < n; i += 3) {
        q[0] = tab[p[i] >> 2];
        q[1] = tab[(p[i] & 3) << 4 | p[i + 1] >> 4];
        q[2] = tab[(p[i + 1] & 15) << 2 | p[i + 2] >> 6];
        q[3] = tab[p[i + 2] & 63];
        buf_add(b, q, 4);
    }
    if (n - i == 1) {
        q[0] = tab[p[i] >> 2];
        q[1] = tab[(p[i] & 3) << 4];
        q[2] = q[3] = '=';
        buf_add(b, q, 4);
    } else if (n - i == 2) {
        q[0] = tab[p[i] >> 2];
        q[1] = tab[(p[i] & 3) << 4 | p[i + 1] >> 4];
        q[2] = tab[(p[i + 1] & 15) << 2];
        q[3] = '=';
        buf_add(b, q, 4);
    }
}

static struct json_object *
json_str_owned(struct buf *b)
{
    struct json_object *j;
    char *s = buf_take(b);

    if (s == NULL)
        return NULL;
    j = json_object_new_string(s);
    free(s);
    return j;
}

static char *json_text(const msgpack_object *o);

struct json_object *
output_to_json(const msgpack_object *o)
{
    struct json_object *j, *v;
    struct buf b = { 0 };
    char num[64], *key;
    uint32_t i;

    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        /* json-c represents null as a NULL object; the caller cannot tell
         * it from a failure, so wrap nothing else around it. */
        return NULL;
    case MSGPACK_OBJECT_BOOLEAN:
        return json_object_new_boolean(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        return json_object_new_uint64(o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return json_object_new_int64(o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        if (isnan(o->via.f64) || isinf(o->via.f64))
            return NULL;
        double_repr(o->via.f64, num, sizeof(num), 1);
        return json_object_new_double_s(o->via.f64, num);
    case MSGPACK_OBJECT_STR:
        return json_object_new_string_len(o->via.str.ptr, (int)o->via.str.size);
    case MSGPACK_OBJECT_BIN:
        base64(&b, (const unsigned char *)o->via.bin.ptr, o->via.bin.size);
        return json_str_owned(&b);
    case MSGPACK_OBJECT_EXT:
        base64(&b, (const unsigned char *)o->via.ext.ptr, o->via.ext.size);
        return json_str_owned(&b);
    case MSGPACK_OBJECT_ARRAY:
        j = json_object_new_array_ext((int)o->via.array.size);
        if (j == NULL)
            return NULL;
        for (i = 0; i < o->via.array.size; i++) {
            v = output_to_json(&o->via.array.ptr[i]);
            if (v == NULL && o->via.array.ptr[i].type != MSGPACK_OBJECT_NIL &&
                !(o->via.array.ptr[i].type == MSGPACK_OBJECT_FLOAT64 ||
                  o->via.array.ptr[i].type == MSGPACK_OBJECT_FLOAT32))
                goto fail;
            if (json_object_array_add(j, v) != 0) {
                json_object_put(v);
                goto fail;
            }
        }
        return j;
    case MSGPACK_OBJECT_MAP:
        j = json_object_new_object();
        if (j == NULL)
            return NULL;
        for (i = 0; i < o->via.map.size; i++) {
            const msgpack_object *k = &o->via.map.ptr[i].key;
            const msgpack_object *val = &o->via.map.ptr[i].val;

            if (k->type == MSGPACK_OBJECT_STR) {
                key = strndup(k->via.str.ptr, k->via.str.size);
            } else {
                key = json_text(k);
            }
            if (key == NULL)
                goto fail;
            v = output_to_json(val);
            if (v == NULL && val->type != MSGPACK_OBJECT_NIL &&
                val->type != MSGPACK_OBJECT_FLOAT64 &&
                val->type != MSGPACK_OBJECT_FLOAT32) {
                free(key);
                goto fail;
            }
            if (json_object_object_add(j, key, v) != 0) {
                free(key);
                json_object_put(v);
                goto fail;
            }
            free(key);
        }
        return j;
    }
    return NULL;
fail:
    json_object_put(j);
    return NULL;
}

/* Compact JSON text of o, owned by the caller; NULL on no memory. */
static char *
json_text(const msgpack_object *o)
{
    struct json_object *j = output_to_json(o);
    char *s;

    if (j == NULL)
        return strdup("null");
    s = strdup(json_object_to_json_string_ext(
        j, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(j);
    return s;
}

void
output_csv_field(FILE *out, const char *buf, size_t len)
{
    size_t i;

    if (strcspn(buf, ",\"\r\n") >= len && memchr(buf, '\0', len) == NULL) {
        fwrite(buf, 1, len, out);
        return;
    }
    putc('"', out);
    for (i = 0; i < len; i++) {
        if (buf[i] == '"')
            putc('"', out);
        putc(buf[i], out);
    }
    putc('"', out);
}

/* ---- flattening rows ---- */

struct leaf {
    char *name;
    const msgpack_object *v;
};

struct row {
    struct leaf *leaves;
    size_t n;
    size_t cap;
};

static int
row_add(struct row *r, const char *prefix, const char *name, size_t nlen,
        const msgpack_object *v)
{
    struct leaf *nl;
    struct buf b = { 0 };

    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 32;

        nl = realloc(r->leaves, cap * sizeof(*nl));
        if (nl == NULL)
            return -1;
        r->leaves = nl;
        r->cap = cap;
    }
    if (prefix != NULL) {
        buf_puts(&b, prefix);
        buf_add(&b, ".", 1);
    }
    buf_add(&b, name, nlen);
    r->leaves[r->n].name = buf_take(&b);
    if (r->leaves[r->n].name == NULL)
        return -1;
    r->leaves[r->n].v = v;
    r->n++;
    return 0;
}

/* Flattens map m into r: nested non-empty maps become dotted names. */
static int
flatten(struct row *r, const char *prefix, const msgpack_object *m)
{
    uint32_t i;
    int rc = 0;

    for (i = 0; i < m->via.map.size && rc == 0; i++) {
        const msgpack_object *k = &m->via.map.ptr[i].key;
        const msgpack_object *v = &m->via.map.ptr[i].val;
        char *kt = NULL;
        const char *kp;
        size_t kl;

        if (k->type == MSGPACK_OBJECT_STR) {
            kp = k->via.str.ptr;
            kl = k->via.str.size;
        } else {
            if ((kt = json_text(k)) == NULL)
                return -1;
            kp = kt;
            kl = strlen(kt);
        }
        if (v->type == MSGPACK_OBJECT_MAP && v->via.map.size > 0) {
            struct buf b = { 0 };
            char *np;

            if (prefix != NULL) {
                buf_puts(&b, prefix);
                buf_add(&b, ".", 1);
            }
            buf_add(&b, kp, kl);
            if ((np = buf_take(&b)) == NULL) {
                free(kt);
                return -1;
            }
            rc = flatten(r, np, v);
            free(np);
        } else {
            rc = row_add(r, prefix, kp, kl, v);
        }
        free(kt);
    }
    return rc;
}

static void
row_free(struct row *r)
{
    size_t i;

    for (i = 0; i < r->n; i++)
        free(r->leaves[i].name);
    free(r->leaves);
    r->leaves = NULL;
    r->n = r->cap = 0;
}

static const msgpack_object *
row_get(const struct row *r, const char *name)
{
    size_t i;

    for (i = 0; i < r->n; i++)
        if (strcmp(r->leaves[i].name, name) == 0)
            return r->leaves[i].v;
    return NULL;
}

/* ---- columns ---- */

/* The identifying fields of a receipt row, in PROTOCOL's order; then its
 * counters, latency and artifacts (receipt_full_cols()). */
static const char *const receipt_head[] = {
    "receipt_id",
    "received_at",
    "source",
    "seq",
    "fallback",
    "schema_version",
    "requested_backend",
    "executed_backend",
    "model_instance_id",
    "prepared_plan_id",
    "graph_hash",
    "tuning_profile",
    "stop_reason",
    "counter_coverage",
    NULL,
};

static const char *const artifact_cols[] = {
    "artifacts.temp_created_bytes",
    "artifacts.temp_removed_bytes",
    "artifacts.temp_retained_bytes",
    "artifacts.temp_cleanup_failures",
    NULL,
};

/* A receipt has 40-odd fields; a table shows the ones that identify it. */
static const char *const receipt_table_cols[] = {
    "receipt_id",       "received_at",
    "source",           "seq",
    "fallback",         "requested_backend",
    "executed_backend", "model_instance_id",
    "prepared_plan_id", "graph_hash",
    "stop_reason",      NULL,
};

#define EXTRA_COL "extra"

static const char *const fallbacks_tail[] = {
    "receipts", "fallback", "unproven", "clean", "fallback_rate", NULL,
};

/* not_applicable came later: after the columns scripts already read. */
static const char *const coverage_tail[] = {
    "counter", "bit", "receipts", "measured", "unknown",        "coverage",
    "sum",     "min", "max",      "mean",     "not_applicable", NULL,
};

/* The ranges last: they are the one column that can be long. */
static const char *const gaps_cols[] = {
    "source",           "first_seq",
    "last_seq",         "received",
    "missing_seqs",     "missing_truncated",
    "last_received_at", "missing",
    EXTRA_COL,          NULL,
};

/* attempts and last_attempt_at came later: after the columns scripts
 * already read by position. */
static const char *const quarantine_cols[] = {
    "id",   "time",     "source",          "op",
    "code", "path",     "message",         "size",
    "raw",  "attempts", "last_attempt_at", EXTRA_COL,
    NULL,
};

static const char *const plans_cols[] = {
    "prepared_plan_id", "graph_hash", "source",
    "registered_at",    "nodes",      "values",
    "retained",         EXTRA_COL,    NULL,
};

static const char *const retained_cols[] = {
    "prepared_plan_id", "graph_hash",     "retained_at", "value_id",
    "producer_node_id", "output_ordinal", "resource_id", "logical_offset_bytes",
    "tensor",           EXTRA_COL,        NULL,
};

static const char *const readback_cols[] = {
    "node_id",     "participant_index",
    "resource_id", "logical_offset_bytes",
    EXTRA_COL,     NULL,
};

static const char *const prunes_cols[] = {
    "id",
    "pruned_at",
    "cutoff_at",
    "rows",
    "oldest_received_at",
    "newest_received_at",
    "undelivered",
    EXTRA_COL,
    NULL,
};

/* The daemon's stats row, in the order it sends them. */
static const char *const stats_cols[] = {
    "uptime_ms",
    "started_at",
    "connections",
    "connections_total",
    "connections_refused",
    "frames",
    "framing_errors",
    "accepted",
    "rejected",
    "duplicates",
    "quarantined",
    "quarantine_rows",
    "quarantine_bytes",
    "quarantine_evictions",
    "stray_coverage",
    "unavailable",
    "commit_groups",
    "writer_cpu_us",
    "checkpoints",
    "checkpoint_us",
    "commit_failures",
    "store_failing",
    "store_last_error",
    "commit_last_ms",
    "commit_mean_ms",
    "commit_max_ms",
    "pending_writes",
    "pending_bytes",
    "store_size_bytes",
    "plans",
    "retained_values",
    "pruned",
    "prune_runs",
    "pruned_undelivered",
    "prune_failures",
    EXTRA_COL,
    NULL,
};

/* Group columns of fallbacks and coverage rows, by group_by. */
static const struct {
    const char *group_by;
    const char *cols[3];
} group_cols[] = {
    { "plan", { "prepared_plan_id", NULL } },
    { "graph", { "graph_hash", NULL } },
    { "model", { "model_instance_id", NULL } },
    { "backends", { "requested_backend", "executed_backend", NULL } },
    { "source", { "source", NULL } },
    { "none", { NULL } },
};

/* Up to 4 group columns (two keys), the bucket, the longer tail, extra
 * and NULL. */
#define GROUPED_MAX      20
#define RECEIPT_COLS_MAX (14 + RECEIPT_NCOUNTERS + RECEIPT_NARTIFACTS + 2)

static const char **
append(const char **dst, const char *const *src)
{
    while (*src != NULL)
        *dst++ = *src++;
    return dst;
}

static const char *const *
receipt_full_cols(void)
{
    static const char *cols[RECEIPT_COLS_MAX];
    const char **p;
    size_t i;

    if (cols[0] != NULL)
        return cols;
    p = append(cols, receipt_head);
    for (i = 0; i < RECEIPT_NCOUNTERS; i++)
        *p++ = receipt_counters[i].path;
    p = append(p, artifact_cols);
    *p++ = EXTRA_COL;
    *p = NULL;
    return cols;
}

static int
is_receipt_kind(const struct output_spec *spec)
{
    return strcmp(spec->kind, "receipts") == 0 ||
           (strcmp(spec->kind, "fallbacks") == 0 && spec->group_by != NULL &&
            strcmp(spec->group_by, "none") == 0);
}

const char *const *
output_columns(const struct output_spec *spec)
{
    static const char *grouped[GROUPED_MAX];
    const char *gb;
    const char **p;
    size_t i, k;

    if (is_receipt_kind(spec))
        return receipt_full_cols();
    if (strcmp(spec->kind, "fallbacks") == 0 ||
        strcmp(spec->kind, "coverage") == 0) {
        gb = spec->group_by != NULL                 ? spec->group_by
             : strcmp(spec->kind, "fallbacks") == 0 ? "plan"
                                                    : "none";
        /* One key, or two joined by a comma: their columns in order. */
        p = grouped;
        for (k = 0; k < 2 && *gb != '\0'; k++) {
            size_t len = strcspn(gb, ",");

            for (i = 0; i < sizeof(group_cols) / sizeof(group_cols[0]); i++)
                if (strlen(group_cols[i].group_by) == len &&
                    strncmp(group_cols[i].group_by, gb, len) == 0)
                    p = append(p, group_cols[i].cols);
            gb += len + (gb[len] == ',');
        }
        /* A series (`every`): the bucket's start after the group. */
        if (spec->every != 0)
            *p++ = "bucket";
        p = append(p, strcmp(spec->kind, "fallbacks") == 0 ? fallbacks_tail
                                                           : coverage_tail);
        *p++ = EXTRA_COL;
        *p = NULL;
        return grouped;
    }
    if (strcmp(spec->kind, "gaps") == 0)
        return gaps_cols;
    if (strcmp(spec->kind, "quarantine") == 0)
        return quarantine_cols;
    if (strcmp(spec->kind, "plans") == 0)
        return plans_cols;
    if (strcmp(spec->kind, "retained") == 0)
        return retained_cols;
    if (strcmp(spec->kind, "readback") == 0)
        return readback_cols;
    if (strcmp(spec->kind, "prunes") == 0)
        return prunes_cols;
    if (strcmp(spec->kind, "stats") == 0)
        return stats_cols;
    return NULL;
}

struct cols {
    char **names;
    size_t n;
    size_t cap;
};

static int
cols_has(const struct cols *c, const char *name)
{
    size_t i;

    for (i = 0; i < c->n; i++)
        if (strcmp(c->names[i], name) == 0)
            return 1;
    return 0;
}

static int
cols_add(struct cols *c, const char *name)
{
    char **nn;

    if (cols_has(c, name))
        return 0;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 32;

        nn = realloc(c->names, cap * sizeof(*nn));
        if (nn == NULL)
            return -1;
        c->names = nn;
        c->cap = cap;
    }
    if ((c->names[c->n] = strdup(name)) == NULL)
        return -1;
    c->n++;
    return 0;
}

static void
cols_free(struct cols *c)
{
    size_t i;

    for (i = 0; i < c->n; i++)
        free(c->names[i]);
    free(c->names);
}

static int
rows_have(const struct row *rows, size_t nrows, const char *name)
{
    size_t i;

    for (i = 0; i < nrows; i++)
        if (row_get(&rows[i], name) != NULL)
            return 1;
    return 0;
}

/*
 * Orders columns: the known ones present in any row, in the known order,
 * then (unless only_known) the rest in order of first appearance.
 */
static int
choose_cols(struct cols *c, const struct row *rows, size_t nrows,
            const char *const *known, int only_known)
{
    size_t i, j;

    /* With no rows at all, a CSV still gets the kind's header line, so a
     * script reading it finds the columns it expects. */
    for (i = 0; known != NULL && known[i] != NULL; i++)
        if ((nrows == 0 || rows_have(rows, nrows, known[i])) &&
            cols_add(c, known[i]) != 0)
            return -1;
    if (only_known && known != NULL)
        return 0;
    for (i = 0; i < nrows; i++)
        for (j = 0; j < rows[i].n; j++)
            if (cols_add(c, rows[i].leaves[j].name) != 0)
                return -1;
    return 0;
}

/* ---- cells ---- */

enum cell_kind { CELL_ABSENT, CELL_NIL, CELL_NUM, CELL_TEXT };

/* render()'s format for output_record(): a table cell, except that strings
 * of digits keep their quotes. */
#define FORMAT_RECORD 100

struct cell {
    char *text; /* owned; NULL for CELL_ABSENT and CELL_NIL */
    int kind;
};

static const char *
last_part(const char *name)
{
    const char *dot = strrchr(name, '.');

    return dot ? dot + 1 : name;
}

static int
is_time_col(const char *name)
{
    const char *p = last_part(name);
    size_t n = strlen(p);

    return strcmp(p, "time") == 0 || strcmp(p, "bucket") == 0 ||
           (n > 3 && strcmp(p + n - 3, "_at") == 0);
}

static int
is_ratio_col(const char *name)
{
    const char *p = last_part(name);

    return strcmp(p, "coverage") == 0 || strcmp(p, "fallback_rate") == 0;
}

static int
all_digits(const char *p, size_t n)
{
    size_t i;

    if (n == 0)
        return 0;
    for (i = 0; i < n; i++)
        if (!isdigit((unsigned char)p[i]))
            return 0;
    return 1;
}

/*
 * A ratio as a percentage with two significant digits at least, so a rare
 * fallback reads 0.0016%, not 0.0%: one decimal from 1% up, more below;
 * only 0 is 0% and only 1 is 100%.
 */
static void
percent(struct buf *b, double r)
{
    double p = r * 100.0, q;
    char tmp[64];
    int d = 1;

    if (!(p > 0)) {
        buf_puts(b, "0%");
        return;
    }
    if (r >= 1) {
        buf_puts(b, "100%");
        return;
    }
    for (q = p; q < 1 && d < 17; q *= 10)
        d++;
    /* 99.96% is not 100.0%. */
    for (;;) {
        snprintf(tmp, sizeof(tmp), "%.*f", d, p);
        if (strncmp(tmp, "100", 3) != 0 || d >= 17)
            break;
        d++;
    }
    buf_printf(b, "%s%%", tmp);
}

void
output_percent(char *out, size_t cap, double r)
{
    struct buf b = { 0 };
    char *p;

    percent(&b, r);
    p = buf_take(&b);
    snprintf(out, cap, "%s", p != NULL ? p : "?");
    free(p);
}

/* An array of [from, to] pairs (the missing ranges of `gaps`) reads better
 * as "3-5,9" in a table than as nested JSON. */
static int
range_list(struct buf *b, const msgpack_object *a)
{
    uint32_t i;

    for (i = 0; i < a->via.array.size; i++) {
        const msgpack_object *p = &a->via.array.ptr[i];

        if (p->type != MSGPACK_OBJECT_ARRAY || p->via.array.size != 2 ||
            p->via.array.ptr[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
            p->via.array.ptr[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
            return -1;
    }
    for (i = 0; i < a->via.array.size; i++) {
        uint64_t from = a->via.array.ptr[i].via.array.ptr[0].via.u64;
        uint64_t to = a->via.array.ptr[i].via.array.ptr[1].via.u64;

        if (i > 0)
            buf_add(b, ",", 1);
        if (from == to)
            buf_printf(b, "%" PRIu64, from);
        else
            buf_printf(b, "%" PRIu64 "-%" PRIu64, from, to);
    }
    return 0;
}

/* Escapes control characters so one row stays one table line. */
static void
table_text(struct buf *b, const char *p, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];

        if (ch == '\n')
            buf_puts(b, "\\n");
        else if (ch == '\t')
            buf_puts(b, "\\t");
        else if (ch == '\r')
            buf_puts(b, "\\r");
        else if (ch < 0x20 || ch == 0x7f)
            buf_printf(b, "\\x%02x", ch);
        else
            buf_add(b, p + i, 1);
    }
}

static int
render(struct cell *c, const char *col, const msgpack_object *v, int format)
{
    struct buf b = { 0 };
    char tmp[64];
    int table = format == OUTPUT_TABLE || format == FORMAT_RECORD;

    c->kind = CELL_TEXT;
    c->text = NULL;
    if (v == NULL) {
        c->kind = CELL_ABSENT;
        return 0;
    }
    switch (v->type) {
    case MSGPACK_OBJECT_NIL:
        c->kind = CELL_NIL;
        return 0;
    case MSGPACK_OBJECT_BOOLEAN:
        buf_puts(&b, v->via.boolean ? "true" : "false");
        break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        if (table && is_time_col(col)) {
            buf_puts(&b, timespec_format(v->via.u64, tmp, sizeof(tmp)));
        } else {
            buf_printf(&b, "%" PRIu64, v->via.u64);
            c->kind = CELL_NUM;
        }
        break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        buf_printf(&b, "%" PRId64, v->via.i64);
        c->kind = CELL_NUM;
        break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        c->kind = CELL_NUM;
        if (table && is_ratio_col(col))
            percent(&b, v->via.f64);
        else if (table)
            buf_printf(&b, "%.2f", v->via.f64);
        else {
            double_repr(v->via.f64, tmp, sizeof(tmp), 0);
            buf_puts(&b, tmp);
        }
        break;
    case MSGPACK_OBJECT_STR:
        /* A record shows what a payload holds, so a number sent as a
         * string (the usual mistake) keeps its quotes there. */
        if (format == FORMAT_RECORD &&
            all_digits(v->via.str.ptr, v->via.str.size)) {
            buf_add(&b, "\"", 1);
            buf_add(&b, v->via.str.ptr, v->via.str.size);
            buf_add(&b, "\"", 1);
            break;
        }
        if (all_digits(v->via.str.ptr, v->via.str.size))
            c->kind = CELL_NUM;
        if (table)
            table_text(&b, v->via.str.ptr, v->via.str.size);
        else
            buf_add(&b, v->via.str.ptr, v->via.str.size);
        break;
    case MSGPACK_OBJECT_BIN:
        if (table)
            buf_printf(&b, "<%" PRIu32 " bytes>", v->via.bin.size);
        else
            base64(&b, (const unsigned char *)v->via.bin.ptr, v->via.bin.size);
        break;
    case MSGPACK_OBJECT_ARRAY:
        if (table && v->via.array.size > 0 && range_list(&b, v) == 0)
            break;
        /* fall through */
    default: {
        char *j = json_text(v);

        if (j == NULL)
            return -1;
        if (table)
            table_text(&b, j, strlen(j));
        else
            buf_puts(&b, j);
        free(j);
        break;
    }
    }
    c->text = buf_take(&b);
    return c->text == NULL ? -1 : 0;
}

static const char *
cell_str(const struct cell *c)
{
    return c->kind == CELL_ABSENT || c->kind == CELL_NIL ? "-" : c->text;
}

/*
 * Tables go through util-linux's libsmartcols, which measures display
 * width (CJK and emoji take two columns), and on a terminal narrower than
 * the table truncates the text columns rather than wrapping every line;
 * piped, nothing is cut. A column with any number in it is right-aligned
 * throughout, header and nils included, so the digits line up.
 */
static int
print_table(FILE *out, const struct cols *cols, const struct cell *cells,
            size_t nrows, int headings)
{
    struct libscols_table *tb = scols_new_table();
    struct libscols_line *ln;
    size_t i, j;
    int flags, rc = -1;

    if (tb == NULL)
        return -1;
    scols_table_set_stream(tb, out);
    scols_table_set_column_separator(tb, "  ");
    scols_table_enable_noheadings(tb, !headings);
    for (j = 0; j < cols->n; j++) {
        flags = SCOLS_FL_TRUNC;
        for (i = 0; i < nrows; i++)
            if (cells[i * cols->n + j].kind == CELL_NUM)
                flags = SCOLS_FL_RIGHT;
        if (scols_table_new_column(tb, cols->names[j], 0, flags) == NULL)
            goto done;
    }
    for (i = 0; i < nrows; i++) {
        if ((ln = scols_table_new_line(tb, NULL)) == NULL)
            goto done;
        for (j = 0; j < cols->n; j++)
            if (scols_line_set_data(ln, j, cell_str(&cells[i * cols->n + j])) !=
                0)
                goto done;
    }
    rc = scols_print_table(tb) == 0 ? 0 : -1;
done:
    scols_unref_table(tb);
    return rc;
}

static void
print_csv(FILE *out, const struct cols *cols, const struct cell *cells,
          size_t nrows, int header)
{
    size_t i, j;

    for (j = 0; j < cols->n && header; j++) {
        if (j > 0)
            putc(',', out);
        output_csv_field(out, cols->names[j], strlen(cols->names[j]));
    }
    if (header)
        putc('\n', out);
    for (i = 0; i < nrows; i++) {
        for (j = 0; j < cols->n; j++) {
            const struct cell *c = &cells[i * cols->n + j];

            if (j > 0)
                putc(',', out);
            if (c->text != NULL)
                output_csv_field(out, c->text, strlen(c->text));
        }
        putc('\n', out);
    }
}

/* `stats` is one row of many fields: a two-column name/value table reads
 * better than one very wide line. Numbers (ASCII) line up on the widest
 * number, whatever the length of the text values. */
static int
print_vertical(FILE *out, const struct cols *cols, struct cell *cells)
{
    struct cols two = { 0 };
    struct cell *kv;
    size_t j, wv = 0, n;
    char *t;
    int rc = -1;

    for (j = 0; j < cols->n; j++)
        if (cells[j].kind == CELL_NUM && strlen(cell_str(&cells[j])) > wv)
            wv = strlen(cell_str(&cells[j]));
    kv = calloc(cols->n ? 2 * cols->n : 1, sizeof(*kv));
    if (kv == NULL || cols_add(&two, "name") != 0 ||
        cols_add(&two, "value") != 0)
        goto done;
    for (j = 0; j < cols->n; j++) {
        kv[2 * j].kind = CELL_TEXT;
        kv[2 * j].text = cols->names[j];
        kv[2 * j + 1].kind = CELL_TEXT;
        kv[2 * j + 1].text = (char *)cell_str(&cells[j]);
        if (cells[j].kind == CELL_NUM && (n = strlen(cells[j].text)) < wv) {
            if ((t = malloc(wv + 1)) == NULL)
                goto done;
            memset(t, ' ', wv - n);
            memcpy(t + wv - n, cells[j].text, n + 1);
            free(cells[j].text);
            cells[j].text = t;
            kv[2 * j + 1].text = t;
        }
    }
    rc = print_table(out, &two, kv, cols->n, 0);
done:
    free(kv);
    cols_free(&two);
    return rc;
}

static int
get_rows(const msgpack_object *result, const msgpack_object **rows,
         int *truncated, char *err, size_t err_len)
{
    const msgpack_object *r, *t;
    uint32_t i;

    if (result == NULL || result->type != MSGPACK_OBJECT_MAP)
        return proto_errbuf(err, err_len, "the reply's result is not a map");
    r = mpobj_map_get(result, "rows", NULL);
    if (r == NULL || r->type != MSGPACK_OBJECT_ARRAY)
        return proto_errbuf(err, err_len,
                            "the reply's result has no \"rows\" array");
    for (i = 0; i < r->via.array.size; i++)
        if (r->via.array.ptr[i].type != MSGPACK_OBJECT_MAP)
            return proto_errbuf(err, err_len, "row %" PRIu32 " is not a map",
                                i);
    t = mpobj_map_get(result, "truncated", NULL);
    *truncated =
        t != NULL && t->type == MSGPACK_OBJECT_BOOLEAN && t->via.boolean;
    *rows = r;
    return 0;
}

static int
is_receipt_rows(const msgpack_object *rows)
{
    return rows->via.array.size > 0 &&
           mpobj_map_get(&rows->via.array.ptr[0], "receipt_id", NULL) != NULL;
}

/* The coverage bit of a counter column ("counters.decode_steps"), or -1. */
static int
counter_bit(const char *name)
{
    int i;

    if (strncmp(name, "counters.", 9) != 0 && strncmp(name, "latency.", 8) != 0)
        return -1;
    for (i = 0; i < RECEIPT_NCOUNTERS; i++)
        if (strcmp(receipt_counters[i].path, name) == 0)
            return i;
    return -1;
}

/* The row's counter_coverage, when it has one. */
static int
row_coverage(const msgpack_object *row, uint64_t *mask)
{
    const msgpack_object *c = mpobj_map_get(row, "counter_coverage", NULL);

    if (c == NULL || c->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return 0;
    *mask = c->via.u64;
    return 1;
}

/*
 * In a receipt row turned into JSON, a counter whose coverage bit is clear
 * becomes null: the 0 a producer had to send for it is no measurement.
 */
static void
null_unmeasured(struct json_object *row, const msgpack_object *src)
{
    struct json_object *sec;
    uint64_t mask;
    char part[32];
    const char *dot;
    int i;

    if (!row_coverage(src, &mask))
        return;
    for (i = 0; i < RECEIPT_NCOUNTERS; i++) {
        if (mask >> i & 1)
            continue;
        dot = strchr(receipt_counters[i].path, '.');
        snprintf(part, sizeof(part), "%.*s",
                 (int)(dot - receipt_counters[i].path),
                 receipt_counters[i].path);
        if (json_object_object_get_ex(row, part, &sec) &&
            json_object_is_type(sec, json_type_object) &&
            json_object_object_get_ex(sec, dot + 1, NULL))
            json_object_object_add(sec, dot + 1, NULL);
    }
}

/* The result (or one row) as JSON, receipt counters nulled as above. */
static struct json_object *
result_json(const msgpack_object *result, const msgpack_object *rows)
{
    struct json_object *j = output_to_json(result), *jrows;
    uint32_t i;

    if (j == NULL || !json_object_object_get_ex(j, "rows", &jrows))
        return j;
    for (i = 0; i < rows->via.array.size; i++)
        null_unmeasured(json_object_array_get_idx(jrows, i),
                        &rows->via.array.ptr[i]);
    return j;
}

static int
print_jsonl(FILE *out, const msgpack_object *rows)
{
    struct json_object *j;
    uint32_t i;

    for (i = 0; i < rows->via.array.size; i++) {
        if ((j = output_to_json(&rows->via.array.ptr[i])) == NULL)
            return -1;
        null_unmeasured(j, &rows->via.array.ptr[i]);
        fputs(json_object_to_json_string_ext(
                  j, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE),
              out);
        putc('\n', out);
        json_object_put(j);
    }
    return 0;
}

/* Whether leaf name belongs to one of the fixed columns (itself, or under
 * a map-valued column such as "tensor"). */
static int
in_fixed(const char *const *fixed, const char *name)
{
    size_t i, n;

    for (i = 0; fixed[i] != NULL; i++) {
        n = strlen(fixed[i]);
        if (strncmp(fixed[i], name, n) == 0 &&
            (name[n] == '\0' || name[n] == '.'))
            return 1;
    }
    return 0;
}

/* The leaves of a row that no fixed column names, as one JSON object;
 * "" when there are none. NULL on no memory. */
static char *
extra_text(const char *const *fixed, const struct row *r)
{
    struct json_object *j = NULL;
    char *s;
    size_t i;

    for (i = 0; i < r->n; i++) {
        if (in_fixed(fixed, r->leaves[i].name))
            continue;
        if (j == NULL && (j = json_object_new_object()) == NULL)
            return NULL;
        json_object_object_add(j, r->leaves[i].name,
                               output_to_json(r->leaves[i].v));
    }
    if (j == NULL)
        return strdup("");
    s = strdup(json_object_to_json_string_ext(
        j, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(j);
    return s;
}

/* The value of column col in a row, NULL for a counter whose coverage bit
 * is clear (shown as "-" in tables). */
static const msgpack_object *
measured(const msgpack_object *row, const struct row *flat, const char *col)
{
    const msgpack_object *v = row_get(flat, col);
    uint64_t mask;
    int bit = counter_bit(col);

    if (v != NULL && bit >= 0 && row_coverage(row, &mask) && !(mask >> bit & 1))
        return NULL;
    return v;
}

/* One CSV cell of a fixed column. */
static int
fixed_cell(struct cell *c, const char *const *fixed, const char *col,
           const msgpack_object *row, const struct row *flat)
{
    const msgpack_object *v;
    uint64_t mask;
    int bit;

    if (strcmp(col, EXTRA_COL) == 0) {
        c->kind = CELL_TEXT;
        c->text = extra_text(fixed, flat);
        return c->text == NULL ? -1 : 0;
    }
    v = row_get(flat, col);
    if (v == NULL && strchr(col, '.') == NULL)
        v = mpobj_map_get(row, col, NULL); /* a map-valued column */
    bit = counter_bit(col);
    if (v != NULL && bit >= 0 && row_coverage(row, &mask) && !(mask >> bit & 1))
        v = NULL;
    return render(c, col, v, OUTPUT_CSV);
}

/* n with a comma every three digits. */
static void
grouped(uint64_t n, struct buf *b)
{
    char d[32];
    size_t len, i;

    len = (size_t)snprintf(d, sizeof(d), "%" PRIu64, n);
    for (i = 0; i < len; i++) {
        if (i > 0 && (len - i) % 3 == 0)
            buf_add(b, ",", 1);
        buf_add(b, d + i, 1);
    }
}

static int
ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);

    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/*
 * A stats cell for people: integers with digit grouping, and units from
 * the field's name (bytes in IEC units, _ms and _us as such). JSON, CSV
 * and Prometheus keep the exact numbers.
 */
static int
stats_cell(struct cell *c, const char *col, const msgpack_object *v)
{
    static const char *const iec[] = {
        "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"
    };
    struct buf b = { 0 };
    const char *unit = ends_with(col, "_ms")   ? " ms"
                       : ends_with(col, "_us") ? " us"
                                               : "";
    double x;
    int k;

    if (c->kind != CELL_NUM || v == NULL || is_time_col(col))
        return 0;
    if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
        ends_with(col, "_bytes") && v->via.u64 >= 1024) {
        x = (double)v->via.u64;
        for (k = -1; x >= 1024.0 && k < 5; k++)
            x /= 1024.0;
        buf_printf(&b, "%.1f %s", x, iec[k]);
    } else if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        grouped(v->via.u64, &b);
        buf_puts(&b, ends_with(col, "_bytes") ? " B" : unit);
    } else if (v->type == MSGPACK_OBJECT_FLOAT32 ||
               v->type == MSGPACK_OBJECT_FLOAT64) {
        buf_printf(&b, "%.2f%s", v->via.f64, unit);
    } else {
        return 0;
    }
    free(c->text);
    c->text = buf_take(&b);
    return c->text == NULL ? -1 : 0;
}

/* The columns of a comma-separated list, in its order. */
static int
add_chosen(struct cols *c, const char *list)
{
    const char *p = list;
    char name[256];
    size_t n;

    while (*p != '\0') {
        n = strcspn(p, ",");
        snprintf(name, sizeof(name), "%.*s", (int)n, p);
        if (n > 0 && cols_add(c, name) != 0)
            return -1;
        p += n;
        if (*p == ',')
            p++;
    }
    return 0;
}

int
output_check_columns(const struct output_spec *spec, char *err, size_t err_len)
{
    const char *const *fixed = output_columns(spec);
    const char *p = spec->columns;
    size_t n, i;

    if (*p == '\0')
        return proto_errbuf(err, err_len, "no column named");
    while (*p != '\0') {
        n = strcspn(p, ",");
        if (n == 0)
            return proto_errbuf(err, err_len, "an empty column name in \"%s\"",
                                spec->columns);
        for (i = 0; fixed != NULL && fixed[i] != NULL; i++)
            if (strlen(fixed[i]) == n && strncmp(fixed[i], p, n) == 0)
                break;
        if (fixed != NULL && fixed[i] == NULL)
            return proto_errbuf(err, err_len,
                                "%s has no column \"%.*s\" (its columns: the "
                                "header of --format csv)",
                                spec->kind, (int)n, p);
        p += n;
        if (*p == ',')
            p++;
    }
    return 0;
}

/* The table's rows with the result's totals after them (fallbacks: one
 * map; coverage by group: a row per counter), each labelled "(total)" in
 * the first group column. The objects point into the result. */
struct totals {
    msgpack_object rows;   /* the array to print */
    msgpack_object *v;     /* its elements; owned */
    msgpack_object_kv *kv; /* the total rows' pairs; owned */
};

#define TOTAL_LABEL "(total)"

msgpack_object
output_str_object(const char *s)
{
    msgpack_object o;

    o.type = MSGPACK_OBJECT_STR;
    o.via.str.ptr = s;
    o.via.str.size = (uint32_t)strlen(s);
    return o;
}

/* Returns 1 when t->rows holds rows and totals, 0 when there are none
 * (no "total", or no group column to label it in), -1 when out of
 * memory. */
static int
add_totals(const struct output_spec *spec, const msgpack_object *result,
           const msgpack_object *rows, struct totals *t)
{
    const char *const *fixed = output_columns(spec);
    const msgpack_object *tot = mpobj_map_get(result, "total", NULL), *items;
    uint32_t n, i, k, nkv = 0, at = 0;
    size_t g;
    int grouped = 0;

    memset(t, 0, sizeof(*t));
    if (tot == NULL || fixed == NULL || fixed[0] == NULL)
        return 0;
    for (g = 0; g < sizeof(group_cols) / sizeof(group_cols[0]); g++)
        grouped |= group_cols[g].cols[0] != NULL &&
                   strcmp(group_cols[g].cols[0], fixed[0]) == 0;
    if (!grouped)
        return 0;
    if (tot->type == MSGPACK_OBJECT_MAP) {
        items = tot;
        n = 1;
    } else if (tot->type == MSGPACK_OBJECT_ARRAY) {
        items = tot->via.array.ptr;
        n = tot->via.array.size;
    } else {
        return 0;
    }
    for (k = 0; k < n; k++) {
        if (items[k].type != MSGPACK_OBJECT_MAP)
            return 0;
        nkv += items[k].via.map.size + 1;
    }
    t->v = calloc((size_t)rows->via.array.size + n, sizeof(*t->v));
    t->kv = calloc(nkv ? nkv : 1, sizeof(*t->kv));
    if (t->v == NULL || t->kv == NULL)
        return -1;
    for (i = 0; i < rows->via.array.size; i++)
        t->v[i] = rows->via.array.ptr[i];
    for (k = 0; k < n; k++) {
        msgpack_object *o = &t->v[rows->via.array.size + k];

        o->type = MSGPACK_OBJECT_MAP;
        o->via.map.ptr = &t->kv[at];
        o->via.map.size = items[k].via.map.size + 1;
        t->kv[at].key = output_str_object(fixed[0]);
        t->kv[at++].val = output_str_object(TOTAL_LABEL);
        for (i = 0; i < items[k].via.map.size; i++)
            t->kv[at++] = items[k].via.map.ptr[i];
    }
    t->rows.type = MSGPACK_OBJECT_ARRAY;
    t->rows.via.array.ptr = t->v;
    t->rows.via.array.size = rows->via.array.size + n;
    return 1;
}

int
output_result(FILE *out, int format, const struct output_spec *spec,
              const msgpack_object *result, char *err, size_t err_len)
{
    const char *const *fixed = output_columns(spec);
    const char *kind = spec->kind;
    const msgpack_object *rows;
    struct row *flat = NULL;
    struct cols cols = { 0 };
    struct cell *cells = NULL;
    struct totals tot = { 0 };
    size_t nrows = 0, i, j;
    int truncated, rc = -1;

    if (get_rows(result, &rows, &truncated, err, err_len) != 0)
        return -1;
    if (format == OUTPUT_JSON) {
        struct json_object *j_res = result_json(result, rows);

        if (j_res == NULL)
            return proto_errbuf(err, err_len, "out of memory");
        fputs(json_object_to_json_string_ext(
                  j_res, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                             JSON_C_TO_STRING_NOSLASHESCAPE),
              out);
        putc('\n', out);
        json_object_put(j_res);
        return 0;
    }
    if (format == OUTPUT_JSONL)
        return print_jsonl(out, rows) == 0
                   ? 0
                   : proto_errbuf(err, err_len, "out of memory");
    if (format == OUTPUT_CHART)
        return output_chart(out, spec, result, err, err_len);
    if (format != OUTPUT_TABLE && format != OUTPUT_CSV)
        return proto_errbuf(err, err_len, "this format is only for stats");
    /* People get the totals as the table's last rows; CSV stays the
     * groups alone, and JSON carries "total" as the daemon sent it. */
    if (format == OUTPUT_TABLE && rows->via.array.size > 0) {
        int got = add_totals(spec, result, rows, &tot);

        if (got < 0)
            goto oom;
        if (got > 0)
            rows = &tot.rows;
    }

    nrows = rows->via.array.size;
    if (nrows > 0 && (flat = calloc(nrows, sizeof(*flat))) == NULL)
        goto oom;
    for (i = 0; i < nrows; i++)
        if (flatten(&flat[i], NULL, &rows->via.array.ptr[i]) != 0)
            goto oom;
    if (spec->columns != NULL) {
        if (add_chosen(&cols, spec->columns) != 0)
            goto oom;
    } else if (format == OUTPUT_CSV && fixed != NULL) {
        for (i = 0; fixed[i] != NULL; i++)
            if (cols_add(&cols, fixed[i]) != 0)
                goto oom;
    } else if (choose_cols(&cols, flat, nrows,
                           is_receipt_kind(spec) || is_receipt_rows(rows)
                               ? receipt_table_cols
                               : fixed,
                           format == OUTPUT_TABLE && (is_receipt_rows(rows) ||
                                                      is_receipt_kind(spec))) !=
               0) {
        goto oom;
    }
    if (nrows * cols.n > 0 &&
        (cells = calloc(nrows * cols.n, sizeof(*cells))) == NULL)
        goto oom;
    for (i = 0; i < nrows; i++)
        for (j = 0; j < cols.n; j++)
            if ((format == OUTPUT_CSV && fixed != NULL
                     ? fixed_cell(&cells[i * cols.n + j], fixed, cols.names[j],
                                  &rows->via.array.ptr[i], &flat[i])
                     : render(&cells[i * cols.n + j], cols.names[j],
                              measured(&rows->via.array.ptr[i], &flat[i],
                                       cols.names[j]),
                              format)) != 0)
                goto oom;

    if (format == OUTPUT_CSV) {
        print_csv(out, &cols, cells, nrows, !spec->no_header);
    } else if (nrows == 0) {
        fputs("(no rows)\n", out);
    } else if (nrows == 1 && strcmp(kind, "stats") == 0) {
        for (j = 0; j < cols.n; j++)
            if (stats_cell(&cells[j], cols.names[j],
                           row_get(&flat[0], cols.names[j])) != 0)
                goto oom;
        if (print_vertical(out, &cols, cells) != 0)
            goto oom;
    } else if (print_table(out, &cols, cells, nrows, !spec->no_header) != 0) {
        goto oom;
    }
    rc = 0;
    goto done;
oom:
    proto_errbuf(err, err_len, "out of memory while formatting the result");
done:
    if (cells != NULL)
        for (i = 0; i < nrows * cols.n; i++)
            free(cells[i].text);
    free(cells);
    for (i = 0; flat != NULL && i < nrows; i++)
        row_free(&flat[i]);
    free(flat);
    cols_free(&cols);
    free(tot.v);
    free(tot.kv);
    return rc;
}

/* The smallest receipt_id among rows (the largest with max), the cursor
 * of the next page. */
static int
min_receipt_id(const msgpack_object *rows, uint64_t *out, int max)
{
    const msgpack_object *v;
    uint32_t i;
    int found = 0;

    for (i = 0; i < rows->via.array.size; i++) {
        v = mpobj_map_get(&rows->via.array.ptr[i], "receipt_id", NULL);
        if (v != NULL && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
            (!found || (max ? v->via.u64 > *out : v->via.u64 < *out))) {
            *out = v->via.u64;
            found = 1;
        }
    }
    return found;
}

int
output_truncation(FILE *out, const struct output_spec *spec,
                  const msgpack_object *result)
{
    const msgpack_object *rows, *last, *v;
    const char *kind = spec->kind;
    uint32_t n, i;
    uint64_t cursor = 0;
    int truncated, cut = 0;

    if (get_rows(result, &rows, &truncated, NULL, 0) != 0)
        return 0;
    n = rows->via.array.size;
    /* gaps bounds the ranges of each source too; missing_seqs still
     * counts them all. */
    for (i = 0; strcmp(kind, "gaps") == 0 && i < n; i++) {
        const msgpack_object *row = &rows->via.array.ptr[i];
        const msgpack_object *src = mpobj_map_get(row, "source", NULL);

        v = mpobj_map_get(row, "missing_truncated", NULL);
        if (v == NULL || v->type != MSGPACK_OBJECT_BOOLEAN || !v->via.boolean)
            continue;
        fprintf(out,
                "receiptctl: gaps: the missing ranges of source \"%.*s\" "
                "are cut at --limit; missing_seqs counts them all\n",
                src && src->type == MSGPACK_OBJECT_STR ? (int)src->via.str.size
                                                       : 0,
                src && src->type == MSGPACK_OBJECT_STR ? src->via.str.ptr : "");
        cut = 1;
    }
    if (!truncated)
        return cut;
    fprintf(out,
            "receiptctl: %s: truncated at %" PRIu32 " rows; more match: ", kind,
            n);
    if (strcmp(kind, "receipts") == 0 &&
        min_receipt_id(rows, &cursor, spec->forward))
        fprintf(out, "page on with --%s-id %" PRIu64 ", or raise --limit\n",
                spec->forward ? "after" : "before", cursor);
    else
        fputs("raise --limit or narrow the filters\n", out);
    /* A coverage group is RECEIPT_NCOUNTERS rows; a cut one says so. */
    last = n > 0 ? &rows->via.array.ptr[n - 1] : NULL;
    v = last ? mpobj_map_get(last, "bit", NULL) : NULL;
    if (strcmp(kind, "coverage") == 0 && v != NULL &&
        v->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
        v->via.u64 + 1 < RECEIPT_NCOUNTERS)
        fprintf(out,
                "receiptctl: coverage: the last group is incomplete: %" PRIu64
                " of its %d counters\n",
                v->via.u64 + 1, RECEIPT_NCOUNTERS);
    return 1;
}

/* ---- Prometheus ---- */

/* The exporter's usual first metric: whether the daemon answered. */
static void
up(FILE *out, int answered)
{
    fprintf(out,
            "# HELP receiptd_up 1 when the daemon answered the metrics "
            "query, 0 when it did not.\n"
            "# TYPE receiptd_up gauge\n"
            "receiptd_up %d\n",
            answered);
}

void
output_prometheus_down(FILE *out)
{
    up(out, 0);
    fflush(out);
}

/*
 * The daemon renders the exposition itself (the `metrics` query kind, the
 * same text its HTTP listener serves), so the names, types and help lines
 * have one source; this only adds receiptd_up.
 */
int
output_prometheus(FILE *out, const msgpack_object *result, char *err,
                  size_t err_len)
{
    const msgpack_object *rows, *text;
    int truncated;

    if (get_rows(result, &rows, &truncated, err, err_len) != 0)
        return -1;
    if (rows->via.array.size == 0)
        return proto_errbuf(err, err_len, "the metrics result has no rows");
    text = mpobj_map_get(&rows->via.array.ptr[0], "text", NULL);
    if (text == NULL || text->type != MSGPACK_OBJECT_STR)
        return proto_errbuf(err, err_len,
                            "the metrics row has no \"text\" string");
    up(out, 1);
    fwrite(text->via.str.ptr, 1, text->via.str.size, out);
    if (text->via.str.size > 0 &&
        text->via.str.ptr[text->via.str.size - 1] != '\n')
        putc('\n', out);
    return 0;
}

int
output_record(FILE *out, const msgpack_object *map, char *err, size_t err_len)
{
    struct row flat = { 0 };
    struct cols cols = { 0 };
    struct cell *cells = NULL;
    size_t j;
    int rc = -1;

    if (map == NULL || map->type != MSGPACK_OBJECT_MAP)
        return proto_errbuf(err, err_len, "the record is not a map");
    if (flatten(&flat, NULL, map) != 0 ||
        choose_cols(&cols, &flat, 1, NULL, 0) != 0 ||
        (cols.n > 0 && (cells = calloc(cols.n, sizeof(*cells))) == NULL))
        goto oom;
    for (j = 0; j < cols.n; j++)
        if (render(&cells[j], cols.names[j], row_get(&flat, cols.names[j]),
                   FORMAT_RECORD) != 0)
            goto oom;
    if (print_vertical(out, &cols, cells) != 0)
        goto oom;
    rc = 0;
    goto done;
oom:
    proto_errbuf(err, err_len, "out of memory while formatting the record");
done:
    for (j = 0; cells != NULL && j < cols.n; j++)
        free(cells[j].text);
    free(cells);
    row_free(&flat);
    cols_free(&cols);
    return rc;
}
