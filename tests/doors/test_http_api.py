"""Ditto's HTTP API 2 over the ledger (issue 51), spoken to as a client would over a real server
(``ackstore serve``): writes held until the ledger decided them, answered in Ditto's shapes; a
hold that ends first answered 202 with where the answer will be; reads of the twins; every
refusal Ditto's error JSON, the ledger unchanged by it."""

from __future__ import annotations

import concurrent.futures
import json
import socket
import threading
import time
from typing import Any, Iterator

import httpx
import pytest
from sqlalchemy import Engine, text

from ackstore.ledger.store import AckStore
from tests.support.door import DoorProcess, door, running_door  # noqa: F401 — a fixture
from tests.support.ledger import snapshot
from tests.support.logins import as_login, logins, two_logins  # noqa: F401 — fixtures
from tests.support.broker import wait_for

pytestmark = [pytest.mark.spark]

THING = "org.acme:lamp-1"


@pytest.fixture
def client(door: DoorProcess, engine: Engine, logins) -> Iterator[httpx.Client]:  # noqa: F811
    """A client acting as an ingest login (the trust server takes any password)."""
    with door.client(logins["ackstore_ingest"]) as http:
        yield http


def _count(engine: Engine, sql: str = "SELECT count(*) FROM signals") -> int:
    with engine.connect() as conn:
        return conn.execute(text(sql)).scalar_one()


def _held(client: httpx.Client, method: str, path: str, engine: Engine, run_pipeline, **request: Any) -> httpx.Response:
    """Send a request that is held for its decision, run the pipeline meanwhile, its answer."""
    before = _count(engine)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        answer = pool.submit(client.request, method, path, **request)
        wait_for(lambda: answer.done() or _count(engine) > before, what="the request stored")
        assert not answer.done(), answer.result()  # held: the ledger has not decided it
        run_pipeline()
        return answer.result(timeout=120)


def test_a_thing_created_over_http_is_answered_by_the_ledgers_decision(client, engine, run_pipeline) -> None:
    answer = _held(client, "PUT", f"/api/2/things/{THING}", engine, run_pipeline,
                   json={"attributes": {"on": True}}, headers={"correlation-id": "create-1"})
    assert answer.status_code == 201, answer.text
    assert answer.json() == {"thingId": THING, "attributes": {"on": True}}
    assert answer.headers["location"] == f"/api/2/things/{THING}"
    assert answer.headers["correlation-id"] == "create-1"
    read = client.get(f"/api/2/things/{THING}")
    assert (read.status_code, read.json(), read.headers["etag"]) == (200, {"thingId": THING, "attributes": {"on": True}},
                                                                      '"rev:1"')
    assert client.get(f"/api/2/things/{THING}", headers={"if-none-match": '"rev:1"'}).status_code == 304
    assert client.get(f"/api/2/things/{THING}/attributes/on").json() is True
    modified = _held(client, "PUT", f"/api/2/things/{THING}/attributes/on", engine, run_pipeline, json=False)
    assert (modified.status_code, modified.content) == (204, b"")
    assert client.get(f"/api/2/things/{THING}").headers["etag"] == '"rev:2"'


