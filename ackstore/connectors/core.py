"""What a connector does beyond its protocol: QoS 1 from a broker through the ledger (B.7, B.9,
A.2.6, A.2.10), for any :class:`Transport` (AMQP 0.9.1, AMQP 1.0, MQTT 3.1.1 and 5, HTTP push: targets only).

One process per connection. Its sources' messages are stored in batches (``AckStore.ingest``)
and only then considered received:

* a client error (bad JSON, unknown topic, invalid labels, zero timeout with acks, too large)
  is settled at once as a client error (never redelivered) and answered on its reply-to;
* a message that requested no acks is settled at once (QoS 0);
* every other delivery is held until the pipeline decides. The settle step notifies
  ``ackstore_settlements`` (the connector also polls); the connector records that it carries
  each decision out, then the transport settles the delivery on the session that received it,
  as its protocol carries that decision out, and the result is published to the reply-to when
  a response is required;
* a redelivered copy is recognised by its key (A.3): never stored twice; settled at once from a
  decision its signal already has, or opening the next attempt after a redeliver decision;
* an answer or a target's message the protocol cannot carry (a sender's reply-to or correlation
  id past its limits) is dropped, said in one line and counted: no message stops a connector.

Three threads overlap the work, with bounded hand-overs so memory stays flat under a backlog:

* the broker's thread (the only one that touches the transport's session) receives deliveries
  into batches and settles deliveries; it stops reading from the socket while the batches
  waiting to be stored are at their bound;
* the storing thread stores each batch and hands back what to settle at once and what to hold;
* the deciding thread listens for the settle step, records the decisions carried out and hands
  back their deliveries.

A database that is away is said once and asked again after waits that double
(:mod:`ackstore.connectors.outage`); a batch waits for it in memory, its deliveries held.
Stopping, the connector stores what it received, carries out what is decided, and gives back
every other delivery. What it does is counted in its metrics (:mod:`ackstore.connectors.metrics`,
served with ``--metrics-port``), once per batch or settle round — its status line, every ten
seconds, says the same figures by the same names (:func:`status_line`) — and what it could not do
goes in its connection's log (``ackstore connection logs``). If the process dies, the broker
redelivers what it held; nothing is lost or applied twice.
"""

from __future__ import annotations

import abc
import collections
import logging
import queue
import signal
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping, NamedTuple

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from ackstore import faults
from ackstore.connectors.config import ConnectionConfig, Source
from ackstore.connectors.held import Delivery, Held
from ackstore.connectors.metrics import INBOUND, ConnectorMetrics
from ackstore.connectors.options import Options
from ackstore.connectors.outage import Outage
from ackstore.ledger import connection_log, failures, settlements
from ackstore.ledger.ingest import Stored
from ackstore.ledger.store import AckStore
from ackstore.rules import connectivity, envelopes, errors, jsontext, wire
from ackstore.rules.connectivity import Settling
from ackstore.rules.thresholds import CONNECTOR_HEARTBEAT_SECONDS

log = logging.getLogger("ackstore.connector")

GIVE_BACK = Settling(ack=False, requeue=True, given_back=True)  # undecided deliveries return to the broker
ACK = Settling(ack=True)


@dataclass
class Counts:
    """What the connector counts beside its metrics, since it started."""

    taken: int = 0  # deliveries the session handed over (what --max-messages bounds; consumed, once in a batch)
    given_back: int = 0
    reconnects: int = 0


def status_line(metrics: ConnectorMetrics, counts: Counts, in_flight: int) -> str:
    """What the connector says every ten seconds and when it stops: its metrics' figures under
    their names — the same counts, so each means what the name means on every surface
    (docs/metrics.md, "One meaning per number"; decisions #128) — then what only this line says."""
    figures, carried_out = metrics.figures()
    inbound = ", ".join(f"{name} {figures[name]}" for name in INBOUND)
    decided = ", ".join(f"{decision} {count}" for decision, count in carried_out.items()) or "none"
    return (f"{inbound}, carried out: {decided}; in flight {in_flight}; given back {counts.given_back}; "
            f"published {figures['published']}; reconnects {counts.reconnects}; unsendable {figures['unsendable']}")


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


