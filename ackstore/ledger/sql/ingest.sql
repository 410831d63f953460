-- Statements of ingestion (ackstore/ledger/ingest.py): a batch of signals in one transaction.
-- Values are bind parameters; a batch travels as COPY text (copy_signals), or as one JSON array
-- (:rows) on the careful path; a list of keys as one array literal.

-- name: lock_things
-- Per-thing ingestion order (decisions #19): every thing of the batch, locked in one order
-- (by hash) so that two batches never wait for each other in a cycle; and the transaction's
-- time, which the signals' deadlines count from.
SELECT count(pg_advisory_xact_lock(:lock_class, h.key)) AS locked, now() AS now
FROM (SELECT DISTINCT hashtext(t) AS key FROM unnest(CAST(:thing_ids AS text[])) t ORDER BY 1) h

-- name: already_stored
-- Which of the batch's message ids (of this source) and correlation ids are taken already. Each id
-- is one probe of its unique index, whatever the statistics say (OFFSET 0 keeps each lookup a
-- subquery of its own: flattened, a table never analysed is planned as a scan of it).
SELECT true AS same_message, s.source_message_id, s.correlation_id
FROM unnest(CAST(:message_ids AS text[])) m(id),
     LATERAL (SELECT s.source_message_id, s.correlation_id FROM signals s
              WHERE s.source = :source AND s.source_message_id = m.id OFFSET 0) s
UNION ALL
SELECT false, s.source_message_id, s.correlation_id
FROM unnest(CAST(:correlation_ids AS text[])) c(id),
     LATERAL (SELECT s.source_message_id, s.correlation_id FROM signals s WHERE s.correlation_id = c.id OFFSET 0) s

-- name: copy_signals
-- The new signals of a batch, in its order (ids follow it), as COPY text; the trigger on signals
-- opens their attempt 1. A key already taken fails it whole (the careful path answers then).
COPY signals (source, api, source_message_id, correlation_id, channel, kind, action, thing_id, topic, path,
              headers, value, requested_acks, response_required, timeout_ms, deadline_at)
FROM STDIN

-- name: enqueue_copied
-- The signals copy_signals stored, by message id (one index probe each, as already_stored's), and
-- the work they make (as insert_signals'); in the batch's order, which is their ids' order.
WITH copied AS (
    SELECT s.id, s.source_message_id, s.kind
    FROM unnest(CAST(:message_ids AS text[])) m(id),
         LATERAL (SELECT s.id, s.source_message_id, s.kind FROM signals s
                  WHERE s.source = :source AND s.source_message_id = m.id OFFSET 0) s
), to_apply AS (
    INSERT INTO queue_apply (signal_id) SELECT c.id FROM copied c WHERE c.kind = 'twin-command'
), to_decide AS (
    INSERT INTO queue_decide (signal_id, attempt) SELECT c.id, 1 FROM copied c
)
SELECT c.id, c.source_message_id FROM copied c

-- name: prepare_insert_one
-- A single submission, prepared once per session (its plan is then made once, not per call: a
-- third of the server's work for one signal). Its thing locked first (decisions #19: the id is
-- drawn under the lock), then the signal and its work stored as insert_signals stores a batch's.
-- Nothing is returned when its message or correlation id is taken: the retransmission path
-- answers. A key taken before the statement began draws no id (ids stay dense as a batch's).
-- Parameters: $1 lock class, $2 source, $3 source message id, $4 correlation id, $5 api,
-- $6 channel, $7 kind, $8 action, $9 thing id, $10 topic, $11 path, $12 value, $13 headers,
-- $14 requested acks, $15 response required, $16 timeout (ms).
PREPARE ackstore_insert_one (integer, text, text, text, text, text, text, text, text, text, text, jsonb, jsonb,
                             text[], boolean, bigint) AS
WITH locked AS (
    SELECT pg_advisory_xact_lock($1, hashtext($9))
), stored AS (
    INSERT INTO signals (source, source_message_id, correlation_id, api, channel, kind, action,
                         thing_id, topic, path, value, headers, requested_acks, response_required,
                         timeout_ms, deadline_at)
    SELECT $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
           now() + make_interval(secs => $16 / 1000.0)
    FROM locked
    WHERE NOT EXISTS (SELECT FROM signals s WHERE s.source = $2 AND s.source_message_id = $3)
      AND NOT EXISTS (SELECT FROM signals s WHERE s.correlation_id = $4)
    ON CONFLICT DO NOTHING
    RETURNING id, kind
), to_apply AS (
    INSERT INTO queue_apply (signal_id) SELECT s.id FROM stored s WHERE s.kind = 'twin-command'
), to_decide AS (
    INSERT INTO queue_decide (signal_id, attempt) SELECT s.id, 1 FROM stored s
)
SELECT s.id FROM stored s

-- name: insert_one
-- A single submission (prepare_insert_one): the new signal's id, or nothing.
EXECUTE ackstore_insert_one (:lock_class, :source, :source_message_id, :correlation_id, :api, :channel, :kind,
                             :action, :thing_id, :topic, :path, :value, :headers, :requested_acks,
                             :response_required, :timeout_ms)

-- name: insert_signals
-- The careful path's new signals in the batch's order (ids follow it) and the work they make:
-- apply_twin for twin commands, the sweep for every request. A row that lost a race for its
-- message or correlation id to a concurrent submission is skipped and not returned.
WITH input AS (
    SELECT * FROM json_to_recordset(CAST(:rows AS json)) AS r(
        ord integer, source_message_id text, correlation_id text, channel text, kind text,
        action text, thing_id text, topic text, path text, has_value boolean, value jsonb,
        headers jsonb, requested_acks text[], response_required boolean, timeout_ms bigint)
), stored AS (
    INSERT INTO signals (source, source_message_id, correlation_id, api, channel, kind, action,
                         thing_id, topic, path, value, headers, requested_acks, response_required,
                         timeout_ms, deadline_at)
    SELECT :source, i.source_message_id, i.correlation_id, :api, i.channel, i.kind, i.action,
           i.thing_id, i.topic, i.path,
           CASE WHEN i.has_value THEN COALESCE(i.value, 'null'::jsonb) END,
           i.headers, i.requested_acks, i.response_required, i.timeout_ms,
           now() + make_interval(secs => i.timeout_ms / 1000.0)
    FROM input i
    ORDER BY i.ord
    ON CONFLICT DO NOTHING
    RETURNING id, source_message_id, kind
), to_apply AS (
    INSERT INTO queue_apply (signal_id) SELECT s.id FROM stored s WHERE s.kind = 'twin-command'
), to_decide AS (
    INSERT INTO queue_decide (signal_id, attempt) SELECT s.id, 1 FROM stored s
)
SELECT s.id, s.source_message_id FROM stored s

-- name: lock_retransmitted
-- The stored signals a batch retransmits, locked in id order before any is looked at, so that
-- two batches never wait for each other in a cycle (one index probe per id, as already_stored's).
-- NO KEY UPDATE: it excludes a concurrent redelivery of the same signal, yet not the foreign-key
-- checks of the pipeline's writes.
SELECT s.id FROM signals s
WHERE s.id = ANY (ARRAY(SELECT f.id FROM unnest(CAST(:message_ids AS text[])) m(id),
                             LATERAL (SELECT s.id FROM signals s
                                      WHERE s.source = :source AND s.source_message_id = m.id OFFSET 0) f))
ORDER BY s.id
FOR NO KEY UPDATE

-- name: retransmitted
-- A submission whose (source, message id) is stored: its signal, locked against a concurrent
-- redelivery, with the current attempt, its labels, result and settlement decision.
SELECT s.id, s.correlation_id, s.timeout_ms, a.attempt, a.requested_acks, r.ack_statuses, st.decision
FROM signals s
JOIN current_attempts a ON a.signal_id = s.id
LEFT JOIN request_results r ON r.signal_id = s.id AND r.attempt = a.attempt
LEFT JOIN settlements st ON st.signal_id = s.id AND st.attempt = a.attempt
WHERE s.source = :source AND s.source_message_id = :source_message_id
FOR NO KEY UPDATE OF s

-- name: open_attempt
-- The next attempt of a redelivered signal: the labels to request again, a deadline from now.
INSERT INTO attempts (signal_id, attempt, requested_acks, opened_at, deadline_at)
VALUES (:signal_id, :attempt, CAST(:requested_acks AS text[]), now(),
        now() + make_interval(secs => CAST(:timeout_ms AS double precision) / 1000.0))

-- name: mark_requeued
-- The copy is back, so the previous attempt's redeliver decision was carried out (by a connector
-- that may have died before it could record so).
UPDATE settlements SET carried_out_at = clock_timestamp()
WHERE signal_id = :signal_id AND attempt = :attempt - 1 AND carried_out_at IS NULL

-- name: enqueue_attempt
-- The sweep decides the new attempt (the previous one left the queue when it was decided).
INSERT INTO queue_decide (signal_id, attempt) VALUES (:signal_id, :attempt)
ON CONFLICT (signal_id) DO UPDATE SET attempt = EXCLUDED.attempt

-- name: carry_builtin_facts
-- What was persisted stays persisted (A.2.10): a built-in label requested again whose fact is
-- already in the ledger (the twin change, the index write) counts for the new attempt with
-- the ack that reported it, at the fact's own time.
INSERT INTO acks (signal_id, attempt, label, status, payload, headers, issuer, weak, received_at, disposition)
SELECT DISTINCT ON (a.label) a.signal_id, :attempt, a.label, a.status, a.payload, a.headers,
       a.issuer, a.weak, a.received_at, counted()
FROM acks a
WHERE a.signal_id = :signal_id AND a.issuer = :builtin_issuer
  AND a.label = ANY (CAST(:labels AS text[]))
ORDER BY a.label, a.id
