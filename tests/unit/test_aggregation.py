"""B.5: collection and the final result table, row by row (A.2.7's short-circuit included)."""

import pytest

from ackstore.rules import errors
from ackstore.rules.acks import ABSENT, Ack
from ackstore.rules.aggregation import (
    Request,
    Response,
    collect,
    combined_status,
    decide,
    decide_with_late_ack,
    timeout_placeholder,
)

CID = "cid-1"
THING_CREATED = {"thingId": "org.acme:t1", "attributes": {"a": 1}}


def request(*labels: str, rr: bool = True, timeout_ms: int = 42_000) -> Request:
    return Request(correlation_id=CID, requested_acks=labels, response_required=rr, timeout_ms=timeout_ms)


def timeout_payload(ms_text: str) -> dict:
    return {
        "status": 408,
        "error": "acknowledgement:request.timeout",
        "message": f"The acknowledgement request reached the specified timeout of {ms_text}ms.",
        "description": "Try increasing the timeout and make sure that the requested acknowledgement is sent back in time.",
    }


def command_timeout_payload(ms_text: str) -> dict:
    return {
        "status": 408,
        "error": "command.timeout",
        "message": f"The Command reached the specified timeout of {ms_text}ms.",
        "description": "Try increasing the command timeout.",
    }


# --- the final result table ----------------------------------------------------------------


def test_row_error_arrived_first_is_the_result_alone() -> None:
    conflict = errors.DittoError(409, "things:thing.conflict", "The Thing with ID 'org.acme:t1' already exists")
    result = decide(
        request("twin-persisted", "my:ack"), acks=[Ack("my:ack", 200)], error=conflict, deadline_passed=False
    )
    assert result is not None
    assert (result.status, result.body, result.cause) == (409, conflict.to_json(), "error")


@pytest.mark.parametrize(
    ("label", "ack", "status", "body"),
    [
        ("twin-persisted", Ack("twin-persisted", 201, THING_CREATED), 201, THING_CREATED),
        ("twin-persisted", Ack("twin-persisted", 204), 204, ABSENT),
        ("live-response", Ack("live-response", 200, {"answer": 42}), 200, {"answer": 42}),
        ("live-response", Ack("live-response", 500, "broken"), 500, "broken"),
    ],
)
def test_row_single_builtin_arrived_is_the_plain_response(label: str, ack: Ack, status: int, body: object) -> None:
    result = decide(request(label), acks=[ack])
    assert result is not None
    assert (result.status, result.body, result.cause) == (status, body, "response")
    assert result.to_json()["body"] == (None if body is ABSENT else body)


@pytest.mark.parametrize("label", ["twin-persisted", "live-response"])
def test_row_single_builtin_deadline_passed_is_408_command_timeout(label: str) -> None:
    assert decide(request(label), acks=[], deadline_passed=False) is None
    result = decide(request(label), acks=[], deadline_passed=True)
    assert result is not None
    assert (result.status, result.body) == (408, command_timeout_payload("42,000"))


@pytest.mark.parametrize(
    ("label", "ack", "status", "body"),
    [
        ("my:ack", Ack("my:ack", 200, "done"), 200, "done"),
        ("my:ack", Ack("my:ack", 400, {"why": "bad"}), 400, {"why": "bad"}),
        ("search-persisted", Ack("search-persisted", 204), 204, ABSENT),
    ],
)
def test_row_exactly_one_other_ack_gives_its_status(label: str, ack: Ack, status: int, body: object) -> None:
    result = decide(request(label), acks=[ack])
    assert result is not None and (result.status, result.body, result.cause) == (status, body, "acks")


def test_row_exactly_one_custom_label_timed_out_is_its_408() -> None:
    result = decide(request("my:ack", timeout_ms=1_337), acks=[], deadline_passed=True)
    assert result is not None
    assert (result.status, result.body, result.cause) == (408, timeout_payload("1,337"), "deadline")


def test_row_two_or_more_all_2xx_is_200_keyed_by_label() -> None:
    result = decide(
        request("twin-persisted", "my:ack"),
        acks=[Ack("twin-persisted", 204), Ack("my:ack", 200, {"ok": True})],
    )
    assert result is not None
    assert result.status == 200
    assert result.body == {
        "twin-persisted": {"status": 204, "headers": {"correlation-id": CID}},
        "my:ack": {"status": 200, "payload": {"ok": True}, "headers": {"correlation-id": CID}},
    }
    assert result.headers == {"correlation-id": CID, "response-required": False}  # the command's, B.5


