/*
 * receipt.c: decoding, validation and encoding of execution receipts
 * (PROTOCOL section 4) from msgpack-c objects, in both rmp-serde forms.
 *
 * Invariants: the layout of every struct (field names in declaration order,
 * which fields each schema has, which are required) is written once, in the
 * tables below, and both the map and the array decoders read it. Decoding
 * borrows the input's bytes and allocates nothing unless the input carries
 * unknown map keys; those are packed into r->extra only after every known
 * field has validated, so a failure never leaves anything to free.
 * Pure functions; safe on any thread.
 */
#include "receipt.h"

#include <stdlib.h>
#include <string.h>

#include "mpcheck.h"
#include "mpobj.h"
#include "mpread.h"

const struct receipt_counter receipt_counters[RECEIPT_NCOUNTERS] = {
    { 0, "counters.decode_steps", "decode_steps", 1 },
    { 1, "counters.graph_launches", "graph_launches", 1 },
    { 2, "counters.compute_dispatches", "compute_dispatches", 1 },
    { 3, "counters.device_fences", "device_fences", 1 },
    { 4, "counters.host_to_device_bytes", "host_to_device_bytes", 1 },
    { 5, "counters.device_to_host_bytes", "device_to_host_bytes", 1 },
    { 6, "counters.fallback_count", "fallback_count", 1 },
    { 7, "counters.hot_path_allocations", "hot_path_allocations", 1 },
    { 8, "counters.compile_calls", "compile_calls", 1 },
    { 9, "counters.immutable_upload_bytes", "immutable_upload_bytes", 1 },
    { 10, "counters.submitted_prefill_tokens", "submitted_prefill_tokens", 3 },
    { 11, "counters.committed_prefill_tokens", "committed_prefill_tokens", 3 },
    { 12, "counters.cached_prefill_tokens", "cached_prefill_tokens", 3 },
    { 13, "counters.queued_requests", "queued_requests", 3 },
    { 14, "counters.admitted_requests", "admitted_requests", 3 },
    { 15, "counters.cow_copies", "cow_copies", 3 },
    { 16, "counters.evictions", "evictions", 3 },
    { 17, "counters.unique_freed_pages", "unique_freed_pages", 3 },
    { 18, "counters.pool_high_water_bytes", "pool_high_water_bytes", 3 },
    { 19, "counters.cancellations", "cancellations", 3 },
    { 20, "counters.graph_bucket_tokens", "graph_bucket_tokens", 3 },
    { 21, "counters.graph_padding_tokens", "graph_padding_tokens", 3 },
    { 22, "counters.rebuild_outcomes", "rebuild_outcomes", 3 },
    { 23, "latency.queue_delay_us", "queue_delay_us", 3 },
    { 24, "latency.time_to_first_token_us", "time_to_first_token_us", 3 },
    { 25, "latency.inter_token_latency_us", "inter_token_latency_us", 3 },
};

const char *const receipt_artifact_names[RECEIPT_NARTIFACTS] = {
    "temp_created_bytes",
    "temp_removed_bytes",
    "temp_retained_bytes",
    "temp_cleanup_failures",
};

/*
 * A name and its length. Every key of every receipt is looked up in one of
 * the tables below, so lengths are compared rather than taken with strlen;
 * FNAME() has the compiler count them: { FNAME("cpu") } is { "cpu", 3 }.
 */
struct fname {
    const char *s;
    size_t len;
};

#define FNAME(lit) lit, sizeof(lit) - 1

static const struct fname backend_names[RECEIPT_BACKEND_COUNT] = {
    { FNAME("cpu") },        { FNAME("wgpu-dx12") }, { FNAME("wgpu-vulkan") },
    { FNAME("wgpu-metal") }, { FNAME("cuda") },      { FNAME("metal") },
    { FNAME("unknown") },
};

static const struct fname status_names[RECEIPT_STATUS_COUNT] = {
    { FNAME("fallback") },
    { FNAME("clean") },
    { FNAME("unproven") },
};

/* Top-level fields, in declaration order (PROTOCOL section 4, column #). */
enum {
    F_SCHEMA,
    F_REQUESTED,
    F_EXECUTED,
    F_MODEL,
    F_PLAN,
    F_GRAPH,
    F_TUNING,
    F_STOP,
    F_COVERAGE,
    F_COUNTERS,
    F_LATENCY,
    F_ARTIFACTS,
    F_COUNT
};

static const struct fname top_names[F_COUNT] = {
    { FNAME("schema_version") },   { FNAME("requested_backend") },
    { FNAME("executed_backend") }, { FNAME("model_instance_id") },
    { FNAME("prepared_plan_id") }, { FNAME("graph_hash") },
    { FNAME("tuning_profile") },   { FNAME("stop_reason") },
    { FNAME("counter_coverage") }, { FNAME("counters") },
    { FNAME("latency") },          { FNAME("artifacts") },
};

/* The array layouts, indexed by schema: rmp-serde's to_vec writes the
 * fields the struct of that schema declares, in order. */
static const unsigned char layout_s1[] = {
    F_SCHEMA, F_REQUESTED, F_EXECUTED, F_MODEL,    F_PLAN,
    F_GRAPH,  F_STOP,      F_COVERAGE, F_COUNTERS, F_ARTIFACTS,
};
static const unsigned char layout_s2[] = {
    F_SCHEMA, F_REQUESTED, F_EXECUTED, F_MODEL,    F_PLAN,      F_GRAPH,
    F_TUNING, F_STOP,      F_COVERAGE, F_COUNTERS, F_ARTIFACTS,
};
static const unsigned char layout_s3[] = {
    F_SCHEMA, F_REQUESTED, F_EXECUTED, F_MODEL,    F_PLAN,    F_GRAPH,
    F_TUNING, F_STOP,      F_COVERAGE, F_COUNTERS, F_LATENCY, F_ARTIFACTS,
};

struct layout {
    const unsigned char *fields;
    unsigned n;
};

static const struct layout layouts[RECEIPT_SCHEMA_MAX + 1] = {
    { NULL, 0 },
    { layout_s1, sizeof(layout_s1) },
    { layout_s2, sizeof(layout_s2) },
    { layout_s3, sizeof(layout_s3) },
};

static const struct fname counter_names[RECEIPT_NCOUNTERS_V3] = {
    { FNAME("decode_steps") },
    { FNAME("graph_launches") },
    { FNAME("compute_dispatches") },
    { FNAME("device_fences") },
    { FNAME("host_to_device_bytes") },
    { FNAME("device_to_host_bytes") },
    { FNAME("fallback_count") },
    { FNAME("hot_path_allocations") },
    { FNAME("compile_calls") },
    { FNAME("immutable_upload_bytes") },
    { FNAME("submitted_prefill_tokens") },
    { FNAME("committed_prefill_tokens") },
    { FNAME("cached_prefill_tokens") },
    { FNAME("queued_requests") },
    { FNAME("admitted_requests") },
    { FNAME("cow_copies") },
    { FNAME("evictions") },
    { FNAME("unique_freed_pages") },
    { FNAME("pool_high_water_bytes") },
    { FNAME("cancellations") },
    { FNAME("graph_bucket_tokens") },
    { FNAME("graph_padding_tokens") },
    { FNAME("rebuild_outcomes") },
};

