"""Step 1, apply_twin: fold pending twin commands onto their things (B.10).

Spark runs one task per partition of the things: it reads that partition's pending commands
with their thing's state from PostgreSQL, each thing's commands together in ingestion order
(sorted by PostgreSQL), streams them through :func:`ackstore.rules.twin.fold` (one plain Python
loop: docs/stack-notes.md), and stages one row per command. One transaction then writes the new thing
states and the responses — the persisted facts, with their events — as one ledger batch, whose
commit time is the fact time of the ``twin-persisted`` acks derived from them.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator

from ackstore.ledger.schema import command_responses, queue_apply, queue_index, stage_twin_outcomes, things
from ackstore.rules import errors, jsontext, limits, twin
from ackstore.rules.acks import ABSENT
from jobs.settings import PipelineSettings
from jobs.spark import record_batch_of_columns
from jobs.sql import statement, with_literals
from jobs.step import Step, expect_count

log = logging.getLogger("ackstore.pipeline")

JOB = "apply_twin"
PENDING_COLUMNS = (
    ("signal_id", "int64"),
    ("thing_id", "string"),
    ("action", "string"),
    ("path", "string"),
    ("value", "string"),
    ("headers", "string"),
    ("base_revision", "int64"),
    ("base_document", "string"),
)
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
    return step.run_once(spark, "pending_count", _stage, _merge, idle={"commands": 0}, first=_clear_abandoned)


def _clear_abandoned(step: Step) -> None:
    """Signals a committed COPY staged and never merged (issue 37): nothing will merge them now.
    The intake's staging table is the first step's to keep clean, once a run."""
    with step.transaction() as conn:
        removed = conn.execute(statement("batches", "clear_abandoned_staged_signals")).scalar_one()
    if removed:
        step.stats["abandoned_staged_signals"] = removed


def _stage(spark: Any, step: Step, found: tuple[int]) -> None:
    """Each partition's commands are read, folded and staged by one Spark task, in its Python
    worker: the rows never pass through the JVM (5 s less at a million commands, measured). As
    many partitions as the commands need (:meth:`Step.tasks`); a few, in the driver."""
    max_bytes = step.settings.max_thing_bytes
    partitions = step.tasks(found[0])
    reads = [with_literals(JOB, "pending", {"partition": k, "partitions": partitions}) for k in range(partitions)]
    step.stage_in_tasks(spark, found[0], reads, PENDING_COLUMNS,
                        {stage_twin_outcomes: lambda batches: fold_batches(batches, max_bytes)})


def _merge(step: Step) -> None:
    with step.merge() as conn:
        params = {"run_id": step.run_id, "batch_id": step.open_batch(conn)}
        params["event_base"] = step.scalar(conn, "event_base", params)
        run_statement = step.runner(conn, params)
        staged = step.scalar(conn, "staged", params)
        # the queue holds at least what was staged: its statistics as it is, not as the last run left it
        step.refresh_statistics(conn, {stage_twin_outcomes: staged, queue_apply: staged})
        expect_count("command responses", run_statement("insert_responses"), staged)
        changed = step.scalar(conn, "changed_things", params)
        expect_count("things", run_statement("update_things") + run_statement("insert_things"), changed)
        step.stats["commands"] = staged
        step.stats["things"] = changed
        step.stats["events"] = step.scalar(conn, "event_base", params) - params["event_base"]
        step.stats["internal_errors"] = _internal_errors(step, conn, params)
        expect_count("apply queue", run_statement("dequeue"), staged)
        run_statement("enqueue_index")
        run_statement("clear_staging")
        step.refresh_statistics(conn, {command_responses: staged, things: changed, queue_index: changed})
        step.close_batch(conn, params["batch_id"], staged)


def _internal_errors(step: Step, conn: Any, params: dict[str, Any]) -> int:
    """How many commands of the run the fold could not decide (answered 500 ``internalerror``),
    said in one line naming them: the pass went on without them (decisions #116)."""
    signal_ids = conn.execute(statement(JOB, "internal_errors"), params).scalars().all()
    if signal_ids:
        shown = ", ".join(map(str, signal_ids[:_NAMED])) + (f" and {len(signal_ids) - _NAMED} more"
                                                             if len(signal_ids) > _NAMED else "")
        log.warning("%s: the fold could not decide %d command(s), each answered 500 internalerror: signal %s",
                    JOB, len(signal_ids), shown)
    return len(signal_ids)


_NAMED = 20  # signals named in that line


# --- the fold, run inside Spark's Python workers --------------------------------------------


def fold_batches(batches: Iterator[Any], max_thing_bytes: int) -> Iterator[Any]:
    """Stream command rows, each thing's together in ingestion order; emit one outcome row per
    command, the thing's final state on its last. A thing's commands may span input batches, so
    this is no per-row map_rows; rows are read and written a column at a time (the fold costs
    ≈ 7 µs a command, dicts per row would add a third)."""
    group: list[tuple] = []
    for batch in batches:
        out = _Outcomes()
        columns = batch.to_pydict()
        for row in zip(*(columns[name] for name, _ in PENDING_COLUMNS)):
            if group and row[1] != group[0][1]:  # another thing_id
                fold_thing(group, max_thing_bytes, out)
                group = []
            group.append(row)
        if out.rows:
            yield out.batch()
    if group:
        out = _Outcomes()
        fold_thing(group, max_thing_bytes, out)
        yield out.batch()


def fold_thing(rows: list[tuple], max_thing_bytes: int, out: "_Outcomes") -> None:
    """Add the outcome rows of one thing's pending commands (PENDING_COLUMNS tuples, in ingestion
    order) to ``out``. A command whose value or headers nest past the limits (stored before them)
    is answered the door's 400, checked on their text before it is read; one the fold cannot
    decide is that command's 500 (``twin.UNDECIDED``), the thing's state unchanged by it; a base
    document that cannot be read (only a ledger from before the depth limits holds one), or a
    final one that cannot be written, makes every command of the thing a 500 and leaves the thing
    as it was (decisions #116). It raises only a failure of the process (``errors.PROCESS_FAILURES``):
    the task fails, and the step's next run folds the thing again."""
    _, thing_id, _, _, _, _, base_revision, base_document = rows[0]
    try:
        state = twin.ThingState(thing_id, base_revision,
                                jsontext.loads(base_document) if base_document is not None else None)
    except errors.PROCESS_FAILURES:
        raise  # the process's, not the row's
    except Exception:  # noqa: BLE001 — the thing's, never the pass's
        return _all_undecided(rows, base_revision, out)
    first = out.rows
    for signal_id, _, action, path, value, headers, _, _ in rows:
        try:
            if value is not None:  # each checked before it is read: no reader's stack decides
                limits.check_stored_member_text(value, "/value")
            limits.check_stored_member_text(headers, "/headers")
            command = twin.Command(
                signal_id=signal_id,
                action=action,
                path=path,
                value=jsontext.loads(value) if value is not None else ABSENT,
                headers=jsontext.loads(headers) if headers != "{}" else None,
            )
            after, outcome = twin.apply(state, command, max_thing_bytes)
            payload = None if outcome.payload is ABSENT else jsontext.dumps(outcome.payload)
        except errors.DittoError as error:  # a value or headers the door now refuses, stored before it
            after, outcome, payload = state, twin.Outcome(error.status, error.to_json()), jsontext.dumps(error.to_json())
        except errors.PROCESS_FAILURES:
            raise  # the process's, not the row's
        except Exception:  # noqa: BLE001 — the command's, never the pass's
            after, outcome, payload = state, twin.UNDECIDED, _UNDECIDED_PAYLOAD
        state = after
        out.add(signal_id, thing_id, base_revision, outcome.status, payload, outcome.is_error,
                outcome.event_action, state.revision if outcome.applied else None, False, None, None)
    try:
        final_document = None if state.document is None else jsontext.dumps(state.document)
    except errors.PROCESS_FAILURES:
        raise  # the process's, not the row's
    except Exception:  # noqa: BLE001 — apply wrote each document once: not expected, and not the pass's
        out.drop_from(first)
        return _all_undecided(rows, base_revision, out)
    out.finish_thing(state.revision, final_document)


_UNDECIDED_PAYLOAD = jsontext.dumps(twin.UNDECIDED.payload)


def _all_undecided(rows: list[tuple], base_revision: int, out: "_Outcomes") -> None:
    """Every command of the thing a 500, the thing as it was (its final revision the base one:
    the merge writes no state for it)."""
    for signal_id, thing_id, *_ in rows:
        out.add(signal_id, thing_id, base_revision, twin.UNDECIDED.status, _UNDECIDED_PAYLOAD, True, None, None,
                False, None, None)
    out.finish_thing(base_revision, None)


class _Outcomes:
    """Outcome rows gathered a column at a time (OUTCOME_COLUMNS), then one Arrow batch."""

    def __init__(self) -> None:
        self.columns: tuple[list[Any], ...] = tuple([] for _ in OUTCOME_COLUMNS)
        self.rows = 0

    def add(self, *row: Any) -> None:
        for column, value in zip(self.columns, row):
            column.append(value)
        self.rows += 1

    def drop_from(self, row: int) -> None:
        """Forget the rows added since there were ``row``."""
        for column in self.columns:
            del column[row:]
        self.rows = row

    def finish_thing(self, final_revision: int, final_document: str | None) -> None:
        """The last row added holds its thing's final state."""
        *_, is_last, revision, document = self.columns
        is_last[-1], revision[-1], document[-1] = True, final_revision, final_document

    def batch(self) -> Any:
        return record_batch_of_columns(self.columns, OUTCOME_COLUMNS)
