"""The Ledger page's health strip as a status (issues 38 and 50): backlog in signals, oldest
unsettled, last pass, last seal, the validation gate and the connectors, read by the exporter's own
query (ackstore.ledger.metrics.read) and shown at the top of the page, each figure ok / warning /
critical by the thresholds the alert rules are made of — here rendered as the plugin's route renders
it (``gather`` and ``render``) on hand-built ledgers whose figures are known from how they were
built; a source's name a sender chose shows as text, never as markup."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
import yaml
from sqlalchemy import Engine, text

from ackstore.ledger import seals
from ackstore.ledger.metrics import Gauge, Reading
from ackstore.ledger.store import AckStore
from ackstore.reporting.health import figures, health, status
from ackstore.reporting.shown_text import shown
from ackstore.rules.settings import Settings
from ackstore.rules.thresholds import Status, Thresholds
from ackstore.ui.ledger_page import gather, render
from tests.support.page_html import Strip
from tests.support.paths import ROOT
from tests.support.seeded_ledger import Attempt, Signal, seed

HOSTILE = "<script>alert(1)</script>&amp;\u202egnp"  # a source a sender named
DEFAULTS = Thresholds.of(Settings())
FIGURES = ["backlog", "oldest-unsettled", "last-pass", "last-seal", "validation", "connectors"]


def page(engine: Engine, now: datetime, thresholds: Thresholds = DEFAULTS) -> tuple[str, Strip]:
    html = render(gather(AckStore(engine, Settings()), now, thresholds=thresholds))
    return html, Strip(html)


def test_an_empty_ledger_says_nothing_waits_and_nothing_ran_in_an_operators_words(engine: Engine) -> None:
    html, strip = page(engine, datetime.now(timezone.utc))
    assert list(strip.figures) == FIGURES
    assert html.index('id="status"') < html.index('id="health"') < html.index("Find a signal")  # at the top
    assert strip.figures["backlog"] == ["Backlog", "0 signals", "every queue empty"]
    assert strip.figures["oldest-unsettled"] == ["Oldest unsettled", "none", "every signal settled"]
    assert strip.figures["last-pass"] == ["Last pass", "never", "no whole pass yet"]
    assert strip.figures["last-seal"] == ["Last seal", "none", "nothing sealed yet"]
    assert strip.figures["validation"] == ["Validation gate", "not run yet", "no run yet"]
    assert strip.figures["connectors"] == ["Connectors", "none seen", "no connector has said it runs"]
    said = " ".join(part for parts in strip.figures.values() for part in parts)
    assert not re.search(r"ackstore_|gauge|_total", said), said  # no metric or developer's word
    # no pass ever: a warning (the alert pages once the exporter has read the ledger for 5 minutes)
    assert {key: strip.classes[key] for key in FIGURES} == {**dict.fromkeys(FIGURES, "ok"), "last-pass": "warning"}
    assert strip.status == "warning"


def test_the_backlog_counts_each_signal_once_however_many_queues_it_waits_in(engine: Engine) -> None:
    """Issue 50: five signals waiting to be applied and decided read "10 (apply 5, decide 5)"."""
    seed(engine, signals=[Signal(f"w{n}", "api", n, [Attempt(["twin-persisted"], n, n + 600)]) for n in range(5)])
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO queue_apply (signal_id) SELECT id FROM signals"))
        conn.execute(text("INSERT INTO queue_decide (signal_id, attempt) SELECT id, 1 FROM signals"))
    _, strip = page(engine, datetime.now(timezone.utc))
    assert strip.figures["backlog"] == ["Backlog", "5 signals", "waiting, by step: apply 5, decide 5"]


def test_the_strip_shows_the_figures_of_a_seeded_ledger(engine: Engine) -> None:
    now = datetime.now(timezone.utc)
    origin = now - timedelta(hours=2)
    # hostile: undecided since origin (queued to decide); plant-b: decided and settled at +600 s,
    # its ack not carried out yet; api: decided (202), nothing to settle; late: undecided from +3600 s.
    seed(engine, origin, [
        Signal("h0", HOSTILE, 0, [Attempt(["app:done"], 0, 60)]),
        Signal("b0", "plant-b", 600, [Attempt(["app:done"], 600, 660, 610, 200, "acks", {"app:done": 200},
                                              ("ack", 611, None))]),
        Signal("p0", "api", 700, [Attempt([], 700, 760, 701, 202, "accepted")]),
        Signal("l0", "plant-b", 3600, [Attempt(["app:done"], 3600, 3660)]),
    ])
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO queue_decide (signal_id, attempt) SELECT id, 1 FROM signals "
                          "WHERE correlation_id IN ('h0', 'l0')"))
        conn.execute(text("INSERT INTO pipeline_runs (run_id, step, stats, finished_at) VALUES "
                          "('r1', 'validate', '{\"seconds\": 1.0}', :validated), "
                          "('r1', 'seal', '{\"seconds\": 0.5}', :passed)"),
                     {"validated": now - timedelta(minutes=5, seconds=10), "passed": now - timedelta(minutes=5)})
    # waiting: h0 and l0 (decide), b0 and p0 (validate; b0's settlement not carried out too): 4 signals
    html, strip = page(engine, now)
    assert strip.figures["backlog"] == ["Backlog", "4 signals", "waiting, by step: decide 2, validate 2, carry out 1"]
    name, age, whose = strip.figures["oldest-unsettled"]
    assert name == "Oldest unsettled" and age in ("2h00m", "2h01m")  # the database's now() is a moment later
    assert whose == f"from {shown(HOSTILE)}"  # the override written as \u202e, the markup as text
    assert strip.classes["oldest-unsettled"] == "warning"  # 2 h: past the maximum timeout (20 min) + 5 min
    assert strip.figures["last-pass"][1].startswith("5m0") and strip.figures["last-pass"][1].endswith(" ago")
    assert strip.classes["last-pass"] == "critical"  # 5 min: past the pipeline alert's 150 s
    assert strip.figures["last-seal"][:2] == ["Last seal", "none"]
    assert strip.classes["last-seal"] == "warning"  # facts wait and nothing was ever sealed
    assert strip.figures["validation"] == ["Validation gate", "passed", strip.figures["validation"][2]]
    assert strip.figures["validation"][2].startswith("last run 5m1") and strip.classes["validation"] == "ok"
    assert strip.status == "critical"
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;&amp;amp;" in html
    assert "\u202e" not in html

    # the gate fails, a seal is made: the strip says so
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO pipeline_runs (run_id, step, stats, finished_at) VALUES "
                          "('r2', 'validate', '{\"seconds\": 1.0, \"failures\": [\"expect_x\"]}', now())"))
    sealed = seals.seal(engine)
    assert sealed is not None
    _, strip = page(engine, datetime.now(timezone.utc))
    assert strip.figures["validation"][:2] == ["Validation gate", "FAILED"] and strip.classes["validation"] == "critical"
    assert strip.figures["last-seal"][:2] == ["Last seal", f"#{sealed.number}"] and strip.classes["last-seal"] == "ok"
    assert strip.figures["last-seal"][2].startswith("0.")  # seconds ago
    assert strip.figures["last-pass"][1].startswith("5m")  # the seal alone is no pass


def _pipeline_threshold_of_the_shipped_rules() -> float:
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    [rule] = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "AckstorePipelineNotSucceeding"]
    return float(re.search(r"ackstore_pipeline_last_success_timestamp_seconds > (\d+)", rule["expr"]).group(1))


@pytest.mark.parametrize("settings, expected", [
    (Settings(), 150.0),  # the default timeout of 5 min: the shipped rules
    (Settings(default_timeout_ms=20 * 60_000), 600.0),
    (Settings(default_timeout_ms=60_000), 120.0),  # never under a slow pass (90 s) and half a minute
])
def test_the_strip_turns_critical_where_the_alert_does(settings: Settings, expected: float) -> None:
    """The last pass's status flips at the very threshold of AckstorePipelineNotSucceeding, which
    follows the default timeout; the shipped rules hold the default's."""
    thresholds = Thresholds.of(settings)
    assert thresholds.pipeline_seconds == expected
    if settings == Settings():
        assert _pipeline_threshold_of_the_shipped_rules() == expected
    now = datetime.fromtimestamp(1_800_000_000, timezone.utc)
    for age, expected_status in ((expected - 1, Status.OK), (expected + 1, Status.CRITICAL)):
        found = health(_reading(("pipeline_last_success_timestamp_seconds", "", now.timestamp() - age)))
        [last_pass] = [f for f in figures(found, now, thresholds) if f.key == "last-pass"]
        assert last_pass.status is expected_status, (age, last_pass)


