/*
 * import.c: `receiptctl import FILE...`: receipts from msgpack or
 * serde_json files, checked locally with proto/receipt.h, then sent in
 * pipelined `receipts` batches, or, with --source, as `receipt` writes
 * numbered by their position in the input (seq), so an import run again
 * after an interruption stores each receipt once.
 *
 * Files are read one at a time; each receipt is decoded (JSON strictly, one
 * item at a time so a bad item does not hide the others), re-encoded as
 * msgpack and queued. Full batches leave as soon as they exist, up to
 * IMPORT_WINDOW in flight, and a receipt's bytes are freed when its batch is
 * answered. Every rejection, local or the daemon's, is kept with its file
 * and item index and printed at the end, sorted. Single-threaded.
 */
#include "import.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>
#include <msgpack.h>

#include "clock.h"
#include "envelope.h"
#include "invariant.h"
#include "mpcheck.h"
#include "mpobj.h"
#include "net.h"
#include "output.h"
#include "plan_cmds.h"
#include "receipt.h"
#include "receipt_json.h"

/* Requests in flight during an import: enough to keep the daemon's group
 * commit fed, few enough that their replies never fill its per-connection
 * reply cap while this process is busy writing. */
#define IMPORT_WINDOW 8

/* Single `receipt` writes in flight when numbered: enough for the daemon's
 * group commit to gather hundreds per transaction, well under its 4,096
 * requests awaiting replies per connection and its reply budget. */
#define IMPORT_SEQ_WINDOW 512

struct item {
    size_t file;
    size_t index;
    size_t line;  /* 1-based line of a JSON item; 0 for msgpack */
    uint64_t seq; /* its position in the input, 1-based; 0: not numbered */
    char *data;   /* owned msgpack bytes of one receipt */
    size_t len;
};

struct reject {
    size_t file;
    size_t index;
    size_t line;   /* as in struct item */
    int has_index; /* the item's index says more than its line (msgpack,
                    * a JSON array) */
    char code[32];
    char path[PROTO_ERR_PATH_MAX];
    char message[PROTO_ERR_MSG_MAX];
};

struct import {
    char **files; /* borrowed from argv */
    size_t nfiles;
    struct item *items;
    size_t nitems, icap;
    struct reject *rej;
    size_t nrej, rcap;
    uint64_t accepted;
    uint64_t duplicates; /* numbered writes the daemon already had */
    size_t acked;        /* items whose batch got a reply */
    /* Numbering (--source): every receipt of the input takes the next
     * position, valid or not, so a corrected file keeps its numbers. */
    int numbered;
    uint64_t pos;
    /* Where the file being read is: its bytes, and the line count up to
     * line_at, for JSON items' line numbers. */
    const char *base, *line_at;
    size_t line;
    int in_array; /* reading the items of a JSON array */
    /* Progress on a terminal. */
    int progress;
    uint64_t t0_ms, last_ms, bytes_total, bytes_before;
    size_t cur_len;
    /* Where full batches go while files are still being read. */
    struct sender *snd;
    struct cli_opts *o;
    const char *source;
};

struct sender;
static void sender_pump(struct import *im, struct sender *s, struct cli_opts *o,
                        const char *source, int final);

static void
add_reject_at(struct import *im, size_t file, size_t index, size_t line,
              const char *code, const char *path, const char *message)
{
    struct reject *r;

    if (im->nrej == im->rcap) {
        size_t cap = im->rcap ? im->rcap * 2 : 16;

        r = realloc(im->rej, cap * sizeof(*r));
        if (r == NULL)
            cli_oom();
        im->rej = r;
        im->rcap = cap;
    }
    r = &im->rej[im->nrej++];
    r->file = file;
    r->index = index;
    r->line = line;
    r->has_index = line == 0 || im->in_array;
    snprintf(r->code, sizeof(r->code), "%s", code);
    snprintf(r->path, sizeof(r->path), "%s", path ? path : "");
    snprintf(r->message, sizeof(r->message), "%s", message);
}

/* The 1-based line of p in the file being read (p at or after the last
 * one asked: items come in order). */
static size_t
line_of(struct import *im, const char *p)
{
    for (; im->line_at < p; im->line_at++)
        if (*im->line_at == '\n')
            im->line++;
    return im->line;
}

static void
add_reject(struct import *im, size_t file, size_t index, const char *code,
           const char *path, const char *message)
{
    add_reject_at(im, file, index, 0, code, path, message);
}

