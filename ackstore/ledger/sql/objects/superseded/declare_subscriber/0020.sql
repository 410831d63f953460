-- declare_subscriber as migration 0020 defined it (superseded by migration 0028: the caller is caller_login(): the login connected, or the one a front door switched into).
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
