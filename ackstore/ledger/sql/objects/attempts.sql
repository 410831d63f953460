-- Attempts: every attempt of a request is a row of attempts (A.2.10); a signal's current
-- attempt is its newest.

-- name: ackstore_open_first_attempts
-- Attempt 1 of every signal, written with it: one set-based insert per statement.
-- version: 0008
CREATE OR REPLACE FUNCTION ackstore_open_first_attempts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO attempts (signal_id, attempt, requested_acks, opened_at, deadline_at)
  SELECT s.id, 1, s.requested_acks, s.received_at, s.deadline_at FROM received s;
  RETURN NULL;
END $$;

-- name: signals_open_first_attempts
-- Every inserted signal opens its attempt 1 (the function above).
-- version: 0008
CREATE OR REPLACE TRIGGER signals_open_first_attempts AFTER INSERT ON signals REFERENCING NEW TABLE AS received
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_open_first_attempts();

-- name: redelivery_attempt
-- Whether an attempt is a redelivery's: any after the first (A.2.10). Few of them, so they have
-- their own index (ix_attempts_redelivery, the same predicate): a reader of a signal's later or
-- next attempt says it is one, and a backlog's join or anti-join hashes the redeliveries alone
-- instead of every attempt (decisions #144). Inlined where called (the planner proves the index's
-- predicate from the inlined expression); PARALLEL SAFE, as builtin_disposition says why.
-- version: 0032
CREATE OR REPLACE FUNCTION redelivery_attempt(attempt integer) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT attempt > 1
$$;

-- name: attempt_value
-- One thing an attempt says of its request — its labels, when it opened, its deadline — taken
-- from where its number says it lies (A.2.10): attempt 1 is its signal (requested_acks,
-- received_at and deadline_at: what the trigger above copies into its row, so that row, kept for
-- ledgers written so far, says nothing the signal does not), a redelivery's is its own row
-- (redelivery_attempt: their own index, a few rows to hash, not one a signal). A reader joins both
-- and takes each value here, and whether the attempt is there from attempt_found: a backlog's join
-- reads no row of attempt 1 (decisions #146). Polymorphic and inlined where called.
-- version: 0034
CREATE OR REPLACE FUNCTION attempt_value(attempt integer, of_signal anyelement, of_redelivery anyelement)
RETURNS anyelement LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN redelivery_attempt(attempt) THEN of_redelivery ELSE of_signal END
$$;

-- name: attempt_found
-- The attempt's own part of whether it is there, for a reader that joined its signal and a
-- redelivery's row as attempt_value says: attempt 1 always (the caller checks its signal), a
-- redelivery when its row was found. An OR, inlined, so that a condition on it is sized from
-- each side's statistics.
-- version: 0034
CREATE OR REPLACE FUNCTION attempt_found(attempt integer, redelivery_found boolean) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT NOT redelivery_attempt(attempt) OR redelivery_found
$$;

-- name: current_attempts
-- A signal's current attempt: its newest, the one no redelivery followed. (Any attempt, by its
-- number: the table attempts; one signal's, by its key: the function current_attempt_of.)
-- version: 0032
CREATE OR REPLACE VIEW current_attempts AS
SELECT a.signal_id, a.attempt, a.requested_acks, a.opened_at, a.deadline_at
FROM attempts a
WHERE NOT EXISTS (SELECT 1 FROM attempts later
                  WHERE later.signal_id = a.signal_id AND redelivery_attempt(later.attempt)
                    AND later.attempt > a.attempt);

-- name: current_attempt_of
-- A signal's current attempt (the view current_attempts), reached by the signal's key: a join
-- with the view over a window of thousands is planned as a hash join over every attempt.
-- version: 0010
CREATE OR REPLACE FUNCTION current_attempt_of(signal bigint)
RETURNS SETOF attempts LANGUAGE sql STABLE AS $$
SELECT a.* FROM attempts a WHERE a.signal_id = signal ORDER BY a.attempt DESC LIMIT 1
$$;
