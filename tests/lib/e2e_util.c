/*
 * e2e_util.c: helpers for end-to-end tests against the real daemon.
 *
 * Single-threaded test code. The daemon's stderr goes to a log file in its
 * directory, so a failing test can show it.
 */
#include "e2e_util.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "frame.h"

#ifndef TEST_BINARY_DIR
#define TEST_BINARY_DIR "."
#endif

long
e2e_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static int
spawn(struct e2e_daemon *d, const char *const *extra)
{
    const char *argv[64];
    char bin[512];
    int n = 0, i, fd;
    long deadline;

    snprintf(bin, sizeof(bin), "%s/daemon/receiptd", TEST_BINARY_DIR);
    argv[n++] = bin;
    argv[n++] = "--socket";
    argv[n++] = d->sock;
    argv[n++] = "--db";
    argv[n++] = d->db;
    /* Small chunks, so that every end-to-end test (kills, power cuts, a
     * full disk, pruning) also crosses the moments where the writer turns
     * its tail into a chunk; the default waits for 16384 receipts. A
     * later --chunk-receipts in extra wins. */
    argv[n++] = "--chunk-receipts";
    argv[n++] = "100";
    for (i = 0; extra != NULL && extra[i] != NULL && n < 62; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    d->pid = fork();
    if (d->pid < 0)
        return -1;
    if (d->pid == 0) {
        /* A test that fails dies in its forked child: take the daemon
         * with it instead of leaving it running. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    deadline = e2e_now_ms() + 10000;
    while (e2e_now_ms() < deadline) {
        if (!e2e_alive(d))
            return -1;
        fd = e2e_connect(d);
        if (fd >= 0) {
            close(fd);
            return 0;
        }
        usleep(10000);
    }
    return -1;
}

int
e2e_start(struct e2e_daemon *d, const char *const *extra)
{
    const char *base = TEST_BINARY_DIR;

    memset(d, 0, sizeof(*d));
    /* sun_path holds 108 bytes: fall back to TMPDIR for deep build
     * directories. */
    if (strlen(base) > 70)
        base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(d->dir, sizeof(d->dir), "%s/e2e-XXXXXX", base);
    if (mkdtemp(d->dir) == NULL)
        return -1;
    snprintf(d->sock, sizeof(d->sock), "%s/s", d->dir);
    snprintf(d->db, sizeof(d->db), "%s/receipts.db", d->dir);
    snprintf(d->log, sizeof(d->log), "%s/receiptd.log", d->dir);
    return spawn(d, extra);
}

int
e2e_restart(struct e2e_daemon *d, const char *const *extra)
{
    return spawn(d, extra);
}

int
e2e_alive(struct e2e_daemon *d)
{
    int status;

    if (d->pid <= 0)
        return 0;
    if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
        d->pid = 0;
        return 0;
    }
    return 1;
}

int
e2e_thread_stat(pid_t pid, const char *tid, struct e2e_thread *t)
{
    char path[320], line[1024], *open, *end, *tok, *save = NULL;
    int field = 2;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", (int)pid, tid);
    if ((f = fopen(path, "re")) == NULL)
        return -1;
    open = fgets(line, sizeof(line), f);
    fclose(f);
    /* The name may hold spaces and parentheses: it ends at the last ')'. */
    if (open == NULL || (open = strchr(line, '(')) == NULL ||
        (end = strrchr(line, ')')) == NULL || end < open)
        return -1;
    snprintf(t->name, sizeof(t->name), "%.*s", (int)(end - open - 1), open + 1);
    t->state = '?';
    t->nice = 0;
    t->policy = -1;
    for (tok = strtok_r(end + 1, " ", &save); tok != NULL;
         tok = strtok_r(NULL, " ", &save)) {
        if (++field == 3)
            t->state = tok[0];
        else if (field == 19)
            t->nice = atoi(tok);
        else if (field == 41) {
            t->policy = atoi(tok);
            return 0;
        }
    }
    return -1;
}

/* Prints pid's threads to stderr, for a daemon that did not go away in
 * time. */
static void
describe_threads(pid_t pid)
{
    char path[64];
    struct e2e_thread t;
    struct dirent *de;
    DIR *dir;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    if ((dir = opendir(path)) == NULL)
        return;
    while ((de = readdir(dir)) != NULL)
        if (de->d_name[0] != '.' && e2e_thread_stat(pid, de->d_name, &t) == 0)
            fprintf(stderr,
                    "e2e: pid %d thread %s (%s): state %c, nice %d, "
                    "policy %d\n",
                    (int)pid, de->d_name, t.name, t.state, t.nice, t.policy);
    closedir(dir);
}

int
e2e_stop(struct e2e_daemon *d, int sig, int timeout_ms, int *status)
{
    long t0 = e2e_now_ms(), deadline;
    int st = 0;

    /* A process killed ends when the kernel next runs each of its threads,
     * which the daemon cannot hasten: a relay thread at SCHED_IDLE
     * (upstream.priority "idle") on cores that other work keeps busy waits
     * seconds for its turn. */
    if (sig == SIGKILL && timeout_ms < E2E_KILL_WAIT_MS)
        timeout_ms = E2E_KILL_WAIT_MS;
    deadline = t0 + timeout_ms;

    if (d->pid <= 0)
        return -1;
    kill(d->pid, sig);
    while (e2e_now_ms() < deadline) {
        if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
            d->pid = 0;
            if (status != NULL)
                *status = st;
            return 0;
        }
        usleep(5000);
    }
    fprintf(stderr, "e2e: pid %d still there %d ms after signal %d\n",
            (int)d->pid, timeout_ms, sig);
    describe_threads(d->pid);
    kill(d->pid, SIGKILL);
    waitpid(d->pid, &st, 0);
    fprintf(stderr, "e2e: pid %d gone %ld ms after signal %d\n", (int)d->pid,
            e2e_now_ms() - t0, sig);
    d->pid = 0;
    return -1;
}

