-- Where a signal stands on its way to being settled.

-- name: shared_source
-- Whether a source is the API's or the CLI's, which every login submits through; any other is a
-- connection's, and belongs to the login that claimed it (issue 37, declaring.sql).
-- ackstore.rules.settlement.LOCAL_SOURCES, in SQL (a test compares them).
-- version: 0020
CREATE OR REPLACE FUNCTION shared_source(source text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT source IN ('api', 'cli')
$$;

-- name: needs_transport_settlement
-- Whether a signal's source needs a transport settlement (B.9): a connection's, not the API's or
-- the CLI's. ackstore.rules.settlement.needs_transport_settlement, in SQL (a test compares them).
-- version: 0020
CREATE OR REPLACE FUNCTION needs_transport_settlement(api text, source text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT api = 'connectivity' AND NOT shared_source(source)
$$;

-- name: labels_to_request_again
-- The labels a redelivered attempt requests again (A.2.10): those of ``requested`` that did not
-- succeed in ``ack_statuses`` (a live response fails only with 408, B.9), in their order; every
-- one when none is left (the built-in-only shortcut timed out: no entries).
-- ackstore.rules.settlement.labels_to_request_again, in SQL (a test compares them):
-- open_next_attempt holds its caller to it (issue 37).
-- version: 0020
CREATE OR REPLACE FUNCTION labels_to_request_again(requested text[], ack_statuses jsonb)
RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT COALESCE(NULLIF(ARRAY(
    SELECT r.label FROM unnest(requested) WITH ORDINALITY AS r(label, n)
    WHERE NOT COALESCE(ack_statuses ? r.label, false)
       OR NOT (r.label = live_response() AND (ack_statuses ->> r.label)::integer <> 408
               OR (ack_statuses ->> r.label)::integer BETWEEN 200 AND 299)
    ORDER BY r.n), '{}'), requested)
$$;

-- name: signal_state
-- Where a signal stands: the one answer every surface gives (show, the timeline's title, the
-- Ledger page, the watermarks and every report that counts "settled"; docs/signal-states.md has
-- the table). Of the signal's current attempt: 'received' (stored; not decided, no command
-- response yet), 'persisted' / 'failed' (its twin command's change persisted / failed; not
-- decided yet), then 'decided' (a connection's message waits for its settlement decision),
-- 'settling' (a settlement is decided, the connector has not carried it out), 'redelivering' /
-- 'dead-lettered' (that redelivery or dead-letter is carried out), and 'settled': answered, for
-- the API and the CLI; acked or rejected on the broker, for a connection. Neither a redelivery
-- nor a dead-letter is settled (decision #71). ackstore.rules.settlement.signal_state in SQL.
-- version: 0011
CREATE OR REPLACE FUNCTION signal_state(needs_transport boolean, response_failed boolean, decided boolean,
                                        decision text, carried_out boolean)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN NOT decided THEN CASE WHEN response_failed THEN 'failed'
                                       WHEN NOT response_failed THEN 'persisted'
                                       ELSE 'received' END
            WHEN NOT needs_transport THEN 'settled'
            WHEN decision IS NULL THEN 'decided'
            WHEN NOT carried_out THEN 'settling'
            WHEN decision = 'redeliver' THEN 'redelivering'
            WHEN decision = 'dead-letter' THEN 'dead-lettered'
            ELSE 'settled' END
$$;
