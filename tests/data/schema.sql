CREATE TABLE chunk_sums (
    chunk INTEGER PRIMARY KEY,             -- chunks.first_id
    sums BLOB NOT NULL,
    figures BLOB NOT NULL
);
CREATE TABLE chunks (
    first_id INTEGER PRIMARY KEY,
    end_id INTEGER NOT NULL,               -- ids [first_id, end_id)
    first_at INTEGER NOT NULL,             -- min received_at in it
    last_at INTEGER NOT NULL,              -- max received_at in it
    receipts INTEGER NOT NULL,             -- rows when the chunk was written
    ordered INTEGER NOT NULL               -- 1: received_at never falls
                                           -- from one id to the next
);
CREATE TABLE counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE dedupe (
    source_id INTEGER NOT NULL REFERENCES strings(id),
    seq INTEGER NOT NULL,
    op INTEGER NOT NULL,                   -- enum proto_op of envelope.h
    receipt_id INTEGER,
    status INTEGER,
    outcome BLOB, payload_hash INTEGER,
    PRIMARY KEY (source_id, seq)
) WITHOUT ROWID;
CREATE TABLE plans (
    id INTEGER PRIMARY KEY,
    prepared_plan_id BLOB NOT NULL,
    graph_hash BLOB NOT NULL,
    registered_at INTEGER NOT NULL,        -- unix milliseconds
    source BLOB NOT NULL,                  -- "" without hello
    node_count INTEGER NOT NULL,
    value_count INTEGER NOT NULL,
    canonical BLOB NOT NULL,               -- msgpack, plan_encode_canonical
    UNIQUE (prepared_plan_id, graph_hash)
);
CREATE TABLE postings (
    chunk INTEGER NOT NULL,                -- chunks.first_id
    kind INTEGER NOT NULL,
    value INTEGER NOT NULL,
    ids BLOB NOT NULL,                     -- roaring bitmap of id - chunk
    PRIMARY KEY (chunk, kind, value)
) WITHOUT ROWID;
CREATE TABLE prunes (
    id INTEGER PRIMARY KEY,
    pruned_at INTEGER NOT NULL,            -- unix milliseconds
    cutoff INTEGER NOT NULL,               -- received_at < cutoff were due
    rows INTEGER NOT NULL,                 -- receipts removed
    oldest INTEGER NOT NULL,               -- received_at of the oldest removed
    newest INTEGER NOT NULL                -- received_at of the newest removed
, undelivered INTEGER NOT NULL DEFAULT 0);
CREATE TABLE quarantine (
    id INTEGER PRIMARY KEY,
    received_at INTEGER NOT NULL,          -- unix milliseconds
    source_id INTEGER NOT NULL REFERENCES strings(id),
    op TEXT NOT NULL,
    code TEXT NOT NULL,
    path TEXT NOT NULL,
    message TEXT NOT NULL,
    size INTEGER NOT NULL,
    raw BLOB NOT NULL
, attempts INTEGER NOT NULL DEFAULT 1, last_attempt_at INTEGER);
CREATE TABLE "receipts" (
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
CREATE TABLE relay_cursor (
    stream TEXT PRIMARY KEY,
    acked_id INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE relay_origins (
    origin BLOB NOT NULL,
    stream TEXT NOT NULL,
    committed_id INTEGER NOT NULL,
    PRIMARY KEY (origin, stream)
) WITHOUT ROWID;
CREATE TABLE relay_ranges (
    first_id INTEGER PRIMARY KEY,          -- the center's receipt ids
    last_id INTEGER NOT NULL,              -- [first_id, last_id]
    origin BLOB NOT NULL,
    origin_first INTEGER NOT NULL,         -- the node's ids of the same rows
    origin_last INTEGER NOT NULL
);
CREATE INDEX relay_ranges_origin ON relay_ranges (origin, first_id);
CREATE TABLE retained_log (
    id INTEGER PRIMARY KEY,
    plan_id INTEGER NOT NULL,
    value_id BLOB NOT NULL
);
CREATE TABLE retained_values (
    plan_id INTEGER NOT NULL REFERENCES plans(id),
    value_id BLOB NOT NULL,
    retained_at INTEGER NOT NULL,          -- unix milliseconds, first time
    value BLOB NOT NULL,                   -- msgpack RetainedCompletionValue
    PRIMARY KEY (plan_id, value_id)
) WITHOUT ROWID;
CREATE TABLE rollup_merge (
    only INTEGER PRIMARY KEY CHECK (only = 1),
    rollup_from INTEGER NOT NULL,
    plan_id INTEGER,
    graph_id INTEGER,
    model_id INTEGER,
    requested_backend INTEGER,
    executed_backend INTEGER,
    source_id INTEGER,
    bucket INTEGER
);
CREATE TABLE rollups (
    plan_id INTEGER NOT NULL,
    graph_id INTEGER NOT NULL,
    model_id INTEGER NOT NULL,
    requested_backend INTEGER NOT NULL,
    executed_backend INTEGER NOT NULL,
    source_id INTEGER NOT NULL,
    bucket INTEGER NOT NULL,               -- received_at / 3600000
    receipts INTEGER NOT NULL,
    fallback INTEGER NOT NULL,
    clean INTEGER NOT NULL,
    unproven INTEGER NOT NULL,
    figures BLOB NOT NULL, schema3 INTEGER NOT NULL DEFAULT 0,                 -- store_rollup.c
    PRIMARY KEY (plan_id, graph_id, model_id, requested_backend,
                 executed_backend, source_id, bucket)
) WITHOUT ROWID;
CREATE INDEX rollups_bucket ON rollups (bucket);
CREATE TABLE rollups_day (
    plan_id INTEGER NOT NULL,
    graph_id INTEGER NOT NULL,
    model_id INTEGER NOT NULL,
    requested_backend INTEGER NOT NULL,
    executed_backend INTEGER NOT NULL,
    source_id INTEGER NOT NULL,
    bucket INTEGER NOT NULL,               -- received_at / 86400000
    receipts INTEGER NOT NULL,
    fallback INTEGER NOT NULL,
    clean INTEGER NOT NULL,
    unproven INTEGER NOT NULL,
    figures BLOB NOT NULL, schema3 INTEGER NOT NULL DEFAULT 0,                 -- store_rollup.c
    PRIMARY KEY (plan_id, graph_id, model_id, requested_backend,
                 executed_backend, source_id, bucket)
) WITHOUT ROWID;
CREATE INDEX rollups_day_bucket ON rollups_day (bucket);
CREATE TABLE seq_runs (
    source_id INTEGER NOT NULL,
    hi INTEGER NOT NULL,                   -- the run's highest seq
    chunk INTEGER NOT NULL,                -- chunks.first_id
    lo INTEGER NOT NULL,                   -- its lowest
    n INTEGER NOT NULL,                    -- entries
    entries BLOB NOT NULL,
    PRIMARY KEY (source_id, hi, chunk)
) WITHOUT ROWID;
CREATE TABLE sqlite_sequence(name,seq);
CREATE TABLE strings (
    id INTEGER PRIMARY KEY,
    value BLOB NOT NULL UNIQUE
);
