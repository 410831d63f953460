"""The ledger's health in five figures (issue 38, item 7): the Ledger page's strip, summarised from
the very rows a scrape of ``ackstore metrics`` serves (``ackstore.ledger.metrics.read``), so the
page and Prometheus cannot disagree.

* backlog: the work waiting in every work queue (``ackstore_queue_pending``), and per queue;
* oldest unsettled: the largest ``ackstore_oldest_unsettled_age_seconds`` over the sources, and
  whose it is;
* last pass: when the last whole pipeline pass ended (``ackstore_pipeline_last_success_timestamp_seconds``);
* last seal: its number and when (``ackstore_seal_last_number``, ``..._timestamp_seconds``);
* the gate: whether the validation gate's last run failed (``ackstore_validation_failed``). The
  ledger has no outage gauge of its own — an outage is a connector's to see
  (``ackstore_connector_outage``) — so this is what the ledger itself knows is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from ackstore.ledger.metrics import Reading
from ackstore.reporting.shown_values import instant, seconds

QUEUES = ("apply", "index", "decide", "validate", "settle", "carry_out")  # the pipeline's order
OUTAGES = "no outage gauge here: a connector's ackstore_connector_outage says"


@dataclass(frozen=True)
class Health:
    """The five figures, as read (times in UTC; None where the ledger has none yet)."""

    backlog: int
    backlog_by_queue: dict[str, int] = field(default_factory=dict)
    oldest_unsettled_seconds: float | None = None
    oldest_unsettled_source: str | None = None
    last_pass_at: datetime | None = None
    last_seal_number: int = 0
    last_seal_at: datetime | None = None
    validation_failed: bool | None = None  # None: the gate never ran
    validation_at: datetime | None = None


def health(reading: Reading) -> Health:
    """The five figures of one reading of the ledger's gauges."""
    gauges: dict[str, dict[str, float]] = {}
    for gauge in reading.gauges:
        gauges.setdefault(gauge.metric, {})[gauge.label] = gauge.value
    pending = {queue: int(value) for queue, value in gauges.get("queue_pending", {}).items()}
    by_queue = {queue: pending.pop(queue) for queue in QUEUES if queue in pending} | dict(sorted(pending.items()))
    unsettled = gauges.get("oldest_unsettled_age_seconds", {})
    oldest = max(unsettled, key=lambda source: (unsettled[source], source)) if unsettled else None
    failed = gauges.get("validation_failed", {}).get("")
    return Health(
        backlog=sum(by_queue.values()),
        backlog_by_queue=by_queue,
        oldest_unsettled_seconds=unsettled[oldest] if oldest is not None else None,
        oldest_unsettled_source=oldest,
        last_pass_at=_moment(gauges, "pipeline_last_success_timestamp_seconds"),
        last_seal_number=int(gauges.get("seal_last_number", {}).get("", 0)),
        last_seal_at=_moment(gauges, "seal_last_timestamp_seconds"),
        validation_failed=None if failed is None else failed >= 1,
        validation_at=_moment(gauges, "validation_last_timestamp_seconds"),
    )


@dataclass(frozen=True)
class Figure:
    """One figure of the strip as shown: its name, its value, and a line under it (all plain
    text: whoever shows it escapes it; a source's name is a sender's text)."""

    key: str
    name: str
    value: str
    detail: str
    alarm: bool = False


def figures(found: Health, now: datetime) -> list[Figure]:
    """The strip's five figures as text, ages counted to ``now``."""
    queues = ", ".join(f"{queue} {count}" for queue, count in found.backlog_by_queue.items() if count) or "every queue empty"
    return [
        Figure("backlog", "Backlog", str(found.backlog), queues),
        Figure("oldest-unsettled", "Oldest unsettled",
               "none" if found.oldest_unsettled_seconds is None else seconds(found.oldest_unsettled_seconds),
               "every signal settled" if found.oldest_unsettled_source is None
               else f"from {found.oldest_unsettled_source}"),
        Figure("last-pass", "Last pass", "never" if found.last_pass_at is None else f"{ago(found.last_pass_at, now)} ago",
               "no whole pass yet" if found.last_pass_at is None else f"ended {instant(found.last_pass_at)} UTC"),
        Figure("last-seal", "Last seal", "none" if not found.last_seal_number else f"#{found.last_seal_number}",
               "nothing sealed yet" if found.last_seal_at is None
               else f"{ago(found.last_seal_at, now)} ago, {instant(found.last_seal_at)} UTC"),
        Figure("validation", "Validation gate",
               "not run yet" if found.validation_failed is None else "FAILED" if found.validation_failed else "passed",
               OUTAGES if found.validation_at is None else f"last run {ago(found.validation_at, now)} ago; {OUTAGES}",
               alarm=bool(found.validation_failed)),
    ]


def ago(at: datetime, now: datetime) -> str:
    """How long before ``now`` (never negative: the database's clock may run a little ahead)."""
    return seconds(max(now - at, timedelta(0)))


def _moment(gauges: dict[str, dict[str, float]], metric: str) -> datetime | None:
    value = gauges.get(metric, {}).get("")
    return None if value is None else datetime.fromtimestamp(value, timezone.utc)
