"""Benchmark: the cost model of a pipeline pass — its fixed CPU and its CPU per command, by component.

    python -m benchmarks.cost_model            # passes of 0, 2 000, 6 000, 18 000, 40 000 and 120 000
    python -m benchmarks.cost_model --sizes 0,10000,100000,400000

A batch ledger's cost per message is a pass's fixed cost (Spark jobs, connections, planning,
statistics, the gate's set-up), shared by the messages of that pass, plus a marginal cost that
every message pays. A change is judged by which of the two it moves, so this benchmark measures
both: one pass of every step (``jobs.pipeline.run``, sealing included) over each size of
``--sizes`` twin modify commands (``benchmarks/workload.sql``, as ``benchmarks.pipeline``
generates them), each size in a fresh database of its own, on one local Spark session warmed by a
pass beforehand, each pass measured ``--repeat`` times (a size of 0 is an idle pass: a database
holding only decided work, right after its pass). Then, for every component, the CPU of an idle
pass (which opens no Spark job), and the line ``CPU seconds = fixed + marginal × commands``
fitted by least squares over the passes that found work (:func:`fit`) — one line for the passes
whose work ran in the driver (up to ``in_driver_rows``, decisions #110) and one for those that ran
Spark jobs —, printed as the fixed milliseconds of a pass and the marginal µs per command, with
the cost per command at each size (``fixed / n + marginal``):

* ``driver``: this process, which runs the steps' SQL and drives Spark;
* ``spark``: the local session's JVM and its Python workers;
* ``postgres``: the whole server (every backend, the WAL writer, the checkpointer; another
  session's queries count there too — ``other databases`` in ``benchmarks.pipeline``);
* ``ours``: the three together.

And, fitted the same way from the server's own counters of the pass's database
(``pg_stat_database``): the connections opened per pass and the transactions committed; the
statements this process sent (its SQLAlchemy engines' ``before_cursor_execute``; Spark's JDBC
statements are not among them); and the bytes of WAL written (the server's, so another session's
writes count too) per command. Figures for this machine's cores only: CPU per unit, not wall time,
is what survives the host's steal (``benchmarks/cpu.py``).
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, replace
from typing import Iterator, Mapping, Sequence

from sqlalchemy import Engine, event, text

from ackstore.ledger.database import database_url, make_engine
from benchmarks.cpu import CpuWindow
from benchmarks.pipeline import DEFAULT_SERVER, fresh_database, generate, postmaster, spark_jvm

COMPONENTS = ("driver", "spark", "postgres")
COUNTERS = ("connections", "transactions", "statements", "wal_bytes")


@dataclass(frozen=True)
class Line:
    """``y = fixed + marginal × n``, fitted over points; ``r2`` how much of y's spread it explains."""

    fixed: float
    marginal: float
    r2: float

    def at(self, n: float) -> float:
        return self.fixed + self.marginal * n


def fit(points: Sequence[tuple[float, float]]) -> Line:
    """The least-squares line through ``points`` of (n, y). With one size only, the line is flat
    (no marginal cost can be told from it)."""
    if not points:
        raise ValueError("no points to fit")
    count = len(points)
    mean_n = sum(n for n, _ in points) / count
    mean_y = sum(y for _, y in points) / count
    spread_n = sum((n - mean_n) ** 2 for n, _ in points)
    spread_y = sum((y - mean_y) ** 2 for _, y in points)
    marginal = sum((n - mean_n) * (y - mean_y) for n, y in points) / spread_n if spread_n else 0.0
    fixed = mean_y - marginal * mean_n
    residual = sum((y - fixed - marginal * n) ** 2 for n, y in points)
    return Line(fixed=fixed, marginal=marginal, r2=1 - residual / spread_y if spread_y else 1.0)


@dataclass(frozen=True)
class Pass:
    """One measured pass: its commands, where apply_twin staged them (``driver`` or ``spark``:
    decisions #110), its wall seconds and the validate step's (the gate's share of the pass), CPU
    seconds by component, and its counters."""

    commands: int
    staged_in: str
    seconds: float
    validate_seconds: float
    cpu: Mapping[str, float]
    counters: Mapping[str, float]


class StatementCounter:
    """The statements every SQLAlchemy engine of this process sends, counted while installed."""

    def __init__(self) -> None:
        self.count = 0

    def _count(self, *_: object) -> None:
        self.count += 1

    def __enter__(self) -> "StatementCounter":
        event.listen(Engine, "before_cursor_execute", self._count)
        return self

    def __exit__(self, *_: object) -> None:
        event.remove(Engine, "before_cursor_execute", self._count)


def server_counters(server: Engine, database: str) -> dict[str, float]:
    """The server's counters of ``database`` now (its backends report them when a transaction
    ends or they exit; the caller waits for that), and the server's WAL position."""
    with server.connect() as conn:
        conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        row = conn.execute(text(
            "SELECT sessions, xact_commit + xact_rollback AS transactions, "
            "pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0') AS wal FROM pg_stat_database WHERE datname = :db"),
            {"db": database}).one()
    return {"connections": float(row.sessions), "transactions": float(row.transactions), "wal_bytes": float(row.wal)}


STATS_FLUSH_SECONDS = 1.2  # a backend reports its counters at most once a second while it lives


