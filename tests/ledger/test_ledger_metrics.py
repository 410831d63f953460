"""The ledger's metrics (issue 38, docs/metrics.md): `ackstore metrics` serves Prometheus text whose
counters agree with the reports for any ledger, never change when a seal rolls facts into the
totals, and are read by the reporter's login; a scrape of a ledger it cannot reach says so."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, text

from ackstore.ledger import reports, seals
from ackstore.ledger.database_url import DatabaseUrl
from ackstore.reporting import metrics
from tests.support.ledger import empty
from tests.support.metrics_doc import documented as documented_metrics
from tests.support.logins import as_login, logins  # noqa: F401 — the fixture
from tests.support.scraped import Samples, samples
from tests.support.seeded_ledger import ALL, STANDINGS, Attempt, Signal, ack, seed

BUCKETS = (1, 2, 5, 10, 15, 30, 45, 60, 90, 120, 180, 300, 600, 1200, 1800, 3600)


def scraped(engine: Engine) -> Samples:
    return samples(generate_latest(metrics.registry_for(engine)).decode())


def by(found: Samples, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    """The samples of ``name`` summed by ``labels``, the zero ones left out."""
    summed: dict[tuple[str, ...], float] = defaultdict(float)
    for (sample, pairs), value in found.items():
        if sample == name:
            summed[tuple(dict(pairs)[label] for label in labels)] += value
    return {key: value for key, value in summed.items() if value}


def reported_settlements(engine: Engine) -> dict[tuple[str, str], float]:
    """report settlement's decided and carried-out rows, per source and decision."""
    summed: dict[tuple[str, str], float] = defaultdict(float)
    with engine.connect() as conn:
        for row in reports.settlement(conn):
            if row["status"] != "pending decision":
                summed[(row["source"], row["decision"])] += row["requests"]
    return dict(summed)


def reported_carried_out(engine: Engine) -> dict[tuple[str, str], float]:
    with engine.connect() as conn:
        return {(row["source"], row["decision"]): float(row["requests"]) for row in reports.settlement(conn)
                if row["status"] == "carried out"}


def reported_latency_counts(engine: Engine, measure: str) -> dict[tuple[str], float]:
    summed: dict[tuple[str], float] = defaultdict(float)
    with engine.connect() as conn:
        for row in reports.latency(conn, ALL, reports_bucket(), 1000):
            if row["measure"] == measure:
                summed[(row["source"],)] += row["measured"]
    return {key: value for key, value in summed.items() if value}


def reports_bucket() -> Any:
    from datetime import timedelta

    return timedelta(days=365)


def expected_buckets(latencies: list[float]) -> dict[str, float]:
    """Prometheus's cumulative buckets of ``latencies``, computed here (not by the SQL)."""
    return {**{str(float(bound)): float(sum(1 for x in latencies if x <= bound)) for bound in BUCKETS},
            "+Inf": float(len(latencies))}


def _ledger_of(drawn: list[tuple[str, str, int]]) -> list[Signal]:
    signals = []
    for n, (source, standing, took) in enumerate(drawn):
        status, settled = STANDINGS[standing]
        if source == "api":
            settled = None  # the API's signals are never settled on a broker
        decided = None if status is None else n + took
        settlement = None if settled is None else (settled[0], decided + 1,
                                                  None if settled[2] is None else decided + 1 + took * 7)
        signals.append(Signal(f"m{n}", source, n, [Attempt(["app:done"], n, n + 60, decided, status, "acks",
                                                           {} if status is None else {"app:done": status}, settlement)]))
    return signals


