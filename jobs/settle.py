"""Step 6, settle: the transport decision for every validated result from a connection (B.9).

First SQL acks what succeeded (``settle_common``: a 2xx result whose entries are all 2xx), in a
transaction of its own. Then Spark reads the rest of ``queue_settle`` (decided, through the
validation gate, from a broker connection) and applies
:func:`ackstore.rules.settlement.decide_settlement` to each: ack, reject, redeliver — or
dead-letter once the attempts are used up (A.2.10). Each transaction writes one ``settlements``
row per attempt, empties the queue of what it decided, and sends ``NOTIFY
ackstore_settlements, '<source>'`` so that the connector holding those deliveries wakes up and
carries the decisions out. Where both can decide, both decide alike (tests/pipeline/test_settle.py).
"""

from __future__ import annotations

import logging
from typing import Any, Iterator

from ackstore import faults
from ackstore.ledger.schema import queue_settle, settlements, stage_settlements
from ackstore.ledger.settlements import NOTIFY_CHANNEL
from ackstore.rules import errors, jsontext, settlement
from jobs.settings import PipelineSettings
from jobs.spark import map_rows, spark_ddl
from jobs.sql import statement
from jobs.step import Step, expect_count

log = logging.getLogger("ackstore.pipeline")

JOB = "settle"
DECISION_COLUMNS = (("signal_id", "int64"), ("attempt", "int32"), ("decision", "string"))


def run(spark: Any, settings: PipelineSettings) -> dict[str, Any]:
    step = Step(JOB, settings, (stage_settlements,))
    return step.run_once(spark, "pending_bounds", _stage, _merge, first=settle_common,
                         idle={"decided": 0, "settled_in_sql": 0, "settlements": 0, "by_decision": {},
                               "notified_sources": 0})


def settle_common(step: Step) -> None:
    """The acks SQL decides alone (jobs/sql/settle.sql), in one transaction of their own."""
    ack = settlement.Settlement.ACK.value
    with step.transaction() as conn:
        # the queue as this run finds it (the last run left it empty): see Step.refresh_statistics
        step.refresh_statistics(conn, {queue_settle: step.scalar(conn, "pending_count", {})})
        by_source = conn.execute(statement(JOB, "settle_common"), {"ack": ack, "channel": NOTIFY_CHANNEL}).all()
        settled = sum(row.settled for row in by_source)
        step.refresh_statistics(conn, {settlements: settled, queue_settle: settled})
    faults.checkpoint(f"{step.name}:common")
    step.stats.update(settled_in_sql=settled, decided=settled, settlements=settled,
                      by_decision={ack: settled} if settled else {}, notified_sources=len(by_source))


def _stage(spark: Any, step: Step, bounds: tuple[int, int]) -> None:
    max_attempts = step.settings.rules.max_attempts
    decisions = step.read(spark, "pending", bounds).mapInArrow(
        lambda batches: decide_batches(batches, max_attempts), spark_ddl(DECISION_COLUMNS)
    )
    step.stage(decisions, stage_settlements)


def _merge(step: Step) -> None:
    params = {"run_id": step.run_id, "channel": NOTIFY_CHANNEL}
    with step.merge() as conn:
        run_statement = step.runner(conn, params)
        staged = step.scalar(conn, "staged", params)
        step.refresh_statistics(conn, {stage_settlements: staged})  # the queue's: validate's, as it filled it
        step.stats["settlements"] += run_statement("insert_settlements")
        expect_count("settle queue", run_statement("dequeue"), staged)
        step.stats["decided"] += staged
        for row in conn.execute(statement(JOB, "counts"), params):
            step.stats["by_decision"][row.decision] = step.stats["by_decision"].get(row.decision, 0) + row.n
        step.stats["notified_sources"] += len(conn.execute(statement(JOB, "notify"), params).all())
        run_statement("clear_staging")
        step.refresh_statistics(conn, {settlements: step.stats["settlements"]})


# --- deciding, inside Spark's Python workers --------------------------------------------------


def decide_batches(batches: Iterator[Any], max_attempts: int) -> Iterator[Any]:
    return map_rows(batches, DECISION_COLUMNS, lambda row: [
        {"signal_id": row["signal_id"], "attempt": row["attempt"], "decision": decide_row(row, max_attempts)}])


def decide_row(row: dict[str, Any], max_attempts: int) -> str | None:
    """The B.9 decision for one validated result, as the read query gives it; ``None`` for a
    signal that needs no transport settlement (its stored result is the answer)."""
    if not settlement.needs_transport_settlement(row["api"], row["source"]):
        return None
    try:
        outcome = settlement.outcome_of_result(
            row["cause"], row["status"], jsontext.loads(row["ack_statuses"]), live=row["channel"] == "live"
        )
        outcomes, failure = [outcome], False
    except errors.PROCESS_FAILURES:
        raise  # the process's, not the row's
    except Exception:  # noqa: BLE001 — the result's, never the pass's: a failure that is no Ditto one (decisions #116)
        log.warning("%s: the result of signal %s attempt %s cannot be read; it is redelivered",
                    JOB, row["signal_id"], row["attempt"])
        outcomes, failure = [], True
    decision = settlement.decide_settlement(outcomes, expected=1, non_ditto_failure=failure, attempt=row["attempt"],
                                            max_attempts=max_attempts)
    return decision.value
