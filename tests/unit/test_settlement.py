"""B.9's decision table for consumed broker messages, row by row, with A.2.10's attempt bound."""

import pytest

from ackstore.rules.settlement import (
    Outcome,
    Settlement,
    decide_settlement,
    labels_to_request_again,
    needs_transport_settlement,
    outcome_of_result,
)

ACK, REJECT, REDELIVER, DEAD = Settlement.ACK, Settlement.REJECT, Settlement.REDELIVER, Settlement.DEAD_LETTER

ROWS = [
    # (row, outcomes, expected results, non-Ditto failure, decision)
    ("all arrived, none failed", [Outcome("acks", 200, (204, 200))], 1, False, ACK),
    ("all arrived, a plain response", [Outcome("response", 201)], 1, False, ACK),
    ("weak acks succeed", [Outcome("acks", 200, (204, 200))], 1, False, ACK),
    ("error 412 counts as success", [Outcome("error", 412)], 1, False, ACK),
    ("error 400 → reject", [Outcome("error", 400)], 1, False, REJECT),
    ("error 404 → reject", [Outcome("error", 404)], 1, False, REJECT),
    ("error 409 → reject", [Outcome("error", 409)], 1, False, REJECT),
    ("error 413 → reject", [Outcome("error", 413)], 1, False, REJECT),
    ("error 408 → redeliver", [Outcome("error", 408)], 1, False, REDELIVER),
    ("error 424 → redeliver", [Outcome("error", 424)], 1, False, REDELIVER),
    ("error 500 → redeliver", [Outcome("error", 500)], 1, False, REDELIVER),
    ("error 503 → redeliver", [Outcome("error", 503)], 1, False, REDELIVER),
    ("acks failed, a member 408 → redeliver", [Outcome("acks", 424, (204, 408))], 1, False, REDELIVER),
    ("acks failed, a member 5xx → redeliver", [Outcome("acks", 424, (500, 204))], 1, False, REDELIVER),
    ("acks failed, a member 424 → redeliver", [Outcome("acks", 424, (424, 204))], 1, False, REDELIVER),
    ("acks failed, members only other 4xx → reject", [Outcome("acks", 424, (400, 204))], 1, False, REJECT),
    ("single custom ack 408 → redeliver", [Outcome("acks", 408, (408,))], 1, False, REDELIVER),
    ("single custom ack 403 → reject", [Outcome("acks", 403, (403,))], 1, False, REJECT),
    ("not all arrived, none failed → redeliver", [Outcome("response", 204)], 2, False, REDELIVER),
    ("nothing arrived → redeliver", [], 1, False, REDELIVER),
    ("non-Ditto failure → redeliver", [Outcome("response", 204)], 1, True, REDELIVER),
    ("live response 408 fails → redeliver", [Outcome("live-response", 408)], 1, False, REDELIVER),
    ("live response 500 is not a failure", [Outcome("live-response", 500)], 1, False, ACK),
    ("live response 404 is not a failure", [Outcome("live-response", 404)], 1, False, ACK),
    ("invalid headers (400) → reject without redelivery", [Outcome("error", 400)], 1, False, REJECT),
    ("one failed among several", [Outcome("response", 204), Outcome("error", 404)], 2, False, REJECT),
    ("3xx is not a failure for settlement", [Outcome("response", 304)], 1, False, ACK),
]


@pytest.mark.parametrize(("row", "outcomes", "expected", "non_ditto", "decision"), ROWS, ids=[r[0] for r in ROWS])
def test_decision_table(row: str, outcomes: list, expected: int, non_ditto: bool, decision: Settlement) -> None:
    assert decide_settlement(outcomes, expected=expected, non_ditto_failure=non_ditto) is decision


@pytest.mark.parametrize(
    ("attempt", "decision"),
    [(1, REDELIVER), (4, REDELIVER), (5, DEAD), (6, DEAD)],
)
def test_redelivery_is_bounded_by_attempts(attempt: int, decision: Settlement) -> None:
    outcomes = [Outcome("error", 503)]
    assert decide_settlement(outcomes, expected=1, attempt=attempt, max_attempts=5) is decision


