"""At least once, with processes dying: the connector killed with -9, a pipeline step killed,
the broker connection closed from the server's side.

After each scenario: every message stored exactly once, every twin change applied exactly once
(each thing's revision is the number of its messages), every delivery settled by its decision
and that recorded no earlier than the decision, and the queue empty. A delivery settled on the
broker before its decision would leave a signal whose decision nobody carries out (its message
never comes back), so "every decision carried out" also proves nothing was settled early.
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from typing import Iterator

import pytest
from sqlalchemy import Engine

from tests.support.broker import Broker, connector, kill_9, publish_all, stop, wait_for
from tests.support.crash import PipelineLoop, all_carried_out, assert_at_least_once_exactly, commands, scalar
from tests.support.ledger import pipeline_subprocess

pytestmark = [pytest.mark.spark, pytest.mark.slow]

@pytest.fixture
def broker() -> Iterator[Broker]:
    broker = Broker()
    yield broker
    broker.close()


def test_kill_9_of_the_connector_at_random_moments_loses_and_duplicates_nothing(
    engine: Engine, database_url: str, broker: Broker, run_pipeline
) -> None:
    messages, kills = int(os.environ.get("ACKSTORE_CRASH_MESSAGES", 10_000)), 6
    queue = broker.queue("commands")
    publish_all(broker, queue, commands(messages))
    args = ("--connection-id", "crash", "--queue", queue, "--requested-acks", "twin-persisted",
            "--poll", "0.5", "--batch-size", "500")
    randomness = random.Random(9)
    # The first kill comes before the pipeline runs, so it surely hits a connector holding
    # deliveries: on a quiet machine the pipeline decides 10 000 within seconds.
    first = connector(database_url, *args)
    wait_for(lambda: scalar(engine, "SELECT count(*) FROM signals") > 0, what="the first connector storing")
    kill_9(first)
    returned = [wait_for(lambda: broker.depth(queue), what="its deliveries back in the queue")]
    with PipelineLoop(run_pipeline) as pipeline:
        # At least `kills` kills, and on until a pass has run between them: on a loaded machine
        # one pass on Spark outlasts the first few kills.
        deadline = time.monotonic() + 300
        while len(returned) < kills or (pipeline.check() and pipeline.runs == 0):
            assert time.monotonic() < deadline, "the pipeline ran while connectors were killed"
            process = connector(database_url, *args)
            time.sleep(randomness.uniform(1.0, 6.0))
            kill_9(process)
            returned.append(broker.depth(queue))
        assert sum(returned) > 0, f"the kills hit connectors holding deliveries: {returned}"
        last = connector(database_url, *args)
        wait_for(lambda: connection_count("ackstore connector crash") == 1, what="the last connector connected")
        wait_for(lambda: pipeline.check() and all_carried_out(engine, messages), timeout=600,
                 what="every decision carried out")
    code, log = stop(last)
    assert code == 0, log
    assert scalar(engine, "SELECT count(*) FROM signals WHERE received_at IS NOT NULL") == messages
    assert_at_least_once_exactly(engine, messages)
    assert broker.depth(queue) == 0, "the queue is empty"


# The moments of the connector's threads: the storing thread after a batch's commit, the deciding
# thread after recording decisions carried out (decisions #33), the broker's thread settling.
THREAD_MOMENTS = ["connector:stored", "connector:recorded", "connector:settling"]


@pytest.mark.parametrize("moment", THREAD_MOMENTS)
def test_a_kill_9_at_each_moment_of_the_connectors_threads_loses_and_duplicates_nothing(
    engine: Engine, database_url: str, broker: Broker, run_pipeline, moment: str
) -> None:
    messages = 2000
    queue = broker.queue("commands")
    publish_all(broker, queue, commands(messages))
    args = ("--connection-id", "crash", "--queue", queue, "--requested-acks", "twin-persisted",
            "--poll", "0.5", "--batch-size", "500")
    first = connector(database_url, *args, env={"ACKSTORE_FAULT": moment})
    with PipelineLoop(run_pipeline) as pipeline:
        wait_for(lambda: pipeline.check() and first.poll() is not None, timeout=300, what=f"the kill at {moment}")
        _, first_log = first.communicate(timeout=30)
        assert first.returncode == -9, first_log[-2000:]
        last = connector(database_url, *args)
        # killed after recording, the copies come back and are settled from their decisions
        wait_for(lambda: pipeline.check() and all_carried_out(engine, messages) and broker.unsettled(queue) == 0,
                 timeout=600, what="every decision carried out on the broker")
    code, log = stop(last)
    assert code == 0, log
    assert_at_least_once_exactly(engine, messages)
    assert broker.depth(queue) == 0, "the queue is empty"


def holding(engine: Engine, database_url: str, broker: Broker, messages: int, connection_id: str):
    """A queue of ``messages`` commands and a QoS-1 connector that has stored (and holds) them all."""
    queue = broker.queue("commands")
    publish_all(broker, queue, commands(messages))
    process = connector(database_url, "--connection-id", connection_id, "--queue", queue,
                        "--requested-acks", "twin-persisted", "--poll", "0.5")
    try:
        wait_for(lambda: scalar(engine, "SELECT count(*) FROM signals") == messages, what="all stored")
    except AssertionError:
        stop(process)
        raise
    return queue, process


def test_a_pipeline_step_killed_mid_way_while_the_connector_runs(
    engine: Engine, database_url: str, broker: Broker, spark_remote: str
) -> None:
    messages = 2000
    queue, process = holding(engine, database_url, broker, messages, "crash")
    try:
        # killed in the gate, after the sweep decided: nothing validated, nothing to settle yet
        killed = pipeline_subprocess(database_url, fault="validate:staged", remote=spark_remote)
        assert killed.returncode == -9, killed.stderr[-2000:]
        time.sleep(2)  # a connector that settled anything now would be settling undecided messages
        assert scalar(engine, "SELECT count(*) FROM settlements") == 0
        assert broker.depth(queue) == 0, "all still held"
        again = pipeline_subprocess(database_url, remote=spark_remote)
        assert again.returncode == 0, again.stderr[-2000:]
        wait_for(lambda: all_carried_out(engine, messages), timeout=120, what="every decision carried out")
    finally:
        code, log = stop(process)
    assert code == 0, log
    assert_at_least_once_exactly(engine, messages)
    assert broker.depth(queue) == 0, "the queue is empty"


def test_the_broker_closing_the_connection_makes_the_connector_reconnect_and_lose_nothing(
    engine: Engine, database_url: str, broker: Broker, run_pipeline
) -> None:
    messages = 1000
    queue, process = holding(engine, database_url, broker, messages, "crash-close")
    try:
        closed = close_connections("ackstore connector crash-close")
        assert closed == 1
        wait_for(lambda: connection_count("ackstore connector crash-close") == 1, what="the connector reconnected")
        run_pipeline()
        wait_for(lambda: all_carried_out(engine, messages), timeout=120, what="every decision carried out")
    finally:
        code, log = stop(process)
    assert code == 0, log
    assert "broker connection lost" in log and "reconnects 1" in log
    assert_at_least_once_exactly(engine, messages)
    assert broker.depth(queue) == 0, "the queue is empty"


def _connections() -> list[tuple[str, str]]:
    """(pid, client properties) of every connection, from ``rabbitmqctl``."""
    listed = subprocess.run(["rabbitmqctl", "-q", "list_connections", "pid", "client_properties"],
                            capture_output=True, text=True, timeout=120, check=True)
    return [tuple(line.split("\t", 1)) for line in listed.stdout.splitlines() if "\t" in line]


def connection_count(name: str) -> int:
    return sum(1 for _, properties in _connections() if f'"{name}"' in properties)


def close_connections(name: str) -> int:
    """Close the named client connections from the server's side."""
    pids = [pid for pid, properties in _connections() if f'"{name}"' in properties]
    for pid in pids:
        subprocess.run(["rabbitmqctl", "close_connection", pid, "closed by the test"], check=True,
                       capture_output=True, timeout=120)
    return len(pids)


