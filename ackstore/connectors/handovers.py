"""What the connector's three threads hand each other (:mod:`ackstore.connectors.core`): the
broker's thread a :class:`Batch` of received messages to the storing thread; the storing and the
deciding thread deliveries to :class:`Settle` and answers to publish (:class:`Reply`) back to
the broker's thread, the only one that touches the session."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ackstore.connectors.transport import Message
from ackstore.rules.connectivity import Settling


@dataclass(frozen=True)
class Batch:
    """Messages received on one session (a delivery tag is only valid on it), to store."""

    session: int
    messages: list[Message]


@dataclass(frozen=True)
class Settle:
    """Deliveries for the broker's thread to settle."""

    session: int
    dispositions: dict[int, Settling]  # delivery tag -> how
    acknowledged: int = 0  # how many of them carry a settlement out (not a refusal, not a give-back)


@dataclass(frozen=True)
class Reply:
    """An answer to publish to a reply-to (none: nowhere to send it)."""

    reply_to: str | None
    message: dict[str, Any]
