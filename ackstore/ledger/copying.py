"""COPY … FROM STDIN inside a SQLAlchemy transaction, its rows made while PostgreSQL stores them;
and COPY (query) TO STDOUT, for a query whose many rows are read as one binary stream.

psycopg2's ``copy_expert`` pulls the data in chunks as it sends them; handing it a reader over
a generator lets Python make (validate, encode) the next rows while the server inserts the
previous ones — the two cores work at once. SQLAlchemy has no COPY, so a failure is raised here
as SQLAlchemy raises a statement's (a ``DBAPIError``, the connection invalidated when lost):
``failures.is_transient`` and the pool then treat it like any other statement's.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import io
from typing import Any, Mapping

import psycopg2
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

CHUNK = 8192  # characters per message to the server: small, so that it starts on the first rows early


def copy_in(conn: Connection, statement: str, rows: Iterable[str]) -> None:
    """Run ``statement`` (``COPY … FROM STDIN``, text format) in ``conn``'s transaction, sending
    ``rows`` (each a line of COPY text, ending in a newline) as they are made."""
    _copy(conn, statement, None, _Reader(iter(rows)))


def copy_in_binary(conn: Connection, statement: str, data: bytes) -> None:
    """Run ``statement`` (``COPY … FROM STDIN (FORMAT binary)``) with ``data``, a whole binary COPY."""
    _copy(conn, statement, None, io.BytesIO(data))


def copy_out(conn: Connection, statement: str, params: Mapping[str, Any]) -> bytes:
    """What ``statement`` (``COPY (…) TO STDOUT``, with ``%(name)s`` parameters, bound by the
    driver as every statement's are) writes, in ``conn``'s transaction."""
    out = io.BytesIO()
    _copy(conn, statement, params, out)
    return out.getvalue()


def _copy(conn: Connection, statement: str, params: Mapping[str, Any] | None, file: Any) -> None:
    """``copy_expert`` in ``conn``'s transaction; a failure raised as SQLAlchemy raises one."""
    dbapi_connection = conn.connection.dbapi_connection
    cursor = dbapi_connection.cursor()
    try:
        cursor.copy_expert(statement if params is None else cursor.mogrify(statement, params), file, CHUNK)
    except psycopg2.Error as error:
        lost = conn.dialect.is_disconnect(error, dbapi_connection, cursor)
        if lost:
            conn.invalidate(error)
        raise DBAPIError.instance(statement, None, error, psycopg2.Error, connection_invalidated=lost) from error
    finally:
        _close(cursor)


class _Reader:
    """The file ``copy_expert`` reads: the next rows, joined, each time it asks."""

    def __init__(self, rows: Iterator[str]) -> None:
        self._rows = rows

    def read(self, size: int = CHUNK) -> str:
        chunk: list[str] = []
        length = 0
        for row in self._rows:
            chunk.append(row)
            length += len(row)
            if length >= size:
                break
        return "".join(chunk)


def _close(cursor: object) -> None:
    try:
        cursor.close()  # type: ignore[attr-defined]
    except psycopg2.Error:  # the connection is gone already
        pass
