-- settlements_keep_their_decision as migration 0017 defined it (superseded by migration 0018: a settlement is numbered for its seal when carried out, and its number never changes).
CREATE OR REPLACE FUNCTION settlements_keep_their_decision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (NEW.id, NEW.signal_id, NEW.attempt, NEW.decision, NEW.decided_at)
     IS DISTINCT FROM (OLD.id, OLD.signal_id, OLD.attempt, OLD.decision, OLD.decided_at) THEN
    RAISE EXCEPTION 'ackstore: a settlement''s decision never changes' USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF OLD.carried_out_at IS NOT NULL
     AND (NEW.carried_out_at, NEW.carried_out_as) IS DISTINCT FROM (OLD.carried_out_at, OLD.carried_out_as) THEN
    RAISE EXCEPTION 'ackstore: settlement of attempt % of signal % was carried out already', OLD.attempt, OLD.signal_id
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NEW;
END $$;
