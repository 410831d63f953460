-- current_attempt_of as migration 0010 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE FUNCTION current_attempt_of(signal bigint)
RETURNS SETOF attempts LANGUAGE sql STABLE AS $$
SELECT a.* FROM attempts a WHERE a.signal_id = signal ORDER BY a.attempt DESC LIMIT 1
$$;
