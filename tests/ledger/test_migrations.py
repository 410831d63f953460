"""The schema module, the SQL object files and the Alembic migrations describe the same database."""

import json
import re
import subprocess
import sys
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, text

from ackstore.ledger import migrate, objects
from ackstore.ledger.database import make_engine, scratch_database
from ackstore.ledger.schema import SEALED_TABLES, SIGNAL_FACT_TABLES, metadata
from ackstore.rules.envelopes import SIGNAL_SHAPES
from jobs.sql import statements
from tests.support.catalog import catalog, differences
from tests.support.refusals import refusal
from tests.conftest import ADMIN_URL


def test_migrations_reach_head(migrated_engine: Engine) -> None:
    assert migrate.current_revision(migrated_engine) == migrate.head_revision()


def test_replayed_migrations_equal_the_schema_module(migrated_engine: Engine) -> None:
    with migrated_engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
        assert compare_metadata(context, metadata) == []


def test_upgrade_is_idempotent(migrated_engine: Engine) -> None:
    migrate.upgrade(migrated_engine)
    assert migrate.current_revision(migrated_engine) == migrate.head_revision()


def test_a_database_migrated_from_empty_equals_the_declared_one(migrated_engine: Engine) -> None:
    """Replaying every migration gives the schema the current files declare — tables, columns,
    constraints, indexes, triggers, views, functions, owners and privileges, read from the
    catalog: so the migrations' versioned definitions end at the current ones."""
    with migrated_engine.connect() as conn:
        migrated = catalog(conn)
    with scratch_database(ADMIN_URL, "declared") as url:
        engine = make_engine(url)
        try:
            with engine.begin() as conn:
                objects.declare(conn)
            with engine.connect() as conn:
                declared = catalog(conn)
        finally:
            engine.dispose()
    assert differences(migrated, declared) == []
    kinds = [item.kind for item in objects.current().values()]  # every file's object is there: not vacuous
    assert (len(declared["views"]), len(declared["functions"]), len(declared["triggers"])) == (
        kinds.count("view"), kinds.count("function"), kinds.count("trigger"))


def test_every_stored_version_belongs_to_a_migration() -> None:
    """Each stored version belongs to a migration that exists, and the current definition of an
    object is its newest version (a definition edited without a migration would be one a
    migrated database does not have: the catalog test above catches that for the newest)."""
    revisions = {path.name[:4] for path in migrate.MIGRATIONS_DIR.glob("versions/0*.py")}
    for name, item in objects.current().items():
        stored = objects.versions(name)
        assert set(stored) <= revisions, name
        assert max(stored) == item.version, name
    for folder in objects.SUPERSEDED.iterdir():
        assert {path.stem for path in folder.glob("*.sql")} <= revisions, folder.name


def test_no_python_holds_a_view_or_function_body() -> None:
    """The ledger's SQL lives in .sql files: no Python file of the project creates a view or a
    function itself (the migrations ask ackstore.ledger.objects for a version)."""
    root = migrate.MIGRATIONS_DIR.parent
    pattern = re.compile(r"CREATE\s+(OR\s+REPLACE\s+)?(VIEW|FUNCTION|TRIGGER)\b", re.IGNORECASE)
    found = [str(path.relative_to(root)) for folder in ("ackstore", "jobs", "migrations", "dags")
             for path in (root / folder).rglob("*.py") if pattern.search(path.read_text())]
    assert found == []


def test_a_released_version_never_changes() -> None:
    """Every stored version is in versions.lock with its digest: editing a definition a migration
    has released (instead of adding a migration and a new version) fails here, as would a version
    nobody locked."""
    lines = [line.split() for line in objects.VERSIONS_LOCK.read_text().splitlines() if line and line[0] != "#"]
    locked = {(name, version): digest for name, version, digest in lines}
    found = {key: objects.digest(item) for key, item in objects.stored().items()}
    changed = sorted(f"{name} {version}" for (name, version), digest in found.items() if locked.get((name, version)) != digest)
    assert changed == [], "changed or new versions: add a migration and a versions.lock line, never edit a released one"
    assert locked.keys() == found.keys()


