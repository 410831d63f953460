"""The ledger's metrics as rows (issue 38, docs/metrics.md, decisions #108): what one scrape of
``ackstore metrics`` reads, and the Ledger page's health strip. The rules of what each counts are
the views ``ledger_counters`` and ``ledger_gauges`` (``sql/objects/metrics.sql``); this reads them
in one read-only snapshot, so a counter and the gauges beside it agree.

A source has series of its own only if it is one of ``metric_sources`` (the API's, the CLI's and
the first connections claimed, up to ``ACKSTORE_METRIC_SOURCES``: decisions #127); every other
source's figures are the source ``other``'s — the counters added up by the SQL, as the seals roll
them up, the gauges here, each as it adds up (:data:`SOURCE_GAUGES`)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable

from sqlalchemy import Engine

from ackstore.ledger.named_sql import ledger_statement
from ackstore.rules.settings import METRIC_SOURCES

OTHER = "other"  # the source every source past the metric sources is counted as
# The gauges per source, and how several sources' values make the 'other' one: the oldest age is
# the largest, the held messages add up, a connector's last word and the start of its outage are
# the earliest (so 'other' says the worst of the connectors folded into it); a clean stop the
# latest (a running connector among them serves its last word, which readers take first).
SOURCE_GAUGES: dict[str, Callable[[Iterable[float]], float]] = {
    "oldest_undecided_age_seconds": max,
    "oldest_unsettled_age_seconds": max,
    "held_undecided": sum,
    "connector_last_seen_timestamp_seconds": min,
    "connector_broker_out_since_timestamp_seconds": min,
    "connector_stopped_timestamp_seconds": max,
}


@dataclass(frozen=True)
class Counter:
    """One counter's value: its metric, source and up to two labels ('' where it has none)."""

    metric: str
    source: str
    label: str
    detail: str
    value: float


@dataclass(frozen=True)
class Gauge:
    """One gauge's value, with its one label ('' where it has none)."""

    metric: str
    label: str
    value: float


@dataclass(frozen=True)
class Reading:
    """Everything one scrape reads: the counters and gauges, and the sources with series of their
    own (``other`` among them when a connection is past the first ones: it is counted from 0)."""

    counters: list[Counter]
    gauges: list[Gauge]
    sources: tuple[str, ...] = ()


def read(engine: Engine, metric_sources: int = METRIC_SOURCES) -> Reading:
    """Every counter and gauge, in one snapshot, the sources past the first ``metric_sources``
    connections as ``other``."""
    cap = {"cap": metric_sources}
    with engine.connect() as conn:
        conn.execute(ledger_statement("metrics", "snapshot"))
        conn.execute(ledger_statement("metrics", "without_jit"))
        counters = [Counter(*row) for row in conn.execute(ledger_statement("metrics", "counters"), cap)]
        gauges = [Gauge(*row) for row in conn.execute(ledger_statement("metrics", "gauges"), cap)]
        sources = tuple(row.source for row in conn.execute(ledger_statement("metrics", "sources"), cap))
        conn.rollback()
    return Reading(counters, folded(gauges, set(sources) - {OTHER}), sources)


def folded(gauges: list[Gauge], own: set[str]) -> list[Gauge]:
    """The gauges with every source not in ``own`` as ``other``, each per-source gauge added up as
    :data:`SOURCE_GAUGES` says."""
    kept: list[Gauge] = []
    others: dict[str, list[float]] = defaultdict(list)
    for gauge in gauges:
        if gauge.metric in SOURCE_GAUGES and gauge.label not in own:
            others[gauge.metric].append(gauge.value)
        else:
            kept.append(gauge)
    return kept + [Gauge(metric, OTHER, SOURCE_GAUGES[metric](values)) for metric, values in others.items()]


def latency_buckets(engine: Engine) -> tuple[float, ...]:
    """The upper bounds of the latency histograms' buckets, in order (without +Inf)."""
    with engine.connect() as conn:
        return tuple(conn.execute(ledger_statement("metrics", "latency_buckets")).scalars())
