-- builtin_facts_to_come as migration 0025 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE FUNCTION builtin_facts_to_come(signal bigint, attempt integer, upto bigint)
RETURNS TABLE (label text)
LANGUAGE sql STABLE AS $$
SELECT q.label
FROM attempts a CROSS JOIN LATERAL unnest(a.requested_acks) AS q(label)
WHERE a.signal_id = builtin_facts_to_come.signal AND a.attempt = builtin_facts_to_come.attempt
  AND q.label IN (twin_persisted(), search_persisted())
  AND NOT EXISTS (SELECT FROM builtin_fact_times(a.signal_id) f
                  WHERE f.label = q.label AND f.seq <= builtin_facts_to_come.upto)
  AND NOT EXISTS (SELECT FROM command_responses r
                  WHERE r.signal_id = a.signal_id AND r.seq <= builtin_facts_to_come.upto
                    AND (r.event_id IS NULL OR r.is_error))
$$;
