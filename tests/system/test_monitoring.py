"""Monitoring end to end (issue 38 item 5), real processes only: a RabbitMQ queue, a real
``ackstore connect amqp`` with ``--metrics-port``, a real ``ackstore metrics``, the real pipeline,
and a real Prometheus of the test's own (tests/support/own_prometheus.py) scraping both every second and
evaluating the project's alert rules (deploy/prometheus/alerts.yml).

* What Prometheus holds (asked through its HTTP API, never the exporter directly) is what
  ``report settlement`` and ``report latency`` say of the same ledger, and the connector's
  ``stored`` count is the number of signals stored.
* The connector killed (SIGKILL): AckstoreConnectorDown fires; the time from the kill to
  "firing" is printed (run with -s).
* No pass after the last one: AckstorePipelineNotSucceeding fires — and it was not active right
  after that pass.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import IO, Iterator

import pytest
import yaml
from sqlalchemy import Engine

from ackstore.ledger import reports
from ackstore.rules.settings import Settings
from ackstore.rules.thresholds import Thresholds
from tests.support.broker import AMQP_URL, ROOT, Broker, publish_all, wait_for
from tests.support.connector_metrics import served, thing_modify
from tests.support.ledger import count, settled, twin_command
from tests.support.own_postgres import free_port
from tests.support.own_prometheus import OwnPrometheus, rules_with_for

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ACKSTORE = str(Path(sys.executable).parent / "ackstore")
GOOD = 4  # twin-persisted requested, the twin modified: decided 200, settled as ack
POISON = b"this is not json"  # refused by the connector (dropped), never stored
FOR = "2s"  # every rule's `for:`, shortened
PIPELINE_THRESHOLD = 10  # seconds: AckstorePipelineNotSucceeding's 300, shortened


def shortened_rules() -> str:
    """The rules as shipped, durations shortened: every `for:` is FOR, and the pipeline rule's
    threshold (150 s: half the default timeout) is PIPELINE_THRESHOLD (its expression text
    rewritten, nothing else)."""
    document = yaml.safe_load(rules_with_for(FOR))
    [rule] = [r for g in document["groups"] for r in g["rules"] if r.get("alert") == "AckstorePipelineNotSucceeding"]
    shipped = f"> {Thresholds.of(Settings()).pipeline_seconds}"
    assert rule["expr"].count(shipped) == 1, rule["expr"]
    rule["expr"] = rule["expr"].replace(shipped, f"> {PIPELINE_THRESHOLD}")
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


@pytest.fixture
def broker() -> Iterator[Broker]:
    broker = Broker()
    yield broker
    broker.close()


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen]]:
    """The processes the test starts; whatever still runs at the end is SIGTERMed by its PID (then
    SIGKILLed by its PID if it lingers)."""
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=30)


def start_connector(database_url: str, config: Path, port: int, log: IO[str]) -> subprocess.Popen:
    """``ackstore connect amqp`` as a user starts it (the virtualenv's entry point)."""
    return subprocess.Popen([ACKSTORE, "--database-url", database_url, "connect", "amqp", "--url", AMQP_URL,
                             "--config", str(config), "--poll", "0.5", "--metrics-port", str(port)],
                            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, text=True)


def start_exporter(database_url: str, log: IO[str]) -> tuple[subprocess.Popen, str]:
    """``ackstore metrics --port 0``: the process and the host:port it serves on."""
    process = subprocess.Popen([ACKSTORE, "--database-url", database_url, "metrics", "--port", "0"], cwd=ROOT,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, text=True)
    line = process.stdout.readline()
    assert line, f"the exporter said nothing (exit {process.poll()})"
    answer = json.loads(line)
    assert answer["status"] == 200, answer
    return process, answer["serving"].removeprefix("http://").removesuffix("/metrics")


def rfc3339(text: str) -> float:
    """Prometheus's timestamps (nanoseconds, Z) as epoch seconds."""
    head, _, fraction = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(head).replace(tzinfo=timezone.utc).timestamp() + float(f"0.{fraction or 0}")


def rule_state(prometheus: OwnPrometheus, name: str) -> dict:
    """The alerting rule ``name`` as /api/v1/rules shows it (state, health, lastEvaluation)."""
    [rule] = [r for g in prometheus.api("rules", type="alert")["groups"] for r in g["rules"] if r["name"] == name]
    return rule


def held(prometheus: OwnPrometheus, expression: str) -> dict[tuple[str, ...], float]:
    """An instant query of ``sum by (…)``: {its labels' values, in the by-clause's order: value},
    the zero ones left out."""
    by = expression.split("by (", 1)[1].split(")", 1)[0].split(",") if "by (" in expression else []
    found = {}
    for series in prometheus.query(expression):
        if float(series["value"][1]):
            found[tuple(series["metric"].get(label.strip(), "") for label in by)] = float(series["value"][1])
    return found


def reported_settlements(engine: Engine) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]:
    """report settlement: its decided + carried-out rows, and its carried-out rows, per source and decision."""
    decided: dict[tuple[str, str], float] = defaultdict(float)
    carried_out: dict[tuple[str, str], float] = defaultdict(float)
    with engine.connect() as conn:
        for row in reports.settlement(conn):
            if row["status"] != "pending decision":
                decided[(row["source"], row["decision"])] += row["requests"]
            if row["status"] == "carried out":
                carried_out[(row["source"], row["decision"])] += row["requests"]
    return dict(decided), dict(carried_out)


