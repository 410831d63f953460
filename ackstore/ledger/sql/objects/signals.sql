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
