-- acks_keep_their_facts as migration 0014 defined it (superseded by migration 0018: an ack never changes: late is derived (decided_disposition), as for built-in acks).
CREATE OR REPLACE TRIGGER acks_keep_their_facts
BEFORE UPDATE OF id, signal_id, attempt, label, status, payload, headers, issuer, weak, received_at, reason ON acks
FOR EACH ROW EXECUTE FUNCTION ackstore_refuse_change();
