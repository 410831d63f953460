"""Least-privilege roles (migration 0006, docs/roles.md): each component works as a login role
that is a member of only its group role, and no role can do what it must not.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import DBAPIError

from ackstore.ledger import connection_log, migrate, objects, reports, settlements, things, verify
from ackstore.ledger import metrics as ledger_metrics
from ackstore.ledger.database import drop_database, make_engine
from ackstore.ledger.database_url import DatabaseUrl
from ackstore.ledger.named_sql import load
from ackstore.ledger.store import AckStore
from ackstore.rules import errors
from tests.support import catalog_privileges
from tests.conftest import ADMIN_URL
from tests.support.ledger import ack_message, twin_command
from tests.support.live_signals import live_message
from tests.support.logins import GROUPS, as_login, logins  # noqa: F401 — logins is a fixture

COMPONENTS = objects.component_roles()  # the roles of GROUPS a component's logins are members of
SOURCE = "plant-r"


def _reserve(engine: Engine, login: str) -> None:
    """The operator reserves the connection SOURCE for ``login`` (issue 50: an ingest login claims
    no connection by itself)."""
    with engine.begin() as conn:
        assert conn.execute(text("SELECT reserve_connection(:c, :login)"), {"c": SOURCE, "login": login}).scalar() == login


def refused(engine: Engine, sql: str) -> bool:
    try:
        with engine.begin() as conn:
            conn.execute(text(sql))
    except DBAPIError as error:
        return "permission denied" in str(error.orig) or "immutable" in str(error.orig)
    return False


# Every role an object of the ledger grants a privilege to, its owner's entry aside (PUBLIC: 0).
GRANTEES = """
SELECT a.grantee::regrole::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN LATERAL aclexplode(c.relacl) a WHERE n.nspname = 'public' AND a.grantee NOT IN (0, c.relowner)
UNION SELECT a.grantee::regrole::text FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace CROSS JOIN LATERAL aclexplode(t.attacl) a
WHERE n.nspname = 'public' AND a.grantee NOT IN (0, c.relowner)
UNION SELECT a.grantee::regrole::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
CROSS JOIN LATERAL aclexplode(p.proacl) a WHERE n.nspname = 'public' AND a.grantee NOT IN (0, p.proowner)
UNION SELECT a.grantee::regrole::text FROM pg_namespace n
CROSS JOIN LATERAL aclexplode(n.nspacl) a WHERE n.nspname = 'public' AND a.grantee NOT IN (0, n.nspowner)
"""


def test_the_group_roles_exist_and_cannot_log_in(migrated_engine: Engine) -> None:
    """The roles grants.sql names are the ones a migrated ledger has, and grants anything to."""
    with migrated_engine.connect() as conn:
        rows = dict(conn.execute(text("SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname = ANY (:r)"),
                                 {"r": list(GROUPS)}).all())
        grantees = set(conn.execute(text(GRANTEES)).scalars())
    assert rows == {group: False for group in GROUPS}
    assert grantees == set(GROUPS)


def test_grants_sql_grants_each_block_to_its_role_and_the_roles_are_named_once() -> None:
    """Each role's block of grants.sql grants to that role alone (its name is the list's entry),
    the schema's grants to group roles; and the roles a refused login is told of are these."""
    def grantees(block: str) -> set[str]:
        sql = "\n".join(line for line in block.splitlines() if not line.lstrip().startswith("--"))
        return {role for names in re.findall(r"\bTO\s+(\w+(?:\s*,\s*\w+)*)", sql)
                for role in re.split(r"\s*,\s*", names)}

    blocks = load(objects.GRANTS)
    assert len(COMPONENTS) >= 4  # read, not vacuous
    for role in COMPONENTS:
        assert grantees(blocks[role]) == {role}, role
    assert grantees(blocks["schema"]) <= set(GROUPS)
    told = errors.permission_denied(None, "permission denied").description or ""
    assert set(re.findall(r"\backstore_\w+", told)) == set(GROUPS)


