"""The AMQP connector against the machine's RabbitMQ and PostgreSQL, with the real pipeline.

A message stays unsettled on the broker until the ledger has decided it; then the decision is
carried out on the channel that received it, and recorded.
"""

from __future__ import annotations

import json
from typing import Iterator

import pytest
from sqlalchemy import Engine, text

from ackstore.connectors import config
from tests.broker import Broker, connector, publish_all, stop, wait_for
from tests.ledger import twin_command

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def broker() -> Iterator[Broker]:
    broker = Broker()
    yield broker
    broker.close()


def count(engine: Engine, sql: str, **params) -> int:
    with engine.connect() as conn:
        return conn.execute(text(sql), params).scalar_one()


def settled(engine: Engine) -> dict[str, int]:
    """Carried-out decisions by kind."""
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT decision, count(*) FROM settlements WHERE carried_out_at IS NOT NULL GROUP BY decision"))
        return dict(rows.all())


def thing_modify(n: int, thing: str = "org.acme/t", **headers) -> dict:
    return twin_command("modify", thing=f"{thing}{n}", path="/", value={"attributes": {"n": n}},
                        correlation_id=f"c-{n}", **headers)


def test_a_qos1_message_is_held_until_decided_then_acked_and_its_result_published(
    engine: Engine, database_url: str, broker: Broker, run_pipeline
) -> None:
    source, replies = broker.queue("commands"), broker.queue("replies")
    publish_all(broker, source, [thing_modify(n) for n in range(3)], reply_to=replies)
    process = connector(database_url, "--connection-id", "plant", "--queue", source,
                        "--requested-acks", "twin-persisted", "--poll", "0.5")
    try:
        wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 3, what="3 signals stored")
        assert broker.depth(source) == 0  # delivered to the connector, held, not settled
        assert settled(engine) == {}
        run_pipeline()
        wait_for(lambda: settled(engine) == {"ack": 3}, what="3 acks carried out")
    finally:
        code, log = stop(process)
    assert code == 0, log
    assert broker.depth(source) == 0, "settled deliveries never come back"
    results = sorted(broker.drain_json(replies), key=lambda m: m["headers"]["correlation-id"])
    assert [(r["status"], r["topic"]) for r in results] == [
        (201, f"org.acme/t{n}/things/twin/commands/modify") for n in range(3)
    ]
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT api, source, requested_acks FROM signals ORDER BY id")).all()
    assert stored == [("connectivity", "plant", ["twin-persisted"])] * 3
    assert "carried out: ack 3" in log


def test_a_held_delivery_returns_to_the_queue_when_the_connector_stops_before_the_decision(
    engine: Engine, database_url: str, broker: Broker, run_pipeline
) -> None:
    source = broker.queue("commands")
    publish_all(broker, source, [thing_modify(n) for n in range(5)])
    first = connector(database_url, "--connection-id", "plant", "--queue", source, "--requested-acks", "twin-persisted")
    wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 5, what="5 signals stored")
    code, _ = stop(first)
    assert code == 0
    assert broker.depth(source) == 5, "undecided deliveries are requeued, not settled"
    run_pipeline()
    second = connector(database_url, "--connection-id", "plant", "--queue", source, "--max-messages", "5")
    code, log = stop_when_done(second)
    assert code == 0, log
    assert count(engine, "SELECT count(*) FROM signals") == 5, "redelivered copies are not stored again"
    assert settled(engine) == {"ack": 5}
    assert count(engine, "SELECT max(revision) FROM things") == 1, "applied once"
    assert broker.depth(source) == 0


def stop_when_done(process, timeout: float = 120) -> tuple[int, str]:
    _, log = process.communicate(timeout=timeout)
    return process.returncode, log


def test_qos0_is_settled_as_soon_as_it_is_stored(engine: Engine, database_url: str, broker: Broker) -> None:
    source, replies = broker.queue("commands"), broker.queue("replies")
    publish_all(broker, source, [thing_modify(1, requested_acks=[], response_required=False)], reply_to=replies)
    code, log = stop_when_done(connector(database_url, "--connection-id", "plant", "--queue", source, "--once"))
    assert code == 0, log
    assert count(engine, "SELECT count(*) FROM signals") == 1
    assert broker.depth(source) == 0 and "settled at once 1" in log
    assert broker.drain(replies) == [], "nothing is published without response-required"


MALFORMED = {
    "not JSON": b"this is not json",
    "invalid UTF-8": b'{"topic": "\xff\xfe"}',
    "wrong topic": json.dumps({"topic": "org.acme/t/things/twin/nonsense", "path": "/"}).encode(),
    "invalid label": json.dumps(twin_command(requested_acks=["a!"])).encode(),
    "zero timeout with acks": json.dumps(twin_command(timeout="0", requested_acks=["twin-persisted"])).encode(),
    "10 MB body": json.dumps(twin_command(value="x" * 10_000_000)).encode(),
}
EXPECTED_ERRORS = {
    "not JSON": "json.invalid",
    "invalid UTF-8": "json.invalid",
    "wrong topic": "things.protocol.adapter:unknown.topicpath",
    "invalid label": "header.invalid",
    "zero timeout with acks": "header.invalid",
    "10 MB body": "message.too.large",
}


def test_malformed_messages_are_rejected_without_redelivery_and_answered_on_reply_to(
    engine: Engine, database_url: str, broker: Broker
) -> None:
    source, replies = broker.queue("commands"), broker.queue("replies")
    for name, body in MALFORMED.items():
        broker.publish(source, body, message_id=name, correlation_id=name, reply_to=replies)
    publish_all(broker, source, [thing_modify(1, requested_acks=[], response_required=False)])
    code, log = stop_when_done(connector(database_url, "--connection-id", "plant", "--queue", source, "--once"))
    assert code == 0, log
    errors_by_name = {p.correlation_id: json.loads(body) for p, body in broker.drain(replies)}
    assert {name: e["value"]["error"] for name, e in errors_by_name.items()} == _expected_errors()
    assert all(e["topic"].endswith("/errors") and e["status"] == e["value"]["status"] for e in errors_by_name.values())
    assert broker.depth(source) == 0, "rejected without requeue"
    assert count(engine, "SELECT count(*) FROM signals") == 1, "the good message after them was stored all the same"
    assert "rejected 6" in log and "settled at once 1" in log


def _expected_errors() -> dict[str, str]:
    from ackstore.rules import errors

    too_large = errors.message_too_large(2, 1).error
    return {**EXPECTED_ERRORS, "10 MB body": too_large}


def test_connection_labels_need_the_connection_prefix() -> None:
    with pytest.raises(Exception) as raised:
        config.parse({"id": "plant", "sources": [{"addresses": ["q"], "declaredAcks": ["other:done"]}]})
    assert raised.value.status == 400 and raised.value.error == "connectivity:connection.configuration.invalid"
    parsed = config.parse({"id": "plant", "sources": [{"addresses": ["q"], "declaredAcks": ["{{connection:id}}:done"]}]})
    assert parsed.declared_labels == ["plant:done"]
