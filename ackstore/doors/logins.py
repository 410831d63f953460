"""Who is who over HTTP (issue 51, decisions #134 and #137). A request acts as exactly one ledger
login, proven one of two ways:

* **Basic** (a login's name and password, as Ditto's clients send them): the ledger's PostgreSQL
  checks them — the door connects as that login, so ``session_user`` is the caller and every rule
  of who may write what (decisions #94, #97, #104) holds as for any other component — provided the
  server asked for the password (libpq's ``used_password``): a server that trusts connections, or
  knows the door's OS user (``peer``), proves nothing, and such a login is refused unless the door
  was started for a trusting development server (``trusting``).
* **Bearer** (a token signed with the door's key, :mod:`ackstore.doors.tokens`): the door connects
  as its own login and switches into the token's (``SET ROLE``, :func:`acting_as`) — PostgreSQL
  lets it switch only into the logins an operator granted it, and the write functions take the
  switched-into login for the caller (``caller_login``).

The door keeps no password apart from its engines: a login is kept (at most ``MAX_LOGINS``, the
least used dropped) with its engine, its intake and the password's SHA-256, and checked again by a
connection of its own after ``VERIFIED_FOR_S`` — the same engine kept, so nothing is opened or
closed per check. A token's signature and time are checked on every request.
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
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.pool import NullPool

from ackstore.doors import tokens
from ackstore.doors.intake import Intake
from ackstore.ledger.database import acting_as, caller_login, make_engine
from ackstore.ledger.database_url import DatabaseUrl
from ackstore.ledger.store import AckStore
from ackstore.rules import errors, http_api
from ackstore.rules.settings import Settings

MAX_LOGINS = 64
VERIFIED_FOR_S = 60.0  # a changed password or a dropped login is noticed within this
# Credentials the database refused are refused again without connecting for this long: a client
# retrying a wrong password costs the ledger no connection each (a created login waits this long).
REFUSED_FOR_S = 10.0
MAX_REFUSED = 4096  # refused credentials remembered (their digests), the oldest forgotten first
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
    events_tail: Any = None  # the event log's newest events its SSE streams share (``events.Tail``)

    def __post_init__(self) -> None:
        self.intake = Intake(self.store, "http")
        self.socket_intake = Intake(self.store, "websocket")


@dataclass(frozen=True)
class Credentials:
    """What a request's ``Authorization`` header gives: a Basic login and password, or the login a
    valid token names (its signature and time already checked)."""

    scheme: str  # "basic" or "bearer"
    user: str
    password: str = ""  # Basic's alone


class Logins:
    """The ledger logins requests act as."""

    def __init__(self, url: DatabaseUrl, settings: Settings, *, trusting: bool = False,
                 token_key: bytes | None = None) -> None:
        self.url = url
        self.settings = settings
        self.trusting = trusting
        self.token_key = token_key  # None: Bearer tokens are not taken
        self._logins: OrderedDict[tuple[str, str], Login] = OrderedDict()
        self._refused: OrderedDict[bytes, tuple[float, errors.DittoError]] = OrderedDict()
        self._lock = threading.Lock()

    def known(self, authorization: str | None) -> Login | None:
        """The login of credentials checked within ``VERIFIED_FOR_S``, without blocking; None when
        they must be checked (:meth:`login_for`); the 401 for unusable ones."""
        given = credentials(authorization, self.token_key)
        key = (given.scheme, given.user)
        with self._lock:
            refused = self._refused.get(_refusal_key(given))
            if refused is not None and time.monotonic() < refused[0]:
                refusal = refused[1]  # raised afresh: one exception raised again would keep every traceback
                raise errors.DittoError(refusal.status, refusal.error, refusal.message, refusal.description)
            login = self._logins.get(key)
            if login and _same(login.secret, given.password) and time.monotonic() - login.verified_at < VERIFIED_FOR_S:
                self._logins.move_to_end(key)
                return login
        return None

    def login_for(self, authorization: str | None) -> Login:
        """The login an ``Authorization`` header names, or the 401 (blocking: a new or stale login
        is checked by connecting)."""
        login = self.known(authorization)
        if login is not None:
            return login
        given = credentials(authorization, self.token_key)
        key = (given.scheme, given.user)
        with self._lock:
            login = self._logins.get(key)
        if login is not None and _same(login.secret, given.password):  # stale: checked again, its engine kept
            self._check(given, self._engine(given, poolclass=NullPool), dispose=True)
            login.verified_at = time.monotonic()
            return login
        engine = self._engine(given, **LOGIN_POOL)
        self._check(given, engine, dispose=False)
        fresh = Login(given.user, AckStore(engine, self.settings), _digest(given.password), time.monotonic())
        with self._lock:
            replaced = [self._logins.pop(key)] if key in self._logins else []
            self._logins[key] = fresh
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

    def _engine(self, given: Credentials, **options: object) -> Engine:
        """An engine acting as the login: connecting as it (Basic), or as the door's own login
        switching into it (Bearer)."""
        if given.scheme == "bearer":
            return acting_as(make_engine(self.url, **options), given.user)
        return make_engine(self.url.with_login(given.user, given.password), **options)

    def _check(self, given: Credentials, engine: Engine, *, dispose: bool) -> None:
        """:meth:`_connect`, and its 401 remembered for ``REFUSED_FOR_S``."""
        try:
            self._connect(given, engine, dispose=dispose)
        except errors.DittoError as refusal:
            with self._lock:
                self._refused[_refusal_key(given)] = (time.monotonic() + REFUSED_FOR_S, refusal)
                while len(self._refused) > MAX_REFUSED:
                    self._refused.popitem(last=False)
            raise

    def _connect(self, given: Credentials, engine: Engine, *, dispose: bool) -> None:
        """Connect as the login: the server checks its password, or whether the door may switch into
        it; 401 when it refused, or (Basic) did not ask for the password and the door is not
        ``trusting``, or (Bearer) the token names the door's own login — which switches into itself,
        and would act with the privileges of every login granted to it."""
        itself = False
        try:
            with engine.connect() as conn:
                info = conn.connection.driver_connection.info
                asked = info.used_password
                if given.scheme == "bearer":
                    itself = caller_login(conn) == info.user  # a group role is no one's identity: refused
        except DBAPIError as problem:
            engine.dispose()
            if given.scheme == "bearer" and (_switch_refused(problem) or not isinstance(problem, OperationalError)):
                raise _not_granted(given.user) from None
            if any(words in str(problem.orig) for words in _REFUSED):
                raise errors.authentication_failed("The ledger's database did not accept these credentials.") from None
            raise
        if itself:
            engine.dispose()
            raise _not_granted(given.user)
        if dispose:
            engine.dispose()
        if given.scheme == "basic" and not asked and not self.trusting:
            if not dispose:
                engine.dispose()
            raise errors.authentication_failed(UNPROVEN)


def _not_granted(login: str) -> errors.DittoError:
    return errors.authentication_failed(
        f"This door may not act as the login '{login}' the token names: an operator grants it "
        f"(GRANT \"{login}\" TO <the door's login>), and it must be a login other than the door's own.")


def _switch_refused(problem: DBAPIError) -> bool:
    """Whether PostgreSQL refused the door's switch into a role (not granted, or no such role)."""
    return "permission denied to set role" in str(problem.orig) or "does not exist" in str(problem.orig)


