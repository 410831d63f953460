"""The ``ackstore`` command line: the store API, JSON in and JSON out."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from sqlalchemy.exc import DBAPIError

from ackstore import files
from ackstore.doors import DEFAULT_HOST as DOORS_HOST, DEFAULT_PORT as DOORS_PORT
from ackstore.ledger import failures
from ackstore.ledger.database import URL_VARIABLE, make_engine, resolve_url
from ackstore.ledger.database_url import DatabaseUrl
from ackstore.ledger.store import AckStore
from ackstore.reporting.metrics import DEFAULT_PORT as METRICS_PORT
from ackstore.reporting.registry import REPORTS, described
from ackstore.reporting.shown_text import json_text
from ackstore.rules import errors
from ackstore.rules.settings import MAX_ENVELOPE_VARIABLE, Settings

if TYPE_CHECKING:
    from ackstore.connectors.options import Options

EXIT_OK, EXIT_ERROR_ANSWER, EXIT_USAGE, EXIT_UNDECIDED = 0, 1, 2, 3

DESCRIPTION = """\
ackstore keeps a ledger of signals (Ditto twin commands, live commands, live messages) and of
the acknowledgements requested for them, with Eclipse Ditto's at-least-once semantics.

Every command prints JSON. Answers are Ditto's: 2xx on success, otherwise an error object
{"status", "error", "message", "description"}; the exit status is 0 for a 2xx answer and 1
otherwise (2 for a usage error, 3 for a result that is not decided yet).

The database is --database-url, else $ACKSTORE_DATABASE_URL, else an embedded PostgreSQL
kept in ./.ackstore (started for the duration of the command).
"""

EPILOG = """\
examples:
  ackstore db upgrade
  ackstore declare my-app my-app:processed
  ackstore submit command.json          # {"status": 202, "correlationId": "..."}
  ackstore ack my-app ack.json          # {"status": 204}
  ackstore pipeline run                 # the seven steps, apply_twin … seal (local Spark)
  ackstore result 3f0c…                 # {"status": 200, "body": …, "headers": …}
  ackstore search 'eq(attributes/on,true)'   # {"status": 200, "items": ["org.acme:lamp"]}
  ackstore report audit                 # what is not answered or settled yet, oldest first
  ackstore report latency --since 7d --bucket 1d   # p50/p95/p99 per source and day
  ackstore demo                         # all of the above on a sample command
