/*
 * metrics.c: the daemon's figures in the Prometheus text exposition format
 * (version 0.0.4), for the `metrics` query kind (receiptctl stats --format
 * prometheus) and the HTTP listener's /metrics (http.c): one renderer, so
 * both say the same.
 *
 * Runs on a query thread with a borrowed read-only store and the loop's
 * snapshot. The names follow Prometheus' conventions (promtool check
 * metrics passes; the test e2e_metrics runs it on the real output):
 * counters end in _total, durations are in seconds and sizes in bytes, no
 * gauge shares a family name with a counter.
 *
 * Label cardinality is bounded by construction: backends are an enum of
 * seven, statuses three, counters RECEIPT_NCOUNTERS; plans, graphs and
 * sources are never labels; models only when metrics.model_series is set,
 * and then at most that many (the models with most receipts).
 */
#include "metrics.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envelope.h"
#include "histo.h"
#include "query_kind.h"
#include "receipt.h"
#include "store.h"
#include "store_agg.h"
#include "store_plan.h"

static void
family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void
one(FILE *f, const char *name, const char *type, const char *help, uint64_t v)
{
    family(f, name, type, help);
    fprintf(f, "%s %" PRIu64 "\n", name, v);
}

static void
seconds(FILE *f, const char *name, const char *type, const char *help,
        uint64_t us)
{
    family(f, name, type, help);
    fprintf(f, "%s %" PRIu64 ".%06" PRIu64 "\n", name, us / 1000000u,
            us % 1000000u);
}

/* A label value as the text format escapes it. */
static void
label(FILE *f, const char *p, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (p[i] == '\\' || p[i] == '"')
            fprintf(f, "\\%c", p[i]);
        else if (p[i] == '\n')
            fputs("\\n", f);
        else
            putc(p[i], f);
    }
}

static const char *
backend(int64_t b)
{
    const char *n = receipt_backend_name((int)b);

    return n ? n : "unknown";
}

/* The figures the loop and the writer keep (the snapshot). */
/* A histogram family of durations (histo.h) in seconds. */
static void
histogram(FILE *f, const char *name, const char *help,
          const struct histo_snap *h)
{
    int i;

    family(f, name, "histogram", help);
    for (i = 0; i < HISTO_NBOUNDS; i++)
        fprintf(f, "%s_bucket{le=\"%" PRIu64 ".%06" PRIu64 "\"} %" PRIu64 "\n",
                name, histo_bounds_us[i] / 1000000u,
                histo_bounds_us[i] % 1000000u, h->cumulative[i]);
    fprintf(f,
            "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n"
            "%s_sum %" PRIu64 ".%06" PRIu64 "\n"
            "%s_count %" PRIu64 "\n",
            name, h->count, name, h->sum_us / 1000000u, h->sum_us % 1000000u,
            name, h->count);
}

/* A node's relay to its center (relay.c), only where one is set. */
static void
render_relay(FILE *f, const struct relay_stats *r)
{
    family(f, "receiptd_relay_info", "gauge",
           "The center the relay sends to (or tried last), as a label; "
           "always 1.");
    fputs("receiptd_relay_info{endpoint=\"", f);
    label(f, r->endpoint, strlen(r->endpoint));
    fputs("\"} 1\n", f);
    one(f, "receiptd_relay_connected", "gauge",
        "1 while the relay is connected to a center.", r->connected ? 1 : 0);
    one(f, "receiptd_relay_backlog_receipts", "gauge",
        "Receipts committed here and not yet acknowledged by the center.",
        r->backlog_records);
    one(f, "receiptd_relay_backlog_bytes", "gauge",
        "Their size, estimated from the mean encoded size of the receipts "
        "relayed.",
        r->backlog_bytes);
    seconds(f, "receiptd_relay_oldest_undelivered_seconds", "gauge",
            "Age of the oldest receipt not yet acknowledged by the center; 0 "
            "when none waits.",
            r->oldest_ms * 1000u);
    family(f, "receiptd_relay_last_success_seconds", "gauge",
           "When the center last acknowledged a batch, in seconds since the "
           "epoch; 0 never since start.");
    fprintf(f,
            "receiptd_relay_last_success_seconds %" PRIu64 ".%03" PRIu64 "\n",
            r->last_success_ms / 1000u, r->last_success_ms % 1000u);
    one(f, "receiptd_relay_receipts_total", "counter",
        "Receipts the center acknowledged since start.", r->relayed);
    one(f, "receiptd_relay_failures_total", "counter",
        "Connection attempts and batches that failed since start.",
        r->failures);
}

