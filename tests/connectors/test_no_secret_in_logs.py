"""No secret in any log, from any library (issue 50, decisions #120): each connector — AMQP 0.9.1,
AMQP 1.0, MQTT, HTTP push — runs against a broker or endpoint of the test's own that takes only a
user with a password of this run, does its work (stores a message, answers a refused one on its
reply-to, publishes, reconnects), and everything it left is searched for that password: its
stderr and stdout, and its connection's log in the ledger. Every other connector test checks its
logs for a URL's password too (``tests.support.broker.stop``).

Before, proton logged ``Connecting to Url('amqp://u:S3cr3t@…')`` on every (re)connect."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import uuid
from typing import Iterator
from urllib.parse import quote

import pytest
from sqlalchemy import Engine, text

from tests.support.amqp10_clients import address, amqp10_connector, send
from tests.support.broker import ROOT, Broker, connector, stop, wait_for
from tests.support.http_endpoint import Endpoint
from tests.support.ledger import count, thing_modify
from tests.support.live_signals import live_message
from tests.support.mqtt_clients import mqtt_connector, publish
from tests.support.own_postgres import free_port

pytestmark = [pytest.mark.slow]

USER = "ackstore-user"
PASSWORD = f"S3cr3t-{uuid.uuid4().hex[:12]}"  # this run's: found nowhere else


def _left_behind(engine: Engine, connection: str, *outputs: str) -> str:
    """All a connector left: its outputs and its connection's log in the ledger."""
    with engine.connect() as conn:
        entries = conn.execute(text("SELECT kind || ' ' || detail || ' ' || coalesce(message_id, '') "
                                    "FROM connection_log WHERE connection = :c"), {"c": connection}).scalars().all()
    return "\n".join([*outputs, *entries])


def _once(process: subprocess.Popen) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=180)
    return process.returncode, out or "", err or ""


@pytest.fixture(scope="module")
def node() -> Iterator:
    """A RabbitMQ node of the module's own (AMQP 0.9.1 and 1.0) whose one user has this run's password."""
    from tests.support.own_rabbitmq import OwnRabbitMQ

    node = OwnRabbitMQ(plugins=("rabbitmq_amqp1_0",), user=USER, password=PASSWORD)
    node.start()
    yield node
    node.close()


@pytest.fixture
def broker(node) -> Iterator[Broker]:
    broker = Broker(node.url)
    yield broker
    broker.close()


def test_the_amqp_connector_logs_no_password(tmp_path, engine: Engine, database_url: str, node,
                                             broker: Broker) -> None:
    """AMQP 0.9.1 (pika): a source, a refused message answered on its reply-to, and a queue that
    is missing (the connection lost and made again)."""
    source, replies = broker.queue("commands"), broker.queue("replies")
    broker.publish(source, b"not json", reply_to=replies, correlation_id="refused")
    broker.publish(source, json.dumps(thing_modify(1, requested_acks=[], response_required=False)).encode())
    code, out, err = _once(connector(database_url, "--connection-id", "plain-amqp", "--queue", source, "--once",
                                     url=node.url))
    assert code == 0, err
    assert "dropped 1," in err and "acknowledged 1," in err
    assert len(broker.drain(replies)) == 1, "the refusal answered: pika published on the password's connection"
    log_path = tmp_path / "missing.log"
    with open(log_path, "w") as log_file:
        missing = connector(database_url, "--connection-id", "plain-amqp", "--queue", f"{broker.prefix}.missing",
                            url=node.url, log=log_file)
        try:
            wait_for(lambda: log_path.read_text().count("reconnecting in") >= 2, what="two sessions lost")
        finally:
            stop(missing)
    log = log_path.read_text()
    assert "NOT_FOUND" in log, log
    assert PASSWORD not in _left_behind(engine, "plain-amqp", out, err, log)


def test_the_amqp10_connector_logs_no_password(tmp_path, engine: Engine, database_url: str, node,
                                               broker: Broker) -> None:
    """AMQP 1.0 (proton logs the URL it connects to, at every connect): a source, a refused
    message answered on its reply-to, and a target's connection of its own."""
    source, replies, events = broker.queue("commands"), broker.queue("replies"), broker.queue("events")
    send(node.amqp10_url, address(source), [b"not json"], reply_to=address(replies), correlation_id="refused")
    send(node.amqp10_url, address(source), [thing_modify(1, requested_acks=[], response_required=False)])
    config = tmp_path / "connection.json"
    config.write_text(json.dumps({
        "id": "plain-amqp10", "uri": node.amqp10_url, "connectionType": "amqp-10",
        "sources": [{"addresses": [address(source)]}],
        "targets": [{"address": f"queue://{address(events)}", "topics": ["_/_/things/twin/events"]}]}))
    code, out, err = _once(amqp10_connector(database_url, node.amqp10_url, "--config", str(config), "--once"))
    assert code == 0, err
    assert "dropped 1," in err and "acknowledged 1," in err
    assert err.count(f"Url('amqp://{USER}:***@127.0.0.1:{node.port}')") == 2, "proton's lines, masked: source, targets"
    assert PASSWORD not in _left_behind(engine, "plain-amqp10", out, err)


