"""Helpers for tests that look into the ledger."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from contextlib import contextmanager
from typing import Any, Iterator

from sqlalchemy import TIMESTAMP, Connection, Engine, select, text

from ackstore.ledger import migrate
from ackstore.ledger.database import make_engine
from ackstore.ledger.heads import configured_path
from ackstore.ledger.schema import LEDGER_TABLES, SEALED_TABLES
from ackstore.ledger.store import AckStore
from ackstore.rules import aggregation
from ackstore.rules.acks import ABSENT


def snapshot(engine: Engine, *, without: tuple[str, ...] = ()) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every ledger table (but ``without``), in a stable order: compare two to see any change."""
    with engine.connect() as conn:
        return {
            table.name: sorted(tuple(map(repr, row)) for row in conn.execute(select(table)))
            for table in LEDGER_TABLES
            if table.name not in without
        }


def empty(conn: Connection) -> None:
    """Empty every ledger table, sealed ones too: as the superuser the tests run as, with the
    triggers that refuse to truncate sealed tables skipped (session_replication_role). The heads
    the seal step exported for this database go too: the emptied ledger is a new one, whose
    first seal is not the old file's."""
    conn.execute(text("SET LOCAL session_replication_role = replica"))
    conn.execute(text(f"TRUNCATE {', '.join(table.name for table in LEDGER_TABLES)} RESTART IDENTITY CASCADE"))
    configured_path(conn.engine.url.render_as_string(hide_password=False)).unlink(missing_ok=True)


@contextmanager
def copy_of(url: str, admin_url: str, label: str) -> Iterator[Engine]:
    """A new database copied from the one at ``url`` (CREATE DATABASE … TEMPLATE: a test may
    change it at will), dropped afterwards."""
    name = f"{label}_{uuid.uuid4().hex[:8]}"
    template = url.rsplit("/", 1)[1]
    admin = make_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:  # a template has no sessions: the pipeline's Spark may have left some
        conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d"), {"d": template})
        conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    engine = make_engine(url.rsplit("/", 1)[0] + "/" + name)
    try:
        yield engine
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()


def count(engine: Engine, sql: str, **params) -> int:
    with engine.connect() as conn:
        return conn.execute(text(sql), params).scalar_one()


def settled(engine: Engine) -> dict[str, int]:
    """Carried-out decisions by kind."""
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT decision, count(*) FROM settlements WHERE carried_out_at IS NOT NULL GROUP BY decision"))
        return dict(rows.all())


def twin_command(
    action: str = "modify",
    *,
    thing: str = "org.acme/lamp-1",
    path: str = "/attributes/on",
    value: Any = True,
    **headers: Any,
) -> dict[str, Any]:
    envelope: dict[str, Any] = {
        "topic": f"{thing}/things/twin/commands/{action}",
        "headers": {name.replace("_", "-"): v for name, v in headers.items()},
        "path": path,
    }
    if action != "delete":
        envelope["value"] = value
    return envelope


def thing_modify(n: int, thing: str = "org.acme/t", **headers: Any) -> dict[str, Any]:
    """The n-th of a test's twin commands: thing ``{thing}{n}`` set to ``{"attributes": {"n": n}}``,
    correlation id ``c-{n}``."""
    return twin_command("modify", thing=f"{thing}{n}", path="/", value={"attributes": {"n": n}},
                        correlation_id=f"c-{n}", **headers)


def ack_message(correlation_id: str, label: str, status: int = 200, value: Any = None, channel: str = "twin",
                thing: str = "org.acme/lamp-1") -> dict:
    message: dict[str, Any] = {
        "topic": f"{thing}/things/{channel}/acks/{label}",
        "headers": {"correlation-id": correlation_id},
        "path": "/",
        "status": status,
    }
    if value is not None:
        message["value"] = value
    return message


def record_result(engine: Engine, signal_id: int, result: aggregation.Result, attempt: int = 1) -> bool:
    """Store a decision as the sweep would (in a sweep batch of its own, which then waits for the
    validation gate; its request leaves the decision queue); False if that attempt was decided already."""
    row = {"signal_id": signal_id, "attempt": attempt, "status": result.status,
           "body": None if result.body is ABSENT else json.dumps(result.body),
           "headers": json.dumps(dict(result.headers)), "cause": result.cause,
           "ack_statuses": json.dumps(dict(result.ack_statuses))}
    with engine.begin() as conn:
        row["batch_id"] = conn.execute(text("INSERT INTO ledger_batches (step, committed_at) "
                                            "VALUES ('sweep', clock_timestamp()) RETURNING id")).scalar_one()
        stored = conn.execute(text(
            "INSERT INTO request_results (signal_id, attempt, status, body, headers, cause, ack_statuses, batch_id) "
            "VALUES (:signal_id, :attempt, :status, CAST(:body AS jsonb), CAST(:headers AS jsonb), :cause, "
            "CAST(:ack_statuses AS jsonb), :batch_id) ON CONFLICT DO NOTHING RETURNING signal_id"), row).first()
        if stored is not None:
            conn.execute(text("DELETE FROM queue_decide WHERE signal_id = :signal_id AND attempt = :attempt"), row)
    return stored is not None


