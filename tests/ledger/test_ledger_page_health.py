"""The Ledger page's health strip (issue 38, item 7): backlog, oldest unsettled, last pass, last seal
and the validation gate, read by the exporter's own query (ackstore.ledger.metrics.read) and shown
at the top of the page — here rendered as the plugin's route renders it (``gather`` and ``render``)
on hand-built ledgers whose figures are known from how they were built; a source's name a sender
chose shows as text, never as markup."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sqlalchemy import Engine, text

from ackstore.ledger import seals
from ackstore.ledger.metrics import Gauge, Reading
from ackstore.ledger.store import AckStore
from ackstore.reporting.health import figures, health
from ackstore.reporting.shown_text import shown
from ackstore.rules.settings import Settings
from ackstore.ui.ledger_page import gather, render
from tests.support.page_html import Strip
from tests.support.seeded_ledger import Attempt, Signal, seed

HOSTILE = "<script>alert(1)</script>&amp;\u202egnp"  # a source a sender named


def page(engine: Engine, now: datetime) -> tuple[str, Strip]:
    html = render(gather(AckStore(engine, Settings()), now))
    return html, Strip(html)


def test_an_empty_ledger_says_nothing_waits_and_nothing_ran(engine: Engine) -> None:
    html, strip = page(engine, datetime.now(timezone.utc))
    assert list(strip.figures) == ["backlog", "oldest-unsettled", "last-pass", "last-seal", "validation"]
    assert html.index('id="health"') < html.index("Find a signal")  # at the top
    assert strip.figures["backlog"] == ["Backlog", "0", "every queue empty"]
    assert strip.figures["oldest-unsettled"] == ["Oldest unsettled", "none", "every signal settled"]
    assert strip.figures["last-pass"] == ["Last pass", "never", "no whole pass yet"]
    assert strip.figures["last-seal"] == ["Last seal", "none", "nothing sealed yet"]
    assert strip.figures["validation"][:2] == ["Validation gate", "not run yet"]
    assert strip.figures["validation"][2] == "no outage gauge here: a connector's ackstore_connector_outage says"
    assert "alarm" not in strip.classes["validation"]


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
    # the gate has not passed the two results yet (no watermark): validate 2
    html, strip = page(engine, now)
    assert strip.figures["backlog"] == ["Backlog", "5", "decide 2, validate 2, carry_out 1"]
    name, age, whose = strip.figures["oldest-unsettled"]
    assert name == "Oldest unsettled" and age in ("2h00m", "2h01m")  # the database's now() is a moment later
    assert whose == f"from {shown(HOSTILE)}"  # the override written as \u202e, the markup as text
    assert strip.figures["last-pass"][1].startswith("5m0") and strip.figures["last-pass"][1].endswith(" ago")
    assert strip.figures["last-seal"] == ["Last seal", "none", "nothing sealed yet"]
    assert strip.figures["validation"][1] == "passed" and "alarm" not in strip.classes["validation"]
    assert strip.figures["validation"][2].startswith("last run 5m1")
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;&amp;amp;" in html
    assert "\u202e" not in html

    # the gate fails, a seal is made: the strip says so
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO pipeline_runs (run_id, step, stats, finished_at) VALUES "
                          "('r2', 'validate', '{\"seconds\": 1.0, \"failures\": [\"expect_x\"]}', now())"))
    sealed = seals.seal(engine)
    assert sealed is not None
    _, strip = page(engine, datetime.now(timezone.utc))
    assert strip.figures["validation"][:2] == ["Validation gate", "FAILED"] and "alarm" in strip.classes["validation"]
    assert strip.figures["last-seal"][:2] == ["Last seal", f"#{sealed.number}"]
    assert strip.figures["last-seal"][2].startswith("0.")  # seconds ago
    assert strip.figures["last-pass"][1].startswith("5m")  # the seal alone is no pass


def _reading(*gauges: tuple[str, str, float]) -> Reading:
    return Reading([], [Gauge(*gauge) for gauge in gauges])


def test_the_summary_of_a_reading() -> None:
    found = health(_reading(("queue_pending", "settle", 3), ("queue_pending", "apply", 4), ("queue_pending", "decide", 0),
                            ("oldest_unsettled_age_seconds", "plant-a", 90.0),
                            ("oldest_unsettled_age_seconds", "plant-b", 4000.0),
                            ("oldest_unsettled_age_seconds", "api", 12.5),
                            ("pipeline_last_success_timestamp_seconds", "", 1_800_000_000.0),
                            ("seal_last_number", "", 7), ("seal_last_timestamp_seconds", "", 1_800_000_030.0),
                            ("validation_failed", "", 1), ("validation_last_timestamp_seconds", "", 1_799_999_990.0),
                            ("oldest_undecided_age_seconds", "plant-c", 99_999.0)))  # not what "unsettled" reads
    assert found.backlog == 7 and found.backlog_by_queue == {"apply": 4, "decide": 0, "settle": 3}
    assert (found.oldest_unsettled_source, found.oldest_unsettled_seconds) == ("plant-b", 4000.0)
    assert found.last_pass_at == datetime.fromtimestamp(1_800_000_000, timezone.utc)
    assert (found.last_seal_number, found.validation_failed) == (7, True)
    now = datetime.fromtimestamp(1_800_000_090, timezone.utc)
    shown_figures = {figure.key: (figure.value, figure.detail) for figure in figures(found, now)}
    assert shown_figures["backlog"] == ("7", "apply 4, settle 3")
    assert shown_figures["oldest-unsettled"] == ("1h06m", "from plant-b")
    assert shown_figures["last-pass"] == ("1m30s ago", "ended 2027-01-15 08:00:00 UTC")
    assert shown_figures["last-seal"] == ("#7", "1m00s ago, 2027-01-15 08:00:30 UTC")
    assert shown_figures["validation"][0] == "FAILED"
    assert health(_reading(("validation_failed", "", 0))).validation_failed is False


def test_an_age_is_never_negative_when_the_databases_clock_is_ahead() -> None:
    now = datetime.fromtimestamp(1_800_000_000, timezone.utc)
    found = health(_reading(("pipeline_last_success_timestamp_seconds", "", (now + timedelta(seconds=3)).timestamp())))
    assert {figure.key: figure.value for figure in figures(found, now)}["last-pass"] == "0.000s ago"
