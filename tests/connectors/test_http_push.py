"""HTTP push targets (issue 41, B.9's HTTP push row) against a real HTTP server the test starts
(the standard library's, in a thread): each target's request as Ditto sends it, and the label its
response issues — the status as it is, the body as the ack's value, 408 when no answer comes in
time, 500 when the request fails; a target issuing ``live-response`` gets the live response from
the endpoint's answer.

And what a sender or an endpoint chooses, between good messages (issue 50): a correlation id no
HTTP header carries is refused 400, logged and counted; an endpoint trickling its answer is cut
off when ``idleTimeout`` has passed, its slot freed; a status with no final meaning (101, 600,
999) is 503, interim 1xx are read past; a connection no request can go to is a 400 at ``connect``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any, Callable, Iterator

import pytest
from sqlalchemy import Engine, text

from tests.support.broker import ROOT, stop, wait_for
from tests.support.http_endpoint import Endpoint
from tests.support.ledger import count, thing_modify
from tests.support.live_signals import live_message
from tests.support.own_postgres import free_port

pytestmark = [pytest.mark.slow]

@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    server = Endpoint()
    server.thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _connector(database_url: str, config_path: str, *args: str) -> subprocess.Popen:
    """``ackstore connect http-push --config FILE ARGS`` as a subprocess, its log on a pipe."""
    return subprocess.Popen([sys.executable, "-m", "ackstore.cli", "--database-url", database_url, "connect",
                             "http-push", "--config", config_path, *args], cwd=ROOT, env=dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _connection(tmp_path, uri: str, targets: list[dict[str, Any]], **specific: Any):
    path = tmp_path / "push.json"
    path.write_text(json.dumps({"id": "push", "connectionType": "http-push", "uri": uri, "targets": targets,
                                "specificConfig": {"idleTimeout": "1s", "parallelism": "4", **specific}}))
    return str(path)


def _twin_target(address: str, label: str) -> dict[str, Any]:
    return {"address": address, "topics": ["_/_/things/twin/events"], "issuedAcknowledgementLabel": f"push:{label}"}


def _push_acks(engine: Engine, database_url: str, config_path: str, answers: dict[str, Any],
               submit: Callable[[list[str]], dict[str, Any]]) -> tuple[dict[str, tuple[int, Any]], str]:
    """Run the connector of ``config_path``, whose targets issue ``push:<label>`` for each label of
    ``answers``; once they are declared, ``submit`` a signal requesting every one of them (accepted:
    202) and wait for each ack. What each label was issued (label -> (status, value)), and the connector's log."""
    process = _connector(database_url, config_path)
    try:
        wait_for(lambda: count(engine, "SELECT count(*) FROM subscribers WHERE id LIKE 'push/target-%'")
                 == len(answers), what="the targets declared")
        assert submit([f"push:{label}" for label in answers])["status"] == 202
        wait_for(lambda: count(engine, "SELECT count(*) FROM acks WHERE label LIKE 'push:%'") == len(answers),
                 timeout=60, what="every target's ack")
    finally:
        code, log = stop(process)
    assert code == 0, log
    with engine.connect() as conn:
        acks = {row.label: (row.status, row.payload) for row in conn.execute(text(
            "SELECT label, status, payload FROM acks WHERE label LIKE 'push:%'"))}
    return acks, log


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

    def submit(requested: list[str]) -> dict[str, Any]:
        answer = store.submit(thing_modify(1, requested_acks=requested))
        run_pipeline("apply_twin")
        return answer

    acks, log = _push_acks(engine, database_url, _connection(tmp_path, endpoint.url, targets), ISSUED, submit)
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


# --- what a sender or an endpoint chooses, between good messages (issue 50) ----------------------

def _live_target(address: str, label: str) -> dict[str, Any]:
    return {"address": address, "topics": ["_/_/things/live/messages"], "issuedAcknowledgementLabel": f"push:{label}"}


def _acks(engine: Engine, label: str) -> dict[str, tuple[int, Any]]:
    """Each signal's ack of ``label``: correlation id -> (status, value)."""
    with engine.connect() as conn:
        return {row.correlation_id: (row.status, row.payload) for row in conn.execute(text(
            "SELECT s.correlation_id, a.status, a.payload FROM acks a JOIN signals s ON s.id = a.signal_id "
            "WHERE a.label = :label"), {"label": label})}


