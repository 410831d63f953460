-- signal_paths as migration 0010 defined it (superseded: the current definition is in objects/).
-- Each signal of the window on its path: its current attempt's decision and settlement.
-- version: 0010
CREATE OR REPLACE FUNCTION signal_paths(since timestamptz, until timestamptz, only_source text)
RETURNS TABLE (signal_id bigint, source text, source_message_id text, correlation_id text,
               received_at timestamptz, attempt integer, decided_at timestamptz, settlement_decided_at timestamptz,
               carried_out_at timestamptz, settled text)
LANGUAGE sql STABLE AS $$
SELECT s.id, s.source, s.source_message_id, s.correlation_id, s.received_at, a.attempt, r.decided_at,
       st.decided_at, st.carried_out_at,
       settlement_state(needs_transport_settlement(s.api, s.source), r.decided_at IS NOT NULL, st.decision,
                        st.carried_out_at)
FROM signals_received(since, until, only_source) s
CROSS JOIN LATERAL current_attempt_of(s.id) a
LEFT JOIN LATERAL (SELECT x.decided_at FROM request_results x
                   WHERE x.signal_id = a.signal_id AND x.attempt = a.attempt LIMIT 1) r ON true
LEFT JOIN LATERAL (SELECT x.decision, x.decided_at, x.carried_out_at FROM settlements x
                   WHERE needs_transport_settlement(s.api, s.source)  -- else there is none: no look-up
                     AND x.signal_id = a.signal_id AND x.attempt = a.attempt LIMIT 1) st ON true
$$;