def test_every_table_and_view_is_granted_to_a_role_and_owned_by_the_admin_role(migrated_engine: Engine) -> None:
    with migrated_engine.connect() as conn:
        objects = dict(conn.execute(text(
            "SELECT c.relname, pg_get_userbyid(c.relowner) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'v')")).all())
        granted = set(conn.execute(text(
            "SELECT table_name FROM information_schema.role_table_grants WHERE grantee = ANY (:r) "
            "UNION SELECT table_name FROM information_schema.role_column_grants WHERE grantee = ANY (:r)"),
            {"r": list(COMPONENTS)}).scalars())
    # fact_numbering's lock is the numbering lock: no role may take it (decisions #101); the same for the
    # writers' and steps' locks, and a connection's owner is read and written by the functions alone (issue 37)
    only_functions = {"fact_numbering", "thing_locks", "ledger_locks", "connections"}
    assert set(objects) - {"alembic_version", *only_functions} - granted == set(), "a table or view no role may use"
    assert set(objects.values()) == {migrate.ADMIN_ROLE}


@pytest.mark.spark
def test_each_component_works_as_its_own_role(engine: Engine, database_url: str, logins, spark) -> None:
    from jobs import pipeline
    from jobs.settings import PipelineSettings

    _reserve(engine, logins["ackstore_ingest"])
    ingest = AckStore.connect(as_login(database_url, logins["ackstore_ingest"]))
    reporter = AckStore.connect(as_login(database_url, logins["ackstore_reporter"]))
    try:
        # ingest: declare, submit (API and a connection), ack, pull, respond
        assert ingest.declare("app", ["app:done"])["status"] == 204
        assert ingest.declare("responder", [], channels=["live"])["status"] == 204
        assert ingest.submit(twin_command("create", path="/", value={}, correlation_id="t1",
                                          requested_acks=["twin-persisted", "app:done"]))[
            "status"] == 202
        (stored,) = ingest.ingest([twin_command("create", thing="org.acme/c1", path="/", value={}, correlation_id="c1")], api="connectivity",
                                  source=SOURCE, source_message_ids=["m1"])
        assert stored.ok and stored.awaits_decision
        assert ingest.acknowledge("app", ack_message("t1", "app:done")) == {"status": 204}
        assert ingest.submit(live_message("l1"))["status"] == 202
        (message,) = ingest.pull("responder")
        response = {"topic": message["topic"], "path": "/outbox/messages/ask", "status": 200, "value": "ok",
                    "headers": {"correlation-id": "l1", "ack-token": message["headers"]["ack-token"]}}
        assert ingest.respond("responder", response) == {"status": 204}
        # pipeline: every step
        settings = PipelineSettings(database_url=as_login(database_url, logins["ackstore_pipeline"]), partitions=2)
        stats = pipeline.run(spark, settings)
        assert stats["settle"]["settlements"] >= 1
        # ingest again: the connector carries the decision out
        with ingest.engine.begin() as conn:
            settlements.record_latest(conn, {stored.signal_id})
        with engine.connect() as conn:
            assert conn.execute(text("SELECT carried_out_at IS NOT NULL FROM settlements")).scalar_one()
        # reporter: the reports and show
        assert ingest.result("t1")["status"] == 200
        shown = reporter.stored_signal("t1")
        assert shown["state"] == "settled" and {a["label"] for a in shown["acks"]} >= {"twin-persisted", "app:done"}
        with reporter.engine.connect() as conn:
            assert {row["source"] for row in reports.settlement(conn)} == {SOURCE}
            assert [row["correlation_id"] for row in reports.audit(conn)] == []
            assert {row["source"] for row in _windowed_reports(conn)} == {"api", SOURCE}
    finally:
        ingest.close()
        reporter.close()


def _windowed_reports(conn) -> list[dict]:
    """Every windowed report over the last day, as the caller's role; the watermarks returned."""
    window = reports.Window(datetime.now(timezone.utc) - timedelta(days=1), datetime.now(timezone.utc))
    reports.latency(conn, window, timedelta(hours=1), 50)
    reports.unsettled(conn, window, 50)
    reports.late_acks(conn, window, 50)
    reports.labels(conn, window, 50)
    reports.dead_letters(conn, window, 50)
    return reports.watermarks(conn, window, 50)


def test_the_catalog_grants_exactly_what_roles_md_states(migrated_engine: Engine) -> None:
    """docs/roles.md lists every privilege of every group role (TEMPORARY and SECURITY DEFINER
    functions included): none more is granted, none of it is missing."""
    with migrated_engine.connect() as conn:
        actual = catalog_privileges.granted(conn)
    documented = catalog_privileges.stated()
    assert len(documented) > 100  # the table was read
    assert actual == documented, (f"granted, not in docs/roles.md: {sorted(actual - documented)}; "
                                  f"in docs/roles.md, not granted: {sorted(documented - actual)}")


