"""Ditto's HTTP API in the ledger's terms (ackstore/rules/http_api.py): which resource a path names,
which signal a request is, how long it is held, and what a decision is answered as."""

from __future__ import annotations

import pytest

from ackstore.rules import errors, headers, http_api
from ackstore.rules.settings import Settings

LIMIT = 1_000_000


@pytest.mark.parametrize(("thing_id", "rest", "expected"), [
    ("org.acme:lamp-1", "", http_api.Resource("org.acme:lamp-1", "/")),
    ("org.acme:lamp-1", "attributes", http_api.Resource("org.acme:lamp-1", "/attributes")),
    ("org.acme:lamp-1", "attributes/a/b/", http_api.Resource("org.acme:lamp-1", "/attributes/a/b")),
    ("org.acme:lamp-1", "features/f/properties/p", http_api.Resource("org.acme:lamp-1", "/features/f/properties/p")),
    ("org.acme:lamp-1", "definition", http_api.Resource("org.acme:lamp-1", "/definition")),
    ("org.acme:lamp-1", "inbox/messages/ask", http_api.Resource("org.acme:lamp-1", "/inbox/messages/ask", "ask")),
    ("org.acme:lamp-1", "outbox/messages/a/b", http_api.Resource("org.acme:lamp-1", "/outbox/messages/a/b", "a/b")),
    ("org.acme:lamp-1", "features/f/inbox/messages/x",
     http_api.Resource("org.acme:lamp-1", "/features/f/inbox/messages/x", "x")),
])
def test_the_resource_a_path_names(thing_id: str, rest: str, expected: http_api.Resource) -> None:
    assert http_api.resource(thing_id, rest) == expected


@pytest.mark.parametrize(("thing_id", "rest", "error"), [
    ("no-namespace", "", "things:id.invalid"),
    ("org.acme:", "", "things:id.invalid"),
    ("org.acme:lamp-1", "nothing", "things.protocol.adapter:unknown.path"),
    ("org.acme:lamp-1", "inbox/things", "things.protocol.adapter:unknown.path"),
])
def test_a_path_no_resource_has_is_refused(thing_id: str, rest: str, error: str) -> None:
    with pytest.raises(errors.DittoError) as refused:
        http_api.resource(thing_id, rest)
    assert refused.value.error == error


def test_a_query_parameter_wins_over_the_header_and_other_headers_are_not_ditto_headers() -> None:
    given = http_api.ditto_headers({"timeout": "5s", "if-match": '"rev:1"', "x-other": "1", "correlation-id": "c"},
                                   {"timeout": "10s", "requested-acks": "a:b", "fields": "thingId"})
    assert given == {"timeout": "10s", "if-match": '"rev:1"', "correlation-id": "c", "requested-acks": "a:b"}


@pytest.mark.parametrize(("method", "content_type", "action", "value"), [
    ("PUT", "application/json", "modify", {"a": 1}),
    ("PATCH", "application/merge-patch+json", "merge", {"a": 1}),
    ("PATCH", "application/merge-patch+json; charset=utf-8", "merge", {"a": 1}),
    ("DELETE", None, "delete", None),
])
def test_a_write_is_the_twin_command_ditto_maps_it_to(method: str, content_type: str | None, action: str,
                                                      value: object) -> None:
    where = http_api.resource("org.acme:lamp-1", "attributes")
    body = b'{"a": 1}' if value is not None else b""
    signal = http_api.signal(method, where, {"correlation-id": "c"}, body, content_type, LIMIT)
    assert signal["topic"] == f"org.acme/lamp-1/things/twin/commands/{action}"
    assert (signal["path"], signal.get("value"), signal["headers"]) == ("/attributes", value, {"correlation-id": "c"})


@pytest.mark.parametrize(("method", "body", "content_type", "status", "error"), [
    ("PATCH", b"{}", "application/json", 415, "mediatype.unsupported"),
    ("PATCH", b"{}", None, 415, "mediatype.unsupported"),
    ("PUT", b"", "application/json", 400, "json.invalid"),
    ("PUT", b"{nope", "application/json", 400, "json.invalid"),
    ("POST", b'{"thingId": "org.acme:other"}', "application/json", 400, "things:id.notsettable"),
    ("POST", b"[1", "application/json", 400, "json.invalid"),
    ("PUT", b'{"policyId": ""}', "application/json", 400, "policies:id.invalid"),
    ("PUT", b"[1]", "application/json", 400, "json.invalid"),
    ("POST", b'{"definition": "0:0"}', "application/json", 400, "things:definition.identifier.invalid"),
])
def test_a_write_ditto_refuses(method: str, body: bytes, content_type: str | None, status: int, error: str) -> None:
    with pytest.raises(errors.DittoError) as refused:
        http_api.signal(method, http_api.resource("org.acme:lamp-1", ""), {}, body, content_type, LIMIT)
    assert (refused.value.status, refused.value.error) == (status, error)


