"""Every entry that takes user text answers 2xx or a Ditto-shaped 4xx, and a rejected input
changes nothing stored — under generated input, hostile input included (deep nesting, huge
numbers and strings, NUL, invalid UTF-8, lone surrogates, injection text).

``make test`` runs each property on 150 cases; ``make fuzz`` on 100 000 each
(``ACKSTORE_FUZZ_EXAMPLES``, with hypothesis' per-entry statistics). A case the fuzzer finds goes into
``tests/connectors/test_hostile_input.py`` as a plain test.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from ackstore import cli
from ackstore.connectors import config
from ackstore.ledger.store import AckStore
from ackstore.rules import connectivity, durations, errors, headers, labels, numbers, rql, rql_eval, subscriptions

EXAMPLES = int(os.environ.get("ACKSTORE_FUZZ_EXAMPLES", 150))  # make fuzz: 100 000
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
                database=None if EXAMPLES > 1000 else settings.default.database)

# --- hostile text and values ---------------------------------------------------------------------

INJECTIONS = ["'; DROP TABLE signals; --", "\" OR 1=1 --", "${jndi:ldap://x}", "{{connection:id}}", "%s%n%x",
              "\u202eevil", "../../etc/passwd", "\x00", "\\u0000", "<script>", "*" * 50, "eq(", ")))", "NaN",
              "Infinity", "-0", "1e999", "9" * 5000, "9" * 310, "\ud800", "é" * 400, "x" * 10_000]
text_values = st.one_of(st.text(max_size=60), st.sampled_from(INJECTIONS),
                        st.text(st.characters(codec="utf-8"), max_size=20).map(lambda t: t + "\x00"))
number_values = st.one_of(st.integers(), st.integers(min_value=-(10**400), max_value=10**400), st.floats(),
                    st.sampled_from([309, -5000]).map(lambda n: 10**n if n > 0 else -(10 ** -n)))
json_values = st.recursive(st.one_of(st.none(), st.booleans(), number_values, text_values),
                           lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                   st.dictionaries(text_values, inner, max_size=4)),
                           max_leaves=12)


def _dumps(value: Any) -> str:
    """JSON text of a generated value; one with an integer too long for ``str`` as a digit run."""
    try:
        return json.dumps(value, allow_nan=True)
    except ValueError:
        return '{"value":' + "7" * 5000 + "}"


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


raw_documents = st.one_of(
    st.binary(max_size=200),  # invalid UTF-8 and all
    st.sampled_from([_deep(5000).encode(), b'{"a":' + b"1" * 5000 + b"}", b"\xff\xfe", b"{" * 3000]),
    json_values.map(lambda v: _dumps(v).encode()),
)

TOPICS = ["org.acme/lamp-1/things/twin/commands/modify", "org.acme/lamp-1/things/live/commands/modify",
          "org.acme/lamp-1/things/live/messages/ask", "org.acme/lamp-1/things/twin/commands/create",
          "org.acme/lamp-1/things/twin/acks/app:done", "org.acme/lamp-1/things/live/acks"]
header_maps = st.dictionaries(
    st.sampled_from(["correlation-id", "requested-acks", "timeout", "response-required", "ack-token", "if-match",
                     "content-type", "x-custom", "ditto-weak-ack"]) | text_values, json_values, max_size=6)
envelopes = st.one_of(
    st.fixed_dictionaries({"topic": st.sampled_from(TOPICS) | text_values, "headers": header_maps,
                           "path": st.sampled_from(["/", "/attributes/on", "/features/f/properties/x"]) | text_values},
                          optional={"value": json_values, "status": number_values | text_values}),
    json_values,
)


# --- the property ------------------------------------------------------------------------------


def ditto_answer(answer: Any) -> None:
    """2xx, or a 4xx with Ditto's fields."""
    assert isinstance(answer, dict) and isinstance(answer.get("status"), int), answer
    if not 200 <= answer["status"] < 300:
        assert 400 <= answer["status"] < 500, answer
        assert isinstance(answer["error"], str) and isinstance(answer["message"], str), answer
        assert isinstance(answer.get("description"), str), answer


