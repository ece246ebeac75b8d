-- 0003: prepared plans and their retained completion values (PROTOCOL
-- sections 5 to 7).
--
-- A plan is kept in the canonical msgpack form the daemon re-encodes it to
-- (proto/plan.h), keyed by (prepared_plan_id, graph_hash): two registrations
-- of one key are the same plan exactly when their canonical bytes are
-- equal. Identities and graph hashes are blobs, like `strings.value`, so
-- that every comparison is bytewise.

CREATE TABLE plans (
    id INTEGER PRIMARY KEY,
    prepared_plan_id BLOB NOT NULL,
    graph_hash BLOB NOT NULL,
    registered_at INTEGER NOT NULL,        -- unix milliseconds
    source BLOB NOT NULL,                  -- "" without hello
    node_count INTEGER NOT NULL,
    value_count INTEGER NOT NULL,
    canonical BLOB NOT NULL,               -- msgpack, plan_encode_canonical
    UNIQUE (prepared_plan_id, graph_hash)
);

-- The resolved values of every accepted retention spec, one row per value
-- of a plan: retaining a value again changes nothing, because the plan it
-- was resolved against cannot change.
CREATE TABLE retained_values (
    plan_id INTEGER NOT NULL REFERENCES plans(id),
    value_id BLOB NOT NULL,
    retained_at INTEGER NOT NULL,          -- unix milliseconds, first time
    value BLOB NOT NULL,                   -- msgpack RetainedCompletionValue
    PRIMARY KEY (plan_id, value_id)
) WITHOUT ROWID;
