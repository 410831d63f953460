-- A connection's metrics and recent failures, as Ditto answers `GET /connections/{id}/metrics` and
-- `…/logs` (issue 38, decisions #109): counts for the last minute, hour and day from the ledger's
-- own facts, and a log of what its connector could not do, kept to its newest entries.

-- name: connection_time
-- A time a connection's connector gave, as the ledger keeps it: between the connection's claim and
-- now (decisions #126) — one in the future is now's, one before the claim (year 1, BC: no reader's
-- clock holds it, issue 50) the claim's, as nothing of a connection happened in the ledger before
-- it knew the connection. NULL stays NULL (no time given). The one spelling of that range: its log
-- (log_connection_event, and migration 0024 for the entries before it) and its connector's word
-- (connector_seen) keep their times through it.
-- version: 0024
CREATE OR REPLACE FUNCTION connection_time(claimed_at timestamptz, given timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE WHEN given IS NOT NULL THEN LEAST(GREATEST(given, claimed_at), now()) END
$$;

-- name: log_connection_event
-- A connector's failure, in its connection's log: a message dropped (the ledger refused it for
-- good, or it was answered 4xx), refused by the source's enforcement, an answer or a target's
-- message the protocol cannot carry, an outage (logged when it ended, at the time it began). Only
-- the connection's login writes its log (act_for_connection); the text is clipped, and a time is
-- kept between the connection's claim and now (connection_time; none given: now); the log keeps
-- the newest 1 000 entries of each connection, so it never grows with the history.
-- version: 0024
CREATE OR REPLACE FUNCTION log_connection_event(connection text, kind text, detail text, message_id text,
                                                happened_at timestamptz)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  PERFORM act_for_connection(log_connection_event.connection);
  INSERT INTO connection_log (connection, kind, detail, message_id, happened_at)
  SELECT log_connection_event.connection, log_connection_event.kind, left(log_connection_event.detail, 2000),
         left(log_connection_event.message_id, 1000),
         connection_time(c.claimed_at, COALESCE(log_connection_event.happened_at, now()))
  FROM connections c WHERE c.id = log_connection_event.connection;
  DELETE FROM connection_log l
  WHERE l.connection = log_connection_event.connection
    AND l.id <= (SELECT x.id FROM connection_log x WHERE x.connection = log_connection_event.connection
                 ORDER BY x.id DESC OFFSET 1000 LIMIT 1);
END $$;

-- name: connector_seen
-- A running connector says so (every 15 s: ackstore.rules.thresholds.CONNECTOR_HEARTBEAT_SECONDS),
-- and since when it cannot reach its broker (NULL: it can): what the Ledger page lists each
-- connection's connector by, and ackstore_connector_last_seen_timestamp_seconds. It runs, so it
-- has not stopped (connector_stopped). Only the connection's login says it (act_for_connection);
-- the outage's start is kept between the connection's claim and now (connection_time).
-- version: 0025
CREATE OR REPLACE FUNCTION connector_seen(connection text, broker_out_since timestamptz)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  PERFORM act_for_connection(connector_seen.connection);
  UPDATE connections c SET seen_at = now(), stopped_at = NULL,
    broker_out_since = connection_time(c.claimed_at, connector_seen.broker_out_since)
  WHERE c.id = connector_seen.connection;
END $$;

-- name: connector_stopped
-- A connector that stops cleanly (SIGTERM or SIGINT, its --once or --max-messages done) says so
-- (decisions #133): stopped on purpose is no connector down — the Ledger page lists it as stopped,
-- ackstore_connector_stopped_timestamp_seconds says when, and the down alert spares it until its
-- connector says it runs again (connector_seen). Only the connection's login says it.
-- version: 0025
CREATE OR REPLACE FUNCTION connector_stopped(connection text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  PERFORM act_for_connection(connector_stopped.connection);
  UPDATE connections c SET stopped_at = now(), broker_out_since = NULL WHERE c.id = connector_stopped.connection;
END $$;

-- name: connection_metrics
-- A connection's counts for the last minute, hour and day, named as docs/metrics.md's table of
-- figures names them on every surface (issue 50): messages stored (signals), dropped and enforced
-- (its log), received (all three: each message once, where the connector's `consumed` counts
-- every delivery, copies included), settlements carried out — as the transport carried them out
-- (carried_out_ack, _reject, _redeliver, _dead_letter: the exporter's carried_out_as) — and what
-- the log says could not be sent and the outages; read by the signals' and the settlements' time
-- indexes: a day's work at most, never the history.
-- version: 0025
CREATE OR REPLACE FUNCTION connection_metrics(connection text)
RETURNS TABLE (measure text, last_minute bigint, last_hour bigint, last_day bigint)
LANGUAGE sql STABLE AS $$
WITH spans AS (SELECT now() - interval '1 minute' AS minute, now() - interval '1 hour' AS hour,
                      now() - interval '1 day' AS day),
events AS (
    SELECT 'stored'::text AS measure, s.received_at AS happened_at FROM signals s, spans
    WHERE s.received_at > spans.day AND s.source = connection_metrics.connection
    UNION ALL
    SELECT 'carried_out_' || replace(COALESCE(st.carried_out_as, st.decision), '-', '_'), st.carried_out_at
    FROM settlements st CROSS JOIN spans
    CROSS JOIN LATERAL (SELECT x.source FROM signals x WHERE x.id = st.signal_id LIMIT 1) s
    WHERE st.carried_out_at > spans.day AND s.source = connection_metrics.connection
    UNION ALL
    SELECT l.kind, l.happened_at FROM connection_log l, spans
    WHERE l.connection = connection_metrics.connection AND l.happened_at > spans.day
)
SELECT m.measure,
       count(e.happened_at) FILTER (WHERE e.happened_at > spans.minute),
       count(e.happened_at) FILTER (WHERE e.happened_at > spans.hour),
       count(e.happened_at)
FROM spans
CROSS JOIN (VALUES (1, 'received'), (2, 'stored'), (3, 'dropped'), (4, 'enforced'), (5, 'carried_out_ack'),
                   (6, 'carried_out_reject'), (7, 'carried_out_redeliver'), (8, 'carried_out_dead_letter'),
                   (9, 'unsendable'), (10, 'outage')) AS m(n, measure)
LEFT JOIN events e ON e.measure = m.measure
                      OR (m.measure = 'received' AND e.measure IN ('stored', 'dropped', 'enforced'))
GROUP BY m.n, m.measure
ORDER BY m.n
$$;
