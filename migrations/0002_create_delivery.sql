-- 0002: idempotency, quarantine and persistent counters.
--
-- `dedupe` holds the first outcome of every committed write that carried a
-- (source, seq): for `receipt`, the receipt id and its fallback status; for
-- `receipts`, the msgpack result map the daemon replied with (`outcome`).
-- Only successful writes are recorded, so a failed write can be resent.

CREATE TABLE dedupe (
    source_id INTEGER NOT NULL REFERENCES strings(id),
    seq INTEGER NOT NULL,
    op INTEGER NOT NULL,                   -- enum proto_op of envelope.h
    receipt_id INTEGER,
    status INTEGER,
    outcome BLOB,
    PRIMARY KEY (source_id, seq)
) WITHOUT ROWID;

-- Every rejected write payload, raw, bounded in total bytes by the daemon
-- (oldest rows evicted first, in the transaction that adds a new one).
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
);

-- Counters that must survive restarts (quarantine bytes and evictions).
CREATE TABLE counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;

INSERT INTO counters (name, value) VALUES
    ('quarantine_bytes', 0),
    ('quarantine_evictions', 0);
