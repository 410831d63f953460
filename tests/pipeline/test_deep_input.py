"""Issue 50: no sender's message stops the pipeline (decisions #115, #116).

Its three reproductions — (a) a modify under ``if-equal: skip`` of the 600-deep value a thing
holds, (b) a modify at a path of 1 200 segments, (c) a merge 980 deep — are answered 400 at the
door now; a ledger from before the limits may hold them (and things deeper than any reader's
stack), so each is also stored as it could be then, through the write function every submission
calls, and run through the pipeline beside good commands of the same pass: the good ones are
applied and decided, the others answered, on Spark's Python workers and in the driver alike.
A thing at the limits passes every step: the fold, the index, weak acks, the sweep, the gate,
settlement, the seal, the archive and ``show``.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Iterator

import pytest
from sqlalchemy import Engine, text

from ackstore.ledger.database import scratch_database
from ackstore.ledger.store import AckStore
from ackstore.rules import headers, limits
from jobs import archive, pipeline
from jobs.settings import IN_DRIVER_ROWS, PipelineSettings
from tests.conftest import ADMIN_URL
from tests.support.archive_settings import settings_for
from tests.support.deep_json import dumps, nested, nested_text
from tests.support.ledger import ack_message, twin_command

pytestmark = pytest.mark.spark

VALUE_DEPTH, SEGMENTS = limits.MAX_VALUE_DEPTH, limits.MAX_POINTER_SEGMENTS
BOTH = ["twin-persisted", "search-persisted"]
WHERE = {"spark": 0, "driver": IN_DRIVER_ROWS}  # in_driver_rows: every step's work as Spark tasks, or in the driver


def deep_path(segments: int) -> str:
    return "/attributes" + "/a" * (segments - 1)


def stored_as_before(engine: Engine, cid: str, thing: str, action: str, path: str, value: str | None,
                     *, extra_headers: dict[str, Any] | None = None, channel: str = "twin", kind: str = "twin-command",
                     requested: list[str] = BOTH, timeout: str = "60s", handed_to: tuple[str, ...] = ()) -> None:
    """A signal as a ledger from before the limits could hold it: its headers normalised as ever,
    stored through the write function every submission calls (``insert_signal``), its value's JSON
    text as given; a live one ``handed_to`` live subscribers as its submission would (``hand_out_live``)."""
    request = headers.normalize({"correlation-id": cid, "requested-acks": requested, "timeout": timeout,
                                 **(extra_headers or {})}, channel=channel, api="http")
    namespace, _, name = thing.partition(":")
    criterion = "messages" if kind == "live-message" else "commands"
    with engine.begin() as conn:
        stored = conn.execute(text(
            "SELECT insert_signal('api', :cid, :cid, 'http', :channel, :kind, :action, :thing, :topic, :path, "
            "CAST(:value AS jsonb), CAST(:headers AS jsonb), CAST(:requested AS text[]), true, CAST(:timeout AS bigint))"),
            {"cid": cid, "channel": channel, "kind": kind, "action": action, "thing": thing, "path": path,
             "topic": f"{namespace}/{name}/things/{channel}/{criterion}/{action}", "value": value,
             "headers": json.dumps(request.headers), "requested": "{" + ",".join(request.requested_acks) + "}",
             "timeout": request.timeout_ms}).scalar()
        assert stored is not None
        if handed_to:
            conn.execute(text("SELECT hand_out_live(CAST(:rows AS json))"),
                         {"rows": json.dumps([{"subscriber_id": each, "signal_id": stored} for each in handed_to])})


def thing_as_before(engine: Engine, thing: str, document: str, *, queued_for_index: bool = False) -> None:
    """A thing an older fold wrote (its document's JSON text as given), and its index entry queued."""
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO things (thing_id, revision, document, deleted) "
                          "VALUES (:thing, 1, CAST(:document AS jsonb), false)"), {"thing": thing, "document": document})
        if queued_for_index:
            conn.execute(text("INSERT INTO queue_index (thing_id, revision) VALUES (:thing, 1)"), {"thing": thing})


def answers(engine: Engine) -> dict[str, tuple[int, str | None, int | None]]:
    """Per correlation id: the command's response status and error, and what its requester is told."""
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT s.correlation_id, c.status, c.payload->>'error' AS error, r.status AS answered "
            "FROM signals s LEFT JOIN command_responses c ON c.signal_id = s.id "
            "LEFT JOIN request_results r ON r.signal_id = s.id"))
        return {row.correlation_id: (row.status, row.error, row.answered) for row in rows}