@given(st.lists(st.tuples(st.sampled_from(["api", "plant-a", "plant-b"]), st.sampled_from(sorted(STANDINGS)),
                          st.integers(min_value=0, max_value=4000)), max_size=30),
       st.integers(min_value=0, max_value=30))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_counters_of_any_ledger_agree_with_the_reports_before_and_after_a_seal(engine: Engine, drawn,
                                                                                   sealed_after: int) -> None:
    """For any ledger, the settlement counters are report settlement's rows, the histograms' counts
    report latency's, their buckets what the latencies give — and none of it changes when a seal
    rolls the facts into the totals, wherever the seal falls."""
    with engine.begin() as conn:
        empty(conn)
    signals = _ledger_of(drawn)
    seed(engine, signals=signals[:sealed_after])
    seals.seal(engine)
    seed(engine, signals=signals[sealed_after:])
    before = scraped(engine)

    assert by(before, "ackstore_settlement_decisions_total", "source", "decision") == reported_settlements(engine)
    assert by(before, "ackstore_settlements_carried_out_total", "source", "decision") == reported_carried_out(engine)
    for measure, name in (("received_to_decided", "ackstore_received_to_decided_seconds_count"),
                          ("decided_to_carried_out", "ackstore_decided_to_carried_out_seconds_count")):
        assert by(before, name, "source") == reported_latency_counts(engine, measure)
    received = defaultdict(float)
    for each in signals:
        received[(each.source,)] += 1
    assert by(before, "ackstore_signals_stored_total", "source") == dict(received)
    for source in {each.source for each in signals}:
        latencies = [a.decided - s.received for s in signals if s.source == source for a in s.attempts
                     if a.decided is not None]
        served = {dict(labels)["le"]: value for (name, labels), value in before.items()
                  if name == "ackstore_received_to_decided_seconds_bucket" and dict(labels)["source"] == source}
        if latencies:
            assert served == expected_buckets(latencies)
    dead = {(s.source,): 1.0 for s in signals for a in s.attempts if a.settlement and a.settlement[0] == "dead-letter"
            and a.settlement[2] is not None}
    assert set(by(before, "ackstore_dead_letters_total", "source")) == set(dead)

    seals.seal(engine)
    after = scraped(engine)
    assert _counters(after) == _counters(before)


def _counters(found: Samples) -> Samples:
    """The counters and histograms: what must never change when only a seal happened."""
    return {key: value for key, value in found.items()
            if key[0].endswith(("_total", "_bucket", "_count", "_sum")) and "scrape" not in key[0]}


def test_each_late_and_weak_ack_is_counted_once_whenever_it_is_sealed(engine: Engine) -> None:
    """A counted ack after the deadline of an attempt its deadline decided is late once that
    decision is written; an ack stored late is late when stored; a weak ack is counted — each once,
    as report late-acks counts them, whether the seal came between or not."""
    late_by_deadline = Signal("d1", "plant-a", 0, [Attempt(
        ["app:done"], 0, 10, 12, 408, "deadline", {"app:done": 408}, None,
        [ack("app:done", 200, "app", 11)])])
    decided_then_acked = Signal("d2", "plant-a", 1, [Attempt(
        ["app:done"], 1, 60, 5, 200, "acks", {"app:done": 200}, None,
        [ack("app:done", 200, "app", 4), ack("app:done", 500, "other", 8, disposition="late"),
         ack("app:weak", 200, "app", 3, weak=True)])])
    seed(engine, signals=[late_by_deadline])
    seals.seal(engine)
    seed(engine, signals=[decided_then_acked])
    found = scraped(engine)
    with engine.connect() as conn:
        late = reports.late_acks(conn, ALL, 100)
    assert by(found, "ackstore_late_acks_total", "source") == {("plant-a",): 2.0} and len(late) == 2
    assert by(found, "ackstore_weak_acks_total", "source") == {("plant-a",): 1.0}
    seals.seal(engine)
    assert _counters(scraped(engine)) == _counters(found)


