"""The benchmarks that run a broker, connectors or Airflow's schedule still run (tiny sizes); the
others: test_benchmarks.py."""

from __future__ import annotations

import pytest

from tests.support.benchmark_runs import runs

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.parametrize(
    ("module", "args", "expected"),
    [
        ("benchmarks.broker", ["--messages", "300", "--batch", "100"], ("ratio end-to-end/raw", "CPU per message: ")),
        # MQTT 5 through a Mosquitto of its own, two connectors sharing the subscription
        ("benchmarks.broker", ["--protocol", "mqtt", "--messages", "300", "--batch", "100", "--sessions", "2"],
         "in flight: 2 session(s)"),
        # AMQP 1.0 through a RabbitMQ node of its own, then AMQP 0.9.1 on it, and their ratios
        ("benchmarks.broker", ["--protocol", "amqp10", "--messages", "300", "--batch", "100", "--credit", "200"],
         ("in flight: link credit 200", "AMQP 1.0 vs AMQP 0.9.1 on one node, 300 messages")),
        # ackstore airflow on its schedule, a connector, 15 s of publishing (about 4 minutes): all
        # 300 messages modify existing things and end acked on the broker
        ("benchmarks.sustained", ["--rates", "20", "--minutes", "0.25", "--things", "200", "--drain-minutes", "4"],
         ("carried out 300 (ack 300)", "CPU per message, less the publisher (benchmark): ", "| 20/s | ")),
    ],
)
def test_the_live_benchmark_runs(module: str, args: list[str], expected: str | tuple[str, ...]) -> None:
    runs(module, args, expected)
