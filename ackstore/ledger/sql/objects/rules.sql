-- The spec's words every statement shares, each spelled once: which ack counts, the built-in
-- labels, which decisions a deadline judged. Constants as IMMUTABLE SQL functions: PostgreSQL
-- inlines and folds each into its literal when it plans, so the partial index over counted acks
-- still serves `disposition = counted()`, and ON CONFLICT still finds it. Python has the same words (ackstore.rules.acks.Disposition, ackstore.rules.labels);
-- tests/ledger/test_rules_python_and_sql.py compares them.

-- name: counted
-- The disposition of the ack an attempt counts: the first in time per label (A.2.8, A.2.10).
-- version: 0011
CREATE OR REPLACE FUNCTION counted() RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT 'counted'::text
$$;

-- name: twin_persisted
-- The built-in label of a twin command's persisted change (B.1).
-- version: 0011
CREATE OR REPLACE FUNCTION twin_persisted() RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT 'twin-persisted'::text
$$;

-- name: search_persisted
-- The built-in label of the search index reaching a twin command's change (B.1).
-- version: 0011
CREATE OR REPLACE FUNCTION search_persisted() RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT 'search-persisted'::text
$$;

-- name: live_response
-- The built-in label of a live command's or message's response (B.1).
-- version: 0011
CREATE OR REPLACE FUNCTION live_response() RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT 'live-response'::text
$$;

-- name: builtin_labels
-- Every built-in label: a subscriber never declares, issues or is handed one (B.1).
-- version: 0011
CREATE OR REPLACE FUNCTION builtin_labels() RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT ARRAY[twin_persisted(), search_persisted(), live_response()]
$$;

-- name: judged_by_deadline
-- Whether a decision was the deadline's (a timeout) or a failure's, taken once the deadline
-- passed or at once: an ack after the deadline is late for it, though it came before the
-- decision was written (A.2.5, A.2.7).
-- version: 0011
CREATE OR REPLACE FUNCTION judged_by_deadline(cause text) RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT cause IN ('deadline', 'error')
$$;

-- name: awaits_command_response
-- Whether a request certainly cannot be decided yet for want of its command's response, so the
-- sweep need not read it (aggregation.decide answers None for it; tests/ledger/test_aggregation_python_and_sql.py
-- proves it): its deadline has not passed, no response is stored, and it asked for a built-in
-- ack of the command — twin-persisted and search-persisted are facts of that response
-- (command_facts), and nobody else may issue them — or, asking for no ack, for the response
-- itself. Under steady traffic these are most of the decision queue: the commands that arrived
-- while the run applied the ones before them.
-- version: 0013
CREATE OR REPLACE FUNCTION awaits_command_response(deadline_at timestamptz, requested_acks text[],
                                                   response_required boolean, responded boolean)
RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT deadline_at > statement_timestamp() AND NOT responded
       AND (requested_acks && ARRAY[twin_persisted(), search_persisted()]
            OR (cardinality(requested_acks) = 0 AND response_required))
$$;

-- name: builtin_issuer
-- The issuer of the built-in acks stored before the lean ledger (0007), carried to later attempts.
-- version: 0020
CREATE OR REPLACE FUNCTION builtin_issuer() RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT 'ackstore'::text
$$;

-- name: carried_out_as_allowed
-- Whether a transport may say it performed ``carried_out_as`` instead of ``decision`` (NULL: as
-- decided): only MQTT's acknowledgement of a redeliver decision without reconnectForRedelivery
-- (decisions #99). ackstore.rules.settlement.carried_out_as_allowed, in SQL (a test compares them).
-- version: 0020
CREATE OR REPLACE FUNCTION carried_out_as_allowed(decision text, carried_out_as text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT carried_out_as IS NULL OR (decision = 'redeliver' AND carried_out_as = 'ack')
$$;
