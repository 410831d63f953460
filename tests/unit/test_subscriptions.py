"""The pure delivery rules: thing views, who receives a signal, weak-ack reasons, lease tokens."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ackstore.rules import errors, subscriptions
from ackstore.rules.subscriptions import SignalView, Subscriber

THING = "org.acme:lamp-1"


@pytest.mark.parametrize(
    ("view", "shape"),
    [
        (SignalView("twin-event", THING, "modified", "/attributes/x", 1), {"thingId": THING, "attributes": {"x": 1}}),
        (SignalView("twin-event", THING, "created", "/", {"attributes": {"on": True}}),
         {"thingId": THING, "attributes": {"on": True}}),
        (SignalView("twin-event", THING, "modified", "/features/f/properties/p", "v"),
         {"thingId": THING, "features": {"f": {"properties": {"p": "v"}}}}),
        (SignalView("twin-event", THING, "modified", "/attributes/a~1b", 2), {"thingId": THING, "attributes": {"a/b": 2}}),
        (SignalView("twin-event", THING, "deleted", "/attributes/x", None, deleted=True), {"thingId": THING}),
        (SignalView("twin-event", THING, "modified", "/policyId", "p:1"), {"thingId": THING, "policyId": "p:1"}),
        (SignalView("live-command", THING, "modify", "/attributes/x", 5), {"thingId": THING, "attributes": {"x": 5}}),
        (SignalView("live-message", THING, "ask", "/inbox/messages/ask", {"q": 1}), {"thingId": THING}),
    ],
)
def test_a_signal_is_seen_in_the_shape_of_a_thing(view: SignalView, shape: dict) -> None:
    assert view.thing_shape() == shape


def test_placeholders_name_the_topic_and_resource() -> None:
    view = SignalView("live-message", THING, "ask", "/inbox/messages/ask")
    assert view.placeholders() == {
        "topic:namespace": "org.acme", "topic:entityName": "lamp-1", "topic:group": "things", "topic:channel": "live",
        "topic:criterion": "messages", "topic:action": "ask", "resource:type": "thing",
        "resource:path": "/inbox/messages/ask",
    }


EVENT = subscriptions.event_view(THING, "modified", "/attributes/x", 1)


@pytest.mark.parametrize(
    ("subscriber", "excluded_because"),
    [
        (Subscriber("s", ("twin", "live")), None),
        (Subscriber("s", ("live",)), "does not consume the twin channel"),
        (Subscriber("s", ("twin",), namespaces=("org.acme",)), None),
        (Subscriber("s", ("twin",), namespaces=("other",)), "does not subscribe to namespace <org.acme>"),
        (Subscriber("s", ("twin",), filter="eq(attributes/x,1)"), None),
        (Subscriber("s", ("twin",), filter="eq(attributes/x,2)"), "filter <eq(attributes/x,2)> excludes"),
        (Subscriber("s", ("twin",), filter="exists(attributes/y)"), "excludes"),  # only the change is seen
        (Subscriber("s", ("twin",), filter='eq(thingId,"org.acme:lamp-1")'), None),
        (Subscriber("s", ("twin",), filter='eq(topic:action,"modified")'), None),
        (Subscriber("s", ("twin",), filter='eq(topic:action,"deleted")'), "excludes"),
        (Subscriber("s", ("twin",), filter='like(resource:path,"/attributes/*")'), None),
        (Subscriber("s", ("twin",), filter='eq(topic:channel,"live")'), "excludes"),
    ],
)
def test_who_receives_a_twin_event(subscriber: Subscriber, excluded_because: str | None) -> None:
    reason = subscriptions.exclusion(subscriber, EVENT)
    if excluded_because is None:
        assert reason is None
    else:
        assert reason is not None and excluded_because in reason


def test_a_weak_ack_is_due_only_when_no_subscriber_of_the_group_receives() -> None:
    receives = Subscriber("a", ("twin",))
    filtered = Subscriber("b", ("twin",), filter="eq(attributes/x,2)")
    live_only = Subscriber("c", ("live",))
    assert subscriptions.weak_ack_reason("conn:ack", [filtered, receives], EVENT) is None
    reason = subscriptions.weak_ack_reason("conn:ack", [filtered, live_only], EVENT)
    assert reason is not None
    assert reason.startswith("Acknowledgement <conn:ack> was issued as a weak acknowledgement")
    assert "subscriber <b>'s filter" in reason and "subscriber <c> does not consume the twin channel" in reason


# Filters a ledger stored before the bounds of RQL (decisions #117), past them: issue 50's condition
# (400 KB here) as a filter, and a like pattern of 17 wildcards (decisions #132).
PAST_THE_BOUNDS = {
    "400 KB": "or(" + ",".join(['like(attributes/s,"*' + "?" * 16 + 'b*")'] * 10_000) + ")",
    "17 wildcards": 'like(attributes/x,"' + "*a" * 17 + '")',
}
WITHIN_THE_BOUNDS = 'like(attributes/x,"' + "*a" * 8 + '")'


@pytest.mark.parametrize("expression", PAST_THE_BOUNDS.values(), ids=list(PAST_THE_BOUNDS))
def test_a_stored_filter_past_the_bounds_is_the_doors_refusal_and_matches_nothing(expression: str) -> None:
    """The door refuses it now (400 rql.expression.invalid); stored before, it matches no signal —
    its label's weak ack says why — and its subscriber is told at its pull."""
    with pytest.raises(errors.DittoError) as door:
        subscriptions.rql.parse_sent(expression)
    refused = Subscriber("old", ("twin", "live"), filter=expression)
    everything = subscriptions.event_view(THING, "modified", "/attributes/x", "a" * 20)
    reason = subscriptions.exclusion(refused, everything)
    assert reason is not None and reason.startswith("subscriber <old>'s filter is refused: ")
    assert door.value.message in reason and len(reason) < 600  # the refusal's words, the filter clipped
    weak = subscriptions.weak_ack_reason("old:done", [refused], everything)
    assert weak is not None and door.value.message in weak
    told = subscriptions.filter_refusal(refused)
    assert told is not None and (told.status, told.error) == (400, "rql.expression.invalid")
    assert told.message == ("The filter of subscriber <old>, declared before the bounds of a filter, is refused: "
                            + door.value.message)
    assert told.description.startswith("Declare the subscriber again with a filter within the bounds")


