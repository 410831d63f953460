-- Statements every merge shares (jobs/step.py). Bind parameters: :batch_id, :step, :run_id;
-- :table, :written.

-- name: open
-- The batch's id, taken before its facts are written (they carry it).
SELECT nextval(pg_get_serial_sequence('ledger_batches', 'id'))

-- name: wait_for_decisions
-- Facts do not land while the sweep merges decisions (it holds this lock exclusively): the
-- sweep's recount of in-time acks sees every fact whose time is before its commit.
SELECT pg_advisory_xact_lock_shared(hashtext('ackstore.facts'))

-- name: close
-- The last write before COMMIT: its clock_timestamp() is when the batch's facts became visible,
-- the fact time of the built-in acks derived from them (A.2.1).
INSERT INTO ledger_batches (id, step, run_id, committed_at)
VALUES (:batch_id, :step, :run_id, clock_timestamp())

-- name: refresh_statistics
-- After a merge wrote :written rows of :table (or before it reads a staging table that many
-- rows): its statistics, when that is enough to change a plan (the function's rule).
SELECT refresh_statistics(:table, :written)

-- name: without_jit
SET LOCAL jit = off
