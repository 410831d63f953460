"""B.2 label syntax, the built-in labels (B.1) and the connection prefix rule, row by row."""

import pytest

from ackstore.rules import errors, labels
from ackstore.rules.errors import DittoError

LABEL_SYNTAX = [
    # (label, valid) — B.2's examples first, then the bounds and character set
    ("twin-persisted", True),
    ("ab", False),
    ("a.b.c", False),
    ("{{connection:id}}:ab", False),
    ("{{connection:id}}:abc", True),
    ("{{ connection:id }}:abc", True),
    ("{{connection:id}}:" + "a" * 165, True),
    ("{{connection:id}}:" + "a" * 166, False),
    ("abc", True),
    ("a" * 165, True),
    ("a" * 166, False),
    ("my:ack-label_2", True),
    ("A-Z_0:9", True),
    ("", False),
    ("'; drop table acks; --", False),
    ("with space", False),
    ("ümlaut", False),
    ("{{Connection:id}}:abc", False),
    ("{{connection:id}}abc", False),
    ("abc\n", False),
]


@pytest.mark.parametrize(("label", "valid"), LABEL_SYNTAX)
def test_label_syntax(label: str, valid: bool) -> None:
    assert labels.is_valid_label(label) is valid
    if valid:
        assert labels.validate_label(label) == label
    else:
        with pytest.raises(DittoError) as raised:
            labels.validate_label(label)
        assert raised.value.to_json() == {
            "status": 400,
            "error": "acknowledgement:label.invalid",
            "message": f"Acknowledgement label <{label}> is invalid.",
            "description": "An acknowledgement label must conform to the regular expression of Ditto documentation.",
        }


def test_exactly_three_builtin_labels() -> None:
    assert labels.BUILTIN_LABELS == {"twin-persisted", "live-response", "search-persisted"}


@pytest.mark.parametrize("label", sorted(labels.BUILTIN_LABELS))
def test_builtin_labels_may_not_be_issued(label: str) -> None:
    with pytest.raises(DittoError) as raised:
        labels.validate_issuable(label)
    assert raised.value.to_json() == {
        "status": 400,
        "error": "acknowledgement:ditto.acklabel.forbidden",
        "message": f"The Ditto internal Acknowledgement label <{label}> is not allowed to be issued externally!",
        "description": "Make sure to not issue an Ditto internal Acknowledgement label.",
    }


def test_labels_are_case_sensitive() -> None:
    assert labels.validate_issuable("Twin-Persisted") == "Twin-Persisted"


@pytest.mark.parametrize(
    ("channel", "dropped"),
    [("twin", {"live-response"}), ("live", {"twin-persisted", "search-persisted"})],
)
def test_foreign_builtins_per_channel(channel: labels.Channel, dropped: set[str]) -> None:
    assert labels.foreign_builtins(channel) == dropped


CONNECTION_LABELS = [
    # (declared label, connection id, resolved or None when rejected)
    ("{{connection:id}}:ack", "conn-1", "conn-1:ack"),
    ("{{ connection:id }}:ack", "conn-1", "conn-1:ack"),
    ("conn-1:ack", "conn-1", "conn-1:ack"),
    ("conn-2:ack", "conn-1", None),
    ("plain-ack", "conn-1", None),
    ("conn-1ack", "conn-1", None),
    ("{{connection:name}}:ack", "conn-1", None),
]


@pytest.mark.parametrize(("label", "connection", "resolved"), CONNECTION_LABELS)
def test_connection_prefix_rule(label: str, connection: str, resolved: str | None) -> None:
    if resolved is not None:
        assert labels.validate_declarable(label, connection) == resolved
        return
    with pytest.raises(DittoError) as raised:
        labels.validate_declarable(label, connection)
    assert raised.value.error == "acknowledgement:label.invalid"
    assert raised.value.status == 400
    assert raised.value.description == errors.CONNECTION_LABEL_DESCRIPTION


def test_placeholder_without_connection_is_rejected() -> None:
    with pytest.raises(DittoError) as raised:
        labels.validate_declarable("{{connection:id}}:ack", None)
    assert raised.value.error == "acknowledgement:label.invalid"


def test_websocket_labels_need_no_prefix() -> None:
    assert labels.validate_declarable("my:ack-label-2", None) == "my:ack-label-2"
