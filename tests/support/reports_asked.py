"""Every windowed report over a window, read as ``ackstore report`` reads it: through the archive's
look-ups, so that archived signals answer as they did hot."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ackstore.ledger import archive_lookups
from ackstore.ledger.reports import Window
from ackstore.ledger.store import AckStore
from ackstore.reporting.asked import Asked
from ackstore.reporting.registry import REPORTS, WINDOWED_NAMES


def reports_over(store: AckStore, window: Window, bucket: timedelta = timedelta(seconds=1)) -> dict[str, Any]:
    """Each windowed report's rows over ``window`` (at most 1 000), by report name."""
    found = {}
    with archive_lookups.answering(store.engine, window) as conn:
        for name in WINDOWED_NAMES:
            asked = Asked(limit=1_000, window=window, bucket=bucket)
            found[name] = REPORTS[name].read(conn, asked)
    return found
