-- The benchmark's workload and its raw-SQL baseline. Bind parameters: :commands, :things.

-- name: generate_commands
-- N twin modify commands over T things, each requesting twin-persisted and search-persisted.
-- The first command of each thing modifies "/" (creating it, 201); the others modify one
-- attribute (204).
INSERT INTO signals (source, source_message_id, correlation_id, api, channel, kind, action,
                     thing_id, topic, path, value, headers, requested_acks, response_required,
                     timeout_ms, deadline_at)
SELECT 'bench', i::text, 'bench-' || i, 'http', 'twin', 'twin-command', 'modify',
       'bench:thing-' || (i % :things),
       'bench/thing-' || (i % :things) || '/things/twin/commands/modify',
       CASE WHEN i < :things THEN '/' ELSE '/attributes/counter' END,
       CASE WHEN i < :things THEN jsonb_build_object('attributes', jsonb_build_object('counter', i, 'on', true))
            ELSE to_jsonb(i) END,
       jsonb_build_object('correlation-id', 'bench-' || i,
                          'requested-acks', jsonb_build_array('twin-persisted', 'search-persisted'),
                          'response-required', true, 'timeout', '1200000ms'),
       ARRAY['twin-persisted', 'search-persisted'], true, 1200000, now() + interval '20 minutes'
FROM generate_series(0, :commands - 1) AS i;

-- name: generate_queues
-- What submit does besides storing: every command waits to be applied and decided.
INSERT INTO queue_apply (signal_id) SELECT s.id FROM signals s;
INSERT INTO queue_decide (signal_id, attempt) SELECT s.id, 1 FROM signals s

-- name: baseline
-- What the pipeline writes for this workload, written by PostgreSQL alone: one transaction,
-- server-side INSERT … SELECT, no Spark and no client round trips. The same facts the ledger
-- keeps: things, responses with their events, the index with one mark per thing, one batch per
-- step, the results.
INSERT INTO ledger_batches (id, step, committed_at)
VALUES (1, 'apply_twin', now()), (2, 'index_search', now()), (3, 'sweep', now());

WITH final AS (
    SELECT s.thing_id, count(*) AS revision, max(s.id) AS last_id
    FROM signals s GROUP BY s.thing_id
)
INSERT INTO things (thing_id, revision, document, deleted)
SELECT f.thing_id, f.revision,
       jsonb_build_object('thingId', f.thing_id, 'attributes',
                          jsonb_build_object('counter', (SELECT CASE WHEN l.path = '/' THEN l.value->'attributes'->'counter' ELSE l.value END FROM signals l WHERE l.id = f.last_id), 'on', true)),
       false
FROM final f;

INSERT INTO command_responses (signal_id, status, payload, is_error, batch_id, event_id, revision, event_action)
SELECT s.id, CASE WHEN s.path = '/' THEN 201 ELSE 204 END,
       CASE WHEN s.path = '/' THEN s.value || jsonb_build_object('thingId', s.thing_id) END, false, 1, s.id,
       row_number() OVER (PARTITION BY s.thing_id ORDER BY s.id),
       CASE WHEN s.path = '/' THEN 'created' ELSE 'modified' END
FROM signals s;

INSERT INTO search_things (thing_id, namespace, revision, digest, present)
SELECT t.thing_id, 'bench', t.revision, md5(t.document::text), true FROM things t;

INSERT INTO search_marks (thing_id, from_revision, to_revision, batch_id, changed)
SELECT t.thing_id, 0, t.revision, 2, true FROM things t;

INSERT INTO search_index (thing_id, path, ordinal, value_type, value_text, value_number, value_bool, empty, revision)
SELECT t.thing_id, p.path, 0, p.value_type, p.value_text, p.value_number, p.value_bool, false, t.revision
FROM things t
CROSS JOIN LATERAL (VALUES
    ('thingId', 'string', t.thing_id, NULL::numeric, NULL::boolean),
    ('attributes', 'object', NULL, NULL, NULL),
    ('attributes/counter', 'number', NULL, (t.document->'attributes'->>'counter')::numeric, NULL),
    ('attributes/on', 'boolean', NULL, NULL, true)
) AS p(path, value_type, value_text, value_number, value_bool);

DELETE FROM queue_apply;
DELETE FROM queue_decide;

INSERT INTO request_results (signal_id, status, body, headers, cause, ack_statuses, batch_id)
SELECT s.id, 200, derived_builtin_body(), NULL, 'acks',  -- entries and headers derived where read (decisions #141)
       jsonb_build_object('twin-persisted', r.status, 'search-persisted', 204), 3
FROM signals s JOIN command_responses r ON r.signal_id = s.id;
