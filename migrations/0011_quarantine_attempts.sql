-- 0011: a quarantined payload replayed and refused again stays one row.
--
-- `receiptctl quarantine replay` sends a payload with the envelope key
-- `replay_of` (the row's id); when the daemon refuses it again, it updates
-- that row (the new code, path, message and the bytes still refused)
-- instead of keeping a second copy, provided the row's source is the
-- replaying connection's and its bytes are the request's body
-- (daemon/store.c). `attempts` counts the refusals the row stands for;
-- `last_attempt_at` is the time of the latest, NULL while there was only
-- the first (then it is `received_at`), so no row has to be rewritten here.

ALTER TABLE quarantine ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1;
ALTER TABLE quarantine ADD COLUMN last_attempt_at INTEGER; -- unix ms
