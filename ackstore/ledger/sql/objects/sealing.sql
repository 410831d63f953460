-- Seals (issue 28, decisions #101): every fact belongs to one seal, an RFC 6962 Merkle tree over
-- the canonical bytes of its rows (ackstore.rules.canonical), chained to the seal before. A fact
-- is numbered (``seq``, the sequence ledger_seq) once final; a seal covers an interval of numbers,
-- and a sealed row never changes.
--
-- The fact tables are listed once, in Python: ackstore.ledger.schema.SEALED_TABLES. The objects
-- below that name each table by hand — fact_leaves (each table's own columns), signal_facts, and
-- the triggers <table>_numbered_under_lock, <table>_sealed_stay and <table>_sealed_not_truncated,
-- each a released version that migrations 0018 and 0019 create by name — are held to that list by
-- tests/ledger/test_migrations.py (test_the_sql_names_every_fact_table_and_no_other): a fact
-- table added there fails it until a migration adds its branch and triggers here.

-- name: fact_leaf
-- The Merkle leaf hash of a row's canonical bytes (RFC 6962: SHA-256 of 0x00 and the data).
-- version: 0018
CREATE OR REPLACE FUNCTION fact_leaf(canonical bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$ SELECT sha256('\x00'::bytea || canonical) $$;

-- name: fact_leaves
-- Every numbered fact with its table and leaf hash: its canonical bytes are the binary form of
-- ROW(table, its columns in name order) (ackstore.rules.canonical). A branch per table of
-- schema.SEALED_TABLES, its columns those the table declares (tests/ledger/test_migrations.py);
-- tests/pipeline/test_sealing.py holds the leaves to the Python encoding. A seal reads its
-- interval of it.
-- version: 0018
CREATE OR REPLACE VIEW fact_leaves (seq, fact_table, leaf) AS
SELECT k.seq, 'acks'::text, fact_leaf(record_send(ROW('acks'::text, k.attempt, k.disposition, k.headers, k.id, k.issuer, k.label, k.payload, k.reason, k.received_at, k.seq, k.signal_id, k.status, k.weak)))
FROM acks k WHERE k.seq IS NOT NULL
UNION ALL
SELECT a.seq, 'attempts'::text, fact_leaf(record_send(ROW('attempts'::text, a.attempt, a.deadline_at, a.opened_at, a.requested_acks, a.seq, a.signal_id)))
FROM attempts a WHERE a.seq IS NOT NULL
UNION ALL
SELECT r.seq, 'command_responses'::text, fact_leaf(record_send(ROW('command_responses'::text, r.batch_id, r.event_action, r.event_id, r.is_error, r.payload, r.revision, r.seq, r.signal_id, r.status)))
FROM command_responses r WHERE r.seq IS NOT NULL
UNION ALL
SELECT b.seq, 'ledger_batches'::text, fact_leaf(record_send(ROW('ledger_batches'::text, b.committed_at, b.id, b.run_id, b.seq, b.step)))
FROM ledger_batches b WHERE b.seq IS NOT NULL
UNION ALL
SELECT x.seq, 'request_results'::text, fact_leaf(record_send(ROW('request_results'::text, x.ack_statuses, x.attempt, x.batch_id, x.body, x.cause, x.decided_at, x.headers, x.seq, x.signal_id, x.status)))
FROM request_results x WHERE x.seq IS NOT NULL
UNION ALL
SELECT m.seq, 'search_marks'::text, fact_leaf(record_send(ROW('search_marks'::text, m.batch_id, m.changed, m.from_revision, m.seq, m.thing_id, m.to_revision)))
FROM search_marks m WHERE m.seq IS NOT NULL
UNION ALL
SELECT st.seq, 'settlements'::text, fact_leaf(record_send(ROW('settlements'::text, st.attempt, st.carried_out_as, st.carried_out_at, st.decided_at, st.decision, st.id, st.seq, st.signal_id)))
FROM settlements st WHERE st.seq IS NOT NULL
UNION ALL
SELECT s.seq, 'signals'::text, fact_leaf(record_send(ROW('signals'::text, s.action, s.api, s.channel, s.correlation_id, s.deadline_at, s.headers, s.id, s.kind, s.path, s.received_at, s.requested_acks, s.response_required, s.seq, s.source, s.source_message_id, s.thing_id, s.timeout_ms, s.topic, s.value)))
FROM signals s WHERE s.seq IS NOT NULL
UNION ALL
SELECT v.seq, 'validation_passes'::text, fact_leaf(record_send(ROW('validation_passes'::text, v.passed_at, v.results_upto, v.run_id, v.seq)))
FROM validation_passes v WHERE v.seq IS NOT NULL;

-- name: signal_facts
-- The facts of one signal, by table and number (NULL: a settlement not carried out yet, not
-- final): the signal, its attempts, acks, response, results, settlements, the search mark that
-- indexed its change, the batches those were written in, and the validation pass that passed
-- each result. What `prove` proves, and what archiving moves out together. A branch per fact
-- table (schema.SEALED_TABLES), by the signal's id for those that name it
-- (schema.SIGNAL_FACT_TABLES): tests/ledger/test_migrations.py; archive_lookups.facts_of spells it as
-- look-ups over the archive too, and tests/pipeline/test_archive_lookups.py holds the two together.
-- The search mark is covering_search_mark's.
-- version: 0030
CREATE OR REPLACE FUNCTION signal_facts(signal bigint) RETURNS TABLE (fact_table text, seq bigint)
LANGUAGE sql STABLE AS $$
WITH s AS (SELECT g.id, g.seq, g.thing_id FROM signals g WHERE g.id = signal),
r AS (SELECT cr.seq, cr.batch_id, cr.revision FROM command_responses cr WHERE cr.signal_id = signal),
x AS (SELECT rr.seq, rr.batch_id FROM request_results rr WHERE rr.signal_id = signal),
m AS (SELECT mk.seq, mk.batch_id FROM s CROSS JOIN r CROSS JOIN LATERAL covering_search_mark(s.thing_id, r.revision) mk)
SELECT 'signals', s.seq FROM s
UNION ALL SELECT 'attempts', a.seq FROM attempts a WHERE a.signal_id = signal
UNION ALL SELECT 'acks', k.seq FROM acks k WHERE k.signal_id = signal
UNION ALL SELECT 'command_responses', r.seq FROM r
UNION ALL SELECT 'request_results', x.seq FROM x
UNION ALL SELECT 'settlements', st.seq FROM settlements st WHERE st.signal_id = signal
UNION ALL SELECT 'search_marks', m.seq FROM m
UNION ALL SELECT 'ledger_batches', b.seq FROM ledger_batches b
          WHERE b.id IN (SELECT r.batch_id FROM r UNION SELECT x.batch_id FROM x UNION SELECT m.batch_id FROM m)
UNION ALL SELECT 'validation_passes', v.seq FROM x
          CROSS JOIN LATERAL (SELECT p.seq FROM validation_passes p WHERE p.results_upto >= x.batch_id
                              ORDER BY p.results_upto LIMIT 1) v
$$;

-- name: sealed_upto
-- The last fact number sealed: what is at or below it never changes.
-- version: 0018
CREATE OR REPLACE FUNCTION sealed_upto() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT COALESCE(max(upto_seq), 0) FROM seals $$;

-- name: seal_position
-- The last fact number a seal may cover now: after every transaction that drew a number has
-- ended, so that no fact at or below it is still to commit. A statement that draws numbers
-- first locks the table fact_numbering ROW EXCLUSIVE (ackstore_numbering_writer); this locks it
-- SHARE and waits for them. One lock, held by nothing else: a sealer taking the fact tables' own
-- locks one by one held some while it waited for others, and deadlocked with a writer moving
-- between them. A table's lock and not an advisory one: no role holds a privilege on
-- fact_numbering, so no login can take its lock and stall the writers. The caller commits at
-- once, releasing the lock.
-- version: 0018
CREATE OR REPLACE FUNCTION seal_position() RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  upto bigint;
BEGIN
  LOCK TABLE fact_numbering IN SHARE MODE;
  SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END INTO upto FROM ledger_seq s;
  RETURN upto;
END $$;

-- name: ackstore_numbering_writer
-- Every statement that may draw a fact number holds the numbering lock (ROW EXCLUSIVE on
-- fact_numbering) until its transaction ends (seal_position above). Writers share it and never
-- wait for one another; a writer waits only while a seal takes its position, at most the seal's
-- lock timeout. SECURITY DEFINER: only the table's owner may lock it.
-- version: 0018
CREATE OR REPLACE FUNCTION ackstore_numbering_writer() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  LOCK TABLE fact_numbering IN ROW EXCLUSIVE MODE;
  RETURN NULL;
END $$;

-- name: ackstore_refuse_sealed_change
-- Refuses UPDATE of a sealed row, whoever asks (a superuser disabling triggers is what
-- `ackstore verify` is for). A sealed row is deleted only once archived (archiving.sql).
-- version: 0019
CREATE OR REPLACE FUNCTION ackstore_refuse_sealed_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.seq IS NOT NULL AND OLD.seq <= sealed_upto() THEN
    RAISE EXCEPTION 'ackstore: this % row is sealed (fact %): it never changes', TG_TABLE_NAME, OLD.seq
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NEW;
END $$;

-- name: ackstore_refuse_sealed_truncate
-- Refuses TRUNCATE of a sealed table once a seal exists.
-- version: 0018
CREATE OR REPLACE FUNCTION ackstore_refuse_sealed_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT FROM seals) THEN
    RAISE EXCEPTION 'ackstore: % holds sealed rows: it is never truncated', TG_TABLE_NAME
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NULL;
END $$;

-- name: seals_never_change
-- A seal and its leaves never change.
-- version: 0018
CREATE OR REPLACE TRIGGER seals_never_change BEFORE UPDATE OR DELETE ON seals
FOR EACH ROW EXECUTE FUNCTION ackstore_refuse_change();

-- name: seal_leaves_never_change
-- A seal's leaves are never updated (their deletion: seal_leaves_deleted_once_archived).
-- version: 0019
CREATE OR REPLACE TRIGGER seal_leaves_never_change BEFORE UPDATE ON seal_leaves
FOR EACH ROW EXECUTE FUNCTION ackstore_refuse_change();

-- name: acks_numbered_under_lock
-- Statements writing acks take the numbering lock (a row's number is drawn when it is written).
-- One such trigger per table of schema.SEALED_TABLES, and no other (tests/ledger/test_migrations.py).
-- version: 0018
CREATE OR REPLACE TRIGGER acks_numbered_under_lock BEFORE INSERT ON acks
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_numbering_writer();

-- name: attempts_numbered_under_lock
-- Statements writing attempts take the numbering lock (a row's number is drawn when it is written).
-- version: 0018
CREATE OR REPLACE TRIGGER attempts_numbered_under_lock BEFORE INSERT ON attempts
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_numbering_writer();

-- name: command_responses_numbered_under_lock
-- Statements writing command responses take the numbering lock (a row's number is drawn when it is written).
-- version: 0018
CREATE OR REPLACE TRIGGER command_responses_numbered_under_lock BEFORE INSERT ON command_responses
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_numbering_writer();

-- name: ledger_batches_numbered_under_lock
-- Statements writing ledger batches take the numbering lock (a row's number is drawn when it is written).
-- version: 0018
CREATE OR REPLACE TRIGGER ledger_batches_numbered_under_lock BEFORE INSERT ON ledger_batches
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_numbering_writer();

-- name: request_results_numbered_under_lock
-- Statements writing request results take the numbering lock (a row's number is drawn when it is written).
-- version: 0018
CREATE OR REPLACE TRIGGER request_results_numbered_under_lock BEFORE INSERT ON request_results
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_numbering_writer();

-- name: search_marks_numbered_under_lock
-- Statements writing search marks take the numbering lock (a row's number is drawn when it is written).
-- version: 0018
CREATE OR REPLACE TRIGGER search_marks_numbered_under_lock BEFORE INSERT ON search_marks
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_numbering_writer();

-- name: settlements_numbered_under_lock
-- Statements writing settlements take the numbering lock (its numbers are drawn when a settlement is carried out).
-- version: 0018
CREATE OR REPLACE TRIGGER settlements_numbered_under_lock BEFORE INSERT OR UPDATE OF carried_out_at ON settlements
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_numbering_writer();

-- name: signals_numbered_under_lock
-- Statements writing signals take the numbering lock (a row's number is drawn when it is written).
-- version: 0018
CREATE OR REPLACE TRIGGER signals_numbered_under_lock BEFORE INSERT ON signals
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_numbering_writer();

-- name: validation_passes_numbered_under_lock
-- Statements writing validation passes take the numbering lock (a row's number is drawn when it is written).
-- version: 0018
CREATE OR REPLACE TRIGGER validation_passes_numbered_under_lock BEFORE INSERT ON validation_passes
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_numbering_writer();

-- name: acks_sealed_stay
-- A sealed acks row is never updated (its deletion: acks_deleted_once_archived).
-- One such trigger per table of schema.SEALED_TABLES, and no other (tests/ledger/test_migrations.py).
-- version: 0019
CREATE OR REPLACE TRIGGER acks_sealed_stay BEFORE UPDATE ON acks
FOR EACH ROW EXECUTE FUNCTION ackstore_refuse_sealed_change();

-- name: attempts_sealed_stay
-- A sealed attempts row is never updated (its deletion: attempts_deleted_once_archived).
-- version: 0019
CREATE OR REPLACE TRIGGER attempts_sealed_stay BEFORE UPDATE ON attempts
FOR EACH ROW EXECUTE FUNCTION ackstore_refuse_sealed_change();

-- name: command_responses_sealed_stay
-- A sealed command responses row is never updated (its deletion: command_responses_deleted_once_archived).
-- version: 0019
CREATE OR REPLACE TRIGGER command_responses_sealed_stay BEFORE UPDATE ON command_responses
FOR EACH ROW EXECUTE FUNCTION ackstore_refuse_sealed_change();

-- name: ledger_batches_sealed_stay
-- A sealed ledger batches row is never updated (its deletion: ledger_batches_deleted_once_archived).
-- version: 0019
CREATE OR REPLACE TRIGGER ledger_batches_sealed_stay BEFORE UPDATE ON ledger_batches
FOR EACH ROW EXECUTE FUNCTION ackstore_refuse_sealed_change();

-- name: request_results_sealed_stay
-- A sealed request results row is never updated (its deletion: request_results_deleted_once_archived).
-- version: 0019
CREATE OR REPLACE TRIGGER request_results_sealed_stay BEFORE UPDATE ON request_results
FOR EACH ROW EXECUTE FUNCTION ackstore_refuse_sealed_change();

-- name: search_marks_sealed_stay
-- A sealed search marks row is never updated (its deletion: search_marks_deleted_once_archived).
-- version: 0019
CREATE OR REPLACE TRIGGER search_marks_sealed_stay BEFORE UPDATE ON search_marks
FOR EACH ROW EXECUTE FUNCTION ackstore_refuse_sealed_change();

-- name: settlements_sealed_stay
-- A sealed settlements row is never updated (its deletion: settlements_deleted_once_archived).
-- version: 0019
CREATE OR REPLACE TRIGGER settlements_sealed_stay BEFORE UPDATE ON settlements
FOR EACH ROW EXECUTE FUNCTION ackstore_refuse_sealed_change();

-- name: signals_sealed_stay
-- A sealed signals row is never updated (its deletion: signals_deleted_once_archived).
-- version: 0019
CREATE OR REPLACE TRIGGER signals_sealed_stay BEFORE UPDATE ON signals
FOR EACH ROW EXECUTE FUNCTION ackstore_refuse_sealed_change();

-- name: validation_passes_sealed_stay
-- A sealed validation passes row is never updated (its deletion: validation_passes_deleted_once_archived).
-- version: 0019
CREATE OR REPLACE TRIGGER validation_passes_sealed_stay BEFORE UPDATE ON validation_passes
FOR EACH ROW EXECUTE FUNCTION ackstore_refuse_sealed_change();

-- name: acks_sealed_not_truncated
-- TRUNCATE passes row triggers by: refused once anything is sealed.
-- One such trigger per table of schema.SEALED_TABLES, and no other (tests/ledger/test_migrations.py).
-- version: 0018
CREATE OR REPLACE TRIGGER acks_sealed_not_truncated BEFORE TRUNCATE ON acks
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_refuse_sealed_truncate();

-- name: attempts_sealed_not_truncated
-- TRUNCATE passes row triggers by: refused once anything is sealed.
-- version: 0018
CREATE OR REPLACE TRIGGER attempts_sealed_not_truncated BEFORE TRUNCATE ON attempts
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_refuse_sealed_truncate();

-- name: command_responses_sealed_not_truncated
-- TRUNCATE passes row triggers by: refused once anything is sealed.
-- version: 0018
CREATE OR REPLACE TRIGGER command_responses_sealed_not_truncated BEFORE TRUNCATE ON command_responses
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_refuse_sealed_truncate();

-- name: ledger_batches_sealed_not_truncated
-- TRUNCATE passes row triggers by: refused once anything is sealed.
-- version: 0018
CREATE OR REPLACE TRIGGER ledger_batches_sealed_not_truncated BEFORE TRUNCATE ON ledger_batches
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_refuse_sealed_truncate();

-- name: request_results_sealed_not_truncated
-- TRUNCATE passes row triggers by: refused once anything is sealed.
-- version: 0018
CREATE OR REPLACE TRIGGER request_results_sealed_not_truncated BEFORE TRUNCATE ON request_results
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_refuse_sealed_truncate();

-- name: search_marks_sealed_not_truncated
-- TRUNCATE passes row triggers by: refused once anything is sealed.
-- version: 0018
CREATE OR REPLACE TRIGGER search_marks_sealed_not_truncated BEFORE TRUNCATE ON search_marks
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_refuse_sealed_truncate();

-- name: settlements_sealed_not_truncated
-- TRUNCATE passes row triggers by: refused once anything is sealed.
-- version: 0018
CREATE OR REPLACE TRIGGER settlements_sealed_not_truncated BEFORE TRUNCATE ON settlements
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_refuse_sealed_truncate();

-- name: signals_sealed_not_truncated
-- TRUNCATE passes row triggers by: refused once anything is sealed.
-- version: 0018
CREATE OR REPLACE TRIGGER signals_sealed_not_truncated BEFORE TRUNCATE ON signals
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_refuse_sealed_truncate();

-- name: validation_passes_sealed_not_truncated
-- TRUNCATE passes row triggers by: refused once anything is sealed.
-- version: 0018
CREATE OR REPLACE TRIGGER validation_passes_sealed_not_truncated BEFORE TRUNCATE ON validation_passes
FOR EACH STATEMENT EXECUTE FUNCTION ackstore_refuse_sealed_truncate();
