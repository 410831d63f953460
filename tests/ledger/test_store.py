"""The store API against the real PostgreSQL: submit, declare, acknowledge, result."""

from datetime import timedelta

import pytest
from sqlalchemy import select

from ackstore.ledger.schema import acks, signals
from ackstore.ledger.store import AckStore
from ackstore.rules import aggregation
from ackstore.rules.acks import Ack
from tests.support.ledger import ack_message, record_result, snapshot, twin_command


def stored(store: AckStore, correlation_id: str) -> dict:
    state = store.stored_signal(correlation_id)
    assert state is not None
    return state


# --- submit ------------------------------------------------------------------------------------


def test_submit_stores_the_normalised_signal(store: AckStore) -> None:
    answer = store.submit(twin_command(requested_acks="twin-persisted,org:audit", timeout="42", correlation_id="c-1"))
    assert answer == {"status": 202, "correlationId": "c-1"}
    state = stored(store, "c-1")
    assert state["thing_id"] == "org.acme:lamp-1"
    assert (state["channel"], state["kind"], state["action"]) == ("twin", "twin-command", "modify")
    assert state["requested_acks"] == ["twin-persisted", "org:audit"]
    assert state["timeout_ms"] == 42_000 and state["response_required"] is True
    assert state["value"] is True and state["path"] == "/attributes/on"
    with store.engine.connect() as conn:
        row = conn.execute(select(signals.c.received_at, signals.c.deadline_at)).one()
    assert row.deadline_at - row.received_at == timedelta(seconds=42)


def test_submit_generates_a_missing_correlation_id(store: AckStore) -> None:
    answer = store.submit(twin_command())
    assert answer["status"] == 202 and answer["correlationId"]
    assert stored(store, answer["correlationId"])["headers"]["correlation-id"] == answer["correlationId"]


@pytest.mark.parametrize(
    ("topic", "kind", "requested"),
    [
        ("org.acme/lamp-1/things/live/commands/modify", "live-command", ["live-response"]),
        ("org.acme/lamp-1/things/live/messages/switch-on", "live-message", ["live-response"]),
        ("org.acme/lamp-1/things/twin/commands/delete", "twin-command", ["twin-persisted"]),
    ],
)
def test_submit_accepts_live_commands_and_messages(store: AckStore, topic: str, kind: str, requested: list) -> None:
    answer = store.submit({"topic": topic, "headers": {"correlation-id": "c-live"}, "path": "/", "value": 1})
    assert answer["status"] == 202
    state = stored(store, "c-live")
    assert (state["kind"], state["requested_acks"]) == (kind, requested)


def test_retransmission_gets_the_first_answer_and_stores_nothing(store: AckStore) -> None:
    first = store.submit(twin_command(), source="amqp:orders", source_message_id="m-1")
    before = snapshot(store.engine)
    again = store.submit(twin_command(), source="amqp:orders", source_message_id="m-1")
    assert again == first
    assert snapshot(store.engine) == before


def test_same_message_id_from_another_source_is_another_signal(store: AckStore) -> None:
    store.submit(twin_command(), source="a", source_message_id="m-1")
    store.submit(twin_command(), source="b", source_message_id="m-1")
    with store.engine.connect() as conn:
        assert len(conn.execute(select(signals.c.id)).all()) == 2


def test_a_used_correlation_id_is_409(store: AckStore) -> None:
    store.submit(twin_command(correlation_id="c-dup"), source="a", source_message_id="1")
    before = snapshot(store.engine)
    answer = store.submit(twin_command(correlation_id="c-dup"), source="a", source_message_id="2")
    assert answer == {
        "status": 409,
        "error": "acknowledgement:request.duplicate.correlation-id",
        "message": "Correlation-id <c-dup> for acknowledgement request was already used very recently.",
        "description": "Please use a unique correlation-id for each acknowledgement request.",
    }
    assert snapshot(store.engine) == before


def test_websocket_and_connectivity_rules_apply_by_api(store: AckStore) -> None:
    envelope = twin_command(timeout="1h")
    assert store.submit(envelope, api="http")["status"] == 400
    assert store.submit(envelope, api="connectivity")["status"] == 202
    no_response = twin_command(response_required=False, requested_acks=["a:b"])
    assert store.submit(no_response, api="websocket")["error"] == "header.invalid"
    assert store.submit(no_response, api="http")["status"] == 202


