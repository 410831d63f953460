"""``ackstore metrics``: the ledger's metrics in Prometheus's text format (issue 38, docs/metrics.md).

Each scrape reads the ledger once (ackstore.ledger.metrics: one snapshot, never the history) and
turns its rows into metric families: every metric, its type, help and label names are listed
once, here. Every counter, histogram and gauge of a known source — the API's, the CLI's, each of
the first connections claimed, and ``other`` when a connection is past them (decisions #127) — is
served from 0, every label value it can take included, so that ``increase()`` sees its first
count and a healthy ledger has no empty panel (issue 50). A scrape that cannot read the ledger
answers ``ackstore_ledger_up 0`` (and logs why) rather than failing, so Prometheus tells a dead
ledger from a dead exporter.
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
from ackstore.rules import errors
from ackstore.rules.settings import METRIC_SOURCES
from ackstore.rules.settlement import LOCAL_SOURCES, Settlement, carried_out_as_allowed

PREFIX = "ackstore_"
# `ackstore metrics`' port: never `make airflow`'s, which serves the same metrics on 9464
# (ackstore.local_airflow.METRICS_PORT), so that the two never meet on one port (issue 50).
DEFAULT_PORT = 9463
log = logging.getLogger("ackstore.metrics")

# Which sources a per-source family is served for from 0: every known source, or the connections'
# alone (the API's and the CLI's signals are never settled on a broker).
EVERY_SOURCE = "every source"
CONNECTIONS = "connections"
# The values each label past the source can take (what a family is served with from 0).
CHANNELS = (("twin",), ("live",))
STATUS_CLASSES = tuple((c,) for c in ("2xx", "3xx", "4xx", "408", "424", "5xx"))  # the SQL's status_class
DECISIONS = tuple((s.value,) for s in Settlement)
CARRIED_OUT = tuple((d, a) for (d,), (a,) in ((x, y) for x in DECISIONS for y in DECISIONS)
                    if carried_out_as_allowed(d, None if a == d else a))


@dataclass(frozen=True)
class Family:
    """One metric as served: its name after the prefix, help, and the names of its labels (a
    counter's are source, then its label and detail columns; a gauge's its one label); for a
    per-source one, which sources it is served for from 0 (None: it is not, a timestamp has no
    0), and with which values of its other labels."""

    name: str
    help: str
    labels: tuple[str, ...] = ()
    from_zero: str | None = None  # EVERY_SOURCE, CONNECTIONS or None
    values: tuple[tuple[str, ...], ...] = ((),)


COUNTERS = {family.name: family for family in (
    Family("signals_stored", "Signals stored, per source and channel (a connection's `stored`).",
           ("source", "channel"), EVERY_SOURCE, CHANNELS),
    Family("requests_decided", "Attempts decided, per source and status class (408 and 424 apart).",
           ("source", "status_class"), EVERY_SOURCE, STATUS_CLASSES),
    Family("settlement_decisions", "Transport settlement decisions, per source and decision.", ("source", "decision"),
           CONNECTIONS, DECISIONS),
    Family("settlements_carried_out", "Settlement decisions carried out by a connector, and as what.",
           ("source", "decision", "carried_out_as"), CONNECTIONS, CARRIED_OUT),
    Family("dead_letters", "Settlements carried out as dead-letter (ackstore report dead-letters lists them).",
           ("source",), CONNECTIONS),
    Family("weak_acks", "Weak acks written (A.2.9).", ("source",), EVERY_SOURCE),
    Family("late_acks", "Acks that came after their attempt was decided, or after the deadline that decided it, "
           "built-in ones included (as report late-acks lists them).", ("source",), EVERY_SOURCE),
)}
# Served per source once it has an observation (a histogram is 19 series a source: from 0 for every
# known source they would be most of a scrape, for no increase() an alert waits for).
HISTOGRAMS = {family.name: family for family in (
    Family("received_to_decided_seconds", "Per decided attempt: its signal received to the attempt decided.",
           ("source",)),
    Family("decided_to_carried_out_seconds", "Per settlement carried out: its attempt decided to carried out.",
           ("source",)),
)}
GAUGES = {family.name: family for family in (
    Family("signals_pending", "Signals waiting in any work queue, each once (the Ledger page's backlog)."),
    Family("queue_pending", "Work waiting, per work queue.", ("queue",)),
    Family("oldest_undecided_age_seconds", "Age of the oldest signal whose current attempt is not decided (0: none).",
           ("source",), EVERY_SOURCE),
    Family("oldest_unsettled_age_seconds", "Age of the oldest signal not settled (a connection's: not carried out; "
           "0: none).", ("source",), EVERY_SOURCE),
    Family("held_undecided", "A connection's held messages not decided yet.", ("source",), CONNECTIONS),
    Family("connector_last_seen_timestamp_seconds", "When a connection's connector last said it runs (every 15 s).",
           ("source",)),
    Family("connector_broker_out_since_timestamp_seconds", "Since when a connection's connector cannot reach its "
           "broker (absent: it can).", ("source",)),
    Family("connector_stopped_timestamp_seconds", "When a connection's connector stopped cleanly (absent: it said it "
           "runs since, or never stopped so); its last word is then not served.", ("source",)),
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
    """The ledger's metrics, read on each scrape, the sources past the first ``metric_sources``
    connections as ``other``."""

    def __init__(self, engine: Engine, metric_sources: int = METRIC_SOURCES) -> None:
        self.engine = engine
        self.metric_sources = metric_sources
        self._buckets: tuple[float, ...] | None = None

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        try:
            if self._buckets is None:
                self._buckets = ledger_metrics.latency_buckets(self.engine)
            reading = ledger_metrics.read(self.engine, self.metric_sources)
        except Exception as problem:  # noqa: BLE001 — the scrape says the ledger is down, and why in the log
            log.warning("the ledger could not be read: %s", str(problem).strip().splitlines()[0])
            yield _gauge("ledger_up", "1 when the scrape read the ledger, 0 when it could not.", 0)
            return
        yield from counter_families(reading.counters, reading.sources)
        yield from histogram_families(reading.counters, self._buckets, reading.sources)
        yield from gauge_families(reading.gauges, reading.sources)
        yield _gauge("ledger_up", "1 when the scrape read the ledger, 0 when it could not.", 1)
        yield _gauge("scrape_duration_seconds", "How long reading the ledger took.", time.perf_counter() - started)


def counter_families(counters: Iterable[ledger_metrics.Counter], sources: Iterable[str] = ()) -> Iterator[Metric]:
    """Each counter of :data:`COUNTERS` with its rows, and 0 for each known source (``sources``)
    and label values it has no row for (a family with none is served empty)."""
    return _families(CounterMetricFamily, COUNTERS, counters, lambda row: [row.source, row.label, row.detail],
                     tuple(sources))


def sources_served(family: Family, sources: Iterable[str]) -> list[str]:
    """The known sources ``family`` is served for from 0."""
    if family.from_zero == EVERY_SOURCE:
        return list(sources)
    if family.from_zero == CONNECTIONS:
        return [source for source in sources if source not in LOCAL_SOURCES]
    return []


def histogram_families(counters: Iterable[ledger_metrics.Counter], bounds: tuple[float, ...],
                       sources: Iterable[str] = ()) -> Iterator[Metric]:
    """Each histogram of :data:`HISTOGRAMS`, per source — every known source, and any other with
    rows: its rows' per-bucket counts made cumulative over every bound (a bucket with no row
    counts 0), its count and sum."""
    known = tuple(sources)
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
        for source in sorted({*per_bucket[name], *sources_served(family, known)}):
            served.add_metric([source], cumulative(per_bucket[name].get(source, {}), bounds),
                              sums[name].get(source, 0.0))
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


def gauge_families(gauges: Iterable[ledger_metrics.Gauge], sources: Iterable[str] = ()) -> Iterator[Metric]:
    """Each gauge of :data:`GAUGES` with its rows, and 0 for each known source it is served for."""
    return _families(GaugeMetricFamily, GAUGES, gauges, lambda row: [row.label], tuple(sources))


def _families(kind: Callable[..., Metric], families: dict[str, Family], rows: Iterable[Any],
              labels_of: Callable[[Any], list[str]], sources: tuple[str, ...]) -> Iterator[Metric]:
    """A family of ``kind`` per entry of ``families``, each row's value added to its metric's
    with as many of its label values as the family has label names; then 0 for every known
    source and label values the rows did not give."""
    values: dict[str, dict[tuple[str, ...], float]] = {name: {} for name in families}
    for row in rows:
        family = families.get(row.metric)
        if family is not None:
            labels = tuple(labels_of(row)[:len(family.labels)])
            values[row.metric][labels] = values[row.metric].get(labels, 0.0) + row.value
    for name, family in families.items():
        for source in sources_served(family, sources):
            for rest in family.values:
                values[name].setdefault((source, *rest), 0.0)
        served = kind(PREFIX + name, family.help, labels=family.labels)
        for labels, value in sorted(values[name].items()):
            served.add_metric(list(labels), value)
        yield served


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, help_text, value=value)


def registry_for(engine: Engine, metric_sources: int = METRIC_SOURCES) -> CollectorRegistry:
    """A registry of the ledger's metrics alone (not the process's: nothing else is served)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LedgerCollector(engine, metric_sources))
    return registry


