"""The AMQP 1.0 transport (python-qpid-proton): QoS 1 from an AMQP 1.0 broker through the ledger.

What a connector does beyond its protocol is :mod:`ackstore.connectors.core`; this module is how
AMQP 1.0 receives, settles and replies, as Ditto's AMQP 1.0 consumer does (B.9's AMQP 1.0 row,
decisions #112):

* **Manual settlement.** Each source address is a receiving link; a delivery stays unsettled
  until its decision is carried out: ``accepted``; ``rejected`` (a failure not to be
  redelivered, PR #907); ``modified`` with delivery-failed (redeliver) — or ``released``, with
  ``specificConfig`` ``ackstore.redeliveryOutcome`` for a broker that does not implement
  ``modified`` (RabbitMQ 3.x ends the session on it). A batch that could not be stored is given
  back ``released``; what a stopping connector holds goes back with the connection's close.
* **The in-flight bound is the link credit** (``jms.prefetchPolicy.all``, default 65 535): a
  link is granted that many deliveries and is granted one more only when one is settled, so a
  link holds at most that many, held for a decision or waiting to be stored; the rest wait in
  the broker. With decisions taken a time T after arrival, a link carries at most credit / T.
* **A lost link or connection** ends the session: the broker takes back every unsettled delivery
  and sends it again; the core reconnects after waits that double, and the copies are recognised
  by their key (:func:`ackstore.rules.amqp10.message_key`) and never stored twice.
* **Headers.** Application properties, ``message-id``, ``correlation-id``, ``reply-to`` and
  ``content-type`` become Ditto headers (the envelope's own win).
* **Depth.** proton's Python reads a message's values on its stack: a message it cannot read (a
  value nested some 500 levels) is refused as a client error, like one whose body or properties
  nest past the door's bound (decisions #131); nothing a sender nests stops the connection.

Answers go to the message's ``reply-to`` address (best effort), each address a sending link on a
session of its own: RabbitMQ 3's plugin answers an attach it refuses by ending the link's session,
so a sender's reply-to can end only its own link, never the receiving links and what they hold. An
address none of the plugin's forms is refused before any attach, as an answer the protocol cannot
carry (one log line, counted, decisions #119).
Targets publish on a connection of their own, each message unsettled until the broker's outcome
issues the target's label: 200 when ``accepted``, 503 otherwise (Ditto: "5xx, retry feasible").
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import uuid
import weakref
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import urlsplit

from proton import Data, Delivery, Endpoint, Event, Link, Message as ProtonMessage, symbol
from proton.handlers import IncomingMessageHandler, MessagingHandler
from proton.reactor import Container, SenderOption

from ackstore import faults
from ackstore.connectors.config import Amqp10Settings, ConnectionConfig, Target
from ackstore.connectors.core import Connector
from ackstore.connectors.metrics import ConnectorMetrics
from ackstore.connectors.outage import Outage
from ackstore.connectors.options import Options
from ackstore.connectors.targets import UNCONFIRMED_MAX, Published, TargetFeed, TargetPublisher, targets_work
from ackstore.connectors.transport import Message, Session, Transport, Unencodable, connection_name, json_payload
from ackstore.ledger.store import AckStore
from ackstore.rules import amqp10, connectivity, errors, wire
from ackstore.rules.connectivity import Settling

__all__ = ["Amqp10Connector", "Amqp10Lost", "Amqp10Transport", "ProtonConnection", "message_for"]

log = logging.getLogger("ackstore.connector")

OPEN_TIMEOUT_S = 30.0  # connecting and attaching the links
CLOSE_TIMEOUT_S = 2.0  # waiting for the broker's answer to our close
REPLY_LINKS = 64  # sending links to reply-to addresses kept open at once
ACK_TOKEN = "ack-token"
# proton's failures to encode a message (the backstop behind json_payload's check)
UNENCODABLE = (Unencodable, UnicodeError, ValueError, TypeError)
_OUTCOMES = {amqp10.ACCEPTED: Delivery.ACCEPTED, amqp10.REJECTED: Delivery.REJECTED,
             amqp10.MODIFIED: Delivery.MODIFIED, amqp10.RELEASED: Delivery.RELEASED}


class Amqp10Lost(Exception):
    """The connection with the broker, or a receiving link, ended or could not start."""


class Amqp10Connector(Connector):
    """A connector whose broker speaks AMQP 1.0."""

    def __init__(self, store: AckStore, config: ConnectionConfig, options: Options | None = None,
                 metrics: ConnectorMetrics | None = None) -> None:
        options = options or Options()
        super().__init__(store, config, Amqp10Transport(config, options), options, metrics)


class Amqp10Transport(Transport):
    lost = (Amqp10Lost,)
    unencodable = UNENCODABLE

    def __init__(self, config: ConnectionConfig, options: Options) -> None:
        if config.amqp10 is None:
            raise ValueError("not an AMQP 1.0 connection")
        self.config = config
        self.settings: Amqp10Settings = config.amqp10
        self.options = options

    def connect(self, deliver: Callable[[Message], None]) -> Session:
        return Amqp10Session(self.config, deliver)

    def disposition(self, decision: str) -> Settling:
        return connectivity.settling(decision)  # ack / reject / redeliver (B.9), an outcome by amqp10.outcome

    def consuming(self) -> str:
        addresses = ", ".join(a for s in self.config.sources for a in s.addresses) or "nothing"
        return (f"{addresses} (link credit {self.settings.credit}, redeliver as {self.settings.redelivery}) "
                "over AMQP 1.0")

    def warnings(self, store: AckStore, options: Options) -> list[str]:
        if self.settings.redelivery == amqp10.MODIFIED:
            return ["a redeliver decision is settled modified[delivery-failed], as Ditto does: a broker that does "
                    "not implement it (RabbitMQ 3) ends the session, and every delivery it held comes again; give "
                    'specificConfig {"ackstore.redeliveryOutcome": "released"} for such a broker']
        return []

    def targets(self, store: AckStore, outage: Outage, stop: threading.Event, answered: Callable[[int, bool], None],
                dropped: Callable[[str, BaseException], None]) -> Callable[[], None] | None:
        return targets_work(store, self.config, self.options, outage, answered, dropped,
                            Amqp10Targets.maker(self.options, stop))


class _Capability(SenderOption):
    """A sending link to a node of this capability (``topic``, ``queue``: Ditto's address prefixes)."""

    def __init__(self, capability: str) -> None:
        self.capability = capability

    def apply(self, sender: Any) -> None:
        sender.target.capabilities.put_array(False, Data.SYMBOL)  # an array of one symbol
        sender.target.capabilities.enter()
        sender.target.capabilities.put_symbol(symbol(self.capability))
        sender.target.capabilities.exit()


class _Receiving(IncomingMessageHandler):
    """proton's handler of received deliveries (``MessagingHandler``'s own), reading each message
    inside a guard. proton's Python reads a message's body, properties and annotations on the
    stack (``Data.get_object`` nests as the value does): a value a sender nested some 500 levels
    raised RecursionError out of ``container.process()``, the connector exited, and the message,
    back in its queue, stopped it at every start (decisions #131). A message it cannot read is
    told to the delegate's ``on_unreadable(event, message, problem)``, its link advanced past it
    and its delivery unsettled; ``message`` holds what proton keeps outside Python (its header
    and properties sections: id, correlation id, reply-to)."""

    def on_delivery(self, event: Event) -> None:
        delivery = event.delivery
        if not delivery.link.is_receiver or delivery.aborted or not delivery.readable or delivery.partial:
            super().on_delivery(event)  # aborted, or settled by the peer: proton's own handling
            return
        message = ProtonMessage()
        encoded = delivery.link.recv(delivery.pending)
        delivery.link.advance()
        if event.link.state & Endpoint.LOCAL_CLOSED:  # as proton's own: nothing for a closed link
            return
        try:
            message.decode(encoded)
        except Exception as problem:  # noqa: BLE001 — whatever a sender's bytes make proton raise is theirs
            self.delegate.on_unreadable(event, message, problem)
            return
        event.message = message
        self.on_message(event)


class ProtonConnection(MessagingHandler):
    """One connection to an AMQP 1.0 broker on a proton container of its own, stepped by the one
    thread that owns it (:meth:`step`). Its owner is told of received messages (``received``,
    with the problem that kept proton from reading one, else None) and of the outcomes of what
    it sent (``outcome``); a failure of the connection, its session or a receiving link is kept
    in :attr:`failure` (the owner ends the connection); a sending link's failure — or the
    failure of a session opened for sending links alone — is told to ``link_failed``, for each
    of its links."""

    def __init__(self, uri: str, container_id: str, *,
                 received: Callable[[Any, Any, BaseException | None], None] | None = None,
                 outcome: Callable[[Any, bool], None] | None = None,
                 link_failed: Callable[[Any, str], None] | None = None) -> None:
        super().__init__(prefetch=0, auto_accept=False, auto_settle=True, peer_close_is_error=True)
        self.handlers = [_Receiving(auto_accept=False, delegate=weakref.proxy(self))
                         if isinstance(handler, IncomingMessageHandler) else handler for handler in self.handlers]
        self.failure: str | None = None
        self._received = received
        self._outcome = outcome
        self._link_failed = link_failed
        self._sending_sessions: set[Any] = set()  # sessions of sending links alone: their end is theirs
        self.container = Container()
        self.container.container_id = container_id
        self.container.timeout = 0.0
        self.container.start()
        self.connection = self.container.connect(url=uri, handler=self, reconnect=False, **sasl_options(uri))
        try:
            self.wait(lambda: bool(self.connection.state & Endpoint.REMOTE_ACTIVE), "opening the connection")
        except BaseException:
            self.close()
            raise

    # --- stepping -------------------------------------------------------------------------------

    def step(self, time_limit: float) -> None:
        """Handle what the broker sent and send what waits, for up to ``time_limit`` seconds;
        :class:`Amqp10Lost` once the connection failed."""
        deadline = time.monotonic() + time_limit
        while True:
            self.container.timeout = max(0.0, deadline - time.monotonic())
            self.container.process()
            if self.failure is not None:
                raise Amqp10Lost(self.failure)
            if time.monotonic() >= deadline:
                return

    def wait(self, condition: Callable[[], bool], what: str, timeout: float = OPEN_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() >= deadline:
                raise Amqp10Lost(f"{what} took longer than {timeout:.0f} s")
            self.step(0.05)

    def receiver(self, address: str, name: str) -> Any:
        return self.container.create_receiver(self.connection, address, name=name)

    def sender(self, address: str, name: str | None = None, *, own_session: bool = False) -> Any:
        """A sending link to ``address``; ``own_session``: on a session of its own, which the
        broker may end without ending anything else (:meth:`close_sender` ends both)."""
        node, capability = amqp10.target_node(address)
        options = [_Capability(capability)] if capability else None
        context: Any = self.connection
        if own_session:
            context = self.connection.session()
            context.open()
            self._sending_sessions.add(context)
        return self.container.create_sender(context, node, name=name or f"to {address} {uuid.uuid4()}",
                                            options=options)

    def close_sender(self, sender: Any) -> None:
        """End a sending link, and its session if it was the link's own."""
        if sender.state & Endpoint.LOCAL_ACTIVE:
            sender.close()
        session = sender.session
        if session in self._sending_sessions:
            self._sending_sessions.discard(session)
            if session.state & Endpoint.LOCAL_ACTIVE:
                session.close()

    def attached(self, link: Any) -> bool:
        """Whether the broker attached ``link`` (a failure to is :attr:`failure` or ``link_failed``)."""
        return bool(link.state & Endpoint.REMOTE_ACTIVE)

    def close(self) -> None:
        """End the connection; what it did not settle, the broker takes back."""
        try:
            if self.failure is None and self.connection.state & Endpoint.LOCAL_ACTIVE:
                self.connection.close()
                deadline = time.monotonic() + CLOSE_TIMEOUT_S
                while not self.connection.state & Endpoint.REMOTE_CLOSED and time.monotonic() < deadline \
                        and self.failure is None:
                    self.container.timeout = 0.05
                    self.container.process()
        finally:
            if self.connection.transport is not None:
                self.connection.transport.close_tail()
                self.connection.transport.close_head()
            self.connection.free()
            self.container.stop()
            self.container.timeout = 0.0
            self.container.process()
            self.connection.handler = None
            self.container.stop_events()

    # --- proton's events ------------------------------------------------------------------------

    def on_message(self, event: Event) -> None:
        if self._received is not None:
            self._received(event.delivery, event.message, None)

    def on_unreadable(self, event: Event, message: Any, problem: BaseException) -> None:
        """A message proton could not read (:class:`_Receiving`): its delivery is the owner's to refuse."""
        if self._received is not None:
            self._received(event.delivery, message, problem)

    def on_accepted(self, event: Event) -> None:
        if self._outcome is not None:
            self._outcome(event.delivery, True)

    def on_rejected(self, event: Event) -> None:
        if self._outcome is not None:
            self._outcome(event.delivery, False)

    def on_released(self, event: Event) -> None:  # released or modified: not taken
        if self._outcome is not None:
            self._outcome(event.delivery, False)

    def on_link_error(self, event: Event) -> None:
        link: Link = event.link
        why = _condition(link.remote_condition, f"the broker detached the link {link.name!r}")
        if link.is_sender and self._link_failed is not None:
            self._link_failed(link, why)
            if link.state & Endpoint.LOCAL_ACTIVE:
                link.close()
            return
        self._failed(why)

    def on_session_error(self, event: Event) -> None:
        session = event.session
        why = _condition(session.remote_condition, "the broker ended the session")
        if session in self._sending_sessions and self._link_failed is not None:
            self._sending_sessions.discard(session)
            for link in self._links_of(session):
                self._link_failed(link, why)
            return
        self._failed(why)

    def _links_of(self, session: Any) -> list[Any]:
        links, link = [], self.connection.link_head(0)
        while link is not None:
            if link.session == session:
                links.append(link)
            link = link.next(0)
        return links

    def on_connection_error(self, event: Event) -> None:
        self._failed(_condition(event.connection.remote_condition, "the broker closed the connection"))

    def on_transport_error(self, event: Event) -> None:
        self._failed(_condition(event.transport.condition, "the connection to the broker failed"))

    def on_disconnected(self, event: Event) -> None:
        self._failed("disconnected from the broker")

    def _failed(self, why: str) -> None:
        if self.failure is None:
            self.failure = why


def sasl_options(uri: str) -> dict[str, str]:
    """How the connection authenticates: as the URI's user, when it names one. Proton's own SASL
    takes the first mechanism the broker offers, and RabbitMQ's plugin offers ANONYMOUS first: the
    connection would be its default user's (``guest``), whatever user and password the URI gives
    (measured on RabbitMQ 3.10; Qpid JMS, Ditto's client, takes ANONYMOUS only without credentials)."""
    try:
        named = urlsplit(uri).username is not None
    except ValueError:  # proton answers a URL it cannot use
        named = False
    return {"allowed_mechs": "PLAIN"} if named else {}


def _condition(condition: Any, default: str) -> str:
    if condition is None:
        return default
    return f"{condition.name}: {condition.description}" if condition.description else str(condition.name)


class Amqp10Session(Session):
    """One connection: a receiving link per source address, sending links for replies."""

    def __init__(self, config: ConnectionConfig, deliver: Callable[[Message], None]) -> None:
        assert config.amqp10 is not None
        self.config = config
        self.settings = config.amqp10
        self._deliver = deliver
        self._tags = 0
        self._held: dict[int, Any] = {}  # our delivery tag -> proton's delivery, unsettled
        self._sources: dict[str, tuple[Any, str]] = {}  # link name -> (its source, its address)
        self._replies: collections.OrderedDict[str, Any] = collections.OrderedDict()  # address -> sending link
        self._refused: list[tuple[str, str]] = []  # (address, why): reply links the broker refused
        self._consuming = True
        self._connection = ProtonConnection(config.uri, connection_name(config), received=self._on_message,
                                            link_failed=self._reply_link_failed)
        try:
            receivers = []
            for source in config.sources:
                for address in source.addresses:
                    name = f"ackstore {config.id} {address}"
                    self._sources[name] = (source, address)
                    receivers.append(self._connection.receiver(address, name))
            self._connection.wait(lambda: all(self._connection.attached(r) for r in receivers), "attaching the links")
            for receiver in receivers:
                receiver.flow(self.settings.credit)
        except BaseException:
            self.close()
            raise

    def _on_message(self, delivery: Any, message: Any, problem: BaseException | None) -> None:
        """A received message, handed to the connector; one proton could not read (``problem``),
        or whose body or properties nest past the door's bound, as unreadable: refused (decisions #131)."""
        self._tags += 1
        self._held[self._tags] = delivery
        source, address = self._sources[delivery.link.name]
        fields = amqp10.properties(message)  # the properties section: proton reads it outside Python
        redelivered = message.delivery_count > 0 or not message.first_acquirer
        body, headers, unreadable = b"", None, amqp10.unreadable(problem) if problem is not None else None
        if unreadable is None:
            try:
                body, headers = amqp10.body(message.body), amqp10.application_properties(message.properties)
            except errors.DittoError as refused:
                unreadable = refused
        key = amqp10.message_key(address, message.id, body, fields["correlation_id"])
        self._deliver(Message(self._tags, redelivered, body, key, headers, fields, source, address, unreadable))

    def process(self, time_limit: float) -> None:
        self._connection.step(time_limit)

    def settle(self, dispositions: Mapping[int, Settling]) -> None:
        faults.checkpoint("connector:settling")
        self._settle((tag, dispositions[tag]) for tag in dispositions)

    def _settle(self, items: Iterable[tuple[int, Settling]]) -> None:
        """Settle in delivery order: proton sends a run of consecutive deliveries settled alike as
        one ranged disposition, and RabbitMQ's plugin, like its AMQP 0.9.1 channel (decisions
        #84), walks its unsettled deliveries from the oldest for each one settled on its own."""
        credit: collections.Counter[Any] = collections.Counter()
        for tag, disposition in sorted(items, key=lambda item: item[0]):
            delivery = self._held.pop(tag, None)
            if delivery is None:
                continue
            state = amqp10.outcome(disposition, self.settings.redelivery)
            if state == amqp10.MODIFIED:
                delivery.local.failed = True
            delivery.update(_OUTCOMES[state])
            delivery.settle()
            credit[delivery.link] += 1
        if self._consuming:
            for link, settled in credit.items():
                link.flow(settled)  # one more delivery for each settled: at most the credit unsettled
        self._connection.step(0)

    def give_back(self) -> bool:
        """Leave what is held unsettled for the :meth:`close` that follows (decisions #114): a
        connection's close gives the broker back all it held at once, where RabbitMQ 3's plugin
        requeues ``released`` deliveries one at a time, each a walk of the queue (65 535 took its
        queue 12 minutes, delivering nothing meanwhile; 0.5 s on a close)."""
        if not self._held:
            return False
        self._held.clear()
        return True

    def stop_consuming(self) -> None:
        """Grant no more credit: what the broker sent already arrives and is stored (or given back)."""
        self._consuming = False

    def reply(self, reply_to: str, message: dict[str, Any]) -> bool:
        """Send ``message`` to the ``reply_to`` address (best effort, as in Ditto: the broker's
        outcome is not awaited); :class:`Unencodable` when AMQP 1.0 cannot carry it."""
        outbound = message_for(message)
        problem = amqp10.reply_address_problem(reply_to)  # what the broker would refuse by ending a session
        if problem is not None:
            raise Unencodable(problem)
        sender = self._replies.get(reply_to)
        if sender is None:
            sender = self._connection.sender(reply_to, own_session=True)
            self._replies[reply_to] = sender
            if len(self._replies) > REPLY_LINKS:
                _, oldest = self._replies.popitem(last=False)
                self._connection.close_sender(oldest)
        else:
            self._replies.move_to_end(reply_to)
        sender.send(outbound)
        return True

    def refused_answers(self) -> list[tuple[str, str]]:
        refused, self._refused = self._refused, []
        return refused

    def _reply_link_failed(self, link: Any, why: str) -> None:
        """The broker refused a reply link (or ended its session): that address's answers are
        dropped, the next answer to it attaches again; nothing else ends."""
        for address, sender in list(self._replies.items()):
            if sender == link:
                del self._replies[address]
                self._connection.close_sender(sender)
                self._refused.append((address, why))

    def close(self) -> None:
        self._connection.close()


def message_for(message: dict[str, Any], message_id: str | None = None) -> ProtonMessage:
    """The AMQP 1.0 message carrying a Ditto message: its JSON text as an ``amqp-value`` string
    (as Ditto sends text), its correlation id and ack-token; :class:`Unencodable` when it holds
    text no UTF-8 can."""
    headers = message.get("headers", {})
    correlation = headers.get(connectivity.CORRELATION_ID) if isinstance(headers, dict) else None
    token = headers.get(ACK_TOKEN) if isinstance(headers, dict) else None
    outbound = ProtonMessage(body=json_payload(message).decode(), content_type=wire.DITTO_CONTENT_TYPE, durable=True,
                             correlation_id=correlation if isinstance(correlation, str) else None,
                             properties={ACK_TOKEN: token} if isinstance(token, str) else None)
    if message_id is not None:
        outbound.id = message_id
    try:
        outbound.encode()  # what proton cannot encode (a lone surrogate in a header) fails here, not on the link
    except UNENCODABLE as problem:
        raise Unencodable(f"AMQP 1.0 cannot encode it: {type(problem).__name__}") from None
    return outbound


class Amqp10Targets(TargetPublisher):
    """Publish to the targets of ``config`` until ``stop`` is set (reconnecting after a loss),
    each message unsettled until the broker's outcome issues the target's label."""

    def __init__(self, feed: TargetFeed, *, interval_s: float, reconnect_s: float, stop: threading.Event) -> None:
        super().__init__(feed, interval_s=interval_s, reconnect_s=reconnect_s, stop=stop)
        self._unanswered: dict[Any, Published] = {}  # proton's delivery -> what it carried
        self._answers: dict[bool, list[Published]] = {True: [], False: []}

    def run(self) -> None:
        while not self.stop.is_set():
            connection: ProtonConnection | None = None
            try:
                connection = ProtonConnection(self.config.uri, f"{connection_name(self.config)} targets",
                                              outcome=self._outcome)  # a target's link failing ends it
                self._publish_until_lost(connection)
            except Amqp10Lost as problem:
                log.warning("connector %s: targets' connection lost (%s); %d publishes unanswered are pulled again "
                            "when their lease ends", self.config.id, problem, len(self._unanswered))
            finally:
                self._unanswered.clear()
                if connection is not None:
                    connection.close()
            self.stop.wait(self.reconnect_s)

    def _publish_until_lost(self, connection: ProtonConnection) -> None:
        senders = {target.topic: connection.sender(target.topic, f"ackstore {self.config.id} target {n}")
                   for n, target in enumerate(self.config.targets)}
        connection.wait(lambda: all(connection.attached(s) for s in senders.values()), "attaching the targets' links")
        next_pull = 0.0
        while not self.stop.is_set():
            connection.step(0.05)
            self._tell_answers()
            if time.monotonic() >= next_pull and len(self._unanswered) < UNCONFIRMED_MAX:
                pulled, retry = self.feed.pull()
                for target, item in pulled:
                    self._publish(senders[target.topic], target, item)
                next_pull = time.monotonic() + max(self.interval_s, retry)

    def _publish(self, sender: Any, target: Target, item: Published) -> None:
        try:
            delivery = sender.send(message_for(item.message))
        except UNENCODABLE as problem:
            self.feed.unsendable(target.topic, item, problem)
            return
        self._unanswered[delivery] = item

    def _outcome(self, delivery: Any, accepted: bool) -> None:
        item = self._unanswered.pop(delivery, None)
        if item is not None:
            self._answers[accepted].append(item)

    def _tell_answers(self) -> None:
        for accepted, items in self._answers.items():
            if items:
                self.feed.answered(list(items), confirmed=accepted)
                items.clear()
