"""The ledger's metrics as rows (issue 38, docs/metrics.md, decisions #108): what one scrape of
``ackstore metrics`` reads, and the Ledger page's health strip. The rules of what each counts are
the views ``ledger_counters`` and ``ledger_gauges`` (``sql/objects/metrics.sql``); this reads them
in one read-only snapshot, so a counter and the gauges beside it agree."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine

from ackstore.ledger.named_sql import ledger_statement


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
    """Everything one scrape reads."""

    counters: list[Counter]
    gauges: list[Gauge]


def read(engine: Engine) -> Reading:
    """Every counter and gauge, in one snapshot."""
    with engine.connect() as conn:
        conn.execute(ledger_statement("metrics", "snapshot"))
        conn.execute(ledger_statement("metrics", "without_jit"))
        counters = [Counter(*row) for row in conn.execute(ledger_statement("metrics", "counters"))]
        gauges = [Gauge(*row) for row in conn.execute(ledger_statement("metrics", "gauges"))]
        conn.rollback()
    return Reading(counters, gauges)


def latency_buckets(engine: Engine) -> tuple[float, ...]:
    """The upper bounds of the latency histograms' buckets, in order (without +Inf)."""
    with engine.connect() as conn:
        return tuple(conn.execute(ledger_statement("metrics", "latency_buckets")).scalars())
