"""Who is who over HTTP (issue 51, decisions #134). A request acts as the ledger login whose name
and password it gave (HTTP Basic, as Ditto's clients send it), and the ledger's PostgreSQL is what
checks them: the door connects as that login, so ``session_user`` is the caller and every rule of
who may write what (decisions #94, #97, #104) holds as for any other component. The door keeps
no password: a login's engine is kept (at most ``MAX_LOGINS``, the least used dropped) with the
password's SHA-256, and checked by a new connection again after ``VERIFIED_FOR_S``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from sqlalchemy.exc import OperationalError

from ackstore.ledger.database import make_engine
from ackstore.ledger.database_url import DatabaseUrl
from ackstore.ledger.store import AckStore
from ackstore.rules import errors
from ackstore.rules.settings import Settings

MAX_LOGINS = 64
VERIFIED_FOR_S = 60.0  # a changed password or a dropped login is noticed within this
MAX_NAME_BYTES = 63  # PostgreSQL's NAMEDATALEN - 1
LOGIN_POOL = {"pool_size": 4, "max_overflow": 8, "pool_timeout": 10}
# What libpq says when the server refused the login itself (not when it could not be reached).
_REFUSED = ("authentication failed", "does not exist", "not permitted to log in", "no pg_hba.conf entry",
            "no password supplied", "permission denied for database")


@dataclass
class _Login:
    store: AckStore
    secret: bytes
    verified_at: float


class Logins:
    """The ledger logins requests act as, each with its own engine."""

    def __init__(self, url: DatabaseUrl, settings: Settings) -> None:
        self.url = url
        self.settings = settings
        self._logins: OrderedDict[str, _Login] = OrderedDict()
        self._lock = threading.Lock()

    def known(self, authorization: str | None) -> tuple[str, AckStore] | None:
        """The login and store of credentials checked within ``VERIFIED_FOR_S``, without blocking;
        None when they must be checked (:meth:`store_for`); the 401 for unusable ones."""
        user, password = credentials(authorization)
        secret = hashlib.sha256(password.encode("utf-8")).digest()
        with self._lock:
            known = self._logins.get(user)
            if known and hmac.compare_digest(known.secret, secret) and time.monotonic() - known.verified_at < VERIFIED_FOR_S:
                self._logins.move_to_end(user)
                return user, known.store
        return None

    def store_for(self, authorization: str | None) -> tuple[str, AckStore]:
        """The login an ``Authorization`` header names and its store, or the 401 (blocking: a new
        or stale login is checked by connecting)."""
        known = self.known(authorization)
        if known is not None:
            return known
        user, password = credentials(authorization)
        secret = hashlib.sha256(password.encode("utf-8")).digest()
        store = self._verified(user, password)
        with self._lock:
            replaced = [self._logins.pop(user)] if user in self._logins else []
            self._logins[user] = _Login(store, secret, time.monotonic())
            while len(self._logins) > MAX_LOGINS:
                replaced.append(self._logins.popitem(last=False)[1])
        for login in replaced:
            login.store.close()  # requests still using its connections finish; they are closed on return
        return user, store

    def close(self) -> None:
        with self._lock:
            logins, self._logins = list(self._logins.values()), OrderedDict()
        for login in logins:
            login.store.close()

    def _verified(self, user: str, password: str) -> AckStore:
        engine = make_engine(self.url.with_login(user, password), **LOGIN_POOL)
        try:
            with engine.connect():
                pass
        except OperationalError as problem:
            engine.dispose()
            if any(words in str(problem.orig) for words in _REFUSED):
                raise errors.authentication_failed("The ledger's database did not accept these credentials.") from None
            raise
        return AckStore(engine, self.settings)


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
