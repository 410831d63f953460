"""Which failures of a database write go away by trying again.

A connector that stores a batch must tell the two apart: a transient failure (the connection
lost, a deadlock or serialization failure, the server restarting or out of resources) is
retried — the broker keeps the messages —, any other (a value the database refuses, a bug)
would fail the same way forever, so it is isolated to the message that causes it.
"""

from __future__ import annotations

import re

import psycopg2
from sqlalchemy.exc import DBAPIError

from ackstore.ledger.database_url import DatabaseUrl
from ackstore.rules import errors

# SQLSTATE classes: 08 connection exception, 40 transaction rollback (deadlock, serialization),
# 53 insufficient resources, 57 operator intervention (admin shutdown, cannot connect now),
# 58 system error (I/O); and a lock not obtained within lock_timeout.
TRANSIENT_SQLSTATE_CLASSES = ("08", "40", "53", "57", "58")
LOCK_NOT_AVAILABLE = "55P03"  # a lock not obtained within lock_timeout
TRANSIENT_SQLSTATES = (LOCK_NOT_AVAILABLE,)
INSUFFICIENT_PRIVILEGE = "42501"  # a privilege, a write function's or a trigger's refusal
INVALID_PARAMETER_VALUE = "22023"  # a write function's refusal of an argument (reserve_connection's login)


def sqlstate(problem: BaseException) -> str | None:
    """The SQLSTATE PostgreSQL answered ``problem`` with; None for anything else."""
    return getattr(getattr(problem, "orig", None), "pgcode", None) if isinstance(problem, DBAPIError) else None


def refused_privilege(problem: BaseException) -> str | None:
    """PostgreSQL's reason when it refused the login a privilege (SQLSTATE 42501), naming what the
    login lacks; None for any other problem."""
    if sqlstate(problem) != INSUFFICIENT_PRIVILEGE:
        return None
    diagnostics = getattr(problem.orig, "diag", None)  # type: ignore[attr-defined]
    return getattr(diagnostics, "message_primary", None) or str(problem.orig).splitlines()[0]  # type: ignore[attr-defined]


def is_transient(problem: BaseException) -> bool:
    """Whether ``problem``, raised by a write, may not happen again on a retry."""
    if not isinstance(problem, DBAPIError):
        return False  # not the database's: the same input fails the same way
    if problem.connection_invalidated:
        return True
    code = getattr(problem.orig, "pgcode", None)
    if code is None:  # no SQLSTATE: the client's own error — a lost connection, or input it cannot send
        return isinstance(problem.orig, (psycopg2.OperationalError, psycopg2.InterfaceError))
    return code[:2] in TRANSIENT_SQLSTATE_CLASSES or code in TRANSIENT_SQLSTATES


def unavailable(problem: BaseException, url: str | None) -> errors.DittoError | None:
    """The 503 for ``problem`` if it is a failure to reach the database at ``url`` (a refused
    or lost connection, a database that does not exist, a login or option the server refuses),
    naming its server and database and never its password; None for any other problem. ``url``
    None: the embedded server."""
    if not isinstance(problem, DBAPIError) or not isinstance(problem.orig, psycopg2.OperationalError):
        return None
    if problem.statement is not None and not problem.connection_invalidated:
        return None  # a statement's own failure (a timeout, say), not the connection's
    parsed = DatabaseUrl.parse(url) if url else None
    where = parsed.describe() if parsed else "of the embedded server"
    reason = re.sub(r"\s+", " ", str(problem.orig)).strip()
    return errors.database_unavailable(where, parsed.without_password(reason) if parsed else reason)
