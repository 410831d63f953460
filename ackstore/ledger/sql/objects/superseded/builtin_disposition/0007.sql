-- builtin_disposition as migration 0007 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE FUNCTION builtin_disposition(fact_at timestamptz, opened_at timestamptz, deadline_at timestamptz,
                                    decided_at timestamptz, cause text, next_opened_at timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
SELECT CASE WHEN fact_at IS NULL OR next_opened_at <= fact_at THEN NULL
            WHEN fact_at < opened_at THEN 'counted'
            WHEN decided_at < fact_at OR (cause IN ('deadline', 'error') AND fact_at > deadline_at) THEN 'late'
            ELSE 'counted' END
$$;
