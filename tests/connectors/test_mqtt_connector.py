"""The MQTT connector against a Mosquitto of the module's own (docker/mosquitto.conf), the
machine's PostgreSQL and the real pipeline, over MQTT 3.1.1 and 5.

A QoS-1 message is not PUBACKed until the ledger has decided it: until then the broker keeps it
in the connector's persistent session, and sends it again when the session resumes. What the
broker still holds for a session is looked at with the connector stopped (``session_backlog``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from functools import partial
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from sqlalchemy import Engine, text

from tests.support import ledger
from tests.support.broker import stop, wait_for
from tests.support.ledger import count, settled
from tests.support.mqtt_clients import Collector, mqtt_connector, publish, session_backlog

pytestmark = [pytest.mark.spark, pytest.mark.slow]

VERSIONS = {"3.1.1": paho.MQTTv311, "5": paho.MQTTv5}


thing_modify = partial(ledger.thing_modify, thing="org.acme/m")


def names() -> tuple[str, str]:
    """A connection id (its client id) and a topic of the test's own."""
    tag = uuid.uuid4().hex[:8]
    return f"mq-{tag}", f"plant-{tag}/commands"


def open_session(database_url: str, url: str, *args: str) -> None:
    """The connector's persistent session and its subscriptions, made by a connector that takes
    what is waiting and exits: from now on the broker keeps what is published for it."""
    process = mqtt_connector(database_url, url, *args, "--once")
    _, log = process.communicate(timeout=60)
    assert process.returncode == 0, log


def connection_file(tmp_path, document: dict) -> str:
    path = tmp_path / "connection.json"
    path.write_text(json.dumps(document))
    return str(path)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_qos1_message_is_pubacked_only_when_its_decision_is_carried_out(
    engine: Engine, database_url: str, own_mosquitto, run_pipeline, version: str
) -> None:
    connection, topic = names()
    args = ("--connection-id", connection, "--topic", topic, "--mqtt-version", version,
            "--requested-acks", "twin-persisted", "--poll", "0.5")
    open_session(database_url, own_mosquitto.url, *args)
    publish(own_mosquitto.url, topic, [thing_modify(n) for n in range(3)], VERSIONS[version])
    first = mqtt_connector(database_url, own_mosquitto.url, *args)
    try:
        wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 3, what="3 signals stored")
    finally:
        code, log = stop(first)
    assert code == 0, log
    assert "gave 3 undecided deliveries back" in log
    # Not PUBACKed: the broker holds all three for the session (they come again, stored once).
    assert len(session_backlog(own_mosquitto.url, connection, topic, VERSIONS[version])) == 3

    second = mqtt_connector(database_url, own_mosquitto.url, *args)
    try:
        wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 3, what="the copies seen")
        run_pipeline()
        wait_for(lambda: settled(engine) == {"ack": 3}, what="3 acks carried out")
    finally:
        code, log = stop(second)
    assert code == 0, log
    assert "stored 0, duplicate 3," in log, "the copies are recognised by their key, not stored again"
    assert count(engine, "SELECT count(*) FROM signals") == 3
    assert session_backlog(own_mosquitto.url, connection, topic, VERSIONS[version]) == [], "every one PUBACKed"


def test_messages_published_while_the_connector_is_away_wait_in_its_session(
    engine: Engine, database_url: str, own_mosquitto, run_pipeline
) -> None:
    connection, topic = names()
    args = ("--connection-id", connection, "--topic", topic, "--mqtt-version", "3.1.1", "--poll", "0.5",
            "--requested-acks", "twin-persisted")
    open_session(database_url, own_mosquitto.url, *args)
    publish(own_mosquitto.url, topic, [thing_modify(n) for n in range(5)], paho.MQTTv311)
    process = mqtt_connector(database_url, own_mosquitto.url, *args)
    try:
        wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 5, what="5 signals stored")
        run_pipeline()
        wait_for(lambda: settled(engine) == {"ack": 5}, what="5 acks carried out")
    finally:
        code, log = stop(process)
    assert code == 0, log