def raises_only_ditto_4xx(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except errors.DittoError as error:
        ditto_answer(error.to_json())
        return None


def stored(engine: Engine) -> tuple:
    """What a rejected input must not change."""
    with engine.connect() as conn:
        return tuple(conn.execute(text(
            "SELECT (SELECT count(*) FROM signals), (SELECT count(*) FROM acks), (SELECT count(*) FROM subscribers), "
            "(SELECT count(*) FROM declared_labels), (SELECT count(*) FROM deliveries), "
            "(SELECT count(*) FROM command_responses)")).one())


def unchanged_if_rejected(engine: Engine, call: Callable[[], dict]) -> dict:
    before = stored(engine)
    answer = call()
    ditto_answer(answer)
    if answer["status"] >= 400:
        assert stored(engine) == before, answer
    return answer


# --- pure entries --------------------------------------------------------------------------------


@FUZZ
@given(header_maps, st.sampled_from(["twin", "live"]), st.sampled_from(["http", "websocket", "connectivity"]))
def test_fuzz_headers(raw, channel, api) -> None:
    raises_only_ditto_4xx(lambda: headers.normalize(raw, channel=channel, api=api))


@FUZZ
@given(text_values | json_values, st.one_of(st.none(), text_values))
def test_fuzz_labels(label, connection) -> None:
    raises_only_ditto_4xx(lambda: labels.validate_issuable(label))
    raises_only_ditto_4xx(lambda: labels.validate_declarable(label, connection))


@FUZZ
@given(st.one_of(text_values, st.from_regex(r"[+-]?[0-9]{0,30}(ms|mo|s|m|h|d|w|y)?", fullmatch=True)))
def test_fuzz_durations(text_value) -> None:
    raises_only_ditto_4xx(lambda: durations.parse_duration_ms(text_value))


rql_texts = st.one_of(
    text_values,
    st.builds(lambda op, prop, value: f"{op}({prop},{value})",
              st.sampled_from(["eq", "ne", "gt", "ge", "lt", "le", "like", "ilike", "in", "exists", "empty", "and",
                               "or", "not", "sort"]) | text_values,
              st.sampled_from(["attributes/a", "/features/f", "topic:action", "thingId"]) | text_values,
              st.one_of(st.integers().map(str), st.floats().map(repr), st.sampled_from(["9" * 5000, "-" + "9" * 310, "1e999"]),
                        text_values.map(json.dumps), st.sampled_from(["true", "null", "time:now"]))),
    st.integers(1, 3000).map(lambda n: "not(" * n + "exists(a)" + ")" * n),
)


@FUZZ
@given(rql_texts, json_values.filter(lambda value: not numbers.out_of_range(value)))  # as the ledger stores them
def test_fuzz_rql(expression, document) -> None:
    parsed = raises_only_ditto_4xx(lambda: rql.parse(expression))
    if parsed is not None and isinstance(document, dict):
        raises_only_ditto_4xx(lambda: rql_eval.matches(parsed, rql_eval.rows_by_path(document)))


@FUZZ
@given(text_values | json_values, st.text(max_size=40))
def test_fuzz_ack_tokens(token, key) -> None:
    raises_only_ditto_4xx(lambda: subscriptions.token_handout(token, key or "k"))


@FUZZ
@given(st.one_of(json_values, st.fixed_dictionaries(
    {"id": text_values, "uri": st.sampled_from(["amqp://h/", "http://x"]) | text_values,
     "sources": st.lists(st.fixed_dictionaries({"addresses": json_values, "acknowledgementRequests": json_values,
                                                 "declaredAcks": json_values}), max_size=2) | json_values,
     "targets": st.lists(st.fixed_dictionaries({"address": json_values, "topics": json_values,
                                                 "issuedAcknowledgementLabel": json_values}), max_size=2)})))
def test_fuzz_connection_configs(document) -> None:
    raises_only_ditto_4xx(lambda: config.parse(document))


amqp_header_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.binary(max_size=20), text_values,
              st.decimals(), st.datetimes()),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)


@FUZZ
@given(raw_documents, st.dictionaries(st.text(max_size=12), amqp_header_values, max_size=4),
       st.fixed_dictionaries({"correlation_id": st.none() | text_values, "reply_to": st.none() | text_values,
                              "content_type": st.none() | text_values, "message_id": st.none() | text_values}))
def test_fuzz_amqp_message_mapping(body, amqp_headers, properties) -> None:
    envelope = connectivity.inbound_envelope(body, amqp_headers, properties, includes=("twin-persisted",),
                                             max_bytes=1 << 20)
    if isinstance(envelope, dict):
        json.dumps(envelope["headers"])  # every transport header became JSON


# --- entries that store --------------------------------------------------------------------------


@FUZZ
@given(st.one_of(envelopes, raw_documents), st.sampled_from(["http", "websocket", "connectivity"]))
def test_fuzz_submit(migrated_engine: Engine, envelope, api) -> None:
    store = AckStore(migrated_engine)
    unchanged_if_rejected(migrated_engine, lambda: store.submit(envelope, api=api))


