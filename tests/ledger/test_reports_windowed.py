"""The windowed reports (latency, watermarks, late acks, labels) on a hand-built ledger.

Every fact is written with its own time, so the expectations are computed here from the seed
itself — percentiles by linear interpolation in Python, watermarks by walking each source's
signals in order — never by the views or functions under test. Windows: everything, one source,
one bucket, an empty one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from ackstore.ledger import reports
from ackstore.ledger.reports import Window
from ackstore.reporting.asked import parse_bucket, parse_instant, window_of
from ackstore.rules import errors, settlement
from ackstore.rules.limits import MAX_SOURCE_BYTES
from tests.support.seeded_ledger import ALL, SEED, STANDINGS, T0, Attempt, Signal, at, seed


@pytest.fixture
def seeded(engine: Engine) -> Engine:
    seed(engine)
    return engine


# --- the independent computation ------------------------------------------------------------------

def percentile(values: list[float], fraction: float) -> float | None:
    """PostgreSQL's percentile_cont: linear interpolation between the closest ranks."""
    if not values:
        return None
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def in_window(window: Window, signals: list[Signal] | None = None) -> list[Signal]:
    return [s for s in (SEED if signals is None else signals) if window.since <= at(s.received) < window.until
            and (window.source is None or s.source == window.source)]


def expected_state(needs_transport: bool, decided: bool, decision: str | None, carried: bool) -> str:
    """Where a seeded signal stands (the seed stores no command responses)."""
    return settlement.signal_state(needs_transport=needs_transport, response_failed=None, decided=decided,
                                   decision=decision, carried_out=carried).value


def state(signal: Signal) -> str:
    """Where a signal stands, walked by hand: its newest attempt's decision and settlement."""
    current = signal.attempts[-1]
    decision, _, carried = current.settlement or (None, None, None)
    return expected_state(settlement.needs_transport_settlement(signal.api, signal.source),
                          current.decided is not None, decision, carried is not None)


def expected_latency(window: Window, bucket: timedelta) -> list[dict[str, Any]]:
    groups: dict[tuple[str, datetime], list[Signal]] = {}
    for signal in in_window(window):
        origin = datetime(2000, 1, 1, tzinfo=timezone.utc)  # buckets count from midnight UTC
        start = origin + (at(signal.received) - origin) // bucket * bucket
        groups.setdefault((signal.source, start), []).append(signal)
    rows = []
    for (source, start), signals in sorted(groups.items()):
        spans: dict[str, list[float]] = {name: [] for name in ("received_to_decided", "decided_to_settlement_decided",
                                                               "decided_to_carried_out", "received_to_carried_out")}
        for signal in signals:
            current = signal.attempts[-1]
            if current.decided is not None:
                spans["received_to_decided"].append(current.decided - signal.received)
            if current.settlement is not None:
                _, settled, carried = current.settlement
                spans["decided_to_settlement_decided"].append(settled - current.decided)
                if carried is not None:
                    spans["decided_to_carried_out"].append(carried - current.decided)
                    spans["received_to_carried_out"].append(carried - signal.received)
        for n, (measure, values) in enumerate(spans.items()):
            if n == 0 or values:
                rows.append({"source": source, "bucket_start": start, "measure": measure, "signals": len(signals),
                             "measured": len(values), "p50": percentile(values, 0.5),
                             "p95": percentile(values, 0.95), "p99": percentile(values, 0.99)})
    return rows


def expected_watermarks(window: Window, signals: list[Signal] | None = None,
                        ) -> tuple[list[dict[str, Any]], list[tuple[str, str, str]]]:
    marks, pending = [], []
    for source in sorted({s.source for s in in_window(window, signals)}):
        ours = [s for s in in_window(window, signals) if s.source == source]
        settled_prefix = []
        for signal in ours:
            if state(signal) != "settled":
                break
            settled_prefix.append(signal)
        last = settled_prefix[-1] if settled_prefix else None
        marks.append({"source": source, "signals": len(ours), "settled": sum(state(s) == "settled" for s in ours),
                      "unsettled": sum(state(s) != "settled" for s in ours),
                      "watermark_message_id": last.name if last else None,
                      "watermark_received_at": at(last.received) if last else None})
        pending += [(source, s.name, state(s)) for s in ours if state(s) != "settled"]
    return marks, pending


def _approx(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: (pytest.approx(v) if isinstance(v, float) else v) for k, v in row.items()} for row in rows]


WINDOWS = {
    "everything": ALL,
    "one source": Window(at(-1), at(6000), "plant-a"),
    "the second hour": Window(at(3600), at(7200)),
    "empty": Window(at(-100), at(-1)),
}


