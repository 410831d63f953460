-- The window every windowed report reads, and each signal's path through it. A windowed report
-- reads the signals received in [since, until) by received_at's BRIN index and reaches each one's
-- facts by its keys, so its cost follows the window, never the history (tests/ledger/test_bounded.py):
-- by LATERAL sub-selects (a LIMIT or OFFSET keeps PostgreSQL from turning one into a join, which
-- it plans over a window of thousands as a hash join over a whole table). Functions, not views: a
-- view cannot take the window. LANGUAGE sql and STABLE, so PostgreSQL inlines each into the
-- statement calling it and plans it with the window's values.

-- name: signals_received
-- The window every windowed report reads: signals received in [since, until), of one source or all.
-- MATERIALIZED: found by the received_at index on its own — left to the whole statement, a
-- report's ORDER BY and LIMIT make an index in that order look cheaper, read from the start.
-- version: 0010
CREATE OR REPLACE FUNCTION signals_received(since timestamptz, until timestamptz, only_source text)
RETURNS TABLE (id bigint, source text, source_message_id text, correlation_id text, api text,
               received_at timestamptz, response_required boolean, timeout_ms bigint)
LANGUAGE sql STABLE AS $$
WITH window_signals AS MATERIALIZED (
    SELECT s.id, s.source, s.source_message_id, s.correlation_id, s.api, s.received_at, s.response_required,
           s.timeout_ms
    FROM signals s
    WHERE s.received_at >= since AND s.received_at < until AND (only_source IS NULL OR s.source = only_source)
)
SELECT w.id, w.source, w.source_message_id, w.correlation_id, w.api, w.received_at, w.response_required,
       w.timeout_ms
FROM window_signals w
$$;

-- name: signal_paths
-- Each signal of the window on its path: its current attempt's decision and settlement, and
-- whether it is settled (signal_state's answer: a settled signal is decided, so whether its
-- command failed does not matter here). Where an unsettled one stands is report_unsettled's:
-- looking up every signal's command response here cost latency and watermarks 7-9% over a
-- window of 200 000 signals, though none of them read it.
-- version: 0011
CREATE OR REPLACE FUNCTION signal_paths(since timestamptz, until timestamptz, only_source text)
RETURNS TABLE (signal_id bigint, source text, source_message_id text, correlation_id text,
               received_at timestamptz, attempt integer, decided_at timestamptz, settlement_decided_at timestamptz,
               carried_out_at timestamptz, needs_transport boolean, decision text, settled boolean)
LANGUAGE sql STABLE AS $$
SELECT s.id, s.source, s.source_message_id, s.correlation_id, s.received_at, a.attempt, r.decided_at,
       st.decided_at, st.carried_out_at, needs_transport_settlement(s.api, s.source), st.decision,
       signal_state(needs_transport_settlement(s.api, s.source), NULL, r.decided_at IS NOT NULL, st.decision,
                    st.carried_out_at IS NOT NULL) = 'settled'
FROM signals_received(since, until, only_source) s
CROSS JOIN LATERAL current_attempt_of(s.id) a
LEFT JOIN LATERAL (SELECT x.decided_at FROM request_results x
                   WHERE x.signal_id = a.signal_id AND x.attempt = a.attempt LIMIT 1) r ON true
LEFT JOIN LATERAL (SELECT x.decision, x.decided_at, x.carried_out_at FROM settlements x
                   WHERE needs_transport_settlement(s.api, s.source)  -- else there is none: no look-up
                     AND x.signal_id = a.signal_id AND x.attempt = a.attempt LIMIT 1) st ON true
$$;
