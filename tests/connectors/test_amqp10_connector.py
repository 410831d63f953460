"""The AMQP 1.0 connector against a broker of the module's own (RabbitMQ with its AMQP 1.0
plugin), the machine's PostgreSQL and the real pipeline (issue 41, B.9's AMQP 1.0 row).

A delivery stays unsettled on its link until the ledger decides it; the decision is carried out
with Ditto's outcome (accepted, rejected, modified[delivery-failed] — or released where the
connection says so); the link credit bounds what the connector holds.
"""

from __future__ import annotations

import json
import time
from typing import Iterator

import pytest
from proton import Described, Message as ProtonMessage, symbol
from sqlalchemy import Engine, text

from ackstore.connectors import config
from ackstore.connectors.amqp10 import Amqp10Lost, Amqp10Session
from ackstore.connectors.transport import GIVE_BACK, Message
from ackstore.rules import errors
from tests.support.amqp10_clients import AmqpValue, address, amqp10_connector, bodies, receive, send
from tests.support.amqp10_peer import Amqp10Peer
from tests.support.broker import Broker, assert_took_them_all, stop, wait_for
from tests.support.deep_json import nested, nested_array
from tests.support.dispositions import ACK, REDELIVER, REJECT
from tests.support.ledger import count, settled, thing_modify, twin_command
from tests.support.no_secrets import assert_no_password

pytestmark = [pytest.mark.slow]


@pytest.fixture
def broker(own_amqp10) -> Iterator[Broker]:
    """The test's own queues on the module's node (declared over AMQP 0.9.1, used over 1.0)."""
    broker = Broker(own_amqp10.url)
    yield broker
    broker.close()


def _once(database_url: str, url: str, *args: str) -> tuple[int, str]:
    process = amqp10_connector(database_url, url, *args, "--once")
    _, log = process.communicate(timeout=120)
    assert_no_password(log)
    return process.returncode, log


# --- the outcomes, on a session of the connector's own (the broker's answer to each) -----------

def _session(url: str, queue: str, redelivery: str | None = None) -> tuple[Amqp10Session, list[Message]]:
    specific = {"ackstore.redeliveryOutcome": redelivery} if redelivery else {}
    connection = config.parse({"id": "outcomes", "uri": url, "connectionType": "amqp-10", "specificConfig": specific,
                               "sources": [{"addresses": [address(queue)]}]})
    received: list[Message] = []
    return Amqp10Session(connection, received.append), received


def _held(session: Amqp10Session, received: list[Message], count_: int) -> None:
    deadline = time.monotonic() + 10
    while len(received) < count_ and time.monotonic() < deadline:
        session.process(0.05)
    assert len(received) == count_, f"received {len(received)} of {count_}"


OUTCOMES = [  # what the connector settles with, the connection's setting; then: does it come back, does the session end
    pytest.param(ACK, None, False, False, id="ack-accepted"),
    pytest.param(REJECT, None, False, False, id="reject-rejected"),
    pytest.param(REDELIVER, "released", True, False, id="redeliver-released"),
    pytest.param(GIVE_BACK, None, True, False, id="give-back-released"),
    # Ditto's modified[delivery-failed]: RabbitMQ 3 ends the session, and all three go back
    pytest.param(REDELIVER, "modified", True, True, id="redeliver-modified"),
]


