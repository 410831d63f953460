"""Requests held for their decision (issue 51, decisions #134). One thread for the whole door
listens for the sweep's ``ackstore_decisions`` notification and then reads the answers of every
held request in a few statements (``results.latest_of``, by correlation id); it reads again every
``poll_s`` as well, in case a notification was lost while it reconnected. A held request costs a
future and a dictionary entry — never a connection, a thread or a statement of its own.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from sqlalchemy import Engine

from ackstore.ledger import results
from ackstore.ledger.settlements import Listener

log = logging.getLogger("ackstore.doors")

LOOKUP_CHUNK = 1_000  # correlation ids a statement looks up at once


class Decisions:
    """Who waits for which correlation id's decision, and the thread that tells them."""

    def __init__(self, engine: Engine, *, poll_s: float = 2.0) -> None:
        self.engine = engine
        self.poll_s = poll_s
        self._waiting: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[dict[str, Any] | None]]]] = {}
        self._lock = threading.Lock()
        self._released = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ackstore-decisions", daemon=True)

    @property
    def held(self) -> int:
        with self._lock:
            return sum(len(futures) for futures in self._waiting.values())

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def release(self) -> None:
        """The door is stopping: every held request's hold ends now (each is answered 202 with the
        Location of its answer, nothing lost: it is stored), and no new one is held. Safe from a
        signal handler: it only schedules."""
        with self._lock:
            self._released = True
            waiting, self._waiting = self._waiting, {}
        for futures in waiting.values():
            for loop, future in futures:
                loop.call_soon_threadsafe(_resolve, future, None)

    async def wait(self, correlation_id: str, timeout_s: float) -> dict[str, Any] | None:
        """The decision (``status``, ``body``, ``headers``; its ``cause`` and ``ack_statuses`` for a
        socket's answer) once committed, or None after ``timeout_s`` (or at once while the door stops)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, Any] | None] = loop.create_future()
        entry = (loop, future)
        with self._lock:
            if self._released:
                return None
            self._waiting.setdefault(correlation_id, []).append(entry)
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return None
        finally:
            with self._lock:
                futures = self._waiting.get(correlation_id, [])
                if entry in futures:
                    futures.remove(entry)
                if not futures:
                    self._waiting.pop(correlation_id, None)

    # --- the thread -----------------------------------------------------------------------

    def _run(self) -> None:
        listener = None
        while not self._stop.is_set():
            try:
                if listener is None:
                    listener = Listener(self.engine, None, results.DECISIONS_CHANNEL)
                listener.wait(self.poll_s)
                self._tell_decided()
            except Exception:  # noqa: BLE001 — the database away: held requests wait, their hold ends
                log.warning("reading held requests' decisions failed; trying again", exc_info=True)
                if listener is not None:
                    listener.close()
                    listener = None
                self._stop.wait(self.poll_s)
        if listener is not None:
            listener.close()

    def _tell_decided(self) -> None:
        with self._lock:
            waiting = list(self._waiting)
        for start in range(0, len(waiting), LOOKUP_CHUNK):
            with self.engine.connect() as conn:
                found = results.latest_of(conn, waiting[start:start + LOOKUP_CHUNK])
            for correlation_id, row in found.items():
                if row.status is not None:
                    self._tell(correlation_id, {**results.answer(row), "cause": row.cause,
                                                "ack_statuses": row.ack_statuses})

    def _tell(self, correlation_id: str, decision: dict[str, Any]) -> None:
        with self._lock:
            futures = self._waiting.pop(correlation_id, [])
        for loop, future in futures:
            loop.call_soon_threadsafe(_resolve, future, decision)


def _resolve(future: asyncio.Future[dict[str, Any] | None], decision: dict[str, Any] | None) -> None:
    if not future.done():
        future.set_result(decision)
