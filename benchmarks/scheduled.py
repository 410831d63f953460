"""Benchmark: the wall time of scheduled DAG runs under ``ackstore airflow`` (``make airflow``),
and where it goes.

    python -m benchmarks.scheduled --runs 3                # tasks on the Spark Connect server
    python -m benchmarks.scheduled --runs 3 --local-spark  # each task opens a local session

Starts ``ackstore airflow`` on a fresh, empty ledger (its own home, metadata database and ports),
logs in as its admin, unpauses the DAG, lets it run on its every-minute schedule, and prints the
wall time of each scheduled run after the first (nothing pending: the fixed cost of a run), with
their median; then, per task of those runs (medians), where the time goes: waiting for the
scheduler and executor to start it (after the previous task ended), inside the step itself (its
``pipeline_runs`` record: lock, queue look-up, merge), and the rest of the task (process start,
imports, the connection look-up, the task runner's bookkeeping). The baseline of the same machine:
``ackstore pipeline run`` of the same empty ledger, one process; the ratio of the median run to it.
Stops everything it started.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import text

from ackstore.ledger.database import make_engine, scratch_database
from ackstore.local_airflow import DAG_ID, wait_until
from benchmarks.deployment import BIN, Deployment, airflow, seconds, when
from benchmarks.pipeline import DEFAULT_SERVER


def finished_runs(deployment: Deployment) -> list[dict[str, Any]]:
    return [run for run in deployment.runs() if run["state"] in ("success", "failed")]


def task_profile(deployment: Deployment, ledger: str, runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per task, the median over ``runs`` of: ``wait`` (from the previous task's end, or the
    run's start, to this one's start), ``task`` (start to end, as Airflow records it) and
    ``step`` (the step's own seconds, as it records them in pipeline_runs)."""
    engine = make_engine(ledger)
    with engine.connect() as conn:
        steps = {(row.run_id, row.step): float(row.stats.get("seconds", 0)) for row in conn.execute(
            text("SELECT run_id, step, stats FROM pipeline_runs WHERE run_id = ANY(:ids)"),
            {"ids": [run["dag_run_id"] for run in runs]})}
    engine.dispose()
    figures: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        previous_end = when(run["start_date"])
        for ti in sorted(deployment.task_instances(run["dag_run_id"]), key=lambda ti: ti["start_date"] or ""):
            began, ended = when(ti["start_date"]), when(ti["end_date"])
            if began is None or ended is None:
                continue
            each = figures.setdefault(ti["task_id"], {"wait": [], "task": [], "step": []})
            each["wait"].append((began - previous_end).total_seconds())
            each["task"].append((ended - began).total_seconds())
            each["step"].append(steps.get((run["dag_run_id"], ti["task_id"]), 0.0))
            previous_end = ended
    return {task: {key: statistics.median(values) for key, values in each.items()} for task, each in figures.items()}


def print_profile(profile: dict[str, dict[str, float]], run_seconds: float) -> None:
    print("  where a run's time goes (medians per task, seconds):")
    print(f"    {'task':<14}{'wait':>8}{'task':>8}{'step':>8}{'rest':>8}   (wait: before it starts; rest: task - step)")
    totals = {"wait": 0.0, "task": 0.0, "step": 0.0}
    for task, each in profile.items():
        print(f"    {task:<14}{each['wait']:8.2f}{each['task']:8.2f}{each['step']:8.2f}{each['task'] - each['step']:8.2f}")
        for key in totals:
            totals[key] += each[key]
    print(f"    {'all tasks':<14}{totals['wait']:8.2f}{totals['task']:8.2f}{totals['step']:8.2f}"
          f"{totals['task'] - totals['step']:8.2f}   of a {run_seconds:.2f} s run")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="empty scheduled runs to time (after the first)")
    parser.add_argument("--local-spark", action="store_true", help="no Spark Connect server: local sessions")
    parser.add_argument("--server", default=DEFAULT_SERVER)
    args = parser.parse_args()

    with scratch_database(args.server, "sched") as ledger, tempfile.TemporaryDirectory() as home:
        subprocess.run([str(BIN / "ackstore"), "--database-url", ledger, "db", "upgrade"], check=True,
                       capture_output=True)
        started = time.perf_counter()
        subprocess.run([str(BIN / "ackstore"), "--database-url", ledger, "pipeline", "run"], check=True,
                       capture_output=True, env={**os.environ, "SPARK_REMOTE": ""})
        baseline = time.perf_counter() - started
        with airflow(ledger, args.server, Path(home), local_spark=args.local_spark) as deployment:
            deployment.unpause()
            runs = wait_until(f"{args.runs + 1} scheduled runs", 90 + 75 * (args.runs + 1),
                              lambda: (r := finished_runs(deployment)) and len(r) > args.runs and r)
            deployment.pause()
            profile = task_profile(deployment, ledger, runs[1:])

    spark = "local Spark sessions (one per task)" if args.local_spark else "Spark Connect"
    timed = [(seconds(run), run["state"]) for run in runs[1:]]
    median = statistics.median(s for s, _ in timed)
    print(f"scheduled runs of {DAG_ID} on an empty ledger, {spark}:")
    print(f"  first run (cold):       {seconds(runs[0]):6.1f} s  ({runs[0]['state']})")
    for run_seconds, state in timed:
        print(f"  a later run:            {run_seconds:6.1f} s  ({state})")
    print(f"  median of later runs:   {median:6.1f} s")
    print_profile(profile, median)
    print(f"raw baseline: `ackstore pipeline run` of the same empty ledger, one process, local Spark: {baseline:.1f} s")
    print(f"ratio scheduled/baseline: {median / baseline:.1f}x")


if __name__ == "__main__":
    main()
