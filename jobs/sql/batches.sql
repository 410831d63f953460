-- Statements every merge shares (jobs/step.py). Bind parameters: :batch_id, :step, :run_id;
-- :table, :written.

-- name: open
-- The batch's id, taken before its facts are written (they carry it).
SELECT nextval(pg_get_serial_sequence('ledger_batches', 'id'))

-- name: wait_for_decisions
-- Facts do not land while the sweep merges decisions (it holds this lock exclusively): the
-- sweep's recount of in-time acks sees every fact whose time is before its commit. The function
-- lock_facts: a lock no other login may take (issue 37).
SELECT lock_facts(false)

-- name: lock_step
-- One process at a time runs the step (the function lock_step): true when this transaction holds
-- its lock now, false when another process does.
SELECT lock_step(:step)

-- name: keep_step_lock
-- The step's lock is held by a transaction that stays open, idle, for the whole step: the
-- database's idle_in_transaction_session_timeout (migrate.py) is not for this one.
SET LOCAL idle_in_transaction_session_timeout = 0

-- name: lock_timeout
-- How long a step's transaction waits for a lock a writer holds (issue 37: an ingest transaction
-- left idle after storing an ack must not stall the sweep, nor every other login's ack queued
-- behind it): past it the step defers its work to the next pass. Milliseconds.
SELECT set_config('lock_timeout', CAST(:ms AS text), true)

-- name: clear_abandoned_staged_signals
-- Rows a committed COPY left in stage_signals without merging them (the function of that name).
SELECT clear_abandoned_staged_signals()

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
