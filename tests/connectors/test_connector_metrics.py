"""Each connector's own metrics (issue 38 item 2; docs/metrics.md, "Each connector's"): a real
connector with ``--metrics-port``, real messages — good ones, a duplicate, a poison message — the
real pipeline, and its /metrics scraped over HTTP: the counters equal what happened.

The outage test stops a PostgreSQL cluster of its own under the connector (tests/support/own_postgres.py,
as tests/system/test_postgres_restart.py does); the CLI test points the real ``ackstore`` entry point at a
broker that is not there.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator

import paho.mqtt.client as paho
import pytest
from sqlalchemy import Engine, text

from tests.support.broker import AMQP_URL, ROOT, Broker, connector, publish_all, stop, wait_for
from tests.support.connector_metrics import scrape, served, thing_modify
from tests.support.ledger import count, settled
from tests.support.mqtt_clients import Collector, mqtt_connector, publish
from tests.support.own_postgres import OwnPostgres, free_port
from tests.support.scraped import Samples

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def value(samples: Samples, name: str, **labels: str) -> float:
    """The one sample of ``name`` with these labels (0 when none: a counter that never moved)."""
    found = [v for (n, have), v in samples.items() if n == name and set(labels.items()) <= set(have)]
    assert len(found) <= 1, f"{len(found)} samples of {name} {labels}"
    return found[0] if found else 0.0


def messages(samples: Samples, category: str) -> float:
    return value(samples, "ackstore_connection_messages_total", category=category)


GOOD = 3
POISON = b"this is not json"


def assert_counted(samples: Samples, connection: str, kind: str, replies: int) -> None:
    """GOOD messages, a copy of the first and a poison message went through a connector that
    holds each until its decision (twin-persisted), answering each on its reply-to."""
    assert value(samples, "ackstore_connection_messages_total", category="consumed", direction="inbound",
                 connection=connection, type=kind) == GOOD + 2
    assert messages(samples, "stored") == GOOD
    assert messages(samples, "duplicate") == 1
    assert messages(samples, "dropped") == 1, "the poison message, refused"
    assert messages(samples, "acknowledged") == GOOD + 1, "every delivery of a decided signal, the copy's too"
    assert value(samples, "ackstore_connector_carried_out_total", decision="ack", carried_out_as="ack") == GOOD
    assert messages(samples, "enforced") == 0
    assert value(samples, "ackstore_connector_replies_total") == replies == GOOD + 1, "results and the refusal"
    assert value(samples, "ackstore_connector_in_flight") == 0
    assert value(samples, "ackstore_connector_store_batch_size_sum") == GOOD + 2, "every message in a batch"
    assert value(samples, "ackstore_connector_store_batch_seconds_count") == \
        value(samples, "ackstore_connector_store_batch_size_count") >= 1
    for cause in ("ledger", "broker"):
        assert value(samples, "ackstore_connector_outage", cause=cause) == 0
        assert value(samples, "ackstore_connector_outage_seconds_total", cause=cause) == 0


# --- AMQP 0.9.1 -----------------------------------------------------------------------------------


@pytest.fixture
def broker() -> Iterator[Broker]:
    broker = Broker()
    yield broker
    broker.close()


def amqp_connection(tmp_path: Path, broker: Broker, connection: str, source: str, exchange: str) -> str:
    """A connection with one source (twin-persisted requested) and one target publishing the twin
    events to ``exchange``."""
    document = {
        "id": connection,
        "sources": [{"addresses": [source], "acknowledgementRequests": {"includes": ["twin-persisted"]}}],
        "targets": [{"address": f"{exchange}/events", "topics": ["_/_/things/twin/events?namespaces=org.acme"]}],
    }
    path = tmp_path / "connection.json"
    path.write_text(json.dumps(document))
    return str(path)


def test_an_amqp_connectors_metrics_count_what_happened(
    tmp_path: Path, engine: Engine, database_url: str, broker: Broker, run_pipeline
) -> None:
    connection = f"metrics-{uuid.uuid4().hex[:6]}"
    source, replies, exchange = broker.queue("commands"), broker.queue("replies"), broker.exchange("events")
    events = broker.queue("events-in")
    broker.channel.queue_bind(events, exchange, routing_key="events")
    good = [thing_modify(n) for n in range(GOOD)]
    publish_all(broker, source, [*good, good[0]], reply_to=replies)  # the last: the first again (its message id)
    broker.publish(source, POISON, message_id="poison", correlation_id="poison", reply_to=replies)
    port = free_port()
    process = connector(database_url, "--config", amqp_connection(tmp_path, broker, connection, source, exchange),
                        "--poll", "0.5", "--metrics-port", str(port))
    try:
        wait_for(lambda: messages(served(port, process), "consumed") == GOOD + 2, what="every message consumed")
        wait_for(lambda: value(scrape(port), "ackstore_connector_in_flight") == GOOD + 1, what="the good ones held")
        run_pipeline()
        wait_for(lambda: settled(engine) == {"ack": GOOD}, what="the acks carried out")
        wait_for(lambda: value(scrape(port), "ackstore_connector_target_answers_total", outcome="confirmed") == GOOD,
                 what="the targets' events confirmed")
        samples = wait_for(lambda: (s := scrape(port)) and messages(s, "acknowledged") == GOOD + 1 and s,
                           what="the deliveries settled")
    finally:
        code, log = stop(process)
    assert code == 0, log
    answered = broker.drain(replies)
    assert_counted(samples, connection, "amqp-091", len(answered))
    assert len(broker.drain(events)) == GOOD
    assert value(samples, "ackstore_connector_target_answers_total", outcome="refused") == 0
    assert messages(samples, "published") == GOOD + 1 + GOOD, "replies and the targets' confirmed events"
    assert count(engine, "SELECT count(*) FROM signals") == GOOD
    # the ledger's view of the same connection (ackstore connection metrics|logs), as Ditto's
    (entry,) = connection_cli(database_url, "logs", connection)["logs"]
    assert (entry["kind"], entry["message_id"]) == ("dropped", "poison") and entry["detail"].startswith("400 ")
    last_minute = connection_cli(database_url, "metrics", connection)["last_minute"]
    assert {k: last_minute[k] for k in ("received", "stored", "dropped", "carried_out_ack", "outage")} == {
        "received": GOOD + 1, "stored": GOOD, "dropped": 1, "carried_out_ack": GOOD, "outage": 0}
    # the connector said it runs: the ledger's exporter serves when (the Ledger page lists it); and,
    # stopped by SIGTERM, that it stopped cleanly (decisions #133)
    with engine.connect() as conn:
        seen = conn.execute(text("SELECT seen_at, broker_out_since, stopped_at FROM connections WHERE id = :c"),
                            {"c": connection}).one()
    assert seen.seen_at is not None and seen.broker_out_since is None and seen.stopped_at >= seen.seen_at


def connection_cli(database_url: str, command: str, connection: str) -> dict:
    """``ackstore connection metrics|logs ID --json``, as a user runs it."""
    done = subprocess.run([str(Path(sys.executable).parent / "ackstore"), "--database-url", database_url,
                           "connection", command, connection, "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


# --- MQTT 5 ---------------------------------------------------------------------------------------


def test_an_mqtt_connectors_metrics_count_what_happened_and_the_brokers_drop_count(
    engine: Engine, database_url: str, own_mosquitto, run_pipeline
) -> None:
    tag = uuid.uuid4().hex[:8]
    connection, topic, reply_topic = f"mq-metrics-{tag}", f"metrics-{tag}/commands", f"metrics-{tag}/replies"
    args = ("--connection-id", connection, "--topic", topic, "--requested-acks", "twin-persisted", "--poll", "0.5")
    opened = mqtt_connector(database_url, own_mosquitto.url, *args, "--once")  # the session: the broker keeps what comes
    assert opened.wait(timeout=60) == 0, opened.communicate()[1]
    collector = Collector(own_mosquitto.url, reply_topic)
    good = [thing_modify(n) for n in range(GOOD)]
    publish(own_mosquitto.url, topic, [*good, good[0], POISON], paho.MQTTv5, response_topic=reply_topic)
    port = free_port()
    process = mqtt_connector(database_url, own_mosquitto.url, *args, "--metrics-port", str(port))
    try:
        wait_for(lambda: messages(served(port, process), "consumed") == GOOD + 2, what="every message consumed")
        wait_for(lambda: value(scrape(port), "ackstore_connector_in_flight") == GOOD + 1, what="the good ones held")
        run_pipeline()
        wait_for(lambda: settled(engine) == {"ack": GOOD}, what="the acks carried out")
        wait_for(lambda: len(collector.messages) == GOOD + 1, what="the results and the refusal answered")
        samples = wait_for(lambda: (s := scrape(port)) and messages(s, "acknowledged") == GOOD + 1 and s,
                           what="the deliveries settled")
    finally:
        code, log = stop(process)
        collector.close()
    assert code == 0, log
    assert_counted(samples, connection, "mqtt-5", len(collector.messages))
    assert messages(samples, "published") == GOOD + 1, "the replies (no targets)"
    # Mosquitto says its count in $SYS/broker/publish/messages/dropped (retained): none dropped here
    assert ("ackstore_connector_broker_dropped_messages", (("connection", connection),)) in samples
    assert value(samples, "ackstore_connector_broker_dropped_messages") == 0


# --- the outage -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[OwnPostgres]:
    with OwnPostgres() as own:
        yield own


def test_the_outage_gauge_is_1_while_the_ledger_is_unreachable_and_its_seconds_grow(
    cluster: OwnPostgres, broker: Broker, tmp_path: Path
) -> None:
    url = cluster.create_ledger(f"metrics_{uuid.uuid4().hex[:8]}")
    port = free_port()
    with open(tmp_path / "connector.log", "w") as log:
        process = connector(url, "--connection-id", "outage", "--queue", broker.queue("commands"), "--poll", "0.5",
                            "--metrics-port", str(port), log=log)
        try:
            assert value(served(port, process), "ackstore_connector_outage", cause="ledger") == 0
            cluster.stop_immediately()
            wait_for(lambda: value(scrape(port), "ackstore_connector_outage", cause="ledger") == 1,
                     what="the ledger's outage seen")
            first = value(scrape(port), "ackstore_connector_outage_seconds_total", cause="ledger")
            time.sleep(1.5)
            during = scrape(port)
            assert value(during, "ackstore_connector_outage_seconds_total", cause="ledger") >= first + 1.0
            assert value(during, "ackstore_connector_outage", cause="broker") == 0
            cluster.start()
            wait_for(lambda: value(scrape(port), "ackstore_connector_outage", cause="ledger") == 0, timeout=120,
                     what="the ledger back")
            after = value(scrape(port), "ackstore_connector_outage_seconds_total", cause="ledger")
            time.sleep(1.0)
            assert value(scrape(port), "ackstore_connector_outage_seconds_total", cause="ledger") == after, \
                "no longer growing"
        finally:
            cluster.ensure_running()
            code, _ = stop(process)
    assert code == 0, (tmp_path / "connector.log").read_text()[-3000:]
    assert after >= value(during, "ackstore_connector_outage_seconds_total", cause="ledger"), "its seconds, kept"
    outages = [e for e in connection_cli(url, "logs", "outage")["logs"] if e["kind"] == "outage"]
    assert outages and all("the database" in e["detail"] and "unavailable for" in e["detail"] for e in outages), outages


# --- the CLI --------------------------------------------------------------------------------------


def ackstore_connect(database_url: str, *args: str) -> subprocess.Popen:
    """The installed ``ackstore`` entry point (the console script of the virtualenv)."""
    return subprocess.Popen([str(Path(sys.executable).parent / "ackstore"), "--database-url", database_url,
                             "connect", *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_ackstore_connect_serves_its_metrics_and_says_the_broker_is_unreachable(engine: Engine, database_url: str) -> None:
    nowhere = AMQP_URL.rsplit(":", 1)[0] + f":{free_port()}/"  # nothing listens there
    port = free_port()
    process = ackstore_connect(database_url, "amqp", "--url", nowhere, "--connection-id", "cli-metrics",
                               "--queue", "q", "--metrics-port", str(port), "--metrics-host", "127.0.0.1")
    try:
        wait_for(lambda: value(served(port, process), "ackstore_connector_outage", cause="broker") == 1,
                 what="the broker's outage seen")
        first = value(scrape(port), "ackstore_connector_outage_seconds_total", cause="broker")
        time.sleep(1.0)
        samples = scrape(port)
    finally:
        process.send_signal(signal.SIGTERM)
        _, log = process.communicate(timeout=60)
    assert process.returncode == 0, log
    assert value(samples, "ackstore_connector_outage_seconds_total", cause="broker") >= first + 0.9
    assert value(samples, "ackstore_connector_outage", cause="ledger") == 0
    assert messages(samples, "consumed") == 0
    assert f"metrics at http://127.0.0.1:{port}/metrics" in log


def test_a_metrics_port_that_is_taken_or_none_is_answered_and_the_connector_does_not_start(database_url: str) -> None:
    """Answered in Ditto's shape (issue 50), never a traceback: a port in use 409, a port past
    0..65 535 or an address not this machine's 400."""
    from tests.support.metrics_ports import assert_answered, unservable

    with unservable() as cases:
        for port, host, expected in cases:
            assert_answered(subprocess.run([str(Path(sys.executable).parent / "ackstore"), "--database-url",
                                            database_url, "connect", "mqtt", "--connection-id", "cli-taken",
                                            "--topic", "t", "--metrics-port", port, "--metrics-host", host],
                                           capture_output=True, text=True, timeout=60, cwd=ROOT), port, expected)
