"""HTTP push targets (issue 41, B.9's HTTP push row) against a real HTTP server the test starts
(the standard library's, in a thread): each target's request as Ditto sends it, and the label its
response issues — the status as it is, the body as the ack's value, 408 when no answer comes in
time, 500 when the request fails; a target issuing ``live-response`` gets the live response from
the endpoint's answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest
from sqlalchemy import Engine, text

from tests.support.broker import ROOT, stop, wait_for
from tests.support.ledger import count, thing_modify
from tests.support.live_signals import live_message
from tests.support.own_postgres import free_port

pytestmark = [pytest.mark.slow]

ANSWERS: dict[str, tuple[int, str, bytes, float]] = {  # path -> status, content type, body, delay
    "/ok": (200, "application/json", b'{"seen": true}', 0.0),
    "/created": (201, "text/plain", b"stored it", 0.0),
    "/refuse": (400, "application/json", b'{"error": "no"}', 0.0),
    "/fail": (500, "text/plain", b"down", 0.0),
    "/slow": (200, "application/json", b"{}", 3.0),  # past the connection's idleTimeout of 1s
    "/answer": (200, "application/json", b'{"answer": 42}', 0.0),  # a live message's answer
}
COMMAND_RESPONSE = (200, "application/vnd.eclipse.ditto+json", json.dumps(  # a live command's, as Ditto Protocol
    {"topic": "org.acme/lamp-1/things/live/commands/modify", "headers": {}, "path": "/attributes/on",
     "status": 204}).encode(), 0.0)


class Endpoint(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", free_port()), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://user:secret@127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers),
                                     "body": json.loads(body) if body else None})
        sent = self.server.requests[-1]["body"] or {}
        command = "/things/live/commands/" in str(sent.get("topic"))
        status, content_type, answer, delay = COMMAND_RESPONSE if command else ANSWERS[self.path]
        time.sleep(delay)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_POST = do_PUT = do_GET = _answer

    def log_message(self, *_: Any) -> None:
        return None


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    server = Endpoint()
    server.thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _connector(database_url: str, config_path: str) -> subprocess.Popen:
    """``ackstore connect http-push --config FILE`` as a subprocess, its log on a pipe."""
    return subprocess.Popen([sys.executable, "-m", "ackstore.cli", "--database-url", database_url, "connect",
                             "http-push", "--config", config_path], cwd=ROOT, env=dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _connection(tmp_path, uri: str, targets: list[dict[str, Any]], **specific: Any):
    path = tmp_path / "push.json"
    path.write_text(json.dumps({"id": "push", "connectionType": "http-push", "uri": uri, "targets": targets,
                                "specificConfig": {"idleTimeout": "1s", "parallelism": "4", **specific}}))
    return str(path)


def _twin_target(address: str, label: str) -> dict[str, Any]:
    return {"address": address, "topics": ["_/_/things/twin/events"], "issuedAcknowledgementLabel": f"push:{label}"}


ISSUED = {  # label -> target address, the status and value its ack gets
    "ok": ("POST:/ok", 200, {"seen": True}),
    "created": ("PUT:/created", 201, "stored it"),
    "refuse": ("POST:/refuse", 400, {"error": "no"}),
    "fail": ("POST:/fail", 500, "down"),
    "slow": ("POST:/slow", 408, None),
}


@pytest.mark.spark
def test_each_target_issues_its_label_from_the_endpoint_response(
    tmp_path, engine: Engine, database_url: str, store, run_pipeline, endpoint: Endpoint
) -> None:
    targets = [_twin_target(address, label) for label, (address, _, _) in ISSUED.items()]
    process = _connector(database_url, _connection(tmp_path, endpoint.url, targets))
    try:
        wait_for(lambda: count(engine, "SELECT count(*) FROM subscribers WHERE id LIKE 'push/target-%'") == len(ISSUED),
                 what="the targets declared")
        requested = [f"push:{label}" for label in ISSUED]
        assert store.submit(thing_modify(1, requested_acks=requested))["status"] == 202
        run_pipeline("apply_twin")
        wait_for(lambda: count(engine, "SELECT count(*) FROM acks WHERE label LIKE 'push:%'") == len(ISSUED),
                 what="every target's ack")
    finally:
        code, log = stop(process)
    assert code == 0, log
    with engine.connect() as conn:
        acks = {row.label: (row.status, row.payload) for row in conn.execute(text(
            "SELECT label, status, payload FROM acks WHERE label LIKE 'push:%'"))}
    assert acks == {f"push:{label}": (status, value) for label, (_, status, value) in ISSUED.items()}
    sent = {r["path"]: r for r in endpoint.requests}
    assert {path: r["method"] for path, r in sent.items()} == {"/ok": "POST", "/created": "PUT", "/refuse": "POST",
                                                              "/fail": "POST", "/slow": "POST"}
    ok = sent["/ok"]
    assert ok["body"]["topic"] == "org.acme/t1/things/twin/events/created"
    assert ok["headers"]["Content-Type"] == "application/vnd.eclipse.ditto+json"
    assert ok["headers"]["correlation-id"] == "c-1" and ok["headers"]["Authorization"] == "Basic dXNlcjpzZWNyZXQ="
    assert "secret" not in log, "the endpoint's password is never logged"


@pytest.mark.spark
def test_a_refused_connection_issues_500(tmp_path, engine: Engine, database_url: str, store, run_pipeline) -> None:
    """Nothing listens: the request fails, a generic publish failure (B.9: 500)."""
    uri = f"http://127.0.0.1:{free_port()}"
    process = _connector(database_url, _connection(tmp_path, uri, [_twin_target("POST:/events", "sent")]))
    try:
        wait_for(lambda: count(engine, "SELECT count(*) FROM subscribers WHERE id = 'push/target-0'"),
                 what="the target declared")
        assert store.submit(thing_modify(2, requested_acks=["push:sent"]))["status"] == 202
        run_pipeline("apply_twin")
        wait_for(lambda: count(engine, "SELECT count(*) FROM acks WHERE label = 'push:sent'"), what="the ack")
    finally:
        code, log = stop(process)
    assert code == 0, log
    assert count(engine, "SELECT status FROM acks WHERE label = 'push:sent'") == 500
    assert "failed" in log


def test_a_target_issuing_live_response_takes_the_endpoint_response_as_the_live_response(
    tmp_path, engine: Engine, database_url: str, store, endpoint: Endpoint
) -> None:
    """Ditto PR #809: the response to a pushed live message is its response (built from the
    status and body); the response to a pushed live command is the command response its body is."""
    targets = [{"address": "POST:/answer", "topics": ["_/_/things/live/messages", "_/_/things/live/commands"],
                "issuedAcknowledgementLabel": "live-response"}]
    process = _connector(database_url, _connection(tmp_path, endpoint.url, targets))
    try:
        wait_for(lambda: count(engine, "SELECT count(*) FROM subscribers WHERE id = 'push/target-0'"),
                 what="the target declared")
        assert store.submit(live_message("ask-1", timeout="30s"))["status"] == 202
        command = {"topic": "org.acme/lamp-1/things/live/commands/modify", "path": "/attributes/on", "value": True,
                   "headers": {"correlation-id": "cmd-1", "timeout": "30s"}}
        assert store.submit(command)["status"] == 202
        answered = wait_for(lambda: count(engine, "SELECT count(*) FROM acks WHERE label = 'live-response'") == 2,
                            what="both responses", timeout=60, raises=False)
    finally:
        code, log = stop(process)
    assert code == 0 and answered, log[-3000:]
    with engine.connect() as conn:
        responses = conn.execute(text(
            "SELECT s.correlation_id, a.status, a.payload, a.issuer, a.disposition FROM acks a "
            "JOIN signals s ON s.id = a.signal_id WHERE a.label = 'live-response' ORDER BY 1")).all()
    assert [tuple(r) for r in responses] == [("ask-1", 200, {"answer": 42}, "push/target-0", "counted"),
                                             ("cmd-1", 204, None, "push/target-0", "counted")]
    assert sorted(r["body"]["path"] for r in endpoint.requests) == ["/attributes/on", "/inbox/messages/ask"]


@pytest.mark.parametrize(("document", "problem"), [
    ({"targets": [{"address": "POST:/e", "topics": ["_/_/things/twin/events"]}], "sources": [{"addresses": ["q"]}]},
     "has no sources"),
    ({"targets": [{"address": "SEND:/e", "topics": ["_/_/things/twin/events"]}]}, "names no HTTP method"),
    ({"targets": [{"address": "POST:e", "topics": ["_/_/things/twin/events"]}]}, "starts with /"),
    ({"targets": [{"address": "POST:/{{ thing:id }}", "topics": ["_/_/things/twin/events"]}]}, "no placeholders"),
    ({"targets": [{"address": "POST:/e", "topics": ["_/_/things/twin/events"], "headerMapping": {}}]},
     "target setting 'headerMapping'"),
    ({"targets": [{"address": "POST:/e", "topics": ["_/_/things/twin/events"],
                   "issuedAcknowledgementLabel": "live-response"}]}, "must send live signals only"),
    ({"targets": [{"address": "POST:/e", "topics": ["_/_/things/twin/events"]}],
      "specificConfig": {"omitRequestBody": ["GET"]}}, "'omitRequestBody' is not supported"),
    ({"targets": [{"address": "POST:/e", "topics": ["_/_/things/twin/events"]}],
      "specificConfig": {"parallelism": "0"}}, "from 1 to 64"),
    ({"targets": [{"address": "POST:/e", "topics": ["_/_/things/twin/events"]}],
      "specificConfig": {"idleTimeout": "forever"}}, "100ms to 10m"),
])
def test_an_invalid_http_push_connection_is_a_400_naming_what(document: dict[str, Any], problem: str) -> None:
    from ackstore.connectors import config
    from ackstore.rules.errors import DittoError

    with pytest.raises(DittoError) as error:
        config.parse({"id": "push", "connectionType": "http-push", "uri": "http://127.0.0.1:1", **document})
    assert error.value.status == 400 and problem in error.value.message
