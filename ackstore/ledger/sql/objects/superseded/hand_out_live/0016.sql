-- hand_out_live as migration 0016 defined it (superseded by migration 0020: the token key drawn here, the subscriber's namespaces, only the signals of this transaction).
CREATE OR REPLACE FUNCTION hand_out_live(rows json) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  INSERT INTO deliveries (subscriber_id, signal_id, token_key, handouts, available_at)
  SELECT r.subscriber_id, r.signal_id, r.token_key, 0, '-infinity'  -- ready at once, whatever the clock
  FROM json_to_recordset(hand_out_live.rows) AS r(subscriber_id text, signal_id bigint, token_key text);
  IF EXISTS (SELECT FROM json_to_recordset(hand_out_live.rows) AS r(subscriber_id text, signal_id bigint)
             LEFT JOIN signals s ON s.id = r.signal_id
             LEFT JOIN subscribers u ON u.id = r.subscriber_id
             WHERE s.channel IS DISTINCT FROM 'live' OR NOT COALESCE('live' = ANY (u.channels), false)) THEN
    RAISE EXCEPTION 'hand_out_live: only a live signal is handed out, and only to a live subscriber'
      USING ERRCODE = 'check_violation';
  END IF;
END $$;
