-- The reports (ackstore/ledger/reports.py): each reads its view or function
-- (sql/objects/reports/); a windowed one for the signals received in [:since, :until), of :source
-- or all.

-- name: settlement
-- Per source: requests pending a settlement decision, decided, carried out — by decision.
SELECT source, status, decision, requests, oldest FROM report_settlement_status
WHERE CAST(:source AS text) IS NULL OR source = :source
ORDER BY source, array_position(ARRAY['pending decision', 'decided', 'carried out'], status), decision

-- name: audit
-- The open work, oldest first, where each signal is stuck; of a window when one is given.
SELECT signal_id, correlation_id, source, source_message_id, attempt, stuck_at, detail, received_at, age
FROM report_audit
WHERE (CAST(:source AS text) IS NULL OR source = :source)
  AND (CAST(:since AS timestamptz) IS NULL OR received_at >= :since)
  AND (CAST(:until AS timestamptz) IS NULL OR received_at < :until)
LIMIT :limit

-- name: settings
-- For the transaction that reads a report: each signal's facts are looked up by a key no other
-- signal shares, so memoizing the look-ups only costs (0.8 s of 5 at a million signals), and JIT
-- compiles for longer than it saves (0.2 s).
SET LOCAL enable_memoize = off;
SET LOCAL jit = off

-- name: latency
-- Per source and bucket, p50/p95/p99 seconds from each checkpoint to the next.
SELECT source, bucket_start, measure, signals, measured, p50, p95, p99
FROM report_latency(:since, :until, CAST(:bucket AS interval), CAST(:source AS text))
LIMIT :limit

-- name: watermarks
-- Per source, the last signal up to which every signal is settled, and how many are not.
SELECT source, signals, settled, unsettled, watermark_signal_id, watermark_message_id, watermark_received_at
FROM report_watermarks(:since, :until, CAST(:source AS text))
LIMIT :limit

-- name: unsettled
-- The signals not settled (all after their source's watermark), in received order, with why.
SELECT source, signal_id, correlation_id, source_message_id, received_at, attempt, why
FROM report_unsettled(:since, :until, CAST(:source AS text))
LIMIT :limit

-- name: late_acks
-- Acks that came after their attempt was decided, with what it had counted.
SELECT signal_id, correlation_id, source, attempt, label, status, issuer, weak, received_at, late_by, answered,
       cause, api, requested_acks, response_required, timeout_ms, counted
FROM report_late_acks(:since, :until, CAST(:source AS text))
LIMIT :limit

-- name: labels
-- Per label and issuer: outcome counts and the p95 time to ack.
SELECT label, issuer, answered, ok, weak, client_errors, timeouts, server_errors, p95_seconds
FROM report_labels(:since, :until, CAST(:source AS text))
LIMIT :limit

-- name: dead_letters
-- The signals settled as dead-letter, in received order, with the answer their last attempt got.
SELECT signal_id, correlation_id, source, source_message_id, received_at, attempt, status, cause, ack_statuses,
       decided_at, carried_out_at
FROM report_dead_letters(:since, :until, CAST(:source AS text))
LIMIT :limit