def _refusal_key(given: Credentials) -> bytes:
    """Refused credentials as remembered: a digest, never the password (a token's login: its scheme's)."""
    return hashlib.sha256("\0".join((given.scheme, given.user, given.password)).encode("utf-8")).digest()


def _digest(password: str) -> bytes:
    return hashlib.sha256(password.encode("utf-8")).digest()


def _same(secret: bytes, password: str) -> bool:
    return hmac.compare_digest(secret, _digest(password))


ACCESS_TOKEN = "access_token"  # RFC 6750 2.3: a browser's WebSocket or EventSource cannot set a header


def authorization_of(header: str | None, access_token: str | None) -> str | None:
    """A request's ``Authorization``: its header, else its ``access_token`` query parameter as a
    Bearer token (Ditto's gateway takes both; the door logs no query)."""
    return header or (f"Bearer {access_token}" if access_token else None)


def credentials(authorization: str | None, token_key: bytes | None = None) -> Credentials:
    """What an ``Authorization`` header proves: HTTP Basic's login name and password, or (with a
    ``token_key``) the login a valid Bearer token names; else the 401 Ditto answers."""
    if not authorization:
        raise errors.authentication_failed("Missing Authorization header: give a ledger login's name and password "
                                           "(HTTP Basic)" + (", or a Bearer token." if token_key else "."))
    scheme, _, encoded = authorization.partition(" ")
    if scheme.lower() == "bearer" and token_key is not None:
        return Credentials("bearer", tokens.login_of(token_key, encoded.strip()))
    if scheme.lower() != "basic":
        raise errors.authentication_failed("Only HTTP Basic credentials" + (" and Bearer tokens are" if token_key else
                                                                             " are") + " accepted.")
    try:
        user, colon, password = base64.b64decode(encoded.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise errors.authentication_failed("The Basic credentials are not base64 of UTF-8 'name:password'.") from None
    if not colon or not http_api.login_name(user) or not password or "\0" in password:
        raise errors.authentication_failed("The Basic credentials need a login name and a non-empty password.")
    return Credentials("basic", user, password)
