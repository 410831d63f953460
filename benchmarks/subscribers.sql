-- The subscribers benchmark's ledgers, written server-side. Bind parameters are named below.

-- name: live_signals
-- :count live messages requesting :label, each ready for subscriber :subscriber (as the fan-out
-- at ingestion leaves them) and waiting for a decision.
WITH fresh AS (
    INSERT INTO signals (source, source_message_id, correlation_id, api, channel, kind, action,
                         thing_id, topic, path, value, headers, requested_acks, response_required,
                         timeout_ms, deadline_at)
    SELECT 'api', 'live-' || i, 'live-' || i, 'http', 'live', 'live-message', 'ask',
           'bench:thing-' || (i % 100), 'bench/thing-' || (i % 100) || '/things/live/messages/ask',
           '/inbox/messages/ask', to_jsonb(i),
           jsonb_build_object('correlation-id', 'live-' || i, 'requested-acks', jsonb_build_array(:label),
                              'response-required', false, 'timeout', '1200000ms'),
           ARRAY[:label], false, 1200000, now() + interval '20 minutes'
    FROM generate_series(1, :count) AS i
    RETURNING id
), ready AS (
    INSERT INTO deliveries (subscriber_id, signal_id, token_key, handouts, available_at)
    SELECT :subscriber, f.id, md5(f.id::text), 0, '-infinity' FROM fresh f
)
INSERT INTO queue_decide (signal_id, attempt) SELECT f.id, 1 FROM fresh f

-- name: answered_history
-- The history ledger's every event handed to :subscriber and answered; its position at the end.
WITH handed AS (
    INSERT INTO deliveries (subscriber_id, signal_id, event_id, token_key, handouts, available_at, leased_at,
                            done_at, answered_handout, answered_labels)
    SELECT :subscriber, e.signal_id, e.id, md5(e.id::text), 1, e.created_at, e.created_at, e.created_at, 1,
           ARRAY[:label]
    FROM thing_events e
)
UPDATE subscribers SET event_position = (SELECT COALESCE(max(id), 0) FROM thing_events) WHERE id = :subscriber

-- name: new_events
-- :count new twin events (applied commands requesting :label) at the end of the log: their
-- responses, in one apply batch.
WITH fresh AS (
    INSERT INTO signals (source, source_message_id, correlation_id, api, channel, kind, action,
                         thing_id, topic, path, value, headers, requested_acks, response_required,
                         timeout_ms, deadline_at)
    SELECT 'api', :batch || '-' || i, :batch || '-' || i, 'http', 'twin', 'twin-command', 'modify',
           'fresh:' || :batch || '-' || i, 'fresh/' || :batch || '-' || i || '/things/twin/commands/modify',
           '/', jsonb_build_object('attributes', jsonb_build_object('n', i)),
           jsonb_build_object('correlation-id', :batch || '-' || i, 'requested-acks', jsonb_build_array(:label)),
           ARRAY[:label], true, 300000, now() + interval '5 minutes'
    FROM generate_series(1, :count) AS i
    RETURNING id
), batch AS (
    INSERT INTO ledger_batches (step, committed_at) VALUES ('apply_twin', now()) RETURNING id
), log_end AS (
    SELECT COALESCE(max(event_id), 0) AS position FROM command_responses
)
INSERT INTO command_responses (signal_id, status, payload, is_error, batch_id, event_id, revision, event_action)
SELECT f.id, 201, NULL, false, b.id, e.position + row_number() OVER (ORDER BY f.id), 1, 'created'
FROM fresh f CROSS JOIN batch b CROSS JOIN log_end e

-- name: raw_queue
-- The raw baseline's queue: :count rows, one per message.
CREATE TABLE bench_raw_queue (id bigint PRIMARY KEY, leased_until timestamptz NOT NULL DEFAULT '-infinity',
                              done boolean NOT NULL DEFAULT false);
CREATE TABLE bench_raw_acks (id bigint NOT NULL, label text NOT NULL, status int NOT NULL);
INSERT INTO bench_raw_queue (id) SELECT i FROM generate_series(1, :count) AS i

-- name: raw_pull
-- The baseline's pull: the next free rows, leased, competing consumers skip each other's.
UPDATE bench_raw_queue SET leased_until = now() + interval '5 minutes'
WHERE id IN (SELECT id FROM bench_raw_queue WHERE NOT done AND leased_until <= now()
             ORDER BY id LIMIT :size FOR UPDATE SKIP LOCKED)
RETURNING id

-- name: raw_ack
-- The baseline's ack: store it and close the row, one transaction.
WITH closed AS (UPDATE bench_raw_queue SET done = true WHERE id = :id RETURNING id)
INSERT INTO bench_raw_acks (id, label, status) SELECT id, 'bench:done', 200 FROM closed