static void
render_daemon(FILE *f, const struct query_snapshot *sn,
              const struct store_stats *st, uint64_t plans, uint64_t retained)
{
    const struct server_counters *n = &sn->n;
    family(f, "receiptd_build_info", "gauge",
           "The daemon's version, as a label; always 1.");
    fputs("receiptd_build_info{version=\"" RECEIPTD_VERSION "\"} 1\n", f);
    family(f, "receiptd_start_time_seconds", "gauge",
           "When the daemon started, in seconds since the epoch.");
    fprintf(f, "receiptd_start_time_seconds %" PRIu64 ".%03" PRIu64 "\n",
            sn->started_ms / 1000u, sn->started_ms % 1000u);
    one(f, "receiptd_open_connections", "gauge", "Client connections open now.",
        sn->connections);
    one(f, "receiptd_connections_total", "counter",
        "Client connections accepted since start.", n->connections_total);
    one(f, "receiptd_connections_refused_total", "counter",
        "Connections refused since start: the connection limit was reached "
        "or the peer is not allowed.",
        n->connections_refused);
    one(f, "receiptd_auth_failures_total", "counter",
        "TCP hellos refused since start because their token is not one of "
        "access.tokens.",
        n->auth_failures);
    one(f, "receiptd_unauthenticated_refused_total", "counter",
        "TCP connections closed since start because too many peers had not "
        "authenticated yet.",
        n->unauthenticated_refused);
    one(f, "receiptd_tls_handshakes_total", "counter",
        "TLS sessions established on the TCP listener since start.",
        n->tls_handshakes);
    one(f, "receiptd_tls_failures_total", "counter",
        "TLS handshakes that failed since start (a bad certificate, another "
        "protocol, garbage).",
        n->tls_failures);
    one(f, "receiptd_notify_dropped_total", "counter",
        "Status and watchdog messages to the service manager dropped since "
        "start because its socket was full.",
        sn->notify_dropped);
    one(f, "receiptd_frames_total", "counter",
        "Request frames read since start.", n->frames);
    one(f, "receiptd_framing_errors_total", "counter",
        "Frames with a bad length or broken framing since start; each closed "
        "its connection.",
        n->framing_errors);
    one(f, "receiptd_receipts_accepted_total", "counter",
        "Receipts stored since start.", n->accepted);
    one(f, "receiptd_receipts_rejected_total", "counter",
        "Receipts and payloads rejected since start.", n->rejected);
    one(f, "receiptd_duplicate_writes_total", "counter",
        "Writes already stored under their (source, seq) since start, "
        "answered without storing again.",
        n->duplicates);
    one(f, "receiptd_conflicting_writes_total", "counter",
        "Writes refused since start because their (source, seq) named "
        "another payload.",
        n->conflicts);
    one(f, "receiptd_followers", "gauge",
        "receipts queries following new receipts now (receiptctl receipts "
        "--follow).",
        sn->followers);
    one(f, "receiptd_follows_total", "counter",
        "receipts queries that started following since start.",
        n->followers_total);
    one(f, "receiptd_follows_cut_off_total", "counter",
        "Follows ended since start because the follower did not read its "
        "rows (its unread replies passed limits.max_unsent).",
        n->followers_cut_off);
    one(f, "receiptd_quarantined_payloads_total", "counter",
        "Rejected payloads put in quarantine since start.", n->quarantined);
    one(f, "receiptd_quarantine_payloads", "gauge",
        "Payloads in quarantine now.", st->quarantined);
    one(f, "receiptd_quarantine_size_bytes", "gauge",
        "Raw bytes of the payloads in quarantine now.", st->quarantine_bytes);
    one(f, "receiptd_quarantine_evictions_total", "counter",
        "Quarantined payloads evicted to stay within store.quarantine_max, "
        "since the store was created.",
        st->quarantine_evictions);
    one(f, "receiptd_stray_coverage_receipts_total", "counter",
        "Receipts since start with coverage bits that mean nothing in their "
        "schema.",
        n->stray_coverage);
    one(f, "receiptd_unavailable_writes_total", "counter",
        "Writes answered unavailable since start because the store could "
        "not commit.",
        n->unavailable);
    one(f, "receiptd_commit_failures_total", "counter",
        "Group commits rolled back since start.", sn->w.failures);
    one(f, "receiptd_store_failing", "gauge",
        "1 while the last group commit failed (writes answered unavailable).",
        sn->w.failing ? 1 : 0);
    seconds(f, "receiptd_writer_stalled_seconds", "gauge",
            "How long writes have waited for the writer to finish a group; "
            "0 when it has nothing to do.",
            sn->w.stalled_ms * 1000u);
    histogram(f, "receiptd_commit_duration_seconds",
              "Duration of committed group commits (one store transaction "
              "each), since start.",
              &sn->w.commit);
    family(f, "receiptd_aggregate_unmerged_reads_total", "counter",
           "fallbacks and coverage queries by where they read the chunks "
           "whose rollup sums were not merged yet: the writer's published "
           "sums (memory) or the receipts' rows (rows, when the writer had "
           "moved on since the query's snapshot).");
    fprintf(f,
            "receiptd_aggregate_unmerged_reads_total{from=\"memory\"} "
            "%" PRIu64 "\n"
            "receiptd_aggregate_unmerged_reads_total{from=\"rows\"} "
            "%" PRIu64 "\n",
            sn->agg_from_memory, sn->agg_from_rows);
    histogram(f, "receiptd_ack_duration_seconds",
              "Time of writes from their queueing for the writer to their "
              "answer (the commit's wait and duration), since start.",
              &sn->w.ack);
    seconds(f, "receiptd_writer_cpu_seconds_total", "counter",
            "CPU time of the writer thread in commit groups since start, "
            "rolled-back groups included.",
            sn->w.cpu_us);
    one(f, "receiptd_checkpoints_total", "counter",
        "WAL checkpoints the writer ran between commit groups since start.",
        sn->w.checkpoints);
    seconds(f, "receiptd_checkpoint_seconds_total", "counter",
            "Time spent in those checkpoints since start.",
            sn->w.checkpoint_us);
    one(f, "receiptd_wal_syncs_total", "counter",
        "WAL syncs the syncer thread ran after commit groups since start "
        "(0 with store.sync_in_commit, where COMMIT syncs).",
        sn->w.syncs);
    seconds(f, "receiptd_wal_sync_seconds_total", "counter",
            "Time spent in those syncs since start; replies wait for them.",
            sn->w.sync_us);
    one(f, "receiptd_pending_writes", "gauge",
        "Writes waiting for the writer thread now.", sn->w.queued);
    one(f, "receiptd_pending_write_bytes", "gauge",
        "Bytes of writes waiting for the writer now (backpressure account).",
        sn->pending_bytes);
    one(f, "receiptd_store_size_bytes", "gauge",
        "Size of the store: the database file plus its WAL.", st->size_bytes);
    one(f, "receiptd_plans", "gauge", "Prepared plans registered.", plans);
    one(f, "receiptd_retained_values", "gauge", "Completion values retained.",
        retained);
    one(f, "receiptd_pruned_receipts_total", "counter",
        "Receipts removed by retention since start.", sn->w.pruned);
    one(f, "receiptd_prune_runs_total", "counter",
        "Retention prune batches that removed rows, since start.",
        sn->w.prune_runs);
    one(f, "receiptd_prune_failures_total", "counter",
        "Retention prune batches rolled back, since start.",
        sn->w.prune_failures);
    if (sn->relay_on)
        render_relay(f, &sn->relay);
}