/* A failure of the file as a whole (not of one item in it). */
static void
add_file_reject(struct import *im, size_t file, const char *message)
{
    add_reject_at(im, file, 0, 0, "malformed", "", message);
    im->rej[im->nrej - 1].has_index = 0;
}

static void progress(struct import *im, int final);

/* Copies sb's bytes as the next item. */
static void
add_item(struct import *im, size_t file, size_t index, size_t line,
         msgpack_sbuffer *sb)
{
    struct item *it;

    if (im->nitems == im->icap) {
        size_t cap = im->icap ? im->icap * 2 : 256;

        it = realloc(im->items, cap * sizeof(*it));
        if (it == NULL)
            cli_oom();
        im->items = it;
        im->icap = cap;
    }
    it = &im->items[im->nitems++];
    it->file = file;
    it->index = index;
    it->line = line;
    it->seq = im->numbered ? im->pos : 0;
    it->len = sb->size;
    /* An sbuffer starts at 8 KiB; a receipt is a few hundred bytes, and
     * thousands of them wait while their batches are in flight (all of a
     * file's when the daemon cannot be reached). */
    it->data = malloc(sb->size ? sb->size : 1);
    if (it->data == NULL)
        cli_oom();
    memcpy(it->data, sb->data, sb->size);
    /* Send as soon as a batch is full, so a large file is not held in
     * memory as a whole: at most IMPORT_WINDOW + 1 batches wait. */
    if (im->snd != NULL)
        sender_pump(im, im->snd, im->o, im->source, 0);
    progress(im, 0);
}

/* Decodes one receipt from the JSON text buf[0..len) (strictly: integers
 * past 2^64-1 and repeated keys are errors, not silently changed). */
static void
json_item(struct import *im, size_t file, size_t index, const char *buf,
          size_t len)
{
    size_t line = line_of(im, buf);
    struct json_object *obj = NULL;
    struct receipt r;
    struct proto_err err;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    im->pos++;
    proto_err_clear(&err);
    rc = receipt_json_parse(buf, len, &obj, &err);
    if (rc == 0)
        rc = receipt_decode_json(obj, &r, &err);
    if (rc != 0) {
        add_reject_at(im, file, index, line, proto_code_name(rc), err.path,
                      err.message);
        json_object_put(obj);
        return;
    }
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (receipt_encode(&r, &pk) != 0)
        cli_oom();
    receipt_clear(&r);
    json_object_put(obj);
    add_item(im, file, index, line, &sb);
    msgpack_sbuffer_destroy(&sb);
}

static int
is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

/*
 * The length of the JSON value at p[0..len) (p[0] not a space), or 0 when
 * it does not end there. Only strings and bracket depth are followed: this
 * finds where each receipt's text ends, so that each is parsed (strictly)
 * on its own and one bad item does not hide the others; the parser checks
 * everything else.
 */
static size_t
value_len(const char *p, size_t len)
{
    size_t i;
    int depth = 0, in_str = 0;

    if (p[0] != '{' && p[0] != '[' && p[0] != '"') {
        for (i = 0; i < len && !is_space(p[i]) && p[i] != ',' && p[i] != ']' &&
                    p[i] != '}';
             i++)
            ;
        return i;
    }
    for (i = 0; i < len; i++) {
        char ch = p[i];

        if (in_str) {
            if (ch == '\\') {
                i++;
            } else if (ch == '"') {
                in_str = 0;
                if (depth == 0)
                    return i + 1;
            }
            continue;
        }
        if (ch == '"')
            in_str = 1;
        else if (ch == '{' || ch == '[')
            depth++;
        else if ((ch == '}' || ch == ']') && --depth <= 0)
            return i + 1;
    }
    return 0;
}

static size_t
skip_space(const char *buf, size_t len, size_t off)
{
    while (off < len && is_space(buf[off]))
        off++;
    return off;
}

/* The elements of the array at buf[0..len), from off. */
static int
json_array_items(struct import *im, size_t file, size_t *index, const char *buf,
                 size_t len, size_t off)
{
    size_t n;

    while (off < len) {
        n = value_len(buf + off, len - off);
        if (n == 0)
            break;
        json_item(im, file, (*index)++, buf + off, n);
        off = skip_space(buf, len, off + n);
        if (off < len && buf[off] == ']')
            return 0;
        if (off >= len || buf[off] != ',')
            break;
        off = skip_space(buf, len, off + 1);
    }
    add_reject_at(im, file, *index, line_of(im, buf + off), "malformed", "",
                  "the JSON array is not well formed here; the rest of the "
                  "file was not read");
    return -1;
}