@pytest.mark.parametrize("who", [*COMPONENTS, "no group"])
def test_no_login_creates_a_temporary_table(engine: Engine, database_url: str, logins, who: str) -> None:
    admin = create_engine(DatabaseUrl.parse(ADMIN_URL).sqlalchemy(), isolation_level="AUTOCOMMIT")
    login = logins.get(who) or f"nobody_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    if who == "no group":
        with admin.connect() as conn:
            conn.execute(text(f'CREATE ROLE "{login}" LOGIN'))  # a name made here, never input
    writer = make_engine(as_login(database_url, login))
    try:
        with pytest.raises(DBAPIError) as refused:
            with writer.begin() as conn:
                conn.execute(text("CREATE TEMP TABLE scratch (id int)"))
        assert refused.value.orig.pgcode == "42501"
    finally:
        writer.dispose()
        if who == "no group":
            with admin.connect() as conn:
                conn.execute(text(f'DROP ROLE "{login}"'))
        admin.dispose()


def test_the_reporter_cannot_write_anything(engine: Engine, database_url: str, logins) -> None:
    reporter = make_engine(as_login(database_url, logins["ackstore_reporter"]))
    try:
        for sql in ("INSERT INTO subscribers (id, holder, channels) VALUES ('x', 'subscriber:x', '{twin}')",
                    "DELETE FROM request_results", "UPDATE settlements SET decision = 'ack'", "TRUNCATE acks",
                    "DELETE FROM signals", "CREATE TABLE sneaky (id int)"):
            assert refused(reporter, sql), sql
    finally:
        reporter.dispose()


def test_the_reporter_reads_who_a_signal_was_handed_to_but_not_the_token_key(engine: Engine, database_url: str,
                                                                           logins) -> None:
    """With a delivery's token_key one could mint its ack-tokens; show reads the rest."""
    reporter = make_engine(as_login(database_url, logins["ackstore_reporter"]))
    try:
        assert refused(reporter, "SELECT token_key FROM deliveries")
        assert refused(reporter, "SELECT * FROM deliveries")
        with reporter.connect() as conn:
            conn.execute(text("SELECT subscriber_id, signal_id, attempt, event_id, handouts, available_at, leased_at, "
                              "done_at, answered_handout, answered_labels FROM deliveries")).all()
    finally:
        reporter.dispose()


def test_the_ingest_role_cannot_change_a_decided_result_or_a_settlement(engine: Engine, database_url: str,
                                                                        logins) -> None:
    assert AckStore(engine).submit(twin_command(correlation_id="s1"))["status"] == 202  # a signal to change
    ingest = make_engine(as_login(database_url, logins["ackstore_ingest"]))
    try:
        for sql in ("UPDATE request_results SET status = 200", "DELETE FROM request_results",
                    "INSERT INTO request_results (signal_id, attempt, status, headers, cause) VALUES (1, 1, 200, '{}', 'acks')",
                    "UPDATE settlements SET decision = 'ack'", "DELETE FROM settlements",
                    "INSERT INTO settlements (signal_id, attempt, decision) VALUES (1, 1, 'ack')",
                    "UPDATE signals SET received_at = now()", "DELETE FROM signals", "UPDATE acks SET status = 200",
                    "TRUNCATE queue_decide", "DELETE FROM pipeline_runs"):
            assert refused(ingest, sql), sql
    finally:
        ingest.dispose()


ACK_FACTS = {"signal_id": "signal_id + 1", "attempt": "attempt + 1", "label": "'app:forged'", "status": "500",
             "payload": "'\"forged\"'", "headers": "'{}'", "issuer": "'someone-else'", "weak": "NOT weak",
             "received_at": "received_at - interval '1 hour'", "reason": "'forged'", "id": "id + 1000"}


@pytest.mark.parametrize("who", ["ackstore_pipeline", "superuser"])
def test_an_acks_facts_never_change_not_even_its_disposition(engine: Engine, database_url: str, logins, who: str) -> None:
    """Whoever holds UPDATE on acks (the pipeline, for the SHARE lock of its merge; a superuser)
    cannot rewrite what a subscriber said, nor its disposition (a late ack is derived, decisions
    #101); only a superuser with the triggers off could, and `ackstore verify` names that row."""
    store = AckStore(engine)
    assert store.declare("app", ["app:done"])["status"] == 204
    assert store.submit(twin_command(correlation_id="k1", requested_acks=["app:done"]))["status"] == 202
    assert store.acknowledge("app", ack_message("k1", "app:done", 200, value="said")) == {"status": 204}
    writer = engine if who == "superuser" else make_engine(as_login(database_url, logins[who]))
    before = _ack_rows(engine)
    try:
        for column, value in {**ACK_FACTS, "disposition": "'late'"}.items():
            assert refused(writer, f"UPDATE acks SET {column} = {value}"), column
    finally:
        if writer is not engine:
            writer.dispose()
    assert _ack_rows(engine) == before


