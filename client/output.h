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
};

#define OUTPUT_ERR_MAX 256

/* The format for "table", "json", "csv" or "prometheus", or -1. */
int output_format_from_name(const char *name);

/*
 * Prints a query result of the given kind ("fallbacks", "receipts", ...;
 * borrowed, decides the column order of tables and CSV) to out in format
 * (OUTPUT_TABLE, OUTPUT_JSON or OUTPUT_CSV; OUTPUT_PROMETHEUS is for
 * output_prometheus()).
 *
 * Tables: one line per row, columns in a stable order (the kind's known
 * columns first, then any others in order of first appearance), numbers
 * right-aligned, nil and absent values shown as "-", `coverage` and
 * `fallback_rate` as percentages, `*_at` and `time` columns as RFC 3339 UTC.
 * Receipt rows show their identifying columns only; JSON and CSV carry every
 * field. A truncated result ends with a note line.
 * JSON: the whole result as one document. CSV: a header line, then one
 * line per row, nested maps flattened to dotted column names
 * ("counters.decode_steps"), RFC 4180 quoting.
 *
 * Returns 0, or -1 with a sentence in err when result is not
 * {"rows": [map, ...], ...} or memory ran out.
 */
int output_result(FILE *out, int format, const char *kind,
                  const msgpack_object *result, char *err, size_t err_len);

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

#endif