@pytest.mark.parametrize(("disposition", "redelivery", "comes_back", "ends"), OUTCOMES)
def test_each_decision_is_settled_with_ditto_outcome_and_the_broker_does_what_it_means(
    own_amqp10, broker: Broker, disposition, redelivery: str | None, comes_back: bool, ends: bool
) -> None:
    queue = broker.queue("outcomes")
    send(own_amqp10.amqp10_url, address(queue), [thing_modify(n) for n in range(3)])
    session, received = _session(own_amqp10.amqp10_url, queue, redelivery)
    try:
        _held(session, received, 3)
        assert broker.depth(queue) == 0, "all three delivered, held unsettled"
        first = received[0]
        session.settle({first.tag: disposition})
        if ends:
            with pytest.raises(Amqp10Lost, match="invalid-field"):
                for _ in range(100):
                    session.process(0.05)
        else:
            session.process(1.0)  # a message put back comes again at once: settling it granted one more credit
            again = [m for m in received[3:] if m.key == first.key]
            assert (len(again), len(received)) == ((1, 4) if comes_back else (0, 3))
            assert all(m.redelivered for m in again) and broker.depth(queue) == 0
    finally:
        session.close()
    back = 3 if ends else (3 if comes_back else 2)  # what the session held goes back when it ends
    wait_for(lambda: broker.depth(queue) == back, timeout=10, what=f"{back} back in the queue")


def test_the_link_credit_bounds_what_a_session_holds_and_each_settlement_grants_one_more(
    own_amqp10, broker: Broker
) -> None:
    queue = broker.queue("credit")
    send(own_amqp10.amqp10_url, address(queue), [thing_modify(n) for n in range(10)])
    connection = config.simple_amqp10("credit", [address(queue)], [], own_amqp10.amqp10_url, credit=4)
    received: list[Message] = []
    session = Amqp10Session(connection, received.append)
    try:
        _held(session, received, 4)
        session.process(0.5)
        assert len(received) == 4 and broker.depth(queue) == 6, "no more than the credit is delivered"
        session.settle({received[0].tag: ACK, received[1].tag: ACK})
        _held(session, received, 6)
        session.process(0.5)
        assert len(received) == 6 and broker.depth(queue) == 4, "two settled, two more granted"
    finally:
        session.close()


# --- the connector, end to end ------------------------------------------------------------------

@pytest.mark.spark
def test_a_qos1_message_is_held_unsettled_until_decided_then_accepted_and_answered_on_its_reply_to(
    engine: Engine, database_url: str, own_amqp10, broker: Broker, run_pipeline
) -> None:
    source, replies = broker.queue("commands"), broker.queue("replies")
    url = own_amqp10.amqp10_url
    send(url, address(source), [thing_modify(n) for n in range(2)], reply_to=address(replies))
    send(url, address(source), [thing_modify(2)], reply_to=address(replies), text_body=False)  # a data section
    process = amqp10_connector(database_url, url, "--connection-id", "plant", "--address", address(source),
                               "--requested-acks", "twin-persisted", "--poll", "0.5")
    try:
        wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 3, what="3 signals stored")
        assert broker.depth(source) == 0 and settled(engine) == {}, "delivered, held unsettled"
        run_pipeline()
        wait_for(lambda: settled(engine) == {"ack": 3}, what="3 acks carried out")
        answers = wait_for(lambda: receive(url, address(replies)), what="the results on reply-to")
    finally:
        code, log = stop(process)
    assert code == 0, log
    assert broker.depth(source) == 0, "accepted deliveries never come back"
    results = sorted(bodies(answers), key=lambda m: m["headers"]["correlation-id"])
    assert [(r["status"], r["topic"]) for r in results] == [
        (201, f"org.acme/t{n}/things/twin/commands/modify") for n in range(3)]
    assert sorted(str(m.correlation_id) for m in answers) == ["c-0", "c-1", "c-2"]
    assert {str(m.content_type) for m in answers} == {"application/vnd.eclipse.ditto+json"}
    with engine.connect() as conn:
        keys = conn.execute(text("SELECT source, source_message_id FROM signals")).all()
    assert all(source_ == "plant" and key.endswith(f"@{address(source)}") for source_, key in keys), keys
    assert "carried out: ack 3" in log


