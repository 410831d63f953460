"""Bad input gets a 4xx error in Ditto's shape and leaves the ledger exactly as it was."""

import json

import pytest

from ackstore.ledger.store import AckStore
from tests.support.ledger import ack_message, snapshot, twin_command

TEN_MB = "x" * (10 * 1024 * 1024)

BAD_SUBMISSIONS = [
    ("malformed JSON", b'{"topic": "org.acme/t/things/twin/commands/modify", ', 400, "json.invalid"),
    ("malformed JSON text", "[1, 2", 400, "json.invalid"),
    ("non-UTF-8 bytes", b'{"topic": "\xff\xfe"}', 400, "json.invalid"),
    ("not an object", [1, 2, 3], 400, "json.invalid"),
    ("missing topic", {"path": "/", "value": 1}, 400, "json.field.missing"),
    ("topic not a string", {"topic": 5, "path": "/"}, 400, "json.invalid"),
    ("unknown topic", {"topic": "org.acme/t/things/twin/events/modified", "path": "/"}, 400, "things.protocol.adapter:unknown.topicpath"),
    ("unknown group", {"topic": "org.acme/t/policies/twin/commands/modify", "path": "/"}, 400, "things.protocol.adapter:unknown.topicpath"),
    ("twin query", {"topic": "org.acme/t/things/twin/commands/retrieve", "path": "/"}, 400, "things.protocol.adapter:unknown.topicpath"),
    ("bad namespace", {"topic": "1bad/t/things/twin/commands/modify", "path": "/", "value": 1}, 400, "things.protocol.adapter:unknown.topicpath"),
    ("missing path", {"topic": "org.acme/t/things/twin/commands/modify", "value": 1}, 400, "json.field.missing"),
    ("path not a pointer", {"topic": "org.acme/t/things/twin/commands/modify", "path": "attributes", "value": 1}, 400, "json.invalid"),
    ("modify without value", {"topic": "org.acme/t/things/twin/commands/modify", "path": "/"}, 400, "json.field.missing"),
    ("headers not an object", {**twin_command(), "headers": ["timeout"]}, 400, "json.invalid"),
    ("response-required not boolean", twin_command(response_required="maybe"), 400, "header.invalid"),
    ("timeout not a duration", twin_command(timeout={"s": 5}), 400, "header.invalid"),
    ("timeout unparsable", twin_command(timeout="soon"), 400, "timeout.invalid"),
    ("timeout empty", twin_command(timeout=""), 400, "timeout.invalid"),
    ("timeout negative", twin_command(timeout="-1"), 400, "timeout.invalid"),
    ("timeout above maximum", twin_command(timeout="21m"), 400, "timeout.invalid"),
    ("zero timeout with acks", twin_command(timeout="0", requested_acks=["a:b"]), 400, "header.invalid"),
    ("requested-acks not labels", twin_command(requested_acks=[1, 2]), 400, "header.invalid"),
    ("injection in requested-acks", twin_command(requested_acks=["'; drop table signals; --"]), 400, "header.invalid"),
    ("correlation-id not a string", twin_command(correlation_id=["c"]), 400, "header.invalid"),
    ("10 MB value", twin_command(value=TEN_MB), 413, "message.toolarge"),
    ("10 MB text", json.dumps(twin_command(value=TEN_MB)), 413, "message.toolarge"),
    ("NUL character", twin_command(value="a\x00b"), 400, "json.invalid"),
    ("NaN", twin_command(value=float("nan")), 400, "json.invalid"),
    ("lone surrogate", twin_command(value="\ud800"), 400, "json.invalid"),
    ("not JSON-serialisable", twin_command(value={1, 2}), 400, "json.invalid"),
    ("value one level past the depth limit (decisions #115)",
     twin_command(value=json.loads("[" * 100 + "]" * 100)), 400, "json.invalid"),
    ("path one segment past its limit", twin_command(path="/attributes" + "/a" * 100), 400, "json.pointer.invalid"),
    ("condition past 5 KiB (decisions #117)", twin_command(condition="or(" + ",".join(
        f"eq(attributes/x,{n})" for n in range(400)) + ")"), 400, "things:condition.invalid"),
]


@pytest.fixture
def populated(store: AckStore) -> AckStore:
    """A ledger with something in it, so that "unchanged" means something."""
    store.declare("auditor", ["org:audit"])
    answer = store.submit(twin_command(requested_acks=["org:audit"], correlation_id="c-existing"))
    store.acknowledge("auditor", ack_message(answer["correlationId"], "org:audit"))
    return store