@FUZZ
@given(text_values, st.lists(text_values, max_size=3), st.none() | rql_texts, st.none() | st.lists(text_values, max_size=2),
       st.none() | text_values, st.none() | st.lists(st.sampled_from(["twin", "live"]) | text_values, max_size=3))
def test_fuzz_declare(migrated_engine: Engine, subscriber, declared, filter_text, namespaces, connection, channels) -> None:
    store = AckStore(migrated_engine)
    unchanged_if_rejected(migrated_engine, lambda: store.declare(
        subscriber, declared, filter=filter_text, namespaces=namespaces, connection=connection, channels=channels))


@FUZZ
@given(st.one_of(envelopes, raw_documents), text_values)
def test_fuzz_acknowledge_and_respond(migrated_engine: Engine, message, subscriber) -> None:
    store = AckStore(migrated_engine)
    unchanged_if_rejected(migrated_engine, lambda: store.acknowledge(subscriber, message))
    unchanged_if_rejected(migrated_engine, lambda: store.respond(subscriber, message))


@FUZZ
@given(rql_texts, st.none() | st.lists(text_values, max_size=2))
def test_fuzz_search(migrated_engine: Engine, expression, namespaces) -> None:
    ditto_answer(AckStore(migrated_engine).search(expression, namespaces))


@FUZZ
@given(raw_documents, st.sampled_from(["submit", "ack", "respond"]))
def test_fuzz_cli_files(database_url: str, migrated_engine: Engine, content, command) -> None:
    with tempfile.NamedTemporaryFile(suffix=".json") as file:
        file.write(content)
        file.flush()
        argv = ["--database-url", database_url, command, *(["fuzzer"] if command != "submit" else []), file.name]
        before = stored(migrated_engine)
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = cli.main(argv)
        answer = json.loads(out.getvalue())
    ditto_answer(answer)
    assert code in (cli.EXIT_OK, cli.EXIT_ERROR_ANSWER)
    if answer["status"] >= 400:
        assert stored(migrated_engine) == before


@pytest.mark.parametrize("document", [b'{"topic":' + b"[" * 100_000, _deep(100_000).encode()])
def test_nesting_beyond_the_recursion_limit_is_a_json_error(store: AckStore, document: bytes) -> None:
    assert store.submit(document)["error"] in ("json.invalid", "message.too.large")


# --- a member name twice, at any depth and however spaced: refused on the fast and the full path ---

plain_values = st.recursive(st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.text(max_size=6),
                            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                        max_size=3),
                            max_leaves=12)


def _text(value: Any, repeat_in: int, objects: list[int], space: str, ascii_only: bool) -> str:
    """JSON text of ``value``; the object numbered ``repeat_in`` (depth first) names its first member again."""
    if isinstance(value, list):
        return "[" + f",{space}".join(_text(item, repeat_in, objects, space, ascii_only) for item in value) + "]"
    if not isinstance(value, dict):
        return json.dumps(value, ensure_ascii=ascii_only)
    number = objects[0] = objects[0] + 1
    members = [(name, _text(item, repeat_in, objects, space, ascii_only)) for name, item in value.items()]
    if number == repeat_in and members:
        members.append((members[0][0], '"delete"'))
    return "{" + f",{space}".join(f"{json.dumps(name, ensure_ascii=ascii_only)}{space}:{space}{item}"
                                  for name, item in members) + "}"


@FUZZ
@given(st.dictionaries(st.text(max_size=4), plain_values, min_size=1, max_size=3), st.integers(1, 6),
       st.sampled_from(["", " ", "\n\t"]), st.booleans(), st.booleans())
def test_fuzz_a_member_name_twice_is_refused_on_both_paths(value, repeat_in, space, ascii_only, as_bytes) -> None:
    from ackstore.rules import envelopes as envelope_rules

    text_ = _text(value, repeat_in, [0], space, ascii_only)
    repeated = text_ != _text(value, 0, [0], space, ascii_only)
    raw = text_.encode() if as_bytes else text_
    fast = envelope_rules._plain_json_object(raw, len(text_.encode()), 1024 * 1024)
    if not repeated:
        assert errors.parse_json_text(raw) == value and fast in (None, value)
        return
    assert fast is None, text_
    with pytest.raises(errors.DittoError) as raised:
        errors.parse_json_text(raw)
    assert raised.value.error == "json.invalid" and "appears twice in one object" in raised.value.message