def test_results_and_refusals_are_answered_on_the_response_topic_with_correlation_data(
    tmp_path, engine: Engine, database_url: str, own_mosquitto, run_pipeline
) -> None:
    """MQTT 5: the response topic is the reply-to, correlation data the correlation id; a message
    the source's enforcement refuses is PUBACKed (never redelivered) and answered with Ditto's 400."""
    connection, topic = names()
    replies = f"{topic}-replies"  # not one of the source's topics
    document = {
        "id": connection, "connectionType": "mqtt-5", "uri": own_mosquitto.url,
        "sources": [{"addresses": [f"{topic}/+"], "qos": 1, "authorizationContext": ["ditto:inbound"],
                     "acknowledgementRequests": {"includes": ["twin-persisted"]},
                     "enforcement": {"input": "{{ source:address }}", "filters": [f"{topic}/{{{{ thing:name }}}}"]},
                     "replyTarget": {"enabled": True, "address": "{{header:reply-to}}",
                                     "expectedResponseTypes": ["response", "error"]}}],
        "specificConfig": {"clientId": connection, "keepAlive": "30s"},
    }
    collector = Collector(own_mosquitto.url, replies)
    config = connection_file(tmp_path, document)
    open_session(database_url, own_mosquitto.url, "--config", config)
    process = mqtt_connector(database_url, own_mosquitto.url, "--config", config, "--poll", "0.5")
    try:
        publish(own_mosquitto.url, f"{topic}/m1", [thing_modify(1)], response_topic=replies)  # its own thing
        publish(own_mosquitto.url, f"{topic}/m1", [thing_modify(2)], response_topic=replies)  # another's
        wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 1, what="the allowed one stored")
        wait_for(lambda: len(collector.messages) == 1, what="the refusal answered")
        run_pipeline()
        wait_for(lambda: settled(engine) == {"ack": 1}, what="the ack carried out")
        wait_for(lambda: len(collector.messages) == 2, what="the result answered")
    finally:
        code, log = stop(process)
        collector.close()
    assert code == 0, log
    refusal, result = collector.messages
    assert json.loads(refusal.payload)["value"]["error"] == "connectivity:connection.id.enforcement.failed"
    assert json.loads(refusal.payload)["status"] == 400
    assert refusal.properties.CorrelationData == b"c-2"
    assert json.loads(result.payload)["status"] == 201
    assert result.properties.CorrelationData == b"c-1"
    assert session_backlog(own_mosquitto.url, connection, f"{topic}/marker") == [], "the refused one was PUBACKed too"


