"""Faults a deployment meets (issue 25, item 3): PostgreSQL restarted — an immediate stop, as a
crash of the postmaster, then a start — under a running connector, mid-ingest and mid-merge;
and the broker process killed and started again under it.

The database is a cluster the test owns (tests/support/own_postgres.py: initdb in a temporary folder, a
free port), the broker in the last test a RabbitMQ node it owns (tests/support/own_rabbitmq.py), so that
restarting them disturbs nothing else. After each restart: the 10 000 messages are stored once
(one signal per source message id), applied once (one 204 and one event each; every thing's
revision is its creation plus its messages), settled once (one settlement per signal and attempt,
carried out; the queue ends empty and stays empty once the connector is gone: nothing was left
unsettled on the broker), and none settled before its decision.

Two more look at how the connector goes through an outage: each thing's messages stored in the
order they were published, and the outage said in a few warnings, not one per loop.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import IO, Any, Callable, Iterator

import pika
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from ackstore.ledger.database import make_engine
from ackstore.ledger.store import AckStore
from tests.support.amqp10_clients import address, amqp10_connector
from tests.support.broker import Broker, connector, publish_all, publish_committed, wait_for
from tests.support.ledger import twin_command
from tests.support.own_postgres import OwnPostgres
from tests.support.own_rabbitmq import OwnRabbitMQ

pytestmark = [pytest.mark.spark, pytest.mark.slow]

MESSAGES = int(os.environ.get("ACKSTORE_RESTART_MESSAGES", 10_000))
THINGS = 1000
CONNECTION = "restart"
CONNECTOR_ARGS = ("--connection-id", CONNECTION, "--requested-acks", "twin-persisted", "--poll", "0.5")


# --- what the tests share -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[OwnPostgres]:
    with OwnPostgres() as own:
        yield own


@pytest.fixture
def own_postgres(cluster: OwnPostgres) -> OwnPostgres:
    """The module's own cluster, running (a test that failed while it was stopped leaves it so)."""
    cluster.ensure_running()
    return cluster


@pytest.fixture(scope="module")
def seeded(cluster: OwnPostgres, spark) -> str:
    """A ledger where THINGS things exist, created through the ledger and the pipeline: the
    template each test's ledger is copied from (the messages then modify things that exist:
    204, an ack)."""
    url = cluster.create_ledger("seeded")
    engine = make_engine(url)
    creates = [twin_command("create", thing=thing(k), path="/", value={"attributes": {"i": -1}}) for k in range(THINGS)]
    answers = AckStore(engine).submit_many(creates, source="seed", source_message_ids=[f"create-{k}" for k in range(THINGS)])
    assert {answer["status"] for answer in answers} == {202}
    run_pipeline(spark, url)
    assert scalar(engine, "SELECT count(*) FROM things WHERE revision = 1") == THINGS
    engine.dispose()
    return "seeded"


@pytest.fixture
def ledger(own_postgres: OwnPostgres, seeded: str) -> Iterator[tuple[str, Engine]]:
    """A copy of the seeded ledger for one test: its URL and an engine."""
    url = own_postgres.create_database(f"ledger_{uuid.uuid4().hex[:8]}", template=seeded)
    engine = make_engine(url)
    yield url, engine
    engine.dispose()


@pytest.fixture
def broker() -> Iterator[Broker]:
    broker = Broker()
    yield broker
    broker.close()


def thing(k: int) -> str:
    """The k-th thing, as a topic names it."""
    return f"org.restart/t{k}"


def thing_id(k: int) -> str:
    """The k-th thing's id, as the ledger keeps it."""
    return f"org.restart:t{k}"


def modifies(count: int) -> list[dict[str, Any]]:
    """The i-th sets attribute ``i`` of thing i mod THINGS (which exists) to i: 204, a new revision each."""
    return [twin_command("modify", thing=thing(i % THINGS), path="/attributes/i", value=i,
                         correlation_id=f"c-{i}", message_id=f"m-{i}") for i in range(count)]


def scalar(engine: Engine, sql: str, **params: Any) -> Any:
    with engine.connect() as conn:
        return conn.execute(text(sql), params).scalar_one()


def stored(engine: Engine) -> int:
    return scalar(engine, "SELECT count(*) FROM signals WHERE source = :source", source=CONNECTION)


