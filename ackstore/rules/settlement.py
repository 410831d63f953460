"""The settlement decision for a consumed broker message (B.9, A.2.10).

:func:`decide_settlement` states B.9's decision table. The settle step applies it in two halves:
SQL acks what succeeded (jobs/sql/settle.sql: ``settle_common``, a 2xx result whose entries are
all 2xx), and the rest goes through :func:`decide_settlement` (``jobs.settle.decide_row``, in
Spark). tests/pipeline/test_settle.py
(``test_sql_acks_exactly_the_successes_and_as_python_would``) keeps them equal: SQL acks exactly
the successes from a connection, and the decision here for each of them is ack too.

Each transport carries a decision out as its protocol can. AMQP 0.9.1
(``ackstore.rules.connectivity.settling``): ack → ``basic.ack``, reject and dead-letter →
``basic.nack(requeue=False)``, redeliver → ``basic.nack(requeue=True)``. MQTT 3.1.1 and 5
(``ackstore.rules.mqtt.disposition``, the connector ackstore/connectors/mqtt.py): every decision is
a PUBACK, except a redeliver with ``reconnectForRedelivery``, which withholds it and reconnects; a
redeliver without it is PUBACKed and recorded as carried out as ack (:func:`carried_out_as_allowed`).
Dead-letter is a reject recorded as the attempts' end.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal, Mapping, Sequence

from ackstore.rules.acks import Ack, is_success
from ackstore.rules.aggregation import combined_status
from ackstore.rules.labels import LIVE_RESPONSE


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


# --- which signals need a transport settlement at all ----------------------------------------

TRANSPORT_API = "connectivity"  # broker connectors answer by the connectivity table (A.2.3)
LOCAL_SOURCES = ("api", "cli")  # their stored result is the answer (A.2.6)


def shared_source(source: str) -> bool:
    """The API's and the CLI's sources are every login's; any other is a connection's, and belongs
    to the database login that claimed it (decisions #104; the SQL function ``shared_source``)."""
    return source in LOCAL_SOURCES


def needs_transport_settlement(api: str, source: str) -> bool:
    """A signal from a connection is settled on its broker; API and CLI signals are not."""
    return api == TRANSPORT_API and not shared_source(source)


def carried_out_as_allowed(decision: str, carried_out_as: str | None) -> bool:
    """Whether a transport may record that it performed ``carried_out_as`` instead of
    ``decision`` (None: as decided): only MQTT's acknowledgement of a redeliver decision it cannot
    redeliver (decisions #99, ``ackstore.rules.mqtt.carried_out_as``). The database refuses any
    other (the function ``carried_out_as_allowed``, issue 37)."""
    return carried_out_as is None or (decision == Settlement.REDELIVER.value and carried_out_as == Settlement.ACK.value)


# --- where a signal stands (docs/signal-states.md) -------------------------------------------


class SignalState(str, Enum):
    """Where a signal's current attempt stands; only SETTLED is final and settled (decision #71)."""

    RECEIVED = "received"  # stored; not decided, no command response yet
    PERSISTED = "persisted"  # its twin change persisted; waiting for acks or the deadline
    FAILED = "failed"  # its twin command failed; the sweep decides it with that error (A.2.7)
    DECIDED = "decided"  # a connection's message, waiting for its settlement decision
    SETTLING = "settling"  # a settlement is decided; the connector has not carried it out
    REDELIVERING = "redelivering"  # redelivery carried out: the next attempt decides (A.2.10)
    DEAD_LETTERED = "dead-lettered"  # dead-letter carried out: the attempts are used up
    SETTLED = "settled"  # answered (API, CLI), or acked or rejected on the broker (connection)


def signal_state(*, needs_transport: bool, response_failed: bool | None, decided: bool, decision: str | None,
                 carried_out: bool) -> SignalState:
    """Where a signal stands, from its current attempt's facts: whether it needs a transport
    settlement, whether its command failed (None: no response), whether it is decided, its
    settlement decision (None: none yet) and whether that is carried out. The SQL function
    ``signal_state`` is this rule, for every surface that shows it (a test compares them)."""
    if not decided:
        if response_failed is None:
            return SignalState.RECEIVED
        return SignalState.FAILED if response_failed else SignalState.PERSISTED
    if not needs_transport:
        return SignalState.SETTLED
    if decision is None:
        return SignalState.DECIDED
    if not carried_out:
        return SignalState.SETTLING
    return {Settlement.REDELIVER.value: SignalState.REDELIVERING,
            Settlement.DEAD_LETTER.value: SignalState.DEAD_LETTERED}.get(decision, SignalState.SETTLED)


# --- a stored result as B.9's outcome, and what a redelivery asks for again (A.2.10) ----------


def _settlement_status(label: str, status: int) -> int:
    """An aggregated entry's status as settlement sees it: a live response fails only with
    408 (B.9), so any other status of it counts as a success."""
    return 200 if label == LIVE_RESPONSE and status != 408 else status


def outcome_of_result(cause: str, status: int, ack_statuses: Mapping[str, int], *, live: bool) -> Outcome:
    """The outcome a decided request stands for in B.9's table.

    ``ack_statuses`` are the entries an aggregated decision counted (label -> status); a result
    without them is a plain (twin or live) response, the ``accepted`` 202, or an error — a
    failed twin command or 408 ``command.timeout`` (both ``DittoRuntimeException`` in Ditto).
    """
    if ack_statuses:
        members = [Ack(label, _settlement_status(label, s)) for label, s in ack_statuses.items()]
        return Outcome("acks", combined_status(members), tuple(ack.status for ack in members))
    if cause == "response":
        return Outcome("live-response" if live else "response", status)
    if cause == "accepted":
        return Outcome("response", status)
    return Outcome("error", status)


def labels_to_request_again(requested: Sequence[str], ack_statuses: Mapping[str, int]) -> tuple[str, ...]:
    """The labels a redelivered attempt requests again: those that did not succeed (A.2.10).

    Without per-label entries (the built-in-only shortcut timed out) that is every label.
    """
    again = tuple(
        label for label in requested
        if label not in ack_statuses or not is_success(_settlement_status(label, ack_statuses[label]))
    )
    return again or tuple(requested)


__all__ = [
    "Outcome",
    "Settlement",
    "SignalState",
    "carried_out_as_allowed",
    "decide_settlement",
    "is_failed",
    "labels_to_request_again",
    "needs_transport_settlement",
    "shared_source",
    "outcome_of_result",
    "signal_state",
    "wants_redelivery",
]
