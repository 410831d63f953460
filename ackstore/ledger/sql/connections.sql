-- A connection's metrics and log (ackstore/ledger/connection_log.py, sql/objects/connection_log.sql).

-- name: record
-- One failure of a connector, in its connection's log (the write function checks the login).
SELECT log_connection_event(:connection, :kind, :detail, :message_id, :happened_at)

-- name: seen
-- Its connector runs, and since when it cannot reach its broker (NULL: it can); the write function
-- checks the login.
SELECT connector_seen(:connection, :broker_out_since)

-- name: stopped
-- Its connector stopped cleanly; the write function checks the login.
SELECT connector_stopped(:connection)

-- name: known
-- Whether the ledger knows the connection: claimed, or with signals stored under its id.
SELECT EXISTS (SELECT FROM connections c WHERE c.id = :connection)
       OR EXISTS (SELECT FROM signals s WHERE s.source = :connection LIMIT 1) AS known

-- name: metrics
-- Its counts for the last minute, hour and day, measure by measure.
SELECT measure, last_minute, last_hour, last_day FROM connection_metrics(:connection)

-- name: logs
-- Its newest log entries first.
SELECT happened_at, kind, message_id, detail FROM connection_log
WHERE connection = :connection ORDER BY id DESC LIMIT :limit
