-- Answering: the only ways an ack, a live response and the answer of a hand-out enter the ledger
-- (migration 0016; SECURITY DEFINER with a pinned search_path, as intake.sql's). Which ack
-- counts is decided in Python (ackstore.rules.acks.disposition_on_arrival); these refuse what no
-- caller may store whatever it decided: a built-in fact as a subscriber's ack, an ack for a
-- label its issuer's group did not declare, a counted ack the request cannot count, a live
-- response other than the counted live-response ack it came with, a response to a twin command,
-- a live response from a subscriber never handed the signal; and any of them made as a
-- subscriber this session's login does not own (declaring.sql).

-- name: lock_request
-- The request an ack is for: the signal, share-locked so that deciding it waits for this ack,
-- with its current attempt and the labels that attempt requested.
-- version: 0016
CREATE OR REPLACE FUNCTION lock_request(correlation_id text)
RETURNS TABLE (id bigint, thing_id text, channel text, kind text, action text, path text, attempt integer,
               requested_acks text[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  SELECT s.id, s.thing_id, s.channel, s.kind, s.action, s.path, a.attempt, a.requested_acks
  FROM signals s
  JOIN current_attempts a ON a.signal_id = s.id
  WHERE s.correlation_id = lock_request.correlation_id
  FOR SHARE OF s;
END $$;

-- name: store_ack
-- One ack with its disposition (counted, late, unrequested, duplicate, invalid with why). A
-- counted ack loses to one counted before it for the same label (the partial unique index over
-- counted acks) and is kept as a duplicate. A live response (issue 37) only from a subscriber the
-- signal was handed to, and counted only once that hand-out is answered under its current token
-- (or closed without one), as AckStore.respond decides before it calls this. The disposition
-- stored.
-- version: 0020
CREATE OR REPLACE FUNCTION store_ack(signal_id bigint, attempt integer, label text, status smallint, payload jsonb,
                                     headers jsonb, issuer text, disposition text, reason text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_column
DECLARE
  kept text := store_ack.disposition;
BEGIN
  PERFORM act_for(store_ack.issuer);
  IF store_ack.label IN (twin_persisted(), search_persisted()) THEN
    RAISE EXCEPTION 'store_ack: % is a built-in fact, never a subscriber''s ack', store_ack.label
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF NOT EXISTS (SELECT FROM subscribers u
                 WHERE u.id = store_ack.issuer
                   AND (store_ack.label = live_response() AND 'live' = ANY (u.channels)
                        OR EXISTS (SELECT FROM declared_labels d WHERE d.holder = u.holder
                                                                   AND d.label = store_ack.label))) THEN
    RAISE EXCEPTION 'store_ack: % may not issue %', store_ack.issuer, store_ack.label
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF store_ack.label = live_response() AND NOT EXISTS (
         SELECT FROM deliveries d
         WHERE d.subscriber_id = store_ack.issuer AND d.signal_id = store_ack.signal_id AND d.handouts > 0
           AND (kept <> counted() OR d.answered_handout = d.handouts
                OR d.answered_handout IS NULL AND d.done_at IS NOT NULL)) THEN
    RAISE EXCEPTION 'store_ack: % was not handed signal %, or its hand-out is not answered under its current token',
      store_ack.issuer, store_ack.signal_id USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF kept = counted() AND NOT EXISTS (
         SELECT FROM current_attempts a
         WHERE a.signal_id = store_ack.signal_id AND a.attempt = store_ack.attempt
           AND store_ack.label = ANY (a.requested_acks)
           AND NOT EXISTS (SELECT FROM request_results r WHERE r.signal_id = a.signal_id AND r.attempt = a.attempt)) THEN
    RAISE EXCEPTION 'store_ack: % does not count for attempt % of signal %: not requested, not current, or decided',
      store_ack.label, store_ack.attempt, store_ack.signal_id USING ERRCODE = 'check_violation';
  END IF;
  IF kept = counted() THEN
    INSERT INTO acks (signal_id, attempt, label, status, payload, headers, issuer, disposition)
    VALUES (store_ack.signal_id, store_ack.attempt, store_ack.label, store_ack.status, store_ack.payload,
            store_ack.headers, store_ack.issuer, counted())
    ON CONFLICT (signal_id, attempt, label) WHERE disposition = counted() DO NOTHING;
    IF FOUND THEN
      RETURN kept;
    END IF;
    kept := 'duplicate';  -- the first for its label was counted already
  END IF;
  INSERT INTO acks (signal_id, attempt, label, status, payload, headers, issuer, disposition, reason)
  VALUES (store_ack.signal_id, store_ack.attempt, store_ack.label, store_ack.status, store_ack.payload,
          store_ack.headers, store_ack.issuer, kept, store_ack.reason);
  RETURN kept;
END $$;

-- name: store_live_response
-- The first live response is the signal's response (a live response never short-circuits): the
-- status and payload of the live-response ack its current attempt counted, which came with it;
-- nothing for a twin command, or for an attempt that counted none.
-- version: 0016
CREATE OR REPLACE FUNCTION store_live_response(signal_id bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_column
BEGIN
  INSERT INTO command_responses (signal_id, status, payload, is_error)
  SELECT s.id, k.status, k.payload, false
  FROM signals s
  JOIN current_attempts a ON a.signal_id = s.id
  JOIN acks k ON k.signal_id = a.signal_id AND k.attempt = a.attempt AND k.label = live_response()
             AND k.disposition = counted()
  WHERE s.id = store_live_response.signal_id AND s.channel = 'live'
  ON CONFLICT (signal_id) DO NOTHING;
END $$;

-- name: lock_handout
-- The hand-out an ack or live response answers, locked against a concurrent pull.
-- version: 0016
CREATE OR REPLACE FUNCTION lock_handout(subscriber text, signal_id bigint)
RETURNS TABLE (token_key text, handouts integer, answered_handout integer, answered_labels text[],
               done_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_column
BEGIN
  PERFORM act_for(lock_handout.subscriber);
  RETURN QUERY
  SELECT d.token_key, d.handouts, d.answered_handout, d.answered_labels, d.done_at
  FROM deliveries d
  WHERE d.subscriber_id = lock_handout.subscriber AND d.signal_id = lock_handout.signal_id
  FOR UPDATE;
END $$;

-- name: answer_handout
-- The hand-out is answered by its token (acks of the same token again add only new labels).
-- ``at`` is the caller's clock, or NULL for the database's.
-- version: 0016
CREATE OR REPLACE FUNCTION answer_handout(subscriber text, signal_id bigint, handout integer, labels text[],
                                          at timestamptz) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  PERFORM act_for(answer_handout.subscriber);
  UPDATE deliveries d
  SET done_at = COALESCE(d.done_at, answer_handout.at, statement_timestamp()),
      answered_handout = answer_handout.handout,
      answered_labels = CASE WHEN d.answered_handout IS DISTINCT FROM answer_handout.handout THEN answer_handout.labels
                             ELSE ARRAY(SELECT DISTINCT l FROM unnest(d.answered_labels || answer_handout.labels) l) END
  WHERE d.subscriber_id = answer_handout.subscriber AND d.signal_id = answer_handout.signal_id;
END $$;

-- name: close_handout
-- An answer without a token (a push-style subscriber) closes the subscriber's pending hand-out.
-- ``at`` is the caller's clock, or NULL for the database's.
-- version: 0016
CREATE OR REPLACE FUNCTION close_handout(subscriber text, signal_id bigint, at timestamptz) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  PERFORM act_for(close_handout.subscriber);
  UPDATE deliveries d SET done_at = COALESCE(close_handout.at, statement_timestamp())
  WHERE d.subscriber_id = close_handout.subscriber AND d.signal_id = close_handout.signal_id AND d.done_at IS NULL;
END $$;
