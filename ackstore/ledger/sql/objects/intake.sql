-- Intake: the only ways a signal, its next attempt and its live hand-outs enter the ledger
-- (migration 0016). The ingest role holds EXECUTE on these and no INSERT, UPDATE or DELETE on a
-- ledger table. Each is SECURITY DEFINER (it writes as the admin role, which owns the tables),
-- with its search_path pinned (pg_temp last: no caller's table can stand in for a ledger's),
-- and checks what a caller could otherwise forge. PL/pgSQL: a session plans each statement once.

-- name: merge_staged_signals
-- The bulk path's second half: the rows this transaction COPYed into stage_signals (the role may
-- only insert there, and never choose the batch key) become signals, in their order (ids follow
-- it), with the work they make — apply_twin for twin commands, the sweep for every request —
-- and leave the staging table. Deadlines count from the transaction's time, as every path's do;
-- the table's constraints check the rest. The new signals' ids by message id.
-- A key a concurrent submission took meanwhile fails it whole, unless ``skip_taken``: the caller
-- (in a savepoint) calls it again so, and answers the rows not returned as retransmissions. Only
-- then are the keys checked before each insert: that check costs a batch a fifth more.
-- The statement is planned for each call (a batch's rows make the plan's cost negligible): its
-- batch is read by its index, which a plan made when the table was small would not use, and a
-- scan would read every row merges deleted since the last vacuum. A connection's signals only
-- from the connection's login (issue 37; claimed by its first), whatever API they name: its
-- connector settles them and publishes their answers to the reply-to they name, and a message id
-- of its source taken first would make its own message a retransmission. The batch's things are
-- locked first (decisions #19; the lock is no caller's to take apart from a write).
-- version: 0020
CREATE OR REPLACE FUNCTION merge_staged_signals(skip_taken boolean) RETURNS TABLE (id bigint, source_message_id text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
DECLARE
  things text[];
  sources text[];
BEGIN
  SELECT array_agg(DISTINCT x.thing_id), array_agg(DISTINCT x.source) FILTER (WHERE NOT shared_source(x.source))
  INTO things, sources
  FROM stage_signals x WHERE x.batch = txid_current();
  PERFORM act_for_source(c.source) FROM unnest(sources) AS c(source);
  PERFORM lock_things(things);
  RETURN QUERY EXECUTE format($merge$
  WITH stored AS (
      INSERT INTO signals (source, api, source_message_id, correlation_id, channel, kind, action, thing_id, topic,
                           path, headers, value, requested_acks, response_required, timeout_ms, deadline_at)
      SELECT x.source, x.api, x.source_message_id, x.correlation_id, x.channel, x.kind, x.action, x.thing_id,
             x.topic, x.path, x.headers, x.value, x.requested_acks, x.response_required, x.timeout_ms,
             now() + make_interval(secs => x.timeout_ms / 1000.0)
      FROM stage_signals x
      WHERE x.batch = txid_current()
      ORDER BY x.ord
      %s
      RETURNING signals.id, signals.source_message_id, signals.kind
  ), to_apply AS (
      INSERT INTO queue_apply (signal_id) SELECT s.id FROM stored s WHERE s.kind = 'twin-command'
  ), to_decide AS (
      INSERT INTO queue_decide (signal_id, attempt) SELECT s.id, 1 FROM stored s
  )
  SELECT s.id, s.source_message_id FROM stored s
  $merge$, CASE WHEN merge_staged_signals.skip_taken THEN 'ON CONFLICT DO NOTHING' ELSE '' END);
  DELETE FROM stage_signals x WHERE x.batch = txid_current();  -- not returned: the rows are in signals now
END $$;

-- name: clear_abandoned_staged_signals
-- Rows of stage_signals a transaction committed without merging them (the ingest role may COPY
-- and commit without calling merge_staged_signals): a batch is its transaction's id, a merged
-- batch leaves nothing, so the rows of a batch whose transaction is no longer in progress are
-- abandoned. The pipeline calls it once a run; it scans the staging table, which holds the
-- batches in flight and such leftovers, never the ledger's history. How many rows it removed.
-- version: 0020
CREATE OR REPLACE FUNCTION clear_abandoned_staged_signals() RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
WITH removed AS (
    DELETE FROM stage_signals x
    WHERE x.batch = ANY (ARRAY(SELECT b.batch FROM (SELECT DISTINCT y.batch FROM stage_signals y) b
                               WHERE txid_status(b.batch) IS DISTINCT FROM 'in progress'))
    RETURNING 1
)
SELECT count(*) FROM removed
$$;

-- name: insert_signal
-- A single submission (a session plans it once: a third of the server's work for one signal).
-- Its thing locked first (decisions #19: the id is drawn under the lock), then the signal and its
-- work stored as merge_staged_signals stores a batch's, a connection's only by its login. NULL
-- when its message or correlation id is taken: the retransmission path answers. A key taken
-- before the statement began draws no id.
-- version: 0020
CREATE OR REPLACE FUNCTION insert_signal(source text, source_message_id text,
                                         correlation_id text, api text, channel text, kind text, action text,
                                         thing_id text, topic text, path text, value jsonb, headers jsonb,
                                         requested_acks text[], response_required boolean, timeout_ms bigint)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  stored_id bigint;
BEGIN
  PERFORM act_for_source(insert_signal.source);
  -- lock_things of one thing, in one statement (a nested call cost a fifth of the throughput of 16 clients)
  PERFORM FROM thing_locks t WHERE t.bucket = thing_bucket(insert_signal.thing_id) FOR NO KEY UPDATE;
  WITH stored AS (
      INSERT INTO signals (source, source_message_id, correlation_id, api, channel, kind, action, thing_id, topic,
                           path, value, headers, requested_acks, response_required, timeout_ms, deadline_at)
      SELECT insert_signal.source, insert_signal.source_message_id, insert_signal.correlation_id, insert_signal.api,
             insert_signal.channel, insert_signal.kind, insert_signal.action, insert_signal.thing_id,
             insert_signal.topic, insert_signal.path, insert_signal.value, insert_signal.headers,
             insert_signal.requested_acks, insert_signal.response_required, insert_signal.timeout_ms,
             now() + make_interval(secs => insert_signal.timeout_ms / 1000.0)
      WHERE NOT EXISTS (SELECT FROM signals s WHERE s.source = insert_signal.source
                                                AND s.source_message_id = insert_signal.source_message_id)
        AND NOT EXISTS (SELECT FROM signals s WHERE s.correlation_id = insert_signal.correlation_id)
      ON CONFLICT DO NOTHING
      RETURNING signals.id, signals.kind
  ), to_apply AS (
      INSERT INTO queue_apply (signal_id) SELECT s.id FROM stored s WHERE s.kind = 'twin-command'
  ), to_decide AS (
      INSERT INTO queue_decide (signal_id, attempt) SELECT s.id, 1 FROM stored s
  )
  SELECT s.id INTO stored_id FROM stored s;
  RETURN stored_id;
END $$;

-- name: hand_out_live
-- New live signals made ready for the live subscribers they match (which is decided in Python,
-- ackstore.rules.subscriptions): rows of (subscriber_id, signal_id) as a JSON array. The
-- submitting login hands them out to every login's subscribers, so what no caller may choose is
-- checked here (issue 37): only a live signal this transaction stored (its receipt time is the
-- transaction's start: one of a transaction that began in the same microsecond would pass too),
-- never handed out yet, to a live subscriber of the signal's namespace, under a token key drawn
-- here. The subscriber's RQL filter is applied again when its own login leases
-- the hand-out (ackstore.ledger.handouts.pull).
-- version: 0020
CREATE OR REPLACE FUNCTION hand_out_live(rows json) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  IF EXISTS (SELECT FROM json_to_recordset(hand_out_live.rows) AS r(subscriber_id text, signal_id bigint)
             LEFT JOIN signals s ON s.id = r.signal_id
             LEFT JOIN subscribers u ON u.id = r.subscriber_id
             WHERE s.channel IS DISTINCT FROM 'live' OR s.received_at IS DISTINCT FROM now()
                OR NOT COALESCE('live' = ANY (u.channels), false)
                OR NOT COALESCE(u.namespaces IS NULL OR split_part(s.thing_id, ':', 1) = ANY (u.namespaces), false)) THEN
    RAISE EXCEPTION 'hand_out_live: only a live signal of this transaction is handed out, and only to a live '
                    'subscriber of its namespace' USING ERRCODE = 'check_violation';
  END IF;
  INSERT INTO deliveries (subscriber_id, signal_id, token_key, handouts, available_at)
  SELECT r.subscriber_id, r.signal_id, replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 0,
         '-infinity'  -- ready at once, whatever the clock
  FROM json_to_recordset(hand_out_live.rows) AS r(subscriber_id text, signal_id bigint);
END $$;

-- name: lock_retransmitted
-- The stored signals a batch retransmits, locked in id order before any is looked at, so that
-- two batches never wait for each other in a cycle (one index probe per id). NO KEY UPDATE: it
-- excludes a concurrent redelivery of the same signal, yet not the foreign-key checks of the
-- pipeline's writes. A connection's signals only by its login (issue 37): another login's lock
-- would hold back its connector's redeliveries and every ack of them.
-- version: 0020
CREATE OR REPLACE FUNCTION lock_retransmitted(source text, message_ids text[]) RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  PERFORM act_for_source(lock_retransmitted.source);
  RETURN QUERY
  SELECT s.id FROM signals s
  WHERE s.id = ANY (ARRAY(SELECT f.id FROM unnest(lock_retransmitted.message_ids) m(id),
                               LATERAL (SELECT s.id FROM signals s WHERE s.source = lock_retransmitted.source
                                                                     AND s.source_message_id = m.id OFFSET 0) f))
  ORDER BY s.id
  FOR NO KEY UPDATE;
END $$;

-- name: retransmitted
-- A submission whose (source, message id) is stored: its signal, locked against a concurrent
-- redelivery, with the current attempt, its labels, result and settlement decision. A
-- connection's only by its login (issue 37).
-- version: 0020
CREATE OR REPLACE FUNCTION retransmitted(source text, source_message_id text)
RETURNS TABLE (id bigint, correlation_id text, timeout_ms bigint, attempt integer, requested_acks text[],
               ack_statuses jsonb, decision text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_column
BEGIN
  PERFORM act_for_source(retransmitted.source);
  RETURN QUERY
  SELECT s.id, s.correlation_id, s.timeout_ms, a.attempt, a.requested_acks, r.ack_statuses, st.decision
  FROM signals s
  JOIN current_attempts a ON a.signal_id = s.id
  LEFT JOIN request_results r ON r.signal_id = s.id AND r.attempt = a.attempt
  LEFT JOIN settlements st ON st.signal_id = s.id AND st.attempt = a.attempt
  WHERE s.source = retransmitted.source AND s.source_message_id = retransmitted.source_message_id
  FOR NO KEY UPDATE OF s;
END $$;

-- name: open_next_attempt
-- The next attempt of a redelivered signal (A.2.10), only after its current attempt was decided
-- 'redeliver', only by the login of the connection it came through (issue 37), requesting again
-- exactly what did not succeed in it (labels_to_request_again: no login drops another's label
-- from the next attempt), with a deadline from now: that decision counts as carried
-- out (the copy is back, from a connector that may have died before recording so), the sweep
-- decides the new attempt, its subscribers see it again (the hand-out count is kept, so the next
-- token supersedes every earlier one). What carries over (docs/semantics.md, A.2.10): a built-in
-- fact is derived from the twin's own records and counts for every attempt; a built-in ack
-- stored before the lean ledger (0007) is carried to the new attempt when it requests that label
-- again and the ack counted in time for the attempt it was stored for; no subscriber's ack ever
-- carries over — every custom label requested again is answered anew. The previous attempt:
-- signal_attempts (attempt 1 its signal, decisions #148).
-- version: 0036
CREATE OR REPLACE FUNCTION open_next_attempt(signal_id bigint, attempt integer, requested_acks text[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_column
DECLARE
  previous signal_attempts%ROWTYPE;
BEGIN
  PERFORM act_for_connection(s.source) FROM signals s WHERE s.id = open_next_attempt.signal_id;
  SELECT a.* INTO previous FROM signal_attempts a
  WHERE a.signal_id = open_next_attempt.signal_id AND a.attempt = open_next_attempt.attempt - 1;
  IF previous.attempt IS NULL
     OR NOT EXISTS (SELECT FROM settlements st WHERE st.signal_id = previous.signal_id
                                                 AND st.attempt = previous.attempt AND st.decision = 'redeliver')
     OR open_next_attempt.requested_acks IS DISTINCT FROM (
         SELECT labels_to_request_again(previous.requested_acks, r.ack_statuses) FROM request_results r
         WHERE r.signal_id = previous.signal_id AND r.attempt = previous.attempt) THEN
    RAISE EXCEPTION 'open_next_attempt: attempt % of signal % follows no redeliver decision of its previous one, '
                    'or requests other labels than what did not succeed in it',
      open_next_attempt.attempt, open_next_attempt.signal_id USING ERRCODE = 'check_violation';
  END IF;
  INSERT INTO attempts (signal_id, attempt, requested_acks, opened_at, deadline_at)
  SELECT s.id, open_next_attempt.attempt, open_next_attempt.requested_acks, now(),
         now() + make_interval(secs => s.timeout_ms / 1000.0)
  FROM signals s WHERE s.id = open_next_attempt.signal_id;
  UPDATE settlements st SET carried_out_at = clock_timestamp()
  WHERE st.signal_id = previous.signal_id AND st.attempt = previous.attempt AND st.carried_out_at IS NULL;
  INSERT INTO queue_decide (signal_id, attempt) VALUES (open_next_attempt.signal_id, open_next_attempt.attempt)
  ON CONFLICT (signal_id) DO UPDATE SET attempt = EXCLUDED.attempt;
  UPDATE deliveries d
  SET attempt = open_next_attempt.attempt, done_at = NULL, answered_handout = NULL, answered_labels = '{}',
      available_at = '-infinity'  -- ready at once, whatever the clock
  WHERE d.signal_id = open_next_attempt.signal_id;
  INSERT INTO acks (signal_id, attempt, label, status, payload, headers, issuer, weak, received_at, disposition)
  SELECT DISTINCT ON (k.label) k.signal_id, open_next_attempt.attempt, k.label, k.status, k.payload, k.headers,
         k.issuer, k.weak, k.received_at, counted()
  FROM request_acks k
  WHERE k.signal_id = open_next_attempt.signal_id AND k.id IS NOT NULL AND k.issuer = builtin_issuer()
    AND k.label = ANY (open_next_attempt.requested_acks) AND k.label IN (twin_persisted(), search_persisted())
    AND k.disposition = counted()
  ORDER BY k.label, k.id;
END $$;