def carried_out(engine: Engine) -> int:
    return scalar(engine, "SELECT count(*) FROM settlements WHERE carried_out_at IS NOT NULL")


def decided(engine: Engine) -> int:
    return scalar(engine, "SELECT count(*) FROM settlements")


def run_pipeline(spark: Any, url: str) -> dict:
    from jobs import pipeline
    from jobs.settings import PipelineSettings

    return pipeline.run(spark, PipelineSettings(database_url=url, partitions=2))


def pipeline_until_settled(spark: Any, url: str, engine: Engine, process: Any, timeout: float = 600) -> int:
    """Run the whole pipeline again and again until the connector has carried out a decision for
    every message; how many runs it took."""
    deadline, runs = time.monotonic() + timeout, 0
    while carried_out(engine) < MESSAGES:
        assert process.poll() is None, "the connector exited"
        assert time.monotonic() < deadline, f"{carried_out(engine)} of {MESSAGES} carried out after {timeout} s"
        run_pipeline(spark, url)
        runs += 1
        wait_for(lambda: carried_out(engine) == decided(engine), timeout=120,
                 what="the connector to carry out what was decided")
    return runs


class Connector:
    """``ackstore connect amqp`` (or ``amqp10``, on the queue's AMQP 1.0 address) as a
    subprocess, its log in a file."""

    def __init__(self, database_url: str, queue: str, tmp_path: Path, *extra: str, url: str | None = None,
                 amqp10: bool = False) -> None:
        self.log_path = tmp_path / f"connector-{uuid.uuid4().hex[:6]}.log"
        self._log: IO[str] = open(self.log_path, "w")
        if amqp10:
            assert url is not None
            self.process = amqp10_connector(database_url, url, *CONNECTOR_ARGS, "--address", address(queue), *extra,
                                            log=self._log)
            return
        options = {"url": url} if url else {}
        self.process = connector(database_url, *CONNECTOR_ARGS, "--queue", queue, *extra, log=self._log, **options)

    def poll(self) -> int | None:
        return self.process.poll()

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self, timeout: float = 120) -> tuple[int, str]:
        """SIGTERM, then the exit status and the whole log."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(timeout=30)
            self._log.close()
        return self.process.returncode, self.log()


def consuming_published(broker: Broker, url: str, tmp_path: Path, envelopes: list[dict[str, Any]],
                        *extra: str) -> tuple[str, Connector]:
    """A fresh queue holding ``envelopes``, and a connector consuming it: the queue's name, the connector."""
    queue = broker.queue("commands")
    publish_all(broker, queue, envelopes)
    return queue, Connector(url, queue, tmp_path, *extra)


def assert_stored_applied_settled_once(engine: Engine, depth: Any, key: Callable[[int], str] = "m-{}".format) -> None:
    """The four counts. ``depth()`` is the queue's depth, read after the connector is gone;
    ``key(i)`` the i-th message's key in the ledger."""
    # stored once: one signal per source message id, every one of them
    assert stored(engine) == MESSAGES, "every message stored"
    assert scalar(engine, "SELECT count(DISTINCT source_message_id) FROM signals WHERE source = :s "
                          "AND source_message_id = ANY(:ids)", s=CONNECTION,
                  ids=[key(i) for i in range(MESSAGES)]) == MESSAGES, "stored once, by source message id"
    # applied once: one 204 with its event each; each thing's revision is its creation plus its messages
    assert scalar(engine, "SELECT count(*) FROM command_responses r JOIN signals s ON s.id = r.signal_id "
                          "WHERE s.source = :s AND r.status = 204 AND r.event_id IS NOT NULL", s=CONNECTION) == MESSAGES
    assert scalar(engine, "SELECT count(*) FROM thing_events e JOIN signals s ON s.id = e.signal_id "
                          "WHERE s.source = :s", s=CONNECTION) == MESSAGES, "one event per message"
    per_thing = MESSAGES // THINGS
    assert scalar(engine, "SELECT count(*) FROM things WHERE revision = :r", r=1 + per_thing) == THINGS, \
        "each thing changed once per message"
    # settled once: one settlement per signal (each its first attempt), an ack, carried out
    assert scalar(engine, "SELECT count(*) FROM settlements") == MESSAGES
    assert scalar(engine, "SELECT count(*) FROM settlements WHERE attempt = 1 AND decision = 'ack' "
                          "AND carried_out_at IS NOT NULL") == MESSAGES
    assert scalar(engine, "SELECT count(*) FROM signals s WHERE s.source = :s AND NOT EXISTS "
                          "(SELECT 1 FROM settlements st WHERE st.signal_id = s.id)", s=CONNECTION) == 0
    # none settled before its decision
    assert scalar(engine, "SELECT count(*) FROM settlements st JOIN request_results r USING (signal_id, attempt) "
                          "WHERE st.carried_out_at < r.decided_at OR st.carried_out_at < st.decided_at") == 0
    # nothing left unsettled on the broker: with the connector gone, nothing came back
    assert depth() == 0, "the queue is empty"
    time.sleep(1)
    assert depth() == 0, "and stays empty"


