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

-- name: signal_attempts
-- Every attempt of every signal (A.2.10) — its labels, when it opened, its deadline, and when the
-- attempt after it opened (NULL: none did) —, for a reader of a signal's attempts or of one by its
-- key. Attempt 1 is its signal and a redelivery its own row (attempt_value); redeliveries are
-- numbered on from 2 (open_next_attempt opens only the attempt after one that exists). So a signal
-- is joined to its redeliveries (their own index), and each joined row stands for its redelivery
-- and, once — on attempt 2's row, or on the one row when there is none —, for attempt 1: joins on
-- stored columns that their statistics size, no row of attempt 1 read, and a view the planner
-- flattens into its reader, where a UNION ALL of the two would be planned whole (decisions #147,
-- #148). A reader of the attempt of a queue's or a decision's key in bulk joins the signal and
-- the redelivery's row itself, as the sweep does; builtin_acks spells this enumeration in its own
-- joins: joined through this view, decide_common's plan for a queue of 200 hashed every signal.
-- version: 0036
CREATE OR REPLACE VIEW signal_attempts AS
SELECT s.id AS signal_id, n.attempt,
       attempt_value(n.attempt, s.requested_acks, re.requested_acks) AS requested_acks,
       attempt_value(n.attempt, s.received_at, re.opened_at) AS opened_at,
       attempt_value(n.attempt, s.deadline_at, re.deadline_at) AS deadline_at,
       n.next_opened_at
FROM signals s
LEFT JOIN attempts re ON re.signal_id = s.id AND redelivery_attempt(re.attempt)
LEFT JOIN attempts later ON later.signal_id = re.signal_id AND redelivery_attempt(later.attempt)
    AND later.attempt = re.attempt + 1
CROSS JOIN LATERAL (VALUES (1, re.attempt IS NULL OR re.attempt = 2, re.opened_at),
                           (re.attempt, re.attempt IS NOT NULL, later.opened_at)) AS n(attempt, stands, next_opened_at)
WHERE n.stands;

-- name: current_attempts
-- A signal's current attempt: its newest, the one no redelivery followed — the newest
-- redelivery's row (redelivery_attempt: their own index), or attempt 1, its signal, when it has
-- none; each value through attempt_value (decisions #148). Every signal has one. (Every attempt:
-- the view signal_attempts; one signal's current one, by its key: the function current_attempt_of.)
-- version: 0036
CREATE OR REPLACE VIEW current_attempts AS
SELECT s.id AS signal_id, n.attempt,
       attempt_value(n.attempt, s.requested_acks, re.requested_acks) AS requested_acks,
       attempt_value(n.attempt, s.received_at, re.opened_at) AS opened_at,
       attempt_value(n.attempt, s.deadline_at, re.deadline_at) AS deadline_at
FROM signals s
LEFT JOIN (SELECT r.* FROM attempts r
           WHERE redelivery_attempt(r.attempt)
             AND NOT EXISTS (SELECT 1 FROM attempts later
                             WHERE later.signal_id = r.signal_id AND redelivery_attempt(later.attempt)
                               AND later.attempt > r.attempt)) re ON re.signal_id = s.id
CROSS JOIN LATERAL (SELECT COALESCE(re.attempt, 1) AS attempt) n;

-- name: current_attempt_of
-- A signal's current attempt (the view current_attempts), reached by the signal's key: a join
-- with the view over a window of thousands is planned as a hash join over every signal. Its
-- newest redelivery is read by the index, newest first; none, and it is attempt 1, its signal.
-- LIMIT 1 (a signal has one) keeps it a look-up by the key where it is inlined: without it the
-- planner pulls the body up into its caller and may hash signals whole (tests/ledger/test_bounded.py).
-- version: 0036
CREATE OR REPLACE FUNCTION current_attempt_of(signal bigint)
RETURNS TABLE (signal_id bigint, attempt integer, requested_acks text[], opened_at timestamptz,
               deadline_at timestamptz)
LANGUAGE sql STABLE AS $$
SELECT s.id, n.attempt, attempt_value(n.attempt, s.requested_acks, re.requested_acks),
       attempt_value(n.attempt, s.received_at, re.opened_at), attempt_value(n.attempt, s.deadline_at, re.deadline_at)
FROM signals s
LEFT JOIN LATERAL (SELECT r.* FROM attempts r WHERE r.signal_id = s.id AND redelivery_attempt(r.attempt)
                   ORDER BY r.attempt DESC LIMIT 1) re ON true
CROSS JOIN LATERAL (SELECT COALESCE(re.attempt, 1) AS attempt) n
WHERE s.id = current_attempt_of.signal
LIMIT 1
$$;
