-- The archive job (jobs/archive.py, decisions #102): which prefix of the seals may leave the hot
-- tables, and moving it out once written, read back and checked.

-- name: candidates
-- The seals after the archived prefix sealed before the retention began: one contiguous run, as
-- seals are made in time order.
SELECT min(z.number) AS first_seal, max(z.number) AS last_seal, min(z.after_seq) AS after_seq,
       max(z.upto_seq) AS upto_seq
FROM seals z
WHERE z.number > archived_through() AND z.sealed_at < now() - make_interval(secs => :retention_seconds)

-- name: blocked_from
-- The first fact number of a signal with a fact numbered (after_seq, upto_seq] that may not leave
-- yet: not settled and validated (signal_archivable), a fact not final, or one past upto_seq (its
-- facts leave together). NULL: none. The prefix must end before it. ``touched`` finds the signals
-- by their own row and the fact tables that name their signal (ackstore.ledger.schema.SIGNAL_FACT_TABLES,
-- a branch each: tests/ledger/test_migrations.py); signal_facts gives the rest of their facts.
WITH touched AS (
    SELECT s.id AS signal_id FROM signals s WHERE s.seq > :after_seq AND s.seq <= :upto_seq
    UNION SELECT a.signal_id FROM attempts a WHERE a.seq > :after_seq AND a.seq <= :upto_seq
    UNION SELECT k.signal_id FROM acks k WHERE k.seq > :after_seq AND k.seq <= :upto_seq
    UNION SELECT r.signal_id FROM command_responses r WHERE r.seq > :after_seq AND r.seq <= :upto_seq
    UNION SELECT x.signal_id FROM request_results x WHERE x.seq > :after_seq AND x.seq <= :upto_seq
    UNION SELECT st.signal_id FROM settlements st WHERE st.seq > :after_seq AND st.seq <= :upto_seq
)
SELECT min(f.first_seq)
FROM touched t
CROSS JOIN LATERAL (SELECT min(g.seq) AS first_seq, max(g.seq) AS last_seq, bool_or(g.seq IS NULL) AS unfinal
                    FROM signal_facts(t.signal_id) g) f
WHERE f.unfinal OR f.last_seq > :upto_seq OR NOT signal_archivable(t.signal_id)

-- name: prefix
-- The seals from the first not archived to the last that ends before :blocked_from.
SELECT min(z.number) AS first_seal, max(z.number) AS last_seal, min(z.after_seq) AS after_seq,
       max(z.upto_seq) AS upto_seq
FROM seals z
WHERE z.number > archived_through() AND z.number <= :last_seal AND z.upto_seq < :blocked_from

-- name: seals_of
-- The seals first..last, with the day each was sealed (its archive partition, dt=YYYY-MM-DD).
SELECT z.number, z.after_seq, z.upto_seq, z.counts, z.leaves, encode(z.root, 'hex') AS root,
       encode(z.hash, 'hex') AS hash, to_char(z.sealed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS dt
FROM seals z WHERE z.number BETWEEN :first_seal AND :last_seal ORDER BY z.number

-- name: record
-- The archive, recorded in the transaction that deletes what it holds (its number: the next).
INSERT INTO archives (number, first_seal, last_seal, after_seq, upto_seq, location, counts, received_upto)
SELECT COALESCE(max(number), 0) + 1, :first_seal, :last_seal, :after_seq, :upto_seq, :location, CAST(:counts AS jsonb),
       (SELECT max(s.received_at) FROM signals s WHERE s.seq > :after_seq AND s.seq <= :upto_seq)
FROM archives
RETURNING number

-- name: delete_leaves
-- The archived seals' leaves (the Parquet rows give them back).
DELETE FROM seal_leaves WHERE seal BETWEEN :first_seal AND :last_seal

-- name: handouts
-- How many hand-outs (deliveries) the signals numbered (after_seq, upto_seq] have: the archive
-- must hold as many when they are deleted with their signals (counted again in that transaction:
-- a hand-out made since the read-back stops it).
SELECT count(*) FROM deliveries d JOIN signals s ON s.id = d.signal_id
WHERE s.seq > :after_seq AND s.seq <= :upto_seq

