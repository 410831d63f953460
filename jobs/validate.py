"""Step 5, validate: the gate between deciding and settling (A.2.6).

The slice is what the ledger decided and wrote since the last passed validation: the requests
waiting in ``queue_validate`` with their counted acks, and the settlement decisions written
since the validation watermark. Named SQL copies the facts each invariant is stated over into
three ``stage_check_*`` tables; Great Expectations (an ephemeral context, the PostgreSQL data
source — never the ``[spark]`` extra) checks them against :data:`jobs.expectations.INVARIANTS`.

Passed: one transaction moves the slice's requests from connections into ``queue_settle``,
empties the validation queue of them and advances the watermark. Failed: the failing
invariants and sample ids go to the task log and to ``pipeline_runs``, nothing moves, and
:class:`ValidationFailed` is raised — so ``settle`` does not run, and the same slice (plus
whatever comes next) is checked again by the next run until the ledger is repaired.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from typing import Any

from ackstore.ledger.database import database_url as ledger_url
from ackstore.ledger.schema import (
    stage_check_acks,
    stage_check_results,
    stage_check_settlements,
)
from ackstore.rules import labels, settlement
from ackstore.rules.headers import WEAK_ACK
from jobs.expectations import INVARIANTS, Invariant
from jobs.settings import PipelineSettings
from jobs.sql import statement
from jobs.step import Step, expect_count

JOB = "validate"
WATERMARK = "validated_settlements"
SLICE_TABLES = (stage_check_results, stage_check_acks, stage_check_settlements)
SAMPLES = 5  # failing rows named per invariant

log = logging.getLogger("ackstore.pipeline.validate")


@dataclass(frozen=True)
class Failure:
    """A failed invariant: what it states, where, how many rows broke it, and some of them."""

    states: str
    table: str
    expectation: str
    unexpected: int | None
    samples: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "invariant": self.states,
            "table": self.table,
            "expectation": self.expectation,
            "unexpected": self.unexpected,
            "samples": list(self.samples),
        }

    def describe(self) -> str:
        ids = "; ".join(", ".join(f"{k} {v}" for k, v in sample.items()) for sample in self.samples)
        return f"{self.states} [{self.table}: {self.unexpected} rows, e.g. {ids or 'n/a'}]"


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
    step = Step(JOB, settings, SLICE_TABLES)
    params = {
        "run_id": step.run_id,
        "watermark": WATERMARK,
        "twin_persisted": labels.TWIN_PERSISTED,
        "weak_header": WEAK_ACK,
        "builtin_labels": sorted(labels.BUILTIN_LABELS),
        "transport_api": settlement.TRANSPORT_API,
        "local_sources": list(settlement.LOCAL_SOURCES),
    }
    with step.locked():
        with step.engine.connect() as conn:
            params["after"] = conn.execute(statement(JOB, "watermark"), params).scalar_one()
            size = conn.execute(statement(JOB, "slice_size"), params).one()
        step.stats.update(decisions=size.decisions, settlements=size.settlements, acks=0)
        if size.decisions == 0 and size.settlements == 0:
            return step.record()
        step.timed("slice", lambda: _fill_slice(step, params))
        failures = step.timed("expectations", lambda: check_slice(settings.database_url))
        step.stats["invariants"] = len(INVARIANTS)
        if failures:
            step.stats["failures"] = [failure.to_json() for failure in failures]
            step.record()
            error = ValidationFailed(step.run_id, failures)
            log.error("%s", error)
            raise error
        _pass(step, params)
        return step.record()


def _fill_slice(step: Step, params: dict[str, Any]) -> None:
    with step.engine.begin() as conn:
        run_statement = step.runner(conn, params)
        step.stats["decisions"] = run_statement("slice_results")
        step.stats["acks"] = run_statement("slice_acks")
        step.stats["settlements"] = run_statement("slice_settlements")


def _pass(step: Step, params: dict[str, Any]) -> None:
    with step.merge() as conn:
        run_statement = step.runner(conn, params)
        step.stats["to_settle"] = run_statement("enqueue_settlements")
        expect_count("validation queue", run_statement("dequeue"), step.stats["decisions"])
        run_statement("advance_watermark")
        run_statement("clear_staging")


# --- Great Expectations ----------------------------------------------------------------------


def check_slice(database_url: str) -> list[Failure]:
    """Run every invariant over the slice tables; the failures, in :data:`INVARIANTS` order."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig
    from great_expectations.expectations.row_conditions import Column

    logging.getLogger("great_expectations").setLevel(logging.WARNING)  # its INFO lines are noise in a task log
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    with warnings.catch_warnings():  # add_sql suggests add_postgres, which wants a user in a URL
        warnings.simplefilter("ignore")
        source = context.data_sources.add_sql("ledger", **ledger_url(database_url).gx())
    failures: list[Failure] = []
    for table in dict.fromkeys(invariant.table for invariant in INVARIANTS):
        chosen = [invariant for invariant in INVARIANTS if invariant.table == table]
        suite = context.suites.add(gx.ExpectationSuite(name=table))
        by_id = {suite.add_expectation(invariant.expectation(gx, Column)).id: invariant for invariant in chosen}
        batch = source.add_table_asset(table, table_name=table).add_batch_definition_whole_table("slice")
        definition = context.validation_definitions.add(gx.ValidationDefinition(name=table, data=batch, suite=suite))
        outcome = definition.run(
            result_format={
                "result_format": "SUMMARY",
                "unexpected_index_column_names": list(chosen[0].ids),
                "partial_unexpected_count": SAMPLES,
            }
        )
        # Results come back in GX's order, not ours: match them by expectation id.
        failed = {by_id[result.expectation_config.id]: result for result in outcome.results if not result.success}
        failures.extend(_failure(invariant, failed[invariant]) for invariant in chosen if invariant in failed)
    return failures


def _failure(invariant: Invariant, result: Any) -> Failure:
    details = result.result or {}
    # Column expectations name failing rows by their id columns; a compound-uniqueness one lists
    # the compared values instead, which are ids themselves.
    rows = details.get("partial_unexpected_index_list") or details.get("partial_unexpected_list") or []
    samples = tuple(
        {k: row[k] for k in invariant.ids if k in row} if isinstance(row, dict) else {"values": list(row)}
        for row in rows[:SAMPLES]
    )
    info = result.exception_info if isinstance(result.exception_info, dict) else {}
    if info.get("raised_exception"):
        samples += ({"exception": info.get("exception_message")},)
    return Failure(
        states=invariant.states,
        table=invariant.table,
        expectation=result.expectation_config.type,
        unexpected=details.get("unexpected_count"),
        samples=samples,
    )
