"""At least once over AMQP 1.0 (issue 41), with processes dying, on a RabbitMQ node of the module's
own with its AMQP 1.0 plugin: the connector killed with -9 at random moments while a publisher
keeps sending and the pipeline loops; the broker killed and started again under held deliveries;
a poison message between good ones. (PostgreSQL restarted mid-ingest and mid-merge under this
connector: tests/system/test_postgres_restart.py.)

After each scenario every message is stored, applied, decided and carried out exactly once
(tests/support/crash.py), and the queue is empty: a delivery settled before its decision would
have left a signal whose decision nobody carries out, one never settled would still be there.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
import uuid

import pytest
from sqlalchemy import Engine

from tests.support.amqp10_clients import address, amqp10_connector, receive, send
from tests.support.broker import Broker, kill_9, publish_committed, stop, wait_for
from tests.support.crash import PipelineLoop, all_carried_out, assert_at_least_once_exactly, commands, scalar
from tests.support.ledger import settled, twin_command
from tests.support.poison import refusing  # noqa: F401 (fixture)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def arguments(connection: str, queue: str) -> tuple[str, ...]:
    return ("--connection-id", connection, "--address", address(queue), "--requested-acks", "twin-persisted",
            "--poll", "0.5", "--batch-size", "500")


def fresh_queue(node, name: str) -> str:
    broker = Broker(node.url)
    queue = f"{name}-{uuid.uuid4().hex[:8]}"
    broker.channel.queue_declare(queue, durable=True)
    broker.connection.close()  # the queue stays: it is the module's node, removed with it
    return queue


def depth(node, queue: str) -> int:
    broker = Broker(node.url)
    try:
        return broker.depth(queue)
    finally:
        broker.connection.close()


def test_kill_9_of_the_connector_while_a_publisher_sends_loses_and_duplicates_nothing(
    tmp_path, engine: Engine, database_url: str, own_amqp10, run_pipeline
) -> None:
    messages, kills = int(os.environ.get("ACKSTORE_AMQP10_CRASH_MESSAGES", 10_000)), 5
    url = own_amqp10.amqp10_url
    connection, queue = f"crash-{uuid.uuid4().hex[:8]}", fresh_queue(own_amqp10, "crash")
    args = arguments(connection, queue)
    envelopes = commands(messages)
    publisher = threading.Thread(  # in slices, so that some arrive while a connector attaches
        target=lambda: [send(url, address(queue), envelopes[i:i + 500]) or time.sleep(0.3)
                        for i in range(0, messages, 500)], daemon=True)
    randomness = random.Random(41)
    stored_at_kills = []
    with PipelineLoop(run_pipeline) as pipeline:
        publisher.start()
        for kill in range(kills):  # each once it has attached its link: mid-batch, mid-settle, mid-anything
            log_path = tmp_path / f"killed-{kill}.log"
            with open(log_path, "w") as log_file:
                process = amqp10_connector(database_url, url, *args, log=log_file)
                wait_for(lambda: "consuming" in log_path.read_text(), what="the connector attached")
                time.sleep(randomness.uniform(0.2, 3.0))
                kill_9(process)
            stored_at_kills.append(scalar(engine, "SELECT count(*) FROM signals"))
        publisher.join(300)
        assert not publisher.is_alive(), "every message sent (and accepted by the broker)"
        assert pipeline.runs >= 1, "the pipeline ran while connectors were killed"
        assert 0 < stored_at_kills[0] < stored_at_kills[-1], f"the kills hit connectors storing: {stored_at_kills}"
        log_path = tmp_path / "last.log"
        with open(log_path, "w") as log_file:
            last = amqp10_connector(database_url, url, *args, log=log_file)
            wait_for(lambda: pipeline.check() and all_carried_out(engine, messages), timeout=600,
                     what="every decision carried out")
            code, _ = stop(last)
    assert code == 0, log_path.read_text()
    assert_at_least_once_exactly(engine, messages)
    assert depth(own_amqp10, queue) == 0, "nothing left unsettled on the broker"
    print(f"\nAMQP 1.0 kill -9: {messages} messages, stored at the kills {stored_at_kills}, pipeline runs "
          f"{pipeline.runs}")


def test_a_broker_kill_under_held_deliveries_loses_nothing(
    engine: Engine, database_url: str, own_amqp10, run_pipeline
) -> None:
    """The node killed (SIGKILL) and started again while the connector holds every delivery
    unsettled: the connector reconnects, the deliveries come again, are recognised, settled once."""
    messages = 1000
    url = own_amqp10.amqp10_url
    connection, queue = f"restart-{uuid.uuid4().hex[:8]}", fresh_queue(own_amqp10, "restart")
    publish_committed(own_amqp10.url, queue, commands(messages))
    process = amqp10_connector(database_url, url, *arguments(connection, queue))
    try:
        wait_for(lambda: scalar(engine, "SELECT count(*) FROM signals") == messages, what="all stored, held")
        own_amqp10.restart()
        run_pipeline()
        carried_out = wait_for(lambda: all_carried_out(engine, messages), timeout=300, raises=False)
    finally:
        code, log = stop(process)
    assert carried_out, (f"not every decision carried out within 300 s; the connector's log:\n{log[-8000:]}\n"
                         f"the node's errors and recoveries:\n{own_amqp10.errors()}")
    assert code == 0, log
    assert "broker connection lost" in log
    assert_at_least_once_exactly(engine, messages)
    assert depth(own_amqp10, queue) == 0


def test_a_poison_message_between_good_ones_is_answered_and_rejected_the_good_ones_held_until_decided(
    engine: Engine, database_url: str, own_amqp10, run_pipeline, refusing  # noqa: F811
) -> None:
    """One batch: three good messages, one the database refuses for good, three good. The batch
    is stored message by message; the poison one is answered (400) and rejected at once — never
    redelivered — and the good ones stay unsettled until their decisions are carried out."""
    url = own_amqp10.amqp10_url
    connection = f"poison-{uuid.uuid4().hex[:8]}"
    queue, replies = fresh_queue(own_amqp10, "poison"), fresh_queue(own_amqp10, "replies")
    good = [twin_command("modify", thing=f"org.acme/t{n}", path="/", value={"attributes": {"n": n}},
                         correlation_id=f"c-{n}") for n in range(1, 7)]
    poison = twin_command("modify", thing="org.acme/poison", path="/", value={}, correlation_id="poison")
    send(url, address(queue), [*good[:3], poison, *good[3:]], reply_to=address(replies))
    process = amqp10_connector(database_url, url, *arguments(connection, queue), "--once")
    _, log = process.communicate(timeout=120)
    assert process.returncode == 0, log
    assert "storing them one by one" in log and "dropped 1," in log and "gave 6 undecided deliveries back" in log
    assert scalar(engine, "SELECT count(*) FROM signals") == 6
    answers = [json.loads(m.body) for m in receive(url, address(replies))]
    assert [(a["status"], a["value"]["error"]) for a in answers] == [(400, "message.notstorable")]
    assert depth(own_amqp10, queue) == 6, "the good ones given back undecided, the poison one rejected"
    run_pipeline()
    process = amqp10_connector(database_url, url, *arguments(connection, queue), "--max-messages", "6")
    _, log = process.communicate(timeout=120)  # the copies settled from their decisions
    assert process.returncode == 0, log
    assert settled(engine) == {"ack": 6}
    assert scalar(engine, "SELECT count(*) FROM signals") == 6, "nothing stored twice"
    assert depth(own_amqp10, queue) == 0
