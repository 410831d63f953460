-- Built-in acks are not stored: they are derived from the facts that make them true (the
-- persisted response, the search index's marks), each with its disposition for an attempt.

-- name: builtin_disposition
-- How a built-in fact counts for an attempt that requested its label (A.2.5, A.2.10): counted
-- if it came before the attempt opened or while it waited in time; late if the attempt was
-- decided before it, or timed out (or failed) before it; NULL if there is no fact, or the next
-- attempt had opened by then (that attempt counts it). ackstore.rules.acks's
-- disposition_on_arrival, for facts. PARALLEL SAFE, as ack_entry and ack_entry_headers are:
-- the planner judges a query's parallel safety before it inlines them, and one function left
-- unsafe kept the gate's query over a backlog on one core.
-- version: 0011
CREATE OR REPLACE FUNCTION builtin_disposition(fact_at timestamptz, opened_at timestamptz, deadline_at timestamptz,
                                    decided_at timestamptz, cause text, next_opened_at timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN fact_at IS NULL OR next_opened_at <= fact_at THEN NULL
            WHEN fact_at < opened_at THEN counted()
            WHEN decided_at < fact_at OR (judged_by_deadline(cause) AND fact_at > deadline_at) THEN 'late'
            ELSE counted() END
$$;

-- name: mark_covers
-- Whether a search mark's revisions (from, to] hold a revision: the mark of the index batch that
-- reached a command's change (B.8, B.11). The one spelling of the rule: command_facts joins the
-- marks by it, covering_search_mark reads one command's mark by it. Inlined, so an index serves
-- the join; PARALLEL SAFE, as builtin_disposition says why.
-- version: 0030
CREATE OR REPLACE FUNCTION mark_covers(from_revision bigint, to_revision bigint, revision bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT from_revision < revision AND revision <= to_revision
$$;

-- name: covering_search_mark
-- The search mark that covers a thing's revision (mark_covers), read as the first row of the
-- marks' key at the revision: a thing's marks follow one another, each from the revision the index
-- held, so the first that reaches the revision is the one, if any. A join on the key walks every
-- later mark of the thing instead, one a pass for a thing indexed in every pass (a command of a
-- thing indexed every minute for a year: 500 000). What reads one command's facts by it:
-- builtin_fact_times, signal_facts. Inlined where it is called; PARALLEL SAFE.
-- version: 0030
CREATE OR REPLACE FUNCTION covering_search_mark(thing text, revision bigint)
RETURNS SETOF search_marks LANGUAGE sql STABLE PARALLEL SAFE AS $$
SELECT m.*
FROM (SELECT k.* FROM search_marks k
      WHERE k.thing_id = covering_search_mark.thing AND k.to_revision >= covering_search_mark.revision
      ORDER BY k.to_revision LIMIT 1) m
WHERE mark_covers(m.from_revision, m.to_revision, covering_search_mark.revision)
$$;

-- name: command_facts
-- What makes each built-in ack of a twin command true, and when it became visible (its batch's
-- commit, A.2.1), one row per command whose change persisted: twin-persisted is the change
-- apply_twin persisted; search-persisted the index reaching the command's revision — a weak 200
-- when it already held that state (B.8, B.11). Responses from before the lean ledger (batch
-- 'migrated') kept their twin-persisted acks as rows: no fact time here. Joins only (no UNION),
-- so a statement joining it from a few requests reads their rows alone, and a backlog's hash-
-- joins the marks (by mark_covers; a probe per command, covering_search_mark, cost decide_builtin
-- and the gate 0.2–0.7 s more per 100 000). Read for one old command of a thing indexed in every
-- pass since, it walks the thing's later marks: left for an index that bounds a range look-up and
-- still joins by hash (decisions #142).
-- version: 0030
CREATE OR REPLACE VIEW command_facts AS
SELECT r.signal_id, s.correlation_id,
       CASE WHEN rb.step = 'apply_twin' THEN rb.committed_at END AS persisted_at, r.status AS persisted_status,
       r.payload AS persisted_payload,
       mb.committed_at AS indexed_at, CASE WHEN m.changed THEN 204 ELSE 200 END AS indexed_status,
       CASE WHEN NOT m.changed
            THEN to_jsonb('The search index already held this state of the thing: nothing needed writing.'::text)
       END AS indexed_payload,
       NOT m.changed AS indexed_weak
FROM command_responses r
JOIN signals s ON s.id = r.signal_id
JOIN ledger_batches rb ON rb.id = r.batch_id
LEFT JOIN search_marks m ON m.thing_id = s.thing_id AND mark_covers(m.from_revision, m.to_revision, r.revision)
LEFT JOIN ledger_batches mb ON mb.id = m.batch_id
WHERE r.event_id IS NOT NULL;

-- name: builtin_facts
-- The same facts, one row per (command, built-in label) that is true.
-- version: 0011
CREATE OR REPLACE VIEW builtin_facts AS
SELECT c.signal_id, c.correlation_id, f.label, f.status, f.payload, f.weak, f.fact_at
FROM command_facts c
CROSS JOIN LATERAL (VALUES
    (twin_persisted(), c.persisted_status, c.persisted_payload, false, c.persisted_at),
    (search_persisted(), c.indexed_status, c.indexed_payload, c.indexed_weak, c.indexed_at)
) AS f(label, status, payload, weak, fact_at)
WHERE f.fact_at IS NOT NULL;

-- name: builtin_acks
-- The built-in acks of every attempt that requested them, as if stored (A.2.10), each with its
-- disposition (the function builtin_disposition: counted, late, or not this attempt's). A
-- signal's attempts are attempt 1, its signal (attempt_value), and its redeliveries' rows
-- (redelivery_attempt), numbered on from 2 (open_next_attempt opens the one after the last). So a
-- fact is joined to its signal's redeliveries, and each joined row stands for its redelivery and,
-- once — on attempt 2's row, or the one row when there is none —, for attempt 1: every join is on
-- stored columns that their statistics size, and none reads a row of attempt 1 (decisions #147).
-- An attempt's next is a redelivery's: attempt 1's the row in hand (attempt 2), a redelivery's the
-- one after it, by their index.
-- version: 0035
CREATE OR REPLACE VIEW builtin_acks AS
SELECT f.signal_id, n.attempt, f.label, f.status, f.payload,
       jsonb_build_object('correlation-id', f.correlation_id)
           || CASE WHEN f.weak THEN jsonb_build_object('ditto-weak-ack', true) ELSE '{}'::jsonb END AS headers,
       'ackstore'::text AS issuer, f.weak, f.fact_at AS received_at, d.disposition
FROM builtin_facts f
JOIN signals s ON s.id = f.signal_id
LEFT JOIN attempts re ON re.signal_id = f.signal_id AND redelivery_attempt(re.attempt)
LEFT JOIN attempts later ON later.signal_id = re.signal_id AND redelivery_attempt(later.attempt)
    AND later.attempt = re.attempt + 1
CROSS JOIN LATERAL (VALUES (1, re.attempt IS NULL OR re.attempt = 2, re.opened_at),
                           (re.attempt, re.attempt IS NOT NULL, later.opened_at)) AS n(attempt, stands, next_opened_at)
LEFT JOIN request_results r ON r.signal_id = f.signal_id AND r.attempt = n.attempt
CROSS JOIN LATERAL (SELECT builtin_disposition(f.fact_at, attempt_value(n.attempt, s.received_at, re.opened_at),
                                               attempt_value(n.attempt, s.deadline_at, re.deadline_at),
                                               r.decided_at, r.cause, n.next_opened_at) AS disposition) d
WHERE n.stands AND f.label = ANY (attempt_value(n.attempt, s.requested_acks, re.requested_acks))
  AND d.disposition IS NOT NULL;

-- name: decided_disposition
-- A stored ack's disposition once its request is decided (A.2.5): a counted ack whose fact came
-- after the deadline of a request decided by its deadline (or an error) did not count — late.
-- The sweep flagged it so in the row until migration 0018; now the row is final when written (a
-- sealed fact never changes) and this says it, as builtin_disposition does for built-in facts.
-- version: 0018
CREATE OR REPLACE FUNCTION decided_disposition(disposition text, received_at timestamptz, deadline_at timestamptz,
                                               cause text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN disposition = counted() AND judged_by_deadline(cause) AND received_at > deadline_at THEN 'late'
            ELSE disposition END
$$;

-- name: request_acks
-- Every ack of every request: the stored ones (custom, weak, live responses, and built-in acks
-- from before the lean ledger), with their dispositions as decided (the deadline their attempt's,
-- attempt_value: the signal's for attempt 1), and the derived built-in ones (no id: they are not
-- rows).
-- version: 0035
CREATE OR REPLACE VIEW request_acks AS
SELECT k.id, k.signal_id, k.attempt, k.label, k.status, k.payload, k.headers, k.issuer, k.weak, k.received_at,
       decided_disposition(k.disposition, k.received_at, attempt_value(k.attempt, s.deadline_at, re.deadline_at),
                           r.cause) AS disposition, k.reason
FROM acks k
LEFT JOIN signals s ON s.id = k.signal_id
LEFT JOIN attempts re ON re.signal_id = k.signal_id AND redelivery_attempt(re.attempt) AND re.attempt = k.attempt
LEFT JOIN request_results r ON r.signal_id = k.signal_id AND r.attempt = k.attempt
UNION ALL
SELECT NULL::bigint, b.signal_id, b.attempt, b.label, b.status, b.payload, b.headers, b.issuer, b.weak,
       b.received_at, b.disposition, NULL::text
FROM builtin_acks b;
