-- 0001: interned strings and the receipts table.
--
-- Repeated strings (models, plans, graph hashes, tuning profiles, stop
-- reasons, sources) are stored once in `strings` and referenced by id, so a
-- fleet's tens of millions of rows stay small and filters compare integers.
-- Every u64 of a receipt is stored as the bit pattern of a signed 64-bit
-- SQLite integer (values above INT64_MAX read back negative and are converted
-- back by the daemon). Backends and the fallback status are small integers:
-- the enum values of proto/receipt.h.

CREATE TABLE strings (
    id INTEGER PRIMARY KEY,
    value BLOB NOT NULL UNIQUE
);

-- AUTOINCREMENT: a receipt id is never reused, even after every row was
-- deleted, because a dedupe record and a client's paging cursor name it.
CREATE TABLE receipts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    received_at INTEGER NOT NULL,          -- unix milliseconds
    source_id INTEGER NOT NULL REFERENCES strings(id),
    seq INTEGER,                           -- NULL when the request had none
    schema_version INTEGER NOT NULL,
    requested_backend INTEGER NOT NULL,
    executed_backend INTEGER NOT NULL,
    status INTEGER NOT NULL,               -- 0 fallback, 1 clean, 2 unproven
    model_id INTEGER NOT NULL REFERENCES strings(id),
    plan_id INTEGER NOT NULL REFERENCES strings(id),
    graph_id INTEGER NOT NULL REFERENCES strings(id),
    tuning_id INTEGER NOT NULL REFERENCES strings(id),
    stop_reason_id INTEGER NOT NULL REFERENCES strings(id),
    counter_coverage INTEGER NOT NULL,
    decode_steps INTEGER NOT NULL,
    graph_launches INTEGER NOT NULL,
    compute_dispatches INTEGER NOT NULL,
    device_fences INTEGER NOT NULL,
    host_to_device_bytes INTEGER NOT NULL,
    device_to_host_bytes INTEGER NOT NULL,
    fallback_count INTEGER NOT NULL,
    hot_path_allocations INTEGER NOT NULL,
    compile_calls INTEGER NOT NULL,
    immutable_upload_bytes INTEGER NOT NULL,
    submitted_prefill_tokens INTEGER NOT NULL,
    committed_prefill_tokens INTEGER NOT NULL,
    cached_prefill_tokens INTEGER NOT NULL,
    queued_requests INTEGER NOT NULL,
    admitted_requests INTEGER NOT NULL,
    cow_copies INTEGER NOT NULL,
    evictions INTEGER NOT NULL,
    unique_freed_pages INTEGER NOT NULL,
    pool_high_water_bytes INTEGER NOT NULL,
    cancellations INTEGER NOT NULL,
    graph_bucket_tokens INTEGER NOT NULL,
    graph_padding_tokens INTEGER NOT NULL,
    rebuild_outcomes INTEGER NOT NULL,
    queue_delay_us INTEGER NOT NULL,
    time_to_first_token_us INTEGER NOT NULL,
    inter_token_latency_us INTEGER NOT NULL,
    temp_created_bytes INTEGER NOT NULL,
    temp_removed_bytes INTEGER NOT NULL,
    temp_retained_bytes INTEGER NOT NULL,
    temp_cleanup_failures INTEGER NOT NULL,
    extra BLOB                             -- msgpack map of unknown keys
);

-- The filters of PROTOCOL section 9; each ends in id so that newest-first
-- pages come straight off the index.
CREATE INDEX receipts_plan_graph ON receipts (plan_id, graph_id, id);
CREATE INDEX receipts_model ON receipts (model_id, id);
CREATE INDEX receipts_source_seq ON receipts (source_id, seq);
CREATE INDEX receipts_received_at ON receipts (received_at);
CREATE INDEX receipts_status ON receipts (status, id);
