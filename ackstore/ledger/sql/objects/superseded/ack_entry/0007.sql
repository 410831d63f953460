-- ack_entry as migration 0007 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE FUNCTION ack_entry(status integer, payload jsonb, headers jsonb, weak boolean, correlation_id text)
RETURNS jsonb LANGUAGE sql STABLE AS $$
SELECT jsonb_build_object('status', status)
       || CASE WHEN payload IS NOT NULL THEN jsonb_build_object('payload', payload) ELSE '{}'::jsonb END
       || jsonb_build_object('headers',
              CASE WHEN headers ->> 'content-type' = 'application/vnd.eclipse.ditto+json'
                   THEN headers - 'requested-acks' - 'content-type' ELSE headers - 'requested-acks' END
              || jsonb_build_object('correlation-id', correlation_id)
              || CASE WHEN weak THEN jsonb_build_object('ditto-weak-ack', true) ELSE '{}'::jsonb END)
$$;
