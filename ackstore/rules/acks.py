"""The acknowledgement value object shared by the rules, the store and the jobs."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
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


class Disposition(str, Enum):
    """Which ack counts (A.2.5, A.2.8, A.2.10). Every valid ack is kept with one of these; only a
    counted one whose fact time is by its attempt's deadline enters the decision. The ledger's
    SQL follows this rule: a CHECK holds the values, a partial unique index keeps one counted ack
    per (request, label), a counted ack after the deadline of a request decided by it is shown
    late (decided_disposition), and built-in acks derive theirs in the view builtin_acks."""

    COUNTED = "counted"  # the first for a label its (undecided) attempt requested
    DUPLICATE = "duplicate"  # a later one for a label already counted
    LATE = "late"  # its attempt was decided before it, or it came after the deadline decided by
    UNREQUESTED = "unrequested"  # a declared label the attempt did not request
    INVALID = "invalid"  # a live response that does not answer its command (kept with why)


def disposition_on_arrival(*, decided: bool, requested: bool, invalid: bool = False) -> Disposition:
    """An arriving ack's disposition: COUNTED means counted if it is the first for its label (the
    ledger's unique index then keeps a second one as DUPLICATE)."""
    if invalid:
        return Disposition.INVALID
    if decided:
        return Disposition.LATE
    return Disposition.COUNTED if requested else Disposition.UNREQUESTED


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
