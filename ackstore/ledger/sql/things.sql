-- Statements that read the twins as the pipeline applied them (ackstore/ledger/things.py): the
-- HTTP API's GET and its search's items. A deleted thing keeps its revision, its document NULL.

-- name: state
SELECT t.revision, t.document, t.updated_at FROM things t WHERE t.thing_id = :thing_id

-- name: documents
-- The documents of the things a search found, in no order (the caller keeps the search's).
SELECT t.thing_id, t.revision, t.document, t.updated_at FROM things t
WHERE t.thing_id = ANY (CAST(:thing_ids AS text[])) AND t.document IS NOT NULL

-- name: events_after
-- The twin events after a position of the event log, oldest first, at most :limit: what an SSE
-- stream sends next (by the unique index on command_responses.event_id, never the whole log).
SELECT e.id, e.thing_id, e.action, e.path, e.value FROM thing_events e
WHERE e.id > :position ORDER BY e.id LIMIT :limit

-- name: last_event
-- Where the event log ends now: a new SSE stream starts there.
SELECT COALESCE(max(r.event_id), 0) FROM command_responses r
