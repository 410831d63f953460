"""Airflow on this machine, for ``ackstore airflow`` (``make airflow``) and the demo.

Airflow's own processes (``airflow standalone``: api-server with the UI, scheduler,
dag-processor, triggerer) run this project's ``dags/`` folder with:

* the metadata in its own PostgreSQL database on the ledger's server — the machine's, or the
  embedded one when nothing is configured — never SQLite, named after the ledger's
  (``<ledger>_airflow``: two ledgers on one server never share one, :func:`metadata_database_for`);
* the ledger as the Airflow connection ``ackstore_ledger``;
* a Spark Connect server, with ``SPARK_REMOTE`` pointing at it: a local Spark session costs a
  task about 26 s, four of them would not fit in a one-minute schedule (docs/stack-notes.md);
* the settings that make Airflow usable on two cores (docs/stack-notes.md): 4 workers, DAG files
  re-read every 10 s;
* a login: SimpleAuthManager with one user, ``admin``, whose password is generated on first start
  and kept in the home (``.ackstore/airflow/passwords.json``), printed with the URL;
* the ledger's Prometheus exporter (what ``ackstore metrics`` serves, docs/metrics.md) in this
  process, on ``--metrics-port`` (default 9464, where deploy/prometheus/prometheus.yml looks; a
  standalone ``ackstore metrics`` serves on 9463, so the two never meet on one port);
* when asked (``--airflow-statsd HOST:PORT``), Airflow's own metrics sent to StatsD, prefixed
  ``airflow.`` (Airflow's [metrics] settings; the ``statsd`` package).

Ctrl-C (or SIGTERM) stops everything it started: SIGINT to the standalone process alone (it
stops its own children), then the Spark Connect server, then the exporter.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from sqlalchemy import create_engine, text
from ackstore.doors import DEFAULT_HOST, DEFAULT_PORT
from ackstore.ledger.database import URL_VARIABLE, ackstore_home, database_url, make_engine, resolve_url, uses_embedded
from ackstore.ledger.database_url import LEDGER_CONNECTION
from ackstore.reporting.registry import REPORTS
from ackstore.reporting.shown_text import json_text
from ackstore.rules.errors import DittoError
from ackstore.ui.routes import LEDGER_ROUTE

PROJECT = Path(__file__).resolve().parent.parent
DAGS_FOLDER = PROJECT / "dags"
DAG_ID = "ackstore_reconcile"
METADATA_SUFFIX = "_airflow"  # the metadata database is the ledger's name and this
# Before issue 50 every ledger's Airflow metadata was this database (decisions #130): a ledger of
# another name now gets its own, and is told how to keep the old one's history.
EARLIER_METADATA_DATABASE = "ackstore_airflow"
MAX_IDENTIFIER_BYTES = 63  # PostgreSQL's NAMEDATALEN - 1
STOP_GRACE_SECONDS = 90
ADMIN_USER = "admin"
METRICS_PORT = 9464  # the ledger's exporter, as deploy/prometheus/prometheus.yml scrapes it
HTTP_PORT = DEFAULT_PORT  # Ditto's HTTP API over the ledger (`ackstore serve`, docs/http.md)
STATSD_PREFIX = "airflow"


def statsd_address(given: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8125`` for an IPv6 address) as a host and a port."""
    host, colon, port = given.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not HOST:PORT: {given!r}")
    return host, int(port)


