-- latency_bucket as migration 0021 defined it (superseded: the current definition is in objects/).
CREATE OR REPLACE FUNCTION latency_bucket(seconds float8) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT COALESCE((SELECT u.bound::text FROM unnest(latency_buckets()) AS u(bound) WHERE u.bound >= seconds
                  ORDER BY u.bound LIMIT 1), '+Inf')
$$;