def test_a_filter_within_the_bounds_is_evaluated_as_ever() -> None:
    within = Subscriber("s", ("twin",), filter=WITHIN_THE_BOUNDS)
    assert subscriptions.filter_refusal(within) is None and subscriptions.filter_refusal(Subscriber("t", ("twin",))) is None
    assert subscriptions.exclusion(within, subscriptions.event_view(THING, "modified", "/attributes/x", "a" * 8)) is None
    assert "excludes" in subscriptions.exclusion(within, subscriptions.event_view(THING, "modified", "/attributes/x", "a"))


def test_outbound_headers_drop_builtin_labels_and_carry_the_lease() -> None:
    headers = {"correlation-id": "c", "requested-acks": ["twin-persisted", "x:y"], "response-required": True}
    assert subscriptions.outbound_headers(headers, "1.abc", 1, ["x:y"]) == {
        "correlation-id": "c", "requested-acks": ["x:y"], "response-required": True, "ack-token": "1.abc",
        "delivery-count": 1,
    }
    only_builtin = subscriptions.outbound_headers({"requested-acks": ["live-response"]}, "2.x", 2, ["live-response"])
    assert "requested-acks" not in only_builtin  # nothing left: the header is dropped (B.1)


@pytest.mark.parametrize(("requested", "declared", "shown"), [
    (["a:one", "b:two", "twin-persisted"], ["a:one"], ["a:one"]),  # another subscriber's label is not shown
    (["a:one", "b:two"], ["a:one", "b:two", "c:three"], ["a:one", "b:two"]),  # in the signal's order
    (["b:two"], ["a:one"], None),  # none of its own: the header is dropped
    (["a:one"], [], None),  # a subscriber that declared nothing sees no requested-acks
])
def test_a_subscriber_sees_only_the_labels_it_can_issue(requested, declared, shown) -> None:
    """Ditto's StreamingSessionActorTest.acknowledgementRequestsAreRestrictedToDeclaredAcks."""
    out = subscriptions.outbound_headers({"requested-acks": requested}, "1.t", 1, declared)
    assert out.get("requested-acks") == shown


@pytest.mark.parametrize(
    ("requested", "declared", "live", "expected"),
    [
        (["x:a"], ["x:a"], False, True),
        (["x:a"], ["x:b"], False, False),
        ([], ["x:a"], False, False),
        (["live-response"], [], True, True),
        (["live-response"], [], False, False),
        ([], [], True, False),
    ],
)
def test_which_hand_outs_await_an_answer(requested: list, declared: list, live: bool, expected: bool) -> None:
    assert subscriptions.expects_ack(requested, declared, live=live) is expected


@given(key=st.text(min_size=1, max_size=40), handout=st.integers(min_value=1, max_value=10**6))
def test_a_token_names_its_hand_out_and_only_under_its_key(key: str, handout: int) -> None:
    token = subscriptions.lease_token(key, handout)
    assert subscriptions.token_handout(token, key) == handout
    with pytest.raises(errors.DittoError) as foreign:
        subscriptions.token_handout(token, key + "x")
    assert foreign.value.status == 400 and foreign.value.error == "acknowledgement:token.invalid"
    number, _, mac = token.partition(".")
    for respelled in (f"0{number}", f"00{number}", f"+{number}", f" {number}", f"{number} "):
        with pytest.raises(errors.DittoError):  # only the token as issued names the hand-out
            subscriptions.token_handout(f"{respelled}.{mac}", key)


@pytest.mark.parametrize("token", ["", "1", "1.", "x.abc", "-1.abc", 5, None, "1.0000000000000000000000000000000"])
def test_malformed_tokens_are_invalid(token: object) -> None:
    with pytest.raises(errors.DittoError) as invalid:
        subscriptions.token_handout(token, "key")
    assert invalid.value.to_json()["error"] == "acknowledgement:token.invalid"


@pytest.mark.parametrize(("lease", "millis"), [("30s", 30_000), ("5m", 300_000), ("250ms", 250), ("12h", 43_200_000)])
def test_leases_are_durations(lease: str, millis: int) -> None:
    assert subscriptions.lease_ms(lease) == millis


@pytest.mark.parametrize("lease", ["0", "0s", "-1s", "13h", "soon", ""])
def test_bad_leases_are_400(lease: str) -> None:
    with pytest.raises(errors.DittoError) as bad:
        subscriptions.lease_ms(lease)
    assert bad.value.status == 400 and bad.value.error == "acknowledgement:lease.invalid"


@pytest.mark.parametrize("size", [0, -1, 1001, True, "10", 2.5])
def test_bad_pull_sizes_are_400(size: object) -> None:
    with pytest.raises(errors.DittoError) as bad:
        subscriptions.pull_size(size)
    assert bad.value.status == 400 and bad.value.error == "acknowledgement:pull.max.invalid"
