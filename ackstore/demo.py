"""``ackstore demo``: set up the ledger and walk one sample twin command through it."""

from __future__ import annotations

import json
import uuid
from importlib import resources
from typing import Any

from ackstore import migrate
from ackstore.database import make_engine, resolve_url
from ackstore.store import AckStore

SUBSCRIBER = "demo-auditor"
CUSTOM_LABEL = "demo:audit"


def sample(name: str) -> bytes:
    return resources.files("ackstore").joinpath("samples", name).read_bytes()


def run_demo(database_url: str | None = None) -> int:
    url = resolve_url(database_url)
    engine = make_engine(url)
    print(f"ledger database: {engine.url.render_as_string(hide_password=True)}")
    migrate.upgrade(engine)
    print(f"schema revision: {migrate.current_revision(engine)}")
    store = AckStore(engine)
    try:
        _step("declare the subscriber's label", store.declare(SUBSCRIBER, [CUSTOM_LABEL]))
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
        _step("its stored state", store.stored_signal(correlation_id))
        print(
            "\nThe request stays undecided until the pipeline writes twin-persisted and sweeps it;"
            f"\nread its answer then with: ackstore result {correlation_id}"
        )
    finally:
        store.close()
    return 0


def _step(title: str, value: Any) -> Any:
    print(f"\n== {title}")
    print(json.dumps(value, indent=2, ensure_ascii=False, default=str))
    return value
