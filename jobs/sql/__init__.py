"""Named SQL statements, one ``.sql`` file per job; values are always bind parameters.

A file holds statements introduced by ``-- name: <statement>`` lines (the loader is the
ledger's, :mod:`ackstore.ledger.named_sql`).
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import TextClause, text

from ackstore.ledger.named_sql import load

_HERE = Path(__file__).resolve().parent


def statements(job: str) -> dict[str, str]:
    """The statements of ``<job>.sql`` by name, as SQL text."""
    return load(_HERE / f"{job}.sql")


def statement(job: str, name: str) -> TextClause:
    return text(statements(job)[name])