static const struct fname latency_names[RECEIPT_NLATENCY] = {
    { FNAME("queue_delay_us") },
    { FNAME("time_to_first_token_us") },
    { FNAME("inter_token_latency_us") },
};

/* receipt_artifact_names with lengths, for lookups; the two lists are the
 * same names in the same order (check_receipt decodes and encodes every
 * one of them through this table). */
static const struct fname artifact_names[RECEIPT_NARTIFACTS] = {
    { FNAME("temp_created_bytes") },
    { FNAME("temp_removed_bytes") },
    { FNAME("temp_retained_bytes") },
    { FNAME("temp_cleanup_failures") },
};

/*
 * The maps of one receipt that held unknown keys, remembered during
 * validation so that r->extra can be built once everything else passed.
 * Index: 0 top level, 1 counters, 2 latency, 3 artifacts.
 */
#define NSCOPES 4

static const struct fname scope_prefix[NSCOPES] = {
    { FNAME("") },
    { FNAME("counters.") },
    { FNAME("latency.") },
    { FNAME("artifacts.") },
};

struct unknowns {
    const msgpack_object *map[NSCOPES];
    const struct fname *names[NSCOPES]; /* the known names of that map */
    unsigned nnames[NSCOPES];
    uint32_t count[NSCOPES];
    /* A schema 1 or 2 map with a "latency" key: it is unknown there. */
    int latency_unknown;
};

const char *
receipt_backend_name(int backend)
{
    if (backend < 0 || backend >= RECEIPT_BACKEND_COUNT)
        return NULL;
    return backend_names[backend].s;
}

int
receipt_backend_from_name(const char *name, size_t len)
{
    int i;

    for (i = 0; i < RECEIPT_BACKEND_COUNT; i++)
        if (backend_names[i].len == len &&
            memcmp(backend_names[i].s, name, len) == 0)
            return i;
    return -1;
}

const char *
receipt_status_name(int status)
{
    if (status < 0 || status >= RECEIPT_STATUS_COUNT)
        return NULL;
    return status_names[status].s;
}

int
receipt_status_from_name(const char *name, size_t len)
{
    int i;

    for (i = 0; i < RECEIPT_STATUS_COUNT; i++)
        if (status_names[i].len == len &&
            memcmp(status_names[i].s, name, len) == 0)
            return i;
    return -1;
}

int
receipt_status(const struct receipt *r)
{
    if (r->requested_backend != r->executed_backend || r->counters[6] > 0)
        return RECEIPT_STATUS_FALLBACK;
    if (r->counter_coverage & ((uint64_t)1 << 6))
        return RECEIPT_STATUS_CLEAN;
    return RECEIPT_STATUS_UNPROVEN;
}

uint64_t
receipt_meaningful_bits(unsigned schema_version)
{
    if (schema_version == 1 || schema_version == 2)
        return ((uint64_t)1 << RECEIPT_NCOUNTERS_V2) - 1;
    if (schema_version == 3)
        return ((uint64_t)1 << RECEIPT_NCOUNTERS) - 1;
    return 0;
}

void
receipt_clear(struct receipt *r)
{
    if (r == NULL)
        return;
    free(r->extra);
    memset(r, 0, sizeof(*r));
}

/* The bytes of a str or bin key; 0 when the key is neither. An empty key
 * gets a real pointer: msgpack-c leaves it NULL, and even NULL + 0 is
 * undefined. */
static int
key_bytes(const msgpack_object *k, const char **p, size_t *n)
{
    *p = "";
    *n = 0;
    if (k->type == MSGPACK_OBJECT_STR) {
        *n = k->via.str.size;
        if (*n > 0)
            *p = k->via.str.ptr;
        return 1;
    }
    if (k->type == MSGPACK_OBJECT_BIN) {
        *n = k->via.bin.size;
        if (*n > 0)
            *p = k->via.bin.ptr;
        return 1;
    }
    return 0;
}

/* The 8 bytes at p as one word, for comparing. */
static inline uint64_t
word_at(const char *p)
{
    uint64_t x;

    memcpy(&x, p, sizeof(x));
    return x;
}

/* True when key p[0..n) is name f. No name is empty, so p[0] is only read
 * when there is a byte. */
static inline int
is_name(const char *p, size_t n, const struct fname *f)
{
    size_t i;

    if (f->len != n || f->s[0] != p[0])
        return 0;
    /* Field names are 3 to 24 bytes long. A short one is compared byte
     * by byte (a call to memcmp cost more than it); from 8 bytes on a
     * word at a time: the first, any in the middle, and the last,
     * overlapping the one before it (two or three loads). */
    if (n < 8) {
        for (i = 1; i < n; i++)
            if (f->s[i] != p[i])
                return 0;
        return 1;
    }
    if (word_at(f->s) != word_at(p))
        return 0;
    for (i = 8; i + 8 < n; i += 8)
        if (word_at(f->s + i) != word_at(p + i))
            return 0;
    return word_at(f->s + n - 8) == word_at(p + n - 8);
}

/* The index of key p[0..n) in names[0..nnames), or -1. */
static int
name_scan(const char *p, size_t n, const struct fname *names, unsigned nnames)
{
    unsigned i;

    for (i = 0; i < nnames; i++)
        if (is_name(p, n, &names[i]))
            return (int)i;
    return -1;
}

/*
 * The same, trying index hint first. serde writes a struct's fields in
 * declaration order, so the caller passes the index after the previous
 * key's, and for a producer that writes that order every known key is
 * found by one comparison, inline. Any other key (reordered, unknown, or
 * a field the schema skips) costs one pass over the lengths, which rule
 * out almost every name before a byte is compared: bounded by the table,
 * never by the map.
 */
static inline int
name_index(const char *p, size_t n, const struct fname *names, unsigned nnames,
           unsigned hint)
{
    if (hint < nnames && is_name(p, n, &names[hint]))
        return (int)hint;
    return name_scan(p, n, names, nnames);
}

/*
 * The value of key name in map o, or NULL; *dup is set when the key
 * repeats. The rule of mpobj_map_get() (a str or a bin key, the first one
 * found, stopping at the second) with the name's length known.
 */
static const msgpack_object *
map_get(const msgpack_object *o, const struct fname *name, int *dup)
{
    const msgpack_object *found = NULL;
    const char *p;
    size_t n;
    uint32_t i;

    *dup = 0;
    for (i = 0; i < o->via.map.size; i++) {
        if (!key_bytes(&o->via.map.ptr[i].key, &p, &n) || !is_name(p, n, name))
            continue;
        if (found != NULL) {
            *dup = 1;
            break;
        }
        found = &o->via.map.ptr[i].val;
    }
    return found;
}

