"""When a figure of the ledger is wrong, from the settings (issue 50, decisions #129): the one place
for every threshold. The alert rules are rendered from these (``ackstore alert-rules``; the shipped
``deploy/prometheus/alerts.yml`` is the rendering for the defaults), and the Ledger page's health
strip colours its figures by them, so the page turns red when, and only when, an alert would page.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ackstore.rules.settings import DEFAULT_RETENTION_DAYS, Settings

# deploy/prometheus/prometheus.yml: the ledger is scraped, and the rules evaluated, every 30 s, so
# a rule sees a change up to a scrape and an evaluation after it happened.
SCRAPE_SECONDS = 30
EVALUATION_SECONDS = 30
# A healthy pipeline ends a pass at least every 90 s: the DAG runs every minute, and a pass that
# opens a local Spark session takes ~20 s more (a failed task is retried after 15 s).
HEALTHY_PASS_SECONDS = 90
# The pipeline's threshold is never below a healthy pass and half a minute.
MIN_PIPELINE_SECONDS = HEALTHY_PASS_SECONDS + 30
# A pipeline alert waits this long past its threshold (one more run missed), then pages.
PIPELINE_FOR_SECONDS = 60
# No pass ever ended while the exporter has read the ledger this long: the pipeline never ran.
NEVER_PASSED_SECONDS = 5 * 60
# Every signal may wait up to the longest timeout a request may ask for, then one more pass; the
# alert waits a pass or so more before it warns.
UNSETTLED_MARGIN_SECONDS = 5 * 60
UNSETTLED_FOR_SECONDS = 2 * 60
# Dead letters are looked for over this window (an increase in it warns).
DEAD_LETTER_WINDOW_SECONDS = 10 * 60
# Facts wait unsealed at most a pass: the last seal older than this while facts wait is behind, for
# SEALING_FOR_SECONDS in a row (the pass after an idle ledger's first new fact may take that long).
SEALING_SECONDS = 10 * 60
SEALING_FOR_SECONDS = 5 * 60
# The archive runs daily on what is older than the retention: a day between runs, a day's margin;
# the alert waits ARCHIVE_FOR_SECONDS (an archive run in progress).
ARCHIVE_MARGIN_DAYS = 2
ARCHIVE_FOR_SECONDS = 30 * 60
# The ledger's exporter not scraped, or not reading the ledger, this long: not a restart.
EXPORTER_DOWN_FOR_SECONDS = 2 * 60
# A running connector says so every CONNECTOR_HEARTBEAT_SECONDS (in the ledger) and answers every
# scrape; not heard from for CONNECTOR_SILENT_SECONDS, it is down.
CONNECTOR_HEARTBEAT_SECONDS = 15
CONNECTOR_SILENT_SECONDS = 2 * 60
# A connector target no longer answering is named by the connection it served within this long.
CONNECTOR_NAMED_WITHIN_SECONDS = 86_400
# A connector that cannot reach its ledger or broker this long is no restart.
CONNECTOR_OUTAGE_SECONDS = 3 * 60


class Status(str, Enum):
    """How a figure stands, as the alerts' severities say it (ok: no alert would fire)."""

    OK = "ok"
    WARNING = "warning"
    CRITICAL = "critical"


def worst(*statuses: Status) -> Status:
    """The most severe of ``statuses`` (ok when none)."""
    order = (Status.OK, Status.WARNING, Status.CRITICAL)
    return max(statuses, key=order.index, default=Status.OK)


