"""Archiving (issue 28, decisions #102): settled, validated, sealed history older than the
retention leaves the hot tables for Parquet, whole seals at a time; `verify` covers it as before;
kill -9 at any step then a re-run leaves every row hot or archived, once.

The ledger: API commands (settled once decided and validated) through the pipeline, sealed; each
test archives a copy of it with a retention of 0 days.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Iterator

import pyarrow.dataset as ds
import pytest
from sqlalchemy import Engine, text

from ackstore import cli
from ackstore.ledger import archive_reader, heads, seals, verify
from ackstore.ledger.database import make_engine, scratch_database
from ackstore.ledger.reports import Window
from ackstore.ledger.schema import SEALED_TABLES
from ackstore.ledger.store import AckStore
from ackstore.rules import canonical
from jobs import archive, pipeline
from jobs.settings import PipelineSettings
from tests.conftest import ADMIN_URL
from tests.support.archive_settings import settings_for
from tests.support.auditor import independent
from tests.support.ledger import ack_message, copy_of, twin_command
from tests.support.live_signals import live_message
from tests.support.reports_asked import reports_over

FAULTS = ("archive:written", "archive:manifest", "archive:read_back", "archive:deleting")


def build(url: str, spark, commands: int = 12) -> None:
    """API commands with built-in and custom acks, decided, validated and sealed."""
    engine = make_engine(url)
    from ackstore.ledger import migrate

    migrate.upgrade(engine)
    store = AckStore(engine)
    store.declare("app", ["app:done"])
    for n in range(commands):
        labels = ["twin-persisted", "search-persisted"] + (["app:done"] if n % 3 == 0 else [])
        assert store.submit(twin_command("modify", thing=f"org.acme/t{n % 4}", path="/attributes/n", value=n,
                                         correlation_id=f"a{n}", requested_acks=labels))["status"] == 202
        if n % 3 == 0:
            assert store.acknowledge("app", ack_message(f"a{n}", "app:done", thing=f"org.acme/t{n % 4}")) == {"status": 204}
    engine.dispose()
    pipeline.run(spark, PipelineSettings(database_url=url, partitions=2))


@pytest.fixture(scope="module")
def built(spark) -> Iterator[str]:
    with scratch_database(ADMIN_URL, "archived") as url:
        build(url, spark)
        yield url


@pytest.fixture
def ledger(built: str) -> Iterator[Engine]:
    """A copy of the module's ledger, to change at will."""
    with copy_of(built, ADMIN_URL, "archive") as engine:
        yield engine