def test_connectors_are_listed_with_their_state_the_down_ones_first(engine: Engine) -> None:
    now = datetime.now(timezone.utc)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO connections (id, owner_login, claimed_at, seen_at, broker_out_since) VALUES "
                          "('plant-a', session_user, :now, :now - interval '10 seconds', NULL), "
                          "('plant-b', session_user, :now, :now - interval '5 minutes', NULL), "
                          "(:hostile, session_user, :now, :now - interval '5 seconds', :now - interval '4 minutes'), "
                          "('never-run', session_user, :now, NULL, NULL)"), {"hostile": HOSTILE, "now": now})
    html, strip = page(engine, now)
    assert strip.figures["connectors"][:2] == ["Connectors", "2 of 3 running"]
    assert strip.classes["connectors"] == "critical" and strip.status == "critical"
    (down, down_status), (out, out_status), (running, running_status) = strip.lines["connectors"]
    assert down.startswith("plant-b: down: not heard from for 5m0") and down_status == "critical"
    assert out.startswith(f"{shown(HOSTILE)}: running, its broker unreachable for 4m0") and out_status == "warning"
    assert (running, running_status) == ("plant-a: running", "ok")
    assert "never-run" not in html  # claimed, its connector never started: nothing says it should run
    assert "<script>" not in html