"""


REPORT_DESCRIPTION = described()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ackstore", description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", help="libpq URL (or SQLAlchemy URL) of the ledger's PostgreSQL database")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    db = commands.add_parser("db", help="manage the ledger's schema")
    db_commands = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    db_commands.add_parser("upgrade", help="create or migrate the schema to the newest revision")
    db_commands.add_parser("current", help="print the schema revision of the database")
    db.set_defaults(run=_db)

    submit = commands.add_parser(
        "submit", help="store a signal (a Ditto Protocol twin command, live command or live message)"
    )
    submit.add_argument("file", metavar="FILE|-", help="the Ditto Protocol JSON message, or - for standard input")
    submit.add_argument(
        "--api",
        choices=("http", "websocket", "connectivity"),
        default="http",
        help="whose header rules and outcome table apply (default: http)",
    )
    submit.add_argument("--source", default="cli", help="the upstream source (default: cli)")
    submit.add_argument(
        "--message-id", help="the source's message id; a second submission with the same one is a retransmission"
    )
    submit.set_defaults(run=_with_envelope("message file", _submit))

    declare = commands.add_parser("declare", help="declare the acknowledgement labels a subscriber issues")
    declare.add_argument("subscriber", help="the subscriber's id")
    declare.add_argument("labels", nargs="*", metavar="LABEL", help="labels the subscriber will issue")
    declare.add_argument("--connection", help="the connection the subscriber belongs to (labels need its prefix)")
    declare.add_argument("--filter", help="the subscriber's RQL filter (signals it filters out get weak acks)")
    declare.add_argument("--namespace", action="append", dest="namespaces", help="a namespace it subscribes to")
    declare.add_argument(
        "--channel", action="append", dest="channels", choices=("twin", "live"), help="a channel (default: both)"
    )
    declare.set_defaults(run=_with_store(_declare))

    ack = commands.add_parser("ack", help="store a subscriber's acknowledgement (single or aggregated)")
    ack.add_argument("subscriber", help="the issuing subscriber's id")
    ack.add_argument("file", metavar="FILE|-", help="the Ditto Protocol acknowledgement, or - for standard input")
    ack.set_defaults(run=_with_envelope("acknowledgement file",
                                        lambda store, args, ack: _answer(store.acknowledge(args.subscriber, ack))))

    pull = commands.add_parser(
        "pull", help="hand out the next twin events and live signals for a subscriber, each under a lease"
    )
    pull.add_argument("subscriber", help="the subscriber's id")
    pull.add_argument("--max", type=int, default=100, help="at most this many signals (default 100)")
    pull.add_argument("--lease", default="30s", help="how long each is leased before it may be handed out again")
    pull.set_defaults(run=_with_store(_pull))

    respond = commands.add_parser("respond", help="store a live response to a live command or message")
    respond.add_argument("subscriber", help="the responding subscriber's id (it must consume the live channel)")
    respond.add_argument("file", metavar="FILE|-", help="the Ditto Protocol live response, or - for standard input")
    respond.set_defaults(run=_with_envelope("live response file",
                                            lambda store, args, response: _answer(store.respond(args.subscriber, response))))

    result = commands.add_parser("result", help="print what the requester of a signal is told, once decided")
    result.add_argument("correlation_id", metavar="CORRELATION_ID")
    result.set_defaults(run=_with_store(_result))

    show = commands.add_parser("show", help="print a signal's timeline: every checkpoint with its time (A.3)")
    show.add_argument("correlation_id", metavar="CORRELATION_ID")
    show.add_argument("--json", action="store_true",
                      help="print the stored state as JSON instead: row, attempts, acks, result and timeline")
    show.set_defaults(run=_with_store(_show))

    verify = commands.add_parser(
        "verify", help="recompute every seal from the rows and check the chain against the exported heads",
        description="Recompute every seal (or --from/--to) from the ledger's rows and check its chain against the "
                    "heads the seal step exported; name the first seal, table and row that differ. Exit 0: "
                    "verified; 1: a difference, listed under 'findings'.")
    verify.add_argument("--heads", help="the exported heads (default: $ACKSTORE_HEADS, else "
                                        "$ACKSTORE_HOME/heads/<database>.jsonl)")
    verify.add_argument("--no-heads", action="store_true", help="check the ledger against its own seals alone")
    verify.add_argument("--public-key", help="the Ed25519 public key every head must be signed with: a PEM file, "
                                             "or the key's 32 bytes in hex")
    verify.add_argument("--from", dest="first", type=_positive, default=1, metavar="N", help="the first seal (default 1)")
    verify.add_argument("--to", dest="last", type=_positive, metavar="M", help="the last seal (default: the newest)")
    verify.add_argument("--witness", metavar="FILE",
                        help="a copy of a later head kept elsewhere (a heads file, one head's JSON line or an archive "
                             "manifest): the ledger must still hold each seal it names, with that hash")
    verify.set_defaults(run=_verify)

    prove = commands.add_parser("prove", help="print proofs that a signal's facts are in their seals (RFC 6962)")
    prove.add_argument("correlation_id", metavar="CORRELATION_ID")
    prove.set_defaults(run=_with_store(_prove))

    archive = commands.add_parser(
        "archive", help="move settled, validated, sealed history older than the retention out to Parquet "
                        "(what the daily DAG ackstore_archive runs)")
    archive.add_argument("--root", help="the archive's root: a folder or a Hadoop URI (s3a://…) (default "
                                        "$ACKSTORE_ARCHIVE, else $ACKSTORE_HOME/archive)")
    archive.add_argument("--retention-days", metavar="DAYS",  # text: rules.settings.retention_days answers it
                         help="how long sealed history stays hot, 0 to 36500 (default $ACKSTORE_RETENTION_DAYS, "
                              "else 30)")
    archive.add_argument("--spark-remote", help="a Spark Connect URL (default: $SPARK_REMOTE, else a local session)")
    archive.set_defaults(run=_archive)

    export = commands.add_parser("export", help="write the sealed facts and seals for auditor/verify_export.py")
    export.add_argument("directory", metavar="DIRECTORY")
    export.add_argument("--from", dest="first", type=_positive, default=1, metavar="N", help="the first seal (default 1)")
    export.add_argument("--to", dest="last", type=_positive, metavar="M", help="the last seal (default: the newest)")
    export.set_defaults(run=_with_store(_export))

    search = commands.add_parser("search", help="ids of indexed things matching an RQL filter (B.12)")
    search.add_argument("filter", metavar="RQL", help='e.g. and(eq(attributes/on,true),gt(attributes/floor,2))')
    search.add_argument("--namespace", action="append", dest="namespaces", help="only things of this namespace")
    search.set_defaults(run=_with_store(lambda store, args: _answer(store.search(args.filter, args.namespaces))))

    pipeline = commands.add_parser("pipeline", help="run the batch pipeline (what the Airflow DAG runs)")
    pipeline_commands = pipeline.add_subparsers(dest="pipeline_command", required=True, metavar="ACTION")
    run = pipeline_commands.add_parser(
        "run",
        help="run every step once, in order, and print their counts (exit 1 when validation fails: nothing is settled)",
    )
    run.add_argument(
        "--step", action="append", dest="steps", metavar="STEP",
        help="run only this step (repeatable): apply_twin, index_search, weak_acks, sweep, validate, settle, seal",
    )
    run.add_argument("--spark-remote", help="a Spark Connect URL (default: $SPARK_REMOTE, else a local session)")
    run.add_argument("--run-id", help="the run's id (default: a new one); a re-run may reuse it")
    run.set_defaults(run=_pipeline)

    report = commands.add_parser(
        "report", help=f"the SQL reports: {', '.join(REPORTS)}",
        description=REPORT_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    report.add_argument("report", choices=list(REPORTS), metavar="REPORT", help=", ".join(REPORTS))
    report.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    report.add_argument("--source", help="only this source (a connection id, api or cli)")
    report.add_argument("--since", metavar="TIME",
                        help="signals received from TIME: 2026-11-24, 2026-11-24T09:30[+01:00], now, or a duration "
                             "before now such as 90m, 24h, 7d (windowed reports: default 24h)")
    report.add_argument("--until", metavar="TIME", help="... and before TIME (default now)")
    report.add_argument("--bucket", default="1h", metavar="DURATION",
                        help="latency: the span of each row, such as 15m, 1h, 1d (default 1h)")
    report.add_argument("--limit", type=int, default=50, help="at most this many rows (default 50)")
    report.set_defaults(run=_with_store(_report))

    connection = commands.add_parser(
        "connection", help="a connection's counts for the last minute, hour and day, its recent failures, and "
                           "which login it is reserved for")
    connection_commands = connection.add_subparsers(dest="connection_command", required=True)
    connection_metrics = connection_commands.add_parser(
        "metrics", help="received, stored, dropped, enforced, carried out (ack, reject, redeliver, dead-letter), "
                        "unsendable, outages: the last minute, hour and day (docs/metrics.md names each)")
    connection_logs = connection_commands.add_parser(
        "logs", help="what its connector could not do (dropped, refused, outages), newest first")
    for each in (connection_metrics, connection_logs):
        each.add_argument("connection_id", metavar="ID", help="the connection's id")
        each.add_argument("--json", action="store_true", help="print JSON instead of a table")
    connection_logs.add_argument("--limit", type=int, default=100, help="at most this many entries (default 100)")
    connection_metrics.set_defaults(run=_with_store(_connection_metrics))
    connection_logs.set_defaults(run=_with_store(_connection_logs))
    reserve = connection_commands.add_parser(
        "reserve", help="grant a connection to the database login its connector runs as (an operator's command)",
        description="Reserve the connection for LOGIN, a login of the ingest role: its connector then claims it, "
                    "and no other ingest login may (docs/roles.md). Run as a login of the admin role.")
    reserve.add_argument("connection_id", metavar="ID", help="the connection's id")
    reserve.add_argument("--login", required=True, help="the login role (a member of ackstore_ingest) it is for")
    reserve.set_defaults(run=_with_store(
        lambda store, args: _answer(store.reserve_connection(args.connection_id, args.login))))

    metrics = commands.add_parser(
        "metrics", help="serve the ledger's metrics to Prometheus (http://HOST:PORT/metrics) until Ctrl-C",
        description="Serve the ledger's metrics in Prometheus's text format, read from the ledger on each scrape "
                    "(docs/metrics.md). The reporter's login is enough. `make airflow` serves them on 9464 itself: "
                    "one exporter per ledger is enough.")
    metrics.add_argument("--port", type=int, default=METRICS_PORT,
                         help=f"the port to serve on (default {METRICS_PORT}; 0: any free one, printed)")
    metrics.add_argument("--host", default="127.0.0.1", help="the address to serve on (default 127.0.0.1)")
    metrics.set_defaults(run=_with_store(_metrics))

    serve = commands.add_parser(
        "serve", help=f"serve Ditto's HTTP API 2 over the ledger (http://{DOORS_HOST}:{DOORS_PORT}/api/2/…) until Ctrl-C",
        description="Serve Ditto's HTTP API 2 over the ledger (docs/http.md): things written with requested "
                    "acknowledgements, each request held until the ledger decided it (at most its timeout and a "
                    "minute; then 202 with the Location of its answer), twins read, searched. Each request acts as "
                    "the ledger login whose name and password it gives (HTTP Basic), which the ledger's PostgreSQL "
                    "checks, or that a Bearer token signed with --token-key names (the URL's own login switching "
                    "into it, as granted: docs/http.md); the URL's own login reads the held requests' answers.")
    serve.add_argument("--listen", default=f"{DOORS_HOST}:{DOORS_PORT}", type=_listen_address, metavar="HOST:PORT",
                       help=f"the address to serve on (default {DOORS_HOST}:{DOORS_PORT})")
    serve.add_argument("--trusting-database", action="store_true",
                       help="the ledger's PostgreSQL asks no password (the embedded default, a trust line): take "
                            "the login a request names without proof — for one machine's development only")
    serve.add_argument("--token-key", metavar="FILE",
                       help="take Bearer tokens signed with the key in FILE (at least 32 bytes; `ackstore token` issues "
                            "them): a request acts as the login its token names, which the URL's login must be granted")
    serve.set_defaults(run=_serve)

    token = commands.add_parser(
        "token", help="issue a Bearer token for the HTTP API and WebSocket (`serve --token-key`)",
        description="Print a token (a JWT signed HS256 with the key in --key) that `ackstore serve --token-key` "
                    "takes for LOGIN until it expires. Whoever holds the key may issue tokens for any login the "
                    "door's login is granted: keep it as secret as their passwords. Needs no database.")
    token.add_argument("--login", required=True, help="the ledger login the token acts as")
    token.add_argument("--key", required=True, metavar="FILE", help="the door's token key file")
    token.add_argument("--lifetime", type=int, default=3600, metavar="SECONDS",
                       help="how long the token is valid (default 3600)")
    token.set_defaults(run=_token)

    alert_rules = commands.add_parser(
        "alert-rules", help="print Prometheus's alert rules for this deployment's settings (YAML)",
        description="Print the alert rules (deploy/prometheus/alerts.yml is this for the default settings) with "
                    "the thresholds that follow ACKSTORE_DEFAULT_TIMEOUT, ACKSTORE_MAX_TIMEOUT and "
                    "ACKSTORE_RETENTION_DAYS as they are set here (docs/operating.md, Monitoring).")
    alert_rules.set_defaults(run=_alert_rules)

    airflow = commands.add_parser(
        "airflow",
        help="run Airflow (UI on 127.0.0.1:8080) with the ackstore DAG and a Spark Connect server, until Ctrl-C",
    )
    airflow.add_argument("--port", type=int, default=8080, help="the API server's and UI's port (default 8080)")
    airflow.add_argument("--spark-port", type=int, default=15002, help="the Spark Connect server's port (default 15002)")
    airflow.add_argument("--local-spark", action="store_true",
                         help="no Spark Connect server: each task opens a local session (~26 s a task)")
    airflow.add_argument("--home", help="Airflow's folder (default: $ACKSTORE_HOME/airflow, i.e. ./.ackstore/airflow)")
    airflow.add_argument("--metadata-database",
                         help="Airflow's metadata database, on the ledger's server (default: the ledger's name and "
                              "_airflow, e.g. ackstore_airflow)")
    airflow.add_argument("--metrics-port", type=int, default=9464, metavar="PORT",
                         help="serve the ledger's metrics (as `ackstore metrics` does) at http://127.0.0.1:PORT/metrics "
                              "(default 9464, where deploy/prometheus/prometheus.yml looks; 0: any free port)")
    airflow.add_argument("--http-port", type=int, default=DOORS_PORT, metavar="PORT",
                         help="serve Ditto's HTTP API (as `ackstore serve` does) at http://127.0.0.1:PORT/api/2/ "
                              f"(default {DOORS_PORT}; 0: any free port)")
    airflow.add_argument("--airflow-statsd", metavar="HOST:PORT", type=_statsd_address,
                         help="turn on Airflow's own metrics, sent to the StatsD at HOST:PORT (prefix airflow.)")
    airflow.set_defaults(run=_airflow)

    _connector_parsers(commands)
    demo = commands.add_parser("demo", help="set up the ledger and walk a sample command through it")
    demo.set_defaults(run=_demo)
    return parser


def _connector_parsers(commands: Any) -> None:
    from ackstore.connectors.options import Options  # the one place of a connector's defaults

    every = _every_connector_parser()
    consuming = _consuming_connector_parser(Options)
    connect = commands.add_parser("connect", help="run a connector: QoS 1 from a broker through the ledger")
    connect_kinds = connect.add_subparsers(dest="kind", required=True, metavar="PROTOCOL")
    amqp = connect_kinds.add_parser(
        "amqp", parents=[every, consuming],
        help="consume RabbitMQ queues, hold each delivery until the pipeline decides, settle it")
    amqp.add_argument("--queue", help="the one source queue (or use --config)")
    amqp.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/", help="the broker's AMQP URI")
    amqp.add_argument("--prefetch", type=int, default=Options.prefetch,
                      help="broker prefetch; held deliveries count against it (default %(default)s: no limit)")
    amqp.set_defaults(run=_connect)
    mqtt = connect_kinds.add_parser(
        "mqtt", parents=[every, consuming],
        help="subscribe to MQTT topics (3.1.1 or 5), withhold each PUBACK until the pipeline decides")
    mqtt.add_argument("--topic", action="append", default=[], metavar="FILTER",
                      help="a topic filter to subscribe to at QoS 1 (or use --config); repeatable")
    mqtt.add_argument("--url", default="mqtt://127.0.0.1:1883", help="the broker: mqtt[s]://[USER[:PASSWORD]@]HOST[:PORT]")
    mqtt.add_argument("--mqtt-version", choices=("3.1.1", "5"), default="5", help="the protocol version (default 5)")
    mqtt.set_defaults(run=_connect)
    amqp10 = connect_kinds.add_parser(
        "amqp10", parents=[every, consuming],
        help="attach to AMQP 1.0 addresses, leave each delivery unsettled until the pipeline decides")
    amqp10.add_argument("--address", action="append", default=[], metavar="ADDRESS",
                        help="a source address to receive from (RabbitMQ: /amq/queue/NAME; or use --config); repeatable")
    amqp10.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672", help="the broker: amqp[s]://[USER:PASSWORD@]HOST[:PORT]")
    amqp10.add_argument("--credit", type=int, help="deliveries a link holds unsettled at once (default 65535)")
    amqp10.set_defaults(run=_connect)
    push = connect_kinds.add_parser(
        "http-push", parents=[every],
        help="send the targets' events and live signals to an HTTP endpoint; its response issues the ack")
    push.set_defaults(run=_connect)

    publish = commands.add_parser("publish", help="send Ditto Protocol messages to a broker")
    publish_kinds = publish.add_subparsers(dest="kind", required=True, metavar="PROTOCOL")
    publish_amqp = publish_kinds.add_parser("amqp", help="publish JSON lines to a RabbitMQ queue, with confirms")
    publish_amqp.add_argument("file", metavar="FILE|-", help="one JSON message per line, or - for standard input")
    publish_amqp.add_argument("--queue", required=True, help="the queue (published through the default exchange)")
    publish_amqp.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/", help="the broker's AMQP URI")
    publish_amqp.set_defaults(run=_publish)
    publish_mqtt = publish_kinds.add_parser("mqtt", help="publish JSON lines to an MQTT topic at QoS 1, PUBACKed")
    publish_mqtt.add_argument("file", metavar="FILE|-", help="one JSON message per line, or - for standard input")
    publish_mqtt.add_argument("--topic", required=True, help="the topic to publish to")
    publish_mqtt.add_argument("--url", default="mqtt://127.0.0.1:1883", help="the broker: mqtt[s]://HOST[:PORT]")
    publish_mqtt.add_argument("--mqtt-version", choices=("3.1.1", "5"), default="5", help="the protocol version")
    publish_mqtt.set_defaults(run=_publish)
    publish_amqp10 = publish_kinds.add_parser("amqp10", help="publish JSON lines to an AMQP 1.0 address, each accepted")
    publish_amqp10.add_argument("file", metavar="FILE|-", help="one JSON message per line, or - for standard input")
    publish_amqp10.add_argument("--address", required=True, help="the address (RabbitMQ: /amq/queue/NAME)")
    publish_amqp10.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672", help="the broker's AMQP URI")
    publish_amqp10.set_defaults(run=_publish)


def _every_connector_parser() -> argparse.ArgumentParser:
    """The options every ``ackstore connect PROTOCOL`` has (a parent parser: spelled once)."""
    every = argparse.ArgumentParser(add_help=False)
    every.add_argument("--config", help="a Ditto connection JSON of this protocol, with its sources and targets "
                                        "(instead of the options that name them; http-push: targets only)")
    every.add_argument("--once", action="store_true",
                       help="take what is waiting, send what the targets have, settle what is decided, exit")
    _metrics_arguments(every)
    return every


def _consuming_connector_parser(options: type[Options]) -> argparse.ArgumentParser:
    """The options of a connector that consumes sources, their defaults ``options``' (the
    connector's ``Options``): the one place they are spelled. Each one's ``dest`` is the field it sets."""
    consuming = argparse.ArgumentParser(add_help=False)
    consuming.add_argument("--connection-id", help="the connection's id (its source in the ledger, its labels' "
                                                   "prefix; MQTT: its client id)")
    consuming.add_argument("--requested-acks", action="append", default=[], metavar="LABEL",
                           help="a label every message requests (e.g. twin-persisted for QoS 1); repeatable")
    consuming.add_argument("--batch-size", type=int, default=options.batch_size,
                           help="messages per ledger transaction (default %(default)s)")
    consuming.add_argument("--poll", dest="poll_s", metavar="POLL", type=float, default=options.poll_s,
                           help="seconds between reads of decisions (default %(default)s)")
    consuming.add_argument("--max-messages", type=int, default=options.max_messages,
                           help="consume this many, exit once all of them are settled")
    return consuming


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _warn_of_a_visible_password(getattr(args, "database_url", None))
    try:
        return _run(args)
    except errors.DittoError as error:  # e.g. a malformed database URL: answered, not a traceback
        return _answer(error.to_json())
    except DBAPIError as problem:  # the ledger cannot be reached (503) or refuses the login (403): not a traceback
        url = getattr(args, "database_url", None) or os.environ.get(URL_VARIABLE)
        answer = failures.unavailable(problem, url) or _permission_denied(problem, url)
        if answer is None:
            raise
        return _answer(answer.to_json())


def _permission_denied(problem: DBAPIError, url: str | None) -> errors.DittoError | None:
    """The 403 for a statement the database refused the login (SQLSTATE 42501, insufficient_privilege),
    naming the login and what it lacks as PostgreSQL says it; None for any other problem."""
    reason = failures.refused_privilege(problem)
    if reason is None:
        return None
    login = DatabaseUrl.parse(url).resolved().get("user") if url else None  # None: the embedded server's
    return errors.permission_denied(login, reason)


def _warn_of_a_visible_password(url: str | None) -> None:
    """A password in --database-url is in the process's arguments, which every user of the machine
    may read (ps): say so, and where it belongs. Who a subscriber is rests on that password."""
    try:
        password = url and DatabaseUrl.parse(url).params.get("password")
    except errors.DittoError:  # malformed: answered when the command connects
        return
    if password:
        print("ackstore: warning: the password in --database-url is visible to every user of this machine (ps); "
              "give it in ~/.pgpass, PGPASSFILE or PGPASSWORD, or the URL in $ACKSTORE_DATABASE_URL", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    return args.run(args)  # each command's handler, set beside its parser


def _with_store(action: Callable[[AckStore, argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A command that works on the ledger through the store API."""

    def run(args: argparse.Namespace) -> int:
        with AckStore.connect(args.database_url) as store:
            return action(store, args)

    return run