def things_out_of_order(engine: Engine) -> int:
    """Things with a message stored (given its ledger id) before one published earlier to them."""
    return scalar(engine, """
        SELECT count(DISTINCT thing_id) FROM (
            SELECT thing_id, i < lag(i) OVER (PARTITION BY thing_id ORDER BY id) AS earlier
            FROM (SELECT id, thing_id, substr(source_message_id, 3)::int AS i FROM signals WHERE source = :s) m) o
        WHERE earlier""", s=CONNECTION)


# --- PostgreSQL restarted -------------------------------------------------------------------------


def test_postgres_restarted_mid_ingest_the_connector_waits_reconnects_and_loses_nothing(
    own_postgres: OwnPostgres, ledger: tuple[str, Engine], broker: Broker, spark, tmp_path: Path
) -> None:
    url, engine = ledger
    queue, process = consuming_published(broker, url, tmp_path, modifies(MESSAGES), "--batch-size", "200")
    try:
        at_restart = restart_while_storing(own_postgres, engine)
        runs = pipeline_until_settled(spark, url, engine, process)
    finally:
        code, log = process.stop()
    assert code == 0, log[-3000:]
    assert_stored_applied_settled_once(engine, lambda: broker.depth(queue))
    print(f"\nrestarted with {at_restart} of {MESSAGES} stored; pipeline runs {runs}; "
          f"connector: {last_counts(log)}")


def restart_while_storing(own_postgres: OwnPostgres, engine: Engine) -> int:
    """Once the connector has stored its first batches: PostgreSQL stopped immediately, down for
    3 s, started; then wait for the connector to store the rest. How many were stored before."""
    wait_for(lambda: stored(engine) > 0, what="the connector storing")
    own_postgres.restart(down_s=3)
    at_restart = stored(engine)  # what was committed before the stop (the WAL kept it)
    assert 0 < at_restart < MESSAGES, f"restarted mid-ingest: {at_restart} of {MESSAGES} stored"
    wait_for(lambda: stored(engine) == MESSAGES, timeout=180, what="the connector to store the rest")
    return at_restart


def test_postgres_restarted_mid_ingest_keeps_each_things_order(
    own_postgres: OwnPostgres, broker: Broker, tmp_path: Path
) -> None:
    """The messages to one thing are stored in the order they were published, a restart of the
    database mid-ingest notwithstanding (issue 25 item 2: per-thing order kept). Before issue 25 a
    batch that failed went back to the queue and came back after deliveries the connector already
    held, so later messages of a thing were stored (and applied) before earlier ones (23–34 of
    1 000 things); now the batch waits in memory and is stored again."""
    url = own_postgres.create_ledger(f"order_{uuid.uuid4().hex[:8]}")
    engine = make_engine(url)
    _, process = consuming_published(broker, url, tmp_path, modifies(MESSAGES), "--batch-size", "200")
    try:
        restart_while_storing(own_postgres, engine)
        disordered = things_out_of_order(engine)
    finally:
        code, log = process.stop()
        engine.dispose()
    assert code == 0, log[-3000:]
    assert disordered == 0, f"{disordered} of {THINGS} things got a message stored before an earlier one"


