"""Benchmark: a scrape of `ackstore metrics` on an empty ledger and on a million signals of history.

    python -m benchmarks.scrape --history 1000000

Two fresh databases on 127.0.0.1:5432: one empty, one seeded with N decided requests
(benchmarks/history.sql: half from a connection, settled and carried out) and sealed, as a
ledger is after its pipeline ran; both then get the same 1 000 new commands, after the last seal
(the work of the last pass, which a scrape reads beside the totals). A scrape is what Prometheus
asks for: the ledger's metrics rendered as text (ackstore.reporting.metrics), median of
--repeat. The ratio history/empty shows whether the history's size leaks into a scrape; the
issue's target is ≤ 50 ms at 1 M.
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import ExitStack

from prometheus_client import generate_latest

from ackstore.ledger import seals
from ackstore.ledger.database import make_engine
from ackstore.reporting.metrics import registry_for
from benchmarks import history
from benchmarks.pipeline import DEFAULT_SERVER, fresh_database


def scrape_seconds(url: str, repeat: int) -> list[float]:
    """``repeat`` scrapes of the ledger at ``url``, each timed (one warm-up scrape first)."""
    engine = make_engine(url)
    registry = registry_for(engine)
    generate_latest(registry)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        generate_latest(registry)
        times.append(time.perf_counter() - started)
    engine.dispose()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--history", type=int, default=1_000_000, help="decided requests of history (default 1 000 000)")
    parser.add_argument("--repeat", type=int, default=10, help="scrapes timed on each ledger (default 10)")
    parser.add_argument("--server", default=DEFAULT_SERVER, help="the PostgreSQL server's admin URL")
    args = parser.parse_args()
    with ExitStack() as stack:
        ledgers = {name: stack.enter_context(fresh_database(args.server, f"scrape_{name}"))
                   for name in ("empty", "history")}
        seeded = history.seed(ledgers["history"], args.history)
        started = time.perf_counter()
        seals.seal(make_engine(ledgers["history"]))
        sealed = time.perf_counter() - started
        print(f"seeded {args.history} requests in {seeded:.1f} s, sealed them in {sealed:.1f} s")
        medians = {}
        for name, url in ledgers.items():
            history.add_commands(url, 1_000, "fresh")
            times = scrape_seconds(url, args.repeat)
            medians[name] = statistics.median(times)
            print(f"{name:>8}: scrape median {medians[name] * 1000:.1f} ms "
                  f"(min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f}, n={len(times)})")
        print(f"history/empty: {medians['history'] / medians['empty']:.2f}x; "
              f"target at {args.history}: <= 50 ms ({'met' if medians['history'] <= 0.050 else 'NOT met'})")


if __name__ == "__main__":
    main()