def _with_envelope(what: str, action: Callable[[AckStore, argparse.Namespace, bytes], int]
                   ) -> Callable[[argparse.Namespace], int]:
    """A command that stores the Ditto Protocol message of a file (or standard input): read with the
    envelope's size limit before the ledger is opened, refused unread past it (issue 50)."""

    def run(args: argparse.Namespace) -> int:
        settings = Settings.from_env()
        envelope = files.read_or_answer(args.file, settings.max_envelope_bytes, what, stdin=True,
                                        setting=MAX_ENVELOPE_VARIABLE)
        with AckStore.connect(args.database_url, settings=settings) as store:
            return action(store, args, envelope)

    return run


def _submit(store: AckStore, args: argparse.Namespace, envelope: bytes) -> int:
    return _answer(store.submit(envelope, api=args.api, source=args.source, source_message_id=args.message_id))


def _declare(store: AckStore, args: argparse.Namespace) -> int:
    return _answer(store.declare(args.subscriber, args.labels, filter=args.filter, namespaces=args.namespaces,
                                 connection=args.connection, channels=args.channels))


def _pull(store: AckStore, args: argparse.Namespace) -> int:
    try:
        messages = store.pull(args.subscriber, max=args.max, lease=args.lease)
    except errors.DittoError as error:
        return _answer(error.to_json())
    for message in messages:  # one JSON message per line: ready for `jq -c` or a pipe
        print(json_text(message, indent=None))
    return EXIT_OK


