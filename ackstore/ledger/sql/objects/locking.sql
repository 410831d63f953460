-- Locking: the locks the writers and the pipeline wait for, taken on rows of tables no role holds
-- a privilege on (migration 0020, issue 37). An advisory lock is anyone's: any login, the
-- reporter's included, could take the one a writer or a step waits for and stall it. A row lock
-- needs UPDATE on its table, so only these functions (SECURITY DEFINER, the admin role's) take
-- them, each for the role whose work it orders.

-- name: thing_bucket
-- The row of thing_locks that is a thing's ingestion lock: one of 65 536 buckets of its hash.
-- version: 0020
CREATE OR REPLACE FUNCTION thing_bucket(thing_id text) RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT hashtext(thing_id) & 65535
$$;

-- name: lock_things
-- Per-thing ingestion order (decisions #19): the ingestion lock of every thing given, in one
-- order (by bucket) so that two batches never wait for each other in a cycle; how many buckets.
-- A thing's lock is its bucket's row of thing_locks (65 536 of them: two things of one bucket
-- only wait for each other's submissions, never reorder them). Only the intake functions take
-- it, for the things they store: no login holds a thing's lock but by writing it. PL/pgSQL: a
-- session plans the statement once.
-- version: 0020
CREATE OR REPLACE FUNCTION lock_things(thing_ids text[]) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  locked bigint;
BEGIN
  SELECT count(*) INTO locked
  FROM (SELECT FROM thing_locks t
        WHERE t.bucket = ANY (ARRAY(SELECT DISTINCT thing_bucket(i) FROM unnest(lock_things.thing_ids) i))
        ORDER BY t.bucket
        FOR NO KEY UPDATE) l;
  RETURN locked;
END $$;

-- name: lock_step
-- One process at a time runs a pipeline step (or the archive job): true when this transaction
-- now holds the step's lock, false when another holds it (never waits: a first run's row, not
-- committed yet by another process, is a wait too). Held until the transaction ends, so the
-- caller keeps one open for the whole step.
-- version: 0020
CREATE OR REPLACE FUNCTION lock_step(step text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET lock_timeout = '100ms' AS $$
BEGIN
  INSERT INTO ledger_locks (name) VALUES ('step:' || lock_step.step) ON CONFLICT DO NOTHING;
  PERFORM FROM ledger_locks l WHERE l.name = 'step:' || lock_step.step FOR NO KEY UPDATE NOWAIT;
  RETURN true;
EXCEPTION WHEN lock_not_available THEN
  RETURN false;
END $$;

-- name: lock_facts
-- Facts do not land while the sweep merges decisions: a batch of facts shares this lock before
-- its time is taken, the sweep's merge holds it exclusively (jobs/sql/batches.sql, sweep.sql).
-- version: 0020
CREATE OR REPLACE FUNCTION lock_facts(exclusive boolean) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  IF lock_facts.exclusive THEN
    PERFORM FROM ledger_locks l WHERE l.name = 'facts' FOR NO KEY UPDATE;
  ELSE
    PERFORM FROM ledger_locks l WHERE l.name = 'facts' FOR SHARE;
  END IF;
END $$;

-- name: lock_sealer
-- One sealer at a time: a second waits for the first to commit, then finds its seal.
-- version: 0020
CREATE OR REPLACE FUNCTION lock_sealer() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  PERFORM FROM ledger_locks l WHERE l.name = 'seal' FOR NO KEY UPDATE;
END $$;
