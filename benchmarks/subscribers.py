"""Benchmark: subscribers pulling with leases and acknowledging with tokens.

    python -m benchmarks.subscribers --messages 20000 --consumers 8 --history 1000000

(a) One subscriber, ``--consumers`` competing consumers (threads, each with its own connection):
    each pulls up to 100 live signals under a lease and acknowledges every one with its token,
    until all ``--messages`` are acknowledged. Printed: acknowledged messages/s and calls/s
    (pulls + acks), against the raw-PostgreSQL baseline of the same run — the same consumers on a
    bare table (``SELECT … FOR UPDATE SKIP LOCKED`` for a pull, one transaction per ack).
(b) The time of a pull that hands out 100 new twin events, with ``--history`` events already
    handed out and acknowledged in the log, against the same on an empty log (median of
    ``--repeat`` pulls); the ratio shows whether a pull's cost follows the log's size.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

from sqlalchemy import text

from ackstore.ledger.database import make_engine
from ackstore.ledger.named_sql import load
from ackstore.ledger.store import AckStore
from ackstore.rules.settings import Settings
from benchmarks import history
from benchmarks.pipeline import DEFAULT_SERVER, fresh_database

QUERIES = Path(__file__).resolve().parent / "subscribers.sql"
LABEL = "bench:done"
SUBSCRIBER = "bench-app"
PULL_SIZE = 100


def _sql(name: str) -> Any:
    return text(load(QUERIES)[name])


def _consumers(count: int, work: Callable[[], int]) -> tuple[float, int]:
    """Run ``work`` in ``count`` threads until each returns 0; seconds taken and calls made."""
    calls = [0] * count

    def consume(n: int) -> None:
        while (done := work()) > 0:
            calls[n] += done

    threads = [threading.Thread(target=consume, args=(n,)) for n in range(count)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, sum(calls)


def ackstore_consumers(url: str, messages: int, consumers: int) -> tuple[float, int]:
    engine = make_engine(url)  # its pool holds 15 connections: enough for the consumers
    store = AckStore(engine, Settings())
    assert store.declare(SUBSCRIBER, [LABEL], channels=["live"])["status"] == 204
    with engine.begin() as conn:
        conn.execute(_sql("live_signals"), {"count": messages, "label": LABEL, "subscriber": SUBSCRIBER})

    def pull_and_ack() -> int:
        pulled = store.pull(SUBSCRIBER, max=PULL_SIZE, lease="5m")
        for message in pulled:
            headers = message["headers"]
            ack = {"topic": message["topic"].replace("/messages/ask", f"/acks/{LABEL}"),
                   "headers": {"correlation-id": headers["correlation-id"], "ack-token": headers["ack-token"]},
                   "path": "/", "status": 200}
            answer = store.acknowledge(SUBSCRIBER, ack)
            assert answer == {"status": 204}, answer
        return 1 + len(pulled) if pulled else 0

    seconds, calls = _consumers(consumers, pull_and_ack)
    with engine.connect() as conn:
        counted = conn.execute(text("SELECT count(*) FROM acks WHERE disposition = 'counted'")).scalar_one()
    engine.dispose()
    assert counted == messages, f"{counted} of {messages} acknowledged"
    return seconds, calls


def raw_consumers(url: str, messages: int, consumers: int) -> tuple[float, int]:
    engine = make_engine(url)  # its pool holds 15 connections: enough for the consumers
    with engine.begin() as conn:
        conn.execute(_sql("raw_queue"), {"count": messages})

    def pull_and_ack() -> int:
        with engine.begin() as conn:
            ids = list(conn.execute(_sql("raw_pull"), {"size": PULL_SIZE}).scalars())
        for row_id in ids:
            with engine.begin() as conn:
                conn.execute(_sql("raw_ack"), {"id": row_id})
        return 1 + len(ids) if ids else 0

    seconds, calls = _consumers(consumers, pull_and_ack)
    engine.dispose()
    return seconds, calls


def pull_times(url: str, repeat: int) -> list[float]:
    """Seconds of each of ``repeat`` pulls, each handing out 100 events that just landed."""
    engine = make_engine(url)
    store = AckStore(engine, Settings())
    times = []
    for n in range(repeat):
        with engine.begin() as conn:
            conn.execute(_sql("new_events"), {"count": PULL_SIZE, "batch": f"b{n}", "label": LABEL})
        started = time.perf_counter()
        handed = store.pull(SUBSCRIBER, max=PULL_SIZE, lease="5m")
        times.append(time.perf_counter() - started)
        assert len(handed) == PULL_SIZE, len(handed)
    engine.dispose()
    return times


def prepare_log(url: str, events: int) -> None:
    """A subscriber of the twin channel that was handed every event of a log of ``events``."""
    if events:
        history.seed(url, events)
    engine = make_engine(url)
    store = AckStore(engine, Settings())
    assert store.declare(SUBSCRIBER, [LABEL], channels=["twin"])["status"] == 204
    with engine.begin() as conn:
        conn.execute(_sql("answered_history"), {"subscriber": SUBSCRIBER, "label": LABEL})
    history.vacuum_analyze(engine)
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000, help="live signals to pull and acknowledge in (a)")
    parser.add_argument("--consumers", type=int, default=8, help="competing consumers of one subscriber in (a)")
    parser.add_argument("--history", type=int, default=1_000_000, help="acknowledged events in the log in (b)")
    parser.add_argument("--repeat", type=int, default=7, help="pulls timed per log in (b); medians are shown")
    parser.add_argument("--server", default=DEFAULT_SERVER, help="PostgreSQL server (a database URL on it)")
    args = parser.parse_args()

    with ExitStack() as stack:
        leased = stack.enter_context(fresh_database(args.server, "subs_leases"))
        raw = stack.enter_context(fresh_database(args.server, "subs_raw"))
        print(f"(a) {args.messages:,} live signals, one subscriber, {args.consumers} competing consumers, "
              f"pulls of {PULL_SIZE}")
        seconds, calls = ackstore_consumers(leased, args.messages, args.consumers)
        raw_seconds, raw_calls = raw_consumers(raw, args.messages, args.consumers)
        rate, raw_rate = args.messages / seconds, args.messages / raw_seconds
        print(f"    ackstore pull + ack      {seconds:7.2f} s  {rate:9,.0f} messages/s  {calls / seconds:9,.0f} calls/s")
        print(f"    raw PostgreSQL baseline  {raw_seconds:7.2f} s  {raw_rate:9,.0f} messages/s  "
              f"{raw_calls / raw_seconds:9,.0f} calls/s")
        print(f"    ratio raw/ackstore       {raw_rate / rate:7.2f}x")

        empty = stack.enter_context(fresh_database(args.server, "subs_empty"))
        full = stack.enter_context(fresh_database(args.server, "subs_full"))
        prepare_log(empty, 0)
        started = time.perf_counter()
        prepare_log(full, args.history)
        print(f"(b) a pull of {PULL_SIZE} new events; log seeded with {args.history:,} acknowledged events "
              f"in {time.perf_counter() - started:.1f} s")
        empty_median = statistics.median(pull_times(empty, args.repeat))
        full_median = statistics.median(pull_times(full, args.repeat))
        print(f"    empty log                {empty_median * 1000:7.1f} ms (median of {args.repeat})")
        print(f"    {args.history:,} acknowledged  {full_median * 1000:7.1f} ms (median of {args.repeat})")
        print(f"    ratio history/empty      {full_median / empty_median:7.2f}x")


if __name__ == "__main__":
    main()
