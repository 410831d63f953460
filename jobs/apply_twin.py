"""Step 1, apply_twin: fold pending twin commands onto their things (B.10).

Spark reads the pending commands with their thing's state, streams each thing's commands
in ingestion order through :func:`ackstore.rules.twin.fold` (sorted partitions, one plain Python
loop per partition: stack-notes.md), and stages one row per command. One transaction then
writes the new thing states and the responses — the persisted facts, with their events — as one
ledger batch, whose commit time is the fact time of the ``twin-persisted`` acks derived from them.
"""

from __future__ import annotations

from typing import Any, Iterator

from ackstore.ledger.schema import stage_twin_outcomes
from ackstore.rules import jsontext, twin
from ackstore.rules.acks import ABSENT
from jobs.settings import PipelineSettings
from jobs.spark import record_batch, spark_ddl
from jobs.step import Step, expect_count

JOB = "apply_twin"
OUTCOME_COLUMNS = (
    ("signal_id", "int64"),
    ("thing_id", "string"),
    ("base_revision", "int64"),
    ("status", "int32"),
    ("payload", "string"),
    ("is_error", "bool_"),
    ("event_action", "string"),
    ("revision", "int64"),
    ("is_last", "bool_"),
    ("final_revision", "int64"),
    ("final_document", "string"),
)


def run(spark: Any, settings: PipelineSettings) -> dict[str, Any]:
    step = Step(JOB, settings, (stage_twin_outcomes,))
    return step.run_once(spark, "pending_bounds", _stage, _merge, idle={"commands": 0})


def _stage(spark: Any, step: Step, bounds: tuple[int, int]) -> None:
    max_bytes = step.settings.max_thing_bytes
    outcomes = (
        step.read(spark, "pending", bounds)
        .repartition(step.settings.partitions, "thing_id")
        .sortWithinPartitions("thing_id", "signal_id")
        .mapInArrow(lambda batches: fold_batches(batches, max_bytes), spark_ddl(OUTCOME_COLUMNS))
    )
    step.stage(outcomes, stage_twin_outcomes)


def _merge(step: Step) -> None:
    with step.merge() as conn:
        params = {"run_id": step.run_id, "batch_id": step.open_batch(conn)}
        params["event_base"] = step.scalar(conn, "event_base", params)
        run_statement = step.runner(conn, params)
        staged = step.scalar(conn, "staged", params)
        expect_count("command responses", run_statement("insert_responses"), staged)
        changed = step.scalar(conn, "changed_things", params)
        expect_count("things", run_statement("update_things") + run_statement("insert_things"), changed)
        step.stats["commands"] = staged
        step.stats["things"] = changed
        step.stats["events"] = step.scalar(conn, "event_base", params) - params["event_base"]
        expect_count("apply queue", run_statement("dequeue"), staged)
        run_statement("enqueue_index")
        run_statement("clear_staging")
        step.close_batch(conn, params["batch_id"], staged)


# --- the fold, run inside Spark's Python workers --------------------------------------------


def fold_batches(batches: Iterator[Any], max_thing_bytes: int) -> Iterator[Any]:
    """Stream sorted command rows; emit one outcome row per command, the final state on the last.
    (A thing's commands may span input batches, so this is no per-row map_rows.)"""
    group: list[dict[str, Any]] = []
    for batch in batches:
        out: list[dict[str, Any]] = []
        for row in batch.to_pylist():
            if group and row["thing_id"] != group[0]["thing_id"]:
                out.extend(fold_thing(group, max_thing_bytes))
                group = []
            group.append(row)
        if out:
            yield record_batch(out, OUTCOME_COLUMNS)
    if group:
        yield record_batch(fold_thing(group, max_thing_bytes), OUTCOME_COLUMNS)


def fold_thing(rows: list[dict[str, Any]], max_thing_bytes: int) -> list[dict[str, Any]]:
    """The outcome rows of one thing's pending commands, in ingestion order."""
    first = rows[0]
    base_document = jsontext.loads(first["base_document"]) if first["base_document"] is not None else None
    state = twin.ThingState(first["thing_id"], first["base_revision"], base_document)
    out = []
    for row in rows:
        command = twin.Command(
            signal_id=row["signal_id"],
            action=row["action"],
            path=row["path"],
            value=jsontext.loads(row["value"]) if row["value"] is not None else ABSENT,
            headers=jsontext.loads(row["headers"]) if row["headers"] != "{}" else None,
        )
        state, outcome = twin.apply(state, command, max_thing_bytes)
        out.append(
            {
                "signal_id": row["signal_id"],
                "thing_id": state.thing_id,
                "base_revision": first["base_revision"],
                "status": outcome.status,
                "payload": None if outcome.payload is ABSENT else jsontext.dumps(outcome.payload),
                "is_error": outcome.is_error,
                "event_action": outcome.event_action,
                "revision": state.revision if outcome.applied else None,
                "is_last": False,
                "final_revision": None,
                "final_document": None,
            }
        )
    out[-1].update(
        is_last=True,
        final_revision=state.revision,
        final_document=None if state.document is None else jsontext.dumps(state.document),
    )
    return out
