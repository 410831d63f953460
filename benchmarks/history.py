"""Benchmark: does a pipeline run's cost follow the new work, or the size of the history?

    python -m benchmarks.history --history 1000000

Two fresh databases on 127.0.0.1:5432: one empty, one seeded with N requests already decided
(half from a broker connection, settled and carried out). On each, with one Spark session
opened beforehand (its start is not counted):

(a) a run with nothing pending — every step's own time;
(b) runs of 1 000 new commands (each creating its thing, requesting twin-persisted and
    search-persisted, half from the connection) — the whole pipeline, median of --repeat runs.

It prints both per database and the ratios history/empty (targets: (a) ≤ 1 s per step,
(b) ≤ 1.25×), and, as the raw-PostgreSQL baseline of the same run, what finding pending work
by an anti-join over every signal costs on the seeded ledger — what the queues replace.
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from sqlalchemy import text

from ackstore.ledger.database import make_engine
from ackstore.ledger.named_sql import load
from benchmarks.pipeline import DEFAULT_SERVER, fresh_database

QUERIES = Path(__file__).resolve().parent / "history.sql"
SOURCE = "amqp-bench"
SEED_STEPS = ("seed_signals", "seed_things", "seed_batches", "seed_responses", "seed_acks",
              "seed_results", "seed_settlements", "seed_index", "seed_watermark")


def _sql(name: str) -> Any:
    return text(load(QUERIES)[name])


def seed(url: str, history: int) -> float:
    engine = make_engine(url)
    started = time.perf_counter()
    params = {"history": history, "things": max(1, history // 10), "source": SOURCE}
    with engine.begin() as conn:
        for step in SEED_STEPS:
            conn.execute(_sql(step), params)
    vacuum_analyze(engine)
    engine.dispose()
    return time.perf_counter() - started


def vacuum_analyze(engine: Any) -> None:
    """Fresh statistics and visibility after a bulk seed, so plans are what they would be in use."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))


def add_commands(url: str, count: int, batch: str) -> None:
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(_sql("new_commands"), {"count": count, "batch": batch, "source": SOURCE})
    engine.dispose()


def add_awaited(url: str, count: int, batch: str) -> None:
    """``count`` requests decided by their deadline before their command was applied: each awaits
    its built-in facts (``awaited_requests``)."""
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(_sql("awaited_requests"), {"count": count, "batch": batch})
    engine.dispose()


def add_sources(url: str, count: int, prefix: str) -> None:
    """``count`` signals, each from a connection of its own named ``prefix``N, decided and acked."""
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(_sql("distinct_sources"), {"count": count, "prefix": prefix})
    engine.dispose()


def run_pipeline(spark: Any, url: str, run_id: str) -> dict[str, dict[str, Any]]:
    from jobs import pipeline
    from jobs.settings import PipelineSettings

    return pipeline.run(spark, PipelineSettings(database_url=url, partitions=2, run_id=run_id))


def history_scan(url: str) -> float:
    engine = make_engine(url)
    started = time.perf_counter()
    with engine.connect() as conn:
        conn.execute(_sql("history_scan_baseline")).scalar_one()
    engine.dispose()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--history", type=int, default=1_000_000, help="decided requests in the seeded ledger")
    parser.add_argument("--commands", type=int, default=1_000, help="new commands per run in (b)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of (a) and (b) per ledger; medians are shown")
    parser.add_argument("--server", default=DEFAULT_SERVER, help="PostgreSQL server (a database URL on it)")
    args = parser.parse_args()

    from jobs.spark import spark_session

    with ExitStack() as stack:
        empty = stack.enter_context(fresh_database(args.server, "hist_empty"))
        seeded = stack.enter_context(fresh_database(args.server, "hist_seeded"))
        print(f"history={args.history:,} decided requests, new commands per run={args.commands:,}, cores=2")
        print(f"seeding the history ledger: {seed(seeded, args.history):.1f} s")
        started = time.perf_counter()
        spark = spark_session("ackstore-bench-history", cores=2)
        print(f"spark session start         {time.perf_counter() - started:.1f} s (not counted below)")
        try:
            # The first jobs of a session start Python workers and import GX: a run with work warms both.
            add_commands(empty, args.commands, "warm-up")
            run_pipeline(spark, empty, "warm-up")
            ledgers = {"empty": empty, "history": seeded}
            idle = {name: _idle_runs(spark, url, args.repeat, name) for name, url in ledgers.items()}
            busy = _busy_runs(spark, ledgers, args)
        finally:
            spark.stop()
        scan = history_scan(seeded)
    _report(idle, busy, scan, args)


