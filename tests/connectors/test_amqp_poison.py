"""No poison message stalls a queue or loses a good one (issue 14, defects 7 and 8).

Against the machine's RabbitMQ and PostgreSQL, each bad message travels in the same batch as a
good one: a client error is answered and rejected; a value the database refuses for good makes
the connector store the batch message by message, rejecting only that one; a transient failure
sends the batch back to the queue with a growing pause; a kill -9 in the middle of isolating
loses and doubles nothing. Transport headers of every type pika delivers map to JSON. Every AMQP
property and header at and past its limit (issue 37) stops nothing: an answer AMQP cannot carry
is dropped, said and counted.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass
from decimal import Decimal

import pika
import pika.compat
import pika.spec
import pytest
from hypothesis import given, strategies as st
from sqlalchemy import Engine, text

from ackstore.ledger.database_url import DatabaseUrl
from ackstore.rules import connectivity, jsontext
from tests.support.amqp_connector import broker, stop_when_done  # noqa: F401 (fixture)
from tests.support.ledger import thing_modify
from tests.support.broker import Broker, assert_took_them_all, connector, publish_all, stop, wait_for
from tests.support.deep_json import nested, nested_array, roomy_stack
from tests.support.ledger import count, settled, twin_command
from tests.support.poison import held_command, refused_command, refusing, without_correlation_id  # noqa: F401 (fixture)

pytestmark = [pytest.mark.slow]

QOS0 = {"requested_acks": [], "response_required": False}


def _stored_ids(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return conn.execute(text("SELECT correlation_id FROM signals ORDER BY correlation_id")).scalars().all()


def _replies(broker: Broker, queue: str) -> dict[str, dict]:
    return {properties.correlation_id: json.loads(body) for properties, body in broker.drain(queue)}


@pytest.mark.parametrize(("poison", "error"), [
    (json.dumps(thing_modify(2, **QOS0)).replace('"n": 2', '"n": ' + "7" * 5000).encode(), "json.invalid"),
    (json.dumps(thing_modify(2, **QOS0)).replace('"c-2"', json.dumps("c" * 10_000)).encode(), "header.invalid"),
    (json.dumps(thing_modify(2, **QOS0)).replace("org.acme/t2", "org.acme/" + "t" * 10_000).encode(),
     "things:id.invalid"),
], ids=["a 5 000-digit integer", "a 10 000-character correlation id", "a 10 000-character thing name"])
def test_a_client_error_is_rejected_and_the_good_message_beside_it_stored(engine: Engine, database_url: str,
                                                                        broker: Broker, poison: bytes, error) -> None:
    source, replies = broker.queue("commands"), broker.queue("replies")
    publish_all(broker, source, [thing_modify(1, **QOS0)])
    broker.publish(source, poison, message_id="poison", correlation_id="poison", reply_to=replies)
    publish_all(broker, source, [thing_modify(3, **QOS0)])
    code, log = stop_when_done(connector(database_url, "--connection-id", "plant", "--queue", source, "--once"))
    assert code == 0, log
    assert _stored_ids(engine) == ["c-1", "c-3"]
    (reply,) = broker.drain_json(replies)  # its correlation id may be too long for the AMQP property
    assert reply["value"]["error"] == error
    assert broker.depth(source) == 0 and "dropped 1," in log and "Traceback" not in log


def _batch_with_poison(broker: Broker, source: str, replies: str) -> None:
    publish_all(broker, source, [thing_modify(n, **QOS0) for n in range(1, 4)])
    poison = twin_command("modify", thing="org.acme/poison", correlation_id="poison", **QOS0)
    publish_all(broker, source, [poison], reply_to=replies)
    publish_all(broker, source, [thing_modify(n, **QOS0) for n in range(4, 7)])


def test_a_message_the_database_refuses_is_isolated_and_rejected(engine: Engine, database_url: str,
                                                                 broker: Broker, refusing) -> None:
    source, replies = broker.queue("commands"), broker.queue("replies")
    _batch_with_poison(broker, source, replies)
    code, log = stop_when_done(connector(database_url, "--connection-id", "plant", "--queue", source, "--once"))
    assert code == 0, log
    assert _stored_ids(engine) == [f"c-{n}" for n in range(1, 7)]
    answer = _replies(broker, replies)["poison"]["value"]
    assert (answer["status"], answer["error"]) == (400, "message.notstorable") and "test_poison" in answer["message"]
    assert broker.depth(source) == 0, "the poison message is not requeued"
    assert "storing them one by one" in log and "dropped 1," in log and "acknowledged 6," in log


def test_a_kill_9_while_isolating_loses_and_doubles_nothing(engine: Engine, database_url: str, broker: Broker,
                                                            refusing) -> None:
    source, replies = broker.queue("commands"), broker.queue("replies")
    _batch_with_poison(broker, source, replies)
    killed = connector(database_url, "--connection-id", "plant", "--queue", source, "--once",
                       env={"ACKSTORE_FAULT": "connector:isolating"})
    code, _ = stop_when_done(killed)
    assert code == -9, "killed at the first message it isolates"
    assert _stored_ids(engine) == [], "the failed batch stored nothing"
    wait_for(lambda: broker.depth(source) == 7, what="every message back on the queue")
    code, log = stop_when_done(connector(database_url, "--connection-id", "plant", "--queue", source, "--once"))
    assert code == 0, log
    assert _stored_ids(engine) == [f"c-{n}" for n in range(1, 7)]
    assert list(_replies(broker, replies)) == ["poison"]
    assert broker.depth(source) == 0


def test_a_transient_failure_keeps_the_batch_says_so_once_and_stores_it_later(
        engine: Engine, database_url: str, broker: Broker) -> None:
    source = broker.queue("commands")
    impatient = DatabaseUrl.parse(database_url).libpq()
    impatient["options"] = "-c lock_timeout=200"  # a lock not had in 200 ms: 55P03, transient
    url = DatabaseUrl(impatient).text()
    locked, release = threading.Event(), threading.Event()

    def hold_lock() -> None:
        with engine.begin() as conn:
            conn.execute(text("LOCK TABLE signals IN ACCESS EXCLUSIVE MODE"))
            locked.set()
            release.wait(30)

    holder = threading.Thread(target=hold_lock)
    holder.start()
    locked.wait(10)
    process = connector(url, "--connection-id", "plant", "--queue", source, "--poll", "0.5")
    try:
        publish_all(broker, source, [thing_modify(n, **QOS0) for n in range(1, 4)])
        time.sleep(4)  # failures: 1 s, then 2 s of pause
        release.set()
        holder.join()
        wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 3, what="the batch stored after the lock")
    finally:
        release.set()
        code, log = stop(process)
    assert _stored_ids(engine) == ["c-1", "c-2", "c-3"]
    said = [line for line in log.splitlines() if "(storing messages) unavailable" in line]
    assert len(said) == 1 and "LockNotAvailable" in said[0] and "trying again after 1 s" in said[0], log
    back = re.search(r"\(storing messages\) back after [0-9.]+ s \((\d+) failed tries\)", log)
    assert back, log
    # tries after 1 s, then 2 s (the pause grows), then 4 s: the lock is held for about 4 s
    assert 2 <= int(back.group(1)) <= 4, back.group(0)
    assert "consumed 3," in log and "dropped 0," in log, "the batch waited in memory, not on the queue"


# --- transport headers (defect 8) ----------------------------------------------------------------

NAIVE = dt.datetime(2026, 11, 23, 9, 30, 0)
HEADER_TYPES = [
    ("timestamp", NAIVE, "2026-11-23T09:30:00+00:00"),
    ("decimal", Decimal("12.50"), 12.5),
    ("whole decimal", Decimal("7"), 7),
    ("bytes", b"caf\xc3\xa9 \xff\x00", "café \ufffd\ufffd"),
    ("text with NUL", "a\x00b", "a\ufffdb"),
    ("table", {"a": 1, "b": {"c": NAIVE}}, {"a": 1, "b": {"c": "2026-11-23T09:30:00+00:00"}}),
    ("array", [1, "x", b"y", [NAIVE]], [1, "x", "y", ["2026-11-23T09:30:00+00:00"]]),
    ("float", 1.5, 1.5),
    ("long", pika.compat.long(2**40), 2**40),
    ("nan", float("nan"), None),
    ("void", None, None),
    ("x-death", [{"count": 1, "reason": "rejected", "queue": "q", "time": NAIVE, "routing-keys": ["q"]}],
     [{"count": 1, "reason": "rejected", "queue": "q", "time": "2026-11-23T09:30:00+00:00", "routing-keys": ["q"]}]),
]


@pytest.mark.parametrize(("kind", "value", "expected"), HEADER_TYPES, ids=[row[0] for row in HEADER_TYPES])
def test_every_amqp_header_type_maps_to_json(kind, value, expected) -> None:
    mapped = connectivity.header_json(value)
    assert mapped == expected and json.loads(jsontext.dumps(mapped)) == expected


def test_a_dead_lettered_message_with_x_death_is_stored_not_rejected(engine: Engine, database_url: str,
                                                                    broker: Broker) -> None:
    """RabbitMQ itself adds ``x-death`` (timestamps inside) when a message is dead-lettered."""
    source, first = broker.queue("commands"), f"{broker.prefix}.first"
    broker.channel.queue_declare(first, durable=True, arguments={"x-dead-letter-exchange": "",
                                                                 "x-dead-letter-routing-key": source})
    broker.queues.append(first)
    body = json.dumps(thing_modify(1, **QOS0)).encode()
    broker.channel.basic_publish("", first, body, pika.BasicProperties(
        message_id="m1", headers={"sent-at": NAIVE, "price": Decimal("1.10"), "raw": b"\x00\x01"}))
    method, _, _ = wait_for(lambda: _get(broker, first), what="the message in the first queue")
    broker.channel.basic_nack(method.delivery_tag, requeue=False)  # dead-lettered into the source
    wait_for(lambda: broker.depth(source) == 1, what="the message dead-lettered")
    code, log = stop_when_done(connector(database_url, "--connection-id", "plant", "--queue", source, "--once"))
    assert code == 0, log
    assert "dropped 0," in log and "acknowledged 1," in log, log
    with engine.connect() as conn:
        headers = conn.execute(text("SELECT headers FROM signals")).scalar_one()
    assert headers["x-death"][0]["reason"] == "rejected" and headers["x-death"][0]["time"].endswith("+00:00")
    assert headers["price"] == 1.1 and headers["sent-at"] == "2026-11-23T09:30:00+00:00"
    assert headers["raw"] == "\ufffd\x01"
    assert "dropped 0," in log and "acknowledged 1," in log


def _get(broker: Broker, queue: str):
    method, properties, body = broker.channel.basic_get(queue, auto_ack=False)
    return (method, properties, body) if method else None


# --- every AMQP property and header at and past its limit (issue 37) -----------------------------


@dataclass(frozen=True)
class Hostile:
    what: str
    envelope: dict
    properties: dict  # AMQP properties, as pika names them
    stored: bool  # held until decided (else refused by the ledger and answered at once)
    dropped: bool = False  # its answer (or, stored, its result) cannot be carried: dropped, said, counted


def hostile_amqp(replies: str, long_queue: str) -> list[Hostile]:
    """What a sender can put in an AMQP 0.9.1 message at its protocol's limits (pika refuses to
    send past them), and past them where the envelope's headers carry what the answer then holds."""
    return [
        Hostile("a reply_to of 255 bytes", refused_command("rt-limit"), {"reply_to": long_queue}, False),
        Hostile("a correlation_id of 255 bytes", without_correlation_id(held_command("cd-limit")),
                {"correlation_id": "c" * 255, "reply_to": replies}, True),
        Hostile("a correlation_id of 255 bytes of 3-byte characters", without_correlation_id(held_command("cd-limit-3")),
                {"correlation_id": "€" * 85, "reply_to": replies}, True),
        Hostile("a message_id of 255 bytes", held_command("mi-limit"), {"message_id": "m" * 255, "reply_to": replies},
                True),
        Hostile("a content_type of 255 bytes", held_command("ct-limit"), {"content_type": "t" * 255, "reply_to": replies},
                True),
        Hostile("shortstrs that are no UTF-8", without_correlation_id(held_command("raw")),
                {"reply_to": b"\xff\xfe", "correlation_id": b"raw-\xff", "message_id": b"\xfd", "content_type": b"\xfc"},
                True),
        Hostile("headers at the limit and of every type", held_command("hd-limit"), {"reply_to": replies, "headers": {
            "k" * 255: "v", "big": "v" * 100_000, "decimal": Decimal("12.50"), "time": NAIVE, "raw": b"\x00\xff",
            "table": {"a": {"b": [1, NAIVE]}}, "array": [1, "x", b"y"], "max": 2**63 - 1, "min": -2**63,
            "void": None, "flag": True}}, True),
        Hostile("a reply-to of 256 bytes", refused_command("rt-past", reply_to="r" * 256), {}, False, True),
        Hostile("a reply-to of 256 bytes on a held message", held_command("rt-past-held", reply_to="r" * 256), {},
                True, True),
        Hostile("a reply-to that is no UTF-8", refused_command("rt-surrogate", reply_to="\ud800"), {}, False, True),
        Hostile("a correlation id of 1 025 bytes", refused_command("cd-past", correlation_id="c" * 1025),
                {"reply_to": replies}, False),
        Hostile("a lone surrogate in the correlation id", refused_command("cd-surrogate", correlation_id="\ud800"),
                {"reply_to": replies}, False, True),
        Hostile("a message-id header of 1 025 bytes", held_command("mi-past", message_id="m" * 1025),
                {"reply_to": replies}, True),
        # issue 50: a U+0000 in what the connection's log keeps (the message's key) lost the batch's entries
        Hostile("a message_id holding U+0000", held_command("mi-nul"), {"message_id": "m\x00id", "reply_to": replies},
                False),
        Hostile("a message_id of terminal sequences", held_command("mi-esc"),
                {"message_id": "m\x1b[2J\r\nINFO forged", "reply_to": replies}, True),
    ]


