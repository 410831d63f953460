"""Concurrent requests stored together (issue 51, item 4): the requests one login makes within a
few milliseconds are one ``AckStore.ingest`` — one transaction, one COPY for a batch — never a
transaction each. Each request still gets its own answer (``ingest.Stored``), in order. A batch is
of one API (B.7's table its signals are answered by): the HTTP API's or the WebSocket's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ackstore.ledger.ingest import Stored
from ackstore.ledger.store import AckStore
from ackstore.rules import http_api
from ackstore.rules.headers import Api

WINDOW_S = 0.002  # how long a request waits for others to share its transaction
MAX_BATCH = 500  # a batch this large is stored at once
IN_FLIGHT = 2  # batches being stored at once: one validated in Python while PostgreSQL stores the other;
# the requests that come meanwhile wait and make the next batch larger (never a connection each)


class Intake:
    """The batches of one login's store, for one API."""

    def __init__(self, store: AckStore, api: Api, *, window_s: float = WINDOW_S,
                 max_batch: int = MAX_BATCH) -> None:
        self.store, self.api = store, api
        self.window_s, self.max_batch = window_s, max_batch
        self._pending: list[tuple[dict[str, Any], str | None, asyncio.Future[Stored]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._storing = 0
        self._tasks: set[asyncio.Task[None]] = set()  # kept until done: the loop holds tasks only weakly

    async def submit(self, envelope: dict[str, Any], message_id: str | None) -> Stored:
        """Store ``envelope`` with the requests beside it; its answer. ``message_id`` None: a fresh one."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Stored] = loop.create_future()
        self._pending.append((envelope, message_id, future))
        if len(self._pending) >= self.max_batch:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self.window_s, self._flush)
        return await future

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._storing >= IN_FLIGHT or not self._pending:
            return  # a batch being stored takes these next, as it ends
        batch, self._pending = self._pending[:self.max_batch], self._pending[self.max_batch:]
        self._storing += 1
        task = asyncio.get_running_loop().create_task(self._store(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _store(self, batch: list[tuple[dict[str, Any], str | None, asyncio.Future[Stored]]]) -> None:
        try:
            await self._stored(batch)
        finally:
            self._storing -= 1
            self._flush()

    async def _stored(self, batch: list[tuple[dict[str, Any], str | None, asyncio.Future[Stored]]]) -> None:
        try:
            stored = await asyncio.to_thread(self.store.ingest, [envelope for envelope, _, _ in batch], api=self.api,
                                             source=http_api.SOURCE, source_message_ids=[message for _, message, _ in batch])
        except Exception as problem:  # noqa: BLE001 — every request of the batch is answered with it
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(problem)
            return
        for (_, _, future), answer in zip(batch, stored):
            if not future.done():
                future.set_result(answer)
