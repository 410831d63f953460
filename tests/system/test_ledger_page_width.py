"""The Ledger page in a real browser (Debian's headless Chromium, tests/support/browser.py) with the longest
values a ledger holds: a 1 000-character correlation id and a source at its limit, from a sender
that also put a right-to-left override in them. The page's HTML is what the plugin's route
serves (``gather`` and ``render``), opened from a file: no Airflow is needed to lay it out.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import Engine

from ackstore.ledger.store import AckStore
from ackstore.reporting.shown_text import shown
from ackstore.rules import limits
from ackstore.rules.settings import Settings
from ackstore.ui.ledger_page import gather, render
from tests.support.browser import Browser
from tests.support.seeded_ledger import ledger, seeded

pytestmark = pytest.mark.slow

VIEWPORT = 1400
LONG_ID = "order-" + "4" * 990 + "\u202egnp"  # 1 000 characters, no space to wrap at
LONG_SOURCE = "src-\u202e" + "x" * (limits.MAX_SOURCE_BYTES - len("src-\u202e".encode()))
LABEL = "[b]42[/b]"

# Every table's widest box, and the document's: nothing may reach past the viewport.
WIDTHS = ("JSON.stringify({document: document.documentElement.scrollWidth, "
          "tables: Object.fromEntries([...document.querySelectorAll('table')].map(t => [t.id, t.scrollWidth]))})")


def test_the_widest_table_stays_within_the_viewport_with_a_thousand_character_id(engine: Engine,
                                                                                  tmp_path: Path) -> None:
    assert len(LONG_ID) == 1000 and len(LONG_ID.encode()) <= limits.MAX_CORRELATION_ID_BYTES
    now = datetime.now(timezone.utc)
    seeded(engine, now - timedelta(hours=1),
           ledger(LONG_SOURCE, "a" + LONG_ID[1:], "b" + LONG_ID[1:], LONG_ID, LABEL, "app"))
    page = tmp_path / "ledger.html"
    page.write_text(render(gather(AckStore(engine, Settings()), now, LONG_ID)), encoding="utf-8")

    with Browser(VIEWPORT, 1100) as browser:
        browser.call("Emulation.setDeviceMetricsOverride", width=VIEWPORT, height=1100, deviceScaleFactor=1,
                     mobile=False)
        browser.open(page.as_uri())
        browser.wait_for("document.readyState === 'complete' && !!document.querySelector('#timeline')")
        widths = json.loads(browser.evaluate(WIDTHS))
        shown_text = browser.evaluate("document.body.innerText")
        browser.screenshot(tmp_path / "ledger-long-id.png")

    assert {"settlement", "watermarks", "unsettled", "audit", "timeline"} <= set(widths["tables"])
    assert max(widths["tables"].values()) <= VIEWPORT, widths
    assert widths["document"] <= VIEWPORT, widths
    # Shown as stored: the override visible, not acted on ("gnp" stays "gnp"), markup as text.
    assert shown(LONG_ID) in shown_text and shown(LONG_SOURCE) in shown_text and "\u202e" not in shown_text
    assert f"ack\t{LABEL}" in shown_text  # the timeline's checkpoint and label cells