@pytest.mark.spark
def test_every_amqp_property_and_header_at_and_past_its_limit_between_good_messages_stops_nothing(
        tmp_path, engine: Engine, database_url: str, broker: Broker, run_pipeline) -> None:
    """Each hostile message between two good ones: the connector keeps running, stores and holds
    the good ones, answers what AMQP can carry — to a reply_to of 255 bytes, with a correlation_id
    of 255 — and drops, with one line each and a count, what it cannot; after a pipeline run
    every held message is settled."""
    source, replies = broker.queue("commands"), broker.queue("replies")
    long_queue = broker.queue("q" * (255 - len(broker.prefix) - 1))
    assert len(long_queue.encode()) == 255
    cases = hostile_amqp(replies, long_queue)
    good = [thing_modify(n) for n in range(len(cases) + 1)]
    publish_all(broker, source, good[:1], reply_to=replies)
    for n, case in enumerate(cases, start=1):
        broker.publish(source, json.dumps(case.envelope).encode(), **{"message_id": uuid.uuid4().hex, **case.properties})
        publish_all(broker, source, good[n:n + 1], reply_to=replies)
    held = len(good) + sum(case.stored for case in cases)
    log_path = tmp_path / "connector.log"
    with open(log_path, "w") as log_file:
        process = connector(database_url, "--connection-id", "plant", "--queue", source, "--requested-acks",
                            "twin-persisted", "--poll", "0.5", log=log_file)
        try:
            wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == held, what="the good ones stored")
            wait_for(lambda: f"dropped {len(cases) + len(good) - held}," in log_path.read_text(),
                     what="the refused ones answered")
            assert process.poll() is None, "still running"
            run_pipeline()
            wait_for(lambda: settled(engine) == {"ack": held}, timeout=120, what="every decision carried out")
            wait_for(lambda: f"unsendable {sum(c.dropped for c in cases)}" in log_path.read_text(),
                     what="the result no queue can take dropped")
            assert process.poll() is None, "still running"
        finally:
            code, _ = stop(process)
    log = log_path.read_text()
    assert code == 0, log
    assert "Traceback" not in log and "reconnects 0;" in log
    assert log.count(" is dropped, ") == sum(case.dropped for case in cases), "one line each"
    assert broker.depth(source) == 0
    (at_limit,) = broker.drain_json(long_queue)
    assert at_limit["value"]["error"] == "header.invalid"
    answers = broker.drain(replies)
    correlation_ids = {properties.correlation_id for properties, _ in answers}
    assert {f"c-{n}" for n in range(len(good))} | {"c" * 255, "€" * 85, "mi-limit", "ct-limit", "hd-limit",
                                                    "mi-past"} <= correlation_ids
    (too_long,) = [json.loads(body) for properties, body in answers if properties.correlation_id is None]
    assert too_long["headers"]["correlation-id"] == "c" * 1025, "the answer carries it; the property could not"
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT correlation_id, source_message_id FROM signals")).all()
    assert ("raw-\\xff", "\\xfd") in stored, "shortstrs that are no UTF-8 are stored, their bytes escaped"
    assert ("mi-esc", "m\x1b[2J\r\nINFO forged") in stored, "stored as sent; a log shows it escaped"
    assert "\x1b" not in log and "did not take" not in log, "no raw control character; every log entry taken"
    with engine.connect() as conn:
        logged = conn.execute(text("SELECT message_id FROM connection_log WHERE kind = 'dropped'")).scalars().all()
    assert len(logged) == len(cases) + len(good) - held, "every refusal in the connection's log"
    assert "m\\x00id" in logged, "its U+0000 written as its escape"



