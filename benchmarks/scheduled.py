"""Benchmark: the wall time of scheduled DAG runs under ``ackstore airflow`` (``make airflow``).

    python -m benchmarks.scheduled --runs 3                # tasks on the Spark Connect server
    python -m benchmarks.scheduled --runs 3 --local-spark  # each task opens a local session

Starts ``ackstore airflow`` on a fresh, empty ledger (its own metadata database and ports),
unpauses the DAG, lets it run on its every-minute schedule, and prints the wall time of each
scheduled run after the first (nothing pending: the fixed cost of a run), with their median,
and the raw baseline of the same machine: ``ackstore pipeline run`` of the same empty ledger in
one process. Stops everything it started.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

from ackstore.ledger.database import drop_database, scratch_database
from ackstore.local_airflow import DAG_ID, health, wait_until
from benchmarks.pipeline import DEFAULT_SERVER
from jobs.spark import free_port

BIN = Path(sys.executable).parent


def _api(url: str, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    request = urllib.request.Request(f"{url}/api/v2{path}", data=None if payload is None else json.dumps(payload).encode(),
                                     method="GET" if payload is None else "PATCH",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.load(answer)


def _finished_runs(url: str) -> list[dict[str, Any]]:
    runs = _api(url, f"/dags/{DAG_ID}/dagRuns?run_type=scheduled&order_by=run_after&limit=50")["dag_runs"]
    return [run for run in runs if run["state"] in ("success", "failed")]


def _seconds(run: dict[str, Any]) -> float:
    start, end = (datetime.fromisoformat(run[key].replace("Z", "+00:00")) for key in ("start_date", "end_date"))
    return (end - start).total_seconds()


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
        port = free_port()
        metadata_database = f"ackstore_airflow_bench_{os.getpid()}"
        command = [str(BIN / "ackstore"), "--database-url", ledger, "airflow", "--port", str(port),
                   "--spark-port", str(free_port()), "--home", home,
                   "--metadata-database", metadata_database]
        if args.local_spark:
            command.append("--local-spark")
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until("Airflow's API answering", 300, lambda: health(url))
            wait_until("the DAG parsed", 120, lambda: _api(url, f"/dags/{DAG_ID}").get("dag_id"))
            _api(url, f"/dags/{DAG_ID}", {"is_paused": False})
            runs = wait_until(f"{args.runs + 1} scheduled runs", 90 + 75 * (args.runs + 1),
                              lambda: (r := _finished_runs(url)) and len(r) > args.runs and r)
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(240)
            drop_database(args.server, metadata_database)

    spark = "local Spark sessions (one per task)" if args.local_spark else "Spark Connect"
    timed = [(_seconds(run), run["state"]) for run in runs[1:]]
    print(f"scheduled runs of {DAG_ID} on an empty ledger, {spark}:")
    print(f"  first run (cold):       {_seconds(runs[0]):6.1f} s  ({runs[0]['state']})")
    for seconds, state in timed:
        print(f"  a later run:            {seconds:6.1f} s  ({state})")
    print(f"  median of later runs:   {statistics.median(s for s, _ in timed):6.1f} s")
    print(f"raw baseline: `ackstore pipeline run` of the same empty ledger, one process, local Spark: {baseline:.1f} s")


if __name__ == "__main__":
    main()
