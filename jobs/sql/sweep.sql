-- Statements of the sweep job. Bind parameters: :run_id; :batch_id, the sweep batch a result is
-- decided in (the validation gate's slice is the batches past its watermark).
-- A request is one attempt of a signal (A.2.10), with its labels and deadline: attempt 1's are its
-- signal's, a redelivery's its row of attempts. Each statement joins the signal and a redelivery's
-- row by the request's keys and takes the values through attempt_value — the reads of the queue
-- name them a, once per statement, and say whether the attempt is there through attempt_found —:
-- no statement reads a row of attempt 1 (decisions #146, #147).

-- name: decide_builtin
-- The bulk of the common case, one row per request and no per-label rows: every label built in
-- (twin-persisted, search-persisted) and its fact in time (command_facts; for a request waiting in
-- the queue — its current attempt, undecided — builtin_acks counts a fact iff it is there, and
-- it is in time iff its time is by the deadline), all 2xx. The built-in-only shortcut (one
-- shortcut label, a response required: :shortcut_labels) is the plain response, cause 'response',
-- stored without its body and headers (holds_derived_response: request_answers derives both from
-- the command's response and its signal, decisions #143). An aggregated body over both labels is
-- stored as derived_builtin_body(): its entries follow from the facts and request_answers derives
-- them where read (decisions #141) — a created thing's location too, when it needs no
-- percent-escaping (created_location); otherwise the request goes to Python, which stores its
-- body. An aggregated answer's headers are NULL too: request_answers derives them from the signal.
-- decide_common below then decides what is left.
-- The joins come first, on their own (MATERIALIZED): equi-joins the planner sizes from the tables'
-- statistics, so a backlog of a million is hash- or merge-joined and a minute's few requests
-- walk the keys; the conditions across tables (no statistics can size them) filter its rows —
-- the labels too: a filter over attempt_value in the joins was sized 2 500 of a million and
-- nested-looped (decisions #146).
WITH facts AS MATERIALIZED (
    SELECT q.signal_id, q.attempt, s.response_required, s.api, s.thing_id, s.path,
           a.requested_acks, a.deadline_at, f.persisted_at, f.persisted_status, f.persisted_payload,
           f.indexed_at, f.indexed_status, f.indexed_payload
    FROM queue_decide q
    JOIN signals s ON s.id = q.signal_id
    LEFT JOIN attempts re ON re.signal_id = q.signal_id AND redelivery_attempt(re.attempt) AND re.attempt = q.attempt
    CROSS JOIN LATERAL (SELECT attempt_value(q.attempt, s.requested_acks, re.requested_acks) AS requested_acks,
                               attempt_value(q.attempt, s.deadline_at, re.deadline_at) AS deadline_at) a
    JOIN command_facts f ON f.signal_id = q.signal_id
    WHERE attempt_found(q.attempt, re.signal_id IS NOT NULL)
), decided AS (
    SELECT f.signal_id, f.attempt, f.response_required,
           cardinality(f.requested_acks) AS labels,
           twin_persisted() = ANY (f.requested_acks) AS persisted,
           search_persisted() = ANY (f.requested_acks) AS indexed,
           f.response_required AND cardinality(f.requested_acks) = 1
               AND f.requested_acks[1] = ANY (CAST(:shortcut_labels AS text[])) AS plain,
           f.persisted_status, f.persisted_payload, f.indexed_status, f.indexed_payload
    FROM facts f
    WHERE f.requested_acks <@ ARRAY[twin_persisted(), search_persisted()] AND f.requested_acks <> '{}'
      AND (twin_persisted() <> ALL (f.requested_acks)
           OR (f.persisted_at <= f.deadline_at AND f.persisted_status BETWEEN 200 AND 299))
      AND (search_persisted() <> ALL (f.requested_acks) OR f.indexed_at <= f.deadline_at)
      AND NOT (f.api = 'http' AND f.response_required AND cardinality(f.requested_acks) >= 2
               AND twin_persisted() = ANY (f.requested_acks) AND f.persisted_status = 201
               AND created_location(f.thing_id, f.path) IS NULL)
), stored AS (
    INSERT INTO request_results (signal_id, attempt, status, body, headers, cause, ack_statuses, batch_id)
    SELECT d.signal_id, d.attempt,
           CASE WHEN NOT d.response_required THEN 202
                WHEN d.labels = 1 THEN CASE WHEN d.persisted THEN d.persisted_status ELSE d.indexed_status END
                ELSE 200 END,
           CASE WHEN NOT d.response_required OR d.plain THEN NULL  -- none, or derived (holds_derived_response)
                WHEN d.labels = 1 THEN CASE WHEN d.persisted THEN d.persisted_payload ELSE d.indexed_payload END
                ELSE derived_builtin_body() END,
           NULL::jsonb,  -- derived by request_answers: the plain response's, or the aggregated ones
           CASE WHEN d.plain THEN 'response' ELSE 'acks' END,
           CASE WHEN d.plain THEN '{}'::jsonb
                WHEN d.persisted AND d.indexed THEN jsonb_build_object(twin_persisted(), d.persisted_status,
                                                                        search_persisted(), d.indexed_status)
                WHEN d.persisted THEN jsonb_build_object(twin_persisted(), d.persisted_status)
                ELSE jsonb_build_object(search_persisted(), d.indexed_status) END,
           :batch_id
    FROM decided d
    RETURNING signal_id, attempt
)
DELETE FROM queue_decide q USING stored x WHERE q.signal_id = x.signal_id AND q.attempt = x.attempt

-- name: decide_common
-- The common case, decided here in one statement rather than in Spark (B.5, B.4.3): requests
-- that asked for no label and no response (202), and requests whose every label has a counted
-- ack in time, all of them 2xx, with no failed twin command — unless the built-in-only shortcut
-- applies (one built-in label with response-required: the plain response) or an entry needs the
-- location of a created thing (a 201 twin-persisted over HTTP): those, and every request still
-- waiting or past its deadline, go to Python (aggregation.decide). What this writes is what
-- aggregation.decide gives (tests/ledger/test_aggregation_python_and_sql.py proves it on generated ledgers).
-- Bind parameter: :shortcut_labels.
WITH entries AS (  -- each requested label with its counted ack in time (derived or stored), if any
    SELECT q.signal_id, q.attempt, s.correlation_id, cardinality(a.requested_acks) AS labels, l.label,
           COALESCE(b.status, k.status) AS status,
           CASE WHEN b.label IS NOT NULL THEN b.payload ELSE k.payload END AS payload,
           CASE WHEN b.label IS NOT NULL THEN b.headers ELSE k.headers END AS headers,
           COALESCE(b.weak, k.weak) AS weak,
           s.api = 'http' AND s.response_required AND cardinality(a.requested_acks) >= 2 AS locates
    FROM queue_decide q
    JOIN signals s ON s.id = q.signal_id
    LEFT JOIN attempts re ON re.signal_id = q.signal_id AND redelivery_attempt(re.attempt) AND re.attempt = q.attempt
    CROSS JOIN LATERAL (SELECT attempt_value(q.attempt, s.requested_acks, re.requested_acks) AS requested_acks,
                               attempt_value(q.attempt, s.deadline_at, re.deadline_at) AS deadline_at) a
    LEFT JOIN command_responses r ON r.signal_id = q.signal_id
    LEFT JOIN LATERAL unnest(a.requested_acks) AS l(label) ON true
    LEFT JOIN builtin_acks b ON b.signal_id = q.signal_id AND b.attempt = q.attempt AND b.label = l.label
                            AND b.disposition = counted() AND b.received_at <= a.deadline_at
    LEFT JOIN acks k ON k.signal_id = q.signal_id AND k.attempt = q.attempt AND k.label = l.label
                    AND k.disposition = counted() AND k.received_at <= a.deadline_at
    WHERE attempt_found(q.attempt, re.signal_id IS NOT NULL) AND NOT COALESCE(r.is_error, false)
      AND (cardinality(a.requested_acks) > 0 OR NOT s.response_required)
      AND NOT (s.response_required AND cardinality(a.requested_acks) = 1
               AND a.requested_acks[1] = ANY (CAST(:shortcut_labels AS text[])))
), decided AS (
    SELECT e.signal_id, e.attempt, min(e.correlation_id) AS correlation_id, min(e.labels) AS labels,
           min(e.status) AS only_status, (array_agg(e.payload))[1] AS only_payload,
           COALESCE(jsonb_object_agg(e.label, e.status) FILTER (WHERE e.label IS NOT NULL), '{}'::jsonb) AS statuses,
           jsonb_object_agg(e.label, ack_entry(e.status, e.payload, e.headers, e.weak, e.correlation_id))
               FILTER (WHERE e.label IS NOT NULL) AS entries
    FROM entries e
    GROUP BY e.signal_id, e.attempt
    HAVING count(e.label) = count(e.status)
       AND COALESCE(bool_and(e.status BETWEEN 200 AND 299), true)
       AND NOT COALESCE(bool_or(e.locates AND e.label = twin_persisted() AND e.status = 201), false)
), stored AS (
    INSERT INTO request_results (signal_id, attempt, status, body, headers, cause, ack_statuses, batch_id)
    SELECT d.signal_id, d.attempt,
           CASE WHEN NOT s.response_required THEN 202 WHEN d.labels = 1 THEN d.only_status ELSE 200 END,
           CASE WHEN NOT s.response_required THEN NULL WHEN d.labels = 1 THEN d.only_payload ELSE d.entries END,
           CASE WHEN d.labels = 0 THEN jsonb_build_object('correlation-id', d.correlation_id) END,  -- else aggregated
           CASE WHEN d.labels = 0 THEN 'accepted' ELSE 'acks' END,
           d.statuses, :batch_id
    FROM decided d
    JOIN signals s ON s.id = d.signal_id
    RETURNING signal_id, attempt
)
DELETE FROM queue_decide q USING stored x WHERE q.signal_id = x.signal_id AND q.attempt = x.attempt

-- name: undecided
-- Every request waiting for a decision (queue_decide holds only those) that could be decided now
-- — not those still awaiting their command's response — with what is known of it (read by
-- Spark). Only acks of that attempt whose fact happened by its deadline count (A.2.1); whether
-- the deadline has passed is judged now.
SELECT s.id AS signal_id, q.attempt, s.correlation_id, s.api, s.thing_id, s.path, s.headers::text AS headers,
       a.requested_acks, s.response_required, s.timeout_ms, a.deadline_at <= statement_timestamp() AS deadline_passed,
       r.status AS response_status, r.payload::text AS response_payload,
       COALESCE(r.is_error, false) AS response_is_error,
       (SELECT jsonb_agg(jsonb_build_array(k.label, k.status, k.payload, k.payload IS NOT NULL,
                                           k.headers, k.weak) ORDER BY k.received_at, k.id)
          FROM request_acks k
         WHERE k.signal_id = s.id AND k.attempt = q.attempt AND k.disposition = counted()
           AND k.received_at <= a.deadline_at)::text AS acks,
       (SELECT k.reason FROM acks k  -- the last live response refused as not answering the command
         WHERE k.signal_id = s.id AND k.attempt = q.attempt AND k.disposition = 'invalid'
         ORDER BY k.id DESC LIMIT 1) AS invalid_response
FROM queue_decide q
JOIN signals s ON s.id = q.signal_id
LEFT JOIN attempts re ON re.signal_id = q.signal_id AND redelivery_attempt(re.attempt) AND re.attempt = q.attempt
CROSS JOIN LATERAL (SELECT attempt_value(q.attempt, s.requested_acks, re.requested_acks) AS requested_acks,
                           attempt_value(q.attempt, s.deadline_at, re.deadline_at) AS deadline_at) a
LEFT JOIN command_responses r ON r.signal_id = s.id
WHERE attempt_found(q.attempt, re.signal_id IS NOT NULL)
  AND NOT awaits_command_response(a.deadline_at, a.requested_acks, s.response_required, r.signal_id IS NOT NULL)

-- name: undecided_bounds
-- Whether anything waiting for a decision could be decided now, and the id range the
-- partitioned read spans.
SELECT min(q.signal_id), max(q.signal_id)
FROM queue_decide q
JOIN signals s ON s.id = q.signal_id
LEFT JOIN attempts re ON re.signal_id = q.signal_id AND redelivery_attempt(re.attempt) AND re.attempt = q.attempt
CROSS JOIN LATERAL (SELECT attempt_value(q.attempt, s.requested_acks, re.requested_acks) AS requested_acks,
                           attempt_value(q.attempt, s.deadline_at, re.deadline_at) AS deadline_at) a
LEFT JOIN command_responses r ON r.signal_id = q.signal_id
WHERE attempt_found(q.attempt, re.signal_id IS NOT NULL)
  AND NOT awaits_command_response(a.deadline_at, a.requested_acks, s.response_required, r.signal_id IS NOT NULL)

-- name: pending_count
-- How many requests wait for a decision: what the decision queue holds as this run starts.
SELECT count(*) FROM queue_decide q

-- name: lock_acks
-- No ack is stored and no fact lands while decisions are merged: an ack that arrives now waits,
-- then finds its request decided and is stored late (A.2.5); a batch of facts waits before its
-- time is taken (jobs/sql/batches.sql), so its facts come after the decisions.
LOCK TABLE acks IN SHARE MODE;
SELECT lock_facts(true)

-- name: defer_outdated
-- A request decided by its deadline on a read that missed an in-time ack (one whose
-- transaction began before the deadline and committed after the read) is left undecided;
-- the next sweep decides it with that ack.
DELETE FROM stage_results x
WHERE x.run_id = :run_id AND x.cause = 'deadline'
  AND x.acks_seen <> (SELECT count(*) FROM request_acks k
                      JOIN signals s ON s.id = x.signal_id
                      LEFT JOIN attempts re ON re.signal_id = x.signal_id AND redelivery_attempt(re.attempt)
                          AND re.attempt = x.attempt
                      WHERE k.signal_id = x.signal_id AND k.attempt = x.attempt AND k.disposition = counted()
                        AND k.received_at <= attempt_value(x.attempt, s.deadline_at, re.deadline_at))

-- name: staged
-- How many decisions this run staged.
SELECT count(*) FROM stage_results WHERE run_id = :run_id

-- name: insert_results
-- What each requester is told, once per attempt.
INSERT INTO request_results (signal_id, attempt, status, body, headers, cause, ack_statuses, batch_id)
SELECT x.signal_id, x.attempt, x.status, x.body, x.headers, x.cause, x.ack_statuses, :batch_id
FROM stage_results x
WHERE x.run_id = :run_id
ON CONFLICT (signal_id, attempt) DO NOTHING

-- name: late_acks
-- How many counted acks of the decided requests came after the deadline: they did not count
-- (A.2.5). Kept as stored — a fact never changes once written, to be sealed (decisions #101) —
-- and shown late by decided_disposition. Only a request decided by its deadline or by an error
-- can have such acks: one decided by its acks had them all in time, and one without labels has
-- no counted acks.
SELECT count(*)
FROM stage_results x
JOIN signals s ON s.id = x.signal_id
LEFT JOIN attempts re ON re.signal_id = x.signal_id AND redelivery_attempt(re.attempt) AND re.attempt = x.attempt
JOIN acks k ON k.signal_id = x.signal_id AND k.attempt = x.attempt
WHERE x.run_id = :run_id AND k.disposition = counted()
  AND decided_disposition(k.disposition, k.received_at, attempt_value(x.attempt, s.deadline_at, re.deadline_at),
                          x.cause) = 'late'

-- name: dequeue
-- Decided requests leave the decision queue; their batch waits for the validation gate, which
-- alone lets them be settled (A.2.6).
DELETE FROM queue_decide q
USING stage_results x
WHERE x.run_id = :run_id AND q.signal_id = x.signal_id AND q.attempt = x.attempt

-- name: clear_staging
-- TRUNCATE is transactional and instant; the step lock means no other run uses the table.
TRUNCATE stage_results

-- name: notify_decided
-- Wake whoever holds a request for its decision — the HTTP front door (issue 51) — once this
-- transaction's decisions are committed (NOTIFY is delivered on COMMIT). Bind parameter: :channel.
SELECT pg_notify(:channel, '')