def test_unknown_api_is_a_value_error(store: AckStore) -> None:
    with pytest.raises(ValueError):
        store.submit(twin_command(), api="mqtt")


# --- declare -----------------------------------------------------------------------------------


def test_declared_labels_are_globally_unique(store: AckStore) -> None:
    assert store.declare("app-1", ["shared:label"]) == {"status": 204}
    assert store.declare("app-2", ["shared:label"]) == {
        "status": 409,
        "error": "acknowledgement:label.not.unique",
        "message": "One or more declared acknowledgement labels are taken by other subscribers.",
        "description": "Please ensure all other subscribers with the declared acknowledgement labels are offline.",
    }


def test_redeclaring_replaces_a_lone_subscribers_labels(store: AckStore) -> None:
    store.declare("app-1", ["one:label", "two:label"])
    assert store.declare("app-1", ["two:label"]) == {"status": 204}
    assert store.declare("app-2", ["one:label"]) == {"status": 204}  # released by app-1


def test_a_connection_group_declares_one_label_set(store: AckStore) -> None:
    assert store.declare("client-1", ["{{connection:id}}:ack"], connection="conn") == {"status": 204}
    assert store.declare("client-2", ["conn:ack"], connection="conn") == {"status": 204}
    assert store.declare("client-3", ["conn:ack", "conn:other"], connection="conn")["status"] == 409
    assert store.declare("outsider", ["conn:ack"])["status"] == 409


def test_connection_labels_need_the_prefix(store: AckStore) -> None:
    answer = store.declare("client-1", ["wrong:ack"], connection="conn")
    assert answer["status"] == 400 and answer["error"] == "acknowledgement:label.invalid"


@pytest.mark.parametrize("label", ["twin-persisted", "live-response", "search-persisted"])
def test_builtin_labels_cannot_be_declared(store: AckStore, label: str) -> None:
    assert store.declare("app", [label])["error"] == "acknowledgement:ditto.acklabel.forbidden"


def test_declare_stores_a_valid_filter(store: AckStore) -> None:
    assert store.declare("app", ["a:b"], filter='eq(attributes/room,"kitchen")', namespaces=["org.acme"]) == {"status": 204}
    answer = store.declare("app", ["a:b"], filter="eq(attributes/room")
    assert answer["error"] == "rql.expression.invalid" and answer["message"].endswith("at position 19.")


def test_declare_validates_channels(store: AckStore) -> None:
    assert store.declare("app", ["a:b"], channels=["twin"]) == {"status": 204}
    assert store.declare("app", ["a:b"], channels=["events"])["status"] == 400


# --- acknowledge ---------------------------------------------------------------------------------


@pytest.fixture
def request_with_custom_ack(store: AckStore) -> str:
    store.declare("auditor", ["org:audit"])
    answer = store.submit(twin_command(requested_acks=["twin-persisted", "org:audit"], correlation_id="c-ack"))
    return answer["correlationId"]


def dispositions(store: AckStore) -> list[tuple[str, int, str]]:
    with store.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(select(acks.c.label, acks.c.status, acks.c.disposition).order_by(acks.c.id))]


def test_first_ack_counts_later_ones_are_duplicates(store: AckStore, request_with_custom_ack: str) -> None:
    assert store.acknowledge("auditor", ack_message(request_with_custom_ack, "org:audit", 200, "ok")) == {"status": 204}
    assert store.acknowledge("auditor", ack_message(request_with_custom_ack, "org:audit", 500)) == {"status": 204}
    assert dispositions(store) == [("org:audit", 200, "counted"), ("org:audit", 500, "duplicate")]


def test_aggregated_acknowledgements_are_stored_per_label(store: AckStore, request_with_custom_ack: str) -> None:
    store.declare("auditor", ["org:audit", "org:extra"])
    message = {
        "topic": "org.acme/lamp-1/things/twin/acks",
        "headers": {"correlation-id": request_with_custom_ack},
        "path": "/",
        "value": {"org:audit": {"status": 200, "payload": 1}, "org:extra": {"status": 204}},
        "status": 200,
    }
    assert store.acknowledge("auditor", message) == {"status": 204}
    assert dispositions(store) == [("org:audit", 200, "counted"), ("org:extra", 204, "unrequested")]


