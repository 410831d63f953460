"""What a connector does beyond its protocol: QoS 1 from a broker through the ledger (B.7, B.9,
A.2.6, A.2.10), for any :class:`~ackstore.connectors.transport.Transport` (AMQP 0.9.1, AMQP 1.0, MQTT 3.1.1
and 5, HTTP push: targets only).

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

Three threads overlap the work, with bounded hand-overs so memory stays flat under a backlog
(:mod:`ackstore.connectors.handovers`):

* the broker's thread (the only one that touches the transport's session) receives deliveries
  into batches and settles deliveries; it stops reading from the socket while the batches
  waiting to be stored are at their bound — this module, with the connector's lifecycle;
* the storing thread stores each batch and hands back what to settle at once and what to hold
  (:mod:`ackstore.connectors.storing`);
* the deciding thread listens for the settle step, records the decisions carried out and hands
  back their deliveries (:mod:`ackstore.connectors.deciding`).

A database that is away is said once and asked again after waits that double
(:mod:`ackstore.connectors.outage`); a batch waits for it in memory, its deliveries held.
Stopping, the connector stores what it received, carries out what is decided, and gives back
every other delivery. What it does is counted in its metrics (:mod:`ackstore.connectors.metrics`,
served with ``--metrics-port``), once per batch or settle round — its status line, every ten
seconds, says the same figures by the same names (:func:`ackstore.connectors.status.status_line`)
— and what it could not do goes in its connection's log (``ackstore connection logs``). If the process dies, the broker
redelivers what it held; nothing is lost or applied twice.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable

from ackstore.connectors.config import ConnectionConfig
from ackstore.connectors.deciding import Deciding
from ackstore.connectors.handovers import Batch, Reply, Settle
from ackstore.connectors.held import Held
from ackstore.connectors.logs import described, shown
from ackstore.connectors.metrics import ConnectorMetrics
from ackstore.connectors.options import Options
from ackstore.connectors.outage import Outage
from ackstore.connectors.status import Counts, status_line
from ackstore.connectors.storing import LogEntry, Storing
from ackstore.connectors.transport import Message, Session, Transport, Unencodable, connection_name
from ackstore.ledger import connection_log
from ackstore.ledger.store import AckStore
from ackstore.rules import errors
from ackstore.rules.connectivity import Settling

log = logging.getLogger("ackstore.connector")


class Connector(Storing, Deciding):
    """Run one connection until SIGTERM (or ``max_messages`` / ``once``): the lifecycle and the
    broker's thread here, the storing and the deciding thread's work mixed in."""

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
        self._to_store: queue.Queue[Batch] = queue.Queue(maxsize=max(1, self.options.batches_waiting))
        self._outbox: queue.SimpleQueue[Settle | Reply] = queue.SimpleQueue()  # to the broker's thread
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
        self._refusals: list[LogEntry] = []  # the batch's (storing thread)
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

    def _log_all(self, entries: list[LogEntry]) -> None:
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
            batch = Batch(self._session, self._buffer[:size])
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
        replies: list[Reply] = []
        acknowledged = 0
        while True:
            try:
                item = self._outbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, Reply):
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
