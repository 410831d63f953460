"""Every signal's timeline (A.3): each checkpoint the ledger recorded, at the time it recorded it.

The expected timelines are written out by hand — which checkpoints, in which order — with each
time read straight from the table that holds that fact (an independent query, not the view)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from typing import Any

import pytest
from sqlalchemy import Engine, text

from ackstore.ledger import settlements
from ackstore.ledger.store import AckStore
from tests.support.ledger import ack_message, twin_command

pytestmark = pytest.mark.spark

SOURCE = "plant-t"


def _at(engine: Engine, sql: str, **params: Any) -> datetime:
    with engine.connect() as conn:
        return conn.execute(text(sql), params).scalar_one()


def _settled_signal(store: AckStore, run_pipeline) -> int:
    """A command from a connection that asks for both built-in labels and a custom one, acked in
    time before the pipeline runs, decided, validated, settled and carried out; then acked again
    (late)."""
    assert store.declare("app", ["app:done"])["status"] == 204
    (stored,) = store.ingest(
        [twin_command("create", thing="org.acme/tl", path="/", value={"attributes": {"on": True}}, correlation_id="tl-1",
                      requested_acks=["twin-persisted", "search-persisted", "app:done"], timeout="60s")],
        api="connectivity", source=SOURCE, source_message_ids=["m-1"])
    assert store.acknowledge("app", ack_message("tl-1", "app:done", thing="org.acme/tl")) == {"status": 204}
    run_pipeline()
    with store.engine.begin() as conn:
        settlements.record_latest(conn, {stored.signal_id})
    assert store.acknowledge("app", ack_message("tl-1", "app:done", 500, thing="org.acme/tl")) == {"status": 204}
    return stored.signal_id


def test_a_settled_signal_shows_every_checkpoint_at_the_time_its_table_holds(store: AckStore, run_pipeline) -> None:
    signal_id = _settled_signal(store, run_pipeline)
    engine, s = store.engine, {"s": signal_id}
    received = _at(engine, "SELECT received_at FROM signals WHERE id = :s", **s)
    applied = _at(engine, "SELECT b.committed_at FROM command_responses r JOIN ledger_batches b ON b.id = r.batch_id "
                          "WHERE r.signal_id = :s", **s)
    indexed = _at(engine, "SELECT b.committed_at FROM search_marks m JOIN ledger_batches b ON b.id = m.batch_id "
                          "WHERE m.thing_id = 'org.acme:tl'")
    acked, late = (_at(engine, "SELECT received_at FROM acks WHERE signal_id = :s AND disposition = :d", **s, d=d)
                   for d in ("counted", "late"))
    decided = _at(engine, "SELECT decided_at FROM request_results WHERE signal_id = :s", **s)
    validated = _at(engine, "SELECT v.passed_at FROM validation_passes v, request_results r "
                            "WHERE r.signal_id = :s AND v.results_upto >= r.batch_id ORDER BY v.results_upto LIMIT 1", **s)
    settled = _at(engine, "SELECT decided_at FROM settlements WHERE signal_id = :s", **s)
    carried = _at(engine, "SELECT carried_out_at FROM settlements WHERE signal_id = :s", **s)
    deadline = _at(engine, "SELECT deadline_at FROM signals WHERE id = :s", **s)

    timeline = store.show("tl-1")["timeline"]

    assert [(row["at"], row["checkpoint"], row["attempt"], row["label"], row["status"]) for row in timeline] == [
        (received, "received", 1, None, None),
        (received, "attempt opened", 1, None, None),
        (acked, "ack", 1, "app:done", 200),
        (applied, "applied", None, None, 201),
        (applied, "ack", 1, "twin-persisted", 201),
        (indexed, "indexed", None, None, 204),
        (indexed, "ack", 1, "search-persisted", 204),
        (decided, "decided", 1, None, 200),
        (validated, "validated", 1, None, None),
        (settled, "settlement decided", 1, None, None),
        (carried, "carried out", 1, None, None),
        (late, "ack", 1, "app:done", 500),
    ]
    details = {(row["checkpoint"], row["label"]): row["detail"] for row in timeline}
    assert details[("received", None)] == f"from {SOURCE}, message m-1"
    assert details[("attempt opened", None)] == (
        "requested twin-persisted, search-persisted, app:done; deadline "
        f"{deadline.astimezone(timezone.utc).strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]} UTC")
    assert details[("applied", None)] == "created, revision 1"
    assert details[("decided", None)] == "by acks"
    assert details[("settlement decided", None)] == details[("carried out", None)] == "ack"
    assert [row["detail"] for row in timeline if row["label"] == "app:done"] == [
        "counted, from app", "late, from app"]


def test_an_unknown_or_impossible_correlation_id_has_no_timeline(store: AckStore) -> None:
    assert store.show("nobody") is None
    assert store.show("x" * 100_000) is None


def test_show_prints_the_timeline_readably_at_80_columns_and_as_json(store: AckStore, run_pipeline,
                                                                     database_url: str) -> None:
    _settled_signal(store, run_pipeline)
    command = [sys.executable, "-m", "ackstore.cli", "--database-url", database_url, "show", "tl-1"]
    shown = subprocess.run(command, capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    for checkpoint in ("received", "applied", "indexed", "decided", "validated", "settlement decided", "carried out",
                       "ack twin-persisted", "ack search-persisted", "ack app:done"):  # whole, never folded
        assert any(checkpoint in line for line in lines), shown.stdout
    as_json = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=120)
    state = json.loads(as_json.stdout)
    assert [row["checkpoint"] for row in state["timeline"]][-2:] == ["carried out", "ack"]
    unknown = subprocess.run([*command[:-1], "nobody"], capture_output=True, text=True, timeout=120)
    assert unknown.returncode == 1 and json.loads(unknown.stdout)["status"] == 404 and "<nobody>" in unknown.stdout
