"""An AMQP 1.0 peer of the test's own: a proton container listening on a free port, in a thread,
that takes whatever is sent to it and settles each message with the outcome its function picks
(accepted, rejected, released, modified) — the answers a broker may give a target's message —
and, as a source, offers its ``offered`` messages on every link a receiver attaches, recording
how each was settled and how many were still unsettled when the receiver closed the connection.

RabbitMQ 3.10's AMQP 1.0 plugin never refuses a message with an outcome (an unroutable one is
accepted; a queue refusing a publish aborts the whole connection: docs/stack-notes.md), so the
targets' 503 is asserted against this peer: a real AMQP 1.0 endpoint, written with the library
the connector uses, on a real socket.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from proton import Delivery, Event, Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

from tests.support.own_postgres import free_port

OUTCOMES = {"accepted": Delivery.ACCEPTED, "rejected": Delivery.REJECTED, "released": Delivery.RELEASED,
            "modified": Delivery.MODIFIED}
STATES = {state: name for name, state in OUTCOMES.items()}


class _Settling(MessagingHandler):
    def __init__(self, peer: "Amqp10Peer") -> None:
        super().__init__(prefetch=100, auto_accept=False)
        self.peer = peer

    def on_start(self, event: Event) -> None:
        self.peer.acceptor = event.container.listen(f"127.0.0.1:{self.peer.port}")
        self.peer.listening.set()

    def on_sendable(self, event: Event) -> None:  # a receiver's link with credit: offer what is left
        sender = event.sender
        while sender.credit and self.peer.offered:
            sender.send(self.peer.offered.pop(0))

    def on_settled(self, event: Event) -> None:  # a receiver settled an offered message
        self.peer.settled.append(STATES[event.delivery.remote_state])

    def on_connection_closing(self, event: Event) -> None:  # the receiver closes: what it left unsettled
        link = event.connection.link_head(0)
        while link:
            if link.is_sender:
                self.peer.unsettled_at_close += link.unsettled
            link = link.next(0)

    def on_message(self, event: Event) -> None:
        self.peer.received.append(event.message)
        delivery = event.delivery
        outcome = self.peer.outcome_of(event.message)
        if outcome == "modified":
            delivery.local.failed = True
        delivery.update(OUTCOMES[outcome])
        delivery.settle()


class Amqp10Peer:
    """``with Amqp10Peer(lambda message: "rejected") as peer:`` — send to ``peer.url``; what came
    is ``peer.received``. ``Amqp10Peer(..., offered=[messages])`` is a source too: a receiver
    attaching any address gets them; ``peer.settled`` is the outcome of each it settled, and
    ``peer.unsettled_at_close`` how many it held unsettled when it closed the connection."""

    def __init__(self, outcome_of: Callable[[Any], str], offered: list[Message] | None = None) -> None:
        self.outcome_of = outcome_of
        self.port = free_port()
        self.received: list[Any] = []
        self.offered = list(offered or [])
        self.settled: list[str] = []
        self.unsettled_at_close = 0
        self.listening = threading.Event()
        self.acceptor: Any = None
        self._container = Container(_Settling(self))
        self._thread = threading.Thread(target=self._container.run, name="amqp10-peer", daemon=True)

    @property
    def url(self) -> str:
        return f"amqp://127.0.0.1:{self.port}"

    def __enter__(self) -> "Amqp10Peer":
        self._thread.start()
        if not self.listening.wait(10):
            raise RuntimeError("the AMQP 1.0 peer did not start listening")
        return self

    def __exit__(self, *_: object) -> None:
        self._container.stop()
        self._thread.join(10)