/*
 * Splits the array at buf[0..len) (buf[0] == '[') into its elements.
 * Returns 0, or -1 after rejecting the item where the text broke.
 */
static int
json_array(struct import *im, size_t file, size_t *index, const char *buf,
           size_t len)
{
    size_t off = skip_space(buf, len, 1);
    int rc;

    if (off < len && buf[off] == ']')
        return 0;
    im->in_array = 1;
    rc = json_array_items(im, file, index, buf, len, off);
    im->in_array = 0;
    return rc;
}

/* A JSON array of receipts, one receipt, or JSON lines (several values one
 * after another); an array inside JSON lines is a batch of receipts too. */
static void
load_json(struct import *im, size_t file, const char *buf, size_t len)
{
    size_t off = skip_space(buf, len, 0), index = 0, n;

    while (off < len) {
        n = value_len(buf + off, len - off);
        if (n == 0 && buf[off] == '[') {
            /* An array cut short: import its complete items, then report
             * where it broke. */
            json_array(im, file, &index, buf + off, len - off);
            return;
        }
        if (n == 0) {
            add_reject_at(im, file, index, line_of(im, buf + off), "malformed",
                          "", "the file ends inside a JSON value");
            return;
        }
        if (buf[off] == '[') {
            if (json_array(im, file, &index, buf + off, n) != 0)
                return;
        } else {
            json_item(im, file, index++, buf + off, n);
        }
        off = skip_space(buf, len, off + n);
    }
}

static void
msgpack_item(struct import *im, size_t file, size_t index,
             const msgpack_object *o)
{
    struct receipt r;
    struct proto_err err;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    im->pos++;
    proto_err_clear(&err);
    rc = receipt_decode(o, &r, &err);
    if (rc != 0) {
        add_reject(im, file, index, proto_code_name(rc), err.path, err.message);
        return;
    }
    receipt_clear(&r);
    /* The object goes out as the producer wrote it (map or array form,
     * unknown keys included); only integer widths may be normalised. */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (msgpack_pack_object(&pk, *o) != 0)
        cli_oom();
    add_item(im, file, index, 0, &sb);
    msgpack_sbuffer_destroy(&sb);
}

/* One receipt (map, or array form starting with schema_version) or an
 * array of receipts (an array whose elements are maps or arrays). */
/* Whether byte b starts a msgpack map or array (fix, 16 or 32). */
static int
looks_msgpack(unsigned char b)
{
    return (b >= 0x80 && b <= 0x9f) || b == 0xdc || b == 0xdd || b == 0xde ||
           b == 0xdf;
}

static void
load_msgpack(struct import *im, size_t file, const char *buf, size_t len)
{
    char msg[PROTO_ERR_MSG_MAX];
    struct proto_err err;
    msgpack_unpacked up;
    const msgpack_object *o;
    size_t off = 0;
    uint32_t i;

    /* A receipt, or an array of them, starts with a map or an array
     * header; anything else is not msgpack we could read at all. */
    if (!looks_msgpack((unsigned char)buf[0])) {
        char head[24];
        size_t k, n = len < 16 ? len : 16;

        for (k = 0; k < n; k++)
            head[k] = buf[k] >= 0x20 && buf[k] < 0x7f ? buf[k] : '.';
        head[n] = '\0';
        snprintf(msg, sizeof(msg),
                 "the file is neither JSON nor msgpack (it starts with "
                 "\"%s\")",
                 head);
        add_file_reject(im, file, msg);
        return;
    }
    if (mpcheck(buf, len, &err) != 0) {
        add_file_reject(im, file, err.message);
        return;
    }
    msgpack_unpacked_init(&up);
    if (msgpack_unpack_next(&up, buf, len, &off) != MSGPACK_UNPACK_SUCCESS) {
        add_file_reject(im, file, "the file is not one msgpack object");
        msgpack_unpacked_destroy(&up);
        return;
    }
    o = &up.data;
    if (o->type == MSGPACK_OBJECT_ARRAY &&
        (o->via.array.size == 0 ||
         o->via.array.ptr[0].type == MSGPACK_OBJECT_MAP ||
         o->via.array.ptr[0].type == MSGPACK_OBJECT_ARRAY)) {
        for (i = 0; i < o->via.array.size; i++)
            msgpack_item(im, file, i, &o->via.array.ptr[i]);
    } else {
        msgpack_item(im, file, 0, o);
    }
    msgpack_unpacked_destroy(&up);
}

/* A file's bytes: mapped for a regular file, read into the heap for a
 * pipe or stdin. */
struct filebuf {
    char *p;
    size_t len;
    int mapped;
};

