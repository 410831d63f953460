-- record_carried_out as migration 0017 defined it (superseded by migration 0020: only the connection's login records it, and only what its transport could do instead).
CREATE OR REPLACE FUNCTION record_carried_out(signal_ids bigint[], attempts integer[], held boolean,
                                              carried_out_as text)
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  IF NOT record_carried_out.held THEN
    RETURN QUERY
    UPDATE settlements st SET carried_out_at = clock_timestamp(), carried_out_as = record_carried_out.carried_out_as
    FROM unnest(record_carried_out.signal_ids, record_carried_out.attempts) AS d(signal_id, attempt)
    WHERE st.signal_id = d.signal_id AND st.attempt = d.attempt AND st.carried_out_at IS NULL
    RETURNING st.signal_id;
    RETURN;
  END IF;
  UPDATE settlements st SET carried_out_at = clock_timestamp(), carried_out_as = record_carried_out.carried_out_as
  FROM unnest(record_carried_out.signal_ids, record_carried_out.attempts) AS d(signal_id, attempt)
  WHERE st.signal_id = d.signal_id AND st.attempt = d.attempt AND st.carried_out_at IS NULL;
  RETURN QUERY
  SELECT st.signal_id
  FROM unnest(record_carried_out.signal_ids, record_carried_out.attempts) AS d(signal_id, attempt)
  JOIN settlements st ON st.signal_id = d.signal_id AND st.attempt = d.attempt;
END $$;
