"""Step 5, validate: the gate between deciding and settling (A.2.6).

The slice is what the ledger decided and wrote since the last passed validation, read where it
lies: the results of the sweep batches past the watermark, and the settlement decisions past
theirs. Great Expectations checks it (:mod:`jobs.gate`, set up once per process): each subject
of :mod:`jobs.expectations` is a query asset over its slice, and one expectation per subject runs
every invariant of it in one pass over the slice.

Passed: one transaction queues the slice's requests from connections for ``settle`` and moves
the watermarks past the slice. Failed: the failing invariants and sample ids go to the task log
and to ``pipeline_runs``, nothing moves, and :class:`ValidationFailed` is raised — so ``settle``
does not run, and the same slice (plus whatever comes next) is checked again by the next run
until the ledger is repaired.
"""

from __future__ import annotations

import logging
from typing import Any

from ackstore.ledger.schema import queue_settle
from ackstore.rules import settlement
from jobs import expectations, gate
from jobs.gate import Failure
from jobs.settings import PipelineSettings
from jobs.sql import statement, with_literals
from jobs.step import Step

JOB = "validate"
# Each subject's slice: (after, up to] these bounds, and the range of signal ids it holds
# (jobs/sql/validate.sql, "slice").
SLICE_BOUNDS = {"requests": ("results_after", "results_upto"),
                "settlements": ("settlements_after", "settlements_upto")}
SIGNAL_RANGES = {"requests": ("results_first_signal", "results_last_signal"),
                 "settlements": ("settlements_first_signal", "settlements_last_signal")}

log = logging.getLogger("ackstore.pipeline.validate")


class ValidationFailed(RuntimeError):
    """The ledger broke an invariant: nothing is settled until it is repaired."""

    def __init__(self, run_id: str, failures: list[Failure]) -> None:
        self.run_id = run_id
        self.failures = failures
        self.completed: dict[str, dict[str, Any]] = {}  # stats of the steps that ran before
        lines = "\n".join(f"  - {failure.describe()}" for failure in failures)
        super().__init__(f"validation of run {run_id} failed {len(failures)} invariant(s); nothing settled:\n{lines}")


def run(spark: Any, settings: PipelineSettings) -> dict[str, Any]:
    """Validate the slice; ``spark`` is unused (GX reads PostgreSQL itself), kept for the common step shape."""
    step = Step(JOB, settings, ())
    with step.locked():
        bounds = _slice_bounds(step)
        step.stats.update(decisions=bounds.pop("decisions"), settlements=bounds.pop("settlements"))
        if step.stats["decisions"] == 0 and step.stats["settlements"] == 0:
            return step.record()
        slices = {subject: slice_of(subject, bounds) for subject in expectations.SUBJECTS}
        failures = step.timed("expectations", lambda: gate.check(settings.database_url, slices))
        step.stats["invariants"] = len(expectations.INVARIANTS)
        if failures:
            step.stats["failures"] = [failure.to_json() for failure in failures]
            step.record()
            error = ValidationFailed(step.run_id, failures)
            log.error("%s", error)
            raise error
        with step.deferrable():  # checked again by the next pass
            _pass(step, bounds)
        return step.record()


def _slice_bounds(step: Step) -> dict[str, Any]:
    """The slice: after the watermarks, up to what is committed now; its size and signal ids."""
    with step.engine.connect() as conn:
        after = conn.execute(statement(JOB, "watermarks")).one()._asdict()
        found = conn.execute(statement(JOB, "slice"), after).one()._asdict()
    return {**after, **found}


def _pass(step: Step, bounds: dict[str, Any]) -> None:
    params = {**bounds, "transport_api": settlement.TRANSPORT_API, "local_sources": list(settlement.LOCAL_SOURCES),
              "run_id": step.run_id}
    with step.merge() as conn:
        run_statement = step.runner(conn, params)
        step.stats["to_settle"] = run_statement("enqueue_settlements")
        run_statement("record_pass")
        run_statement("advance_watermarks")
        step.refresh_statistics(conn, {queue_settle: step.stats["to_settle"]})


def slice_of(subject: str, bounds: dict[str, Any]) -> str | None:
    """The facts of ``subject`` over its slice, as SQL for the gate (GX takes no parameters: the
    ledger's ids are rendered by SQLAlchemy as literals): its rows are read from ``{batch}``, the
    subject's table, and the history within the slice's signal ids. None: the slice holds nothing
    of it."""
    names = SLICE_BOUNDS[subject]
    values = {name: bounds[name] for name in names}
    if values[names[1]] is None:
        return None
    first, last = (bounds[name] for name in SIGNAL_RANGES[subject])
    rows = with_literals(JOB, f"{subject}_slice", values)
    facts = with_literals(JOB, subject, {"first_signal_id": first, "last_signal_id": last})
    return facts.replace("{slice}", f"({rows})")
