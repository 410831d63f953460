"""The Grafana dashboard (deploy/grafana/ackstore.json): well formed, on the data source variable,
naming only documented metrics — and every PromQL expression of its panels parses in a real
Prometheus (tests/support/own_prometheus.py) and returns a series when that Prometheus scrapes a real
`ackstore metrics` on a ledger with data and a connector's real metrics."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from prometheus_client import start_http_server
from sqlalchemy import Engine, text

from tests.support.metrics_doc import series_names
from tests.support.own_prometheus import OwnPrometheus, PrometheusError
from tests.support.paths import ROOT

DASHBOARD = ROOT / "deploy" / "grafana" / "ackstore.json"
# Grafana's own variables, as a query of a few hours' range would have them
BUILT_IN = {"__rate_interval": "1m", "__interval": "15s", "__interval_ms": "15000", "__range": "1h",
            "__range_s": "3600", "__range_ms": "3600000"}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels() -> list[dict]:
    """Every panel, those inside collapsed rows too."""
    found = []
    for panel in dashboard()["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def expressions() -> list[tuple[str, str]]:
    """(panel title and refId, expr) of every query target of every panel."""
    return [(f"{panel['title']} {target['refId']}", target["expr"])
            for panel in panels() for target in panel.get("targets", [])]


def promql(expression: str) -> str:
    """``expression`` as Grafana sends it: its variables replaced (a dashboard variable by its
    "All" value); an unknown variable fails."""
    values = dict(BUILT_IN)
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] != "datasource":
            values[variable["name"]] = variable.get("allValue") or ".*"

    def replace(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        assert name in values, f"unknown variable ${name} in {expression!r}"
        return values[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", replace, expression)


def test_the_dashboard_is_well_formed_and_on_the_data_source_variable() -> None:
    board = dashboard()
    assert board["schemaVersion"] >= 39 and board["uid"] and board["title"]
    variables = {variable["name"]: variable for variable in board["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource" and variables["DS_PROMETHEUS"]["query"] == "prometheus"
    ids = [panel["id"] for panel in panels()]
    assert len(ids) == len(set(ids)), "two panels of one id"
    for panel in panels():
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, panel["title"]
        assert panel["targets"], f"{panel['title']} queries nothing"
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"], panel["title"]
    for name in ("source", "connection"):
        assert variables[name]["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}


def test_the_panels_cover_what_an_operator_watches() -> None:
    used = " ".join(expression for _, expression in expressions())
    for metric in ("ackstore_signals_stored_total", "ackstore_requests_decided_total",
                   "ackstore_settlement_decisions_total", "ackstore_settlements_carried_out_total",
                   "ackstore_queue_pending", "ackstore_oldest_undecided_age_seconds",
                   "ackstore_oldest_unsettled_age_seconds", "ackstore_received_to_decided_seconds_bucket",
                   "ackstore_decided_to_carried_out_seconds_bucket", "ackstore_dead_letters_total",
                   "ackstore_late_acks_total", "ackstore_weak_acks_total", "ackstore_seal_last_timestamp_seconds",
                   "ackstore_facts_unsealed", "ackstore_pipeline_last_success_timestamp_seconds",
                   "ackstore_step_last_duration_seconds", "ackstore_connector_in_flight", "ackstore_connector_outage",
                   "ackstore_connection_messages_total", "ackstore_signals_pending",
                   "ackstore_connector_last_seen_timestamp_seconds", "ackstore_connector_carried_out_total",
                   "ackstore:connector_up"):  # a connector's up by its connection (alerts.yml records it)
        assert re.search(rf"\b{metric}\b", used), f"no panel shows {metric}"
    for quantile in ("0.5", "0.95", "0.99"):
        for histogram in ("ackstore_received_to_decided_seconds", "ackstore_decided_to_carried_out_seconds"):
            assert f"histogram_quantile({quantile}, sum by (le, source) (rate({histogram}_bucket" in used


def test_the_dashboard_names_only_documented_metrics() -> None:
    documented = series_names()
    assert "ackstore_connection_messages_total" in documented
    queries = [expression for _, expression in expressions()]
    queries += [variable["definition"] for variable in dashboard()["templating"]["list"] if "definition" in variable]
    for query in queries:
        unknown = set(re.findall(r"\backstore_[a-z_]+\b", query)) - documented
        assert not unknown, f"{query!r} names {sorted(unknown)}, not in docs/metrics.md"


def test_the_variables_are_replaced_as_grafana_would() -> None:
    assert promql('rate(x{source=~"$source"}[$__rate_interval])') == 'rate(x{source=~".*"}[1m])'
    assert promql('x{connection=~"${connection}"}') == 'x{connection=~".*"}'
    with pytest.raises(AssertionError, match="unknown variable"):
        promql("x[$nowhere]")


@pytest.fixture(scope="module")
def prometheus() -> Iterator[OwnPrometheus]:
    with OwnPrometheus(rules="") as own:
        yield own


def parse_error(prometheus: OwnPrometheus, expression: str) -> str | None:
    """Prometheus's answer to ``expression`` if it refused it as bad_data (does not parse)."""
    try:
        prometheus.query(expression)
    except PrometheusError as refused:
        if refused.error_type == "bad_data":
            return refused.error
        raise
    return None


