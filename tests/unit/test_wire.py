"""B.4 wire shapes: single ack, aggregated acks, the HTTP body."""

import pytest

from ackstore.rules import wire
from ackstore.rules.acks import Ack
from ackstore.rules.errors import DittoError

CID = "cid-7"


def test_single_ack_message() -> None:
    ack = Ack("my:ack", 400, "not ok", headers={"requested-acks": ["x:y"], "version": 2})
    assert wire.single_ack_message("org.acme:lamp-1", "twin", ack, CID) == {
        "topic": "org.acme/lamp-1/things/twin/acks/my:ack",
        "headers": {"version": 2, "correlation-id": CID},
        "path": "/",
        "status": 400,
        "value": "not ok",
    }


def test_single_ack_without_payload_has_no_value() -> None:
    message = wire.single_ack_message("org.acme:lamp-1", "live", Ack("my:ack", 202), CID)
    assert "value" not in message and message["status"] == 202


@pytest.mark.parametrize("label", ["twin-persisted", "live-response", "search-persisted"])
def test_a_builtin_label_is_never_serialised_alone(label: str) -> None:
    with pytest.raises(DittoError) as raised:
        wire.single_ack_message("org.acme:lamp-1", "twin", Ack(label, 204), CID)
    assert raised.value.error == "acknowledgement:ditto.acklabel.forbidden"


def test_aggregated_acks_message() -> None:
    acks = [Ack("twin-persisted", 204), Ack("my:ack", 200, {"ok": True})]
    assert wire.aggregated_acks_message("org.acme:lamp-1", "twin", acks, 200, CID) == {
        "topic": "org.acme/lamp-1/things/twin/acks",
        "headers": {"correlation-id": CID, "content-type": "application/json", "response-required": False},
        "path": "/",
        "value": {
            "twin-persisted": {"status": 204, "headers": {"correlation-id": CID}},
            "my:ack": {"status": 200, "payload": {"ok": True}, "headers": {"correlation-id": CID}},
        },
        "status": 200,
    }


def test_http_body_with_several_acks_is_keyed_and_strips_ditto_content_type() -> None:
    acks = [
        Ack("twin-persisted", 201, {"a": 1}, headers={"content-type": wire.DITTO_CONTENT_TYPE}),
        Ack("my:ack", 200, headers={"content-type": "text/plain"}),
    ]
    assert wire.http_body(acks, CID) == {
        "twin-persisted": {"status": 201, "payload": {"a": 1}, "headers": {"correlation-id": CID}},
        "my:ack": {"status": 200, "headers": {"content-type": "text/plain", "correlation-id": CID}},
    }


@pytest.mark.parametrize("payload", [{"a": 1}, "text", None, 0, [1, 2]])
def test_http_body_with_one_ack_is_its_payload(payload: object) -> None:
    assert wire.http_body([Ack("my:ack", 200, payload)], CID) == payload


def test_error_shape_omits_absent_fields() -> None:
    assert DittoError(400, "x.y", "msg").to_json() == {"status": 400, "error": "x.y", "message": "msg"}
