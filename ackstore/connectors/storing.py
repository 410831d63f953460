"""The connector's storing thread (a part of :class:`ackstore.connectors.core.Connector`): each
batch the broker's thread hands over is stored in one call (``AckStore.ingest``) — waiting out a
database that is away, finding the message a batch fails for — and what it decides handed back:
client errors refused and answered, acknowledgements issued, messages that wait for no decision
acked, copies of decided signals settled from their decision, the rest held until decided."""

from __future__ import annotations

import logging
import queue
import threading
import time
from datetime import datetime
from typing import Any, Callable, Iterable, NamedTuple

from ackstore import faults
from ackstore.connectors.config import ConnectionConfig
from ackstore.connectors.handovers import Batch, Reply, Settle
from ackstore.connectors.held import Delivery, Held
from ackstore.connectors.logs import described
from ackstore.connectors.metrics import ConnectorMetrics
from ackstore.connectors.outage import Outage
from ackstore.connectors.status import count_carried_out
from ackstore.connectors.transport import ACK, GIVE_BACK, Message, Transport
from ackstore.ledger import failures, settlements
from ackstore.ledger.ingest import Stored
from ackstore.ledger.store import AckStore
from ackstore.rules import connectivity, envelopes, errors, wire
from ackstore.rules.connectivity import Settling

log = logging.getLogger("ackstore.connector")

LogEntry = tuple[str, str, str | None, datetime | None]  # kind, detail, message id, when it happened


class _SettledNow(NamedTuple):
    """Deliveries of a batch settled without waiting for a decision (those held for one are not
    here): how each is settled, how many of them carry a settlement out (acked at once, or from the
    decision their signal already had) and how many are refused as client errors."""

    dispositions: dict[int, Settling]  # delivery tag -> how
    acknowledged: int = 0
    rejected: int = 0


def _joined(parts: Iterable[_SettledNow]) -> _SettledNow:
    """The parts as one, their deliveries in order."""
    dispositions: dict[int, Settling] = {}
    acknowledged = rejected = 0
    for part in parts:
        dispositions.update(part.dispositions)
        acknowledged += part.acknowledged
        rejected += part.rejected
    return _SettledNow(dispositions, acknowledged, rejected)