def test_two_first_upgrades_at_once_both_end_at_head() -> None:
    """Two real `ackstore db upgrade` processes on an empty database at once (issue 50: the second
    failed with "tuple concurrently updated"): the second waits for the first and finds it done."""
    with scratch_database(ADMIN_URL, "race") as url:
        command = [sys.executable, "-m", "ackstore.cli", "--database-url", url, "db", "upgrade"]
        processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for _ in range(2)]
        answers = [process.communicate(timeout=300) for process in processes]
        for process, (out, err) in zip(processes, answers):
            assert process.returncode == 0, err
            assert json.loads(out) == {"revision": migrate.head_revision(), "head": migrate.head_revision()}
        engine = make_engine(url)
        try:
            with engine.connect() as conn:
                migrated = catalog(conn)
                assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar_one() == 1
        finally:
            engine.dispose()
    assert len(migrated["functions"]) == sum(item.kind == "function" for item in objects.current().values())


def _revisions() -> list[str]:
    return sorted(path.name[:4] for path in migrate.MIGRATIONS_DIR.glob("versions/0*.py"))


def _unowned(described: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A catalog without who owns what: a downgrade leaves the admin role what it owns (0006 made
    it the owner, and 0011 of what a superuser had made; giving objects back would serve nobody)."""
    def plain(item: Any) -> Any:
        if not isinstance(item, dict) or "owner" not in item:
            return item
        acl = [entry for entry in item.get("acl") or [] if not entry.startswith(f"{item['owner']}=")]
        return {**{k: v for k, v in item.items() if k != "owner"}, "acl": acl or None}
    return {kind: {name: plain(item) for name, item in objects_.items()} for kind, objects_ in described.items()}


def test_each_downgrade_undoes_its_upgrade() -> None:
    """Up one revision at a time from empty, then down one at a time: at each revision the
    catalog is the same on the way down as on the way up, owners aside (a downgrade that forgets
    or leaves anything shows here, not hidden by the upgrade after it)."""
    with scratch_database(ADMIN_URL, "steps") as url:
        engine = make_engine(url)
        try:
            up = {}
            for revision in _revisions():
                migrate.upgrade(engine, revision)
                with engine.connect() as conn:
                    up[revision] = catalog(conn)
            for revision in reversed(_revisions()[:-1]):
                migrate.downgrade(engine, revision)
                with engine.connect() as conn:
                    assert differences(_unowned(up[revision]), _unowned(catalog(conn))) == [], revision
        finally:
            engine.dispose()


def test_a_ledger_migrated_in_two_runs_reaches_head() -> None:
    """A database a superuser migrated from empty to 0010 in one run (its later objects are that
    user's, not the admin role's), then to head in another (as the admin role): the second run
    takes the objects over first, and ends at the declared schema's owners."""
    with scratch_database(ADMIN_URL, "two_runs") as url:
        engine = make_engine(url)
        try:
            migrate.upgrade(engine, "0010")
            with engine.connect() as conn:
                owners = {name: item["owner"] for name, item in catalog(conn)["functions"].items()}
            assert set(owners.values()) > {migrate.ADMIN_ROLE}  # not vacuous: some were the superuser's
            migrate.upgrade(engine)
            with engine.connect() as conn:
                functions = catalog(conn)["functions"]
            assert migrate.current_revision(engine) == migrate.head_revision()
            assert {item["owner"] for item in functions.values()} == {migrate.ADMIN_ROLE}
        finally:
            engine.dispose()


# --- the fact tables: listed once (schema.SEALED_TABLES); the SQL that names each by hand is held to it

FACTS = {table.name for table in SEALED_TABLES}
# The functions of the per-table triggers (sealing.sql, archiving.sql): each fires on every fact table.
PER_FACT_TABLE = ("ackstore_numbering_writer", "ackstore_refuse_sealed_change", "ackstore_refuse_sealed_truncate",
                  "ackstore_refuse_unarchived_delete")


def test_fact_leaves_has_a_branch_per_fact_table_with_its_columns_in_name_order() -> None:
    view = objects.current()["fact_leaves"].statement
    branches = re.findall(r"SELECT (\w+)\.seq, '(\w+)'::text, fact_leaf\(record_send\(ROW\('(\w+)'::text, ([^)]*)\)\)\)"
                          r"\s+FROM (\w+) (\w+) WHERE (\w+)\.seq IS NOT NULL", view)
    assert len(branches) == view.count("record_send")  # every branch read
    found = {}
    for alias, named, in_row, columns, table, from_alias, where_alias in branches:
        assert named == in_row == table and alias == from_alias == where_alias, table
        found[table] = [column.removeprefix(f"{alias}.") for column in columns.split(", ")]
    assert found == {table.name: sorted(column.name for column in table.columns) for table in SEALED_TABLES}


def test_a_signals_facts_are_spelled_over_the_fact_tables() -> None:
    """signal_facts has a branch per fact table, by the signal's id where the table names it
    (schema.SIGNAL_FACT_TABLES, which archive_lookups.facts_of looks up); blocked_from (jobs/sql/archive.sql)
    finds the signals of an interval by their own rows and those tables."""
    by_id = {table.name for table in SIGNAL_FACT_TABLES}
    function = objects.current()["signal_facts"].statement
    assert set(re.findall(r"SELECT '(\w+)'", function)) == FACTS
    assert {m[1] for m in re.finditer(r"FROM (\w+) (\w+) WHERE \2\.signal_id = signal\b", function)} == by_id
    touched = statements("archive")["blocked_from"].split("SELECT min(f.first_seq)")[0]
    assert {m[1] for m in re.finditer(r"FROM (\w+) (\w+) WHERE \2\.seq > :after_seq AND \2\.seq <= :upto_seq",
                                      touched)} == {"signals", *by_id}


def test_the_sql_names_every_fact_table_and_no_other(migrated_engine: Engine) -> None:
    """Each per-table trigger fires on every fact table and no other; only the archive role may
    delete a fact, from every fact table; the reporter reads each (verify, prove, export)."""
    with migrated_engine.connect() as conn:
        fired = conn.execute(text(
            "SELECT p.proname, c.relname, t.tgname FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid "
            "JOIN pg_class c ON c.oid = t.tgrelid WHERE NOT t.tgisinternal AND p.proname = ANY (:f)"),
            {"f": list(PER_FACT_TABLE)}).all()
        privileges = conn.execute(text(
            "SELECT r.role, c.relname, p.privilege FROM unnest(CAST(:roles AS text[])) r(role) "
            "CROSS JOIN pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "CROSS JOIN unnest(ARRAY['SELECT', 'DELETE']) p(privilege) "
            "WHERE n.nspname = 'public' AND c.relkind = 'r' AND has_table_privilege(r.role, c.oid, p.privilege)"),
            {"roles": list(objects.component_roles())}).all()
    for function in PER_FACT_TABLE:
        tables = [table for name, table, _ in fired if name == function]
        assert sorted(tables) == sorted(FACTS), function
    assert all(trigger.startswith(f"{table}_") for _, table, trigger in fired)
    deleting = {role: {table for who, table, privilege in privileges if who == role and privilege == "DELETE"} & FACTS
                for role in objects.component_roles()}
    assert deleting == {role: FACTS if role == "ackstore_archive" else set() for role in objects.component_roles()}
    assert FACTS <= {table for who, table, privilege in privileges if who == "ackstore_reporter" and privilege == "SELECT"}


# --- the shapes of a signal: ingestion's Python list, and the SQL's (issue 50) ---------------------

_BRANCH = re.compile(r"\(kind = '([\w-]+)'::text\) AND \(channel = '(\w+)'::text\) AND "
                     r"\((action = ANY \(ARRAY\[([^]]*)\]\)|action <> ''::text)\)")


def test_the_signals_shape_check_is_ingestions_list(migrated_engine: Engine) -> None:
    """The migrated CHECK ck_signals_shape, read back from the catalog, allows each kind on its
    channel with the actions envelopes.SIGNAL_SHAPES names — the one list, in Python."""
    with migrated_engine.connect() as conn:
        definition = conn.execute(text("SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                                        "WHERE conname = 'ck_signals_shape'")).scalar_one()
    found = {kind: (channel, tuple(re.findall(r"'([^']*)'::text", listed)) if listed else None)
             for kind, channel, _, listed in _BRANCH.findall(definition)}
    assert found == SIGNAL_SHAPES, definition
    assert "NOT VALID" not in definition


def test_migration_0024_on_a_ledger_holding_an_odd_signal_and_an_ancient_log_time() -> None:
    """A ledger of 0023 whose login stored a signal of no shape ingestion takes (a direct call of a
    write function) and logged a time of 44 BC: 0024 keeps the shape check NOT VALID — it holds for
    new signals — and moves the time to the connection's claim."""
    with scratch_database(ADMIN_URL, "odd_0023") as url:
        engine = make_engine(url)
        try:
            migrate.upgrade(engine, "0023")
            with engine.begin() as conn:
                conn.execute(text(
                    "SELECT insert_signal('api', 'm1', 'c1', 'http', 'twin', 'twin-command', 'bogus', 'org.acme:a', "
                    "'org.acme/a/things/twin/commands/modify', '/', '1', '{}', '{}', false, 60000)"))
                conn.execute(text("SELECT claim_connection('plant-old')"))
                conn.execute(text("SELECT log_connection_event('plant-old', 'outage', 'old', NULL, "
                                  "'0044-03-15 12:00:00+00 BC')"))
            migrate.upgrade(engine)
            with engine.connect() as conn:
                definition = conn.execute(text("SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                                               "WHERE conname = 'ck_signals_shape'")).scalar_one()
                moved = conn.execute(text("SELECT l.happened_at = c.claimed_at FROM connection_log l "
                                          "JOIN connections c ON c.id = l.connection")).scalar_one()
            assert definition.endswith("NOT VALID") and moved
            assert refusal(engine, "SELECT insert_signal('api', 'm2', 'c2', 'http', 'twin', 'twin-command', 'bogus', "
                                    "'org.acme:a', 'org.acme/a/things/twin/commands/modify', '/', '1', '{}', '{}', "
                                    "false, 60000)") == "23514"
        finally:
            engine.dispose()


def test_migration_0025_adds_the_late_built_in_acks_sealed_so_far_as_a_seal_would_and_its_downgrade_takes_them_back(
        monkeypatch) -> None:
    """A ledger of 0024 whose seals covered built-in acks late for their attempts (no row of acks,
    so uncounted there): 0025 adds them to the totals as a seal of 0025 would — a source past the
    first ACKSTORE_METRIC_SOURCES connections claimed folded into 'other', not dropped — and renames
    signals_received; the downgrade leaves the totals as they were, row for row."""
    from tests.support.seeded_ledger import Attempt, Signal, at, seed

    monkeypatch.setenv("ACKSTORE_METRIC_SOURCES", "1")  # plant-a, claimed first, has series of its own
    with scratch_database(ADMIN_URL, "late_0024") as url:
        engine = make_engine(url)
        try:
            migrate.upgrade(engine, "0024")
            late = [Attempt(["twin-persisted"], 0, 10, 12, 408, "deadline", {"twin-persisted": 408})]
            seed(engine, signals=[Signal(name, source, 0, late) for name, source in
                                  (("a1", "plant-a"), ("b1", "plant-b"), ("c1", "plant-c"))])
            totals = {("late_acks", "plant-a", "", ""): 3.0, ("late_acks", "plant-b", "", ""): 1.0,
                      ("signals_received", "plant-b", "twin", ""): 1.0}
            with engine.begin() as conn:
                batch = conn.execute(text("INSERT INTO ledger_batches (step, committed_at) "
                                          "VALUES ('apply_twin', :at) RETURNING id"), {"at": at(15)}).scalar_one()
                conn.execute(text("INSERT INTO command_responses (signal_id, status, is_error, batch_id, event_id, "
                                  "revision, event_action) SELECT id, 204, false, :b, id, id, 'modified' FROM signals"),
                             {"b": batch})  # each change persisted after its 408: late
                conn.execute(text("INSERT INTO seals (number, after_seq, upto_seq, counts, leaves, root, previous, "
                                  "hash) SELECT 1, 0, last_value, '{}', 0, sha256(''), sha256(''), sha256('1') "
                                  "FROM ledger_seq"))
                for (metric, source, label, detail), value in totals.items():
                    conn.execute(text("INSERT INTO metric_totals VALUES (:m, :s, :l, :d, :v)"),
                                 {"m": metric, "s": source, "l": label, "d": detail, "v": value})
            before = _totals(engine)
            migrate.upgrade(engine, "0025")
            assert _totals(engine) == {("late_acks", "plant-a", "", ""): 4.0, ("late_acks", "plant-b", "", ""): 1.0,
                                       ("late_acks", "other", "", ""): 2.0,
                                       ("signals_stored", "plant-b", "twin", ""): 1.0}
            migrate.downgrade(engine, "0024")
            assert _totals(engine) == before == totals
        finally:
            engine.dispose()


def _totals(engine: Engine) -> dict[tuple[str, str, str, str], float]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT metric, source, label, detail, value FROM metric_totals"))
        return {(row.metric, row.source, row.label, row.detail): row.value for row in rows}

