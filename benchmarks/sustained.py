"""Benchmark: the rate one deployment holds, as an operator runs it — ``ackstore airflow`` with the
DAG on its real every-minute schedule (Spark Connect, as ``make airflow``), the connector
(``ackstore connect amqp``) on a fresh durable queue, and a publisher at a fixed rate.

    python -m benchmarks.sustained [--rates 3200,4800,6400] [--minutes 5]
    python -m benchmarks.sustained --rates 20 --minutes 0.25 --things 200   # a smoke run, ~3 minutes

What is measured: Ditto Protocol twin modifies of things that exist (``/attributes/counter`` of
one of ``--things`` things, created beforehand by one scheduled run), each requesting
``twin-persisted`` — the common path: applied (204), decided, settled with an ack. Per rate R, a
fresh queue and a fresh connector (its connection id ``sustained-R``) take R messages a second for
``--minutes``; the publisher (no publisher confirms; a paced loop that catches up in bursts when
it falls behind) stamps each message with its publish time (the AMQP header ``x-published-at``,
µs since the epoch, which the connector stores among the signal's headers). After publishing
stops, the backlog is given ``--drain-minutes`` to settle; then the connector is stopped.

Printed per R: messages published (and the rate the publisher achieved), stored, decided,
carried out (by decision); p50/p95/p99 of received→decided, received→carried out (the ledger's
own timestamps) and published→carried out (the publisher's clock: time waiting in the broker
counts). A message never carried out counts as waiting until the drain ended. Carried out is the
connector's record (``carried_out_at``), written before it acks on the broker: a connector that
falls behind with its acks shows in its stop, which acks what it still holds (timed). Then the
DAG's scheduled runs in that window: started, delayed (the minute came while the previous run
was still running: with max_active_runs=1 it waits), minute ticks skipped, start lag and
durations, and where a run's time went; and the CPU a message cost, by component, from the first
message published to the drain's end (``benchmarks/cpu.py``: the connector, PostgreSQL, RabbitMQ,
``airflow`` — ``ackstore airflow``'s whole tree: its scheduler, the DAG's tasks, the Spark Connect
server — and ``benchmark``, the publisher), with the goal's line less the publisher (issue 40:
≤ 200 µs). Last, per R, whether it was held — everything carried out, the publisher within 3 % of
R, and p99 ≤ 90 s (and ≤ 75 s) — for received→carried out and for published→carried out, and
the highest R held.

Everything it starts (``ackstore airflow``, each connector) is stopped by PID; its databases and
queues are dropped. A rate beyond what the connector acks (one delivery at a time, before issue
25's connector) leaves RabbitMQ working through its acks long after the connector stopped: the
queue's deletion waits for it (at 1 000/s, 216 000 acks at ~30 a minute).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator, Sequence

import pika
from sqlalchemy import Engine, text

from ackstore.ledger.database import database_url, make_engine
from ackstore.ledger.named_sql import load
from ackstore.ledger.store import AckStore
from ackstore.local_airflow import wait_until
from benchmarks.broker import DEFAULT_AMQP, GOAL_CPU_PER_MESSAGE_US
from benchmarks.transports import Amqp
from benchmarks.deployment import BIN, Deployment, airflow, seconds, when
from benchmarks import cpu
from benchmarks.pipeline import DEFAULT_SERVER, fresh_database, postmaster
from benchmarks.scheduled import print_profile, task_profile

ROOT = Path(__file__).resolve().parent.parent
QUERIES = load(Path(__file__).resolve().parent / "sustained.sql")
PUBLISHED_AT = "x-published-at"  # µs since the epoch, the publisher's clock
SEED_SOURCE = "sustained-seed"
TARGETS = (90, 75)  # p99 seconds a rate must hold
ACHIEVED_SHARE = 0.97  # the publisher must reach this share of R for R to count as held
CONNECTOR_STOP_SECONDS = 900


@dataclass
class Published:
    messages: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0


@dataclass
class Figures:
    """One rate's results."""

    rate: int
    published: Published
    counts: dict[str, int] = field(default_factory=dict)
    decisions: dict[str, int] = field(default_factory=dict)
    latency: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # p50, p95, p99
    runs: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, dict[str, float]] = field(default_factory=dict)
    drain_seconds: float = 0.0
    stop_seconds: float = 0.0
    stop_code: int | None = None  # the connector's exit code on SIGTERM (-9: killed after CONNECTOR_STOP_SECONDS)
    connector_exited: int | None = None  # its exit code, when it died before the drain ended
    cpu: cpu.CpuWindow | None = None  # from the first message published to the drain's end
    postmaster: int | None = None  # the server in that window, and the ledger's database on it
    ledger: str = ""

    def held(self, what: str, limit: float) -> bool:
        return (self.counts["carried_out"] == self.published.messages
                and self.published.rate >= ACHIEVED_SHARE * self.rate
                and self.latency[what][2] <= limit)


