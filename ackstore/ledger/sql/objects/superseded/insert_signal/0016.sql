-- insert_signal as migration 0016 defined it (superseded by migration 0020: the ingestion lock is a row lock (lock_things), and a connection's signal only from its login).
CREATE OR REPLACE FUNCTION insert_signal(lock_class integer, source text, source_message_id text,
                                         correlation_id text, api text, channel text, kind text, action text,
                                         thing_id text, topic text, path text, value jsonb, headers jsonb,
                                         requested_acks text[], response_required boolean, timeout_ms bigint)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  stored_id bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(insert_signal.lock_class, hashtext(insert_signal.thing_id));
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
