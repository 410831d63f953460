"""Benchmark: QoS 1 end to end through a broker — published, stored, decided, settled.

    python -m benchmarks.broker --messages 100000                      # RabbitMQ
    python -m benchmarks.broker --protocol mqtt --messages 100000      # MQTT 5 (a Mosquitto of its own)
    python -m benchmarks.broker --protocol mqtt --sessions 4 --receive-maximum 2000 --pipeline-every 10
    python -m benchmarks.broker --protocol amqp10 --messages 100000    # AMQP 1.0, then 0.9.1 on the same node

``--protocol amqp10`` starts a RabbitMQ node of its own with the AMQP 1.0 plugin and measures the
same run twice on it, back to back in one process: through the AMQP 1.0 connector (``--credit``,
default 65 535: its in-flight bound), then through the AMQP 0.9.1 connector; last it prints the
ratios of the two (end to end, and CPU per message).

The MQTT runs (``benchmarks/transports.py``) publish to a topic the connectors' persistent
sessions subscribed beforehand, with PUBACK withheld until each decision; ``--sessions K`` runs K
connectors sharing one subscription (``$share/bench/<topic>``), each with a Receive Maximum of
``--receive-maximum``: the in-flight bound of decisions #100. ``--pipeline-every S`` runs the
pipeline at most every S seconds instead of back to back, so that a decision takes a known time T
and each session's bound, receive maximum / T, is what limits the rate; printed with it: the
bound, and the mean time from received to carried out (the measured T).

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
of the give-back, and (AMQP) the seconds from the stop until the queue holds them all ready again:
the broker's side of the give-back, which can take far longer than the connector's (RabbitMQ 3's
AMQP 1.0 plugin requeued 65 535 ``released`` deliveries one by one in about 12 minutes,
decisions #114).

Ditto's published figure for QoS-1 twin modifies is about 3 200/s on a cluster.

``--metrics`` runs each connector with ``--metrics-port`` (a free port) and scrapes its /metrics
after every pipeline run, so that the connector's CPU below includes its Prometheus metrics being
served and read (issue 38: at most 3 % of its CPU per message); printed with it: what the last
scrape counted.

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
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Sequence

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Row, text

from ackstore.ledger.database import database_url, make_engine
from ackstore.ledger.store import AckStore
from benchmarks.cpu import CpuWindow, peak_rss_mib, print_profile
from benchmarks.ingest import THINGS, messages
from benchmarks.pipeline import DEFAULT_SERVER, fresh_database, postmaster, spark_jvm
from benchmarks.transports import Amqp, Amqp10, Mqtt, own_amqp10_node, own_mosquitto

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_AMQP = "amqp://guest:guest@127.0.0.1:5672/"
DITTO_QOS1_MODIFIES_PER_S = 3200
GOAL_CPU_PER_MESSAGE_US = 200  # issue 40: 10 000 messages/s on 2 cores


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


def held_time(db_url: str) -> float:
    """Mean seconds from a measured message's arrival to its decision carried out: the T of the
    in-flight bound (decisions #100)."""
    return float(ledger_rows(db_url, "SELECT extract(epoch FROM avg(st.carried_out_at - s.received_at)) "
                                     "FROM settlements st JOIN signals s ON s.id = st.signal_id "
                                     "WHERE s.source = 'bench' AND st.carried_out_at IS NOT NULL")[0][0] or 0.0)


def settled_count(db_url: str) -> int:
    return ledger_rows(db_url, "SELECT count(*) FROM settlements st JOIN signals s ON s.id = st.signal_id "
                               "WHERE st.carried_out_at IS NOT NULL AND s.source = 'bench'")[0][0]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def with_metrics(commands: list[list[str]]) -> tuple[list[list[str]], list[int]]:
    """Each connector's command serving its metrics on a port of its own; the ports."""
    ports = [free_port() for _ in commands]
    return [[*command, "--metrics-port", str(port)] for command, port in zip(commands, ports)], ports


def scrape(ports: list[int], before: dict[str, float]) -> dict[str, float]:
    """The connectors' message counts by category, summed over their /metrics (as Prometheus reads
    them); ``before`` while one of them does not serve yet (it is still starting)."""
    counted: dict[str, float] = {}
    for port in ports:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
                text = answer.read().decode()
        except OSError:
            return before
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "ackstore_connection_messages_total":
                    category = sample.labels["category"]
                    counted[category] = counted.get(category, 0.0) + sample.value
    return counted


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--protocol", choices=("amqp", "mqtt", "amqp10"), default="amqp")
    parser.add_argument("--credit", type=int, default=65535, help="AMQP 1.0: the connector's link credit")
    parser.add_argument("--batch", type=int, default=1000, help="the connector's messages per ledger transaction")
    parser.add_argument("--prefetch", type=int, default=0, help="AMQP: the connector's prefetch (0: no limit)")
    parser.add_argument("--amqp", default=os.environ.get("ACKSTORE_BENCH_AMQP", DEFAULT_AMQP))
    parser.add_argument("--mqtt", default=os.environ.get("ACKSTORE_BENCH_MQTT"),
                        help="an MQTT broker's URL (default: a Mosquitto of the benchmark's own)")
    parser.add_argument("--sessions", type=int, default=1, help="MQTT: connectors sharing one subscription")
    parser.add_argument("--receive-maximum", type=int, default=65535, help="MQTT: each session's in-flight bound")
    parser.add_argument("--pipeline-every", type=float, default=0.0,
                        help="run the pipeline at most every this many seconds (default: back to back)")
    parser.add_argument("--server", default=os.environ.get("ACKSTORE_BENCH_SERVER", DEFAULT_SERVER))
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--metrics", action="store_true",
                        help="connectors serve their metrics (--metrics-port), scraped after every pipeline run")
    args = parser.parse_args(argv)
    if args.protocol == "amqp":
        return measure(args, Amqp(args.amqp))[0]
    if args.protocol == "amqp10":
        return both_amqp_versions(args)
    if args.mqtt:
        return measure(args, Mqtt(args.mqtt, None))[0]
    with own_mosquitto() as (url, pid):
        return measure(args, Mqtt(url, pid))[0]


