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
-- An ack is a fact as it arrived (migration 0014), and stays so whoever writes: since migration
-- 0018 not even its disposition changes — that a counted ack came too late is derived when its
-- request is decided (decided_disposition), so the row is final when written. A role's UPDATE
-- grant on acks cannot forge what a subscriber said.
-- version: 0018
CREATE OR REPLACE TRIGGER acks_keep_their_facts BEFORE UPDATE ON acks
FOR EACH ROW EXECUTE FUNCTION ackstore_refuse_change();

-- name: builtin_acks_only_carried
-- A built-in fact is derived, never stored as an ack (the view builtin_acks), whoever writes
-- (migration 0016): a twin-persisted or search-persisted row may only carry a row of the same
-- signal from before the lean ledger over to a later attempt (what was persisted stays
-- persisted, A.2.10), the same issuer and status. Otherwise a login could tell a requester its
-- applied command failed.
-- version: 0016
CREATE OR REPLACE FUNCTION builtin_acks_only_carried() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.label IN (twin_persisted(), search_persisted())
     AND NOT EXISTS (SELECT FROM acks a WHERE a.signal_id = NEW.signal_id AND a.attempt < NEW.attempt
                                          AND a.label = NEW.label AND a.issuer = NEW.issuer AND a.status = NEW.status) THEN
    RAISE EXCEPTION 'ackstore: % is a built-in fact, derived and never stored as an ack', NEW.label
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NEW;
END $$;

-- name: acks_builtin_only_carried
-- The trigger of the function above, called only for a built-in label's row.
-- version: 0016
CREATE OR REPLACE TRIGGER acks_builtin_only_carried BEFORE INSERT ON acks
FOR EACH ROW WHEN (NEW.label IN (twin_persisted(), search_persisted())) EXECUTE FUNCTION builtin_acks_only_carried();
