-- Statements of subscriber declarations (ackstore/ledger/declarations.py). Bind parameters:
-- :subscriber, :holder, :labels, and a subscriber row's columns.
-- A holder is a group of subscribers ("subscriber:<id>" or "connection:<id>"); it owns labels.

-- name: lock
-- Declarations are rare; one lock makes the uniqueness check and the write atomic.
SELECT pg_advisory_xact_lock(hashtext('ackstore.declare'))

-- name: others_in_group
-- How many other subscribers share the holder (they must declare the same labels).
SELECT count(*) FROM subscribers s WHERE s.holder = :holder AND s.id <> :subscriber

-- name: group_labels
-- The labels a holder owns.
SELECT d.label FROM declared_labels d WHERE d.holder = :holder

-- name: labels_taken
-- How many of the labels another holder owns.
SELECT count(*) FROM declared_labels d
WHERE d.label = ANY (CAST(:labels AS text[])) AND d.holder <> :holder

-- name: holder_of
-- The holder a subscriber belongs to now (NULL: a new subscriber).
SELECT s.holder FROM subscribers s WHERE s.id = :subscriber

-- name: upsert_subscriber
-- The subscriber as declared. A new one starts at the end of the event log, as a new
-- subscription does; a declared one keeps its position.
INSERT INTO subscribers (id, holder, connection_id, filter, namespaces, channels, event_position)
VALUES (:subscriber, :holder, :connection_id, :filter, CAST(:namespaces AS text[]), CAST(:channels AS text[]),
        (SELECT COALESCE(max(r.event_id), 0) FROM command_responses r))
ON CONFLICT (id) DO UPDATE
SET holder = EXCLUDED.holder, connection_id = EXCLUDED.connection_id, filter = EXCLUDED.filter,
    namespaces = EXCLUDED.namespaces, channels = EXCLUDED.channels, declared_at = now()

-- name: release_orphaned_labels
-- A group nobody belongs to any more holds no labels.
DELETE FROM declared_labels d
WHERE d.holder = :holder AND NOT EXISTS (SELECT 1 FROM subscribers s WHERE s.holder = :holder)

-- name: drop_undeclared
-- The holder's labels that are no longer declared.
DELETE FROM declared_labels d WHERE d.holder = :holder AND d.label <> ALL (CAST(:labels AS text[]))

-- name: declare_labels
INSERT INTO declared_labels (label, holder)
SELECT l.label, :holder FROM unnest(CAST(:labels AS text[])) AS l(label)
ON CONFLICT (label) DO NOTHING

-- name: labels_declared_by
-- The labels a subscriber may issue acks for: its group's.
SELECT d.label FROM declared_labels d JOIN subscribers s ON s.holder = d.holder WHERE s.id = :subscriber

-- name: channels_of
-- The channels a subscriber receives (NULL: no such subscriber).
SELECT s.channels FROM subscribers s WHERE s.id = :subscriber
