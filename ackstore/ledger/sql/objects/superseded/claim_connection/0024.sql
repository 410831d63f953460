-- claim_connection as migration 0024 defined it (superseded by migration 0028: the caller is caller_login(): the login connected, or the one a front door switched into).
CREATE OR REPLACE FUNCTION claim_connection(connection text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  IF shared_source(claim_connection.connection) THEN
    RETURN false;  -- the API's and the CLI's are every login's, and no connection
  END IF;
  IF NOT EXISTS (SELECT FROM connections c WHERE c.id = claim_connection.connection)
     AND has_table_privilege(session_user, 'connections', 'INSERT') THEN
    INSERT INTO connections (id, owner_login) VALUES (claim_connection.connection, session_user)
    ON CONFLICT (id) DO NOTHING;
  END IF;
  RETURN may_act_for_connection(claim_connection.connection);
END $$;