def reported_latency_counts(engine: Engine) -> dict[str, dict[tuple[str], float]]:
    """report latency's measured counts per measure and source, over every signal of the test."""
    now = datetime.now(timezone.utc)
    window = reports.Window(now - timedelta(days=1), now + timedelta(days=1))
    summed: dict[str, dict[tuple[str], float]] = defaultdict(lambda: defaultdict(float))
    with engine.connect() as conn:
        for row in reports.latency(conn, window, timedelta(days=365), 1000):
            if row["measured"]:
                summed[row["measure"]][(row["source"],)] += row["measured"]
    return {measure: dict(counts) for measure, counts in summed.items()}


def test_prometheus_holds_what_the_reports_say_and_the_alerts_fire(
    tmp_path: Path, engine: Engine, database_url: str, broker: Broker, run_pipeline,
    processes: list[subprocess.Popen],
) -> None:
    connection = f"monitoring-{uuid.uuid4().hex[:6]}"
    source, replies = broker.queue("commands"), broker.queue("replies")
    config = tmp_path / "connection.json"
    config.write_text(json.dumps({"id": connection, "sources": [
        {"addresses": [source], "acknowledgementRequests": {"includes": ["twin-persisted"]}}]}))
    gone = twin_command("delete", thing="org.acme/monitoring-never-created", correlation_id="c-gone",
                        message_id="m-gone")  # 404 from the twin: decided, settled as reject
    publish_all(broker, source, [*(thing_modify(n) for n in range(GOOD)), gone], reply_to=replies)
    broker.publish(source, POISON, message_id="poison", correlation_id="poison", reply_to=replies)

    connector_port = free_port()
    connector_log = open(tmp_path / "connector.log", "w")
    exporter_log = open(tmp_path / "exporter.log", "w")
    try:
        connector = start_connector(database_url, config, connector_port, connector_log)
        processes.append(connector)
        served(connector_port, connector)  # its metrics answer
        exporter, exporter_target = start_exporter(database_url, exporter_log)
        processes.append(exporter)
        connector_target = f"127.0.0.1:{connector_port}"
        with OwnPrometheus({"ackstore-ledger": [exporter_target], "ackstore-connector": [connector_target]},
                           rules=shortened_rules(), interval="1s") as prometheus:
            prometheus.wait_for_series('up{job="ackstore-ledger"} == 1')
            prometheus.wait_for_series('up{job="ackstore-connector"} == 1')
            # every message consumed, the stored ones held until their decision (the poison one dropped)
            prometheus.wait_until(lambda: held(prometheus, "sum(ackstore_connector_in_flight)") == {(): GOOD + 1},
                                  what="the stored messages held by the connector")

            # --- one pass of the real pipeline: the last successful one ------------------------
            run_pipeline()
            passed = time.time()
            wait_for(lambda: settled(engine) == {"ack": GOOD, "reject": 1}, what="the settlements carried out")
            # the pass's end scraped, and a rule evaluation since: the pipeline rule is not active
            last_success = float(prometheus.wait_for_series(
                f"ackstore_pipeline_last_success_timestamp_seconds > {passed - 120}")[0]["value"][1])
            seen = time.time()
            rule = prometheus.wait_until(
                lambda: (r := rule_state(prometheus, "AckstorePipelineNotSucceeding")) and
                rfc3339(r["lastEvaluation"]) > seen + 0.1 and r, what="the pipeline rule evaluated after the pass")
            assert (rule["health"], rule["state"]) == ("ok", "inactive"), rule
            assert not [a for a in prometheus.alerts() if a["labels"]["alertname"] == "AckstorePipelineNotSucceeding"]
            assert time.time() - last_success < PIPELINE_THRESHOLD, "checked too late to mean anything"

            # --- what Prometheus holds == what the reports say ---------------------------------
            decided, carried_out = reported_settlements(engine)
            assert decided == {(connection, "ack"): GOOD, (connection, "reject"): 1}
            assert carried_out == decided
            stored = count(engine, "SELECT count(*) FROM signals")
            assert stored == GOOD + 1
            # wait for a scrape of both that saw the connector's last settle round
            prometheus.wait_until(
                lambda: held(prometheus, 'sum(ackstore_connection_messages_total{category="acknowledged"})') ==
                {(): GOOD + 1} and held(prometheus, "sum(ackstore_settlements_carried_out_total)") == {(): GOOD + 1},
                what="the carried-out settlements scraped from the connector and the exporter")
            assert held(prometheus, "sum by (source, decision) (ackstore_settlement_decisions_total)") == decided
            assert held(prometheus, "sum by (source, decision) (ackstore_settlements_carried_out_total)") == carried_out
            assert held(prometheus, "sum by (connection, decision) (ackstore_connector_carried_out_total)") == carried_out
            latency = reported_latency_counts(engine)
            assert latency["received_to_decided"] == {(connection,): GOOD + 1}
            assert held(prometheus, "sum by (source) (ackstore_received_to_decided_seconds_count)") == \
                latency["received_to_decided"]
            assert held(prometheus, "sum by (source) (ackstore_decided_to_carried_out_seconds_count)") == \
                latency["decided_to_carried_out"]
            assert held(prometheus, 'sum(ackstore_connection_messages_total{category="stored"})') == {(): stored}
            assert held(prometheus, "sum by (source) (ackstore_signals_stored_total)") == {(connection,): stored}
            assert held(prometheus, 'sum(ackstore_connection_messages_total{category="dropped"})') == {(): 1}
            assert not prometheus.alerts(), "nothing is wrong yet"

            # --- the connector killed: AckstoreConnectorDown -------------------------------------
            os.kill(connector.pid, signal.SIGKILL)
            killed = time.monotonic()
            [down] = prometheus.wait_for_alert("AckstoreConnectorDown", timeout=30)
            took = time.monotonic() - killed
            print(f"\nconnector down → alert firing: {took:.1f} s (for: {FOR}, scrape and evaluation every 1 s)")
            assert connector.wait(timeout=10) == -signal.SIGKILL
            assert down["labels"]["instance"] == connector_target
            assert down["labels"]["connection"] == connection, down  # named by its connection (issue 50)
            assert down["annotations"]["summary"] == f"The connector of connection {connection} is down"

            # --- no pass since: AckstorePipelineNotSucceeding ------------------------------------
            [stale] = prometheus.wait_for_alert("AckstorePipelineNotSucceeding", timeout=PIPELINE_THRESHOLD + 30)
            print(f"last pass → AckstorePipelineNotSucceeding firing: {time.time() - passed:.1f} s "
                  f"(threshold {PIPELINE_THRESHOLD} s, for: {FOR})")
            assert rfc3339(stale["activeAt"]) - last_success > PIPELINE_THRESHOLD
            assert {a["labels"]["alertname"] for a in prometheus.alerts()} == {
                "AckstoreConnectorDown", "AckstorePipelineNotSucceeding"}, "no other alert"
    finally:
        for process in reversed(processes):  # stopped by PID; the fixture does it again if this fails
            if process.poll() is None:
                os.kill(process.pid, signal.SIGTERM)
                process.wait(timeout=30)
        connector_log.close()
        exporter_log.close()
    assert exporter.returncode == 0, (tmp_path / "exporter.log").read_text()[-3000:]
