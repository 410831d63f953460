"""The AMQP 0.9.1 transport: QoS 1 from RabbitMQ through the ledger (B.7, B.9, A.2.6, A.2.10).

What a connector does beyond its protocol is :mod:`ackstore.connectors.core`; this module is how
AMQP 0.9.1 receives, settles and replies:

* the sources are consumed on one channel with manual acknowledgement and a large prefetch;
* a decision is carried out as B.9's AMQP row says: ``basic_ack``, or ``basic_nack`` without or
  with requeue; a client error is ``basic_nack(requeue=False)``. Deliveries are settled in
  delivery-tag order, with one ``multiple`` frame per run of the oldest tags
  (:mod:`ackstore.connectors.tags`); stopping gives every undecided delivery back with one frame;
* replies go to the default exchange, routed to the message's ``reply_to`` queue; one AMQP 0.9.1
  cannot carry (:func:`ackstore.rules.amqp.publish_problem`: a reply-to past a
  routing key's 255 bytes) is dropped and said;
* a header table nested past pika's stack is read as :data:`~ackstore.rules.connectivity.UNREAD`
  (:class:`BoundedProperties`), and the message refused as a client error like one nested past
  the door's bound (decisions #131): nothing a sender nests ends the connection.

Targets publish the twin events and live signals the connection subscribes to (pulled from the
ledger under a lease) to an exchange, on a thread and connection of their own with asynchronous
publisher confirms, and issue the target's acknowledgement label from the broker's answer: 200
on a confirm, 503 on a nack (:mod:`ackstore.connectors.amqp_targets`).
"""

from __future__ import annotations

import logging
import struct
import threading
from typing import Any, Callable, Mapping

import pika
import pika.data
import pika.spec
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import AMQPChannelError, AMQPConnectionError, NackError, UnroutableError

from ackstore import faults
from ackstore.connectors.config import ConnectionConfig
from ackstore.connectors.core import Connector
from ackstore.connectors.logs import shown
from ackstore.connectors.metrics import ConnectorMetrics
from ackstore.connectors.outage import Outage
from ackstore.connectors.options import Options
from ackstore.connectors.tags import DeliveryTags, Frame
from ackstore.connectors.amqp_targets import AMQP_UNENCODABLE, Targets
from ackstore.connectors.targets import targets_work
from ackstore.connectors.transport import (GIVE_BACK, Message, Session, Transport, Unencodable, connection_name,
                                          json_payload)
from ackstore.ledger.store import AckStore
from ackstore.rules import amqp, connectivity, wire
from ackstore.rules.connectivity import Settling

__all__ = ["AmqpConnector", "AmqpTransport", "send"]

log = logging.getLogger("ackstore.connector")

DITTO_JSON = wire.DITTO_CONTENT_TYPE


class BoundedProperties(pika.spec.BasicProperties):
    """A message's properties as pika reads them, but a header pika cannot read for its nesting —
    its decoder of tables and arrays nests on Python's stack — is :data:`connectivity.UNREAD`,
    which the connector refuses as nested too deep, rather than a RecursionError inside pika's
    frame decoding: pika ended the connection (StreamLostError), and the message, back at the
    head of its queue, ended every connection after it, nothing behind it ever read (measured
    on RabbitMQ 3.10 with a table 600 levels deep; decisions #131). Registered below as the
    properties pika decodes a content header into; what pika can read is read by pika."""

    def decode(self, encoded: bytes, offset: int = 0) -> "BoundedProperties":
        try:
            return super().decode(encoded, offset)
        except RecursionError:  # only the headers table nests: read it a header at a time
            pass
        first = struct.unpack_from(">H", encoded, offset)[0]
        at = offset
        while struct.unpack_from(">H", encoded, at)[0] & 1:  # the flag words, the last with its lowest bit clear
            at += 2
        at += 2
        for flag in (self.FLAG_CONTENT_TYPE, self.FLAG_CONTENT_ENCODING):  # the shortstrs before the headers
            if first & flag:
                at += 1 + encoded[at]
        headers, end = _headers_within_stack(encoded, at)
        super().decode(struct.pack(">H", first & ~self.FLAG_HEADERS) + encoded[offset + 2:at] + encoded[end:])
        self.headers = headers
        return self


def _headers_within_stack(encoded: bytes, at: int) -> tuple[dict[str, Any], int]:
    """The headers table at ``at``, a header at a time: one pika cannot read (a table or an array,
    each length-prefixed, so passed over whole) is UNREAD; and where the table ends."""
    end = at + 4 + struct.unpack_from(">I", encoded, at)[0]
    at += 4
    headers: dict[str, Any] = {}
    while at < end:
        name, at = pika.data.decode_short_string(encoded, at)
        try:
            headers[name], at = pika.data.decode_value(encoded, at)
        except RecursionError:
            headers[name] = connectivity.UNREAD
            at += 1 + 4 + struct.unpack_from(">I", encoded, at + 1)[0]  # its kind, its length, its content
    return headers, end


# pika decodes a content header into the class registered for its class id: ours for basic's
pika.spec.props[pika.spec.BasicProperties.INDEX] = BoundedProperties


