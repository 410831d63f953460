"""A connector's own Prometheus metrics (issue 38; docs/metrics.md, "Each connector's"): what this
process did since it started, served at ``http://HOST:PORT/metrics`` with ``--metrics-port``.

The connector calls the small methods below whether or not the metrics are served, so they are
cheap: each is called once per batch, per settle round or per broker answer, never once per
message where a batch's count is at hand, and every labelled child is looked up once. What is a
state (deliveries held, an outage going on) is read when Prometheus scrapes, not kept up to date.
The connector's own status line (:meth:`ConnectorMetrics.figures`) reads the same counts, so each
of its figures is the metric of its name (docs/metrics.md, "One meaning per number").
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ackstore.rules import errors

INBOUND = ("consumed", "stored", "duplicate", "dropped", "enforced", "acknowledged")
OUTBOUND = ("published",)
UNSENDABLE = "unsendable"  # ackstore_connector_unsendable_total, by that name in the status line
CAUSES = ("ledger", "broker")
TARGET_OUTCOMES = ("confirmed", "refused")
BATCH_SIZE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000)
BATCH_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class ConnectorMetrics:
    """The metrics of one connector process (one connection), in a registry of its own."""

    def __init__(self, connection: str, connection_type: str) -> None:
        self.connection = connection
        self.registry = CollectorRegistry()
        messages = Counter("ackstore_connection_messages", "Ditto's connection_messages_total: messages by category",
                           ["connection", "type", "category", "direction"], registry=self.registry)
        self._messages = {category: messages.labels(connection, connection_type, category, direction)
                          for categories, direction in ((INBOUND, "inbound"), (OUTBOUND, "outbound"))
                          for category in categories}
        # When this process started, naming its connection: what the down alert names a target
        # by once it no longer answers, and where an operator sees that the counters restarted.
        Gauge("ackstore_connector_start_timestamp_seconds", "when this connector process started (its counters "
              "count from then)", ["connection", "type"], registry=self.registry).labels(
            connection, connection_type).set(time.time())
        self._in_flight = Gauge("ackstore_connector_in_flight", "broker messages held until their decision is "
                                "carried out", ["connection"], registry=self.registry).labels(connection)
        self._carried_out_family = Counter("ackstore_connector_carried_out", "settlement decisions this process "
                                           "carried out on the broker: the decision, and as what",
                                           ["connection", "decision", "carried_out_as"], registry=self.registry)
        self._carried_out: dict[tuple[str, str], Counter] = {}
        self._replies = Counter("ackstore_connector_replies", "replies sent to a reply target", ["connection"],
                                registry=self.registry).labels(connection)
        answers = Counter("ackstore_connector_target_answers", "the broker's answers to what targets published",
                          ["connection", "outcome"], registry=self.registry)
        self._answers = {outcome: answers.labels(connection, outcome) for outcome in TARGET_OUTCOMES}
        self._unsendable = Counter("ackstore_connector_unsendable", "answers and target messages the protocol "
                                   "cannot carry, dropped", ["connection"], registry=self.registry).labels(connection)
        self._batch_size = Histogram("ackstore_connector_store_batch_size", "messages per storing batch",
                                     ["connection"], buckets=BATCH_SIZE_BUCKETS, registry=self.registry).labels(connection)
        self._batch_seconds = Histogram("ackstore_connector_store_batch_seconds", "time to store a batch",
                                        ["connection"], buckets=BATCH_SECONDS_BUCKETS,
                                        registry=self.registry).labels(connection)
        self._broker_dropped = Gauge("ackstore_connector_broker_dropped_messages", "the broker's own count of the "
                                     "messages its limits dropped", ["connection"], registry=self.registry)
        self.outages = Outages(connection)
        self.registry.register(self.outages)
        # what the counters above count, as plain numbers for the status line; several threads count
        self._totals: collections.Counter[str] = collections.Counter()  # by category, and unsendable
        self._carried_out_totals: collections.Counter[str] = collections.Counter()  # by decision
        self._totals_lock = threading.Lock()

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve the registry at http://HOST:PORT/metrics on a daemon thread; the port it listens on,
        or Ditto's answer why not (a port in use: 409; no port or address of this machine: 400)."""
        try:
            server, _ = start_http_server(port, host, registry=self.registry)
        except (OSError, OverflowError, ValueError) as problem:
            raise errors.metrics_unservable(host, port, problem) from None
        return int(server.server_port)

    # --- the connector's calls ----------------------------------------------------------------

    def consumed(self, count: int) -> None:
        self._count("consumed", count)

    def stored(self, batch_size: int, seconds: float, *, new: int, duplicate: int, dropped: int,
               enforced: int = 0) -> None:
        """One storing batch: its size and time, what became of its messages (refused: ``dropped``
        for good or 4xx, ``enforced`` by the source's enforcement — as the connection's log says)."""
        self._batch_size.observe(batch_size)
        self._batch_seconds.observe(seconds)
        self._count("stored", new)
        self._count("duplicate", duplicate)
        self._count("dropped", dropped)
        self._count("enforced", enforced)

    def acknowledged(self, count: int) -> None:
        self._count("acknowledged", count)

    def carried_out(self, decision: str, carried_out_as: str, count: int) -> None:
        """``count`` settlement decisions ``decision`` carried out on the broker as ``carried_out_as``
        (the decision itself, or what the transport does instead: decisions #99)."""
        child = self._carried_out.get((decision, carried_out_as))
        if child is None:
            child = self._carried_out[(decision, carried_out_as)] = self._carried_out_family.labels(
                self.connection, decision, carried_out_as)
        child.inc(count)
        with self._totals_lock:
            self._carried_out_totals[decision] += count

    def replied(self, count: int) -> None:
        if count:
            self._replies.inc(count)
            self._count("published", count)

    def target_answers(self, count: int, *, confirmed: bool) -> None:
        self._answers["confirmed" if confirmed else "refused"].inc(count)
        if confirmed:
            self._count("published", count)

    def unsendable(self) -> None:
        self._unsendable.inc()
        self._total(UNSENDABLE, 1)

    def broker_dropped(self, count: int) -> None:
        """The broker said its count (only a broker that says it has the sample)."""
        self._broker_dropped.labels(self.connection).set(count)

    def watch_in_flight(self, held: Callable[[], int]) -> None:
        """``held()`` is read on each scrape."""
        self._in_flight.set_function(held)

    def figures(self) -> tuple[dict[str, int], dict[str, int]]:
        """What was counted since the process started, under the metrics' names: the messages by
        category (``consumed``, ``stored``, ``duplicate``, …) and ``unsendable``; the settlements
        carried out, by decision."""
        with self._totals_lock:
            return ({name: self._totals[name] for name in (*INBOUND, *OUTBOUND, UNSENDABLE)},
                    dict(sorted(self._carried_out_totals.items())))

    def _count(self, category: str, count: int) -> None:
        if count:
            self._messages[category].inc(count)
            self._total(category, count)

    def _total(self, name: str, count: int) -> None:
        with self._totals_lock:
            self._totals[name] += count


