-- may_act_for as migration 0020 defined it (superseded by migration 0028: the caller is caller_login(): the login connected, or the one a front door switched into).
CREATE OR REPLACE FUNCTION may_act_for(subscriber text) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  RETURN COALESCE((SELECT (u.owner_login IS NULL OR u.owner_login = session_user)
                          AND (u.connection_id IS NULL OR c.owner_login IS NULL AND c.id IS NOT NULL
                               OR c.owner_login = session_user)
                   FROM subscribers u LEFT JOIN connections c ON c.id = u.connection_id
                   WHERE u.id = may_act_for.subscriber), true);
END $$;
