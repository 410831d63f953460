"""Aggregation of acknowledgements into what the requester is told (B.5, B.4.3, A.2.4, A.2.7).

:func:`decide` states the rule for a request: it returns ``None`` while the request is
undecided, else the :class:`Result` to store in ``request_results``.

The rule is stated twice, and the sweep applies both halves. SQL decides the common case
(jobs/sql/sweep.sql: ``decide_builtin`` and ``decide_common``, every label in and 2xx or nothing
asked); the rest (the built-in-only shortcut, a created thing's location, a failed twin command,
a request still waiting or past its deadline) goes through :func:`decide`, in Spark
(``jobs.sweep.decide_row``). The late-acks report asks :func:`decide_with_late_ack` what an
attempt would have answered (``ackstore.ledger.reports``).
tests/ledger/test_aggregation_python_and_sql.py keeps the halves equal: on generated ledgers,
every request SQL decides gets exactly the answer :func:`decide` gives.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from ackstore.rules import errors, labels
from ackstore.rules.acks import ABSENT, Ack
from ackstore.rules.headers import CORRELATION_ID, REQUESTED_ACKS, RESPONSE_REQUIRED, Api
from ackstore.rules.wire import body_or_none, http_body, location, status_only

SHORTCUT_LABELS = frozenset({labels.TWIN_PERSISTED, labels.LIVE_RESPONSE})


@dataclass(frozen=True)
class Request:
    """What aggregation needs to know of a stored request."""

    correlation_id: str
    requested_acks: tuple[str, ...]
    response_required: bool
    timeout_ms: int
    api: Api = "http"
    headers: Mapping[str, Any] = field(default_factory=dict)  # the command's own (normalised) headers
    thing_id: str = ""
    path: str = "/"

    def aggregated_headers(self) -> dict[str, Any]:
        """The headers of an aggregated answer: the command's own, custom ones kept, without
        ``requested-acks`` and with ``response-required: false`` (B.5; Ditto's
        ``AcknowledgementAggregatorTest.keepCommandHeaders``)."""
        kept = {name: value for name, value in self.headers.items() if name != REQUESTED_ACKS}
        return {**kept, CORRELATION_ID: self.correlation_id, RESPONSE_REQUIRED: False}


@dataclass(frozen=True)
class Response:
    """A command's own response: the twin command response or a live response."""

    status: int
    payload: Any = ABSENT


@dataclass(frozen=True)
class Result:
    """The decided answer: status, body (``ABSENT`` for none) and response headers."""

    status: int
    body: Any
    headers: Mapping[str, Any] = field(default_factory=dict)
    cause: str = "acks"  # acks | deadline | error | response | accepted
    # label -> status of each entry an aggregated decision counted (408 placeholders included);
    # empty for a plain response, an error or command.timeout. Settlement unwraps these (B.9).
    ack_statuses: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "body": body_or_none(self.body), "headers": dict(self.headers)}


def timeout_placeholder(label: str, timeout_ms: int, correlation_id: str) -> Ack:
    """The 408 ack that stands for a label that did not arrive by the deadline (B.5 item 1)."""
    return Ack(
        label=label,
        status=408,
        payload=errors.request_timeout(timeout_ms).to_json(),
        headers={CORRELATION_ID: correlation_id},
    )


def collect(requested: Sequence[str], received: Iterable[Ack]) -> dict[str, Ack]:
    """First ack per requested label wins; unrequested labels are ignored (B.5 item 2)."""
    wanted = set(requested)
    collected: dict[str, Ack] = {}
    for ack in received:
        if ack.label in wanted and ack.label not in collected:
            collected[ack.label] = ack
    return collected


def combined_status(acks: Sequence[Ack]) -> int:
    """One ack → its status; several → 200 if all 2xx else 424; none → 200 (B.5)."""
    if len(acks) == 1:
        return acks[0].status
    return 200 if all(ack.is_success for ack in acks) else 424