@dataclass(frozen=True)
class _Batch:
    session: int
    messages: list[Message]


@dataclass(frozen=True)
class _Settle:
    """Deliveries for the broker's thread to settle."""

    session: int
    dispositions: dict[int, Settling]  # delivery tag -> how
    acknowledged: int = 0  # how many of them carry a settlement out (not a refusal, not a give-back)


@dataclass(frozen=True)
class _Reply:
    reply_to: str | None
    message: dict[str, Any]


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


class Connector:
    """Run one connection until SIGTERM (or ``max_messages`` / ``once``)."""

    def __init__(self, store: AckStore, config: ConnectionConfig, transport: Transport,
                 options: Options | None = None, metrics: ConnectorMetrics | None = None) -> None:
        self.store = store
        self.config = config
        self.transport = transport
        self.options = options or Options()
        self.metrics = metrics or ConnectorMetrics(config.id, config.connection_type)
        self.counts = Counts()
        self.stopping = False  # set by SIGTERM / SIGINT
        self._held = Held()
        self._to_store: queue.Queue[_Batch] = queue.Queue(maxsize=max(1, self.options.batches_waiting))
        self._outbox: queue.SimpleQueue[_Settle | _Reply] = queue.SimpleQueue()  # to the broker's thread
        self._interrupt = threading.Event()  # stopping was asked: waits for the database end
        self._done = threading.Event()  # the helper threads end
        self._final_pass = threading.Event()  # the deciding thread's last pass is asked for …
        self._final_pass_done = threading.Event()  # … and done
        self._broken: BaseException | None = None  # a helper thread's unexpected failure
        self.failure: errors.DittoError | None = None  # why it exits non-zero, in Ditto's shape (the CLI prints it)
        self._session = 0  # the broker connection in use (a delivery tag is only valid on it)
        self._live_session: int | None = None
        self._consuming = False
        self._buffer: list[Message] = []
        self._buffer_since = 0.0
        self._backoff_s = self.options.reconnect_s
        self._storing_outage = self._outage("the database (storing messages)")
        self._deciding_outage = self._outage("the database (reading decisions)")
        self._broker_out = self.metrics.outages.watcher("broker")
        self._broker_down: tuple[datetime, float, str] | None = None  # since when (wall clock, monotonic), why
        self._word_failing = False  # the last word to the ledger (connector_seen) failed: said once
        self._refusals: list[tuple[str, str, str | None, datetime | None]] = []  # the batch's (storing thread)
        self.metrics.watch_in_flight(self._held.__len__)

    # --- lifecycle ----------------------------------------------------------------------------

    def run(self) -> int:
        self._install_signal_handlers()
        for warning in self.transport.warnings(self.store, self.options):
            log.warning("connector %s: %s", self.config.id, warning)
        if not self._declare():
            return 1
        threads = [self._start(self._storing, "storing"), self._start(self._deciding, "deciding")]
        targets = self.transport.targets(self.store, self._outage("the database (targets)"), self._done,
                                         self._target_answers, self._dropped)
        if targets is not None:
            threads.append(self._start(targets, "targets"))
        try:
            while not self.stopping and self._broken is None and self.failure is None:
                try:
                    if self._run_session():
                        break
                except self.transport.lost as problem:
                    self._lost(problem)
        finally:
            self._done.set()
            self._interrupt.set()
            for thread in threads:
                thread.join(30)
            log.info("connector %s stopped: %s", self.config.id, self._status())
        if self._broken is not None:
            log.error("connector %s: a thread failed: %s", self.config.id, described(self._broken))
            return 1
        if self.failure is not None:
            log.error("connector %s: %s", self.config.id, self.failure.message)
            return 1
        if not any(thread.is_alive() for thread in threads):  # else a last word of its running may follow
            self._say_it_stopped()
        return 0

    @property
    def connection_name(self) -> str:
        """How the broker's management tools name this connector's connection."""
        return connection_name(self.config)

    def stop(self, *_: object) -> None:
        """SIGTERM / SIGINT: only a flag (a signal handler must not log); the loop acts on it."""
        self.stopping = True

    def _install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def _declare(self) -> bool:
        """Claim the connection for this database login (issue 37: only it stores and settles the
        connection's messages), then declare its labels for each target (one group, B.3)."""
        claimed = self.store.claim_connection(self.config.id)
        if claimed["status"] != 204:
            log.error("connector %s: %s", self.config.id, claimed["message"])
            return False
        self._say_it_runs()  # at once: a clean stop it said before no longer spares it (decisions #133)
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

    def _outage(self, what: str) -> Outage:
        return Outage(f"connector {self.config.id}: {what}", log, self.options.reconnect_s,
                      self.options.max_reconnect_s, self.metrics.outages.watcher("ledger"),
                      ended=lambda began, said: self._log("outage", said, happened_at=began))

    def _log(self, kind: str, detail: str, message_id: str | None = None, happened_at: datetime | None = None) -> None:
        """One failure in the connection's log (``ackstore connection logs``)."""
        self._log_all([(kind, detail, message_id, happened_at)])

    def _log_all(self, entries: list[tuple[str, str, str | None, datetime | None]]) -> None:
        """Failures in the connection's log, in one transaction. It never holds the connector up:
        entries the ledger does not take are said in the process's log instead."""
        try:
            with self.store.engine.begin() as conn:
                for kind, detail, message_id, happened_at in entries:
                    connection_log.record(conn, self.config.id, kind, detail, message_id=message_id,
                                          happened_at=happened_at)
        except Exception as problem:  # noqa: BLE001 — the log is a courtesy; the work goes on
            log.warning("connector %s: the connection log did not take %d entries (%s)", self.config.id,
                        len(entries), described(problem))

    def _start(self, work: Callable[[], None], name: str) -> threading.Thread:
        """A helper thread; an unexpected failure in it stops the connector (its deliveries go back)."""
        def guarded() -> None:
            try:
                work()
            except BaseException as problem:  # noqa: BLE001 — reported by run()
                self._broken = problem
                self._interrupt.set()
                log.exception("connector %s: the %s thread failed", self.config.id, name)
        thread = threading.Thread(target=guarded, name=f"connector-{name}", daemon=True)
        thread.start()
        return thread

    def _target_answers(self, count: int, confirmed: bool) -> None:
        """The broker's answers to ``count`` publishes of the targets (their thread)."""
        self.metrics.target_answers(count, confirmed=confirmed)

    def _status(self) -> str:
        return status_line(self.metrics, self.counts, len(self._held))

    def _run_session(self) -> bool:
        """One broker connection; True when the connector is done, False to reconnect."""
        self._session += 1
        self._live_session = self._session  # before connecting: a message may come with the handshake
        self._consuming = True
        session: Session | None = None
        try:
            session = self.transport.connect(self._on_message)
            self._broker_back()
            self._backoff_s = self.options.reconnect_s  # connected and consuming: start over
            log.info("connector %s: consuming %s (batches of %d)", self.config.id, self.transport.consuming(),
                     self.options.batch_size)
            return self._loop(session)
        finally:
            self._live_session = None  # unsettled deliveries go back to the broker with the session
            self._held.forget(self._session)
            self.metrics.consumed(len(self._buffer))  # consumed all the same, back to the broker
            self._buffer.clear()
            if session is not None:
                session.close()

    def _lost(self, problem: BaseException) -> None:
        """Wait, longer after each failure in a row (a missing queue, a broker that is down)."""
        self.counts.reconnects += 1
        self._broker_out(True)
        if self._broker_down is None:
            self._broker_down = (datetime.now(timezone.utc), time.monotonic(), described(problem))
        wait_s = self._backoff_s
        if self.options.once:  # taking what waits now: an unreachable broker is tried for a bounded time
            left = self.options.once_broker_wait_s - (time.monotonic() - self._broker_down[1])
            if left <= 0:
                self.failure = errors.connection_failed(
                    f"The broker of connection '{self.config.id}' was unreachable for "
                    f"{self.options.once_broker_wait_s:g} s ({self.counts.reconnects} attempts): {described(problem)}.")
                began, since, why = self._broker_down
                self._log("outage", f"the broker unavailable for {time.monotonic() - since:.1f} s, given up: {why}",
                          happened_at=began)
                return
            wait_s = min(wait_s, left)
        log.warning("connector %s: broker connection lost (%s); reconnecting in %.1f s — held deliveries "
                    "return to the broker and are recognised when redelivered", self.config.id, problem, wait_s)
        deadline = time.monotonic() + wait_s
        while not self.stopping and time.monotonic() < deadline:
            time.sleep(0.1)
        self._backoff_s = min(self._backoff_s * 2, self.options.max_reconnect_s)

    def _broker_back(self) -> None:
        """Connected: an outage of the broker, if one was going on, ends (and goes in the log)."""
        self._broker_out(False)
        if self._broker_down is not None:
            began, since, problem = self._broker_down
            self._broker_down = None
            self._log("outage", f"the broker unavailable for {time.monotonic() - since:.1f} s: {problem}",
                      happened_at=began)

    # --- the broker's thread ------------------------------------------------------------------

    def _loop(self, session: Session) -> bool:
        next_report = next_heartbeat = 0.0
        idle_rounds = 0
        while True:
            now = time.monotonic()
            if not self._to_store.full() or now >= next_heartbeat:
                # a full hand-over leaves the socket unread (the broker holds back), but not so
                # long that the broker misses our heartbeats
                session.process(0 if self._to_store.full() else self.options.linger_s)
                next_heartbeat = now + 1.0
            else:
                time.sleep(0.005)
            idle_rounds = 0 if self._hand_over() else idle_rounds + 1
            self._settle_what_is_handed_back(session)
            if now >= next_report:
                log.info("connector %s: %s", self.config.id, self._status())
                next_report = now + 10
            if self._limit_reached():
                self._stop_consuming(session)
            if self.stopping or self._broken is not None or self._finished(idle_rounds):
                self._wind_down(session)
                return True
            if session.wants_reconnect():
                self.counts.reconnects += 1
                log.info("connector %s: reconnecting so that the broker sends again what was not acknowledged "
                         "(a redeliver decision with reconnectForRedelivery, or a batch that could not be stored)",
                         self.config.id)
                self._drain(session)
                return False

    def _on_message(self, message: Message) -> None:
        if not self._consuming:  # stopped consuming: the broker keeps it (sent again next session)
            return
        if not self._buffer:
            self._buffer_since = time.monotonic()
        self._buffer.append(message)
        self.counts.taken += 1

    def _hand_over(self, everything: bool = False) -> bool:
        """Full batches (or a partial one that waited long enough) to the storing thread."""
        if not self._buffer or not (everything or len(self._buffer) >= self.options.batch_size
                                    or time.monotonic() - self._buffer_since >= self.options.linger_s):
            return False
        size = self.options.batch_size
        while self._buffer:
            batch = _Batch(self._session, self._buffer[:size])
            try:
                self._to_store.put_nowait(batch)
            except queue.Full:
                break
            del self._buffer[:size]
            self.metrics.consumed(len(batch.messages))
        return True

    def _settle_what_is_handed_back(self, session: Session) -> None:
        """Settle what the other threads decided, then publish their replies."""
        dispositions: dict[int, Settling] = {}
        replies: list[_Reply] = []
        acknowledged = 0
        while True:
            try:
                item = self._outbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Reply):
                replies.append(item)
            elif item.session == self._live_session:  # a closed session's deliveries went back
                dispositions.update(item.dispositions)
                acknowledged += item.acknowledged
        if dispositions:
            session.settle(dispositions)
            self.metrics.acknowledged(acknowledged)
        if replies:
            self.metrics.replied(sum(self._reply(session, r.reply_to, r.message) for r in replies if r.reply_to))
        for reply_to, why in session.refused_answers():  # the broker's words may quote the address: clipped
            self._dropped(f"the answer to {shown(reply_to)}",
                          Unencodable(f"the broker refused its link: {errors.shown(why, 200)}"))

    def _reply(self, session: Session, reply_to: str, message: dict[str, Any]) -> bool:
        """The one place answers are published: one the protocol cannot carry (the transport's
        rule says so, or — the backstop — its library fails to encode it) is dropped, never
        raised; a sender chose what makes it so, and everything else goes on. Whether it was sent."""
        try:
            return session.reply(reply_to, message)
        except (Unencodable, *self.transport.unencodable) as problem:
            self._dropped(f"the answer to {shown(reply_to)}", problem)
            return False

    def _dropped(self, what: str, problem: BaseException) -> None:
        """A message the protocol cannot carry: said in one line, counted (any thread)."""
        self.metrics.unsendable()
        why = str(problem) if isinstance(problem, Unencodable) else described(problem)
        self._log("unsendable", f"{what} is dropped, {self.config.connection_type} cannot carry it: {why}")
        log.warning("connector %s: %s is dropped, %s cannot carry it: %s", self.config.id, what,
                    self.config.connection_type, shown(why, 300)[1:-1])  # our words, escaped all the same

    def _limit_reached(self) -> bool:
        limit = self.options.max_messages
        return limit is not None and self.counts.taken >= limit and self._consuming

    def _idle(self) -> bool:
        """Nothing received waits to be stored, nothing stored waits to be settled."""
        return not self._buffer and self._to_store.unfinished_tasks == 0 and self._outbox.empty()

    def _finished(self, idle_rounds: int) -> bool:
        if self.options.once:
            return idle_rounds >= 3 and self._idle()
        if self.options.max_messages is not None and self.counts.taken >= self.options.max_messages:
            return self._idle() and not len(self._held)
        return False

    def _stop_consuming(self, session: Session) -> None:
        """Take no more; what already arrived was delivered to us and is stored."""
        session.stop_consuming()
        self._consuming = False

    def _wind_down(self, session: Session) -> None:
        """Store what arrived, carry out what is decided, give every other delivery back."""
        log.info("connector %s: stopping — storing what arrived, carrying out what is decided", self.config.id)
        if self.stopping:
            self._interrupt.set()  # a database that is away is not waited for: its batches go back
        self._drain(session)
        self._final_pass.set()
        self._until(session, self._final_pass_done.is_set)
        self._settle_what_is_handed_back(session)
        given = len(self._held)
        if session.give_back():
            self.counts.given_back += given
            log.info("connector %s: gave %d undecided deliveries back to the broker", self.config.id, given)

    def _drain(self, session: Session) -> None:
        """Take no more, store what arrived and settle what comes back: before a stop, and before a
        planned reconnect, so that nothing this session received is thrown away (a QoS-0 message
        would not come again)."""
        self._stop_consuming(session)
        self._until(session, self._all_handed_over)
        self._until(session, lambda: self._to_store.unfinished_tasks == 0)
        self._settle_what_is_handed_back(session)

    def _all_handed_over(self) -> bool:
        self._hand_over(everything=True)
        return not self._buffer

    def _until(self, session: Session, condition: Callable[[], bool]) -> None:
        """Keep the connection alive and settle what comes back until ``condition`` holds."""
        while not condition() and self._broken is None:
            session.process(0.02)
            self._settle_what_is_handed_back(session)

    # --- the storing thread -------------------------------------------------------------------

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

    def _current(self, batch: _Batch) -> bool:
        return batch.session == self._live_session

    def _store_batch(self, batch: _Batch) -> None:
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
        self._outbox.put(_Settle(batch.session, settled.dispositions, settled.acknowledged))
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

    def _settle_stored(self, batch: _Batch, signals: list[tuple[Message, Any]],
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

    def _ingest_waiting_out_outages(self, batch: _Batch,
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
        self._outbox.put(_Reply(_answer_address(message, envelope), error_reply(error, envelope, message.correlation_id)))
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
        self._count_carried_out(first)
        return _SettledNow(dispositions, acknowledged=len(items))

    def _count_carried_out(self, decisions: Iterable[str]) -> None:
        """Settlements carried out, counted once per decision (the storing and the deciding thread both count)."""
        tally = collections.Counter(decisions)
        for decision, count in tally.items():
            self.metrics.carried_out(decision, self.transport.carried_out_as(decision) or decision, count)

    # --- the deciding thread ------------------------------------------------------------------

    def _deciding(self) -> None:
        """Carry decisions out when the settle step notifies this source, and every poll."""
        listener: settlements.Listener | None = None
        next_poll = next_word = 0.0
        try:
            while not self._done.is_set():
                final = self._final_pass.is_set()
                try:
                    if listener is None:
                        listener = settlements.Listener(self.store.engine, self.config.id)
                    notified = not final and listener.wait(0.1)
                    now = time.monotonic()
                    if now >= next_word:
                        next_word = now + CONNECTOR_HEARTBEAT_SECONDS
                        self._say_it_runs()
                    if final or notified or now >= next_poll:
                        next_poll = now + self.options.poll_s
                        self._carry_out_decisions()
                    self._deciding_outage.recovered()
                except DBAPIError as problem:  # nothing was settled: the next try reads again
                    if not final:
                        self._interrupt.wait(self._deciding_outage.failed(described(problem)))
                if final:
                    self._final_pass_done.set()
                    return
        finally:
            if listener is not None:
                listener.close()

    def _say_it_runs(self) -> None:
        """The connector runs, and since when its broker is away if it is (the Ledger page's list
        of connectors, ackstore_connector_last_seen_timestamp_seconds; decisions #130). A word to
        the ledger, never the work's condition: whatever keeps it from the ledger (the database
        away, a grant missing) is said in the process's log, once until it is heard again, and the
        next word tries again — the messages flow meanwhile."""
        down = self._broker_down  # the broker's thread replaces the tuple whole
        self._tell_the_ledger("it runs", lambda conn: connection_log.seen(
            conn, self.config.id, down[0] if down is not None else None))

    def _say_it_stopped(self) -> None:
        """The connector stopped cleanly (SIGTERM or SIGINT, its --once or --max-messages done): the
        Ledger page lists it as stopped and the down alert spares it (decisions #133)."""
        self._tell_the_ledger("it stopped", lambda conn: connection_log.stopped(conn, self.config.id))

    def _tell_the_ledger(self, what: str, say: Callable[[Connection], None]) -> None:
        try:
            with self.store.engine.begin() as conn:
                say(conn)
        except Exception as problem:  # noqa: BLE001 — a word to the operator, never a reason to stop
            if not self._word_failing:
                log.warning("connector %s: could not tell the ledger %s (%s); it tries again every %d s, "
                            "its messages flow meanwhile", self.config.id, what, described(problem),
                            CONNECTOR_HEARTBEAT_SECONDS)
            self._word_failing = True
            return
        if self._word_failing:
            log.info("connector %s: the ledger hears it again", self.config.id)
        self._word_failing = False

    def _carry_out_decisions(self) -> None:
        with self.store.engine.begin() as conn:
            undone = settlements.undone(conn, self.config.id)
        taken = self._held.take(d.signal_id for d in undone)
        mine = [d for d in undone if d.signal_id in taken]
        at_once = [d for d in undone if d.signal_id not in taken and not d.held_for_decision]
        if not mine and not at_once:
            return
        instead: dict[str | None, list[tuple[int, int]]] = {}  # what the transport does instead -> decisions
        for d in mine:
            instead.setdefault(self.transport.carried_out_as(d.decision), []).append((d.signal_id, d.attempt))
        try:
            with self.store.engine.begin() as conn:  # recorded first: see decisions #33
                for carried_out_as, decisions in instead.items():
                    settlements.record_carried_out(conn, decisions, held=True, carried_out_as=carried_out_as)
                first = settlements.record_carried_out(conn, [(d.signal_id, d.attempt) for d in at_once], held=False)
                to_publish = settlements.replies(conn, [*mine, *(d for d in at_once if d.signal_id in first)])
        except BaseException:
            self._held.put_back(taken)
            raise
        faults.checkpoint("connector:recorded")
        by_session: dict[int, dict[int, Settling]] = {}
        for decided in mine:
            disposition = self.transport.disposition(decided.decision)
            for delivery in taken[decided.signal_id]:
                by_session.setdefault(delivery.session, {})[delivery.tag] = disposition
        # what this process carried out: its held deliveries' decisions, and those it recorded
        # first for deliveries settled at once (QoS 0) — as the ledger counts them, once each
        self._count_carried_out([*(d.decision for d in mine), *(d.decision for d in at_once if d.signal_id in first)])
        for session, dispositions in by_session.items():
            self._outbox.put(_Settle(session, dispositions, len(dispositions)))
        for reply in to_publish:
            self._outbox.put(_Reply(reply.reply_to, result_reply(reply)))


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


def connection_name(config: ConnectionConfig) -> str:
    """How the broker's management tools name a connector's connection."""
    return f"ackstore connector {config.id}"


def shown(text: str, limit: int = 100) -> str:
    """Sender-chosen text as a log line may show it: clipped, quoted, and every character a
    terminal acts on (or no UTF-8 can hold) written as its escape (``\\x1b``, ``\\u202e``, ``\\ud800``)."""
    return repr(errors.shown(text, limit))


def json_payload(message: dict[str, Any]) -> bytes:
    """The JSON text a published Ditto message carries; :class:`Unencodable` when it holds text
    no UTF-8 can (a lone surrogate a sender's JSON escaped)."""
    try:
        return jsontext.dumps(message).encode()
    except UnicodeError:
        raise Unencodable("its JSON holds a lone surrogate, which UTF-8 cannot") from None


def described(problem: BaseException) -> str:
    """A failure as a log line may show it: its type and first line (no statement, no values)."""
    cause = getattr(problem, "orig", None) or problem
    first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
    return f"{type(cause).__name__}: {first[:200]}" if first else type(cause).__name__


def error_reply(error: dict[str, Any], envelope: Any, correlation_id: str | None) -> dict[str, Any]:
    """The Ditto Protocol error message answering a refused message."""
    thing: tuple[str, str] | None = None
    topic = envelopes.topic_of(envelope) if isinstance(envelope, dict) else None
    if topic is not None:
        thing = topic.thing
        headers = envelope.get("headers")
        if isinstance(headers, dict) and isinstance(headers.get("correlation-id"), str):
            correlation_id = headers["correlation-id"]
    thing_id, channel = thing or (None, "twin")
    return wire.error_message(error, thing_id=thing_id, channel=channel, correlation_id=correlation_id)


def result_reply(decided: settlements.Reply) -> dict[str, Any]:
    """The Ditto Protocol message carrying a decided result."""
    return wire.result_message(
        thing_id=decided.thing_id, channel=decided.channel, topic=decided.topic, path=decided.path,  # type: ignore[arg-type]
        correlation_id=decided.correlation_id, cause=decided.cause, status=decided.status, body=decided.body,
        ack_statuses=decided.ack_statuses or {},
    )
