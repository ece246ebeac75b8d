-- 0016: an order for retained values, for the relay's "retention" stream
-- (docs/fleet.md).
--
-- `retained_values` is WITHOUT ROWID, keyed (plan_id, value_id): it has no
-- commit order of its own to keep a cursor on. `retained_log` gives each
-- retained value an id in the order it was first retained, with one small
-- row written beside it (store_plan.c); the relay reads it past its cursor
-- (`relay_cursor` stream "retention") joined to the value and its plan.
-- Values retained before this migration are logged in retained_at order.

CREATE TABLE retained_log (
    id INTEGER PRIMARY KEY,
    plan_id INTEGER NOT NULL,
    value_id BLOB NOT NULL
);

INSERT INTO retained_log (plan_id, value_id)
    SELECT plan_id, value_id FROM retained_values
    ORDER BY retained_at, plan_id, value_id;