def test_an_ack_after_the_decision_is_late(store: AckStore, request_with_custom_ack: str) -> None:
    with store.engine.begin() as conn:
        signal_id = conn.execute(select(signals.c.id)).scalar_one()
    decided = aggregation.Result(424, {"x": 1}, {"correlation-id": request_with_custom_ack}, "deadline")
    assert record_result(store.engine, signal_id, decided) is True
    assert record_result(store.engine, signal_id, decided) is False  # decided once
    store.acknowledge("auditor", ack_message(request_with_custom_ack, "org:audit"))
    assert dispositions(store) == [("org:audit", 200, "late")]
    assert store.result(request_with_custom_ack) == {
        "status": 424,
        "body": {"x": 1},
        "headers": {"correlation-id": request_with_custom_ack},
    }


@pytest.mark.parametrize(
    ("subscriber", "message", "status", "error"),
    [
        ("auditor", ack_message("c-ack", "twin-persisted", 204), 400, "acknowledgement:ditto.acklabel.forbidden"),
        ("auditor", ack_message("c-ack", "org:undeclared"), 400, "acknowledgement:label.not.declared"),
        ("stranger", ack_message("c-ack", "org:audit"), 400, "acknowledgement:label.not.declared"),
        ("auditor", ack_message("c-unknown", "org:audit"), 404, "acknowledgement:request.notfound"),
        ("auditor", {**ack_message("c-ack", "org:audit"), "headers": {}}, 400, "acknowledgement:correlation-id.missing"),
        ("auditor", {k: v for k, v in ack_message("c-ack", "org:audit").items() if k != "status"}, 400, "json.field.missing"),
        ("auditor", ack_message("c-ack", "org:audit", 999), 400, "json.invalid"),
    ],
    ids=["built-in", "undeclared", "someone else's", "unknown correlation id", "no correlation id", "no status", "bad status"],
)
def test_invalid_acks_are_answered_and_not_stored(
    store: AckStore, request_with_custom_ack: str, subscriber: str, message: dict, status: int, error: str
) -> None:
    before = snapshot(store.engine)
    answer = store.acknowledge(subscriber, message)
    assert (answer["status"], answer["error"]) == (status, error)
    assert {"message", "description"} <= set(answer)
    assert snapshot(store.engine) == before


def test_one_undeclared_label_rejects_a_whole_aggregated_message(store: AckStore, request_with_custom_ack: str) -> None:
    before = snapshot(store.engine)
    message = {
        "topic": "org.acme/lamp-1/things/twin/acks",
        "headers": {"correlation-id": request_with_custom_ack},
        "path": "/",
        "value": {"org:audit": {"status": 200}, "org:nope": {"status": 200}},
        "status": 200,
    }
    assert store.acknowledge("auditor", message)["error"] == "acknowledgement:label.not.declared"
    assert snapshot(store.engine) == before


# --- result -------------------------------------------------------------------------------------


def test_result_is_none_while_undecided_and_404_when_unknown(store: AckStore, request_with_custom_ack: str) -> None:
    assert store.result(request_with_custom_ack) is None
    assert store.result("nope")["status"] == 404


def test_a_decided_result_round_trips_through_the_ledger(store: AckStore, request_with_custom_ack: str) -> None:
    request = aggregation.Request(request_with_custom_ack, ("twin-persisted", "org:audit"), True, 300_000)
    result = aggregation.decide(request, acks=[Ack("twin-persisted", 204), Ack("org:audit", 200, "ok")])
    assert result is not None
    with store.engine.begin() as conn:
        signal_id = conn.execute(select(signals.c.id)).scalar_one()
    record_result(store.engine, signal_id, result)
    assert store.result(request_with_custom_ack) == {
        "status": 200,
        "body": {
            "twin-persisted": {"status": 204, "headers": {"correlation-id": request_with_custom_ack}},
            "org:audit": {"status": 200, "payload": "ok", "headers": {"correlation-id": request_with_custom_ack}},
        },
        # an aggregated answer carries the command's headers (none here) with response-required false (B.5)
        "headers": {"correlation-id": request_with_custom_ack, "response-required": False},
    }
    assert stored(store, request_with_custom_ack)["state"] == "settled"  # the API's answer is final (#71)
