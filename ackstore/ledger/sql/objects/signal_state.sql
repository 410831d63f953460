-- Where a signal stands on its way to being settled.

-- name: needs_transport_settlement
-- Whether a signal's source needs a transport settlement (B.9): a connection's, not the API's or
-- the CLI's. ackstore.rules.settlement.needs_transport_settlement, in SQL (a test compares them).
-- version: 0010
CREATE OR REPLACE FUNCTION needs_transport_settlement(api text, source text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT api = 'connectivity' AND source NOT IN ('api', 'cli')
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