def test_postgres_restarted_mid_merge_the_step_fails_and_its_retry_completes(
    own_postgres: OwnPostgres, ledger: tuple[str, Engine], broker: Broker, spark, tmp_path: Path
) -> None:
    url, engine = ledger
    queue, process = consuming_published(broker, url, tmp_path, modifies(MESSAGES))
    try:
        wait_for(lambda: stored(engine) == MESSAGES, timeout=180, what="every message stored (and held)")
        failure = interrupt_apply_twin_merge(own_postgres, spark, url, engine)
        assert isinstance(failure, DBAPIError), f"the interrupted run failed on the database: {failure!r}"
        assert scalar(engine, "SELECT count(*) FROM command_responses r JOIN signals s ON s.id = r.signal_id "
                              "WHERE s.source = :s", s=CONNECTION) == 0, "the merge was rolled back whole"
        assert scalar(engine, "SELECT count(*) FROM things WHERE revision <> 1") == 0
        runs = pipeline_until_settled(spark, url, engine, process)  # the retry
    finally:
        code, log = process.stop()
    assert code == 0, log[-3000:]
    assert_stored_applied_settled_once(engine, lambda: broker.depth(queue))
    print(f"\nthe interrupted run failed with {type(failure).__name__}; then pipeline runs {runs}; "
          f"connector: {last_counts(log)}")


def interrupt_apply_twin_merge(own_postgres: OwnPostgres, spark: Any, url: str, engine: Engine) -> BaseException | None:
    """Run the pipeline in a thread with one thing's row locked by the test: apply_twin's merge,
    having written its responses, waits on that row inside its transaction — and PostgreSQL is
    stopped immediately right then. What the run raised."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            run_pipeline(spark, url)
        except BaseException as problem:  # noqa: BLE001 — the test looks at it
            failures.append(problem)

    holder = engine.connect()
    try:
        holder.execute(text("SELECT 1 FROM things WHERE thing_id = :t FOR UPDATE"), {"t": thing_id(THINGS - 1)}).one()
        locker = holder.execute(text("SELECT pg_backend_pid()")).scalar_one()
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        blocked = wait_for(lambda: blocked_by(engine, locker) or not thread.is_alive(), timeout=300,
                           what="apply_twin's merge to reach the locked thing")
        assert isinstance(blocked, str) and "\nUPDATE things" in blocked, \
            f"the merge waits on the lock: {blocked!r}, {failures}"
        own_postgres.restart(down_s=2)
    finally:
        holder.invalidate()  # its session died with the server
        holder.close()
    thread.join(300)
    assert not thread.is_alive(), "the interrupted run returned"
    engine.dispose()  # the pool's sessions died too
    return failures[0] if failures else None


def test_postgres_restarted_mid_ingest_then_mid_merge_under_the_amqp10_connector_loses_nothing(
    own_postgres: OwnPostgres, ledger: tuple[str, Engine], spark, tmp_path: Path
) -> None:
    """Issue 41: the AMQP 1.0 transport through both restarts, on a RabbitMQ node of the test's own
    with its AMQP 1.0 plugin. Mid-ingest: the connector keeps its batch and its unsettled
    deliveries and stores them once the database is back. Mid-merge: the interrupted run rolls
    back whole, the deliveries stay held, the retry settles each once."""
    url, engine = ledger
    with OwnRabbitMQ(plugins=("rabbitmq_amqp1_0",)) as node:
        queue = f"ackstore-restart-{uuid.uuid4().hex[:8]}"
        publish_committed(node.url, queue, modifies(MESSAGES))
        process = Connector(url, queue, tmp_path, "--batch-size", "200", url=node.amqp10_url, amqp10=True)
        try:
            at_restart = restart_while_storing(own_postgres, engine)
            failure = interrupt_apply_twin_merge(own_postgres, spark, url, engine)
            assert isinstance(failure, DBAPIError), f"the interrupted run failed on the database: {failure!r}"
            assert scalar(engine, "SELECT count(*) FROM things WHERE revision <> 1") == 0, "rolled back whole"
            runs = pipeline_until_settled(spark, url, engine, process)
        finally:
            code, log = process.stop()
        assert code == 0, log[-3000:]
        assert "unavailable" in log, "the outage was said"
        assert_stored_applied_settled_once(engine, lambda: depth(node.url, queue), f"m-{{}}@{address(queue)}".format)
    print(f"\nAMQP 1.0: restarted with {at_restart} of {MESSAGES} stored, then mid-merge; pipeline runs {runs}; "
          f"connector: {last_counts(log)}")


def blocked_by(engine: Engine, pid: int) -> str | None:
    """The statement of a session waiting for a lock ``pid`` holds, if there is one."""
    with engine.connect() as conn:
        return conn.execute(text("SELECT query FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid)) LIMIT 1"),
                            {"pid": pid}).scalar()


def last_counts(log: str) -> str:
    """The connector's last counts line (for the report printed with -s)."""
    lines = [line for line in log.splitlines() if "received " in line]
    return lines[-1].split(": ", 2)[-1] if lines else "(no counts line)"


