-- 0012: a counter's coverage counts only the receipts whose schema has it.
--
-- Bits 10-25 of counter_coverage exist in schema 3 only. Until now a
-- schema-1 or -2 receipt counted as "unknown" for them, so during a
-- rolling upgrade `coverage` reported those counters as mostly unknown
-- although every producer that has them measured them. Each rollup row
-- now also counts its schema-3 receipts (`schema3`); a query reports, per
-- counter, `not_applicable` (receipts whose schema lacks the counter) apart
-- from `unknown` (receipts whose schema has it, with the bit clear).
--
-- The new column is filled exactly from the receipts each row covers: the
-- hour rows hold the receipts below rollup_from and, of those up to
-- rollup_end (tail_from on a store that never kept it), the ones whose key
-- is at most the key in rollup_merge (migrations/0008); the day rows hold
-- the hour rows of the buckets below days_from.

ALTER TABLE rollups ADD COLUMN schema3 INTEGER NOT NULL DEFAULT 0;
ALTER TABLE rollups_day ADD COLUMN schema3 INTEGER NOT NULL DEFAULT 0;

CREATE TEMP TABLE schema3_0012 AS
SELECT r.plan_id, r.graph_id, r.model_id, r.requested_backend,
       r.executed_backend, r.source_id, r.received_at / 3600000 AS bucket,
       count(*) AS n
FROM receipts r, rollup_merge m
WHERE r.schema_version = 3
  AND (r.id < m.rollup_from
       OR (r.id < coalesce((SELECT value FROM counters
                            WHERE name = 'rollup_end'),
                           (SELECT value FROM counters
                            WHERE name = 'tail_from'))
           AND m.plan_id IS NOT NULL
           AND (r.plan_id, r.graph_id, r.model_id, r.requested_backend,
                r.executed_backend, r.source_id, r.received_at / 3600000)
               <= (m.plan_id, m.graph_id, m.model_id, m.requested_backend,
                   m.executed_backend, m.source_id, m.bucket)))
GROUP BY 1, 2, 3, 4, 5, 6, 7;

UPDATE rollups SET schema3 = t.n
FROM schema3_0012 t
WHERE rollups.plan_id = t.plan_id AND rollups.graph_id = t.graph_id
  AND rollups.model_id = t.model_id
  AND rollups.requested_backend = t.requested_backend
  AND rollups.executed_backend = t.executed_backend
  AND rollups.source_id = t.source_id AND rollups.bucket = t.bucket;

UPDATE rollups_day SET schema3 = t.n
FROM (SELECT plan_id, graph_id, model_id, requested_backend,
             executed_backend, source_id, bucket / 24 AS day, sum(n) AS n
      FROM schema3_0012
      WHERE bucket < coalesce((SELECT value FROM counters
                               WHERE name = 'days_from'), 0)
      GROUP BY 1, 2, 3, 4, 5, 6, 7) t
WHERE rollups_day.plan_id = t.plan_id AND rollups_day.graph_id = t.graph_id
  AND rollups_day.model_id = t.model_id
  AND rollups_day.requested_backend = t.requested_backend
  AND rollups_day.executed_backend = t.executed_backend
  AND rollups_day.source_id = t.source_id AND rollups_day.bucket = t.day;

DROP TABLE schema3_0012;
