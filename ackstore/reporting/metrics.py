"""``ackstore metrics``: the ledger's metrics in Prometheus's text format (issue 38, docs/metrics.md).

Each scrape reads the ledger once (ackstore.ledger.metrics: one snapshot, never the history) and
turns its rows into metric families: every metric, its type, help and label names are listed
once, here. A scrape that cannot read the ledger answers ``ackstore_ledger_up 0`` (and logs why)
rather than failing, so Prometheus tells a dead ledger from a dead exporter.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString
from sqlalchemy import Engine

from ackstore.ledger import metrics as ledger_metrics

PREFIX = "ackstore_"
log = logging.getLogger("ackstore.metrics")


@dataclass(frozen=True)
class Family:
    """One metric as served: its name after the prefix, help, and the names of its labels (a
    counter's are source, then its label and detail columns; a gauge's its one label)."""

    name: str
    help: str
    labels: tuple[str, ...] = ()


COUNTERS = {family.name: family for family in (
    Family("signals_received", "Signals stored, per source and channel.", ("source", "channel")),
    Family("requests_decided", "Attempts decided, per source and status class (408 and 424 apart).",
           ("source", "status_class")),
    Family("settlement_decisions", "Transport settlement decisions, per source and decision.", ("source", "decision")),
    Family("settlements_carried_out", "Settlement decisions carried out by a connector, and as what.",
           ("source", "decision", "carried_out_as")),
    Family("dead_letters", "Settlements carried out as dead-letter.", ("source",)),
    Family("weak_acks", "Weak acks written (A.2.9).", ("source",)),
    Family("late_acks", "Acks that came after their attempt was decided, or after the deadline that decided it.",
           ("source",)),
)}
HISTOGRAMS = {family.name: family for family in (
    Family("received_to_decided_seconds", "Per decided attempt: its signal received to the attempt decided.",
           ("source",)),
    Family("decided_to_carried_out_seconds", "Per settlement carried out: its attempt decided to carried out.",
           ("source",)),
)}
GAUGES = {family.name: family for family in (
    Family("queue_pending", "Work waiting, per work queue.", ("queue",)),
    Family("oldest_undecided_age_seconds", "Age of the oldest signal whose current attempt is not decided.",
           ("source",)),
    Family("oldest_unsettled_age_seconds", "Age of the oldest signal not settled (a connection's: not carried out).",
           ("source",)),
    Family("held_undecided", "A connection's held messages not decided yet.", ("source",)),
    Family("step_last_duration_seconds", "Each pipeline step's last run, as it recorded it.", ("step",)),
    Family("step_last_finished_timestamp_seconds", "When each pipeline step last finished.", ("step",)),
    Family("pipeline_last_success_timestamp_seconds", "When the last whole pipeline pass ended (its seal step)."),
    Family("validation_last_timestamp_seconds", "When the validation gate last ran."),
    Family("validation_failed", "1 when the validation gate's last run failed, else 0."),
    Family("seal_last_number", "The last seal's number (0: none)."),
    Family("seal_last_timestamp_seconds", "When the last seal was made."),
    Family("facts_unsealed", "Facts numbered after the last seal."),
    Family("archive_last_timestamp_seconds", "When the last archive was written."),
    Family("oldest_hot_signal_timestamp_seconds", "When the oldest signal still in the hot tables was received."),
)}


class LedgerCollector(Collector):
    """The ledger's metrics, read on each scrape."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._buckets: tuple[float, ...] | None = None

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        try:
            if self._buckets is None:
                self._buckets = ledger_metrics.latency_buckets(self.engine)
            reading = ledger_metrics.read(self.engine)
        except Exception as problem:  # noqa: BLE001 — the scrape says the ledger is down, and why in the log
            log.warning("the ledger could not be read: %s", str(problem).strip().splitlines()[0])
            yield _gauge("ledger_up", "1 when the scrape read the ledger, 0 when it could not.", 0)
            return
        yield from counter_families(reading.counters)
        yield from histogram_families(reading.counters, self._buckets)
        yield from gauge_families(reading.gauges)
        yield _gauge("ledger_up", "1 when the scrape read the ledger, 0 when it could not.", 1)
        yield _gauge("scrape_duration_seconds", "How long reading the ledger took.", time.perf_counter() - started)


