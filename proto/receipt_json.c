/*
 * receipt_json.c: receipts in the serde_json form (for importing files).
 *
 * The JSON tree is mirrored as a msgpack-c object tree in a scratch zone,
 * with strings pointing into json-c's own storage, and handed to
 * receipt_decode, so both forms share one validator and one set of error
 * messages. Integers keep their exact value up to 2^64-1 (json-c holds big
 * positives as uint64); floats stay floats and are rejected where an integer
 * is expected. The zone is freed before returning: the receipt's strings
 * borrow json-c's storage, and extra is packed into its own buffer.
 *
 * json-c changes two things silently when it parses: an integer beyond
 * 2^64-1 becomes 2^64-1 (and one below -2^63 becomes -2^63), and of a key
 * repeated in one object only the last is kept (a repeat may be spelled
 * with escapes: "a" and "\u0061" are one key to json-c).
 * receipt_json_parse() scans the text once more after json-c accepted it,
 * decoding escaped keys as json-c does, so both are rejected with the path
 * at fault instead. Pure; any thread.
 */
#include "receipt_json.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

/* Deeper than any receipt needs; bounds the recursion for trees built by
 * hand (the tokener has its own limit of 32). */
#define JSON_MAX_DEPTH 64

static int
mirror(struct json_object *j, msgpack_object *out, msgpack_zone *z, int depth,
       struct proto_err *err)
{
    struct json_object_iterator it, end;
    size_t i, n;
    int64_t v;
    int rc;

    if (depth > JSON_MAX_DEPTH)
        return proto_err_set(err, PROTO_EINVALID, NULL,
                             "JSON nesting deeper than %d", JSON_MAX_DEPTH);
    memset(out, 0, sizeof(*out));
    switch (json_object_get_type(j)) {
    case json_type_null:
        out->type = MSGPACK_OBJECT_NIL;
        return 0;
    case json_type_boolean:
        out->type = MSGPACK_OBJECT_BOOLEAN;
        out->via.boolean = json_object_get_boolean(j) != 0;
        return 0;
    case json_type_double:
        out->type = MSGPACK_OBJECT_FLOAT64;
        out->via.f64 = json_object_get_double(j);
        return 0;
    case json_type_int:
        /* json-c keeps an int64 or, for big positives, a uint64; the
         * int64 view of a big positive saturates at INT64_MAX, so its sign
         * is the value's sign. */
        v = json_object_get_int64(j);
        if (v < 0) {
            out->type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
            out->via.i64 = v;
        } else {
            out->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
            out->via.u64 = json_object_get_uint64(j);
        }
        return 0;
    case json_type_string:
        out->type = MSGPACK_OBJECT_STR;
        out->via.str.ptr = json_object_get_string(j);
        out->via.str.size = (uint32_t)json_object_get_string_len(j);
        return 0;
    case json_type_array:
        n = json_object_array_length(j);
        out->type = MSGPACK_OBJECT_ARRAY;
        out->via.array.size = (uint32_t)n;
        if (n == 0)
            return 0;
        out->via.array.ptr = msgpack_zone_malloc(z, n * sizeof(msgpack_object));
        if (out->via.array.ptr == NULL)
            return proto_err_set(err, PROTO_ENOMEM, NULL,
                                 "no memory for a JSON array");
        for (i = 0; i < n; i++) {
            rc = mirror(json_object_array_get_idx(j, i), &out->via.array.ptr[i],
                        z, depth + 1, err);
            if (rc != 0)
                return rc;
        }
        return 0;
    case json_type_object:
        n = (size_t)json_object_object_length(j);
        out->type = MSGPACK_OBJECT_MAP;
        out->via.map.size = (uint32_t)n;
        if (n == 0)
            return 0;
        out->via.map.ptr =
            msgpack_zone_malloc(z, n * sizeof(msgpack_object_kv));
        if (out->via.map.ptr == NULL)
            return proto_err_set(err, PROTO_ENOMEM, NULL,
                                 "no memory for a JSON object");
        it = json_object_iter_begin(j);
        end = json_object_iter_end(j);
        for (i = 0; i < n && !json_object_iter_equal(&it, &end); i++) {
            msgpack_object_kv *kv = &out->via.map.ptr[i];
            const char *name = json_object_iter_peek_name(&it);

            kv->key.type = MSGPACK_OBJECT_STR;
            kv->key.via.str.ptr = name;
            kv->key.via.str.size = (uint32_t)strlen(name);
            rc = mirror(json_object_iter_peek_value(&it), &kv->val, z,
                        depth + 1, err);
            if (rc != 0)
                return rc;
            json_object_iter_next(&it);
        }
        out->via.map.size = (uint32_t)i;
        return 0;
    }
    return proto_err_set(err, PROTO_EINVALID, NULL,
                         "unexpected JSON value type");
}