def scalar(engine: Engine, sql: str, **params: Any) -> Any:
    with engine.connect() as conn:
        return conn.execute(text(sql), params).scalar()


# --- the door -----------------------------------------------------------------------------------------

REPRODUCTIONS = {
    "(a) a create holding 600 levels": (twin_command("create", thing="org.acme/a", path="/",
                                                     value={"attributes": {"x": nested(600)}}), "json.invalid"),
    "(a) the modify under if-equal skip": (twin_command("modify", thing="org.acme/a", path="/attributes/x",
                                                        value=nested(600), if_equal="skip"), "json.invalid"),
    "(b) a path of 1 200 segments": (twin_command("modify", thing="org.acme/b", path=deep_path(1200), value=1),
                                     "json.pointer.invalid"),
    "(c) a merge 980 deep": (twin_command("merge", thing="org.acme/c", path="/attributes", value={"y": nested(980)}),
                             "json.invalid"),
}


@pytest.mark.parametrize("envelope, error", REPRODUCTIONS.values(), ids=list(REPRODUCTIONS))
def test_the_door_answers_each_reproduction_400_and_stores_nothing(store: AckStore, engine: Engine,
                                                                   envelope: dict, error: str) -> None:
    as_text = dumps(envelope)
    for given in (envelope, as_text, as_text.encode()):  # the Python API, the CLI, a broker's body
        answer = store.submit(given)
        assert (answer["status"], answer["error"]) == (400, error), answer
        assert set(answer) == {"status", "error", "message", "description"}
    assert store.submit_many([as_text.encode(), dumps(twin_command(correlation_id="good"))],
                             api="connectivity", source="amqp-a")[1]["status"] == 202  # the batch's others stored
    assert scalar(engine, "SELECT count(*) FROM signals") == 1


# --- a ledger from before the limits: nothing stops a pass ----------------------------------------------

@pytest.mark.parametrize("where", WHERE, ids=list(WHERE))
def test_a_ledger_from_before_the_limits_stops_no_pass(store: AckStore, engine: Engine, run_pipeline,
                                                       where: str, caplog: pytest.LogCaptureFixture) -> None:
    holding_600 = '{"thingId":"org.acme:a","attributes":{"x":%s}}' % nested_text(600)
    past_the_stack = '{"thingId":"org.acme:past","attributes":{"x":%s}}' % nested_text(3000)
    thing_as_before(engine, "org.acme:a", holding_600)
    thing_as_before(engine, "org.acme:past", past_the_stack, queued_for_index=True)
    for thing in ("org.acme/b", "org.acme/c"):
        assert store.submit(twin_command("create", thing=thing, path="/", value={"attributes": {"n": 0}},
                                         correlation_id=f"create-{thing[-1]}"))["status"] == 202
    run_pipeline(in_driver_rows=WHERE[where])
    # one pass: each reproduction between good commands of its own thing and of others
    good = lambda cid, thing, path, value: store.submit(  # noqa: E731
        twin_command("modify", thing=thing, path=path, value=value, correlation_id=cid, requested_acks=BOTH))
    assert good("good-1", "org.acme/g", "/", {"attributes": {"n": 1}})["status"] == 202
    stored_as_before(engine, "a", "org.acme:a", "modify", "/attributes/x", nested_text(600),
                     extra_headers={"if-equal": "skip"})
    assert good("good-a", "org.acme/a", "/attributes/z", 1)["status"] == 202
    stored_as_before(engine, "b", "org.acme:b", "modify", deep_path(1200), "1")
    assert good("good-b", "org.acme/b", "/attributes/n", 2)["status"] == 202
    stored_as_before(engine, "c", "org.acme:c", "merge", "/attributes", '{"y":%s}' % nested_text(980))
    assert good("good-c", "org.acme/c", "/attributes/n", 3)["status"] == 202
    stored_as_before(engine, "past", "org.acme:past", "modify", "/attributes/y", "1")  # its document: unreadable
    assert good("good-2", "org.acme/h", "/", {"attributes": {"n": 4}})["status"] == 202

    with caplog.at_level(logging.WARNING, logger="ackstore.pipeline"):
        stats = run_pipeline(in_driver_rows=WHERE[where])

    assert stats["apply_twin"]["staged_in"] == where
    got = answers(engine)
    assert {cid: got[cid] for cid in ("a", "b", "c", "past")} == {
        "a": (400, "json.invalid", 400), "b": (400, "json.pointer.invalid", 400), "c": (400, "json.invalid", 400),
        "past": (500, "internalerror", 500)}
    assert {cid: got[cid][0::2] for cid in ("good-1", "good-a", "good-b", "good-c", "good-2")} == {
        "good-1": (201, 200), "good-a": (201, 200), "good-b": (204, 200), "good-c": (204, 200), "good-2": (201, 200)}
    assert stats["apply_twin"]["internal_errors"] == 1
    signal = scalar(engine, "SELECT id FROM signals WHERE correlation_id = 'past'")
    assert [r.getMessage() for r in caplog.records if "could not decide" in r.getMessage()] == [
        f"apply_twin: the fold could not decide 1 command(s), each answered 500 internalerror: signal {signal}"]
    # the thing past the stack is as it was, indexed without rows; nothing is left queued
    assert scalar(engine, "SELECT revision FROM things WHERE thing_id = 'org.acme:past'") == 1
    assert scalar(engine, "SELECT revision FROM search_things WHERE thing_id = 'org.acme:past'") == 1
    assert scalar(engine, "SELECT count(*) FROM search_index WHERE thing_id = 'org.acme:past'") == 0
    assert scalar(engine, "SELECT count(*) FROM search_index WHERE thing_id = 'org.acme:a' "
                          "AND path = 'attributes/z'") == 1
    for queue in ("queue_apply", "queue_index", "queue_decide"):
        assert scalar(engine, f"SELECT count(*) FROM {queue}") == 0, queue
    again = run_pipeline(in_driver_rows=WHERE[where])  # and the next pass has nothing left to do
    assert again["apply_twin"]["commands"] == 0 and again["sweep"]["decided"] == 0