@pytest.mark.parametrize("reconnect", [True, False])
def test_a_redeliver_decision_reconnects_for_redelivery_or_is_pubacked_as_ditto_does(
    tmp_path, engine: Engine, database_url: str, own_mosquitto, run_pipeline, reconnect: bool
) -> None:
    """B.9's MQTT row: the undeclared label times out (424: redeliver). With
    reconnectForRedelivery the PUBACK is withheld, the connector reconnects, the broker sends
    the message again and it opens attempt 2; without, it is PUBACKed and nothing comes again."""
    from ackstore.rules.settings import Settings

    connection, topic = names()
    document = {
        "id": connection, "connectionType": "mqtt", "uri": own_mosquitto.url,
        "sources": [{"addresses": [topic], "qos": 1}],
        "specificConfig": {"reconnectForRedelivery": reconnect, "reconnectForRedeliveryDelay": "1s"},
    }
    config = connection_file(tmp_path, document)
    open_session(database_url, own_mosquitto.url, "--config", config)
    process = mqtt_connector(database_url, own_mosquitto.url, "--config", config, "--poll", "0.5")
    rules = Settings(max_attempts=2)
    try:
        publish(own_mosquitto.url, topic, [thing_modify(7, requested_acks=["twin-persisted", "other:never"],
                                                        timeout="5s")], paho.MQTTv311)
        wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 1, what="the signal stored")
        run_pipeline("apply_twin", rules=rules)
        wait_for(lambda: count(engine, "SELECT count(*) FROM signals WHERE deadline_at < now()"), what="the deadline")
        run_pipeline(rules=rules)
        wait_for(lambda: settled(engine) == {"redeliver": 1}, what="the redeliver decision carried out")
        if reconnect:
            wait_for(lambda: count(engine, "SELECT count(*) FROM attempts WHERE attempt = 2") == 1,
                     what="the copy the broker sent again opened attempt 2")
    finally:
        code, log = stop(process)
    assert code == 0, log
    assert count(engine, "SELECT count(*) FROM signals") == 1
    assert count(engine, "SELECT revision FROM things") == 1, "the twin change is applied once"
    with engine.connect() as conn:
        (carried_out_as,) = conn.execute(text("SELECT carried_out_as FROM settlements WHERE attempt = 1")).one()
    if reconnect:
        assert "reconnecting so that the broker sends again" in log
        assert carried_out_as is None, "carried out as decided"
        assert len(session_backlog(own_mosquitto.url, connection, topic, paho.MQTTv311)) == 1, "attempt 2 still held"
    else:
        assert carried_out_as == "ack", "the settlement row says it was PUBACKed instead"
        assert count(engine, "SELECT count(*) FROM attempts WHERE attempt = 2") == 0
        assert session_backlog(own_mosquitto.url, connection, topic, paho.MQTTv311) == [], "PUBACKed: never sent again"


@pytest.mark.parametrize(("refused", "status", "decision"), [(False, 200, "ack"), (True, 503, "redeliver")])
def test_a_target_publishes_at_qos1_and_issues_its_label_from_the_puback(
    tmp_path, engine: Engine, database_url: str, run_pipeline, refused: bool, status: int, decision: str
) -> None:
    """B.9: a target's label is 200 when the broker PUBACKs the event, 503 when its PUBACK's reason
    code is a failure (an ACL that denies the target's topic: 0x87, not authorized)."""
    from tests.support.own_mosquitto import OwnMosquitto

    connection, topic = names()
    events = f"{topic}/events"
    folder = Path(tempfile.mkdtemp(prefix="ackstore-acl-"))  # readable by Mosquitto's own user
    folder.chmod(0o755)
    acl = folder / "acl"
    acl.write_text(f"topic readwrite #\ntopic read $SYS/#\n{'topic deny ' + events if refused else ''}\n")
    acl.chmod(0o644)
    document = {
        "id": connection, "connectionType": "mqtt-5",
        "sources": [{"addresses": [topic], "qos": 1, "acknowledgementRequests": {"includes": ["twin-persisted"]}}],
        "targets": [{"address": events, "topics": ["_/_/things/twin/events?namespaces=org.acme"], "qos": 1,
                     "issuedAcknowledgementLabel": "{{connection:id}}:published"}],
        "specificConfig": {"separatePublisherClient": True},
    }
    with OwnMosquitto(acl_file=str(acl)) as broker:
        document["uri"] = broker.url
        collector = Collector(broker.url, events)
        config = connection_file(tmp_path, document)
        open_session(database_url, broker.url, "--config", config)
        process = mqtt_connector(database_url, broker.url, "--config", config, "--poll", "0.5")
        try:
            publish(broker.url, topic, [thing_modify(3, requested_acks=[f"{connection}:published"])])
            wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 1, what="the signal stored")
            run_pipeline("apply_twin")
            wait_for(lambda: count(engine, "SELECT count(*) FROM acks WHERE label = :l", l=f"{connection}:published"),
                     what="the target's ack")
            run_pipeline()
            wait_for(lambda: settled(engine).get(decision) == 1, what=f"{decision} carried out")
        finally:
            code, log = stop(process)
            collector.close()
    shutil.rmtree(folder)
    assert code == 0, log
    with engine.connect() as conn:
        ack = conn.execute(text("SELECT status, issuer FROM acks WHERE label = :l AND attempt = 1"),
                           {"l": f"{connection}:published"}).one()
    assert tuple(ack) == (status, f"{connection}/target-0")
    if refused:
        assert collector.messages == []
        return
    (event,) = collector.messages
    assert json.loads(event.payload)["topic"] == "org.acme/m3/things/twin/events/created"
    assert dict(event.properties.UserProperty)["ack-token"] == json.loads(event.payload)["headers"]["ack-token"]


