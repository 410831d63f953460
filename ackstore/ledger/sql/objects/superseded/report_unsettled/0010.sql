-- report_unsettled as migration 0010 defined it (superseded: the current definition is in objects/).
-- The signals of the window not settled, by source in received order, with why.
-- version: 0010
CREATE OR REPLACE FUNCTION report_unsettled(since timestamptz, until timestamptz, only_source text)
RETURNS TABLE (source text, signal_id bigint, correlation_id text, source_message_id text, received_at timestamptz,
               attempt integer, why text)
LANGUAGE sql STABLE AS $$
SELECT p.source, p.signal_id, p.correlation_id, p.source_message_id, p.received_at, p.attempt, p.settled
FROM signal_paths(since, until, only_source) p
WHERE p.settled <> 'settled'
ORDER BY p.source, p.signal_id
$$;