int
receipt_decode_json(struct json_object *o, struct receipt *r,
                    struct proto_err *err)
{
    msgpack_zone *z;
    msgpack_object mo;
    int rc;

    memset(r, 0, sizeof(*r));
    if (o == NULL)
        return receipt_decode(NULL, r, err);
    z = msgpack_zone_new(4096);
    if (z == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "no memory to read a JSON receipt");
    rc = mirror(o, &mo, z, 0, err);
    if (rc == 0)
        rc = receipt_decode(&mo, r, err);
    msgpack_zone_free(z);
    return rc;
}

/*
 * The scan of receipt_json_parse(). It runs only on text json-c accepted, so
 * it may assume valid JSON, but every read is still bounds-checked.
 */
#define SCAN_MAX_DEPTH 64

struct scan_frame {
    int is_obj;
    size_t index;    /* arrays: the current element */
    const char *key; /* objects: the current key, raw (escapes kept) */
    size_t keylen;
    size_t keys_start; /* objects: first of its keys in scan.keys */
};

struct scan_key {
    const char *p; /* the key as json-c stores it */
    size_t n;
    int owned; /* p was decoded into its own allocation */
};

struct scan {
    struct scan_frame st[SCAN_MAX_DEPTH];
    int depth;
    struct scan_key *keys;
    size_t nkeys, capkeys;
};

/* Frees the decoded keys from index from on and forgets them. */
static void
scan_pop_keys(struct scan *sc, size_t from)
{
    size_t i;

    for (i = from; i < sc->nkeys; i++)
        if (sc->keys[i].owned)
            free((char *)(uintptr_t)sc->keys[i].p);
    sc->nkeys = from;
}

static unsigned
hex4(const char *p)
{
    unsigned v = 0;
    int i;

    for (i = 0; i < 4; i++) {
        char c = p[i];

        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
    }
    return v;
}

static size_t
put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/*
 * Decodes the escapes of a raw key (p[0..n), valid JSON, without quotes)
 * the way json-c does, so that "a" and "\u0061" are seen as one key: a
 * surrogate pair is one code point, a lone surrogate becomes U+FFFD, and
 * the key ends at a \u0000 (json-c keeps keys as C strings). The result
 * is never longer than the raw key. Returns a malloc'd buffer, or NULL.
 */
static char *
decode_key(const char *p, size_t n, size_t *outn)
{
    char *o = malloc(n ? n : 1);
    size_t i = 0, k = 0;
    unsigned cp, lo;

    if (o == NULL)
        return NULL;
    while (i < n) {
        if (p[i] != '\\' || i + 1 >= n) {
            o[k++] = p[i++];
            continue;
        }
        switch (p[i + 1]) {
        case 'b':
            o[k++] = '\b';
            break;
        case 'f':
            o[k++] = '\f';
            break;
        case 'n':
            o[k++] = '\n';
            break;
        case 'r':
            o[k++] = '\r';
            break;
        case 't':
            o[k++] = '\t';
            break;
        case 'u':
            if (i + 6 > n)
                goto done; /* not valid JSON; json-c refused it */
            cp = hex4(p + i + 2);
            i += 6;
            if (cp == 0)
                goto done;
            if (cp >= 0xd800 && cp <= 0xdbff && i + 6 <= n && p[i] == '\\' &&
                p[i + 1] == 'u' && (lo = hex4(p + i + 2)) >= 0xdc00 &&
                lo <= 0xdfff) {
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                i += 6;
            } else if (cp >= 0xd800 && cp <= 0xdfff) {
                cp = 0xfffd;
            }
            k += put_utf8(o + k, cp);
            continue;
        default: /* \" \\ \/ */
            o[k++] = p[i + 1];
            break;
        }
        i += 2;
    }
done:
    *outn = k;
    return o;
}

/*
 * Writes the path of the current position into out[0..cap), keys as
 * written. The caller's buffer is one byte larger than a path may be, so
 * that proto_err_set sees a truncation and trims a cut character.
 */
