-- What the tables' declarations (ackstore/ledger/schema.py) cannot say, as the migrations leave it.

-- name: statistics
-- A result's jsonb columns keep no statistics: nothing is planned on their values, and they made
-- an ANALYZE of request_results 3x slower (migration 0008).
ALTER TABLE request_results ALTER COLUMN body SET STATISTICS 0, ALTER COLUMN headers SET STATISTICS 0,
                            ALTER COLUMN ack_statuses SET STATISTICS 0