@dataclass(frozen=True)
class LocalAirflow:
    """Where a local Airflow keeps its things, and what it runs against."""

    home: Path
    ledger_url: str
    metadata_url: str
    port: int = 8080
    metrics_port: int = METRICS_PORT  # the ledger's exporter (0: any free port)
    statsd: tuple[str, int] | None = None  # where Airflow sends its own metrics, if anywhere
    http_port: int = HTTP_PORT  # Ditto's HTTP API, `ackstore serve` (0: any free port)
    embedded: bool = False  # the ledger is the embedded server, which asks no password

    @classmethod
    def prepare(cls, ledger_url: str | None = None, *, home: Path | None = None, port: int = 8080,
                metadata_database: str | None = None, metrics_port: int = METRICS_PORT,
                statsd: tuple[str, int] | None = None, http_port: int = HTTP_PORT) -> "LocalAirflow":
        """Resolve the ledger (starting the embedded server if nothing is configured) and make
        sure Airflow's metadata database exists on the same server (default: the ledger's
        own, :func:`metadata_database_for`)."""
        ledger = resolve_url(ledger_url)
        metadata = _ensure_database(ledger, metadata_database or metadata_database_for(ledger))
        return cls((home or ackstore_home() / "airflow").resolve(), ledger, metadata, port, metrics_port, statsd,
                   http_port, uses_embedded(ledger_url))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def passwords_file(self) -> Path:
        return self.home / "passwords.json"

    def admin_password(self) -> str:
        """The password of the user ``admin`` (SimpleAuthManager's passwords file, readable by its
        owner alone), generated on first start and kept in this deployment's home."""
        self.home.mkdir(parents=True, exist_ok=True)
        text = _private_file(self.passwords_file, lambda: json.dumps({ADMIN_USER: secrets.token_urlsafe(18)}))
        return json.loads(text)[ADMIN_USER]

    def access_token(self) -> str:
        """A JWT for the admin, from Airflow's ``/auth/token`` (what the UI's login does)."""
        request = urllib.request.Request(f"{self.url}/auth/token", method="POST",
                                         data=json.dumps({"username": ADMIN_USER,
                                                          "password": self.admin_password()}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            return json.load(answer)["access_token"]

    def environment(self, spark_remote: str | None) -> dict[str, str]:
        """The environment every Airflow process of this deployment runs with."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.admin_password()  # the passwords file exists before Airflow reads it
        env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW")}
        env.update(
            AIRFLOW_HOME=str(self.home),
            AIRFLOW__CORE__DAGS_FOLDER=str(DAGS_FOLDER),
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=database_url(self.metadata_url).sqlalchemy().render_as_string(hide_password=False),
            AIRFLOW__CORE__PARALLELISM="4",  # the default 32 forks ~1.5 GB of idle workers
            AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="10",  # new DAG files show up in seconds, not 5 min
            # A login: the user admin, whose password is generated on first start (admin_password).
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=f"{ADMIN_USER}:admin",
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(self.passwords_file),
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="False",
            AIRFLOW__API_AUTH__JWT_SECRET=_jwt_secret(self.home),
            AIRFLOW__API__HOST="127.0.0.1",
            AIRFLOW__API__PORT=str(self.port),
            AIRFLOW__API__BASE_URL=self.url,
            AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"{self.url}/execution/",
            ACKSTORE_PARTITIONS=os.environ.get("ACKSTORE_PARTITIONS", "2"),
            PYSPARK_PYTHON=sys.executable,
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        )
        env[f"AIRFLOW_CONN_{LEDGER_CONNECTION.upper()}"] = database_url(self.ledger_url).airflow_connection()
        env.pop("ACKSTORE_DATABASE_URL", None)  # the connection is the one place the ledger is named
        if self.statsd:  # Airflow's own metrics ([metrics] in Airflow's configuration reference)
            host, port = self.statsd
            env.update(AIRFLOW__METRICS__STATSD_ON="True", AIRFLOW__METRICS__STATSD_HOST=host,
                       AIRFLOW__METRICS__STATSD_PORT=str(port), AIRFLOW__METRICS__STATSD_PREFIX=STATSD_PREFIX,
                       AIRFLOW__METRICS__STATSD_IPV6=str(":" in host))
        if spark_remote:
            env["SPARK_REMOTE"] = spark_remote
        else:
            env.pop("SPARK_REMOTE", None)
        return env

    def airflow(self, *args: str, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
        return subprocess.run([_airflow_command(), *args], env=env, capture_output=True, text=True, timeout=timeout)

    def migrate(self, env: dict[str, str]) -> None:
        done = self.airflow("db", "migrate", env=env)
        if done.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed:\n{done.stderr[-3000:]}")


class AirflowApi:
    """Airflow's REST API v2 (``/api/v2``) as the admin: a Bearer token from
    :meth:`LocalAirflow.access_token`, taken once and again when a call answers 401."""

    def __init__(self, local: LocalAirflow) -> None:
        self.local = local
        self._token: str | None = None

    def __call__(self, path: str, payload: dict[str, Any] | None = None, method: str | None = None) -> dict[str, Any]:
        """The JSON answer to ``method`` (GET, or PATCH with a payload) on ``/api/v2{path}``."""
        try:
            return self._call(path, payload, method)
        except urllib.error.HTTPError as error:
            if error.code != 401:
                raise
            self._token = None  # expired: log in again
            return self._call(path, payload, method)

    def _call(self, path: str, payload: dict[str, Any] | None, method: str | None) -> dict[str, Any]:
        if self._token is None:
            self._token = self.local.access_token()
        request = urllib.request.Request(
            f"{self.local.url}/api/v2{path}", data=None if payload is None else json.dumps(payload).encode(),
            method=method or ("GET" if payload is None else "PATCH"),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self._token}"})
        # a long timeout: the api-server's first calls can block for seconds (docs/stack-notes.md)
        with urllib.request.urlopen(request, timeout=60) as answer:
            return json.load(answer)


def run_dag_once(local: LocalAirflow, spark_remote: str | None = None) -> subprocess.CompletedProcess:
    """One run of the DAG through Airflow (``airflow dags test``): its tasks in one process, no
    scheduler; the run is recorded in Airflow's metadata database like any other."""
    env = local.environment(spark_remote)
    local.migrate(env)
    return local.airflow("dags", "test", DAG_ID, env=env)


def serve(local: LocalAirflow, *, spark_port: int = 15002, use_spark_connect: bool = True) -> int:
    """Run Airflow (and a Spark Connect server, and the ledger's exporter) until Ctrl-C or
    SIGTERM; stop all it started."""
    from jobs.spark import connect_server

    remote = f"sc://127.0.0.1:{spark_port}" if use_spark_connect else None
    # Handle SIGINT and SIGTERM ourselves, before any child starts: a process started in the
    # background inherits SIGINT as *ignored*, and its children would too; a handled signal is
    # reset to the default in a child, so Airflow's processes can be stopped with SIGINT.
    stopping = _stop_on_signals()
    env = local.environment(remote)
    log_path = local.home / "standalone.log"
    print(f"ackstore airflow: metadata {database_url(local.metadata_url)}, ledger {database_url(local.ledger_url)}",
          flush=True)
    with ExitStack() as stack:
        try:  # first: a port in use stops us before anything else is started, answered as Ditto would
            metrics_url = stack.enter_context(_ledger_exporter(local))
        except DittoError as refused:
            print(json_text(refused.to_json()), flush=True)
            return 1
        local.migrate(env)
        http_url = stack.enter_context(_http_door(local))
        if http_url is None:
            return 1
        log = stack.enter_context(open(log_path, "ab"))
        # Its own session: the terminal's Ctrl-C reaches only us, and we pass SIGINT to it alone.
        standalone = subprocess.Popen([_airflow_command(), "standalone"], env=env, stdout=log, stderr=log,
                                      start_new_session=True)
        (local.home / "standalone.pid").write_text(str(standalone.pid))
        stack.callback(_stop, standalone)
        print(f"ackstore airflow: airflow standalone started (pid {standalone.pid}), log in {log_path}", flush=True)
        if remote:
            print(f"ackstore airflow: starting Spark Connect on {remote} (about 20 s)", flush=True)
            stack.enter_context(connect_server(local.home / "spark", spark_port))
        _wait_until_healthy(local, standalone, stopping)
        print(_banner(local, remote, metrics_url, http_url), flush=True)
        while standalone.poll() is None and not stopping:
            time.sleep(1)
        print("\nackstore airflow: stopping (Airflow first, then Spark Connect, then the HTTP API and the metrics)",
              flush=True)
    print("ackstore airflow: stopped", flush=True)
    return 0


@contextmanager
def _ledger_exporter(local: LocalAirflow) -> Iterator[str]:
    """The ledger's metrics (``ackstore metrics``, docs/metrics.md) served from this process on
    127.0.0.1, its URL given; shut down, its engine disposed, at the end."""
    from ackstore.reporting.metrics import serving

    engine = make_engine(local.ledger_url)
    try:
        with serving(engine, local.metrics_port) as url:
            yield url
    finally:
        engine.dispose()


@contextmanager
def _http_door(local: LocalAirflow) -> Iterator[str | None]:
    with http_door(local.ledger_url, local.http_port, local.home / "http.log", trusting=local.embedded) as url:
        yield url


@contextmanager
def http_door(ledger_url: str, port: int, log_path: Path, *, trusting: bool = False) -> Iterator[str | None]:
    """``ackstore serve`` (Ditto's HTTP API) as a process of its own on 127.0.0.1:``port``, its URL
    given once it listens; None (its log printed) when it could not start — a port in use, say.
    The ledger's URL goes by the environment, never the arguments (ps shows those)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        trust = ["--trusting-database"] if trusting else []  # the embedded server asks no password
        process = subprocess.Popen([sys.executable, "-m", "ackstore.cli", "serve", "--listen", f"{DEFAULT_HOST}:{port}",
                                    *trust],
                                   env={**os.environ, URL_VARIABLE: ledger_url}, stdout=log, stderr=log)
    try:
        url = _listening(process, log_path)
        if url is None:
            print(f"ackstore: the HTTP API did not start; its log, {log_path}:\n"
                  + log_path.read_text(errors="replace")[-2000:], flush=True)
        yield url
    finally:
        if process.poll() is None:
            process.terminate()  # it answers what it holds, then stops (docs/http.md)
            try:
                process.wait(STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)


def _listening(process: subprocess.Popen, log_path: Path, seconds: float = 60) -> str | None:
    """The URL uvicorn says it runs on, once it says so; None if the process ends first."""
    deadline = time.monotonic() + seconds
    while process.poll() is None and time.monotonic() < deadline:
        said = re.search(r"running on (http://\S+)", log_path.read_text(errors="replace"))
        if said:
            return said.group(1)
        time.sleep(0.2)
    return None


def _stop_on_signals() -> list[int]:
    """A list that gets the number of each SIGINT / SIGTERM received: non-empty means stop."""
    stopping: list[int] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda received, frame: stopping.append(received))
    return stopping


def _stop(process: subprocess.Popen) -> None:
    """SIGINT to the standalone process only (it stops its workers cleanly); force after a grace."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # its own session: nothing of ours is in that group
        process.wait(30)


def _wait_until_healthy(local: LocalAirflow, process: subprocess.Popen, stopping: list[int],
                        seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stopping:
        if process.poll() is not None:
            raise RuntimeError(f"airflow standalone exited with {process.returncode}; see {local.home / 'standalone.log'}")
        if health(local.url) is not None:
            return
        time.sleep(2)
    if stopping:
        return
    raise TimeoutError(f"Airflow's API did not answer on {local.url} within {seconds:.0f} s")


def wait_until(what: str, seconds: float, check: Callable[[], Any], interval: float = 3) -> Any:
    """Poll ``check`` until it returns something true (returned), or fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(interval)
    raise TimeoutError(f"{what}: not within {seconds:.0f} s")


def health(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=10) as answer:
            return json.load(answer)
    except (OSError, ValueError):
        return None


def _banner(local: LocalAirflow, remote: str | None, metrics_url: str, http_url: str) -> str:
    spark = f"Spark Connect at {remote}" if remote else "a local Spark session per task (slow: ~26 s each)"
    statsd = (f"  Airflow's:   StatsD to {local.statsd[0]}:{local.statsd[1]}, prefix {STATSD_PREFIX}.\n"
              if local.statsd else "")
    return (
        f"\n  Airflow UI:  {local.url}  (log in as {ADMIN_USER}, password {local.admin_password()};\n"
        f"               kept in {local.passwords_file})\n"
        f"  Ledger page: {local.url}/plugin/{LEDGER_ROUTE}  (the QoS-1 audit: \"Ledger\" in the navigation)\n"
        f"  DAG:         {DAG_ID} — paused at first; unpause it in the UI to run every minute\n"
        f"  Spark:       {spark}\n"
        f"  HTTP API:    {http_url}/api/2/  (Ditto's, held until the ledger decides: docs/http.md)\n"
        f"  Metrics:     {metrics_url}  (the ledger's, for Prometheus: docs/metrics.md)\n"
        f"{statsd}"
        f"  Reports:     ackstore report {'|'.join(REPORTS)}\n"
        f"  Stop:        Ctrl-C (stops Airflow, Spark Connect, the HTTP API and the metrics)\n"
    )


def metadata_database_for(ledger_url: str) -> str:
    """Airflow's metadata database for the ledger at ``ledger_url``: ``<ledger>_airflow`` on its
    server (``ackstore_airflow`` for the ledger ``ackstore``), so two ledgers sharing a server
    never share Airflow's metadata. A name with characters CREATE DATABASE is not given here, or
    too long, keeps its letters, digits and '_' and a digest of the whole name."""
    ledger = database_url(ledger_url).resolved().get("dbname") or "ackstore"
    plain = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in ledger)
    name = plain + METADATA_SUFFIX
    if plain != ledger or len(name.encode()) > MAX_IDENTIFIER_BYTES:
        digest = hashlib.sha256(ledger.encode()).hexdigest()[:8]
        name = f"{plain[:MAX_IDENTIFIER_BYTES - len(METADATA_SUFFIX) - 9]}_{digest}{METADATA_SUFFIX}"
    return name


def _ensure_database(ledger_url: str, name: str, earlier_name: str = EARLIER_METADATA_DATABASE) -> str:
    """The URL of database ``name`` on the ledger's server, created if missing — saying, when it is
    made beside the metadata database every ledger shared before issue 50, how to keep that one's
    history instead (:func:`earlier_metadata_notice`)."""
    url = database_url(ledger_url)
    admin = create_engine(url.with_database("postgres").sqlalchemy(), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            exists = conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).first()
            if not exists:
                conn.execute(text(f'CREATE DATABASE "{_identifier(name)}"'))
                earlier = conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"),
                                       {"n": earlier_name}).first()
                if earlier and name != earlier_name:
                    print(earlier_metadata_notice(name, earlier_name), flush=True)
    finally:
        admin.dispose()
    return url.with_database(name).text()


def earlier_metadata_notice(name: str, earlier: str = EARLIER_METADATA_DATABASE) -> str:
    """What an upgraded deployment is told when Airflow's metadata database ``name`` is new while
    ``earlier``, the one every ledger used before issue 50, is there: it is left as it is (another
    ledger of this server may have used it, even ``ackstore`` itself), and how to take it over."""
    return (f"ackstore airflow: Airflow's metadata database is now {name}, named after this ledger "
            f"(docs/operating.md, \"Airflow's metadata database, on upgrade\"); {earlier}, which every ledger used before, "
            f"is left as it is. To keep its DAG runs if it was this ledger's: stop Airflow, then "
            f"psql -d postgres -c 'DROP DATABASE \"{name}\"' -c 'ALTER DATABASE {earlier} RENAME TO \"{name}\"'; "
            f"or run with --metadata-database {earlier}.")


def _identifier(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise ValueError(f"database name {name!r}: letters, digits and '_' only")
    return name


def _jwt_secret(home: Path) -> str:
    """A long, stable secret (the generated default is too short for SHA-512: docs/stack-notes.md)."""
    return _private_file(home / "jwt_secret", lambda: secrets.token_hex(64)).strip()


def _private_file(path: Path, make: Callable[[], str]) -> str:
    """The text of a secret kept in ``path``, written by ``make()`` the first time: created
    readable by its owner alone, never replaced once there."""
    try:
        created = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(created, "w") as file:
            file.write(make())
    return path.read_text()


def _airflow_command() -> str:
    return str(Path(sys.executable).parent / "airflow")
