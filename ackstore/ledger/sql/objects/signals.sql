-- Signals: a stored signal never changes (its checkpoints are rows of other tables).

-- name: ackstore_refuse_change
-- Refuses any change of a row of the table it guards: signals never change after ingestion.
-- version: 0006
CREATE OR REPLACE FUNCTION ackstore_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'ackstore: % rows are immutable', TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
END $$;

-- name: signals_are_immutable
-- Signals are immutable (migration 0006): a row lock's UPDATE privilege lets nobody change one.
-- version: 0006
CREATE OR REPLACE TRIGGER signals_are_immutable BEFORE UPDATE ON signals FOR EACH ROW EXECUTE FUNCTION ackstore_refuse_change();

-- name: acks_keep_their_facts
-- An ack is a fact as it arrived (migration 0014): its signal, attempt, label, status, payload,
-- headers, issuer, weak mark, time and reason never change, whoever writes — only its
-- disposition does (the sweep flags a counted ack that came too late). A role's UPDATE grant on
-- acks cannot forge what a subscriber said.
-- version: 0014
CREATE OR REPLACE TRIGGER acks_keep_their_facts
BEFORE UPDATE OF id, signal_id, attempt, label, status, payload, headers, issuer, weak, received_at, reason ON acks
FOR EACH ROW EXECUTE FUNCTION ackstore_refuse_change();