def test_a_connector_that_stopped_cleanly_is_listed_as_stopped_not_down(engine: Engine) -> None:
    """Decisions #133: a connector stopped on purpose (SIGTERM, --once done) said so
    (connector_stopped): listed as stopped, no alert's colour, until it says it runs again."""
    now = datetime.now(timezone.utc)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO connections (id, owner_login, claimed_at, seen_at) VALUES "
                          "('plant-a', session_user, :now, :now - interval '10 seconds'), "
                          "('plant-s', session_user, :now, :now - interval '10 minutes')"), {"now": now})
        conn.execute(text("SELECT connector_stopped('plant-s')"))
    _, strip = page(engine, now + timedelta(minutes=5))
    assert strip.figures["connectors"] == ["Connectors", "0 of 2 running, 1 stopped", "down first"]
    (down, down_status), (stopped, stopped_status) = strip.lines["connectors"]
    assert down.startswith("plant-a: down") and down_status == "critical"
    assert stopped.startswith("plant-s: stopped at ") and stopped_status == "ok"
    with engine.begin() as conn:  # it runs again
        conn.execute(text("SELECT connector_seen('plant-s', NULL)"))
    _, strip = page(engine, now + timedelta(seconds=30))
    assert strip.figures["connectors"][:2] == ["Connectors", "2 of 2 running"]
    assert strip.classes["connectors"] == "ok"


def _reading(*gauges: tuple[str, str, float]) -> Reading:
    return Reading([], [Gauge(*gauge) for gauge in gauges])


def test_the_summary_of_a_reading() -> None:
    found = health(_reading(("queue_pending", "settle", 3), ("queue_pending", "apply", 4), ("queue_pending", "decide", 0),
                            ("signals_pending", "", 5),
                            ("oldest_unsettled_age_seconds", "plant-a", 90.0),
                            ("oldest_unsettled_age_seconds", "plant-b", 4000.0),
                            ("oldest_unsettled_age_seconds", "api", 12.5),
                            ("pipeline_last_success_timestamp_seconds", "", 1_800_000_000.0),
                            ("seal_last_number", "", 7), ("seal_last_timestamp_seconds", "", 1_800_000_030.0),
                            ("validation_failed", "", 1), ("validation_last_timestamp_seconds", "", 1_799_999_990.0),
                            ("oldest_undecided_age_seconds", "plant-c", 99_999.0)))  # not what "unsettled" reads
    assert found.backlog == 5 and found.backlog_by_queue == {"apply": 4, "decide": 0, "settle": 3}
    assert (found.oldest_unsettled_source, found.oldest_unsettled_seconds) == ("plant-b", 4000.0)
    assert found.last_pass_at == datetime.fromtimestamp(1_800_000_000, timezone.utc)
    assert (found.last_seal_number, found.validation_failed) == (7, True)
    now = datetime.fromtimestamp(1_800_000_090, timezone.utc)
    shown_figures = {figure.key: (figure.value, figure.detail, figure.status) for figure in figures(found, now, DEFAULTS)}
    assert shown_figures["backlog"] == ("5 signals", "waiting, by step: apply 4, settle 3", Status.OK)
    assert shown_figures["oldest-unsettled"] == ("1h06m", "from plant-b", Status.WARNING)
    assert shown_figures["last-pass"] == ("1m30s ago", "ended 2027-01-15 08:00:00 UTC", Status.OK)
    assert shown_figures["last-seal"] == ("#7", "1m00s ago, 2027-01-15 08:00:30 UTC", Status.OK)
    assert shown_figures["validation"][0::2] == ("FAILED", Status.CRITICAL)
    assert status(figures(found, now, DEFAULTS)) is Status.CRITICAL
    assert health(_reading(("validation_failed", "", 0))).validation_failed is False
    relaxed = replace(DEFAULTS, unsettled_seconds=5000)
    assert {f.key: f.status for f in figures(found, now, relaxed)}["oldest-unsettled"] is Status.OK


def test_an_age_is_never_negative_when_the_databases_clock_is_ahead() -> None:
    now = datetime.fromtimestamp(1_800_000_000, timezone.utc)
    found = health(_reading(("pipeline_last_success_timestamp_seconds", "", (now + timedelta(seconds=3)).timestamp())))
    assert {figure.key: figure.value for figure in figures(found, now, DEFAULTS)}["last-pass"] == "0.000s ago"
