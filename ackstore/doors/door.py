"""What the front door's routes share (issue 51): the logins requests act as, the intake that
stores them together, the held requests' decisions, each login's count of held requests and of
open sockets, and the reading of a request's body within its bounds."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import Iterator

from starlette.requests import HTTPConnection, Request

from ackstore.doors.held import Decisions
from ackstore.doors.logins import ACCESS_TOKEN, Login, Logins, authorization_of
from ackstore.doors.metrics import DoorMetrics
from ackstore.ledger.database import make_engine
from ackstore.ledger.database_url import DatabaseUrl
from ackstore.ledger.store import AckStore
from ackstore.rules import errors, http_api
from ackstore.rules.settings import Settings


class Sockets:
    """How many WebSockets each login has open in this door: its labels are given back with its last
    (``socket``)."""

    def __init__(self) -> None:
        self._open: dict[str, int] = {}
        self._declaring: dict[str, asyncio.Lock] = {}  # one a login: logins are database roles, few
        self._owed: set[str] = set()  # logins whose labels a closed socket left to their last socket to give back

    def declaring(self, login: str) -> asyncio.Lock:
        """Held while a login's subscriber is declared: the declarations run in threads, so a last
        socket's release and the next socket's declaration would otherwise land in either order,
        and the release after would take the labels the new socket declared."""
        return self._declaring.setdefault(login, asyncio.Lock())

    def has_open(self, login: str) -> bool:
        return login in self._open

    def owe(self, login: str) -> None:
        """A release skipped because a socket of the login opened meanwhile: its last one gives the
        labels back, whether or not it declared any."""
        self._owed.add(login)

    def owed(self, login: str) -> bool:
        return login in self._owed

    def paid(self, login: str) -> None:
        self._owed.discard(login)

    @property
    def open(self) -> int:
        return sum(self._open.values())

    def opened(self, login: str) -> None:
        self._open[login] = self._open.get(login, 0) + 1

    def closed(self, login: str) -> bool:
        """Note a socket closed; whether it was the login's last."""
        left = self._open.get(login, 1) - 1
        if left:
            self._open[login] = left
        else:
            self._open.pop(login, None)
        return not left


class Door:
    """What the routes share: the logins, the intake, the held requests, the open sockets."""

    def __init__(self, url: DatabaseUrl, settings: Settings, *, trusting: bool = False,
                 token_key: bytes | None = None) -> None:
        self.settings = settings
        self.logins = Logins(url, settings, trusting=trusting, token_key=token_key)
        self.engine = make_engine(url, pool_size=2, max_overflow=2)  # the door's own login: held requests' answers
        self.decisions = Decisions(self.engine)
        self.held: collections.Counter[str] = collections.Counter()  # held requests, by login
        self.streams: collections.Counter[str] = collections.Counter()  # open event streams, by login
        self.sockets = Sockets()
        self.metrics = DoorMetrics(lambda: sum(self.held.values()), lambda: self.sockets.open)
        self.loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """In the event loop, as the application starts."""
        self.loop = asyncio.get_running_loop()
        self.decisions.start()

    def stopping(self) -> None:
        """The process is told to stop: every hold ends (in the loop, soon). Safe in a signal handler."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.decisions.release)

    def stop(self) -> None:
        self.decisions.stop()
        self.logins.close()
        self.engine.dispose()

    async def login_of(self, request: HTTPConnection) -> Login:
        """Who a request or a socket acts as: a login checked lately at once, else checked by
        connecting (in a thread)."""
        authorization = authorization_of(request.headers.get("authorization"), request.query_params.get(ACCESS_TOKEN))
        return self.logins.known(authorization) or await asyncio.to_thread(self.logins.login_for, authorization)

    async def store_of(self, request: Request) -> AckStore:
        return (await self.login_of(request)).store

    async def body(self, request: Request) -> bytes:
        """The request's body, at most the ledger's message size (413 past it, read no further),
        within ``BODY_READ_S`` (408: a client trickling its body holds no worker)."""
        limit = self.settings.max_envelope_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise errors.message_too_large(int(declared), limit)
        body = bytearray()
        try:
            async with asyncio.timeout(http_api.BODY_READ_S):
                async for chunk in request.stream():
                    body += chunk
                    if len(body) > limit:
                        raise errors.message_too_large(len(body), limit)
        except TimeoutError:
            raise errors.request_body_timeout(http_api.BODY_READ_S) from None
        return bytes(body)

    @contextlib.contextmanager
    def holding(self, login: str) -> Iterator[None]:
        """Count a login's held request while it is held; 429 past its share (nothing stored yet)."""
        if self.held[login] >= http_api.MAX_HELD_PER_LOGIN:
            raise errors.too_many_requests("held requests", http_api.MAX_HELD_PER_LOGIN)
        self.held[login] += 1
        try:
            yield
        finally:
            self.held[login] -= 1
            if not self.held[login]:
                del self.held[login]
