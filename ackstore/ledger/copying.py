"""COPY … FROM STDIN inside a SQLAlchemy transaction, its rows made while PostgreSQL stores them.

psycopg2's ``copy_expert`` pulls the data in chunks as it sends them; handing it a reader over
a generator lets Python make (validate, encode) the next rows while the server inserts the
previous ones — the two cores work at once. SQLAlchemy has no COPY, so a failure is raised here
as SQLAlchemy raises a statement's (a ``DBAPIError``, the connection invalidated when lost):
``failures.is_transient`` and the pool then treat it like any other statement's.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import psycopg2
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

CHUNK = 8192  # characters per message to the server: small, so that it starts on the first rows early


def copy_in(conn: Connection, statement: str, rows: Iterable[str]) -> None:
    """Run ``statement`` (``COPY … FROM STDIN``, text format) in ``conn``'s transaction, sending
    ``rows`` (each a line of COPY text, ending in a newline) as they are made."""
    dbapi_connection = conn.connection.dbapi_connection
    cursor = dbapi_connection.cursor()
    try:
        cursor.copy_expert(statement, _Reader(iter(rows)), CHUNK)
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