/* Writes key[0..n) into out as printable ASCII, other bytes as \xNN,
 * truncated to fit cap (NUL-terminated). */
static void
escape_key(const char *key, size_t n, char *out, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    size_t i, o = 0;
    unsigned char b;

    for (i = 0; i < n && o + 5 <= cap; i++) {
        b = (unsigned char)key[i];
        if (b >= 0x20 && b < 0x7f && b != '\\') {
            out[o++] = (char)b;
            continue;
        }
        out[o++] = '\\';
        out[o++] = 'x';
        out[o++] = hex[b >> 4];
        out[o++] = hex[b & 15];
    }
    out[o] = '\0';
}

/*
 * One pass over a map: slot[i] receives the value of names[i] (NULL when
 * absent), *unknown the number of other keys. Keys must be strings of valid
 * UTF-8 (they may end up as paths in r->extra) and known keys must not
 * repeat; a repeated unknown key is caught when extra is built.
 */
static int
collect(const msgpack_object *map, const struct fname *names, unsigned nnames,
        const msgpack_object **slot, uint32_t *unknown, struct proto_err *err)
{
    const msgpack_object_kv *kv;
    const char *p;
    size_t n;
    uint32_t i;
    unsigned hint = 0;
    int k;

    memset(slot, 0, nnames * sizeof(*slot));
    *unknown = 0;
    for (i = 0; i < map->via.map.size; i++) {
        kv = &map->via.map.ptr[i];
        if (!key_bytes(&kv->key, &p, &n))
            return proto_err_set(err, PROTO_EINVALID, NULL,
                                 "expected string keys, got %s as a key",
                                 mpobj_type_name(&kv->key));
        k = name_index(p, n, names, nnames, hint);
        if (k < 0) {
            if (!mpobj_utf8_valid(p, n)) {
                char path[PROTO_ERR_PATH_MAX];

                /* The key itself cannot be the path (a reply must be
                 * valid UTF-8): its bytes, escaped. */
                escape_key(p, n, path, sizeof(path));
                return proto_err_set(err, PROTO_EINVALID, path,
                                     "expected keys of valid UTF-8, got a key "
                                     "that is not");
            }
            (*unknown)++;
            continue;
        }
        if (slot[k] != NULL)
            return proto_err_set(err, PROTO_EINVALID, names[k].s,
                                 "duplicate key \"%s\"", names[k].s);
        slot[k] = &kv->val;
        hint = (unsigned)k + 1;
    }
    return 0;
}

static int
missing(struct proto_err *err, const char *name, unsigned schema)
{
    return proto_err_set(err, PROTO_EINVALID, name,
                         "missing required field (schema %u)", schema);
}

static int
wrong_count(struct proto_err *err, unsigned lo, unsigned hi, unsigned schema,
            uint32_t got)
{
    if (lo == hi)
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "expected %u fields for schema %u, got %lu", lo,
                             schema, (unsigned long)got);
    return proto_err_set(err, PROTO_EINVALID, NULL,
                         "expected %u to %u fields for schema %u, got %lu", lo,
                         hi, schema, (unsigned long)got);
}

static int
not_struct(struct proto_err *err, const msgpack_object *o)
{
    return proto_err_set(err, PROTO_EINVALID, NULL,
                         "expected a map or an array, got %s",
                         mpobj_type_name(o));
}

/* Reads one u64 field into *out, naming it on failure. */
static int
u64_field(const msgpack_object *o, const char *name, uint64_t *out,
          struct proto_err *err)
{
    int rc = mpobj_uint(o, UINT64_MAX, out, err);

    if (rc != 0)
        proto_err_prefix_field(err, name);
    return rc;
}

/*
 * Decodes a struct of u64 fields (counters, latency, artifacts), in map or
 * array form. Fields [0, nreq) are required in a map; an array may hold
 * between lo and hi fields. nknown is how many names the schema knows:
 * other map keys are unknown and are left for extra. Missing fields stay 0.
 * The caller prefixes the struct's own name on failure.
 */
static int
u64_struct(const msgpack_object *o, const struct fname *names, unsigned nknown,
           unsigned nreq, unsigned lo, unsigned hi, unsigned schema,
           uint64_t *out, int scope, struct unknowns *unk,
           struct proto_err *err)
{
    const msgpack_object *slot[RECEIPT_NCOUNTERS_V3];
    unsigned i;
    int rc;

    if (o->type == MSGPACK_OBJECT_ARRAY) {
        if (o->via.array.size < lo || o->via.array.size > hi)
            return wrong_count(err, lo, hi, schema, o->via.array.size);
        for (i = 0; i < o->via.array.size; i++)
            if ((rc = u64_field(&o->via.array.ptr[i], names[i].s, &out[i],
                                err)) != 0)
                return rc;
        return 0;
    }
    if (o->type != MSGPACK_OBJECT_MAP)
        return not_struct(err, o);
    if ((rc = collect(o, names, nknown, slot, &unk->count[scope], err)) != 0)
        return rc;
    unk->map[scope] = o;
    unk->names[scope] = names;
    unk->nnames[scope] = nknown;
    for (i = 0; i < nknown; i++) {
        if (slot[i] == NULL) {
            if (i < nreq)
                return missing(err, names[i].s, schema);
            continue;
        }
        if ((rc = u64_field(slot[i], names[i].s, &out[i], err)) != 0)
            return rc;
    }
    return 0;
}

/* True when p[0..n) is printable ASCII other than the double quote. */
static int
printable(const char *p, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] > 0x7e || p[i] == '"')
            return 0;
    return 1;
}

static int
backend_field(const msgpack_object *o, uint8_t *out, struct proto_err *err)
{
    struct proto_str s;
    int b;

    if (o->type != MSGPACK_OBJECT_STR && o->type != MSGPACK_OBJECT_BIN)
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "expected a backend name as a string, got %s",
                             mpobj_type_name(o));
    /* Quote what arrived only when it is short, printable UTF-8: the
     * message goes back to the producer and into logs. */
    if (mpobj_str(o, 32, &s, err) == 0) {
        if ((b = receipt_backend_from_name(s.ptr, s.len)) >= 0) {
            *out = (uint8_t)b;
            return 0;
        }
        if (printable(s.ptr, s.len))
            return proto_err_set(err, PROTO_EINVALID, NULL,
                                 "expected one of cpu, wgpu-dx12, "
                                 "wgpu-vulkan, wgpu-metal, cuda, metal, "
                                 "unknown; got \"%.*s\"",
                                 (int)s.len, s.ptr);
    }
    return proto_err_set(err, PROTO_EINVALID, NULL,
                         "expected one of cpu, wgpu-dx12, wgpu-vulkan, "
                         "wgpu-metal, cuda, metal, unknown; got another "
                         "string");
}