# --- headers nested past the door's bound, or past pika's stack (issue 50) ------------------------

DEEP_HEADERS = {  # correlation id -> the headers table: pika reads a table on Python's stack
    "a table 150 deep": {"deep": nested(150)},  # pika reads it; past the door's bound
    "an array 150 deep": {"deep": nested_array(150)},
    "a table 600 deep": {"deep": nested(600)},  # past pika's stack: its frame decoding failed
    "an array 600 deep among plain headers": {"plain": "x", "deep": nested_array(600), "after": 1},
    "a table 5 000 deep": {"deep": nested(5000)},
}


def test_headers_nested_past_the_bound_or_past_pika_s_stack_between_good_messages_are_refused_and_nothing_stops(
        tmp_path, engine: Engine, database_url: str, broker: Broker) -> None:
    """Issue 50's depth bound for AMQP 0.9.1's own values. pika reads a header table on Python's
    stack: one nested some 500 levels raised RecursionError inside its frame decoding, pika ended
    the connection (StreamLostError), and the message, back at the head of its queue, ended every
    connection after it — the connector reconnecting for ever, nothing behind it stored (measured
    on RabbitMQ 3.10). Within pika's stack, the header mapping (``connectivity.header_json``) nested on
    it again, unguarded in the storing thread. Each is now refused as a client error — 400
    json.invalid naming the header, answered on its reply-to, never redelivered, one log line,
    in the connection's log — between good messages that are stored and settled, on the one
    connection, the connector running."""
    source, replies = broker.queue("commands"), broker.queue("replies")
    publish_all(broker, source, [thing_modify(0, **QOS0)])
    for n, (name, headers) in enumerate(DEEP_HEADERS.items(), start=1):
        envelope = twin_command("modify", thing=f"org.acme/deep-{n}", correlation_id=name, **QOS0)
        with roomy_stack():  # pika's encoder nests on the stack too
            broker.publish(source, json.dumps(envelope).encode(), message_id=f"deep-{n}", correlation_id=name,
                           reply_to=replies, headers=headers)
        publish_all(broker, source, [thing_modify(n, **QOS0)])
    good = len(DEEP_HEADERS) + 1
    log_path = tmp_path / "connector.log"
    with open(log_path, "w") as log_file:
        process = connector(database_url, "--connection-id", "plant", "--queue", source, log=log_file)
        try:
            done = wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == good
                            and count(engine, "SELECT count(*) FROM connection_log WHERE kind = 'dropped'")
                            == len(DEEP_HEADERS) and broker.depth(source) == 0,
                            what="the good ones stored, the deep ones refused", raises=False)
            running = process.poll() is None
        finally:
            code, _ = stop(process)
    log = log_path.read_text()
    assert_took_them_all(log, done, running, code)
    assert log.count("rejected message") == len(DEEP_HEADERS), "one line each"
    assert _stored_ids(engine) == sorted(f"c-{n}" for n in range(good))
    answers = {name: answer["value"] for name, answer in _replies(broker, replies).items()}
    assert {name: (a["status"], a["error"]) for name, a in answers.items()} == {
        name: (400, "json.invalid") for name in DEEP_HEADERS}, answers
    assert all("deeper than the maximum of 100 levels at </headers/deep" in a["message"] for a in answers.values()), {
        name: a["message"] for name, a in answers.items()}


