"""``ackstore demo``: set up the ledger and walk two sample twin commands through it:
submit, acknowledge, run the pipeline on a local Spark session, read the answers, search."""

from __future__ import annotations

import json
import uuid
from importlib import resources
from typing import Any

from ackstore.ledger import migrate
from ackstore.ledger.database import embedded_data_dir, make_engine, resolve_url, uses_embedded
from ackstore.ledger.store import AckStore

SUBSCRIBER = "demo-auditor"
CUSTOM_LABEL = "demo:audit"


def sample(name: str) -> bytes:
    return resources.files("ackstore").joinpath("samples", name).read_bytes()


def run_demo(database_url: str | None = None) -> int:
    url = resolve_url(database_url)
    engine = make_engine(url)
    print(f"ledger database: {engine.url.render_as_string(hide_password=True)}")
    if uses_embedded(database_url):
        print(f"(the embedded PostgreSQL, data in {embedded_data_dir()})")
    migrate.upgrade(engine)
    print(f"schema revision: {migrate.current_revision(engine)}")
    store = AckStore(engine)
    try:
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
        print(f"\n== undecided until the pipeline ran: {store.result(correlation_id)}")
        _step("run the pipeline: apply_twin, index_search, sweep (local Spark)", _run_pipeline(url))
        _step("what the first requester is told", store.result(created["correlationId"]))
        _step("what the second requester is told", store.result(correlation_id))
        _step("search: eq(features/lamp/properties/on,true)", store.search("eq(features/lamp/properties/on,true)"))
        print(f"\nthe whole record of the second command: ackstore show {correlation_id}")
    finally:
        store.close()
    return 0


def _run_pipeline(url: str) -> dict[str, Any]:
    from jobs import pipeline
    from jobs.settings import PipelineSettings
    from jobs.spark import spark_session

    spark = spark_session("ackstore-demo", cores=2)
    try:
        stats = pipeline.run(spark, PipelineSettings(database_url=url, partitions=2))
    finally:
        spark.stop()
    return {step: {k: v for k, v in counts.items() if k != "statement_seconds"} for step, counts in stats.items()}


def _step(title: str, value: Any) -> Any:
    print(f"\n== {title}")
    print(json.dumps(value, indent=2, ensure_ascii=False, default=str))
    return value