def _result(store: AckStore, args: argparse.Namespace) -> int:
    answer = store.result(args.correlation_id)
    if answer is None:
        _print({"correlationId": args.correlation_id, "decided": False})
        return EXIT_UNDECIDED
    return _answer(answer)


def _report(store: AckStore, args: argparse.Namespace) -> int:
    return REPORTS[args.report].run(store, as_json=args.json, limit=args.limit, source=args.source,
                                    since=args.since, until=args.until, bucket=args.bucket)


def _show(store: AckStore, args: argparse.Namespace) -> int:
    from ackstore.reporting.terminal import render_timeline

    shown = store.show(args.correlation_id)
    if shown is None:  # answered as ``result`` answers it, with or without --json
        return _answer(store.unknown(args.correlation_id))
    if args.json:
        _print(shown)
    else:
        render_timeline(shown, shown["timeline"])
    return EXIT_OK


def _positive(text: str) -> int:
    number = int(text)
    if number < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a seal number (1 or more)")
    return number


def _verify(args: argparse.Namespace) -> int:
    from ackstore.ledger import heads, verify

    url = resolve_url(args.database_url)
    exported = None
    if not args.no_heads:  # each option as given: "" is no file, never the working folder or no option
        path = args.heads if args.heads is not None else str(heads.configured_path(url))
        try:  # strictly: a file it cannot use is refused, never read as no heads
            exported = heads.read_exported(path)
        except heads.HeadsUnreadable as error:
            return _answer(errors.heads_unreadable(path, str(error)).to_json())
    witness = None
    if args.witness is not None:
        try:
            witness = heads.read_exported(args.witness)
        except heads.HeadsUnreadable as error:
            return _answer(errors.witness_unreadable(args.witness, str(error)).to_json())
    key = _public_key(args.public_key) if args.public_key is not None else None
    if isinstance(key, dict):
        return _answer(key)
    engine = make_engine(url)
    try:
        found = verify.verify(engine, exported, key, args.first, args.last, witness)
    finally:
        engine.dispose()
    summary = {"seals": found.seals, "facts": found.facts, "heads": found.heads, "signatures": found.signatures,
               "witnessed": found.witnessed, "unsealed": found.unsealed}
    if found.ok:
        return _answer({"status": 200, "verified": True, **summary})
    answer = errors.ledger_not_as_sealed(found.findings[0].line(), len(found.findings)).to_json()
    return _answer({**answer, "verified": False, **summary, "findings": [f.line() for f in found.findings]})


