-- 0014: sums per chunk for the edges of a time window (docs/ingest.md,
-- "Series and recent windows").
--
-- One row per chunk, written with the chunk in the same transaction: the
-- chunk's receipts summed per model, requested and executed backend and
-- hour (store_rollup.c `chunk_sums_put`: a LEB128 count of entries, each
-- model id, requested, executed, hour, receipts, fallback, clean,
-- unproven, schema3, the figures blob's length and the figures blob of the
-- rollups). An aggregate whose filters and grouping are on those keys only
-- reads a chunk that lies wholly inside a window's partial hour from here
-- instead of from its rows. Append-only: never merged or updated. A prune
-- that deletes receipts of a chunk deletes its row (the chunk is then read
-- from its rows); chunks written before this migration have none.

CREATE TABLE chunk_sums (
    chunk INTEGER PRIMARY KEY,             -- chunks.first_id
    sums BLOB NOT NULL
);
