-- 0001: the central tier's schema on PostgreSQL (docs/fleet.md).
--
-- Receipts are stored under (origin, id): origin is the name of the node
-- that relayed the row and id that node's receipt id; a receipt a
-- producer sent to a central instance itself has origin '' and an id from
-- the sequence receipt_ids, which every instance sharing the database
-- draws from (in blocks of 1024, so an instance asks once per block).
-- The primary key must hold the partition key, so it is (origin, id,
-- received_at): a batch sent again holds the same rows, received_at
-- included, and fails on it instead of storing a row twice.
--
-- Unsigned 64-bit values (seq, counters, coverage bits) are stored as
-- bigint holding the same 64 bits: values past 2^63 - 1 read negative in
-- SQL and come back exact through the daemon.

CREATE TABLE receipts (
    origin text NOT NULL,
    id bigint NOT NULL,
    received_at bigint NOT NULL,          -- unix milliseconds
    source text NOT NULL,
    seq bigint,                           -- NULL when the write had none
    schema_version smallint NOT NULL,
    requested_backend smallint NOT NULL,
    executed_backend smallint NOT NULL,
    status smallint NOT NULL,             -- 0 fallback, 1 clean, 2 unproven
    model text NOT NULL,
    plan text NOT NULL,
    graph text NOT NULL,
    tuning text NOT NULL,
    stop_reason text NOT NULL,
    counter_coverage bigint NOT NULL,
    counters bigint[] NOT NULL,           -- 26, by coverage bit
    artifacts bigint[] NOT NULL,          -- 4
    extra bytea,                          -- unknown keys, msgpack; NULL: none
    PRIMARY KEY (origin, id, received_at)
) PARTITION BY RANGE (received_at);

-- Made on each partition, which the writer creates a day ahead
-- (receipts_YYYYMMDD, [midnight, next midnight) UTC).
CREATE INDEX receipts_plan ON receipts (plan, graph, id);
CREATE INDEX receipts_source ON receipts (source, id);
CREATE INDEX receipts_id ON receipts (id);

CREATE SEQUENCE receipt_ids INCREMENT BY 1024 START WITH 1;

-- The first outcome of each (source, seq) a producer sent this tier.
CREATE TABLE dedupe (
    source text NOT NULL,
    seq bigint NOT NULL,
    op smallint NOT NULL,
    receipt_id bigint NOT NULL,
    status smallint NOT NULL,
    hash bigint NOT NULL,                 -- proto_hash32 of the payload
    outcome bytea,                        -- `receipts`: the result map
    PRIMARY KEY (source, seq)
);

CREATE TABLE quarantine (
    id bigserial PRIMARY KEY,
    received_at bigint NOT NULL,
    source text NOT NULL,
    op text NOT NULL,
    code integer NOT NULL,
    path text NOT NULL,
    message text NOT NULL,
    raw bytea NOT NULL,
    attempts bigint NOT NULL DEFAULT 1,
    last_attempt_at bigint NOT NULL
);

-- Per key and hour, what the `fallbacks` and `coverage` kinds read for
-- whole hours; the writer adds a group's sums in the group's transaction.
-- measured, sum, min and max hold the 26 counters' figures by coverage
-- bit (sum exact: numeric).
CREATE TABLE rollup_hours (
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
    measured bigint[] NOT NULL,
    sum numeric[] NOT NULL,
    min numeric[] NOT NULL,               -- NULL elements: none measured
    max numeric[] NOT NULL,
    schema3 bigint NOT NULL,              -- receipts of schema 3 (all counters)
    PRIMARY KEY (hour, plan, graph, model, source, requested_backend,
                 executed_backend)
);

CREATE TABLE plans (
    id bigserial PRIMARY KEY,
    plan text NOT NULL,
    graph text NOT NULL,
    registered_at bigint NOT NULL,
    source text NOT NULL,
    nodes bigint NOT NULL,
    nvalues bigint NOT NULL,
    canonical bytea NOT NULL,
    UNIQUE (plan, graph)
);

CREATE TABLE retained (
    plan_id bigint NOT NULL REFERENCES plans (id),
    value_id text NOT NULL,
    retained_at bigint NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (plan_id, value_id)
);

CREATE TABLE prunes (
    id bigserial PRIMARY KEY,
    pruned_at bigint NOT NULL,
    cutoff bigint NOT NULL,
    rows bigint NOT NULL,
    oldest bigint NOT NULL,
    newest bigint NOT NULL
);

CREATE TABLE counters (
    name text PRIMARY KEY,
    value bigint NOT NULL
);