static void
filebuf_release(struct filebuf *fb)
{
    if (fb->mapped)
        munmap(fb->p, fb->len);
    else
        free(fb->p);
    memset(fb, 0, sizeof(*fb));
}

/* Reads path ("-" is stdin) into fb. Returns 0 or -1 with errno set. */
static int
filebuf_open(struct filebuf *fb, const char *path)
{
    int fd = strcmp(path, "-") == 0 ? 0 : open(path, O_RDONLY | O_CLOEXEC);
    size_t cap = 0;
    struct stat st;
    ssize_t n;
    char *nb;
    int e;

    memset(fb, 0, sizeof(*fb));
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) != 0)
        goto fail;
    /* A mapping costs page cache, not heap, and the kernel can drop its
     * pages once they have been parsed. */
    if (S_ISREG(st.st_mode) && st.st_size > 0) {
        fb->p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (fb->p == MAP_FAILED) {
            fb->p = NULL;
            goto fail;
        }
        fb->len = (size_t)st.st_size;
        fb->mapped = 1;
        madvise(fb->p, fb->len, MADV_SEQUENTIAL);
        if (fd != 0)
            close(fd);
        return 0;
    }
    for (;;) {
        if (fb->len == cap) {
            cap = cap ? cap * 2 : 65536;
            if ((nb = realloc(fb->p, cap)) == NULL) {
                errno = ENOMEM;
                goto fail;
            }
            fb->p = nb;
        }
        n = read(fd, fb->p + fb->len, cap - fb->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            goto fail;
        if (n == 0)
            break;
        fb->len += (size_t)n;
    }
    if (fd != 0)
        close(fd);
    return 0;
fail:
    e = errno;
    if (fd != 0)
        close(fd);
    filebuf_release(fb);
    errno = e;
    return -1;
}

static int
load_file(struct import *im, size_t file)
{
    struct filebuf fb;
    const char *buf;
    size_t len, off = 0;

    if (filebuf_open(&fb, im->files[file]) != 0) {
        fprintf(stderr, "receiptctl: import: %s: %s\n", im->files[file],
                strerror(errno));
        return -1;
    }
    buf = fb.p;
    len = fb.len;
    im->base = im->line_at = buf;
    im->line = 1;
    im->cur_len = len;
    if (len >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0)
        off = 3;
    while (off < len && is_space(buf[off]))
        off++;
    /* '{' and '[' are positive fixints in msgpack, never a receipt, so the
     * first byte tells the encodings apart. */
    if (off < len && (buf[off] == '{' || buf[off] == '['))
        load_json(im, file, buf + off, len - off);
    else if (len == 0)
        add_file_reject(im, file, "the file is empty");
    else
        load_msgpack(im, file, buf, len);
    im->bytes_before += len;
    im->base = im->line_at = NULL;
    im->cur_len = 0;
    filebuf_release(&fb);
    return 0;
}

struct pending {
    uint64_t id;
    size_t first;
    size_t n;
};

static void
reject_batch(struct import *im, const struct pending *p,
             const struct envelope_reply *r)
{
    char code[32];
    size_t i;

    if (r->code_name.len > 0)
        snprintf(code, sizeof(code), "%.*s", (int)r->code_name.len,
                 r->code_name.ptr);
    else
        snprintf(code, sizeof(code), "%s", proto_code_name(r->err.code));
    for (i = 0; i < p->n; i++)
        add_reject_at(
            im, im->items[p->first + i].file, im->items[p->first + i].index,
            im->items[p->first + i].line, code, r->err.path, r->err.message);
}

/* Applies a `receipts` result to the batch it answers. */
static int
batch_result(struct import *im, const struct pending *p,
             const msgpack_object *res)
{
    const msgpack_object *acc, *rej, *e, *idx;
    char code[32], path[PROTO_ERR_PATH_MAX], msg[PROTO_ERR_MSG_MAX];
    uint64_t a = 0, k;
    uint32_t i;

    if (res == NULL || res->type != MSGPACK_OBJECT_MAP)
        return -1;
    acc = mpobj_map_get(res, "accepted", NULL);
    rej = mpobj_map_get(res, "rejected", NULL);
    if (acc == NULL || mpobj_uint(acc, p->n, &a, NULL) != 0)
        return -1;
    im->accepted += a;
    if (rej == NULL || rej->type != MSGPACK_OBJECT_ARRAY)
        return 0;
    for (i = 0; i < rej->via.array.size; i++) {
        e = &rej->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_MAP)
            return -1;
        idx = mpobj_map_get(e, "index", NULL);
        if (idx == NULL || mpobj_uint(idx, p->n - 1, &k, NULL) != 0)
            return -1;
        cli_copy_str(code, sizeof(code), e, "code");
        cli_copy_str(path, sizeof(path), e, "path");
        cli_copy_str(msg, sizeof(msg), e, "message");
        add_reject_at(im, im->items[p->first + k].file,
                      im->items[p->first + k].index,
                      im->items[p->first + k].line, code, path, msg);
    }
    return 0;
}

