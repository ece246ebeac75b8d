-- 0007: receipts are appended, and what finds them is built per chunk.
--
-- Six secondary indexes, AUTOINCREMENT and six foreign-key checks made a
-- receipt cost about 9 us of writer time, six times the row itself
-- (docs/ingest.md has the figures). The receipts table is now a plain
-- rowid table written in id order, and everything derived from it is
-- built in memory by the writer and written once per chunk of receipts:
--
-- * `chunks`: one row per chunk, the id range [first_id, end_id) and the
--   range of received_at in it, so a time window maps to a few id ranges
--   (received_at follows the wall clock, so it is nearly in id order), and
--   whether received_at is in id order within it (then a window's edge
--   inside the chunk is found by bisection).
-- * `postings`: per chunk, per key (kind: 1 plan, 2 graph, 3 model,
--   4 source, 5 status, 6 requested backend, 7 executed backend) and value
--   (a string id, a status or a backend), the ids of the chunk's receipts
--   that have it: a CRoaring bitmap of id - first_id, portable format.
-- * the hour and day rollups of 0004, which now cover exactly the receipts
--   with id < tail_from, in a new layout: keyed by their key itself
--   (WITHOUT ROWID, one B-tree instead of a table and a unique index), the
--   counts in columns, and the 26 counters' figures (measured, 128-bit
--   sum, min, max) in one blob of varints (store_rollup.c), so that writing
--   a row costs one B-tree update of a row that fits its page instead of
--   134 columns in two B-trees.
--
-- Receipts with id >= tail_from (counter `tail_from`) are the tail: not yet
-- in any chunk, posting or rollup; queries read them directly (a rowid
-- range of at most one chunk), and the writer rebuilds its in-memory sums
-- from them when it starts. A chunk, its postings, its rollup sums and the
-- new tail_from are written in one transaction. Pruning removes only
-- receipts below tail_from.
--
-- Ids are assigned by the writer: max(max(id) + 1, tail_from, id_floor),
-- so an id is never reused: every id below tail_from was covered by a
-- chunk, pruning never removes the tail, and the ids used so far under
-- AUTOINCREMENT are carried into the counter id_floor.
--
-- Foreign keys from receipts to strings go: the writer interns every
-- string id in the same transaction as the row that names it.
--
-- Receipts already stored become the tail: at its first start on this
-- version the daemon writes them as chunks (store_tail.c), postings and
-- rollups alike, a chunk per transaction, with the progress reporting of
-- the migrations.

CREATE TABLE receipts_v7 (
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

INSERT INTO receipts_v7 SELECT * FROM receipts;

INSERT INTO counters (name, value)
SELECT 'id_floor',
       max(coalesce((SELECT max(id) FROM receipts), 0),
           coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'receipts'),
                    0)) + 1;
INSERT INTO counters (name, value)
SELECT 'tail_from', coalesce((SELECT min(id) FROM receipts),
                             (SELECT value FROM counters
                              WHERE name = 'id_floor'));

DROP TABLE receipts;
ALTER TABLE receipts_v7 RENAME TO receipts;

CREATE TABLE chunks (
    first_id INTEGER PRIMARY KEY,
    end_id INTEGER NOT NULL,               -- ids [first_id, end_id)
    first_at INTEGER NOT NULL,             -- min received_at in it
    last_at INTEGER NOT NULL,              -- max received_at in it
    receipts INTEGER NOT NULL,             -- rows when the chunk was written
    ordered INTEGER NOT NULL               -- 1: received_at never falls
                                           -- from one id to the next
);

CREATE TABLE postings (
    kind INTEGER NOT NULL,
    value INTEGER NOT NULL,
    chunk INTEGER NOT NULL,                -- chunks.first_id
    ids BLOB NOT NULL,                     -- roaring bitmap of id - chunk
    PRIMARY KEY (kind, value, chunk)
) WITHOUT ROWID;
-- Pruning drops the postings of chunks it emptied.
CREATE INDEX postings_chunk ON postings (chunk);

-- The rollups are rebuilt with the chunks (above). The day rollups hold
-- the hour rollups of the buckets below the counter days_from, merged by
-- day: the writer folds an hour into its day once the hour is over, and
-- adds to a day row directly only for a receipt of an hour already folded
-- (a clock that stepped back). A query reads a day past days_from from
-- its hours.
INSERT INTO counters (name, value) VALUES ('days_from', 0);
DROP TABLE rollups;
DROP TABLE rollups_day;

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
    figures BLOB NOT NULL,                 -- store_rollup.c
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
    figures BLOB NOT NULL,                 -- store_rollup.c
    PRIMARY KEY (plan_id, graph_id, model_id, requested_backend,
                 executed_backend, source_id, bucket)
) WITHOUT ROWID;
CREATE INDEX rollups_day_bucket ON rollups_day (bucket);
