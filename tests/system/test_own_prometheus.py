"""tests/support/own_prometheus.py: a real Prometheus of the test's own scrapes a tiny target served here
(prometheus_client on a free port, a registry of our own), answers queries with what it scraped,
evaluates the project's alert rules, and is gone — port and process — once stopped."""

from __future__ import annotations

import socket
from typing import Iterator

import psutil
import pytest
import yaml
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from tests.support.own_postgres import free_port
from tests.support.own_prometheus import ALERTS, OwnPrometheus, PrometheusError, rules_with_for


class Served:
    """A /metrics of our own on 127.0.0.1: a registry with the gauges a test sets."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.port = free_port()
        self.server, self.thread = start_http_server(self.port, addr="127.0.0.1", registry=self.registry)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def gauge(self, name: str, documentation: str = "a test's gauge", labels: tuple[str, ...] = ()) -> Gauge:
        return Gauge(name, documentation, labels, registry=self.registry)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def served() -> Iterator[Served]:
    target = Served()
    yield target
    target.close()


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_it_scrapes_a_served_target_and_a_query_returns_its_value(served: Served) -> None:
    gauge = served.gauge("ackstore_probe_value", labels=("queue",))
    gauge.labels("apply").set(41.5)
    with OwnPrometheus({"probe": [served.target]}, rules="") as prometheus:
        assert prometheus.pid is not None and psutil.Process(prometheus.pid).name().startswith("prometheus")
        [series] = prometheus.wait_for_series('ackstore_probe_value{job="probe"}')
        assert series["metric"] == {"__name__": "ackstore_probe_value", "job": "probe", "instance": served.target,
                                    "queue": "apply"}
        assert float(series["value"][1]) == 41.5
        # a later scrape: what is served now, not what was served first
        gauge.labels("apply").set(7)
        prometheus.wait_until(lambda: prometheus.values('ackstore_probe_value{queue="apply"}') ==
                              {(("__name__", "ackstore_probe_value"), ("instance", served.target), ("job", "probe"),
                                ("queue", "apply")): 7.0}, what="the new value scraped")
        [target] = prometheus.targets()
        assert (target["labels"]["job"], target["health"]) == ("probe", "up")
        assert prometheus.values(f'up{{instance="{served.target}"}}') == {
            (("__name__", "up"), ("instance", served.target), ("job", "probe")): 1.0}


def test_a_query_that_does_not_parse_is_an_error_of_type_bad_data() -> None:
    with OwnPrometheus(rules="") as prometheus:
        with pytest.raises(PrometheusError) as refused:
            prometheus.query("sum by (le (rate(x[5m]))")
        assert refused.value.error_type == "bad_data"
        assert prometheus.query("vector(3)")[0]["value"][1] == "3"


def test_stopping_it_frees_the_port_and_ends_the_process(served: Served) -> None:
    prometheus = OwnPrometheus({"probe": [served.target]}, rules="")
    try:
        prometheus.start()
        pid, port = prometheus.pid, prometheus.port
        assert pid is not None and psutil.pid_exists(pid)
        assert not port_is_free(port)
        assert prometheus.ready()
        prometheus.stop()
        assert prometheus.pid is None
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        assert port_is_free(port)
        assert not prometheus.ready()
        assert prometheus.root.exists()  # stop keeps the folder, close removes it
    finally:
        prometheus.close()
    assert not prometheus.root.exists()


def test_rules_with_for_rewrites_only_the_durations() -> None:
    original = yaml.safe_load(ALERTS.read_text())
    short = yaml.safe_load(rules_with_for("0s"))
    some = yaml.safe_load(rules_with_for({"AckstoreSealingBehind": "2s"}))
    for group, short_group, some_group in zip(original["groups"], short["groups"], some["groups"]):
        for rule, short_rule, some_rule in zip(group["rules"], short_group["rules"], some_group["rules"]):
            if "alert" not in rule:  # a recording rule has no `for`
                assert short_rule == some_rule == rule
                continue
            assert short_rule == {**rule, "for": "0s"}
            expected = {**rule, "for": "2s"} if rule["alert"] == "AckstoreSealingBehind" else rule
            assert some_rule == expected


def test_it_evaluates_the_project_rules_on_what_it_scrapes(served: Served) -> None:
    """The real alerts.yml (its `for`s shortened) in a real Prometheus: a failing gate served by
    the "ledger" fires AckstoreValidationFailing; a connector's port where nothing listens fires
    AckstoreConnectorDown; the passing gate does not fire."""
    failed = served.gauge("ackstore_validation_failed", "1 when the gate's last run failed")
    failed.set(1)
    passing = Served()
    try:
        passing.gauge("ackstore_validation_failed", "1 when the gate's last run failed").set(0)
        nobody = f"127.0.0.1:{free_port()}"
        with OwnPrometheus({"ackstore-ledger": [served.target, passing.target], "ackstore-connector": [nobody]},
                           rules=rules_with_for("0s")) as prometheus:
            [alert] = prometheus.wait_for_alert("AckstoreValidationFailing")
            assert alert["labels"] == {"alertname": "AckstoreValidationFailing", "severity": "critical",
                                       "job": "ackstore-ledger", "instance": served.target}
            assert alert["annotations"]["summary"] == "The ackstore validation gate fails: nothing is settled"
            [down] = prometheus.wait_for_alert("AckstoreConnectorDown")
            assert down["labels"]["instance"] == nobody
            # the gate passes again: the alert ends
            failed.set(0)
            prometheus.wait_until(lambda: not [a for a in prometheus.alerts()
                                               if a["labels"]["alertname"] == "AckstoreValidationFailing"],
                                  what="AckstoreValidationFailing resolved")
    finally:
        passing.close()