def test_json_null_is_a_value_an_absent_body_none() -> None:
    where = http_api.resource("org.acme:lamp-1", "attributes/off")
    assert http_api.signal("PUT", where, {}, b"null", "application/json", LIMIT)["value"] is None
    assert "value" not in http_api.signal("DELETE", where, {}, b"", None, LIMIT)
    message = http_api.resource("org.acme:lamp-1", "inbox/messages/ask")
    assert "value" not in http_api.signal("POST", message, {}, b"", None, LIMIT)


def test_a_post_to_a_part_of_a_thing_is_405() -> None:
    with pytest.raises(errors.DittoError) as refused:
        http_api.signal("POST", http_api.resource("org.acme:lamp-1", "attributes"), {}, b"{}", "application/json",
                        LIMIT)
    assert (refused.value.status, refused.value.error) == (405, "http.method.notallowed")


@pytest.mark.parametrize(("body", "value"), [
    (b"", {}), (b'{"attributes": {"on": true}}', {"attributes": {"on": True}})])
def test_post_things_creates_a_thing_of_the_generated_id(body: bytes, value: object) -> None:
    signal = http_api.signal("POST", http_api.resource("org.acme:made", ""), {}, body, "application/json", LIMIT)
    assert (signal["topic"], signal["path"], signal["value"]) == (
        "org.acme/made/things/twin/commands/create", "/", value)


def test_a_generated_thing_id_is_the_same_for_a_retry_and_another_for_another_login_or_request() -> None:
    first = http_api.generated_thing_id(None, "alice", "c-1")
    assert first.startswith(f"{http_api.DEFAULT_NAMESPACE}:")
    assert first == http_api.generated_thing_id(None, "alice", "c-1")
    assert first != http_api.generated_thing_id(None, "bob", "c-1") != http_api.generated_thing_id(None, "alice", "c-2")
    assert http_api.generated_thing_id("org.acme", "alice", None).startswith("org.acme:")
    fresh = [http_api.generated_thing_id("org.acme", "alice", None) for _ in range(2)]
    assert fresh[0] != fresh[1]


def test_a_claim_is_a_live_message_of_subject_claim_to_the_inbox() -> None:
    where = http_api.resource("org.acme:lamp-1", "inbox/claim")
    signal = http_api.signal("POST", where, {}, b"hello", "text/plain", LIMIT)
    assert (signal["topic"], signal["path"], signal["value"]) == (
        "org.acme/lamp-1/things/live/messages/claim", "/inbox/claim", "hello")


@pytest.mark.parametrize(("body", "content_type", "text"), [
    (b"filter=eq(thingId,%22a%22)&fields=thingId", "application/x-www-form-urlencoded",
     "filter=eq(thingId,%22a%22)&fields=thingId"),
    (b"", None, ""),
])
def test_a_search_form_is_its_text(body: bytes, content_type: str | None, text: str) -> None:
    assert http_api.form_text(body, content_type) == text


@pytest.mark.parametrize(("body", "content_type", "status"), [
    (b"filter=x", "application/json", 415), (b"\xff", "application/x-www-form-urlencoded", 400)])
def test_a_search_form_ditto_refuses(body: bytes, content_type: str, status: int) -> None:
    with pytest.raises(errors.DittoError) as refused:
        http_api.form_text(body, content_type)
    assert refused.value.status == status


@pytest.mark.parametrize(("given", "shown"), [
    ([], {"thingId": "org.acme:lamp-1", "attributes": {"on": True, "model": "L1"}}),
    (["thingId"], {"thingId": "org.acme:lamp-1"}),
    (["attributes/on", "_revision"], {"attributes": {"on": True}, "_revision": 3}),
    (["attributes(model),_namespace,_modified"], {"attributes": {"model": "L1"}, "_namespace": "org.acme",
                                                   "_modified": "2026-11-29T00:00:00.000Z"}),
])
def test_a_read_shows_the_fields_it_selects(given: list[str], shown: object) -> None:
    document = {"thingId": "org.acme:lamp-1", "attributes": {"on": True, "model": "L1"}}
    selector = http_api.field_selector(given)
    assert http_api.thing_shown(document, selector, "org.acme:lamp-1", 3, "2026-11-29T00:00:00.000Z") == shown
    assert http_api.part_shown(document["attributes"], http_api.field_selector(["on"])) == {"on": True}
    assert http_api.part_shown(7, selector) == 7


