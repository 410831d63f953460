"""``ackstore alert-rules``: Prometheus's alert rules for this deployment's settings (issue 50,
decisions #129).

The rules' text is ``alert_rules.yml`` beside this module, its thresholds placeholders
(``@{name}``) filled from :class:`ackstore.rules.thresholds.Thresholds` — the one place they are
computed, which the Ledger page's health strip reads too. ``deploy/prometheus/alerts.yml`` is the
rendering for the default settings (tests/system/test_alert_rules.py holds it to that).
"""

from __future__ import annotations

import os
from pathlib import Path
from string import Template

from ackstore.rules.settings import DEFAULT_RETENTION_DAYS, RETENTION_VARIABLE, Settings, retention_days
from ackstore.rules.thresholds import (ARCHIVE_MARGIN_DAYS, EVALUATION_SECONDS, HEALTHY_PASS_SECONDS,
                                       MIN_PIPELINE_SECONDS, SCRAPE_SECONDS, UNSETTLED_MARGIN_SECONDS, Thresholds)

TEMPLATE = Path(__file__).with_name("alert_rules.yml")


class _Rules(Template):
    delimiter = "@"  # PromQL and Prometheus's own templates use $


def duration(seconds: int) -> str:
    """``seconds`` as a Prometheus duration: ``2m``, ``90s``, ``1h``, ``2d``."""
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def words(seconds: float) -> str:
    """``seconds`` as people read it in an annotation: ``2 minutes 30 seconds``, ``20 minutes``, ``32 days``."""
    whole = round(seconds)
    parts = []
    for unit, size in (("day", 86_400), ("hour", 3_600), ("minute", 60), ("second", 1)):
        count, whole = divmod(whole, size)
        if count:
            parts.append(f"{count} {unit}{'s' if count != 1 else ''}")
    return " ".join(parts) or "0 seconds"


def render(thresholds: Thresholds) -> str:
    """The rules with ``thresholds``' values: every number of the rules is one of them (a duration
    as PromQL writes it, ``NAME``; as people read it, ``NAME_words``), none written in the template."""
    t = thresholds
    settings = (f"ACKSTORE_DEFAULT_TIMEOUT={duration(t.default_timeout_seconds)}, "
                f"ACKSTORE_MAX_TIMEOUT={duration(t.max_timeout_seconds)}, "
                f"ACKSTORE_RETENTION_DAYS={t.retention_days:g}")
    durations = {
        "default_timeout": t.default_timeout_seconds, "max_timeout": t.max_timeout_seconds,
        "pipeline_for": t.pipeline_for_seconds, "never_passed": t.never_passed_seconds,
        "unsettled_for": t.unsettled_for_seconds, "dead_letter_window": t.dead_letter_window_seconds,
        "sealing_for": t.sealing_for_seconds, "archive_for": t.archive_for_seconds,
        "exporter_down_for": t.exporter_down_for_seconds, "connector_silent": t.connector_silent_seconds,
        "connector_named_within": t.connector_named_within_seconds, "connector_outage": t.connector_outage_seconds,
    }
    spoken = {
        "pipeline": t.pipeline_seconds, "pipeline_pages_within": t.pipeline_pages_within(),
        "healthy_pass": HEALTHY_PASS_SECONDS, "min_pipeline": MIN_PIPELINE_SECONDS, "scrape": SCRAPE_SECONDS,
        "evaluation": EVALUATION_SECONDS, "unsettled_margin": UNSETTLED_MARGIN_SECONDS,
        "sealing": t.sealing_seconds, "archive_margin": ARCHIVE_MARGIN_DAYS * 86_400,
    }
    return _Rules(TEMPLATE.read_text()).substitute(
        settings=settings,
        **{name: duration(seconds) for name, seconds in durations.items()},
        **{f"{name}_words": words(seconds) for name, seconds in {**durations, **spoken}.items()},
        pipeline_seconds=t.pipeline_seconds, unsettled_seconds=t.unsettled_seconds, sealing_seconds=t.sealing_seconds,
        archive_seconds=t.archive_seconds, retention_words=f"{t.retention_days:g} days",
    )


def thresholds_from_environment() -> Thresholds:
    """The thresholds of the settings in the environment (ACKSTORE_DEFAULT_TIMEOUT,
    ACKSTORE_MAX_TIMEOUT, ACKSTORE_RETENTION_DAYS): what the alerts and the health strip use."""
    return Thresholds.of(Settings.from_env(),
                         retention_days(os.environ.get(RETENTION_VARIABLE, DEFAULT_RETENTION_DAYS)))


def rules_for_environment() -> str:
    """The rules for the settings in the environment (``ackstore alert-rules``)."""
    return render(thresholds_from_environment())
