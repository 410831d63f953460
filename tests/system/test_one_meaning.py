"""One meaning per number (issue 50, docs/metrics.md "One meaning per number"): on ONE ledger — a
real RabbitMQ, a real ``ackstore connect amqp`` with ``--metrics-port``, two passes of the real
pipeline — with redeliveries, a republished copy, a poison message, late acks (a custom one and a
built-in one) and a dead letter, every figure is compared across the three surfaces: Prometheus
(the ledger's exporter and the connector's), ``ackstore connection metrics|logs`` and the Ledger
page. A figure two surfaces count differently has a different name on each; the same name is the
same number. Then the connector restarts: its counters start again at 0, the ledger's do not.

The ledger, by hand (connection ``one-…``, requested acks in each message's headers):

* g0, g1, g2: twin-persisted, in time: 200, acked; g0 is published twice (a republished copy);
* t0: twin-persisted with a 1 s timeout, applied after it: 408 with a late built-in ack,
  redelivered; its copy opens attempt 2, which counts the fact (it came before): 200, acked;
* c0: acme:done, answered 503 by its subscriber: redelivered; attempt 2 is answered 200: acked;
* x0: acme:never (nobody answers) with a 1 s timeout: 408 twice, redelivered then dead-lettered;
* poison: no JSON, dropped;
* d0: the API's, acme:done with a 1 s timeout: 408, then acked late.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from sqlalchemy import Engine

from ackstore.ledger import reports
from ackstore.ledger.store import AckStore
from ackstore.reporting import metrics as exporter
from ackstore.rules.settings import Settings
from ackstore.ui.ledger_page import gather, render
from tests.support.amqp_connector import broker  # noqa: F401 — the fixture
from tests.support.broker import Broker, connector, publish_all, stop, wait_for
from tests.support.connector_metrics import scrape, served
from tests.support.ledger import ack_message, count, settled, thing_modify, twin_command
from tests.support.own_postgres import free_port
from tests.support.page_html import Strip, Tables
from tests.support.scraped import Samples, samples

pytestmark = [pytest.mark.spark, pytest.mark.slow]

RULES = Settings(max_attempts=2)
ACKSTORE = str(Path(sys.executable).parent / "ackstore")


def summed(found: Samples, name: str, by: str, **only: str) -> dict[str, float]:
    """The samples of ``name`` with the labels ``only``, summed by the label ``by``, the zero ones left out."""
    total: dict[str, float] = defaultdict(float)
    for (sample, labels), value in found.items():
        have = dict(labels)
        if sample == name and all(have.get(k) == v for k, v in only.items()):
            total[have.get(by, "")] += value
    return {key: value for key, value in total.items() if value}


def category(found: Samples, name: str) -> float:
    return sum(summed(found, "ackstore_connection_messages_total", "category", category=name).values())


def cli(database_url: str, *args: str) -> dict[str, Any]:
    done = subprocess.run([ACKSTORE, "--database-url", database_url, "connection", *args, "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def deadlines_passed(engine: Engine, attempt: int) -> bool:
    return count(engine, "SELECT count(*) FROM attempts WHERE attempt = :a AND deadline_at > now() "
                 "AND signal_id IN (SELECT id FROM signals WHERE timeout_ms = 1000)", a=attempt) == 0


def test_every_figure_has_one_name_and_one_number_on_every_surface(
    engine: Engine, database_url: str, broker: Broker, run_pipeline,  # noqa: F811 — the fixture
) -> None:
    connection = f"one-{uuid.uuid4().hex[:6]}"
    store = AckStore(engine, RULES)
    assert store.declare("acme", ["acme:done"])["status"] == 204
    source, replies = broker.queue("commands"), broker.queue("replies")
    good = [thing_modify(n, thing="org.acme/one-g", message_id=f"g{n}", requested_acks=["twin-persisted"])
            for n in range(3)]
    late_fact = thing_modify(10, thing="org.acme/one-t", message_id="t0", requested_acks=["twin-persisted"],
                             timeout="1s")
    answered_503 = thing_modify(20, thing="org.acme/one-c", message_id="c0", requested_acks=["acme:done"])
    never = thing_modify(30, thing="org.acme/one-x", message_id="x0", requested_acks=["acme:never"], timeout="1s")
    publish_all(broker, source, [*good, late_fact, answered_503, never, good[0]], reply_to=replies)
    broker.publish(source, b"this is not json", message_id="poison", correlation_id="poison", reply_to=replies)
    api = store.submit(twin_command(thing="org.acme/one-d", correlation_id="d0", requested_acks=["acme:done"],
                                    timeout="1s"))
    assert api["status"] == 202, api

    port = free_port()
    process = connector(database_url, "--connection-id", connection, "--queue", source, "--poll", "0.5",
                        "--metrics-port", str(port))
    try:
        wait_for(lambda: category(served(port, process), "consumed") == 8, what="every message consumed")
        wait_for(lambda: count(engine, "SELECT count(*) FROM signals") == 7, what="the signals stored")
        assert store.acknowledge("acme", ack_message("c-20", "acme:done", 503, thing="org.acme/one-c20"))["status"] == 204
        wait_for(lambda: deadlines_passed(engine, 1), what="the 1 s timeouts")
        run_pipeline(rules=RULES)
        wait_for(lambda: settled(engine) == {"ack": 3, "redeliver": 3}, what="the first pass carried out")
        wait_for(lambda: count(engine, "SELECT count(*) FROM attempts WHERE attempt = 2") == 3,
                 what="the copies opened attempt 2")
        assert store.acknowledge("acme", ack_message("c-20", "acme:done", 200, thing="org.acme/one-c20"))["status"] == 204
        assert store.acknowledge("acme", ack_message("d0", "acme:done", 200, thing="org.acme/one-d"))["status"] == 204
        wait_for(lambda: deadlines_passed(engine, 2), what="attempt 2's 1 s timeouts")
        run_pipeline(rules=RULES)
        wait_for(lambda: settled(engine) == {"ack": 5, "redeliver": 3, "dead-letter": 1}, what="the second pass")
        connector_said = wait_for(lambda: (s := scrape(port)) and category(s, "acknowledged") == 10 and s,
                                  what="every delivery settled on the broker")
        _compare(engine, database_url, connection, connector_said)
        last_said = scrape(port)  # everything settled and answered: what it says when it stops
    finally:
        code, log = stop(process)
    assert code == 0, log
    _its_status_line_says_the_same(log, last_said)
    _after_a_restart_the_connector_counts_from_0(engine, database_url, connection, source)


def _its_status_line_says_the_same(log: str, connector_said: Samples) -> None:
    """The connector's own status line (the last, as it stops) names its figures as its metrics
    do, and says the same numbers: ``consumed`` every delivery, ``stored`` new signals alone."""
    (line,) = [line for line in log.splitlines() if " stopped: " in line]
    said = {name: int(number) for name, number in re.findall(
        r"\b(consumed|stored|duplicate|dropped|enforced|acknowledged|published|unsendable) (\d+)", line)}
    assert said == {
        **{name: category(connector_said, name) for name in ("consumed", "stored", "duplicate", "dropped", "enforced",
                                                             "acknowledged", "published")},
        "unsendable": sum(summed(connector_said, "ackstore_connector_unsendable_total", "connection").values())}, line
    assert (said["consumed"], said["stored"], said["duplicate"]) == (11, 6, 4), line
    carried_out = re.search(r"carried out: ([^;]*);", line)
    assert carried_out, line
    assert {decision: float(n) for decision, n in (item.rsplit(" ", 1) for item in carried_out.group(1).split(", "))} \
        == summed(connector_said, "ackstore_connector_carried_out_total", "decision"), line


def _compare(engine: Engine, database_url: str, connection: str, connector_said: Samples) -> None:
    ledger_said = samples(generate_latest(exporter.registry_for(engine)).decode())
    cli_said = cli(database_url, "metrics", connection)["last_day"]
    logs = cli(database_url, "logs", connection)["logs"]
    page = render(gather(AckStore(engine, RULES), datetime.now(timezone.utc)))
    now = datetime.now(timezone.utc)
    today = reports.Window(now - timedelta(days=1), now + timedelta(minutes=1))
    with engine.connect() as conn:
        settlement = reports.settlement(conn, connection)
        late = reports.late_acks(conn, today, 100)
        dead = reports.dead_letters(conn, today, 100)

    # signals stored: one name on every surface
    signals = count(engine, "SELECT count(*) FROM signals WHERE source = :c", c=connection)
    assert signals == 6
    assert sum(summed(ledger_said, "ackstore_signals_stored_total", "source", source=connection).values()) == \
        category(connector_said, "stored") == cli_said["stored"] == signals

    # refused: dropped (the poison message), enforced (none); the log says each
    assert category(connector_said, "dropped") == cli_said["dropped"] == \
        sum(1 for entry in logs if entry["kind"] == "dropped") == 1
    assert category(connector_said, "enforced") == cli_said["enforced"] == 0

    # each message once (received) against every delivery (consumed): the copies tell them apart
    assert cli_said["received"] == category(connector_said, "stored") + category(connector_said, "dropped") + \
        category(connector_said, "enforced") == 7
    assert category(connector_said, "duplicate") == 4  # g0 republished, t0, c0 and x0 redelivered
    assert category(connector_said, "consumed") == cli_said["received"] + category(connector_said, "duplicate") == 11

    # settlements carried out, by decision and as what: the exporter's, the connector's, the CLI's,
    # report settlement's and the page's settlement table
    expected = {"ack": 5.0, "redeliver": 3.0, "dead-letter": 1.0}
    assert summed(ledger_said, "ackstore_settlements_carried_out_total", "carried_out_as", source=connection) == \
        summed(connector_said, "ackstore_connector_carried_out_total", "carried_out_as") == expected
    assert summed(ledger_said, "ackstore_settlements_carried_out_total", "decision", source=connection) == \
        summed(connector_said, "ackstore_connector_carried_out_total", "decision") == expected
    assert {as_: cli_said[f"carried_out_{as_.replace('-', '_')}"] for as_ in ("ack", "reject", "redeliver", "dead-letter")} \
        == {"ack": 5, "reject": 0, "redeliver": 3, "dead-letter": 1}
    carried = {row["decision"]: float(row["requests"]) for row in settlement if row["status"] == "carried out"}
    assert carried == expected
    table = Tables(page).tables["settlement"]
    assert {row[2]: float(row[3]) for row in table[1:] if row[0] == connection and row[1] == "carried out"} == expected
    # … and every delivery settled: each carried-out settlement's, and g0's copy with its decision
    assert category(connector_said, "acknowledged") == sum(expected.values()) + 1

    # dead letters: the exporter, the connector, the CLI and the report that lists them
    assert summed(ledger_said, "ackstore_dead_letters_total", "source") == {connection: 1.0}
    assert [row["correlation_id"] for row in dead] == ["c-30"]
    assert (dead[0]["attempt"], dead[0]["status"]) == (2, 408)

    # late acks as the report lists them: d0's custom one (the API's), t0's built-in twin-persisted
    by_source: dict[str, float] = defaultdict(float)
    for row in late:
        by_source[row["source"]] += 1
    assert dict(by_source) == {"api": 1.0, connection: 1.0}
    assert summed(ledger_said, "ackstore_late_acks_total", "source") == dict(by_source)
    assert {(row["correlation_id"], row["label"]) for row in late} == {("d0", "acme:done"), ("c-10", "twin-persisted")}

    # attempts decided, by status class (the exporter alone counts them): by hand
    assert summed(ledger_said, "ackstore_requests_decided_total", "status_class", source=connection) == {
        "2xx": 5.0, "408": 3.0, "5xx": 1.0}

    # what could not be sent and the outages: none, on every surface
    assert summed(connector_said, "ackstore_connector_unsendable_total", "connection") == {}
    assert cli_said["unsendable"] == cli_said["outage"] == 0
    assert not [entry for entry in logs if entry["kind"] in ("unsendable", "outage")]
    assert summed(connector_said, "ackstore_connector_outage_seconds_total", "cause") == {}

    # the page: nothing waits (the exporter's signals_pending), the connector said it runs
    strip = Strip(page)
    assert ledger_said[("ackstore_signals_pending", ())] == 0
    assert strip.figures["backlog"][1] == "0 signals"
    assert (f"{connection}: running", "ok") in strip.lines["connectors"]
    assert (("ackstore_connector_last_seen_timestamp_seconds", (("source", connection),)) in ledger_said)


def _after_a_restart_the_connector_counts_from_0(engine: Engine, database_url: str, connection: str,
                                                 source: str) -> None:
    """A connector's counters are its process's: a new one starts at 0 (and says when it started),
    while the ledger's figures — the exporter's and the CLI's — stay what they were."""
    before_ledger = samples(generate_latest(exporter.registry_for(engine)).decode())
    before_cli = cli(database_url, "metrics", connection)["last_day"]
    port = free_port()
    started = time.time()
    process = connector(database_url, "--connection-id", connection, "--queue", source, "--poll", "0.5",
                        "--metrics-port", str(port))
    try:
        again = served(port, process)
    finally:
        code, log = stop(process)
    assert code == 0, log
    assert category(again, "stored") == category(again, "consumed") == 0
    assert summed(again, "ackstore_connector_carried_out_total", "carried_out_as") == {}
    [(labels, start)] = [(labels, v) for (name, labels), v in again.items()
                         if name == "ackstore_connector_start_timestamp_seconds"]
    assert dict(labels) == {"connection": connection, "type": "amqp-091"} and start >= started - 1
    after = samples(generate_latest(exporter.registry_for(engine)).decode())
    assert summed(after, "ackstore_settlements_carried_out_total", "carried_out_as", source=connection) == \
        summed(before_ledger, "ackstore_settlements_carried_out_total", "carried_out_as", source=connection)
    assert cli(database_url, "metrics", connection)["last_day"] == before_cli
