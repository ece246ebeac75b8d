-- 0003: a group's rollup sums appended, merged into rollup_hours later
-- (docs/fleet.md "As built: pending sums on the center").
--
-- A commit group no longer updates rollup_hours: it inserts its sums, one
-- row per key and hour, into rollup_pending, which has no key and no
-- index (an append costs no look-up, no conflict check and no new version
-- of a wide row). A writer merges the pending rows into rollup_hours every
-- few groups and when idle, in one transaction that deletes what it adds
-- (DELETE ... RETURNING, summed per key, one upsert), under an advisory
-- lock so that one instance merges at a time. Queries read
-- rollup_hours and rollup_pending together, so each snapshot counts every
-- committed receipt once: before a merge's COMMIT in the pending rows,
-- after it in rollup_hours.

CREATE TABLE rollup_pending (LIKE rollup_hours);
