"""The acknowledgement value object shared by the rules, the store and the jobs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


class _Absent:
    """Marks a payload that is not there, as distinct from a JSON ``null`` payload."""

    _instance: "_Absent | None" = None

    def __new__(cls) -> "_Absent":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()

BUILTIN_ISSUER = "ackstore"  # the issuer recorded on the built-in acks the pipeline writes


def is_success(status: int) -> bool:
    """Success means 2xx exactly; 1xx and 3xx are failures (B.5)."""
    return 200 <= status < 300


@dataclass(frozen=True)
class Ack:
    """One acknowledgement: a label's status, optional payload, headers and weak flag."""

    label: str
    status: int
    payload: Any = ABSENT
    headers: Mapping[str, Any] = field(default_factory=dict)
    weak: bool = False

    @property
    def has_payload(self) -> bool:
        return self.payload is not ABSENT

    @property
    def is_success(self) -> bool:
        return is_success(self.status)