static void
scan_path(const struct scan *sc, char *out, size_t cap)
{
    size_t at = 0, n;
    int i, put;

    out[0] = '\0';
    for (i = 0; i < sc->depth; i++) {
        if (!sc->st[i].is_obj) {
            put = snprintf(out + at, cap - at, "[%zu]", sc->st[i].index);
            if (put < 0 || (size_t)put >= cap - at)
                return;
            at += (size_t)put;
            continue;
        }
        if (sc->st[i].key == NULL)
            continue;
        if (at > 0 && at < cap - 1)
            out[at++] = '.';
        n = sc->st[i].keylen;
        if (n > cap - 1 - at)
            n = cap - 1 - at;
        memcpy(out + at, sc->st[i].key, n);
        at += n;
        out[at] = '\0';
    }
}

static int
key_cmp(const void *a, const void *b)
{
    const struct scan_key *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->p, y->p, n);

    if (c != 0)
        return c;
    return (x->n > y->n) - (x->n < y->n);
}

/* Closes an object: sorts its keys and fails on a repeat. */
static int
scan_close_obj(struct scan *sc, struct proto_err *err)
{
    struct scan_frame *f = &sc->st[sc->depth - 1];
    char path[PROTO_ERR_PATH_MAX + 1];
    struct scan_key *k;
    size_t n = sc->nkeys - f->keys_start, i;

    /* With no keys yet there is no array at all, and qsort must not see
     * its NULL. */
    if (n < 2) {
        scan_pop_keys(sc, f->keys_start);
        return 0;
    }
    k = sc->keys + f->keys_start;
    qsort(k, n, sizeof(*k), key_cmp);
    for (i = 1; i < n; i++) {
        if (key_cmp(&k[i - 1], &k[i]) == 0) {
            f->key = k[i].p;
            f->keylen = k[i].n;
            scan_path(sc, path, sizeof(path));
            return proto_err_set(err, PROTO_EINVALID, path, "duplicate key");
        }
    }
    scan_pop_keys(sc, f->keys_start);
    return 0;
}

/* Fails on an integer literal that json-c would saturate. */
static int
scan_number(struct scan *sc, const char *p, size_t n, struct proto_err *err)
{
    static const char umax[] = "18446744073709551615";
    static const char imin[] = "9223372036854775808";
    char path[PROTO_ERR_PATH_MAX + 1];
    const char *d = p;
    size_t i, nd;
    int over;

    for (i = 0; i < n; i++)
        if (p[i] == '.' || p[i] == 'e' || p[i] == 'E')
            return 0;
    if (n > 0 && d[0] == '-') {
        d++;
        nd = n - 1;
        over = nd > sizeof(imin) - 1 ||
               (nd == sizeof(imin) - 1 && memcmp(d, imin, nd) > 0);
    } else {
        nd = n;
        over = nd > sizeof(umax) - 1 ||
               (nd == sizeof(umax) - 1 && memcmp(d, umax, nd) > 0);
    }
    if (!over)
        return 0;
    scan_path(sc, path, sizeof(path));
    return proto_err_set(err, PROTO_EINVALID, path,
                         "expected an unsigned integer at most %s, got %.*s",
                         umax, (int)(n > 40 ? 40 : n), p);
}