def _public_key(given: str) -> bytes | dict[str, Any]:
    """Raw Ed25519 public key bytes from a PEM file or hex; an error answer if neither."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from ackstore.ledger import heads

    try:
        if os.path.exists(given):
            key = serialization.load_pem_public_key(files.read_or_answer(given, heads.MAX_KEY_BYTES, "public key file"))
            if not isinstance(key, Ed25519PublicKey):
                raise ValueError("it is not an Ed25519 key")
            return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        raw = bytes.fromhex(given)
        Ed25519PublicKey.from_public_bytes(raw)
        return raw
    except ValueError as error:
        return errors.public_key_invalid(given, str(error)).to_json()


def _prove(store: AckStore, args: argparse.Namespace) -> int:
    from ackstore.ledger import verify

    with store.engine.connect() as conn:
        proved = verify.prove(conn, args.correlation_id)
    if proved is None:
        return _answer(store.unknown(args.correlation_id))
    proofs, unsealed = proved
    _print({"status": 200, "correlationId": args.correlation_id, "proofs": [p.as_json() for p in proofs],
            "unsealed": unsealed})
    return EXIT_OK if all(p.checks() for p in proofs) else EXIT_ERROR_ANSWER


def _export(store: AckStore, args: argparse.Namespace) -> int:
    from ackstore.ledger.export import export

    written = export(store.engine, args.directory, args.first, args.last)
    return _answer({"status": 200, "directory": str(Path(args.directory).resolve()), **written})


def _archive(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from ackstore.rules.settings import retention_days
    from jobs import archive
    from jobs.settings import PipelineSettings
    from jobs.spark import LazySession

    settings = PipelineSettings.from_env(args.database_url)
    if args.root:
        settings = replace(settings, archive_root=args.root)
    if args.retention_days is not None:
        settings = replace(settings, retention_days=retention_days(args.retention_days, "--retention-days"))
    spark = LazySession("ackstore-archive", remote=args.spark_remote)  # opened only when a prefix may leave
    try:
        return _answer({"status": 200, "archive": archive.run(spark, settings)})
    finally:
        spark.stop()


def _demo(args: argparse.Namespace) -> int:
    from ackstore.demo import run_demo

    return run_demo(args.database_url)


def _publish(args: argparse.Namespace) -> int:
    from ackstore.connectors.publish import publish_amqp10_lines, publish_lines, publish_mqtt_lines

    try:
        lines = _lines_read_ahead(args.file)
        if args.kind == "mqtt":
            return _answer(publish_mqtt_lines(args.url, args.topic, lines, _mqtt_type(args.mqtt_version)))
        if args.kind == "amqp10":
            return _answer(publish_amqp10_lines(args.url, args.address, lines))
        return _answer(publish_lines(args.url, args.queue, lines))
    except errors.DittoError as error:
        return _answer(error.to_json())


def _lines_read_ahead(name: str) -> Iterator[bytes]:
    """``publish``'s messages, a line of UTF-8 text each, no longer than the ledger takes an envelope
    (issue 50): the first read now, so that a file it cannot use is answered before a broker is
    reached; a line past the limit, or not text, stops the publishing there (those before it are sent)."""
    lines = _answered_lines(name, Settings.from_env().max_envelope_bytes)
    first = next(lines, None)
    return itertools.chain([] if first is None else [first], lines)


def _answered_lines(name: str, cap: int) -> Iterator[bytes]:
    """The lines of ``name``, a refusal raised as its answer (a DittoError)."""
    try:
        yield from files.capped_lines(name, cap, stdin=True, text=True)
    except files.FileRefused as refused:
        raise refused.answer(name, "message file", MAX_ENVELOPE_VARIABLE) from None


def _mqtt_type(version: str) -> str:
    from ackstore.connectors import config

    return config.MQTT5 if version == "5" else config.MQTT


def _connection_metrics(store: AckStore, args: argparse.Namespace) -> int:
    from ackstore.reporting.connections import print_metrics

    return print_metrics(store.engine, args.connection_id, as_json=args.json)


def _connection_logs(store: AckStore, args: argparse.Namespace) -> int:
    from ackstore.reporting.connections import print_logs

    return print_logs(store.engine, args.connection_id, args.limit, as_json=args.json)


def _metrics(store: AckStore, args: argparse.Namespace) -> int:
    from ackstore.reporting.metrics import serve

    return serve(store.engine, args.port, args.host, store.settings.metric_sources)


def _serve(args: argparse.Namespace) -> int:
    from ackstore.connectors import logs
    from ackstore.doors.serve import serve
    from ackstore.doors.tokens import read_key

    key = read_key(args.token_key) if args.token_key is not None else None
    logs.configure(_ledger_password(args))  # every line guarded, uvicorn's too
    serve(DatabaseUrl.parse(resolve_url(args.database_url)), args.listen, trusting=args.trusting_database,
          token_key=key)
    return EXIT_OK


def _token(args: argparse.Namespace) -> int:
    from ackstore.doors import tokens

    print(tokens.issue(tokens.read_key(args.key), args.login, args.lifetime))
    return EXIT_OK


def _listen_address(given: str) -> str:
    from ackstore.doors.serve import listen_address

    try:
        listen_address(given)
    except ValueError as problem:
        raise argparse.ArgumentTypeError(str(problem)) from None
    return given


def _alert_rules(args: argparse.Namespace) -> int:
    from ackstore.reporting.alert_rules import rules_for_environment

    sys.stdout.write(rules_for_environment())
    return EXIT_OK


def _airflow(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ackstore.local_airflow import LocalAirflow, serve

    local = LocalAirflow.prepare(args.database_url, home=Path(args.home) if args.home else None, port=args.port,
                                 metadata_database=args.metadata_database, metrics_port=args.metrics_port,
                                 http_port=args.http_port,
                                 statsd=args.airflow_statsd)
    return serve(local, spark_port=args.spark_port, use_spark_connect=not args.local_spark)


def _statsd_address(given: str) -> tuple[str, int]:
    from ackstore.local_airflow import statsd_address

    try:
        return statsd_address(given)
    except ValueError as problem:
        raise argparse.ArgumentTypeError(str(problem)) from None


def _metrics_arguments(connect: argparse.ArgumentParser) -> None:
    connect.add_argument("--metrics-port", type=int, metavar="PORT",
                         help="serve this connector's metrics to Prometheus at http://HOST:PORT/metrics (docs/metrics.md)")
    connect.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                         help="the address the metrics are served on (default 127.0.0.1)")


def _connect(args: argparse.Namespace) -> int:
    import logging

    from ackstore.connectors import config, logs
    from ackstore.connectors.amqp import AmqpConnector
    from ackstore.connectors.amqp10 import Amqp10Connector
    from ackstore.connectors.http_push import HttpPushConnector
    from ackstore.connectors.metrics import ConnectorMetrics
    from ackstore.connectors.mqtt import MqttConnector

    runs = {"amqp": (config.AMQP,), "mqtt": (config.MQTT, config.MQTT5), "amqp10": (config.AMQP10,),
            "http-push": (config.HTTP_PUSH,)}[args.kind]
    try:
        if args.config is not None:  # "" too: a file named nothing, never the options below
            text = files.read_or_answer(args.config, config.MAX_CONFIG_BYTES, "connection configuration file")
            connection = config.parse(errors.parse_json_text(text))
            if connection.connection_type not in runs:
                raise errors.connection_config_invalid(
                    f"The connection's type {connection.connection_type} is not one 'ackstore connect {args.kind}' runs.")
        elif args.kind == "mqtt" and args.connection_id and args.topic:
            connection = config.simple_mqtt(args.connection_id, args.topic, args.requested_acks, args.url,
                                            _mqtt_type(args.mqtt_version))
        elif args.kind == "amqp10" and args.connection_id and args.address:
            connection = config.simple_amqp10(args.connection_id, args.address, args.requested_acks, args.url,
                                              args.credit)
        elif args.kind == "amqp" and args.connection_id and args.queue:
            connection = config.simple(args.connection_id, args.queue, args.requested_acks, args.url)
        else:
            what = {"amqp": "--queue", "mqtt": "--topic", "amqp10": "--address", "http-push": "--config"}[args.kind]
            print(f"ackstore connect {args.kind}: give --connection-id and {what}, or --config", file=sys.stderr)
            return EXIT_USAGE
    except errors.DittoError as error:
        return _answer(error.to_json())
    logs.configure([*logs.secrets_of([connection.uri]), *_ledger_password(args)])  # no library logs one
    options = connector_options(args)
    metrics = ConnectorMetrics(connection.id, connection.connection_type)
    if args.metrics_port is not None:
        try:
            port = metrics.serve(args.metrics_port, args.metrics_host)
        except errors.DittoError as refused:  # the port is taken, or no port or address of this machine
            return _answer(refused.to_json())
        logging.getLogger("ackstore.connector").info("connector %s: metrics at http://%s:%d/metrics", connection.id,
                                                     args.metrics_host, port)
    with AckStore.connect(args.database_url) as store:
        kind = {"amqp": AmqpConnector, "mqtt": MqttConnector, "amqp10": Amqp10Connector,
                "http-push": HttpPushConnector}[args.kind]
        connector = kind(store, connection, options, metrics)
        code = connector.run()
    if connector.failure is not None:  # --once and a broker that stayed unreachable
        return _answer(connector.failure.to_json())
    return code


def connector_options(args: argparse.Namespace) -> Options:
    """A connector's options from ``ackstore connect PROTOCOL``'s arguments: those its parser has
    (each ``dest`` an ``Options`` field), the rest ``Options``' own defaults."""
    from ackstore.connectors.options import Options

    given = vars(args)
    return Options(**{field.name: given[field.name] for field in dataclasses.fields(Options) if field.name in given})