def _ack_rows(engine: Engine) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(text("SELECT id, signal_id, attempt, label, status, payload, headers, "
                                                        "issuer, weak, received_at, reason, disposition FROM acks"))]


def test_a_member_of_the_admin_role_runs_the_migrations(logins) -> None:
    name = f"ackstore_roles_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    server = create_engine(DatabaseUrl.parse(ADMIN_URL).sqlalchemy(), isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" OWNER {migrate.ADMIN_ROLE}'))  # as docs/roles.md says
    server.dispose()
    try:
        url = DatabaseUrl({**DatabaseUrl.parse(ADMIN_URL).params, "dbname": name, "user": logins[migrate.ADMIN_ROLE]})
        admin = make_engine(url)
        migrate.upgrade(admin)
        assert migrate.current_revision(admin) == migrate.head_revision()
        with admin.connect() as conn:
            owners = set(conn.execute(text(
                "SELECT DISTINCT pg_get_userbyid(c.relowner) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'v')")).scalars())
        admin.dispose()
        assert owners == {migrate.ADMIN_ROLE}
    finally:
        drop_database(ADMIN_URL, name)


@pytest.mark.spark
@pytest.mark.slow
def test_the_connector_runs_as_the_ingest_role_and_the_pipeline_as_its_own(engine: Engine, database_url: str, logins,
                                                                          spark) -> None:
    from jobs import pipeline
    from jobs.settings import PipelineSettings
    from tests.support.broker import Broker, connector, publish_all, stop, wait_for

    broker = Broker()
    try:
        source = broker.queue("commands")
        publish_all(broker, source, [twin_command("create", thing=f"org.acme/r{n}", path="/", value={},
                                                  correlation_id=f"r{n}", requested_acks=["twin-persisted"])
                                     for n in range(3)])
        _reserve(engine, logins["ackstore_ingest"])
        process = connector(as_login(database_url, logins["ackstore_ingest"]), "--connection-id", SOURCE,
                            "--queue", source, "--poll", "0.5")
        try:
            wait_for(lambda: _count(engine, "SELECT count(*) FROM signals") == 3, what="3 signals stored")
            settings = PipelineSettings(database_url=as_login(database_url, logins["ackstore_pipeline"]), partitions=2)
            pipeline.run(spark, settings)
            wait_for(lambda: _count(engine, "SELECT count(*) FROM settlements WHERE carried_out_at IS NOT NULL") == 3,
                     what="3 settlements carried out by the connector")
        finally:
            code, log = stop(process)
        assert code == 0 and "permission denied" not in log, log
        assert broker.depth(source) == 0
    finally:
        broker.close()


def _count(engine: Engine, sql: str) -> int:
    with engine.connect() as conn:
        return conn.execute(text(sql)).scalar_one()


# --- no grant a role does not use -------------------------------------------------------------------

# Grants no table counter can show in use: row locks (SELECT … FOR SHARE needs an UPDATE privilege),
# and TRUNCATE (the staging tables are emptied by it; PostgreSQL counts no rows for it).
TRACK_FUNCTIONS = """DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET track_functions = ''all''', current_database()); END $$"""
UNMEASURABLE = {
    ("ackstore_pipeline", "*", "TRUNCATE"): "the staging tables are emptied by TRUNCATE, which counts no rows",
    ("ackstore_pipeline", "acks", "UPDATE"): "the sweep flags acks late: a request decided by its deadline with acks "
                                             "after it; and LOCK TABLE acks IN SHARE MODE asks for a table-wide UPDATE",
    ("ackstore_pipeline", "stage_results", "DELETE"): "a decision the sweep defers because its read missed an in-time ack",
    ("ackstore_pipeline", "queue_index", "UPDATE"): "INSERT … ON CONFLICT DO UPDATE for a thing queued twice",
    ("ackstore_pipeline", "pipeline_watermarks", "UPDATE"): "ON CONFLICT DO UPDATE once the watermark row exists",
    # A decided attempt whose built-in fact may still come is kept, found and forgotten by the keys of
    # the new facts (issue 50's review): only a request decided before its command was applied — the
    # apply step behind a burst — makes one, and a pass applies before it decides.
    ("ackstore_pipeline", "metric_awaited_facts", "INSERT"): "a request decided before its command was applied",
    ("ackstore_pipeline", "metric_awaited_facts", "DELETE"): "its fact sealed after it was kept",
    ("ackstore_reporter", "metric_awaited_facts", "SELECT"): "probed by the facts after the last seal: none here",
}