def counter_families(counters: Iterable[ledger_metrics.Counter]) -> Iterator[Metric]:
    """Each counter of :data:`COUNTERS` with its rows (a family with none is served empty)."""
    return _families(CounterMetricFamily, COUNTERS, counters, lambda row: [row.source, row.label, row.detail])


def histogram_families(counters: Iterable[ledger_metrics.Counter], bounds: tuple[float, ...]) -> Iterator[Metric]:
    """Each histogram of :data:`HISTOGRAMS`, per source: its rows' per-bucket counts made
    cumulative over every bound (a bucket with no row counts 0), its count and sum."""
    per_bucket: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    sums: dict[str, dict[str, float]] = defaultdict(dict)
    for row in counters:
        for name in HISTOGRAMS:
            stem = name.removesuffix("_seconds")
            if row.metric == stem + "_bucket":
                per_bucket[name][row.source][row.label] = row.value
            elif row.metric == stem + "_sum":
                sums[name][row.source] = row.value
    for name, family in HISTOGRAMS.items():
        served = HistogramMetricFamily(PREFIX + name, family.help, labels=family.labels)
        for source, counts in sorted(per_bucket[name].items()):
            served.add_metric([source], cumulative(counts, bounds), sums[name].get(source, 0.0))
        yield served


def cumulative(counts: dict[str, float], bounds: tuple[float, ...]) -> list[tuple[str, float]]:
    """Per-bucket counts by ``le`` (SQL's text of a bound, or '+Inf') as Prometheus's cumulative
    buckets, every bound and +Inf present."""
    by_bound = {float(le): value for le, value in counts.items()}
    running, buckets = 0.0, []
    for bound in (*bounds, float("inf")):
        running += by_bound.get(bound, 0.0)
        buckets.append((floatToGoString(bound), running))
    return buckets


def gauge_families(gauges: Iterable[ledger_metrics.Gauge]) -> Iterator[Metric]:
    """Each gauge of :data:`GAUGES` with its rows."""
    return _families(GaugeMetricFamily, GAUGES, gauges, lambda row: [row.label])


def _families(kind: Callable[..., Metric], families: dict[str, Family], rows: Iterable[Any],
              labels_of: Callable[[Any], list[str]]) -> Iterator[Metric]:
    """A family of ``kind`` per entry of ``families``, each row's value added to its metric's
    with as many of its label values as the family has label names."""
    served = {name: kind(PREFIX + name, family.help, labels=family.labels) for name, family in families.items()}
    for row in rows:
        family = families.get(row.metric)
        if family is not None:
            served[row.metric].add_metric(labels_of(row)[:len(family.labels)], row.value)
    yield from served.values()


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, help_text, value=value)


def registry_for(engine: Engine) -> CollectorRegistry:
    """A registry of the ledger's metrics alone (not the process's: nothing else is served)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LedgerCollector(engine))
    return registry


@contextmanager
def serving(engine: Engine, port: int, host: str = "127.0.0.1") -> Iterator[str]:
    """The ledger's metrics served at http://host:port/metrics (port 0: any free one) while the
    block runs, its URL given; the server shut down after (``ackstore metrics``, ``ackstore
    airflow``). OSError when the port cannot be had."""
    server, thread = start_http_server(port, addr=host, registry=registry_for(engine))
    try:
        yield f"http://{host}:{server.server_port}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def serve(engine: Engine, port: int, host: str = "127.0.0.1") -> int:
    """Serve the ledger's metrics at http://host:port/metrics until SIGINT or SIGTERM."""
    stopped = threading.Event()
    for each in (signal.SIGINT, signal.SIGTERM):
        signal.signal(each, lambda *_: stopped.set())
    with serving(engine, port, host) as url:
        print(json.dumps({"status": 200, "serving": url}), flush=True)
        stopped.wait()
    return 0
