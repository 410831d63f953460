-- Statements the migrations share (ackstore/ledger/migrate.py, migrations/versions/).

-- name: own_everything
-- Every table, view and function of the schema is the admin role's, whoever ran the migrations
-- (a table's sequences follow it). A database migrated from empty by a superuser runs as that
-- user until migration 0006 has made the roles, so its later objects were the superuser's, and
-- the admin role could not replace them. migrate.py runs this as the session user before it
-- takes the admin role; 0011 once more for what it made. Nothing happens without the admin role,
-- for a user in no admin role, or to an extension's objects.
DO $$
DECLARE object record;
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ackstore_admin') THEN
    RETURN;
  END IF;
  IF NOT pg_has_role(current_user, 'ackstore_admin', 'MEMBER') THEN
    RETURN;
  END IF;
  FOR object IN SELECT format('%s %I', CASE c.relkind WHEN 'v' THEN 'VIEW' ELSE 'TABLE' END, c.relname) AS name
                FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'v', 'p')
                  AND pg_get_userbyid(c.relowner) <> 'ackstore_admin'
                  AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'e')
                UNION ALL
                SELECT format('FUNCTION %s', p.oid::regprocedure)
                FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                WHERE n.nspname = current_schema() AND pg_get_userbyid(p.proowner) <> 'ackstore_admin'
                  AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e') LOOP
    EXECUTE format('ALTER %s OWNER TO ackstore_admin', object.name);
  END LOOP;
END $$

-- name: database_settings
-- What only the database's owner or a superuser may set, run by migrate.py as the session user
-- before it takes the admin role; any other user gets a notice, and docs/roles.md says to create
-- the database owned by the admin role.
-- * Nobody creates temporary tables in the ledger's database (issue 26): PUBLIC's TEMPORARY,
--   which every login would otherwise hold, is revoked; nothing the components run needs one
--   (Great Expectations' SQL source makes none by default). The admin role keeps it: migration
--   0007 moves its history through a temporary table.
-- * A session left idle inside a transaction is ended after five minutes, whichever login it is
--   (issue 37): what it locked — an ack that holds back the sweep's lock, a fact that holds back a
--   seal — is released instead of deferring those steps run after run. On the database: a role's
--   setting reaches only sessions of that very role, not its members'. A login may lift it for its
--   own session (the pipeline's step lock does), so against a hostile login the steps' lock
--   timeouts are the guard; this ends the forgotten ones.
DO $$
BEGIN
  IF (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = current_user)
     OR pg_has_role(current_user, (SELECT d.datdba FROM pg_database d WHERE d.datname = current_database()), 'USAGE') THEN
    EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'ackstore_admin') THEN  -- 0007 migrates through one
      EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO ackstore_admin', current_database());
    END IF;
    EXECUTE format('ALTER DATABASE %I SET idle_in_transaction_session_timeout = %L', current_database(), '5min');
  ELSE
    RAISE NOTICE 'ackstore: % may not revoke TEMPORARY from PUBLIC or set idle_in_transaction_session_timeout on '
                 'this database: its owner or a superuser may', current_user;
  END IF;
END $$

-- name: version_table
-- Alembic's own table of the schema's revision, made before a migration runs if it is missing
-- (as Alembic makes it): its lock is the one migration's at a time (migration_lock). Two first
-- upgrades may make it at once; the one that loses finds it made.
CREATE TABLE IF NOT EXISTS alembic_version (
    version_num varchar(32) NOT NULL,
    CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
)

-- name: migration_lock
-- One `ackstore db upgrade` at a time (issue 50: two first upgrades at once failed with "tuple
-- concurrently updated"): the first statement of a migration's transaction, held until it
-- commits; a second upgrade waits, then finds the schema at the revision the first left. A table
-- lock, not an advisory one (decisions #104: any login may take an advisory lock): only who may
-- write alembic_version — the admin role, a superuser — can take it. SHARE ROW EXCLUSIVE: it
-- excludes itself and writes, not `db current`'s reads.
LOCK TABLE alembic_version IN SHARE ROW EXCLUSIVE MODE

-- name: may_migrate_as_admin
-- Whether this session's user is a member of the admin role who may create in the schema: it
-- migrates as that role (a database migrated before 0006 is the current user's to migrate).
SELECT pg_has_role(current_user, oid, 'MEMBER') AND has_schema_privilege(oid, current_schema(), 'CREATE')
FROM pg_roles WHERE rolname = :role

-- name: derived_builtin_held
-- The request results holding derived built-in entries (migration 0029), and what keeps a
-- downgrade past 0029 from storing them in their rows: those of them that are sealed (a sealed row
-- never changes), and whether anything was archived (an archived result may hold them, and 0028's
-- look-ups would read nulls).
SELECT count(*) AS held, count(*) FILTER (WHERE seq <= sealed_upto()) AS sealed,
       EXISTS (SELECT FROM archives) AS archived
FROM request_results WHERE holds_derived_entries(body, cause, ack_statuses)

-- name: store_derived_builtin_entries
-- A downgrade past 0029 stores the entries request_answers derives in the rows that hold none; a
-- row whose facts are gone keeps the form (its answer would be the stored nulls).
UPDATE request_results r SET body = a.body
FROM request_answers a
WHERE holds_derived_entries(r.body, r.cause, r.ack_statuses) AND a.signal_id = r.signal_id
  AND a.attempt = r.attempt AND a.body IS DISTINCT FROM r.body

-- name: derived_response_held
-- The request results holding a derived plain response (migration 0031), and what keeps a
-- downgrade past 0031 from storing it in their rows: those of them that are sealed (a sealed row
-- never changes), those whose command's response or signal is gone (nothing to store: a body
-- without a payload would look like a response that had none), and whether anything was archived
-- (an archived result may hold the form, which 0030's look-ups would read as no body).
SELECT count(*) AS held, count(*) FILTER (WHERE r.seq <= sealed_upto()) AS sealed,
       count(*) FILTER (WHERE NOT EXISTS (SELECT FROM command_responses c WHERE c.signal_id = r.signal_id)
                           OR NOT EXISTS (SELECT FROM signals s WHERE s.id = r.signal_id)) AS underivable,
       EXISTS (SELECT FROM archives) AS archived
FROM request_results r WHERE holds_derived_response(r.cause, r.headers)

-- name: store_derived_responses
-- A downgrade past 0031 stores the plain responses request_answers derives in the rows that hold
-- neither body nor headers.
UPDATE request_results r SET body = a.body, headers = a.headers
FROM request_answers a
WHERE holds_derived_response(r.cause, r.headers) AND a.signal_id = r.signal_id AND a.attempt = r.attempt

-- name: ledger_revision
-- The migration the ledger is at (Alembic's one row; none before the first migration). The
-- pipeline reads it before each step: it writes only a ledger at the migration it was written for.
SELECT max(version_num) FROM alembic_version
