"""One process per step at a time: a second run is refused before it touches anything."""

from __future__ import annotations

import pytest
from sqlalchemy import text

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