def both_amqp_versions(args: argparse.Namespace) -> int:
    """The run through AMQP 1.0, then through AMQP 0.9.1, on one node of the benchmark's own; their ratios."""
    with own_amqp10_node() as node:
        _, seconds_10, cpu_10 = measure(args, Amqp10(node.url, node.amqp10_url, args.credit))
        print()
        args.protocol = "amqp"
        _, seconds_091, cpu_091 = measure(args, Amqp(node.url))
    print(f"\nAMQP 1.0 vs AMQP 0.9.1 on one node, {args.messages:,} messages: end to end {seconds_10 / seconds_091:.2f}x "
          f"({seconds_10:.1f} s vs {seconds_091:.1f} s); CPU per message {cpu_10 / cpu_091:.2f}x "
          f"({cpu_10:.0f} µs vs {cpu_091:.0f} µs)")
    return 0


def measure(args: argparse.Namespace, transport: Amqp | Mqtt) -> tuple[int, float, float]:
    """One run: (exit status, seconds end to end, our CPU µs per message)."""
    n, run = args.messages, uuid.uuid4().hex[:8]

    from jobs import pipeline
    from jobs.settings import PipelineSettings
    from jobs.spark import spark_session

    raw_address, address = f"ackstore-bench-raw-{run}", f"ackstore-bench-{run}"
    server_pid = postmaster(args.server)
    # the connectors' logs go to a file: a pipe nobody reads fills up and stalls a connector
    with fresh_database(args.server, "broker_raw") as raw_url, fresh_database(args.server, "broker") as url, \
            tempfile.TemporaryFile("w+") as log, tempfile.TemporaryDirectory() as workdir:
        commands = [[sys.executable, "-m", "ackstore.cli", "--database-url", url, *command, "--poll", "1"]
                    for command in transport.connectors(address, args.sessions, args.batch, args.prefetch,
                                                        args.receive_maximum, Path(workdir))]
        commands, metrics_ports = with_metrics(commands) if args.metrics else (commands, [])
        scraped: dict[str, float] = {}
        try:
            raw = transport.raw_run(raw_url, raw_address, messages(n, f"r{run}"), args.batch, args.prefetch)
            transport.prepare(address, commands)
            published = transport.publish(address, messages(n, f"q{run}"))
            spark = spark_session("ackstore-bench-broker", cores=args.cores)
            settings = PipelineSettings(database_url=url, partitions=max(2, args.cores * 2))
            seed_things(spark, settings, url)
            started_at = ledger_now(url)
            cpu = CpuWindow({"postgres": [server_pid], transport.name: [transport.broker_pid()],
                             "spark": [spark_jvm(spark)]}).start()
            started = time.perf_counter()
            connectors = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log, text=True)
                          for command in commands]
            for connector in connectors:
                cpu.add("connector", connector.pid)
            runs = 0
            while settled_count(url) < n:
                if any(connector.poll() is not None for connector in connectors):
                    log.seek(0)
                    raise SystemExit(f"a connector exited: {log.read()[-3000:]}")
                began = time.perf_counter()
                pipeline.run(spark, PipelineSettings(database_url=url, partitions=settings.partitions))
                runs += 1
                scraped = scrape(metrics_ports, scraped) if metrics_ports else scraped
                time.sleep(max(0.0, args.pipeline_every - (time.perf_counter() - began)))
            end_to_end = time.perf_counter() - started
            cpu.stop()
            stages = stage_seconds(url, started_at)
            how = answered(url)
            held = held_time(url)
            # The stop: as many again stored and held (no pipeline runs), then given back. An MQTT
            # session holds at most its in-flight bound; the rest waits in the broker.
            second_at = ledger_now(url)
            transport.publish(address, messages(n, f"s{run}"))
            holding = transport.holds_at_most(n, args.sessions, args.receive_maximum)
            while held_count(url, second_at) < holding:
                time.sleep(0.2)
            time.sleep(1.0)  # the last batch's holds registered
            time.sleep(2.0 if args.protocol in ("mqtt", "amqp10") else 0.0)  # anything past the in-flight bound would come now
            held_when_stopped = held_count(url, second_at)
            stopping = time.perf_counter()
            for connector in connectors:
                connector.terminate()
            for connector in connectors:
                connector.wait(timeout=900)
            stop = time.perf_counter() - stopping
            back = transport.ready_again(address, n)  # the broker's side: until it can deliver them again
            spark.stop()
        finally:
            transport.delete(raw_address)
            transport.delete(address)

    print(f"{args.protocol}: messages={n:,} modifies of {THINGS:,} existing things, answered {how}; "
          f"batch={args.batch:,} sessions={args.sessions} pipeline runs={runs} cores={args.cores} "
          f"metrics={'served' if args.metrics else 'not served'}; "
          f"published in {published:.1f} s (not counted)")
    for stage in ("stored", "decided", "settled"):
        print(f"    {stage:<8} after {stages[stage]:7.1f} s  {n / stages[stage]:10,.0f} messages/s")
    print(f"    end to end (observed by the benchmark) {end_to_end:7.1f} s  {n / end_to_end:10,.0f} messages/s")
    print(f"    connector stop holding {holding:,} undecided deliveries {stop:7.1f} s  {holding / stop:10,.0f} given back/s")
    if back is not None:
        print(f"    all {n:,} ready in the queue again {back:7.1f} s after the stop")
    print(f"    raw consumer (insert batch, settle after commit) {raw:7.1f} s  {n / raw:10,.0f} messages/s")
    print(f"    ratio end-to-end/raw: {end_to_end / raw:.2f}x;  vs Ditto's ~{DITTO_QOS1_MODIFIES_PER_S:,}/s: "
          f"{n / end_to_end / DITTO_QOS1_MODIFIES_PER_S:.2f}x")
    if args.protocol == "amqp10":
        print(f"    in flight: link credit {args.credit:,}; mean received -> carried out T = {held:.1f} s; "
              f"bound credit / T = {args.credit / held if held else float('inf'):,.0f} messages/s; "
              f"held undecided when stopped: {held_when_stopped:,} of {n:,} published")
    if args.protocol == "mqtt":
        bound = args.sessions * args.receive_maximum / held if held else float("inf")
        print(f"    in flight: {args.sessions} session(s) x receive maximum {args.receive_maximum:,}; mean received -> "
              f"carried out T = {held:.1f} s; bound sessions x maximum / T = {bound:,.0f} messages/s; "
              f"held undecided when stopped (no PUBACK yet): {held_when_stopped:,} of {n:,} published")
    if metrics_ports:
        print("    connector metrics, last scrape: " + ", ".join(f"{k} {v:,.0f}" for k, v in scraped.items()))
    ours = print_profile("CPU, end to end:", cpu, n, "message",
                         ["connector", "postgres", transport.name, "spark", "benchmark"], server_pid,
                         {database_url(url).database})
    print(f"    CPU per message: {ours:.0f} µs (goal ≤ {GOAL_CPU_PER_MESSAGE_US})")
    print("    peak RSS: " + ", ".join(f"{name} {mib:,.0f} MiB" for name, mib in peak_rss_mib().items())
          + " (the children waited for: the connectors, and a broker the benchmark started)")
    return 0, end_to_end, ours


if __name__ == "__main__":
    raise SystemExit(main())