/* Decodes top-level field f (any but schema_version) into r. */
static int
field(int f, const msgpack_object *o, struct receipt *r, struct unknowns *unk,
      struct proto_err *err)
{
    unsigned s = r->schema_version;
    int rc;

    switch (f) {
    case F_REQUESTED:
        rc = backend_field(o, &r->requested_backend, err);
        break;
    case F_EXECUTED:
        rc = backend_field(o, &r->executed_backend, err);
        break;
    case F_MODEL:
        rc = mpobj_str(o, RECEIPT_ID_MAX, &r->model_instance_id, err);
        break;
    case F_PLAN:
        rc = mpobj_str(o, RECEIPT_ID_MAX, &r->prepared_plan_id, err);
        break;
    case F_GRAPH:
        rc = mpobj_str(o, RECEIPT_ID_MAX, &r->graph_hash, err);
        break;
    case F_TUNING:
        rc = mpobj_str(o, RECEIPT_TUNING_MAX, &r->tuning_profile, err);
        break;
    case F_STOP:
        rc = mpobj_str(o, RECEIPT_ID_MAX, &r->stop_reason, err);
        break;
    case F_COVERAGE:
        rc = mpobj_uint(o, UINT64_MAX, &r->counter_coverage, err);
        break;
    case F_COUNTERS:
        if (s == 3)
            rc = u64_struct(o, counter_names, RECEIPT_NCOUNTERS_V3,
                            RECEIPT_NCOUNTERS_V2, RECEIPT_NCOUNTERS_V2,
                            RECEIPT_NCOUNTERS_V3, s, r->counters, 1, unk, err);
        else
            rc = u64_struct(o, counter_names, RECEIPT_NCOUNTERS_V2,
                            RECEIPT_NCOUNTERS_V2, RECEIPT_NCOUNTERS_V2,
                            RECEIPT_NCOUNTERS_V2, s, r->counters, 1, unk, err);
        break;
    case F_LATENCY:
        rc = u64_struct(o, latency_names, RECEIPT_NLATENCY, 0, 0,
                        RECEIPT_NLATENCY, s, r->counters + RECEIPT_NCOUNTERS_V3,
                        2, unk, err);
        break;
    case F_ARTIFACTS:
        rc = u64_struct(o, artifact_names, RECEIPT_NARTIFACTS,
                        RECEIPT_NARTIFACTS, RECEIPT_NARTIFACTS,
                        RECEIPT_NARTIFACTS, s, r->artifacts, 3, unk, err);
        break;
    default:
        rc = 0;
        break;
    }
    if (rc != 0)
        proto_err_prefix_field(err, top_names[f].s);
    return rc;
}

static int
schema_field(const msgpack_object *o, struct receipt *r, struct proto_err *err)
{
    uint64_t v;

    if (o == NULL)
        return proto_err_set(err, PROTO_EINVALID, "schema_version",
                             "missing required field schema_version");
    if (mpobj_uint(o, UINT16_MAX, &v, err) != 0) {
        proto_err_prefix_field(err, "schema_version");
        return PROTO_EINVALID;
    }
    if (v < RECEIPT_SCHEMA_MIN || v > RECEIPT_SCHEMA_MAX)
        return proto_err_set(err, PROTO_EUNSUPPORTED_SCHEMA, "schema_version",
                             "expected schema_version 1, 2 or 3, got %u",
                             (unsigned)v);
    r->schema_version = (uint16_t)v;
    return 0;
}

static int
decode_map(const msgpack_object *o, struct receipt *r, struct unknowns *unk,
           struct proto_err *err)
{
    const msgpack_object *slot[F_COUNT], *sv;
    unsigned f;
    int rc, dup;

    /* schema_version first, alone: a receipt of a schema we do not know is
     * unsupported_schema (kept for replay after an upgrade) whatever else
     * it holds, even keys this version would call invalid. */
    sv = map_get(o, &top_names[F_SCHEMA], &dup);
    if (dup)
        return proto_err_set(err, PROTO_EINVALID, "schema_version",
                             "duplicate key \"schema_version\"");
    if ((rc = schema_field(sv, r, err)) != 0)
        return rc;
    if ((rc = collect(o, top_names, F_COUNT, slot, &unk->count[0], err)) != 0)
        return rc;
    /* latency is a schema-3 field: in an older receipt it is an unknown key
     * like any other, kept in extra. */
    if (r->schema_version != 3 && slot[F_LATENCY] != NULL) {
        unk->latency_unknown = 1;
        unk->count[0]++;
    }
    unk->map[0] = o;
    unk->names[0] = top_names;
    unk->nnames[0] = F_COUNT;
    for (f = 1; f < F_COUNT; f++) {
        if (f == F_LATENCY && r->schema_version != 3)
            continue;
        if (slot[f] == NULL) {
            if (f == F_TUNING || f == F_LATENCY)
                continue;
            return missing(err, top_names[f].s, r->schema_version);
        }
        if ((rc = field((int)f, slot[f], r, unk, err)) != 0)
            return rc;
    }
    return 0;
}

static int
decode_array(const msgpack_object *o, struct receipt *r, struct unknowns *unk,
             struct proto_err *err)
{
    const struct layout *lay;
    uint32_t n = o->via.array.size;
    unsigned i;
    int rc;

    if (n == 0)
        return proto_err_set(err, PROTO_EINVALID, "schema_version",
                             "missing required field schema_version "
                             "(element 0 of the array form)");
    if ((rc = schema_field(&o->via.array.ptr[0], r, err)) != 0)
        return rc;
    lay = &layouts[r->schema_version];
    if (n != lay->n)
        return wrong_count(err, lay->n, lay->n, r->schema_version, n);
    for (i = 1; i < n; i++)
        if ((rc = field(lay->fields[i], &o->via.array.ptr[i], r, unk, err)) !=
            0)
            return rc;
    return 0;
}

/* Writes n bytes of a str body; msgpack-c would pass a NULL p of an empty
 * key to memcpy, which is undefined even for zero bytes. */
static int
write_bytes(msgpack_packer *pk, const char *p, size_t n)
{
    return n == 0 ? 0 : msgpack_pack_str_body(pk, p, n);
}

/* An unknown key: its path is prefix + key, its value as sent. */
struct keyref {
    const char *pre;
    size_t npre;
    const char *key;
    size_t nkey;
    const msgpack_object *val;
};

static unsigned char
keyref_at(const struct keyref *x, size_t i)
{
    return (unsigned char)(i < x->npre ? x->pre[i] : x->key[i - x->npre]);
}

/* Orders keys by the bytes of their whole paths, for qsort. */
static int
keyref_cmp(const void *a, const void *b)
{
    const struct keyref *x = a, *y = b;
    size_t nx = x->npre + x->nkey, ny = y->npre + y->nkey, i;
    unsigned char cx, cy;

    for (i = 0; i < nx && i < ny; i++) {
        cx = keyref_at(x, i);
        cy = keyref_at(y, i);
        if (cx != cy)
            return cx < cy ? -1 : 1;
    }
    return (nx > ny) - (nx < ny);
}

