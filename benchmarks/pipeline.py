"""Benchmark: the Spark pipeline against PostgreSQL writing the same rows by itself.

    python -m benchmarks.pipeline --commands 100000

Generates N twin modify commands over N/10 things (each requesting ``twin-persisted`` and
``search-persisted``) in four fresh databases, runs the pipeline without sealing in one (to warm
the session), the pipeline in the next, then without sealing again in the third (sealing on vs
off, decisions #101), and the project's own raw-SQL baseline in the fourth (the ledger's tables
and indexes, one server-side transaction),
checks both decided every request, then runs the team's yardstick
(``benchmarks/yardstick.sql``: the naive rows of that work, no ledger at all) right after.
Prints each step's time, end to end, and the ratios pipeline/baseline and pipeline/yardstick.
Then where the CPU went (benchmarks/cpu.py): µs per command of the pipeline run — this process
(it drives the steps), the local Spark session's JVM and Python workers, PostgreSQL (split by whom
it served: live backends by client, and backends that ended inside the window) — and of the
yardstick, which is PostgreSQL alone; with the machine's busy share, so that one can see whether
a step's statement kept one core busy while the other idled. Last, what the workload's ingest and
the pipeline run wrote, per command and table (benchmarks/written.py): rows and bytes, and the
sealed facts a command left.
"""

from __future__ import annotations

import argparse
import os
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Iterator

from sqlalchemy import text

from ackstore.ledger.database import database_url, make_engine, scratch_database
from ackstore.ledger.migrate import upgrade
from ackstore.ledger.schema import SEALED_TABLES
from benchmarks import written, yardstick
from benchmarks.cpu import CpuWindow, peak_rss_mib, postmaster_pid, print_profile

WORKLOAD = Path(__file__).resolve().parent / "workload.sql"
DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
GOAL_CPU_PER_COMMAND_US, GOAL_YARDSTICK_RATIO = 50, 1.5  # issue 40


def _sections() -> dict[str, str]:
    from ackstore.ledger.named_sql import load

    return load(WORKLOAD)


@contextmanager
def fresh_database(server_url: str, label: str) -> Iterator[str]:
    """A new database on the server, migrated to head; dropped afterwards."""
    with scratch_database(server_url, f"bench_{label}") as url:
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
        yield url


def postmaster(server_url: str) -> int | None:
    """The postmaster of the benchmark's server, if it runs on this machine and this user may
    read its data directory's postmaster.pid (else None: its CPU is then in ``other``)."""
    engine = make_engine(server_url)
    with engine.connect() as conn:
        data_directory = conn.execute(text("SELECT current_setting('data_directory')")).scalar_one()
    engine.dispose()
    return postmaster_pid(data_directory)


def spark_jvm(spark: object) -> int:
    """The process id of the JVM a local Spark session launched (pyspark keeps it privately)."""
    return spark.sparkContext._gateway.proc.pid  # type: ignore[attr-defined]


def generate(url: str, commands: int, things: int) -> float:
    sections = _sections()
    engine = make_engine(url)
    started = time.perf_counter()
    with engine.begin() as conn:
        conn.execute(text(sections["generate_commands"]), {"commands": commands, "things": things})
        conn.exec_driver_sql(sections["generate_queues"])
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))
    engine.dispose()
    return time.perf_counter() - started


def run_baseline(url: str) -> float:
    engine = make_engine(url)
    started = time.perf_counter()
    with engine.begin() as conn:
        conn.exec_driver_sql(_sections()["baseline"])
    elapsed = time.perf_counter() - started
    engine.dispose()
    return elapsed


