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
-- wire.external_headers in SQL, for the sweep's decisions and the entries request_answers derives.
-- One jsonb_build_object per level and no || when the ack carries no headers of its own (every
-- built-in ack but a created thing's twin-persisted): each || decodes and re-encodes both sides,
-- and an answer over both built-in labels is read with two of these. STABLE, as jsonb_build_object
-- is: an IMMUTABLE function over it would not be inlined (5× slower).
-- version: 0008
CREATE OR REPLACE FUNCTION ack_entry(status integer, payload jsonb, headers jsonb, weak boolean, correlation_id text)
RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE WHEN payload IS NULL
            THEN jsonb_build_object('status', status, 'headers', ack_entry_headers(headers, weak, correlation_id))
            ELSE jsonb_build_object('status', status, 'payload', payload,
                                    'headers', ack_entry_headers(headers, weak, correlation_id)) END
$$;

-- name: derived_builtin_body
-- The body a request result stores for an aggregated answer over both built-in labels, every
-- label counted in time and 2xx (the sweep's decide_builtin, decisions #141): an entry per label,
-- each JSON null — "derived from its fact where read" (request_answers). Its entries follow from
-- the command's response and its search mark, both sealed facts, and are not stored a second time.
-- Whether a row holds it is holds_derived_entries, never this value alone: a payload may equal it.
-- version: 0029
CREATE OR REPLACE FUNCTION derived_builtin_body() RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT jsonb_build_object(twin_persisted(), NULL::jsonb, search_persisted(), NULL::jsonb)
$$;

-- name: created_location
-- A created thing's location header over HTTP, as wire.location writes it — or NULL when the
-- thing's id or the path needs percent-escaping, which only Python writes (the sweep sends such a
-- request to Python, whose answer is stored). request_answers derives it for a derived
-- twin-persisted entry; decide_builtin and the validation gate ask whether it is NULL. STABLE, as
-- jsonb_build_object is, so that it is inlined (declared IMMUTABLE it was not: 3.4 µs against 0.9).
-- version: 0029
CREATE OR REPLACE FUNCTION created_location(thing_id text, path text) RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT CASE WHEN thing_id ~ '^[A-Za-z0-9_.~:@!$&()*+,;=-]*$' AND path ~ '^[A-Za-z0-9_.~/:@!$&''()*+,;=-]*$'
            THEN jsonb_build_object('location', '/api/2/things/' || thing_id
                                                || CASE WHEN path IN ('', '/') THEN '' ELSE path END) END
$$;

-- name: holds_derived_entries
-- Whether a request result's body is derived_builtin_body() standing for its entries: an
-- aggregated answer ('acks') with a status for both built-in labels. Such an answer's stored body
-- is an object of entries, each an object (B.4.3), or none (no response required), so no body a
-- sender chose — a response's or an ack's payload, the body of a one-label answer — can pass for
-- it. The one test of the form: request_answers, the validation gate and migration 0029's
-- downgrade read it here.
-- version: 0029
CREATE OR REPLACE FUNCTION holds_derived_entries(body jsonb, cause text, ack_statuses jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT COALESCE(cause = 'acks' AND ack_statuses ?& ARRAY[twin_persisted(), search_persisted()]
                AND body = derived_builtin_body(), false)
$$;

-- name: holds_derived_response
-- Whether a request result stands for the plain response (cause 'response': the built-in-only
-- shortcut, B.5) without storing it: its headers are SQL NULL. A plain response restates the
-- command's response — its payload as the body, the request's correlation id as its headers
-- (aggregation.decide) — a sealed fact of its own, so the sweep's decide_builtin stores neither
-- and request_answers derives both where read (decisions #143). No row stored before 0031 has
-- the form: every plain response stored its headers (an object), and only the sweep's SQL stored
-- NULL headers, for an aggregated answer (cause 'acks'). The one test of the form: request_answers,
-- the validation gate and migration 0031's downgrade read it here.
-- version: 0031
CREATE OR REPLACE FUNCTION holds_derived_response(cause text, headers jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT COALESCE(cause = 'response' AND headers IS NULL, false)
$$;

-- name: request_answers
-- What the requester of each decided attempt is told (A.2.4): the stored answer, with what the
-- ledger stores only once derived here. Its headers, when they are an aggregated answer's
-- (request_results.headers NULL): the command's own without requested-acks, with its correlation
-- id and response-required false, as aggregation.Request.aggregated_headers gives them. Its body,
-- when it holds_derived_entries: each built-in label's entry from its fact (command_facts), as
-- wire.ack_entry gives it — a created thing's twin-persisted with its location over HTTP
-- (created_location; one needing percent-escaping is decided in Python and stored). A plain
-- response that holds_derived_response: the command's response's payload as its body, and the
-- correlation id as its headers (decisions #143). All as tests/ledger/test_aggregation_python_and_sql.py
-- proves on generated ledgers. A derived answer always has its facts: the validation gate holds
-- it, and a signal's facts are sealed and archived together; were they gone, the stored nulls
-- show, never an answer made up. Every reader of an answer reads it here.
-- version: 0031
CREATE OR REPLACE VIEW request_answers AS
SELECT r.signal_id, r.attempt, r.status,
       CASE WHEN f.signal_id IS NOT NULL
            THEN jsonb_build_object(
                     twin_persisted(),
                     ack_entry(f.persisted_status, f.persisted_payload,
                               CASE WHEN s.api = 'http' AND f.persisted_status = 201
                                    THEN created_location(s.thing_id, s.path) ELSE '{}'::jsonb END,
                               false, f.correlation_id),
                     search_persisted(),
                     ack_entry(f.indexed_status, f.indexed_payload, '{}', f.indexed_weak, f.correlation_id))
            WHEN p.signal_id IS NOT NULL AND s.id IS NOT NULL THEN p.payload  -- with its headers, as below
            ELSE r.body END
           AS body,
       CASE WHEN r.headers IS NOT NULL THEN r.headers
            WHEN holds_derived_response(r.cause, r.headers)  -- with its body, or neither: never half made up
                THEN CASE WHEN p.signal_id IS NOT NULL AND s.id IS NOT NULL
                          THEN jsonb_build_object('correlation-id', s.correlation_id) END
            ELSE (s.headers - 'requested-acks')
                 || jsonb_build_object('correlation-id', s.correlation_id, 'response-required', false) END
           AS headers,
       r.cause, r.ack_statuses, r.decided_at, r.batch_id
FROM request_results r
LEFT JOIN signals s  -- derived entries need it too (a created thing's location), whatever the headers
    ON s.id = r.signal_id AND (r.headers IS NULL OR holds_derived_entries(r.body, r.cause, r.ack_statuses))
LEFT JOIN LATERAL (  -- looked up by key, for derived entries only; OFFSET 0 keeps command_facts' five
                     -- tables out of a reader's join list, which past eight (join_collapse_limit)
                     -- would plan this view whole and join a reader's few keys to all of it
    SELECT c.signal_id, c.correlation_id, c.persisted_status, c.persisted_payload, c.indexed_status,
           c.indexed_payload, c.indexed_weak
    FROM command_facts c  -- both facts, or the stored nulls show: never an entry made up of a fact that is gone
    WHERE c.signal_id = r.signal_id AND holds_derived_entries(r.body, r.cause, r.ack_statuses)
      AND c.persisted_at IS NOT NULL AND c.indexed_at IS NOT NULL OFFSET 0
) AS f ON true
LEFT JOIN LATERAL (  -- by key, for a derived plain response only: the command's response
    SELECT c.signal_id, c.payload
    FROM command_responses c
    WHERE c.signal_id = r.signal_id AND holds_derived_response(r.cause, r.headers) OFFSET 0
) AS p ON true;
