-- current_attempts as migration 0007 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE VIEW current_attempts AS
SELECT r.signal_id, r.attempt, r.requested_acks, r.opened_at, r.deadline_at
FROM request_attempts r
WHERE NOT EXISTS (SELECT 1 FROM attempts later WHERE later.signal_id = r.signal_id AND later.attempt > r.attempt);