# --- latency --------------------------------------------------------------------------------------

@pytest.mark.parametrize("window", WINDOWS.values(), ids=WINDOWS.keys())
@pytest.mark.parametrize("bucket", [timedelta(hours=1), timedelta(minutes=1), timedelta(days=1)],
                         ids=["hour", "minute", "day"])
def test_latency_is_the_percentiles_of_each_sources_paths(seeded: Engine, window: Window, bucket: timedelta) -> None:
    with seeded.connect() as conn:
        rows = reports.latency(conn, window, bucket, 1000)
    assert rows == _approx(expected_latency(window, bucket))


def test_latency_by_hand(seeded: Engine) -> None:
    """The seed's plant-a hour, computed on paper: a1 took 10 s to its decision, a2's current
    attempt 150 s (a3 is undecided); only a1 was carried out."""
    with seeded.connect() as conn:
        rows = reports.latency(conn, Window(at(0), at(3600), "plant-a"), timedelta(hours=1), 100)
    assert [(r["measure"], r["signals"], r["measured"], r["p50"], r["p95"], r["p99"]) for r in rows] == [
        ("received_to_decided", 3, 2, 80.0, pytest.approx(143.0), pytest.approx(148.6)),
        ("decided_to_settlement_decided", 3, 2, 35.0, pytest.approx(57.5), pytest.approx(59.5)),
        ("decided_to_carried_out", 3, 1, 61.0, 61.0, 61.0),
        ("received_to_carried_out", 3, 1, 71.0, 71.0, 71.0),
    ]


# --- watermarks -----------------------------------------------------------------------------------

@pytest.mark.parametrize("window", WINDOWS.values(), ids=WINDOWS.keys())
def test_watermarks_are_the_settled_prefix_of_each_source(seeded: Engine, window: Window) -> None:
    marks, pending = expected_watermarks(window)
    with seeded.connect() as conn:
        got = reports.watermarks(conn, window, 100)
        unsettled = reports.unsettled(conn, window, 100)
    assert [{k: row[k] for k in marks[0]} for row in got] == marks if marks else got == []
    assert [(row["source"], row["correlation_id"], row["why"]) for row in unsettled] == pending


def test_watermarks_by_hand(seeded: Engine) -> None:
    with seeded.connect() as conn:
        got = {row["source"]: (row["watermark_message_id"], row["settled"], row["unsettled"])
               for row in reports.watermarks(conn, ALL, 100)}
        why = {row["correlation_id"]: row["why"] for row in reports.unsettled(conn, ALL, 100)}
    assert got == {"api": ("p2", 2, 0), "plant-a": ("a1", 2, 2), "plant-b": ("b1", 1, 1)}
    assert why == {"a2": "settling", "a3": "received", "b2": "dead-lettered"}


@given(st.lists(st.tuples(st.sampled_from(["api", "plant-a", "plant-b", "plant-c", "plant-d"]),
                          st.sampled_from(sorted(STANDINGS))), max_size=40))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_watermarks_of_any_ledger_are_each_sources_settled_prefix(engine: Engine, drawn) -> None:
    """Whatever the sources and the order of their outcomes, the watermark is the last signal of
    the longest settled prefix of each source, and every signal after it that is not settled is
    listed with why."""
    signals = []
    for n, (source, standing) in enumerate(drawn):
        status, settled = STANDINGS[standing]
        if source == "api" and settled is not None:
            settled = None  # the API's signals are never settled on a broker
        attempt = Attempt(["app:done"], n, n + 60, None if status is None else n + 1, status, "acks",
                          {} if status is None else {"app:done": status},
                          None if settled is None else (settled[0], n + settled[1],
                                                        None if settled[2] is None else n + settled[2]))
        signals.append(Signal(f"g{n}", source, n, [attempt]))
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE signals, attempts, acks, request_results, settlements RESTART IDENTITY CASCADE"))
    seed(engine, T0, signals)
    marks, pending = expected_watermarks(ALL, signals)
    with engine.connect() as conn:
        got = reports.watermarks(conn, ALL, 100)
        unsettled = reports.unsettled(conn, ALL, 100)
    assert [{k: row[k] for k in marks[0]} for row in got] == marks if marks else got == []
    assert [(row["source"], row["correlation_id"], row["why"]) for row in unsettled] == pending