def _table_counters(engine: Engine) -> dict[str, tuple[int, int, int, int]]:
    """Per table: scans, rows inserted, updated, deleted; per function (as ``name()``): its calls."""
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT relname, seq_scan + COALESCE(idx_scan, 0), n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables "
            "UNION ALL SELECT funcname || '()', 0, 0, 0, calls FROM pg_stat_user_functions"))
        return {row[0]: tuple(row[1:]) for row in rows}


def _end_sessions_of(engine: Engine, login: str) -> None:
    """A backend flushes its table counters when it exits: end the login's sessions and wait until
    they are gone (exiting is asynchronous; the flush runs before a backend leaves pg_stat_activity).
    Each look is its own transaction: within one, PostgreSQL answers from a snapshot."""
    sessions = text("SELECT count(*) FROM pg_stat_activity WHERE usename = :u")
    with engine.begin() as conn:
        conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = :u"), {"u": login})
    deadline = time.monotonic() + 30
    while True:
        with engine.begin() as conn:
            if not conn.execute(sessions, {"u": login}).scalar_one():
                return
        assert time.monotonic() < deadline, f"the sessions of {login} did not end"
        time.sleep(0.05)


def _used(before: dict, after: dict) -> set[tuple[str, str]]:
    used = set()
    for table, counts in after.items():
        scans, inserted, updated, deleted = (now - then for now, then in zip(counts, before.get(table, (0,) * 4)))
        if table.endswith("()"):  # a function: its calls
            if deleted > 0:
                used.add((table[:-2], "EXECUTE"))
            continue
        for privilege, delta in (("SELECT", scans), ("INSERT", inserted), ("UPDATE", updated), ("DELETE", deleted)):
            if delta > 0:
                used.add((table, privilege))
    return used


def _granted(engine: Engine, role: str) -> set[tuple[str, str]]:
    with engine.connect() as conn:
        return set(conn.execute(text(
            "SELECT table_name, privilege_type FROM information_schema.role_table_grants WHERE grantee = :r "
            "UNION SELECT table_name, privilege_type FROM information_schema.role_column_grants WHERE grantee = :r "
            "UNION SELECT routine_name, privilege_type FROM information_schema.role_routine_grants WHERE grantee = :r"),
            {"r": role}).all())