@pytest.mark.spark
def test_undecided_deliveries_go_back_on_stop_and_are_recognised_when_they_come_again(
    engine: Engine, database_url: str, own_amqp10, broker: Broker, run_pipeline
) -> None:
    source = broker.queue("commands")
    url = own_amqp10.amqp10_url
    send(url, address(source), [thing_modify(n) for n in range(5)])
    args = ("--connection-id", "plant", "--address", address(source), "--requested-acks", "twin-persisted")
    first = amqp10_connector(database_url, url, *args)
    wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 5, what="5 signals stored")
    code, log = stop(first)
    assert code == 0, log
    assert broker.depth(source) == 5 and "gave 5 undecided deliveries back" in log
    run_pipeline()
    second = amqp10_connector(database_url, url, *args, "--max-messages", "5")
    _, log = second.communicate(timeout=120)
    assert second.returncode == 0, log
    assert count(engine, "SELECT count(*) FROM signals") == 5, "the copies are not stored again"
    assert settled(engine) == {"ack": 5} and "stored 0, duplicate 5," in log
    assert count(engine, "SELECT max(revision) FROM things") == 1, "applied once"
    assert broker.depth(source) == 0


def test_a_stopping_connector_gives_back_what_it_holds_by_closing_not_by_releasing_each(
    engine: Engine, database_url: str
) -> None:
    """Decisions #114: RabbitMQ 3's plugin requeues ``released`` deliveries one at a time, a walk of
    the queue each (65 535 took 12 minutes, the queue delivering nothing meanwhile), while a
    closed connection's unsettled deliveries go back at once. So a stopping connector settles
    nothing it has not decided: the source sees no disposition, and all 5 unsettled at the close."""
    offered = [ProtonMessage(body=json.dumps(thing_modify(n)), id=f"m-{n}", durable=True) for n in range(5)]
    with Amqp10Peer(lambda _: "accepted", offered=offered) as peer:
        process = amqp10_connector(database_url, peer.url, "--connection-id", "plant", "--address", "commands",
                                   "--requested-acks", "twin-persisted")
        try:
            wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 5, what="5 signals stored")
        finally:
            code, log = stop(process)
        assert code == 0, log
        assert "gave 5 undecided deliveries back" in log
        wait_for(lambda: peer.unsettled_at_close == 5, timeout=10, what="the close, holding 5 unsettled", raises=False)
    assert (peer.settled, peer.unsettled_at_close) == ([], 5), log


MALFORMED = {
    "not JSON": b"this is not json",
    "invalid UTF-8": b'{"topic": "\xff\xfe"}',
    "wrong topic": json.dumps({"topic": "org.acme/t/things/twin/nonsense", "path": "/"}).encode(),
    "zero timeout with acks": json.dumps(twin_command(timeout="0", requested_acks=["twin-persisted"],
                                                      correlation_id="zero timeout with acks")).encode(),
}


def test_malformed_messages_are_rejected_and_answered_and_a_good_one_after_them_is_stored(
    engine: Engine, database_url: str, own_amqp10, broker: Broker
) -> None:
    source, replies, dead = broker.queue("commands"), broker.queue("replies"), broker.queue("dead")
    broker.channel.queue_delete(source)  # again, dead-lettering what is rejected: rejected, not released
    broker.channel.queue_declare(source, durable=True, arguments={"x-dead-letter-exchange": "",
                                                                  "x-dead-letter-routing-key": dead})
    url = own_amqp10.amqp10_url
    for name, body in MALFORMED.items():
        send(url, address(source), [body], reply_to=address(replies), correlation_id=name)
    send(url, address(source), [thing_modify(9, requested_acks=[], response_required=False)])
    code, log = _once(database_url, url, "--connection-id", "plant", "--address", address(source))
    assert code == 0, log
    answered = {str(m.correlation_id): json.loads(m.body) for m in receive(url, address(replies))}
    assert {name: e["value"]["error"] for name, e in answered.items()} == {
        "not JSON": "json.invalid", "invalid UTF-8": "json.invalid",
        "wrong topic": "things.protocol.adapter:unknown.topicpath", "zero timeout with acks": "header.invalid"}
    assert broker.depth(source) == 0 and broker.depth(dead) == 4, "rejected: dead-lettered, never redelivered"
    assert count(engine, "SELECT count(*) FROM signals") == 1 and "dropped 4," in log and "acknowledged 1," in log


