"""One process per step at a time, and only on a ledger at its code's migration: a second run, or a
run on a ledger migrated to another revision, is refused before it touches anything."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from ackstore import cli
from ackstore.ledger import migrate
from ackstore.ledger.store import AckStore
from jobs import apply_twin, sweep
from jobs.settings import PipelineSettings
from jobs.step import PipelineBusy
from tests.support.ledger import snapshot, twin_command


@pytest.mark.parametrize("step", [apply_twin, sweep])
def test_a_step_that_is_already_running_is_refused(step, store: AckStore, engine, database_url: str) -> None:
    store.submit(twin_command("modify", path="/", value={}, correlation_id="c"))
    before = snapshot(engine)
    with engine.connect() as holder:  # another process running the step holds its lock
        assert holder.execute(text("SELECT lock_step(:s)"), {"s": step.JOB}).scalar_one()
        with pytest.raises(PipelineBusy):
            step.run(None, PipelineSettings(database_url=database_url))  # refused before Spark is used
        holder.rollback()
    assert snapshot(engine) == before


def _migrated_to(engine, revision: str) -> None:
    """Say the ledger is at ``revision`` (Alembic's row), as a ledger left behind or moved on would."""
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})


@pytest.mark.parametrize(("revision", "error"), [("0031", "ledger:migration.pending"),
                                                 ("9999", "ledger:migration.unknown")])
def test_a_ledger_at_another_migration_is_refused_before_anything_is_written(
        store: AckStore, engine, database_url: str, capsys, revision: str, error: str) -> None:
    """New code on a ledger not migrated yet wrote answers its older views misread (0029, 0031:
    derived forms); old code on a newer ledger, forms its readers no longer expect (decisions #145)."""
    store.submit(twin_command("modify", path="/", value={}, correlation_id="c"))
    head = migrate.head_revision()
    before = snapshot(engine)
    _migrated_to(engine, revision)
    try:
        for step in ("apply_twin", "seal"):  # the first step of a pass, and the one that runs apart
            assert cli.main(["--database-url", database_url, "pipeline", "run", "--step", step]) \
                == cli.EXIT_ERROR_ANSWER
            answer = json.loads(capsys.readouterr().out)
            assert (answer["status"], answer["error"]) == (503, error), answer
            assert f"<{revision}>" in answer["message"] and f"<{head}>" in answer["message"]
            assert "Nothing was written" in answer["description"]
    finally:
        _migrated_to(engine, head)
    assert snapshot(engine) == before
