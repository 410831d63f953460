-- lock_retransmitted as migration 0016 defined it (superseded by migration 0020: only the connection's login locks its signals).
CREATE OR REPLACE FUNCTION lock_retransmitted(source text, message_ids text[]) RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  RETURN QUERY
  SELECT s.id FROM signals s
  WHERE s.id = ANY (ARRAY(SELECT f.id FROM unnest(lock_retransmitted.message_ids) m(id),
                               LATERAL (SELECT s.id FROM signals s WHERE s.source = lock_retransmitted.source
                                                                     AND s.source_message_id = m.id OFFSET 0) f))
  ORDER BY s.id
  FOR NO KEY UPDATE;
END $$;