def test_rejects_and_acks_are_not_affected_by_attempts() -> None:
    assert decide_settlement([Outcome("error", 400)], expected=1, attempt=9) is REJECT
    assert decide_settlement([Outcome("response", 204)], expected=1, attempt=9) is ACK


# --- a stored result as B.9's outcome (what the settle job decides on) ---------------------------

RESULT_ROWS = [
    # (row, cause, status, ack_statuses, live, outcome)
    ("twin error 404", "error", 404, {}, False, Outcome("error", 404)),
    ("twin error 412 (if-match)", "error", 412, {}, False, Outcome("error", 412)),
    ("shortcut: plain twin response", "response", 204, {}, False, Outcome("response", 204)),
    ("shortcut: plain live response", "response", 404, {}, True, Outcome("live-response", 404)),
    ("shortcut timed out: 408 command.timeout", "deadline", 408, {}, False, Outcome("error", 408)),
    ("no labels, response-required=false: 202", "accepted", 202, {}, False, Outcome("response", 202)),
    ("aggregated, all in", "acks", 200, {"twin-persisted": 204, "c:a": 200}, False, Outcome("acks", 200, (204, 200))),
    ("aggregated, one timed out", "deadline", 424, {"twin-persisted": 204, "c:a": 408}, False,
     Outcome("acks", 424, (204, 408))),
    ("one custom label, 400", "acks", 400, {"c:a": 400}, False, Outcome("acks", 400, (400,))),
    ("weak search-persisted counts as success", "acks", 200, {"twin-persisted": 204, "search-persisted": 200},
     False, Outcome("acks", 200, (204, 200))),
    ("live-response entry 404 is no failure", "acks", 424, {"live-response": 404, "c:a": 200}, True,
     Outcome("acks", 200, (200, 200))),
    ("live-response entry 408 is a failure", "deadline", 424, {"live-response": 408, "c:a": 200}, True,
     Outcome("acks", 424, (408, 200))),
    ("response-required=false, all succeeded: 202", "acks", 202, {"twin-persisted": 204, "c:a": 200}, False,
     Outcome("acks", 200, (204, 200))),
]


@pytest.mark.parametrize(("row", "cause", "status", "ack_statuses", "live", "outcome"), RESULT_ROWS,
                         ids=[r[0] for r in RESULT_ROWS])
def test_outcome_of_a_stored_result(row: str, cause: str, status: int, ack_statuses: dict, live: bool,
                                    outcome: Outcome) -> None:
    assert outcome_of_result(cause, status, ack_statuses, live=live) == outcome


@pytest.mark.parametrize(
    ("requested", "ack_statuses", "again"),
    [
        (("twin-persisted", "c:a"), {"twin-persisted": 204, "c:a": 408}, ("c:a",)),
        (("twin-persisted", "c:a"), {"twin-persisted": 408, "c:a": 503}, ("twin-persisted", "c:a")),
        (("twin-persisted", "search-persisted", "c:a"), {"twin-persisted": 204, "search-persisted": 200, "c:a": 424},
         ("c:a",)),
        (("twin-persisted",), {}, ("twin-persisted",)),  # the shortcut timed out: no entries
        (("live-response", "c:a"), {"live-response": 404, "c:a": 408}, ("c:a",)),  # a live 404 succeeded
        (("live-response", "c:a"), {"live-response": 408, "c:a": 200}, ("live-response",)),
    ],
)
def test_a_redelivery_requests_again_what_did_not_succeed(requested: tuple, ack_statuses: dict, again: tuple) -> None:
    assert labels_to_request_again(requested, ack_statuses) == again


@pytest.mark.parametrize(
    ("api", "source", "needed"),
    [
        ("connectivity", "amqp-orders", True),
        ("connectivity", "api", False),
        ("connectivity", "cli", False),
        ("http", "amqp-orders", False),
        ("websocket", "ws-session", False),
        ("http", "api", False),
    ],
)
def test_only_signals_from_a_connection_need_transport_settlement(api: str, source: str, needed: bool) -> None:
    assert needs_transport_settlement(api, source) is needed
