"""Migration 0007 (with 0008 after it) moves a ledger the old data model's code built (tests/support/data/ledger_0006.json:
every kind of signal, attempt, ack and settlement, work pending at every step) to the lean model
without changing any answer; the pending work then completes; and it goes back again."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from sqlalchemy import Engine, text

from ackstore.ledger import migrate
from ackstore.ledger.database import make_engine, scratch_database
from ackstore.ledger.store import AckStore
from ackstore.rules.settings import Settings
from tests.support.catalog import catalog, differences
from tests.conftest import ADMIN_URL
from tests.support.ledger import twin_command
from tests.support.old_ledger import REVISION, answers, dump, fixture, load


@pytest.fixture(scope="module")
def old() -> dict[str, Any]:
    return fixture()


@pytest.fixture
def old_ledger(old: dict[str, Any]) -> Iterator[Engine]:
    """A database at 0006 holding the old ledger's rows."""
    with scratch_database(ADMIN_URL, "old_ledger") as url:
        engine = make_engine(url)
        migrate.upgrade(engine, REVISION)
        load(engine, old)
        yield engine
        engine.dispose()


def test_every_answer_is_unchanged_after_the_upgrade(old_ledger: Engine, old: dict[str, Any]) -> None:
    migrate.upgrade(old_ledger)
    now = answers(AckStore(old_ledger, Settings()))
    for question, answer in old["answers"].items():
        if question == "show":  # where a signal stands has its own words since 0011 (signal_state)
            now[question], answer = _without_state(now[question]), _without_state(answer)
        assert now[question] == answer, question


def _without_state(shown: dict[str, Any]) -> dict[str, Any]:
    return {cid: None if state is None else {k: v for k, v in state.items() if k != "state"}
            for cid, state in shown.items()}


def test_the_upgrade_keeps_events_and_their_times_and_derives_nothing_twice(old_ledger: Engine) -> None:
    migrate.upgrade(old_ledger)
    with old_ledger.connect() as conn:
        derived = conn.execute(text("SELECT count(*) FROM builtin_acks")).scalar_one()
        batches = conn.execute(text("SELECT DISTINCT step FROM ledger_batches")).scalars().all()
    assert derived == 0  # the old built-in acks stay rows; facts of later batches are derived
    assert batches == ["migrated"]


@pytest.mark.spark
def test_the_pending_work_completes_on_the_new_model(old_ledger: Engine, old: dict[str, Any], spark) -> None:
    from jobs import pipeline
    from jobs.settings import PipelineSettings

    migrate.upgrade(old_ledger)
    url = old_ledger.url.render_as_string(hide_password=False)
    pipeline.run(spark, PipelineSettings(database_url=url, partitions=2, rules=Settings(max_attempts=2)))
    store = AckStore(old_ledger, Settings())
    after = answers(store)
    # The ledger was built long before this run, so every deadline of its pending work has passed.
    # The applied-but-not-indexed command gets its search-persisted from the new index mark, after
    # its deadline: late, and the request is decided 424 with a 408 for it; the unapplied one is
    # applied (late too) and decided by its deadline. What was decided stays as it was.
    applied = store.stored_signal("api-applied")
    assert [(a["label"], a["disposition"]) for a in applied["acks"]] == [
        ("twin-persisted", "counted"), ("search-persisted", "late")]
    assert after["results"]["api-applied"]["status"] == 424
    assert after["results"]["api-applied"]["body"]["search-persisted"]["status"] == 408
    received = store.stored_signal("api-received")
    assert [(a["label"], a["disposition"]) for a in received["acks"]] == [("twin-persisted", "late")]
    assert after["results"]["api-received"]["status"] == 424
    for cid, result in old["answers"]["results"].items():
        if result is not None:
            assert after["results"][cid] == result, cid
            assert after["show"][cid]["acks"] == old["answers"]["show"][cid]["acks"], cid


def test_the_downgrade_gives_the_old_ledger_back(old_ledger: Engine, old: dict[str, Any]) -> None:
    migrate.upgrade(old_ledger)
    migrate.downgrade(old_ledger, REVISION)
    assert migrate.current_revision(old_ledger) == REVISION
    back = dump(old_ledger, old["tables"])
    for table in old["tables"]:
        assert _rows(back, table) == _rows(old, table), table


