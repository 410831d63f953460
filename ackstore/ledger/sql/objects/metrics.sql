-- The ledger's metrics (issue 38, docs/metrics.md, decisions #108): what `ackstore metrics`
-- serves to Prometheus. A counter is what the seals cover (metric_totals, rolled up by each seal
-- in its own transaction) plus the facts numbered after the last seal: a scrape never reads the
-- history, and archiving (which moves only sealed facts) never makes a counter go back.

-- name: status_class
-- A decided status as the metrics class it: 408 and 424 apart (the deadline's and a failed
-- ack's), the others by hundreds ('2xx', '4xx', '5xx').
-- version: 0021
CREATE OR REPLACE FUNCTION status_class(status smallint) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN status IN (408, 424) THEN status::text ELSE (status / 100)::text || 'xx' END
$$;

-- name: latency_buckets
-- The upper bounds (seconds) of the latency histograms' buckets, 1 s to 1 h: a minute-scheduled
-- ledger decides in one to three minutes, so the buckets are dense there. The one list: the
-- exporter reads the bounds from the rows, never from a copy of its own.
-- version: 0021
CREATE OR REPLACE FUNCTION latency_buckets() RETURNS float8[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT '{1,2,5,10,15,30,45,60,90,120,180,300,600,1200,1800,3600}'::float8[]
$$;

-- name: latency_bucket
-- The bucket a latency falls in: the smallest bound at or above it ('+Inf' past the last, and for
-- NULL or NaN), as Prometheus's ``le`` label (a bucket counts what is less than or equal to its
-- bound). width_bucket counts the bounds at or below it; the bound at that count is the answer
-- when it equals the latency, else the next one. One expression without a sub-select, so the
-- planner inlines it: the seal's roll-up calls it once a decided fact (0.2 µs, not 3.7: issue 40).
-- version: 0023
CREATE OR REPLACE FUNCTION latency_bucket(seconds float8) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN width_bucket(seconds, latency_buckets()) > 0
                 AND (latency_buckets())[width_bucket(seconds, latency_buckets())] = seconds
            THEN (latency_buckets())[width_bucket(seconds, latency_buckets())]::text
            WHEN width_bucket(seconds, latency_buckets()) < cardinality(latency_buckets())
            THEN (latency_buckets())[width_bucket(seconds, latency_buckets()) + 1]::text
            ELSE '+Inf' END
$$;

-- name: metric_sources
-- The sources whose metrics are series of their own (issue 50, decisions #127): the API's and the
-- CLI's, and the first ``cap`` connections in the order they were claimed (ACKSTORE_METRIC_SOURCES,
-- ackstore.rules.settings.METRIC_SOURCES). Every other source's figures go to the source 'other',
-- so no sender naming sources grows the series. The order of the claims never changes, so a
-- source's series never moves to another between scrapes; a connection is claimed with its first
-- message, its connector's start or a declaration into it. Read through the claims' index: a
-- scrape and a seal read the first ``cap`` connections, never all of them.
-- version: 0025
CREATE OR REPLACE FUNCTION metric_sources(cap integer) RETURNS TABLE (source text)
LANGUAGE sql STABLE AS $$
SELECT x.source FROM (VALUES ('api'), ('cli')) AS x(source)
UNION ALL
(SELECT c.id FROM connections c ORDER BY c.claimed_at, c.id LIMIT cap)
$$;

-- name: builtin_fact_times
-- One signal's built-in facts, when each became visible, and the fact number of the row that holds
-- it (its response, or the search mark covering its revision, covering_search_mark's): what
-- command_facts says of one command, with the numbers the metrics count by.
-- version: 0030
CREATE OR REPLACE FUNCTION builtin_fact_times(signal bigint)
RETURNS TABLE (label text, fact_at timestamptz, seq bigint)
LANGUAGE sql STABLE AS $$
SELECT twin_persisted(), b.committed_at, r.seq
FROM command_responses r
CROSS JOIN LATERAL (SELECT x.committed_at FROM ledger_batches x WHERE x.id = r.batch_id AND x.step = 'apply_twin'
                    LIMIT 1) b
WHERE r.signal_id = builtin_fact_times.signal AND r.event_id IS NOT NULL
UNION ALL
SELECT search_persisted(), mb.committed_at, m.seq
FROM command_responses r
JOIN signals s ON s.id = r.signal_id
CROSS JOIN LATERAL covering_search_mark(s.thing_id, r.revision) m
CROSS JOIN LATERAL (SELECT x.committed_at FROM ledger_batches x WHERE x.id = m.batch_id LIMIT 1) mb
WHERE r.signal_id = builtin_fact_times.signal AND r.event_id IS NOT NULL
$$;

-- name: counted_in_time
-- Whether a decision counted a built-in label in time, as it wrote it: the label's entry 2xx, or,
-- where it wrote none (the built-in shortcut's plain response), its answer 2xx. A fact of such a
-- label cannot be late for that attempt.
-- version: 0025
CREATE OR REPLACE FUNCTION counted_in_time(ack_statuses jsonb, status smallint, label text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT COALESCE((ack_statuses ->> label)::int, status) BETWEEN 200 AND 299
$$;

-- name: awaits_builtin_facts
-- Whether a decision may have a built-in fact still to come that is late for it: it did not count
-- twin-persisted or search-persisted in time (counted_in_time; whether the attempt requested the
-- label is late_builtin_acks' to say). Few: a request decided by its deadline, or a failure.
-- version: 0025
CREATE OR REPLACE FUNCTION awaits_builtin_facts(ack_statuses jsonb, status smallint) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT NOT (counted_in_time(ack_statuses, status, twin_persisted())
            AND counted_in_time(ack_statuses, status, search_persisted()))
$$;

-- name: late_builtin_acks
-- One signal's built-in acks that are late for an attempt that requested them (builtin_disposition,
-- as builtin_acks and report late-acks derive them), with the fact numbers of the two rows that
-- made each late: its attempt's decision and its fact. Its attempts: signal_attempts (#148).
-- OFFSET 0 keeps it one signal's look-ups by its keys where it is inlined: pulled up into a
-- caller that reads thousands, the planner hashed signals and request_results whole.
-- version: 0036
CREATE OR REPLACE FUNCTION late_builtin_acks(signal bigint)
RETURNS TABLE (attempt integer, label text, decided_seq bigint, fact_seq bigint)
LANGUAGE sql STABLE AS $$
SELECT a.attempt, f.label, r.seq, f.seq
FROM builtin_fact_times(late_builtin_acks.signal) f
JOIN signal_attempts a ON a.signal_id = late_builtin_acks.signal AND f.label = ANY (a.requested_acks)
JOIN request_results r ON r.signal_id = a.signal_id AND r.attempt = a.attempt
WHERE builtin_disposition(f.fact_at, a.opened_at, a.deadline_at, r.decided_at, r.cause, a.next_opened_at) = 'late'
OFFSET 0
$$;

-- name: builtin_facts_to_come
-- The built-in labels an attempt requested whose fact may still come after fact number ``upto``:
-- none is numbered up to it, and the command was not answered without a change or with an error
-- (then no fact ever comes); none for an attempt that is gone. What the seal keeps a decided
-- attempt for in metric_awaited_facts, and forgets it by. A table, so a statement inlines it and
-- plans it with its own rows (a boolean function of a sub-select is a call per row: 29 µs). The
-- attempt: signal_attempts (decisions #148).
-- version: 0036
CREATE OR REPLACE FUNCTION builtin_facts_to_come(signal bigint, attempt integer, upto bigint)
RETURNS TABLE (label text)
LANGUAGE sql STABLE AS $$
SELECT q.label
FROM signal_attempts a CROSS JOIN LATERAL unnest(a.requested_acks) AS q(label)
WHERE a.signal_id = builtin_facts_to_come.signal AND a.attempt = builtin_facts_to_come.attempt
  AND q.label IN (twin_persisted(), search_persisted())
  AND NOT EXISTS (SELECT FROM builtin_fact_times(a.signal_id) f
                  WHERE f.label = q.label AND f.seq <= builtin_facts_to_come.upto)
  AND NOT EXISTS (SELECT FROM command_responses r
                  WHERE r.signal_id = a.signal_id AND r.seq <= builtin_facts_to_come.upto
                    AND (r.event_id IS NULL OR r.is_error))
$$;

-- name: metric_facts
-- What the facts numbered (after_seq, upto_seq] add to each counter (upto_seq NULL: no bound),
-- per metric, source and labels: signals stored (channel); attempts decided (status class)
-- and their received → decided latency (a bucket count per ``le``, and the sum); settlements
-- carried out (decision, as what), and with them their decisions, dead letters and the decided →
-- carried out latency; weak acks; late acks, as report late-acks lists them — stored late; counted
-- but after the deadline of an attempt its deadline decided (decided_disposition), counted with
-- that decision; built-in facts late for their attempt (late_builtin_acks), counted with whichever
-- of the attempt's decision and the fact is numbered last (a deadline's or error's decision after
-- the fact, or a fact after its attempt was decided) — so each once. A fact after its decision
-- is looked for from the interval's built-in facts (its twin responses, its search marks) among
-- the decisions that did not count a built-in label: those sealed before whose facts were still
-- to come (metric_awaited_facts, kept by the seal), probed by the new facts' signals and things
-- (an array of them, so the plan is index probes however many wait: a join's planner would hash
-- and scan the awaited attempts, 200 000 of them when the apply step falls behind), and this
-- interval's own — so the cost follows the new facts, never the awaited set or every command.
-- Each fact is read through its table's index on seq; a row's source through its signal's key,
-- one look-up each (LATERAL ... LIMIT 1): a scrape's planner cannot know how few facts follow the
-- last seal, and would guess a third of each table and join it whole. An attempt's deadline:
-- signal_attempts (decisions #148).
-- version: 0036
CREATE OR REPLACE FUNCTION metric_facts(after_seq bigint, upto_seq bigint)
RETURNS TABLE (metric text, source text, label text, detail text, value float8)
LANGUAGE sql STABLE AS $$
WITH received AS (
    SELECT s.source, s.channel, count(*) AS n FROM signals s
    WHERE s.seq > after_seq AND (upto_seq IS NULL OR s.seq <= upto_seq)
    GROUP BY s.source, s.channel
), decided AS (
    SELECT s.source, r.status, r.cause, r.signal_id, r.attempt, r.seq,
           awaits_builtin_facts(r.ack_statuses, r.status) AS awaits,
           extract(epoch FROM r.decided_at - s.received_at)::float8 AS seconds
    FROM request_results r CROSS JOIN LATERAL (SELECT x.source, x.received_at FROM signals x
                                               WHERE x.id = r.signal_id LIMIT 1) s
    WHERE r.seq > after_seq AND (upto_seq IS NULL OR r.seq <= upto_seq)
), carried AS (
    SELECT s.source, st.decision, COALESCE(st.carried_out_as, st.decision) AS carried_out_as,
           extract(epoch FROM st.carried_out_at - r.decided_at)::float8 AS seconds
    FROM settlements st
    CROSS JOIN LATERAL (SELECT x.source FROM signals x WHERE x.id = st.signal_id LIMIT 1) s
    CROSS JOIN LATERAL (SELECT x.decided_at FROM request_results x
                        WHERE x.signal_id = st.signal_id AND x.attempt = st.attempt LIMIT 1) r
    WHERE st.seq > after_seq AND (upto_seq IS NULL OR st.seq <= upto_seq)
), acked AS (
    SELECT s.source, k.weak, k.disposition
    FROM acks k CROSS JOIN LATERAL (SELECT x.source FROM signals x WHERE x.id = k.signal_id LIMIT 1) s
    WHERE k.seq > after_seq AND (upto_seq IS NULL OR k.seq <= upto_seq)
), late_when_decided AS (
    SELECT d.source, count(*) AS n FROM decided d
    CROSS JOIN LATERAL (SELECT x.deadline_at FROM signal_attempts x
                        WHERE x.signal_id = d.signal_id AND x.attempt = d.attempt LIMIT 1) a
    CROSS JOIN LATERAL (SELECT x.received_at FROM acks x WHERE x.signal_id = d.signal_id AND x.attempt = d.attempt
                          AND x.disposition = counted() OFFSET 0) k
    WHERE judged_by_deadline(d.cause) AND decided_disposition(counted(), k.received_at, a.deadline_at, d.cause) = 'late'
    GROUP BY d.source
), late_builtin AS (
    SELECT d.source, count(*) AS n FROM decided d
    CROSS JOIN LATERAL late_builtin_acks(d.signal_id) l
    WHERE judged_by_deadline(d.cause) AND l.attempt = d.attempt AND l.fact_seq < d.seq
    GROUP BY d.source
    UNION ALL
    SELECT s.source, count(*)
    FROM (SELECT w.signal_id FROM metric_awaited_facts w
          WHERE w.signal_id = ANY (ARRAY(SELECT r.signal_id FROM command_responses r
                                         WHERE r.seq > after_seq AND (upto_seq IS NULL OR r.seq <= upto_seq)
                                           AND r.event_id IS NOT NULL))
             OR w.thing_id = ANY (ARRAY(SELECT m.thing_id FROM search_marks m
                                        WHERE m.seq > after_seq AND (upto_seq IS NULL OR m.seq <= upto_seq)))
          UNION
          SELECT d.signal_id FROM decided d WHERE d.awaits) c
    CROSS JOIN LATERAL (SELECT x.source FROM signals x WHERE x.id = c.signal_id LIMIT 1) s
    CROSS JOIN LATERAL late_builtin_acks(c.signal_id) l
    WHERE l.fact_seq > after_seq AND (upto_seq IS NULL OR l.fact_seq <= upto_seq) AND l.decided_seq < l.fact_seq
    GROUP BY s.source
)
SELECT 'signals_stored', x.source, x.channel, '', x.n::float8 FROM received x
UNION ALL
SELECT 'requests_decided', d.source, status_class(d.status), '', count(*)::float8 FROM decided d GROUP BY 2, 3
UNION ALL
SELECT 'received_to_decided_bucket', d.source, latency_bucket(d.seconds), '', count(*)::float8 FROM decided d GROUP BY 2, 3
UNION ALL
SELECT 'received_to_decided_sum', d.source, '', '', sum(d.seconds) FROM decided d GROUP BY 2
UNION ALL
SELECT 'settlements_carried_out', c.source, c.decision, c.carried_out_as, count(*)::float8 FROM carried c GROUP BY 2, 3, 4
UNION ALL
SELECT 'settlement_decisions', c.source, c.decision, '', count(*)::float8 FROM carried c GROUP BY 2, 3
UNION ALL
SELECT 'dead_letters', c.source, '', '', count(*)::float8 FROM carried c WHERE c.carried_out_as = 'dead-letter' GROUP BY 2
UNION ALL
SELECT 'decided_to_carried_out_bucket', c.source, latency_bucket(c.seconds), '', count(*)::float8 FROM carried c GROUP BY 2, 3
UNION ALL
SELECT 'decided_to_carried_out_sum', c.source, '', '', sum(c.seconds) FROM carried c GROUP BY 2
UNION ALL
SELECT 'weak_acks', k.source, '', '', count(*)::float8 FROM acked k WHERE k.weak GROUP BY 2
UNION ALL
SELECT 'late_acks', k.source, '', '', count(*)::float8 FROM acked k WHERE k.disposition = 'late' GROUP BY 2
UNION ALL
SELECT 'late_acks', l.source, '', '', l.n::float8 FROM late_when_decided l
UNION ALL
SELECT 'late_acks', l.source, '', '', l.n::float8 FROM late_builtin l
$$;

-- name: ledger_counters
-- Every counter as a scrape reads it: what the seals cover, what came after the last seal, and
-- the settlement decisions not carried out yet (unnumbered until they are; their partial index).
-- A view, so the reporter reads it without reading the queues and totals behind it. The last
-- seal's position is read once (a column, not a call per row of the index's recheck).
-- version: 0021
CREATE OR REPLACE VIEW ledger_counters (metric, source, label, detail, value) AS
SELECT c.metric, c.source, c.label, c.detail, sum(c.value)
FROM (SELECT t.metric, t.source, t.label, t.detail, t.value FROM metric_totals t
      UNION ALL
      SELECT f.metric, f.source, f.label, f.detail, f.value
      FROM (SELECT sealed_upto() AS upto OFFSET 0) sealed CROSS JOIN LATERAL metric_facts(sealed.upto, NULL) f
      UNION ALL
      SELECT 'settlement_decisions', s.source, st.decision, '', count(*)::float8
      FROM settlements st JOIN signals s ON s.id = st.signal_id
      WHERE st.carried_out_at IS NULL GROUP BY 2, 3) c
GROUP BY c.metric, c.source, c.label, c.detail;

-- name: ledger_gauges
-- Every gauge as a scrape reads it, and the Ledger page's health strip: the work queues, and the
-- signals waiting in any of them (each once); per source the oldest undecided and oldest unsettled
-- signal's age (a connection's message is unsettled until its settlement is carried out, the
-- API's until decided: signal_state) and how many of a connection's held messages are undecided;
-- per connection when its connector last said it runs (connector_seen) and since when it cannot
-- reach its broker, or when it stopped cleanly (connector_stopped: then no word of its running is
-- served, so no reader takes it for down); each step's last run, the last whole pass (its seal step), the gate's last run
-- and whether it failed; the last seal and the facts after it; the last archive and the oldest
-- signal still hot. Each read by a queue, a key or an index; the connections are the ledger's few.
-- version: 0025
CREATE OR REPLACE VIEW ledger_gauges (metric, label, value) AS
WITH RECURSIVE steps (step) AS (
    SELECT min(step) FROM pipeline_runs
    UNION ALL
    SELECT (SELECT min(p.step) FROM pipeline_runs p WHERE p.step > steps.step) FROM steps WHERE steps.step IS NOT NULL
), last_runs AS (
    SELECT steps.step, r.finished_at, r.stats FROM steps
    CROSS JOIN LATERAL (SELECT p.finished_at, p.stats FROM pipeline_runs p WHERE p.step = steps.step
                        ORDER BY p.id DESC LIMIT 1) r
    WHERE steps.step IS NOT NULL
), open_work AS (
    SELECT q.signal_id, true AS undecided FROM queue_decide q
    UNION ALL SELECT v.signal_id, false FROM awaiting_validation() v
    UNION ALL SELECT q.signal_id, false FROM queue_settle q
    UNION ALL SELECT st.signal_id, false FROM settlements st WHERE st.carried_out_at IS NULL
), per_source AS (
    SELECT s.source, min(s.received_at) FILTER (WHERE w.undecided) AS oldest_undecided,
           min(s.received_at) AS oldest_unsettled,
           count(*) FILTER (WHERE w.undecided AND needs_transport_settlement(s.api, s.source)) AS held_undecided,
           bool_or(needs_transport_settlement(s.api, s.source)) AS from_connection
    FROM open_work w JOIN signals s ON s.id = w.signal_id
    WHERE w.undecided OR needs_transport_settlement(s.api, s.source)
    GROUP BY s.source
), last_seal AS (
    SELECT x.number, x.sealed_at FROM seals x WHERE x.number = (SELECT max(y.number) FROM seals y)
)
SELECT 'signals_pending', '', count(DISTINCT w.signal_id)::float8
FROM (SELECT o.signal_id FROM open_work o UNION ALL SELECT q.signal_id FROM queue_apply q) w
UNION ALL
SELECT 'queue_pending', q.queue, q.n::float8 FROM (
    SELECT 'apply' AS queue, count(*) AS n FROM queue_apply
    UNION ALL SELECT 'index', count(*) FROM queue_index
    UNION ALL SELECT 'decide', count(*) FROM queue_decide
    UNION ALL SELECT 'validate', count(*) FROM awaiting_validation()
    UNION ALL SELECT 'settle', count(*) FROM queue_settle
    UNION ALL SELECT 'carry_out', count(*) FROM settlements WHERE carried_out_at IS NULL) q
UNION ALL
SELECT g.metric, p.source, g.value FROM per_source p
CROSS JOIN LATERAL (VALUES ('oldest_undecided_age_seconds', extract(epoch FROM now() - p.oldest_undecided)::float8),
                           ('oldest_unsettled_age_seconds', extract(epoch FROM now() - p.oldest_unsettled)::float8),
                           ('held_undecided', CASE WHEN p.from_connection THEN p.held_undecided::float8 END)) g(metric, value)
WHERE g.value IS NOT NULL
UNION ALL
SELECT g.metric, c.id, g.value FROM connections c
CROSS JOIN LATERAL (VALUES ('connector_last_seen_timestamp_seconds',
                            CASE WHEN c.stopped_at IS NULL THEN extract(epoch FROM c.seen_at)::float8 END),
                           ('connector_broker_out_since_timestamp_seconds',
                            extract(epoch FROM c.broker_out_since)::float8),
                           ('connector_stopped_timestamp_seconds', extract(epoch FROM c.stopped_at)::float8)) g(metric, value)
WHERE c.seen_at IS NOT NULL AND g.value IS NOT NULL
UNION ALL
SELECT 'step_last_duration_seconds', r.step, (r.stats ->> 'seconds')::float8 FROM last_runs r
WHERE jsonb_typeof(r.stats -> 'seconds') = 'number'
UNION ALL
SELECT 'step_last_finished_timestamp_seconds', r.step, extract(epoch FROM r.finished_at)::float8 FROM last_runs r
WHERE r.finished_at IS NOT NULL
UNION ALL
SELECT 'pipeline_last_success_timestamp_seconds', '', extract(epoch FROM r.finished_at)::float8 FROM last_runs r
WHERE r.step = 'seal' AND r.finished_at IS NOT NULL
UNION ALL
SELECT 'validation_last_timestamp_seconds', '', extract(epoch FROM r.finished_at)::float8 FROM last_runs r
WHERE r.step = 'validate' AND r.finished_at IS NOT NULL
UNION ALL
SELECT 'validation_failed', '', CASE WHEN r.stats ? 'failures' THEN 1 ELSE 0 END FROM last_runs r WHERE r.step = 'validate'
UNION ALL
SELECT 'seal_last_number', '', COALESCE((SELECT l.number FROM last_seal l), 0)::float8
UNION ALL
SELECT 'seal_last_timestamp_seconds', '', extract(epoch FROM l.sealed_at)::float8 FROM last_seal l
UNION ALL
SELECT 'facts_unsealed', '', c.n::float8
FROM (SELECT sealed_upto() AS upto OFFSET 0) sealed
CROSS JOIN LATERAL (SELECT count(*) AS n FROM fact_leaves l WHERE l.seq > sealed.upto) c
UNION ALL
SELECT 'archive_last_timestamp_seconds', '', extract(epoch FROM a.archived_at)::float8
FROM archives a WHERE a.number = (SELECT max(x.number) FROM archives x)
UNION ALL
SELECT 'oldest_hot_signal_timestamp_seconds', '', extract(epoch FROM o.received_at)::float8
FROM signals o WHERE o.id = (SELECT min(x.id) FROM signals x);
