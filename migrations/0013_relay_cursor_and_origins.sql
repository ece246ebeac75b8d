-- 0013: the fleet's relay (docs/fleet.md).
--
-- On a node, `relay_cursor` holds, per stream ("receipts"), the highest id
-- the center acknowledged after its own COMMIT: the relay sends what lies
-- past it, in id order, and advances it in a small transaction of its own.
-- Nothing is written per receipt.
--
-- On a center, `relay_origins` holds, per origin (the node's name, its
-- hello source on the relay connection) and stream, the highest node id
-- committed here, updated in the same transaction as the rows; a batch is
-- cut to the ids above it, so a resend stores nothing twice.
-- `relay_ranges` says which of the center's receipt ids came from which
-- origin: one row per relayed batch (its ids are consecutive), for the
-- `receipts` query's `origin` filter.

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
