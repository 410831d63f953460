"""A signal's timeline as ``ackstore show`` and the page's search show it: its columns (the
terminal puts an ack's label beside its checkpoint) and the line that describes the signal."""

from __future__ import annotations

from typing import Any

from ackstore.reporting.tables import PAGE, Column
from ackstore.reporting.shown_text import shown

TIMELINE = (Column("at", "at", "moment"), Column("attempt", "attempt", "count"), Column("checkpoint", "checkpoint"),
            Column("label", "label", on=(PAGE,)), Column("status", "status", "count"), Column("detail", "detail"))


def described(state: dict[str, Any]) -> str:
    """What the signal is and where it stands, after its correlation id: 'modify-thing modify of
    org.acme:lamp from plant-a — settled, answered 204' (shown)."""
    result = state.get("result") or {}
    return (f"{shown(state['kind'])} {shown(state['action'])} of {shown(state['thing_id'])} from "
            f"{shown(state['source'])} — {shown(state['state'])}"
            + (f", answered {result['status']}" if isinstance(result.get("status"), int) else ""))
