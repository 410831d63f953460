-- Pulling: the only ways a hand-out is leased, made or closed (A.3; migration 0016, SECURITY
-- DEFINER with a pinned search_path, as intake.sql's). Which events a subscriber receives is
-- decided in Python (ackstore.rules.subscriptions); these write the hand-outs it decided, only
-- for a subscriber this session's login owns (declaring.sql).

-- name: close_decided_handouts
-- Pending hand-outs whose request attempt is decided have nothing left to answer: they are never
-- handed out again. Rows another consumer is handing out are skipped.
-- version: 0016
CREATE OR REPLACE FUNCTION close_decided_handouts(subscriber text, at timestamptz) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  PERFORM act_for(close_decided_handouts.subscriber);
  UPDATE deliveries d SET done_at = close_decided_handouts.at
  WHERE d.subscriber_id = close_decided_handouts.subscriber
    AND d.signal_id = ANY (ARRAY(
        SELECT p.signal_id FROM deliveries p
        WHERE p.subscriber_id = close_decided_handouts.subscriber AND p.done_at IS NULL
          AND p.available_at <= close_decided_handouts.at
          AND EXISTS (SELECT 1 FROM request_results r WHERE r.signal_id = p.signal_id AND r.attempt = p.attempt)
        FOR UPDATE SKIP LOCKED));
END $$;

-- name: lease_ready
-- The subscriber's ready signals (live signals not handed out yet, leases that ran out), oldest
-- first, up to ``max``, each one more hand-out (the token of every earlier one is superseded)
-- under a new lease. SKIP LOCKED: competing consumers never get the same row.
-- version: 0016
CREATE OR REPLACE FUNCTION lease_ready(subscriber text, at timestamptz, max integer, lease_ms bigint)
RETURNS TABLE (signal_id bigint, attempt integer, handouts integer, token_key text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_column
BEGIN
  PERFORM act_for(lease_ready.subscriber);
  RETURN QUERY
  UPDATE deliveries d
  SET handouts = d.handouts + 1, leased_at = lease_ready.at,
      available_at = lease_ready.at + lease_ready.lease_ms * interval '1 millisecond'
  WHERE d.subscriber_id = lease_ready.subscriber
    AND d.signal_id = ANY (ARRAY(
        SELECT p.signal_id FROM deliveries p
        WHERE p.subscriber_id = lease_ready.subscriber AND p.done_at IS NULL AND p.available_at <= lease_ready.at
        ORDER BY p.signal_id
        LIMIT lease_ready.max
        FOR UPDATE SKIP LOCKED))
  RETURNING d.signal_id, d.attempt, d.handouts, d.token_key;
END $$;

-- name: lock_event_position
-- One consumer at a time reads the event log for a subscriber; the others wait here.
-- version: 0016
CREATE OR REPLACE FUNCTION lock_event_position(subscriber text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  read_to bigint;
BEGIN
  PERFORM act_for(lock_event_position.subscriber);
  SELECT u.event_position INTO read_to FROM subscribers u WHERE u.id = lock_event_position.subscriber FOR UPDATE;
  RETURN read_to;
END $$;

-- name: move_event_position
-- How far the subscriber has read the event log (handed out or passed over): only forward.
-- version: 0016
CREATE OR REPLACE FUNCTION move_event_position(subscriber text, read_to bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  PERFORM act_for(move_event_position.subscriber);
  UPDATE subscribers u SET event_position = move_event_position.read_to
  WHERE u.id = move_event_position.subscriber AND u.event_position < move_event_position.read_to;
END $$;

-- name: hand_out_events
-- Twin events handed out for the first time, under a lease: rows of (subscriber_id, signal_id,
-- attempt, event_id, token_key, available_at, leased_at) as a JSON array. Only an event of the
-- log, with its signal's current attempt.
-- version: 0016
CREATE OR REPLACE FUNCTION hand_out_events(rows json)
RETURNS TABLE (signal_id bigint, attempt integer, handouts integer, token_key text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_column
BEGIN
  PERFORM act_for(r.subscriber_id) FROM json_to_recordset(hand_out_events.rows) AS r(subscriber_id text);
  RETURN QUERY
  INSERT INTO deliveries (subscriber_id, signal_id, attempt, event_id, token_key, handouts, available_at, leased_at)
  SELECT r.subscriber_id, r.signal_id, a.attempt, e.id, r.token_key, 1, r.available_at, r.leased_at
  FROM json_to_recordset(hand_out_events.rows) AS r(subscriber_id text, signal_id bigint, attempt integer,
                                                     event_id bigint, token_key text, available_at timestamptz,
                                                     leased_at timestamptz)
  JOIN thing_events e ON e.id = r.event_id AND e.signal_id = r.signal_id
  JOIN current_attempts a ON a.signal_id = r.signal_id AND a.attempt = r.attempt
  RETURNING deliveries.signal_id, deliveries.attempt, deliveries.handouts, deliveries.token_key;
END $$;

-- name: close_handouts
-- Hand-outs that await no answer (the signal requests none of the group's labels).
-- version: 0016
CREATE OR REPLACE FUNCTION close_handouts(subscriber text, signal_ids bigint[], at timestamptz) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  PERFORM act_for(close_handouts.subscriber);
  UPDATE deliveries d SET done_at = close_handouts.at
  WHERE d.subscriber_id = close_handouts.subscriber AND d.signal_id = ANY (close_handouts.signal_ids)
    AND d.done_at IS NULL;
END $$;
