-- 0017: the sums per chunk (0014) keyed by plan (docs/ingest.md, "Series
-- and recent windows").
--
-- A row now holds the chunk's receipts summed per plan, graph, model,
-- requested and executed backend and hour (store_rollup.c
-- `chunk_sums_put`: a LEB128 count of entries, each plan id, graph id,
-- model id, requested, executed, hour, receipts, fallback, clean,
-- unproven, schema3, the figures blob's length and the figures blob of the
-- rollups), so the edges and short windows grouped or filtered by plan,
-- graph or model read them too, not only those by model or backends. The
-- rows written before hold no plan: they are deleted, and their chunks
-- are read from their rows (exact, as a chunk without sums always was).

DELETE FROM chunk_sums;
