"""At least once over MQTT, with processes dying: the connector killed with -9 at random moments
while a publisher keeps sending and the pipeline loops (so messages arrive right as a session
opens or resumes, Ditto PR #2562), and the broker itself restarted under a held session.

After each scenario every message is stored, applied, decided and carried out exactly once
(tests/support/crash.py), and the connector's persistent session holds nothing: a message PUBACKed
before its decision would have left a signal whose decision nobody carries out.

Poison: a message the database refuses, and every MQTT 5 property at and past its limit
(issue 37), each between good messages, stop nothing.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
import uuid
from dataclasses import dataclass

import pytest
from sqlalchemy import Engine

from tests.support.broker import kill_9, stop, wait_for
from tests.support.crash import PipelineLoop, all_carried_out, assert_at_least_once_exactly, commands, scalar
from tests.support.ledger import settled, twin_command
from tests.support.mqtt_clients import Collector, Sent, mqtt_connector, publish, session_backlog
from tests.support.poison import (held_command, refused_command, refusing,  # noqa: F401 (fixture)
                                  without_correlation_id)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def arguments(connection: str, topic: str) -> tuple[str, ...]:
    return ("--connection-id", connection, "--topic", topic, "--requested-acks", "twin-persisted",
            "--poll", "0.5", "--batch-size", "500")


def open_session(database_url: str, url: str, args: tuple[str, ...]) -> None:
    process = mqtt_connector(database_url, url, *args, "--once")
    _, log = process.communicate(timeout=60)
    assert process.returncode == 0, log


def test_kill_9_of_the_connector_while_a_publisher_sends_loses_and_duplicates_nothing(
    tmp_path, engine: Engine, database_url: str, own_mosquitto, run_pipeline
) -> None:
    messages, kills = int(os.environ.get("ACKSTORE_MQTT_CRASH_MESSAGES", 10_000)), 5
    connection, topic = f"crash-{uuid.uuid4().hex[:8]}", f"crash-{uuid.uuid4().hex[:8]}/commands"
    args = arguments(connection, topic)
    open_session(database_url, own_mosquitto.url, args)
    envelopes = commands(messages)
    publisher = threading.Thread(  # in slices, so that some arrive while a session opens
        target=lambda: [publish(own_mosquitto.url, topic, envelopes[i:i + 500]) or time.sleep(0.3)
                        for i in range(0, messages, 500)], daemon=True)
    randomness = random.Random(27)
    stored_at_kills = []
    with PipelineLoop(run_pipeline) as pipeline:
        publisher.start()
        for kill in range(kills):  # each once it has subscribed (a loaded machine starts it late)
            log_path = tmp_path / f"killed-{kill}.log"
            with open(log_path, "w") as log_file:
                process = mqtt_connector(database_url, own_mosquitto.url, *args, log=log_file)
                wait_for(lambda: "consuming" in log_path.read_text(), what="the connector subscribed")
                time.sleep(randomness.uniform(0.2, 3.0))
                kill_9(process)
            stored_at_kills.append(scalar(engine, "SELECT count(*) FROM signals"))
        publisher.join(300)
        assert not publisher.is_alive(), "every message published (and PUBACKed to the publisher)"
        assert pipeline.runs >= 1, "the pipeline ran while connectors were killed"
        assert stored_at_kills[-1] > 0, f"the kills hit connectors that stored messages: {stored_at_kills}"
        log_path = tmp_path / "last.log"
        with open(log_path, "w") as log_file:
            last = mqtt_connector(database_url, own_mosquitto.url, *args, log=log_file)
            wait_for(lambda: "consuming" in log_path.read_text(), what="the last connector subscribed")
            wait_for(lambda: pipeline.check() and all_carried_out(engine, messages), timeout=600,
                     what="every decision carried out")
            code, _ = stop(last)
    assert code == 0, log_path.read_text()
    open_session(database_url, own_mosquitto.url, args)  # copies still on their way: settled from decisions
    assert_at_least_once_exactly(engine, messages)
    assert session_backlog(own_mosquitto.url, connection, topic) == [], "the session holds nothing more"


def test_a_broker_restart_under_held_messages_loses_nothing(
    engine: Engine, database_url: str, own_mosquitto, run_pipeline
) -> None:
    """Mosquitto stopped and started again (its persistence file) while the connector holds
    messages: the connector reconnects, the session resumes, the held ones come again, stored once."""
    messages = 1000
    connection, topic = f"restart-{uuid.uuid4().hex[:8]}", f"restart-{uuid.uuid4().hex[:8]}/commands"
    args = arguments(connection, topic)
    open_session(database_url, own_mosquitto.url, args)
    publish(own_mosquitto.url, topic, commands(messages))
    process = mqtt_connector(database_url, own_mosquitto.url, *args)
    try:
        wait_for(lambda: scalar(engine, "SELECT count(*) FROM signals") == messages, what="all stored, held")
        own_mosquitto.stop()
        own_mosquitto.start()
        run_pipeline()
        wait_for(lambda: all_carried_out(engine, messages), timeout=300, what="every decision carried out")
    finally:
        code, log = stop(process)
    assert code == 0, log
    assert "broker connection lost" in log
    assert_at_least_once_exactly(engine, messages)
    assert session_backlog(own_mosquitto.url, connection, topic) == []


def test_a_poison_message_between_good_ones_is_answered_and_pubacked_the_good_ones_held_until_decided(
    engine: Engine, database_url: str, own_mosquitto, run_pipeline, refusing  # noqa: F811
) -> None:
    """One batch: three good messages, one the database refuses for good, three good. The batch
    is stored message by message; the poison one is answered (400) and PUBACKed at once — never
    redelivered — and the good ones stay un-PUBACKed until their decisions are carried out."""
    connection, topic = f"poison-{uuid.uuid4().hex[:8]}", f"poison-{uuid.uuid4().hex[:8]}/commands"
    replies = f"{topic}/replies"
    args = arguments(connection, topic)
    open_session(database_url, own_mosquitto.url, args)
    good = [twin_command("modify", thing=f"org.acme/t{n}", path="/", value={"attributes": {"n": n}},
                         correlation_id=f"c-{n}") for n in range(1, 7)]
    poison = twin_command("modify", thing="org.acme/poison", path="/", value={}, correlation_id="poison")
    collector = Collector(own_mosquitto.url, replies)
    try:
        publish(own_mosquitto.url, topic, [*good[:3], poison, *good[3:]], response_topic=replies)
        code, log = _once(database_url, own_mosquitto.url, args)
        assert code == 0, log
        assert "storing them one by one" in log and "dropped 1," in log
        assert scalar(engine, "SELECT count(*) FROM signals") == 6
        wait_for(lambda: len(collector.messages) == 1, what="the poison message answered")
        answer = json.loads(collector.messages[0].payload)
        assert (answer["status"], answer["value"]["error"]) == (400, "message.notstorable")
        assert len(session_backlog(own_mosquitto.url, connection, topic)) == 6, "the good ones held, the poison PUBACKed"
        run_pipeline()
        code, log = _once(database_url, own_mosquitto.url, args)  # the copies settled from their decisions
        assert code == 0, log
    finally:
        collector.close()
    assert settled(engine) == {"ack": 6}
    assert scalar(engine, "SELECT count(*) FROM signals") == 6, "nothing stored twice"
    assert session_backlog(own_mosquitto.url, connection, topic) == []


def _once(database_url: str, url: str, args: tuple[str, ...]) -> tuple[int, str]:
    """A connector that takes what its session holds, settles what is decided, and exits."""
    process = mqtt_connector(database_url, url, *args, "--once")
    _, log = process.communicate(timeout=120)
    return process.returncode, log


# --- every MQTT 5 property at and past its limit (issue 37) --------------------------------------

LIMIT = 65_535  # an MQTT string's or binary data's bytes
ISSUE_37 = b"\x00\xff" * 32767 + b"\x01"  # 65 535 bytes that answer with 196 603 (each byte U+FFFD but one)


@dataclass(frozen=True)
class Hostile:
    what: str
    sent: Sent
    stored: bool  # held until decided (else refused by the ledger and answered at once)
    dropped: bool = False  # its answer (or, stored, its result) cannot be carried: dropped, said, counted


def hostile_mqtt5(replies: str) -> list[Hostile]:
    """What a sender can put in an MQTT 5 message at its protocol's limits, and past them where the
    envelope's headers carry what the connector's answer then holds."""
    held, refused, anonymous = held_command, refused_command, without_correlation_id
    past = "r" * (LIMIT + 1)
    return [
        Hostile("correlation data of 65 535 bytes, no UTF-8 (issue 37)",
                (anonymous(refused("cd-issue")), {"CorrelationData": ISSUE_37}), False, True),
        Hostile("correlation data of 65 535 bytes",
                (anonymous(refused("cd-limit")), {"CorrelationData": b"c" * LIMIT}), False),
        Hostile("a correlation id of 65 536 bytes in the envelope",  # the envelope's wins over the property
                (refused("cd-past", correlation_id="c" * (LIMIT + 1)), {"CorrelationData": b"cd-past"}), False, True),
        Hostile("a lone surrogate in the correlation id",
                (refused("cd-surrogate", correlation_id="\ud800"), {"CorrelationData": b"cd-surrogate"}), False, True),
        Hostile("a response topic of 65 535 bytes", (held("rt-limit"), {"ResponseTopic": "r" * LIMIT}), True),
        Hostile("a response topic with a wildcard", (refused("rt-wildcard"), {"ResponseTopic": f"{replies}/#"}),
                False, True),
        Hostile("a reply-to of 65 536 bytes", refused("rt-past", reply_to=past), False, True),
        Hostile("a reply-to of 65 536 bytes on a held message", held("rt-past-held", reply_to=past), True, True),
        Hostile("a reply-to with a terminal escape", refused("rt-escape", reply_to=f"{replies}/\x1b[2J"), False, True),
        Hostile("a reply-to with a C1 control", refused("rt-c1", reply_to=f"{replies}/\x9b"), False, True),
        Hostile("a reply-to with a non-character", refused("rt-nonchar", reply_to=f"{replies}/\uffff"), False, True),
        Hostile("a content type of 65 535 bytes", (held("ct-limit"), {"ContentType": "t" * LIMIT}), True),
        Hostile("a content type of 65 535 bytes of 3-byte characters",
                (held("ct-limit-3"), {"ContentType": "€" * (LIMIT // 3)}), True),
        Hostile("user properties of 65 535 bytes each",
                (held("up-limit"), {"UserProperty": [("k" * LIMIT, "v" * LIMIT), ("x-wide", "€" * (LIMIT // 3))]}), True),
        Hostile("a thousand user properties",
                (held("up-many"), {"UserProperty": [(f"p{i}", "v") for i in range(1000)]}), True),
        Hostile("payload format UTF-8, a payload that is not",
                (b"\xff" + json.dumps(held("pf-invalid")).encode(), {"PayloadFormatIndicator": 1}), False),
        Hostile("payload format unspecified", (held("pf-bytes"), {"PayloadFormatIndicator": 0}), True),
    ]


def test_every_mqtt5_property_at_and_past_its_limit_between_good_messages_stops_nothing(
    tmp_path, engine: Engine, database_url: str, own_mosquitto, run_pipeline
) -> None:
    """Each hostile message between two good ones, in one session: the connector keeps running
    (and its session: the broker never closes it), stores and holds the good ones, answers what
    MQTT can carry — a correlation data or response topic at 65 535 bytes — and drops, with one
    line each and a count, what it cannot; after a pipeline run every held message is settled."""
    connection, topic = f"props-{uuid.uuid4().hex[:8]}", f"props-{uuid.uuid4().hex[:8]}/commands"
    replies = f"{topic}/replies"
    args = arguments(connection, topic)
    open_session(database_url, own_mosquitto.url, args)
    cases = hostile_mqtt5(replies)
    good = [twin_command("modify", thing=f"org.acme/g{n}", path="/", value={"attributes": {"n": n}},
                         correlation_id=f"c-{n}") for n in range(len(cases) + 1)]
    sent: list[Sent] = [good[0]]
    for n, case in enumerate(cases, start=1):
        sent += [case.sent, good[n]]
    held = len(good) + sum(case.stored for case in cases)
    answers, at_limit = Collector(own_mosquitto.url, replies), Collector(own_mosquitto.url, "r" * LIMIT)
    log_path = tmp_path / "connector.log"
    try:
        with open(log_path, "w") as log_file:
            process = mqtt_connector(database_url, own_mosquitto.url, *args, log=log_file)
            try:
                publish(own_mosquitto.url, topic, sent, response_topic=replies)
                wait_for(lambda: scalar(engine, "SELECT count(*) FROM signals") == held, what="the good ones stored")
                wait_for(lambda: f"dropped {len(cases) - held + len(good)}," in log_path.read_text(),
                         what="the refused ones answered")
                assert process.poll() is None, "still running"
                run_pipeline()
                wait_for(lambda: all_carried_out(engine, held), timeout=120, what="every decision carried out")
                wait_for(lambda: f"unsendable {sum(c.dropped for c in cases)}" in log_path.read_text(),
                         what="the result no topic can take dropped")
                assert process.poll() is None, "still running"
            finally:
                code, _ = stop(process)
        wait_for(lambda: len(at_limit.messages) == 1, what="the result on the 65 535-byte response topic")
    finally:
        answers.close()
        at_limit.close()
    log = log_path.read_text()
    assert code == 0, log
    assert "Traceback" not in log and "reconnects 0;" in log, "no failure, and the broker never closed the session"
    assert not {"\x1b", "\x9b", "\uffff"} & set(log), "the senders' text is shown escaped"
    assert log.count(" is dropped, ") == sum(case.dropped for case in cases), "one line each"
    assert settled(engine) == {"ack": held}
    correlation = [bytes(getattr(m.properties, "CorrelationData", b"")) for m in answers.messages]
    assert b"c" * LIMIT in correlation, "an answer at the limit is carried"
    assert {f"c-{n}".encode() for n in range(len(good))} <= set(correlation), "every good one answered"
    assert session_backlog(own_mosquitto.url, connection, topic) == [], "every one PUBACKed"