def _idle_runs(spark: Any, url: str, repeat: int, name: str) -> dict[str, float]:
    """Each step's own time (its `seconds` stat) in runs with nothing pending: the medians."""
    runs = [run_pipeline(spark, url, f"idle-{name}-{i}") for i in range(repeat)]
    return {step: statistics.median(run[step]["seconds"] for run in runs) for step in runs[0]}


def _busy_runs(spark: Any, ledgers: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    """Whole-pipeline wall time for runs of new commands, the ledgers taking turns (so the
    machine's noise falls on both): per ledger the median, and every step's median."""
    walls: dict[str, list[float]] = {name: [] for name in ledgers}
    runs: dict[str, list[dict]] = {name: [] for name in ledgers}
    for i in range(args.repeat):
        for name, url in ledgers.items():
            add_commands(url, args.commands, f"{name}-{i}")
            started = time.perf_counter()
            stats = run_pipeline(spark, url, f"busy-{name}-{i}")
            walls[name].append(time.perf_counter() - started)
            assert stats["sweep"]["decided"] == args.commands, stats["sweep"]
            assert stats["settle"]["decided"] == args.commands // 2, stats["settle"]
            runs[name].append(stats)
    return {
        name: {
            "wall": statistics.median(walls[name]),
            "steps": {s: statistics.median(r[s]["seconds"] for r in runs[name]) for s in runs[name][0]},
        }
        for name in ledgers
    }


def _report(idle: dict, busy: dict, scan: float, args: argparse.Namespace) -> None:
    print("\n(a) a run with nothing pending: each step's work, seconds (median)")
    print(f"{'step':<14}{'empty':>9}{'history':>10}{'ratio':>8}")
    for step in idle["empty"]:
        e, h = idle["empty"][step], idle["history"][step]
        print(f"{step:<14}{e:>9.3f}{h:>10.3f}{h / e:>7.2f}x")
    worst = max(idle["history"].values())
    print(f"slowest step on the history ledger: {worst:.3f} s (target ≤ 1 s: {'met' if worst <= 1 else 'MISSED'})")

    print(f"\n(b) a run of {args.commands:,} new commands: seconds (median of {args.repeat})")
    print(f"{'step':<14}{'empty':>9}{'history':>10}{'ratio':>8}")
    for step in busy["empty"]["steps"]:
        e, h = busy["empty"]["steps"][step], busy["history"]["steps"][step]
        print(f"{step:<14}{e:>9.3f}{h:>10.3f}{h / e:>7.2f}x")
    ratio = busy["history"]["wall"] / busy["empty"]["wall"]
    print(f"{'end to end':<14}{busy['empty']['wall']:>9.3f}{busy['history']['wall']:>10.3f}{ratio:>7.2f}x"
          f"  (target ≤ 1.25x: {'met' if ratio <= 1.25 else 'MISSED'})")

    print(f"\nraw PostgreSQL baseline on the history ledger: one anti-join over all {args.history:,} signals "
          f"(how pending work was found before the queues) takes {scan:.3f} s")
    print(f"ratios: (a) slowest step history/empty {max(idle['history'][s] / idle['empty'][s] for s in idle['empty']):.2f}x; "
          f"(b) end to end history/empty {ratio:.2f}x")


if __name__ == "__main__":
    main()
