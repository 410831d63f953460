-- The windowed reports (ackstore/ledger/reports.py): each reads its function in the schema
-- (schema.REPORT_FUNCTIONS), for the signals received in [:since, :until), of :source or all.

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
