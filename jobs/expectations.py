"""The ledger's invariants as Great Expectations suites, one suite per slice table.

Each invariant holds on a ledger that follows the specification, with its special cases in
mind: a failed twin command decides at once with no per-label entries (A.2.7); the
built-in-only shortcut answers with a plain response or 408 ``command.timeout`` (B.5); a weak
``search-persisted`` is a 200 with ``ditto-weak-ack`` (B.8, B.11). The slice tables are filled
by ``jobs/sql/validate.sql``; GX is imported by the caller and passed in, so that importing this
module stays cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ackstore.rules import labels, settlement


@dataclass(frozen=True)
class Invariant:
    """One expectation: what it states, over which slice table, and which columns name a row."""

    table: str
    states: str
    ids: tuple[str, ...]
    expectation: Callable[[Any, Any], Any]  # (gx, Column) -> Expectation


RESULT_IDS = ("signal_id", "attempt")
ACK_IDS = ("ack_id", "signal_id", "attempt", "label")
SETTLEMENT_IDS = ("settlement_id", "signal_id", "attempt")

INVARIANTS: tuple[Invariant, ...] = (
    # --- decided requests -------------------------------------------------------------------
    Invariant(
        "stage_check_results",
        "a request decided by its deadline was decided at or after that deadline",
        RESULT_IDS,
        lambda gx, col: gx.expectations.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="decided_at", column_B="deadline_at", or_equal=True, row_condition=col("cause") == "deadline"
        ),
    ),
    Invariant(
        "stage_check_results",
        "a request decided by its acks (or by the built-in-only shortcut's response) had every "
        "requested label counted in time",
        RESULT_IDS,
        lambda gx, col: gx.expectations.ExpectColumnPairValuesToBeEqual(
            column_A="counted_in_time", column_B="requested", row_condition=col("cause").is_in(["acks", "response"])
        ),
    ),
    Invariant(
        "stage_check_results",
        "a request decided early by an error is a failed twin command (the short-circuit)",
        RESULT_IDS,
        lambda gx, col: gx.expectations.ExpectColumnValuesToBeInSet(
            column="response_is_error", value_set=[True], row_condition=col("cause") == "error"
        ),
    ),
    Invariant(
        "stage_check_results",
        "an aggregated result body has exactly one entry per requested label",
        RESULT_IDS,
        lambda gx, col: gx.expectations.ExpectColumnPairValuesToBeEqual(
            column_A="body_entries", column_B="requested", row_condition=col("aggregated") == True  # noqa: E712
        ),
    ),
    Invariant(
        "stage_check_results",
        "an aggregated result body has no entry for a label that was not requested",
        RESULT_IDS,
        lambda gx, col: gx.expectations.ExpectColumnPairValuesToBeEqual(
            column_A="body_keys", column_B="requested", row_condition=col("aggregated") == True  # noqa: E712
        ),
    ),
    Invariant(
        "stage_check_results",
        "an aggregated status follows from its entries: 200 if all are 2xx, else 424",
        RESULT_IDS,
        lambda gx, col: gx.expectations.ExpectColumnPairValuesToBeEqual(
            column_A="status", column_B="combined_status", row_condition=col("aggregated") == True  # noqa: E712
        ),
    ),
    # --- counted acks -----------------------------------------------------------------------
    Invariant(
        "stage_check_acks",
        "at most one counted ack per (request, label)",
        ACK_IDS,
        lambda gx, col: gx.expectations.ExpectCompoundColumnsToBeUnique(column_list=["signal_id", "attempt", "label"]),
    ),
    Invariant(
        "stage_check_acks",
        "every counted ack's label was requested, a weak ack's included (B.8)",
        ACK_IDS,
        lambda gx, col: gx.expectations.ExpectColumnValuesToBeInSet(column="requested", value_set=[True]),
    ),
    Invariant(
        "stage_check_acks",
        "every counted twin-persisted ack belongs to a command whose response is a success",
        ACK_IDS,
        lambda gx, col: gx.expectations.ExpectColumnValuesToBeInSet(
            column="response_success", value_set=[True], row_condition=col("label") == labels.TWIN_PERSISTED
        ),
    ),
    Invariant(
        "stage_check_acks",
        "every counted twin-persisted ack's thing revision is in the event log",
        ACK_IDS,
        lambda gx, col: gx.expectations.ExpectColumnValuesToBeInSet(
            column="event_exists", value_set=[True], row_condition=col("label") == labels.TWIN_PERSISTED
        ),
    ),
    Invariant(
        "stage_check_acks",
        "a weak ack is a 200 (B.8)",
        ACK_IDS,
        lambda gx, col: gx.expectations.ExpectColumnValuesToBeInSet(
            column="status", value_set=[200], row_condition=col("weak") == True  # noqa: E712
        ),
    ),
    Invariant(
        "stage_check_acks",
        "a weak ack carries the header ditto-weak-ack: true (B.8)",
        ACK_IDS,
        lambda gx, col: gx.expectations.ExpectColumnValuesToBeInSet(
            column="weak_header", value_set=[True], row_condition=col("weak") == True  # noqa: E712
        ),
    ),
    Invariant(
        "stage_check_acks",
        "a weak ack for a custom label is for a label some subscriber declared (B.8)",
        ACK_IDS,
        lambda gx, col: gx.expectations.ExpectColumnValuesToBeInSet(
            column="declared", value_set=[True], row_condition=col("custom_weak") == True  # noqa: E712
        ),
    ),
    # --- settlement decisions ---------------------------------------------------------------
    Invariant(
        "stage_check_settlements",
        "every settlement decision belongs to a decided request",
        SETTLEMENT_IDS,
        lambda gx, col: gx.expectations.ExpectColumnValuesToBeInSet(column="decided", value_set=[True]),
    ),
    Invariant(
        "stage_check_settlements",
        "no settlement decision exists for an API or CLI source (its stored result is the answer)",
        SETTLEMENT_IDS,
        lambda gx, col: gx.expectations.ExpectColumnValuesToNotBeInSet(
            column="source", value_set=list(settlement.LOCAL_SOURCES)
        ),
    ),
    Invariant(
        "stage_check_settlements",
        "settlement decisions exist only for signals that came through a connection",
        SETTLEMENT_IDS,
        lambda gx, col: gx.expectations.ExpectColumnValuesToBeInSet(
            column="api", value_set=[settlement.TRANSPORT_API]
        ),
    ),
)
