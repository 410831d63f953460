-- Declaring: the only way a subscriber and its group's labels enter the ledger (B.3; migration
-- 0016, SECURITY DEFINER with a pinned search_path, as intake.sql's). A holder is a group of
-- subscribers ("subscriber:<id>" or "connection:<id>"); it owns labels: no two holders declare
-- the same label, and every subscriber of one holder declares the same set.
--
-- Who a subscriber is (decisions #97): the database login that declared it first owns it
-- (subscribers.owner_login), and only that login may declare, pull, ack or respond as it. The
-- login proves who it is to PostgreSQL (a password from ~/.pgpass or PGPASSWORD, a client
-- certificate), or to a front door that switched into it (caller_login). A subscriber
-- declared before migration 0016 has no owner until an admin gives it one. A connection is owned
-- the same way (connections.owner_login, issue 37): its subscribers, its signals and their
-- settlements are its login's alone.

-- name: caller_login
-- Who this session acts as (issue 51, decisions #137): the login it connected as — session_user,
-- which stays that login inside a SECURITY DEFINER function — or the login a front door switched
-- into (SET ROLE) after the request proved it is that login's (a signed token): PostgreSQL lets a
-- door's login switch only into the logins granted to it. A role switched into that cannot log in
-- — a group role, which each of its members could switch into — is nobody's identity: refused, so
-- that no two logins ever act as one.
-- version: 0028
CREATE OR REPLACE FUNCTION caller_login() RETURNS text
LANGUAGE plpgsql STABLE SET search_path = public, pg_temp AS $$
DECLARE
  switched text := current_setting('role');
BEGIN
  IF switched = 'none' THEN
    RETURN session_user;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_roles r WHERE r.rolname = switched AND r.rolcanlogin) THEN
    RAISE EXCEPTION 'ackstore: this session switched into %, which is no login: a writer acts as a login', switched
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN switched;
END $$;

-- name: may_act_for_connection
-- Whether this session's login is the connection's (issue 37): it claimed it first (declaring
-- into it, storing its first signal, or its connector starting), or the connection's subscribers
-- were all declared before migration 0016, by no login, and it has no owner until an admin gives
-- it one (as such subscribers, decisions #97). False for a connection nobody claimed: what a
-- connection's login alone may do — record its settlements carried out, open its signals' next
-- attempts — needs one claimed.
-- version: 0028
CREATE OR REPLACE FUNCTION may_act_for_connection(connection text) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  RETURN COALESCE((SELECT c.owner_login IS NULL OR c.owner_login = caller_login() FROM connections c
                   WHERE c.id = may_act_for_connection.connection), false);
END $$;

-- name: claim_connection
-- Whether this session's login may act for the connection now: it is the login's (an operator
-- reserved it for the login, reserve_connection; or the login claimed it before migration 0024),
-- or nobody's yet and this login may write ``connections`` itself — the admin role's members, a
-- superuser, a ledger's only user — which then claims it by first use. An ingest login claims
-- nothing it was not granted (issue 50: another login taking an id before its connector first
-- started made that connector exit). A connector claims its connection when it starts.
-- version: 0028
CREATE OR REPLACE FUNCTION claim_connection(connection text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  IF shared_source(claim_connection.connection) THEN
    RETURN false;  -- the API's and the CLI's are every login's, and no connection
  END IF;
  IF NOT EXISTS (SELECT FROM connections c WHERE c.id = claim_connection.connection)
     AND has_table_privilege(caller_login(), 'connections', 'INSERT') THEN
    INSERT INTO connections (id, owner_login) VALUES (claim_connection.connection, caller_login())
    ON CONFLICT (id) DO NOTHING;
  END IF;
  RETURN may_act_for_connection(claim_connection.connection);
END $$;

-- name: reserve_connection
-- An operator grants a connection to a login (issue 50): the connection becomes ``login``'s,
-- whose connector then claims it — the one way an ingest login comes to own a connection.
-- ``login`` must be a login of the ingest role. Runs with the caller's privileges (no SECURITY
-- DEFINER): only who may write ``connections`` reserves — the admin role's members, a superuser;
-- another login's call is refused first (42501). A connection of no owner (declared before migration
-- 0016) gets this one; one that is another login's keeps it (moving it is an admin's UPDATE,
-- docs/roles.md). Returns the connection's owner afterwards: ``login``, or the other.
-- version: 0024
CREATE OR REPLACE FUNCTION reserve_connection(connection text, login text) RETURNS text
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
BEGIN
  IF NOT has_table_privilege(current_user, 'connections', 'INSERT') THEN
    RAISE EXCEPTION 'permission denied for function reserve_connection: only a login that may write the table '
                    'connections (the admin role''s) reserves one' USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF shared_source(reserve_connection.connection) THEN
    RAISE EXCEPTION 'reserve_connection: % is the API''s or the CLI''s source, no connection',
      reserve_connection.connection USING ERRCODE = 'check_violation';
  END IF;
  IF NOT EXISTS (SELECT FROM pg_roles r
                 WHERE r.rolname = reserve_connection.login AND r.rolcanlogin
                   AND CASE WHEN EXISTS (SELECT FROM pg_roles g WHERE g.rolname = 'ackstore_ingest')
                            THEN pg_has_role(r.oid, 'ackstore_ingest', 'MEMBER') ELSE true END) THEN
    RAISE EXCEPTION 'reserve_connection: % is no login of the ingest role', reserve_connection.login
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  INSERT INTO connections AS c (id, owner_login) VALUES (reserve_connection.connection, reserve_connection.login)
  ON CONFLICT (id) DO UPDATE SET owner_login = EXCLUDED.owner_login WHERE c.owner_login IS NULL;
  RETURN (SELECT c.owner_login FROM connections c WHERE c.id = reserve_connection.connection);
