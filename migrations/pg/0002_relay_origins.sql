-- 0002: the relay at a central instance (docs/fleet.md).
--
-- A node's receipts are stored under (origin, id): its name and its own
-- ids. relay_origins holds, per origin and stream ("receipts", "plans"),
-- the highest node id committed here, raised in the same transaction as
-- the rows: a batch is cut to the ids above it, so a resend (a lost
-- reply, a failover to another instance on this database) stores nothing
-- twice. The writer locks the origin's row until its COMMIT, so two
-- instances never store one origin's batch at once.
--
-- dedupe also records the producer's (source, seq) of relayed receipts
-- (the node's id as receipt_id), so `gaps` answers for the fleet's
-- producers. Its columns stay as they were: an instance not upgraded yet
-- COPYs into it all of them.

CREATE TABLE relay_origins (
    origin text NOT NULL,
    stream text NOT NULL,
    committed_id bigint NOT NULL,
    PRIMARY KEY (origin, stream)
);