def test_a_message_id_at_and_past_the_ledger_limit_and_a_huge_properties_map_between_good_ones_stop_nothing(
    engine: Engine, database_url: str, own_amqp10, broker: Broker
) -> None:
    """AMQP 1.0 bounds neither a ``message-id`` nor the application properties, and RabbitMQ 3.10
    passes both through (measured: a message-id of 2 000 bytes, 5 000 properties). The key
    ``message-id@address`` is held at the ledger's 1 024 bytes: at the limit the message is
    stored, one byte past it is rejected and answered 400 naming the source message id. A map of
    5 000 properties (500 kB) becomes headers and is stored; 12 000 (1.2 MB) pass the envelope's
    1 MiB and are answered 413. The good messages between them are stored, nothing stops."""
    source, replies = broker.queue("commands"), broker.queue("replies")
    url, where = own_amqp10.amqp10_url, address(source)
    at_limit = "i" * (1024 - len(f"@{where}"))
    hostile = {  # correlation id -> (message-id, application properties)
        "id at the limit": (at_limit, None),
        "id past the limit": (at_limit + "i", None),
        "5 000 properties": (None, {f"p{n}": "v" * 100 for n in range(5000)}),
        "12 000 properties": (None, {f"p{n}": "v" * 100 for n in range(12_000)}),
    }
    send(url, where, [thing_modify(0, requested_acks=[], response_required=False)])
    for n, (name, (message_id, properties)) in enumerate(hostile.items(), start=1):
        envelope = twin_command("modify", thing=f"org.acme/h{n}", path="/", value={}, correlation_id=name,
                                **({"message-id": message_id} if message_id else {}))
        send(url, where, [envelope], reply_to=address(replies), properties=properties)
        send(url, where, [thing_modify(n, requested_acks=[], response_required=False)])
    code, log = _once(database_url, url, "--connection-id", "plant", "--address", where)
    assert code == 0, log
    assert "Traceback" not in log and "reconnects 0;" in log
    answered = {str(m.correlation_id): json.loads(m.body) for m in receive(url, address(replies))}
    assert {name: (answer["status"], answer["value"]["error"]) for name, answer in answered.items()} == {
        "id past the limit": (400, "id.invalid"), "12 000 properties": (413, "message.toolarge")}, answered
    assert "source message id" in answered["id past the limit"]["value"]["message"]
    with engine.connect() as conn:
        stored = dict(conn.execute(text("SELECT correlation_id, length(source_message_id) FROM signals")).all())
    assert set(stored) == {"id at the limit", "5 000 properties"} | {f"c-{n}" for n in range(5)}
    assert stored["id at the limit"] == 1024
    assert broker.depth(source) == 2, "the two stored and held go back when --once ends; the refused do not"


@pytest.mark.spark
def test_a_target_sends_events_and_issues_its_label_200_when_the_broker_accepts(
    tmp_path, engine: Engine, database_url: str, own_amqp10, broker: Broker, run_pipeline
) -> None:
    """B.9: a target's message is sent unsettled; the broker's ``accepted`` issues its label 200,
    and the command's decision follows (ack)."""
    source, events = broker.queue("commands"), broker.queue("events")
    url = own_amqp10.amqp10_url
    document = {"id": "plant", "uri": url, "connectionType": "amqp-10",
                "sources": [{"addresses": [address(source)], "acknowledgementRequests": {"includes": ["twin-persisted"]}}],
                "targets": [{"address": f"queue://{address(events)}", "topics": ["_/_/things/twin/events"],
                             "issuedAcknowledgementLabel": "{{connection:id}}:published"}]}
    path = tmp_path / "connection.json"
    path.write_text(json.dumps(document))
    send(url, address(source), [thing_modify(3, requested_acks=["plant:published"])])
    process = amqp10_connector(database_url, url, "--config", str(path), "--poll", "0.5")
    try:
        wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 1, what="the signal stored")
        run_pipeline("apply_twin")
        wait_for(lambda: count(engine, "SELECT count(*) FROM acks WHERE label = 'plant:published'"), what="the ack")
        run_pipeline()
        wait_for(lambda: settled(engine) == {"ack": 1}, what="ack carried out")
    finally:
        code, log = stop(process)
    assert code == 0, log
    with engine.connect() as conn:
        ack = conn.execute(text("SELECT status, issuer FROM acks WHERE label = 'plant:published'")).one()
    assert tuple(ack) == (200, "plant/target-0")
    delivered = receive(url, address(events))
    assert [m["topic"] for m in bodies(delivered)] == ["org.acme/t3/things/twin/events/created"]
    assert [m.properties["ack-token"] for m in delivered] == [bodies(delivered)[0]["headers"]["ack-token"]]