/*
 * An unknown key's value is returned by queries as it was sent, so it must
 * be what every reader of a reply accepts: strings (and map keys) of valid
 * UTF-8, and containers no deeper than RECEIPT_EXTRA_MAX_DEPTH, which
 * leaves room for the reply around it (envelope, result, rows, row, and a
 * nested map such as counters: five levels) within MPCHECK_MAX_DEPTH, the
 * limit of the daemon's frames and of receiptctl's replies alike. depth is
 * the containers around o. Returns 0 or PROTO_EINVALID with a message (the
 * caller sets the path).
 */
static int
extra_value_check(const msgpack_object *o, unsigned depth,
                  struct proto_err *err)
{
    uint32_t i;

    switch (o->type) {
    case MSGPACK_OBJECT_STR:
        if (!mpobj_utf8_valid(o->via.str.ptr, o->via.str.size))
            return proto_err_set(err, PROTO_EINVALID, NULL,
                                 "a string in this unknown key's value is "
                                 "not valid UTF-8");
        return 0;
    case MSGPACK_OBJECT_ARRAY:
    case MSGPACK_OBJECT_MAP:
        if (depth + 1 > RECEIPT_EXTRA_MAX_DEPTH)
            return proto_err_set(err, PROTO_EINVALID, NULL,
                                 "this unknown key's value is nested deeper "
                                 "than %d levels",
                                 RECEIPT_EXTRA_MAX_DEPTH);
        if (o->type == MSGPACK_OBJECT_ARRAY) {
            for (i = 0; i < o->via.array.size; i++)
                if (extra_value_check(&o->via.array.ptr[i], depth + 1, err))
                    return PROTO_EINVALID;
            return 0;
        }
        for (i = 0; i < o->via.map.size; i++)
            if (extra_value_check(&o->via.map.ptr[i].key, depth + 1, err) ||
                extra_value_check(&o->via.map.ptr[i].val, depth + 1, err))
                return PROTO_EINVALID;
        return 0;
    default:
        return 0;
    }
}

/*
 * Packs every unknown key into a new msgpack map, sorted by path, and hands
 * it to r. Sorting makes extra canonical (the same unknown keys give the
 * same bytes whatever order they came in, so a receipt that is encoded and
 * decoded again has byte-identical extra) and finds a key that repeats in
 * O(n log n), so a frame full of unknown keys cannot make this quadratic.
 * A repeated unknown key is a duplicate like any other.
 */
static int
build_extra(const struct unknowns *unk, struct receipt *r,
            struct proto_err *err)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct keyref *refs;
    const msgpack_object_kv *kv;
    const char *p;
    size_t n, i, total = 0, nref = 0;
    uint32_t k;
    int s, kn;

    for (s = 0; s < NSCOPES; s++)
        total += unk->count[s];
    if (total == 0)
        return 0;
    /* total is bounded by the number of map entries in the input, which
     * mpcheck bounds by the frame's size; the check is for inputs built by
     * hand. */
    if (total > SIZE_MAX / sizeof(*refs) || total > UINT32_MAX)
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "no memory for unknown keys");
    refs = malloc(total * sizeof(*refs));
    if (refs == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "no memory for unknown keys");
    for (s = 0; s < NSCOPES; s++) {
        if (unk->count[s] == 0)
            continue;
        for (k = 0; k < unk->map[s]->via.map.size && nref < total; k++) {
            kv = &unk->map[s]->via.map.ptr[k];
            key_bytes(&kv->key, &p, &n);
            kn = name_index(p, n, unk->names[s], unk->nnames[s], 0);
            if (kn >= 0 && !(s == 0 && kn == F_LATENCY && unk->latency_unknown))
                continue;
            refs[nref].pre = scope_prefix[s].s;
            refs[nref].npre = scope_prefix[s].len;
            refs[nref].key = p;
            refs[nref].nkey = n;
            refs[nref].val = &kv->val;
            nref++;
        }
    }
    qsort(refs, nref, sizeof(*refs), keyref_cmp);
    for (i = 0; i < nref; i++) {
        int dup = i > 0 && keyref_cmp(&refs[i - 1], &refs[i]) == 0;
        struct proto_err verr;

        proto_err_clear(&verr);
        if (dup || extra_value_check(refs[i].val, 0, &verr) != 0) {
            char path[PROTO_ERR_PATH_MAX + 1];

            /* One byte more than fits, so that proto_err_set sees the
             * truncation and does not cut a character in two. */
            n = refs[i].npre + refs[i].nkey;
            if (n > PROTO_ERR_PATH_MAX)
                n = PROTO_ERR_PATH_MAX;
            for (k = 0; k < n; k++)
                path[k] = (char)keyref_at(&refs[i], k);
            path[n] = '\0';
            free(refs);
            return proto_err_set(err, PROTO_EINVALID, path, "%s",
                                 dup ? "duplicate key" : verr.message);
        }
    }
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (msgpack_pack_map(&pk, (uint32_t)nref) != 0)
        goto nomem;
    for (i = 0; i < nref; i++)
        if (msgpack_pack_str(&pk, refs[i].npre + refs[i].nkey) != 0 ||
            write_bytes(&pk, refs[i].pre, refs[i].npre) != 0 ||
            write_bytes(&pk, refs[i].key, refs[i].nkey) != 0 ||
            msgpack_pack_object(&pk, *refs[i].val) != 0)
            goto nomem;
    free(refs);
    r->extra_len = sb.size;
    r->extra = msgpack_sbuffer_release(&sb);
    return 0;

nomem:
    free(refs);
    msgpack_sbuffer_destroy(&sb);
    return proto_err_set(err, PROTO_ENOMEM, NULL, "no memory for unknown keys");
}

int
receipt_decode(const msgpack_object *o, struct receipt *r,
               struct proto_err *err)
{
    struct unknowns unk;
    int rc;

    memset(r, 0, sizeof(*r));
    memset(&unk, 0, sizeof(unk));
    r->tuning_profile.ptr = "";
    if (o == NULL)
        rc = proto_err_set(err, PROTO_EINVALID, NULL,
                           "expected a receipt body, got none");
    else if (o->type == MSGPACK_OBJECT_MAP)
        rc = decode_map(o, r, &unk, err);
    else if (o->type == MSGPACK_OBJECT_ARRAY)
        rc = decode_array(o, r, &unk, err);
    else
        rc = proto_err_set(err, PROTO_EINVALID, NULL,
                           "expected a receipt as a map or an array, got %s",
                           mpobj_type_name(o));
    if (rc == 0)
        rc = build_extra(&unk, r, err);
    if (rc != 0)
        memset(r, 0, sizeof(*r));
    return rc;
}

/* ---- the fast path (receipt_decode_fast) ---- */