@pytest.mark.spark
def test_no_role_holds_a_grant_its_component_does_not_use(engine: Engine, database_url: str, logins, spark) -> None:
    """Each component's workload runs as its role, alone; the tables' counters show what it read
    and wrote. A grant nothing used is one too many (views are checked by the reporter's reads)."""
    from jobs import pipeline
    from jobs.settings import PipelineSettings

    used: dict[str, set[tuple[str, str]]] = {}  # the roles whose workload runs here (the archive's: test_archive.py)
    with engine.begin() as conn:  # count every function's calls (the logins' new sessions read the setting)
        conn.execute(text(TRACK_FUNCTIONS))

    def phase(group: str, work) -> None:
        login = logins[group]
        before = _table_counters(engine)
        work(as_login(database_url, login))
        _end_sessions_of(engine, login)
        used[group] = used.get(group, set()) | _used(before, _table_counters(engine))

    def ingest_first(url: str) -> None:
        with AckStore.connect(url) as store:
            assert store.claim_connection(SOURCE) == {"status": 204}  # its connector starting: reserved for it
            store.declare("app", ["app:done", "app:more"])
            store.declare("app", ["app:done"])  # a new declaration replaces the old
            store.declare("responder", [], channels=["live"])
            store.declare("filtering", ["filtering:seen"], filter="eq(attributes/n,-1)")  # gets a weak ack
            store.submit(twin_command("create", path="/", value={}, correlation_id="t1",
                                      requested_acks=["twin-persisted", "app:done", "filtering:seen"]))
            store.ingest([twin_command("create", thing="org.acme/c1", path="/", value={}, correlation_id="c1",
                                       requested_acks=["app:done"])],
                         api="connectivity", source=SOURCE, source_message_ids=["m1"])
            store.acknowledge("app", ack_message("t1", "app:done"))
            store.acknowledge("app", ack_message("c1", "app:done", 503, thing="org.acme/c1"))
            store.submit_many([twin_command("create", thing=f"org.acme/b{n}", path="/", value={}, correlation_id=f"b{n}")
                               for n in (1, 2)])  # a batch: staged, then merged
            store.submit(twin_command("create", thing="org.acme/c4", path="/", value={}, correlation_id="t4",
                                      requested_acks=["twin-persisted", "search-persisted"]))
            store.submit(live_message("l1"))
            (message,) = store.pull("responder")
            store.respond("responder", {"topic": message["topic"], "path": "/outbox/messages/ask", "status": 200,
                                        "headers": {"correlation-id": "l1"}})

    def pipeline_run(url: str) -> None:  # the same run id twice: the second run replaces the run records
        pipeline.run(spark, PipelineSettings(database_url=url, partitions=2, run_id="r1"))

    def ingest_after(url: str) -> None:
        with AckStore.connect(url) as store:
            assert store.result("t1")["status"] == 200
            # its entries derived from the built-in facts (decisions #141): the command's search mark read
            assert set(store.result("t4")["body"]) == {"twin-persisted", "search-persisted"}
            again, _ = store.ingest([twin_command("create", thing="org.acme/c1", path="/", value={},
                                                  correlation_id="c1", requested_acks=["app:done"]),
                                     twin_command("create", thing="org.acme/c3", path="/", value={}, correlation_id="c3")],
                                    api="connectivity", source=SOURCE, source_message_ids=["m1", "m3"])
            assert again.awaits_decision  # the redeliver decision opened attempt 2
            handed = {m["headers"]["correlation-id"]: m for m in store.pull("app")}
            answer = ack_message("c1", "app:done", thing="org.acme/c1")
            answer["headers"]["ack-token"] = handed["c1"]["headers"]["ack-token"]
            assert store.acknowledge("app", answer) == {"status": 204}
            assert store.search("exists(thingId)", ["org.acme"])["items"]
            with store.engine.connect() as conn:  # the HTTP API's read of a twin (ackstore serve, migration 0027)
                assert things.read(conn, "org.acme:c1").state.exists
            store.submit(twin_command("modify", path="/attributes/n", value=1, correlation_id="t2"))  # changes a thing
            with store.engine.begin() as conn:
                settlements.record_latest(conn, {again.signal_id})
                settlements.record_carried_out(conn, [(again.signal_id, 1)], held=True)
                connection_log.record(conn, SOURCE, "dropped", "a poison message", message_id="m9")  # its connector's
                connection_log.seen(conn, SOURCE, None)  # its connector says it runs (every 15 s)
                connection_log.stopped(conn, SOURCE)  # and that it stopped cleanly (decisions #133)

    def report(url: str) -> None:
        with AckStore.connect(url) as store:
            assert store.stored_signal("t1") is not None
            with store.engine.connect() as conn:
                reports.settlement(conn)
                reports.audit(conn)
                _windowed_reports(conn)
                assert verify.prove(conn, "t1")
                assert connection_log.metrics(conn, SOURCE)["last_day"]["dropped"] == 1  # `connection metrics`
            assert ledger_metrics.read(store.engine).counters  # a scrape of `ackstore metrics`
        assert verify.verify(store.engine, None).ok

    _reserve(engine, logins["ackstore_ingest"])  # the operator's, before the ingest login's workload
    phase("ackstore_ingest", ingest_first)
    phase("ackstore_pipeline", pipeline_run)
    phase("ackstore_ingest", ingest_after)
    phase("ackstore_pipeline", pipeline_run)
    phase("ackstore_reporter", report)
    unused = {}
    for group, evidence in used.items():
        # A view has no counters of its own (its tables' count the reads): a view grant is shown
        # in use by the component's statements naming it, which test_each_component_works_as_its_own_role runs.
        views = {(view, "SELECT") for view in objects.views()}
        extra = {(table, privilege) for table, privilege in _granted(engine, group) - evidence - views
                 if (group, table, privilege) not in UNMEASURABLE and (group, "*", privilege) not in UNMEASURABLE}
        if extra:
            unused[group] = sorted(extra)
    assert unused == {}, json.dumps(unused)