def _ledger_password(args: argparse.Namespace) -> list[str]:
    """The password of the ledger's URL, if one is given: a secret no log line shows."""
    url = args.database_url or os.environ.get(URL_VARIABLE)
    try:
        password = DatabaseUrl.parse(url).libpq().get("password") if url else None
    except errors.DittoError:  # answered where the ledger is opened
        return []
    return [password] if password else []


def _db(args: argparse.Namespace) -> int:
    from ackstore.ledger import migrate

    engine = make_engine(resolve_url(args.database_url))
    try:
        if args.db_command == "upgrade":
            migrate.upgrade(engine)
        _print({"revision": migrate.current_revision(engine), "head": migrate.head_revision()})
    finally:
        engine.dispose()
    return EXIT_OK


def _pipeline(args: argparse.Namespace) -> int:
    from jobs import pipeline
    from jobs.settings import PipelineSettings
    from jobs.spark import LazySession

    settings = PipelineSettings.from_env(args.database_url, run_id=args.run_id)
    steps = tuple(args.steps) if args.steps else tuple(pipeline.STEPS)
    spark = LazySession("ackstore-pipeline", remote=args.spark_remote)  # opened by the first step with work
    try:
        _print({"runId": settings.run_id, "steps": pipeline.run(spark, settings, steps)})
    except pipeline.UnknownStep as unknown:
        print(f"ackstore pipeline run: {unknown}", file=sys.stderr)
        return EXIT_USAGE
    except pipeline.ValidationFailed as failed:
        _print({
            "runId": settings.run_id,
            "steps": failed.completed,
            "validation": {"passed": False, "failures": [failure.to_json() for failure in failed.failures]},
        })
        print(f"ackstore pipeline run: {failed}", file=sys.stderr)
        return EXIT_ERROR_ANSWER
    finally:
        spark.stop()
    return EXIT_OK


def _answer(answer: dict[str, Any]) -> int:
    _print(answer)
    return EXIT_OK if 200 <= int(answer.get("status", 500)) < 300 else EXIT_ERROR_ANSWER


def _print(value: Any) -> None:
    print(json_text(value))


if __name__ == "__main__":
    sys.exit(main())
