"""The settlement decision for a consumed broker message (B.9, A.2.10).

Only AMQP 0.9.1 is carried out for now: ack → ``basic.ack``, reject → ``basic.nack(requeue=False)``,
redeliver → ``basic.nack(requeue=True)``; dead-letter is a reject recorded as the attempts' end.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal, Sequence


class Settlement(str, Enum):
    ACK = "ack"
    REJECT = "reject"  # negative, no redelivery
    REDELIVER = "redeliver"  # negative, with redelivery
    DEAD_LETTER = "dead-letter"  # would redeliver, but the attempts are used up (A.2.10)


OutcomeKind = Literal["response", "live-response", "error", "acks"]


@dataclass(frozen=True)
class Outcome:
    """One collected result for a message: a command response, a live response, a
    ``DittoRuntimeException`` error, or aggregated acks with their members' statuses."""

    kind: OutcomeKind
    status: int
    member_statuses: tuple[int, ...] = ()


def is_failed(outcome: Outcome) -> bool:
    """B.9 "failed": a live response only on 408; a 412 error counts as success; else 4xx/5xx."""
    if outcome.kind == "live-response":
        return outcome.status == 408
    if outcome.kind == "error" and outcome.status == 412:
        return False
    return 400 <= outcome.status < 600


def wants_redelivery(status: int) -> bool:
    return status in (408, 424) or 500 <= status < 600


def _redelivery_statuses(outcome: Outcome) -> Sequence[int]:
    if outcome.kind == "acks" and outcome.member_statuses:
        return outcome.member_statuses  # aggregated acks are unwrapped into their members
    return (outcome.status,)


def decide_settlement(
    outcomes: Sequence[Outcome],
    *,
    expected: int,
    non_ditto_failure: bool = False,
    attempt: int = 1,
    max_attempts: int = 5,
) -> Settlement:
    """Decide how to settle a message that expected ``expected`` results (B.9's decision table)."""
    decision = _decide(outcomes, expected=expected, non_ditto_failure=non_ditto_failure)
    if decision is Settlement.REDELIVER and attempt >= max_attempts:
        return Settlement.DEAD_LETTER
    return decision


def _decide(outcomes: Sequence[Outcome], *, expected: int, non_ditto_failure: bool) -> Settlement:
    if non_ditto_failure:
        return Settlement.REDELIVER
    failed = [outcome for outcome in outcomes if is_failed(outcome)]
    if failed:
        redeliver = any(wants_redelivery(s) for outcome in failed for s in _redelivery_statuses(outcome))
        return Settlement.REDELIVER if redeliver else Settlement.REJECT
    if len(outcomes) < expected:
        return Settlement.REDELIVER  # not all results arrived, none failed
    return Settlement.ACK


__all__ = ["Outcome", "Settlement", "decide_settlement", "is_failed", "wants_redelivery"]