HOSTILE_IDS = {  # what a sender may put in a correlation id that no HTTP header carries as it is
    "non-Latin-1": "c-☃",
    "CR LF": "c\r\nX-Injected: 1",
    "terminal sequences": "c\x1b[2J\x1b]52;c;Zm9v\x07",
    "Latin-1": "c-é",
    "bidi override": "c-\u202egnp.exe",
    "a leading space": " c",
}


def test_a_correlation_id_no_header_carries_is_refused_400_logged_and_counted_between_good_ones(
    tmp_path, engine: Engine, database_url: str, store, endpoint: Endpoint
) -> None:
    """Issue 50: ``http.client`` raised on such a header and stopped the connector ("the targets
    thread failed", exit 1). Now each is its target's 400 (a client error: never sent, never sent
    again), one log line with the sender's text escaped, one entry in the connection's log, one
    count of ``ackstore_connector_unsendable_total``; the good messages between them are sent."""
    from tests.support.connector_metrics import scrape, served

    port = free_port()
    process = _connector(database_url, _connection(tmp_path, endpoint.url, [_live_target("POST:/ok", "sent")]),
                         "--metrics-port", str(port))
    try:
        wait_for(lambda: count(engine, "SELECT count(*) FROM subscribers WHERE id = 'push/target-0'"),
                 what="the target declared")
        served(port, process)
        sent: list[str] = []
        for n, correlation_id in enumerate(HOSTILE_IDS.values()):
            for cid in (f"good-{n}", correlation_id):
                assert store.submit(live_message(cid, requested_acks=["push:sent"], timeout="60s"))["status"] == 202
                sent.append(cid)
        assert store.submit(live_message("good-last", requested_acks=["push:sent"], timeout="60s"))["status"] == 202
        wait_for(lambda: len(_acks(engine, "push:sent")) == len(sent) + 1, what="every message's ack")
        unsendable = scrape(port)[("ackstore_connector_unsendable_total", (("connection", "push"),))]
        assert process.poll() is None, "the connector runs on"
    finally:
        code, log = stop(process)
    assert code == 0, log
    good = [f"good-{n}" for n in range(len(HOSTILE_IDS))] + ["good-last"]
    assert _acks(engine, "push:sent") == {**{cid: (200, {"seen": True}) for cid in good},
                                          **{cid: (400, None) for cid in HOSTILE_IDS.values()}}
    assert sorted(r["headers"]["correlation-id"] for r in endpoint.requests) == sorted(good), "only the good sent"
    assert unsendable == len(HOSTILE_IDS)
    with engine.connect() as conn:
        logged = conn.execute(text("SELECT detail FROM connection_log WHERE connection = 'push' "
                                   "AND kind = 'unsendable'")).scalars().all()
    assert len(logged) == len(HOSTILE_IDS) and all("cannot carry it" in detail for detail in logged)
    dropped = [line for line in log.splitlines() if "is dropped" in line]
    assert len(dropped) == len(HOSTILE_IDS), log
    assert "Traceback" not in log and not any(c in log for c in "\x1b\x07\r\u202e"), "no raw control character"
    assert all("X-Injected" not in line or "\\r\\n" in line for line in log.splitlines()), "no forged line"


ENDPOINT_ANSWERS = {  # label -> target address, the status and value its ack gets
    "interim": ("POST:/interim", 200, {"late": True}),  # 103 and 102 read past: the final 200 issues it
    "switching": ("POST:/switching", 503, "<101>"),  # a 101 to a request that asked no upgrade
    "status-600": ("POST:/status-600", 503, "<600>"),
    "status-999": ("POST:/status-999", 503, "<999>"),
    "trickle-status": ("POST:/trickle-status", 408, None),  # a byte every 0.3 s: no read waits 1 s, the request does
    "trickle-body": ("POST:/trickle-body", 408, None),
    "ok": ("POST:/ok", 200, {"seen": True}),
}


