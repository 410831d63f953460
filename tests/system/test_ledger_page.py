"""The Ledger page inside Airflow's api-server (the plugin), under FastAPI's test client: every
route requires an authenticated Airflow user, and its numbers are the reports' on a seeded ledger
(read back out of the page's HTML and compared with the report functions' rows)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator

import pytest
from prometheus_client import generate_latest
from sqlalchemy import Engine

from ackstore.ledger import migrate, reports
from ackstore.ledger.database import drop_database, make_engine, scratch_database
from ackstore.ledger.reports import Window
from ackstore.ledger.store import AckStore
from ackstore.local_airflow import LocalAirflow
from ackstore.reporting.metrics import registry_for
from ackstore.rules.settings import Settings
from tests.conftest import ADMIN_URL
from tests.support.page_html import Strip, Tables
from tests.support.scraped import samples
from tests.support.seeded_ledger import seed

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def page_ledger() -> Iterator[Engine]:
    """The module's own seeded ledger: every test reads the one page Airflow served of it."""
    with scratch_database(ADMIN_URL, "page") as url:
        ledger = make_engine(url)
        migrate.upgrade(ledger)
        yield ledger
        ledger.dispose()


@pytest.fixture(scope="module")
def probed(page_ledger: Engine, tmp_path_factory) -> tuple[dict[str, Any], datetime]:
    """The page's answers, asked once for the module (an Airflow metadata database and the
    api-server's app cost about 30 s)."""
    origin = datetime.now(timezone.utc) - timedelta(hours=3)
    seed(page_ledger, origin)
    metadata_database = f"ackstore_airflow_page_{os.getpid()}"
    database_url = page_ledger.url.render_as_string(hide_password=False)
    local = LocalAirflow.prepare(database_url, home=tmp_path_factory.mktemp("airflow"), metadata_database=metadata_database)
    try:
        env = local.environment(None)
        local.migrate(env)
        done = subprocess.run([sys.executable, "-m", "tests.support.ledger_page_probe", local.admin_password(), "a2"],
                              env=env, capture_output=True, text=True, timeout=600)
    finally:
        drop_database(ADMIN_URL, metadata_database)
    assert done.returncode == 0, done.stderr[-5000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), origin


def test_every_route_requires_an_authenticated_airflow_user(probed) -> None:
    answers, _ = probed
    assert answers["anonymous"] == 401 and answers["anonymous_search"] == 401
    assert answers["forged"] in (401, 403)
    assert answers["wrong_password"] == 401
    assert (answers["token"], answers["page_status"], answers["search_status"]) == (201, 200, 200)
    assert answers["cookie_page_status"] == 200  # the UI's own login cookie, as the iframe sends it


def test_the_nav_entry_opens_the_page_inside_airflow(probed) -> None:
    (plugin,) = probed[0]["plugins"]
    (view,) = plugin["external_views"]
    assert (view["name"], view["url_route"], view["href"], view["destination"]) == (
        "Ledger", "ledger", "ackstore/ledger/", "nav")
    assert plugin["fastapi_apps"][0]["url_prefix"] == "/ackstore/ledger"


def test_the_pages_numbers_are_the_reports(probed, page_ledger: Engine) -> None:
    answers, origin = probed
    page = Tables(answers["page"])
    now = datetime.now(timezone.utc)
    window = Window(now - timedelta(hours=24), now)
    with page_ledger.connect() as conn:
        marks = reports.watermarks(conn, window, 100)
        settlement = reports.settlement(conn)
        audit = reports.audit(conn, 20)
        unsettled = reports.unsettled(conn, window, 20)
    assert [row[:5] for row in page.tables["watermarks"][1:]] == [
        [m["source"], str(m["signals"]), str(m["settled"]), str(m["unsettled"]), m["watermark_message_id"]]
        for m in marks]
    # By hand (tests/ledger/test_reports_windowed.py): plant-a is settled up to a1, with a2 and a3 after it.
    assert ["plant-a", "4", "2", "2", "a1"] in [row[:5] for row in page.tables["watermarks"]]
    assert [row[:4] for row in page.tables["settlement"][1:]] == [
        [s["source"], s["status"], s["decision"] or "", str(s["requests"])] for s in settlement]
    assert [row[0] for row in page.tables["audit"][1:]] == [a["correlation_id"] for a in audit]
    assert [(row[1], row[4]) for row in page.tables["unsettled"][1:]] == [
        (u["correlation_id"], u["why"]) for u in unsettled]
    assert {"latency-api", "latency-plant-a", "latency-plant-b"} <= set(page.ids)


def test_the_health_strip_reads_what_the_exporter_serves(probed, page_ledger: Engine) -> None:
    """The strip, as Airflow's api-server serves the page, says what a scrape of the exporter says
    of the same ledger (Prometheus's text, parsed), and what the seed holds by hand."""
    answers, _ = probed
    strip = Strip(answers["page"])
    scraped = samples(generate_latest(registry_for(page_ledger)).decode())
    pending = {dict(labels)["queue"]: value for (name, labels), value in scraped.items() if name == "ackstore_queue_pending"}
    # By hand: a2's second attempt is settled (ack) but not carried out; the gate passed none of
    # the 8 decided attempts; the seed queued nothing else.
    assert {queue: n for queue, n in pending.items() if n} == {"validate": 8, "carry_out": 1}
    # … 8 decided attempts of 7 signals (a2 was decided twice), a2's second settlement among them
    assert scraped[("ackstore_signals_pending", ())] == 7
    assert strip.figures["backlog"] == ["Backlog", "7 signals", "waiting, by step: validate 8, carry out 1"]
    unsettled = {dict(labels)["source"]: value for (name, labels), value in scraped.items()
                 if name == "ackstore_oldest_unsettled_age_seconds"}
    assert max(unsettled, key=unsettled.get) == "plant-a"  # a1, at the seed's origin (3 h ago): not through the gate
    name, age, whose = strip.figures["oldest-unsettled"]
    assert (name, whose) == ("Oldest unsettled", "from plant-a") and age.startswith("3h0"), age
    assert strip.figures["last-pass"] == ["Last pass", "never", "no whole pass yet"]
    assert strip.figures["last-seal"][:2] == ["Last seal", "none"]
    assert strip.figures["validation"][:2] == ["Validation gate", "not run yet"]
    # coloured by the alerts' thresholds: 3 h unsettled and facts never sealed are warnings, no
    # pass yet too; nothing is critical
    assert (strip.classes["oldest-unsettled"], strip.classes["last-seal"], strip.classes["last-pass"]) == (
        "warning", "warning", "warning")
    assert strip.status == "warning"


def test_a_correlation_id_shows_its_timeline(probed, page_ledger: Engine) -> None:
    answers, _ = probed
    found = Tables(answers["search"])
    timeline = AckStore(page_ledger, Settings()).show("a2")["timeline"]
    assert [(row[2], row[3], row[4]) for row in found.tables["timeline"][1:]] == [
        (t["checkpoint"], t["label"] or "", "" if t["status"] is None else str(t["status"])) for t in timeline]
    assert "a2" in "".join(found.text) and "attempt opened" in "".join(found.text)
    assert "No signal has the correlation id" in answers["unknown"]
