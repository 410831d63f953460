-- Archive lookups (ackstore/ledger/archive_lookups.py, decisions #103): what a reading that reaches into the
-- archive needs of the hot ledger, and how the private database it loads takes the rows.

-- name: archived_horizon
-- Whether anything is archived, and the last time a signal archived was received.
SELECT count(*) AS archives, max(received_upto) AS received_upto FROM archives

-- name: locations
-- Where the archives are, each root once.
SELECT DISTINCT location FROM archives ORDER BY location

-- name: passes
-- The validation passes from the first that may have passed batch :first up to the one that
-- passed batch :last (the first at or after it).
SELECT p.* FROM validation_passes p
WHERE p.results_upto >= :first
  AND p.results_upto <= COALESCE((SELECT min(q.results_upto) FROM validation_passes q WHERE q.results_upto >= :last),
                                 9223372036854775807)

-- name: as_loaded
-- The private database takes the rows as the ledger held them: numbered already, with their
-- checks made when they were written (no trigger, no foreign key: a shared batch may come
-- without the signals of other windows that reference it).
SET LOCAL session_replication_role = replica

-- name: seq_of
-- A signal's own fact number (the row `show` prints leaves it out).
SELECT seq FROM signals WHERE id = :signal_id

-- name: archived_in
-- The seal that holds fact :seq and the archive that holds that seal, when it is archived.
SELECT z.number AS seal, encode(z.hash, 'hex') AS seal_hash, a.number AS archive, a.location, a.archived_at
FROM (SELECT s.number, s.hash, s.after_seq FROM seals s WHERE s.upto_seq >= :seq ORDER BY s.upto_seq LIMIT 1) z
JOIN archives a ON z.number BETWEEN a.first_seal AND a.last_seal
WHERE z.after_seq < :seq

-- name: marks
-- Per thing, the search marks that indexed a revision in [low, high]: those ending below high,
-- and the first ending at or after it (archive_lookups.covers says the same of archived marks). Two
-- ranges of the primary key per thing: never a thing's whole history of marks.
SELECT m.thing_id, m.from_revision, m.to_revision, m.batch_id, m.changed, m.seq
FROM unnest(CAST(:things AS text[]), CAST(:low AS bigint[]), CAST(:high AS bigint[])) AS v(thing_id, low, high)
CROSS JOIN LATERAL (
    (SELECT k.* FROM search_marks k WHERE k.thing_id = v.thing_id AND k.to_revision >= v.low AND k.to_revision < v.high)
    UNION ALL
    (SELECT k.* FROM search_marks k WHERE k.thing_id = v.thing_id AND k.to_revision >= v.high
     ORDER BY k.to_revision LIMIT 1)
) m