def test_acks_asked_over_http_are_aggregated_as_ditto_answers_them(client, engine, run_pipeline) -> None:
    answer = _held(client, "PUT", "/api/2/things/org.acme:lamp-2?requested-acks=twin-persisted,search-persisted",
                   engine, run_pipeline, json={"attributes": {"n": 2}}, headers={"timeout": "60s"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == {"twin-persisted", "search-persisted"}
    assert body["twin-persisted"]["status"] == 201
    assert body["twin-persisted"]["headers"]["location"] == "/api/2/things/org.acme:lamp-2"
    assert body["search-persisted"]["status"] == 204
    found = client.get("/api/2/search/things", params={"filter": "eq(attributes/n,2)", "namespaces": "org.acme"})
    assert found.json() == {"items": [{"thingId": "org.acme:lamp-2", "attributes": {"n": 2}}]}


def test_a_hold_that_ends_before_the_decision_is_answered_202_with_where_the_answer_will_be(
        client, engine, run_pipeline) -> None:
    """A custom label nobody issues, a 1 s timeout: the hold ends with it, before any pass ran; the
    decision the pass takes later is read at the Location — 424, both labels timed out (the thing
    was applied after the deadline, so its twin-persisted came too late: A.2.1)."""
    answer = client.put(f"/api/2/things/{THING}", json={}, headers={
        "requested-acks": "twin-persisted,app:done", "timeout": "1s", "correlation-id": "late-1"})
    assert answer.status_code == 202 and answer.content == b""
    assert answer.headers["location"] == "/api/2/answers/late-1"
    assert client.get("/api/2/answers/late-1").status_code == 202  # not decided yet
    unnamed = client.put(f"/api/2/things/{THING}", json={}, headers={"requested-acks": "app:done", "timeout": "1s"})
    assert unnamed.status_code == 202  # no correlation-id given: the door's, its answer the login's all the same
    assert client.get(unnamed.headers["location"]).status_code == 202
    run_pipeline()
    assert client.get(unnamed.headers["location"]).status_code == 408  # its one label timed out
    decided = client.get("/api/2/answers/late-1")
    assert decided.status_code == 424, decided.text
    assert decided.json()["twin-persisted"]["status"] == 408
    assert decided.json()["app:done"]["status"] == 408
    assert decided.json()["app:done"]["payload"]["error"] == "acknowledgement:request.timeout"
    assert client.get("/api/2/answers/never-sent").status_code == 404


def test_what_asks_for_nothing_is_answered_202_at_once(client, engine) -> None:
    for headers in ({"response-required": "false"}, {"timeout": "0"}):
        answer = client.put(f"/api/2/things/{THING}", json={}, headers=headers)
        assert (answer.status_code, answer.content, "location" in answer.headers) == (202, b"", False)
    assert _count(engine) == 2


def test_a_retry_with_the_same_correlation_id_stores_nothing_and_gets_the_decision(client, engine, run_pipeline) -> None:
    first = _held(client, "PUT", f"/api/2/things/{THING}", engine, run_pipeline, json={},
                  headers={"correlation-id": "retry-1"})
    again = client.put(f"/api/2/things/{THING}", json={}, headers={"correlation-id": "retry-1"})
    assert (first.status_code, again.status_code, again.json()) == (201, 201, first.json())
    assert _count(engine) == 1


def test_merge_delete_and_a_message_are_the_commands_ditto_maps_them_to(client, engine, run_pipeline) -> None:
    _held(client, "PUT", f"/api/2/things/{THING}", engine, run_pipeline, json={"attributes": {"a": 1}})
    merged = _held(client, "PATCH", f"/api/2/things/{THING}", engine, run_pipeline,
                   content=json.dumps({"attributes": {"b": 2}}), headers={"content-type": "application/merge-patch+json"})
    assert merged.status_code == 204, merged.text
    assert client.get(f"/api/2/things/{THING}/attributes").json() == {"a": 1, "b": 2}
    deleted = _held(client, "DELETE", f"/api/2/things/{THING}/attributes/a", engine, run_pipeline)
    assert deleted.status_code == 204
    assert client.get(f"/api/2/things/{THING}/attributes/a").json()["error"] == "things:attribute.notfound"
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT kind, action, path FROM signals ORDER BY id")).all()
    assert [tuple(row) for row in stored] == [("twin-command", "modify", "/"), ("twin-command", "merge", "/"),
                                              ("twin-command", "delete", "/attributes/a")]


@pytest.mark.parametrize(("method", "path", "sent", "status", "error"), [
    ("PUT", "/api/2/things/no-namespace", {"json": {}}, 400, "things:id.invalid"),
    ("PUT", f"/api/2/things/{THING}/nothing", {"json": {}}, 400, "things.protocol.adapter:unknown.path"),
    ("PUT", f"/api/2/things/{THING}", {"content": b"{not json"}, 400, "json.invalid"),
    ("PUT", f"/api/2/things/{THING}", {"content": b""}, 400, "json.invalid"),
    ("PUT", f"/api/2/things/{THING}", {"content": b"[" * 200 + b"]" * 200}, 400, "json.invalid"),
    ("PUT", f"/api/2/things/{THING}", {"content": b'{"a": "' + b"x" * 2_000_000 + b'"}'}, 413, "message.toolarge"),
    ("PATCH", f"/api/2/things/{THING}", {"json": {}}, 415, "mediatype.unsupported"),
    ("PUT", f"/api/2/things/{THING}", {"json": {}, "headers": {"timeout": "0", "response-required": "true"}},
     400, "header.invalid"),
    ("PUT", f"/api/2/things/{THING}", {"json": {}, "headers": {"timeout": "soon"}}, 400, "timeout.invalid"),
    ("PUT", f"/api/2/things/{THING}", {"json": {}, "headers": {"requested-acks": "not a label!"}}, 400,
     "header.invalid"),
    ("GET", f"/api/2/things/{THING}/inbox/messages/ask", {}, 405, "http.method.notallowed"),
    ("POST", f"/api/2/things/{THING}", {"json": {}}, 405, "http.method.notallowed"),
    ("GET", "/api/2/nowhere", {}, 404, "http.notfound"),
    ("GET", "/api/2/search/things?filter=eq(attributes/a", {}, 400, "rql.expression.invalid"),
    ("GET", f"/api/2/things/{THING}?fields=attributes(on", {}, 400, "json.fieldselector.invalid"),
    ("GET", "/api/2/things/org.acme:nothing/policyId", {}, 404, "things:thing.notfound"),
    ("GET", "/api/2/things/org.acme:nothing/attributes/a", {}, 404, "things:thing.notfound"),
    ("GET", "/api/2/things", {}, 400, "things:things.ids.missing"),
    ("GET", "/api/2/things?ids=org.acme:a,no-namespace", {}, 400, "things:id.invalid"),
    ("PUT", "/api/2/things/bad%20namespace:x", {"json": {}}, 400, "things:id.invalid"),
    ("POST", "/api/2/things?namespace=bad%20namespace", {"json": {}}, 400, "things:id.invalid"),
    ("GET", "/api/2/search/things?option=sort(%2BthingId,-attributes/on)", {}, 400, "thing-search:option.invalid"),
    ("GET", "/api/2/search/things?fields=,", {}, 400, "json.fieldselector.invalid"),
    ("GET", "/api/2/search/things?option=sort(-thingId)", {}, 400, "thing-search:option.invalid"),
    ("POST", "/api/2/search/things", {"json": {"filter": "exists(thingId)"}}, 415, "mediatype.unsupported"),
    ("POST", "/api/2/search/things/count", {"data": {"filter": "eq(a"}}, 400, "rql.expression.invalid"),
    ("POST", "/api/2/things?namespace=org.acme", {"json": {"thingId": "org.acme:x"}}, 400, "things:id.notsettable"),
    ("POST", f"/api/2/things/{THING}/attributes", {"json": {}}, 405, "http.method.notallowed"),
    ("PUT", f"/api/2/things/{THING}/attributes/" + "a" * 9_000, {"json": 1}, 414, "http.uri.toolong"),
    ("PUT", f"/api/2/things/{THING}", {"json": {}, "headers": {"x-filler": "y" * 9_000}}, 431, "headers.too.large"),
])
def test_a_refused_request_gets_dittos_error_and_changes_nothing(
        client, engine, method: str, path: str, sent: dict, status: int, error: str) -> None:
    before = snapshot(engine)
    answer = client.request(method, path, **sent)
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert (body["status"], body["error"]) == (status, error) and body["message"] and body["description"]
    assert snapshot(engine) == before


@pytest.mark.parametrize("authorization", [None, "Bearer abc", "Basic !!!", "Basic " + "bm9wYXNzd29yZA==",
                                           "Basic " + "dXNlcjo="])  # no colon; an empty password
def test_a_request_without_usable_credentials_is_401_and_stores_nothing(door, engine, authorization) -> None:
    headers = {"authorization": authorization} if authorization else {}
    answer = httpx.put(f"{door.url}/api/2/things/{THING}", json={}, headers=headers)
    assert answer.status_code == 401
    assert answer.json()["error"] == "gateway:authentication.failed"
    assert _count(engine) == 0


def test_a_client_trickling_its_body_is_answered_408_and_holds_nothing(door, engine) -> None:
    """Headers, then one byte of a 100-byte body, then silence: the door answers 408 after its
    read bound (http_api.BODY_READ_S), stores nothing, and serves others meanwhile."""
    from ackstore.rules.http_api import BODY_READ_S

    host, port = door.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=BODY_READ_S + 30) as slow:
        slow.sendall(f"PUT /api/2/things/{THING} HTTP/1.1\r\nHost: x\r\nAuthorization: Basic cG9zdGdyZXM6eA==\r\n"
                     "Content-Length: 100\r\n\r\n{".encode())
        started = time.monotonic()
        assert httpx.get(f"{door.url}/api/2/whoami", auth=("postgres", "x")).status_code == 200  # others served
        answer = _until_closed_or_answered(slow)
        waited = time.monotonic() - started
    assert answer.startswith("HTTP/1.1 408"), answer
    assert '"error":"http.request.timeout"' in answer
    assert BODY_READ_S - 5 <= waited <= BODY_READ_S + 20
    assert _count(engine) == 0


@pytest.mark.parametrize("head", [
    "X-Filler: " + "y" * 20_000 + "\r\n",  # one header past the bound
    "".join(f"X-Filler-{n}: {'y' * 100}\r\n" for n in range(200)),  # many headers past it together
])
def test_a_head_past_16_kib_is_400_and_closed_unbuffered(door, engine, head: str) -> None:
    """Past serve.MAX_HEAD_BYTES the head is refused whole (a plain 400) and the connection closed,
    whether its end came or not: the server keeps no header of any size."""
    host, port = door.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as client:
        client.sendall(f"PUT /api/2/things/{THING} HTTP/1.1\r\nHost: x\r\n{head}".encode())  # never ended
        answer = _until_closed_or_answered(client)
        assert answer.startswith("HTTP/1.1 400"), answer[:200]
        assert client.recv(65536) == b""  # closed
    assert httpx.get(f"{door.url}/api/2/whoami", auth=("postgres", "x")).status_code == 200  # others served
    assert _count(engine) == 0


def test_a_header_sent_forever_is_cut_off_at_the_bound(door) -> None:
    """One header value that never ends, sent in 4 KiB pieces: the door closes the connection
    within a few pieces past the bound instead of keeping what it is sent."""
    host, port = door.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as client:
        client.sendall(f"PUT /api/2/things/{THING} HTTP/1.1\r\nHost: x\r\nX-Endless: ".encode())
        sent = 0
        with pytest.raises(OSError):  # reset or broken pipe once the door closed
            while sent < 10_000_000:
                client.sendall(b"y" * 4096)
                sent += 4096
                time.sleep(0.001)
    assert sent < 2_000_000, sent


def _link(answer: httpx.Response) -> str:
    link = answer.headers["link"]
    assert link.endswith(">; rel=acknowledgement"), link
    return link[1:link.index(">")]


def test_the_rest_pull_hands_out_with_an_acknowledgement_link_that_counts_once(
        client, engine, database_url, logins, run_pipeline) -> None:  # noqa: F811
    """A subscriber of the login pulls the twin event over HTTP and posts its ack to the message's
    link: 204, 204 again for a repeat (nothing stored twice); after a second hand-out the first
    link is 412; the held PUT is answered by the decision the ack made (200, both labels)."""
    with AckStore.connect(as_login(database_url, logins["ackstore_ingest"])) as own:
        assert own.declare("checker", ["checker:done"], channels=["twin"]) == {"status": 204}
    consumer = "/api/2/subscribers/checker/messages"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        held = pool.submit(client.put, f"/api/2/things/{THING}", json={}, headers={
            "requested-acks": "twin-persisted,checker:done", "timeout": "60s", "correlation-id": "pulled-1"})
        wait_for(lambda: _count(engine) == 1, what="the PUT stored")
        assert client.post(consumer).status_code == 204  # nothing to hand out before the twin changed
        run_pipeline()  # applied: the event is there; the request waits for checker:done
        first = client.post(consumer, params={"lease": "1s"})
        assert first.status_code == 200, first.text
        assert first.json()["topic"] == "org.acme/lamp-1/things/twin/events/created"
        assert first.headers["correlation-id"] == "pulled-1"
        time.sleep(1.5)  # the lease ran out: handed out again, with a new token
        second = client.post(consumer)
        assert second.status_code == 200 and _link(second) != _link(first)
        ack = {"topic": "org.acme/lamp-1/things/twin/acks/checker:done", "status": 200, "value": "seen",
               "headers": {}}
        stale = client.post(_link(first), json=ack)
        assert (stale.status_code, stale.json()["error"]) == (412, "acknowledgement:lease.superseded")
        assert client.post(_link(second), json=ack).status_code == 204
        assert client.post(_link(second), json=ack).status_code == 204  # a repeat: done already
        assert _count(engine, "SELECT count(*) FROM acks") == 1
        run_pipeline()
        answer = held.result(timeout=120)
    assert answer.status_code == 200, answer.text
    assert answer.json()["checker:done"] == {"status": 200, "payload": "seen",
                                             "headers": {"correlation-id": "pulled-1"}}
    wrong = client.post(_link(second), json={**ack, "headers": {"correlation-id": "another"}})
    assert (wrong.status_code, wrong.json()["error"]) == (400, "header.invalid")


def test_the_doors_metrics_are_the_documented_ones_and_count_what_it_answered(door, client, engine) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from tests.support.metrics_doc import documented

    def scraped() -> dict[str, dict[tuple, float]]:
        families = text_string_to_metric_families(httpx.get(f"{door.url}/metrics").text)
        return {family.name: {tuple(sorted(s.labels.items())): s.value for s in family.samples
                              if not s.name.endswith("_created")} for family in families}

    before = scraped()
    assert client.put(f"/api/2/things/{THING}", json={}, headers={"response-required": "false"}).status_code == 202
    assert client.get("/api/2/nowhere").status_code == 404
    after = scraped()
    served = {family: kind for family, kind in _kinds(httpx.get(f"{door.url}/metrics").text).items()
              if not family.endswith("_created")}  # prometheus-client's, beside each counter
    assert documented("The HTTP API's") == served
    requests = after["ackstore_http_requests"]
    old = before.get("ackstore_http_requests", {})
    assert requests[(("route", "things"), ("status", "202"))] - old.get((("route", "things"), ("status", "202")), 0) == 1
    assert requests[(("route", "other"), ("status", "404"))] - old.get((("route", "other"), ("status", "404")), 0) == 1
    assert after["ackstore_http_held_requests"] == {(): 0.0}


def _kinds(exposition: str) -> dict[str, str]:
    """Each family's type, as the exposition's # TYPE lines say it."""
    return dict(line.split()[2:4] for line in exposition.splitlines() if line.startswith("# TYPE"))


class _Stream:
    """An SSE stream read in a thread: its events (id, data) as they come."""

    def __init__(self, client: httpx.Client, **headers: str) -> None:
        self.events: list[tuple[int, Any]] = []
        self._context = client.stream("GET", "/api/2/things", headers={"accept": "text/event-stream", **headers},
                                      params={"filter": "eq(attributes/on,false)", "namespaces": "org.acme"})
        response = self._context.__enter__()
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        self._thread = threading.Thread(target=self._read, args=(response,), daemon=True)
        self._thread.start()

    def _read(self, response: httpx.Response) -> None:
        event: dict[str, str] = {}
        try:
            for line in response.iter_lines():
                if not line:
                    if "data" in event:
                        self.events.append((int(event["id"]), json.loads(event["data"])))
                    event = {}
                elif not line.startswith(":"):
                    field, _, value = line.partition(": ")
                    event[field] = value
        except httpx.HTTPError:
            pass  # closed by the test

    def close(self) -> None:
        self._context.__exit__(None, None, None)


def test_server_sent_events_stream_the_filtered_changes_and_resume_from_last_event_id(
        door, client, engine, run_pipeline) -> None:
    stream, beside = _Stream(client), _Stream(client)  # two streams of one login: one tail of the log read for both
    try:
        for n, on in ((1, True), (2, False)):
            client.put(f"/api/2/things/org.acme:sse-{n}", json={"attributes": {"on": on}},
                       headers={"response-required": "false"})
        client.put("/api/2/things/org.other:sse-3", json={"attributes": {"on": False}},
                   headers={"response-required": "false"})  # another namespace
        run_pipeline("apply_twin")
        wait_for(lambda: stream.events and beside.events, what="the matching event streamed")
        time.sleep(2)  # a read of the log later: nothing else came
        assert [data for _, data in stream.events] == [{"thingId": "org.acme:sse-2", "attributes": {"on": False}}]
        assert beside.events == stream.events
    finally:
        stream.close()
        beside.close()
    (last, _), = stream.events
    client.put("/api/2/things/org.acme:sse-4", json={"attributes": {"on": False}}, headers={"response-required": "false"})
    run_pipeline("apply_twin")  # applied while no stream was open
    resumed = _Stream(client, **{"last-event-id": str(last)})
    try:
        wait_for(lambda: resumed.events, what="the event missed while away")
        time.sleep(2)
        assert [data["thingId"] for _, data in resumed.events] == ["org.acme:sse-4"]
        assert resumed.events[0][0] > last
    finally:
        resumed.close()
    bad = client.get("/api/2/things", headers={"accept": "text/event-stream"}, params={"filter": "eq(attributes"})
    assert (bad.status_code, bad.json()["error"]) == (400, "rql.expression.invalid")
    listed = client.get("/api/2/things", params={"ids": "org.acme:sse-4,org.acme:none"})
    assert listed.json() == [{"thingId": "org.acme:sse-4", "attributes": {"on": False}}]


def test_a_stopping_door_answers_its_held_requests_at_once_and_loses_nothing(database_url, engine) -> None:
    """SIGTERM while a request is held (timeout a minute): it is answered 202 with the Location of
    its answer within seconds, the door exits 0, the request stays stored for the pipeline."""
    with running_door(database_url) as own:
        with own.client("postgres") as http, concurrent.futures.ThreadPoolExecutor(1) as pool:
            held = pool.submit(http.put, f"/api/2/things/{THING}", json={},
                               headers={"timeout": "60s", "correlation-id": "stopped-1"})
            wait_for(lambda: _count(engine) == 1, what="the request stored")
            time.sleep(0.5)
            assert not held.done()
            stopped = time.monotonic()
            own.process.terminate()
            answer = held.result(timeout=30)
            assert own.process.wait(30) == 0
    assert time.monotonic() - stopped < 15
    assert (answer.status_code, answer.headers["location"]) == (202, "/api/2/answers/stopped-1")
    assert _count(engine) == 1


def test_a_correlation_id_is_its_logins_another_login_gets_409_and_never_the_answer(
        door, engine, two_logins) -> None:  # noqa: F811
    alice, bob = (door.client(login) for login in two_logins)
    with alice, bob:
        sent = {"json": {}, "headers": {"correlation-id": "shared-1", "response-required": "false"}}
        assert alice.put(f"/api/2/things/{THING}", **sent).status_code == 202
        taken = bob.put(f"/api/2/things/{THING}", **sent)
        assert (taken.status_code, taken.json()["error"]) == (409, "acknowledgement:request.duplicate.correlation-id")
        assert alice.put(f"/api/2/things/{THING}", **sent).status_code == 202  # alice's retry: a retransmission
        assert _count(engine) == 1
        assert bob.get("/api/2/answers/shared-1").status_code == 404
        assert alice.get("/api/2/answers/shared-1").status_code == 202  # hers, undecided


def test_a_search_is_answered_a_page_at_a_time_with_a_cursor_to_the_next(client, engine, run_pipeline) -> None:
    for n in range(3):
        client.put(f"/api/2/things/org.acme:paged-{n}", json={"attributes": {"n": n}},
                   headers={"response-required": "false"})
    run_pipeline()
    first = client.get("/api/2/search/things", params={"filter": "exists(attributes/n)", "option": "size(2)"}).json()
    assert [thing["thingId"] for thing in first["items"]] == ["org.acme:paged-0", "org.acme:paged-1"]
    rest = client.get("/api/2/search/things", params={"filter": "exists(attributes/n)",
                                                      "option": f"size(2),cursor({first['cursor']})"}).json()
    assert rest == {"items": [{"thingId": "org.acme:paged-2", "attributes": {"n": 2}}]}  # the last page: no cursor
    refused = client.get("/api/2/search/things", params={"option": "sort(-thingId)"})
    assert (refused.status_code, refused.json()["error"]) == (400, "thing-search:option.invalid")


def _until_closed_or_answered(connection: socket.socket) -> str:
    """What the server sent, up to its JSON body's end or the connection's close (a response may
    come in more than one segment)."""
    received = b""
    while not received.rstrip().endswith(b"}"):
        chunk = connection.recv(65536)
        if not chunk:
            break
        received += chunk
    return received.decode()


def test_reads_and_searches_show_the_fields_they_select_and_count_what_matches(client, engine, run_pipeline) -> None:
    """Ditto's ``fields`` on a read, a list and a search (GET, and POST as a form), its computed
    ``_revision`` / ``_namespace`` / ``_modified``; a read's ``condition``; the search's count."""
    for n in range(3):
        client.put(f"/api/2/things/org.acme:f-{n}", json={"attributes": {"n": n, "model": f"M{n}"},
                                                          "features": {"lamp": {"properties": {"on": n > 0}}}},
                   headers={"response-required": "false"})
    run_pipeline()
    read = client.get("/api/2/things/org.acme:f-1", params={"fields": "attributes(model),_revision,_namespace"})
    assert read.json() == {"attributes": {"model": "M1"}, "_revision": 1, "_namespace": "org.acme"}
    assert read.headers["etag"] == '"rev:1"'
    modified = client.get("/api/2/things/org.acme:f-1", params={"fields": "_modified"}).json()["_modified"]
    assert modified.endswith("Z") and modified[:4].isdigit()
    part = client.get("/api/2/things/org.acme:f-1/features", params=[("fields", "lamp/properties/on")])
    assert part.json() == {"lamp": {"properties": {"on": True}}}
    assert client.get("/api/2/things/org.acme:f-1", params=[("fields", "thingId"), ("fields", "attributes/n")]).json() \
        == {"thingId": "org.acme:f-1", "attributes": {"n": 1}}
    listed = client.get("/api/2/things", params={"ids": "org.acme:f-2,org.acme:f-0,org.acme:none", "fields": "thingId"})
    assert listed.json() == [{"thingId": "org.acme:f-2"}, {"thingId": "org.acme:f-0"}]
    held = client.get("/api/2/things/org.acme:f-1/attributes", params={"condition": "eq(attributes/n,1)"})
    assert held.json() == {"n": 1, "model": "M1"}
    failed = client.get("/api/2/things/org.acme:f-1", headers={"condition": "eq(attributes/n,2)"})
    assert (failed.status_code, failed.json()["error"]) == (412, "things:condition.failed")
    mismatched = client.get("/api/2/things/org.acme:f-1", headers={"if-match": '"rev:9"'})
    assert (mismatched.status_code, mismatched.json()["error"]) == (412, "things:precondition.failed")
    assert client.get("/api/2/things/org.acme:f-1", headers={"if-match": '"rev:1"'}).status_code == 200
    no_policy = client.get("/api/2/things/org.acme:f-1/policyId")
    assert (no_policy.status_code, no_policy.json()["error"]) == (404, "things:policyid.notfound")

    matching = {"filter": "eq(features/lamp/properties/on,true)", "namespaces": "org.acme", "fields": "thingId"}
    expected = {"items": [{"thingId": "org.acme:f-1"}, {"thingId": "org.acme:f-2"}]}
    assert client.get("/api/2/search/things", params={**matching, "option": "sort(+thingId)"}).json() == expected
    assert client.post("/api/2/search/things", data=matching).json() == expected
    assert client.post("/api/2/search/things?fields=attributes/n", data={"filter": matching["filter"]}).json() == {
        "items": [{"attributes": {"n": 1}}, {"attributes": {"n": 2}}]}
    counted = client.get("/api/2/search/things/count", params={"filter": matching["filter"]})
    assert (counted.status_code, counted.json()) == (200, 2)
    assert client.post("/api/2/search/things/count", data={"namespaces": "org.other"}).json() == 0
    assert client.get("/api/2/search/things/count").json() == 3


def test_post_things_creates_a_thing_of_a_generated_id_once_for_a_retry(client, engine, run_pipeline) -> None:
    created = _held(client, "POST", "/api/2/things?namespace=org.acme", engine, run_pipeline,
                    json={"attributes": {"made": True}}, headers={"correlation-id": "made-1"})
    assert created.status_code == 201, created.text
    thing_id = created.json()["thingId"]
    assert thing_id.startswith("org.acme:") and created.json()["attributes"] == {"made": True}
    assert created.headers["location"] == f"/api/2/things/{thing_id}"
    again = client.post("/api/2/things?namespace=org.acme", json={"attributes": {"made": True}},
                        headers={"correlation-id": "made-1"})
    assert (again.status_code, again.json()) == (201, created.json())
    plain = client.post("/api/2/things", json={}, headers={"response-required": "false"})
    assert plain.status_code == 202
    run_pipeline()
    assert client.get("/api/2/search/things/count", params={"namespaces": "org.eclipse.ditto"}).json() == 1
    assert _count(engine) == 2
