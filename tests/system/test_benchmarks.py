"""The benchmarks still run (tiny sizes): a benchmark that rots is found by `make test`, not by
the next person who needs a figure. Their numbers are not checked here — that is their job. The
ones that run a broker, a connector or Airflow's schedule are in test_benchmarks_live.py, so that
the two halves can run on the two workers at once."""

from __future__ import annotations

import pytest

from tests.support.benchmark_runs import runs

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.parametrize(
    ("module", "args", "expected"),
    [
        ("benchmarks.pipeline", ["--commands", "300", "--cores", "2"],
         ("CPU, yardstick:", "ratio to yardstick: ", "sealed facts (*) a command: ")),
        ("benchmarks.archive", ["--commands", "300"], "hot fact tables"),
        ("benchmarks.history", ["--history", "2000", "--commands", "50", "--repeat", "1"], "(b) end to end history/empty"),
        ("benchmarks.subscribers", ["--messages", "300", "--history", "2000", "--repeat", "1"], "ratio history/empty"),
        ("benchmarks.ingest", ["--messages", "2000", "--batch", "500", "--single", "64"], "ratio submit_many/raw"),
        ("benchmarks.reports", ["--history", "2000", "--repeat", "1"], "(b) all the history"),
        ("benchmarks.cost_model", ["--sizes", "0,200,600", "--repeat", "1"], ("marginal µs/cmd", "gate %")),
        ("benchmarks.http", ["--requests", "300", "--connections", "10", "--held", "20", "--sockets", "3",
                             "--socket-commands", "300"],
         ("HTTP / submit_many", "answers for 20 held requests: {201: 20}", "commands/s", "µs a command")),
    ],
)
def test_the_benchmark_runs(module: str, args: list[str], expected: str | tuple[str, ...]) -> None:
    runs(module, args, expected)