PEER_OUTCOMES = {"accepted": 200, "rejected": 503, "released": 503, "modified": 503}  # B.9's AMQP 1.0 targets


@pytest.mark.spark
def test_a_target_issues_its_label_from_each_outcome_the_endpoint_settles_with(
    tmp_path, engine: Engine, database_url: str, store, run_pipeline
) -> None:
    """B.9's AMQP 1.0 target row: accepted → 200; rejected, released or modified → 503 (Ditto:
    "5xx, retry feasible"). The endpoint is a real AMQP 1.0 peer settling the event of thing
    ``t<n>`` with the n-th outcome."""
    outcomes = list(PEER_OUTCOMES)

    def outcome_of(message) -> str:
        return outcomes[int(json.loads(message.body)["topic"].split("/")[1][1:])]

    with Amqp10Peer(outcome_of) as peer:
        document = {"id": "plant", "uri": peer.url, "connectionType": "amqp-10",
                    "targets": [{"address": "events", "topics": ["_/_/things/twin/events"],
                                 "issuedAcknowledgementLabel": "{{connection:id}}:published"}]}
        path = tmp_path / "connection.json"
        path.write_text(json.dumps(document))
        process = amqp10_connector(database_url, peer.url, "--config", str(path), "--poll", "0.5")
        try:
            wait_for(lambda: count(engine, "SELECT count(*) FROM subscribers WHERE id = 'plant/target-0'"),
                     what="the target declared")
            for n in range(len(outcomes)):
                assert store.submit(thing_modify(n, requested_acks=["plant:published"]))["status"] == 202
            run_pipeline("apply_twin")
            wait_for(lambda: count(engine, "SELECT count(*) FROM acks WHERE label = 'plant:published'") == len(outcomes),
                     what="every target's ack")
        finally:
            code, log = stop(process)
    assert code == 0, log
    with engine.connect() as conn:
        acks = dict(conn.execute(text(
            "SELECT s.thing_id, a.status FROM acks a JOIN signals s ON s.id = a.signal_id "
            "WHERE a.label = 'plant:published' AND a.issuer = 'plant/target-0'")).all())
    assert acks == {f"org.acme:t{n}": status
                    for n, status in enumerate(PEER_OUTCOMES.values())}
    assert len(peer.received) == len(outcomes), "each event sent once"


def test_a_missing_address_is_said_and_received_from_once_it_exists(
    tmp_path, engine: Engine, database_url: str, own_amqp10, broker: Broker
) -> None:
    queue = f"{broker.prefix}.later"
    url = own_amqp10.amqp10_url
    log_path = tmp_path / "connector.log"
    with open(log_path, "w") as log_file:
        process = amqp10_connector(database_url, url, "--connection-id", "plant", "--address", address(queue),
                                   log=log_file)
        try:
            wait_for(lambda: "not-found" in log_path.read_text(), what="the broker refusing the link, said")
            broker.queue("later")
            send(url, address(queue), [thing_modify(4, requested_acks=[], response_required=False)])
            wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 1, what="stored once it exists")
        finally:
            code, _ = stop(process)
    log = log_path.read_text()
    assert code == 0, log
    assert "reconnecting in" in log and "acknowledged 1," in log, log