def decide(
    request: Request,
    *,
    acks: Iterable[Ack] = (),
    response: Response | None = None,
    error: errors.DittoError | None = None,
    deadline_passed: bool = False,
    invalid_response: str | None = None,
) -> Result | None:
    """Decide a request, or return ``None`` while it still waits.

    ``acks`` are the acks that arrived by the deadline, in arrival order; ``response`` is the
    command's own response (used when no label was requested); ``error`` is a failed twin
    command, which decides the request at once and discards every ack (A.2.7);
    ``invalid_response`` is why the last live response that did not match the command was
    refused, named by a 408 ``command.timeout``.
    """
    headers = {CORRELATION_ID: request.correlation_id}
    if error is not None:
        return Result(error.status, error.to_json(), headers, cause="error")
    timeout = errors.command_timeout(request.timeout_ms, invalid_response).to_json()
    requested = request.requested_acks
    if not requested:
        return _without_acks(request, response, deadline_passed, headers, timeout)
    collected = collect(requested, acks)
    if request.response_required and len(requested) == 1 and requested[0] in SHORTCUT_LABELS:
        return _builtin_shortcut(request, collected.get(requested[0]), deadline_passed, headers, timeout)
    if len(collected) < len(requested) and not deadline_passed:
        return None
    complete = [
        _as_answered(collected[label], request) if label in collected
        else timeout_placeholder(label, request.timeout_ms, request.correlation_id)
        for label in requested
    ]
    return _aggregated(request, complete, "acks" if len(collected) == len(requested) else "deadline")


def _aggregated(request: Request, complete: Sequence[Ack], cause: str) -> Result:
    """The answer of a request decided with an entry per requested label (B.5, B.4.3)."""
    status = combined_status(complete)
    statuses = {ack.label: ack.status for ack in complete}
    headers = request.aggregated_headers()
    if request.response_required:
        return Result(status, http_body(complete, request.correlation_id), headers, cause, statuses)
    if all(ack.is_success for ack in complete):
        return Result(202, ABSENT, headers, cause, statuses)
    reduced = [status_only(ack) for ack in complete]
    return Result(status, http_body(reduced, request.correlation_id), headers, cause, statuses)


def undecidable(request: Request, *, response_is_error: bool, deadline_passed: bool) -> Result | None:
    """What a request is told whose stored facts — its headers, its command's response, its acks —
    cannot be read (only a ledger from before the depth limits holds such facts, decisions #116):
    500 ``internalerror``. A failed twin command's request at once (the error decides, A.2.7);
    any other once its deadline passed (``None`` until then), as its deadline decides it: the 500
    as its answer, or as the entry of every requested label (none is counted: none could be read)."""
    failed = errors.internal_error()
    if response_is_error:
        return decide(request, error=failed)
    if not request.requested_acks and not request.response_required:
        return decide(request)  # 202, whatever came
    if not deadline_passed:
        return None
    requested = request.requested_acks
    if not requested or (request.response_required and len(requested) == 1 and requested[0] in SHORTCUT_LABELS):
        return Result(failed.status, failed.to_json(), request.aggregated_headers(), cause="deadline")
    entry = failed.to_json()
    return _aggregated(request, [Ack(label, failed.status, entry, {CORRELATION_ID: request.correlation_id})
                                 for label in requested], "deadline")


def decide_with_late_ack(request: Request, counted: Sequence[Ack], late: Ack) -> Result:
    """What :func:`decide` would have answered had ``late`` come in time, after the acks the
    attempt counted (a late live response answers as the command's response). The late-acks
    report compares it with what was answered."""
    response = Response(late.status, late.payload) if late.label == labels.LIVE_RESPONSE else None
    result = decide(request, acks=[*counted, late], response=response, deadline_passed=True)
    assert result is not None, "past its deadline, every request is decided"
    return result


def _as_answered(ack: Ack, request: Request) -> Ack:
    """A collected ack as the answer shows it: over HTTP, a 201 ``twin-persisted`` entry carries
    the created resource's ``location`` (B.4.3)."""
    if ack.label == labels.TWIN_PERSISTED and ack.status == 201 and request.api == "http" and request.thing_id:
        return replace(ack, headers={**ack.headers, "location": location(request.thing_id, request.path)})
    return ack


def _without_acks(
    request: Request, response: Response | None, deadline_passed: bool, headers: dict[str, Any],
    timeout: dict[str, Any],
) -> Result | None:
    if not request.response_required:
        return Result(202, ABSENT, headers, cause="accepted")
    if response is not None:
        return Result(response.status, response.payload, headers, cause="response")
    if deadline_passed:
        return Result(408, timeout, request.aggregated_headers(), cause="deadline")
    return None


def _builtin_shortcut(
    request: Request, ack: Ack | None, deadline_passed: bool, headers: dict[str, Any], timeout: dict[str, Any]
) -> Result | None:
    """Exactly one built-in label requested: the plain response, or 408 ``command.timeout``."""
    if ack is not None:
        return Result(ack.status, ack.payload, headers, cause="response")
    if deadline_passed:
        return Result(408, timeout, request.aggregated_headers(), cause="deadline")
    return None
