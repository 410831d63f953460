-- Archiving (issue 28, decisions #102): a prefix of the seals, once settled, validated and older
-- than the retention, is written out as Parquet, read back and checked against its seals' roots,
-- then recorded in ``archives`` and deleted from the hot tables in one transaction. A sealed row
-- may leave only so: at or below the archived prefix.

-- name: archived_upto
-- The last fact number archived: a sealed row at or below it may be deleted (and is, with it).
-- version: 0019
CREATE OR REPLACE FUNCTION archived_upto() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT COALESCE(max(upto_seq), 0) FROM archives $$;

-- name: archived_through
-- The last seal archived (0: none).
-- version: 0019
CREATE OR REPLACE FUNCTION archived_through() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT COALESCE(max(last_seal), 0) FROM archives $$;

-- name: signal_archivable
-- Whether nothing more can happen to a signal: its current attempt decided and passed by the
-- validation gate, and settled (signal_state: settled, or dead-lettered) — a redeliver decision
-- is not the end, the message comes back. Its facts may then leave the hot tables.
-- version: 0019
CREATE OR REPLACE FUNCTION signal_archivable(signal bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
SELECT COALESCE(bool_and(
         signal_state(needs_transport_settlement(s.api, s.source), c.is_error, r.status IS NOT NULL, st.decision,
                      st.carried_out_at IS NOT NULL) IN ('settled', 'dead-lettered')
         AND r.batch_id <= (SELECT COALESCE(max(w.position), 0) FROM pipeline_watermarks w
                            WHERE w.name = 'validated_results')), false)
FROM signals s
CROSS JOIN LATERAL current_attempt_of(s.id) a
LEFT JOIN request_results r ON r.signal_id = s.id AND r.attempt = a.attempt
LEFT JOIN settlements st ON st.signal_id = s.id AND st.attempt = a.attempt
LEFT JOIN command_responses c ON c.signal_id = s.id
WHERE s.id = signal
$$;

-- name: ackstore_refuse_unarchived_delete
-- Refuses a DELETE that took a sealed row not archived yet, whoever asks: checked once per
-- statement over the rows it deleted (a row trigger would cost an archive's delete of millions
-- a function call each).
-- version: 0019
CREATE OR REPLACE FUNCTION ackstore_refuse_unarchived_delete() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  kept bigint;
BEGIN
  SELECT g.seq INTO kept FROM gone g WHERE g.seq <= sealed_upto() AND g.seq > archived_upto() LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'ackstore: this % row is sealed (fact %) and not archived: it is never deleted', TG_TABLE_NAME, kept
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NULL;
END $$;

-- name: ackstore_refuse_unarchived_leaves_delete
-- The same for a seal's leaves: deleted only once their seal is archived.
-- version: 0019
CREATE OR REPLACE FUNCTION ackstore_refuse_unarchived_leaves_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT FROM gone g WHERE g.seal > archived_through()) THEN
    RAISE EXCEPTION 'ackstore: the leaves of a seal not archived are never deleted' USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NULL;
END $$;

-- name: seal_leaves_deleted_once_archived
-- The trigger of the function above.
-- version: 0019
CREATE OR REPLACE TRIGGER seal_leaves_deleted_once_archived AFTER DELETE ON seal_leaves
REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION ackstore_refuse_unarchived_leaves_delete();

-- name: archives_never_change
-- An archive's record never changes, nor goes.
-- version: 0019
CREATE OR REPLACE TRIGGER archives_never_change BEFORE UPDATE OR DELETE ON archives
FOR EACH ROW EXECUTE FUNCTION ackstore_refuse_change();

-- name: acks_deleted_once_archived
-- A sealed acks row leaves only with its archive.
-- One such trigger per table of schema.SEALED_TABLES, and no other (tests/ledger/test_migrations.py:
-- the fact tables are listed once, in Python; these released versions name them by hand).
-- version: 0019
CREATE OR REPLACE TRIGGER acks_deleted_once_archived AFTER DELETE ON acks
REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION ackstore_refuse_unarchived_delete();

-- name: attempts_deleted_once_archived
-- A sealed attempts row leaves only with its archive.
-- version: 0019
CREATE OR REPLACE TRIGGER attempts_deleted_once_archived AFTER DELETE ON attempts
REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION ackstore_refuse_unarchived_delete();

-- name: command_responses_deleted_once_archived
-- A sealed command responses row leaves only with its archive.
-- version: 0019
CREATE OR REPLACE TRIGGER command_responses_deleted_once_archived AFTER DELETE ON command_responses
REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION ackstore_refuse_unarchived_delete();

-- name: ledger_batches_deleted_once_archived
-- A sealed ledger batches row leaves only with its archive.
-- version: 0019
CREATE OR REPLACE TRIGGER ledger_batches_deleted_once_archived AFTER DELETE ON ledger_batches
REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION ackstore_refuse_unarchived_delete();

-- name: request_results_deleted_once_archived
-- A sealed request results row leaves only with its archive.
-- version: 0019
CREATE OR REPLACE TRIGGER request_results_deleted_once_archived AFTER DELETE ON request_results
REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION ackstore_refuse_unarchived_delete();

-- name: search_marks_deleted_once_archived
-- A sealed search marks row leaves only with its archive.
-- version: 0019
CREATE OR REPLACE TRIGGER search_marks_deleted_once_archived AFTER DELETE ON search_marks
REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION ackstore_refuse_unarchived_delete();

-- name: settlements_deleted_once_archived
-- A sealed settlements row leaves only with its archive.
-- version: 0019
CREATE OR REPLACE TRIGGER settlements_deleted_once_archived AFTER DELETE ON settlements
REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION ackstore_refuse_unarchived_delete();

-- name: signals_deleted_once_archived
-- A sealed signals row leaves only with its archive.
-- version: 0019
CREATE OR REPLACE TRIGGER signals_deleted_once_archived AFTER DELETE ON signals
REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION ackstore_refuse_unarchived_delete();

-- name: validation_passes_deleted_once_archived
-- A sealed validation passes row leaves only with its archive.
-- version: 0019
CREATE OR REPLACE TRIGGER validation_passes_deleted_once_archived AFTER DELETE ON validation_passes
REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION ackstore_refuse_unarchived_delete();