/* A str field of at most max bytes of valid UTF-8. */
static int
rd_text(struct mpread *d, size_t max, struct proto_str *out)
{
    const char *s;
    size_t n;

    if (mpread_str(d, &s, &n) != 0 || n > max || !mpobj_utf8_valid(s, n))
        return -1;
    out->ptr = s;
    out->len = n;
    return 0;
}

static int
rd_backend(struct mpread *d, uint8_t *out)
{
    const char *s;
    size_t n;
    int b;

    if (mpread_str(d, &s, &n) != 0 ||
        (b = name_scan(s, n, backend_names, RECEIPT_BACKEND_COUNT)) < 0)
        return -1;
    *out = (uint8_t)b;
    return 0;
}

/* A map of u64 fields: names[0, nknown) may appear, each once, and
 * names[0, nreq) must; *seen gets a bit for each that did. */
static int
rd_u64_map(struct mpread *d, const struct fname *names, unsigned nknown,
           unsigned nreq, uint64_t *out, uint32_t *seen_out)
{
    uint32_t n, i, seen = 0;
    unsigned hint = 0;
    const unsigned char *p;
    const char *k;
    size_t kn;
    int f;

    if (mpread_map(d, &n) != 0 || n > nknown)
        return -1;
    /* The plain forms (a fixstr key, a fixint value) are read here from a
     * local pointer; the rest by mpread_str and mpread_uint. A named
     * receipt has about 35 keys in these maps: they were a quarter of the
     * loop thread's instructions for a single receipt. */
    p = d->p;
    for (i = 0; i < n; i++) {
        if (p < d->end && (*p & 0xe0) == 0xa0 &&
            (size_t)(d->end - p) - 1 >= (size_t)(*p & 0x1f)) {
            kn = *p & 0x1f;
            k = (const char *)p + 1;
            p += 1 + kn;
        } else {
            d->p = p;
            if (mpread_str(d, &k, &kn) != 0)
                return -1;
            p = d->p;
        }
        if ((f = name_index(k, kn, names, nknown, hint)) < 0 || seen >> f & 1)
            return -1;
        if (p < d->end && *p < 0x80) {
            out[f] = *p++;
        } else {
            d->p = p;
            if (mpread_uint(d, &out[f]) != 0)
                return -1;
            p = d->p;
        }
        seen |= (uint32_t)1 << f;
        hint = (unsigned)f + 1;
    }
    d->p = p;
    *seen_out = seen;
    return (seen & (((uint32_t)1 << nreq) - 1)) == ((uint32_t)1 << nreq) - 1
               ? 0
               : -1;
}

/*
 * Top-level field f into r. The schema may come later in the map, so the
 * rules that depend on it are checked once it is known, from *counters
 * (the counters that came).
 */
static int
rd_field(struct mpread *d, int f, struct receipt *r, uint32_t *counters)
{
    uint32_t seen;
    uint64_t v;

    switch (f) {
    case F_SCHEMA:
        if (mpread_uint(d, &v) != 0 || v < RECEIPT_SCHEMA_MIN ||
            v > RECEIPT_SCHEMA_MAX)
            return -1;
        r->schema_version = (uint16_t)v;
        return 0;
    case F_REQUESTED:
        return rd_backend(d, &r->requested_backend);
    case F_EXECUTED:
        return rd_backend(d, &r->executed_backend);
    case F_MODEL:
        return rd_text(d, RECEIPT_ID_MAX, &r->model_instance_id);
    case F_PLAN:
        return rd_text(d, RECEIPT_ID_MAX, &r->prepared_plan_id);
    case F_GRAPH:
        return rd_text(d, RECEIPT_ID_MAX, &r->graph_hash);
    case F_TUNING:
        return rd_text(d, RECEIPT_TUNING_MAX, &r->tuning_profile);
    case F_STOP:
        return rd_text(d, RECEIPT_ID_MAX, &r->stop_reason);
    case F_COVERAGE:
        return mpread_uint(d, &r->counter_coverage);
    case F_COUNTERS:
        return rd_u64_map(d, counter_names, RECEIPT_NCOUNTERS_V3,
                          RECEIPT_NCOUNTERS_V2, r->counters, counters);
    case F_LATENCY:
        return rd_u64_map(d, latency_names, RECEIPT_NLATENCY, 0,
                          r->counters + RECEIPT_NCOUNTERS_V3, &seen);
    case F_ARTIFACTS:
        return rd_u64_map(d, artifact_names, RECEIPT_NARTIFACTS,
                          RECEIPT_NARTIFACTS, r->artifacts, &seen);
    default:
        return -1;
    }
}

/* An array of between lo and hi u64 fields into out[0..]. */
static int
rd_u64_array(struct mpread *d, unsigned lo, unsigned hi, uint64_t *out)
{
    uint32_t n, i;

    if (mpread_array(d, &n) != 0 || n < lo || n > hi)
        return -1;
    for (i = 0; i < n; i++) {
        if (d->p < d->end && *d->p < 0x80)
            out[i] = *d->p++;
        else if (mpread_uint(d, &out[i]) != 0)
            return -1;
    }
    return 0;
}

/*
 * The array (compact) form: rmp-serde's to_vec, the fields of the
 * schema's layout in order, the nested structs as arrays with the counts
 * field() allows. It has no unknown keys, so nothing goes to extra.
 */
static size_t
decode_fast_array(const char *buf, size_t len, struct receipt *r)
{
    const struct layout *lay;
    struct mpread d;
    uint32_t n, i, counters = 0;
    unsigned s;
    int f, rc;

    mpread_init(&d, buf, len);
    if (mpread_array(&d, &n) != 0 || n == 0 ||
        rd_field(&d, F_SCHEMA, r, &counters) != 0)
        return 0;
    s = r->schema_version;
    lay = &layouts[s];
    if (n != lay->n)
        return 0;
    for (i = 1; i < n; i++) {
        switch ((f = lay->fields[i])) {
        case F_COUNTERS:
            rc = rd_u64_array(&d, RECEIPT_NCOUNTERS_V2,
                              s == 3 ? RECEIPT_NCOUNTERS_V3
                                     : RECEIPT_NCOUNTERS_V2,
                              r->counters);
            break;
        case F_LATENCY:
            rc = rd_u64_array(&d, 0, RECEIPT_NLATENCY,
                              r->counters + RECEIPT_NCOUNTERS_V3);
            break;
        case F_ARTIFACTS:
            rc = rd_u64_array(&d, RECEIPT_NARTIFACTS, RECEIPT_NARTIFACTS,
                              r->artifacts);
            break;
        default:
            rc = rd_field(&d, f, r, &counters);
            break;
        }
        if (rc != 0)
            return 0;
    }
    return mpread_used(&d, buf);
}

