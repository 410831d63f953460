-- current_attempts as migration 0032 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE VIEW current_attempts AS
SELECT a.signal_id, a.attempt, a.requested_acks, a.opened_at, a.deadline_at
FROM attempts a
WHERE NOT EXISTS (SELECT 1 FROM attempts later
                  WHERE later.signal_id = a.signal_id AND redelivery_attempt(later.attempt)
                    AND later.attempt > a.attempt);
