-- Statements of the validate job. The slice is what the ledger decided and wrote since the last
-- passed validation, read where it lies: the results of the sweep batches past the watermark
-- validated_results, and the settlements past validated_settlements. Each subject's facts are a
-- query over its slice ({slice}: jobs/validate.py puts its rows query there, which reads the
-- subject's table where Great Expectations puts it, {batch}); the invariants over those facts are
-- jobs/expectations.py.
-- Bind parameters: :results_after, :results_upto, :settlements_after, :settlements_upto,
-- :transport_api, :local_sources; in a subject's facts, its slice's :first_signal_id and
-- :last_signal_id (rendered as literals: a GX query takes no parameters).

-- name: watermarks
-- Where the last passed validation stopped. Read first and bound, so that the planner sees the
-- values and walks the indexes (a sub-select made it scan all of the history).
SELECT COALESCE(max(w.position) FILTER (WHERE w.name = 'validated_results'), 0) AS results_after,
       COALESCE(max(w.position) FILTER (WHERE w.name = 'validated_settlements'), 0) AS settlements_after
FROM pipeline_watermarks w

-- name: slice
-- How much there is to validate, and where the slice ends: what is committed now. A sweep batch
-- that commits later has a greater id (sweeps run one at a time), so it is the next slice's; so
-- is a settlement (settle steps too).
-- With each subject's range of signal ids, which its facts query reads the history tables within.
SELECT r.decisions, r.results_upto, r.results_first_signal, r.results_last_signal,
       st.settlements, st.settlements_upto, st.settlements_first_signal, st.settlements_last_signal
FROM (SELECT count(*) AS decisions, max(x.batch_id) AS results_upto,
             min(x.signal_id) AS results_first_signal, max(x.signal_id) AS results_last_signal
      FROM request_results x WHERE x.batch_id > :results_after) AS r
CROSS JOIN (SELECT count(*) AS settlements, max(y.id) AS settlements_upto,
                   min(y.signal_id) AS settlements_first_signal, max(y.signal_id) AS settlements_last_signal
            FROM settlements y WHERE y.id > :settlements_after) AS st

-- name: requests_slice
-- The decided requests of the slice: the results of its sweep batches ({batch}: request_results).
SELECT * FROM {batch} AS t WHERE t.batch_id > :results_after AND t.batch_id <= :results_upto

-- name: settlements_slice
-- The settlement decisions of the slice ({batch}: settlements).
SELECT * FROM {batch} AS t WHERE t.id > :settlements_after AND t.id <= :settlements_upto

-- name: requests
-- One row per decided request of the slice, with the facts the request invariants are stated
-- over: its attempt, attempt 1's read from its signal and a redelivery's from its row
-- (attempt_value, attempt_found: a backlog hashes no row of attempt 1, decisions #146; stored:
-- false when its signal, or a redelivery's row, is gone — an orphan); the next one if a
-- redelivery opened it (redelivery_attempt: their own index, not every attempt); its response;
-- its counted acks — the stored ones aggregated per request, the derived built-in ones per label
-- as builtin_acks counts them (one column each: no row per label). Only joins, each reading the
-- slice's rows (the stored acks are grouped over the slice, {slice} again), so that the planner
-- sizes them from the statistics: a minute's slice walks the keys, a backlog's is hash-joined;
-- neither reads the history. Each history table is read within the slice's range of signal ids
-- (:first_signal_id, :last_signal_id, from "slice", rendered as literals so that the planner
-- sizes each read by them: as sub-selects it guessed 1/200 of a backlog and walked 120 000 keys
-- one by one): the joins are on the signal's id, so the range keeps every match, and a backlog's
-- hash joins read the slice's part of a table, not all of it (decisions #139).
SELECT q.signal_id, q.attempt, q.stored, q.cause, q.status, q.decided_at, q.deadline_at,
       q.requested_acks, cardinality(q.requested_acks) AS requested,
       -- An aggregated decision over two or more labels answers with a body keyed by label (B.4.3);
       -- with response-required=false a success has no body at all.
       q.cause IN ('acks', 'deadline') AND cardinality(q.requested_acks) >= 2 AND q.has_body AS aggregated,
       q.body_is_object, q.body_has_every_label, q.body_has_other_labels,
       -- a derived entry (derived_builtin_body) has its fact's status, as request_answers derives it
       CASE WHEN q.body_derived THEN COALESCE(f.persisted_status BETWEEN 200 AND 299
                                              AND f.indexed_status BETWEEN 200 AND 299, false)
            ELSE q.body_entries_all_2xx END AS body_entries_all_2xx,
       -- derived entries answer an aggregated request over both built-in labels, from both facts,
       -- with no created thing's location that needs percent-escaping (only Python writes one)
       q.body_derived,
       COALESCE(q.cause = 'acks' AND cardinality(q.requested_acks) = 2
                AND q.requested_acks @> ARRAY[twin_persisted(), search_persisted()]
                AND f.persisted_at IS NOT NULL AND f.indexed_at IS NOT NULL
                AND NOT (f.persisted_status = 201 AND q.derived_over_http  -- created: the location, if derived
                         AND created_location(q.thing_id, q.path) IS NULL), false) AS body_derivable,
       -- a plain response derived where read (holds_derived_response) is the built-in-only shortcut's
       -- over twin-persisted, a response required: its command's response, with its status, is there
       -- to derive it from, and no stored body would be hidden by it
       q.response_derived,
       COALESCE(q.cause = 'response' AND q.response_required AND q.requested_acks = ARRAY[twin_persisted()]
                AND NOT q.has_body AND f.persisted_at IS NOT NULL AND q.status = f.persisted_status, false)
           AS response_derivable,
       CASE WHEN k.in_time IS NULL THEN b.persisted_in_time::int + b.indexed_in_time::int
            ELSE (SELECT count(DISTINCT l.label)
                  FROM unnest(k.in_time || CASE WHEN b.persisted_in_time THEN ARRAY[twin_persisted()] END
                                        || CASE WHEN b.indexed_in_time THEN ARRAY[search_persisted()] END) AS l(label))
       END AS counted_in_time,
       COALESCE(cr.is_error, false) AS response_is_error,
       COALESCE(NOT cr.is_error AND cr.status BETWEEN 200 AND 299, false) AS response_success,
       cr.event_id IS NOT NULL AS event_exists,
       COALESCE(k.persisted, false) AS stored_persisted, b.persisted AS derived_persisted,
       COALESCE(k.duplicated, false) AS duplicated, COALESCE(k.unrequested, false) AS unrequested,
       COALESCE(k.weak_not_200, false) AS weak_not_200, COALESCE(k.weak_unmarked, false) AS weak_unmarked,
       COALESCE(k.weak_undeclared, false) AS weak_undeclared,
       -- a built-in ack stored as a row (decisions #96): only one kept from before the lean ledger
       COALESCE(k.stored_builtin, false)
           AND NOT EXISTS (SELECT 1 FROM ledger_batches rb WHERE rb.id = cr.batch_id AND rb.step = 'migrated')
           AS builtin_stored_since_lean
FROM (
    SELECT r.*, n.opened_at AS next_opened_at, r.body_derived AND r.api = 'http' AS derived_over_http
    FROM (  -- what the body says, against the labels requested, joined only to what those labels are
            -- read from (the signal, a redelivery's row): a body is wide, and carried through the
            -- other joins it cost more than reading it
        SELECT r.signal_id, r.attempt, r.cause, r.status, r.decided_at, r.body IS NOT NULL AS has_body,
               s.id IS NOT NULL AND x.stored AS stored, x.requested_acks, x.opened_at, x.deadline_at,
               jsonb_typeof(r.body) = 'object' AS body_is_object,
               r.body ?& x.requested_acks AS body_has_every_label,
               jsonb_typeof(r.body) = 'object' AND r.body - x.requested_acks <> jsonb_build_object()
                   AS body_has_other_labels,
               NOT jsonb_path_exists(r.body, '$.* ? (!(@.status.type() == "number" && @.status >= 200 && @.status <= 299))')
                   AS body_entries_all_2xx,
               holds_derived_entries(r.body, r.cause, r.ack_statuses) AS body_derived,
               holds_derived_response(r.cause, r.headers) AS response_derived,
               s.api, s.thing_id, s.path, s.response_required
        FROM {slice} AS r
        LEFT JOIN signals s ON s.id = r.signal_id
            AND s.id BETWEEN :first_signal_id AND :last_signal_id
        LEFT JOIN attempts a ON a.signal_id = r.signal_id AND a.attempt = r.attempt AND redelivery_attempt(a.attempt)
            AND a.signal_id BETWEEN :first_signal_id AND :last_signal_id
        CROSS JOIN LATERAL (  -- attempt 1 is its signal, a redelivery its row (attempt_value); attempt 1's
                              -- opening is the signal's receipt, as the trigger that copies it says
            SELECT attempt_found(r.attempt, a.signal_id IS NOT NULL) AS stored,
                   attempt_value(r.attempt, s.requested_acks, a.requested_acks) AS requested_acks,
                   attempt_value(r.attempt, s.received_at, a.opened_at) AS opened_at,
                   attempt_value(r.attempt, s.deadline_at, a.deadline_at) AS deadline_at
        ) AS x
        OFFSET 0
    ) AS r
    LEFT JOIN attempts n ON n.signal_id = r.signal_id AND redelivery_attempt(n.attempt) AND n.attempt = r.attempt + 1
        AND n.signal_id BETWEEN :first_signal_id AND :last_signal_id
    OFFSET 0  -- computed once per request: not pulled up into each expression that reads it
) AS q
LEFT JOIN (  -- the counted acks stored as rows: custom, weak, live responses, built-in ones from before the lean ledger
    SELECT k.signal_id, k.attempt,
           array_agg(DISTINCT k.label) FILTER (WHERE k.received_at <= x.deadline_at
                                                 AND k.label = ANY (x.requested_acks)) AS in_time,
           count(*) > count(DISTINCT k.label) AS duplicated,
           bool_or(k.label <> ALL (x.requested_acks)) AS unrequested,
           bool_or(k.label = twin_persisted()) AS persisted,
           bool_or(k.label IN (twin_persisted(), search_persisted())) AS stored_builtin,
           bool_or(k.weak AND k.status <> 200) AS weak_not_200,
           bool_or(k.weak AND (k.headers ->> 'ditto-weak-ack') IS DISTINCT FROM 'true') AS weak_unmarked,
           bool_or(k.weak AND k.label <> ALL (builtin_labels())
                   AND NOT EXISTS (SELECT 1 FROM declared_labels d WHERE d.label = k.label)) AS weak_undeclared
    FROM {slice} AS r
    JOIN acks k ON k.signal_id = r.signal_id AND k.attempt = r.attempt AND k.disposition = counted()
    LEFT JOIN signals s ON s.id = r.signal_id AND s.id BETWEEN :first_signal_id AND :last_signal_id
    LEFT JOIN attempts a ON a.signal_id = r.signal_id AND a.attempt = r.attempt AND redelivery_attempt(a.attempt)
        AND a.signal_id BETWEEN :first_signal_id AND :last_signal_id
    CROSS JOIN LATERAL (SELECT attempt_value(r.attempt, s.requested_acks, a.requested_acks) AS requested_acks,
                               attempt_value(r.attempt, s.deadline_at, a.deadline_at) AS deadline_at) AS x
    GROUP BY k.signal_id, k.attempt
) AS k ON k.signal_id = q.signal_id AND k.attempt = q.attempt
LEFT JOIN command_responses cr ON cr.signal_id = q.signal_id
    AND cr.signal_id BETWEEN :first_signal_id AND :last_signal_id
LEFT JOIN command_facts f ON f.signal_id = q.signal_id
    AND f.signal_id BETWEEN :first_signal_id AND :last_signal_id
CROSS JOIN LATERAL (
    SELECT twin_persisted() = ANY (q.requested_acks)
               AND builtin_disposition(f.persisted_at, q.opened_at, q.deadline_at, q.decided_at, q.cause,
                                       q.next_opened_at) = counted() AS persisted,
           search_persisted() = ANY (q.requested_acks)
               AND builtin_disposition(f.indexed_at, q.opened_at, q.deadline_at, q.decided_at, q.cause,
                                       q.next_opened_at) = counted() AS indexed
) AS c
CROSS JOIN LATERAL (
    SELECT COALESCE(c.persisted, false) AS persisted,
           COALESCE(c.persisted AND f.persisted_at <= q.deadline_at, false) AS persisted_in_time,
           COALESCE(c.indexed AND f.indexed_at <= q.deadline_at, false) AS indexed_in_time
) AS b

-- name: settlements
-- One row per settlement decision of the slice: its signal (stored: false when gone — an orphan)
-- and whether the request it settles was decided.
SELECT st.id AS settlement_id, st.signal_id, st.attempt, s.id IS NOT NULL AS stored, s.source, s.api,
       EXISTS (SELECT 1 FROM request_results r WHERE r.signal_id = st.signal_id AND r.attempt = st.attempt) AS decided
FROM {slice} AS st
LEFT JOIN signals s ON s.id = st.signal_id  -- within the slice's range of signal ids, as above
    AND s.id BETWEEN :first_signal_id AND :last_signal_id

-- name: enqueue_settlements
-- Passed: the slice's requests from connections wait for their transport decision. Which
-- signals those are is settlement.needs_transport_settlement's rule; its values are bound here.
INSERT INTO queue_settle (signal_id, attempt)
SELECT r.signal_id, r.attempt
FROM request_results r
JOIN signals s ON s.id = r.signal_id
WHERE r.batch_id > :results_after AND r.batch_id <= :results_upto
  AND s.api = :transport_api AND s.source <> ALL (CAST(:local_sources AS text[]))
ON CONFLICT DO NOTHING

-- name: record_pass
-- When the gate passed the slice's results (the validated checkpoint of their timelines): one row
-- per pass, none per signal. A pass already recorded keeps its first time.
INSERT INTO validation_passes (results_upto, run_id, passed_at)
SELECT CAST(:results_upto AS bigint), :run_id, clock_timestamp()
WHERE CAST(:results_upto AS bigint) IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM validation_passes v WHERE v.results_upto = CAST(:results_upto AS bigint))

-- name: advance_watermarks
-- Passed: the slice is not checked again.
INSERT INTO pipeline_watermarks (name, position)
SELECT v.name, v.position
FROM (VALUES ('validated_results', CAST(:results_upto AS bigint)),
             ('validated_settlements', CAST(:settlements_upto AS bigint))) AS v(name, position)
WHERE v.position IS NOT NULL
ON CONFLICT (name) DO UPDATE SET position = GREATEST(pipeline_watermarks.position, EXCLUDED.position)
