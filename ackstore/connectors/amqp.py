"""The AMQP 0.9.1 connector: QoS 1 from RabbitMQ through the ledger (B.7, B.9, A.2.6, A.2.10).

One process per connection. Its sources are consumed on one channel with manual
acknowledgement and a large prefetch; messages are stored in batches (``AckStore.ingest``)
and only then considered received:

* a client error (bad JSON, unknown topic, invalid labels, zero timeout with acks, too large)
  is rejected at once — ``basic_nack(requeue=False)`` — and the error is published to the
  message's ``reply_to``;
* a message that requested no acks is settled at once (QoS 0);
* every other delivery is held until the pipeline decides. The settle step notifies
  ``ackstore_settlements`` (the connector also polls); the connector records that it carries
  each decision out, then settles the delivery on the channel that received it —
  ``basic_ack``, or ``basic_nack`` without or with requeue — and publishes the result to
  ``reply_to`` when a response is required;
* a redelivered copy is recognised by its key (A.3): never stored twice; settled at once from a
  decision its signal already has, or opening the next attempt after a redeliver decision.

Targets publish the twin events and live signals the connection subscribes to (pulled from the
ledger under a lease) to an exchange with publisher confirms, and issue the target's
acknowledgement label from the broker's answer: 200 on a confirm, 503 on a nack.

If the process dies, the broker redelivers what it held; nothing is lost or applied twice.
"""

from __future__ import annotations

import logging
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import pika
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import AMQPChannelError, AMQPConnectionError, NackError, UnroutableError
from sqlalchemy.exc import DBAPIError

from ackstore.connectors.config import ConnectionConfig
from ackstore import faults
from ackstore.ledger import failures, settlements
from ackstore.ledger.ingest import Stored
from ackstore.ledger.store import AckStore
from ackstore.rules import connectivity, envelopes, errors, jsontext, wire
from ackstore.rules.connectivity import Disposition

log = logging.getLogger("ackstore.connector")

DITTO_JSON = wire.DITTO_CONTENT_TYPE


@dataclass
class Options:
    batch_size: int = 1000  # messages per ledger transaction
    prefetch: int = 0  # unacknowledged deliveries the broker may push; 0: no limit (held ones count)
    linger_s: float = 0.05  # how long a partial batch waits for more messages
    poll_s: float = 2.0  # how often decisions are read without a notification
    target_interval_s: float = 0.5  # how often targets pull new signals
    target_lease: str = "5m"
    pipeline_interval_ms: int = 60_000  # the DAG's schedule, for the consumer-timeout check
    consumer_timeout_ms: int = connectivity.DEFAULT_CONSUMER_TIMEOUT_MS
    max_messages: int | None = None  # stop consuming after this many, exit once all are settled
    once: bool = False  # take what is queued now, settle what is decided, exit
    reconnect_s: float = 1.0  # the first wait before reconnecting; doubled after each failure
    max_reconnect_s: float = 30.0


@dataclass
class Counts:
    received: int = 0
    stored: int = 0
    redelivered: int = 0
    rejected: int = 0
    settled_at_once: int = 0
    carried_out: dict[str, int] = field(default_factory=dict)
    published: int = 0
    reconnects: int = 0

    def line(self, held: int) -> str:
        decided = ", ".join(f"{k} {v}" for k, v in sorted(self.carried_out.items())) or "none"
        return (f"received {self.received}, stored {self.stored} (redelivered {self.redelivered}), "
                f"rejected {self.rejected}, settled at once {self.settled_at_once}, carried out: {decided}; "
                f"holding {held}; published {self.published}; reconnects {self.reconnects}")


@dataclass(frozen=True)
class _Delivery:
    tag: int
    redelivered: bool
    properties: Any
    body: bytes
    includes: tuple[str, ...]  # the requested-acks its source adds


