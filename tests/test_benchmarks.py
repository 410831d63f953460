"""The benchmarks still run (tiny sizes): a benchmark that rots is found by `make test`, not by
the next person who needs a figure. Their numbers are not checked here — that is their job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.parametrize(
    ("module", "args", "expected"),
    [
        ("benchmarks.pipeline", ["--commands", "300", "--cores", "2"], "CPU, yardstick:"),
        ("benchmarks.archive", ["--commands", "300"], "hot fact tables"),
        ("benchmarks.history", ["--history", "2000", "--commands", "50", "--repeat", "1"], "(b) end to end history/empty"),
        ("benchmarks.subscribers", ["--messages", "300", "--history", "2000", "--repeat", "1"], "ratio history/empty"),
        ("benchmarks.ingest", ["--messages", "2000", "--batch", "500", "--single", "64"], "ratio submit_many/raw"),
        ("benchmarks.broker", ["--messages", "300", "--batch", "100"], "ratio end-to-end/raw"),
        # MQTT 5 through a Mosquitto of its own, two connectors sharing the subscription
        ("benchmarks.broker", ["--protocol", "mqtt", "--messages", "300", "--batch", "100", "--sessions", "2"],
         "in flight: 2 session(s)"),
        ("benchmarks.reports", ["--history", "2000", "--repeat", "1"], "(b) all the history"),
        # ackstore airflow on its schedule, a connector, 15 s of publishing (about 4 minutes): all
        # 300 messages modify existing things and end acked on the broker
        ("benchmarks.sustained", ["--rates", "20", "--minutes", "0.25", "--things", "200", "--drain-minutes", "4"],
         "carried out 300 (ack 300)"),
    ],
)
def test_the_benchmark_runs(module: str, args: list[str], expected: str) -> None:
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert expected in done.stdout
