"""Great Expectations for the validate step, set up once per process and kept (issue 52).

The gate built an ephemeral GX context, its data source, suites and validation definitions in
every pass: about 0.15 s, half of a 2 000-command pass. Now a process keeps one :class:`Gate` per
ledger: the context, the PostgreSQL data source (never the ``[spark]`` extra) and per subject of
:mod:`jobs.expectations` a table asset (its table: ``{batch}``), a suite and a validation
definition. A slice replaces only each subject's one expectation — its facts query over the
slice, the slice's ids in it as literals, for the planner — and runs it: one pass over the slice
per subject, its unexpected rows one per broken invariant (how many rows, and some of them).
Replacing an asset or a definition made GX write its whole configuration as YAML, three times a
slice: 40 % of the gate at 2 000 commands.

GX's import (about 2.3 s of CPU: scipy, every expectation class) is paid once per process, by its
first slice, in the step: importing it on a thread beside the steps raced their own imports (GX
imports pyspark; a pipeline killed and re-run in CI failed with "partially initialized module
'pyspark.sql'", decisions #139). The gate's engines are disposed after each slice: no connection
is held between passes (the ledger's roles have connection limits).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from ackstore.ledger.database import database_url as ledger_url
from jobs import expectations
from jobs.sql import without_comments

KEPT = 4  # gates kept per process, the most recently used (a process serves one ledger, tests many)

# The gate's sessions: one large query per subject, run once — compiling it (JIT) cost more than it
# saved, as for the merges (jobs/step.py); memory to hash a backlog's slice without spilling; and
# a backlog's joins on every core: at the default cost of passing a row between processes the
# planner kept them on one (9.7 s against 6.5 s at a million, measured; a minute's slice walks
# the keys either way).
GATE_SESSION = {"jit": "off", "work_mem": "64MB", "parallel_tuple_cost": "0.02"}


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


class Gate:
    """GX set up for one ledger: its context, data source and per subject a table asset, a suite and
    a validation definition."""

    def __init__(self, database_url: str) -> None:
        gx = _gx()
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self._lock = threading.Lock()  # one slice at a time: the expectations are replaced per slice
        self.context = gx.get_context(mode="ephemeral")
        self.context.variables.progress_bars = ProgressBarsConfig(globally=False)
        with warnings.catch_warnings():  # add_sql suggests add_postgres, which wants a user in a URL
            warnings.simplefilter("ignore")
            self.source = self.context.data_sources.add_sql("ledger", **ledger_url(database_url).gx(GATE_SESSION))
        self._expectation = _expectation_class(gx)
        self.suites: dict[str, Any] = {}
        self.definitions: dict[str, Any] = {}
        for subject in expectations.SUBJECTS:
            table = expectations.SUBJECT_TABLES[subject]
            batch = self.source.add_table_asset(subject, table_name=table).add_batch_definition_whole_table("table")
            self.suites[subject] = self.context.suites.add(gx.ExpectationSuite(name=subject))
            self.definitions[subject] = self.context.validation_definitions.add(
                gx.ValidationDefinition(name=subject, data=batch, suite=self.suites[subject]))

    def check(self, slices: Mapping[str, str | None]) -> list[Failure]:
        """Run every invariant over the slice, each subject's given as its facts query over its
        slice (``{batch}``: the subject's table; None: the slice holds nothing of it); the
        failures, in INVARIANTS order."""
        failures: dict[expectations.Invariant, Failure] = {}
        with self._lock:
            try:
                for subject in expectations.SUBJECTS:
                    if slices.get(subject) is not None:
                        failures.update(_failures(subject, self._run(subject, slices[subject])))
            finally:  # the data source's engine (its checks) and the execution engine's (the queries)
                self.source.get_engine().dispose()
                self.source.get_execution_engine().engine.dispose()
        return [failures[invariant] for invariant in expectations.INVARIANTS if invariant in failures]

    def _run(self, subject: str, facts: str) -> Any:
        """The subject's expectation over this slice, replacing the last slice's."""
        suite = self.suites[subject]
        for old in list(suite.expectations):
            suite.delete_expectation(old)
        suite.add_expectation(self._expectation(
            unexpected_rows_query=_gx_template(expectations.unexpected_rows_query(subject, facts)),
            description=f"every invariant over the {subject} of the slice holds",
        ))
        (result,) = self.definitions[subject].run(result_format={"result_format": "COMPLETE"}).results
        return result


_gates: OrderedDict[str, Gate] = OrderedDict()
_gates_lock = threading.Lock()


def gate_for(database_url: str) -> Gate:
    """This process's gate for the ledger at ``database_url``, built on first use (a build that
    fails is not kept: the next slice tries again)."""
    with _gates_lock:
        gate = _gates.get(database_url)
        if gate is None:
            gate = _gates[database_url] = Gate(database_url)
            while len(_gates) > KEPT:
                _gates.popitem(last=False)
        _gates.move_to_end(database_url)
        return gate


def check(database_url: str, slices: Mapping[str, str | None]) -> list[Failure]:
    """Every invariant over the slice (see :meth:`Gate.check`), on this process's gate."""
    return gate_for(database_url).check(slices)


@functools.cache
def _gx() -> Any:
    """Great Expectations, imported once, without its analytics and its INFO lines (noise in a task log)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    import great_expectations as gx

    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    return gx


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
