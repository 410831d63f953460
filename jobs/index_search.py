"""Step 2, index_search: flatten changed things into the search index (B.11).

Spark runs one task per partition of the things: it reads the partition's things whose revision
is past the index's watermark, stages their watermarks, flattens the changed documents with
:func:`ackstore.rules.index_rows.flatten` and stages the rows (in its Python worker: the rows
never pass through the JVM). One
transaction replaces the things' index rows, advances the watermarks and marks, per thing, the
revisions now indexed: one ledger batch, whose commit time is the fact time of the
``search-persisted`` acks derived from the marks.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator

from ackstore.ledger.schema import search_index, search_marks, search_things, stage_search_rows, stage_search_things
from ackstore.rules import errors, index_rows, jsontext
from jobs.settings import PipelineSettings
from jobs.spark import map_rows
from jobs.sql import with_literals
from jobs.step import Step, expect_count

log = logging.getLogger("ackstore.pipeline")

JOB = "index_search"
ROW_COLUMNS = (
    ("thing_id", "string"),
    ("path", "string"),
    ("ordinal", "int32"),
    ("value_type", "string"),
    ("value_text", "string"),
    ("value_number", "string"),
    ("value_bool", "bool_"),
    ("empty", "bool_"),
    ("revision", "int64"),
)
CHANGED_COLUMNS = (
    ("thing_id", "string"),
    ("namespace", "string"),
    ("old_revision", "int64"),
    ("revision", "int64"),
    ("digest", "string"),
    ("present", "bool_"),
    ("changed", "bool_"),
    ("document", "string"),
)
WATERMARK_COLUMNS = ("thing_id", "namespace", "old_revision", "revision", "digest", "present", "changed")


def run(spark: Any, settings: PipelineSettings) -> dict[str, Any]:
    step = Step(JOB, settings, (stage_search_things, stage_search_rows))
    return step.run_once(spark, "pending_count", _stage, _merge, idle={"things": 0})


def _stage(spark: Any, step: Step, found: tuple[int]) -> None:
    partitions = step.tasks(found[0])
    reads = [with_literals(JOB, "changed", {"partition": k, "partitions": partitions}) for k in range(partitions)]
    step.stage_in_tasks(spark, found[0], reads, CHANGED_COLUMNS,
                        {stage_search_things: watermark_batches, stage_search_rows: flatten_batches})


def _merge(step: Step) -> None:
    with step.merge() as conn:
        params = {"run_id": step.run_id, "batch_id": step.open_batch(conn)}
        run_statement = step.runner(conn, params)
        staged = step.scalar(conn, "staged", params)
        advanced = run_statement("insert_watermarks") + run_statement("advance_watermarks")
        expect_count("index watermarks", advanced, staged)
        step.stats["things"] = staged
        step.stats["rows_deleted"] = run_statement("delete_rows")
        step.stats["rows"] = run_statement("insert_rows")
        run_statement("dequeue")
        expect_count("search marks", run_statement("insert_marks"), staged)
        run_statement("clear_staging")
        step.refresh_statistics(conn, {search_index: step.stats["rows"], search_things: staged, search_marks: staged})
        step.close_batch(conn, params["batch_id"], staged)


def watermark_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """Each changed thing's new watermark: the read's own columns."""
    return (batch.select(WATERMARK_COLUMNS) for batch in batches)


def flatten_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """Index rows of each thing whose indexed state changed, inside Spark's Python workers."""
    return map_rows(batches, ROW_COLUMNS, _index_rows)


def _index_rows(thing: dict[str, Any]) -> list[dict[str, Any]]:
    """A changed thing's index rows. One whose document cannot be read back (deeper than Python's
    stack: only a ledger from before the depth limits holds one) is indexed without rows, as a
    path too long for the index is: its watermark and mark advance all the same, so it is never
    read again, and no search finds it (decisions #116)."""
    if not (thing["changed"] and thing["present"]):
        return []  # unchanged: the index holds this state; deleted: the merge only deletes its rows
    try:
        return _rows_of(thing)
    except errors.PROCESS_FAILURES:
        raise  # the process's, not the row's
    except Exception:  # noqa: BLE001 — the thing's, never the pass's
        log.warning("%s: the document of %r at revision %s cannot be read; it is indexed without rows",
                    JOB, thing["thing_id"], thing["revision"])
        return []


def _rows_of(thing: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "thing_id": thing["thing_id"],
            "path": row.path,
            "ordinal": row.ordinal,
            "value_type": row.value_type,
            "value_text": row.value_text,
            "value_number": row.value_number,
            "value_bool": row.value_bool,
            "empty": row.empty,
            "revision": thing["revision"],
        }
        for row in index_rows.for_index(index_rows.flatten(jsontext.loads(thing["document"])))
    ]