@pytest.mark.parametrize(("setting", "named"), [
    ({"specificConfig": {"lastWillTopic": "x"}}, "'lastWillTopic' is not supported"),
    ({"specificConfig": {"reconnectForRedeliveryDelay": "500ms"}}, "reconnectForRedeliveryDelay"),
    ({"sources": [{"addresses": ["a/#"], "qos": 2}]}, "QoS 2 is not supported"),
    ({"sources": [{"addresses": ["a/#/b"], "qos": 1}]}, "is not an MQTT topic filter"),
    ({"sources": [{"addresses": ["a"], "qos": 1, "headerMapping": {}}]}, "'headerMapping' is not supported"),
])
def test_ackstore_connect_mqtt_answers_an_unsupported_setting_with_a_400_naming_it(
    tmp_path, database_url: str, setting: dict, named: str
) -> None:
    document = {"id": "m", "connectionType": "mqtt", "uri": "mqtt://127.0.0.1:1", "sources": [{"addresses": ["a"], "qos": 1}],
                **setting}
    process = mqtt_connector(database_url, "mqtt://127.0.0.1:1", "--config", connection_file(tmp_path, document))
    out, _ = process.communicate(timeout=60)
    answer = json.loads(out)
    assert (answer["status"], answer["error"]) == (400, "connectivity:connection.configuration.invalid")
    assert named in answer["message"] and answer["description"]


def test_a_broker_that_drops_messages_for_its_queue_limit_is_said_so_by_the_connector(
    tmp_path, engine: Engine, database_url: str
) -> None:
    """decisions #100: a broker whose queue limit is too small for the decision time drops QoS-1
    messages and still PUBACKs their publisher; Mosquitto counts them in $SYS, and the connector
    says so as an error instead of losing them silently."""
    from tests.support.own_mosquitto import OwnMosquitto

    connection, topic = names()
    document = {"id": connection, "connectionType": "mqtt-5", "sources": [{"addresses": [topic], "qos": 1}],
                "specificConfig": {"receiveMaximum": 20}}
    with OwnMosquitto(max_queued_messages=50, sys_interval=1) as broker:
        document["uri"] = broker.url
        config = connection_file(tmp_path, document)
        open_session(database_url, broker.url, "--config", config)
        log_path = tmp_path / "connector.log"
        with open(log_path, "w") as log_file:
            process = mqtt_connector(database_url, broker.url, "--config", config, "--poll", "0.5", log=log_file)
            try:
                wait_for(lambda: "consuming" in log_path.read_text(), what="the connector subscribed")
                publish(broker.url, topic, [thing_modify(n, requested_acks=["twin-persisted"]) for n in range(200)])
                wait_for(lambda: "the broker has dropped" in log_path.read_text(), timeout=30, what="the drop said")
            finally:
                code, _ = stop(process)
        held = session_backlog(broker.url, connection, topic)
    assert code == 0, log_path.read_text()
    assert "raise max_queued_messages" in log_path.read_text()
    assert count(engine, "SELECT count(*) FROM signals") == 20, "the receive maximum: 20 in flight, none PUBACKed"
    assert len(held) == 70, "20 in flight and 50 queued kept; the other 130 were dropped"


