"""The AMQP connector against the machine's RabbitMQ and PostgreSQL, with the real pipeline.

A message stays unsettled on the broker until the ledger has decided it; then the decision is
carried out on the channel that received it, and recorded.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import Engine, text

from ackstore.connectors import config
from tests.support.amqp_connector import broker, stop_when_done  # noqa: F401 (fixture)
from tests.support.ledger import thing_modify
from tests.support.broker import Broker, connector, publish_all, stop, wait_for
from tests.support.ledger import count, settled, twin_command

pytestmark = [pytest.mark.spark, pytest.mark.slow]


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


def test_qos0_is_settled_as_soon_as_it_is_stored(engine: Engine, database_url: str, broker: Broker) -> None:
    source, replies = broker.queue("commands"), broker.queue("replies")
    publish_all(broker, source, [thing_modify(1, requested_acks=[], response_required=False)], reply_to=replies)
    code, log = stop_when_done(connector(database_url, "--connection-id", "plant", "--queue", source, "--once"))
    assert code == 0, log
    assert count(engine, "SELECT count(*) FROM signals") == 1
    assert broker.depth(source) == 0 and "acknowledged 1," in log
    assert broker.drain(replies) == [], "nothing is published without response-required"


def test_a_word_the_ledger_does_not_take_stops_neither_the_connector_nor_its_messages(
        engine: Engine, database_url: str, broker: Broker) -> None:
    """Issue 50's review: that it runs (connector_seen, every 15 s) is a word to the ledger, never the
    work's condition — with the function gone (a grant missing fails alike) the message is stored
    and settled, the failure said once in the log and taken for no outage of the ledger; and the
    clean stop (--once done) is told to the ledger: stopped, not down (decisions #133)."""
    with engine.begin() as conn:
        conn.execute(text("ALTER FUNCTION connector_seen(text, timestamptz) RENAME TO connector_seen_gone"))
    try:
        source = broker.queue("commands")
        publish_all(broker, source, [thing_modify(1, requested_acks=[], response_required=False)])
        code, log = stop_when_done(connector(database_url, "--connection-id", "plant", "--queue", source, "--once"))
    finally:  # the session's ledger, the next tests'
        with engine.begin() as conn:
            conn.execute(text("ALTER FUNCTION connector_seen_gone(text, timestamptz) RENAME TO connector_seen"))
    assert code == 0, log
    assert count(engine, "SELECT count(*) FROM signals") == 1 and broker.depth(source) == 0
    assert log.count("could not tell the ledger it runs") == 1, log
    assert count(engine, "SELECT count(*) FROM connection_log WHERE kind = 'outage'") == 0, "no outage of the ledger"
    with engine.connect() as conn:
        said = conn.execute(text("SELECT seen_at, stopped_at FROM connections WHERE id = 'plant'")).one()
    assert said.seen_at is None and said.stopped_at is not None


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
    assert "dropped 6," in log and "acknowledged 1," in log


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


def test_the_sample_connection_in_the_docs_parses() -> None:
    from pathlib import Path

    sample = Path(config.__file__).parent.parent / "samples" / "amqp-connection.json"
    parsed = config.parse(json.loads(sample.read_text()))
    assert parsed.declared_labels == ["plant-a:checked", "plant-a:published"]
    assert parsed.targets[0].channels == ("twin",) and parsed.targets[0].namespaces == ("org.acme",)


def test_a_redeliver_decision_requeues_the_copy_opens_the_next_attempt_then_dead_letters(
    engine: Engine, database_url: str, broker: Broker, run_pipeline
) -> None:
    """A.2.10: twin-persisted succeeds, the undeclared label times out (424: redeliver). The copy
    opens attempt 2 asking only for the label that failed; the change is not applied again; after
    the last attempt the decision is dead-letter and the message leaves the queue for good."""
    from ackstore.rules.settings import Settings

    source = broker.queue("commands")
    publish_all(broker, source, [thing_modify(7, requested_acks=["twin-persisted", "plant:never"], timeout="15s")])
    process = connector(database_url, "--connection-id", "plant", "--queue", source, "--poll", "0.5")
    rules = Settings(max_attempts=2)
    try:
        wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 1, what="the signal stored")
        run_pipeline("apply_twin", rules=rules)  # persisted in time
        wait_for(lambda: count(engine, "SELECT count(*) FROM signals WHERE deadline_at < now()"), what="the deadline")
        run_pipeline(rules=rules)
        wait_for(lambda: count(engine, "SELECT count(*) FROM attempts WHERE attempt = 2") == 1, what="the copy opened attempt 2")
        assert settled(engine) == {"redeliver": 1}
        wait_for(lambda: count(engine, "SELECT count(*) FROM attempts WHERE attempt = 2 AND deadline_at < now()"), what="deadline 2")
        run_pipeline(rules=rules)
        wait_for(lambda: settled(engine) == {"redeliver": 1, "dead-letter": 1}, what="dead-letter carried out")
    finally:
        code, log = stop(process)
    assert code == 0, log
    with engine.connect() as conn:
        attempts = conn.execute(text("SELECT attempt, requested_acks FROM attempts ORDER BY attempt")).all()
        revision = conn.execute(text("SELECT revision FROM things")).scalar_one()
    assert attempts == [(1, ["twin-persisted", "plant:never"]), (2, ["plant:never"])]
    assert revision == 1, "the twin change is applied once"
    assert count(engine, "SELECT count(*) FROM signals") == 1
    assert broker.depth(source) == 0


