-- log_connection_event as migration 0022 defined it (superseded by migration 0024: a time before the connection was claimed is the claim's).
CREATE OR REPLACE FUNCTION log_connection_event(connection text, kind text, detail text, message_id text,
                                                happened_at timestamptz)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  PERFORM act_for_connection(log_connection_event.connection);
  INSERT INTO connection_log (connection, kind, detail, message_id, happened_at)
  VALUES (log_connection_event.connection, log_connection_event.kind, left(log_connection_event.detail, 2000),
          left(log_connection_event.message_id, 1000),
          LEAST(COALESCE(log_connection_event.happened_at, now()), now()));
  DELETE FROM connection_log l
  WHERE l.connection = log_connection_event.connection
    AND l.id <= (SELECT x.id FROM connection_log x WHERE x.connection = log_connection_event.connection
                 ORDER BY x.id DESC OFFSET 1000 LIMIT 1);
END $$;
