"""Step 5, validate: the gate between deciding and settling (A.2.6).

The slice is what the ledger decided and wrote since the last passed validation, read where it
lies: the results of the sweep batches past the watermark, and the settlement decisions past
theirs. Great Expectations (an ephemeral context, the PostgreSQL data source — never the
``[spark]`` extra) checks it: each subject of :mod:`jobs.expectations` is a query asset over its
slice, and one expectation per subject runs every invariant of it in one pass over the slice,
its unexpected rows one per broken invariant (how many rows, and some of them).

Passed: one transaction queues the slice's requests from connections for ``settle`` and moves
the watermarks past the slice. Failed: the failing invariants and sample ids go to the task log
and to ``pipeline_runs``, nothing moves, and :class:`ValidationFailed` is raised — so ``settle``
does not run, and the same slice (plus whatever comes next) is checked again by the next run
until the ledger is repaired.
"""

from __future__ import annotations

import functools
import logging
import os
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

from ackstore.ledger.database import database_url as ledger_url
from ackstore.ledger.schema import queue_settle
from ackstore.rules import settlement
from jobs import expectations
from jobs.settings import PipelineSettings
from jobs.sql import statement, statements, with_literals, without_comments
from jobs.step import Step

JOB = "validate"
# Each subject's slice: (after, up to] these bounds (jobs/sql/validate.sql, "slice").
SLICE_BOUNDS = {"requests": ("results_after", "results_upto"),
                "settlements": ("settlements_after", "settlements_upto")}

# The gate's sessions: one large query per subject, run once — compiling it (JIT) cost more than it
# saved, as for the merges (jobs/step.py); memory to hash a backlog's slice without spilling; and
# a backlog's joins on every core: at the default cost of passing a row between processes the
# planner kept them on one (9.7 s against 6.5 s at a million, measured; a minute's slice walks
# the keys either way).
GATE_SESSION = {"jit": "off", "work_mem": "64MB", "parallel_tuple_cost": "0.02"}

log = logging.getLogger("ackstore.pipeline.validate")


@dataclass(frozen=True)
class Failure:
    """A failed invariant: what it states, about which subject, how many rows broke it, and some of them."""

    states: str
    subject: str
    unexpected: int | None
    samples: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "invariant": self.states,
            "subject": self.subject,
            "unexpected": self.unexpected,
            "samples": list(self.samples),
        }

    def describe(self) -> str:
        ids = "; ".join(", ".join(f"{k} {v}" for k, v in sample.items()) for sample in self.samples)
        return f"{self.states} [{self.subject}: {self.unexpected} rows, e.g. {ids or 'n/a'}]"


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
        failures = step.timed("expectations", lambda: check_slice(settings.database_url, bounds))
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
    """The slice: after the watermarks, up to what is committed now; and its size."""
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


# --- Great Expectations ----------------------------------------------------------------------


def check_slice(database_url: str, bounds: dict[str, Any]) -> list[Failure]:
    """Run every invariant over the slice ``bounds`` delimit; the failures, in INVARIANTS order."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    logging.getLogger("great_expectations").setLevel(logging.WARNING)  # its INFO lines are noise in a task log
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    with warnings.catch_warnings():  # add_sql suggests add_postgres, which wants a user in a URL
        warnings.simplefilter("ignore")
        source = context.data_sources.add_sql("ledger", **ledger_url(database_url).gx(GATE_SESSION))
    expectation = _expectation_class(gx)
    failures: dict[expectations.Invariant, Failure] = {}
    for subject in expectations.SUBJECTS:
        slice_query = _slice_query(subject, bounds)
        if slice_query is None:
            continue  # nothing of this subject in the slice
        batch = source.add_query_asset(subject, query=slice_query).add_batch_definition_whole_table("slice")
        suite = context.suites.add(gx.ExpectationSuite(name=subject))
        suite.add_expectation(expectation(
            unexpected_rows_query=_gx_template(expectations.unexpected_rows_query(subject, statements(JOB)[subject])),
            description=f"every invariant over the {subject} of the slice holds",
        ))
        definition = context.validation_definitions.add(gx.ValidationDefinition(name=subject, data=batch, suite=suite))
        (result,) = definition.run(result_format={"result_format": "COMPLETE"}).results
        failures.update(_failures(subject, result))
    return [failures[invariant] for invariant in expectations.INVARIANTS if invariant in failures]


def _slice_query(subject: str, bounds: dict[str, Any]) -> str | None:
    """The slice of ``subject`` as SQL for a GX query asset (which takes no parameters): the
    bounds are rendered by SQLAlchemy as literals, from the ids the ledger returned. None: the
    slice holds nothing of it."""
    names = SLICE_BOUNDS[subject]
    values = {name: bounds[name] for name in names}
    if values[names[1]] is None:
        return None
    return with_literals(JOB, f"{subject}_slice", values)


def _gx_template(query: str) -> str:
    """GX fills ``{batch}`` with str.format (every other brace of the query is doubled) and runs
    the query as SQLAlchemy text (a colon in a comment would read as a parameter)."""
    return without_comments(query).replace("{", "{{").replace("}", "}}").replace("{{batch}}", "{batch}")


def _failures(subject: str, result: Any) -> dict[expectations.Invariant, Failure]:
    invariants = expectations.of(subject)
    error = _raised(result.exception_info)
    if error is not None:  # the invariants could not be checked: each counts as failed, saying why
        return {invariant: Failure(invariant.states, subject, None, ({"exception": error},)) for invariant in invariants}
    rows = (result.result or {}).get("details", {}).get("unexpected_rows", [])
    return {
        invariants[row["invariant"] - 1]: Failure(
            states=invariants[row["invariant"] - 1].states,
            subject=subject,
            unexpected=row["unexpected"],
            samples=tuple(row["samples"]),
        )
        for row in rows
    }


def _raised(info: Any) -> str | None:
    """The message of an exception GX caught, if any (its info is flat, or keyed by metric)."""
    if not isinstance(info, dict):
        return None
    if "raised_exception" in info:
        return str(info.get("exception_message")) if info["raised_exception"] else None
    return next((error for error in map(_raised, info.values()) if error is not None), None)


@functools.cache
def _expectation_class(gx: Any) -> type:
    """GX's UnexpectedRowsExpectation, asking for its rows only: the stock one also counts them
    with a second run of the query, and our rows are already one per broken invariant."""

    class ExpectLedgerInvariants(gx.expectations.UnexpectedRowsExpectation):
        metric_dependencies: ClassVar[tuple[str, ...]] = ("unexpected_rows_query.table",)

        def _validate(self, metrics: dict, runtime_configuration: dict | None = None,
                      execution_engine: Any = None) -> dict[str, Any]:
            rows = metrics["unexpected_rows_query.table"]
            return {"success": not rows, "result": {"observed_value": len(rows), "details": {"unexpected_rows": rows}}}

    return ExpectLedgerInvariants