@dataclass(frozen=True)
class Thresholds:
    """Every threshold the alerts and the health strip share, in seconds."""

    pipeline_seconds: int  # no pass ended for this long: critical (AckstorePipelineNotSucceeding)
    unsettled_seconds: int  # a signal not settled for this long: warning (AckstoreOldestUnsettledTooOld)
    archive_seconds: int  # the oldest hot signal received this long ago: warning (AckstoreArchiveBehind)
    default_timeout_seconds: int  # what the pipeline's alert must beat
    max_timeout_seconds: int
    retention_days: float
    pipeline_for_seconds: int = PIPELINE_FOR_SECONDS
    never_passed_seconds: int = NEVER_PASSED_SECONDS  # read this long, no pass ever: critical
    unsettled_for_seconds: int = UNSETTLED_FOR_SECONDS
    dead_letter_window_seconds: int = DEAD_LETTER_WINDOW_SECONDS  # a dead letter in it: warning
    sealing_seconds: int = SEALING_SECONDS  # the last seal this old while facts wait: warning
    sealing_for_seconds: int = SEALING_FOR_SECONDS
    archive_for_seconds: int = ARCHIVE_FOR_SECONDS
    exporter_down_for_seconds: int = EXPORTER_DOWN_FOR_SECONDS  # the exporter not read: critical
    connector_silent_seconds: int = CONNECTOR_SILENT_SECONDS  # a connector not heard from: critical
    connector_named_within_seconds: int = CONNECTOR_NAMED_WITHIN_SECONDS
    connector_outage_seconds: int = CONNECTOR_OUTAGE_SECONDS  # its ledger or broker away: warning

    @classmethod
    def of(cls, settings: Settings, retention_days: float = DEFAULT_RETENTION_DAYS) -> "Thresholds":
        """The thresholds that follow ``settings`` and the archive's retention.

        The pipeline's: a request that names no timeout is answered 408 after the default
        timeout, so the alert must page before it — at half of it, but never below what a healthy
        pass may take plus half a minute (a default timeout under 4 minutes cannot be beaten by
        an alert that does not page on every slow pass: :meth:`pipeline_pages_within` says when it
        pages)."""
        default_s, max_s = settings.default_timeout_ms // 1000, settings.max_timeout_ms // 1000
        return cls(
            pipeline_seconds=max(MIN_PIPELINE_SECONDS, default_s // 2),
            unsettled_seconds=max_s + UNSETTLED_MARGIN_SECONDS,
            archive_seconds=round((retention_days + ARCHIVE_MARGIN_DAYS) * 86_400),
            default_timeout_seconds=default_s,
            max_timeout_seconds=max_s,
            retention_days=retention_days,
        )

    def pipeline_pages_within(self) -> int:
        """The longest from the last pass to the pipeline's alert firing: its threshold, its
        ``for``, a scrape and an evaluation."""
        return self.pipeline_seconds + self.pipeline_for_seconds + SCRAPE_SECONDS + EVALUATION_SECONDS

    # --- the health strip's statuses, by the same thresholds ---------------------------------

    def last_pass(self, age_seconds: float | None) -> Status:
        """No pass for longer than the threshold: critical; none ever: a warning (the alert waits
        for five minutes of readings before it says so)."""
        if age_seconds is None:
            return Status.WARNING
        return Status.CRITICAL if age_seconds > self.pipeline_seconds else Status.OK

    def unsettled(self, age_seconds: float | None) -> Status:
        return Status.WARNING if age_seconds is not None and age_seconds > self.unsettled_seconds else Status.OK

    def sealing(self, age_seconds: float | None, unsealed: int) -> Status:
        """Facts wait while the last seal is old (or none was ever made)."""
        behind = unsealed > 0 and (age_seconds is None or age_seconds > self.sealing_seconds)
        return Status.WARNING if behind else Status.OK

    def validation(self, failed: bool | None) -> Status:
        return Status.CRITICAL if failed else Status.OK

    def connector(self, silent_seconds: float | None, broker_out_seconds: float | None) -> Status:
        """A connector not heard from for longer than its threshold is down (critical); one that
        cannot reach its broker for longer than its own is in outage (warning). Never heard from
        at all (a connection claimed, its connector never started): ok — nothing says it should run."""
        if silent_seconds is not None and silent_seconds > self.connector_silent_seconds:
            return Status.CRITICAL
        if broker_out_seconds is not None and broker_out_seconds > self.connector_outage_seconds:
            return Status.WARNING
        return Status.OK

    def archive(self, age_seconds: float | None) -> Status:
        return Status.WARNING if age_seconds is not None and age_seconds > self.archive_seconds else Status.OK
