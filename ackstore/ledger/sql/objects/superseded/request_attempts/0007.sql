-- request_attempts as migration 0007 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE VIEW request_attempts AS
SELECT s.id AS signal_id, 1 AS attempt, s.requested_acks, s.received_at AS opened_at, s.deadline_at
FROM signals s
UNION ALL
SELECT a.signal_id, a.attempt, a.requested_acks, a.opened_at, a.deadline_at
FROM attempts a;