def test_the_gauges_follow_the_open_work_the_steps_and_the_seals(engine: Engine) -> None:
    seed(engine, signals=_ledger_of([("plant-a", "undecided", 0), ("plant-a", "not carried out", 5),
                                     ("api", "undecided", 0), ("plant-b", "acked", 5)]))
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO queue_decide (signal_id, attempt) SELECT id, 1 FROM signals "
                          "WHERE correlation_id IN ('m0', 'm2')"))
        conn.execute(text("INSERT INTO pipeline_watermarks (name, position) VALUES ('validated_results', 1) "
                          "ON CONFLICT (name) DO UPDATE SET position = 1"))  # the gate passed the seeded results
        conn.execute(text("INSERT INTO pipeline_runs (run_id, step, stats, finished_at) VALUES "
                          "('r1', 'validate', '{\"seconds\": 2.5, \"failures\": []}', now()), "
                          "('r1', 'seal', '{\"seconds\": 0.5}', now()), ('r2', 'validate', '{\"seconds\": 1.5}', now())"))
    found = scraped(engine)
    gauge = {(name, labels): value for (name, labels), value in found.items()}
    assert by(found, "ackstore_queue_pending", "queue") == {("decide",): 2.0, ("carry_out",): 1.0}
    assert by(found, "ackstore_held_undecided", "source") == {("plant-a",): 1.0}  # the API holds nothing
    assert set(by(found, "ackstore_oldest_undecided_age_seconds", "source")) == {("plant-a",), ("api",)}
    # plant-a's oldest unsettled is its undecided m0 (received first); its settling m1 counts too
    assert set(by(found, "ackstore_oldest_unsettled_age_seconds", "source")) == {("plant-a",), ("api",)}
    assert by(found, "ackstore_step_last_duration_seconds", "step") == {("validate",): 1.5, ("seal",): 0.5}
    assert gauge[("ackstore_validation_failed", ())] == 0  # the last run (r2) passed; r1's failed
    assert ("ackstore_pipeline_last_success_timestamp_seconds", ()) in gauge
    assert gauge[("ackstore_seal_last_number", ())] == 0 and gauge[("ackstore_facts_unsealed", ())] > 0
    seals.seal(engine)
    sealed = scraped(engine)
    assert sealed[("ackstore_seal_last_number", ())] == 1 and sealed[("ackstore_facts_unsealed", ())] == 0


@pytest.fixture
def exporter(engine: Engine, database_url: str) -> Iterator[Any]:
    """`ackstore metrics` as a user starts it, on a free port; stopped by its PID."""
    started: list[subprocess.Popen] = []

    def start(url: str) -> str:
        process = subprocess.Popen([str(Path(sys.executable).parent / "ackstore"), "--database-url", url, "metrics",
                                    "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started.append(process)
        line = process.stdout.readline()
        assert line, process.stderr.read()
        return json.loads(line)["serving"]

    yield start
    for process in started:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as answer:
        assert answer.status == 200
        return answer.read().decode()


def test_ackstore_metrics_serves_every_documented_metric_to_the_reporters_login(
        engine: Engine, database_url: str, exporter, logins) -> None:  # noqa: F811 — the fixture
    seed(engine, signals=_ledger_of([("plant-a", "acked", 3), ("plant-a", "dead-letter", 9), ("api", "undecided", 0)]))
    url = exporter(as_login(database_url, logins["ackstore_reporter"]))
    found = samples(_get(url))
    assert found[("ackstore_ledger_up", ())] == 1
    served = {family.name: family.type for family in text_string_to_metric_families(_get(url))}
    documented = documented_metrics("The ledger's exporter")
    assert documented, "docs/metrics.md lists no ledger metric"
    assert {name.removesuffix("_total"): kind for name, kind in documented.items()} == served
    assert by(found, "ackstore_dead_letters_total", "source") == {("plant-a",): 1.0}


def test_a_scrape_of_a_ledger_it_cannot_reach_says_so_and_the_exporter_stays_up(exporter, database_url: str) -> None:
    unreachable = DatabaseUrl({**DatabaseUrl.parse(database_url).params, "port": "1"}).text()
    url = exporter(unreachable)
    for _ in range(2):  # it answers every scrape
        assert samples(_get(url))[("ackstore_ledger_up", ())] == 0


def test_the_bounds_of_the_buckets_are_the_sqls() -> None:
    """The test's own list of bounds is the one the SQL function holds (what a dashboard's le means)."""
    from ackstore.ledger.named_sql import load, LEDGER_SQL

    declared = load(LEDGER_SQL / "objects" / "metrics.sql")["latency_buckets"]
    assert "{" + ",".join(str(b) for b in BUCKETS) + "}" in declared


def test_a_bucket_holds_what_is_at_or_under_its_bound(engine: Engine) -> None:
    with engine.connect() as conn:
        got = [conn.execute(text("SELECT latency_bucket(:s)"), {"s": s}).scalar_one()
               for s in (0.0, 1.0, 1.000001, 3600.0, 3600.5, -1.0)]
    assert got == ["1", "1", "2", "3600", "+Inf", "1"]


EDGES = [s for bound in BUCKETS for s in (bound, bound - 1e-9, bound + 1e-9, float(bound) * (1 + 1e-15))]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=200))
def test_every_latency_falls_in_the_smallest_bucket_at_or_above_it(engine: Engine, latencies: list[float]) -> None:
    """latency_bucket (migration 0023: width_bucket, inlined) against the rule computed here:
    every bound and its nearest neighbours, NULL, NaN, infinities and any float."""
    values = [*latencies, *EDGES, None, float("nan"), float("inf"), float("-inf"), 0.0, -0.0]
    with engine.connect() as conn:
        got = conn.execute(text("SELECT latency_bucket(s) FROM unnest(CAST(:v AS float8[])) WITH ORDINALITY AS u(s, i) "
                                "ORDER BY i"), {"v": values}).scalars().all()

    def expected(s: float | None) -> str:
        above = [bound for bound in BUCKETS if s is not None and s == s and bound >= s]
        return str(min(above)) if above else "+Inf"

    assert got == [expected(s) for s in values]


