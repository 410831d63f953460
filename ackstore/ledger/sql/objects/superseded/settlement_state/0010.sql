-- settlement_state as migration 0010 defined it (superseded; dropped by migration 0011: signal_state replaced it).
-- Where a signal's current attempt stands on its way to settlement: 'settled' (answered, for
-- the API and the CLI; for a connection, acked or rejected on the broker), else why not —
-- 'undecided', 'settlement undecided', 'redeliver', 'dead-letter', 'not carried out'.
-- version: 0010
CREATE OR REPLACE FUNCTION settlement_state(needs_transport boolean, decided boolean, decision text,
                                 carried_out_at timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN NOT decided THEN 'undecided'
            WHEN NOT needs_transport THEN 'settled'
            WHEN decision IS NULL THEN 'settlement undecided'
            WHEN decision IN ('redeliver', 'dead-letter') THEN decision
            WHEN carried_out_at IS NULL THEN 'not carried out'
            ELSE 'settled' END
$$;
