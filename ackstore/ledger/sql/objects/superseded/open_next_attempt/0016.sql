-- open_next_attempt as migration 0016 defined it (superseded by migration 0020: only the connection's login opens it; only the built-in facts that counted in time are carried).
CREATE OR REPLACE FUNCTION open_next_attempt(signal_id bigint, attempt integer, requested_acks text[],
                                             builtin_labels text[], builtin_issuer text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_column
DECLARE
  previous attempts%ROWTYPE;
BEGIN
  SELECT a.* INTO previous FROM attempts a
  WHERE a.signal_id = open_next_attempt.signal_id AND a.attempt = open_next_attempt.attempt - 1;
  IF previous.attempt IS NULL
     OR NOT EXISTS (SELECT FROM settlements st WHERE st.signal_id = previous.signal_id
                                                 AND st.attempt = previous.attempt AND st.decision = 'redeliver')
     OR NOT open_next_attempt.requested_acks <@ previous.requested_acks
     OR NOT open_next_attempt.builtin_labels <@ open_next_attempt.requested_acks THEN
    RAISE EXCEPTION 'open_next_attempt: attempt % of signal % follows no redeliver decision of its previous one',
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
  SELECT DISTINCT ON (a.label) a.signal_id, open_next_attempt.attempt, a.label, a.status, a.payload, a.headers,
         a.issuer, a.weak, a.received_at, counted()
  FROM acks a
  WHERE a.signal_id = open_next_attempt.signal_id AND a.issuer = open_next_attempt.builtin_issuer
    AND a.label = ANY (open_next_attempt.builtin_labels)
  ORDER BY a.label, a.id;
END $$;