def _target_connection(tmp_path, broker: Broker, source: str, exchange: str) -> str:
    document = {
        "id": "plant",
        "sources": [{"addresses": [source], "acknowledgementRequests": {"includes": ["twin-persisted"]}}],
        "targets": [{"address": f"{exchange}/events", "topics": ["_/_/things/twin/events?namespaces=org.acme"],
                     "issuedAcknowledgementLabel": "{{connection:id}}:published"}],
    }
    path = tmp_path / "connection.json"
    path.write_text(json.dumps(document))
    return str(path)


@pytest.mark.parametrize(("overflow", "status", "decision"), [(False, 200, "ack"), (True, 503, "redeliver")])
def test_a_target_publishes_events_with_confirms_and_issues_its_label_from_the_broker_answer(
    tmp_path, engine: Engine, database_url: str, broker: Broker, run_pipeline, overflow: bool, status: int,
    decision: str,
) -> None:
    """B.9: the target's label is 200 when the broker confirms the event, 503 when it nacks it
    (a queue that rejects publishes when full makes the broker nack)."""
    source, exchange = broker.queue("commands"), broker.exchange("events")
    events = f"{broker.prefix}.events-in"
    arguments = {"x-max-length": 0, "x-overflow": "reject-publish"} if overflow else None
    broker.channel.queue_declare(events, durable=True, arguments=arguments)
    broker.queues.append(events)
    broker.channel.queue_bind(events, exchange, routing_key="events")
    publish_all(broker, source, [thing_modify(3, requested_acks=["plant:published"])])
    process = connector(database_url, "--config", _target_connection(tmp_path, broker, source, exchange),
                        "--poll", "0.5")
    try:
        wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 1, what="the signal stored")
        run_pipeline("apply_twin")
        wait_for(lambda: count(engine, "SELECT count(*) FROM acks WHERE label = 'plant:published'"),
                 what="the target's ack")
        run_pipeline()
        wait_for(lambda: settled(engine).get(decision) == 1, what=f"{decision} carried out")
    finally:
        code, log = stop(process)
    assert code == 0, log
    with engine.connect() as conn:
        ack = conn.execute(text("SELECT status, issuer, disposition FROM acks WHERE label = 'plant:published' AND attempt = 1")).one()
    assert tuple(ack) == (status, "plant/target-0", "counted")
    delivered = broker.drain_json(events)
    if overflow:
        assert delivered == []
    else:
        assert [m["topic"] for m in delivered] == ["org.acme/t3/things/twin/events/created"]
        assert delivered[0]["headers"]["requested-acks"] == ["plant:published"]