class AmqpConnector:
    """Run one connection until SIGTERM (or ``max_messages`` / ``once``)."""

    def __init__(self, store: AckStore, config: ConnectionConfig, options: Options | None = None) -> None:
        self.store = store
        self.config = config
        self.options = options or Options()
        self.counts = Counts()
        self.stopping = False
        self._held: dict[int, list[int]] = {}  # signal id -> delivery tags on the consuming channel
        self._buffer: list[_Delivery] = []
        self._buffer_since = 0.0
        self._consume: BlockingChannel | None = None
        self._publish: BlockingChannel | None = None
        self._consumer_tags: list[str] = []
        self._includes: dict[str, tuple[str, ...]] = {}  # consumer tag -> its source's includes
        self._backoff_s = self.options.reconnect_s

    # --- lifecycle ----------------------------------------------------------------------------

    def run(self) -> int:
        self._install_signal_handlers()
        self._warn_about_consumer_timeout()
        if not self._declare():
            return 1
        listener = settlements.Listener(self.store.engine, self.config.id)
        try:
            while not self.stopping:
                try:
                    if self._session(listener):
                        break
                except (AMQPConnectionError, AMQPChannelError) as problem:
                    self._lost(problem)
        finally:
            listener.close()
            log.info("connector %s stopped: %s", self.config.id, self.counts.line(self._holding()))
        return 0

    @property
    def connection_name(self) -> str:
        """How the broker's management tools name this connector's connection."""
        return f"ackstore connector {self.config.id}"

    def stop(self, *_: object) -> None:
        """SIGTERM / SIGINT: only a flag (a signal handler must not log); the loop acts on it."""
        self.stopping = True

    def _install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def _warn_about_consumer_timeout(self) -> None:
        warning = connectivity.consumer_timeout_warning(
            self.store.settings.max_timeout_ms, self.options.pipeline_interval_ms, self.options.consumer_timeout_ms
        )
        if warning:
            log.warning("connector %s: %s", self.config.id, warning)

    def _declare(self) -> bool:
        """Declare the connection's labels for each target (one group, B.3)."""
        labels = self.config.declared_labels
        declarations: list[tuple[str, dict[str, Any]]] = [
            (self.config.subscriber_id(n), {"channels": list(t.channels),
                                             "namespaces": list(t.namespaces) if t.namespaces else None,
                                             "filter": t.filter})
            for n, t in enumerate(self.config.targets)
        ]
        if not declarations and labels:  # declared acks without targets: the group receives nothing
            declarations = [(self.config.subscriber_id(None), {"channels": ["twin"], "namespaces": []})]
        for subscriber, subscription in declarations:
            answer = self.store.declare(subscriber, labels, connection=self.config.id, **subscription)
            if answer["status"] != 204:
                log.error("connector %s: declaring %s failed: %s", self.config.id, labels, answer)
                return False
        if labels:
            log.info("connector %s: declared %s", self.config.id, ", ".join(labels))
        return True

    def _session(self, listener: settlements.Listener) -> bool:
        """One broker connection; True when the connector is done, False to reconnect."""
        parameters = pika.URLParameters(self.config.uri)
        parameters.client_properties = {"connection_name": self.connection_name}
        connection = pika.BlockingConnection(parameters)
        try:
            self._open_channels(connection)
            self._backoff_s = self.options.reconnect_s  # connected and consuming: start over
            log.info("connector %s: consuming %s (prefetch %d, batches of %d)", self.config.id,
                     ", ".join(s.queue for s in self.config.sources) or "nothing", self.options.prefetch,
                     self.options.batch_size)
            return self._loop(connection, listener)
        finally:
            self._held.clear()  # unsettled deliveries go back to the queue with the channel
            self._buffer.clear()
            if connection.is_open:
                connection.close()

    def _open_channels(self, connection: pika.BlockingConnection) -> None:
        self._consume = connection.channel()
        self._consume.basic_qos(prefetch_count=self.options.prefetch)
        self._publish = connection.channel()
        self._publish.confirm_delivery()
        self._includes = {
            self._consume.basic_consume(source.queue, self._on_message, auto_ack=False): source.includes
            for source in self.config.sources
        }
        self._consumer_tags = list(self._includes)

    def _lost(self, problem: Exception) -> None:
        """Wait, longer after each failure in a row (a missing queue, a broker that is down)."""
        self.counts.reconnects += 1
        log.warning("connector %s: broker connection lost (%s); reconnecting in %.1f s — held deliveries "
                    "return to the queue and are recognised when redelivered", self.config.id, problem,
                    self._backoff_s)
        deadline = time.monotonic() + self._backoff_s
        while not self.stopping and time.monotonic() < deadline:
            time.sleep(0.1)
        self._backoff_s = min(self._backoff_s * 2, self.options.max_reconnect_s)

    def _holding(self) -> int:
        return sum(len(tags) for tags in self._held.values())

    # --- the loop -----------------------------------------------------------------------------

    def _loop(self, connection: pika.BlockingConnection, listener: settlements.Listener) -> bool:
        next_poll = next_targets = next_report = 0.0
        idle_rounds = 0
        while True:
            connection.process_data_events(time_limit=self.options.linger_s)
            if self._buffer and (len(self._buffer) >= self.options.batch_size
                                 or time.monotonic() - self._buffer_since >= self.options.linger_s):
                self._store_buffer()
                idle_rounds = 0
            else:
                idle_rounds += 1
            now = time.monotonic()
            notified = listener.wait(0)
            if notified or now >= next_poll:
                self._carry_out_decisions_or_later()
                next_poll = now + self.options.poll_s
            if self.config.targets and now >= next_targets:
                self._publish_targets()
                next_targets = now + self.options.target_interval_s
            if now >= next_report:
                log.info("connector %s: %s", self.config.id, self.counts.line(self._holding()))
                next_report = now + 10
            if self._limit_reached():
                self._stop_consuming(connection)
            if self.stopping or self._finished(idle_rounds):
                log.info("connector %s: stopping — no new messages; carrying out what is decided", self.config.id)
                self._stop_consuming(connection)
                self._carry_out_decisions()
                return True

    def _limit_reached(self) -> bool:
        limit = self.options.max_messages
        return limit is not None and self.counts.received >= limit and bool(self._consumer_tags)

    def _finished(self, idle_rounds: int) -> bool:
        if self.options.once:
            return idle_rounds >= 3 and not self._buffer
        if self.options.max_messages is not None and self.counts.received >= self.options.max_messages:
            return not self._buffer and not self._held
        return False

    def _stop_consuming(self, connection: pika.BlockingConnection) -> None:
        """Cancel the consumers, then store what already arrived (it was delivered to us)."""
        for tag in self._consumer_tags:
            self._consume.basic_cancel(tag)
        self._consumer_tags = []
        connection.process_data_events(time_limit=0)
        if self._buffer:
            self._store_buffer()

    # --- sources ------------------------------------------------------------------------------

    def _on_message(self, _channel: Any, method: Any, properties: Any, body: bytes) -> None:
        if not self._buffer:
            self._buffer_since = time.monotonic()
        self._buffer.append(_Delivery(method.delivery_tag, method.redelivered, properties, body,
                                      self._includes.get(method.consumer_tag, ())))
        self.counts.received += 1

    def _store_buffer(self) -> None:
        batch, self._buffer = self._buffer, []
        signals: list[tuple[_Delivery, Any, str]] = []
        for delivery in batch:
            envelope = self._envelope(delivery)
            if connectivity.is_acknowledgement(envelope):
                self._acknowledgement(delivery, envelope)
            else:
                key = connectivity.source_message_id(
                    delivery.properties.message_id, delivery.body, delivery.properties.correlation_id
                )
                signals.append((delivery, envelope, key))
        if not signals:
            return
        try:
            results: list[Stored | None] = list(self._ingest(signals))
        except Exception as problem:  # noqa: BLE001 — sorted into transient or not, never lost
            if failures.is_transient(problem):  # a deadlock, a restart of the database: the broker keeps them
                self._requeue_after_failure([delivery for delivery, _, _ in signals], problem)
                return
            # The same batch would fail the same way forever: find the message that causes it.
            log.warning("connector %s: storing %d messages failed (%s); storing them one by one", self.config.id,
                        len(signals), _described(problem))
            results = self._ingest_one_by_one(signals)
        self._backoff_s = self.options.reconnect_s
        settled_from_decision: list[tuple[_Delivery, Stored]] = []
        for (delivery, envelope, _), stored in zip(signals, results):
            if stored is None:  # requeued: a transient failure while isolating
                continue
            if not stored.ok:
                self._reject(delivery, envelope, stored.answer)
                continue
            self.counts.stored += 1
            self.counts.redelivered += int(delivery.redelivered)
            if stored.decision is not None:
                settled_from_decision.append((delivery, stored))
            elif stored.awaits_decision:
                self._held.setdefault(stored.signal_id, []).append(delivery.tag)
            else:
                self._consume.basic_ack(delivery.tag)
                self.counts.settled_at_once += 1
        if settled_from_decision:
            self._settle_from_decisions(settled_from_decision)

    def _ingest(self, signals: list[tuple[_Delivery, Any, str]]) -> list[Stored]:
        return self.store.ingest([e for _, e, _ in signals], api="connectivity", source=self.config.id,
                                 source_message_ids=[k for _, _, k in signals])

    def _ingest_one_by_one(self, signals: list[tuple[_Delivery, Any, str]]) -> list[Stored | None]:
        """Each message in a transaction of its own: a message the ledger refuses for good is
        answered with the error (and rejected); one that fails transiently goes back to the queue;
        the others are stored. A message stored before a crash here is recognised when it comes
        back (its key), so nothing is stored twice."""
        results: list[Stored | None] = []
        for item in signals:
            faults.checkpoint("connector:isolating")
            try:
                (stored,) = self._ingest([item])
            except Exception as problem:  # noqa: BLE001
                if failures.is_transient(problem):
                    self._requeue_after_failure([item[0]], problem)
                    stored = None
                else:
                    log.error("connector %s: message %s cannot be stored (%s); rejected", self.config.id,
                              item[2], _described(problem))
                    stored = Stored(errors.message_not_storable(_described(problem)).to_json())
            results.append(stored)
        return results

    def _requeue_after_failure(self, deliveries: list[_Delivery], problem: BaseException) -> None:
        """Back to the queue, then a pause that doubles while failures go on (1 s … 30 s): a
        database that is away is not asked again at the broker's redelivery rate."""
        log.warning("connector %s: storing %d messages failed (%s); they go back to the queue, next try in %.0f s",
                    self.config.id, len(deliveries), _described(problem), self._backoff_s)
        for delivery in deliveries:
            self._consume.basic_nack(delivery.tag, requeue=True)
        deadline = time.monotonic() + self._backoff_s
        while not self.stopping and time.monotonic() < deadline:
            time.sleep(0.1)
        self._backoff_s = min(self._backoff_s * 2, self.options.max_reconnect_s)

    def _envelope(self, delivery: _Delivery) -> Any:
        props = delivery.properties
        return connectivity.inbound_envelope(
            delivery.body,
            props.headers,
            {"correlation_id": props.correlation_id, "reply_to": props.reply_to,
             "content_type": props.content_type, "message_id": props.message_id},
            includes=delivery.includes,
            max_bytes=self.store.settings.max_envelope_bytes,
        )

    def _reject(self, delivery: _Delivery, envelope: Any, error: dict[str, Any]) -> None:
        """A client error: never redelivered (B.9), answered on reply-to."""
        self._consume.basic_nack(delivery.tag, requeue=False)
        self.counts.rejected += 1
        log.info("connector %s: rejected message %s: %s %s", self.config.id,
                 delivery.properties.message_id or "(no id)", error.get("error"), error.get("message"))
        self._reply(delivery.properties.reply_to, _error_reply(error, envelope, delivery.properties.correlation_id))

    def _acknowledgement(self, delivery: _Delivery, envelope: dict[str, Any]) -> None:
        """An ack the connection sends through its source, checked against its declared labels."""
        subscriber = self.config.subscriber_id(0 if self.config.targets else None)
        answer = self.store.acknowledge(subscriber, envelope)
        if answer["status"] == 204:
            self._consume.basic_ack(delivery.tag)
            self.counts.settled_at_once += 1
        else:
            self._reject(delivery, envelope, answer)

    def _settle_from_decisions(self, items: list[tuple[_Delivery, Stored]]) -> None:
        """Copies of messages whose signal is decided: settled at once from that decision."""
        with self.store.engine.begin() as conn:
            settlements.record_latest(conn, {stored.signal_id for _, stored in items})
        for delivery, stored in items:
            self._settle(delivery.tag, stored.decision)

    # --- carrying decisions out ---------------------------------------------------------------

    def _carry_out_decisions_or_later(self) -> None:
        try:
            self._carry_out_decisions()
        except DBAPIError as problem:  # nothing was settled: the next poll tries again
            log.warning("connector %s: reading decisions failed (%s); trying again at the next poll",
                        self.config.id, type(problem.orig).__name__)

    def _carry_out_decisions(self) -> None:
        with self.store.engine.begin() as conn:
            undone = settlements.undone(conn, self.config.id)
        mine = [d for d in undone if d.signal_id in self._held]
        at_once = [d for d in undone if d.signal_id not in self._held and not d.held_for_decision]
        if not mine and not at_once:
            return
        with self.store.engine.begin() as conn:  # recorded first: see decisions #33
            settlements.record_carried_out(conn, [(d.signal_id, d.attempt) for d in mine], held=True)
            first = settlements.record_carried_out(conn, [(d.signal_id, d.attempt) for d in at_once], held=False)
            to_publish = settlements.replies(conn, [*mine, *(d for d in at_once if d.signal_id in first)])
        for decided in mine:
            for tag in self._held.pop(decided.signal_id):
                self._settle(tag, decided.decision)
        for reply in to_publish:
            self._reply(reply.reply_to, _result_reply(reply))

    def _settle(self, tag: int, decision: str) -> None:
        disposition: Disposition = connectivity.amqp_disposition(decision)
        if disposition.ack:
            self._consume.basic_ack(tag)
        else:
            self._consume.basic_nack(tag, requeue=disposition.requeue)
        self.counts.carried_out[decision] = self.counts.carried_out.get(decision, 0) + 1

    def _reply(self, reply_to: str | None, message: dict[str, Any]) -> None:
        """Publish to the default exchange, routed to the ``reply_to`` queue (best effort, as in Ditto)."""
        if not reply_to:
            return
        properties = pika.BasicProperties(
            content_type=DITTO_JSON, correlation_id=connectivity.amqp_correlation_id(message["headers"].get("correlation-id")))
        try:
            self._publish.basic_publish("", reply_to, jsontext.dumps(message).encode(), properties)
        except (NackError, UnroutableError):
            log.warning("connector %s: the reply to %s was not accepted by the broker", self.config.id, reply_to)

    # --- targets ------------------------------------------------------------------------------

    def _publish_targets(self) -> None:
        for n, target in enumerate(self.config.targets):
            subscriber = self.config.subscriber_id(n)
            for message in self.store.pull(subscriber, max=500, lease=self.options.target_lease):
                confirmed = self._publish_one(target.exchange, target.routing_key, message)
                self.counts.published += int(bool(confirmed))
                label = target.issued_label
                if label and label in message["headers"].get("requested-acks", []):
                    self.store.acknowledge(subscriber, _issued_ack(message, label, confirmed))

    def _publish_one(self, exchange: str, routing_key: str, message: dict[str, Any]) -> bool:
        headers = message["headers"]
        properties = pika.BasicProperties(content_type=DITTO_JSON,
                                          correlation_id=connectivity.amqp_correlation_id(headers.get("correlation-id")),
                                          delivery_mode=2, headers={"ack-token": headers.get("ack-token")})
        try:
            self._publish.basic_publish(exchange, routing_key, jsontext.dumps(message).encode(), properties)
        except NackError:
            return False
        return True


