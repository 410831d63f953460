"""Step 3, weak_acks: a weak ack for every requested label nobody who declared it receives (B.8).

Spark reads every undecided request that asks for a declared custom label not counted yet,
with its twin event (or the live signal itself) and the subscribers of the group that declared
the label, and applies :func:`ackstore.rules.subscriptions.weak_ack_reason` to each: when no
subscriber of the group would receive the signal — another channel, another namespace, a filter
that excludes it — the label gets a weak ack (200, ``ditto-weak-ack: true``, the reason as its
payload) before the sweep decides. Labels nobody declared get none and time out (408).
"""

from __future__ import annotations

import logging
from typing import Any, Iterator

from ackstore.ledger.schema import acks, stage_weak_acks
from ackstore.rules import errors, jsontext, subscriptions
from ackstore.rules.acks import BUILTIN_ISSUER
from jobs.settings import PipelineSettings
from jobs.spark import map_rows, spark_ddl
from jobs.step import Step

log = logging.getLogger("ackstore.pipeline")

JOB = "weak_acks"
WEAK_ACK_COLUMNS = (
    ("signal_id", "int64"),
    ("attempt", "int32"),
    ("label", "string"),
    ("headers", "string"),
    ("reason", "string"),
)


def run(spark: Any, settings: PipelineSettings) -> dict[str, Any]:
    step = Step(JOB, settings, (stage_weak_acks,))
    return step.run_once(spark, "candidate_bounds", _stage, _merge, idle={"weak_acks": 0})


def _stage(spark: Any, step: Step, bounds: tuple[int, int]) -> None:
    candidates = step.read(spark, "candidates", bounds)
    step.stage(candidates.mapInArrow(weak_ack_batches, spark_ddl(WEAK_ACK_COLUMNS)), stage_weak_acks)


def _merge(step: Step) -> None:
    params = {"run_id": step.run_id, "issuer": BUILTIN_ISSUER}
    with step.merge() as conn:
        run_statement = step.runner(conn, params)
        step.stats["staged"] = step.scalar(conn, "staged", params)
        step.stats["weak_acks"] = run_statement("insert_weak_acks")
        run_statement("clear_staging")
        step.refresh_statistics(conn, {acks: step.stats["weak_acks"]})


# --- judging, inside Spark's Python workers ---------------------------------------------------


def weak_ack_batches(batches: Iterator[Any]) -> Iterator[Any]:
    return map_rows(batches, WEAK_ACK_COLUMNS, _weak_ack)


def _weak_ack(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The weak ack one candidate gets, if any. A candidate that cannot be judged (its signal's
    value cannot be read, a filter fails) gets none: its label waits for its subscriber's ack or
    its deadline (408), and the pass goes on (decisions #116)."""
    try:
        reason = weak_ack_row(row)
    except errors.PROCESS_FAILURES:
        raise  # the process's, not the row's
    except Exception:  # noqa: BLE001 — the candidate's, never the pass's
        log.warning("%s: signal %s attempt %s cannot be judged for label %r; it gets no weak ack",
                    JOB, row["signal_id"], row["attempt"], row["label"])
        return []
    if reason is None:
        return []
    return [{
        "signal_id": row["signal_id"],
        "attempt": row["attempt"],
        "label": row["label"],
        "headers": jsontext.dumps(subscriptions.weak_ack_headers(row["correlation_id"])),
        "reason": reason,
    }]


def weak_ack_row(row: dict[str, Any]) -> str | None:
    """The weak ack's payload for one candidate as the read query gives it, or ``None``."""
    group = [subscriptions.Subscriber.from_row(member) for member in jsontext.loads(row["group_members"] or "[]")]
    return subscriptions.weak_ack_reason(row["label"], group, signal_view(row))


def signal_view(row: dict[str, Any]) -> subscriptions.SignalView:
    """What filters see: the twin event of a twin command, or the live signal itself."""
    if row["kind"] == "twin-command":
        value = jsontext.loads(row["event_value"]) if row["event_value"] is not None else None
        return subscriptions.event_view(row["thing_id"], row["event_action"], row["event_path"], value)
    value = jsontext.loads(row["value"]) if row["value"] is not None else None
    return subscriptions.SignalView(row["kind"], row["thing_id"], row["action"], row["path"], value)