def hot(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {table.name: conn.execute(text(f"SELECT count(*) FROM {table.name}")).scalar_one()
                for table in SEALED_TABLES}


def sealed_counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        total = {table.name: 0 for table in SEALED_TABLES}
        for seal in seals.between(conn, 1, seals.latest(conn).number):
            for table, n in seal.counts.items():
                total[table] += n
        return total


def archived(root: Path) -> dict[str, int]:
    """Rows in the archive's Parquet files, per table (a row written twice counts twice)."""
    return {table.name: (ds.dataset(str(root / table.name), format="parquet", partitioning="hive").count_rows()
                         if (root / table.name).exists() else 0) for table in SEALED_TABLES}


def test_the_whole_settled_history_leaves_and_verifies_as_before(ledger: Engine, tmp_path: Path, spark) -> None:
    heads_file = heads.HeadsFile(tmp_path / "heads.jsonl")
    heads.export(ledger, heads_file)
    before = hot(ledger)
    expected = sealed_counts(ledger)
    assert before == expected and before["signals"] == 12
    stats = archive.run(spark, settings_for(ledger, tmp_path / "archive"))
    assert stats["seals"] >= 1 and stats["rows"] == sum(expected.values())
    assert hot(ledger) == {table: 0 for table in expected}
    assert archived(tmp_path / "archive") == expected
    day = next((tmp_path / "archive" / "signals").glob("dt=*"))
    assert len(day.name) == len("dt=2026-11-26") and next(day.glob(f"range=1-{stats['last_seal']}/*.parquet"))
    manifest = json.loads(next((tmp_path / "archive" / "_manifests").glob("dt=*/range=*/part-*")).read_text())
    assert manifest["rows"] == expected and [seal["number"] for seal in manifest["seals"]] == list(
        range(1, stats["last_seal"] + 1))
    with ledger.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM seal_leaves")).scalar_one() == 0
        assert archive_reader.location_of(conn, 1) == str(tmp_path / "archive")
    found = verify.verify(ledger, heads_file.read())
    assert found.ok, [f.line() for f in found.findings]
    assert found.facts == sum(expected.values())
    again = archive.run(spark, settings_for(ledger, tmp_path / "archive"))
    assert again["seals"] == 0  # nothing left to move


def test_a_changed_archived_row_is_found_by_verify(ledger: Engine, tmp_path: Path, spark) -> None:
    archive.run(spark, settings_for(ledger, tmp_path / "archive"))
    import pyarrow.parquet as pq

    path = next((tmp_path / "archive" / "request_results").rglob("*.parquet"))
    rows = pq.read_table(path)
    status = rows.column("status").to_pylist()
    status[0] += 1
    pq.write_table(rows.set_column(rows.schema.get_field_index("status"), "status",
                                   __import__("pyarrow").array(status, rows.schema.field("status").type)), path)
    lines = [f.line() for f in verify.verify(ledger, None).findings]
    assert any("its archived rows" in line and "are not the rows sealed" in line for line in lines), lines


def test_a_signal_not_done_keeps_its_seal_and_every_later_one_hot(ledger: Engine, tmp_path: Path, spark) -> None:
    store = AckStore(ledger)
    assert store.submit(twin_command("modify", thing="org.acme/t0", path="/attributes/n", value=99,
                                     correlation_id="waiting", requested_acks=["app:done"], timeout="60s"))["status"] == 202
    assert store.submit(twin_command("modify", thing="org.acme/t1", path="/attributes/n", value=98,
                                     correlation_id="after"))["status"] == 202
    seals.seal(ledger)  # both signals in a seal of their own, the first not decided
    with ledger.connect() as conn:
        kept = seals.latest(conn).number
    stats = archive.run(spark, settings_for(ledger, tmp_path / "archive"))
    assert stats["last_seal"] == kept - 1
    left = hot(ledger)
    assert left["signals"] == 2 and left["attempts"] == 2
    assert verify.verify(ledger, None).ok


def test_a_live_message_answered_by_one_subscriber_and_never_pulled_by_another_archives_and_reads_back(
    ledger: Engine, tmp_path: Path, spark
) -> None:
    """A live message is handed out to every live subscriber at once (available from -infinity);
    one answers it, its response stored outside any batch, the other never pulls. The archive took
    neither: no bigint holds an infinite timestamp's microseconds, and the look-ups met a response
    without a batch. Now it leaves, and `show` and the windowed reports read it back as before."""
    store = AckStore(ledger)
    for subscriber in ("responder", "listener"):
        assert store.declare(subscriber, [], channels=["live"]) == {"status": 204}
    assert store.submit(live_message("live-1", requested_acks=["live-response"], timeout="60s"))["status"] == 202
    (handed,) = store.pull("responder")
    assert store.respond("responder", {"topic": handed["topic"], "path": handed["path"], "status": 200, "value": "yes",
                                       "headers": {"correlation-id": "live-1"}}) == {"status": 204}
    pipeline.run(spark, PipelineSettings(database_url=ledger.url.render_as_string(hide_password=False), partitions=2))
    shown, window = store.show("live-1"), _everything(ledger)
    assert shown["result"]["status"] == 200
    assert {"responder", "listener"} <= {delivery["subscriber"] for delivery in shown["deliveries"]}
    reports = reports_over(store, window)

    assert archive.run(spark, settings_for(ledger, tmp_path / "archive"))["seals"] >= 1
    assert hot(ledger)["signals"] == 0
    kept = ds.dataset(str(tmp_path / "archive" / "deliveries"), format="parquet", partitioning="hive")
    never_pulled = kept.to_table(filter=ds.field("subscriber_id") == "listener").column("available_at").to_pylist()
    assert never_pulled == [canonical.INFINITE_MICROS["-infinity"]]
    archived = store.show("live-1")
    assert archived.pop("archived")["seal"] >= 1 and archived == shown
    assert reports_over(store, window) == reports


def _everything(engine: Engine) -> Window:
    with engine.connect() as conn:
        first, last = conn.execute(text("SELECT min(received_at), max(received_at) FROM signals")).one()
    return Window(first, last + timedelta(seconds=1))


def test_a_row_changed_before_archiving_stops_it_with_nothing_deleted(ledger: Engine, tmp_path: Path, spark) -> None:
    with ledger.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(text("UPDATE signals SET action = 'delete' WHERE correlation_id = 'a3'"))
    before = hot(ledger)
    with pytest.raises(archive.ArchiveMismatch, match="nothing is deleted"):
        archive.run(spark, settings_for(ledger, tmp_path / "archive"))
    assert hot(ledger) == before
    with ledger.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM archives")).scalar_one() == 0


def test_the_archive_runs_as_a_login_of_its_own_role(ledger: Engine, tmp_path: Path, spark) -> None:
    """ackstore_archive may do all the job does (read, record, delete the archived); nothing else
    of the archive's runs as another role."""
    from dataclasses import replace

    name = f"archive_login_{uuid.uuid4().hex[:8]}"
    with ledger.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f'CREATE ROLE "{name}" LOGIN IN ROLE ackstore_archive'))
    try:
        login = ledger.url.set(username=name).render_as_string(hide_password=False)
        stats = archive.run(spark, replace(settings_for(ledger, tmp_path / "archive"), database_url=login))
        assert stats["rows"] == sum(sealed_counts(ledger).values()) and hot(ledger)["signals"] == 0
    finally:
        with ledger.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = :n"), {"n": name})
            conn.execute(text(f'DROP ROLE "{name}"'))


