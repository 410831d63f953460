"""What a connector asks of its protocol, and what the protocol hands it: a :class:`Transport`
(its sessions, how it carries decisions out, its targets), a :class:`Session` (one broker
connection, used by the broker's thread only), each consumed :class:`Message`; the settlings a
delivery gets without a decision (:data:`GIVE_BACK`, :data:`ACK`); a message the protocol cannot
carry (:class:`Unencodable`) and the JSON a published message carries (:func:`json_payload`).
The connector that drives them is :mod:`ackstore.connectors.core`."""

from __future__ import annotations

import abc
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ackstore.connectors.config import ConnectionConfig, Source
from ackstore.connectors.options import Options
from ackstore.connectors.outage import Outage
from ackstore.ledger.store import AckStore
from ackstore.rules import errors, jsontext
from ackstore.rules.connectivity import Settling

GIVE_BACK = Settling(ack=False, requeue=True, given_back=True)  # undecided deliveries return to the broker
ACK = Settling(ack=True)


class Unencodable(ValueError):
    """A message the transport cannot carry (a sender's value past one of its protocol's limits);
    its text says why, and never holds the sender's value."""


@dataclass(frozen=True)
class Message:
    """A consumed message, as every transport hands it over."""

    tag: int  # the delivery's number within its session, growing
    redelivered: bool  # the broker says it may have been delivered before
    body: bytes
    key: str  # what identifies it within the connection when it comes again (A.3)
    headers: Mapping[str, Any] | None  # the protocol's headers (AMQP headers table, MQTT 5 user properties)
    properties: Mapping[str, Any]  # correlation_id, reply_to, content_type, message_id (as AMQP names them)
    source: Source  # the source it was consumed by
    address: str  # where it arrived: the queue, the MQTT topic
    # why its transport could not read it within the bounds (a value nested past them: decisions
    # #131): refused as a client error, never read further
    unreadable: errors.DittoError | None = None

    @property
    def correlation_id(self) -> str | None:
        return self.properties.get("correlation_id")


class Session(abc.ABC):
    """One broker connection, used by the broker's thread only."""

    @abc.abstractmethod
    def process(self, time_limit: float) -> None:
        """Read and write the socket for up to ``time_limit`` seconds (messages arrive now)."""

    @abc.abstractmethod
    def settle(self, dispositions: Mapping[int, Settling]) -> None:
        """Settle these deliveries (tag -> how); tags no longer outstanding are left out."""

    @abc.abstractmethod
    def give_back(self) -> bool:
        """Return every outstanding delivery to the broker — now, or with the :meth:`close` that
        follows (AMQP 1.0, decisions #114); whether there was any."""

    @abc.abstractmethod
    def stop_consuming(self) -> None:
        """Take no more messages; those already received are stored and settled."""

    @abc.abstractmethod
    def reply(self, reply_to: str, message: dict[str, Any]) -> bool:
        """Publish ``message`` to ``reply_to`` (best effort, as in Ditto): whether it was sent;
        :class:`Unencodable` (or one of the transport's ``unencodable``) when the protocol cannot carry it."""

    def wants_reconnect(self) -> bool:
        """Whether the session should end now so the broker redelivers (MQTT's only redelivery)."""
        return False

    def refused_answers(self) -> list[tuple[str, str]]:
        """Answers the broker refused after :meth:`reply` sent them, since the last call: (reply-to, why)."""
        return []

    @abc.abstractmethod
    def close(self) -> None:
        """End the connection; what it did not settle the broker keeps."""


class Transport(abc.ABC):
    """A protocol: its sessions, how it carries decisions out, its targets."""

    lost: tuple[type[BaseException], ...] = ()  # failures that end a session (reconnect after a wait)
    # What its library raises for a message it cannot encode: the backstop behind the transport's
    # rule of what its protocol carries; such a message is dropped, the session goes on.
    unencodable: tuple[type[BaseException], ...] = ()

    @abc.abstractmethod
    def connect(self, deliver: Callable[[Message], None]) -> Session:
        """A new session consuming the sources, handing each message to ``deliver``."""

    @abc.abstractmethod
    def disposition(self, decision: str) -> Settling:
        """How the protocol carries out a settlement decision (B.9)."""

    @abc.abstractmethod
    def consuming(self) -> str:
        """The sources, as a log line names them."""

    def carried_out_as(self, decision: str) -> str | None:
        """The settlement the protocol performs instead of ``decision`` when it cannot perform it."""
        return None

    def warnings(self, store: AckStore, options: Options) -> list[str]:
        """What the operator should know before the connector starts."""
        return []

    def targets(self, store: AckStore, outage: Outage, stop: threading.Event, answered: Callable[[int, bool], None],
                dropped: Callable[[str, BaseException], None]) -> Callable[[], None] | None:
        """The work of the connection's targets, run on a thread of its own; None without targets.
        ``answered`` is told of the broker's answers to its publishes (how many, whether confirmed),
        ``dropped`` of each message the protocol cannot carry (what, why)."""
        return None


def connection_name(config: ConnectionConfig) -> str:
    """How the broker's management tools name a connector's connection."""
    return f"ackstore connector {config.id}"



def json_payload(message: dict[str, Any]) -> bytes:
    """The JSON text a published Ditto message carries; :class:`Unencodable` when it holds text
    no UTF-8 can (a lone surrogate a sender's JSON escaped)."""
    try:
        return jsontext.dumps(message).encode()
    except UnicodeError:
        raise Unencodable("its JSON holds a lone surrogate, which UTF-8 cannot") from None

