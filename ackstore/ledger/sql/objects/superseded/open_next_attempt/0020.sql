-- open_next_attempt as migration 0020 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE FUNCTION open_next_attempt(signal_id bigint, attempt integer, requested_acks text[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_column
DECLARE
  previous attempts%ROWTYPE;
BEGIN
  PERFORM act_for_connection(s.source) FROM signals s WHERE s.id = open_next_attempt.signal_id;
  SELECT a.* INTO previous FROM attempts a
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