@pytest.mark.spark
def test_the_downgrade_stores_the_derived_acks_and_headers_as_rows(old_ledger: Engine, spark) -> None:
    from jobs import pipeline
    from jobs.settings import PipelineSettings

    migrate.upgrade(old_ledger)
    url = old_ledger.url.render_as_string(hide_password=False)
    # a command the new model decides in SQL: its answer's headers are derived (#61), and its
    # entries (#141); not sealed, so that 0029's downgrade may store them in its row
    AckStore(old_ledger, Settings()).submit(twin_command(
        "create", thing="org.acme/after-0008", path="/", value={}, correlation_id="after-0008",
        requested_acks=["twin-persisted", "search-persisted"], timeout="60s"))
    # and one asking for twin-persisted alone: its plain response is derived where read (#143)
    AckStore(old_ledger, Settings()).submit(twin_command(
        "create", thing="org.acme/plain-since-0031", path="/", value={"attributes": {"a": 1}},
        correlation_id="plain-since-0031", requested_acks=["twin-persisted"], timeout="60s"))
    pipeline.run(spark, PipelineSettings(database_url=url, partitions=2),
                 tuple(step for step in pipeline.STEPS if step != "seal"))
    acks = ("SELECT signal_id, attempt, label, status, payload, headers, issuer, weak, received_at, disposition "
            "FROM {} ORDER BY 1, 2, 3, 9, 10")
    events = "SELECT id, thing_id, revision, signal_id, action, path, value, headers, created_at FROM thing_events ORDER BY id"
    answers = "SELECT signal_id, attempt, status, body, headers, cause, ack_statuses, decided_at FROM {} ORDER BY 1, 2"
    with old_ledger.connect() as conn:
        derived = conn.execute(text("SELECT count(*) FROM builtin_acks")).scalar_one()
        aggregated = conn.execute(text("SELECT count(*) FROM request_results WHERE headers IS NULL "
                                       "AND holds_derived_entries(body, cause, ack_statuses)")).scalar_one()
        plain = conn.execute(text("SELECT count(*) FROM request_results WHERE holds_derived_response(cause, headers) "
                                  "AND body IS NULL")).scalar_one()
        before = (conn.execute(text(acks.format("request_acks"))).all(), conn.execute(text(events)).all(),
                  conn.execute(text(answers.format("request_answers"))).all())
    assert derived > 0 and aggregated > 0 and plain == 1
    migrate.downgrade(old_ledger, REVISION)
    with old_ledger.connect() as conn:
        assert (conn.execute(text(acks.format("acks"))).all(), conn.execute(text(events)).all(),
                conn.execute(text(answers.format("request_results"))).all()) == before


@pytest.mark.spark
def test_the_downgrade_past_0029_refuses_once_derived_entries_are_sealed(old_ledger: Engine, spark) -> None:
    from jobs import pipeline
    from jobs.settings import PipelineSettings

    migrate.upgrade(old_ledger)
    AckStore(old_ledger, Settings()).submit(twin_command(
        "create", thing="org.acme/sealed", path="/", value={}, correlation_id="sealed",
        requested_acks=["twin-persisted", "search-persisted"], timeout="60s"))
    pipeline.run(spark, PipelineSettings(database_url=old_ledger.url.render_as_string(hide_password=False),
                                         partitions=2))
    with pytest.raises(RuntimeError, match="1 sealed request results hold derived built-in entries"):
        migrate.downgrade(old_ledger, "0028")
    assert migrate.current_revision(old_ledger) == migrate.head_revision()


@pytest.mark.spark
def test_the_downgrade_past_0029_refuses_derived_entries_whose_facts_are_gone(old_ledger: Engine, spark) -> None:
    """An entry the downgrade cannot derive (its search mark gone) is never stored as null: the
    downgrade refuses, and leaves every row as it was."""
    from jobs import pipeline
    from jobs.settings import PipelineSettings

    migrate.upgrade(old_ledger)
    AckStore(old_ledger, Settings()).submit(twin_command(
        "create", thing="org.acme/gone", path="/", value={}, correlation_id="gone",
        requested_acks=["twin-persisted", "search-persisted"], timeout="60s"))
    pipeline.run(spark, PipelineSettings(database_url=old_ledger.url.render_as_string(hide_password=False),
                                         partitions=2), tuple(step for step in pipeline.STEPS if step != "seal"))
    _refused_once_facts_are_gone(
        old_ledger,
        "DELETE FROM search_marks WHERE thing_id = (SELECT thing_id FROM signals WHERE correlation_id = 'gone')",
        "0028", "1 request results hold derived built-in entries whose facts are gone")