class Storing:
    """The storing thread's work, mixed into the connector, whose state it shares (below)."""

    store: AckStore
    config: ConnectionConfig
    transport: Transport
    metrics: ConnectorMetrics
    _held: Held
    _to_store: queue.Queue[Batch]
    _outbox: queue.SimpleQueue[Settle | Reply]  # to the broker's thread
    _done: threading.Event
    _interrupt: threading.Event
    _live_session: int | None  # the broker's thread's session: a batch of another can no longer be settled
    _storing_outage: Outage
    _refusals: list[LogEntry]  # the batch's refusals, for the connection's log
    _log_all: Callable[[list[LogEntry]], None]

    def _storing(self) -> None:
        while not self._done.is_set():
            try:
                batch = self._to_store.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                self._store_batch(batch)
            finally:
                self._to_store.task_done()

    def _current(self, batch: Batch) -> bool:
        return batch.session == self._live_session

    def _store_batch(self, batch: Batch) -> None:
        """Store a batch, hand what is settled now to the broker's thread, hold the rest; counted
        in the metrics, what it refused in the connection's log."""
        if not self._current(batch):  # its session closed: the broker has these deliveries back
            return
        started = time.perf_counter()
        unstored, signals = self._settle_unstored(batch.messages)
        results = self._ingest_waiting_out_outages(batch, signals) if signals else []
        if results is None:  # its session closed or the connector stops: the broker has them back
            return
        faults.checkpoint("connector:stored")
        settled = _joined((unstored, self._settle_stored(batch, signals, results)))
        self._outbox.put(Settle(batch.session, settled.dispositions, settled.acknowledged))
        new, duplicate = _new_and_duplicate(results)
        refusals, self._refusals = self._refusals, []
        enforced = sum(1 for kind, *_ in refusals if kind == "enforced")
        self.metrics.stored(len(batch.messages), time.perf_counter() - started, new=new, duplicate=duplicate,
                            dropped=settled.rejected - enforced, enforced=enforced)
        if refusals:  # what the batch refused, in the connection's log: one transaction, after the batch
            self._log_all(refusals)

    def _settle_unstored(self, messages: list[Message]) -> tuple[_SettledNow, list[tuple[Message, Any]]]:
        """What of a batch is settled without storing it (refused by its source's enforcement, an
        acknowledgement), and the signals to store, in order."""
        parts: list[_SettledNow] = []
        signals: list[tuple[Message, Any]] = []
        for message in messages:
            try:
                envelope = self._envelope(message)
            except errors.DittoError as unreadable:  # what a sender nested past the bounds: poison
                parts.append(self._reject(message, None, unreadable.to_json()))
                continue
            topic = envelopes.topic_of(envelope)  # read once: a checked message keeps it for the ledger
            refusal = _enforcement_refusal(message, topic)
            if refusal is not None:
                parts.append(self._reject(message, envelope, refusal, kind="enforced"))
            elif topic is not None and topic.is_acknowledgement:
                parts.append(self._acknowledgement(message, envelope))
            else:
                signals.append((message, envelope))
        return _joined(parts), signals

    def _settle_stored(self, batch: Batch, signals: list[tuple[Message, Any]],
                       results: list[Stored | None]) -> _SettledNow:
        """What the ledger stored: settled now (given back, refused, acked, or from a decision its
        signal already had), or held until its decision."""
        parts: list[_SettledNow] = []
        hold: list[tuple[int, Delivery]] = []
        decided: list[tuple[Message, Stored]] = []
        for (message, envelope), stored in zip(signals, results):
            if stored is None:  # a transient failure while isolating: back to the broker
                parts.append(_SettledNow({message.tag: GIVE_BACK}))
            elif not stored.ok:
                parts.append(self._reject(message, envelope, stored.answer))
            else:
                if stored.decision is not None:
                    decided.append((message, stored))
                elif stored.awaits_decision:
                    hold.append((stored.signal_id, Delivery(batch.session, message.tag)))
                else:
                    parts.append(self._acked_at_once(message))
        if self._current(batch):
            self._held.hold(hold)
        if decided:
            parts.append(self._settle_from_decisions(decided))
        return _joined(parts)

    def _acked_at_once(self, message: Message) -> _SettledNow:
        """A message that waits for no decision: acked now (QoS 0, an acknowledgement stored)."""
        return _SettledNow({message.tag: ACK}, acknowledged=1)

    def _ingest_waiting_out_outages(self, batch: Batch,
                                    signals: list[tuple[Message, Any]]) -> list[Stored | None] | None:
        """The batch stored, trying again while the database is away (its deliveries stay held);
        None when it no longer can be settled (its session closed) or the connector stops."""
        while self._current(batch):
            try:
                results: list[Stored | None] = list(self._ingest(signals))
            except Exception as problem:  # noqa: BLE001 — sorted into transient or not, never lost
                if failures.is_transient(problem):  # a deadlock, a restart of the database
                    if self._interrupt.is_set():
                        return None
                    self._interrupt.wait(self._storing_outage.failed(
                        f"storing {len(signals)} messages: {described(problem)}"))
                    continue
                # The same batch would fail the same way forever: find the message that causes it.
                log.warning("connector %s: storing %d messages failed (%s); storing them one by one",
                            self.config.id, len(signals), described(problem))
                results = self._ingest_one_by_one(signals)
            self._storing_outage.recovered()
            return results
        return None

    def _ingest(self, signals: list[tuple[Message, Any]]) -> list[Stored]:
        return self.store.ingest([e for _, e in signals], api="connectivity", source=self.config.id,
                                 source_message_ids=[m.key for m, _ in signals])

    def _ingest_one_by_one(self, signals: list[tuple[Message, Any]]) -> list[Stored | None]:
        """Each message in a transaction of its own: a message the ledger refuses for good is
        answered with the error (and rejected); one that fails transiently goes back to the broker
        (None); the others are stored. A message stored before a crash here is recognised when it
        comes back (its key), so nothing is stored twice."""
        results: list[Stored | None] = []
        for item in signals:
            faults.checkpoint("connector:isolating")
            try:
                (stored,) = self._ingest([item])
            except Exception as problem:  # noqa: BLE001
                if failures.is_transient(problem):
                    log.warning("connector %s: message %r could not be stored (%s); it goes back to the broker",
                                self.config.id, item[0].key, described(problem))
                    stored = None
                else:
                    log.error("connector %s: message %r cannot be stored (%s); rejected", self.config.id,
                              item[0].key, described(problem))
                    stored = Stored(errors.message_not_storable(described(problem)).to_json())
            results.append(stored)
        return results

    def _envelope(self, message: Message) -> Any:
        """The envelope to store for ``message``; a client error when its transport's values nest
        past the bounds (its headers, or what the transport could not read: :attr:`Message.unreadable`)."""
        if message.unreadable is not None:
            raise message.unreadable
        envelope = connectivity.inbound_envelope(message.body, message.headers, message.properties,
                                                 includes=message.source.includes,
                                                 max_bytes=self.store.settings.max_envelope_bytes)
        if isinstance(envelope, dict) and not message.source.reply_target.is_default:
            # the result goes where the source's reply target says, or nowhere
            headers = {k: v for k, v in envelope["headers"].items() if k != connectivity.REPLY_TO}
            reply_to = _answer_address(message, envelope)
            if reply_to:
                headers[connectivity.REPLY_TO] = reply_to
            envelope = type(envelope)(envelope, headers=headers)  # a CheckedMessage stays one: a header less, text added
        return envelope

    def _reject(self, message: Message, envelope: Any, error: dict[str, Any], kind: str = "dropped") -> _SettledNow:
        """A client error: never redelivered (B.9), answered on reply-to, and in the connection's
        log (``kind``: dropped, or refused by the source's enforcement)."""
        self._refusals.append((kind, f"{error.get('status')} {error.get('error')}: {error.get('message')}", message.key,
                               None))
        log.info("connector %s: rejected message %r: %s %r", self.config.id,
                 message.properties.get("message_id") or "(no id)", error.get("error"), error.get("message"))
        self._outbox.put(Reply(_answer_address(message, envelope), wire.error_reply(error, envelope, message.correlation_id)))
        return _SettledNow({message.tag: connectivity.CLIENT_ERROR}, rejected=1)

    def _acknowledgement(self, message: Message, envelope: dict[str, Any]) -> _SettledNow:
        """An ack the connection sends through its source, checked against its declared labels."""
        subscriber = self.config.subscriber_id(0 if self.config.targets else None)
        answer = self.store.acknowledge(subscriber, envelope)
        if answer["status"] == 204:
            return self._acked_at_once(message)
        return self._reject(message, envelope, answer)

    def _settle_from_decisions(self, items: list[tuple[Message, Stored]]) -> _SettledNow:
        """Copies of messages whose signal is decided: settled at once from that decision."""
        with self.store.engine.begin() as conn:
            first = settlements.record_latest(conn, {stored.signal_id for _, stored in items})
        dispositions = {message.tag: self.transport.disposition(stored.decision) for message, stored in items}
        # carried out here only if this recorded it (the delivery that held it went back unsettled);
        # a copy of one carried out before is a duplicate, and acknowledged, not carried out twice
        count_carried_out(self.metrics, self.transport, first)
        return _SettledNow(dispositions, acknowledged=len(items))



