-- record_latest_carried_out as migration 0016 defined it (superseded by migration 0020: only the connection's login records it).
CREATE OR REPLACE FUNCTION record_latest_carried_out(signal_ids bigint[]) RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  RETURN QUERY
  WITH latest AS (
      SELECT x.signal_id, max(x.attempt) AS attempt FROM settlements x
      WHERE x.signal_id = ANY (record_latest_carried_out.signal_ids) GROUP BY x.signal_id
  ), recorded AS (
      UPDATE settlements st SET carried_out_at = clock_timestamp()
      FROM latest d
      WHERE st.signal_id = d.signal_id AND st.attempt = d.attempt AND st.carried_out_at IS NULL
  )
  SELECT l.signal_id FROM latest l;
END $$;
