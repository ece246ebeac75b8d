-- 0005: the record of retention pruning.
--
-- The writer deletes receipts older than the configured retention age in
-- small batches (daemon/store_prune.c); each batch that removed at least
-- one receipt leaves one row here, in the same transaction as the delete,
-- so an operator can see what was removed and when (`query {"kind":
-- "prunes"}`). Dedupe records of pruned receipts are kept: a resend of a
-- pruned (source, seq) is still answered as a duplicate.

CREATE TABLE prunes (
    id INTEGER PRIMARY KEY,
    pruned_at INTEGER NOT NULL,            -- unix milliseconds
    cutoff INTEGER NOT NULL,               -- received_at < cutoff were due
    rows INTEGER NOT NULL,                 -- receipts removed
    oldest INTEGER NOT NULL,               -- received_at of the oldest removed
    newest INTEGER NOT NULL                -- received_at of the newest removed
);
