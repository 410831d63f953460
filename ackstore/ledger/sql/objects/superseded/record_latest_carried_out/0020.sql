-- record_latest_carried_out as migration 0020 defined it (superseded by migration 0025: it returns what it recorded, with the decision).
CREATE OR REPLACE FUNCTION record_latest_carried_out(signal_ids bigint[]) RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  PERFORM act_for_connection(x.source)
  FROM (SELECT DISTINCT s.source FROM signals s WHERE s.id = ANY (record_latest_carried_out.signal_ids)) x;
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
