"""The connector's deciding thread (a part of :class:`ackstore.connectors.core.Connector`): it
listens for the settle step (``ackstore_settlements``) and polls, records that it carries each
decision out, hands the held deliveries back to the broker's thread to settle and the results to
publish; and it tells the ledger, every heartbeat, that the connector runs."""

from __future__ import annotations

import logging
import queue
import threading
import time
from datetime import datetime
from typing import Any, Callable

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from ackstore import faults
from ackstore.connectors.config import ConnectionConfig
from ackstore.connectors.handovers import Reply, Settle
from ackstore.connectors.held import Held
from ackstore.connectors.logs import described
from ackstore.connectors.metrics import ConnectorMetrics
from ackstore.connectors.options import Options
from ackstore.connectors.outage import Outage
from ackstore.connectors.status import count_carried_out
from ackstore.connectors.transport import Transport
from ackstore.ledger import connection_log, settlements
from ackstore.ledger.store import AckStore
from ackstore.rules import wire
from ackstore.rules.connectivity import Settling
from ackstore.rules.thresholds import CONNECTOR_HEARTBEAT_SECONDS

log = logging.getLogger("ackstore.connector")


class Deciding:
    """The deciding thread's work, mixed into the connector, whose state it shares (below)."""

    store: AckStore
    config: ConnectionConfig
    transport: Transport
    options: Options
    metrics: ConnectorMetrics
    _held: Held
    _outbox: queue.SimpleQueue[Settle | Reply]  # to the broker's thread
    _done: threading.Event
    _interrupt: threading.Event
    _final_pass: threading.Event  # its last pass is asked for …
    _final_pass_done: threading.Event  # … and done
    _deciding_outage: Outage
    _broker_down: tuple[datetime, float, str] | None  # the broker's thread replaces the tuple whole
    _word_failing: bool  # the last word to the ledger failed: said once

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
        count_carried_out(self.metrics, self.transport,
                          [*(d.decision for d in mine), *(d.decision for d in at_once if d.signal_id in first)])
        for session, dispositions in by_session.items():
            self._outbox.put(Settle(session, dispositions, len(dispositions)))
        for reply in to_publish:
            self._outbox.put(Reply(reply.reply_to, result_reply(reply)))



def result_reply(decided: settlements.Reply) -> dict[str, Any]:
    """The Ditto Protocol message carrying a decided result."""
    return wire.result_message(
        thing_id=decided.thing_id, channel=decided.channel, topic=decided.topic, path=decided.path,  # type: ignore[arg-type]
        correlation_id=decided.correlation_id, cause=decided.cause, status=decided.status, body=decided.body,
        ack_statuses=decided.ack_statuses or {},
    )
