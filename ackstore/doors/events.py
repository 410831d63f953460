"""Server-sent events (issue 51): ``GET /api/2/things`` with ``Accept: text/event-stream`` streams
the twins' changes as Ditto's SSE does — each event's ``data`` the changed part of the thing, its
``id`` the event's position in the ledger's event log, so a client that reconnects with
``Last-Event-ID`` resumes where it was, missing nothing. ``filter`` (RQL) and ``namespaces``
select events as a subscriber's declaration does (``subscriptions.exclusion``, one rule). The
log is read every ``POLL_S`` (the pipeline writes events a pass at a time), at most ``BATCH``
events a read, once for all of a login's streams (:class:`Tail`: as the login, so a stream sees
what its login may read); a stream behind the tail — resumed from long ago — reads on its own until
it caught up. A stream says it is alive every ``KEEP_ALIVE_S``.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import itertools
import logging
import time
from typing import Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import StreamingResponse

from ackstore.doors.door import Door
from ackstore.doors.logins import VERIFIED_FOR_S, Login
from ackstore.ledger import declarations, things
from ackstore.ledger.store import AckStore
from ackstore.rules import errors, jsontext, subscriptions

POLL_S = 1.0
BATCH = 500
TAIL_KEPT = 10_000  # the newest events a login's tail keeps for its streams
KEEP_ALIVE_S = 15.0
EVENT_STREAM = "text/event-stream"
MAX_STREAMS_PER_LOGIN = 100  # open at once; 429 past it
log = logging.getLogger("ackstore.doors")


def wants_events(request: Request) -> bool:
    return EVENT_STREAM in request.headers.get("accept", "")


async def stream(door: Door, request: Request) -> StreamingResponse:
    login = await door.login_of(request)
    namespaces = request.query_params.get("namespaces")
    chosen = subscriptions.Subscriber("sse", ("twin",), tuple(namespaces.split(",")) if namespaces else None,
                                      request.query_params.get("filter"))
    declarations.check_namespaces(chosen.namespaces)
    if chosen.filter is not None:
        parsed = subscriptions.parsed_filter(chosen.filter)  # a bad filter: 400 before the stream starts
        if isinstance(parsed, errors.DittoError):
            raise parsed
    position = _resume_at(request.headers.get("last-event-id"))
    if position is None:
        position = await asyncio.to_thread(_last_event, login.store)
    if door.streams[login.name] >= MAX_STREAMS_PER_LOGIN:
        raise errors.too_many_requests("event streams", MAX_STREAMS_PER_LOGIN)
    return StreamingResponse(_events(door, request, login, chosen, position), media_type=EVENT_STREAM,
                             headers={"cache-control": "no-cache"})


def _resume_at(last_event_id: str | None) -> int | None:
    if last_event_id is None:
        return None
    if not last_event_id.isdigit() or len(last_event_id) > 18:
        raise errors.header_invalid_type("Last-Event-ID", last_event_id[:64], "event position (a whole number)")
    return int(last_event_id)


async def _events(door: Door, request: Request, login: Login, chosen: subscriptions.Subscriber,
                  position: int) -> AsyncIterator[str]:
    """The stream, counted among its login's while it lasts; it ends when the client goes, or when
    its credentials no longer pass (checked as a new request's are, every ``VERIFIED_FOR_S``)."""
    door.streams[login.name] += 1
    try:
        async for event in _read_on(request, login, chosen, position, door):
            yield event
    finally:
        door.streams[login.name] -= 1
        if not door.streams[login.name]:
            del door.streams[login.name]


class Tail:
    """The newest events of the log as one login reads them, kept for all its streams: one read a
    ``POLL_S`` however many streams the login has open (rather than one each). It holds every event
    after ``floor`` up to ``position``; it runs while a stream uses it."""

    def __init__(self, store: AckStore, position: int) -> None:
        self.store = store
        self.floor = self.position = position
        self.rows: collections.deque[Any] = collections.deque()
        self.users = 0
        self.reads = 0  # reads so far: a stream waits for one after the last it looked at
        self.read = asyncio.Condition()
        self.task: asyncio.Task[None] | None = None

    def after(self, position: int) -> tuple[list[Any] | None, int]:
        """The events after ``position`` (at most ``BATCH``) — None when the tail does not reach
        back to it: the stream reads those itself — and the read they are of."""
        if position < self.floor:
            return None, self.reads
        first = bisect.bisect_right(self.rows, position, key=lambda row: row.id)
        return list(itertools.islice(self.rows, first, first + BATCH)), self.reads

    async def wait(self, seen: int, seconds: float) -> None:
        """Until a read after read ``seen``, or ``seconds``."""
        async with self.read:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.read.wait_for(lambda: self.reads > seen), seconds)

    @contextlib.asynccontextmanager
    async def used(self) -> AsyncIterator[Tail]:
        self.users += 1
        if self.task is None:
            self.task = asyncio.create_task(self._run())
        try:
            yield self
        finally:
            self.users -= 1
            if not self.users and self.task is not None:
                self.task.cancel()
                self.task = None

    async def _run(self) -> None:
        while True:
            try:
                rows = await asyncio.to_thread(_read, self.store, self.position)
            except Exception:  # noqa: BLE001 — the database away: read again later; each stream checks its login
                log.warning("reading the event log failed", exc_info=True)
                rows = []
            self.rows.extend(rows)
            while len(self.rows) > TAIL_KEPT:
                self.floor = self.rows.popleft().id
            if rows:
                self.position = rows[-1].id
            async with self.read:
                self.reads += 1
                self.read.notify_all()
            if len(rows) < BATCH:
                await asyncio.sleep(POLL_S)


