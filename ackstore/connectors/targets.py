"""A connection's targets (B.9), for every transport: the twin events and live signals it
subscribes to, pulled from the ledger under a lease (:class:`TargetFeed`); each transport
publishes them as its protocol can (:mod:`ackstore.connectors.amqp_targets`, and the targets of
:mod:`~ackstore.connectors.mqtt`, :mod:`~ackstore.connectors.amqp10`,
:mod:`~ackstore.connectors.http_push`), on a thread of its own (:func:`targets_work`); the
publishers that reconnect after a loss share their constructor (:class:`TargetPublisher`).

Each target is a subscriber of the connection's label group (decisions #36); when the broker
confirms a publish, the target's ``issuedAcknowledgementLabel`` is acknowledged 200, when it
refuses it, 503. A publish that is never answered (the connection lost) is acknowledged by
nobody: its lease ends and it is pulled again. A message the protocol cannot carry (a sender's
header past its limit) is dropped, said, and its label acknowledged 400: a client error, never
redelivered, never pulled again.
"""

from __future__ import annotations

import abc
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable

from sqlalchemy.exc import DBAPIError

from ackstore.connectors.config import ConnectionConfig, Target
from ackstore.connectors.logs import shown
from ackstore.connectors.options import Options
from ackstore.connectors.outage import Outage
from ackstore.ledger.store import AckStore
from ackstore.rules import connectivity, envelopes, labels, wire

log = logging.getLogger("ackstore.connector")

PULL_MAX = 500  # signals pulled per target and tick
UNCONFIRMED_MAX = 5000  # publishes awaiting their confirm before the next pull waits
UNSENDABLE_STATUS = 400  # a message the protocol cannot carry: its signal's own headers make it so


@dataclass(frozen=True)
class Published:
    subscriber: str
    label: str | None  # the label to issue from the broker's answer, if the signal requested it
    message: dict[str, Any]


class TargetFeed:
    """What the targets of every protocol share: each target's new signals, pulled under a lease,
    and the target's label issued from the broker's answer to their publish."""

    def __init__(self, store: AckStore, config: ConnectionConfig, *, lease: str, outage: Outage,
                 answered: Callable[[int, bool], None], dropped: Callable[[str, BaseException], None]) -> None:
        self.store = store
        self.config = config
        self.lease = lease
        self.outage = outage  # the database, as the targets' thread sees it
        self.told = answered  # told of the broker's answers: how many publishes, whether it confirmed them
        self.dropped = dropped  # told of each message the protocol cannot carry

    def pull(self) -> tuple[list[tuple[Target, Published]], float]:
        """What to publish now, and 0 — or, when the database is away, what was pulled before it
        went and the seconds to wait (leases keep what was pulled; it is pulled again later)."""
        pulled: list[tuple[Target, Published]] = []
        try:
            for n, target in enumerate(self.config.targets):
                subscriber = self.config.subscriber_id(n)
                for message in self.store.pull(subscriber, max=PULL_MAX, lease=self.lease):
                    requested = message["headers"].get("requested-acks", [])
                    label = target.issued_label if target.issued_label in requested else None
                    pulled.append((target, Published(subscriber, label, message)))
            self.outage.recovered()
            return pulled, 0.0
        except DBAPIError as problem:
            return pulled, self.outage.failed(type(problem.orig).__name__)

    def answered(self, items: list[Published], *, confirmed: bool) -> None:
        """The broker confirmed (200) or refused (503) these publishes: issue their labels."""
        self.told(len(items), confirmed)
        self._issue(items, connectivity.issued_ack_status(confirmed))

    def unsendable(self, address: str, item: Published, problem: BaseException) -> None:
        """A message the protocol cannot carry: dropped and said, its label issued 400 (it would
        never be carried: neither published again nor redelivered)."""
        correlation_id = str(item.message["headers"].get("correlation-id"))
        self.dropped(f"the message {shown(correlation_id)} to the target {shown(address)}", problem)
        if item.label != labels.LIVE_RESPONSE:  # a live response is no ack: unanswered, the signal's timeout decides
            self._issue([item], UNSENDABLE_STATUS)

    def _issue(self, items: list[Published], status: int) -> None:
        for item in items:
            self.issue(item, status)

    def issue(self, item: Published, status: int, value: Any = None) -> None:
        """Issue the target's label for one publish (when the signal requested it), with a value."""
        if not item.label:
            return
        try:
            answer = self.store.acknowledge(item.subscriber, issued_ack(item.message, item.label, status, value))
        except DBAPIError as problem:  # not acknowledged: the lease ends, the signal is published again
            self.outage.failed(type(problem.orig).__name__)
            return
        if answer.get("status") != 204:  # never silently: the label stays open until the signal's timeout
            log.warning("connector %s: the ledger refused the label %s %d of %s: %s", self.config.id,
                        shown(item.label), status, shown(str(item.message["headers"].get("correlation-id"))),
                        shown(str(answer.get("message")), 300))

    def respond(self, item: Published, response: dict[str, Any]) -> dict[str, Any] | None:
        """The endpoint's answer as the signal's live response (a target issuing ``live-response``):
        the ledger's answer, or None when the database is away (the lease ends, it is sent again)."""
        try:
            return self.store.respond(item.subscriber, response)
        except DBAPIError as problem:
            self.outage.failed(type(problem.orig).__name__)
            return None


class TargetPublisher(abc.ABC):
    """A transport's publisher of what its targets pull, run on the targets' thread until ``stop``
    is set: what every one is given, spelled once (its transport adds its connection's state)."""

    def __init__(self, feed: TargetFeed, *, interval_s: float, reconnect_s: float, stop: threading.Event) -> None:
        self.feed = feed
        self.config = feed.config
        self.interval_s = interval_s  # how often it pulls new signals
        self.reconnect_s = reconnect_s  # the wait before connecting again after a loss
        self.stop = stop

    @classmethod
    def maker(cls, options: Options, stop: threading.Event) -> Callable[[TargetFeed], Callable[[], None]]:
        """What :func:`targets_work` makes of a feed: such a publisher's :meth:`run`, with the connector's options."""
        return lambda feed: cls(feed, interval_s=options.target_interval_s, reconnect_s=options.reconnect_s,
                                stop=stop).run

    @abc.abstractmethod
    def run(self) -> None:
        """Publish what the feed pulls until ``stop`` is set, reconnecting after a loss."""


def targets_work(store: AckStore, config: ConnectionConfig, options: Options, outage: Outage,
                 answered: Callable[[int, bool], None], dropped: Callable[[str, BaseException], None],
                 make: Callable[[TargetFeed], Callable[[], None]]) -> Callable[[], None] | None:
    """A transport's targets' work (``make`` of their feed), run on a thread of its own; None
    without targets (every transport's ``Transport.targets``)."""
    if not config.targets:
        return None
    return make(TargetFeed(store, config, lease=options.target_lease, outage=outage, answered=answered,
                           dropped=dropped))


def issued_ack(message: dict[str, Any], label: str, status: int, value: Any = None) -> dict[str, Any]:
    thing_id, channel = envelopes.thing_of_topic(message["topic"])  # a pulled signal's topic names its thing
    ack = {
        "topic": wire.acks_topic(thing_id, channel, label),
        "headers": {"correlation-id": message["headers"]["correlation-id"],
                    "ack-token": message["headers"]["ack-token"]},
        "path": "/",
        "status": status,
    }
    return ack if value is None else {**ack, "value": value}
