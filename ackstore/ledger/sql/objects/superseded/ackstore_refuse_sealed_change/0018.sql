-- ackstore_refuse_sealed_change as migration 0018 defined it (superseded by migration 0019: it refuses UPDATE alone; DELETE is archiving's (ackstore_refuse_unarchived_delete)).
CREATE OR REPLACE FUNCTION ackstore_refuse_sealed_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.seq IS NOT NULL AND OLD.seq <= sealed_upto() THEN
    RAISE EXCEPTION 'ackstore: this % row is sealed (fact %): it never changes', TG_TABLE_NAME, OLD.seq
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END $$;
