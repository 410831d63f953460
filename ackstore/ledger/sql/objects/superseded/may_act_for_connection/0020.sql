-- may_act_for_connection as migration 0020 defined it (superseded by migration 0028: the caller is caller_login(): the login connected, or the one a front door switched into).
CREATE OR REPLACE FUNCTION may_act_for_connection(connection text) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  RETURN COALESCE((SELECT c.owner_login IS NULL OR c.owner_login = session_user FROM connections c
                   WHERE c.id = may_act_for_connection.connection), false);
END $$;