# --- the things the messages modify ----------------------------------------------------------

NAMESPACE = "org.sustained"


def seed_things(url: str, things: int) -> None:
    """Creates of every thing (HTTP, no response wanted), stored in the ledger: the first
    scheduled run applies them."""
    creates = [{"topic": f"{NAMESPACE}/thing-{n}/things/twin/commands/modify",
                "headers": {"correlation-id": f"seed-{n}", "response-required": False},
                "path": "/", "value": {"attributes": {"counter": 0}}} for n in range(things)]
    with AckStore.connect(url) as store:
        for start in range(0, things, 1000):
            answers = store.submit_many(creates[start:start + 1000], source=SEED_SOURCE)
            assert all(answer["status"] == 202 for answer in answers), answers[:3]


def ask(engine: Engine, name: str, **params: Any) -> Any:
    """The first row of the query ``name`` of sustained.sql."""
    with engine.connect() as conn:
        return conn.execute(text(QUERIES[name]), params).one()


def settled(engine: Engine, source: str, published: int) -> bool:
    """Every message stored, nothing waiting anywhere in the pipeline, everything carried out."""
    return ask(engine, "stored", source=source)[0] >= published and ask(engine, "idle")[0]


# --- the publisher ----------------------------------------------------------------------------


def publish_at_rate(amqp: str, queue: str, rate: int, seconds: float, things: int, prefix: str) -> Published:
    """``rate`` modifies a second for ``seconds`` to the durable ``queue``: the messages due by now
    are sent at once (a burst when the publisher fell behind), then it sleeps until the next is
    due. Each carries its publish time in the header ``x-published-at``."""
    connection = pika.BlockingConnection(pika.URLParameters(amqp))
    channel = connection.channel()
    total = round(rate * seconds)
    sent = 0
    started = time.monotonic()
    while sent < total:
        due = min(total, int((time.monotonic() - started) * rate) + 1)
        while sent < due:
            number = sent % things
            body = (b'{"topic":"org.sustained/thing-%d/things/twin/commands/modify","headers":'
                    b'{"correlation-id":"%s-%d","requested-acks":["twin-persisted"]},'
                    b'"path":"/attributes/counter","value":%d}') % (number, prefix.encode(), sent, sent)
            properties = pika.BasicProperties(message_id=f"{prefix}-m{sent}", delivery_mode=2,
                                              content_type="application/json",
                                              headers={PUBLISHED_AT: time.time_ns() // 1000})
            channel.basic_publish("", queue, body, properties)
            sent += 1
        connection.process_data_events(0)  # heartbeats; the broker's flow control blocks the writes
        wait = sent / rate - (time.monotonic() - started)
        if wait > 0:
            time.sleep(wait)
    elapsed = time.monotonic() - started
    connection.close()
    return Published(sent, elapsed)


@contextmanager
def durable_queue(amqp: str, queue: str) -> Iterator[str]:
    """A fresh durable queue, deleted afterwards (what a connector still held goes with it)."""
    connection = pika.BlockingConnection(pika.URLParameters(amqp))
    connection.channel().queue_declare(queue, durable=True)
    connection.close()
    try:
        yield queue
    finally:
        Amqp(amqp).delete(queue)


# --- the connector ----------------------------------------------------------------------------


@contextmanager
def connector(url: str, amqp: str, connection_id: str, queue: str, log: Path, args: argparse.Namespace) -> Iterator[subprocess.Popen]:
    """``ackstore connect amqp`` on ``queue``; on leaving, SIGTERM to its PID (it settles on the
    broker what it recorded, and gives back the rest), SIGKILL after CONNECTOR_STOP_SECONDS."""
    command = [str(BIN / "ackstore"), "--database-url", url, "connect", "amqp", "--url", amqp,
               "--connection-id", connection_id, "--queue", queue, "--requested-acks", "twin-persisted",
               "--batch-size", str(args.batch), "--prefetch", str(args.prefetch)]
    with open(log, "ab") as out:
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(CONNECTOR_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)


# --- what the ledger says ---------------------------------------------------------------------

LATENCY_NAMES = ("received→decided", "received→carried out", "published→carried out")


def ledger_figures(engine: Engine, source: str, until: datetime) -> tuple[dict[str, int], dict[str, int], dict[str, tuple]]:
    """A rate's counts, its decisions by kind and its latencies (p50, p95, p99 seconds)."""
    with engine.connect() as conn:
        counts = dict(conn.execute(text(QUERIES["counts"]), {"source": source}).one()._mapping)
        decisions = {row.decision: row.n for row in conn.execute(text(QUERIES["decisions"]), {"source": source})}
        row = conn.execute(text(QUERIES["latencies"]),
                           {"source": source, "until": until, "published_at": PUBLISHED_AT}).one()
    return counts, decisions, {name: tuple(values or (float("nan"),) * 3) for name, values in zip(LATENCY_NAMES, row)}


# --- what Airflow says ------------------------------------------------------------------------


def run_statistics(runs: list[dict[str, Any]], since: datetime, until: datetime) -> dict[str, Any]:
    """The scheduled runs that started in [since, until): how many, how many were delayed (their
    minute came while the previous run was still running), how many minute ticks had no run, the
    lag from their minute to their start, and their durations."""
    window = [run for run in runs if run["start_date"] and since <= when(run["start_date"]) < until]
    previous = {runs[i + 1]["dag_run_id"]: runs[i] for i in range(len(runs) - 1)}
    delayed = skipped = 0
    for run in window:
        before = previous.get(run["dag_run_id"])
        if before is None:
            continue
        ended = when(before["end_date"])
        delayed += ended is not None and when(run["run_after"]) < ended
        gap = (when(run["run_after"]) - when(before["run_after"])).total_seconds()
        skipped += max(0, round(gap / 60) - 1)
    durations = [d for d in (seconds(run) for run in window) if d is not None]
    lags = [(when(run["start_date"]) - when(run["run_after"])).total_seconds() for run in window]
    return {
        "started": len(window), "delayed": delayed, "skipped": skipped,
        "failed": sum(run["state"] == "failed" for run in window),
        "median": statistics.median(durations) if durations else float("nan"),
        "max": max(durations, default=float("nan")),
        "lag": statistics.median(lags) if lags else float("nan"),
        "finished": [run for run in window if run["end_date"]],
    }


def finished_runs(deployment: Deployment, until: datetime, limit: float) -> list[dict[str, Any]]:
    """The DAG's scheduled runs, once every run that started before ``until`` has ended (or after
    ``limit`` seconds, whichever comes first)."""
    def ended() -> list[dict[str, Any]] | None:
        runs = deployment.runs()
        running = [run for run in runs if run["start_date"] and when(run["start_date"]) < until and not run["end_date"]]
        return None if running else runs

    try:
        return wait_until("the runs of the window ending", limit, ended)
    except TimeoutError:
        return deployment.runs()


# --- one rate ---------------------------------------------------------------------------------


def measure(rate: int, queue: str, url: str, engine: Engine, deployment: Deployment, args: argparse.Namespace,
            work: Path) -> Figures:
    """R messages a second to ``queue`` for the minutes asked, through a fresh connector; the
    backlog's drain; the connector's stop; then what the ledger and Airflow say."""
    connection_id = f"sustained-{rate}"
    with connector(url, args.amqp, connection_id, queue, work / f"connector-{rate}.log", args) as process:
        began = ask(engine, "now")[0]
        # the publisher is this process ("benchmark"); "airflow" is ackstore airflow's whole tree:
        # its scheduler, the DAG's task processes and the Spark Connect server
        server = postmaster(args.server)
        window = cpu.CpuWindow({"connector": [process.pid], "postgres": [server],
                                "rabbitmq": [Amqp(args.amqp).broker_pid()],
                                "airflow": [deployment.process.pid]}).start()
        published = publish_at_rate(args.amqp, queue, rate, args.minutes * 60, args.things, queue)
        drain_started = time.monotonic()
        deadline = drain_started + args.drain_minutes * 60
        while time.monotonic() < deadline and process.poll() is None:
            if settled(engine, connection_id, published.messages):
                break
            time.sleep(2)
        drained = time.monotonic() - drain_started
        window.stop()  # before the connector stops: a root that exits inside it is not counted
        ended = ask(engine, "now")[0]
        exited = process.poll()  # the connector died during the run
        stop_started = time.monotonic()
    stopped = time.monotonic() - stop_started
    stop_code = process.returncode
    figures = Figures(rate, published, drain_seconds=drained, stop_seconds=stopped, stop_code=stop_code,
                      connector_exited=exited, cpu=window, postmaster=server,
                      ledger=database_url(url).database)
    figures.counts, figures.decisions, figures.latency = ledger_figures(engine, connection_id, ended)
    runs = finished_runs(deployment, ended, args.drain_minutes * 60)
    figures.runs = run_statistics(runs, began, ended)
    if figures.runs["finished"]:
        figures.profile = task_profile(deployment, url, figures.runs["finished"])
    return figures


def print_figures(f: Figures, minutes: float) -> None:
    c, r = f.counts, f.runs
    print(f"\nR = {f.rate:,}/s for {minutes:g} min: published {f.published.messages:,} "
          f"(achieved {f.published.rate:,.0f}/s over {f.published.seconds:.0f} s)")
    print(f"  stored {c['stored']:,}, decided {c['decided']:,}, carried out {c['carried_out']:,} "
          f"({', '.join(f'{k} {v:,}' for k, v in f.decisions.items()) or 'none'}); "
          f"drained {f.drain_seconds:.0f} s after publishing")
    print(f"  connector stop (it acks on the broker what it recorded carried out): {f.stop_seconds:.1f} s, "
          f"exit code {f.stop_code}")
    if f.connector_exited is not None:
        print(f"  THE CONNECTOR EXITED ({f.connector_exited}) before the backlog settled")
    print(f"  {'seconds':<24}{'p50':>8}{'p95':>8}{'p99':>8}")
    for name, (p50, p95, p99) in f.latency.items():
        print(f"  {name:<24}{p50:8.1f}{p95:8.1f}{p99:8.1f}")
    print(f"  scheduled runs: {r['started']} started, {r['delayed']} delayed by the previous run, "
          f"{r['skipped']} minute ticks skipped, {r['failed']} failed; start lag (median) {r['lag']:.1f} s; "
          f"duration median {r['median']:.1f} s, max {r['max']:.1f} s")
    if f.profile:
        print_profile(f.profile, r["median"])
    if f.cpu is not None and f.published.messages:
        n = f.published.messages
        ours = cpu.print_profile("CPU, from the first message published to the drain's end:", f.cpu, n, "message",
                                 ["connector", "postgres", "rabbitmq", "airflow", "benchmark"],
                                 f.postmaster, {f.ledger})
        publisher = f.cpu.profile.seconds[cpu.BENCHMARK] / n * 1e6
        print(f"  CPU per message, less the publisher (benchmark): {ours - publisher:.0f} µs "
              f"(goal ≤ {GOAL_CPU_PER_MESSAGE_US})")


def print_summary(all_figures: list[Figures]) -> None:
    print("\n| rate | publisher achieved | carried out | p50 / p99 published→carried out "
          f"| held (p99 ≤ {TARGETS[0]} s) | runs (median) |")
    print("|---|---|---|---|---|---|")
    for f in all_figures:
        p50, _, p99 = f.latency[LATENCY_NAMES[2]]
        print(f"| {f.rate:,}/s | {f.published.rate:,.0f}/s | {f.counts['carried_out']:,} / {f.published.messages:,} "
              f"| {p50:.0f} s / {p99:.0f} s | {'held' if f.held(LATENCY_NAMES[2], TARGETS[0]) else 'not held'} "
              f"| {f.runs['median']:.0f} s |")
    for what in LATENCY_NAMES[1:]:
        for limit in TARGETS:
            held = [f.rate for f in all_figures if f.held(what, limit)]
            print(f"highest rate held with p99 {what} ≤ {limit} s: "
                  f"{f'{max(held):,}/s' if held else 'none of those tried'}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="3200,4800,6400", help="messages/s, comma-separated")
    parser.add_argument("--minutes", type=float, default=5, help="publishing time per rate")
    parser.add_argument("--drain-minutes", type=float, default=5, help="at most this long for the backlog to settle")
    parser.add_argument("--things", type=int, default=10_000, help="things the messages modify")
    parser.add_argument("--batch", type=int, default=1000, help="the connector's messages per ledger transaction")
    parser.add_argument("--prefetch", type=int, default=0, help="the connector's prefetch (0: no limit)")
    parser.add_argument("--amqp", default=os.environ.get("ACKSTORE_BENCH_AMQP", DEFAULT_AMQP))
    parser.add_argument("--server", default=os.environ.get("ACKSTORE_BENCH_SERVER", DEFAULT_SERVER))
    args = parser.parse_args(argv)
    rates = [int(rate) for rate in args.rates.split(",")]

    results: list[Figures] = []
    with fresh_database(args.server, "sustained") as url, tempfile.TemporaryDirectory() as work:
        engine = make_engine(url)
        try:
            seed_things(url, args.things)
            with airflow(url, args.server, Path(work)) as deployment:
                deployment.unpause()
                wait_until(f"{args.things:,} things created by a scheduled run", 600,
                           lambda: ask(engine, "idle")[0], interval=5)
                print(f"ackstore airflow (Spark Connect) running the DAG every minute, {args.things:,} things "
                      f"created by its first run. Measured per rate: twin modifies of those things requesting "
                      f"twin-persisted (the common path: 204, decided, acked on the broker), published to a "
                      f"fresh durable queue, consumed by a fresh `ackstore connect amqp` (batch {args.batch}, "
                      f"prefetch {args.prefetch or 'unlimited'})", flush=True)
                for rate in rates:
                    with durable_queue(args.amqp, f"ackstore-sustained-{uuid.uuid4().hex[:6]}-{rate}") as queue:
                        results.append(measure(rate, queue, url, engine, deployment, args, Path(work)))
                        print_figures(results[-1], args.minutes)
                        sys.stdout.flush()
        finally:
            engine.dispose()
    print_summary(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
