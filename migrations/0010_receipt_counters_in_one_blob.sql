-- 0010: a receipt's counters and artifact fields are one column.
--
-- Binding and encoding 30 integer columns was about 8,500 of SQLite's
-- instructions per row, close to half of the writer's work for a receipt
-- in a batch (docs/ingest.md). `counters` holds them as one blob:
-- a byte n (26), n LEB128 values by coverage bit (decode_steps first,
-- inter_token_latency_us last), a byte m (4), m LEB128 values
-- (artifacts: temp_created_bytes, temp_removed_bytes,
-- temp_retained_bytes, temp_cleanup_failures). The daemon reads and
-- writes it (daemon/store_row.c); the copy below uses the function the
-- daemon registers for it, receiptd_pack_counters. Nothing else about
-- the row changes: the ids, the tail, chunks, postings and rollups stay.

CREATE TABLE receipts_v10 (
    id INTEGER PRIMARY KEY,
    received_at INTEGER NOT NULL,          -- unix milliseconds
    source_id INTEGER NOT NULL,
    seq INTEGER,                           -- NULL when the request had none
    schema_version INTEGER NOT NULL,
    requested_backend INTEGER NOT NULL,
    executed_backend INTEGER NOT NULL,
    status INTEGER NOT NULL,               -- 0 fallback, 1 clean, 2 unproven
    model_id INTEGER NOT NULL,
    plan_id INTEGER NOT NULL,
    graph_id INTEGER NOT NULL,
    tuning_id INTEGER NOT NULL,
    stop_reason_id INTEGER NOT NULL,
    counter_coverage INTEGER NOT NULL,
    counters BLOB NOT NULL,                -- counters, then artifacts
    extra BLOB                             -- msgpack map of unknown keys
);

INSERT INTO receipts_v10
SELECT id, received_at, source_id, seq, schema_version, requested_backend,
       executed_backend, status, model_id, plan_id, graph_id, tuning_id,
       stop_reason_id, counter_coverage,
       receiptd_pack_counters(
           decode_steps, graph_launches, compute_dispatches, device_fences,
           host_to_device_bytes, device_to_host_bytes, fallback_count,
           hot_path_allocations, compile_calls, immutable_upload_bytes,
           submitted_prefill_tokens, committed_prefill_tokens,
           cached_prefill_tokens, queued_requests, admitted_requests,
           cow_copies, evictions, unique_freed_pages, pool_high_water_bytes,
           cancellations, graph_bucket_tokens, graph_padding_tokens,
           rebuild_outcomes, queue_delay_us, time_to_first_token_us,
           inter_token_latency_us, temp_created_bytes, temp_removed_bytes,
           temp_retained_bytes, temp_cleanup_failures),
       extra
FROM receipts ORDER BY id;

DROP TABLE receipts;
ALTER TABLE receipts_v10 RENAME TO receipts;
