-- 0003: a group's rollup sums appended, merged into rollup_hours later
-- (docs/fleet.md "As built: pending sums on the center").
--
-- A commit group no longer updates rollup_hours: it appends its sums, one
-- row per key and hour, to rollup_pending with COPY. The table has no key
-- and no index (an append costs no look-up, no conflict check and no new
-- version of a wide row), and its counters' figures are one blob (sums):
-- for each counter measured its bit (a byte), then measured, the sum's
-- high and low words, min and max, each an unsigned LEB128 varint
-- (store_pg.c store_pg_sums_add), so that neither the COPY nor the
-- merge's read-back converts 78 numerics a row. A writer merges the pending rows into
-- rollup_hours every few groups and when quiet, in one transaction that
-- deletes what it adds (DELETE ... RETURNING, summed per key in the
-- daemon, one upsert), under an advisory lock so that one instance merges
-- at a time. Queries read rollup_hours and rollup_pending in one
-- statement, so each snapshot counts every committed receipt once: before
-- a merge's COMMIT in the pending rows, after it in rollup_hours.

CREATE TABLE rollup_pending (
    hour bigint NOT NULL,                 -- received_at / 3600000
    plan text NOT NULL,
    graph text NOT NULL,
    model text NOT NULL,
    source text NOT NULL,
    requested_backend smallint NOT NULL,
    executed_backend smallint NOT NULL,
    receipts bigint NOT NULL,
    fallback bigint NOT NULL,
    clean bigint NOT NULL,
    unproven bigint NOT NULL,
    schema3 bigint NOT NULL,
    sums bytea NOT NULL
);