static int
by_receipts_cb(const void *pa, const void *pb)
{
    const struct store_agg_group *a = pa, *b = pb;

    if (a->receipts != b->receipts)
        return a->receipts > b->receipts ? -1 : 1;
    if (a->name_len != b->name_len)
        return a->name_len < b->name_len ? -1 : 1;
    return a->name_len ? memcmp(a->name, b->name, a->name_len) : 0;
}

static int
by_backends_cb(const void *pa, const void *pb)
{
    const struct store_agg_group *a = pa, *b = pb;

    if (a->k1 != b->k1)
        return a->k1 < b->k1 ? -1 : 1;
    return (a->k2 > b->k2) - (a->k2 < b->k2);
}

static void
status_rows(FILE *f, const char *name, const char *key,
            const struct store_agg_group *g)
{
    static const char *const st[3] = { "fallback", "clean", "unproven" };
    const uint64_t v[3] = { g->fallback, g->clean, g->unproven };
    int i;

    for (i = 0; i < 3; i++) {
        fprintf(f, "%s{", name);
        fputs(key, f);
        fprintf(f, "status=\"%s\"} %" PRIu64 "\n", st[i], v[i]);
    }
}

/* What the store holds, from the rollups (the `fallbacks` and `coverage`
 * queries over all time). */
