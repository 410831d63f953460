"""``ackstore airflow`` (what ``make airflow`` runs) as the benchmarks start it: a fresh home and
metadata database, its own ports, the DAG unpaused through the REST API as the admin, and
everything stopped by PID afterwards. Also what the benchmarks read back from Airflow: the
DAG's runs and their task instances.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

from ackstore.ledger.database import drop_database
from ackstore.local_airflow import DAG_ID, AirflowApi, LocalAirflow, health, wait_until
from jobs.spark import free_port

BIN = Path(sys.executable).parent
STOP_SECONDS = 240  # ackstore airflow stops Airflow (90 s grace) and then Spark Connect


@dataclass
class Deployment:
    """A running ``ackstore airflow``: its process, its home and its REST API."""

    process: subprocess.Popen
    home: Path
    api: AirflowApi

    @property
    def url(self) -> str:
        return self.api.local.url

    def unpause(self) -> None:
        wait_until("the DAG parsed", 120, lambda: self._dag_known())
        self.api(f"/dags/{DAG_ID}", {"is_paused": False})

    def pause(self) -> None:
        self.api(f"/dags/{DAG_ID}", {"is_paused": True})

    def runs(self, run_type: str = "scheduled") -> list[dict[str, Any]]:
        """The DAG's runs of ``run_type``, oldest first (at most the last 1 000)."""
        page = self.api(f"/dags/{DAG_ID}/dagRuns?run_type={run_type}&order_by=-run_after&limit=1000")
        return sorted(page["dag_runs"], key=lambda run: run["run_after"])

    def task_instances(self, run_id: str) -> list[dict[str, Any]]:
        from urllib.parse import quote

        page = self.api(f"/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances")
        return page["task_instances"]

    def _dag_known(self) -> bool:
        try:
            return self.api(f"/dags/{DAG_ID}").get("dag_id") == DAG_ID
        except OSError:
            return False


@contextmanager
def airflow(ledger: str, server: str, home: Path, *, local_spark: bool = False,
            environment: dict[str, str] | None = None) -> Iterator[Deployment]:
    """``ackstore airflow`` on ``ledger``, its metadata in a database of its own on ``server``
    (dropped afterwards), Airflow's files in ``home``; waits until its API answers. Stopped with
    SIGINT (it stops Airflow and Spark Connect), its process group killed if it has not stopped
    within STOP_SECONDS."""
    port = free_port()
    metadata_database = f"ackstore_airflow_bench_{os.getpid()}"
    command = [str(BIN / "ackstore"), "--database-url", ledger, "airflow", "--port", str(port),
               "--spark-port", str(free_port()), "--home", str(home), "--metadata-database", metadata_database,
               "--http-port", str(free_port())]
    if local_spark:
        command.append("--local-spark")
    with open(home / "ackstore-airflow.log", "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                   env={**os.environ, **(environment or {})})
    try:
        local = LocalAirflow(home=home, ledger_url=ledger, metadata_url="", port=port)
        wait_until("Airflow's API answering", 300, lambda: health(local.url) or process.poll() is not None)
        if process.poll() is not None:
            raise RuntimeError(f"ackstore airflow exited with {process.returncode}; see {home / 'ackstore-airflow.log'}")
        yield Deployment(process, home, AirflowApi(local))
    finally:
        _stop(process)
        drop_database(server, metadata_database)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        process.wait(STOP_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # its own session (start_new_session)
        process.wait(30)


def when(stamp: str | None) -> datetime | None:
    """A REST API time (ISO 8601, maybe with Z) as an aware datetime."""
    return None if stamp is None else datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def seconds(run: dict[str, Any], start: str = "start_date", end: str = "end_date") -> float | None:
    """Seconds from ``start`` to ``end`` of a run or task instance (None while either is unset)."""
    began, ended = when(run.get(start)), when(run.get(end))
    return None if began is None or ended is None else (ended - began).total_seconds()