/* Applies a `receipt` result (one numbered write): stored now, or already
 * by an earlier run ("duplicate": true). */
static int
single_result(struct import *im, const msgpack_object *res)
{
    const msgpack_object *dup;

    if (res == NULL || res->type != MSGPACK_OBJECT_MAP ||
        mpobj_map_get(res, "receipt_id", NULL) == NULL)
        return -1;
    dup = mpobj_map_get(res, "duplicate", NULL);
    if (dup != NULL && dup->type == MSGPACK_OBJECT_BOOLEAN && dup->via.boolean)
        im->duplicates++;
    else
        im->accepted++;
    return 0;
}

/*
 * The sending side of an import. Files are parsed one after another and
 * their items queued; full batches go out as soon as they exist, up to
 * IMPORT_WINDOW in flight, and an item's bytes are freed once its batch is
 * answered, so memory follows the largest file, not the whole import.
 */
struct sender {
    struct net_conn c;
    int state;           /* 0 not connected yet, 1 connected, -1 failed */
    int rc;              /* the exit code of a failure */
    uint32_t batch;      /* 1 when numbered: one `receipt` write each */
    struct pending *win; /* window ring of wcap slots */
    size_t wcap, head, inflight, next;
};

/* Envelope of a batch around its items: map header, "op": "receipts",
 * "id": u64, "body", array32 header. */
#define BATCH_OVERHEAD 64

static int
sender_recv(struct import *im, struct sender *s, char *err, size_t err_len)
{
    struct pending *p = &s->win[s->head];
    struct net_reply rep;
    size_t i;
    int rc;

    rc = net_recv(&s->c, &rep, err, err_len);
    if (rc == 0 && (!rep.r.has_id || rep.r.id != p->id)) {
        snprintf(err, err_len, "a reply came out of order");
        rc = NET_EPROTO;
    }
    if (rc == 0 && !rep.r.ok) {
        reject_batch(im, p, &rep.r);
    } else if (rc == 0 && im->numbered) {
        if (single_result(im, rep.r.result) != 0) {
            snprintf(err, err_len,
                     "the daemon's receipt result has no receipt_id");
            rc = NET_EPROTO;
        }
    } else if (rc == 0 && batch_result(im, p, rep.r.result) != 0) {
        snprintf(err, err_len,
                 "the daemon's receipts result is not "
                 "{\"accepted\", \"rejected\"}");
        rc = NET_EPROTO;
    }
    net_reply_free(&rep);
    if (rc != 0)
        return rc;
    im->acked += p->n;
    for (i = p->first; i < p->first + p->n; i++) {
        free(im->items[i].data);
        im->items[i].data = NULL;
    }
    s->head = (s->head + 1) % s->wcap;
    s->inflight--;
    return 0;
}

/* Packs and sends the next batch of at most s->batch items. */
static int
sender_send(struct import *im, struct sender *s, char *err, size_t err_len)
{
    struct pending *p = &s->win[(s->head + s->inflight) % s->wcap];
    size_t n, size = BATCH_OVERHEAD, i, start;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    for (n = 0; n < s->batch && s->next + n < im->nitems &&
                size + im->items[s->next + n].len <= s->c.max_frame;
         n++)
        size += im->items[s->next + n].len;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (im->numbered) {
        /* One receipt under its position: the daemon stores (source, seq)
         * once, across runs. */
        start = net_frame_begin_seq(&s->c, &sb, &pk, PROTO_OP_RECEIPT, 1,
                                    im->items[s->next].seq, 1, &p->id);
        if (start == (size_t)-1)
            cli_oom();
    } else {
        start = net_frame_begin(&s->c, &sb, &pk, PROTO_OP_RECEIPTS, 1, &p->id);
        if (start == (size_t)-1 || msgpack_pack_array(&pk, n) != 0)
            cli_oom();
    }
    for (i = 0; i < n; i++)
        if (msgpack_sbuffer_write(&sb, im->items[s->next + i].data,
                                  im->items[s->next + i].len) != 0)
            cli_oom();
    /* Sizes were checked above. */
    if (NEVER(net_frame_finish(&s->c, &sb, start) != 0))
        cli_oom();
    p->first = s->next;
    p->n = n;
    rc = net_send(&s->c, sb.data, sb.size, err, err_len);
    msgpack_sbuffer_destroy(&sb);
    if (rc != 0)
        return rc;
    s->next += n;
    s->inflight++;
    return 0;
}

