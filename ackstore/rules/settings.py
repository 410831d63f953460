"""Deployment settings that the rules depend on, with Part A's defaults (A.2.2)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Mapping

from ackstore.rules import errors
from ackstore.rules.durations import parse_duration_ms

DEFAULT_TIMEOUT_MS = 5 * 60_000
MAX_TIMEOUT_MS = 20 * 60_000
MAX_ENVELOPE_BYTES = 1024 * 1024
MAX_ENVELOPE_VARIABLE = "ACKSTORE_MAX_ENVELOPE_BYTES"  # also the cap of a file holding an envelope (ackstore.files)
MAX_ATTEMPTS = 5
# How many connections have metric series of their own (issue 50, decisions #127): the API's and
# the CLI's always do; the first this many connections claimed do; every other source's figures
# are added to the source ``other``, so a sender naming sources cannot grow the series.
METRIC_SOURCES = 50
METRIC_SOURCES_VARIABLE = "ACKSTORE_METRIC_SOURCES"
RETENTION_VARIABLE = "ACKSTORE_RETENTION_DAYS"
DEFAULT_RETENTION_DAYS = 30.0
# A century: longer keeps everything hot anyway, and now() - the retention must stay a timestamp
# PostgreSQL holds (4713 BC at the earliest; 10^8 days reach past it).
MAX_RETENTION_DAYS = 36_500


@dataclass(frozen=True)
class Settings:
    default_timeout_ms: int = DEFAULT_TIMEOUT_MS
    max_timeout_ms: int = MAX_TIMEOUT_MS
    max_envelope_bytes: int = MAX_ENVELOPE_BYTES
    max_attempts: int = MAX_ATTEMPTS
    metric_sources: int = METRIC_SOURCES

    def __post_init__(self) -> None:
        if not 0 < self.default_timeout_ms <= self.max_timeout_ms:
            raise ValueError(
                f"default timeout {self.default_timeout_ms}ms must be positive and at most "
                f"the maximum {self.max_timeout_ms}ms"
            )
        if self.max_envelope_bytes <= 0 or self.max_attempts <= 0:
            raise ValueError("max_envelope_bytes and max_attempts must be positive")
        if self.metric_sources < 0:
            raise ValueError("metric_sources must not be negative")

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> "Settings":
        """Read ``ACKSTORE_DEFAULT_TIMEOUT``, ``ACKSTORE_MAX_TIMEOUT`` (durations such as ``5m``),
        ``ACKSTORE_MAX_ENVELOPE_BYTES``, ``ACKSTORE_MAX_ATTEMPTS`` and ``ACKSTORE_METRIC_SOURCES``; unset ones
        keep the defaults."""
        return cls(
            default_timeout_ms=_duration(env, "ACKSTORE_DEFAULT_TIMEOUT", DEFAULT_TIMEOUT_MS),
            max_timeout_ms=_duration(env, "ACKSTORE_MAX_TIMEOUT", MAX_TIMEOUT_MS),
            max_envelope_bytes=whole_number(env, MAX_ENVELOPE_VARIABLE, MAX_ENVELOPE_BYTES, minimum=1),
            max_attempts=whole_number(env, "ACKSTORE_MAX_ATTEMPTS", MAX_ATTEMPTS, minimum=1),
            metric_sources=whole_number(env, METRIC_SOURCES_VARIABLE, METRIC_SOURCES, minimum=0),
        )


def whole_number(env: Mapping[str, str], name: str, default: int, *, minimum: int) -> int:
    """The whole-number setting ``name`` of ``env`` (``default`` when unset), or 400
    ``ackstore:setting.invalid`` naming it: a sign and digits only, at least ``minimum``."""
    raw = env.get(name)
    if raw is None:
        return default
    text = raw.strip()
    if not (text.lstrip("+-").isdigit() and text.isascii()) or int(text) < minimum:
        raise errors.setting_invalid(name, raw, minimum)
    return int(text)


def retention_days(value: object, origin: str = RETENTION_VARIABLE) -> float:
    """The retention in days from ``value`` (a number, or the text of ``origin``), or 400
    ``archive:retention.invalid`` naming ``origin``: not a number, NaN, negative, or past
    :data:`MAX_RETENTION_DAYS`."""
    try:
        days = float(value)  # type: ignore[arg-type]  # any text: what float() refuses is answered
    except (TypeError, ValueError, OverflowError):
        days = math.nan
    if not 0 <= days <= MAX_RETENTION_DAYS:  # NaN compares false: refused too
        raise errors.retention_invalid(origin, errors.shown(value), MAX_RETENTION_DAYS)
    return days


def _duration(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    return default if raw is None else parse_duration_ms(raw)
