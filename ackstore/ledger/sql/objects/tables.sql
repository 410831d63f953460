-- What the tables' declarations (ackstore/ledger/schema.py) cannot say, as the migrations leave it.

-- name: statistics
-- A result's jsonb columns keep no statistics: nothing is planned on their values, and they made
-- an ANALYZE of request_results 3x slower (migration 0008).
ALTER TABLE request_results ALTER COLUMN body SET STATISTICS 0, ALTER COLUMN headers SET STATISTICS 0,
                            ALTER COLUMN ack_statuses SET STATISTICS 0


-- name: lock_rows
-- The rows of the locks (sql/objects/locking.sql, migration 0020): a bucket per 65 536th of the
-- things' hashes, and the named locks ('step:<name>' rows are added by the first lock_step).
INSERT INTO thing_locks (bucket) SELECT generate_series(0, 65535) ON CONFLICT DO NOTHING;
INSERT INTO ledger_locks (name) VALUES ('declare'), ('facts'), ('seal') ON CONFLICT DO NOTHING