def measure_pass(spark: object, settings: object, server: Engine, roots: dict[str, list[int | None]],
                 commands: int) -> Pass:
    """One pass of every step, measured: CPU by component and the counters' change."""
    from jobs import pipeline

    database = database_url(settings.database_url).database  # type: ignore[attr-defined]
    before = server_counters(server, database)
    with StatementCounter() as statements:
        window = CpuWindow(roots).start()
        started = time.perf_counter()
        stats = pipeline.run(spark, settings)  # type: ignore[arg-type]
        wall = time.perf_counter() - started
        window.stop()
    time.sleep(STATS_FLUSH_SECONDS)
    after = server_counters(server, database)
    seconds = window.profile.seconds
    cpu = {"driver": seconds["benchmark"], "spark": seconds.get("spark", 0.0), "postgres": seconds.get("postgres", 0.0)}
    # the look at the counters is a transaction of another database (the server's URL): not counted
    counters = {name: after[name] - before[name] for name in before}
    counters["statements"] = float(statements.count)
    return Pass(commands=commands, staged_in=stats["apply_twin"].get("staged_in", "idle"), seconds=wall,
                validate_seconds=stats["validate"].get("seconds", 0.0),
                cpu={**cpu, "ours": sum(cpu.values())}, counters=counters)


def passes(args: argparse.Namespace) -> Iterator[Pass]:
    """Every measured pass: each size in a fresh database, ``--repeat`` times."""
    from jobs.pipeline import run as run_pass
    from jobs.settings import PipelineSettings
    from jobs.spark import spark_session

    spark = spark_session("ackstore-cost-model", cores=args.cores)
    server = make_engine(args.server)
    try:
        roots = {"postgres": [postmaster(args.server)], "spark": [spark_jvm(spark)]}
        settings = PipelineSettings(database_url=args.server, partitions=max(2, args.cores * 2))
        with fresh_database(args.server, "fit_warm") as url:  # the session's first jobs are slower
            generate(url, max(args.sizes), max(1, max(args.sizes) // 10))
            run_pass(spark, replace(settings, database_url=url, run_id="warm"))
        for size in sorted(set(args.sizes)):
            for repeat in range(args.repeat):
                with fresh_database(args.server, f"fit_{size}_{repeat}") as url:
                    at = replace(settings, database_url=url, run_id=f"fit-{size}-{repeat}")
                    if size:
                        generate(url, size, max(1, size // 10))
                        yield measure_pass(spark, at, server, roots, size)
                    else:  # idle: what a pass costs after the work was done
                        generate(url, 1000, 100)
                        run_pass(spark, replace(at, run_id="before-idle"))
                        yield measure_pass(spark, at, server, roots, 0)
    finally:
        server.dispose()
        spark.stop()


def report(measured: Sequence[Pass]) -> list[str]:
    """The passes, then, for each place the work was staged (the driver below
    ``in_driver_rows``, Spark above: two lines, not one), each component's and counter's line
    fitted over the passes that found work there. An idle pass opens no Spark job: it is its own
    figure, the mean of the idle passes."""
    idle = [each for each in measured if not each.commands]
    lines = [f"{'commands':>10} {'staged in':>9} {'wall s':>8} {'gate %':>7} "
             + " ".join(f"{name + ' s':>10}" for name in (*COMPONENTS, "ours"))
             + " " + " ".join(f"{name:>12}" for name in COUNTERS)]
    for each in sorted(measured, key=lambda p: p.commands):
        lines.append(f"{each.commands:>10,} {each.staged_in:>9} {each.seconds:8.2f} "
                     f"{each.validate_seconds / each.seconds * 100:7.1f} "
                     + " ".join(f"{each.cpu[name]:10.2f}" for name in (*COMPONENTS, "ours"))
                     + " " + " ".join(f"{each.counters[name]:12,.0f}" for name in COUNTERS))
    for place in ("driver", "spark"):
        working = [each for each in measured if each.commands and each.staged_in == place]
        sizes = sorted({each.commands for each in working})
        if len(sizes) < 2:
            continue  # one size tells no marginal cost
        per_size = "".join(f"{'at ' + format(n, ','):>12}" for n in sizes)
        lines.append("")
        lines.append(f"staged in the {place}: {', '.join(format(n, ',') for n in sizes)} commands")
        lines.append(f"{'CPU':<10} {'idle ms':>8} {'fixed ms/pass':>14} {'marginal µs/cmd':>16} {'r²':>6}"
                     f"   µs a command (fixed/n + marginal):{per_size}")
        for name in (*COMPONENTS, "ours"):
            line = fit([(each.commands, each.cpu[name]) for each in working])
            lines.append(f"{name:<10} {_mean([each.cpu[name] for each in idle]) * 1e3:8.0f} {line.fixed * 1e3:14.0f} "
                         f"{line.marginal * 1e6:16.1f} {line.r2:6.2f}" + " " * 38
                         + "".join(f"{line.at(n) / n * 1e6:12.1f}" for n in sizes))
        lines.append(f"{'counter':<12} {'idle':>10} {'fixed/pass':>12} {'per command':>12} {'r²':>6}")
        for name in COUNTERS:
            line = fit([(each.commands, each.counters[name]) for each in working])
            lines.append(f"{name:<12} {_mean([each.counters[name] for each in idle]):10,.0f} {line.fixed:12,.1f} "
                         f"{line.marginal:12,.2f} {line.r2:6.2f}")
    return lines


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cost_model", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=lambda v: [int(n) for n in v.split(",")], default=[0, 2000, 6000, 18000, 40000, 120000],
                        help="comma-separated commands per pass (0: an idle pass)")
    parser.add_argument("--repeat", type=int, default=2, help="passes measured per size")
    parser.add_argument("--server", default=os.environ.get("ACKSTORE_BENCH_SERVER", DEFAULT_SERVER),
                        help="a PostgreSQL URL; the benchmark creates and drops its own databases there")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args(argv)
    if min(args.sizes) < 0 or args.repeat < 1:
        parser.error("sizes are 0 or more commands, and --repeat at least 1")
    measured = list(passes(args))
    print(f"a pass of every step, by commands pending; cores={args.cores}, {args.repeat} pass(es) a size")
    for line in report(measured):
        print(f"    {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
