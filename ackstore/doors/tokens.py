"""Bearer tokens (issue 51, decisions #137): a JSON Web Token, HS256-signed with the door's key,
names the ledger login a request acts as (``sub``) until it expires (``exp``, required). Whoever
holds the key issues tokens — ``ackstore token``, or an identity provider given the same key — so
the key is as secret as the logins' passwords. The door checks a token's signature and time on
every request; what the token proves is then switched into by PostgreSQL (:mod:`ackstore.doors.logins`).
"""

from __future__ import annotations

import time

import jwt

from ackstore import files
from ackstore.rules import errors, http_api

ALGORITHM = "HS256"  # the only one taken: no "none", no public-key confusion
AUDIENCE = "ackstore"  # a token signed with the same key for another service is not taken here
MIN_KEY_BYTES = 32  # RFC 7518 3.2: an HS256 key at least the hash's size
MAX_KEY_BYTES = 4096
MAX_TOKEN_BYTES = 4096  # within the door's 8 KiB of headers
MAX_LIFETIME_S = 366 * 24 * 3600
LEEWAY_S = 5  # clocks of the issuer and the door may differ this much


def read_key(name: str) -> bytes:
    """The signing key in file ``name`` (its bytes, a trailing line end dropped), or the 400 saying
    why it cannot be one."""
    key = files.read_or_answer(name, MAX_KEY_BYTES, "token key file").rstrip(b"\r\n")
    if len(key) < MIN_KEY_BYTES:
        raise errors.token_key_invalid(name, f"it holds {len(key)} bytes; a key needs at least {MIN_KEY_BYTES} "
                                             f"(e.g. `head -c 48 /dev/urandom | base64 > {name}`)")
    return key


def issue(key: bytes, login: str, lifetime_s: int, now: float | None = None) -> str:
    """A token for ``login``, valid ``lifetime_s`` seconds from ``now``."""
    if not http_api.login_name(login):
        raise errors.login_name_invalid(login)
    if not 0 < lifetime_s <= MAX_LIFETIME_S:
        raise errors.token_lifetime_invalid(lifetime_s, MAX_LIFETIME_S)
    issued = int(time.time() if now is None else now)
    return jwt.encode({"sub": login, "aud": AUDIENCE, "iat": issued, "exp": issued + lifetime_s}, key, ALGORITHM)


def login_of(key: bytes, token: str) -> str:
    """The login ``token`` names, or Ditto's 401 saying what is wrong with it (never the token)."""
    if len(token) > MAX_TOKEN_BYTES:
        raise errors.jwt_invalid(f"the token is longer than {MAX_TOKEN_BYTES} characters")
    try:
        claims = jwt.decode(token, key, algorithms=[ALGORITHM], audience=AUDIENCE, leeway=LEEWAY_S,
                            options={"require": ["sub", "exp"]})
    except jwt.ExpiredSignatureError:
        raise errors.jwt_invalid("the token has expired") from None
    except jwt.InvalidTokenError as problem:
        raise errors.jwt_invalid(_reason(problem)) from None
    if not http_api.login_name(claims["sub"]):
        raise errors.jwt_invalid("its subject (sub) is no login name")
    return claims["sub"]


def _reason(problem: jwt.InvalidTokenError) -> str:
    """PyJWT's reason, which never holds the token; the signature's failure said as such."""
    if isinstance(problem, jwt.InvalidSignatureError):
        return "its signature is not this door's key's"
    return str(problem)[:200] or type(problem).__name__