def _new_and_duplicate(results: list[Stored | None]) -> tuple[int, int]:
    """How many of a batch's messages the ledger stored as new signals, and how many it had stored before."""
    stored = [s.retransmitted for s in results if s is not None and s.ok]
    duplicate = sum(stored)
    return len(stored) - duplicate, duplicate


def _answer_address(message: Message, envelope: Any) -> str | None:
    """Where a message's answers go: its reply-to — the envelope's header, or the protocol's
    (AMQP reply_to, MQTT 5 response topic) — as its source's reply target says."""
    reply_to = message.properties.get("reply_to")
    if isinstance(envelope, dict) and isinstance(envelope["headers"].get(connectivity.REPLY_TO), str):
        reply_to = envelope["headers"][connectivity.REPLY_TO]
    return message.source.reply_target.address_for(reply_to)


def _enforcement_refusal(message: Message, topic: envelopes.Topic | None) -> dict[str, Any] | None:
    """The error refusing a message its source's enforcement does not allow; None: allowed (or
    no thing to check: the ledger answers a malformed envelope)."""
    enforcement = message.source.enforcement
    if enforcement is None or topic is None or topic.thing is None:
        return None
    thing_id = topic.thing[0]
    if enforcement.allows(enforcement.input_of(message.address, message.headers), thing_id):
        return None
    return errors.enforcement_failed(thing_id).to_json()

