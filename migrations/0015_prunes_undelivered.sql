-- 0015: what retention took that the center had not acknowledged.
--
-- With an upstream and `store.relay_retention = "drop"`, retention prunes
-- receipts past the relay's cursor too (docs/fleet.md); each prune batch
-- records how many of its rows were past the cursor, not acknowledged by
-- the center, when they were removed. 0 otherwise, and for the records
-- made before this migration.

ALTER TABLE prunes ADD COLUMN undelivered INTEGER NOT NULL DEFAULT 0;
