"""The ledger's invariants, one row each: the subject it speaks about and, in SQL over that
subject's facts, what breaks it.

A subject is a named query of ``jobs/sql/validate.sql`` over the validation slice, one row per
decided request (``requests``) or per settlement decision (``settlements``). Each invariant holds on
a ledger that follows the specification, with its special cases in mind: a failed twin command
decides at once with no per-label entries (A.2.7); the built-in-only shortcut answers with a plain
response or 408 ``command.timeout`` (B.5); a weak ``search-persisted`` is a 200 with
``ditto-weak-ack`` (B.8, B.11). A row whose signal, or a redelivery's attempt row, is gone
(``stored`` false; attempt 1 is its signal, decisions #146) breaks the orphan invariant of its
subject and no other: the rest speak about stored rows only.
"""

from __future__ import annotations

from dataclasses import dataclass

from ackstore.rules import settlement


@dataclass(frozen=True)
class Invariant:
    """One invariant: its subject, what it states, and a SQL condition over the subject's columns
    that is true for a row that breaks it (NULL, a fact the row lacks, does not count)."""

    subject: str
    states: str
    broken: str


def _literals(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{value}'" for value in values)  # the rules' constants, never input


SAMPLES = 5  # failing rows named per invariant

# The table each subject's slice is rows of: Great Expectations' asset, where it puts ``{batch}``.
SUBJECT_TABLES = {"requests": "request_results", "settlements": "settlements"}

# Which columns name a row of each subject in a failure's samples.
SUBJECT_IDS = {
    "requests": ("signal_id", "attempt"),
    "settlements": ("settlement_id", "signal_id", "attempt"),
}

INVARIANTS: tuple[Invariant, ...] = (
    # --- decided requests -------------------------------------------------------------------
    Invariant(
        "requests",
        "every decided request of the slice belongs to a stored signal and attempt (no orphan)",
        "NOT stored",
    ),
    Invariant(
        "requests",
        "a request decided by its deadline was decided at or after that deadline",
        "stored AND cause = 'deadline' AND decided_at < deadline_at",
    ),
    Invariant(
        "requests",
        "a request decided by its acks (or by the built-in-only shortcut's response) had every "
        "requested label counted in time",
        "stored AND cause IN ('acks', 'response') AND counted_in_time <> requested",
    ),
    Invariant(
        "requests",
        "a request decided early by an error is a failed twin command (the short-circuit)",
        "stored AND cause = 'error' AND NOT response_is_error",
    ),
    Invariant(
        "requests",
        "an aggregated result body has exactly one entry per requested label",
        "stored AND aggregated AND NOT (body_is_object AND body_has_every_label)",
    ),
    Invariant(
        "requests",
        "an aggregated result body has no entry for a label that was not requested",
        "stored AND aggregated AND body_has_other_labels",
    ),
    Invariant(
        "requests",
        "an aggregated status follows from its entries: 200 if all are 2xx, else 424",
        "stored AND aggregated AND body_is_object AND status <> CASE WHEN body_entries_all_2xx THEN 200 ELSE 424 END",
    ),
    Invariant(
        "requests",
        "an answer whose entries are derived where read asked for both built-in labels and has their facts",
        "stored AND body_derived AND NOT body_derivable",
    ),
    Invariant(
        "requests",
        "a plain response derived where read asked for twin-persisted alone and has its command's response",
        "stored AND response_derived AND NOT response_derivable",
    ),
    # --- the counted acks of decided requests -----------------------------------------------
    Invariant(
        "requests",
        "at most one counted ack per (request, label)",
        "stored AND duplicated",
    ),
    Invariant(
        "requests",
        "every counted ack's label was requested, a weak ack's included (B.8)",
        "stored AND unrequested",
    ),
    Invariant(
        "requests",
        "every counted twin-persisted ack belongs to a command whose response is a success",
        "stored AND (stored_persisted OR derived_persisted) AND NOT response_success",
    ),
    Invariant(
        "requests",
        "every counted twin-persisted ack's thing revision is in the event log",
        "stored AND stored_persisted AND NOT event_exists",  # a derived one is its event
    ),
    Invariant(
        "requests",
        "a built-in ack stored as a row is one kept from before the lean ledger (decisions #96)",
        "stored AND builtin_stored_since_lean",
    ),
    Invariant(
        "requests",
        "a weak ack is a 200 (B.8)",
        "stored AND weak_not_200",
    ),
    Invariant(
        "requests",
        "a weak ack carries the header ditto-weak-ack: true (B.8)",
        "stored AND weak_unmarked",
    ),
    Invariant(
        "requests",
        "a weak ack for a custom label is for a label some subscriber declared (B.8)",
        "stored AND weak_undeclared",
    ),
    # --- settlement decisions ---------------------------------------------------------------
    Invariant(
        "settlements",
        "every settlement decision of the slice belongs to a stored signal (no orphan)",
        "NOT stored",
    ),
    Invariant(
        "settlements",
        "every settlement decision belongs to a decided request",
        "stored AND NOT decided",
    ),
    Invariant(
        "settlements",
        "no settlement decision exists for an API or CLI source (its stored result is the answer)",
        f"stored AND source IN ({_literals(settlement.LOCAL_SOURCES)})",
    ),
    Invariant(
        "settlements",
        "settlement decisions exist only for signals that came through a connection",
        f"stored AND api <> '{settlement.TRANSPORT_API}'",
    ),
)

SUBJECTS: tuple[str, ...] = tuple(dict.fromkeys(invariant.subject for invariant in INVARIANTS))


def of(subject: str) -> tuple[Invariant, ...]:
    """The invariants of ``subject``, in :data:`INVARIANTS` order."""
    return tuple(invariant for invariant in INVARIANTS if invariant.subject == subject)


def unexpected_rows_query(subject: str, facts: str) -> str:
    """The query Great Expectations runs for ``subject``: over its ``facts`` (a query over
    ``{batch}``, the slice), one row per broken invariant — its number in :func:`of` (from 1),
    how many rows break it, and some of them — and none when all hold. One pass over the slice."""
    invariants = of(subject)
    ids = ", ".join(f"'{column}', f.{column}" for column in SUBJECT_IDS[subject])
    broken = ",\n               ".join(f"({invariant.broken})" for invariant in invariants)
    return f"""
SELECT c.invariant, count(*) AS unexpected, (array_agg(x.sample ORDER BY x.sample))[1:{SAMPLES}] AS samples
FROM (
    SELECT jsonb_build_object({ids}) AS sample,
           ARRAY[{broken}] AS broken
    FROM ({facts}) AS f
) AS x
CROSS JOIN LATERAL unnest(x.broken) WITH ORDINALITY AS c(is_broken, invariant)
WHERE true = ANY (x.broken) AND c.is_broken
GROUP BY c.invariant
"""

