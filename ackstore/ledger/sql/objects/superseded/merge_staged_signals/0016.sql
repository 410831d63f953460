-- merge_staged_signals as migration 0016 defined it (superseded by migration 0020: a connection's signals only from its login).
CREATE OR REPLACE FUNCTION merge_staged_signals(skip_taken boolean) RETURNS TABLE (id bigint, source_message_id text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
BEGIN
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