def http_server(port: int, host: str, registry: CollectorRegistry) -> tuple[Any, Any]:
    """prometheus-client's server of ``registry`` at http://host:port/metrics, or Ditto's answer
    why not (a port in use: 409; no port or address of this machine: 400)."""
    try:
        return start_http_server(port, addr=host, registry=registry)
    except (OSError, OverflowError, ValueError) as problem:
        raise errors.metrics_unservable(host, port, problem) from None


@contextmanager
def serving(engine: Engine, port: int, host: str = "127.0.0.1", metric_sources: int = METRIC_SOURCES) -> Iterator[str]:
    """The ledger's metrics served at http://host:port/metrics (port 0: any free one) while the
    block runs, its URL given; the server shut down after (``ackstore metrics``, ``ackstore
    airflow``). Ditto's error when the port cannot be had (:func:`http_server`)."""
    server, thread = http_server(port, host, registry_for(engine, metric_sources))
    try:
        yield f"http://{host}:{server.server_port}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def serve(engine: Engine, port: int, host: str = "127.0.0.1", metric_sources: int = METRIC_SOURCES) -> int:
    """Serve the ledger's metrics at http://host:port/metrics until SIGINT or SIGTERM."""
    stopped = threading.Event()
    for each in (signal.SIGINT, signal.SIGTERM):
        signal.signal(each, lambda *_: stopped.set())
    with serving(engine, port, host, metric_sources) as url:
        print(json.dumps({"status": 200, "serving": url}), flush=True)
        stopped.wait()
    return 0