# --- the outage in the log ------------------------------------------------------------------------

LOG_MESSAGES = 1000
OUTAGE_S = 10
MOST_WARNINGS_PER_OUTAGE = 3


def test_a_database_outage_is_logged_once_not_every_50_ms(
    own_postgres: OwnPostgres, broker: Broker, tmp_path: Path
) -> None:
    """The connector holds deliveries and more arrive while PostgreSQL is down for ~10 s: it
    backs off and says so a few times, not once per loop (today: every ~50 ms). Then it goes on."""
    url = own_postgres.create_ledger(f"outage_{uuid.uuid4().hex[:8]}")
    engine = make_engine(url)
    queue, process = consuming_published(broker, url, tmp_path, modifies(LOG_MESSAGES)[: LOG_MESSAGES // 2])
    try:
        wait_for(lambda: stored(engine) == LOG_MESSAGES // 2, what="the first half stored (and held)")
        time.sleep(1)
        before = warnings(process.log())
        own_postgres.stop_immediately()
        time.sleep(OUTAGE_S / 2)
        publish_all(broker, queue, modifies(LOG_MESSAGES)[LOG_MESSAGES // 2:])  # arriving while it is down
        time.sleep(OUTAGE_S / 2)
        own_postgres.start()
        wait_for(lambda: stored(engine) == LOG_MESSAGES, timeout=120, what="the second half stored after the outage")
        during = warnings(process.log())[len(before):]
    finally:
        code, log = process.stop()
        engine.dispose()
    assert code == 0, log[-3000:]
    shown = "\n".join(during[:3] + ["..."] + during[-2:])
    assert len(during) <= MOST_WARNINGS_PER_OUTAGE, \
        f"{len(during)} warnings during one {OUTAGE_S} s outage of the database:\n{shown}"


def warnings(log: str) -> list[str]:
    return [line for line in log.splitlines() if re.search(r"\b(WARNING|ERROR)\b", line)]


# --- the broker restarted -------------------------------------------------------------------------


def test_the_broker_restarted_mid_ingest_the_connector_reconnects_and_loses_nothing(
    ledger: tuple[str, Engine], spark, tmp_path: Path
) -> None:
    """A RabbitMQ node of the test's own, killed (SIGKILL) while the connector holds deliveries
    and is still storing others, then started again: they come back and are recognised."""
    url, engine = ledger
    with OwnRabbitMQ() as node:
        queue = f"ackstore-restart-{uuid.uuid4().hex[:8]}"
        publish_committed(node.url, queue, modifies(MESSAGES))
        node.sync_metadata()  # now, not in restart(): its seconds would let the connector store everything first
        process = Connector(url, queue, tmp_path, "--batch-size", "200", url=node.url)
        try:
            wait_for(lambda: stored(engine) > 0, what="the connector storing")
            node.kill()
            node.start()
            at_restart = stored(engine)
            assert 0 < at_restart < MESSAGES, f"killed mid-ingest: {at_restart} of {MESSAGES} stored"
            wait_for(lambda: stored(engine) == MESSAGES, timeout=180, what="the connector to store the rest")
            runs = pipeline_until_settled(spark, url, engine, process)
        finally:
            code, log = process.stop()
        assert code == 0, log[-3000:]
        assert_stored_applied_settled_once(engine, lambda: depth(node.url, queue))
    print(f"\nbroker killed with {at_restart} of {MESSAGES} stored; pipeline runs {runs}; "
          f"connector: {last_counts(log)}")


def depth(url: str, queue: str) -> int:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        return connection.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        connection.close()
