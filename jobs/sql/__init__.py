"""Named SQL statements, one ``.sql`` file per job; values are always bind parameters.

A file holds statements introduced by ``-- name: <statement>`` lines (the loader is the
ledger's, :mod:`ackstore.ledger.named_sql`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sqlalchemy import TextClause, text
from sqlalchemy.dialects import postgresql

from ackstore.ledger.named_sql import load

_HERE = Path(__file__).resolve().parent


def statements(job: str) -> dict[str, str]:
    """The statements of ``<job>.sql`` by name, as SQL text."""
    return load(_HERE / f"{job}.sql")


def statement(job: str, name: str) -> TextClause:
    return text(statements(job)[name])


def with_literals(job: str, name: str, values: dict[str, Any]) -> str:
    """Statement ``name`` of ``<job>.sql`` as plain SQL for what takes no bind parameters (a COPY
    of a query, a GX query asset): its values rendered by SQLAlchemy as literals, its comments
    dropped. ``values`` are the ledger's own (ids, counts), never a user's text."""
    query = text(without_comments(statements(job)[name])).bindparams(**values)
    return str(query.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))


def without_comments(sql: str) -> str:
    """SQL without its ``--`` comments (GX wants a query asset to start with SELECT; a colon in a
    comment would read as a parameter)."""
    return re.sub(r"--[^\n]*", "", sql).strip()
