-- Statements of ingestion (ackstore/ledger/ingest.py): a batch of signals in one transaction.
-- Values are bind parameters; a batch travels as COPY text (copy_signals), or as one JSON array
-- (:rows) on the careful path; a list of keys as one array literal.

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
-- The new signals of a batch, in its order, as COPY text into the staging table the ingest role
-- may fill (merge_staged_signals moves them into signals).
COPY stage_signals (ord, source, api, source_message_id, correlation_id, channel, kind, action, thing_id, topic,
                    path, headers, value, requested_acks, response_required, timeout_ms)
FROM STDIN


-- name: enqueue_copied
-- The signals copy_signals staged, stored with the work they make (the function
-- merge_staged_signals): their ids and message ids, as two arrays in one row (the driver reads
-- an array at once, a row at a time costs a batch more than the rest of its answers). A key taken
-- meanwhile fails it whole, unless :skip_taken (then that row is skipped).
SELECT array_agg(m.id) AS ids, array_agg(m.source_message_id) AS message_ids FROM merge_staged_signals(:skip_taken) m


-- name: insert_one
-- A single submission (the function insert_signal): the new signal's id, or NULL when its
-- message or correlation id is taken.
SELECT insert_signal(:source, :source_message_id, :correlation_id, :api, :channel, :kind, :action,
                     :thing_id, :topic, :path, CAST(:value AS jsonb), CAST(:headers AS jsonb),
                     CAST(:requested_acks AS text[]), :response_required, CAST(:timeout_ms AS bigint))


-- name: lock_retransmitted
-- The stored signals a batch retransmits, locked in id order (the function lock_retransmitted).
SELECT lock_retransmitted(:source, CAST(:message_ids AS text[]))


-- name: retransmitted
-- A submission whose (source, message id) is stored: its signal, locked against a concurrent
-- redelivery, with the current attempt, its labels, result and settlement decision.
SELECT r.* FROM retransmitted(:source, :source_message_id) r


-- name: open_attempt
-- The next attempt of a redelivered signal (the function open_next_attempt): the labels to
-- request again.
SELECT open_next_attempt(CAST(:signal_id AS bigint), CAST(:attempt AS integer), CAST(:requested_acks AS text[]))