/*
 * Sends the queued items that make full batches (all of them when final),
 * reading replies whenever the window is full; when final, waits for every
 * reply. After a failure it only records it: the remaining files are still
 * checked locally.
 */
static void
sender_pump(struct import *im, struct sender *s, struct cli_opts *o,
            const char *source, int final)
{
    char err[NET_ERR_MAX];
    int rc = 0;

    if (s->state < 0)
        return;
    while (rc == 0) {
        size_t queued = im->nitems - s->next;

        if (queued > 0 && s->state == 0) {
            if ((s->rc = cli_open_conn(o, &s->c, source, 1)) != 0) {
                s->state = -1;
                return;
            }
            s->state = 1;
            if (s->c.max_batch < s->batch)
                s->batch = s->c.max_batch;
            if (im->numbered)
                s->batch = 1;
        }
        if (queued > 0 &&
            im->items[s->next].len + BATCH_OVERHEAD > s->c.max_frame) {
            char msg[PROTO_ERR_MSG_MAX];

            snprintf(msg, sizeof(msg),
                     "the receipt is %zu bytes; the daemon's max_frame is "
                     "%" PRIu32,
                     im->items[s->next].len, s->c.max_frame);
            add_reject_at(im, im->items[s->next].file, im->items[s->next].index,
                          im->items[s->next].line, "too_large", "", msg);
            /* Counted as answered: the daemon will never see it. */
            free(im->items[s->next].data);
            im->items[s->next].data = NULL;
            im->acked++;
            s->next++;
            continue;
        }
        if (queued > 0 && (final || queued >= s->batch) &&
            s->inflight < s->wcap)
            rc = sender_send(im, s, err, sizeof(err));
        else if (s->inflight > 0 && (final || s->inflight == s->wcap))
            rc = sender_recv(im, s, err, sizeof(err));
        else
            break;
        progress(im, 0);
    }
    if (rc != 0) {
        fprintf(stderr, "receiptctl: import: %s\n", err);
        s->state = -1;
        s->rc = CLI_EXIT_CONNECT;
    }
}

static int
reject_cmp(const void *a, const void *b)
{
    const struct reject *x = a, *y = b;

    if (x->file != y->file)
        return x->file < y->file ? -1 : 1;
    if (x->index != y->index)
        return x->index < y->index ? -1 : 1;
    return 0;
}

/* ---- progress on a terminal ---- */

/* Bytes of input read so far: whole files before, and the current one up
 * to the last line counted (JSON) or the share of its items (msgpack). */
static uint64_t
bytes_done(const struct import *im)
{
    uint64_t b = im->bytes_before;

    if (im->base != NULL && im->line_at != NULL)
        b += (uint64_t)(im->line_at - im->base);
    return b;
}

static void
human_bytes(uint64_t v, char *buf, size_t len)
{
    if (v >= 10u << 20)
        snprintf(buf, len, "%.1f MiB", (double)v / (1 << 20));
    else if (v >= 10u << 10)
        snprintf(buf, len, "%.1f KiB", (double)v / (1 << 10));
    else
        snprintf(buf, len, "%" PRIu64 " B", v);
}

/*
 * On a terminal only: one line on stderr, rewritten at most every 200 ms,
 * with the items answered, the bytes read (of the total when every input
 * is a regular file), the rate and the time left; final erases it.
 */
static void
progress(struct import *im, int final)
{
    char done[32], total[32], eta[32] = "";
    uint64_t t, b, ms;
    double rate;

    if (!im->progress)
        return;
    t = mono_ms();
    if (final) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        return;
    }
    if (t - im->last_ms < 200)
        return;
    im->last_ms = t;
    ms = t - im->t0_ms ? t - im->t0_ms : 1;
    b = bytes_done(im);
    rate = (double)im->acked * 1000.0 / (double)ms;
    human_bytes(b, done, sizeof(done));
    if (im->bytes_total > 0) {
        human_bytes(im->bytes_total, total, sizeof(total));
        if (b > 0 && b < im->bytes_total)
            snprintf(eta, sizeof(eta), ", ETA %.0fs",
                     (double)(im->bytes_total - b) * (double)ms / (double)b /
                         1000.0);
        fprintf(stderr, "\rimport: %zu items, %s of %s, %.0f items/s%s\033[K",
                im->acked, done, total, rate, eta);
    } else {
        fprintf(stderr, "\rimport: %zu items, %s, %.0f items/s\033[K",
                im->acked, done, rate);
    }
    fflush(stderr);
}

