-- builtin_disposition as migration 0008 defined it (superseded: the current definition is in objects/).
-- How a built-in fact counts for an attempt that requested its label (A.2.5, A.2.10): counted
-- if it came before the attempt opened or while it waited in time; late if the attempt was
-- decided before it, or timed out (or failed) before it; NULL if there is no fact, or the next
-- attempt had opened by then (that attempt counts it). ackstore.rules.acks's
-- disposition_on_arrival, for facts. PARALLEL SAFE, as ack_entry and ack_entry_headers are:
-- the planner judges a query's parallel safety before it inlines them, and one function left
-- unsafe kept the gate's query over a backlog on one core.
-- version: 0008
CREATE OR REPLACE FUNCTION builtin_disposition(fact_at timestamptz, opened_at timestamptz, deadline_at timestamptz,
                                    decided_at timestamptz, cause text, next_opened_at timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN fact_at IS NULL OR next_opened_at <= fact_at THEN NULL
            WHEN fact_at < opened_at THEN 'counted'
            WHEN decided_at < fact_at OR (cause IN ('deadline', 'error') AND fact_at > deadline_at) THEN 'late'
            ELSE 'counted' END
$$;
