/*
 * bench_decode.c: receipt decode throughput, in receipts per second, over
 * the shared vectors (tests/data/vectors) in each encoding:
 *
 *   named    rmp-serde to_vec_named (maps)
 *   compact  rmp-serde to_vec (arrays; the schema-1 vectors are maps)
 *   json     serde_json
 *
 * For msgpack two figures: receipt_decode alone over an already unpacked
 * object, and the daemon's whole path per frame (mpcheck, msgpack-c unpack
 * into a fresh zone, receipt_decode). For JSON: receipt_json_parse plus
 * receipt_decode_json. Each figure runs for SECONDS (default 2) over all
 * vectors in turn. A benchmark, not a test: it prints a table and asserts
 * only that every vector decodes.
 *
 *   build/bench/bench_decode [SECONDS]
 *
 * Single-threaded; run on an idle machine for stable figures.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>
#include <msgpack.h>

#include "mpcheck.h"
#include "receipt.h"
#include "receipt_json.h"

#ifndef BENCH_VECTOR_DIR
#error "BENCH_VECTOR_DIR must name tests/data/vectors"
#endif

enum form { FORM_NAMED, FORM_COMPACT, FORM_JSON, FORM_COUNT };

static const char *const form_keys[FORM_COUNT] = {
    "named_msgpack",
    "compact_msgpack",
    "json",
};
static const char *const form_names[FORM_COUNT] = {
    "named",
    "compact",
    "json",
};

struct input {
    char *bytes;
    size_t len;
    msgpack_unpacked up; /* msgpack forms: unpacked once, for decode-only */
};

static struct input inputs[FORM_COUNT][256];
static size_t ninputs;

static double
now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *
slurp(const char *name, size_t *len)
{
    char path[1024];
    FILE *f;
    char *buf;
    long n;

    snprintf(path, sizeof(path), "%s/%s", BENCH_VECTOR_DIR, name);
    f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "bench_decode: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0) {
        fprintf(stderr, "bench_decode: cannot size %s\n", path);
        exit(1);
    }
    rewind(f);
    buf = malloc((size_t)n + 1);
    if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "bench_decode: cannot read %s\n", path);
        exit(1);
    }
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void
load(void)
{
    struct json_object *idx, *vecs, *files;
    size_t i, off;
    int f;

    idx = json_object_from_file(BENCH_VECTOR_DIR "/index.json");
    if (idx == NULL) {
        fprintf(stderr, "bench_decode: cannot read %s/index.json\n",
                BENCH_VECTOR_DIR);
        exit(1);
    }
    vecs = json_object_object_get(idx, "vectors");
    ninputs = json_object_array_length(vecs);
    if (ninputs == 0 || ninputs > 256) {
        fprintf(stderr, "bench_decode: %zu vectors\n", ninputs);
        exit(1);
    }
    for (i = 0; i < ninputs; i++) {
        files =
            json_object_object_get(json_object_array_get_idx(vecs, i), "files");
        for (f = 0; f < FORM_COUNT; f++) {
            struct input *in = &inputs[f][i];

            in->bytes = slurp(json_object_get_string(
                                  json_object_object_get(files, form_keys[f])),
                              &in->len);
            if (f == FORM_JSON)
                continue;
            msgpack_unpacked_init(&in->up);
            off = 0;
            if (msgpack_unpack_next(&in->up, in->bytes, in->len, &off) !=
                MSGPACK_UNPACK_SUCCESS) {
                fprintf(stderr, "bench_decode: vector %zu does not unpack\n",
                        i);
                exit(1);
            }
        }
    }
    json_object_put(idx);
}

/* Decodes input i of form f once, the way the figure says; exits when a
 * vector fails, since then the figure would mean nothing. */
static void
decode_one(int f, size_t i, int whole_path)
{
    struct input *in = &inputs[f][i];
    struct receipt r;
    struct proto_err err;
    struct json_object *j;
    msgpack_unpacked up;
    size_t off = 0;
    int rc;

    if (f == FORM_JSON) {
        rc = receipt_json_parse(in->bytes, in->len, &j, &err);
        if (rc == 0) {
            rc = receipt_decode_json(j, &r, &err);
            receipt_clear(&r);
            json_object_put(j);
        }
    } else if (whole_path) {
        rc = mpcheck(in->bytes, in->len, &err);
        if (rc == 0) {
            msgpack_unpacked_init(&up);
            if (msgpack_unpack_next(&up, in->bytes, in->len, &off) !=
                MSGPACK_UNPACK_SUCCESS)
                rc = PROTO_EMALFORMED;
            else
                rc = receipt_decode(&up.data, &r, &err);
            receipt_clear(&r);
            msgpack_unpacked_destroy(&up);
        }
    } else {
        rc = receipt_decode(&in->up.data, &r, &err);
        receipt_clear(&r);
    }
    if (rc != 0) {
        fprintf(stderr, "bench_decode: %s vector %zu: %s: %s\n", form_names[f],
                i, err.path, err.message);
        exit(1);
    }
}

/* Receipts per second for one figure, over seconds of wall time. */
static double
run(int f, int whole_path, double seconds)
{
    double start = now(), end = start;
    unsigned long long n = 0;
    size_t i;

    while (end - start < seconds) {
        /* Check the clock once per pass over the vectors, not per receipt. */
        for (i = 0; i < ninputs; i++)
            decode_one(f, i, whole_path);
        n += ninputs;
        end = now();
    }
    return (double)n / (end - start);
}

int
main(int argc, char **argv)
{
    double seconds = 2.0, bytes;
    size_t i;
    int f;

    if (argc > 1) {
        seconds = strtod(argv[1], NULL);
        if (seconds <= 0) {
            fprintf(stderr, "usage: %s [SECONDS]\n", argv[0]);
            return 2;
        }
    }
    load();
    printf("receipt decode throughput: %zu vectors, %.1f s per figure\n\n",
           ninputs, seconds);
    printf("%-8s %10s %18s %26s\n", "form", "avg bytes", "decode only (r/s)",
           "check+unpack+decode (r/s)");
    for (f = 0; f < FORM_COUNT; f++) {
        bytes = 0;
        for (i = 0; i < ninputs; i++)
            bytes += (double)inputs[f][i].len;
        if (f == FORM_JSON)
            printf("%-8s %10.0f %18s %26.0f\n", form_names[f],
                   bytes / (double)ninputs, "-", run(f, 1, seconds));
        else
            printf("%-8s %10.0f %18.0f %26.0f\n", form_names[f],
                   bytes / (double)ninputs, run(f, 0, seconds),
                   run(f, 1, seconds));
    }
    for (f = 0; f < FORM_COUNT; f++)
        for (i = 0; i < ninputs; i++) {
            if (f != FORM_JSON)
                msgpack_unpacked_destroy(&inputs[f][i].up);
            free(inputs[f][i].bytes);
        }
    return 0;
}
