"""The front door's own Prometheus metrics (issue 51; docs/metrics.md, "The HTTP API's"): what
this ``ackstore serve`` process answered since it started, served at its ``/metrics``. Labels are
bounded: a route's name (never its path: a thing id is a sender's text) and a status code."""

from __future__ import annotations

from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

class DoorMetrics:
    """The metrics of one door process, in a registry of its own."""

    def __init__(self, held: Callable[[], int], sockets: Callable[[], int]) -> None:
        self.registry = CollectorRegistry()
        self._requests = Counter("ackstore_http_requests", "requests answered, by route and status",
                                 ["route", "status"], registry=self.registry)
        self._holds_ended = Counter("ackstore_http_holds_ended", "held requests answered 202 with the Location "
                                    "of their answer: the hold ended before the ledger decided them",
                                    registry=self.registry)
        self.registry.register(_Now("ackstore_http_held_requests", "requests held for their decision now", held))
        self.registry.register(_Now("ackstore_http_open_sockets", "WebSockets open now", sockets))

    def answered(self, route: str, status: int) -> None:
        self._requests.labels(route, str(status)).inc()

    def hold_ended(self) -> None:
        self._holds_ended.inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _Now(Collector):
    """A gauge of what the door holds now (requests held, sockets open), read when Prometheus scrapes."""

    def __init__(self, name: str, documentation: str, read: Callable[[], int]) -> None:
        self.name, self.documentation, self.read = name, documentation, read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(self.name, self.documentation, value=self.read())
