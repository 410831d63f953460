"""Step 4, sweep: decide requests (B.5, A.2.1, A.2.7) and store what the requester is told.

First SQL decides the common case — every label in and 2xx, or nothing asked — and takes those
requests out of the decision queue (the sweep step's queue: the table ``queue_decide``). Then Spark
reads the rest of the queue (one attempt of a signal each) with its command response and the acks
of that attempt that arrived by its deadline, and applies :func:`ackstore.rules.aggregation.decide`
to each. Decided ones are staged; one transaction writes ``request_results``, counts the acks that
came too late (shown late by ``decided_disposition``, never changed), and takes the decided
requests out of the queue. Both paths give the same answer for a request both can decide
(tests/ledger/test_aggregation_python_and_sql.py). Each transaction is a sweep batch
(``ledger_batches``): the validation gate reads the results of the batches it has not passed yet.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator

from ackstore.ledger.results import DECISIONS_CHANNEL
from ackstore.ledger.schema import queue_decide, request_results, stage_results
from ackstore import faults
from ackstore.rules import aggregation, errors, jsontext
from ackstore.rules.acks import ABSENT, Ack
from jobs.settings import PipelineSettings
from jobs.spark import map_rows, spark_ddl
from jobs.sql import statement
from jobs.step import Step, expect_count

log = logging.getLogger("ackstore.pipeline")

JOB = "sweep"
RESULT_COLUMNS = (
    ("signal_id", "int64"),
    ("attempt", "int32"),
    ("status", "int32"),
    ("body", "string"),
    ("headers", "string"),
    ("cause", "string"),
    ("ack_statuses", "string"),
    ("acks_seen", "int32"),
)


def run(spark: Any, settings: PipelineSettings) -> dict[str, Any]:
    step = Step(JOB, settings, (stage_results,))
    return step.run_once(spark, "undecided_bounds", _stage, _merge, idle={"decided": 0, "decided_in_sql": 0},
                         first=decide_common)


COMMON_PARAMS = {"shortcut_labels": sorted(aggregation.SHORTCUT_LABELS)}
COMMON_STATEMENTS = ("decide_builtin", "decide_common")  # the built-in-only bulk first, then the rest


def decide_common(step: Step) -> None:
    """The requests SQL decides alone (jobs/sql/sweep.sql), in one transaction (and batch) of their own."""
    with step.transaction() as conn:
        batch_id = step.open_batch(conn)
        run_statement = step.runner(conn, {**COMMON_PARAMS, "batch_id": batch_id})
        # the queue as this run finds it (the last run left it empty): see Step.refresh_statistics
        step.refresh_statistics(conn, {queue_decide: step.scalar(conn, "pending_count", {})})
        decided = 0
        for name in COMMON_STATEMENTS:  # each plans with the statistics of what the one before left
            written = run_statement(name)
            step.refresh_statistics(conn, {request_results: written, queue_decide: written})
            decided += written
        _notify(conn, decided)
        step.close_batch(conn, batch_id, decided)
    faults.checkpoint(f"{step.name}:common")
    step.stats["decided_in_sql"] = decided
    step.stats["decided"] += decided


def _stage(spark: Any, step: Step, bounds: tuple[int, int]) -> None:
    undecided = step.read(spark, "undecided", bounds)
    step.stage(undecided.mapInArrow(decide_batches, spark_ddl(RESULT_COLUMNS)), stage_results)


def _merge(step: Step) -> None:
    with step.merge() as conn:
        params = {"run_id": step.run_id, "batch_id": step.open_batch(conn)}
        run_statement = step.runner(conn, params)
        run_statement("lock_acks")
        step.stats["deferred"] = run_statement("defer_outdated")
        staged = step.scalar(conn, "staged", params)
        step.refresh_statistics(conn, {stage_results: staged})
        expect_count("request results", run_statement("insert_results"), staged)
        step.stats["decided"] = step.stats.get("decided", 0) + staged
        step.stats["late_acks"] = step.scalar(conn, "late_acks", params)
        expect_count("decision queue", run_statement("dequeue"), staged)
        run_statement("clear_staging")
        step.refresh_statistics(conn, {request_results: staged})
        _notify(conn, staged)
        step.close_batch(conn, params["batch_id"], staged)


def _notify(conn: Any, decided: int) -> None:
    if decided:
        conn.execute(statement(JOB, "notify_decided"), {"channel": DECISIONS_CHANNEL})


# --- deciding, inside Spark's Python workers --------------------------------------------------


def decide_batches(batches: Iterator[Any]) -> Iterator[Any]:
    return map_rows(batches, RESULT_COLUMNS, _decision)


def _decision(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The staged result of one request; one whose stored facts cannot be read is answered as
    ``aggregation.undecidable`` says, never the pass's failure (decisions #116)."""
    try:
        return _staged(row, *decide_row(row))
    except errors.PROCESS_FAILURES:
        raise  # the process's, not the row's
    except Exception:  # noqa: BLE001 — the request's, never the pass's
        log.warning("%s: the facts of signal %s attempt %s cannot be read; it is answered 500 internalerror",
                    JOB, row["signal_id"], row["attempt"])
        return _staged(row, *undecidable_row(row))


