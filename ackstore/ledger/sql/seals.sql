-- Seals (issue 28, decisions #101): sealing what was written since the last seal, and reading
-- seals back for verify, prove and the exported heads (ackstore/ledger/seals.py).

-- name: patient_lock
-- How long the seal waits for the writers in flight to end. Waiting, it holds back every new
-- writer (their numbering lock queues behind its own): a session idle in a transaction that wrote
-- a fact would otherwise stop ingestion until it ends. Past this the seal gives up for this run.
SET LOCAL lock_timeout = '5s'

-- name: position
-- The last fact number a seal may cover now (the function waits for in-flight writers).
SELECT seal_position()

-- name: one_sealer
-- One sealer at a time: a second waits for the first to commit, then finds its seal (the
-- function lock_sealer: a lock no other login may take).
SELECT lock_sealer()

-- name: sealing_settings
-- A seal sorts its interval's leaves once, in memory where it fits, and computes them on every
-- core: the planner does not see that a leaf (record_send and SHA-256, about 1.7 µs) costs far
-- more than passing it between processes, and without these would compute them on one.
SET LOCAL work_mem = '256MB';
SET LOCAL parallel_setup_cost = 0;
SET LOCAL parallel_tuple_cost = 0;
SET LOCAL min_parallel_table_scan_size = 0

-- name: one_core
-- An early seal (jobs/seal.py) runs beside a pipeline step that keeps one core busy: parallel
-- workers would only take that step's core.
SET LOCAL max_parallel_workers_per_gather = 0

-- name: latest
-- The newest seal, if any.
SELECT number, after_seq, upto_seq, counts, leaves, root, previous, hash, sealed_at
FROM seals WHERE number = (SELECT max(number) FROM seals)

-- name: leaves_in_order
-- The leaf hashes of the facts numbered (after_seq, upto_seq], in number order (then table and
-- leaf, should a writer have reused a number), as a binary COPY: the leaves are computed by
-- parallel workers and sorted once (ackstore.ledger.seals reads them; COPY takes no bind
-- parameters, so the driver binds these as it binds every statement's).
COPY (SELECT l.leaf FROM fact_leaves l WHERE l.seq > %(after_seq)s AND l.seq <= %(upto_seq)s
      ORDER BY l.seq, l.fact_table, l.leaf) TO STDOUT (FORMAT binary)

-- name: counts
-- How many facts of each table are numbered (after_seq, upto_seq] (no leaf computed).
SELECT l.fact_table, count(*) AS facts FROM fact_leaves l
WHERE l.seq > :after_seq AND l.seq <= :upto_seq GROUP BY l.fact_table

-- name: roll_up_without_jit
-- The roll-up's plan is large and runs once, over a pass's facts: JIT spent 1.6 s compiling what
-- then ran in 0.4 s (100 000 commands; issue 50), as it did a scrape's (ackstore.ledger.metrics).
-- After the leaves, which are the seal's own work: only the roll-up and what follows go without it.
SET LOCAL jit = off

-- name: roll_up_metrics
-- What the facts numbered (after_seq, upto_seq] add to the counters (metric_facts), added to the
-- totals in the seal's transaction: the totals are always those of the facts the seals cover. A
-- source past the first :cap connections is added to 'other' (metric_sources, decisions #127), so
-- the totals hold a row per metric of at most that many sources.
INSERT INTO metric_totals (metric, source, label, detail, value)
SELECT f.metric, COALESCE(k.source, 'other'), f.label, f.detail, sum(f.value)
FROM metric_facts(:after_seq, :upto_seq) f LEFT JOIN metric_sources(:cap) k ON k.source = f.source
GROUP BY 1, 2, 3, 4
ON CONFLICT (metric, source, label, detail) DO UPDATE SET value = metric_totals.value + EXCLUDED.value

-- name: forget_awaited_facts
-- The awaited attempts whose built-in facts can no longer come after upto_seq
-- (builtin_facts_to_come: each label's fact is sealed, or the command answered without a change),
-- looked for from the facts sealed now — the signals answered and the things indexed in
-- (after_seq, upto_seq], an array of each probing the table's keys — never over every awaited
-- attempt: its cost follows the new facts. Every awaited attempt is forgotten so: its command is
-- answered by the apply step and its change indexed, facts a later seal covers.
DELETE FROM metric_awaited_facts w
WHERE (w.signal_id = ANY (ARRAY(SELECT r.signal_id FROM command_responses r
                                WHERE r.seq > :after_seq AND r.seq <= :upto_seq))
       OR w.thing_id = ANY (ARRAY(SELECT m.thing_id FROM search_marks m
                                  WHERE m.seq > :after_seq AND m.seq <= :upto_seq)))
  AND NOT EXISTS (SELECT FROM builtin_facts_to_come(w.signal_id, w.attempt, :upto_seq))

-- name: await_facts
-- The attempts decided in (after_seq, upto_seq] that did not count a built-in label and whose
-- fact may still come (builtin_facts_to_come): a fact of theirs numbered later is late for them,
-- and metric_facts looks for it among these, by its signal or its thing.
INSERT INTO metric_awaited_facts (signal_id, attempt, thing_id)
SELECT r.signal_id, r.attempt, s.thing_id FROM request_results r JOIN signals s ON s.id = r.signal_id
WHERE r.seq > :after_seq AND r.seq <= :upto_seq AND awaits_builtin_facts(r.ack_statuses, r.status)
  AND EXISTS (SELECT FROM builtin_facts_to_come(r.signal_id, r.attempt, :upto_seq))
ON CONFLICT (signal_id, attempt) DO NOTHING

-- name: store_leaves
-- A seal's leaf hashes, chunk by chunk (a binary COPY: seal, chunk, the hashes).
COPY seal_leaves (seal, chunk, leaves) FROM STDIN (FORMAT binary)

-- name: leaves
-- A seal's leaf hashes, chunk by chunk.
SELECT leaves FROM seal_leaves WHERE seal = :seal ORDER BY chunk

-- name: insert
-- A new seal.
INSERT INTO seals (number, after_seq, upto_seq, counts, leaves, root, previous, hash)
VALUES (:number, :after_seq, :upto_seq, CAST(:counts AS jsonb), :leaves, :root, :previous, :hash)
RETURNING sealed_at

-- name: between
-- The seals numbered first..last, in order.
SELECT number, after_seq, upto_seq, counts, leaves, root, previous, hash, sealed_at
FROM seals WHERE number BETWEEN :first AND :last ORDER BY number

-- name: covering
-- The seal covering fact number :seq, if it is sealed: the first reaching up to it.
SELECT number, after_seq, upto_seq, counts, leaves, root, previous, hash, sealed_at
FROM seals WHERE upto_seq >= :seq ORDER BY upto_seq LIMIT 1

-- name: facts_of_signal
-- The facts of the signal with :correlation_id, by table and number (the function signal_facts),
-- in the order they were numbered, a settlement not yet final (no number) last: prove prints them so.
SELECT f.fact_table, f.seq FROM signals s CROSS JOIN LATERAL signal_facts(s.id) f
WHERE s.correlation_id = :correlation_id
ORDER BY f.seq NULLS LAST, f.fact_table
