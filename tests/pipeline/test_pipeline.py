"""The pipeline on a real local Spark session against the real PostgreSQL (issue 3).

apply_twin → index_search → sweep, end to end: every command kind and status, the events
and built-in acks they write, the search index, deadlines judged by the facts' time, the
rows of B.5's result table, and re-runs that change nothing.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import text

from ackstore.ledger.store import AckStore
from tests.support.ledger import ack_message, snapshot, twin_command

pytestmark = pytest.mark.spark


def submit(store: AckStore, action: str, path: str = "/", value: Any = None, *, thing: str = "org.acme/lamp-1",
           cid: str, **headers: Any) -> str:
    envelope = twin_command(action, thing=thing, path=path, value=value, correlation_id=cid, **headers)
    answer = store.submit(envelope)
    assert answer["status"] == 202, answer
    return cid


def rows(store: AckStore, sql: str, **params: Any) -> list[Any]:
    with store.engine.connect() as conn:
        return list(conn.execute(text(sql), params))


def response_of(store: AckStore, cid: str) -> tuple[int, Any]:
    (row,) = rows(
        store,
        "SELECT r.status, r.payload FROM command_responses r JOIN signals s ON s.id = r.signal_id "
        "WHERE s.correlation_id = :cid",
        cid=cid,
    )
    return row.status, row.payload


def acks_of(store: AckStore, cid: str) -> dict[str, tuple[int, str, bool]]:
    return {
        r.label: (r.status, r.disposition, r.weak)
        for r in rows(
            store,
            "SELECT a.label, a.status, a.disposition, a.weak FROM request_acks a JOIN signals s ON s.id = a.signal_id "
            "WHERE s.correlation_id = :cid",
            cid=cid,
        )
    }


def test_every_command_kind_and_status_through_the_pipeline(store: AckStore, run_pipeline) -> None:
    lamp = "org.acme/lamp-1"
    cases = [
        ("create", "/", {"attributes": {"on": True}}, {}, 201),
        ("create", "/", {}, {}, 409),
        ("modify", "/attributes/on", False, {}, 204),
        ("modify", "/attributes/floor", 2, {}, 201),
        ("merge", "/", {"attributes": {"floor": None}, "features": {"f": {"properties": {"x": 1}}}}, {}, 204),
        ("modify", "/features/f/properties/x", 2, {}, 204),
        ("modify", "/features/f/desiredProperties", {"x": 3}, {}, 201),
        ("modify", "/features/g/properties/x", 1, {}, 404),
        ("modify", "/definition", "org.acme:lamp:1.0.0", {}, 201),
        ("modify", "/policyId", "org.acme:policy", {}, 201),
        ("modify", "/", {"attributes": {}}, {"if_match": '"rev:1"'}, 412),
        ("modify", "/attributes//x", 1, {}, 400),
        ("modify", "/attributes/huge", "x" * 2000, {}, 413),
        ("delete", "/attributes/on", None, {}, 204),
        ("delete", "/features/f", None, {}, 204),
        ("delete", "/", None, {}, 204),
        ("delete", "/", None, {}, 404),
        ("modify", "/", {"attributes": {"back": True}}, {}, 201),
    ]
    cids = [submit(store, a, p, v, thing=lamp, cid=f"c{i}", **h) for i, (a, p, v, h, _) in enumerate(cases)]
    submit(store, "modify", "/attributes/a", 1, thing="org.acme/ghost", cid="ghost")

    stats = run_pipeline(max_thing_bytes=1000)

    assert [response_of(store, cid)[0] for cid in cids] == [status for *_, status in cases]
    assert response_of(store, "ghost")[0] == 404
    assert response_of(store, "ghost")[1]["error"] == "things:thing.notfound"
    applied = [cid for cid, case in zip(cids, cases) if case[-1] < 400]
    # a twin-persisted ack exists if and only if the change was persisted
    assert {cid for cid in cids if "twin-persisted" in acks_of(store, cid)} == set(applied)
    events = rows(store, "SELECT revision, action FROM thing_events WHERE thing_id = 'org.acme:lamp-1' ORDER BY revision")
    assert [e.revision for e in events] == list(range(1, len(applied) + 1))
    assert [e.action for e in events][:3] == ["created", "modified", "created"]
    (thing,) = rows(store, "SELECT revision, document, deleted FROM things")
    assert thing.revision == len(applied) and thing.document == {"thingId": "org.acme:lamp-1", "attributes": {"back": True}}
    assert stats["apply_twin"]["commands"] == len(cases) + 1
    # what the requesters are told: the plain command response (only twin-persisted requested)
    assert store.result("c0") == {"status": 201, "body": {"thingId": "org.acme:lamp-1", "attributes": {"on": True}},
                                  "headers": {"correlation-id": "c0"}}
    assert store.result("c1")["status"] == 409 and store.result("c1")["body"]["error"] == "things:thing.conflict"
    assert store.result("c2") == {"status": 204, "body": None, "headers": {"correlation-id": "c2"}}


def test_events_carry_only_the_custom_requested_acks(store: AckStore, run_pipeline) -> None:
    store.declare("auditor", ["org:audit"])
    submit(store, "modify", "/", {}, cid="c", requested_acks=["twin-persisted", "org:audit", "search-persisted"])
    run_pipeline("apply_twin")
    (event,) = rows(store, "SELECT headers FROM thing_events")
    assert event.headers["requested-acks"] == ["org:audit"]
    assert event.headers["correlation-id"] == "c"


def test_a_second_run_changes_nothing(store: AckStore, engine, run_pipeline) -> None:
    for i in range(5):
        submit(store, "modify", "/attributes/n", i, thing=f"org.acme/t{i % 2}", cid=f"c{i}",
               requested_acks=["twin-persisted", "search-persisted"])
    submit(store, "modify", "/", {}, thing="org.acme/t0", cid="root")
    run_pipeline()
    first = snapshot(engine, without=("pipeline_runs",))
    stats = run_pipeline()
    assert snapshot(engine, without=("pipeline_runs",)) == first
    assert stats["apply_twin"]["commands"] == 0 and stats["sweep"]["decided"] == 0


def test_search_persisted_204_then_weak_200_when_nothing_changed(store: AckStore, run_pipeline) -> None:
    both = ["twin-persisted", "search-persisted"]
    submit(store, "modify", "/", {"attributes": {"on": True}}, cid="a", requested_acks=both)
    run_pipeline()
    assert acks_of(store, "a")["search-persisted"] == (204, "counted", False)
    assert store.result("a")["status"] == 200
    submit(store, "modify", "/attributes/on", True, cid="same", requested_acks=both)  # same document
    run_pipeline()
    assert acks_of(store, "same")["search-persisted"] == (200, "counted", True)
    (weak,) = rows(store, "SELECT headers, payload FROM request_acks WHERE weak")
    assert weak.headers["ditto-weak-ack"] is True and isinstance(weak.payload, str)
    assert store.result("same")["status"] == 200  # a weak ack is a success


def test_deleted_thing_leaves_the_index(store: AckStore, run_pipeline) -> None:
    submit(store, "modify", "/", {"attributes": {"on": True}}, cid="a")
    run_pipeline()
    assert store.search("eq(attributes/on,true)")["items"] == ["org.acme:lamp-1"]
    submit(store, "delete", "/", cid="d", requested_acks=["search-persisted"])
    run_pipeline()
    assert store.search("eq(attributes/on,true)")["items"] == []
    assert rows(store, "SELECT count(*) FROM search_index")[0][0] == 0
    assert acks_of(store, "d")["search-persisted"][0] == 204


# --- search: every RQL operator over nested objects, arrays, numbers, booleans -----------------

THINGS = {
    "org.acme:kitchen": {"attributes": {"room": "kitchen", "floor": 2, "on": True, "tags": ["a", "b"], "note": "",
                                        "loc": {"lat": 1.5}},
                         "features": {"temp": {"properties": {"value": 21.5}}}},
    "org.acme:cellar": {"attributes": {"room": "Cellar", "floor": -1, "on": False, "tags": [], "note": None}},
    "other:garage": {"attributes": {"room": "garage", "floor": 0, "tags": ["b", {"k": "v"}], "loc": {}}},
}


@pytest.fixture
def indexed(store: AckStore, run_pipeline) -> AckStore:
    for i, (thing_id, document) in enumerate(THINGS.items()):
        submit(store, "create", "/", document, thing=thing_id.replace(":", "/"), cid=f"t{i}")
    run_pipeline("apply_twin", "index_search")
    return store


RQL_CASES = [
    ('eq(attributes/room,"kitchen")', ["org.acme:kitchen"]),
    ('eq(attributes/floor,2)', ["org.acme:kitchen"]),
    ('eq(attributes/on,false)', ["org.acme:cellar"]),
    ('eq(attributes/note,null)', ["org.acme:cellar"]),
    ('eq(attributes/floor,"2")', []),  # no conversion between types
    ('ne(attributes/room,"kitchen")', ["org.acme:cellar", "other:garage"]),
    ('ne(attributes/on,true)', ["org.acme:cellar", "other:garage"]),  # absent counts as not equal
    ('gt(attributes/floor,0)', ["org.acme:kitchen"]),
    ('ge(attributes/floor,0)', ["org.acme:kitchen", "other:garage"]),
    ('lt(attributes/floor,0)', ["org.acme:cellar"]),
    ('le(attributes/floor,0)', ["org.acme:cellar", "other:garage"]),
    ('gt(features/temp/properties/value,21.4)', ["org.acme:kitchen"]),
    ('gt(attributes/room,"h")', ["org.acme:kitchen"]),  # string order, byte-wise
    ('like(attributes/room,"*ara*")', ["other:garage"]),
    ('like(attributes/room,"?itchen")', ["org.acme:kitchen"]),
    ('like(attributes/room,"cellar")', []),
    ('ilike(attributes/room,"cellar")', ["org.acme:cellar"]),
    ('in(attributes/floor,2,-1)', ["org.acme:cellar", "org.acme:kitchen"]),
    ('in(attributes/room,"garage","nowhere")', ["other:garage"]),
    ('eq(attributes/tags,"b")', ["org.acme:kitchen", "other:garage"]),  # arrays: any element
    ('eq(attributes/tags/k,"v")', ["other:garage"]),
    ('eq(attributes/loc/lat,1.5)', ["org.acme:kitchen"]),
    ('exists(attributes/loc)', ["org.acme:kitchen", "other:garage"]),
    ('exists(features/temp/properties)', ["org.acme:kitchen"]),
    ('empty(attributes/note)', ["org.acme:cellar", "org.acme:kitchen", "other:garage"]),
    ('empty(attributes/tags)', ["org.acme:cellar"]),
    ('empty(attributes/loc)', ["org.acme:cellar", "other:garage"]),
    ('not(empty(attributes/floor))', ["org.acme:cellar", "org.acme:kitchen", "other:garage"]),  # 0 is not empty
    ('and(eq(attributes/on,true),gt(attributes/floor,1))', ["org.acme:kitchen"]),
    ('or(eq(attributes/on,false),eq(attributes/room,"garage"))', ["org.acme:cellar", "other:garage"]),
    ('not(exists(attributes/on))', ["other:garage"]),
    ('eq(/attributes/room,"garage")', ["other:garage"]),  # leading slash allowed
    ('eq(thingId,"org.acme:cellar")', ["org.acme:cellar"]),
]


def test_every_rql_operator(indexed: AckStore) -> None:
    for expression, expected in RQL_CASES:
        assert indexed.search(expression)["items"] == expected, expression


def test_search_by_namespace_and_malformed_filters(indexed: AckStore) -> None:
    assert indexed.search("exists(attributes/room)", ["other"])["items"] == ["other:garage"]
    answer = indexed.search("and(eq(attributes/room,1)")
    assert answer["status"] == 400 and answer["error"] == "rql.expression.invalid"
    assert "position" in answer["message"]


# --- deadlines judged by the facts' time (A.2.1) -------------------------------------------------


def _move_deadline(store: AckStore, cid: str, *, acks_in_time: bool) -> None:
    """Test setup: place the request's deadline just after its last ack was committed, or just
    before its first one, as if the request had been received that long ago."""
    with store.engine.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))  # past the immutable-signals trigger
        deadline = conn.execute(
            text(
                "SELECT CASE WHEN :in_time THEN max(a.received_at) + interval '1 millisecond' "
                "            ELSE min(a.received_at) - interval '1 millisecond' END "
                "FROM request_acks a JOIN signals s ON s.id = a.signal_id WHERE s.correlation_id = :cid"
            ),
            {"cid": cid, "in_time": acks_in_time},
        ).scalar_one()
        moved = {"cid": cid, "deadline": deadline}
        conn.execute(text("UPDATE signals SET received_at = :deadline - interval '1 second', deadline_at = :deadline "
                          "WHERE correlation_id = :cid"), moved)
        conn.execute(text("UPDATE attempts a SET opened_at = :deadline - interval '1 second', deadline_at = :deadline "
                          "FROM signals s WHERE s.id = a.signal_id AND a.attempt = 1 AND s.correlation_id = :cid"), moved)


def test_acks_committed_before_the_deadline_count_even_if_the_sweep_runs_later(store, run_pipeline) -> None:
    submit(store, "modify", "/", {}, cid="in-time", requested_acks=["twin-persisted", "search-persisted"])
    run_pipeline("apply_twin", "index_search")
    _move_deadline(store, "in-time", acks_in_time=True)
    time.sleep(0.05)  # the deadline is now in the past: the sweep runs "late"
    run_pipeline("sweep")
    assert store.result("in-time")["status"] == 200
    assert set(store.result("in-time")["body"]) == {"twin-persisted", "search-persisted"}
    assert {v[1] for v in acks_of(store, "in-time").values()} == {"counted"}


def test_acks_committed_after_the_deadline_are_late(store, run_pipeline) -> None:
    submit(store, "modify", "/", {}, cid="late", requested_acks=["twin-persisted", "search-persisted"])
    run_pipeline("apply_twin", "index_search")
    _move_deadline(store, "late", acks_in_time=False)
    run_pipeline("sweep")
    result = store.result("late")
    assert result["status"] == 424  # two labels, both timed out
    assert {entry["status"] for entry in result["body"].values()} == {408}
    assert result["body"]["twin-persisted"]["payload"]["error"] == "acknowledgement:request.timeout"
    assert {v[1] for v in acks_of(store, "late").values()} == {"late"}  # kept, flagged


def test_a_request_decided_before_its_command_is_applied_gets_a_late_twin_persisted(store, run_pipeline) -> None:
    submit(store, "modify", "/", {}, cid="slow", timeout="1ms")
    time.sleep(0.05)
    run_pipeline("sweep")
    assert store.result("slow")["status"] == 408
    assert store.result("slow")["body"]["error"] == "command.timeout"
    run_pipeline("apply_twin")
    assert acks_of(store, "slow") == {"twin-persisted": (201, "late", False)}
    assert store.result("slow")["status"] == 408  # a decided result never changes


# --- B.5's result table, through the pipeline ------------------------------------------------------


def test_b5_result_table(store: AckStore, run_pipeline) -> None:
    store.declare("app", ["org:one", "org:two"])
    both = ["twin-persisted", "org:one"]
    submit(store, "modify", "/", {}, cid="existing")
    # error first: the twin command fails, custom acks are discarded (even one that arrived)
    submit(store, "modify", "/attributes/x", 1, thing="org.acme/none", cid="error", requested_acks=both)
    store.acknowledge("app", ack_message("error", "org:one", 200))
    # exactly one built-in label, response arrived: the plain response
    submit(store, "modify", "/attributes/x", 1, cid="plain", requested_acks=["twin-persisted"])
    # exactly one built-in label, deadline passed before it arrived: 408 command.timeout
    submit(store, "modify", "/attributes/y", 1, cid="timeout", requested_acks=["twin-persisted"], timeout="1ms")
    # exactly one custom ack: its status
    submit(store, "modify", "/attributes/z", 1, cid="one-custom", requested_acks=["org:one"])
    store.acknowledge("app", ack_message("one-custom", "org:one", 400, {"why": "no"}))
    # one custom label that never came: its 408 placeholder
    submit(store, "modify", "/attributes/z", 2, cid="custom-timeout", requested_acks=["org:two"], timeout="1ms")
    # ≥2 acks all 2xx: 200; ≥2 with a failure: 424
    submit(store, "modify", "/attributes/w", 1, cid="all-ok", requested_acks=both)
    store.acknowledge("app", ack_message("all-ok", "org:one", 204))
    submit(store, "modify", "/attributes/w", 2, cid="one-failed", requested_acks=both)
    store.acknowledge("app", ack_message("one-failed", "org:one", 500))
    # no labels requested: the plain response, or 202 without response-required
    submit(store, "modify", "/attributes/v", 1, cid="no-acks", requested_acks=[])
    submit(store, "modify", "/attributes/v", 2, cid="fire-and-forget", requested_acks=[], response_required=False)
    time.sleep(0.05)

    run_pipeline("sweep")  # first, as if the apply job were late: decides the timed-out ones
    run_pipeline()

    def told(cid: str) -> tuple[int, Any]:
        result = store.result(cid)
        return result["status"], result["body"]

    assert told("error")[0] == 404 and told("error")[1]["error"] == "things:thing.notfound"
    assert told("plain") == (201, 1)
    assert told("timeout")[0] == 408 and told("timeout")[1]["error"] == "command.timeout"
    assert told("one-custom") == (400, {"why": "no"})
    assert told("custom-timeout")[0] == 408
    assert told("custom-timeout")[1]["error"] == "acknowledgement:request.timeout"
    assert told("all-ok")[0] == 200 and set(told("all-ok")[1]) == set(both)
    assert told("one-failed")[0] == 424 and told("one-failed")[1]["org:one"]["status"] == 500
    assert told("no-acks") == (201, 1)
    assert told("fire-and-forget") == (202, None)


def test_an_in_time_ack_committed_after_the_sweeps_read_defers_the_decision(store, spark, database_url) -> None:
    """White-box: stage the sweep's decisions, then let an ack land whose transaction began
    before the deadline (its fact time), then merge. The stale decision must not be stored."""
    from ackstore.ledger.schema import stage_results
    from jobs import sweep
    from jobs.settings import PipelineSettings
    from jobs.step import Step

    store.declare("app", ["org:one"])
    submit(store, "modify", "/", {}, cid="racy", requested_acks=["org:one"], timeout="1ms")
    time.sleep(0.05)
    step = Step(sweep.JOB, PipelineSettings(database_url=database_url, partitions=1), (stage_results,))
    with step.locked():
        sweep._stage(spark, step, (1, 1))  # decides "racy": 408, no ack seen
        assert store.acknowledge("app", ack_message("racy", "org:one", 200)) == {"status": 204}
        with store.engine.begin() as conn:  # its transaction began before the deadline (an ack's facts
            conn.execute(text("SET LOCAL session_replication_role = replica"))  # never change: the guard off)
            conn.execute(text("UPDATE acks SET received_at = (SELECT received_at FROM signals WHERE correlation_id = 'racy')"))
        sweep._merge(step)
    assert step.stats["deferred"] == 1 and store.result("racy") is None
    sweep.run(spark, PipelineSettings(database_url=database_url, partitions=1))
    assert store.result("racy")["status"] == 200  # decided with the ack that counted


def test_a_run_with_nothing_pending_opens_no_spark_session(store: AckStore, database_url: str) -> None:
    """Every step looks at its queue before it asks for Spark: an idle minute costs no session."""
    from jobs import pipeline
    from jobs.settings import PipelineSettings
    from jobs.spark import LazySession

    session = LazySession("never-opened")
    stats = pipeline.run(session, PipelineSettings(database_url=database_url))
    assert list(stats) == list(pipeline.STEPS)
    assert not session.opened


def test_a_run_makes_passes_while_work_arrives_and_stops_when_caught_up(store: AckStore, spark, database_url) -> None:
    """What arrives while a run works is applied and decided by its next pass, not the next run's:
    commands submitted once the first pass has applied its own go through pass 2; pass 3 finds
    nothing and is the last."""
    from jobs import pipeline
    from jobs.settings import PipelineSettings

    first = [submit(store, "create", "/", {}, cid="first-0", requested_acks=["twin-persisted"])]
    first += [submit(store, "modify", "/attributes/n", n, cid=f"first-{n}", requested_acks=["twin-persisted"])
              for n in (1, 2)]
    later: list[str] = []

    def submit_once_applied() -> None:
        deadline = time.monotonic() + 120
        while not rows(store, "SELECT 1 FROM pipeline_runs WHERE run_id = 'passes' AND step = 'apply_twin'"):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        later.extend(submit(store, "modify", "/attributes/n", n, cid=f"later-{n}", requested_acks=["twin-persisted"])
                     for n in range(2))

    import threading

    submitter = threading.Thread(target=submit_once_applied)
    submitter.start()
    passes = pipeline.run_while_behind(spark, PipelineSettings(database_url=database_url, partitions=2,
                                                               run_id="passes"), within=600)
    submitter.join()
    assert list(passes) == ["passes", "passes#2", "passes#3"]
    assert [each["apply_twin"]["commands"] for each in passes.values()] == [3, 2, 0]
    assert not pipeline.found_work(passes["passes#3"])
    created = {"first-0": 201, "first-1": 201}  # the thing, then its attribute; the rest modify
    assert {cid: store.result(cid)["status"] for cid in first + later} == {**dict.fromkeys(first + later, 204),
                                                                           **created}
    recorded = rows(store, "SELECT DISTINCT run_id FROM pipeline_runs ORDER BY run_id")
    assert [r.run_id for r in recorded] == ["passes", "passes#2", "passes#3"]


def test_no_pass_begins_after_the_interval(store: AckStore, spark, database_url) -> None:
    """Once ``within`` has gone by the run stops, work or not: the next scheduled run, due by
    then, takes it."""
    from jobs import pipeline
    from jobs.settings import PipelineSettings

    submit(store, "modify", "/attributes/n", 1, cid="one", requested_acks=["twin-persisted"])
    passes = pipeline.run_while_behind(spark, PipelineSettings(database_url=database_url, partitions=2, run_id="short"),
                                       within=0)
    assert list(passes) == ["short"] and pipeline.found_work(passes["short"])


def _connections_opened(work: Any) -> int:
    """How many database connections this process opened while ``work()`` ran."""
    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    opened = []
    listener = lambda *_: opened.append(1)  # noqa: E731
    event.listen(Pool, "connect", listener)
    try:
        work()
    finally:
        event.remove(Pool, "connect", listener)
    return len(opened)


def test_the_steps_of_a_pass_and_the_passes_of_a_run_share_their_connections(store: AckStore, database_url: str) -> None:
    """One pool for a pass, and for every pass of a run (jobs.step.shared_engines): an idle pass
    opened 16 connections when each step had its own, each a backend the server starts and ends.
    When the run ends, none of its connections is left open."""
    from jobs import pipeline
    from jobs.settings import PipelineSettings
    from jobs.spark import LazySession

    def backends() -> set[int]:
        return {row.pid for row in rows(store, "SELECT pid FROM pg_stat_activity WHERE datname = current_database()")}

    settings = PipelineSettings(database_url=database_url, run_id="shared")
    before = backends()
    assert _connections_opened(lambda: pipeline.run(LazySession("never-opened"), settings)) <= 3
    assert _connections_opened(lambda: pipeline.run_while_behind(LazySession("never-opened"), settings, within=60)) <= 3
    # a closed connection's backend ends a moment after its socket closes (later on a busy machine)
    deadline = time.monotonic() + 10
    while not backends() <= before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert backends() <= before


def test_an_idle_pass_leaves_empty_staging_tables_alone_and_clears_a_dead_runs_rows(store: AckStore, engine,
                                                                                     database_url: str) -> None:
    """A step clears what a dead run staged before it stages anything; an empty staging table is
    not truncated (a TRUNCATE makes new files: ~12 ms of the server's time a table, most of an idle
    pass's cost). Its file node tells which happened."""
    from jobs import pipeline
    from jobs.settings import PipelineSettings
    from jobs.spark import LazySession

    def filenodes() -> dict[str, int]:
        found = rows(store, "SELECT relname, relfilenode FROM pg_class WHERE relname LIKE 'stage\\_%' AND relkind = 'r'")
        return {row.relname: row.relfilenode for row in found}

    pipeline.run(LazySession("never-opened"), PipelineSettings(database_url=database_url, run_id="first"))
    before = filenodes()
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO stage_results (signal_id, attempt, status, headers, cause, ack_statuses, acks_seen, run_id) "
                          "VALUES (1, 1, 200, '{}', 'dead', '{}', 0, 'dead')"))
    pipeline.run(LazySession("never-opened"), PipelineSettings(database_url=database_url, run_id="second"))
    after = filenodes()
    assert rows(store, "SELECT count(*) AS n FROM stage_results")[0].n == 0
    assert {name for name in before if after[name] != before[name]} == {"stage_results"}
