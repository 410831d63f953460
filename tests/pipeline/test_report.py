"""The SQL reports: settlement status per source and the QoS-1 audit, as views and through
``ackstore report`` (a rich table, or JSON), on the real PostgreSQL and the real pipeline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from ackstore.ledger import reports
from ackstore.ledger.store import AckStore
from tests.support.ledger import ack_message, twin_command

SOURCE = "amqp-orders"
LABEL = "amqp-orders:audit"


def _submit(store: AckStore, message_id: str, thing: str, *, connection: bool = True, **headers: Any) -> str:
    origin = {"api": "connectivity", "source": SOURCE} if connection else {}
    answer = store.submit(twin_command(thing=thing, path="/", value={}, correlation_id=f"c-{message_id}", **headers),
                          source_message_id=message_id, **origin)
    assert answer["status"] == 202, answer
    return answer["correlationId"]


def _audit(store: AckStore) -> dict[str, tuple[str, str | None]]:
    with store.engine.connect() as conn:
        return {row["source_message_id"]: (row["stuck_at"].split(":")[0], row["detail"])
                for row in reports.audit(conn, limit=100)}


def _status(store: AckStore) -> list[tuple[str, str, str | None, int]]:
    with store.engine.connect() as conn:
        return [(r["source"], r["status"], r["decision"], r["requests"]) for r in reports.settlement(conn)]


def test_the_audit_follows_each_signal_until_it_is_answered_or_settled(store: AckStore) -> None:
    store.declare("audit-service", [LABEL], connection=SOURCE)
    _submit(store, "from-api", "org.acme/a", connection=False, requested_acks=["twin-persisted"])
    _submit(store, "waits-for-ack", "org.acme/b", requested_acks=["twin-persisted", LABEL])
    audit = _audit(store)
    assert audit["from-api"][0] == "apply" and audit["waits-for-ack"][0] == "apply"
    assert _status(store) == [(SOURCE, "pending decision", None, 1)]  # API signals are never settled


@pytest.mark.spark
def test_reports_after_the_pipeline(store: AckStore, run_pipeline, database_url: str) -> None:
    store.declare("audit-service", [LABEL], connection=SOURCE)
    _submit(store, "from-api", "org.acme/a", connection=False, requested_acks=["twin-persisted"])
    _submit(store, "settled", "org.acme/b", requested_acks=["twin-persisted"])
    rejected = _submit(store, "rejected", "org.acme/c", requested_acks=["twin-persisted", LABEL])
    store.acknowledge("audit-service", ack_message(rejected, LABEL, 400, thing="org.acme/c"))
    _submit(store, "waits-for-ack", "org.acme/d", requested_acks=["twin-persisted", LABEL])
    run_pipeline()

    audit = _audit(store)
    assert "from-api" not in audit  # answered: its stored result is the answer
    assert audit["settled"] == ("connector", "ack")  # decided; no connector has carried it out yet
    assert audit["rejected"] == ("connector", "reject")
    assert audit["waits-for-ack"][0] == "decide"
    assert audit["waits-for-ack"][1].startswith(f"missing: {LABEL}; deadline ")
    assert _status(store) == [
        (SOURCE, "pending decision", None, 1),
        (SOURCE, "decided", "ack", 1),
        (SOURCE, "decided", "reject", 1),
    ]

    with store.engine.begin() as conn:  # what a connector records when it has acked the delivery
        conn.execute(text("UPDATE settlements SET carried_out_at = now() WHERE decision = 'ack'"))
    assert "settled" not in _audit(store)
    assert (SOURCE, "carried out", "ack", 1) in _status(store)

    cli = [str(Path(sys.executable).parent / "ackstore"), "--database-url", database_url, "report"]
    as_json = subprocess.run([*cli, "settlement", "--json"], capture_output=True, text=True, timeout=120)
    assert as_json.returncode == 0, as_json.stderr
    assert {(r["status"], r["decision"]) for r in json.loads(as_json.stdout)} == {
        ("pending decision", None), ("carried out", "ack"), ("decided", "reject"),
    }
    pythonpath = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}  # the code under test
    table = subprocess.run([*cli, "audit", "--source", SOURCE], capture_output=True, text=True, timeout=120,
                           env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", **pythonpath})
    assert table.returncode == 0, table.stderr
    assert "QoS-1 audit" in table.stdout and "waits-for-ack" in table.stdout and "reject" in table.stdout
    assert "from-api" not in table.stdout