def test_a_sealed_row_is_deleted_only_once_archived(ledger: Engine) -> None:
    for table in ("signals", "request_results"):
        with pytest.raises(Exception, match="sealed .* and not archived"):
            with ledger.begin() as conn:
                conn.execute(text(f"DELETE FROM {table}"))
    with pytest.raises(Exception, match="leaves of a seal not archived"):
        with ledger.begin() as conn:
            conn.execute(text("DELETE FROM seal_leaves"))


@pytest.mark.slow
def test_kill_9_at_each_step_then_a_rerun_archives_every_row_once(ledger: Engine, tmp_path: Path,
                                                                  spark_remote: str) -> None:
    """The archive killed with -9 after writing, after the manifests, after the read-back and in
    the middle of the delete — each time re-run until the next kill — then run to the end: every
    row is hot until the archive commits, archived once after, and `verify` passes throughout.
    (Each process on the worker's Spark Connect server: five JVM start-ups saved.)"""
    url = ledger.url.render_as_string(hide_password=False)
    root = tmp_path / "archive"
    expected = sealed_counts(ledger)

    def archive_process(fault: str | None) -> subprocess.CompletedProcess:
        env = {**os.environ, "ACKSTORE_FAULT": fault or ""}
        return subprocess.run([sys.executable, "-m", "ackstore.cli", "--database-url", url, "archive",
                               "--retention-days", "0", "--root", str(root), "--spark-remote", spark_remote],
                              env=env, capture_output=True, text=True, timeout=600)

    for fault in FAULTS:
        done = archive_process(fault)
        assert done.returncode == -9, (fault, done.stdout, done.stderr[-2000:])
        assert hot(ledger) == expected, fault  # nothing committed: every row still hot
        with ledger.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM archives")).scalar_one() == 0
        assert verify.verify(ledger, None).ok
    done = archive_process(None)
    assert done.returncode == 0, done.stderr[-2000:]
    assert hot(ledger) == {table: 0 for table in expected}
    assert archived(root) == expected  # each row once: the re-runs overwrote their own partitions
    assert verify.verify(ledger, None).ok


@pytest.mark.parametrize("location, path", [
    ("/srv/archive", "/srv/archive"), ("file:/srv/archive", "/srv/archive"), ("file:///srv/archive", "/srv/archive"),
    ("file://localhost/srv/my%20archive", "/srv/my archive"), ("relative/archive", "relative/archive"),
    ("/srv/with space", "/srv/with space"),
])
def test_an_archive_root_in_every_form_a_user_types_is_read_where_it_is(location: str, path: str) -> None:
    assert archive_reader.local_path(location) == path


def test_a_hadoop_archive_root_is_refused_by_the_local_reader_and_a_missing_one_never_reads_as_empty(tmp_path) -> None:
    with pytest.raises(ValueError, match="read through Spark"):
        archive_reader.local_path("s3a://bucket/archive")
    with pytest.raises(archive_reader.ArchiveUnreadable, match="is not there"):
        archive_reader.filtered_rows(str(tmp_path / "gone"), "signals", None)
    (tmp_path / "empty").mkdir()
    assert archive_reader.filtered_rows(str(tmp_path / "empty"), "signals", None) == []  # no row of that table


