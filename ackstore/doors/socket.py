"""Ditto's WebSocket, ``/ws/2`` (issue 51, decisions #136): Ditto Protocol messages in text frames.

A socket acts as the ledger login whose Basic credentials its upgrade request gave (refused 401
before it is accepted), and as that login's subscriber (``ws_protocol.subscriber_of``): the labels
of ``declared-acks`` are declared at connect — the socket is told Ditto's error and closed when
another subscriber holds one — and released when the login's last socket closes. A command is
stored with the commands beside it (``intake``, ``api="websocket"``) and answered on the socket
once the ledger decided it (``held``), as B.7's WebSocket column says; an acknowledgement is
stored as the subscriber's, and a live response as its answer to the live signal pushed. After
``START-SEND-EVENTS``, ``-MESSAGES`` or ``-LIVE-COMMANDS`` the socket pushes what the subscriber's
pulls hand out of those streams (``ws_protocol.subscription``), each under a lease (beyond Ditto:
one unanswered when the socket drops is handed out again). Whatever a frame gets wrong is
answered with Ditto's error message,
and the socket serves on. What the socket sends waits in a bounded queue: a client that does not
read is closed, not buffered for.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any, Callable, Coroutine, TypeVar

from sqlalchemy.exc import DBAPIError, OperationalError
from starlette.responses import Response
from starlette.websockets import WebSocket, WebSocketDisconnect

from ackstore.doors.door import Door
from ackstore.doors.logins import Login
from ackstore.ledger import failures, things
from ackstore.rules import envelopes, errors, fields, headers, http_api, jsontext, ws_protocol

log = logging.getLogger("ackstore.doors")
T = TypeVar("T")

OUTGOING_MAX = 1_000  # frames a socket may have waiting to be sent; past it the client is not reading
PUSH_BATCH = 100  # signals a pull hands out at most
PUSH_POLL_S = 0.5  # how often a socket that started a stream pulls when the last pull was not full
# A signal pushed is a hand-out under this lease (A.3): unanswered when it ends — the socket
# dropped, say — it is handed out again, to the login's next socket.
PUSH_LEASE = "30s"
OWN_LIVE_MAX = 10_000  # the live signals a socket sent that it remembers, so as not to push them back to it
CLOSE_POLICY = 1008  # RFC 6455: a message that violates the endpoint's policy
CLOSE_OVERLOADED = 1013  # RFC 6455: try again later


async def serve(door: Door, websocket: WebSocket) -> None:
    """One socket, from its upgrade request to its close."""
    try:
        login = await door.login_of(websocket)
        declared = ws_protocol.declared_labels(websocket.query_params.get(ws_protocol.DECLARED_ACKS)
                                               or websocket.headers.get(ws_protocol.DECLARED_ACKS))
    except errors.DittoError as problem:  # refused before the upgrade: the HTTP answer Ditto gives
        await websocket.send_denial_response(_http(http_api.error(problem)))
        return
    await websocket.accept()
    socket = Socket(door, websocket, login)
    door.sockets.opened(login.name)
    try:
        await socket.run(declared)
    finally:
        if door.sockets.closed(login.name) and (declared or socket.subscribed or door.sockets.owed(login.name)):
            await socket.release()


class Socket:
    """One accepted socket: what it receives, handled; what it sends, queued."""

    def __init__(self, door: Door, websocket: WebSocket, login: Login) -> None:
        self.door, self.websocket, self.login, self.store = door, websocket, login, login.store
        self.subscriber = ws_protocol.subscriber_of(login.name)
        self.outgoing: asyncio.Queue[str] = asyncio.Queue(OUTGOING_MAX)
        self.tasks: set[asyncio.Task[None]] = set()
        self.declared: list[Any] = []
        self.started: dict[str, ws_protocol.Control] = {}  # the streams started, by name
        self.subscription: ws_protocol.Subscription | None = None  # what this socket last declared; None: nothing
        self.streams_lock = asyncio.Lock()  # one START / STOP at a time: each declares the subscriber
        self.pushing: asyncio.Task[None] | None = None
        self.own_live: collections.OrderedDict[str, None] = collections.OrderedDict()  # correlation ids it sent
        self.closing = False

    async def run(self, declared: list[Any]) -> None:
        self.declared = declared
        sender = asyncio.create_task(self._send_all())
        try:
            if declared and not await self._declare(declared):
                await self._drain_then_close(CLOSE_POLICY, "declared acknowledgement labels refused")
                return
            while not self.closing:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                if text is None:  # Ditto Protocol is text; a binary frame is no message of it
                    self._send_error(errors.json_invalid("A Ditto Protocol message must be sent as a text frame."))
                    continue
                self._handle(text)
        except WebSocketDisconnect:
            pass
        finally:
            self.closing = True
            for task in self.tasks | {sender, self.pushing} - {None}:
                task.cancel()

    @property
    def subscribed(self) -> bool:
        """Whether a stream this socket started left the subscriber declared otherwise than at connect."""
        return self.subscription not in (None, ws_protocol.BARE)

    async def release(self) -> None:
        """Give the login's labels back, and its streams, when its last socket closed (Ditto frees
        a socket's labels; no live signal is handed out to a subscriber nobody pulls for)."""
        sockets = self.door.sockets
        try:
            async with sockets.declaring(self.login.name):
                if sockets.has_open(self.login.name):  # a socket opened since: its last one gives them back
                    sockets.owe(self.login.name)
                    return
                await _finished(asyncio.to_thread(self.store.declare, self.subscriber, [],
                                                  channels=list(ws_protocol.BARE.channels)))
                sockets.paid(self.login.name)
        except Exception:  # noqa: BLE001 — the next socket's declaration replaces them anyway
            log.warning("releasing the labels of %s failed", self.subscriber, exc_info=True)

    # --- what a frame is ------------------------------------------------------------------------

    def _handle(self, text: str) -> None:
        try:
            control = ws_protocol.control(text)
            if control is not None:
                self._spawn(self._stream(control), None)
                return
            envelope = envelopes.load_envelope(text, self.door.settings.max_envelope_bytes)
            kind = ws_protocol.kind(envelope)
        except errors.DittoError as problem:
            self._send_error(problem)
            return
        if kind == "signal":
            self._spawn(self._command(envelope), envelope)
        else:  # an acknowledgement, or a live response: the subscriber's answer to what it was handed
            self._spawn(self._answer(self.store.acknowledge if kind == "ack" else self.store.respond, envelope),
                        envelope)

    def _spawn(self, work: Any, envelope: dict[str, Any] | None) -> None:
        task = asyncio.create_task(self._guarded(work, envelope))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _command(self, envelope: dict[str, Any]) -> None:
        signal = envelopes.parse_signal(envelope)
        asked = headers.normalize(signal.raw_headers, channel=signal.channel, api="websocket",
                                  settings=self.store.settings)
        envelope["headers"] = asked.headers  # its correlation id fixed here: the one the answer carries
        if signal.channel == "live":
            self._sent_live(asked.correlation_id)
        message_id = http_api.message_id(self.login.name, asked.correlation_id)  # its answer the login's alone
        if not ws_protocol.answers(asked):
            await self._store(envelope, message_id)
            return
        with self.door.holding(self.login.name):  # a login's held commands count with its held requests (429)
            if not await self._store(envelope, message_id):
                return
            decision = await self.door.decisions.wait(asked.correlation_id, ws_protocol.wait_ms(asked) / 1000)
        if decision is None:  # undecided past its deadline and two passes: GET /api/2/answers/<id> has it later
            log.warning("no decision for %s within its deadline and two passes", asked.correlation_id)
            return
        self._send(ws_protocol.answer(signal, asked, decision))

    async def _store(self, envelope: dict[str, Any], message_id: str | None) -> bool:
        """Store a command with the commands beside it; whether it was (else its refusal is sent)."""
        stored = await self.login.socket_intake.submit(envelope, message_id)
        if not stored.ok:
            self._send(ws_protocol.refused(stored.answer, envelope))
        return stored.ok

    async def _answer(self, store: Callable[[str, dict[str, Any]], dict[str, Any]], envelope: dict[str, Any]) -> None:
        """An acknowledgement (``AckStore.acknowledge``) or a live response to a live signal the
        socket pushed (``AckStore.respond``: ``live-response``), stored as the subscriber's; a stored
        one gets no answer, as in Ditto."""
        answered = await asyncio.to_thread(store, self.subscriber, envelope)
        if answered["status"] >= 400:
            self._send(ws_protocol.refused(answered, envelope))

    async def _stream(self, control: ws_protocol.Control) -> None:
        """START-SEND-* / STOP-SEND-*: the subscriber declared again for the streams then started
        (``ws_protocol.subscription``: its labels kept; a bad filter 400, the streams as they were),
        and the socket pulling and pushing while one of them is."""
        async with self.streams_lock:
            started = {**self.started, control.stream: control} if control.start else {
                stream: given for stream, given in self.started.items() if stream != control.stream}
            wanted = ws_protocol.subscription(started)
            pushing = any(stream in started for stream in ws_protocol.PUSHED_STREAMS)
            # declared when it changes, or first needed to pull; LIVE-EVENTS, a STOP of what was
            # not started: nothing to declare
            if wanted != (self.subscription or ws_protocol.BARE) or pushing and self.subscription is None:
                answered = await self._declared(self.declared, filter=wanted.filter, channels=list(wanted.channels))
                if answered["status"] >= 400:
                    self._send(ws_protocol.refused(answered))
                    return
                self.subscription = wanted
            self.started = started
            if pushing and self.pushing is None:
                self.pushing = asyncio.create_task(self._guarded(self._push(), None))
            elif not pushing and self.pushing is not None:
                self.pushing.cancel()
                self.pushing = None
            self._send(control.acknowledged)

    async def _push(self) -> None:
        """Pull and push, never more than the outgoing queue has room for: what cannot be sent yet
        is not handed out yet."""
        while not self.closing:
            room = OUTGOING_MAX - self.outgoing.qsize() - 1
            handed = []
            if room > 0:
                handed = await asyncio.to_thread(self.store.pull, self.subscriber, max=min(room, PUSH_BATCH),
                                                 lease=PUSH_LEASE)
            for message in await self._enriched([message for message in handed if not self._own(message)]):
                self._send(message)
            if len(handed) < PUSH_BATCH:
                await asyncio.sleep(PUSH_POLL_S)

    async def _enriched(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages with what their stream's ``extraFields`` select of their things, as the
        things are now (Ditto's ``extra``; one read for all of them)."""
        wanted = [(message, self._extra_fields(message), _thing_id(message)) for message in messages]
        thing_ids = sorted({thing_id for _, selector, thing_id in wanted if selector and thing_id})
        if not thing_ids:
            return messages
        found = await asyncio.to_thread(things.read_documents, self.store.engine, thing_ids)
        enriched = []
        for message, selector, thing_id in wanted:
            read = found.get(thing_id or "") if selector else None
            if read is not None and read.state.document is not None:
                state = read.state
                message = ws_protocol.with_extra(message, fields.select_thing(
                    state.document, selector, state.thing_id, state.revision, read.modified))
            enriched.append(message)
        return enriched

    def _extra_fields(self, message: dict[str, Any]) -> tuple[fields.Pointer, ...] | None:
        started = self.started.get(ws_protocol.stream_of(message) or "")
        return started.extra_fields if started is not None else None

    def _sent_live(self, correlation_id: str) -> None:
        self.own_live[correlation_id] = None
        if len(self.own_live) > OWN_LIVE_MAX:
            self.own_live.popitem(last=False)

    def _own(self, message: dict[str, Any]) -> bool:
        """Whether a live signal handed out is one this socket sent: not pushed back to its sender,
        whose client would take it, by its correlation id, for the answer (the login's other
        sockets get it when its lease ends)."""
        return ws_protocol.is_live(message) and message.get("headers", {}).get("correlation-id") in self.own_live

    async def _declare(self, declared: list[Any]) -> bool:
        answered = await self._declared(declared, channels=list(ws_protocol.BARE.channels))
        if answered["status"] < 400:
            self.subscription = ws_protocol.BARE
            return True
        self._send(ws_protocol.refused(answered))
        return False

    async def _declared(self, labels: list[Any], **given: Any) -> dict[str, Any]:
        """The subscriber declared (``AckStore.declare``), one declaration of the login at a time."""
        async with self.door.sockets.declaring(self.login.name):
            return await _finished(asyncio.to_thread(self.store.declare, self.subscriber, labels, **given))

    async def _guarded(self, work: Any, envelope: dict[str, Any] | None) -> None:
        """Ditto's error for what one frame's work refused; 503 while the database is away, 500
        (logged, never shown) for what went wrong here. The socket serves on."""
        try:
            await work
        except errors.DittoError as problem:
            self._send(ws_protocol.refused(problem.to_json(), envelope))
        except OperationalError:
            log.warning("the ledger's database is not reachable", exc_info=True)
            problem = errors.database_unavailable("behind this door", "it could not be reached")
            self._send(ws_protocol.refused(problem.to_json(), envelope))
        except DBAPIError as problem:
            reason = failures.refused_privilege(problem)
            if reason is None:
                log.exception("a socket's frame failed")
            refusal = errors.internal_error() if reason is None else errors.permission_denied(None, reason)
            self._send(ws_protocol.refused(refusal.to_json(), envelope))
        except Exception:  # noqa: BLE001 — one frame's, never the socket's
            log.exception("a socket's frame failed")
            self._send(ws_protocol.refused(errors.internal_error().to_json(), envelope))

    # --- what the socket sends ------------------------------------------------------------------

    def _send_error(self, problem: errors.DittoError) -> None:
        self._send(ws_protocol.refused(problem.to_json()))

    def _send(self, message: dict[str, Any] | str) -> None:
        """Queue a frame; a client that let the queue fill is not reading: it is closed."""
        if self.closing:
            return
        try:
            self.outgoing.put_nowait(message if isinstance(message, str) else jsontext.dumps(message))
        except asyncio.QueueFull:
            log.warning("closing a socket of %s: it does not read what it is sent", self.subscriber)
            self.closing = True
            asyncio.create_task(self._close(CLOSE_OVERLOADED, "the client does not read what it is sent"))

    async def _send_all(self) -> None:
        while True:
            text = await self.outgoing.get()
            await self.websocket.send_text(text)
            self.outgoing.task_done()

    async def _drain_then_close(self, code: int, reason: str) -> None:
        try:
            await asyncio.wait_for(self.outgoing.join(), 5)
        except TimeoutError:
            pass
        self.closing = True
        await self._close(code, reason)

    async def _close(self, code: int, reason: str) -> None:
        try:
            await self.websocket.close(code, reason)
        except Exception:  # noqa: BLE001 — closed by the client meanwhile
            pass


async def _finished(work: Coroutine[Any, Any, T]) -> T:
    """``work``'s result; cancelled (its socket closing), it is waited for all the same before the
    cancellation goes on: a thread cannot be stopped, and a declaration must not land after the
    lock it ran under was let go."""
    running = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        await asyncio.wait([running])
        raise


def _thing_id(message: dict[str, Any]) -> str | None:
    topic = envelopes.topic_of(message)
    return topic.thing[0] if topic is not None and topic.thing is not None else None


def _http(answer: http_api.HttpAnswer) -> Response:
    return Response(answer.content(), status_code=answer.status, headers=answer.headers, media_type=http_api.JSON)