def test_publish_amqp_sends_each_line_with_a_message_id_and_confirms(tmp_path, broker: Broker) -> None:
    import subprocess
    import sys

    from tests.support.broker import AMQP_URL, ROOT

    queue = broker.queue("published")
    lines = tmp_path / "messages.jsonl"
    lines.write_text("\n".join([
        json.dumps(thing_modify(1, message_id="given-id", reply_to="answers")),
        "",
        json.dumps(thing_modify(2)),
        "not json at all",
    ]) + "\n")
    done = subprocess.run([sys.executable, "-m", "ackstore.cli", "publish", "amqp", "--queue", queue,
                           "--url", AMQP_URL, str(lines)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"status": 200, "queue": queue, "published": 3, "refused": 0}
    received = broker.drain(queue)
    assert received[0][0].message_id == "given-id" and received[0][0].reply_to == "answers"
    assert received[0][0].correlation_id == "c-1"
    assert len({p.message_id for p, _ in received}) == 3, "each line has its own message id"
    assert received[2][1] == b"not json at all"


def test_publish_amqp_to_a_queue_that_does_not_exist_says_why_in_dittos_shape(tmp_path) -> None:
    """Issue 50: it answered 503 "refused 1" and no reason."""
    import subprocess
    import sys
    import uuid

    from tests.support.broker import AMQP_URL, ROOT

    missing = f"ackstore-test-missing-{uuid.uuid4().hex[:8]}"  # never declared
    lines = tmp_path / "messages.jsonl"
    lines.write_text(json.dumps(thing_modify(1)) + "\n" + json.dumps(thing_modify(2)) + "\n")
    done = subprocess.run([sys.executable, "-m", "ackstore.cli", "publish", "amqp", "--queue", missing,
                           "--url", AMQP_URL, str(lines)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    answer = json.loads(done.stdout)
    assert {k: answer[k] for k in ("status", "error", "queue", "published", "refused")} == {
        "status": 503, "error": "connectivity:message.refused", "queue": missing, "published": 0, "refused": 2}
    assert f"2 lines: no queue '{missing}' exists on the broker to take it" in answer["message"], answer
    assert "Declare the queue" in answer["description"] and "Traceback" not in done.stderr


def test_a_source_carries_the_connections_own_acks_for_its_declared_labels(
    tmp_path, engine: Engine, database_url: str, broker: Broker, run_pipeline
) -> None:
    source = broker.queue("commands")
    path = tmp_path / "connection.json"
    path.write_text(json.dumps({"id": "plant", "sources": [
        {"addresses": [source], "declaredAcks": ["{{connection:id}}:checked"]}]}))
    publish_all(broker, source, [thing_modify(5, requested_acks=["twin-persisted", "plant:checked"])])
    process = connector(database_url, "--config", str(path), "--poll", "0.5")
    try:
        wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 1, what="the signal stored")
        ack = {"topic": "org.acme/t5/things/twin/acks/plant:checked", "headers": {"correlation-id": "c-5"},
               "path": "/", "status": 200, "value": "looked at it"}
        broker.publish(source, json.dumps(ack).encode(), message_id="the-ack")
        wait_for(lambda: count(engine, "SELECT count(*) FROM acks WHERE label = 'plant:checked'"), what="the ack")
        run_pipeline()
        wait_for(lambda: settled(engine) == {"ack": 1}, what="the command settled")
    finally:
        code, log = stop(process)
    assert code == 0, log
    with engine.connect() as conn:
        stored_ack = conn.execute(text("SELECT status, payload, issuer FROM acks WHERE label = 'plant:checked'")).one()
        result = conn.execute(text("SELECT status FROM request_results")).scalar_one()
    assert tuple(stored_ack) == (200, "looked at it", "plant") and result == 200
    assert broker.depth(source) == 0


def test_the_connector_warns_when_the_maximum_timeout_nears_the_consumer_timeout(
    database_url: str, broker: Broker
) -> None:
    source = broker.queue("commands")
    done = connector(database_url, "--connection-id", "plant", "--queue", source, "--once",
                     env={"ACKSTORE_MAX_TIMEOUT": "28m"})
    code, log = stop_when_done(done)
    assert code == 0, log
    assert "is not comfortably below the broker's consumer timeout" in log
    quiet = connector(database_url, "--connection-id", "plant", "--queue", source, "--once")
    code, log = stop_when_done(quiet)
    assert code == 0 and "consumer timeout" not in log


def test_qos0_with_response_required_is_settled_at_once_and_answered_once_decided(
    engine: Engine, database_url: str, broker: Broker, run_pipeline
) -> None:
    """B.7, connectivity column: rr=true without acks → settled immediately, the response
    published to the reply target when it exists (here: once the pipeline decided it)."""
    source, replies = broker.queue("commands"), broker.queue("replies")
    publish_all(broker, source, [thing_modify(9, requested_acks=[])], reply_to=replies)
    process = connector(database_url, "--connection-id", "plant", "--queue", source, "--poll", "0.5")
    try:
        wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 1, what="the signal stored")
        wait_for(lambda: broker.depth(source) == 0, what="the delivery settled at once")
        assert broker.drain(replies) == [], "no answer before the decision"
        run_pipeline()
        wait_for(lambda: settled(engine) == {"ack": 1}, what="the decision recorded")
        answers = wait_for(lambda: broker.drain_json(replies), what="the response on reply_to")
    finally:
        code, log = stop(process)
    assert code == 0, log
    assert [(a["status"], a["headers"]["correlation-id"]) for a in answers] == [(201, "c-9")]
    assert "acknowledged 1," in log


def test_a_missing_queue_is_logged_and_consumed_once_it_exists(
    tmp_path, engine: Engine, database_url: str, broker: Broker
) -> None:
    queue = f"{broker.prefix}.later"
    log_path = tmp_path / "connector.log"
    with open(log_path, "w") as log_file:
        process = connector(database_url, "--connection-id", "plant", "--queue", queue, log=log_file)
        try:  # the queue is declared once the connector has said it is missing (a loaded machine starts it late)
            wait_for(lambda: "NOT_FOUND" in log_path.read_text(), what="the missing queue, said")
            broker.queue("later")
            publish_all(broker, queue, [thing_modify(4, requested_acks=[], response_required=False)])
            wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 1, timeout=60, what="stored once it exists")
        finally:
            code, _ = stop(process)
    log = log_path.read_text()
    assert code == 0, log
    assert "NOT_FOUND" in log and "acknowledged 1," in log
