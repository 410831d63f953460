"""Named SQL statements, one ``.sql`` file per job; values are always bind parameters.

A file holds statements introduced by ``-- name: <statement>`` lines.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from sqlalchemy import TextClause, text

_HERE = Path(__file__).resolve().parent
_NAME = re.compile(r"^-- name: (\S+)\s*$", re.MULTILINE)


@lru_cache(maxsize=None)
def statements(job: str) -> dict[str, str]:
    """The statements of ``<job>.sql`` by name, as SQL text."""
    source = (_HERE / f"{job}.sql").read_text()
    parts = _NAME.split(source)[1:]
    return {name: body.strip().rstrip(";") for name, body in zip(parts[::2], parts[1::2])}


def statement(job: str, name: str) -> TextClause:
    return text(statements(job)[name])
