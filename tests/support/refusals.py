"""What the database refuses a write with: the SQLSTATE of a statement run in a transaction of
its own, and the SQLSTATEs that count as a refusal."""

from __future__ import annotations

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

# What a refusal is: no privilege, a function's or a trigger's check, a constraint.
REFUSALS = {"42501", "23514", "23505"}


def refusal(engine: Engine, sql: str, params: dict | None = None) -> str | None:
    """The SQLSTATE that refused ``sql`` (None if it ran); nothing it wrote is kept."""
    try:
        with engine.begin() as conn:
            conn.execute(text(sql), params or {})
    except DBAPIError as error:
        return getattr(error.orig, "pgcode", None)
    return None
