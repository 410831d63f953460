-- What a requester is told: an aggregated answer's entries, and each decided attempt's answer (A.2.4).

-- name: ack_entry_headers
-- The headers of such an entry: the ack's own without requested-acks (and without the default
-- content-type), its request's correlation id, and ditto-weak-ack for a weak ack.
-- version: 0008
CREATE OR REPLACE FUNCTION ack_entry_headers(headers jsonb, weak boolean, correlation_id text)
RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE WHEN headers = '{}' AND weak THEN jsonb_build_object('correlation-id', correlation_id, 'ditto-weak-ack', true)
            WHEN headers = '{}' THEN jsonb_build_object('correlation-id', correlation_id)
            ELSE CASE WHEN headers ->> 'content-type' = 'application/vnd.eclipse.ditto+json'
                      THEN headers - 'requested-acks' - 'content-type' ELSE headers - 'requested-acks' END
                 || jsonb_build_object('correlation-id', correlation_id)
                 || CASE WHEN weak THEN jsonb_build_object('ditto-weak-ack', true) ELSE '{}'::jsonb END END
$$;

-- name: ack_entry
-- An ack as an aggregated answer's entry shows it (B.4.2, B.4.3): wire.ack_entry and
-- wire.external_headers in SQL, for the sweep's decisions. One jsonb_build_object per level and
-- no || when the ack carries no headers of its own (every built-in ack but a created thing's
-- twin-persisted): each || decodes and re-encodes both sides, and the sweep writes this twice per
-- request. STABLE, as jsonb_build_object is: an IMMUTABLE function over it would not be inlined
-- (5× slower).
-- version: 0008
CREATE OR REPLACE FUNCTION ack_entry(status integer, payload jsonb, headers jsonb, weak boolean, correlation_id text)
RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE WHEN payload IS NULL
            THEN jsonb_build_object('status', status, 'headers', ack_entry_headers(headers, weak, correlation_id))
            ELSE jsonb_build_object('status', status, 'payload', payload,
                                    'headers', ack_entry_headers(headers, weak, correlation_id)) END
$$;

-- name: request_answers
-- What the requester of each decided attempt is told (A.2.4): the stored answer, its headers
-- derived when they are an aggregated answer's (request_results.headers NULL) — the command's
-- own without requested-acks, with its correlation id and response-required false, as
-- aggregation.Request.aggregated_headers gives them (tests/ledger/test_aggregation_python_and_sql.py). Every
-- reader of an answer reads it here.
-- version: 0008
CREATE OR REPLACE VIEW request_answers AS
SELECT r.signal_id, r.attempt, r.status, r.body,
       COALESCE(r.headers, (s.headers - 'requested-acks')
                           || jsonb_build_object('correlation-id', s.correlation_id, 'response-required', false))
           AS headers,
       r.cause, r.ack_statuses, r.decided_at, r.batch_id
FROM request_results r
LEFT JOIN signals s ON s.id = r.signal_id AND r.headers IS NULL;