def test_a_request_or_a_candidate_the_steps_cannot_read_is_answered_and_the_rest_decided(
        store: AckStore, engine: Engine, run_pipeline) -> None:
    """weak_acks: a live message whose value is past the stack gets no weak ack (its labels'
    deadline decides it), the good one beside it gets its weak ack; the sweep: a request whose ack
    cannot be read is answered at its deadline with a 500 entry per label (424) and passes the
    gate, the good request beside it decided by its acks."""
    import time

    store.declare("filtering", ["org:filtered"], filter="eq(attributes/n,-1)")
    store.declare("app", ["app:done"])
    live = {"requested": ["org:filtered"], "channel": "live", "kind": "live-message", "timeout": "1ms"}
    stored_as_before(engine, "live-past", "org.acme:l", "ask", "/inbox/messages/ask", nested_text(3000), **live)
    stored_as_before(engine, "live-good", "org.acme:l", "ask", "/inbox/messages/ask", '{"n":1}', **live)
    assert store.submit(twin_command("modify", thing="org.acme/t", path="/", value={"attributes": {"n": 1}},
                                     correlation_id="ok", requested_acks=["app:done"]))["status"] == 202
    stored_as_before(engine, "unreadable-ack", "org.acme:t", "modify", "/attributes/m", "2",
                     requested=["twin-persisted", "app:done"], timeout="2s")
    with engine.begin() as conn:  # an ack stored before the limits, in time, through the write function acks take
        conn.execute(text(
            "SELECT store_ack(s.id, 1, 'app:done', CAST(500 AS smallint), CAST(:payload AS jsonb), "
            "CAST('{\"correlation-id\":\"unreadable-ack\"}' AS jsonb), 'app', 'counted', NULL) "
            "FROM signals s WHERE s.correlation_id = 'unreadable-ack'"), {"payload": nested_text(3000)})
    assert store.acknowledge("app", ack_message("ok", "app:done", thing="org.acme/t")) == {"status": 204}
    time.sleep(2.5)  # every deadline passed

    run_pipeline()

    with engine.connect() as conn:
        weak = dict(conn.execute(text(
            "SELECT s.correlation_id, count(k.*) FROM signals s LEFT JOIN acks k ON k.signal_id = s.id AND k.weak "
            "WHERE s.channel = 'live' GROUP BY 1")).all())
    assert weak == {"live-past": 0, "live-good": 1}
    assert store.result("ok")["status"] == 200
    unreadable = store.result("unreadable-ack")
    assert unreadable["status"] == 424
    assert {label: (entry["status"], entry["payload"]["error"]) for label, entry in unreadable["body"].items()} == {
        "twin-persisted": (500, "internalerror"), "app:done": (500, "internalerror")}
    assert 400 <= store.result("live-past")["status"] < 500  # decided by its deadline
    assert scalar(engine, "SELECT count(*) FROM queue_decide") == 0


