"""A Ditto application on Eclipse Ditto's own JavaScript client (npm
``@eclipse-ditto/ditto-javascript-client-node``, tests/support/ditto_client/) pointed at
``ackstore serve``: it creates and modifies a thing, each write held until the pipeline decided
it, reads and searches the twin, sends a live message a subscriber of the ledger answers, and asks
for a thing that does not exist — asserting what the client itself surfaces; and the same client
over Ditto's WebSocket (tests/support/ditto_client/application-ws.js)."""

from __future__ import annotations

import json
import subprocess
import threading
from typing import Any

import pytest
from sqlalchemy import Engine, text

from ackstore.ledger.store import AckStore
from tests.support.broker import wait_for
from tests.support.door import DoorProcess, door  # noqa: F401 — a fixture
from tests.support.logins import as_login, logins  # noqa: F401 — a fixture
from tests.support.paths import ROOT

pytestmark = [pytest.mark.spark]

CLIENT = ROOT / "tests" / "support" / "ditto_client"
THING = "org.acme:js-1"
WS_THING = "org.acme:js-ws-1"


class Application:
    """The client's application as a process; its steps' lines as they come."""

    def __init__(self, door: DoorProcess, login: str, script: str = "application.js") -> None:
        domain = door.url.removeprefix("http://")
        self.process = subprocess.Popen(["node", script, domain, login, "any password"], cwd=CLIENT,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.steps: dict[str, Any] = {}
        self.pushed: list[dict[str, Any]] = []  # what the client was pushed, in order
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.output.append(line)
            if line.startswith("{"):
                answer = json.loads(line)
                name = answer.pop("step")
                if name == "ws-pushed":
                    self.pushed.append(answer)
                else:
                    self.steps[name] = answer

    def step(self, name: str) -> dict[str, Any]:
        return wait_for(lambda: self.steps.get(name), timeout=120, what=f"the client's step {name}: {self.output}")


def _signals(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM signals")).scalar_one()


def _answer(message: dict[str, Any], value: Any) -> dict[str, Any]:
    """A subscriber's 200 live response to a live message it was handed."""
    return {"topic": message["topic"], "path": message["path"].replace("/inbox/", "/outbox/"), "status": 200,
            "value": value, "headers": {"correlation-id": message["headers"]["correlation-id"],
                                        "content-type": "application/json"}}


def test_dittos_own_client_creates_modifies_reads_searches_and_messages_through_the_ledger(
        door, engine, database_url, logins, run_pipeline) -> None:  # noqa: F811
    login = logins["ackstore_ingest"]
    with AckStore.connect(as_login(database_url, login)) as responder:
        assert responder.declare("responder", [], channels=["live"]) == {"status": 204}
        application = Application(door, login)
        try:
            for count, name in ((1, "create"), (2, "modify")):
                wait_for(lambda: _signals(engine) == count, what=f"the client's {name} stored")
                assert name not in application.steps, application.steps  # held for the decision
                run_pipeline()
                application.step(name)
            wait_for(lambda: _signals(engine) == 3, what="the client's message stored")
            (message,) = responder.pull("responder")
            assert responder.respond("responder", _answer(message, {"answer": 42})) == {"status": 204}
            run_pipeline()
            steps = {name: application.step(name) for name in ("message", "not-found")}
        finally:
            application.process.kill()
            application.process.wait(10)
    assert application.steps["create"] == {"status": 201, "body": {"_thingId": THING, "_attributes": {"on": True}}}
    assert application.steps["modify"] == {"status": 204, "body": None}
    assert application.steps["read"]["body"] == {"_thingId": THING, "_attributes": {"on": False}}
    assert application.steps["search"]["body"]["_items"] == [{"_thingId": THING, "_attributes": {"on": False}}]
    assert (steps["message"]["status"], steps["message"]["body"]) == (200, {"answer": 42})
    refused = steps["not-found"]["error"]  # the client rejects with the response: status and Ditto's error
    assert (refused["_status"], refused["_value"]["status"], refused["_value"]["error"]) == (
        404, 404, "things:thing.notfound")


def test_dittos_own_client_over_the_websocket_writes_with_acks_is_pushed_messages_and_gets_answers(
        door, engine, database_url, logins, run_pipeline) -> None:  # noqa: F811
    """The client's WebSocket (``DittoNodeClient.newWebSocketClient``, Basic credentials): a thing
    created with requested acks, answered on the socket once decided; messages requested and one
    another sender sent pushed to it; a message it sent answered by a subscriber of the ledger."""
    login = logins["ackstore_ingest"]
    with AckStore.connect(as_login(database_url, login)) as responder:
        assert responder.declare("ws-responder", [], channels=["live"]) == {"status": 204}
        before = _signals(engine)
        application = Application(door, login, "application-ws.js")
        try:
            wait_for(lambda: _signals(engine) == before + 1, what="the client's create stored")
            assert "ws-create" not in application.steps, application.steps  # held for the decision
            run_pipeline()
            application.step("ws-create")
            application.step("ws-messages")
            with door.client(login) as sender:
                sent = sender.post(f"/api/2/things/{WS_THING}/inbox/messages/hello", json={"hi": 1},
                                   headers={"correlation-id": "to-the-js-socket", "timeout": "0"})
                assert sent.status_code == 202, sent.text
            wait_for(lambda: [m for m in application.pushed if m["correlationId"] == "to-the-js-socket"],
                     what=f"the message pushed to the client: {application.output}")
            wait_for(lambda: _signals(engine) == before + 3, what=f"the client's message stored: {application.output}")
            asked = wait_for(lambda: [m for m in responder.pull("ws-responder") if m["topic"].endswith("/messages/ask")],
                             what="the client's message handed to the responder")[0]
            assert asked["value"] in ({"q": 2}, '{"q": 2}'), asked  # as the client sent it
            assert responder.respond("ws-responder", _answer(asked, {"answer": 43})) == {"status": 204}
            run_pipeline()
            message = application.step("ws-message")
        finally:
            application.process.kill()
            application.process.wait(10)
    assert application.steps["ws-create"]["status"] == 201, application.steps
    pushed = next(m for m in application.pushed if m["correlationId"] == "to-the-js-socket")
    assert (pushed["topic"], pushed["path"], pushed["value"]) == (
        "org.acme/js-ws-1/things/live/messages/hello", "/inbox/messages/hello", {"hi": 1})
    assert (message.get("status"), message.get("body")) == (200, {"answer": 43}), message
