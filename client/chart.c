/*
 * chart.c: `--format chart` for series of `fallbacks` and `coverage`
 * (output_chart(), output.h): one line per series, one character per
 * bucket, the rate and count over the whole window at the end.
 *
 * A series is the consecutive rows that share every field but `bucket`
 * and the figures: the daemon sends each group's buckets together, in
 * time order, empty ones included (PROTOCOL section 9, `every`). Bars are
 * the eight block elements U+2581..U+2588; a bucket with receipts and a
 * rate of 0 is a middle dot, one without receipts a blank, so a quiet
 * hour never reads as a healthy one. Fallback rates are scaled to the
 * highest bucket of the chart (the header says what a full block is);
 * coverage is absolute (a full block is 100%).
 */
#include "output.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "duration.h"
#include "mpobj.h"
#include "timespec.h"

/* One line: its label, its cells' figures and their sums. */
struct line {
    char label[256];
    size_t first, n;   /* cells[first, first + n) */
    uint64_t hits, of; /* fallback / receipts, or measured / applicable */
};

struct cell_fig {
    uint64_t hits, of;
};

struct chart {
    struct line *lines;
    size_t nlines, cap;
    struct cell_fig *cells;
    size_t ncells, ccap;
    int oom;
};

static uint64_t
get_u64(const msgpack_object *m, const char *k)
{
    const msgpack_object *v = mpobj_map_get(m, k, NULL);

    return v != NULL && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? v->via.u64
                                                                   : 0;
}

static int
get_i64(const msgpack_object *m, const char *k, int64_t *out)
{
    const msgpack_object *v = mpobj_map_get(m, k, NULL);

    if (v == NULL)
        return -1;
    if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        *out = (int64_t)v->via.u64;
    else if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *out = v->via.i64;
    else
        return -1;
    return 0;
}

/* Appends the string at k of m to label (" " between parts). */
static void
label_add(char *label, size_t cap, const msgpack_object *m, const char *k,
          const char *sep)
{
    const msgpack_object *v = mpobj_map_get(m, k, NULL);
    size_t n = strlen(label);

    if (v == NULL || v->type != MSGPACK_OBJECT_STR)
        return;
    snprintf(label + n, cap - n, "%s%.*s", n > 0 ? sep : "",
             (int)v->via.str.size, v->via.str.ptr);
}

/* The label of a row: its group (backends as "requested->executed"), and
 * for coverage the counter. prefix comes first when not NULL. */
static void
row_label(char *label, size_t cap, const msgpack_object *row, int coverage,
          const char *prefix)
{
    label[0] = '\0';
    if (prefix != NULL)
        snprintf(label, cap, "%s", prefix);
    label_add(label, cap, row, "prepared_plan_id", " ");
    label_add(label, cap, row, "graph_hash", " ");
    label_add(label, cap, row, "model_instance_id", " ");
    label_add(label, cap, row, "source", " ");
    label_add(label, cap, row, "requested_backend", " ");
    label_add(label, cap, row, "executed_backend", "->");
    if (coverage)
        label_add(label, cap, row, "counter", " ");
}

/* The figures a chart plots of a row. */
static struct cell_fig
row_fig(const msgpack_object *row, int coverage)
{
    struct cell_fig c;

    if (coverage) {
        uint64_t r = get_u64(row, "receipts"),
                 na = get_u64(row, "not_applicable");

        c.hits = get_u64(row, "measured");
        c.of = r > na ? r - na : 0;
    } else {
        c.hits = get_u64(row, "fallback");
        c.of = get_u64(row, "receipts");
    }
    return c;
}

/* Adds rows (an array of maps) to ch, a new line whenever the label
 * changes. */
static void
add_rows(struct chart *ch, const msgpack_object *rows, int coverage,
         const char *prefix)
{
    uint32_t i;

    for (i = 0; i < rows->via.array.size && !ch->oom; i++) {
        const msgpack_object *row = &rows->via.array.ptr[i];
        struct line *l = ch->nlines ? &ch->lines[ch->nlines - 1] : NULL;
        struct cell_fig c;
        char label[256];

        if (row->type != MSGPACK_OBJECT_MAP)
            continue;
        row_label(label, sizeof(label), row, coverage, prefix);
        if (l == NULL || strcmp(l->label, label) != 0) {
            if (ch->nlines == ch->cap) {
                size_t cap = ch->cap ? ch->cap * 2 : 16;
                struct line *nl = realloc(ch->lines, cap * sizeof(*nl));

                if (nl == NULL) {
                    ch->oom = 1;
                    return;
                }
                ch->lines = nl;
                ch->cap = cap;
            }
            l = &ch->lines[ch->nlines++];
            memset(l, 0, sizeof(*l));
            snprintf(l->label, sizeof(l->label), "%s", label);
            l->first = ch->ncells;
        }
        if (ch->ncells == ch->ccap) {
            size_t cap = ch->ccap ? ch->ccap * 2 : 256;
            struct cell_fig *nc = realloc(ch->cells, cap * sizeof(*nc));

            if (nc == NULL) {
                ch->oom = 1;
                return;
            }
            ch->cells = nc;
            ch->ccap = cap;
        }
        c = row_fig(row, coverage);
        ch->cells[ch->ncells++] = c;
        l->n++;
        l->hits += c.hits;
        l->of += c.of;
    }
}