def test_pika_reads_the_properties_it_can_and_a_header_past_its_stack_is_unread() -> None:
    """What the connector reads a content header with (``BoundedProperties``, registered as
    pika's class for basic properties): pika's own reading; a header pika's recursive decoder
    cannot read is ``UNREAD`` — the headers before and after it, and every other property, read."""
    from ackstore.connectors.amqp import BoundedProperties

    assert pika.spec.props[pika.spec.BasicProperties.INDEX] is BoundedProperties
    fields = {"content_type": "application/json", "content_encoding": "utf-8", "delivery_mode": 2, "priority": 3,
              "correlation_id": "c-1", "reply_to": "replies", "expiration": "60000", "message_id": "m-1",
              "timestamp": 1_700_000_000, "type": "t", "user_id": "guest", "app_id": "a", "cluster_id": "k"}
    headers = {"before": 1, "deep": nested(5000), "array": [1, nested_array(5000)], "plain": {"a": [NAIVE]},
               "after": "x"}
    with roomy_stack():
        encoded = b"".join(pika.BasicProperties(headers=headers, **fields).encode())
    with pytest.raises(RecursionError):
        pika.BasicProperties().decode(encoded)  # pika's own
    decoded = BoundedProperties().decode(encoded)
    assert {name: getattr(decoded, name) for name in fields} == fields
    assert decoded.headers == {"before": 1, "deep": connectivity.UNREAD, "array": connectivity.UNREAD,
                               "plain": {"a": [NAIVE.replace(tzinfo=dt.timezone.utc)]}, "after": "x"}


@given(st.dictionaries(st.text(max_size=20), st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=20) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=20), max_size=5) | st.none(), st.none() | st.text(max_size=30), st.none() | st.integers(0, 255))
def test_properties_within_pika_s_stack_are_read_as_pika_reads_them(headers, correlation_id, priority) -> None:
    from ackstore.connectors.amqp import BoundedProperties

    encoded = b"".join(pika.BasicProperties(headers=headers, correlation_id=correlation_id, priority=priority).encode())
    assert vars(BoundedProperties().decode(encoded)) == vars(pika.BasicProperties().decode(encoded))