def test_publish_amqp10_sends_each_line_and_counts_the_accepted(tmp_path, own_amqp10, broker: Broker) -> None:
    import subprocess
    import sys

    from tests.support.broker import ROOT

    queue = broker.queue("published")
    lines = tmp_path / "messages.jsonl"
    lines.write_text("\n".join([json.dumps(thing_modify(1, message_id="given-id")), "", "not json at all"]) + "\n")
    done = subprocess.run([sys.executable, "-m", "ackstore.cli", "publish", "amqp10", "--address", address(queue),
                           "--url", own_amqp10.amqp10_url, str(lines)], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"status": 200, "address": address(queue), "published": 2, "refused": 0}
    received = receive(own_amqp10.amqp10_url, address(queue))
    assert [m.id for m in received][0] == "given-id" and bytes(received[1].body) == b"not json at all"
    refused = subprocess.run([sys.executable, "-m", "ackstore.cli", "publish", "amqp10", "--address", address(queue),
                              "--url", "amqp://127.0.0.1:1", str(lines)],  # nothing listens on port 1
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
    answer = json.loads(refused.stdout)
    assert (refused.returncode, answer["status"], answer["error"]) == (1, 503, "connectivity:connection.failed"), answer


def test_ackstore_connect_amqp10_answers_an_unsupported_setting_with_a_400_naming_it(tmp_path, database_url: str) -> None:
    path = tmp_path / "connection.json"
    path.write_text(json.dumps({"id": "c", "connectionType": "amqp-10", "uri": "amqp://127.0.0.1:1",
                                "specificConfig": {"jms.closeTimeout": "5000"}, "sources": [{"addresses": ["q"]}]}))
    process = amqp10_connector(database_url, "amqp://127.0.0.1:1", "--config", str(path))
    out, _ = process.communicate(timeout=60)
    answer = json.loads(out)
    assert (process.returncode, answer["status"], answer["error"]) == (1, 400, errors.connection_config_invalid("").error)
    assert "'jms.closeTimeout' is not supported" in answer["message"]


def test_an_answer_amqp10_cannot_carry_is_refused_before_proton_and_the_session_goes_on(
    own_amqp10, broker: Broker
) -> None:
    """Issue 37's rule on the third transport: a reply-to or a correlation id holding a lone
    surrogate is :class:`Unencodable` at once (proton would fail inside its event loop), and the
    next answer goes out."""
    from ackstore.connectors.transport import Unencodable

    replies = broker.queue("replies")
    session, _ = _session(own_amqp10.amqp10_url, broker.queue("commands"))
    answer = {"topic": "org.acme/t/things/twin/errors", "path": "/", "status": 400, "headers": {"correlation-id": "c"}}
    try:
        with pytest.raises(Unencodable, match="reply-to"):
            session.reply("\ud800", answer)
        with pytest.raises(Unencodable):
            session.reply(address(replies), {**answer, "headers": {"correlation-id": "\udfff"}})
        assert session.reply(address(replies), answer)
        session.process(0.5)
    finally:
        session.close()
    assert [str(m.correlation_id) for m in receive(own_amqp10.amqp10_url, address(replies))] == ["c"]


def test_hostile_reply_to_addresses_and_ids_between_good_messages_drop_no_connection_and_no_log_entry(
    tmp_path, engine: Engine, database_url: str, own_amqp10, broker: Broker
) -> None:
    """Issue 50: a sender's ``reply-to: "/"`` made RabbitMQ refuse the reply link's attach by ending
    the session — the connector's one session, so every reply of the batch was lost and the
    connection made again (three such messages, three lost connections); and a message id holding
    U+0000 emptied the batch's connection log ("did not take 83 entries"). Now an address none of
    the plugin's forms is refused before any attach, one the broker refuses anyway ends only its
    reply link's own session, and each is one log line and one count; a binary id's 0x00 is stored
    as ``\\x00``, a text id's U+0000 refused and logged escaped. The good messages between them
    are stored, and the good refusals answered, on the one connection."""
    source, replies, durable = broker.queue("commands"), broker.queue("replies"), broker.queue("durable")
    url, where = own_amqp10.amqp10_url, address(source)
    hostile = {  # reply-to -> refused before the attach (else: by the broker, ending the link's own session)
        "/": True, "//": True, "/queue/": True, "/exchange/x": True, "/temp-queue/x": True, "a/b": True,
        "/exchange/missing/rk": False,  # not-found: RabbitMQ ends the session
        f"/queue/{durable}": False,  # precondition-failed: the plugin would declare it non-durable
    }
    good_refused: list[str] = []
    for n, reply_to in enumerate(hostile):
        send(url, where, [thing_modify(n, requested_acks=[], response_required=False)])
        send(url, where, [b"not json"], reply_to=address(replies), correlation_id=f"answered-{n}")
        send(url, where, [b"not json"], reply_to=reply_to, correlation_id=f"hostile-{n}")
        good_refused.append(f"answered-{n}")
    binary = thing_modify(20, requested_acks=[], response_required=False)  # a raw id: 0x00 and no UTF-8
    send(url, where, [binary], message_id=b"\x00\x01\xffbinary-id")
    text_nul = twin_command("modify", thing="org.acme/nul", path="/", value={}, correlation_id="text-nul")
    send(url, where, [text_nul], reply_to=address(replies), message_id="text\x00id")
    log_path = tmp_path / "connector.log"
    with open(log_path, "w") as log_file:
        process = amqp10_connector(database_url, url, "--connection-id", "plant", "--address", where, log=log_file)
        try:
            wait_for(lambda: count(engine, "SELECT count(*) FROM connection_log WHERE kind = 'unsendable'")
                     == len(hostile), what="every hostile reply-to counted")
            answers = {str(m.correlation_id): json.loads(m.body) for m in receive(url, address(replies))}
        finally:
            code, _ = stop(process)
    log = log_path.read_text()
    assert code == 0, log
    assert "reconnects 0;" in log and "did not take" not in log and "Traceback" not in log, log
    assert set(answers) == {*good_refused, "text-nul"}, "every good refusal answered, on the one connection"
    assert answers["text-nul"]["status"] == 400
    with engine.connect() as conn:
        stored = dict(conn.execute(text("SELECT correlation_id, source_message_id FROM signals")).all())
        entries = conn.execute(text("SELECT kind, message_id FROM connection_log WHERE connection = 'plant'")).all()
    assert set(stored) == {f"c-{n}" for n in range(len(hostile))} | {"c-20"}
    assert stored["c-20"] == f"\\x00\x01\\xffbinary-id@{where}"  # 0x01 is UTF-8: itself
    dropped = [message_id for kind, message_id in entries if kind == "dropped"]
    assert len(dropped) == 2 * len(hostile) + 1, "every refusal of the batch in the connection's log"
    assert f"text\\x00id@{where}" in dropped, "the id's U+0000 written as its escape"
    assert sum(kind == "unsendable" for kind, _ in entries) == len(hostile)
    lines = [line for line in log.splitlines() if "is dropped" in line]
    assert len(lines) == len(hostile)
    assert sum("the broker refused its link" in line for line in lines) == list(hostile.values()).count(False)


def _deep_amqp10() -> dict[str, tuple[object, dict | None]]:
    """What a sender may nest in an AMQP 1.0 message (correlation id -> body, application
    properties): proton's Python reads a body and the properties recursively (``Data.get_object``),
    and ran out of stack at about 500 levels inside ``container.process()``; within its stack, a
    value still nests past the door's bound (decisions #115) before the rules convert it."""
    def envelope(name: str) -> dict:
        return twin_command("modify", thing=f"org.acme/{name.replace(' ', '-')}", path="/", value={},
                            correlation_id=name, requested_acks=[], response_required=False)

    return {
        "a list 600 deep": (AmqpValue(nested_array(600, "x")), None),
        "a map 600 deep": (AmqpValue(nested(600)), None),
        "a property 600 deep": (envelope("a property 600 deep"), {"deep": nested(600)}),
        "a list 400 deep": (AmqpValue(nested_array(400)), None),
        "a property 400 deep": (envelope("a property 400 deep"), {"deep": nested_array(400)}),
        "a list 150 deep": (AmqpValue(nested_array(150)), None),
        "a property 150 deep": (envelope("a property 150 deep"), {"deep": nested(150)}),
        # RabbitMQ 3.10 passes a described value on in a map (in a list or a property it ends the connection)
        "a described value 150 deep": (AmqpValue({"a": _described(150)}), None),
    }


def _described(levels: int) -> Described:
    value: object = "x"
    for _ in range(levels):
        value = Described(symbol("ackstore:deep"), value)
    return value  # type: ignore[return-value]


def test_values_nested_past_the_bound_or_past_proton_s_stack_between_good_messages_are_refused_and_nothing_stops(
    tmp_path, engine: Engine, database_url: str, own_amqp10, broker: Broker
) -> None:
    """Issue 50's depth bound for AMQP 1.0's own values: a body or an application property nested
    past proton's decoder's stack raised RecursionError out of the connector's event loop (a
    traceback, the connector gone; the message came again on restart, so it never ran again), and
    one proton could read ran out of stack where the rules convert it. Each is now refused as a
    client error — 400 json.invalid answered on its reply-to, rejected (dead-lettered, never
    redelivered), one log line, counted, in the connection's log — between good messages that
    are stored and settled, on the one connection, the connector running."""
    source, replies, dead = broker.queue("commands"), broker.queue("replies"), broker.queue("dead")
    broker.channel.queue_delete(source)  # again, dead-lettering what is rejected: rejected, not released
    broker.channel.queue_declare(source, durable=True, arguments={"x-dead-letter-exchange": "",
                                                                  "x-dead-letter-routing-key": dead})
    url, where = own_amqp10.amqp10_url, address(source)
    hostile = _deep_amqp10()
    send(url, where, [thing_modify(0, requested_acks=[], response_required=False)])
    for n, (name, (body, properties)) in enumerate(hostile.items(), start=1):
        send(url, where, [body], reply_to=address(replies), correlation_id=name, properties=properties)
        send(url, where, [thing_modify(n, requested_acks=[], response_required=False)])
    good = len(hostile) + 1
    log_path = tmp_path / "connector.log"
    with open(log_path, "w") as log_file:
        process = amqp10_connector(database_url, url, "--connection-id", "plant", "--address", where, log=log_file)
        try:
            done = wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == good
                            and broker.depth(dead) == len(hostile)
                            and count(engine, "SELECT count(*) FROM connection_log WHERE kind = 'dropped'")
                            == len(hostile), what="the good ones stored, the deep ones rejected", raises=False)
            running = process.poll() is None
            answers = {str(m.correlation_id): json.loads(m.body) for m in receive(url, address(replies))}
        finally:
            code, _ = stop(process)
    log = log_path.read_text()
    assert_took_them_all(log, done, running, code)
    assert {name: (a["value"]["status"], a["value"]["error"]) for name, a in answers.items()} == {
        name: (400, "json.invalid") for name in hostile}, answers
    assert all("deeper than the maximum of 100 levels" in a["value"]["message"] for a in answers.values()), {
        name: a["value"]["message"] for name, a in answers.items()}
    assert f"dropped {len(hostile)}," in log and f"acknowledged {good}," in log, log
    assert log.count("rejected message") == len(hostile), "one line each"
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT correlation_id FROM signals")).scalars().all()
    assert sorted(stored) == sorted(f"c-{n}" for n in range(good))
    assert broker.depth(source) == 0, "the good ones settled, the deep ones rejected"
