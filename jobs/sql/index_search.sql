-- Statements of the index_search job. Bind parameters: :run_id, :batch_id; :partition, :partitions.

-- name: changed
-- Things queued since their last indexing whose revision is newer than the index's watermark, of
-- one partition of the things (:partition of :partitions, by a hash of the thing's id): what one
-- Spark task indexes. md5 of jsonb's normalised text is the digest.
SELECT t.thing_id, split_part(t.thing_id, ':', 1) AS namespace,
       COALESCE(w.revision, 0) AS old_revision, t.revision,
       COALESCE(md5(t.document::text), '') AS digest, t.document IS NOT NULL AS present,
       COALESCE(md5(t.document::text), '') <> COALESCE(w.digest, '') AS changed,
       t.document::text AS document
FROM queue_index q
JOIN things t ON t.thing_id = q.thing_id
LEFT JOIN search_things w ON w.thing_id = t.thing_id
WHERE (w.thing_id IS NULL OR w.revision < t.revision)
  AND mod(hashtext(t.thing_id) & 2147483647, :partitions) = :partition

-- name: pending_count
-- How many things wait for the index (NULL: none).
SELECT NULLIF(count(*), 0) FROM queue_index q

-- name: staged
SELECT count(*) FROM stage_search_things WHERE run_id = :run_id

-- name: insert_watermarks
INSERT INTO search_things (thing_id, namespace, revision, digest, present, indexed_at)
SELECT st.thing_id, st.namespace, st.revision, st.digest, st.present, now()
FROM stage_search_things st
WHERE st.run_id = :run_id AND st.old_revision = 0
ON CONFLICT (thing_id) DO NOTHING

-- name: advance_watermarks
-- A compare-and-set per thing: only from the revision the read saw.
UPDATE search_things w
SET revision = st.revision, digest = st.digest, present = st.present, indexed_at = now()
FROM stage_search_things st
WHERE st.run_id = :run_id AND st.old_revision > 0
  AND w.thing_id = st.thing_id AND w.revision = st.old_revision

-- name: delete_rows
DELETE FROM search_index si
USING stage_search_things st
WHERE st.run_id = :run_id AND st.changed AND si.thing_id = st.thing_id

-- name: insert_rows
INSERT INTO search_index (thing_id, path, ordinal, value_type, value_text, value_number, value_bool, empty, revision)
SELECT r.thing_id, r.path, r.ordinal, r.value_type, r.value_text, CAST(r.value_number AS numeric),
       r.value_bool, r.empty, r.revision
FROM stage_search_rows r
WHERE r.run_id = :run_id

-- name: dequeue
-- Things now indexed at (or past) the revision they were queued for leave the queue; a thing
-- changed again meanwhile stays, with its newer revision.
DELETE FROM queue_index q
USING search_things w
WHERE w.thing_id = q.thing_id AND q.revision <= w.revision

-- name: insert_marks
-- One mark per indexed thing: the revisions the index reached in this batch. search-persisted
-- of every command in that range is derived from it (ackstore/ledger/sql/objects/builtin_facts.sql): 204
-- when the index was written, a weak 200 when it already held this state (B.11).
INSERT INTO search_marks (thing_id, from_revision, to_revision, batch_id, changed)
SELECT st.thing_id, st.old_revision, st.revision, :batch_id, st.changed
FROM stage_search_things st
WHERE st.run_id = :run_id

-- name: clear_staging
TRUNCATE stage_search_things, stage_search_rows