@pytest.mark.parametrize(
    "statuses",
    [(204, 400), (500, 503), (204, 302), (204, 101)],
    ids=["one failed", "all failed", "3xx is a failure", "1xx is a failure"],
)
def test_row_two_or_more_not_all_2xx_is_424(statuses: tuple[int, int]) -> None:
    acks = [Ack("a:one", statuses[0]), Ack("a:two", statuses[1])]
    result = decide(request("a:one", "a:two"), acks=acks)
    assert result is not None and result.status == 424


def test_row_all_timed_out_with_several_labels_is_424_with_placeholders() -> None:
    result = decide(request("a:one", "a:two"), acks=[], deadline_passed=True)
    assert result is not None
    assert result.status == 424
    assert result.body == {
        "a:one": {"status": 408, "payload": timeout_payload("42,000"), "headers": {"correlation-id": CID}},
        "a:two": {"status": 408, "payload": timeout_payload("42,000"), "headers": {"correlation-id": CID}},
    }


def test_row_zero_acks_is_200() -> None:
    assert combined_status([]) == 200


def test_a_weak_ack_counts_as_success() -> None:
    weak = Ack("my:ack", 200, "filtered out", weak=True)
    result = decide(request("twin-persisted", "my:ack"), acks=[Ack("twin-persisted", 204), weak])
    assert result is not None and result.status == 200
    assert result.body["my:ack"]["headers"] == {"correlation-id": CID, "ditto-weak-ack": True}


# --- collection ----------------------------------------------------------------------------


def test_first_ack_per_label_wins_and_unrequested_labels_are_ignored() -> None:
    received = [Ack("a:one", 500), Ack("x:other", 200), Ack("a:one", 200), Ack("a:two", 200)]
    collected = collect(("a:one", "a:two"), received)
    assert collected == {"a:one": Ack("a:one", 500), "a:two": Ack("a:two", 200)}
    result = decide(request("a:one", "a:two"), acks=received)
    assert result is not None and result.status == 424


def test_undecided_until_all_labels_arrived_or_the_deadline() -> None:
    partial = [Ack("twin-persisted", 204)]
    assert decide(request("twin-persisted", "my:ack"), acks=partial) is None
    late = decide(request("twin-persisted", "my:ack"), acks=partial, deadline_passed=True)
    assert late is not None and late.status == 424 and late.cause == "deadline"
    assert late.body["my:ack"]["status"] == 408


def test_placeholder_has_only_the_correlation_id_header() -> None:
    placeholder = timeout_placeholder("my:ack", 42_000, CID)
    assert placeholder.status == 408
    assert placeholder.headers == {"correlation-id": CID}
    assert placeholder.payload == timeout_payload("42,000")


# --- response-required=false and no labels -------------------------------------------------


def test_http_without_response_is_202_once_all_acks_succeed() -> None:
    result = decide(request("twin-persisted", "my:ack", rr=False), acks=[Ack("twin-persisted", 204), Ack("my:ack", 200, "x")])
    assert result is not None and (result.status, result.body) == (202, ABSENT)


def test_http_without_response_answers_failures_with_status_only_entries() -> None:
    acks = [Ack("twin-persisted", 204, headers={"etag": '"rev:1"'}), Ack("my:ack", 500, "broken")]
    result = decide(request("twin-persisted", "my:ack", rr=False), acks=acks)
    assert result is not None and result.status == 424
    assert result.body == {
        "twin-persisted": {"status": 204, "headers": {"correlation-id": CID}},
        "my:ack": {"status": 500, "headers": {"correlation-id": CID}},
    }


def test_http_without_response_single_failed_ack_has_no_body() -> None:
    result = decide(request("my:ack", rr=False), acks=[], deadline_passed=True)
    assert result is not None and (result.status, result.body) == (408, ABSENT)


def test_no_labels_and_no_response_required_is_accepted_at_once() -> None:
    result = decide(request(rr=False))
    assert result is not None and (result.status, result.cause) == (202, "accepted")


def test_no_labels_with_response_required_waits_for_the_response() -> None:
    assert decide(request()) is None
    answered = decide(request(), response=Response(201, THING_CREATED))
    assert answered is not None and (answered.status, answered.body) == (201, THING_CREATED)
    timed_out = decide(request(), deadline_passed=True)
    assert timed_out is not None and (timed_out.status, timed_out.body) == (408, command_timeout_payload("42,000"))