def _described(problem: BaseException) -> str:
    """A failure as a log line may show it: its type and first line (no statement, no values)."""
    cause = getattr(problem, "orig", None) or problem
    first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
    return f"{type(cause).__name__}: {first[:200]}" if first else type(cause).__name__


def _issued_ack(message: dict[str, Any], label: str, confirmed: bool) -> dict[str, Any]:
    thing_id, channel = envelopes.thing_of_topic(message["topic"])  # a pulled signal's topic names its thing
    return {
        "topic": wire.acks_topic(thing_id, channel, label),
        "headers": {"correlation-id": message["headers"]["correlation-id"],
                    "ack-token": message["headers"]["ack-token"]},
        "path": "/",
        "status": connectivity.issued_ack_status(confirmed),
    }


def _error_reply(error: dict[str, Any], envelope: Any, correlation_id: str | None) -> dict[str, Any]:
    thing: tuple[str, str] | None = None
    if isinstance(envelope, dict) and isinstance(envelope.get("topic"), str):
        thing = envelopes.thing_of_topic(envelope["topic"])
        headers = envelope.get("headers")
        if isinstance(headers, dict) and isinstance(headers.get("correlation-id"), str):
            correlation_id = headers["correlation-id"]
    thing_id, channel = thing or (None, "twin")
    return wire.error_message(error, thing_id=thing_id, channel=channel, correlation_id=correlation_id)


def _result_reply(decided: settlements.Reply) -> dict[str, Any]:
    return wire.result_message(
        thing_id=decided.thing_id, channel=decided.channel, topic=decided.topic, path=decided.path,  # type: ignore[arg-type]
        correlation_id=decided.correlation_id, cause=decided.cause, status=decided.status, body=decided.body,
        ack_statuses=decided.ack_statuses or {},
    )
