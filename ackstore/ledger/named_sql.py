"""Named SQL statements kept in ``.sql`` files; values are always bind parameters.

A file holds statements introduced by ``-- name: <statement>`` lines, each followed by a
one-line comment saying what it is for (procrastinate's ``queries.sql`` is the model).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from sqlalchemy import TextClause, text

NAME_LINE = re.compile(r"^-- name: (\S+)\s*$", re.MULTILINE)
LEDGER_SQL = Path(__file__).resolve().parent / "sql"


@lru_cache(maxsize=None)
def load(path: Path) -> dict[str, str]:
    """The statements of one ``.sql`` file by name, as SQL text."""
    parts = NAME_LINE.split(path.read_text())[1:]
    return {name: body.strip().rstrip(";") for name, body in zip(parts[::2], parts[1::2])}


def ledger_sql(file: str, name: str) -> str:
    """Statement ``name`` of ``ackstore/ledger/sql/<file>.sql``, as SQL text (for the driver's own calls: COPY)."""
    return load(LEDGER_SQL / f"{file}.sql")[name]


@lru_cache(maxsize=None)
def ledger_statement(file: str, name: str) -> TextClause:
    """Statement ``name`` of ``ackstore/ledger/sql/<file>.sql``."""
    return text(ledger_sql(file, name))
