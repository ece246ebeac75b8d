/*
 * output.h: how receiptctl prints query results: aligned tables for people,
 * one JSON document or CSV for scripts, and the Prometheus text exposition
 * format for `stats`.
 *
 * Input is the decoded `result` object of a reply (PROTOCOL section 9:
 * {"rows": [...], "truncated": bool}); every function borrows it. Integers
 * are printed exactly in every format (u64 up to 2^64-1); sums the daemon
 * sends as decimal strings stay strings in JSON. Single-threaded use.
 */
#ifndef RECEIPTD_CLIENT_OUTPUT_H
#define RECEIPTD_CLIENT_OUTPUT_H

#include <stddef.h>
#include <stdio.h>

#include <msgpack.h>

struct json_object;

enum output_format {
    OUTPUT_TABLE,
    OUTPUT_JSON,
    OUTPUT_CSV,
    OUTPUT_PROMETHEUS,
    OUTPUT_JSONL,
};

/*
 * What was asked, which decides the columns: the query kind ("fallbacks",
 * "receipts", ...; "readback" for readback-check) and, for fallbacks and
 * coverage, the group_by sent (NULL: the kind's default). Strings are
 * borrowed.
 */
struct output_spec {
    const char *kind;
    const char *group_by;
    const char *columns; /* --columns: "a,b,c" for tables and CSV; NULL */
    int no_header;       /* tables and CSV: rows only (receipts --follow
                            after its first rows) */
    int forward;         /* receipts after an id: pages go on upwards */
};

/*
 * Checks spec->columns against the kind's columns (output_columns()).
 * Returns 0, or -1 with a sentence in err naming the unknown column.
 */
int output_check_columns(const struct output_spec *spec, char *err,
                         size_t err_len);

#define OUTPUT_ERR_MAX 256

/* The format for "table", "json", "jsonl", "csv" or "prometheus", or -1. */
int output_format_from_name(const char *name);

/*
 * Prints a query result (spec borrowed) to out in format (OUTPUT_TABLE,
 * OUTPUT_JSON, OUTPUT_JSONL or OUTPUT_CSV; OUTPUT_PROMETHEUS is for
 * output_prometheus()).
 *
 * Every kind has a fixed list of columns (output_columns()): CSV prints
 * exactly those, in that order, whatever rows come back (none included),
 * and a last column `extra` holding, as one JSON object, any field the
 * list does not name (unknown keys a producer sent, fields of a newer
 * daemon); a map-valued column (`tensor`) is its JSON text.
 *
 * Tables (libsmartcols: display widths, truncation on a narrow terminal):
 * one line per row, the kind's columns present in any row (receipt rows:
 * their identifying columns only) or those spec->columns names, numbers
 * right-aligned, nil and absent values shown as "-", `coverage` and
 * `fallback_rate` as percentages, `*_at` and `time` columns as RFC 3339
 * UTC; `stats` as name/value lines with digit grouping and units.
 * JSON: the whole result as one document. JSONL: one row per line, as a
 * compact JSON object, and nothing else.
 *
 * In receipt rows of every format but the table, a counter whose
 * counter_coverage bit is clear is nil (JSON null, an empty CSV field),
 * never the 0 the producer had to send for it.
 *
 * Nothing is printed about truncation here: see output_truncation().
 *
 * Returns 0, or -1 with a sentence in err when result is not
 * {"rows": [map, ...], ...} or memory ran out.
 */
int output_result(FILE *out, int format, const struct output_spec *spec,
                  const msgpack_object *result, char *err, size_t err_len);

/*
 * The fixed columns of spec's result, NULL-terminated, `extra` last; NULL
 * for a kind with none. The array is static or, for receipt rows, built
 * once; never freed by the caller.
 */
const char *const *output_columns(const struct output_spec *spec);

/*
 * Tells a person or a script, on out (stderr: never into the data), that
 * result (borrowed) was cut short, and the way on: `--before-id` with the
 * next cursor where the kind has one (receipts), otherwise a larger
 * --limit or narrower filters. A coverage result cut inside a group says
 * how many of the group's counters it holds; gaps names every source whose
 * missing ranges were cut. Returns 1 when anything was cut, else 0.
 */
int output_truncation(FILE *out, const struct output_spec *spec,
                      const msgpack_object *result);

/*
 * Prints a `stats` result in the Prometheus text exposition format (version
 * 0.0.4), for node_exporter's textfile collector: receiptd_up 1 first, then
 * every numeric field of the first row as a metric named receiptd_<field>
 * (nested names joined with '_'), with HELP and TYPE lines; string fields
 * become labels of a receiptd_info gauge of value 1, except
 * store_last_error (free text that would start a new series with every
 * failure). Returns 0 or -1 with err set.
 */
int output_prometheus(FILE *out, const msgpack_object *result, char *err,
                      size_t err_len);

/* Prints receiptd_up 0, for when the daemon did not answer. */
void output_prometheus_down(FILE *out);

/*
 * Prints one map (borrowed) as a two-column name/value listing for people:
 * nested maps flattened to dotted names, values rendered as in tables.
 * Returns 0 or -1 with err set.
 */
int output_record(FILE *out, const msgpack_object *map, char *err,
                  size_t err_len);

/*
 * Converts a msgpack object to a new json-c object (the caller owns it and
 * releases it with json_object_put). Unsigned integers stay exact u64, maps
 * with non-string keys use the key's JSON text, bin and ext become base64
 * strings, floats keep their shortest round-trip form. NULL on no memory.
 */
struct json_object *output_to_json(const msgpack_object *o);

/*
 * Writes one CSV field (buf[0..len), borrowed), quoted as RFC 4180 asks
 * when it holds a comma, a double quote, CR or LF.
 */
void output_csv_field(FILE *out, const char *buf, size_t len);

/* A str object over s (borrowed: it must outlive the object), for
 * documents built from objects rather than packed. */
msgpack_object output_str_object(const char *s);

#endif
