-- 0008: a chunk costs its commit a few pages, not a page per key.
--
-- Under 0007 the commit that wrote a chunk stalled every acknowledgement
-- behind it for about 15 ms (docs/ingest.md): its postings went to one
-- B-tree leaf per key value (the table was ordered by key first), and its
-- rollup sums rewrote every hour row of the current hour in one go, so the
-- commit and the checkpoint after it wrote about 900 pages.
--
-- * `postings` is ordered by chunk first: a chunk's postings are appended
--   to the end of the table, a few sequential pages. A query reads, for
--   each chunk newest first, the posting of its key value by primary key.
--   Pruning deletes a range of the primary key, so postings_chunk goes.
-- * A chunk's rollup sums are merged into the rollup rows in key order
--   over the commits that follow it (store_rollup.c), a slice per commit.
--   `rollup_merge` says how far: the rollups cover every receipt with
--   id < rollup_from, and of the receipts in [rollup_from, tail_from)
--   those whose key (plan_id, graph_id, model_id, requested_backend,
--   executed_backend, source_id, bucket) is at most the key in this row;
--   no key (NULL) means none of them. A query reads the rest from the
--   receipts. When a merge is done rollup_from = tail_from.

ALTER TABLE postings RENAME TO postings_v7;
DROP INDEX postings_chunk;
CREATE TABLE postings (
    chunk INTEGER NOT NULL,                -- chunks.first_id
    kind INTEGER NOT NULL,
    value INTEGER NOT NULL,
    ids BLOB NOT NULL,                     -- roaring bitmap of id - chunk
    PRIMARY KEY (chunk, kind, value)
) WITHOUT ROWID;
INSERT INTO postings (chunk, kind, value, ids)
SELECT chunk, kind, value, ids FROM postings_v7 ORDER BY chunk, kind, value;
DROP TABLE postings_v7;

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
INSERT INTO rollup_merge (only, rollup_from)
SELECT 1, coalesce((SELECT value FROM counters WHERE name = 'tail_from'), 1);