def test_the_mqtt_connector_logs_no_password(engine: Engine, database_url: str) -> None:
    """MQTT (paho): a persistent session subscribed, a refused message answered on its response topic."""
    from tests.support.own_mosquitto import OwnMosquitto

    with OwnMosquitto(credentials=(USER, PASSWORD)) as mosquitto:
        topic = f"plant/{uuid.uuid4().hex[:8]}/commands"
        args = ("--connection-id", "plain-mqtt", "--topic", topic, "--once")
        first = _once(mqtt_connector(database_url, mosquitto.url, *args))  # the session subscribes
        assert first[0] == 0, first[2]
        publish(mosquitto.url, topic, [b"not json", thing_modify(1, requested_acks=[], response_required=False)],
                response_topic=f"{topic}/replies")
        code, out, err = _once(mqtt_connector(database_url, mosquitto.url, *args))
        assert code == 0, err
        assert "dropped 1," in err and "acknowledged 1," in err
        assert PASSWORD not in _left_behind(engine, "plain-mqtt", *first[1:], out, err)


def test_the_http_push_connector_logs_no_password_nor_its_basic_credentials(
    tmp_path, engine: Engine, database_url: str, store
) -> None:
    """HTTP push sends ``user:password`` as basic authentication: neither the password (decoded or
    percent-encoded) nor the header's base64 is logged, also when a request fails."""
    password = f"{PASSWORD}/p@ss"
    encoded = quote(password, safe="")
    basic = base64.b64encode(f"{USER}:{password}".encode()).decode()
    server = Endpoint()
    server.thread.start()
    try:
        port = server.server_address[1]
        targets = [{"address": path, "topics": ["_/_/things/live/messages"], "issuedAcknowledgementLabel": f"push:{n}"}
                   for n, path in enumerate(["POST:/ok", "POST:/fail"])]
        config = tmp_path / "push.json"
        config.write_text(json.dumps({"id": "push", "connectionType": "http-push", "targets": targets,
                                      "uri": f"http://{USER}:{encoded}@127.0.0.1:{port}",
                                      "specificConfig": {"idleTimeout": "1s"}}))
        refused = tmp_path / "refused.json"  # a second connection whose endpoint refuses every connection
        refused.write_text(config.read_text().replace(f"127.0.0.1:{port}", f"127.0.0.1:{free_port()}")
                           .replace('"push"', '"push-refused"').replace("push:", "push-refused:"))
        processes = [subprocess.Popen([sys.executable, "-m", "ackstore.cli", "--database-url", database_url, "connect",
                                       "http-push", "--config", str(path)], cwd=ROOT, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for path in (config, refused)]
        try:
            wait_for(lambda: count(engine, "SELECT count(*) FROM subscribers WHERE id LIKE 'push%/target-%'") == 4,
                     what="the targets declared")
            labels = ["push:0", "push:1", "push-refused:0"]
            assert store.submit(live_message("asked", requested_acks=labels, timeout="60s"))["status"] == 202
            wait_for(lambda: count(engine, "SELECT count(*) FROM acks WHERE label LIKE 'push%'") == 3, what="the acks")
        finally:
            logs = [stop(process)[1] for process in processes]
    finally:
        server.shutdown()
        server.server_close()
    assert {r["headers"]["Authorization"] for r in server.requests} == {f"Basic {basic}"}
    assert any("failed" in log for log in logs), "the refused endpoint said so"
    left = _left_behind(engine, "push", *logs) + _left_behind(engine, "push-refused")
    for secret in (PASSWORD, encoded, basic):
        assert secret not in left


def test_once_gives_up_on_an_unreachable_broker_with_a_503_and_no_password(engine: Engine, database_url: str) -> None:
    """The issue's reproduction: ``connect amqp10 --url amqp://u:S3cr3t@127.0.0.1:1 --once``
    logged the password at every attempt and never exited. Now each attempt's line is masked and
    the connector gives up after 30 s (docs/cli.md), exit 1 with Ditto's 503."""
    started = time.monotonic()
    code, out, err = _once(amqp10_connector(database_url, f"amqp://u:{PASSWORD}@127.0.0.1:1", "--connection-id",
                                            "unreachable", "--address", "q", "--once"))
    took = time.monotonic() - started
    answer = json.loads(out)
    assert (code, answer["status"], answer["error"]) == (1, 503, "connectivity:connection.failed"), (out, err)
    assert "was unreachable for 30 s" in answer["message"] and answer["description"]
    assert err.count("Url('amqp://u:***@127.0.0.1:1')") >= 5, err
    assert took < 120, "it returns"
    assert PASSWORD not in _left_behind(engine, "unreachable", out, err)
    assert count(engine, "SELECT count(*) FROM connection_log WHERE connection = 'unreachable' AND kind = 'outage'") == 1
