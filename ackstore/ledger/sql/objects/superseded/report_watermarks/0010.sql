-- report_watermarks as migration 0010 defined it (superseded: the current definition is in objects/).
-- Cumulative acknowledgement per source (as AMPS and Solace report it), within the window: the
-- last signal (in received order) up to which every signal of the source is settled, and how
-- many are not — all of them after it. report_unsettled lists those.
-- version: 0010
CREATE OR REPLACE FUNCTION report_watermarks(since timestamptz, until timestamptz, only_source text)
RETURNS TABLE (source text, signals bigint, settled bigint, unsettled bigint, watermark_signal_id bigint,
               watermark_message_id text, watermark_received_at timestamptz)
LANGUAGE sql STABLE AS $$
WITH paths AS MATERIALIZED (
    SELECT p.signal_id, p.source, p.settled = 'settled' AS settled FROM signal_paths(since, until, only_source) p
), per_source AS (
    SELECT p.source, count(*) AS signals, count(*) FILTER (WHERE p.settled) AS settled,
           min(p.signal_id) FILTER (WHERE NOT p.settled) AS first_unsettled
    FROM paths p
    GROUP BY p.source
), marks AS (  -- a second pass, whatever the number of sources
    SELECT f.source, max(p.signal_id) AS signal_id
    FROM per_source f
    JOIN paths p ON p.source = f.source AND (f.first_unsettled IS NULL OR p.signal_id < f.first_unsettled)
    GROUP BY f.source
)
SELECT f.source, f.signals, f.settled, f.signals - f.settled, m.signal_id, s.source_message_id, s.received_at
FROM per_source f
LEFT JOIN marks m ON m.source = f.source
LEFT JOIN signals s ON s.id = m.signal_id
ORDER BY f.source
$$;
