-- Statements that read the twins as the pipeline applied them (ackstore/ledger/things.py): the
-- HTTP API's GET and its search's items. A deleted thing keeps its revision, its document NULL.

-- name: state
SELECT t.revision, t.document FROM things t WHERE t.thing_id = :thing_id

-- name: documents
-- The documents of the things a search found, in no order (the caller keeps the search's).
SELECT t.thing_id, t.revision, t.document FROM things t
WHERE t.thing_id = ANY (CAST(:thing_ids AS text[])) AND t.document IS NOT NULL