# Ids handed out in write order: the same rows may get other ids in another run.
SURROGATE_IDS = {("acks", "id"), ("settlements", "id"), ("ledger_batches", "id"), ("ledger_batches", "run_id"),
                 ("command_responses", "batch_id"), ("search_marks", "batch_id"), ("request_results", "batch_id"),
                 *((table.name, "seq") for table in SEALED_TABLES)}  # a number drawn by a rolled-back run is skipped


def load_workload(url: str) -> None:
    """Migrate the database at ``url`` and load the same signals, in the same order, every time:
    creates, modifies, failures, custom acks, half of them from a broker connection."""
    engine = make_engine(url)
    migrate.upgrade(engine)
    store = AckStore(engine)
    store.declare("app", ["org:audit"])
    store.declare("filtering", ["org:filtered"], filter="eq(attributes/n,-1)")  # its label gets weak acks
    both = ["twin-persisted", "search-persisted"]
    for i in range(12):
        thing = f"org.acme/t{i % 3}"
        action, path, value = ("modify", "/", {"attributes": {"n": i}}) if i < 3 else ("modify", "/attributes/n", i)
        labels = both if i % 2 else [*both, "org:audit"]
        headers: dict[str, Any] = {"correlation_id": f"c{i}", "requested_acks": labels + ["org:filtered"] * (i % 3 == 0)}
        # The odd ones come through a broker connection: they get settlement decisions.
        origin = {"api": "connectivity", "source": "amqp-orders"} if i % 2 else {}
        assert store.submit(twin_command(action, thing=thing, path=path, value=value, **headers),
                            source_message_id=f"m{i}", **origin)["status"] == 202
    store.submit(twin_command("create", thing="org.acme/t0", path="/", value={}, correlation_id="conflict"),
                 source_message_id="m-conflict")
    # A failure from the connection: its 404 is rejected by Spark's settle (the successes are SQL's).
    store.submit(twin_command("modify", thing="org.acme/none", path="/attributes/x", correlation_id="missing"),
                 source_message_id="m-missing", api="connectivity", source="amqp-orders")
    for i in range(0, 12, 2):
        store.acknowledge("app", ack_message(f"c{i}", "org:audit", 200, thing=f"org.acme/t{i % 3}"))
    engine.dispose()


# Bookkeeping of the runs, not the ledger: which runs ran, and how far (and when) the gate passed —
# a re-run's validate also checks the settlement decisions a killed run had written, so its
# watermark may be ahead, and a pass is timed by the run that made it.
RUN_BOOKKEEPING = ("pipeline_runs", "pipeline_watermarks", "validation_passes")
# The seals, over those numbers: a killed run's re-run seals the same facts in other numbers —
# and the metrics' totals, which are what the seals so far cover (decisions #108).
SEAL_BOOKKEEPING = ("seals", "seal_leaves", "metric_totals")
# What the ledger's counters say, whatever the seals cover (the view ledger_counters): a re-run
# never counts a fact twice. Not the latency histograms: they measure wall-clock time.
COUNTERS = text("SELECT metric, source, label, detail, value FROM ledger_counters "
                "WHERE metric NOT LIKE '%\\_bucket' AND metric NOT LIKE '%\\_sum'")


def comparable_ledger(url: str) -> dict[str, list[tuple]]:
    """Every ledger row but wall-clock timestamps, surrogate ids and the runs' and seals'
    bookkeeping; and the counters the metrics serve."""
    engine = make_engine(url)
    ledger = {}
    with engine.connect() as conn:
        for table in LEDGER_TABLES:
            if table.name in RUN_BOOKKEEPING + SEAL_BOOKKEEPING:
                continue
            columns = [
                c for c in table.columns
                if not isinstance(c.type, TIMESTAMP) and (table.name, c.name) not in SURROGATE_IDS
            ]
            ledger[table.name] = sorted(tuple(map(repr, row)) for row in conn.execute(select(*columns)))
        ledger["ledger_counters"] = sorted(tuple(map(repr, row)) for row in conn.execute(COUNTERS))
    engine.dispose()
    return ledger


def pipeline_subprocess(url: str, fault: str | None = None, *, remote: str | None = None) -> subprocess.CompletedProcess:
    """``ackstore pipeline run`` on the ledger at ``url`` as a process of its own, which kills
    itself with -9 at ``fault`` (``ACKSTORE_FAULT``, e.g. ``settle:staged``) when one is given;
    on the Spark Connect server ``remote`` if given, else on a local session of its own."""
    env = {**os.environ, "ACKSTORE_DATABASE_URL": url}
    env.pop("ACKSTORE_FAULT", None)
    env.pop("SPARK_REMOTE", None)
    if fault:
        env["ACKSTORE_FAULT"] = fault
    on_server = ["--spark-remote", remote] if remote else []
    return subprocess.run(
        [sys.executable, "-m", "ackstore.cli", "pipeline", "run", *on_server], env=env, capture_output=True, text=True,
        timeout=600,
    )