@pytest.mark.parametrize(("case", "envelope", "status", "error"), BAD_SUBMISSIONS, ids=[c[0] for c in BAD_SUBMISSIONS])
def test_bad_submissions(populated: AckStore, case: str, envelope: object, status: int, error: str) -> None:
    before = snapshot(populated.engine)
    answer = populated.submit(envelope)  # type: ignore[arg-type]
    assert answer["status"] == status and answer["error"] == error
    assert isinstance(answer["message"], str) and isinstance(answer["description"], str)
    assert snapshot(populated.engine) == before


BAD_DECLARATIONS = [
    ("injection label", "auditor-2", ["'; drop table declared_labels; --"], {}),
    ("label too short", "auditor-2", ["ab"], {}),
    ("labels not a list", "auditor-2", "org:x", {}),
    ("non-string label", "auditor-2", [5], {}),
    ("empty subscriber", "", ["org:x"], {}),
    ("bad channel", "auditor-2", ["org:x"], {"channels": ["events"]}),
    ("bad namespaces", "auditor-2", ["org:x"], {"namespaces": "org"}),
    ("label taken", "auditor-2", ["org:audit"], {}),
    ("malformed RQL filter", "auditor-2", ["org:x"], {"filter": "eq(attributes/on,"}),
    ("empty RQL filter", "auditor-2", ["org:x"], {"filter": ""}),
    ("RQL filter past 5 KiB (decisions #117)", "auditor-2", ["org:x"],
     {"filter": "or(" + ",".join(f'eq(attributes/x,{n})' for n in range(400)) + ")"}),
    ("like pattern past 16 wildcards", "auditor-2", ["org:x"], {"filter": 'like(attributes/s,"' + "?*" * 9 + 'b")'}),
]


@pytest.mark.parametrize(("case", "subscriber", "labels", "options"), BAD_DECLARATIONS, ids=[c[0] for c in BAD_DECLARATIONS])
def test_bad_declarations(populated: AckStore, case: str, subscriber: str, labels: object, options: dict) -> None:
    before = snapshot(populated.engine)
    answer = populated.declare(subscriber, labels, **options)  # type: ignore[arg-type]
    assert 400 <= answer["status"] < 500 and {"error", "message", "description"} <= set(answer)
    assert snapshot(populated.engine) == before


BAD_ACKS = [
    ("malformed JSON", b'{"topic": '),
    ("non-UTF-8", b"\x80\x81"),
    ("injection in label", ack_message("c-existing", "x'; drop table acks; --")),
    ("unknown topic", {"topic": "org.acme/lamp-1/things/twin/commands/modify", "headers": {"correlation-id": "c-existing"}, "status": 200}),
    ("status as string", {**ack_message("c-existing", "org:audit"), "status": "200"}),
    ("status as boolean", {**ack_message("c-existing", "org:audit"), "status": True}),
    ("correlation id not a string", {**ack_message("c-existing", "org:audit"), "headers": {"correlation-id": 7}}),
    ("aggregated value not an object", {**ack_message("c-existing", "org:audit"), "topic": "org.acme/lamp-1/things/twin/acks", "value": [1]}),
    ("10 MB payload", ack_message("c-existing", "org:audit", value=TEN_MB)),
    ("payload one level past the depth limit (decisions #115)",
     ack_message("c-existing", "org:audit", value=json.loads("[" * 100 + "]" * 100))),
]


@pytest.mark.parametrize(("case", "message"), BAD_ACKS, ids=[c[0] for c in BAD_ACKS])
def test_bad_acknowledgements(populated: AckStore, case: str, message: object) -> None:
    before = snapshot(populated.engine)
    answer = populated.acknowledge("auditor", message)  # type: ignore[arg-type]
    assert 400 <= answer["status"] < 500 and {"error", "message", "description"} <= set(answer)
    assert snapshot(populated.engine) == before


@pytest.mark.parametrize("subscriber", ["", " ", "\t", "  \n", " app", "app ", "\u00a0app"])
def test_a_blank_or_padded_subscriber_id_is_refused_everywhere(store: AckStore, subscriber: str) -> None:
    """" app" and "app" would be two subscribers nobody can tell apart; " " is no one."""
    before = snapshot(store.engine)
    answers = [
        store.declare(subscriber, ["app:done"]),
        store.acknowledge(subscriber, ack_message("c1", "app:done")),
        store.respond(subscriber, {"topic": "org.acme/lamp-1/things/live/messages/ask",
                                   "headers": {"correlation-id": "c1"}, "status": 200}),
    ]
    try:
        store.pull(subscriber, max=1, lease="30s")
    except Exception as error:  # pull raises its Ditto error
        answers.append(error.to_json())  # type: ignore[attr-defined]
    else:
        answers.append({"status": "pulled"})
    assert [(a["status"], a["error"]) for a in answers] == [(400, "json.invalid")] * 4, answers
    assert snapshot(store.engine) == before