def test_every_endpoint_answer_issues_a_label_and_a_trickling_one_is_cut_off_at_idle_timeout(
    tmp_path, engine: Engine, database_url: str, store, endpoint: Endpoint
) -> None:
    """Issue 50: a 600 or 999 left no ack and no log line, a 1xx was issued as the label, and an
    endpoint trickling a byte every 2 s held a request slot for ever. With one request at a time
    (``parallelism`` 1), every target's label now comes — so neither trickle holds the slot past
    ``idleTimeout`` (1 s), each cut off as 408 — and each status with no final meaning is 503 with
    Ditto's error as its value, said in the log."""
    targets = [_live_target(address, label) for label, (address, _, _) in ENDPOINT_ANSWERS.items()]
    acks, log = _push_acks(
        engine, database_url, _connection(tmp_path, endpoint.url, targets, parallelism="1"), ENDPOINT_ANSWERS,
        lambda requested: store.submit(live_message("asked", requested_acks=requested, timeout="120s")))
    for label, (_, status, value) in ENDPOINT_ANSWERS.items():
        issued, payload = acks[f"push:{label}"]
        assert issued == status, (label, acks)
        if isinstance(value, str) and status == 503:
            assert payload["error"] == "connectivity:message.sending.failed" and value in payload["message"], payload
        else:
            assert payload == value, (label, payload)
    assert sum("no final HTTP status" in line for line in log.splitlines()) == 3, log
    assert "Traceback" not in log


@pytest.mark.parametrize(("uri", "address", "problem"), [
    ("http://user:S3cr3t-push@127.0.0.1:99999", "POST:/e", "Port out of range"),
    ("http://user:S3cr3t-push@[::1", "POST:/e", "Invalid IPv6 URL"),
    ("http://user:S3cr3t-push@127.0.0.1:8080", "POST:/☃", "percent-encode"),
])
def test_a_connection_no_request_can_go_to_is_a_400_at_connect_not_a_traceback(
    tmp_path, database_url: str, uri: str, address: str, problem: str
) -> None:
    path = tmp_path / "push.json"
    path.write_text(json.dumps({"id": "push", "connectionType": "http-push", "uri": uri,
                                "targets": [{"address": address, "topics": ["_/_/things/twin/events"]}]}))
    done = subprocess.run([sys.executable, "-m", "ackstore.cli", "--database-url", database_url, "connect",
                           "http-push", "--config", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    answer = json.loads(done.stdout)
    assert (done.returncode, answer["status"], answer["error"]) == (1, 400, "connectivity:connection.configuration.invalid")
    assert problem in answer["message"] and "description" in answer, answer
    assert "Traceback" not in done.stderr and "S3cr3t-push" not in done.stdout + done.stderr


def test_a_request_failing_as_nobody_foresaw_is_logged_answered_500_and_the_next_one_goes_on(
    store, engine: Engine, endpoint: Endpoint, caplog
) -> None:
    """``future.result()`` re-raised any failure of a request and stopped the connector. A bug stays
    visible — an ERROR with its traceback — and its label is issued 500 (Ditto's converter's status
    for any other exception); the other requests go on. The bug here: a pulled item without a
    topic (no ledger hands one out), whose ack cannot be built."""
    import logging

    from ackstore.connectors import config
    from ackstore.connectors.options import Options
    from ackstore.connectors.http_push import HttpPushTargets
    from ackstore.connectors.outage import Outage
    from ackstore.connectors.targets import Published, TargetFeed

    connection = config.parse({"id": "push", "connectionType": "http-push", "uri": endpoint.url,
                               "targets": [_live_target("POST:/ok", "sent")], "specificConfig": {"idleTimeout": "1s"}})
    assert store.claim_connection("push")["status"] == 204
    assert store.declare("push/target-0", ["push:sent"], connection="push", channels=["live"])["status"] == 204
    assert store.submit(live_message("good", requested_acks=["push:sent"], timeout="60s"))["status"] == 202
    answered: list[tuple[int, bool]] = []
    feed = TargetFeed(store, connection, lease=Options().target_lease, outage=Outage("targets", logging.getLogger("t"), 1, 1),
                      answered=lambda n, ok: answered.append((n, ok)), dropped=lambda what, why: None)
    targets = HttpPushTargets(feed, connection.http_push, interval_s=0.1, stop=threading.Event())
    (target,) = connection.targets
    broken = Published("push/target-0", "push:sent", {"headers": {"correlation-id": "broken"}})
    with caplog.at_level(logging.ERROR, logger="ackstore.connector"):
        targets._push_guarded(target, broken)  # raises nothing
    assert [r.exc_info is not None for r in caplog.records] == [True, True], "the bug, and its label's, with tracebacks"
    assert "failed unexpectedly; its label is issued 500" in caplog.records[0].getMessage()
    pulled, _ = feed.pull()
    for target_, item in pulled:
        targets._push_guarded(target_, item)
    assert _acks(engine, "push:sent") == {"good": (200, {"seen": True})}
