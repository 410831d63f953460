-- Statements of subscriber declarations (ackstore/ledger/declarations.py). Bind parameters:
-- :subscriber, :labels, and a subscriber row's columns.
-- A holder is a group of subscribers ("subscriber:<id>" or "connection:<id>"); it owns labels.

-- name: declare
-- The subscriber and its group's labels (the function declare_subscriber): false for the 409,
-- NULL for the 403 (another login's subscriber).
SELECT declare_subscriber(:subscriber, :connection_id, :filter, CAST(:namespaces AS text[]),
                          CAST(:channels AS text[]), CAST(:labels AS text[]))


-- name: labels_declared_by
-- The labels a subscriber may issue acks for: its group's.
SELECT d.label FROM declared_labels d JOIN subscribers s ON s.holder = d.holder WHERE s.id = :subscriber

-- name: channels_of
-- The channels a subscriber receives (NULL: no such subscriber).
SELECT s.channels FROM subscribers s WHERE s.id = :subscriber

-- name: may_act_for
-- Whether this session's login may act as the subscriber (the function may_act_for, decisions #97).
SELECT may_act_for(:subscriber)

-- name: may_act_for_connection
-- Whether this session's login is the connection's (the function may_act_for_connection, issue 37).
SELECT may_act_for_connection(:connection)

-- name: claim_connection
-- Whether the connection is this login's: reserved for it, claimed before, or claimed now by a
-- login that may reserve (the function claim_connection, issue 50).
SELECT claim_connection(:connection)

-- name: reserve_connection
-- An operator's grant of the connection to a login (the function reserve_connection, issue 50):
-- the connection's owner afterwards.
SELECT reserve_connection(:connection, :login)
