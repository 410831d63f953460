"""Who is who over HTTP (issue 51, decisions #134). A request acts as the ledger login whose name
and password it gave (HTTP Basic, as Ditto's clients send it), and the ledger's PostgreSQL is what
checks them: the door connects as that login, so ``session_user`` is the caller and every rule of
who may write what (decisions #94, #97, #104) holds as for any other component — provided the
server asked for the password (libpq's ``used_password``): a server that trusts connections, or
knows the door's OS user (``peer``), proves nothing, and such a login is refused unless the door
was started for a trusting development server (``trusting``).

The door keeps no password: a login is kept (at most ``MAX_LOGINS``, the least used dropped) with
its engine, its intake and the password's SHA-256, and checked again by a connection of its own
after ``VERIFIED_FOR_S`` — the same engine kept, so nothing is opened or closed per check.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from ackstore.doors.intake import Intake
from ackstore.ledger.database import make_engine
from ackstore.ledger.database_url import DatabaseUrl
from ackstore.ledger.store import AckStore
from ackstore.rules import errors
from ackstore.rules.settings import Settings

MAX_LOGINS = 64
VERIFIED_FOR_S = 60.0  # a changed password or a dropped login is noticed within this
MAX_NAME_BYTES = 63  # PostgreSQL's NAMEDATALEN - 1
LOGIN_POOL = {"pool_size": 4, "max_overflow": 4, "pool_timeout": 10, "connect_args": {"connect_timeout": 10}}
# What libpq says when the server refused the login itself (not when it could not be reached).
_REFUSED = ("password authentication failed", "role \"", "is not permitted to log in", "no pg_hba.conf entry",
            "no password supplied")
UNPROVEN = ("The ledger's database did not ask for this login's password, so nothing proves the request is the "
            "login's: serve a database that asks for passwords (pg_hba.conf: scram-sha-256), or start the door with "
            "--trusting-database on one machine's development server.")


@dataclass
class Login:
    """A ledger login requests act as: its store and the intakes that batch its writes, its HTTP
    requests' and its WebSocket commands' (each API's signals answered by its own table, B.7)."""

    name: str
    store: AckStore
    intake: Intake = field(init=False)
    socket_intake: Intake = field(init=False)
    secret: bytes = b""
    verified_at: float = 0.0

    def __post_init__(self) -> None:
        self.intake = Intake(self.store, "http")
        self.socket_intake = Intake(self.store, "websocket")


class Logins:
    """The ledger logins requests act as."""

    def __init__(self, url: DatabaseUrl, settings: Settings, *, trusting: bool = False) -> None:
        self.url = url
        self.settings = settings
        self.trusting = trusting
        self._logins: OrderedDict[str, Login] = OrderedDict()
        self._lock = threading.Lock()

    def known(self, authorization: str | None) -> Login | None:
        """The login of credentials checked within ``VERIFIED_FOR_S``, without blocking; None when
        they must be checked (:meth:`login_for`); the 401 for unusable ones."""
        user, password = credentials(authorization)
        with self._lock:
            login = self._logins.get(user)
            if login and _same(login.secret, password) and time.monotonic() - login.verified_at < VERIFIED_FOR_S:
                self._logins.move_to_end(user)
                return login
        return None

    def login_for(self, authorization: str | None) -> Login:
        """The login an ``Authorization`` header names, or the 401 (blocking: a new or stale login
        is checked by connecting)."""
        login = self.known(authorization)
        if login is not None:
            return login
        user, password = credentials(authorization)
        with self._lock:
            login = self._logins.get(user)
        if login is not None and _same(login.secret, password):  # stale: checked again, its engine kept
            self._check(make_engine(self.url.with_login(user, password), poolclass=NullPool), dispose=True)
            login.verified_at = time.monotonic()
            return login
        engine = make_engine(self.url.with_login(user, password), **LOGIN_POOL)
        self._check(engine, dispose=False)
        fresh = Login(user, AckStore(engine, self.settings), hashlib.sha256(password.encode("utf-8")).digest(),
                      time.monotonic())
        with self._lock:
            replaced = [self._logins.pop(user)] if user in self._logins else []
            self._logins[user] = fresh
            while len(self._logins) > MAX_LOGINS:
                replaced.append(self._logins.popitem(last=False)[1])
        for old in replaced:  # another password, or the least used: requests using it finish first
            old.store.close()
        return fresh

    def close(self) -> None:
        with self._lock:
            logins, self._logins = list(self._logins.values()), OrderedDict()
        for login in logins:
            login.store.close()

    def _check(self, engine: object, *, dispose: bool) -> None:
        """Connect as the login: the server checks its password; 401 when it refused it, or did
        not ask for it and the door is not ``trusting``."""
        try:
            with engine.connect() as conn:  # type: ignore[attr-defined]
                asked = conn.connection.driver_connection.info.used_password
        except OperationalError as problem:
            engine.dispose()  # type: ignore[attr-defined]
            if any(words in str(problem.orig) for words in _REFUSED):
                raise errors.authentication_failed("The ledger's database did not accept these credentials.") from None
            raise
        if dispose:
            engine.dispose()  # type: ignore[attr-defined]
        if not asked and not self.trusting:
            if not dispose:
                engine.dispose()  # type: ignore[attr-defined]
            raise errors.authentication_failed(UNPROVEN)


def _same(secret: bytes, password: str) -> bool:
    return hmac.compare_digest(secret, hashlib.sha256(password.encode("utf-8")).digest())


def credentials(authorization: str | None) -> tuple[str, str]:
    """The login name and password of HTTP Basic credentials, or the 401 Ditto answers."""
    if not authorization:
        raise errors.authentication_failed("Missing Authorization header: give a ledger login's name and password "
                                           "(HTTP Basic).")
    scheme, _, encoded = authorization.partition(" ")
    if scheme.lower() != "basic":
        raise errors.authentication_failed("Only HTTP Basic credentials are accepted.")
    try:
        user, colon, password = base64.b64decode(encoded.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise errors.authentication_failed("The Basic credentials are not base64 of UTF-8 'name:password'.") from None
    if not colon or not user or not password or "\0" in user + password or len(user.encode()) > MAX_NAME_BYTES:
        raise errors.authentication_failed("The Basic credentials need a login name and a non-empty password.")
    return user, password
