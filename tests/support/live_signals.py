"""Live signals on the real PostgreSQL: a live message and its response as a sender writes them,
an ack token added to either, the custom label the pull tests request, and the store's clock a
test moves (so that nothing sleeps for a lease)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func, select

LABEL = "audit:checked"


class Clock:
    """The store's clock: the database's now, moved on by the test."""

    def __init__(self, engine: Engine) -> None:
        with engine.connect() as conn:
            self.now: datetime = conn.execute(select(func.now())).scalar_one()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def live_message(cid: str, *, thing: str = "org.acme/lamp-1", subject: str = "ask", **headers: Any) -> dict:
    return {
        "topic": f"{thing}/things/live/messages/{subject}",
        "headers": {"correlation-id": cid, **{k.replace("_", "-"): v for k, v in headers.items()}},
        "path": f"/inbox/messages/{subject}",
        "value": {"question": cid},
    }


def live_response(cid: str, status: int = 200, value: Any = "yes", *, thing: str = "org.acme/lamp-1",
                  token: str | None = None) -> dict:
    headers: dict[str, Any] = {"correlation-id": cid}
    if token is not None:
        headers["ack-token"] = token
    return {"topic": f"{thing}/things/live/messages/ask", "headers": headers, "path": "/outbox/messages/ask",
            "status": status, "value": value}


def with_token(message: dict, token: str) -> dict:
    return {**message, "headers": {**message["headers"], "ack-token": token}}
