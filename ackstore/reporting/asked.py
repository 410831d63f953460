"""What a report is asked for (``Asked``: its window is ackstore.ledger.reports.Window, the one
window type), and the times and durations a user types for it (--since, --until, --bucket), each
refused in Ditto's shape when it is no time or span."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

from ackstore.ledger.reports import Window
from ackstore.reporting.shown_values import instant
from ackstore.rules import errors
from ackstore.rules.durations import parse_duration_ms
from ackstore.rules.limits import MAX_SOURCE_BYTES, utf8_size

DEFAULT_WINDOW = timedelta(hours=24)
DEFAULT_BUCKET = "1h"
MAX_LIMIT = 1_000_000_000


@dataclass(frozen=True)
class Asked:
    """At most ``limit`` rows, of ``source`` or any, of the signals ``window`` holds (a windowed
    report always has one, of the same source; the audit may), latency in buckets of ``bucket``."""

    limit: int = 50
    source: str | None = None
    window: Window | None = None
    bucket: timedelta = timedelta(hours=1)

    def __post_init__(self) -> None:
        if self.window is not None and self.window.source != self.source:
            raise ValueError(f"a window of source {self.window.source!r} asked for source {self.source!r}")


_AGO = re.compile(r"[0-9]+(ms|mo|s|m|h|d|w|y)")


def window_of(since: str | None, until: str | None, source: str | None, now: datetime) -> Window:
    """The window of --since/--until: each a time, 'now', or a duration before now; by default the
    last 24 hours up to now."""
    end = parse_instant(until, now, "--until") if until is not None else now
    start = parse_instant(since, now, "--since") if since is not None else end - DEFAULT_WINDOW
    if start >= end:
        raise errors.report_option_invalid("window", f"{instant(start)} to {instant(end)}",
                                           "a window whose --since comes before its --until")
    return Window(start, end, source)


def parse_instant(text: str, now: datetime, option: str) -> datetime:
    """A time the user typed: ISO 8601 (a date, or a time with or without its offset: UTC when
    none), 'now', or a duration before now such as 90m, 24h or 7d."""
    value = text.strip()
    if value == "now":
        return now
    try:
        if _AGO.fullmatch(value):
            return now - timedelta(milliseconds=parse_duration_ms(value))
        parsed = datetime.fromisoformat(value) if "T" in value or " " in value else None
        if parsed is None:
            day = date.fromisoformat(value)
            parsed = datetime(day.year, day.month, day.day)
        return parsed.astimezone(timezone.utc) if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)
    except (ValueError, OverflowError, errors.DittoError):  # OverflowError: before year 1 in UTC
        raise errors.report_option_invalid(option, text, "a time, 'now' or a duration before now") from None


def parse_bucket(text: str) -> timedelta:
    """A latency bucket: a duration of a millisecond at least (months and years are not fixed spans:
    a bucket is at most 4 weeks)."""
    try:
        bucket = timedelta(milliseconds=parse_duration_ms(text.strip())) if _AGO.fullmatch(text.strip()) else None
    except (errors.DittoError, OverflowError):
        bucket = None
    if bucket is None or not timedelta(0) < bucket <= timedelta(weeks=4) or text.strip().endswith(("mo", "y")):
        raise errors.report_option_invalid("--bucket", text, "a duration from 1ms to 4w, such as 15m, 1h or 1d")
    return bucket


def check_limit_and_source(limit: int, source: str | None) -> None:
    """--limit and --source as any report takes them."""
    if not 1 <= limit <= MAX_LIMIT:
        raise errors.report_option_invalid("--limit", limit, f"an integer from 1 to {MAX_LIMIT:,}")
    if source is not None and "\x00" in source:  # no stored source holds one; PostgreSQL refuses it as text
        raise errors.report_option_invalid("--source", source.replace("\x00", "\\0"), "text without NUL characters")
    if source is not None and utf8_size(source) > MAX_SOURCE_BYTES:  # no stored source is longer: answered at once
        raise errors.report_option_invalid("--source", source, f"a source of at most {MAX_SOURCE_BYTES} bytes")