def test_the_signal_state_walks_every_case(engine: Engine) -> None:
    """signal_state and needs_transport_settlement in SQL against the rules in Python, case by case."""
    cases = [(api, source, failed, decided, decision, carried)
             for api in ("http", "websocket", "connectivity") for source in ("api", "cli", "plant")
             for failed in (None, False, True) for decided in (False, True)
             for decision in (None, "ack", "reject", "redeliver", "dead-letter") for carried in (False, True)]
    seen = set()
    with engine.connect() as conn:
        for api, source, failed, decided, decision, carried in cases:
            got = conn.execute(text("SELECT needs_transport_settlement(:a, :s), signal_state("
                                    "needs_transport_settlement(:a, :s), :f, :d, :dec, :c)"),
                               {"a": api, "s": source, "f": failed, "d": decided, "dec": decision, "c": carried}).one()
            needs = settlement.needs_transport_settlement(api, source)
            expected = settlement.signal_state(needs_transport=needs, response_failed=failed, decided=decided,
                                               decision=decision, carried_out=carried)
            assert tuple(got) == (needs, expected.value), (api, source, failed, decided, decision, carried)
            seen.add(expected)
    assert seen == set(settlement.SignalState)  # every state is reached


# --- late acks ------------------------------------------------------------------------------------

def test_late_acks_say_how_late_and_what_they_would_have_changed(seeded: Engine) -> None:
    with seeded.connect() as conn:
        rows = reports.late_acks(conn, ALL, 100)
    assert [(r["correlation_id"], r["attempt"], r["label"], r["status"], r["issuer"], r["late_by"], r["answered"],
             r["would_have_answered"], r["changes_outcome"]) for r in rows] == [
        # a2 timed out at 80 s (408); the ack came at 95 s: in time, it would have answered 200.
        ("a2", 1, "app:done", 200, "app", timedelta(seconds=15), 408, 200, True),
        # a4 counted app:more's 503 already: a second ack for it changes nothing (the first counts).
        ("a4", 1, "app:more", 200, "other", timedelta(seconds=90), 424, 424, False),
    ]
    assert set(reports.LATE_ACK_COLUMNS) <= set(rows[0])
    with seeded.connect() as conn:
        assert reports.late_acks(conn, Window(at(0), at(3600), "plant-b"), 100) == []
        assert [r["correlation_id"] for r in reports.late_acks(conn, ALL, 1)] == ["a2"]


# --- dead letters ---------------------------------------------------------------------------------

def test_dead_letters_list_each_signal_settled_as_dead_letter_with_its_answer(seeded: Engine) -> None:
    """What AckstoreDeadLettersRising points at (issue 50): SEED's b2 was answered 500 (its app:done
    ack) and settled as dead-letter at 170 s, carried out at 171 s; nothing else was."""
    expected = [(s.name, s.source, len(s.attempts), a.status, a.cause, a.ack_statuses, at(a.settlement[2]))
                for s in SEED for a in s.attempts[-1:] if a.settlement and a.settlement[0] == "dead-letter"]
    assert [row[0] for row in expected] == ["b2"]  # not vacuous
    with seeded.connect() as conn:
        rows = reports.dead_letters(conn, ALL, 100)
        assert reports.dead_letters(conn, Window(at(0), at(3600), "plant-a"), 100) == []
        assert reports.dead_letters(conn, Window(at(151), at(6000)), 100) == []  # received before the window
    assert [(r["correlation_id"], r["source"], r["attempt"], r["status"], r["cause"], r["ack_statuses"],
             r["carried_out_at"]) for r in rows] == expected


# --- labels ---------------------------------------------------------------------------------------

def expected_labels(window: Window) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[tuple[int, bool, float | None]]] = {}
    for signal in in_window(window):
        for attempt in signal.attempts:
            if attempt.decided is None or attempt.cause == "error":
                continue
            for label in attempt.requested:
                counted = next((a for a in attempt.acks if a[0] == label and a[4] == "counted"), None)
                status = attempt.ack_statuses.get(label, counted[1] if counted else 408)
                issuer = counted[2] if counted else "(none arrived)"
                took = max(counted[3] - attempt.opened, 0) if counted else None
                groups.setdefault((label, issuer), []).append((status, bool(counted and counted[5]), took))
    return [{"label": label, "issuer": issuer, "answered": len(entries),
             "ok": sum(200 <= s < 300 and not weak for s, weak, _ in entries),
             "weak": sum(weak for _, weak, _ in entries),
             "client_errors": sum(400 <= s < 500 and s != 408 for s, _, _ in entries),
             "timeouts": sum(s == 408 for s, _, _ in entries),
             "server_errors": sum(s >= 500 for s, _, _ in entries),
             "p95_seconds": percentile([t for _, _, t in entries if t is not None], 0.95)}
            for (label, issuer), entries in sorted(groups.items())]