def test_a_relative_archive_root_is_recorded_absolute(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert archive.recorded_root("archive/") == str(tmp_path / "archive")
    assert archive.recorded_root("s3a://bucket/archive/") == "s3a://bucket/archive"


# --- an archive that cannot be read, or whose manifests are gone, fails closed (issue 37) -------

def answer_of(capsys, *argv: str) -> tuple[int, dict]:
    code = cli.main(list(argv))
    return code, json.loads(capsys.readouterr().out)


def archived_ledger(ledger: Engine, tmp_path: Path, spark) -> tuple[str, Path, Path]:
    """The ledger's URL once everything is archived under the returned root, and its heads file."""
    heads_file = heads.HeadsFile(tmp_path / "heads.jsonl")
    heads.export(ledger, heads_file)
    archive.run(spark, settings_for(ledger, tmp_path / "archive"))
    assert hot(ledger)["signals"] == 0
    return ledger.url.render_as_string(hide_password=False), tmp_path / "archive", heads_file.path


def test_a_corrupt_parquet_file_is_a_finding_naming_it_and_history_answers_in_dittos_shape(
        ledger: Engine, tmp_path: Path, spark, capsys) -> None:
    url, root, heads_path = archived_ledger(ledger, tmp_path, spark)
    broken = next((root / "signals").rglob("*.parquet"))
    broken.write_bytes(b"garbage, not Parquet")
    found = verify.verify(ledger, heads.read_exported(heads_path))
    unreadable = [f for f in found.findings if "cannot be read" in f.what]
    assert unreadable and all(f.table == "signals" and str(broken) in f.what for f in unreadable), found.findings
    code, answer = answer_of(capsys, "--database-url", url, "verify", "--heads", str(heads_path))
    assert (code, answer["status"], answer["error"]) == (1, 409, "ledger:seal.mismatch")
    assert str(broken) in answer["message"] and answer["verified"] is False
    for argv in (["show", "a1"], ["report", "latency", "--since", "7d", "--bucket", "1d"],
                 ["export", str(tmp_path / "export")]):
        code, answer = answer_of(capsys, "--database-url", url, *argv)
        assert (code, answer["status"], answer["error"]) == (1, 503, "ledger:archive.unavailable"), argv
        assert str(broken) in answer["message"] and answer["description"], answer


def test_an_archive_root_that_is_gone_is_a_finding_and_history_answers_in_dittos_shape(
        ledger: Engine, tmp_path: Path, spark, capsys) -> None:
    url, root, heads_path = archived_ledger(ledger, tmp_path, spark)
    shutil.rmtree(root)
    lines = [f.line() for f in verify.verify(ledger, heads.read_exported(heads_path)).findings]
    assert lines[0] == f"seal 1: its archived rows cannot be read: the archive at {root} is not there: its rows " \
                       "cannot be read", lines
    assert any(line.startswith("seal 1: its archive's manifests cannot be read") for line in lines), lines
    for argv in (["show", "a1"], ["show", "never-seen"], ["report", "latency", "--since", "7d", "--bucket", "1d"]):
        code, answer = answer_of(capsys, "--database-url", url, *argv)
        assert (code, answer["status"], answer["error"]) == (1, 503, "ledger:archive.unavailable"), argv
        assert "is not there" in answer["message"], answer


def test_a_deleted_manifests_folder_is_found_by_verify(ledger: Engine, tmp_path: Path, spark) -> None:
    url, root, heads_path = archived_ledger(ledger, tmp_path, spark)
    assert verify.verify(ledger, heads.read_exported(heads_path)).ok
    shutil.rmtree(root / "_manifests")
    lines = [f.line() for f in verify.verify(ledger, heads.read_exported(heads_path)).findings]
    assert lines == [f"seal 1: archived in {root} (archive 1), and no manifest in {root / '_manifests'} records it "
                     "(deleted?)"], lines


def test_the_manifests_witness_the_archived_seals_when_the_tip_and_its_head_are_gone(
        ledger: Engine, tmp_path: Path, spark) -> None:
    """The newest archived seal removed with its head, and the archive's record shortened (the rows
    stay in Parquet, nothing reads them): the ledger and its heads agree, the manifest does not —
    in `verify`, and in the auditor's verifier given the manifest as its witness."""
    url, root, heads_path = archived_ledger(ledger, tmp_path, spark)
    with ledger.connect() as conn:
        last = seals.latest(conn).number
    assert last > 1
    with ledger.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(text(f"DELETE FROM seals WHERE number = {last}"))
        conn.execute(text(f"UPDATE archives SET last_seal = {last - 1}, upto_seq = "
                          f"(SELECT upto_seq FROM seals WHERE number = {last - 1})"))
    heads_path.write_text("".join(heads_path.read_text().splitlines(keepends=True)[:-1]))
    found = verify.verify(ledger, heads.read_exported(heads_path))
    manifest = next(path for path in archive_reader.manifest_files(str(root))
                    if last in {head["number"] for head in heads.parse(path.read_bytes())})
    assert [f.line() for f in found.findings] == [
        f"seal {last}: the archive's manifest {manifest} holds the head of seal {last}, and the ledger ends at seal "
        f"{last - 1}: the seals after {last - 1} were removed"]
    done = independent(ledger, tmp_path, heads_path, "--witness", str(manifest))
    assert done.returncode == 1 and f"the seals after {last - 1} were removed" in done.stdout, done.stdout + done.stderr


# --- the retention: days from 0 to a century, else a 400 naming where it came from (issue 37) ------

BAD_RETENTIONS = ["100000000", "nan", "NaN", "-1", "-0.001", "inf", "-inf", "1e400", "36500.5", "abc", "", "9" * 5000]


@pytest.mark.parametrize("origin", ["--retention-days", "ACKSTORE_RETENTION_DAYS"])
@pytest.mark.parametrize("given", BAD_RETENTIONS, ids=lambda given: repr(given[:12]))
def test_a_retention_that_is_no_number_of_days_is_a_400_naming_where_it_came_from(
    engine: Engine, database_url: str, tmp_path: Path, monkeypatch, capsys, origin: str, given: str
) -> None:
    from ackstore import cli

    monkeypatch.delenv("ACKSTORE_RETENTION_DAYS", raising=False)
    flag = [f"--retention-days={given}"] if origin.startswith("--") else []  # "=": argparse reads -inf as an option
    if not flag:
        monkeypatch.setenv(origin, given)
    code = cli.main(["--database-url", database_url, "archive", "--root", str(tmp_path / "archive"), *flag])
    answer = json.loads(capsys.readouterr().out)
    assert code == cli.EXIT_ERROR_ANSWER
    assert (answer["status"], answer["error"]) == (400, "archive:retention.invalid"), answer
    assert f"<{origin}>" in answer["message"] and "from 0 to 36,500" in answer["message"] and answer["description"]
    with engine.connect() as conn:  # refused before any work: no run recorded, nothing archived
        assert conn.execute(text("SELECT count(*) FROM pipeline_runs WHERE step = 'archive'")).scalar_one() == 0
        assert conn.execute(text("SELECT count(*) FROM archives")).scalar_one() == 0


@pytest.mark.parametrize("given", ["0", "0.5", "30", "36500"])
def test_a_retention_from_0_to_a_century_is_taken(engine: Engine, database_url: str, tmp_path: Path,
                                                   monkeypatch, capsys, given: str) -> None:
    from ackstore import cli

    monkeypatch.setenv("ACKSTORE_RETENTION_DAYS", given)
    assert cli.main(["--database-url", database_url, "archive", "--root", str(tmp_path / "archive"),
                     "--retention-days", given]) == cli.EXIT_OK
    assert json.loads(capsys.readouterr().out)["archive"]["seals"] == 0  # an empty ledger: nothing to move


@pytest.mark.parametrize("days", [float("nan"), -1.0, 1e8])
def test_the_archive_job_itself_refuses_a_retention_it_cannot_use(database_url: str, days: float) -> None:
    """Settings built in code, not read by PipelineSettings.from_env, are checked by the job too."""
    from ackstore.rules.errors import DittoError

    with pytest.raises(DittoError) as raised:
        archive.run(None, PipelineSettings(database_url=database_url, retention_days=days))
    assert raised.value.error == "archive:retention.invalid" and "<ACKSTORE_RETENTION_DAYS>" in raised.value.message
