"""Benchmark: QoS 1 end to end through RabbitMQ — published, stored, decided, settled.

    python -m benchmarks.broker --messages 100000

``--messages`` twin modifies of 10 000 things that exist (created and applied before the clock
starts, so each modify is the common path: 204, twin-persisted, ack) are published to a fresh
queue. Then the connector (``ackstore connect amqp``, a subprocess, requesting ``twin-persisted``
for every message) and the pipeline (all steps, in a loop, on a local Spark session started
beforehand) run until every delivery is settled on the broker. Printed, from the ledger's own
timestamps: messages/s into the ledger, decided, and settled (end to end), with the prefetch and
batch size used; how the messages were answered (the statuses of their results); and the raw
baseline of the same run — a bare consumer that inserts each batch into a plain table and
acknowledges it after the commit (store-then-ack, no pipeline).

Then the stop: as many messages again are published and stored (held, undecided), and the
connector is stopped; it gives them back to the queue. Printed: the stop's seconds and the rate
of the give-back.

Ditto's published figure for QoS-1 twin modifies is about 3 200/s on a cluster.

CPU (``benchmarks.cpu``, from /proc), over the end-to-end window (from the connector's start to
the last settlement seen): µs of CPU per message of ``connector`` (the ``ackstore connect amqp``
subprocess), ``postgres`` (the whole server: postmaster, backends, WAL writer, checkpointer,
autovacuum — another session's queries count there too), ``rabbitmq`` (the node's beam.smp,
found by the AMQP port, with its children — shared with other sessions too), ``spark`` (the
local session's JVM and its Python workers: the pipeline's jobs), ``benchmark`` (this process:
the pipeline's driver, whose steps run their SQL from here, and the benchmark's polls),
``other`` (the machine's busy time none of them accounts for: other sessions, interrupts) and
``ours`` (every component but other, less postgres's live backends of other databases). Then the
machine's busy share of its cores; messages/s per busy core ("the figure per core"); and the
ceiling ours implies were it alone on the machine: cores / ours CPU seconds per message. Last,
postgres by whom it served: the component holding each live backend's connection (connector,
benchmark, spark), other sessions' live backends (``other databases``, ``unknown clients``), the
server's own processes (``server``) and ``exited``: connections opened and closed inside the
window (Spark's JDBC reads and its workers' COPY open theirs per task) with everyone's ended
backends and autovacuum workers.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Sequence

import pika
from sqlalchemy import Row, text

from ackstore.ledger.database import database_url, make_engine
from ackstore.ledger.store import AckStore
from benchmarks.cpu import CpuWindow, listener_pid, print_profile
from benchmarks.ingest import THINGS, messages, raw_engine, raw_insert
from benchmarks.pipeline import DEFAULT_SERVER, fresh_database, postmaster, spark_jvm

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_AMQP = "amqp://guest:guest@127.0.0.1:5672/"
DITTO_QOS1_MODIFIES_PER_S = 3200


def publish(url: str, queue: str, items: list[tuple[str, bytes]]) -> float:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.queue_declare(queue, durable=True)
    started = time.perf_counter()
    for message_id, body in items:
        channel.basic_publish("", queue, body, pika.BasicProperties(message_id=message_id, delivery_mode=2))
    connection.close()
    return time.perf_counter() - started


def delete_queue(url: str, queue: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    connection.channel().queue_delete(queue)
    connection.close()


def raw_consumer(amqp: str, db_url: str, queue: str, count: int, batch: int, prefetch: int) -> float:
    """Consume ``count`` messages, insert each batch into a bare table, ack after the commit."""
    engine = raw_engine(db_url)
    connection = pika.BlockingConnection(pika.URLParameters(amqp))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=prefetch)
    pending: list[tuple[int, str, bytes]] = []
    done = 0
    started = time.perf_counter()
    for method, properties, body in channel.consume(queue, inactivity_timeout=0.05):
        if method is not None:
            pending.append((method.delivery_tag, properties.message_id, body))
        if pending and (len(pending) >= batch or method is None or done + len(pending) >= count):
            raw_insert(engine, [(message_id, body) for _, message_id, body in pending])
            channel.basic_ack(pending[-1][0], multiple=True)
            done += len(pending)
            pending = []
        if done >= count:
            break
    seconds = time.perf_counter() - started
    channel.cancel()
    connection.close()
    engine.dispose()
    return seconds


def seed_things(spark, settings, url: str) -> None:
    """The 10 000 things, created and applied: the measured modifies find them (204)."""
    from jobs import pipeline

    store = AckStore(make_engine(url))
    creates = [{"topic": f"org.bench/thing-{i}/things/twin/commands/modify", "path": "/",
                "headers": {"correlation-id": f"seed-{i}", "requested-acks": []},
                "value": {"thingId": f"org.bench:thing-{i}", "attributes": {"counter": 0}}}
               for i in range(THINGS)]
    for start in range(0, THINGS, 1000):
        answers = store.submit_many(creates[start:start + 1000], api="connectivity", source="seed",
                                    source_message_ids=[f"seed-{i}" for i in range(start, start + 1000)])
        assert all(a["status"] == 202 for a in answers), answers[:3]
    pipeline.run(spark, settings)
    with store.engine.connect() as conn:
        made = conn.execute(text("SELECT count(*) FROM things")).scalar_one()
    store.engine.dispose()
    if made != THINGS:
        raise SystemExit(f"seeding made {made} things, not {THINGS}")


def ledger_rows(db_url: str, sql: str, params: dict[str, object] | None = None) -> list[Row]:
    """One read of the ledger on a connection of its own (the benchmark's own looks, not timed)."""
    engine = make_engine(db_url)
    with engine.connect() as conn:
        rows = conn.execute(text(sql), params or {}).all()
    engine.dispose()
    return rows


def ledger_now(db_url: str) -> object:
    """The ledger's clock: what its timestamps are compared with."""
    return ledger_rows(db_url, "SELECT clock_timestamp()")[0][0]


def answered(db_url: str) -> str:
    """How the measured messages were answered: their results' statuses, counted."""
    rows = ledger_rows(db_url, "SELECT r.status, count(*) FROM signals s JOIN request_results r ON r.signal_id = s.id "
                               "WHERE s.source = 'bench' GROUP BY r.status ORDER BY r.status")
    return ", ".join(f"{count:,} × {status}" for status, count in rows) or "none"


def held_count(db_url: str, since: object) -> int:
    return ledger_rows(db_url, "SELECT count(*) FROM signals WHERE source = 'bench' AND received_at > :t",
                       {"t": since})[0][0]


def stage_seconds(db_url: str, started_at: object) -> dict[str, float]:
    """Seconds from the start to the last message stored, decided and settled (the ledger's clocks)."""
    (row,) = ledger_rows(db_url,
        "SELECT extract(epoch FROM (SELECT max(received_at) FROM signals WHERE source = 'bench') - :t0),"
        "       extract(epoch FROM (SELECT max(r.decided_at) FROM request_results r JOIN signals s"
        "                               ON s.id = r.signal_id WHERE s.source = 'bench') - :t0),"
        "       extract(epoch FROM (SELECT max(carried_out_at) FROM settlements) - :t0)", {"t0": started_at})
    return {"stored": float(row[0]), "decided": float(row[1]), "settled": float(row[2])}


def settled_count(db_url: str) -> int:
    return ledger_rows(db_url, "SELECT count(*) FROM settlements st JOIN signals s ON s.id = st.signal_id "
                               "WHERE st.carried_out_at IS NOT NULL AND s.source = 'bench'")[0][0]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000, help="the connector's messages per ledger transaction")
    parser.add_argument("--prefetch", type=int, default=0, help="the connector's prefetch (0: no limit)")
    parser.add_argument("--amqp", default=os.environ.get("ACKSTORE_BENCH_AMQP", DEFAULT_AMQP))
    parser.add_argument("--server", default=os.environ.get("ACKSTORE_BENCH_SERVER", DEFAULT_SERVER))
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args(argv)
    n, run = args.messages, uuid.uuid4().hex[:8]

    from jobs import pipeline
    from jobs.settings import PipelineSettings
    from jobs.spark import spark_session

    raw_queue, queue = f"ackstore-bench-raw-{run}", f"ackstore-bench-{run}"
    server_pid, amqp_port = postmaster(args.server), pika.URLParameters(args.amqp).port
    # the connector's log goes to a file: a pipe nobody reads fills up and stalls the connector
    with fresh_database(args.server, "broker_raw") as raw_url, fresh_database(args.server, "broker") as url, \
            tempfile.TemporaryFile("w+") as log:
        try:
            publish(args.amqp, raw_queue, messages(n, f"r{run}"))
            raw = raw_consumer(args.amqp, raw_url, raw_queue, n, args.batch, args.prefetch)
            published = publish(args.amqp, queue, messages(n, f"q{run}"))
            spark = spark_session("ackstore-bench-broker", cores=args.cores)
            settings = PipelineSettings(database_url=url, partitions=max(2, args.cores * 2))
            seed_things(spark, settings, url)
            started_at = ledger_now(url)
            cpu = CpuWindow({"postgres": [server_pid], "rabbitmq": [listener_pid(amqp_port)],
                             "spark": [spark_jvm(spark)]}).start()
            started = time.perf_counter()
            connector = subprocess.Popen(
                [sys.executable, "-m", "ackstore.cli", "--database-url", url, "connect", "amqp", "--url", args.amqp,
                 "--connection-id", "bench", "--queue", queue, "--requested-acks", "twin-persisted",
                 "--batch-size", str(args.batch), "--prefetch", str(args.prefetch), "--poll", "1"],
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log, text=True)
            cpu.add("connector", connector.pid)
            runs = 0
            while settled_count(url) < n:
                if connector.poll() is not None:
                    log.seek(0)
                    raise SystemExit(f"the connector exited: {log.read()[-3000:]}")
                pipeline.run(spark, PipelineSettings(database_url=url, partitions=settings.partitions))
                runs += 1
            end_to_end = time.perf_counter() - started
            cpu.stop()
            stages = stage_seconds(url, started_at)
            how = answered(url)
            # The stop: as many again stored and held (no pipeline runs), then given back.
            second_at = ledger_now(url)
            publish(args.amqp, queue, messages(n, f"s{run}"))
            while held_count(url, second_at) < n:
                time.sleep(0.2)
            time.sleep(1.0)  # the last batch's holds registered
            stopping = time.perf_counter()
            connector.terminate()
            connector.wait(timeout=900)
            stop = time.perf_counter() - stopping
            spark.stop()
        finally:
            delete_queue(args.amqp, raw_queue)
            delete_queue(args.amqp, queue)

    print(f"messages={n:,} modifies of {THINGS:,} existing things, answered {how}; prefetch={args.prefetch:,} "
          f"batch={args.batch:,} pipeline runs={runs} cores={args.cores}; published in {published:.1f} s (not counted)")
    for stage in ("stored", "decided", "settled"):
        print(f"    {stage:<8} after {stages[stage]:7.1f} s  {n / stages[stage]:10,.0f} messages/s")
    print(f"    end to end (observed by the benchmark) {end_to_end:7.1f} s  {n / end_to_end:10,.0f} messages/s")
    print(f"    connector stop holding {n:,} undecided deliveries {stop:7.1f} s  {n / stop:10,.0f} given back/s")
    print(f"    raw consumer (insert batch, ack after commit) {raw:7.1f} s  {n / raw:10,.0f} messages/s")
    print(f"    ratio end-to-end/raw: {end_to_end / raw:.2f}x;  vs Ditto's ~{DITTO_QOS1_MODIFIES_PER_S:,}/s: "
          f"{n / end_to_end / DITTO_QOS1_MODIFIES_PER_S:.2f}x")
    print_profile("CPU, end to end:", cpu, n, "message", ["connector", "postgres", "rabbitmq", "spark", "benchmark"],
                  server_pid, {database_url(url).database})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