class Outages(Collector):
    """Whether the ledger or the broker is out, and the seconds it has been, as several threads
    see it: a cause is out while any of its watchers is (the storing, deciding and targets'
    threads each watch the ledger), and its seconds are those of the union."""

    def __init__(self, connection: str) -> None:
        self.connection = connection
        self._lock = threading.Lock()
        self._out: dict[str, set[int]] = {cause: set() for cause in CAUSES}
        self._since: dict[str, float] = {}
        self._seconds = dict.fromkeys(CAUSES, 0.0)
        self._watchers = 0

    def watcher(self, cause: str) -> Callable[[bool], None]:
        """A function one thread calls with True when it finds ``cause`` out, False when it is back."""
        with self._lock:
            self._watchers += 1
            key = self._watchers
        return lambda out: self._changed(cause, key, out)

    def _changed(self, cause: str, key: int, out: bool) -> None:
        now = time.monotonic()
        with self._lock:
            watching = self._out[cause]
            was_out = bool(watching)
            (watching.add if out else watching.discard)(key)
            if watching and not was_out:
                self._since[cause] = now
            elif was_out and not watching:
                self._seconds[cause] += now - self._since.pop(cause)

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        now = time.monotonic()
        out = GaugeMetricFamily("ackstore_connector_outage", "1 while the ledger or the broker is unreachable",
                                labels=["connection", "cause"])
        seconds = CounterMetricFamily("ackstore_connector_outage_seconds", "seconds spent in outage",
                                      labels=["connection", "cause"])
        with self._lock:
            for cause in CAUSES:
                since = self._since.get(cause)
                out.add_metric([self.connection, cause], 0 if since is None else 1)
                seconds.add_metric([self.connection, cause], self._seconds[cause] + (0 if since is None else now - since))
        yield out
        yield seconds