static int
render_store(FILE *f, struct store *s, uint32_t models, uint64_t deadline_ms,
             struct proto_err *err)
{
    struct store_filter flt;
    struct store_agg a;
    char key[128];
    size_t i;
    int bit, rc;

    memset(&flt, 0, sizeof(flt));
    flt.requested = flt.executed = flt.status = -1;
    flt.limit = 1;

    memset(&a, 0, sizeof(a));
    rc =
        store_query_agg(s, &flt, STORE_GROUP_BACKENDS, 0, deadline_ms, &a, err);
    if (rc != 0)
        goto out;
    if (a.n > 1)
        qsort(a.groups, a.n, sizeof(a.groups[0]), by_backends_cb);
    family(f, "receiptd_stored_receipts", "gauge",
           "Receipts in the store by requested and executed backend and "
           "fallback status (retention lowers it).");
    for (i = 0; i < a.n; i++) {
        snprintf(key, sizeof(key),
                 "requested_backend=\"%s\",executed_backend=\"%s\",",
                 backend(a.groups[i].k1), backend(a.groups[i].k2));
        status_rows(f, "receiptd_stored_receipts", key, &a.groups[i]);
    }
    store_agg_free(&a);

    rc = store_query_agg(s, &flt, STORE_GROUP_NONE, STORE_AGG_COUNTERS,
                         deadline_ms, &a, err);
    if (rc != 0)
        goto out;
    family(f, "receiptd_stored_coverage_receipts", "gauge",
           "Receipts in the store by counter and whether their producer "
           "measured it (coverage bit set), did not (unknown), or sent a "
           "schema without it (not_applicable).");
    for (bit = 0; bit < RECEIPT_NCOUNTERS; bit++) {
        uint64_t total = a.n ? a.groups[0].receipts : 0;
        uint64_t measured = a.n ? a.groups[0].c[bit].measured : 0;
        /* Receipts whose schema lacks the counter (bits 10 and up are
         * schema 3's) are neither measured nor unknown. */
        uint64_t na = bit < RECEIPT_NCOUNTERS_V2 || a.n == 0
                          ? 0
                          : total - a.groups[0].schema3;

        fprintf(f,
                "receiptd_stored_coverage_receipts{counter=\"%s\","
                "coverage=\"measured\"} %" PRIu64 "\n"
                "receiptd_stored_coverage_receipts{counter=\"%s\","
                "coverage=\"unknown\"} %" PRIu64 "\n"
                "receiptd_stored_coverage_receipts{counter=\"%s\","
                "coverage=\"not_applicable\"} %" PRIu64 "\n",
                receipt_counters[bit].path, measured,
                receipt_counters[bit].path,
                total > measured + na ? total - measured - na : 0,
                receipt_counters[bit].path, na);
    }
    store_agg_free(&a);

