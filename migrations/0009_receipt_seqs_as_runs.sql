-- 0009: a `receipt` write's seq costs its chunk a few bytes, not a row.
--
-- Since 0007 the (source, seq) record of a single receipt waits with the
-- tail in memory and is written with the chunk. Written as a `dedupe` row
-- it cost a B-tree insert each, a third of the writer's work for single
-- receipts from 64 sources (docs/ingest.md). `seq_runs` holds them as one
-- row per source and chunk: the seqs from lo to hi (as stored: the u64's
-- bit pattern as a signed integer) with each one's receipt id, fallback
-- status and payload hash in `entries` (daemon/store_seq.h). Records that
-- are in `dedupe` already stay there: a lookup reads both.

CREATE TABLE seq_runs (
    source_id INTEGER NOT NULL,
    hi INTEGER NOT NULL,                   -- the run's highest seq
    chunk INTEGER NOT NULL,                -- chunks.first_id
    lo INTEGER NOT NULL,                   -- its lowest
    n INTEGER NOT NULL,                    -- entries
    entries BLOB NOT NULL,
    PRIMARY KEY (source_id, hi, chunk)
) WITHOUT ROWID;

-- A resend whose payload differs from the first is a conflict, not a
-- duplicate: the first write's payload hash (32 bits; NULL for records
-- written before this migration, which no resend is compared with).
ALTER TABLE dedupe ADD COLUMN payload_hash INTEGER;