# --- a thing at the limits passes every step ------------------------------------------------------------

@pytest.fixture
def at_the_limits(spark) -> Iterator[str]:
    with scratch_database(ADMIN_URL, "limits") as url:
        yield url


@pytest.mark.parametrize("where", WHERE, ids=list(WHERE))
def test_a_thing_at_the_limits_passes_every_step(at_the_limits: str, spark, tmp_path, where: str) -> None:
    """The deepest path the door lets through, holding the deepest value it lets through — a thing
    limits.MAX_DOCUMENT_DEPTH levels deep —, and every command that walks it: a JSON equality under
    if-equal, a minimizing merge under a condition on it, a subscriber's filter over its events,
    acks whose payloads are as deep; then the index, the sweep, the gate, the seal, the archive and
    ``show`` (in the process and as the CLI prints it), before and after archiving."""
    from ackstore.ledger import migrate
    from ackstore.ledger.database import make_engine

    engine = make_engine(at_the_limits)
    migrate.upgrade(engine)
    store = AckStore(engine)
    thing, deepest = "org.acme/deep", deep_path(SEGMENTS)
    store.declare("app", ["app:done"])
    store.declare("filtering", ["org:filtered"], filter=f'eq({deepest[1:]}/a/a,"never")')  # excludes: weak acks
    value = nested(VALUE_DEPTH)  # in its envelope: exactly the limit
    labels = [*BOTH, "app:done", "org:filtered"]
    submitted = [
        ("create", "/", {"attributes": {"n": 0}}, {}),
        ("modify", deepest, value, {}),
        ("modify", deepest, value, {"if_equal": "skip"}),  # the same value: 412 after comparing every level
        ("merge", deepest, nested(VALUE_DEPTH, leaf=2), {"if_equal": "skip-minimizing-merge",
                                                       "condition": f"exists({deepest[1:]}/a)"}),
    ]
    for n, (action, path, given, extra) in enumerate(submitted):
        answer = store.submit(twin_command(action, thing=thing, path=path, value=given, correlation_id=f"d{n}",
                                           requested_acks=labels, **extra))
        assert answer["status"] == 202, answer
        assert store.acknowledge("app", ack_message(f"d{n}", "app:done", value=nested(VALUE_DEPTH), thing=thing)) == {
            "status": 204}

    stats = pipeline.run(spark, PipelineSettings(database_url=at_the_limits, partitions=2,
                                                 in_driver_rows=WHERE[where]))

    assert stats["apply_twin"]["staged_in"] == where and stats["apply_twin"]["internal_errors"] == 0
    assert stats["index_search"]["staged_in"] == where and stats["weak_acks"]["weak_acks"] == 3
    with engine.connect() as conn:
        responses = [row.status for row in conn.execute(text(
            "SELECT c.status FROM command_responses c JOIN signals s ON s.id = c.signal_id ORDER BY s.id"))]
        document = conn.execute(text("SELECT document::text FROM things")).scalar()
        longest = conn.execute(text("SELECT max(octet_length(path)) FROM search_index")).scalar()
        pending = conn.execute(text("SELECT (SELECT count(*) FROM queue_apply) + (SELECT count(*) FROM queue_index) "
                                    "+ (SELECT count(*) FROM queue_decide)")).scalar()
    assert responses == [201, 201, 412, 204]
    assert document.count("{") == limits.MAX_DOCUMENT_DEPTH == SEGMENTS + VALUE_DEPTH  # the deepest thing there can be
    assert longest <= 950 and pending == 0  # indexed as far as the index's paths reach (as Ditto's)
    assert [store.result(f"d{n}")["status"] for n in range(4)] == [200, 200, 412, 200]
    assert store.result("d1")["body"]["app:done"]["payload"] == nested(VALUE_DEPTH)
    assert stats["validate"].get("failures") is None and stats["seal"]["facts"] > 0
    shown = {cid: store.show(cid) for cid in ("d1", "d3")}
    assert shown["d1"]["result"]["body"]["app:done"]["payload"] == nested(VALUE_DEPTH)
    printed = _printed(at_the_limits, "d1")
    assert json.loads(printed)["result"]["body"]["app:done"]["payload"] == nested(VALUE_DEPTH)

    archived = archive.run(spark, settings_for(engine, tmp_path / "archive"))

    assert archived["rows"] > 0 and scalar(engine, "SELECT count(*) FROM signals") == 0
    after = {cid: store.show(cid) for cid in shown}
    assert all(after[cid].pop("archived") for cid in shown)  # it says where it was read from
    assert after == shown  # read back from the archive, every level of it
    printed_after = json.loads(_printed(at_the_limits, "d1"))
    assert printed_after.pop("archived") and printed_after == json.loads(printed)
    engine.dispose()


