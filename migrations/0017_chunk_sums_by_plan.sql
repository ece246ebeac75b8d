-- 0017: the sums per chunk (0014) keyed by plan, their counters' figures
-- in a column of their own (docs/ingest.md, "Series and recent windows").
--
-- A row holds the chunk's receipts summed per plan, graph, model,
-- requested and executed backend and hour (store_rollup.c
-- `chunk_sums_put`), so the edges and short windows grouped or filtered by
-- plan, graph or model read them too, not only those by model or
-- backends. `sums`: a LEB128 count of entries, each plan id, graph id,
-- model id, requested, executed, hour, receipts, fallback, clean,
-- unproven, schema3. `figures`: per entry in the same order, the length
-- and the figures blob of the rollups. `fallbacks` reads `sums` alone, a
-- short column at the start of the record; `coverage` reads both. The
-- rows written before hold no plan: they are dropped, and their chunks are
-- read from their rows (exact, as a chunk without sums always was).

DROP TABLE chunk_sums;

CREATE TABLE chunk_sums (
    chunk INTEGER PRIMARY KEY,             -- chunks.first_id
    sums BLOB NOT NULL,
    figures BLOB NOT NULL
);
