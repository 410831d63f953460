"""Run inside a subprocess by tests/system/test_dag.py, with Airflow configured by its environment.

    python -m tests.support.airflow_probe parse DAG_FOLDER      -> JSON: import errors, modules, structure
    python -m tests.support.airflow_probe test DAG_FOLDER       -> JSON: the state and run id of dag.test()

``RecordingSecretsBackend`` is configured as Airflow's secrets backend in the parse test: every
connection or variable lookup is appended to ``$ACKSTORE_PROBE_LOOKUPS``, so the test can
assert that parsing the DAG folder looked up nothing.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from airflow.secrets import BaseSecretsBackend


class RecordingSecretsBackend(BaseSecretsBackend):
    """A secrets backend that knows nothing and writes down every question."""

    def _record(self, kind: str, key: str) -> None:
        with open(os.environ["ACKSTORE_PROBE_LOOKUPS"], "a") as lookups:
            lookups.write(f"{kind}:{key}\n")

    def get_conn_value(self, conn_id: str) -> str | None:
        self._record("connection", conn_id)
        return None

    def get_variable(self, key: str) -> str | None:
        self._record("variable", key)
        return None


def parse(folder: str) -> dict[str, Any]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=folder)
    out: dict[str, Any] = {
        "errors": {str(k): str(v) for k, v in bag.import_errors.items()},
        "dag_ids": sorted(bag.dags),
        "heavy_modules": sorted(m for m in ("pyspark", "great_expectations", "jobs", "jobs.pipeline") if m in sys.modules),
    }
    for dag_id, key in (("ackstore_reconcile", "dag"), ("ackstore_archive", "archive_dag")):
        dag = bag.dags.get(dag_id)
        if dag is not None:
            out[key] = {
                "schedule": str(dag.schedule),
                "catchup": dag.catchup,
                "max_active_runs": dag.max_active_runs,
                "tags": sorted(dag.tags),
                "doc_md": dag.doc_md or "",
                "order": [task.task_id for task in dag.topological_sort()],
                "upstream": {task.task_id: sorted(task.upstream_task_ids) for task in dag.tasks},
                "tasks": {
                    task.task_id: {
                        "retries": task.retries,
                        "retry_delay_s": task.retry_delay.total_seconds(),
                        "timeout_s": task.execution_timeout.total_seconds() if task.execution_timeout else None,
                        "outlets": [getattr(outlet, "uri", str(outlet)) for outlet in task.outlets],
                    }
                    for task in dag.tasks
                },
            }
    return out


def test(folder: str) -> dict[str, Any]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=folder)
    run = bag.dags["ackstore_reconcile"].test()
    return {"state": str(run.state), "run_id": run.run_id}


if __name__ == "__main__":
    command, folder = sys.argv[1], sys.argv[2]
    result = parse(folder) if command == "parse" else test(folder)
    print("PROBE " + json.dumps(result))
