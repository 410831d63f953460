"""The ledger's health as a status (issues 38 and 50): the Ledger page's strip, summarised from the
very rows a scrape of ``ackstore metrics`` serves (``ackstore.ledger.metrics.read``), and coloured
ok / warning / critical by the thresholds the alert rules are made of
(``ackstore.rules.thresholds``), so the page turns red when, and only when, an alert would page.

* backlog: the signals waiting in any work queue, each once (``ackstore_signals_pending``), and
  the work per step (``ackstore_queue_pending``: a signal waits in several at once);
* oldest unsettled: the largest ``ackstore_oldest_unsettled_age_seconds`` over the sources, and
  whose it is (AckstoreOldestUnsettledTooOld);
* last pass: when the last whole pipeline pass ended (AckstorePipelineNotSucceeding);
* last seal: its number and when, and the facts waiting for the next (AckstoreSealingBehind);
* the validation gate: whether its last run failed (AckstoreValidationFailing);
* connectors: each connection's connector, when it last said it runs and whether it reaches its
  broker (``ackstore_connector_last_seen_timestamp_seconds``; AckstoreConnectorDown and
  AckstoreConnectorInOutage).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from ackstore.ledger.metrics import Reading
from ackstore.reporting.shown_values import instant, seconds
from ackstore.rules.thresholds import Status, Thresholds, worst

QUEUES = ("apply", "index", "decide", "validate", "settle", "carry_out")  # the pipeline's order
STEP_WORDS = {"carry_out": "carry out"}  # a queue as people read it
SHOWN_CONNECTORS = 20  # the connectors the strip names; the rest are counted


@dataclass(frozen=True)
class Connector:
    """A connection's connector, as the ledger last heard from it: running (its last word), or
    stopped cleanly (when; decisions #133)."""

    connection: str
    last_seen: datetime | None
    broker_out_since: datetime | None = None
    stopped_at: datetime | None = None


@dataclass(frozen=True)
class Health:
    """The strip's figures, as read (times in UTC; None where the ledger has none yet)."""

    backlog: int
    backlog_by_queue: dict[str, int] = field(default_factory=dict)
    oldest_unsettled_seconds: float | None = None
    oldest_unsettled_source: str | None = None
    last_pass_at: datetime | None = None
    last_seal_number: int = 0
    last_seal_at: datetime | None = None
    facts_unsealed: int = 0
    validation_failed: bool | None = None  # None: the gate never ran
    validation_at: datetime | None = None
    connectors: tuple[Connector, ...] = ()


def health(reading: Reading) -> Health:
    """The figures of one reading of the ledger's gauges."""
    gauges: dict[str, dict[str, float]] = {}
    for gauge in reading.gauges:
        gauges.setdefault(gauge.metric, {})[gauge.label] = gauge.value
    pending = {queue: int(value) for queue, value in gauges.get("queue_pending", {}).items()}
    by_queue = {queue: pending.pop(queue) for queue in QUEUES if queue in pending} | dict(sorted(pending.items()))
    unsettled = {source: age for source, age in gauges.get("oldest_unsettled_age_seconds", {}).items() if age > 0}
    oldest = max(unsettled, key=lambda source: (unsettled[source], source)) if unsettled else None
    failed = gauges.get("validation_failed", {}).get("")
    return Health(
        backlog=int(gauges.get("signals_pending", {}).get("", 0)),
        backlog_by_queue=by_queue,
        oldest_unsettled_seconds=unsettled[oldest] if oldest is not None else None,
        oldest_unsettled_source=oldest,
        last_pass_at=_moment(gauges, "pipeline_last_success_timestamp_seconds"),
        last_seal_number=int(gauges.get("seal_last_number", {}).get("", 0)),
        last_seal_at=_moment(gauges, "seal_last_timestamp_seconds"),
        facts_unsealed=int(gauges.get("facts_unsealed", {}).get("", 0)),
        validation_failed=None if failed is None else failed >= 1,
        validation_at=_moment(gauges, "validation_last_timestamp_seconds"),
        connectors=_connectors(gauges),
    )


def _connectors(gauges: dict[str, dict[str, float]]) -> tuple[Connector, ...]:
    """Each connector the ledger heard from: running by its last word; stopped cleanly, if it has none
    (``other``, the connectors past the metric sources, is running while one of them is)."""
    seen = gauges.get("connector_last_seen_timestamp_seconds", {})
    out = gauges.get("connector_broker_out_since_timestamp_seconds", {})
    stopped = gauges.get("connector_stopped_timestamp_seconds", {})
    running = tuple(Connector(connection, _at(at), None if connection not in out else _at(out[connection]))
                    for connection, at in seen.items())
    return tuple(sorted((*running, *(Connector(connection, None, stopped_at=_at(at))
                                     for connection, at in stopped.items() if connection not in seen)),
                        key=lambda connector: connector.connection))


@dataclass(frozen=True)
class Figure:
    """One figure of the strip as shown: its name, its value, a line under it, and its status (all
    plain text: whoever shows it escapes it; a source's name is a sender's text); ``lines``: a
    list under it (the connectors, each with its status)."""

    key: str
    name: str
    value: str
    detail: str
    status: Status = Status.OK
    lines: tuple[tuple[str, Status], ...] = ()


def figures(found: Health, now: datetime, thresholds: Thresholds) -> list[Figure]:
    """The strip's figures as text, ages counted to ``now``, each with its status by ``thresholds``."""
    last_pass_age = None if found.last_pass_at is None else _age(found.last_pass_at, now)
    seal_age = None if found.last_seal_at is None else _age(found.last_seal_at, now)
    return [
        _backlog(found),
        Figure("oldest-unsettled", "Oldest unsettled",
               "none" if found.oldest_unsettled_seconds is None else seconds(found.oldest_unsettled_seconds),
               "every signal settled" if found.oldest_unsettled_source is None
               else f"from {found.oldest_unsettled_source}", thresholds.unsettled(found.oldest_unsettled_seconds)),
        Figure("last-pass", "Last pass", "never" if found.last_pass_at is None else f"{ago(found.last_pass_at, now)} ago",
               "no whole pass yet" if found.last_pass_at is None else f"ended {instant(found.last_pass_at)} UTC",
               thresholds.last_pass(last_pass_age)),
        Figure("last-seal", "Last seal", "none" if not found.last_seal_number else f"#{found.last_seal_number}",
               ("nothing sealed yet" if found.last_seal_at is None
                else f"{ago(found.last_seal_at, now)} ago, {instant(found.last_seal_at)} UTC")
               + (f"; {found.facts_unsealed} facts wait for the next" if found.facts_unsealed else ""),
               thresholds.sealing(seal_age, found.facts_unsealed)),
        Figure("validation", "Validation gate",
               "not run yet" if found.validation_failed is None else "FAILED" if found.validation_failed else "passed",
               ("its last run found failing invariants: nothing is settled until it passes"
                if found.validation_failed else "no run yet" if found.validation_at is None
                else f"last run {ago(found.validation_at, now)} ago"),
               thresholds.validation(found.validation_failed)),
        _connectors_figure(found.connectors, now, thresholds),
    ]


def status(shown: list[Figure]) -> Status:
    """The strip's status: its worst figure's."""
    return worst(*(figure.status for figure in shown))


def _backlog(found: Health) -> Figure:
    steps = ", ".join(f"{STEP_WORDS.get(queue, queue)} {count}" for queue, count in found.backlog_by_queue.items()
                      if count)
    return Figure("backlog", "Backlog", f"{found.backlog} signal{'s' if found.backlog != 1 else ''}",
                  f"waiting, by step: {steps}" if steps else "every queue empty")


def _connectors_figure(connectors: tuple[Connector, ...], now: datetime, thresholds: Thresholds) -> Figure:
    states = [_connector_line(connector, now, thresholds) for connector in connectors]
    states.sort(key=lambda line: ((Status.OK, Status.WARNING, Status.CRITICAL).index(line[1]) * -1, line[0]))
    stopped = sum(1 for connector in connectors if connector.last_seen is None)
    down = sum(1 for _, state in states if state is Status.CRITICAL)
    running = len(states) - stopped - down
    shown = tuple(states[:SHOWN_CONNECTORS])
    more = len(states) - len(shown)
    value = "none seen" if not states else f"{running} of {len(states)} running" + (
        f", {stopped} stopped" if stopped else "")
    said = ("no connector has said it runs" if not states else "down first" if down
            else "each said it runs in the last minutes" if not stopped
            else "each stopped cleanly" if not running else "the others stopped cleanly")
    return Figure("connectors", "Connectors", value, said + (f"; {more} more not shown" if more else ""),
                  worst(*(state for _, state in states)), shown)


def _connector_line(connector: Connector, now: datetime, thresholds: Thresholds) -> tuple[str, Status]:
    if connector.last_seen is None:  # stopped cleanly: on purpose, no alert (decisions #133)
        when = f" at {instant(connector.stopped_at)} UTC" if connector.stopped_at is not None else ""
        return f"{connector.connection}: stopped{when}", Status.OK
    silent = _age(connector.last_seen, now)
    out = None if connector.broker_out_since is None else _age(connector.broker_out_since, now)
    state = thresholds.connector(silent, out)
    if state is Status.CRITICAL:
        said = f"down: not heard from for {seconds(silent)} (since {instant(connector.last_seen)} UTC)"
    elif out is not None:
        said = f"running, its broker unreachable for {seconds(out)}"
    else:
        said = "running"
    return f"{connector.connection}: {said}", state


def ago(at: datetime, now: datetime) -> str:
    """How long before ``now`` (never negative: the database's clock may run a little ahead)."""
    return seconds(max(now - at, timedelta(0)))


def _age(at: datetime, now: datetime) -> float:
    return max((now - at).total_seconds(), 0.0)


def _at(value: float) -> datetime:
    return datetime.fromtimestamp(value, timezone.utc)


def _moment(gauges: dict[str, dict[str, float]], metric: str) -> datetime | None:
    value = gauges.get(metric, {}).get("")
    return None if value is None else _at(value)