# --- the late-acks report: what a late ack would have changed, had it come in time ---------------

@pytest.mark.parametrize(("req", "counted", "late", "answered", "would"), [
    # the only label: its 408 placeholder becomes the ack's status
    (request("app:done"), [], Ack("app:done", 200), 408, 200),
    (request("app:done"), [], Ack("app:done", 503), 408, 503),
    # two labels, the other failed: 424 either way
    (request("a:x", "b:y"), [Ack("a:x", 500)], Ack("b:y", 200), 424, 424),
    # two labels, the other succeeded: 424 becomes 200
    (request("a:x", "b:y"), [Ack("a:x", 200)], Ack("b:y", 200), 424, 200),
    # response not required: all successful is 202, without a body
    (request("a:x", "b:y", rr=False), [Ack("a:x", 200)], Ack("b:y", 204), 424, 202),
    # the label was counted already (the first counts): nothing changes
    (request("a:x", "b:y"), [Ack("a:x", 503), Ack("b:y", 200)], Ack("a:x", 200), 424, 424),
    # twin-persisted alone (the built-in shortcut): the plain response
    (request("twin-persisted"), [], Ack("twin-persisted", 204), 408, 204),
    # a late live response to a live message that requested nothing: it answers as the response
    (request(), [], Ack("live-response", 200, {"on": True}), 408, 200),
])
def test_a_late_ack_is_decided_as_if_in_time(req: Request, counted: list[Ack], late: Ack, answered: int,
                                             would: int) -> None:
    assert decide(req, acks=counted, deadline_passed=True).status == answered  # without it, by the deadline
    assert decide_with_late_ack(req, counted, late).status == would


# --- a request whose stored facts cannot be read (decisions #116) ---------------------------------

from ackstore.rules.aggregation import undecidable  # noqa: E402

INTERNAL = errors.internal_error().to_json()
ENTRY = {"status": 500, "payload": INTERNAL, "headers": {"correlation-id": CID}}

# (name, request, its command failed, deadline passed, status, body, cause, per-label statuses); None: undecided
UNDECIDABLE = [
    ("a failed twin command: at once", request("twin-persisted", "app:x"), True, False, 500, INTERNAL, "error", {}),
    ("nothing asked, no response wanted: 202 at once", request(rr=False), False, False, 202, ABSENT, "accepted", {}),
    ("before the deadline: it waits", request("twin-persisted", "app:x"), False, False, None, None, None, None),
    ("nothing asked: the 500 at the deadline", request(), False, True, 500, INTERNAL, "deadline", {}),
    ("the built-in shortcut: the 500 at the deadline", request("twin-persisted"), False, True, 500, INTERNAL,
     "deadline", {}),
    ("one custom label: its 500 entry", request("app:x"), False, True, 500, INTERNAL, "deadline", {"app:x": 500}),
    ("two labels: 424 with a 500 entry each", request("twin-persisted", "app:x"), False, True, 424,
     {"twin-persisted": ENTRY, "app:x": ENTRY}, "deadline", {"twin-persisted": 500, "app:x": 500}),
    ("two labels, no response wanted: status-only entries", request("twin-persisted", "app:x", rr=False), False, True,
     424, {"twin-persisted": {"status": 500, "headers": {"correlation-id": CID}},
           "app:x": {"status": 500, "headers": {"correlation-id": CID}}}, "deadline", {"twin-persisted": 500, "app:x": 500}),
]


@pytest.mark.parametrize("req, failed, deadline_passed, status, body, cause, statuses", [row[1:] for row in UNDECIDABLE],
                         ids=[row[0] for row in UNDECIDABLE])
def test_a_request_whose_facts_cannot_be_read_is_answered_500(req: Request, failed: bool, deadline_passed: bool,
                                                               status: int | None, body: object, cause: str | None,
                                                               statuses: dict | None) -> None:
    """The answer is the shape the validation gate expects of its cause: an error decides a failed
    command at once (A.2.7), anything else is decided by its deadline, an entry per label."""
    result = undecidable(req, response_is_error=failed, deadline_passed=deadline_passed)
    if status is None:
        assert result is None
        return
    assert (result.status, result.body, result.cause, dict(result.ack_statuses)) == (status, body, cause, statuses)
    assert result.headers["correlation-id"] == CID
