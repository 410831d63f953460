"""User text that used to crash (a traceback, no JSON) is answered 400 and changes nothing.

Each case came from a probe of the CLI, the Python API and RabbitMQ with hostile input
(issue 14): ack tokens Python's ``int()`` or ``hmac`` choke on, integers past Python's
4 300-digit limit, identifiers past PostgreSQL's index-entry limit, connection configs of the
wrong shape, and a string attribute too long for the search index's btree.
"""

from __future__ import annotations

import json
import secrets
import uuid
from typing import Any, Callable

import pytest
from sqlalchemy import Engine, text

from ackstore import cli
from ackstore.connectors import config
from ackstore.ledger.store import AckStore
from ackstore.rules import errors, index_rows, limits, numbers, rql, subscriptions
from tests.support.deep_json import nested, nested_text
from tests.support.ledger import snapshot, twin_command
from tests.support.live_signals import LABEL, live_message, live_response, with_token

HUGE = "9" * 5000  # past Python's integer-string limit (4 300 digits)
OUT_OF_RANGE = "9" * 310  # within Python's limit, past the largest double: no JSON number Ditto holds
BAD_TOKENS = ["1" * 100_000 + ".abc", "2.ü", "².abc", "٣.abc", "-1.abc", "1", ".", "", "1." + "a" * 100_000]


@pytest.mark.parametrize("token", BAD_TOKENS, ids=lambda t: repr(t[:12]))
def test_a_malformed_ack_token_is_invalid_not_a_crash(token: str) -> None:
    with pytest.raises(errors.DittoError) as raised:
        subscriptions.token_handout(token, "key")
    assert (raised.value.status, raised.value.error) == (400, "acknowledgement:token.invalid")
    assert len(raised.value.message) < 400  # the token is clipped in the answer


@pytest.fixture
def handed_out(store: AckStore) -> tuple[str, str]:
    """A live message pulled by subscriber ``asker`` (labels: LABEL), and its correlation id."""
    assert store.declare("asker", [LABEL], channels=["live"])["status"] == 204
    assert store.submit(live_message("hostile-1", requested_acks=[LABEL]))["status"] == 202
    (pulled,) = store.pull("asker")
    return "hostile-1", pulled["headers"]["ack-token"]


@pytest.mark.parametrize("token", BAD_TOKENS[:4], ids=lambda t: repr(t[:12]))
def test_acknowledge_and_respond_answer_400_to_a_malformed_token(store: AckStore, engine: Engine, handed_out,
                                                                 token: str) -> None:
    cid, _ = handed_out
    before = snapshot(engine)
    ack = with_token({"topic": f"org.acme/lamp-1/things/live/acks/{LABEL}", "headers": {"correlation-id": cid},
                      "path": "/", "status": 200}, token)
    assert store.acknowledge("asker", ack)["error"] == "acknowledgement:token.invalid"
    assert store.respond("asker", live_response(cid, token=token))["error"] == "acknowledgement:token.invalid"
    assert snapshot(engine) == before


@pytest.mark.parametrize("number", [HUGE, OUT_OF_RANGE, "-" + HUGE, "1e999"])
def test_a_number_out_of_range_in_a_command_is_400_and_the_good_one_beside_it_is_stored(store: AckStore,
                                                                                          number: str) -> None:
    good = json.dumps(twin_command("modify", thing="org.acme/good", correlation_id="good"))
    bad = json.dumps(twin_command("modify", thing="org.acme/bad", correlation_id="bad")).replace("true", number)
    answers = store.submit_many([good, bad])
    assert answers[0]["status"] == 202
    assert (answers[1]["status"], answers[1]["error"]) == (400, "json.invalid")
    assert store.stored_signal("good") is not None and store.stored_signal("bad") is None


def test_an_integer_out_of_range_from_python_is_400_too(store: AckStore) -> None:
    for value in (10**400, -(10**5000)):
        answer = store.submit(twin_command("modify", value={"n": [value]}))
        assert (answer["status"], answer["error"]) == (400, "json.invalid")
    assert store.submit(twin_command("modify", value=10**300, correlation_id="in-range"))["status"] == 202