size_t
receipt_decode_fast(const char *buf, size_t len, struct receipt *r)
{
    /* Every top-level field but tuning_profile and latency is required,
     * schema_version among them. */
    const uint32_t required = (((uint32_t)1 << F_COUNT) - 1) &
                              ~((uint32_t)1 << F_TUNING) &
                              ~((uint32_t)1 << F_LATENCY);
    struct mpread d;
    uint32_t n, i, seen = 0, counters = 0;
    unsigned hint = 0;
    const char *k;
    size_t kn;
    int f;

    memset(r, 0, sizeof(*r));
    r->tuning_profile.ptr = "";
    if (len > 0 &&
        (((unsigned char)*buf & 0xf0) == 0x90 || (unsigned char)*buf == 0xdc)) {
        size_t used = decode_fast_array(buf, len, r);

        if (used == 0)
            goto decline;
        return used;
    }
    mpread_init(&d, buf, len);
    if (mpread_map(&d, &n) != 0)
        goto decline;
    for (i = 0; i < n; i++) {
        if (mpread_str(&d, &k, &kn) != 0 ||
            (f = name_index(k, kn, top_names, F_COUNT, hint)) < 0 ||
            seen >> f & 1 || rd_field(&d, f, r, &counters) != 0)
            goto decline;
        seen |= (uint32_t)1 << f;
        hint = (unsigned)f + 1;
    }
    /* Before schema 3 latency and the counters past the first ten are
     * unknown keys, kept in extra: receipt_decode's. */
    if ((seen & required) == required &&
        (r->schema_version == 3 ||
         (!(seen >> F_LATENCY & 1) && counters >> RECEIPT_NCOUNTERS_V2 == 0)))
        return mpread_used(&d, buf);
decline:
    memset(r, 0, sizeof(*r));
    return 0;
}

/*
 * The scope an extra key belongs to when encoding: the nested struct its
 * prefix names, when that struct exists in the schema and the rest of the
 * key is not one of its fields there, else the top level. A top-level
 * unknown key spelled like a path ("counters.decode_steps") is thus put back
 * at the top level, where it came from, rather than onto a field; one that
 * names no field ("counters.x") goes into the struct, and decodes again to
 * the same extra either way.
 */
static int
extra_scope(const msgpack_object *k, unsigned schema)
{
    static const struct fname *const names[NSCOPES] = {
        NULL,
        counter_names,
        latency_names,
        artifact_names,
    };
    unsigned nnames[NSCOPES] = {
        0,
        schema == 3 ? RECEIPT_NCOUNTERS_V3 : RECEIPT_NCOUNTERS_V2,
        RECEIPT_NLATENCY,
        RECEIPT_NARTIFACTS,
    };
    const struct fname *pre;
    const char *p;
    size_t n;
    int s;

    if (!key_bytes(k, &p, &n))
        return 0;
    for (s = 1; s < NSCOPES; s++) {
        if (s == 2 && schema != 3)
            continue;
        pre = &scope_prefix[s];
        if (n > pre->len && memcmp(p, pre->s, pre->len) == 0)
            return name_index(p + pre->len, n - pre->len, names[s], nnames[s],
                              0) >= 0
                       ? 0
                       : s;
    }
    return 0;
}

static uint32_t
extra_count(const msgpack_object *extra, int scope, unsigned schema)
{
    uint32_t i, n = 0;

    if (extra == NULL)
        return 0;
    for (i = 0; i < extra->via.map.size; i++)
        if (extra_scope(&extra->via.map.ptr[i].key, schema) == scope)
            n++;
    return n;
}

static int
pack_extras(msgpack_packer *pk, const msgpack_object *extra, int scope,
            unsigned schema)
{
    const msgpack_object_kv *kv;
    const char *p;
    size_t n, plen = scope_prefix[scope].len;
    uint32_t i;

    if (extra == NULL)
        return 0;
    for (i = 0; i < extra->via.map.size; i++) {
        kv = &extra->via.map.ptr[i];
        if (extra_scope(&kv->key, schema) != scope)
            continue;
        key_bytes(&kv->key, &p, &n);
        if (msgpack_pack_str(pk, n - plen) != 0 ||
            write_bytes(pk, p + plen, n - plen) != 0 ||
            msgpack_pack_object(pk, kv->val) != 0)
            return -1;
    }
    return 0;
}

static int
pack_cstr(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);

    if (msgpack_pack_str(pk, n) != 0)
        return -1;
    return msgpack_pack_str_body(pk, s, n);
}

/* A field's name: a fixstr's header and its bytes in one write (a
 * receipt has some forty names, and a packer's writes are calls through
 * a pointer), the same bytes msgpack_pack_str would make. */
static int
pack_name(msgpack_packer *pk, const struct fname *f)
{
    char b[32];

    if (f->len >= sizeof(b)) {
        if (msgpack_pack_str(pk, f->len) != 0)
            return -1;
        return msgpack_pack_str_body(pk, f->s, f->len);
    }
    b[0] = (char)(0xa0 | f->len);
    memcpy(b + 1, f->s, f->len);
    return pk->callback(pk->data, b, f->len + 1);
}

static int
pack_pstr(msgpack_packer *pk, const struct proto_str *s)
{
    if (msgpack_pack_str(pk, s->len) != 0)
        return -1;
    return write_bytes(pk, s->ptr, s->len);
}

/* v as msgpack_pack_uint64 packs it (the shortest form) at p; returns
 * the end. */
static unsigned char *
put_uint(unsigned char *p, uint64_t v)
{
    unsigned n, i;

    if (v < 128) {
        *p++ = (unsigned char)v;
        return p;
    }
    if (v < 256) {
        *p++ = 0xcc;
        n = 1;
    } else if (v < 65536) {
        *p++ = 0xcd;
        n = 2;
    } else if (v < 4294967296ull) {
        *p++ = 0xce;
        n = 4;
    } else {
        *p++ = 0xcf;
        n = 8;
    }
    for (i = 0; i < n; i++)
        *p++ = (unsigned char)(v >> (8 * (n - 1 - i)));
    return p;
}

/* The most u64 fields a map of them has (counters of schema 3). */
#define U64_MAP_MAX RECEIPT_NCOUNTERS_V3

/*
 * Packs a map of u64 fields, then the extras of its scope. The fields go
 * to the packer in one write, built here with the bytes msgpack's
 * functions would make (names of at most 31 bytes): a receipt's counters
 * were some fifty writes through the packer's pointer.
 */
static int
pack_u64_map(msgpack_packer *pk, const struct fname *names, unsigned n,
             const uint64_t *v, const msgpack_object *extra, int scope,
             unsigned schema)
{
    unsigned char buf[3 + U64_MAP_MAX * (32 + 9)], *p = buf;
    uint32_t size = n + extra_count(extra, scope, schema);
    unsigned i;

    if (n > U64_MAP_MAX || size > 65535)
        goto slow;
    for (i = 0; i < n; i++)
        if (names[i].len > 31)
            goto slow;
    if (size < 16) {
        *p++ = (unsigned char)(0x80 | size);
    } else {
        *p++ = 0xde;
        *p++ = (unsigned char)(size >> 8);
        *p++ = (unsigned char)size;
    }
    for (i = 0; i < n; i++) {
        *p++ = (unsigned char)(0xa0 | names[i].len);
        memcpy(p, names[i].s, names[i].len);
        p = put_uint(p + names[i].len, v[i]);
    }
    if (pk->callback(pk->data, (const char *)buf, (size_t)(p - buf)) != 0)
        return -1;
    return pack_extras(pk, extra, scope, schema);
slow:
    if (msgpack_pack_map(pk, size) != 0)
        return -1;
    for (i = 0; i < n; i++)
        if (pack_name(pk, &names[i]) != 0 || msgpack_pack_uint64(pk, v[i]) != 0)
            return -1;
    return pack_extras(pk, extra, scope, schema);
}

