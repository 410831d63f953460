"""Benchmark: a scrape of `ackstore metrics` on an empty ledger and on a million signals of history;
or, with --sources, on signals of 100 connections against as many connections as signals.

    python -m benchmarks.scrape --history 1000000
    python -m benchmarks.scrape --sources 2000
    python -m benchmarks.scrape --awaited 200000

--sources N (issue 50): two fresh ledgers, a signal from each of 100 connections against one from
each of N (one ingest login naming a source per signal), each decided and acked, half sealed: the
series served and a scrape's median on both. The sources past the first ACKSTORE_METRIC_SOURCES
are served as `other`, so the series are equal and the ratio stays near 1.

--awaited N (issue 50): two fresh ledgers, one with N requests decided by their deadline before
their commands were applied (each awaits its twin-persisted and search-persisted facts, which
will be late: the metrics count them; neither queued for the apply step nor waiting for the
gate, open work whose size the gauges count as they should), sealed; then on both the same 1 000 new commands, a
scrape's median, and the median seal of --repeat rounds of 1 000 new commands each. The late
built-in acks are looked for from the new facts, so neither a scrape nor a seal follows N and
the ratios stay near 1.

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
    parser.add_argument("--sources", type=int, help="instead: N signals of one connection against N connections")
    parser.add_argument("--awaited", type=int, help="instead: a scrape and a seal beside N requests awaiting "
                                                    "their built-in facts, against none")
    args = parser.parse_args()
    if args.sources:
        return sources(args)
    if args.awaited:
        return awaited(args)
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


def sources(args: argparse.Namespace) -> None:
    """A signal from each of 100 connections against one from each of N: series and scrape medians."""
    counts = {"100_sources": 100, f"{args.sources}_sources": args.sources}
    with ExitStack() as stack:
        ledgers = {name: stack.enter_context(fresh_database(args.server, f"scrape_{name}")) for name in counts}
        for name, url in ledgers.items():
            history.add_sources(url, counts[name] // 2, "sealed-")
            seals.seal(make_engine(url))
            history.add_sources(url, counts[name] - counts[name] // 2, "fresh-")
        medians = {}
        for name, url in ledgers.items():
            engine = make_engine(url)
            series = generate_latest(registry_for(engine)).decode().count("\nackstore_")
            engine.dispose()
            times = scrape_seconds(url, args.repeat)
            medians[name] = statistics.median(times)
            print(f"{name:>14}: {series} series, scrape median {medians[name] * 1000:.1f} ms "
                  f"(min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f}, n={len(times)})")
        many, few = medians[f"{args.sources}_sources"], medians["100_sources"]
        print(f"{args.sources}/100 sources: {many / few:.2f}x")


def awaited(args: argparse.Namespace) -> None:
    """N requests awaiting their built-in facts against none: a scrape's and a seal's medians."""
    counts = {"none": 0, f"{args.awaited}_awaited": args.awaited}
    with ExitStack() as stack:
        ledgers = {name: stack.enter_context(fresh_database(args.server, f"awaited_{n}"))
                   for n, name in enumerate(counts)}
        for name, url in ledgers.items():
            if counts[name]:
                history.add_awaited(url, counts[name], "awaited")
            engine = make_engine(url)
            started = time.perf_counter()
            seals.seal(engine)  # what the seal keeps of them: metric_awaited_facts
            print(f"{name:>16}: the first seal took {(time.perf_counter() - started) * 1000:.0f} ms")
            history.vacuum_analyze(engine)
            engine.dispose()
        scrapes, sealed = {}, {}
        for name, url in ledgers.items():
            history.add_commands(url, 1_000, "fresh")
            times = scrape_seconds(url, args.repeat)
            scrapes[name] = statistics.median(times)
            engine = make_engine(url)
            seal_times = []
            for n in range(args.repeat):
                history.add_commands(url, 1_000, f"round-{n}")
                started = time.perf_counter()
                seals.seal(engine)
                seal_times.append(time.perf_counter() - started)
            engine.dispose()
            sealed[name] = statistics.median(seal_times)
            print(f"{name:>16}: scrape median {scrapes[name] * 1000:.1f} ms (min {min(times) * 1000:.1f}, "
                  f"max {max(times) * 1000:.1f}), seal of 1 000 commands median {sealed[name] * 1000:.1f} ms "
                  f"(min {min(seal_times) * 1000:.1f}, max {max(seal_times) * 1000:.1f}, n={args.repeat})")
        many, none = f"{args.awaited}_awaited", "none"
        print(f"{args.awaited} awaited/none: scrape {scrapes[many] / scrapes[none]:.2f}x, "
              f"seal {sealed[many] / sealed[none]:.2f}x")


if __name__ == "__main__":
    main()
