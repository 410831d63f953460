"""Values as the reports show them, before ``shown_text.shown``: durations in at most 7
characters, times in UTC, latency measures by name."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Callable

MEASURES = {
    "received_to_decided": "received → decided",
    "decided_to_settlement_decided": "decided → settlement",
    "decided_to_carried_out": "decided → carried out",
    "received_to_carried_out": "received → carried out",
}


def seconds(value: float | timedelta) -> str:
    """A duration in at most 7 characters: 0.123s, 12.3s, 4m05s, 3h07m, 12d03h."""
    total = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if total < 10:
        return f"{total:.3f}s"
    if total < 60:
        return f"{total:.1f}s"
    whole = int(total)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def instant(value: datetime) -> str:
    """A time as every report shows it: UTC, to the second."""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def moment(value: datetime) -> str:
    """A checkpoint's time: UTC, to the millisecond."""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def clock(value: datetime) -> str:
    """A checkpoint's time of day (UTC), when its date is said once above."""
    return value.astimezone(timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def bucket(value: datetime) -> str:
    return value.astimezone(timezone.utc).strftime("%m-%d %H:%M")


def span(value: timedelta) -> str:
    """A latency bucket's span as a title names it: hour, day, minute, else its duration."""
    return {timedelta(hours=1): "hour", timedelta(days=1): "day", timedelta(minutes=1): "minute"}.get(
        value, seconds(value))


def plain(value: Any) -> str:
    """Any other value: durations and times as above, yes / no, else its text."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, timedelta):
        return seconds(value)
    if isinstance(value, datetime):
        return instant(value)
    return str(value)


def statuses(by_label: dict[str, Any]) -> str:
    """An attempt's status per label (its aggregation's entries): ``app:done 408, twin-persisted 204``."""
    return ", ".join(f"{label} {status}" for label, status in by_label.items()) or "(none)"


FORMATS: dict[str, Callable[[Any], str]] = {
    "text": plain, "count": plain, "seconds": seconds, "time": instant, "bucket": bucket, "moment": moment,
    "clock": clock, "measure": lambda name: MEASURES.get(name, name), "statuses": statuses,
}
