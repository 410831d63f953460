"""Helpers for tests that look into the ledger."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, select

from ackstore.ledger.schema import LEDGER_TABLES


def snapshot(engine: Engine, *, without: tuple[str, ...] = ()) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every ledger table (but ``without``), in a stable order: compare two to see any change."""
    with engine.connect() as conn:
        return {
            table.name: sorted(tuple(map(repr, row)) for row in conn.execute(select(table)))
            for table in LEDGER_TABLES
            if table.name not in without
        }


def twin_command(
    action: str = "modify",
    *,
    thing: str = "org.acme/lamp-1",
    path: str = "/attributes/on",
    value: Any = True,
    **headers: Any,
) -> dict[str, Any]:
    envelope: dict[str, Any] = {
        "topic": f"{thing}/things/twin/commands/{action}",
        "headers": {name.replace("_", "-"): v for name, v in headers.items()},
        "path": path,
    }
    if action != "delete":
        envelope["value"] = value
    return envelope


def ack_message(correlation_id: str, label: str, status: int = 200, value: Any = None, channel: str = "twin") -> dict:
    message: dict[str, Any] = {
        "topic": f"org.acme/lamp-1/things/{channel}/acks/{label}",
        "headers": {"correlation-id": correlation_id},
        "path": "/",
        "status": status,
    }
    if value is not None:
        message["value"] = value
    return message