static int
scan_text(struct scan *sc, const char *t, size_t len, struct proto_err *err)
{
    struct scan_key *k;
    struct scan_frame *f;
    size_t i = 0, start;
    int want_key = 0, rc;

    while (i < len) {
        char c = t[i];

        f = sc->depth > 0 ? &sc->st[sc->depth - 1] : NULL;
        switch (c) {
        case '{':
        case '[':
            if (sc->depth == SCAN_MAX_DEPTH)
                return proto_err_set(err, PROTO_EINVALID, NULL,
                                     "JSON nesting deeper than %d",
                                     SCAN_MAX_DEPTH);
            f = &sc->st[sc->depth++];
            memset(f, 0, sizeof(*f));
            f->is_obj = c == '{';
            f->keys_start = sc->nkeys;
            want_key = f->is_obj;
            i++;
            break;
        case '}':
        case ']':
            if (f == NULL)
                return proto_err_set(err, PROTO_EMALFORMED, NULL,
                                     "unbalanced JSON");
            if (f->is_obj && (rc = scan_close_obj(sc, err)) != 0)
                return rc;
            sc->depth--;
            want_key = 0;
            i++;
            break;
        case ',':
            if (f != NULL && f->is_obj)
                want_key = 1;
            else if (f != NULL)
                f->index++;
            i++;
            break;
        case ':':
            want_key = 0;
            i++;
            break;
        case '"':
            start = ++i;
            while (i < len && t[i] != '"')
                i += t[i] == '\\' ? 2 : 1;
            if (i >= len)
                return proto_err_set(err, PROTO_EMALFORMED, NULL,
                                     "unterminated JSON string");
            if (want_key && f != NULL && f->is_obj) {
                if (sc->nkeys == sc->capkeys) {
                    size_t cap = sc->capkeys ? sc->capkeys * 2 : 64;
                    struct scan_key *keys =
                        realloc(sc->keys, cap * sizeof(*sc->keys));

                    if (keys == NULL)
                        return proto_err_set(err, PROTO_ENOMEM, NULL,
                                             "no memory to check JSON keys");
                    sc->keys = keys;
                    sc->capkeys = cap;
                }
                k = &sc->keys[sc->nkeys];
                k->p = t + start;
                k->n = i - start;
                k->owned = memchr(k->p, '\\', k->n) != NULL;
                if (k->owned &&
                    (k->p = decode_key(t + start, i - start, &k->n)) == NULL)
                    return proto_err_set(err, PROTO_ENOMEM, NULL,
                                         "no memory to check JSON keys");
                sc->nkeys++;
                f->key = t + start;
                f->keylen = i - start;
                want_key = 0;
            }
            i++;
            break;
        default:
            if (c == '-' || (c >= '0' && c <= '9')) {
                start = i;
                while (i < len && (t[i] == '-' || t[i] == '+' || t[i] == '.' ||
                                   t[i] == 'e' || t[i] == 'E' ||
                                   (t[i] >= '0' && t[i] <= '9')))
                    i++;
                if ((rc = scan_number(sc, t + start, i - start, err)) != 0)
                    return rc;
                break;
            }
            i++;
            break;
        }
    }
    return 0;
}

int
receipt_json_parse(const char *text, size_t len, struct json_object **out,
                   struct proto_err *err)
{
    struct json_tokener *tok;
    struct json_object *o;
    struct scan *sc;
    size_t end;
    int rc;

    *out = NULL;
    if (len >= INT_MAX)
        return proto_err_set(err, PROTO_ETOO_LARGE, NULL,
                             "JSON text of %zu bytes is too large", len);
    tok = json_tokener_new();
    if (tok == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "no memory to parse JSON");
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT |
                                    JSON_TOKENER_ALLOW_TRAILING_CHARS |
                                    JSON_TOKENER_VALIDATE_UTF8);
    o = json_tokener_parse_ex(tok, text, (int)len);
    end = json_tokener_get_parse_end(tok);
    /* A number at the very end needs to see the end of the input; then
     * the whole text was consumed. */
    if (o == NULL && json_tokener_get_error(tok) == json_tokener_continue) {
        o = json_tokener_parse_ex(tok, "", 1);
        end = len;
    }
    if (o == NULL) {
        rc = proto_err_set(err, PROTO_EMALFORMED, NULL,
                           "expected one JSON value: %s at byte %zu",
                           json_tokener_error_desc(json_tokener_get_error(tok)),
                           end);
        json_tokener_free(tok);
        return rc;
    }
    json_tokener_free(tok);
    /* After a number the tokener may have read the terminator we fed it;
     * only whitespace may follow the value in the text itself. */
    for (; end < len; end++)
        if (text[end] != ' ' && text[end] != '\t' && text[end] != '\n' &&
            text[end] != '\r') {
            json_object_put(o);
            return proto_err_set(err, PROTO_EMALFORMED, NULL,
                                 "trailing bytes after the JSON value at "
                                 "byte %zu",
                                 end);
        }
    sc = calloc(1, sizeof(*sc));
    if (sc == NULL) {
        json_object_put(o);
        return proto_err_set(err, PROTO_ENOMEM, NULL,
                             "no memory to parse JSON");
    }
    rc = scan_text(sc, text, len, err);
    scan_pop_keys(sc, 0);
    free(sc->keys);
    free(sc);
    if (rc != 0) {
        json_object_put(o);
        return rc;
    }
    *out = o;
    return 0;
}