/* Characters a UTF-8 string takes on a terminal (one per code point: the
 * names are identifiers, not wide scripts). */
static size_t
cols_of(const char *s)
{
    size_t n = 0;

    for (; *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

static const char *const blocks[8] = { "\u2581", "\u2582", "\u2583", "\u2584",
                                       "\u2585", "\u2586", "\u2587", "\u2588" };

/* The glyph of a bucket: blank without receipts, a dot at 0, else one of
 * eight heights of rate / full (rounded up, so any rate shows). */
static const char *
glyph(const struct cell_fig *c, double full)
{
    double r;
    int k;

    if (c->of == 0)
        return " ";
    if (c->hits == 0 || !(full > 0))
        return "\u00b7";
    r = (double)c->hits / (double)c->of / full;
    k = (int)(r * 8.0 + 0.999999);
    k = k < 1 ? 1 : k > 8 ? 8 : k;
    return blocks[k - 1];
}

int
output_chart(FILE *out, const struct output_spec *spec,
             const msgpack_object *result, char *err, size_t err_len)
{
    int coverage = strcmp(spec->kind, "coverage") == 0;
    const msgpack_object *rows = mpobj_map_get(result, "rows", NULL);
    const msgpack_object *tot = mpobj_map_get(result, "total", NULL);
    struct chart ch = { 0 };
    char t0[TIMESPEC_RFC3339_MAX], t1[TIMESPEC_RFC3339_MAX], every[32],
        fulls[64], rate[64], count[64];
    size_t i, k, width = 0, rw = 0, cw = 0;
    int64_t first = 0, last = 0;
    double full = coverage ? 1.0 : 0.0;

    if (rows == NULL || rows->type != MSGPACK_OBJECT_ARRAY) {
        snprintf(err, err_len, "the result has no rows");
        return -1;
    }
    if (strcmp(spec->kind, "fallbacks") != 0 && !coverage) {
        snprintf(err, err_len, "a chart is for fallbacks and coverage");
        return -1;
    }
    if (rows->via.array.size == 0) {
        fprintf(out, "no groups in the window\n");
        return 0;
    }
    if (rows->via.array.ptr[0].type != MSGPACK_OBJECT_MAP ||
        get_i64(&rows->via.array.ptr[0], "bucket", &first) != 0) {
        snprintf(err, err_len,
                 "the rows have no buckets: a chart needs --every");
        return -1;
    }
    add_rows(&ch, rows, coverage, NULL);
    if (tot != NULL && tot->type == MSGPACK_OBJECT_ARRAY)
        add_rows(&ch, tot, coverage, "(total)");
    if (ch.oom) {
        free(ch.lines);
        free(ch.cells);
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    last = first;
    get_i64(&rows->via.array.ptr[ch.lines[0].n - 1], "bucket", &last);
    /* Fallback rates: a full block is the highest bucket's. */
    for (i = 0; i < ch.ncells && !coverage; i++)
        if (ch.cells[i].of > 0 &&
            (double)ch.cells[i].hits / (double)ch.cells[i].of > full)
            full = (double)ch.cells[i].hits / (double)ch.cells[i].of;
    for (i = 0; i < ch.nlines; i++) {
        struct line *l = &ch.lines[i];
        size_t n;

        if ((n = cols_of(l->label)) > width)
            width = n;
        output_percent(rate, sizeof(rate),
                       l->of ? (double)l->hits / (double)l->of : 0.0);
        if ((n = strlen(rate)) > rw)
            rw = n;
        snprintf(count, sizeof(count), "%" PRIu64 "/%" PRIu64, l->hits, l->of);
        if ((n = strlen(count)) > cw)
            cw = n;
    }
    duration_format(spec->every, every, sizeof(every));
    output_percent(fulls, sizeof(fulls), full);
    fprintf(out, "%s, every %s from %s to %s (%zu buckets): ",
            coverage ? "coverage" : "fallback rate", every,
            timespec_format((uint64_t)first, t0, sizeof(t0)),
            timespec_format((uint64_t)last + spec->every, t1, sizeof(t1)),
            ch.lines[0].n);
    if (coverage)
        fprintf(out, "\u2588 = 100%% measured");
    else
        fprintf(out, "\u2588 = %s", fulls);
    fprintf(out, ", \u00b7 = %s, blank = no receipts; then %s, %s\n",
            coverage ? "none measured" : "no fallback",
            coverage ? "coverage" : "rate",
            coverage ? "measured/applicable" : "fallbacks/receipts");
    for (i = 0; i < ch.nlines; i++) {
        const struct line *l = &ch.lines[i];

        fputs(l->label, out);
        for (k = cols_of(l->label); k < width + 2; k++)
            putc(' ', out);
        for (k = 0; k < l->n; k++)
            fputs(glyph(&ch.cells[l->first + k], full), out);
        output_percent(rate, sizeof(rate),
                       l->of ? (double)l->hits / (double)l->of : 0.0);
        snprintf(count, sizeof(count), "%" PRIu64 "/%" PRIu64, l->hits, l->of);
        fprintf(out, "  %*s  %*s\n", (int)rw, rate, (int)cw, count);
    }
    free(ch.lines);
    free(ch.cells);
    return 0;
}
