"""Benchmark: the wall time of scheduled DAG runs under ``ackstore airflow`` (``make airflow``),
and where it goes.

    python -m benchmarks.scheduled --runs 3                # tasks on the Spark Connect server
    python -m benchmarks.scheduled --runs 3 --local-spark  # each task opens a local session

Starts ``ackstore airflow`` on a fresh, empty ledger (its own home, metadata database and ports),
logs in as its admin, unpauses the DAG, lets it run on its every-minute schedule, and prints the
wall time of each scheduled run after the first (nothing pending: the fixed cost of a run), with
their median; then, per Airflow task of those runs (medians), where the time goes: waiting for
the scheduler and executor to start it (after the previous task ended), inside the pipeline's
steps (their ``pipeline_runs`` records: lock, queue look-up, Spark, merge), and the rest of the
task (process start, imports, the connection look-up, the task runner's bookkeeping); and each
step's own seconds. The baseline of the same machine:
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
from jobs.pipeline import PASS_MARK


def finished_runs(deployment: Deployment) -> list[dict[str, Any]]:
    return [run for run in deployment.runs() if run["state"] in ("success", "failed")]


def task_profile(deployment: Deployment, ledger: str, runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Where ``runs`` spent their time, medians over the runs. Per Airflow task: ``wait`` (from the
    previous task's end, or the run's start, to its start), ``task`` (its start to its end, as
    Airflow records them) and ``steps`` (the pipeline steps it ran, by their own record in
    pipeline_runs: a step belongs to the task it finished in). Per pipeline step (under its name
    in brackets): its own seconds."""
    engine = make_engine(ledger)
    of_runs = {"ids": [run["dag_run_id"] for run in runs], "mark": PASS_MARK}
    with engine.connect() as conn:  # a run's passes after the first record as "<run id>#k"
        steps = [(row.run_id, row.step, row.finished_at, float(row.stats.get("seconds", 0))) for row in conn.execute(
            text("SELECT split_part(run_id, :mark, 1) AS run_id, step, finished_at, stats FROM pipeline_runs "
                 "WHERE split_part(run_id, :mark, 1) = ANY(:ids) ORDER BY id"), of_runs)]
        passes = conn.execute(text("SELECT count(DISTINCT run_id) FROM pipeline_runs "
                                   "WHERE split_part(run_id, :mark, 1) = ANY(:ids) GROUP BY split_part(run_id, :mark, 1)"),
                              of_runs).scalars().all()
    engine.dispose()
    figures: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        previous_end = when(run["start_date"])
        for ti in sorted(deployment.task_instances(run["dag_run_id"]), key=lambda ti: ti["start_date"] or ""):
            began, ended = when(ti["start_date"]), when(ti["end_date"])
            if began is None or ended is None:
                continue
            inside = [seconds for run_id, _, finished, seconds in steps
                      if run_id == run["dag_run_id"] and began <= finished <= ended]
            each = figures.setdefault(ti["task_id"], {"wait": [], "task": [], "steps": []})
            each["wait"].append((began - previous_end).total_seconds())
            each["task"].append((ended - began).total_seconds())
            each["steps"].append(sum(inside))
            previous_end = ended
    for run_id, step, _, seconds in steps:
        figures.setdefault(f"[{step}]", {"steps": []})["steps"].append(seconds)
    figures["passes"] = {"steps": [float(n) for n in passes] or [0.0]}
    return {name: {key: statistics.median(values) for key, values in each.items()} for name, each in figures.items()}


def print_profile(profile: dict[str, dict[str, float]], run_seconds: float) -> None:
    print("  where a run's time goes (medians, seconds):")
    print(f"    {'Airflow task':<16}{'wait':>8}{'task':>8}{'steps':>8}{'rest':>8}"
          "   (wait: before it starts; steps: the pipeline's own record; rest: task - steps)")
    tasks = {name: each for name, each in profile.items() if "task" in each}
    for name, each in tasks.items():
        print(f"    {name:<16}{each['wait']:8.2f}{each['task']:8.2f}{each['steps']:8.2f}{each['task'] - each['steps']:8.2f}")
    total = {key: sum(each[key] for each in tasks.values()) for key in ("wait", "task", "steps")}
    print(f"    {'all tasks':<16}{total['wait']:8.2f}{total['task']:8.2f}{total['steps']:8.2f}"
          f"{total['task'] - total['steps']:8.2f}   of a {run_seconds:.2f} s run")
    print(f"    passes per run {profile['passes']['steps']:.0f}; steps per pass: "
          + ", ".join(f"{name[1:-1]} {each['steps']:.2f}" for name, each in profile.items() if name.startswith("[")))


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
