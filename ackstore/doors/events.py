"""Server-sent events (issue 51): ``GET /api/2/things`` with ``Accept: text/event-stream`` streams
the twins' changes as Ditto's SSE does — each event's ``data`` the changed part of the thing, its
``id`` the event's position in the ledger's event log, so a client that reconnects with
``Last-Event-ID`` resumes where it was, missing nothing. ``filter`` (RQL) and ``namespaces``
select events as a subscriber's declaration does (``subscriptions.exclusion``, one rule). The
stream reads the log every ``POLL_S`` (the pipeline writes events a pass at a time), at most
``BATCH`` events a read, and says it is alive every ``KEEP_ALIVE_S``.
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator

from starlette.requests import Request
from starlette.responses import StreamingResponse

from ackstore.doors.door import Door
from ackstore.doors.logins import VERIFIED_FOR_S, Login
from ackstore.ledger import declarations, things
from ackstore.ledger.store import AckStore
from ackstore.rules import errors, jsontext, subscriptions

POLL_S = 1.0
BATCH = 500
KEEP_ALIVE_S = 15.0
EVENT_STREAM = "text/event-stream"
MAX_STREAMS_PER_LOGIN = 100  # open at once; 429 past it


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


async def _read_on(request: Request, login: Login, chosen: subscriptions.Subscriber, position: int,
                   door: Door) -> AsyncIterator[str]:
    said = checked = time.monotonic()
    store = login.store
    while not await request.is_disconnected():
        if time.monotonic() - checked >= VERIFIED_FOR_S:
            try:  # a dropped login, a changed password: the stream ends
                store = (await asyncio.to_thread(door.logins.login_for, request.headers.get("authorization"))).store
            except errors.DittoError:
                return
            checked = time.monotonic()
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
            await asyncio.sleep(POLL_S)


def _read(store: AckStore, position: int) -> list:
    with store.engine.connect() as conn:
        return things.events_after(conn, position, BATCH)


def _last_event(store: AckStore) -> int:
    with store.engine.connect() as conn:
        return things.last_event(conn)
