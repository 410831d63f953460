"""``ackstore demo``: set up the ledger, submit sample signals, run the Airflow DAG once through
Airflow (``airflow dags test``: its six tasks, in-process, on local Spark), and show what each
task did, what the requesters are told, a search, and the settlement report.

With nothing configured it all happens on the embedded PostgreSQL in ``./.ackstore`` — the
ledger and Airflow's metadata database side by side.
"""

from __future__ import annotations

import json
import time
import uuid
from importlib import resources
from typing import Any

from sqlalchemy import text

from ackstore.ledger import migrate
from ackstore.ledger.database import (
    embedded_data_dir,
    make_engine,
    resolve_url,
    uses_embedded,
)
from ackstore.ledger.store import AckStore

SUBSCRIBER = "demo-auditor"
CUSTOM_LABEL = "demo:audit"
CONNECTION = "demo-amqp"


def sample(name: str) -> bytes:
    return resources.files("ackstore").joinpath("samples", name).read_bytes()


def run_demo(database_url: str | None = None) -> int:
    started = time.perf_counter()
    url = resolve_url(database_url)
    engine = make_engine(url)
    print(f"ledger database: {engine.url.render_as_string(hide_password=True)}")
    if uses_embedded(database_url):
        print(f"(the embedded PostgreSQL, data in {embedded_data_dir()})")
    migrate.upgrade(engine)
    print(f"schema revision: {migrate.current_revision(engine)}")
    store = AckStore(engine)
    try:
        created, correlation_id = _submit_samples(store)
        print(f"\n== undecided until the DAG ran: {store.result(correlation_id)}")
        if not _run_dag(url):
            return 1
        _print_tasks(store)
        _step("what the first requester is told", store.result(created))
        _step("what the second requester is told", store.result(correlation_id))
        _step("search: eq(features/lamp/properties/on,true)", store.search("eq(features/lamp/properties/on,true)"))
        from ackstore.report import render_timeline, run_report

        print()
        run_report(store, "settlement", as_json=False, limit=50, source=None)
        print(f"\n== the timeline of the second command (ackstore show {correlation_id})")
        render_timeline(store.stored_signal(correlation_id), store.timeline(correlation_id) or [])
        print(f"\nits whole stored record: ackstore show {correlation_id} --json")
        print(f"the QoS-1 audit: ackstore report audit      (demo took {time.perf_counter() - started:.0f} s)")
    finally:
        store.close()
    return 0


def _submit_samples(store: AckStore) -> tuple[str, str]:
    """Two twin commands from the API (the second with a custom label, acknowledged), and one
    from a broker connection, which the DAG's last task settles."""
    _step("declare the subscriber's label", store.declare(SUBSCRIBER, [CUSTOM_LABEL]))
    created = _step(
        "submit the thing (modify at /: created if missing)",
        store.submit(sample("create-lamp.json"), source="demo", source_message_id=str(uuid.uuid4())),
    )
    command = sample("modify-lamp.json")
    print("\nsample command:\n" + command.decode())
    answer = _step("submit it", store.submit(command, source="demo", source_message_id=str(uuid.uuid4())))
    correlation_id = answer["correlationId"]
    envelope = json.loads(command)
    ack = {
        "topic": envelope["topic"].replace("/commands/modify", f"/acks/{CUSTOM_LABEL}"),
        "headers": {"correlation-id": correlation_id},
        "path": "/",
        "status": 200,
        "value": {"audited": True},
    }
    _step(f"the subscriber acknowledges {CUSTOM_LABEL}", store.acknowledge(SUBSCRIBER, ack))
    from_broker = {**envelope, "path": "/attributes/dimmed", "value": False,
                   "headers": {"requested-acks": ["twin-persisted"]}}
    _step(f"a command from the broker connection {CONNECTION!r} (QoS 1: twin-persisted)",
          store.submit(from_broker, api="connectivity", source=CONNECTION, source_message_id=str(uuid.uuid4())))
    return created["correlationId"], correlation_id


def _run_dag(url: str) -> bool:
    from ackstore.local_airflow import DAG_ID, LocalAirflow, run_dag_once

    print(f"\n== run the DAG {DAG_ID} once through Airflow (airflow dags test; local Spark) ...", flush=True)
    started = time.perf_counter()
    local = LocalAirflow.prepare(url)
    done = run_dag_once(local)
    print(f"   airflow dags test exited {done.returncode} after {time.perf_counter() - started:.0f} s "
          f"(Airflow's home: {local.home})")
    if done.returncode != 0:
        print(done.stdout[-3000:] + done.stderr[-3000:])
    return done.returncode == 0


def _print_tasks(store: AckStore) -> None:
    """What each task of the DAG run did: its stats as recorded in ``pipeline_runs``."""
    from jobs.pipeline import counts

    with store.engine.connect() as conn:
        run_id = conn.execute(text("SELECT run_id FROM pipeline_runs ORDER BY id DESC LIMIT 1")).scalar_one()
        rows = conn.execute(
            text("SELECT step, stats FROM pipeline_runs WHERE run_id = :r ORDER BY id"), {"r": run_id}
        ).all()
    print(f"\n== what each task did (pipeline_runs, run {run_id})")
    for step, stats in rows:
        print(f"   {step:<13} {stats.get('seconds', 0):6.2f} s  {json.dumps(counts(stats))}")


def _step(title: str, value: Any) -> Any:
    print(f"\n== {title}")
    print(json.dumps(value, indent=2, ensure_ascii=False, default=str))
    return value