@pytest.mark.parametrize("window", WINDOWS.values(), ids=WINDOWS.keys())
def test_labels_count_each_outcome_per_label_and_issuer(seeded: Engine, window: Window) -> None:
    with seeded.connect() as conn:
        assert reports.labels(conn, window, 100) == _approx(expected_labels(window))


def test_labels_by_hand(seeded: Engine) -> None:
    with seeded.connect() as conn:
        rows = {(r["label"], r["issuer"]): (r["answered"], r["ok"], r["weak"], r["client_errors"], r["timeouts"],
                                            r["server_errors"], r["p95_seconds"]) for r in reports.labels(conn, ALL, 100)}
    assert rows == {
        ("app:done", "app"): (4, 3, 0, 0, 0, 1, 5.0),  # a1 4 s, a2's second attempt 5 s, a4 2 s, b2 5 s
        ("app:done", "filtering"): (1, 0, 1, 0, 0, 0, 1.0),  # b1's weak ack
        ("app:done", "(none arrived)"): (1, 0, 0, 0, 1, 0, None),  # a2's first attempt timed out
        ("app:more", "other"): (1, 0, 0, 0, 0, 1, 3.0),
    }


# --- the window the user types ----------------------------------------------------------------------

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(("typed", "expected"), [
    ("now", NOW),
    ("90m", NOW - timedelta(minutes=90)),
    ("24h", NOW - timedelta(hours=24)),
    ("7d", NOW - timedelta(days=7)),
    ("2026-11-24", datetime(2026, 11, 24, tzinfo=timezone.utc)),
    ("2026-11-24T09:30", datetime(2026, 11, 24, 9, 30, tzinfo=timezone.utc)),
    ("2026-11-24 09:30:15", datetime(2026, 11, 24, 9, 30, 15, tzinfo=timezone.utc)),
    ("2026-11-24T09:30+01:00", datetime(2026, 11, 24, 8, 30, tzinfo=timezone.utc)),
    ("2026-11-24T09:30:00Z", datetime(2026, 11, 24, 9, 30, tzinfo=timezone.utc)),
    ("0001-01-01T00:00-05:00", datetime(1, 1, 1, 5, 0, tzinfo=timezone.utc)),
])
def test_every_form_of_a_time_a_user_types(typed: str, expected: datetime) -> None:
    assert parse_instant(typed, NOW, "--since") == expected


@pytest.mark.parametrize("typed", ["", "yesterday", "-5m", "2026-13-01", "5 minutes", "24H", "2026-11-24T25:00",
                                   "99999999d", "9999999999999999999h", "99999999999999999999999d", "0001-01-01T00:00"
                                   "+05:00"])
def test_a_time_that_is_none_is_refused_in_dittos_shape(typed: str) -> None:
    with pytest.raises(errors.DittoError) as refused:
        parse_instant(typed, NOW, "--since")
    assert refused.value.to_json()["error"] == "report:option.invalid"
    assert refused.value.status == 400


@pytest.mark.parametrize(("typed", "expected"), [("1h", timedelta(hours=1)), ("15m", timedelta(minutes=15)),
                                                 ("1d", timedelta(days=1)), ("500ms", timedelta(milliseconds=500)),
                                                 ("4w", timedelta(weeks=4))])
def test_bucket_durations(typed: str, expected: timedelta) -> None:
    assert parse_bucket(typed) == expected


@pytest.mark.parametrize("typed", ["0s", "0", "1mo", "1y", "5w", "an hour", "-1h", "99999999999999999999999d",
                                   "9999999999999999d"])
def test_a_bucket_that_is_no_span_is_refused(typed: str) -> None:
    with pytest.raises(errors.DittoError, match="--bucket"):
        parse_bucket(typed)


def test_a_window_ends_after_it_starts() -> None:
    assert window_of(None, None, None, NOW) == Window(NOW - timedelta(hours=24), NOW)
    assert window_of("7d", "1d", "plant-a", NOW) == Window(NOW - timedelta(days=7), NOW - timedelta(days=1), "plant-a")
    with pytest.raises(errors.DittoError, match="before its --until"):
        window_of("1h", "2h", None, NOW)


# --- the command line, piped at 80 columns ---------------------------------------------------------