@pytest.mark.parametrize(("reply_to", "why"), [
    ("replies/#\u001b[31m", "the topic: it holds a wildcard (+ or #)"),
    ("replies/\u001b[31m", "the topic: it holds U+001B, which an MQTT string must not"),
])
def test_a_reply_to_that_is_no_topic_name_is_skipped_and_the_connector_goes_on(
    database_url: str, engine: Engine, own_mosquitto, reply_to: str, why: str
) -> None:
    """A sender chooses the reply-to: a wildcard cannot be published to (paho raises on it), a
    control character is refused by the broker, which closes the connection. The answer is
    dropped, said once (the sender's text escaped) and counted; the connector stores the next
    message on the same session."""
    connection, topic = names()
    args = ("--connection-id", connection, "--topic", topic, "--mqtt-version", "3.1.1", "--poll", "0.5")
    open_session(database_url, own_mosquitto.url, *args)
    bad = thing_modify(1, requested_acks=["not a label!"]) | {}
    bad["headers"]["reply-to"] = reply_to
    publish(own_mosquitto.url, topic, [bad, thing_modify(2, requested_acks=[])], paho.MQTTv311)
    process = mqtt_connector(database_url, own_mosquitto.url, *args, "--once")
    _, log = process.communicate(timeout=120)
    assert process.returncode == 0, log
    assert "dropped 1," in log and "reconnects 0; unsendable 1" in log
    (said,) = [line for line in log.splitlines() if "is dropped" in line]
    assert f"the answer to {reply_to!r} is dropped, mqtt cannot carry it: {why}" in said
    assert "\u001b" not in log, "the sender's text is shown escaped"
    assert count(engine, "SELECT count(*) FROM signals") == 1


def test_a_message_of_a_subscription_no_source_has_any_more_is_acknowledged_not_held(
    tmp_path, database_url: str, engine: Engine, own_mosquitto
) -> None:
    """The session keeps the subscriptions of an earlier configuration: their messages are
    PUBACKed and said once, never held (they would fill the in-flight window every session)."""
    connection, topic = names()
    before = ("--connection-id", connection, "--topic", f"{topic}/old", "--mqtt-version", "3.1.1", "--poll", "0.5")
    now = ("--connection-id", connection, "--topic", f"{topic}/new", "--mqtt-version", "3.1.1", "--poll", "0.5")
    open_session(database_url, own_mosquitto.url, *before)
    open_session(database_url, own_mosquitto.url, *now)
    publish(own_mosquitto.url, f"{topic}/old", [thing_modify(n) for n in range(3)], paho.MQTTv311)
    process = mqtt_connector(database_url, own_mosquitto.url, *now, "--once")
    _, log = process.communicate(timeout=120)
    assert process.returncode == 0, log
    assert log.count("matches no source") == 1 and count(engine, "SELECT count(*) FROM signals") == 0
    assert session_backlog(own_mosquitto.url, connection, f"{topic}/new", paho.MQTTv311) == []


def test_a_session_the_broker_lost_is_said_when_the_connector_reconnects(tmp_path, migrated_engine,
                                                                          database_url: str) -> None:
    """The broker loses the connector's session (here: killed, its persistence file gone): what
    it held for the connector is gone, and the connector says so when it reconnects. (The ledger
    migrated: alone on a worker, nothing else of the run had migrated it.)"""
    from tests.support.own_mosquitto import OwnMosquitto

    connection, topic = names()
    with OwnMosquitto() as broker:
        args = ("--connection-id", connection, "--topic", topic, "--poll", "0.5")
        log_path = tmp_path / "connector.log"
        with open(log_path, "w") as log_file:
            process = mqtt_connector(database_url, broker.url, *args, log=log_file)
            try:
                wait_for(lambda: "consuming" in log_path.read_text(), what="the connector subscribed")
                broker.kill()
                broker.database.unlink(missing_ok=True)
                broker.start()
                wait_for(lambda: "no longer had this connector's session" in log_path.read_text(), timeout=60,
                         what="the lost session said")
            finally:
                code, _ = stop(process)
    assert code == 0, log_path.read_text()
