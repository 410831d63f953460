"""Benchmark: each report's time at a million signals of history, and whether it follows its window.

    python -m benchmarks.reports --history 1000000

Two fresh databases on 127.0.0.1:5432: one seeded with N decided requests (benchmarks/history.sql:
half from a connection, settled; received 30 days ago, a millisecond apart), one empty; both
then get the same 1 000 new commands (received now). Each report is timed (median of --repeat)
on windows of:

* the last hour on each ledger — the same 1 000 signals: the ratio history/empty shows whether
  the history's size leaks into a report (target ≤ 1.25×);
* one minute of the history (60 000 signals) and all of it (N), with a baseline run in the same
  process: counting the window's signals by the same index (the least any report must read).
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from sqlalchemy import text

from ackstore.ledger.database import make_engine
from ackstore.ledger.reports import Window
from ackstore.reporting.asked import Asked
from ackstore.reporting.registry import REPORTS, WINDOWED_NAMES, Report
from benchmarks.history import add_commands, seed, vacuum_analyze
from benchmarks.pipeline import DEFAULT_SERVER, fresh_database

LIMIT = 50


def _reports(bucket: timedelta) -> dict[str, Callable[[Any, Window], Any]]:
    """What each windowed ``ackstore report NAME`` reads (watermarks: with the unsettled after them)."""

    def reader(report: Report) -> Callable[[Any, Window], Any]:
        return lambda conn, window: report.read(conn, Asked(LIMIT, window.source, window, bucket))

    return {name: reader(REPORTS[name]) for name in WINDOWED_NAMES}


def _baseline(conn: Any, window: Window) -> int:
    return conn.execute(text("SELECT count(*) FROM signals WHERE received_at >= :since AND received_at < :until"),
                        {"since": window.since, "until": window.until}).scalar_one()


def _timed(engine: Any, read: Callable[[Any, Window], Any], window: Window, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        with engine.connect() as conn:
            started = time.perf_counter()
            read(conn, window)
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--history", type=int, default=1_000_000, help="decided requests in the seeded ledger")
    parser.add_argument("--repeat", type=int, default=3, help="runs per report and window; medians are shown")
    parser.add_argument("--server", default=DEFAULT_SERVER, help="PostgreSQL server (a database URL on it)")
    args = parser.parse_args()

    with ExitStack() as stack:
        empty = stack.enter_context(fresh_database(args.server, "rep_empty"))
        seeded = stack.enter_context(fresh_database(args.server, "rep_seeded"))
        print(f"history={args.history:,} decided requests, cores=2")
        print(f"seeding the history ledger: {seed(seeded, args.history):.1f} s")
        engines = {name: make_engine(url) for name, url in (("empty", empty), ("history", seeded))}
        for name, url in (("empty", empty), ("history", seeded)):
            add_commands(url, 1_000, "recent")
            vacuum_analyze(engines[name])
        with engines["history"].connect() as conn:
            first, last = conn.execute(text("SELECT min(received_at), max(received_at) FROM signals "
                                            "WHERE received_at < now() - interval '1 day'")).one()
        now = datetime.now(timezone.utc)
        recent = Window(now - timedelta(hours=1), now + timedelta(minutes=1))
        windows = {"one minute of history": Window(first, first + timedelta(minutes=1)),
                   "all the history": Window(first, last + timedelta(seconds=1))}
        with engines["history"].connect() as conn:
            sizes = {name: _baseline(conn, window) for name, window in windows.items()}
        small = max(args.repeat, 15)  # milliseconds each: more runs, for a median above the noise
        print(f"\n(a) the last hour (1,000 signals): seconds (median of {small}, the ledgers taking turns)")
        print(f"{'report':<12}{'empty':>9}{'history':>10}{'ratio':>8}")
        for name, read in _reports(timedelta(hours=1)).items():
            turns = [(_timed(engines["empty"], read, recent, 1), _timed(engines["history"], read, recent, 1))
                     for _ in range(small)]
            e, h = statistics.median(t[0] for t in turns), statistics.median(t[1] for t in turns)
            print(f"{name:<12}{e:>9.3f}{h:>10.3f}{h / e:>7.2f}x  (target ≤ 1.25x: {'met' if h / e <= 1.25 else 'MISSED'})")
        for label, window in windows.items():
            base = _timed(engines["history"], _baseline, window, args.repeat)
            print(f"\n(b) {label} ({sizes[label]:,} signals): seconds (median of {args.repeat}); "
                  f"baseline: counting them by the index {base:.3f} s")
            print(f"{'report':<12}{'seconds':>9}{'signals/s':>12}{'ratio':>9}")
            for name, read in _reports(timedelta(minutes=1)).items():
                t = _timed(engines["history"], read, window, args.repeat)
                print(f"{name:<12}{t:>9.3f}{sizes[label] / t:>12,.0f}{t / base:>8.1f}x")
        for engine in engines.values():
            engine.dispose()


if __name__ == "__main__":
    main()