class AmqpConnector(Connector):
    """A connector whose broker is RabbitMQ (AMQP 0.9.1)."""

    def __init__(self, store: AckStore, config: ConnectionConfig, options: Options | None = None,
                 metrics: ConnectorMetrics | None = None) -> None:
        options = options or Options()
        super().__init__(store, config, AmqpTransport(config, options), options, metrics)


class AmqpTransport(Transport):
    lost = (AMQPConnectionError, AMQPChannelError)
    unencodable = AMQP_UNENCODABLE

    def __init__(self, config: ConnectionConfig, options: Options) -> None:
        self.config = config
        self.options = options

    def connect(self, deliver: Callable[[Message], None]) -> Session:
        return AmqpSession(self.config, self.options, deliver)

    def disposition(self, decision: str) -> Settling:
        return connectivity.settling(decision)

    def consuming(self) -> str:
        queues = ", ".join(s.queue for s in self.config.sources) or "nothing"
        return f"{queues} (prefetch {self.options.prefetch})"

    def warnings(self, store: AckStore, options: Options) -> list[str]:
        warning = connectivity.consumer_timeout_warning(
            store.settings.max_timeout_ms, options.pipeline_interval_ms, options.consumer_timeout_ms)
        return [warning] if warning else []

    def targets(self, store: AckStore, outage: Outage, stop: threading.Event, answered: Callable[[int, bool], None],
                dropped: Callable[[str, BaseException], None]) -> Callable[[], None] | None:
        return targets_work(store, self.config, self.options, outage, answered, dropped,
                            Targets.maker(self.options, stop))


class AmqpSession(Session):
    """One connection: a consuming channel with manual acknowledgement, a publishing one with confirms."""

    def __init__(self, config: ConnectionConfig, options: Options, deliver: Callable[[Message], None]) -> None:
        parameters = pika.URLParameters(config.uri)
        parameters.client_properties = {"connection_name": connection_name(config)}
        self.config = config
        self._deliver = deliver
        self._tags = DeliveryTags()
        self._connection = pika.BlockingConnection(parameters)
        try:
            self._consume: BlockingChannel = self._connection.channel()
            self._consume.basic_qos(prefetch_count=options.prefetch)
            self._publish: BlockingChannel = self._connection.channel()
            self._publish.confirm_delivery()
            self._sources = {  # consumer tag -> its source
                self._consume.basic_consume(source.queue, self._on_message, auto_ack=False): source
                for source in config.sources
            }
        except BaseException:
            self.close()
            raise
        self._consumer_tags = list(self._sources)

    def _on_message(self, _channel: Any, method: Any, properties: Any, body: bytes) -> None:
        self._tags.delivered(method.delivery_tag)
        fields = {name: _text(getattr(properties, name))
                  for name in ("correlation_id", "reply_to", "content_type", "message_id")}
        key = amqp.message_key(fields["message_id"], body, fields["correlation_id"])
        source = self._sources[method.consumer_tag]
        self._deliver(Message(method.delivery_tag, method.redelivered, body, key, properties.headers, fields,
                              source, source.queue))

    def process(self, time_limit: float) -> None:
        self._connection.process_data_events(time_limit=time_limit)

    def settle(self, dispositions: Mapping[int, Settling]) -> None:
        for frame in self._tags.settle(dispositions):
            self._send(frame)

    def give_back(self) -> bool:
        frame = self._tags.give_back(GIVE_BACK)
        if frame is None:
            return False
        self._send(frame)
        return True

    def _send(self, frame: Frame) -> None:
        faults.checkpoint("connector:settling")
        send(self._consume, frame)

    def stop_consuming(self) -> None:
        """Cancel the consumers (pika nacks what arrives after, undispatched)."""
        for tag in self._consumer_tags:
            self._consume.basic_cancel(tag)
        self._consumer_tags = []
        self._connection.process_data_events(time_limit=0)

    def reply(self, reply_to: str, message: dict[str, Any]) -> bool:
        """Publish to the default exchange, routed to the ``reply_to`` queue (best effort, as in Ditto);
        an answer AMQP 0.9.1 cannot carry (a sender's reply-to no routing key can be) is
        :class:`Unencodable`, never published."""
        properties = {"content_type": DITTO_JSON,
                      "correlation_id": amqp.correlation_id_property(message["headers"].get("correlation-id"))}
        problem = amqp.publish_problem(reply_to, properties)
        if problem is not None:
            raise Unencodable(problem)
        try:
            self._publish.basic_publish("", reply_to, json_payload(message), pika.BasicProperties(**properties))
        except (NackError, UnroutableError):
            log.warning("connector %s: the reply to %s was not accepted by the broker", self.config.id, shown(reply_to))
            return False
        return True

    def close(self) -> None:
        if self._connection.is_open:
            self._connection.close()


def _text(value: str | bytes | None) -> str | None:
    """A shortstr property as text: pika hands one that is no UTF-8 over as bytes, whose bytes
    that are not UTF-8 become ``\\xff`` here (distinct bytes stay distinct: a message id keys its message)."""
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value


def send(channel: BlockingChannel, frame: Frame) -> None:
    """One ``basic.ack`` or ``basic.nack`` frame on ``channel``."""
    if frame.disposition.ack:
        channel.basic_ack(frame.tag, multiple=frame.multiple)
    else:
        channel.basic_nack(frame.tag, multiple=frame.multiple, requeue=frame.disposition.requeue)