END $$;

-- name: may_act_for
-- Whether this session's login may act as the subscriber: it owns it, or the subscriber has no
-- owner (declared before 0016), or there is no such subscriber yet (the caller answers 404, or
-- declares it) — and a subscriber of a connection only while that connection is this login's
-- (issue 37: another login's connection is not joined by declaring into it). One statement:
-- every write a subscriber makes asks it.
-- version: 0028
CREATE OR REPLACE FUNCTION may_act_for(subscriber text) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  RETURN COALESCE((SELECT (u.owner_login IS NULL OR u.owner_login = caller_login())
                          AND (u.connection_id IS NULL OR c.owner_login IS NULL AND c.id IS NOT NULL
                               OR c.owner_login = caller_login())
                   FROM subscribers u LEFT JOIN connections c ON c.id = u.connection_id
                   WHERE u.id = may_act_for.subscriber), true);
END $$;

-- name: act_for
-- Refuses (insufficient_privilege) unless this session's login may act as the subscriber: every
-- write a subscriber makes calls it first.
-- version: 0016
CREATE OR REPLACE FUNCTION act_for(subscriber text) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  IF NOT may_act_for(act_for.subscriber) THEN
    RAISE EXCEPTION 'ackstore: the subscriber % belongs to another login', act_for.subscriber
      USING ERRCODE = 'insufficient_privilege';
  END IF;
END $$;

-- name: act_for_connection
-- Refuses (insufficient_privilege) unless this session's login may act for the connection: what
-- only a connection's login may write calls it first.
-- version: 0020
CREATE OR REPLACE FUNCTION act_for_connection(connection text) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  IF NOT may_act_for_connection(act_for_connection.connection) THEN
    RAISE EXCEPTION 'ackstore: the connection % is not this login''s (another login claimed it, or none did)',
      act_for_connection.connection USING ERRCODE = 'insufficient_privilege';
  END IF;
END $$;

-- name: act_for_source
-- Refuses (insufficient_privilege) a write of a connection's signals — any source but the API's
-- and the CLI's, whatever API it names — unless this session's login claimed the connection, or
-- claims it now, nobody having before: what the intake functions call first.
-- version: 0020
CREATE OR REPLACE FUNCTION act_for_source(source text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
  IF shared_source(act_for_source.source) OR may_act_for_connection(act_for_source.source) THEN
    RETURN;  -- the common case: one probe
  END IF;
  IF NOT claim_connection(act_for_source.source) THEN
    PERFORM act_for_connection(act_for_source.source);
  END IF;
END $$;

-- name: declare_subscriber
-- The subscriber as declared, and its group's labels: true. False (the 409) when another holder
-- owns one of the labels or the group declares a different set; NULL (the 403) when the
-- subscriber, or the connection it declares into, is another login's; nothing written then. A new
-- subscriber starts at the end of the event log, as a new subscription does, owned by this
-- session's login; a declared one keeps its position and its owner, and only that owner may
-- declare it again. A group nobody belongs to any more holds no labels. Declarations are rare:
-- one lock (a row of ledger_locks, which no login may lock itself) makes the uniqueness check and
-- the write atomic.
-- version: 0028
CREATE OR REPLACE FUNCTION declare_subscriber(subscriber text, connection_id text, filter text, namespaces text[],
                                              channels text[], labels text[]) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_column
DECLARE
  group_holder text := CASE WHEN declare_subscriber.connection_id IS NOT NULL THEN 'connection:' || declare_subscriber.connection_id
                      ELSE 'subscriber:' || declare_subscriber.subscriber END;
  previous text;
BEGIN
  IF declare_subscriber.labels && builtin_labels() THEN
    RAISE EXCEPTION 'declare_subscriber: a built-in label is never declared' USING ERRCODE = 'check_violation';
  END IF;
  PERFORM FROM ledger_locks l WHERE l.name = 'declare' FOR NO KEY UPDATE;
  IF declare_subscriber.connection_id IS NOT NULL AND NOT claim_connection(declare_subscriber.connection_id)
     OR NOT may_act_for(declare_subscriber.subscriber) THEN
    RETURN NULL;
  END IF;
  IF EXISTS (SELECT FROM subscribers u WHERE u.holder = group_holder
                                         AND u.id <> declare_subscriber.subscriber)
     AND ARRAY(SELECT d.label FROM declared_labels d WHERE d.holder = group_holder ORDER BY 1)
         IS DISTINCT FROM ARRAY(SELECT DISTINCT l FROM unnest(declare_subscriber.labels) l ORDER BY 1) THEN
    RETURN false;
  END IF;
  IF EXISTS (SELECT FROM declared_labels d WHERE d.label = ANY (declare_subscriber.labels)
                                             AND d.holder <> group_holder) THEN
    RETURN false;
  END IF;
  SELECT u.holder INTO previous FROM subscribers u WHERE u.id = declare_subscriber.subscriber;
  INSERT INTO subscribers (id, holder, connection_id, filter, namespaces, channels, event_position, owner_login)
  VALUES (declare_subscriber.subscriber, group_holder, declare_subscriber.connection_id, declare_subscriber.filter,
          declare_subscriber.namespaces, declare_subscriber.channels,
          (SELECT COALESCE(max(r.event_id), 0) FROM command_responses r), caller_login())
  ON CONFLICT (id) DO UPDATE
  SET holder = EXCLUDED.holder, connection_id = EXCLUDED.connection_id, filter = EXCLUDED.filter,
      namespaces = EXCLUDED.namespaces, channels = EXCLUDED.channels, declared_at = now();
  IF previous IS DISTINCT FROM group_holder THEN
    DELETE FROM declared_labels d
    WHERE d.holder = previous AND NOT EXISTS (SELECT 1 FROM subscribers u WHERE u.holder = previous);
  END IF;
  DELETE FROM declared_labels d WHERE d.holder = group_holder
                                  AND d.label <> ALL (declare_subscriber.labels);
  INSERT INTO declared_labels (label, holder)
  SELECT l.label, group_holder FROM unnest(declare_subscriber.labels) AS l(label)
  ON CONFLICT (label) DO NOTHING;
  RETURN true;
END $$;