void
e2e_rmtree(const char *dir)
{
    char cmd[1100];
    int rc;

    if (dir[0] == '\0' || getenv("E2E_KEEP") != NULL)
        return;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    rc = system(cmd);
    (void)rc;
}

void
e2e_cleanup(struct e2e_daemon *d)
{
    if (d->pid > 0)
        e2e_stop(d, SIGKILL, 5000, NULL);
    e2e_rmtree(d->dir);
}

int
e2e_connect(const struct e2e_daemon *d)
{
    struct sockaddr_un sa;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (strlen(d->sock) >= sizeof(sa.sun_path)) {
        close(fd);
        return -1;
    }
    memcpy(sa.sun_path, d->sock, strlen(d->sock));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int
e2e_connect_tcp(int port)
{
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int
e2e_send_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    ssize_t n;

    while (len > 0) {
        n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int
e2e_send_frame(int fd, const void *body, size_t len)
{
    unsigned char hdr[FRAME_HEADER_SIZE];

    frame_put_header(hdr, (uint32_t)len);
    if (e2e_send_all(fd, hdr, sizeof(hdr)) != 0)
        return -1;
    return e2e_send_all(fd, body, len);
}

int
e2e_request(int fd, int op, uint64_t id, int has_seq, uint64_t seq,
            const void *body, size_t body_len)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc = -1;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (envelope_request(&pk, op, id, has_seq, seq, body != NULL) != 0)
        goto out;
    if (body != NULL && msgpack_sbuffer_write(&sb, body, body_len) != 0)
        goto out;
    rc = e2e_send_frame(fd, sb.data, sb.size);
out:
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

static int
read_full(int fd, char *buf, size_t len, long deadline)
{
    struct pollfd p;
    ssize_t n;
    size_t got = 0;
    long left;

    while (got < len) {
        left = deadline - e2e_now_ms();
        if (left <= 0)
            return -1;
        p.fd = fd;
        p.events = POLLIN;
        if (poll(&p, 1, (int)left) <= 0)
            continue;
        n = recv(fd, buf + got, len - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return 0;
}

int
e2e_recv(int fd, int timeout_ms, struct e2e_reply *rep)
{
    unsigned char hdr[4];
    long deadline = e2e_now_ms() + timeout_ms;
    struct proto_err err;
    uint32_t len;
    size_t off = 0;

    memset(rep, 0, sizeof(*rep));
    msgpack_unpacked_init(&rep->up);
    if (read_full(fd, (char *)hdr, 4, deadline) != 0)
        return -1;
    len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 |
          (uint32_t)hdr[2] << 8 | hdr[3];
    if (len == 0 || len > (256u << 20))
        return -1;
    rep->buf = malloc(len);
    if (rep->buf == NULL)
        return -1;
    rep->len = len;
    if (read_full(fd, rep->buf, len, deadline) != 0)
        return -1;
    /* A reply frame is exactly one object: bytes after it mean a map or
     * array packed with a wrong count (the daemon's stats once did). */
    if (msgpack_unpack_next(&rep->up, rep->buf, len, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        off != len)
        return -1;
    return envelope_reply_decode(&rep->up.data, &rep->r, &err) == 0 ? 0 : -1;
}

void
e2e_reply_free(struct e2e_reply *rep)
{
    msgpack_unpacked_destroy(&rep->up);
    free(rep->buf);
    memset(rep, 0, sizeof(*rep));
}

int
e2e_wait_closed(int fd, int timeout_ms)
{
    long deadline = e2e_now_ms() + timeout_ms;
    struct pollfd p;
    char buf[4096];
    ssize_t n;
    long left;

    for (;;) {
        left = deadline - e2e_now_ms();
        if (left <= 0)
            return 0;
        p.fd = fd;
        p.events = POLLIN;
        if (poll(&p, 1, (int)left) <= 0)
            continue;
        n = recv(fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
            return 1;
    }
}

const msgpack_object *
e2e_get(const msgpack_object *o, const char *key)
{
    size_t n = strlen(key);
    uint32_t i;

    if (o == NULL || o->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (i = 0; i < o->via.map.size; i++) {
        const msgpack_object *k = &o->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
            memcmp(k->via.str.ptr, key, n) == 0)
            return &o->via.map.ptr[i].val;
    }
    return NULL;
}

uint64_t
e2e_get_uint(const msgpack_object *o, const char *key)
{
    const msgpack_object *v = e2e_get(o, key);

    if (v == NULL || v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return UINT64_MAX;
    return v->via.u64;
}

int
e2e_get_str_eq(const msgpack_object *o, const char *key, const char *s)
{
    const msgpack_object *v = e2e_get(o, key);

    return v != NULL && v->type == MSGPACK_OBJECT_STR &&
           v->via.str.size == strlen(s) &&
           memcmp(v->via.str.ptr, s, v->via.str.size) == 0;
}

static int
kstr(msgpack_packer *pk, const char *k, const char *v)
{
    return envelope_pack_cstr(pk, k) || envelope_pack_cstr(pk, v);
}

static int
kuint(msgpack_packer *pk, const char *k, uint64_t v)
{
    return envelope_pack_cstr(pk, k) || msgpack_pack_uint64(pk, v);
}

int
e2e_pack_receipt(msgpack_packer *pk, const struct e2e_receipt *r)
{
    static const char *const c2[] = {
        "decode_steps",         "graph_launches",
        "compute_dispatches",   "device_fences",
        "host_to_device_bytes", "device_to_host_bytes",
        "fallback_count",       "hot_path_allocations",
        "compile_calls",        "immutable_upload_bytes",
    };
    static const char *const c3[] = {
        "submitted_prefill_tokens",
        "committed_prefill_tokens",
        "cached_prefill_tokens",
        "queued_requests",
        "admitted_requests",
        "cow_copies",
        "evictions",
        "unique_freed_pages",
        "pool_high_water_bytes",
        "cancellations",
        "graph_bucket_tokens",
        "graph_padding_tokens",
        "rebuild_outcomes",
    };
    static const char *const art[] = {
        "temp_created_bytes",
        "temp_removed_bytes",
        "temp_retained_bytes",
        "temp_cleanup_failures",
    };
    unsigned schema = r->schema ? r->schema : 3;
    size_t i;

    if (msgpack_pack_map(pk, schema == 3 ? 12 : 11) ||
        kuint(pk, "schema_version", schema) ||
        kstr(pk, "requested_backend", r->requested ? r->requested : "cuda") ||
        kstr(pk, "executed_backend", r->executed ? r->executed : "cuda") ||
        kstr(pk, "model_instance_id", r->model ? r->model : "model-a") ||
        kstr(pk, "prepared_plan_id", r->plan ? r->plan : "plan-a") ||
        kstr(pk, "graph_hash", r->graph ? r->graph : "graph-a") ||
        kstr(pk, "tuning_profile", "default") ||
        kstr(pk, "stop_reason", "eos") ||
        kuint(pk, "counter_coverage", r->coverage) ||
        envelope_pack_cstr(pk, "counters") ||
        msgpack_pack_map(pk, schema == 3 ? 23 : 10))
        return -1;
    for (i = 0; i < 10; i++)
        if (kuint(pk, c2[i],
                  i == 0   ? r->decode_steps
                  : i == 6 ? r->fallback_count
                           : i))
            return -1;
    for (i = 0; schema == 3 && i < 13; i++)
        if (kuint(pk, c3[i], 100 + i))
            return -1;
    if (schema == 3 &&
        (envelope_pack_cstr(pk, "latency") || msgpack_pack_map(pk, 3) ||
         kuint(pk, "queue_delay_us", 11) ||
         kuint(pk, "time_to_first_token_us", 12) ||
         kuint(pk, "inter_token_latency_us", 13)))
        return -1;
    if (envelope_pack_cstr(pk, "artifacts") || msgpack_pack_map(pk, 4))
        return -1;
    for (i = 0; i < 4; i++)
        if (kuint(pk, art[i], i))
            return -1;
    return 0;
}

char *
e2e_receipt_bytes(const struct e2e_receipt *r, size_t *len)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (e2e_pack_receipt(&pk, r) != 0) {
        msgpack_sbuffer_destroy(&sb);
        return NULL;
    }
    *len = sb.size;
    return msgpack_sbuffer_release(&sb);
}

int
e2e_hello(int fd, const char *source)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    struct e2e_reply rep;
    int rc = -1;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (msgpack_pack_map(&pk, 2) || kuint(&pk, "protocol", 1) ||
        kstr(&pk, "source", source))
        goto out;
    if (e2e_request(fd, PROTO_OP_HELLO, 1, 0, 0, sb.data, sb.size) != 0)
        goto out;
    if (e2e_recv(fd, 5000, &rep) != 0)
        goto out;
    rc = rep.r.ok ? 0 : -1;
    e2e_reply_free(&rep);
out:
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

char *
e2e_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;

    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
        fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
        if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        } else {
            buf[n] = '\0';
            *len = (size_t)n;
        }
    }
    fclose(f);
    return buf;
}

int
e2e_notify_bind(const char *path)
{
    struct sockaddr_un sa;
    int fd;

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa.sun_path))
        return -1;
    memcpy(sa.sun_path, path, strlen(path));
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (path[0] == '@')
        sa.sun_path[0] = '\0'; /* abstract: the length is exact */
    else
        unlink(path);
    if (bind(fd, (struct sockaddr *)&sa,
             path[0] == '@'
                 ? (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
                               strlen(path))
                 : (socklen_t)sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int
e2e_notify_await(int fd, const char *s, int timeout_ms, char *got, size_t len)
{
    struct timespec start, now;
    ssize_t n;

    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        struct pollfd p = { fd, POLLIN, 0 };
        long spent;

        clock_gettime(CLOCK_MONOTONIC, &now);
        spent = (now.tv_sec - start.tv_sec) * 1000 +
                (now.tv_nsec - start.tv_nsec) / 1000000;
        if (spent >= timeout_ms || poll(&p, 1, (int)(timeout_ms - spent)) <= 0)
            return -1;
        n = recv(fd, got, len - 1, 0);
        if (n < 0)
            return -1;
        got[n] = '\0';
        if (strstr(got, s) != NULL)
            return 0;
    }
}

int
e2e_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    int rc;

    if (f == NULL)
        return -1;
    rc = fputs(text, f) < 0 ? -1 : 0;
    if (fclose(f) != 0)
        rc = -1;
    return rc;
}

long
e2e_proc_kb(pid_t pid, const char *field)
{
    char path[64], line[256];
    size_t n = strlen(field);
    long v = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, field, n) == 0) {
            v = strtol(line + n, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

long
e2e_proc_mem_count(pid_t pid, const void *s, size_t len, int stack)
{
    char path[64], line[512], perms[8];
    unsigned long lo, hi;
    long found = 0;
    FILE *maps;
    char *buf = NULL;
    size_t cap = 0;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    maps = fopen(path, "r");
    snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (maps == NULL || fd < 0 || len == 0) {
        if (maps != NULL)
            fclose(maps);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    while (found >= 0 && fgets(line, sizeof(line), maps) != NULL) {
        size_t n, i;
        ssize_t got;
        const char *p;

        /* Mappings above 256 MiB are a sanitizer's shadow or reserve,
         * not the daemon's own data. */
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 ||
            perms[0] != 'r' || perms[1] != 'w' || hi <= lo ||
            hi - lo > (256ul << 20) ||
            (!stack && strstr(line, "[stack]") != NULL))
            continue;
        n = hi - lo;
        if (n > cap) {
            char *nb = realloc(buf, n);

            if (nb == NULL) {
                found = -1;
                break;
            }
            buf = nb;
            cap = n;
        }
        got = pread(fd, buf, n, (off_t)lo);
        if (got < 0) {
            /* A mapping that went away meanwhile is skipped; no right to
             * read at all fails the whole scan. */
            if (errno == EPERM || errno == EACCES)
                found = -1;
            continue;
        }
        for (i = 0; (p = memmem(buf + i, (size_t)got - i, s, len)) != NULL;
             i = (size_t)(p - buf) + 1)
            found++;
    }
    free(buf);
    close(fd);
    fclose(maps);
    return found;
}

uint64_t
e2e_stat(int fd, uint64_t id, const char *key)
{
    static const unsigned char body[] = { 0x81, 0xa4, 'k', 'i', 'n', 'd',
                                          0xa5, 's',  't', 'a', 't', 's' };
    struct e2e_reply rep;
    const msgpack_object *rows;
    uint64_t v = UINT64_MAX;

    if (e2e_request(fd, PROTO_OP_QUERY, id, 0, 0, body, sizeof(body)) != 0 ||
        e2e_recv(fd, 5000, &rep) != 0)
        return UINT64_MAX;
    rows = rep.r.ok ? e2e_get(rep.r.result, "rows") : NULL;
    if (rows != NULL && rows->type == MSGPACK_OBJECT_ARRAY &&
        rows->via.array.size == 1)
        v = e2e_get_uint(&rows->via.array.ptr[0], key);
    e2e_reply_free(&rep);
    return v;
}

void
e2e_stop_clean(struct e2e_daemon *d)
{
    int status = 0, rc = 0;

    if (e2e_alive(d))
        rc = e2e_stop(d, SIGTERM, 10000, &status);
    e2e_cleanup(d);
    ck_assert_msg(rc == 0, "receiptd did not stop within 10 s of SIGTERM");
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "receiptd did not exit cleanly (status %d)", status);
}

static char *
slurp_fd(int fd)
{
    char *buf = NULL, *nb;
    size_t len = 0, cap = 0;
    ssize_t n;

    lseek(fd, 0, SEEK_SET);
    for (;;) {
        if (cap - len < 4096) {
            nb = realloc(buf, cap + 65536);
            if (nb == NULL) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap += 65536;
        }
        n = read(fd, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    return buf;
}

int
e2e_run(const char *path, const char *const *argv, const char *in_path,
        const char *sock, char **out, char **err)
{
    int fo, fe, st, rc = -1;
    pid_t pid;

    if (out != NULL)
        *out = NULL;
    if (err != NULL)
        *err = NULL;
    /* Anonymous files: nothing to name or remove. */
    fo = memfd_create("e2e-run-out", 0);
    fe = memfd_create("e2e-run-err", 0);
    if (fo < 0 || fe < 0)
        goto done;
    pid = fork();
    if (pid < 0)
        goto done;
    if (pid == 0) {
        int fi = open(in_path != NULL ? in_path : "/dev/null", O_RDONLY);

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (fi < 0)
            _exit(127);
        dup2(fi, STDIN_FILENO);
        dup2(fo, STDOUT_FILENO);
        dup2(fe, STDERR_FILENO);
        if (sock != NULL)
            setenv("RECEIPTD_SOCKET", sock, 1);
        else
            unsetenv("RECEIPTD_SOCKET");
        execv(path, (char *const *)argv);
        _exit(127);
    }
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            goto done;
    rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (out != NULL)
        *out = slurp_fd(fo);
    if (err != NULL)
        *err = slurp_fd(fe);
done:
    if (fo >= 0)
        close(fo);
    if (fe >= 0)
        close(fe);
    return rc;
}

void
e2e_preload(const char *name, const char *asan_more)
{
    char lib[512], opts[256];

    snprintf(lib, sizeof(lib), "%s/tests/lib/lib%s.so", TEST_BINARY_DIR, name);
    ck_assert_msg(access(lib, R_OK) == 0, "%s is missing", lib);
    snprintf(opts, sizeof(opts), "verify_asan_link_order=0%s%s",
             asan_more != NULL ? ":" : "", asan_more != NULL ? asan_more : "");
    setenv("LD_PRELOAD", lib, 1);
    setenv("ASAN_OPTIONS", opts, 1);
}

void
e2e_preload_end(void)
{
    unsetenv("LD_PRELOAD");
}

int
e2e_which(const char *name, char *buf, size_t len)
{
    const char *path = getenv("PATH"), *p, *end;

    for (p = path ? path : "/usr/bin:/bin"; *p; p = *end ? end + 1 : end) {
        end = strchr(p, ':');
        if (end == NULL)
            end = p + strlen(p);
        if (end > p &&
            snprintf(buf, len, "%.*s/%s", (int)(end - p), p, name) < (int)len &&
            access(buf, X_OK) == 0)
            return 0;
    }
    return -1;
}

int
e2e_free_port(void)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

int
e2e_send_receipt(int fd, uint64_t seq, const struct e2e_receipt *r)
{
    struct e2e_reply rep;
    size_t len;
    char *body = e2e_receipt_bytes(r, &len);
    int rc;

    if (body == NULL)
        return -1;
    rc = e2e_request(fd, PROTO_OP_RECEIPT, seq, 1, seq, body, len);
    free(body);
    if (rc != 0 || e2e_recv(fd, 5000, &rep) != 0)
        return -1;
    rc = rep.r.ok && rep.r.id == seq ? 0 : -1;
    e2e_reply_free(&rep);
    return rc;
}

int
e2e_count_lines(const char *s)
{
    int n = 0;

    for (; *s; s++)
        n += *s == '\n';
    return n;
}

long
e2e_wal_restarts(const char *wal_path)
{
    unsigned char b[4];
    int fd = open(wal_path, O_RDONLY | O_CLOEXEC);
    long v = -1;

    if (fd < 0)
        return -1;
    if (pread(fd, b, 4, 12) == 4)
        v = (long)((uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 |
                   (uint32_t)b[2] << 8 | b[3]);
    close(fd);
    return v;
}
