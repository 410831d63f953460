"""``ackstore demo``: set up the ledger, submit sample signals that between them meet every kind
of outcome, run the Airflow DAG once through Airflow (``airflow dags test``: its task runs the seven
steps in-process, on local Spark), and show what each step did, what the requesters are told, one
signal's timeline, and the audit: the settlement status, latency, watermarks and late acks; and
last, the handful of lines of the ledger's metrics an operator watches (docs/metrics.md).

The scenario: a thing created and modified; a custom ack in time, and one late (after its
request timed out: 408); a subscriber whose filter the signal does not pass (a weak ack); a live
message answered by ``respond``; a command from a connection whose ack failed (503: redeliver),
redelivered as attempt 2; and, when RabbitMQ answers on 127.0.0.1:5672 and an MQTT broker on
127.0.0.1:1883 (or ``$ACKSTORE_DEMO_MQTT_URL``), a message through each real connector, settled on
its broker after the run.

With nothing configured it all happens on the embedded PostgreSQL in ``./.ackstore`` — the
ledger and Airflow's metadata database side by side.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable, Iterator

from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import StaticPool

from ackstore.ledger import migrate, settlements
from ackstore.ledger.database import (
    ackstore_home,
    embedded_data_dir,
    make_engine,
    resolve_url,
    uses_embedded,
)
from ackstore.ledger.database_url import DatabaseUrl
from ackstore.ledger.store import AckStore
from ackstore.rules.labels import TWIN_PERSISTED

SUBSCRIBER = "demo-auditor"
CUSTOM_LABEL = "demo:audit"
FILTERED = "demo-filtered"  # its filter passes no lamp: its label is acknowledged weakly
FILTERED_LABEL = "demo-filtered:seen"
RESPONDER = "demo-responder"
CONNECTION = "demo-amqp"  # a connection the demo plays itself (its redelivery)
RABBITMQ = "demo-rabbitmq"  # the real connector, when the broker is up
RABBITMQ_QUEUE = "ackstore-demo"
MQTT = "demo-mqtt"  # the real MQTT connector (its client id too), when a broker answers
MQTT_URI = os.environ.get("ACKSTORE_DEMO_MQTT_URL", "mqtt://127.0.0.1:1883")  # the broker the demo goes through
MQTT_TOPIC = "ackstore-demo/commands"
AMQP10 = "demo-amqp10"  # the real AMQP 1.0 connector, when a broker speaks AMQP 1.0 there
# a RabbitMQ with its rabbitmq_amqp1_0 plugin (scripts/ensure-rabbitmq.sh enables it on the machine's)
AMQP10_URI = os.environ.get("ACKSTORE_DEMO_AMQP10_URL", "amqp://guest:guest@127.0.0.1:5672")
AMQP10_QUEUE = "ackstore-demo-amqp10"
LAMP = "org.acme/lamp-1/things"  # the thing every sample signal is about (samples/*.json too)


def sample(name: str) -> bytes:
    return resources.files("ackstore").joinpath("samples", name).read_bytes()


@dataclass(frozen=True)
class Broker:
    """A real broker the demo goes through: its name, the connector class and connection config,
    and what settling a message sends it."""

    name: str
    connector: Any  # AmqpConnector, MqttConnector or Amqp10Connector
    connection: Any  # its ConnectionConfig
    settles_with: str


@dataclass
class Scenario:
    """The correlation ids of what the demo submitted, by what they show."""

    run: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    ids: dict[str, str] = field(default_factory=dict)
    redelivered_signal: int | None = None
    brokers: list[Broker] = field(default_factory=list)  # those that answered, a message held on each

    def cid(self, name: str) -> str:
        return self.ids.setdefault(name, f"demo-{name}-{self.run}")


def run_demo(database_url: str | None = None) -> int:
    started = time.perf_counter()
    url = resolve_url(database_url)
    engine = make_engine(url)
    print(f"ledger database: {DatabaseUrl.parse(url).redacted()}")  # the one rule that shows a database URL
    if uses_embedded(database_url):
        print(f"(the embedded PostgreSQL, data in {embedded_data_dir()})")
    migrate.upgrade(engine)
    print(f"schema revision: {migrate.current_revision(engine)}")
    store = AckStore(engine)
    try:
        scenario = Scenario()
        _submit_samples(store, scenario)
        print(f"\n== undecided until the DAG ran: {store.result(scenario.cid('modified'))}")
        with _over_http(url, database_url, scenario) as held:
            if not _run_dag(url):
                return 1
            held()
        _print_steps(store)
        _after_the_run(store, scenario)
        _print_audit(store, scenario)
        _print_metrics(store)
        print(f"\n(demo took {time.perf_counter() - started:.0f} s)")
    finally:
        store.close()
    return 0


def _submit_samples(store: AckStore, scenario: Scenario) -> None:
    """Every kind of signal the audit shows, submitted before the DAG runs."""
    _step("declare the subscribers: an auditor, one whose filter passes no lamp, a live responder", [
        store.declare(SUBSCRIBER, [CUSTOM_LABEL]),
        store.declare(FILTERED, [FILTERED_LABEL], filter="eq(attributes/room,\"cellar\")"),
        store.declare(RESPONDER, [], channels=["live"]),
    ])
    created = json.loads(sample("create-lamp.json"))
    created["headers"]["correlation-id"] = scenario.cid("created")
    _step("submit the thing (modify at /: created if missing)", store.submit(created))
    command = json.loads(sample("modify-lamp.json"))
    command["headers"]["correlation-id"] = scenario.cid("modified")
    print("\nsample command:\n" + json.dumps(command, indent=2))
    _step("submit it", store.submit(command))
    _another_login_acks(store, scenario)
    _step(f"the subscriber acknowledges {CUSTOM_LABEL} in time",
          store.acknowledge(SUBSCRIBER, _ack(CUSTOM_LABEL, scenario.cid("modified"), 200)))
    filtered = _modify(scenario.cid("filtered"), "/attributes/dimmed", True, [TWIN_PERSISTED, FILTERED_LABEL])
    _step(f"a command asking for {FILTERED_LABEL} (the filter of {FILTERED} does not pass it: a weak ack)",
          store.submit(filtered))
    timed_out = _modify(scenario.cid("timed-out"), "/attributes/brightness", 40, [CUSTOM_LABEL], timeout="1s")
    _step(f"a command whose {CUSTOM_LABEL} will come too late (timeout 1s)", store.submit(timed_out))
    question = {"topic": f"{LAMP}/live/messages/ask", "path": "/inbox/messages/ask",
                "headers": {"correlation-id": scenario.cid("live"), "timeout": "2m"}, "value": {"on": "?"}}
    _step("a live message to the lamp", store.submit(question))
    (handed,) = [m for m in store.pull(RESPONDER) if m["headers"].get("correlation-id") == scenario.cid("live")]
    _step(f"{RESPONDER} pulls it and responds", store.respond(RESPONDER, {
        "topic": handed["topic"], "path": "/outbox/messages/ask", "status": 200, "value": {"on": True},
        "headers": {"correlation-id": scenario.cid("live"), "ack-token": handed["headers"]["ack-token"]}}))
    failing = _modify(scenario.cid("redelivered"), "/attributes/dimmed", False, [CUSTOM_LABEL])
    (stored,) = store.ingest([failing], api="connectivity", source=CONNECTION,
                             source_message_ids=[scenario.cid("redelivered")])
    scenario.redelivered_signal = stored.signal_id
    _step(f"a command from the connection {CONNECTION!r}, its {CUSTOM_LABEL} ack failing (503: redeliver)",
          store.acknowledge(SUBSCRIBER, _ack(CUSTOM_LABEL, scenario.cid("redelivered"), 503)))
    scenario.brokers = [b for b in (_through_rabbitmq(store, scenario), _through_mqtt(store, scenario),
                                    _through_amqp10(store, scenario)) if b]


def _after_the_run(store: AckStore, scenario: Scenario) -> None:
    """What happens after the DAG run: answers read, a late ack, a redelivery, the brokers settled."""
    _step("what the first requester is told (the thing created)", store.result(scenario.cid("created")))
    _step("what the second requester is told (the modify, its acks in time)", store.result(scenario.cid("modified")))
    _step(f"the weak ack of {FILTERED_LABEL} (its subscriber would not have received the command)",
          [ack for ack in store.stored_signal(scenario.cid("filtered"))["acks"] if ack["label"] == FILTERED_LABEL])
    _step("the live message's requester: the response", store.result(scenario.cid("live")))
    _step("the timed-out command: 408, its ack missing", store.result(scenario.cid("timed-out")))
    _step(f"{CUSTOM_LABEL} for it arrives now, late", store.acknowledge(
        SUBSCRIBER, _ack(CUSTOM_LABEL, scenario.cid("timed-out"), 200)))
    with store.engine.begin() as conn:  # what the connector does with a redeliver decision
        settlements.record_latest(conn, {scenario.redelivered_signal})
    again = _modify(scenario.cid("redelivered"), "/attributes/dimmed", False, [CUSTOM_LABEL])
    (copy,) = store.ingest([again], api="connectivity", source=CONNECTION,
                           source_message_ids=[scenario.cid("redelivered")])
    print(f"\n== {CONNECTION} redelivers the message: attempt 2 opened, waiting for a decision: "
          f"{copy.awaits_decision}")
    for broker in scenario.brokers:
        _step(f"the {broker.name} connector settles its message on the broker ({broker.settles_with})",
              _connector_once(store, broker))
    _step("search: eq(features/lamp/properties/on,true)", store.search("eq(features/lamp/properties/on,true)"))


def _print_audit(store: AckStore, scenario: Scenario) -> None:
    from ackstore.reporting.registry import REPORTS
    from ackstore.reporting.terminal import render_timeline

    redelivered = scenario.cid("redelivered")
    print(f"\n== the timeline of the redelivered command (ackstore show {redelivered})")
    shown = store.show(redelivered)
    render_timeline(shown, shown["timeline"])
    for name in ("settlement", "latency", "watermarks", "late-acks"):
        print(f"\n== ackstore report {name}" + (" --since 1h" if name != "settlement" else ""))
        REPORTS[name].run(store, as_json=False, since=None if name == "settlement" else "1h")
    print(f"\nits whole stored record: ackstore show {redelivered} --json")
    print("the open work: ackstore report audit; labels: ackstore report labels")
    print("the Ledger page inside Airflow's UI: make airflow, log in as admin (the password is printed), "
          "open Ledger in the navigation")


SCRAPED = ("ackstore_signals_stored_total", "ackstore_requests_decided_total",
           "ackstore_settlement_decisions_total", "ackstore_oldest_unsettled_age_seconds", "ackstore_queue_pending",
           "ackstore_seal_last_number", "ackstore_seal_last_timestamp_seconds", "ackstore_ledger_up")


def metric_lines(engine: Any, names: tuple[str, ...] = SCRAPED) -> list[str]:
    """The samples of ``names`` in what a scrape of ``ackstore metrics`` serves (Prometheus's text,
    the same registry), in its order; a counter's only where it counted (every known source's is
    served from 0 too)."""
    from prometheus_client import generate_latest

    from ackstore.reporting.metrics import registry_for

    served = generate_latest(registry_for(engine)).decode()
    return [line for line in served.splitlines()
            if not line.startswith("#") and line.split("{", 1)[0].split(" ", 1)[0] in names
            and not (line.split("{", 1)[0].endswith("_total") and float(line.rsplit(" ", 1)[1]) == 0)]


def _print_metrics(store: AckStore) -> None:
    print("\n== what Prometheus would scrape (ackstore metrics)")
    for line in metric_lines(store.engine):
        print(f"   {line}")
    print("(all of them: make airflow serves them on 9464, ackstore metrics on 9463; docs/metrics.md)")


def _modify(correlation_id: str, path: str, value: Any, requested: list[str], timeout: str = "2m") -> dict[str, Any]:
    return {"topic": f"{LAMP}/twin/commands/modify", "path": path, "value": value,
            "headers": {"correlation-id": correlation_id, "requested-acks": requested, "timeout": timeout}}


def _ack(label: str, correlation_id: str, status: int) -> dict[str, Any]:
    return {"topic": f"{LAMP}/twin/acks/{label}",
            "headers": {"correlation-id": correlation_id}, "path": "/", "status": status,
            "value": {"audited": status < 300}}


def _through_rabbitmq(store: AckStore, scenario: Scenario) -> Broker | None:
    """A message through RabbitMQ and the real connector, when the broker answers; None (and a
    line saying why) when it does not."""
    import pika

    from ackstore.connectors import config
    from ackstore.connectors.amqp import AmqpConnector
    from ackstore.connectors.publish import publish_lines

    broker = Broker("RabbitMQ", AmqpConnector, config.simple(RABBITMQ, RABBITMQ_QUEUE, [TWIN_PERSISTED]), "basic.ack")
    uri = broker.connection.uri
    try:
        probe = pika.BlockingConnection(pika.URLParameters(uri + "?connection_attempts=1&socket_timeout=3"))
    except pika.exceptions.AMQPError as error:
        return _skipped(broker, type(error).__name__)
    try:
        probe.channel().queue_declare(RABBITMQ_QUEUE, durable=True)
    finally:
        probe.close()
    message = _modify(scenario.cid("rabbitmq"), "/attributes/floor", 3, [TWIN_PERSISTED])
    _step(f"publish a command to RabbitMQ's queue {RABBITMQ_QUEUE!r}",
          publish_lines(uri, RABBITMQ_QUEUE, [json.dumps(message).encode()]))
    return _stored(store, broker, "held on the broker until decided")


def _through_mqtt(store: AckStore, scenario: Scenario) -> Broker | None:
    """A message through an MQTT 5 broker and the real connector, when one answers at
    ``MQTT_URI``; None (and a line saying why) when none does. The connector's persistent session
    keeps only what is published once it subscribed: it runs once before the publish, then again
    to store the message."""
    from ackstore.connectors import config
    from ackstore.connectors.mqtt import MqttConnector
    from ackstore.connectors.publish import publish_mqtt_lines

    connection = config.simple_mqtt(MQTT, [MQTT_TOPIC], [TWIN_PERSISTED], MQTT_URI, config.MQTT5)
    broker = Broker("MQTT", MqttConnector, connection, "PUBACK")
    probe = publish_mqtt_lines(MQTT_URI, MQTT_TOPIC, [], config.MQTT5)  # no lines: only whether CONNECT is answered
    if probe["status"] != 200:
        return _skipped(broker, probe["message"].split(": ", 1)[-1].rstrip("."))
    _step(f"the connector {MQTT!r} subscribes to {MQTT_TOPIC!r} (its persistent session keeps what is "
          "published from now on)", _connector_once(store, broker))
    message = _modify(scenario.cid("mqtt"), "/features/lamp/properties/color", "warm", [TWIN_PERSISTED])
    _step(f"publish a command to the MQTT topic {MQTT_TOPIC!r} (MQTT 5, QoS 1)",
          publish_mqtt_lines(MQTT_URI, MQTT_TOPIC, [json.dumps(message).encode()], config.MQTT5))
    return _stored(store, broker, "held: no PUBACK until decided")


def _through_amqp10(store: AckStore, scenario: Scenario) -> Broker | None:
    """A message through an AMQP 1.0 broker and the real connector, when one answers at
    ``AMQP10_URI``; None (and a line saying why) when none does. On RabbitMQ 3 (its AMQP 1.0
    plugin) the queue is declared over AMQP 0.9.1 and received from ``/amq/queue/<name>``, and a
    redeliver decision is released (decisions #112)."""
    import pika

    from ackstore.connectors import config
    from ackstore.connectors.amqp10 import Amqp10Connector
    from ackstore.connectors.publish import publish_amqp10_lines

    address = f"/amq/queue/{AMQP10_QUEUE}"
    connection = config.parse({"id": AMQP10, "uri": AMQP10_URI, "connectionType": config.AMQP10,
                               "specificConfig": {config.AMQP10_REDELIVERY_SETTING: "released"},
                               "sources": [{"addresses": [address],
                                            "acknowledgementRequests": {"includes": [TWIN_PERSISTED]}}]})
    broker = Broker("AMQP 1.0", Amqp10Connector, connection, "accepted")
    probe = publish_amqp10_lines(AMQP10_URI, address, [])  # no lines: whether the broker speaks AMQP 1.0
    if probe["status"] != 200:
        return _skipped(broker, probe["message"].split(": ", 1)[-1].rstrip("."))
    try:  # RabbitMQ's queue, declared over AMQP 0.9.1; another broker makes its node itself
        declaring = pika.BlockingConnection(pika.URLParameters(AMQP10_URI + "/?connection_attempts=1&socket_timeout=3"))
        try:
            declaring.channel().queue_declare(AMQP10_QUEUE, durable=True)
        finally:
            declaring.close()
    except pika.exceptions.AMQPError:
        pass
    message = _modify(scenario.cid("amqp10"), "/attributes/room", "hall", [TWIN_PERSISTED])
    _step(f"send a command to the AMQP 1.0 address {address!r}",
          publish_amqp10_lines(AMQP10_URI, address, [json.dumps(message).encode()]))
    return _stored(store, broker, "its delivery unsettled until decided")


def _skipped(broker: Broker, why: str) -> None:
    """The line saying why a broker's source is skipped."""
    print(f"\n== {broker.name} source skipped: no broker at {broker.connection.uri} ({why})")
    return None


def _stored(store: AckStore, broker: Broker, held: str) -> Broker:
    """The connector runs once and stores what was published, holding it until it is decided."""
    _step(f"the connector {broker.connection.id!r} stores it ({held})", _connector_once(store, broker))
    return broker


def _connector_once(store: AckStore, broker: Broker) -> dict[str, Any]:
    """The broker's connector, run once: it takes what is there, settles what is decided, exits."""
    from ackstore.connectors.options import Options

    connector = broker.connector(store, broker.connection, Options(once=True, poll_s=0.5))
    code = connector.run()
    figures, carried_out = connector.metrics.figures()
    return {"exit": code, "consumed": figures["consumed"], "carried out": carried_out}


@contextmanager
def _over_http(url: str, database_url: str | None, scenario: Scenario) -> Iterator[Callable[[], None]]:
    """One command over Ditto's HTTP API (``ackstore serve``, docs/http.md), sent before the DAG runs
    and held for its decision while it does; the function given prints its answer: the decision,
    or — the hold ended first (at most a minute) — 202 and the decision read at its Location."""
    import httpx

    from ackstore.local_airflow import http_door

    params = DatabaseUrl.parse(url).resolved()
    auth = (params.get("user") or "postgres", params.get("password") or "any")  # a trusting server takes any
    with http_door(url, 0, ackstore_home() / "demo-http.log", trusting=uses_embedded(database_url)) as door, \
            ThreadPoolExecutor(1) as pool:
        if door is None:
            yield lambda: None
            return
        path = "/api/2/things/org.acme:lamp-http"
        print(f"\n== over Ditto's HTTP API ({door}): PUT {path}, held until the ledger decides it (at most a minute)")
        print(f"   curl -u {auth[0]}:… -X PUT {door}{path} -H 'requested-acks: twin-persisted' "
              "-d '{\"attributes\": {\"on\": true}}'")
        held = pool.submit(httpx.put, door + path, json={"attributes": {"on": True}}, auth=auth, timeout=120,
                           headers={"requested-acks": "twin-persisted", "correlation-id": scenario.cid("http")})

        def answered() -> None:
            answer = held.result()
            print(f"\n== the HTTP request's answer: {answer.status_code}" + (f", {answer.text}" if answer.text else ""))
            if answer.status_code == 202:  # the hold ended before the DAG decided it: read it where it said
                location = answer.headers["location"]
                decided = httpx.get(door + location, auth=auth, timeout=30)
                print(f"   its hold ended first; GET {location}: {decided.status_code}, {decided.text}")

        yield answered


def _run_dag(url: str) -> bool:
    from ackstore.local_airflow import DAG_ID, LocalAirflow, run_dag_once

    print(f"\n== run the DAG {DAG_ID} once through Airflow (airflow dags test; local Spark) ...", flush=True)
    started = time.perf_counter()
    local = LocalAirflow.prepare(url)
    done = run_dag_once(local)
    print(f"   airflow dags test exited {done.returncode} after {time.perf_counter() - started:.0f} s "
          f"(Airflow's home: {local.home})")
    if done.returncode != 0:
        print(done.stdout[-3000:] + done.stderr[-3000:])
    return done.returncode == 0


def _print_steps(store: AckStore) -> None:
    """What each step of the DAG run did: its stats as recorded in ``pipeline_runs``."""
    from jobs.pipeline import PASS_MARK, counts

    with store.engine.connect() as conn:  # the newest run, every pass of it ("<run id>#k" after the first)
        run_id = conn.execute(text("SELECT split_part(run_id, :mark, 1) FROM pipeline_runs ORDER BY id DESC LIMIT 1"),
                              {"mark": PASS_MARK}).scalar_one()
        rows = conn.execute(
            text("SELECT run_id, step, stats FROM pipeline_runs WHERE split_part(run_id, :mark, 1) = :r ORDER BY id"),
            {"r": run_id, "mark": PASS_MARK},
        ).all()
    print(f"\n== what each step did (pipeline_runs, run {run_id})")
    for pass_id, step, stats in rows:
        where = "" if pass_id == run_id else f" (pass {pass_id.rsplit(PASS_MARK, 1)[1]})"
        print(f"   {step:<13} {stats.get('seconds', 0):6.2f} s  {json.dumps(counts(stats))}{where}")


STRANGER = "ackstore_demo_stranger"  # a second login of the ingest role, played by the demo's own
BECOME_STRANGER = f"""
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{STRANGER}') THEN
    CREATE ROLE {STRANGER} IN ROLE ackstore_ingest;
  END IF;
END $$;
SET SESSION AUTHORIZATION {STRANGER}"""


def _another_login_acks(store: AckStore, scenario: Scenario) -> None:
    """A subscriber belongs to the database login that declared it (decisions #97): another login
    acknowledging as it gets 403. The demo's login plays the other one (SET SESSION AUTHORIZATION:
    a superuser's, as the embedded server's is); a line says why not otherwise."""
    stranger = create_engine(store.engine.url, poolclass=StaticPool)  # one connection: it keeps the identity
    try:
        with stranger.connect() as conn:
            conn.exec_driver_sql(BECOME_STRANGER)
            conn.commit()
        _step(f"another database login ({STRANGER}) acknowledges as {SUBSCRIBER}: refused",
              AckStore(stranger).acknowledge(SUBSCRIBER, _ack(CUSTOM_LABEL, scenario.cid("modified"), 500)))
    except DBAPIError as error:
        print(f"\n== another login skipped: this login may not play one ({type(error.orig).__name__})")
    finally:
        stranger.dispose()


def _step(title: str, value: Any) -> Any:
    print(f"\n== {title}")
    print(json.dumps(value, indent=2, ensure_ascii=False, default=str))
    return value