def decided(url: str) -> tuple[int, int]:
    """(requests decided with 200, requests in all)."""
    engine = make_engine(url)
    with engine.connect() as conn:
        ok = conn.execute(text("SELECT count(*) FROM request_results WHERE status = 200")).scalar_one()
        total = conn.execute(text("SELECT count(*) FROM signals")).scalar_one()
    engine.dispose()
    return ok, total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pipeline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commands", type=int, default=100_000)
    parser.add_argument("--server", default=os.environ.get("ACKSTORE_BENCH_SERVER", DEFAULT_SERVER),
                        help="a PostgreSQL URL; the benchmark creates and drops its own databases there")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args(argv)
    n, things = args.commands, max(1, args.commands // 10)

    from jobs import pipeline
    from jobs.settings import PipelineSettings
    from jobs.spark import spark_session

    with fresh_database(args.server, "base") as base_url, fresh_database(args.server, "pipe") as pipe_url, \
            fresh_database(args.server, "unsealed") as unsealed_url, fresh_database(args.server, "warm") as warm_url:
        generate(base_url, n, things)
        generate(unsealed_url, n, things)
        generate(warm_url, n, things)
        empty = written.snapshot(pipe_url)
        generation = generate(pipe_url, n, things)
        baseline = run_baseline(base_url)

        started = time.perf_counter()
        spark = spark_session("ackstore-bench", cores=args.cores)
        session_start = time.perf_counter() - started
        settings = PipelineSettings(database_url=pipe_url, partitions=max(2, args.cores * 2))
        unsealed_steps = tuple(name for name in pipeline.STEPS if name != "seal")
        # A first run warms the session's JVM (its first run is up to a fifth slower), so that the
        # sealed run and the one without sealing after it compare the same session.
        started = time.perf_counter()
        pipeline.run(spark, replace(settings, database_url=warm_url), unsealed_steps)
        warm = time.perf_counter() - started
        server = postmaster(args.server)
        pipeline_cpu = CpuWindow({"postgres": [server], "spark": [spark_jvm(spark)]}).start()
        started = time.perf_counter()
        stats = pipeline.run(spark, settings)
        end_to_end = time.perf_counter() - started
        pipeline_cpu.stop()
        stored = written.snapshot(pipe_url)  # the workload's ingest and the sealed run
        # The same run without sealing, after it (if anything, warmer: the comparison favours it).
        # Sealing's cost is the difference (decisions #101): with the early seal beside sweep and
        # validate, the seal step's own time is not it.
        started = time.perf_counter()
        pipeline.run(spark, replace(settings, database_url=unsealed_url), unsealed_steps)
        unsealed = time.perf_counter() - started
        spark.stop()

        for name, url in (("baseline", base_url), ("pipeline", pipe_url)):
            ok, total = decided(url)
            if ok != total:
                raise SystemExit(f"{name}: only {ok} of {total} requests were decided with 200")
        with CpuWindow({"postgres": [server]}) as yardstick_cpu:
            yard = yardstick.run(base_url, n)

    print(f"commands={n:,} things={things:,} cores={args.cores} (workload generated in {generation:.1f} s)")
    print(f"spark session start      {session_start:7.1f} s (not counted below)")
    print(f"warm-up run, no sealing  {warm:7.1f} s (not counted below)")
    for name, step in stats.items():
        print(f"{name:<24} {step['seconds']:7.1f} s {n / step['seconds']:12,.0f} commands/s   {_detail(step)}")
    print(f"{'pipeline end to end':<24} {end_to_end:7.1f} s {n / end_to_end:12,.0f} commands/s")
    seal = stats["seal"]
    facts = seal["facts"] + seal.get("early_facts", 0)
    print(f"{'sealing on vs off':<24} {end_to_end - unsealed:7.1f} s for {facts:,} facts "
          f"({(end_to_end - unsealed) / max(facts, 1) * 1e6:.2f} µs a fact; the early seal "
          f"{seal.get('early_seconds', 0):.1f} s beside sweep and validate, the seal step {seal['seconds']:.1f} s): "
          f"{end_to_end / unsealed - 1:+.1%} on the {unsealed:.1f} s of the same run without sealing")
    print(f"{'raw SQL baseline':<24} {baseline:7.1f} s {n / baseline:12,.0f} commands/s")
    print(f"{'yardstick':<24} {yard:7.1f} s {n / yard:12,.0f} commands/s")
    print(f"ratio pipeline/baseline  {end_to_end / baseline:7.2f}x")
    ours, yardstick_ours = (print_profile(title, window, n, "command", ["benchmark", "spark", "postgres"], server,
                                          {database_url(url).database})
                            for title, window, url in (("CPU, pipeline end to end:", pipeline_cpu, pipe_url),
                                                       ("CPU, yardstick:", yardstick_cpu, base_url)))
    print(f"CPU per command: {ours:.0f} µs (goal ≤ {GOAL_CPU_PER_COMMAND_US}; the yardstick's {yardstick_ours:.0f})")
    print(f"ratio to yardstick: {end_to_end / yard:.2f}× (goal ≤ {GOAL_YARDSTICK_RATIO})")
    print(f"peak RSS of the driver: {peak_rss_mib()['this process']:,.0f} MiB")
    print("written by the workload's ingest and the pipeline run:")
    for line in written.per_command(empty, stored, n, (table.name for table in SEALED_TABLES)):
        print(f"  {line}")
    return 0


def _detail(step: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in step.items() if k != "seconds")


if __name__ == "__main__":
    raise SystemExit(main())
