-- retransmitted as migration 0016 defined it (superseded by migration 0020: only the connection's login locks its signals).
CREATE OR REPLACE FUNCTION retransmitted(source text, source_message_id text)
RETURNS TABLE (id bigint, correlation_id text, timeout_ms bigint, attempt integer, requested_acks text[],
               ack_statuses jsonb, decision text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  SELECT s.id, s.correlation_id, s.timeout_ms, a.attempt, a.requested_acks, r.ack_statuses, st.decision
  FROM signals s
  JOIN current_attempts a ON a.signal_id = s.id
  LEFT JOIN request_results r ON r.signal_id = s.id AND r.attempt = a.attempt
  LEFT JOIN settlements st ON st.signal_id = s.id AND st.attempt = a.attempt
  WHERE s.source = retransmitted.source AND s.source_message_id = retransmitted.source_message_id
  FOR NO KEY UPDATE OF s;
END $$;