@pytest.mark.parametrize("number", [HUGE, OUT_OF_RANGE, "1e999", "-1e400"])
def test_a_number_out_of_range_in_rql_is_a_positioned_400(store: AckStore, number: str) -> None:
    expression = f"and(exists(a),gt(attributes/n,{number}))"
    with pytest.raises(errors.DittoError) as raised:
        rql.parse(expression)
    assert raised.value.error == "rql.expression.invalid" and "at position 31" in raised.value.message
    assert store.declare("filtered", [], filter=expression)["error"] == "rql.expression.invalid"
    assert store.search(expression)["error"] == "rql.expression.invalid"


def test_requested_acks_text_with_a_huge_number_is_a_header_error(store: AckStore) -> None:
    answer = store.submit(twin_command("modify", requested_acks=f'["twin-persisted",{HUGE}]'))
    assert (answer["status"], answer["error"]) == (400, "header.invalid")


def _long(n: int, char: str = "a") -> str:
    return char * n


@pytest.mark.parametrize(("what", "make"), [
    ("correlation id", lambda s, n: s.submit(twin_command("modify", correlation_id=_long(n)))),
    ("correlation id (multi-byte)", lambda s, n: s.submit(twin_command("modify", correlation_id=_long(n // 3, "€")))),
    ("thing name", lambda s, n: s.submit(twin_command("modify", thing=f"org.acme/{_long(n)}"))),
    ("subscriber id", lambda s, n: s.declare(_long(n), [])),
    ("connection id", lambda s, n: s.declare("sub", [], connection=_long(n))),
    ("source", lambda s, n: s.submit(twin_command("modify"), source=_long(n))),
    ("source message id", lambda s, n: s.submit(twin_command("modify"), source="cli", source_message_id=_long(n))),
])
def test_an_identifier_past_its_maximum_is_400_before_the_database(store: AckStore, engine: Engine, what, make) -> None:
    before = snapshot(engine)
    for n in (10_000, 3_000):
        answer = make(store, n)
        assert answer["status"] == 400 and answer["error"] in ("id.invalid", "header.invalid", "things:id.invalid"), answer
        assert answer["description"]
    assert snapshot(engine) == before


def test_identifiers_at_their_maximum_are_stored(store: AckStore) -> None:
    name = _long(limits.MAX_THING_ID_CHARS - len("org.acme:"))
    answer = store.submit(twin_command("modify", thing=f"org.acme/{name}",
                                       correlation_id=_long(limits.MAX_CORRELATION_ID_BYTES)),
                          source=_long(limits.MAX_SOURCE_BYTES), source_message_id=_long(limits.MAX_MESSAGE_ID_BYTES))
    assert answer["status"] == 202, answer
    assert store.declare(_long(limits.MAX_SUBSCRIBER_ID_BYTES), [])["status"] == 204


def test_an_ack_or_response_with_a_long_correlation_id_is_400(store: AckStore, handed_out) -> None:
    long_cid = _long(10_000)
    ack = {"topic": f"org.acme/lamp-1/things/live/acks/{LABEL}", "headers": {"correlation-id": long_cid},
           "path": "/", "status": 200}
    assert store.acknowledge("asker", ack)["error"] == "header.invalid"
    assert store.respond("asker", live_response(long_cid))["error"] == "header.invalid"


@pytest.mark.parametrize("requests", [["twin-persisted"], "twin-persisted", 7, True])
def test_a_connection_config_with_acknowledgement_requests_of_the_wrong_shape_is_400(requests) -> None:
    document = {"id": "plant", "sources": [{"addresses": ["q"], "acknowledgementRequests": requests}]}
    with pytest.raises(errors.DittoError) as raised:
        config.parse(document)
    assert (raised.value.status, raised.value.error) == (400, "connectivity:connection.configuration.invalid")


SECRET = "S3cr3t-hostile"


@pytest.mark.parametrize(("document", "problem"), [  # issue 50: a traceback, or the password in the answer
    ({"connectionType": "http-push", "uri": f"http://u:{SECRET}@127.0.0.1:99999"}, "Port out of range"),
    ({"connectionType": "http-push", "uri": f"http://u:{SECRET}@[::1"}, "Invalid IPv6 URL"),
    ({"connectionType": "http-push", "uri": f"http://u:{SECRET}@h:0"}, "a port from 1 to 65535"),
    ({"connectionType": "http-push", "uri": f"http://u:{SECRET}@bücher.example"}, "IDNA"),
    ({"connectionType": "http-push", "targets": [{"address": "POST:/☃", "topics": ["_/_/things/twin/events"]}]},
     "percent-encode"),
    ({"connectionType": "amqp-10", "uri": f"ftp://u:{SECRET}@h"}, "is not an AMQP URI"),
    ({"connectionType": "mqtt", "uri": f"mqtts://u:{SECRET}@:1883"}, "is not mqtt://"),
])
def test_a_connection_uri_or_address_no_client_can_use_is_400_never_showing_the_password(document: dict,
                                                                                           problem: str) -> None:
    targets = [{"address": "POST:/e" if document["connectionType"] == "http-push" else "out",
                "topics": ["_/_/things/twin/events"]}]
    full = {"id": "plant", "uri": f"http://u:{SECRET}@127.0.0.1:8080", "targets": targets, **document}
    with pytest.raises(errors.DittoError) as raised:
        config.parse(full)
    assert (raised.value.status, raised.value.error) == (400, "connectivity:connection.configuration.invalid")
    assert problem in raised.value.message and SECRET not in json.dumps(raised.value.to_json())


TEXT_NO_COLUMN_TAKES = ["m\x00id", "\ud800-lone", "a\x00\udfff\x00"]


def test_a_connection_log_entry_takes_any_text_a_sender_chose_and_its_batch_keeps_every_entry(
    store: AckStore, engine: Engine
) -> None:
    """Issue 50: a U+0000 in an entry's message id made PostgreSQL refuse the batch's whole
    transaction ("did not take 83 entries"): a sender could hide its drops. Every transport's
    entries go through ``connection_log.record``, which writes what text cannot hold as its escape."""
    from ackstore.ledger import connection_log

    assert store.claim_connection("hostile")["status"] == 204
    with engine.begin() as conn:  # one batch, as a connector writes it: the hostile entries among plain ones
        connection_log.record(conn, "hostile", "dropped", "plain before", message_id="plain-1")
        for text_ in TEXT_NO_COLUMN_TAKES:
            connection_log.record(conn, "hostile", "dropped", f"400 id.invalid: {text_}", message_id=text_)
        connection_log.record(conn, "hostile", "unsendable", "plain after \x1b[2J kept as sent", message_id="plain-2")
    with engine.connect() as conn:
        entries = connection_log.logs(conn, "hostile", 10)
    assert [e["message_id"] for e in reversed(entries)] == [
        "plain-1", "m\\x00id", "\\ud800-lone", "a\\x00\\udfff\\x00", "plain-2"]
    assert entries[0]["detail"] == "plain after \x1b[2J kept as sent", "storable text is stored as it is"


def test_a_connection_id_past_its_maximum_is_a_configuration_error() -> None:
    with pytest.raises(errors.DittoError) as raised:
        config.parse({"id": _long(300), "sources": [{"addresses": ["q"]}]})
    assert raised.value.error == "connectivity:connection.configuration.invalid"


def test_the_cli_answers_hostile_input_with_json(store: AckStore, database_url: str, tmp_path, capsys) -> None:
    command = tmp_path / "command.json"
    command.write_text(json.dumps(twin_command("modify")).replace("true", HUGE))
    assert cli.main(["--database-url", database_url, "submit", str(command)]) == cli.EXIT_ERROR_ANSWER
    assert json.loads(capsys.readouterr().out)["error"] == "json.invalid"
    assert cli.main(["--database-url", database_url, "search", f"eq(a,{HUGE})"]) == cli.EXIT_ERROR_ANSWER
    assert json.loads(capsys.readouterr().out)["error"] == "rql.expression.invalid"
    assert cli.main(["--database-url", database_url, "declare", _long(10_000)]) == cli.EXIT_ERROR_ANSWER
    assert json.loads(capsys.readouterr().out)["error"] == "id.invalid"


def test_numbers_module_bounds() -> None:
    assert numbers.parse_int("9" * 308) == int("9" * 308)
    for text in (OUT_OF_RANGE, HUGE, "-" + HUGE):
        with pytest.raises(numbers.NumberOutOfRange):
            numbers.parse_int(text)
    assert numbers.out_of_range({"a": [1, {"b": 10**309}]}) and not numbers.out_of_range({"a": [True, 10**300]})


# --- the search index: a string too long for its btree -----------------------------------------


def test_index_rows_fit_the_index_whatever_the_document() -> None:
    long_value, long_key = secrets.token_urlsafe(6000), "k" * 1200
    rows = list(index_rows.for_index(index_rows.flatten(
        {"attributes": {"s": long_value, "€": "€" * 2000, long_key: 1, "short": "x"}})))
    assert all(len(row.path.encode()) + len((row.value_text or "").encode()) <= index_rows.MAX_INDEX_CONTENT_BYTES
               for row in rows)
    by_path = {row.path: row for row in rows}
    assert long_value.startswith(by_path["attributes/s"].value_text) and by_path["attributes/short"].value_text == "x"
    assert by_path["attributes/€"].value_text == "€" * ((index_rows.MAX_INDEX_CONTENT_BYTES - len("attributes/€".encode())) // 3)
    assert f"attributes/{long_key}" not in by_path


@pytest.mark.spark
def test_a_thing_with_a_long_string_is_indexed_and_does_not_stall_the_pipeline(store: AckStore, run_pipeline) -> None:
    long_value = secrets.token_urlsafe(6000)  # incompressible: 8 kB, past a btree entry's 2 704 bytes
    answer = store.submit(twin_command("create", thing="org.acme/big", path="/",
                                       value={"attributes": {"s": long_value, "n": 1}},
                                       requested_acks=["search-persisted"]))
    run_pipeline()
    assert store.result(answer["correlationId"])["status"] == 204
    assert store.search("eq(attributes/n,1)")["items"] == ["org.acme:big"]
    assert store.search(f'like(attributes/s,"{long_value[:100]}*")')["items"] == ["org.acme:big"]


# --- cases make fuzz found (tests/ledger/test_fuzz.py) ---------------------------------------------------


def test_an_integer_too_long_to_print_in_a_header_or_label_is_answered(store: AckStore) -> None:
    huge = -(10**5000)
    answer = store.submit(twin_command("modify", correlation_id="h1", timeout=huge))
    assert answer["error"] == "json.invalid" and "out of range" in answer["message"]
    from ackstore.rules import headers

    with pytest.raises(errors.DittoError) as raised:
        headers.normalize({"timeout": huge}, channel="twin", api="http")
    assert raised.value.error == "timeout.invalid" and "an integer of about" in raised.value.message
    with pytest.raises(errors.DittoError) as raised:
        subscriptions.token_handout(huge, "key")
    assert raised.value.error == "acknowledgement:token.invalid"
    from ackstore.rules import labels

    with pytest.raises(errors.DittoError) as raised:
        labels.validate_issuable(huge)
    assert raised.value.error == "acknowledgement:label.invalid"


def test_a_duration_of_thousands_of_digits_is_timeout_invalid() -> None:
    from ackstore.rules import durations

    with pytest.raises(errors.DittoError) as raised:
        durations.parse_duration_ms("9" * 5000 + "s")
    assert raised.value.error == "timeout.invalid" and len(raised.value.message) < 300


@pytest.mark.parametrize("call", [
    lambda s: s.declare("\x00", []),
    lambda s: s.declare("sub", [], namespaces=["org\x00"]),
    lambda s: s.declare("sub", [], filter='eq(a,"\x00")'),
    lambda s: s.acknowledge("\x00", {"topic": "o/t/things/twin/acks/a:bc", "headers": {"correlation-id": "c"},
                                     "path": "/", "status": 200}),
    lambda s: s.respond("\x00", {"topic": "o/t/things/live/messages/x", "headers": {"correlation-id": "c"},
                                 "path": "/", "status": 200}),
    lambda s: s.search('eq(attributes/a,"x\x00")'),
    lambda s: s.search("exists(a)", ["\x00"]),
    lambda s: s.result("c\x00"),
], ids=["declare id", "declare namespace", "declare filter", "ack subscriber", "respond subscriber", "search rql",
        "search namespace", "result"])
def test_the_nul_character_in_user_text_is_400_not_a_driver_error(store: AckStore, engine: Engine, call) -> None:
    before = snapshot(engine)
    answer = call(store)
    assert answer["status"] == 400 and answer["error"] in ("json.invalid", "rql.expression.invalid"), answer
    assert snapshot(engine) == before


def test_pull_and_show_with_a_nul_character(store: AckStore) -> None:
    with pytest.raises(errors.DittoError) as raised:
        store.pull("a\x00")
    assert raised.value.status == 400
    assert store.stored_signal("c\x00") is None


@pytest.mark.parametrize("call", [
    lambda s: s.declare("\ud800", []),
    lambda s: s.search("exists(a)", ["\udfff"]),
    lambda s: s.search('eq(a,"\ud800")'),
    lambda s: s.result("c\ud800"),
], ids=["declare id", "search namespace", "search rql", "result"])
def test_a_lone_surrogate_in_user_text_is_400(store: AckStore, call) -> None:
    answer = call(store)
    assert answer["status"] == 400 and answer["error"] in ("json.invalid", "rql.expression.invalid"), answer


def test_a_connection_id_with_backslashes_resolves_labels_literally() -> None:
    from ackstore.rules import labels

    with pytest.raises(errors.DittoError) as raised:  # was re.sub's "bad escape", a crash
        labels.validate_declarable("{{connection:id}}:okay", "a\\g")
    assert raised.value.error == "acknowledgement:label.invalid" and "a\\g:okay" in raised.value.message
    assert labels.validate_declarable("{{connection:id}}:okay", "a-1") == "a-1:okay"


def test_a_connection_config_naming_a_huge_integer_is_a_configuration_error() -> None:
    with pytest.raises(errors.DittoError) as raised:
        config.parse({"id": "c", "targets": [{"address": -(10**5000), "topics": []}]})
    assert raised.value.error == "connectivity:connection.configuration.invalid"


# --- a member name twice in one object: json.invalid on every path (issue 37, part 5) --------------
# Python's parsers (and jsonb) keep the last of a repeated name: the second "topic" below was
# stored as a delete of another thing. Each text is refused whole, whoever sends it.

MODIFY, DELETE = "org.acme/dk/things/twin/commands/modify", "org.acme/dk2/things/twin/commands/delete"
REPEATED = {
    "topic twice": f'{{"topic":"{MODIFY}","topic":"{DELETE}","headers":{{"correlation-id":"dk-1"}},"path":"/"}}',
    "spaced, on lines": f'{{\n "topic" : "{MODIFY}" ,\n "topic" :\t"{DELETE}", "path": "/", "value": {{}}\n}}',
    "a header twice": f'{{"topic":"{MODIFY}","headers":{{"requested-acks":["twin-persisted"],"requested-acks":[]}},'
                      f'"path":"/attributes/x","value":1}}',
    "deep in the value": f'{{"topic":"{MODIFY}","path":"/","value":{{"a":[{{"b":{{"c":1,"c":2}}}}]}}}}',
    "spelled apart by an escape": f'{{"topic":"{MODIFY}","\\u0074opic":"{DELETE}","path":"/","value":{{}}}}',
    "a colon in a name": f'{{"topic":"{MODIFY}","path":"/","value":{{"a:b":1,"a:b":2}}}}',
}
ENTRIES = {
    "submit text": lambda store, text: store.submit(text),
    "submit bytes": lambda store, text: store.submit(text.encode()),
    "a connection's batch": lambda store, text: store.submit_many([text.encode()], api="connectivity",
                                                                 source="plant", source_message_ids=["m1"])[0],
    "acknowledge": lambda store, text: store.acknowledge("asker", text),
    "respond": lambda store, text: store.respond("asker", text.encode()),
}


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("case", REPEATED)
def test_a_member_name_twice_is_json_invalid_at_every_entry(store: AckStore, engine: Engine, case: str,
                                                            entry: str) -> None:
    assert store.declare("asker", [LABEL], channels=["live"])["status"] == 204
    before = snapshot(engine)
    answer = ENTRIES[entry](store, REPEATED[case])
    assert (answer["status"], answer["error"]) == (400, "json.invalid"), answer
    assert "appears twice in one object" in answer["message"] and answer["description"]
    assert snapshot(engine) == before


def test_the_same_message_with_each_name_once_is_stored(store: AckStore) -> None:
    """The control: only the repeated name makes the texts above invalid."""
    once = f'{{"topic":"{MODIFY}","headers":{{"correlation-id":"dk-1"}},"path":"/","value":{{"c":1}}}}'
    assert store.submit(once.encode())["status"] == 202
    assert store.stored_signal("dk-1")["topic"] == MODIFY


@pytest.mark.parametrize("command", [["submit", "{file}"], ["ack", "asker", "{file}"], ["respond", "asker", "{file}"],
                                     ["connect", "amqp", "--config", "{file}"], ["connect", "mqtt", "--config", "{file}"]])
def test_the_cli_answers_a_member_name_twice_with_json_invalid(store: AckStore, database_url: str, tmp_path, capsys,
                                                               command: list[str]) -> None:
    document = tmp_path / "message.json"
    document.write_text(REPEATED["topic twice"] if command[0] != "connect" else
                        '{"id":"plant","connectionType":"amqp-091","id":"other","sources":[{"addresses":["q"]}]}')
    argv = ["--database-url", database_url, *(str(document) if arg == "{file}" else arg for arg in command)]
    assert cli.main(argv) == cli.EXIT_ERROR_ANSWER
    answer = json.loads(capsys.readouterr().out)
    assert (answer["status"], answer["error"]) == (400, "json.invalid") and "appears twice" in answer["message"]
    assert store.stored_signal("dk-1") is None


@pytest.mark.parametrize("transport", ["amqp", "mqtt"])
def test_a_connector_refuses_a_message_naming_a_member_twice(engine: Engine, database_url: str, request,
                                                             transport: str) -> None:
    """The tester's message over the broker: refused as a client error (never redelivered), nothing stored."""
    body, connection = REPEATED["topic twice"].encode(), f"dup-{uuid.uuid4().hex[:8]}"
    if transport == "amqp":
        _, log = _through_amqp(database_url, connection, lambda broker, queue: broker.publish(queue, body,
                                                                                             message_id="m1"))
    else:
        _, log = _through_mqtt(request, database_url, connection, [body])
    assert "rejected message" in log and "json.invalid" in log, log
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM signals")).scalar_one() == 0


def _through_amqp(database_url: str, connection: str, publish: Callable[[Any, str], None]) -> tuple[int, str]:
    """What ``publish(broker, queue)`` puts on a queue of its own, taken by an AMQP connector run
    once: its exit status and log; every message settled, none left for redelivery."""
    from tests.support.broker import Broker, connector

    broker = Broker()
    try:
        queue = broker.queue(connection)
        publish(broker, queue)
        process = connector(database_url, "--connection-id", connection, "--queue", queue, "--once")
        _, log = process.communicate(timeout=120)
        assert broker.depth(queue) == 0, "every one settled, none left for redelivery"
    finally:
        broker.close()
    return process.returncode, log


def _through_mqtt(request, database_url: str, connection: str, sent: list) -> tuple[int, str]:
    """``sent`` (envelopes or bytes, each with MQTT 5 properties of its own or not) published to a
    topic of its own, taken by an MQTT 5 connector run once, its session subscribed before: its
    exit status and log."""
    from tests.support.mqtt_clients import mqtt_connector, publish

    mosquitto = request.getfixturevalue("own_mosquitto")
    topic = f"{connection}/commands"
    args = ("--connection-id", connection, "--topic", topic, "--once")
    mqtt_connector(database_url, mosquitto.url, *args).communicate(timeout=120)  # its session, subscribed
    publish(mosquitto.url, topic, sent)
    process = mqtt_connector(database_url, mosquitto.url, *args)
    _, log = process.communicate(timeout=120)
    return process.returncode, log


# --- what a sender nests in its transport's own values (issue 50) ---------------------------------
# AMQP 0.9.1 header tables nest (pika reads them on Python's stack); MQTT 5 user properties are
# flat strings, and no header's text is read as JSON but requested-acks's (its reader's stack
# guarded). Each refused one between good ones: tests/connectors/test_amqp_poison.py and
# test_amqp10_connector.py hold every depth; here, each transport once through its connector.

NESTED_LABELS = nested_text(5000, "[", "]", '"twin-persisted"')  # requested-acks as JSON text, 5 000 arrays deep


def _nested_in_transport_values(transport: str) -> list[tuple[str, dict, bool]]:
    """(correlation id, the transport's own values, refused) for ``transport``."""
    if transport == "amqp":
        return [("a table 600 deep", {"headers": {"deep": nested(600)}}, True),
                ("requested-acks 5 000 arrays deep", {"headers": {"requested-acks": NESTED_LABELS}}, True),
                ("a header's text of 5 000 brackets", {"headers": {"deep": "[" * 5000}}, False)]
    return [("requested-acks 5 000 arrays deep", {"UserProperty": [("requested-acks", NESTED_LABELS)]}, True),
            ("a header's text of 5 000 brackets", {"UserProperty": [("deep", "[" * 5000)]}, False)]


@pytest.mark.parametrize("transport", ["amqp", "mqtt"])
def test_a_connector_refuses_what_a_sender_nests_in_its_transport_s_values_and_stores_the_good_ones(
        engine: Engine, database_url: str, request, transport: str) -> None:
    """Between good messages, each transport's own values nested past the bounds are refused as
    client errors (one log line each, in the connection's log), text is stored as text, and the
    connector stops at the end of what was queued, as asked, not before."""
    from tests.support.broker import publish_all
    from tests.support.deep_json import roomy_stack

    cases, connection = _nested_in_transport_values(transport), f"nested-{uuid.uuid4().hex[:8]}"
    qos0 = {"requested_acks": [], "response_required": False}
    good = [twin_command("modify", thing=f"org.acme/good-{n}", correlation_id=f"good-{n}", **qos0)
            for n in range(len(cases) + 1)]
    hostile = [twin_command("modify", thing=f"org.acme/nested-{n}", correlation_id=name, **qos0)
               for n, (name, _, _) in enumerate(cases)]
    for envelope, (_, values, _) in zip(hostile, cases):
        if "requested-acks" in str(values):
            del envelope["headers"]["requested-acks"]  # the transport's header gives it

    def publish_between_good_ones(broker, queue: str) -> None:
        publish_all(broker, queue, good[:1])
        for envelope, (_, values, _), after in zip(hostile, cases, good[1:]):
            with roomy_stack():  # pika's encoder nests on the stack
                broker.publish(queue, json.dumps(envelope).encode(), message_id=uuid.uuid4().hex, **values)
            publish_all(broker, queue, [after])

    if transport == "amqp":
        code, log = _through_amqp(database_url, connection, publish_between_good_ones)
    else:
        code, log = _through_mqtt(request, database_url, connection, [
            good[0], *(item for n, (_, values, _) in enumerate(cases) for item in ((hostile[n], values), good[n + 1]))])
    assert code == 0 and "Traceback" not in log, log
    refused = [name for name, _, is_refused in cases if is_refused]
    assert log.count("rejected message") == len(refused), log
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT correlation_id FROM signals")).scalars().all()
        dropped = conn.execute(text("SELECT detail FROM connection_log WHERE kind = 'dropped'")).scalars().all()
    assert sorted(stored) == sorted([*(e["headers"]["correlation-id"] for e in good),
                                     *(name for name, _, is_refused in cases if not is_refused)])
    assert len(dropped) == len(refused) and all(entry.startswith("400 ") for entry in dropped), dropped
