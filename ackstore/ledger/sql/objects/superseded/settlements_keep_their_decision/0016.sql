-- settlements_keep_their_decision as migration 0016 defined it (superseded by migration 0017: carried_out_as is set with carried_out_at, once).
CREATE OR REPLACE FUNCTION settlements_keep_their_decision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (NEW.id, NEW.signal_id, NEW.attempt, NEW.decision, NEW.decided_at)
     IS DISTINCT FROM (OLD.id, OLD.signal_id, OLD.attempt, OLD.decision, OLD.decided_at) THEN
    RAISE EXCEPTION 'ackstore: a settlement''s decision never changes' USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF OLD.carried_out_at IS NOT NULL AND NEW.carried_out_at IS DISTINCT FROM OLD.carried_out_at THEN
    RAISE EXCEPTION 'ackstore: settlement of attempt % of signal % was carried out already', OLD.attempt, OLD.signal_id
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NEW;
END $$;
