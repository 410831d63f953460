-- store_ack as migration 0016 defined it (superseded by migration 0020: a live response only from a subscriber handed the signal, under its current hand-out).
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
