"""The Airflow DAG ``ackstore_reconcile``: it parses cleanly and cheaply, has the agreed shape,
and a run of it through Airflow leaves the same ledger as ``ackstore pipeline run``.

Airflow reads its configuration when imported, so each check runs ``tests/support/airflow_probe.py``
in a subprocess with its own ``AIRFLOW_HOME``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from ackstore.ledger.database import make_engine, scratch_database
from jobs import pipeline
from jobs.settings import PipelineSettings
from tests.conftest import ADMIN_URL
from tests.support.ledger import RUN_BOOKKEEPING, comparable_ledger, load_workload, snapshot
from tests.support.paths import ROOT

DAGS = ROOT / "dags"
STEPS = ["apply_twin", "index_search", "weak_acks", "sweep", "validate", "settle", "seal"]
UNREACHABLE = "postgresql+psycopg2://nobody@127.0.0.1:9/nothing"  # port 9: nothing listens


def airflow_env(home: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AIRFLOW", "ACKSTORE", "SPARK_REMOTE"))}
    env["ACKSTORE_HEADS"] = os.environ["ACKSTORE_HEADS"]  # the suite's, outside the checkout (conftest)
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(DAGS),
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
        PYTHONPATH=str(ROOT),
        **extra,
    )
    return env


def probe(command: str, env: dict[str, str], timeout: int = 600) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.airflow_probe", command, str(DAGS)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert done.returncode == 0 and lines, (done.stdout[-4000:], done.stderr[-4000:])
    return json.loads(lines[-1][len("PROBE "):])


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[str]]:
    """The DAG folder parsed with no reachable database and a secrets backend that records lookups."""
    home = tmp_path_factory.mktemp("airflow-parse")
    lookups = home / "lookups.txt"
    env = airflow_env(
        home,
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=UNREACHABLE,
        AIRFLOW__SECRETS__BACKEND="tests.support.airflow_probe.RecordingSecretsBackend",
        ACKSTORE_PROBE_LOOKUPS=str(lookups),
        ACKSTORE_DATABASE_URL=UNREACHABLE,
    )
    result = probe("parse", env)
    return result, lookups.read_text().splitlines() if lookups.exists() else []


def test_the_dag_folder_imports_without_errors(parsed) -> None:
    result, _ = parsed
    assert result["errors"] == {}
    assert result["dag_ids"] == ["ackstore_archive", "ackstore_reconcile"]


def test_parsing_touches_no_database_no_connection_and_no_heavy_module(parsed) -> None:
    result, lookups = parsed
    # The metadata database and the ledger were unreachable: any query would have failed the parse.
    assert lookups == []  # no connection or variable was looked up
    assert result["heavy_modules"] == []  # pyspark, great_expectations and the jobs load inside tasks


def test_the_dag_shape(parsed) -> None:
    """One task runs the seven steps in order (Airflow's cost per task is paid once: decisions #87)."""
    dag = parsed[0]["dag"]
    assert dag["order"] == ["reconcile"]
    assert dag["schedule"] == "* * * * *"
    assert dag["catchup"] is False and dag["max_active_runs"] == 1
    assert "ackstore" in dag["tags"]
    assert "re-run" in dag["doc_md"] and "ackstore_ledger" in dag["doc_md"]
    assert all(f"`{step}`" in dag["doc_md"] for step in STEPS)
    task = dag["tasks"]["reconcile"]
    assert 1 <= task["retries"] <= 3
    assert 0 < task["retry_delay_s"] <= 60
    assert task["timeout_s"] and task["timeout_s"] <= 15 * 60
    assert task["outlets"] == ["ackstore://settlements/"]  # normalised


def test_the_archive_dag_shape(parsed) -> None:
    """Daily, one task that runs the archive job (decisions #102)."""
    dag = parsed[0]["archive_dag"]
    assert dag["order"] == ["archive"] and dag["schedule"] == "@daily"
    assert dag["catchup"] is False and dag["max_active_runs"] == 1
    assert "re-run" in dag["doc_md"] and "ackstore_ledger" in dag["doc_md"] and "dt=YYYY-MM-DD" in dag["doc_md"]
    assert 1 <= dag["tasks"]["archive"]["retries"] <= 3


@pytest.mark.spark
@pytest.mark.slow
def test_a_dag_run_leaves_the_ledger_pipeline_run_leaves(tmp_path: Path, spark, spark_remote: str) -> None:
    """The DAG's task on a Spark Connect server, as `make airflow` runs it; the reference on the
    local session."""
    with scratch_database(ADMIN_URL, "dagref") as reference_url, scratch_database(ADMIN_URL, "dagrun") as dag_url:
        load_workload(reference_url)
        pipeline.run(spark, PipelineSettings(database_url=reference_url, partitions=2))
        load_workload(dag_url)

        env = airflow_env(
            tmp_path,
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{tmp_path / 'airflow.db'}",
            AIRFLOW_CONN_ACKSTORE_LEDGER=dag_url.replace("postgresql+psycopg2://", "postgresql://"),
            ACKSTORE_DATABASE_URL=UNREACHABLE,  # the connection wins over the environment
            ACKSTORE_PARTITIONS="2",
            SPARK_REMOTE=spark_remote,
        )
        migrated = subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                                  env=env, capture_output=True, text=True, timeout=300)
        assert migrated.returncode == 0, migrated.stderr[-3000:]
        run = probe("test", env, timeout=900)

        assert run["state"] == "success"
        assert comparable_ledger(dag_url) == comparable_ledger(reference_url)
        engine = make_engine(dag_url)
        try:
            with engine.connect() as conn:
                recorded = set(conn.execute(text("SELECT step FROM pipeline_runs WHERE run_id = :r"),
                                            {"r": run["run_id"]}).scalars())
            assert recorded == set(STEPS)  # the DAG run's id is the pipeline's run id
            # A retried task (the same step, the same run id) changes nothing.
            before = snapshot(engine, without=RUN_BOOKKEEPING)
            for step in STEPS:
                pipeline.run_step(step, PipelineSettings(database_url=dag_url, run_id=run["run_id"], partitions=2), spark)
            assert snapshot(engine, without=RUN_BOOKKEEPING) == before
        finally:
            engine.dispose()