def test_every_expression_parses_in_a_real_prometheus(prometheus: OwnPrometheus) -> None:
    assert parse_error(prometheus, "histogram_quantile(0.5, sum by (le) (rate(x_bucket[1m])))") is None
    assert parse_error(prometheus, "histogram_quantile(0.5, sum by (le (rate(x_bucket[1m]))")  # the check can fail
    refused = {where: error for where, expression in expressions()
               if (error := parse_error(prometheus, promql(expression))) is not None}
    assert not refused, refused


# --- every expression returns a series: a real exporter on a real ledger, a connector's metrics ---


@pytest.fixture
def ledger_with_data(engine: Engine) -> Engine:
    """tests.support.seeded_ledger's SEED (acked, redelivered, rejected, dead-lettered, late and
    weak acks, an undecided signal, a settlement not carried out), an undecided signal waiting in
    queue_decide, the steps' last runs recorded, a seal, and plant-a's connector heard from."""
    from ackstore.ledger import seals
    from tests.support.seeded_ledger import seed

    seed(engine)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO queue_decide (signal_id, attempt) SELECT id, 1 FROM signals "
                          "WHERE correlation_id = 'a3'"))
        conn.execute(text("INSERT INTO pipeline_runs (run_id, step, stats, finished_at) VALUES "
                          "('r1', 'sweep', '{\"seconds\": 1.25}', now()), ('r1', 'validate', '{\"seconds\": 2.5}', now()), "
                          "('r1', 'settle', '{\"seconds\": 0.75}', now()), ('r1', 'seal', '{\"seconds\": 0.5}', now())"))
    seals.seal(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE connections SET seen_at = now() WHERE id = 'plant-a'"))
    return engine


@pytest.fixture
def ledger_exporter(ledger_with_data: Engine, database_url: str) -> Iterator[str]:
    """`ackstore metrics` as a user starts it, on a free port: its host:port. Stopped by its PID."""
    process = subprocess.Popen([str(Path(sys.executable).parent / "ackstore"), "--database-url", database_url,
                                "metrics", "--port", "0", "--host", "127.0.0.1"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line, process.stderr.read()
        serving = json.loads(line)["serving"]  # http://127.0.0.1:PORT/metrics
        yield serving.removeprefix("http://").removesuffix("/metrics")
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


@pytest.fixture
def connector_metrics() -> Iterator[str]:
    """A connector's metrics (ackstore.connectors.metrics, what `ackstore connect … --metrics-port`
    serves) after a batch, a settle round and a broker outage: its host:port."""
    from ackstore.connectors.metrics import ConnectorMetrics

    metrics = ConnectorMetrics("plant-a", "amqp-091")
    metrics.consumed(3)
    metrics.stored(3, 0.02, new=2, duplicate=1, dropped=0)
    metrics.carried_out("ack", "ack", 2)
    metrics.acknowledged(2)
    metrics.watch_in_flight(lambda: 1)
    metrics.outages.watcher("broker")(True)
    server, thread = start_http_server(0, "127.0.0.1", registry=metrics.registry)
    try:
        yield f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.mark.db
def test_every_expression_returns_a_series_from_a_real_exporter_and_connector(ledger_exporter: str,
                                                                            connector_metrics: str) -> None:
    with OwnPrometheus({"ackstore-ledger": [ledger_exporter], "ackstore-connector": [connector_metrics]},
                       rules=None) as prometheus:  # the shipped rules: a panel reads what they record
        prometheus.wait_for_series('ackstore_ledger_up{job="ackstore-ledger"} == 1')
        prometheus.wait_for_series('ackstore_connector_in_flight{job="ackstore-connector"}')
        deadline = time.monotonic() + 60  # rate() needs two scrapes in its range
        empty = dict(expressions())
        while empty and time.monotonic() < deadline:
            empty = {where: expression for where, expression in empty.items()
                     if not prometheus.query(promql(expression))}
            if empty:
                time.sleep(1)
        assert not empty, f"no series in 60 s from: {empty}"
        # and what they return is what the ledger holds: SEED dead-lettered one message of plant-b; its
        # other connection is served from 0 (issue 50: the panel shows a source's first dead letter)
        assert prometheus.values('ackstore_dead_letters_total{job="ackstore-ledger"}') == {
            (("__name__", "ackstore_dead_letters_total"), ("instance", ledger_exporter), ("job", "ackstore-ledger"),
             ("source", source)): value for source, value in (("plant-a", 0.0), ("plant-b", 1.0))}
