-- Carrying settlements out: a decision is made once by the pipeline; a connector only records
-- when it carried it out (migration 0016). The connector's role holds EXECUTE on these and no
-- UPDATE of settlements; the trigger keeps every writer, the pipeline and the admin role
-- included, to what carrying out may change.

-- name: settlements_keep_their_decision
-- A settlement's decision, its time and its attempt never change; it is carried out once, never
-- before it was decided, and never cleared (issue 26). A later record of the same carrying out
-- (a held copy settled again after a crash, decisions #33) keeps the first time. What the
-- transport performed instead of the decision (carried_out_as, issue 27) is said with that
-- record and never changes either. Carried out, a settlement is final: it takes its fact number
-- then, for the next seal (issue 28, decisions #101), and keeps it.
-- version: 0018
CREATE OR REPLACE FUNCTION settlements_keep_their_decision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (NEW.id, NEW.signal_id, NEW.attempt, NEW.decision, NEW.decided_at)
     IS DISTINCT FROM (OLD.id, OLD.signal_id, OLD.attempt, OLD.decision, OLD.decided_at) THEN
    RAISE EXCEPTION 'ackstore: a settlement''s decision never changes' USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF OLD.carried_out_at IS NOT NULL
     AND (NEW.carried_out_at, NEW.carried_out_as, NEW.seq) IS DISTINCT FROM (OLD.carried_out_at, OLD.carried_out_as, OLD.seq) THEN
    RAISE EXCEPTION 'ackstore: settlement of attempt % of signal % was carried out already', OLD.attempt, OLD.signal_id
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF OLD.carried_out_at IS NULL AND NEW.carried_out_at IS NOT NULL THEN
    NEW.seq := nextval('ledger_seq');
  ELSIF NEW.seq IS DISTINCT FROM OLD.seq THEN
    RAISE EXCEPTION 'ackstore: a settlement is numbered when carried out' USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NEW;
END $$;

-- name: settlements_number_carried_out
-- A settlement written already carried out (an import, a repair) is final when written: it is
-- numbered then, whatever number the writer gave (issue 28). Only the trigger below calls it.
-- version: 0018
CREATE OR REPLACE FUNCTION settlements_number_carried_out() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.seq := nextval('ledger_seq');
  RETURN NEW;
END $$;

-- name: settlements_numbered_when_written_carried_out
-- The trigger of the function above: only for such a settlement, so the pipeline's inserts of
-- decisions cost nothing more.
-- version: 0018
CREATE OR REPLACE TRIGGER settlements_numbered_when_written_carried_out BEFORE INSERT ON settlements
FOR EACH ROW WHEN (NEW.carried_out_at IS NOT NULL) EXECUTE FUNCTION settlements_number_carried_out();

-- name: settlements_carried_out_once
-- The trigger of the function above.
-- version: 0016
CREATE OR REPLACE TRIGGER settlements_carried_out_once BEFORE UPDATE ON settlements
FOR EACH ROW EXECUTE FUNCTION settlements_keep_their_decision();

-- name: record_carried_out
-- Decisions carried out now, by (signal, attempt). ``held``: the connector holds these
-- deliveries and carries them out — recorded first, so that a crash before the broker hears of
-- it leaves a decision the redelivered copy is settled from at once (decisions #33); every one
-- is returned, an earlier record kept. Otherwise (settled when stored, QoS 0) only the first
-- connector of the source to see the decision records it, and only that one publishes the
-- response: those it recorded now are returned. ``carried_out_as``: the settlement the transport
-- performs instead of the decision, when it cannot perform it (MQTT acknowledges a redeliver
-- decision without reconnectForRedelivery, decisions #99); NULL: as decided. Only the login of
-- each signal's connection records it, and only what a transport could do instead (issue 37).
-- version: 0020
CREATE OR REPLACE FUNCTION record_carried_out(signal_ids bigint[], attempts integer[], held boolean,
                                              carried_out_as text)
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  PERFORM act_for_connection(x.source)
  FROM (SELECT DISTINCT s.source FROM signals s WHERE s.id = ANY (record_carried_out.signal_ids)) x;
  IF record_carried_out.carried_out_as IS NOT NULL
     AND EXISTS (SELECT FROM unnest(record_carried_out.signal_ids, record_carried_out.attempts) AS d(signal_id, attempt)
                 JOIN settlements st ON st.signal_id = d.signal_id AND st.attempt = d.attempt
                 WHERE NOT carried_out_as_allowed(st.decision, record_carried_out.carried_out_as)) THEN
    RAISE EXCEPTION 'record_carried_out: no transport carries a decision out as %', record_carried_out.carried_out_as
      USING ERRCODE = 'check_violation';
  END IF;
  IF NOT record_carried_out.held THEN
    RETURN QUERY
    UPDATE settlements st SET carried_out_at = clock_timestamp(), carried_out_as = record_carried_out.carried_out_as
    FROM unnest(record_carried_out.signal_ids, record_carried_out.attempts) AS d(signal_id, attempt)
    WHERE st.signal_id = d.signal_id AND st.attempt = d.attempt AND st.carried_out_at IS NULL
    RETURNING st.signal_id;
    RETURN;
  END IF;
  UPDATE settlements st SET carried_out_at = clock_timestamp(), carried_out_as = record_carried_out.carried_out_as
  FROM unnest(record_carried_out.signal_ids, record_carried_out.attempts) AS d(signal_id, attempt)
  WHERE st.signal_id = d.signal_id AND st.attempt = d.attempt AND st.carried_out_at IS NULL;
  RETURN QUERY
  SELECT st.signal_id
  FROM unnest(record_carried_out.signal_ids, record_carried_out.attempts) AS d(signal_id, attempt)
  JOIN settlements st ON st.signal_id = d.signal_id AND st.attempt = d.attempt;
END $$;

-- name: record_latest_carried_out
-- Redelivered copies settled from their signals' decisions: the newest attempt's settlement of
-- each, recorded unless it was. Returns what this call recorded — each settlement's signal and
-- decision (a copy of one carried out before records nothing, and a connector that recorded it
-- at the same moment has it instead): what the connector counts as carried out by it, read from
-- the write itself (issue 50: it read the decisions first and could count one another recorded).
-- Only by the login of each signal's connection (issue 37).
-- version: 0025
CREATE OR REPLACE FUNCTION record_latest_carried_out(signal_ids bigint[]) RETURNS TABLE (signal_id bigint, decision text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  PERFORM act_for_connection(x.source)
  FROM (SELECT DISTINCT s.source FROM signals s WHERE s.id = ANY (record_latest_carried_out.signal_ids)) x;
  RETURN QUERY
  WITH latest AS (
      SELECT x.signal_id, max(x.attempt) AS attempt FROM settlements x
      WHERE x.signal_id = ANY (record_latest_carried_out.signal_ids) GROUP BY x.signal_id
  )
  UPDATE settlements st SET carried_out_at = clock_timestamp()
  FROM latest d
  WHERE st.signal_id = d.signal_id AND st.attempt = d.attempt AND st.carried_out_at IS NULL
  RETURNING st.signal_id, st.decision;
END $$;