def _persist(engine: Engine, correlation_id: str, committed_at: Any, event_id: int) -> None:
    """apply_twin's merge of one command's change: its response, then its batch (written last)."""
    with engine.begin() as conn:
        batch = conn.execute(text("INSERT INTO ledger_batches (step, run_id, committed_at) "
                                  "VALUES ('apply_twin', 'r', :at) RETURNING id"), {"at": committed_at}).scalar_one()
        conn.execute(text("INSERT INTO command_responses (signal_id, status, is_error, batch_id, event_id, revision, "
                          "event_action) SELECT id, 204, false, :b, :e, 1, 'modified' FROM signals "
                          "WHERE correlation_id = :c"), {"b": batch, "e": event_id, "c": correlation_id})


def _decide(engine: Engine, correlation_id: str, decided_at: Any) -> None:
    """The sweep's 408 at the deadline."""
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO request_results (signal_id, attempt, status, headers, cause, ack_statuses, "
                          "decided_at, batch_id) SELECT id, 1, 408, '{}', 'deadline', '{\"twin-persisted\": 408}', "
                          ":at, 1 FROM signals WHERE correlation_id = :c"), {"at": decided_at, "c": correlation_id})


@pytest.mark.parametrize("seal_between", [False, True], ids=["unsealed", "sealed between"])
def test_a_built_in_ack_late_for_its_attempt_is_counted_once_as_report_late_acks_lists_it(
        engine: Engine, seal_between: bool) -> None:
    """Issue 50: report late-acks listed the built-in acks whose fact came after their attempt timed
    out, the counter did not (they are no rows of acks). Now each is counted once, whichever of its
    decision and its fact came last: f1's change persisted after its 408 was decided, f2's after
    its deadline but before the sweep decided 408 — sealed between the two or not."""
    from tests.support.seeded_ledger import at

    seed(engine, signals=[Signal(name, "plant-a", 0, [Attempt(["twin-persisted"], 0, 10)]) for name in ("f1", "f2")])
    _decide(engine, "f1", at(12))
    _persist(engine, "f2", at(11), 2)
    if seal_between:
        seals.seal(engine)
    _persist(engine, "f1", at(15), 1)
    _decide(engine, "f2", at(13))
    found = scraped(engine)
    with engine.connect() as conn:
        late = reports.late_acks(conn, ALL, 100)
    assert sorted((row["correlation_id"], row["label"]) for row in late) == [("f1", "twin-persisted"),
                                                                            ("f2", "twin-persisted")]
    assert by(found, "ackstore_late_acks_total", "source") == {("plant-a",): 2.0}
    seals.seal(engine)
    assert _counters(scraped(engine)) == _counters(found)
    with engine.connect() as conn:  # every fact they awaited is sealed: nothing is awaited any more
        assert conn.execute(text("SELECT count(*) FROM metric_awaited_facts")).scalar_one() == 0