def _staged(row: dict[str, Any], result: aggregation.Result | None, acks_seen: int) -> list[dict[str, Any]]:
    if result is None:
        return []
    return [{
        "signal_id": row["signal_id"],
        "attempt": row["attempt"],
        "status": result.status,
        "body": None if result.body is ABSENT else jsontext.dumps(result.body),
        "headers": jsontext.dumps(dict(result.headers)),
        "cause": result.cause,
        "ack_statuses": jsontext.dumps(dict(result.ack_statuses)),
        "acks_seen": acks_seen,
    }]


def decide_row(row: dict[str, Any]) -> tuple[aggregation.Result | None, int]:
    """One stored request, as the read query gives it, through the aggregation rule; also how
    many in-time acks the decision saw (the merge checks nothing arrived since)."""
    request = _request(row, jsontext.loads(row["headers"]))
    payload = jsontext.loads(row["response_payload"]) if row["response_payload"] is not None else ABSENT
    error = response = None
    if row["response_status"] is not None:
        if row["response_is_error"]:
            error = _error_from(row["response_status"], payload)
        else:
            response = aggregation.Response(row["response_status"], payload)
    acks = [
        Ack(label, status, ack_payload if has_payload else ABSENT, headers or {}, weak)
        for label, status, ack_payload, has_payload, headers, weak in jsontext.loads(row["acks"] or "[]")
    ]
    result = aggregation.decide(request, acks=acks, response=response, error=error,
                                deadline_passed=row["deadline_passed"], invalid_response=row["invalid_response"])
    return result, len(acks)


def undecidable_row(row: dict[str, Any]) -> tuple[aggregation.Result | None, int]:
    """:func:`decide_row` for a request whose headers, response payload or acks cannot be read:
    from its plain columns alone; the in-time acks counted without reading them."""
    result = aggregation.undecidable(_request(row, {}), response_is_error=row["response_is_error"],
                                     deadline_passed=row["deadline_passed"])
    return result, jsontext.array_length(row["acks"] or "[]")


def _request(row: dict[str, Any], headers: dict[str, Any]) -> aggregation.Request:
    """The request a row of the read query stands for, with its command's ``headers``."""
    return aggregation.Request(
        correlation_id=row["correlation_id"],
        requested_acks=tuple(row["requested_acks"] or ()),
        response_required=row["response_required"],
        timeout_ms=row["timeout_ms"],
        api=row["api"],
        headers=headers,
        thing_id=row["thing_id"],
        path=row["path"],
    )


def _error_from(status: int, payload: Any) -> errors.DittoError:
    body = payload if isinstance(payload, dict) else {}
    return errors.DittoError(
        status, body.get("error", "things:error"), body.get("message", ""), body.get("description"), body.get("href")
    )
