-- The history benchmark's ledger: N requests already decided (and, for the half from a
-- connection, settled), written server-side. Bind parameters: :history, :things, :source.
-- Every queue is empty afterwards: this is history, not pending work.

-- name: seed_signals
-- N twin modify commands over T things, each requesting twin-persisted; odd ones came through
-- a broker connection.
INSERT INTO signals (source, source_message_id, correlation_id, api, channel, kind, action,
                     thing_id, topic, path, value, headers, requested_acks, response_required,
                     timeout_ms, received_at, deadline_at)
SELECT CASE WHEN i % 2 = 1 THEN :source ELSE 'api' END, 'h' || i, 'history-' || i,
       CASE WHEN i % 2 = 1 THEN 'connectivity' ELSE 'http' END, 'twin', 'twin-command', 'modify',
       'history:thing-' || (i % :things), 'history/thing-' || (i % :things) || '/things/twin/commands/modify',
       '/attributes/counter', to_jsonb(i),
       jsonb_build_object('correlation-id', 'history-' || i, 'requested-acks', jsonb_build_array('twin-persisted'),
                          'response-required', true, 'timeout', '300000ms'),
       ARRAY['twin-persisted'], true, 300000,
       now() - interval '30 days' + i * interval '1 millisecond',
       now() - interval '30 days' + i * interval '1 millisecond' + interval '5 minutes'
FROM generate_series(0, :history - 1) AS i

-- name: seed_things
INSERT INTO things (thing_id, revision, document, deleted)
SELECT 'history:thing-' || t, :history / :things,
       jsonb_build_object('thingId', 'history:thing-' || t, 'attributes', jsonb_build_object('counter', t)), false
FROM generate_series(0, :things - 1) AS t