def test_a_message_is_a_live_message_with_ten_seconds_by_default_and_its_payload_as_it_says() -> None:
    where = http_api.resource("org.acme:lamp-1", "inbox/messages/ask")
    signal = http_api.signal("POST", where, {}, b'{"q": 1}', "application/json", LIMIT)
    assert signal["topic"] == "org.acme/lamp-1/things/live/messages/ask"
    assert (signal["value"], signal["headers"]["timeout"]) == ({"q": 1}, "10000ms")
    text = http_api.signal("POST", where, {"timeout": "3s"}, "grüß".encode(), "text/plain", LIMIT)
    assert (text["value"], text["headers"]["timeout"]) == ("grüß", "3s")


@pytest.mark.parametrize(("given", "held_ms"), [
    ({}, 60_000),  # the ledger's deadline is 5 minutes; the request is held a minute at most
    ({"timeout": "2s"}, 2_000),
    ({"timeout": "10m"}, 60_000),
    ({"response-required": "false"}, 0),  # no response, no acks: 202 at once
    ({"timeout": "0"}, 0),
    ({"response-required": "false", "requested-acks": "twin-persisted"}, 60_000),  # 202 once they succeed
])
def test_how_long_a_request_is_held(given: dict, held_ms: int) -> None:
    asked = headers.normalize(given, channel="twin", api="http", settings=Settings())
    assert http_api.hold_ms(asked) == held_ms


def test_a_decision_is_answered_with_its_status_body_and_a_created_things_location() -> None:
    where = http_api.resource("org.acme:lamp 1", "attributes/a b")
    created = http_api.decided({"status": 201, "body": 1, "headers": {"correlation-id": "c", "other": "x"}}, where)
    assert created == http_api.HttpAnswer(201, {"correlation-id": "c", "location":
                                                "/api/2/things/org.acme:lamp%201/attributes/a%20b"}, 1)
    assert http_api.decided({"status": 204, "body": None, "headers": None}, where) == http_api.HttpAnswer(204, {})
    assert http_api.accepted("a/b c", still_deciding=True).headers == {
        "correlation-id": "a/b c", "location": "/api/2/answers/a%2Fb%20c"}


@pytest.mark.parametrize(("uri", "header_bytes", "status"), [
    (8_192, 8_192, None), (8_193, 0, 414), (0, 8_193, 431)])
def test_a_requests_head_is_bounded(uri: int, header_bytes: int, status: int | None) -> None:
    if status is None:
        http_api.check_head(uri, header_bytes)
        return
    with pytest.raises(errors.DittoError) as refused:
        http_api.check_head(uri, header_bytes)
    assert refused.value.status == status


def test_an_acknowledgement_link_carries_the_lease_token_and_quotes_what_a_sender_chose() -> None:
    link = http_api.acknowledgement_link("sub/1", "c;1/x", "5.abc")
    assert link == "</api/2/subscribers/sub%2F1/messages/c%3B1%2Fx/acknowledgement;etag=5.abc>; rel=acknowledgement"


def test_an_answer_at_a_link_gets_its_token_and_correlation_id_or_is_refused() -> None:
    ack = b'{"topic": "org.acme/lamp-1/things/twin/acks/a:b", "status": 200, "headers": {}}'
    answer = http_api.answer_at_link(ack, "c-1", "5.abc", LIMIT)
    assert answer["headers"] == {"correlation-id": "c-1", "ack-token": "5.abc"}
    for body, error in ((b"", "json.invalid"), (b"[1]", "json.invalid"),
                        (b'{"topic": "t", "headers": {"correlation-id": "other"}}', "header.invalid")):
        with pytest.raises(errors.DittoError) as refused:
            http_api.answer_at_link(body, "c-1", "5.abc", LIMIT)
        assert refused.value.error == error


@pytest.mark.parametrize(("option", "page"), [
    (None, (25, None)), ("size(200)", (200, None)), ("size(1)", (1, None)),
    ("size(3),cursor(b3JnLmFjbWU6Yg)", (3, "org.acme:b")), (" cursor(b3JnLmFjbWU6Yg) ", (25, "org.acme:b")),
    ("sort(+thingId),size(2)", (2, None)), ("sort( thingId)", (25, None)),
])
def test_a_search_page_is_its_size_and_where_it_starts(option: str | None, page: tuple) -> None:
    assert http_api.search_page(option) == page


@pytest.mark.parametrize("option", ["size(0)", "size(201)", "size(x)", "sort(-thingId)", "sort(+attributes/n)",
                                    "limit(1,2)", "cursor(!!)"])
def test_a_search_option_ditto_has_not_or_we_do_not_take_is_400(option: str) -> None:
    with pytest.raises(errors.DittoError) as refused:
        http_api.search_page(option)
    assert (refused.value.status, refused.value.error) == (400, "thing-search:option.invalid")


def test_a_page_says_where_the_next_starts_only_when_there_is_one() -> None:
    assert http_api.search_answer([1], None) == {"items": [1]}
    assert http_api.search_page(f"cursor({http_api.search_answer([], 'org.acme:ü/1')['cursor']})")[1] == "org.acme:ü/1"