def _cli(database_url: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80", "ACKSTORE_DATABASE_URL": database_url}
    return subprocess.run([sys.executable, "-m", "ackstore.cli", "report", *args], capture_output=True, text=True,
                          env=env, timeout=120)


WINDOW_ARGS = ["--since", "2026-11-20T09:59", "--until", "2026-11-20T12:00"]


@pytest.mark.parametrize(("name", "headers"), [
    ("latency", ["from", "measure", "p50", "p95", "p99", "received → decided"]),
    ("watermarks", ["source", "settled", "unsettled", "up to message", "correlation id", "settling"]),
    ("late-acks", ["correlation id", "label", "late by", "answered", "if in time", "changed"]),
    ("labels", ["label", "issuer", "2xx", "weak", "4xx", "408", "5xx", "p95 to ack"]),
    ("dead-letters", ["correlation id", "attempts", "answered", "app:done 500", "carried out"]),
    # Nine columns do not fit at 80: one block per record, every header whole (it once printed "correl / ation").
    ("audit", ["correlation id", "stuck at", "validate: decided, waiting for the validation gate"]),
])
def test_each_report_prints_whole_headers_at_80_columns(seeded: Engine, database_url: str, name: str,
                                                        headers: list[str]) -> None:
    done = _cli(database_url, name, *WINDOW_ARGS)
    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= 80, done.stdout
    for header in headers:
        assert header in done.stdout, (header, done.stdout)


@pytest.mark.parametrize("source", ["plant-a", "plant a", "pl'ant", "pl\"ant%", "植物", "a" * MAX_SOURCE_BYTES,
                                    "植" * (MAX_SOURCE_BYTES // 3)])
def test_any_source_a_user_types_is_a_filter(seeded: Engine, database_url: str, source: str) -> None:
    done = _cli(database_url, "watermarks", "--json", *WINDOW_ARGS, "--source", source)
    assert done.returncode == 0, done.stderr
    assert [row["source"] for row in json.loads(done.stdout)] == (["plant-a"] if source == "plant-a" else [])


@pytest.mark.parametrize("source", ["a" * (MAX_SOURCE_BYTES + 1), "植" * (MAX_SOURCE_BYTES // 3 + 1), "a" * 100_000])
@pytest.mark.parametrize("report", ["latency", "watermarks", "audit"])
def test_a_source_longer_than_any_stored_one_is_refused_at_once(database_url: str, report: str, source: str) -> None:
    done = _cli(database_url, report, "--json", "--source", source)
    assert done.returncode == 1, done.stderr
    answer = json.loads(done.stdout)
    assert (answer["status"], answer["error"]) == (400, "report:option.invalid")
    assert f"at most {MAX_SOURCE_BYTES} bytes" in answer["message"] and len(answer["message"]) < 400


def test_the_json_of_a_report_is_its_rows(seeded: Engine, database_url: str) -> None:
    done = _cli(database_url, "watermarks", "--json", *WINDOW_ARGS, "--source", "plant-a")
    assert done.returncode == 0, done.stderr
    (mark,) = json.loads(done.stdout)
    assert (mark["watermark_message_id"], mark["settled"], mark["unsettled"]) == ("a1", 2, 2)
    assert [(row["correlation_id"], row["why"]) for row in mark["unsettled_signals"]] == [
        ("a2", "settling"), ("a3", "received")]
    late = json.loads(_cli(database_url, "late-acks", "--json", *WINDOW_ARGS).stdout)
    assert [(row["correlation_id"], row["late_by"], row["changes_outcome"]) for row in late] == [
        ("a2", 15.0, True), ("a4", 90.0, False)]


def test_bad_options_are_answered_in_dittos_shape(seeded: Engine, database_url: str) -> None:
    for args in (["latency", "--since", "yesterday"], ["latency", "--bucket", "1mo"], ["labels", "--limit", "0"],
                 ["settlement", "--since", "1h"], ["audit", "--limit", str(10**20)],
                 ["late-acks", "--since", "2h", "--until", "3h"]):
        done = _cli(database_url, *args)
        assert done.returncode == 1, (args, done.stderr)
        answer = json.loads(done.stdout)
        assert answer["status"] == 400 and answer["error"] == "report:option.invalid", answer
        assert answer["message"] and answer["description"]


def test_a_source_no_ledger_can_hold_is_refused(seeded: Engine) -> None:
    """A NUL character cannot come through argv, but can through the function a caller uses."""
    from ackstore.ledger.store import AckStore
    from ackstore.reporting.registry import REPORTS
    from ackstore.rules.settings import Settings

    with pytest.raises(errors.DittoError, match="NUL"):
        REPORTS["watermarks"].run(AckStore(seeded, Settings()), as_json=True, source="a\x00b")