    if (models == 0)
        return 0;
    rc = store_query_agg(s, &flt, STORE_GROUP_MODEL, 0, deadline_ms, &a, err);
    if (rc != 0)
        goto out;
    if (a.n > 1)
        qsort(a.groups, a.n, sizeof(a.groups[0]), by_receipts_cb);
    family(f, "receiptd_stored_model_receipts", "gauge",
           "Receipts in the store by model and fallback status, for the "
           "models with most receipts (metrics.model_series).");
    for (i = 0; i < a.n && i < models; i++) {
        const struct store_agg_group *g = &a.groups[i];
        static const char *const st[3] = { "fallback", "clean", "unproven" };
        const uint64_t v[3] = { g->fallback, g->clean, g->unproven };
        int k;

        for (k = 0; k < 3; k++) {
            fputs("receiptd_stored_model_receipts{model_instance_id=\"", f);
            label(f, g->name ? g->name : "", g->name_len);
            fprintf(f, "\",status=\"%s\"} %" PRIu64 "\n", st[k], v[k]);
        }
    }
    one(f, "receiptd_stored_models_omitted", "gauge",
        "Models in the store left out of receiptd_stored_model_receipts by "
        "metrics.model_series.",
        a.n > models ? a.n - models : 0);
out:
    store_agg_free(&a);
    return rc;
}

int
metrics_render(const struct query_snapshot *sn, struct store *s,
               uint64_t deadline_ms, char **text, size_t *len,
               struct proto_err *err)
{
    struct store_stats st;
    uint64_t plans = 0, retained = 0;
    FILE *f;
    int rc;

    *text = NULL;
    *len = 0;
    if ((rc = store_query_stats(s, deadline_ms, &st, err)) ||
        (rc = store_plan_counts(s, &plans, &retained, err)))
        return rc;
    f = open_memstream(text, len);
    if (f == NULL)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    render_daemon(f, sn, &st, plans, retained);
    rc = render_store(f, s, sn->metrics_models, deadline_ms, err);
    if (fclose(f) != 0 && rc == 0)
        rc = proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    if (rc != 0) {
        free(*text);
        *text = NULL;
        *len = 0;
    }
    return rc;
}

static int
parse_metrics(struct query_args *a, const msgpack_object *body,
              struct proto_err *err)
{
    (void)a;
    (void)body;
    (void)err;
    return 0;
}

/* One row: {"text": the exposition}. */
static int
run_metrics(struct query_args *a, struct store *s, msgpack_packer *pk,
            struct proto_err *err)
{
    char *text;
    size_t len;
    int rc, failed;

    rc = metrics_render(a->snap, s, a->deadline_ms, &text, &len, err);
    if (rc != 0)
        return rc;
    failed =
        msgpack_pack_map(pk, 2) != 0 || envelope_pack_cstr(pk, "rows") != 0 ||
        msgpack_pack_array(pk, 1) != 0 || msgpack_pack_map(pk, 1) != 0 ||
        envelope_pack_cstr(pk, "text") != 0 || msgpack_pack_str(pk, len) != 0 ||
        msgpack_pack_str_body(pk, text, len) != 0 ||
        envelope_pack_cstr(pk, "truncated") != 0 || msgpack_pack_false(pk) != 0;
    free(text);
    if (failed)
        return proto_err_set(err, PROTO_ENOMEM, NULL, "out of memory");
    return 0;
}

const struct query_kind query_kind_metrics = { "metrics", parse_metrics,
                                               run_metrics };