/* Top-level field f of r that is not a struct of u64 fields, as both
 * forms write it. */
static int
pack_scalar(msgpack_packer *pk, const struct receipt *r, int f)
{
    switch (f) {
    case F_SCHEMA:
        return msgpack_pack_uint16(pk, r->schema_version);
    case F_REQUESTED:
        return pack_cstr(pk, receipt_backend_name(r->requested_backend));
    case F_EXECUTED:
        return pack_cstr(pk, receipt_backend_name(r->executed_backend));
    case F_MODEL:
        return pack_pstr(pk, &r->model_instance_id);
    case F_PLAN:
        return pack_pstr(pk, &r->prepared_plan_id);
    case F_GRAPH:
        return pack_pstr(pk, &r->graph_hash);
    case F_TUNING:
        return pack_pstr(pk, &r->tuning_profile);
    case F_STOP:
        return pack_pstr(pk, &r->stop_reason);
    case F_COVERAGE:
        return msgpack_pack_uint64(pk, r->counter_coverage);
    default:
        return -1;
    }
}

static int
encode(const struct receipt *r, const msgpack_object *extra, msgpack_packer *pk,
       unsigned flags)
{
    unsigned s = r->schema_version, i, f;
    const struct layout *lay;
    int with_tuning;
    uint32_t n;

    if (s < RECEIPT_SCHEMA_MIN || s > RECEIPT_SCHEMA_MAX)
        return -1;
    lay = &layouts[s];
    /* A schema-1 receipt has no tuning_profile; one that carried a value
     * anyway keeps it, so that encoding then decoding changes nothing. */
    with_tuning = s != 1 || r->tuning_profile.len > 0 ||
                  (flags & RECEIPT_ENCODE_TUNING) != 0;
    n = lay->n + (s == 1 && with_tuning) + extra_count(extra, 0, s);
    if (msgpack_pack_map(pk, n) != 0)
        return -1;
    for (i = 0; i < lay->n; i++) {
        f = lay->fields[i];
        if (s == 1 && f == F_STOP && with_tuning &&
            (pack_name(pk, &top_names[F_TUNING]) != 0 ||
             pack_pstr(pk, &r->tuning_profile) != 0))
            return -1;
        if (pack_name(pk, &top_names[f]) != 0)
            return -1;
        switch (f) {
        default:
            if (pack_scalar(pk, r, (int)f) != 0)
                return -1;
            break;
        case F_COUNTERS:
            if (pack_u64_map(pk, counter_names,
                             s == 3 ? RECEIPT_NCOUNTERS_V3
                                    : RECEIPT_NCOUNTERS_V2,
                             r->counters, extra, 1, s) != 0)
                return -1;
            break;
        case F_LATENCY:
            if (pack_u64_map(pk, latency_names, RECEIPT_NLATENCY,
                             r->counters + RECEIPT_NCOUNTERS_V3, extra, 2,
                             s) != 0)
                return -1;
            break;
        case F_ARTIFACTS:
            if (pack_u64_map(pk, artifact_names, RECEIPT_NARTIFACTS,
                             r->artifacts, extra, 3, s) != 0)
                return -1;
            break;
        }
    }
    return pack_extras(pk, extra, 0, s);
}

/* An array of n u64 fields, in one write. */
static int
pack_u64_array(msgpack_packer *pk, const uint64_t *v, unsigned n)
{
    unsigned char buf[3 + U64_MAP_MAX * 9], *p = buf;
    unsigned i;

    if (n > U64_MAP_MAX)
        return -1;
    if (n < 16) {
        *p++ = (unsigned char)(0x90 | n);
    } else {
        *p++ = 0xdc;
        *p++ = 0;
        *p++ = (unsigned char)n;
    }
    for (i = 0; i < n; i++)
        p = put_uint(p, v[i]);
    return pk->callback(pk->data, (const char *)buf, (size_t)(p - buf));
}

int
receipt_encode_compact(const struct receipt *r, msgpack_packer *pk)
{
    unsigned s = r->schema_version, i;
    const struct layout *lay;

    /* Unknown keys, and a schema-1 tuning_profile, have no place in the
     * array form. */
    if ((r->extra != NULL && r->extra_len > 0) ||
        (s == 1 && r->tuning_profile.len > 0))
        return receipt_encode(r, pk);
    if (s < RECEIPT_SCHEMA_MIN || s > RECEIPT_SCHEMA_MAX)
        return -1;
    lay = &layouts[s];
    if (msgpack_pack_array(pk, lay->n) != 0)
        return -1;
    for (i = 0; i < lay->n; i++) {
        int rc = 0;

        switch (lay->fields[i]) {
        default:
            rc = pack_scalar(pk, r, lay->fields[i]);
            break;
        case F_COUNTERS:
            rc = pack_u64_array(pk, r->counters,
                                s == 3 ? RECEIPT_NCOUNTERS_V3
                                       : RECEIPT_NCOUNTERS_V2);
            break;
        case F_LATENCY:
            rc = pack_u64_array(pk, r->counters + RECEIPT_NCOUNTERS_V3,
                                RECEIPT_NLATENCY);
            break;
        case F_ARTIFACTS:
            rc = pack_u64_array(pk, r->artifacts, RECEIPT_NARTIFACTS);
            break;
        }
        if (rc != 0)
            return -1;
    }
    return 0;
}

int
receipt_encode_flags(const struct receipt *r, msgpack_packer *pk,
                     unsigned flags)
{
    msgpack_unpacked up;
    size_t off = 0;
    int rc;

    if (r->extra == NULL || r->extra_len == 0 ||
        (flags & RECEIPT_ENCODE_NO_EXTRA) != 0)
        return encode(r, NULL, pk, flags);
    /* extra was packed by receipt_decode, so it is one map; unpacking it
     * costs an allocation, which only receipts with unknown keys pay. */
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, r->extra, r->extra_len, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        up.data.type != MSGPACK_OBJECT_MAP)
        rc = -1;
    else
        rc = encode(r, &up.data, pk, flags);
    msgpack_unpacked_destroy(&up);
    return rc;
}

int
receipt_encode(const struct receipt *r, msgpack_packer *pk)
{
    return receipt_encode_flags(r, pk, 0);
}