/*
 * Prints the import's outcome in o->format. plans (JSON and CSV only; may
 * be NULL) holds the plan files' outcomes (plan_cmds_import): the JSON
 * document carries them as "plans", and CSV lists refused plans as
 * rejected items (index 0: a plan file is one item). It is taken.
 */
static void
print_import(const struct cli_opts *o, struct import *im,
             struct json_object *plans)
{
    size_t i;

    if (im->nrej > 0)
        qsort(im->rej, im->nrej, sizeof(*im->rej), reject_cmp);
    if (o->format == OUTPUT_JSON) {
        struct json_object *j = json_object_new_object(), *a, *e;

        if (plans != NULL) {
            json_object_object_add(j, "plans", plans);
            plans = NULL;
        }

        json_object_object_add(j, "accepted",
                               json_object_new_uint64(im->accepted));
        if (im->numbered)
            json_object_object_add(j, "duplicates",
                                   json_object_new_uint64(im->duplicates));
        a = json_object_new_array();
        for (i = 0; i < im->nrej; i++) {
            const struct reject *r = &im->rej[i];

            e = json_object_new_object();
            json_object_object_add(e, "file",
                                   json_object_new_string(im->files[r->file]));
            json_object_object_add(e, "line",
                                   r->line > 0 ? json_object_new_uint64(r->line)
                                               : NULL);
            json_object_object_add(e, "index",
                                   json_object_new_uint64(r->index));
            json_object_object_add(e, "code", json_object_new_string(r->code));
            json_object_object_add(e, "path", json_object_new_string(r->path));
            json_object_object_add(e, "message",
                                   json_object_new_string(r->message));
            json_object_array_add(a, e);
        }
        json_object_object_add(j, "rejected", a);
        if (o->dry_run)
            json_object_object_add(j, "dry_run", json_object_new_boolean(1));
        json_object_object_add(j, "unacknowledged",
                               json_object_new_uint64(im->nitems - im->acked));
        puts(json_object_to_json_string_ext(
            j, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                   JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(j);
        return;
    }
    if (o->format == OUTPUT_CSV) {
        puts("file,line,index,code,path,message");
        for (i = 0; plans != NULL && i < json_object_array_length(plans); i++) {
            struct json_object *e = json_object_array_get_idx(plans, i), *v;
            static const char *const cols[] = { "code", "path", "message" };
            const char *t;
            size_t k;

            if (!json_object_object_get_ex(e, "code", NULL))
                continue;
            json_object_object_get_ex(e, "file", &v);
            t = json_object_get_string(v);
            output_csv_field(stdout, t, strlen(t));
            fputs(",,0", stdout);
            for (k = 0; k < 3; k++) {
                json_object_object_get_ex(e, cols[k], &v);
                t = json_object_get_string(v);
                putchar(',');
                output_csv_field(stdout, t, strlen(t));
            }
            putchar('\n');
        }
        json_object_put(plans);
        for (i = 0; i < im->nrej; i++) {
            const struct reject *r = &im->rej[i];

            output_csv_field(stdout, im->files[r->file],
                             strlen(im->files[r->file]));
            if (r->line > 0)
                printf(",%zu,%zu,", r->line, r->index);
            else
                printf(",,%zu,", r->index);
            output_csv_field(stdout, r->code, strlen(r->code));
            putchar(',');
            output_csv_field(stdout, r->path, strlen(r->path));
            putchar(',');
            output_csv_field(stdout, r->message, strlen(r->message));
            putchar('\n');
        }
        return;
    }
    for (i = 0; i < im->nrej; i++) {
        const struct reject *r = &im->rej[i];

        /* JSON: the line, as editors take it (file:LINE:); msgpack has
         * no lines, so its items are named by their index. */
        if (r->line > 0)
            printf("%s:%zu:", im->files[r->file], r->line);
        else
            printf("%s:", im->files[r->file]);
        if (r->has_index)
            printf(" item %zu:", r->index);
        printf(" %s: %s%s%s\n", r->code, r->path, r->path[0] ? ": " : "",
               r->message);
    }
    if (o->dry_run) {
        printf("valid %" PRIu64 ", invalid %zu (dry run: nothing sent)\n",
               im->accepted, im->nrej);
        return;
    }
    printf("accepted %" PRIu64, im->accepted);
    if (im->numbered)
        printf(", already stored %" PRIu64, im->duplicates);
    printf(", rejected %zu", im->nrej);
    /* Items sent without a reply may or may not be stored: say so rather
     * than count them either way. */
    if (im->acked < im->nitems)
        printf(", not acknowledged %zu", im->nitems - im->acked);
    putchar('\n');
}

/* Fails (printed) when path is not a readable file, before anything is
 * sent, so a typo in a file name does not leave half an import behind. */
static int
check_readable(const char *path)
{
    struct stat st;
    int fd;

    if (strcmp(path, "-") == 0)
        return 0;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
        fprintf(stderr, "receiptctl: import: %s: %s\n", path,
                fd < 0 ? strerror(errno) : strerror(EISDIR));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

int
import_run(struct cli_opts *o)
{
    struct import im;
    struct sender snd;
    struct json_object *plans;
    char host[200], source[256];
    size_t i;
    int rc = 0, prc;

    if (o->nargs == 0) {
        cli_usage_err(o->prog, "no files to import");
        return CLI_EXIT_USAGE;
    }
    /* Numbered receipts go one per write: a batch would share one seq. */
    if (o->source != NULL && o->has_batch && !o->dry_run) {
        cli_usage_err(o->prog, "--batch does not apply with --source (each "
                               "receipt is a write of its own, numbered by "
                               "its position)");
        return CLI_EXIT_USAGE;
    }
    for (i = 0; i < (size_t)o->nargs; i++)
        if (check_readable(o->args[i]) != 0)
            return CLI_EXIT_USAGE;
    /* Plan files are registered first and taken out of the list. JSON and
     * CSV take their outcomes into the one document they print. */
    plans = o->format == OUTPUT_JSON || o->format == OUTPUT_CSV
                ? json_object_new_array()
                : NULL;
    prc = plan_cmds_import(o, plans);
    memset(&im, 0, sizeof(im));
    if (o->nargs == 0) {
        if (plans != NULL)
            print_import(o, &im, plans);
        return prc;
    }
    memset(&snd, 0, sizeof(snd));
    im.files = o->args;
    im.nfiles = (size_t)o->nargs;
    snd.batch = o->batch;
    im.snd = o->dry_run ? NULL : &snd;
    im.o = o;
    im.source = source;
    /* An explicit source is a producer that may run again: number its
     * items so a second run stores each once. */
    im.numbered = o->source != NULL && !o->dry_run;
    snd.wcap = im.numbered ? IMPORT_SEQ_WINDOW : IMPORT_WINDOW;
    if ((snd.win = calloc(snd.wcap, sizeof(*snd.win))) == NULL)
        cli_oom();
    im.progress = isatty(2);
    im.t0_ms = mono_ms();
    for (i = 0; i < im.nfiles; i++) {
        struct stat st;

        if (strcmp(im.files[i], "-") == 0 || stat(im.files[i], &st) != 0 ||
            !S_ISREG(st.st_mode)) {
            im.bytes_total = 0;
            break;
        }
        im.bytes_total += (uint64_t)st.st_size;
    }
    if (o->source == NULL) {
        if (gethostname(host, sizeof(host)) != 0)
            snprintf(host, sizeof(host), "localhost");
        host[sizeof(host) - 1] = '\0';
        snprintf(source, sizeof(source), "receiptctl/%s", host);
    } else {
        snprintf(source, sizeof(source), "%s", o->source);
    }
    /* A file that became unreadable since the check stops the import;
     * what was sent before is reported as usual. The local verdicts are
     * printed even when the daemon cannot be reached. */
    for (i = 0; i < im.nfiles && rc == 0; i++) {
        if (load_file(&im, i) != 0)
            rc = CLI_EXIT_USAGE;
        if (!o->dry_run)
            sender_pump(&im, &snd, o, source, i + 1 == im.nfiles || rc != 0);
    }
    /* A dry run counts what would have been sent as accepted. */
    if (o->dry_run) {
        im.accepted = im.nitems;
        im.acked = im.nitems;
    }
    if (snd.state == 1)
        net_close(&snd.c);
    progress(&im, 1);
    print_import(o, &im, plans);
    fflush(stdout);
    if (rc == 0)
        rc = snd.rc;
    if (rc == 0 && im.nrej > 0)
        rc = CLI_EXIT_DAEMON;
    for (i = 0; i < im.nitems; i++)
        free(im.items[i].data);
    free(im.items);
    free(im.rej);
    free(snd.win);
    return rc != 0 ? rc : prc;
}
