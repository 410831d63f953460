-- needs_transport_settlement as migration 0010 defined it (superseded by migration 0020: the API's and the CLI's sources named once, shared_source).
CREATE OR REPLACE FUNCTION needs_transport_settlement(api text, source text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT api = 'connectivity' AND source NOT IN ('api', 'cli')
$$;