async def _tail(login: Login) -> Tail:
    """The login's tail, made at the log's end when its first stream opens."""
    if login.events_tail is None:
        position = await asyncio.to_thread(_last_event, login.store)  # the log read only to make it
        login.events_tail = login.events_tail or Tail(login.store, position)
    return login.events_tail


async def _read_on(request: Request, login: Login, chosen: subscriptions.Subscriber, position: int,
                   door: Door) -> AsyncIterator[str]:
    tail = await _tail(login)
    async with tail.used():
        async for event in _stream_on(request, login, chosen, position, door, tail):
            yield event


async def _stream_on(request: Request, login: Login, chosen: subscriptions.Subscriber, position: int,
                     door: Door, tail: Tail) -> AsyncIterator[str]:
    said = checked = time.monotonic()
    store = login.store
    while not await request.is_disconnected():
        if time.monotonic() - checked >= VERIFIED_FOR_S:
            try:  # a dropped login, a changed password, an expired token: the stream ends
                store = (await door.login_of(request)).store
            except errors.DittoError:
                return
            checked = time.monotonic()
        rows, seen = tail.after(position)
        if rows is None:  # behind the tail: read on its own until it caught up
            rows = await asyncio.to_thread(_read, store, position)
        for row in rows:
            position = row.id
            view = subscriptions.event_view(row.thing_id, row.action, row.path, row.value)
            if subscriptions.exclusion(chosen, view) is None:
                yield f"id: {row.id}\ndata: {jsontext.dumps(view.thing_shape())}\n\n"
                said = time.monotonic()
        if len(rows) < BATCH:
            if time.monotonic() - said >= KEEP_ALIVE_S:
                yield ":\n\n"  # a comment: the connection lives (and a client gone is found)
                said = time.monotonic()
            await tail.wait(seen, POLL_S)


def _read(store: AckStore, position: int) -> list:
    with store.engine.connect() as conn:
        return things.events_after(conn, position, BATCH)


def _last_event(store: AckStore) -> int:
    with store.engine.connect() as conn:
        return things.last_event(conn)