-- name: seed_batches
-- One apply batch per 1 000 commands, committed a second after the last of them arrived; one
-- sweep batch per 10 000 results a minute later (ids after every apply batch's).
INSERT INTO ledger_batches (id, step, committed_at)
SELECT b, 'apply_twin', now() - interval '30 days' + ((b * 1000 + 999) * interval '1 millisecond') + interval '1 second'
FROM generate_series(0, (:history - 1) / 1000) AS b
UNION ALL
SELECT (:history - 1) / 1000 + 1 + b, 'sweep',
       now() - interval '30 days' + ((b * 10000 + 9999) * interval '1 millisecond') + interval '1 minute'
FROM generate_series(0, (:history - 1) / 10000) AS b;
SELECT setval(pg_get_serial_sequence('ledger_batches', 'id'), (SELECT max(id) FROM ledger_batches))

-- name: seed_responses
-- Every command persisted (twin-persisted is derived from these), its event in ingestion order.
INSERT INTO command_responses (signal_id, status, payload, is_error, batch_id, event_id, revision, event_action)
SELECT s.id, 204, NULL, false, (s.id - 1) / 1000, s.id,
       row_number() OVER (PARTITION BY s.thing_id ORDER BY s.id), 'modified'
FROM signals s

-- name: seed_acks
-- Acks that stay rows: a custom ack for every fifth command, a refused live response for every
-- thousandth (built-in acks are derived from the responses and the index marks).
INSERT INTO acks (signal_id, attempt, label, status, payload, headers, issuer, received_at, disposition, reason)
SELECT s.id, 1, 'history:audit', 200, NULL::jsonb, jsonb_build_object('correlation-id', s.correlation_id), 'auditor',
       s.received_at + interval '2 seconds', 'counted', NULL::text
FROM signals s WHERE s.id % 5 = 0
UNION ALL
SELECT s.id, 1, 'live-response', 200, NULL, '{}'::jsonb, 'responder', s.received_at + interval '3 seconds',
       'invalid', 'it names another thing'
FROM signals s WHERE s.id % 1000 = 0

-- name: seed_results
INSERT INTO request_results (signal_id, attempt, status, body, headers, cause, ack_statuses, decided_at, batch_id)
SELECT s.id, 1, 204, NULL, jsonb_build_object('correlation-id', s.correlation_id), 'response', '{}'::jsonb,
       s.received_at + interval '1 minute', (:history - 1) / 1000 + 1 + (s.id - 1) / 10000
FROM signals s

-- name: seed_settlements
INSERT INTO settlements (signal_id, attempt, decision, decided_at, carried_out_at)
SELECT s.id, 1, 'ack', s.received_at + interval '1 minute', s.received_at + interval '61 seconds'
FROM signals s WHERE s.api = 'connectivity'

-- name: seed_index
-- Every thing indexed at its revision, by one index batch (its marks cover every command).
INSERT INTO search_things (thing_id, namespace, revision, digest, present)
SELECT t.thing_id, 'history', t.revision, md5(t.document::text), true FROM things t;
INSERT INTO ledger_batches (step, committed_at) VALUES ('index_search', now() - interval '1 day');
INSERT INTO search_marks (thing_id, from_revision, to_revision, batch_id, changed)
SELECT t.thing_id, 0, t.revision, currval(pg_get_serial_sequence('ledger_batches', 'id')), true FROM things t

-- name: seed_watermark
-- Every result and settlement of the history passed the validation gate.
UPDATE pipeline_watermarks SET position = (SELECT COALESCE(max(id), 0) FROM settlements)
WHERE name = 'validated_settlements';
UPDATE pipeline_watermarks SET position = (SELECT max(id) FROM ledger_batches WHERE step = 'sweep')
WHERE name = 'validated_results';
-- A pass of the gate a minute for a year before the last one, which passed every sweep batch.
INSERT INTO validation_passes (results_upto, run_id, passed_at)
SELECT -g, 'history', now() - interval '1 day' - g * interval '1 minute' FROM generate_series(1, 525600) AS g;
INSERT INTO validation_passes (results_upto, run_id, passed_at)
SELECT max(id), 'history', now() - interval '1 day' FROM ledger_batches WHERE step = 'sweep'

-- name: new_commands
-- K new commands on new things, like the ones a minute brings: each creates its thing and
-- requests twin-persisted and search-persisted; odd ones come through the connection.
-- (Submitted in bulk, as issue 9's submit_many will; the store's one-by-one path is not measured here.)
WITH fresh AS (
    INSERT INTO signals (source, source_message_id, correlation_id, api, channel, kind, action,
                         thing_id, topic, path, value, headers, requested_acks, response_required,
                         timeout_ms, deadline_at)
    SELECT CASE WHEN i % 2 = 1 THEN :source ELSE 'api' END, :batch || '-' || i, :batch || '-' || i,
           CASE WHEN i % 2 = 1 THEN 'connectivity' ELSE 'http' END, 'twin', 'twin-command', 'modify',
           'fresh:' || :batch || '-' || i, 'fresh/' || :batch || '-' || i || '/things/twin/commands/modify', '/',
           jsonb_build_object('attributes', jsonb_build_object('n', i)),
           jsonb_build_object('correlation-id', :batch || '-' || i,
                              'requested-acks', jsonb_build_array('twin-persisted', 'search-persisted'),
                              'response-required', true, 'timeout', '300000ms'),
           ARRAY['twin-persisted', 'search-persisted'], true, 300000, now() + interval '5 minutes'
    FROM generate_series(0, :count - 1) AS i
    RETURNING id
), to_apply AS (
    INSERT INTO queue_apply (signal_id) SELECT f.id FROM fresh f
)
INSERT INTO queue_decide (signal_id, attempt) SELECT f.id, 1 FROM fresh f

-- name: history_scan_baseline
-- What finding pending work cost before the queues: an anti-join over every signal.
SELECT count(*) FROM signals s WHERE NOT EXISTS (SELECT 1 FROM request_results r WHERE r.signal_id = s.id)

-- name: distinct_sources
-- K signals, each from a connection of its own, claimed in order (as each first message claims
-- its connection), decided 200 and acked on the broker: what one ingest login naming a new source
-- per signal leaves behind (issue 50: 1 000 such signals once made 24 050 series).
WITH claimed AS (
    INSERT INTO connections (id, owner_login, claimed_at)
    SELECT :prefix || i, session_user, now() + i * interval '1 millisecond' FROM generate_series(0, :count - 1) AS i
    RETURNING id
), fresh AS (
    INSERT INTO signals (source, source_message_id, correlation_id, api, channel, kind, action,
                         thing_id, topic, path, value, headers, requested_acks, response_required,
                         timeout_ms, deadline_at)
    SELECT c.id, 'm', 'sources-' || c.id, 'connectivity', 'twin', 'twin-command', 'modify', 'sources:' || c.id,
           'sources/' || c.id || '/things/twin/commands/modify', '/', '{}', '{}', ARRAY['twin-persisted'], true,
           300000, now() + interval '5 minutes'
    FROM claimed c
    RETURNING id
), decided AS (
    INSERT INTO request_results (signal_id, attempt, status, headers, cause, ack_statuses, decided_at, batch_id)
    SELECT f.id, 1, 200, '{}', 'acks', '{"twin-persisted": 204}', now(), 1 FROM fresh f
    RETURNING signal_id
)
INSERT INTO settlements (signal_id, attempt, decision, decided_at, carried_out_at)
SELECT d.signal_id, 1, 'ack', now(), now() FROM decided d

-- name: awaited_requests
-- K requests decided by their deadline (408) before their command was applied — the apply step
-- behind, or a burst — so each awaits its twin-persisted and search-persisted facts: late when
-- they come (issue 50's metrics count them). Not queued for the apply step: the gauges count the
-- open work (queue_apply, results awaiting the gate), which follows the backlog as it should, so
-- they are not queued and their decisions passed the gate: this measures the counters.
WITH fresh AS (
    INSERT INTO signals (source, source_message_id, correlation_id, api, channel, kind, action,
                         thing_id, topic, path, value, headers, requested_acks, response_required,
                         timeout_ms, received_at, deadline_at)
    SELECT 'api', :batch || '-' || i, :batch || '-' || i, 'http', 'twin', 'twin-command', 'modify',
           'awaited:' || :batch || '-' || (i % 1000), 'awaited/' || :batch || '-' || (i % 1000) || '/things/twin/commands/modify',
           '/attributes/n', to_jsonb(i),
           jsonb_build_object('correlation-id', :batch || '-' || i,
                              'requested-acks', jsonb_build_array('twin-persisted', 'search-persisted'),
                              'response-required', true, 'timeout', '10000ms'),
           ARRAY['twin-persisted', 'search-persisted'], true, 10000, now() - interval '1 minute',
           now() - interval '50 seconds'
    FROM generate_series(0, :count - 1) AS i
    RETURNING id, deadline_at
), batch AS (
    INSERT INTO ledger_batches (step, committed_at) VALUES ('sweep', now()) RETURNING id
)
INSERT INTO request_results (signal_id, attempt, status, headers, cause, ack_statuses, decided_at, batch_id)
SELECT f.id, 1, 408, '{}', 'deadline', '{"twin-persisted": 408, "search-persisted": 408}', f.deadline_at,
       (SELECT b.id FROM batch b)
FROM fresh f;
UPDATE pipeline_watermarks SET position = (SELECT max(id) FROM ledger_batches WHERE step = 'sweep')
WHERE name = 'validated_results'