def _printed(url: str, cid: str) -> str:
    """``ackstore show`` as a user runs it: the timeline printed, and its JSON (returned)."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "ackstore.cli", "--database-url", url, "show", cid]
    plain = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0 and "decided" in plain.stdout, plain.stderr
    as_json = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=120)
    assert as_json.returncode == 0, as_json.stderr
    return as_json.stdout


# --- a ledger from before the limits read back: every reader answers ------------------------------------

def _read_back(value: Any, levels: int) -> None:
    """``value``, a chain of objects of one member ``levels`` deep as stored, read back: as JSON to
    past the deepest a sender may give, the rest as its JSON text, nothing lost."""
    read = 0
    while isinstance(value, dict):
        (value,) = value.values()
        read += 1
    assert limits.MAX_DOCUMENT_DEPTH < read <= limits.MAX_READ_DEPTH and isinstance(value, str)
    assert json.loads(value) == json.loads(nested_text(levels - read))


def test_a_value_past_a_readers_stack_is_read_back_as_its_text_by_every_reader(
        store: AckStore, engine: Engine, database_url: str, run_pipeline) -> None:
    """A value 995 deep, which a ledger from before the limits may hold (json.loads, psycopg2's
    reader of jsonb, ran out of stack under `show`: a traceback), in a signal, an ack and the
    result the sweep decided in SQL: show, result, the CLI's show (plain and JSON) and result, a
    pull (a filtered subscriber's too) and the Ledger page each answer, every container nested past limits.MAX_READ_DEPTH
    shown as its JSON text, the levels above it as they are."""
    from datetime import datetime, timezone

    from ackstore.ui import ledger_page
    from tests.support import cli

    store.declare("app", ["app:done"], channels=["live"])
    store.declare("filtering", ["org:filtered"], channels=["live"], filter='eq(topic:action,"ask")')  # it matches
    deep = nested_text(995)
    stored_as_before(engine, "deep", "org.acme:d", "ask", "/inbox/messages/ask", deep, channel="live",
                     kind="live-message", requested=["app:done"], extra_headers={"response-required": False},
                     handed_to=("app", "filtering"))
    with engine.begin() as conn:  # its ack, as stored before the limits
        conn.execute(text(
            "SELECT store_ack(s.id, 1, 'app:done', CAST(200 AS smallint), CAST(:payload AS jsonb), "
            "CAST('{\"correlation-id\":\"deep\"}' AS jsonb), 'app', 'counted', NULL) "
            "FROM signals s WHERE s.correlation_id = 'deep'"), {"payload": deep})
    for subscriber in ("app", "filtering"):  # before it is decided: then its hand-outs are closed
        (pulled,) = store.pull(subscriber)  # the filter's view read to the depth too
        _read_back(pulled["value"], 995)
    run_pipeline("sweep")

    shown = store.show("deep")
    _read_back(shown["value"], 995)
    (ack,) = shown["acks"]
    _read_back(ack["payload"], 995)
    result = store.result("deep")
    assert result["status"] == 200
    _read_back(result["body"], 995)  # one label requested: its ack's payload is the body
    assert shown["result"] == result
    code, printed = cli.run("show", "deep", "--json", url=database_url)
    assert code == 0 and printed["result"] == json.loads(json.dumps(result))
    code, plain = cli.run("show", "deep", url=database_url)
    assert code == 0 and "decided" in plain
    code, printed = cli.run("result", "deep", url=database_url)
    assert code == 0 and printed["status"] == 200
    page = ledger_page.render(ledger_page.gather(store, datetime.now(timezone.utc), "deep"))
    assert 'id="signal-title"' in page and "live-message" in page
