-- Declaring: the only way a subscriber and its group's labels enter the ledger (B.3; migration
-- 0016, SECURITY DEFINER with a pinned search_path, as intake.sql's). A holder is a group of
-- subscribers ("subscriber:<id>" or "connection:<id>"); it owns labels: no two holders declare
-- the same label, and every subscriber of one holder declares the same set.
--
-- Who a subscriber is (decisions #97): the database login that declared it first owns it
-- (subscribers.owner_login), and only that login may declare, pull, ack or respond as it. The
-- login proves who it is to PostgreSQL (a password from ~/.pgpass or PGPASSWORD, a client
-- certificate); session_user is that login inside a SECURITY DEFINER function too. A subscriber
-- declared before migration 0016 has no owner until an admin gives it one.

-- name: may_act_for
-- Whether this session's login may act as the subscriber: it owns it, or the subscriber has no
-- owner (declared before 0016), or there is no such subscriber yet (the caller answers 404, or
-- declares it).
-- version: 0016
CREATE OR REPLACE FUNCTION may_act_for(subscriber text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
SELECT COALESCE((SELECT u.owner_login IS NULL OR u.owner_login = session_user FROM subscribers u
                 WHERE u.id = may_act_for.subscriber), true)
$$;

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

-- name: declare_subscriber
-- The subscriber as declared, and its group's labels: true. False (the 409) when another holder
-- owns one of the labels or the group declares a different set; NULL (the 403) when the
-- subscriber is another login's; nothing written then. A new
-- subscriber starts at the end of the event log, as a new subscription does, owned by this
-- session's login; a declared one keeps its position and its owner, and only that owner may
-- declare it again. A group nobody belongs to any more holds no labels. Declarations are rare:
-- one lock makes the uniqueness check and the write atomic.
-- version: 0016
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
  PERFORM pg_advisory_xact_lock(hashtext('ackstore.declare'));
  IF NOT may_act_for(declare_subscriber.subscriber) THEN
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
          (SELECT COALESCE(max(r.event_id), 0) FROM command_responses r), session_user)
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
