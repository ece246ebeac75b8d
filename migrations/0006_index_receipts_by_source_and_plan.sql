-- 0006: newest-first pages of one source or one plan come off an index.
--
-- The `receipts` query lists newest first (ORDER BY id DESC) in pages. A
-- filter on the source alone used receipts_source_seq (source_id, seq),
-- and one on the plan alone used receipts_plan_graph (plan_id, graph_id,
-- id); neither is in id order for that filter, so every page sorted all of
-- the source's or the plan's receipts (bench/bench_query.c, listing: 176
-- ms and 460 ms a page at 2 million receipts, 316x and 827x the unfiltered
-- page, and growing with the store). Indexes that end in id serve them in
-- order and stop after one page.
--
-- receipts_source_seq goes: nothing reads receipts by (source, seq); the
-- dedupe table answers that. So the source index costs writes nothing new;
-- the plan index costs one more index entry per receipt.

DROP INDEX receipts_source_seq;
CREATE INDEX receipts_source ON receipts (source_id, id);
CREATE INDEX receipts_plan ON receipts (plan_id, id);
