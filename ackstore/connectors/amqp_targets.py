"""AMQP 0.9.1's targets (B.9): what a connection's :class:`~ackstore.connectors.targets.TargetFeed`
pulls, published to an exchange with asynchronous publisher confirms.

One thread with a broker connection of its own (``SelectConnection``: its confirms come as
callbacks, so a publish does not wait for its confirm). When the broker confirms a publish, the
target's ``issuedAcknowledgementLabel`` is acknowledged 200, when it nacks, 503; a message AMQP
0.9.1 cannot carry (:func:`ackstore.rules.amqp.publish_problem`) is dropped, said, and its label
acknowledged 400.
"""

from __future__ import annotations

import logging
import struct
import threading
from typing import Any

import pika
from pika.exceptions import ShortStringTooLong, UnsupportedAMQPFieldException
from pika.spec import Basic

from ackstore.connectors.config import Target
from ackstore.connectors.targets import UNCONFIRMED_MAX, Published, TargetFeed, TargetPublisher
from ackstore.connectors.transport import Unencodable, json_payload
from ackstore.rules import amqp, wire

log = logging.getLogger("ackstore.connector")

DITTO_JSON = wire.DITTO_CONTENT_TYPE
# pika's failures to encode a message (the backstop behind amqp.publish_problem)
AMQP_UNENCODABLE = (Unencodable, ValueError, struct.error, ShortStringTooLong, UnsupportedAMQPFieldException)


class Targets(TargetPublisher):
    """Publish to the targets of ``config`` until ``stop`` is set (reconnecting after a loss)."""

    def __init__(self, feed: TargetFeed, *, interval_s: float, reconnect_s: float, stop: threading.Event) -> None:
        super().__init__(feed, interval_s=interval_s, reconnect_s=reconnect_s, stop=stop)
        self._connection: pika.SelectConnection | None = None
        self._channel: Any = None
        self._unconfirmed: dict[int, Published] = {}  # publish sequence number -> what it carried
        self._sequence = 0

    def run(self) -> None:
        while not self.stop.is_set():
            parameters = pika.URLParameters(self.config.uri)
            parameters.client_properties = {"connection_name": f"ackstore connector {self.config.id} targets"}
            self._connection = pika.SelectConnection(
                parameters, on_open_callback=self._opened, on_open_error_callback=self._failed,
                on_close_callback=self._closed)
            self._connection.ioloop.start()
            self.stop.wait(self.reconnect_s)

    # --- the connection's callbacks (all on this thread's ioloop) -----------------------------

    def _opened(self, connection: pika.SelectConnection) -> None:
        connection.channel(on_open_callback=self._channel_opened)

    def _channel_opened(self, channel: Any) -> None:
        self._channel = channel
        self._unconfirmed.clear()
        self._sequence = 0  # a channel in confirm mode numbers its publishes from 1
        channel.confirm_delivery(self._answered)
        self._tick()

    def _failed(self, _connection: Any, problem: Exception) -> None:
        log.warning("connector %s: targets cannot connect (%s); trying again in %.0f s", self.config.id, problem,
                    self.reconnect_s)
        self._connection.ioloop.stop()

    def _closed(self, _connection: Any, reason: Exception) -> None:
        if not self.stop.is_set():
            log.warning("connector %s: targets' connection closed (%s); %d publishes unanswered are pulled "
                        "again when their lease ends", self.config.id, reason, len(self._unconfirmed))
        self._connection.ioloop.stop()

    def _tick(self) -> None:
        if self.stop.is_set():
            self._connection.close()
            return
        wait = self.interval_s
        if len(self._unconfirmed) < UNCONFIRMED_MAX:
            pulled, retry = self.feed.pull()
            for target, item in pulled:
                self._publish(target, item)
            wait = max(wait, retry)
        self._connection.ioloop.call_later(wait, self._tick)

    def _publish(self, target: Target, item: Published) -> None:
        headers = item.message["headers"]
        properties = {"content_type": DITTO_JSON, "headers": {"ack-token": headers.get("ack-token")},
                      "correlation_id": amqp.correlation_id_property(headers.get("correlation-id"))}
        try:
            problem = amqp.publish_problem(target.routing_key, properties)
            if problem is not None:
                raise Unencodable(problem)
            self._channel.basic_publish(target.exchange, target.routing_key, json_payload(item.message),
                                        pika.BasicProperties(delivery_mode=2, **properties))
        except AMQP_UNENCODABLE as problem:  # pika marshals a message whole before it sends any of it
            self.feed.unsendable(f"{target.exchange}/{target.routing_key}", item, problem)
            return
        self._sequence += 1
        self._unconfirmed[self._sequence] = item

    def _answered(self, frame: Any) -> None:
        """A confirm (``Basic.Ack``) or nack, of one publish or, ``multiple``, of all up to it."""
        method = frame.method
        confirmed = isinstance(method, Basic.Ack)
        tags = ([t for t in self._unconfirmed if t <= method.delivery_tag] if method.multiple
                else [method.delivery_tag])
        self.feed.answered([self._unconfirmed.pop(t) for t in tags if t in self._unconfirmed], confirmed=confirmed)
