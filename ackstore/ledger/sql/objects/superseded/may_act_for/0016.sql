-- may_act_for as migration 0016 defined it (superseded by migration 0020: a subscriber of another login's connection is not this login's either).
CREATE OR REPLACE FUNCTION may_act_for(subscriber text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
SELECT COALESCE((SELECT u.owner_login IS NULL OR u.owner_login = session_user FROM subscribers u
                 WHERE u.id = may_act_for.subscriber), true)
$$;