def _index(engine: Engine, committed_at: Any) -> None:
    """index_search's mark of the seeded thing at revision 1: search-persisted of its command."""
    with engine.begin() as conn:
        batch = conn.execute(text("INSERT INTO ledger_batches (step, run_id, committed_at) "
                                  "VALUES ('index_search', 'r', :at) RETURNING id"), {"at": committed_at}).scalar_one()
        conn.execute(text("INSERT INTO search_marks (thing_id, from_revision, to_revision, batch_id, changed) "
                          "VALUES ('org.acme:t', 0, 1, :b, true)"), {"b": batch})


@pytest.mark.parametrize("seal_between", [False, True], ids=["unsealed", "sealed between"])
def test_a_search_mark_late_for_its_attempt_is_counted_from_the_marks_thing(engine: Engine, seal_between: bool) -> None:
    """Issue 50's review: a late built-in fact is looked for from the new facts — search-persisted
    from the search mark, by its thing, among the awaited attempts: s1's change persisted in time,
    the index reached it after its 408 was decided (sealed between, or not)."""
    from tests.support.seeded_ledger import at

    seed(engine, signals=[Signal("s1", "plant-a", 0, [Attempt(["search-persisted"], 0, 10)])])
    _persist(engine, "s1", at(5), 1)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO request_results (signal_id, attempt, status, headers, cause, ack_statuses, "
                          "decided_at, batch_id) SELECT id, 1, 408, '{}', 'deadline', '{\"search-persisted\": 408}', "
                          ":at, 1 FROM signals WHERE correlation_id = 's1'"), {"at": at(12)})
    if seal_between:
        seals.seal(engine)
        with engine.connect() as conn:  # its search fact may still come: kept, by its thing
            assert conn.execute(text("SELECT thing_id FROM metric_awaited_facts")).scalars().all() == ["org.acme:t"]
    _index(engine, at(15))
    found = scraped(engine)
    with engine.connect() as conn:
        late = reports.late_acks(conn, ALL, 100)
    assert [(row["correlation_id"], row["label"]) for row in late] == [("s1", "search-persisted")]
    assert by(found, "ackstore_late_acks_total", "source") == {("plant-a",): 1.0}
    seals.seal(engine)
    assert _counters(scraped(engine)) == _counters(found)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM metric_awaited_facts")).scalar_one() == 0


def test_a_port_in_use_or_no_port_or_address_is_answered_in_dittos_shape(database_url: str) -> None:
    """Issue 50: `ackstore metrics --port 9464` beside `make airflow`, `--port -1`, `70000` and
    `--host 256.0.0.1` died with a traceback; each is answered as Ditto answers, and exits 1."""
    from tests.support.metrics_ports import assert_answered, unservable

    with unservable() as cases:
        for port, host, expected in cases:
            assert_answered(subprocess.run([str(Path(sys.executable).parent / "ackstore"), "--database-url",
                                            database_url, "metrics", "--port", port, "--host", host],
                                           capture_output=True, text=True, timeout=60), port, expected)


def test_ackstore_metrics_and_make_airflow_never_share_a_default_port() -> None:
    from ackstore.cli import build_parser
    from ackstore.local_airflow import METRICS_PORT

    parser = build_parser()
    standalone = parser.parse_args(["metrics"]).port
    beside_airflow = parser.parse_args(["airflow"]).metrics_port
    assert (standalone, beside_airflow) == (metrics.DEFAULT_PORT, METRICS_PORT) == (9463, 9464)