def _refused_once_facts_are_gone(old_ledger: Engine, delete: str, down_to: str, refusal: str) -> None:
    """Deletes a fact past the triggers that keep it; the downgrade to ``down_to`` then refuses,
    and leaves every request result as it was."""
    with old_ledger.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))  # past the triggers that keep a fact
        conn.execute(text(delete))
    results = "SELECT * FROM request_results ORDER BY signal_id, attempt"
    with old_ledger.connect() as conn:
        before = conn.execute(text(results)).all()
    with pytest.raises(RuntimeError, match=refusal):
        migrate.downgrade(old_ledger, down_to)
    assert migrate.current_revision(old_ledger) == migrate.head_revision()
    with old_ledger.connect() as conn:
        assert conn.execute(text(results)).all() == before


def _plain_request(old_ledger: Engine, spark, steps: tuple[str, ...] | None = None) -> None:
    """A request for twin-persisted alone, decided: its plain response derived where read (#143)."""
    from jobs import pipeline
    from jobs.settings import PipelineSettings

    migrate.upgrade(old_ledger)
    AckStore(old_ledger, Settings()).submit(twin_command(
        "create", thing="org.acme/plain", path="/", value={"attributes": {"a": 1}}, correlation_id="plain",
        requested_acks=["twin-persisted"], timeout="60s"))
    pipeline.run(spark, PipelineSettings(database_url=old_ledger.url.render_as_string(hide_password=False),
                                         partitions=2), steps or pipeline.STEPS)


@pytest.mark.spark
def test_the_downgrade_past_0031_refuses_once_a_derived_plain_response_is_sealed(old_ledger: Engine, spark) -> None:
    _plain_request(old_ledger, spark)
    with pytest.raises(RuntimeError, match="1 sealed request results hold a derived plain response"):
        migrate.downgrade(old_ledger, "0030")
    assert migrate.current_revision(old_ledger) == migrate.head_revision()


@pytest.mark.spark
def test_the_downgrade_past_0031_refuses_once_anything_was_archived(old_ledger: Engine, spark) -> None:
    """An archived result may hold the form, which 0030's look-ups would read as a response without a
    body: the ledger keeps no mark of which archives were written since 0031."""
    from jobs import pipeline

    _plain_request(old_ledger, spark, tuple(step for step in pipeline.STEPS if step != "seal"))
    with old_ledger.begin() as conn:
        conn.execute(text("INSERT INTO archives (number, first_seal, last_seal, after_seq, upto_seq, location, counts) "
                          "VALUES (1, 1, 1, 0, 0, '/archived-elsewhere', '{}')"))
    with pytest.raises(RuntimeError, match="results were archived"):
        migrate.downgrade(old_ledger, "0030")
    assert migrate.current_revision(old_ledger) == migrate.head_revision()


@pytest.mark.spark
def test_the_downgrade_past_0031_refuses_a_derived_plain_response_whose_facts_are_gone(
    old_ledger: Engine, spark
) -> None:
    """A body without a payload would read as a response that had none: the downgrade refuses, and
    leaves every row as it was."""
    from jobs import pipeline

    _plain_request(old_ledger, spark, tuple(step for step in pipeline.STEPS if step != "seal"))
    _refused_once_facts_are_gone(
        old_ledger,
        "DELETE FROM command_responses WHERE signal_id = (SELECT id FROM signals WHERE correlation_id = 'plain')",
        "0030", "1 request results hold a derived plain response whose facts are gone")


def _rows(data: dict[str, Any], table: str) -> list[str]:
    """A table's rows, comparable: without the ids the database hands out in write order."""
    import json

    surrogate = {"acks": "id", "settlements": "id", "pipeline_runs": "id"}.get(table)
    return sorted(json.dumps({k: v for k, v in row.items() if k != surrogate}, sort_keys=True)
                  for row in data["rows"][table])


def test_a_seeded_ledger_goes_down_to_base_and_back_up(old_ledger: Engine) -> None:
    """Every downgrade runs on a ledger that holds rows of every kind (the data moves of 0007 and
    0008 included), down to an empty database, and every upgrade after it ends at the same schema."""
    migrate.upgrade(old_ledger)
    with old_ledger.connect() as conn:
        before = catalog(conn)
        assert conn.execute(text("SELECT count(*) FROM signals")).scalar_one() > 0
    migrate.downgrade(old_ledger, "base")
    with old_ledger.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() "
                                 "AND tablename <> 'alembic_version'")).scalar_one() == 0
    migrate.upgrade(old_ledger)
    with old_ledger.connect() as conn:
        assert differences(before, catalog(conn)) == []
