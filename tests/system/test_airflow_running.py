"""Airflow for real: ``ackstore airflow`` (what ``make airflow`` runs) starts Airflow's own
processes and a Spark Connect server; the DAG, unpaused through Airflow's REST API, runs on
its **schedule**; the ledger ends as ``ackstore pipeline run`` would have left it; and on
SIGINT every process it started is gone. Airflow asks for a login (the admin's generated
password), and the Ledger page shows the run's results inside Airflow's UI in a real browser.
The same process serves the ledger's metrics (``--metrics-port``: scraped, live), and Airflow
sends its own to the StatsD it was pointed at (``--airflow-statsd``: a UDP socket of the test's).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from ackstore.ledger import reports
from ackstore.ledger.database import database_url, drop_database, make_engine, scratch_database
from ackstore.ledger.database_url import DatabaseUrl
from ackstore.ledger.store import AckStore
from ackstore.rules.settings import Settings
from ackstore.local_airflow import LocalAirflow, health
from ackstore.local_airflow import wait_until as wait_for
from jobs import pipeline
from jobs.settings import PipelineSettings
from jobs.spark import free_port
from tests.support.browser import Browser
from tests.conftest import ADMIN_URL
from tests.support.ledger import comparable_ledger, load_workload
from tests.support.scraped import scrape
from tests.support.paths import ROOT

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DAG = "ackstore_reconcile"
PASSWORD = "Airfl0w$ecret@:/%"


def api(url: str, token: str, path: str, payload: dict[str, Any] | None = None, method: str = "GET") -> dict[str, Any]:
    body = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(f"{url}/api/v2{path}", data=body, method=method,
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=60) as answer:  # the first calls can block for seconds
        return json.load(answer)


def session_processes(session_id: int) -> list[int]:
    """Live processes of a session (Airflow's children stay in the standalone's session)."""
    out = subprocess.run(["ps", "-eo", "pid=,sid=,stat="], capture_output=True, text=True).stdout
    return [int(pid) for pid, sid, stat in (line.split() for line in out.splitlines())
            if int(sid) == session_id and not stat.startswith("Z")]


def test_a_scheduled_run_through_airflow_and_its_ledger_page(tmp_path: Path, spark) -> None:
    metadata_database = f"ackstore_airflow_test_{os.getpid()}"
    with scratch_database(ADMIN_URL, "reference") as reference, scratch_database(ADMIN_URL, "scheduled") as ledger:
        load_workload(reference)
        pipeline.run(spark, PipelineSettings(database_url=reference, partitions=2))
        load_workload(ledger)

        port, spark_port, metrics_port, http_port = free_port(), free_port(), free_port(), free_port()
        statsd = StatsdListener()
        home = tmp_path / "airflow"
        # A password the machine's trust authentication ignores, to show that no log prints it.
        secret_url = DatabaseUrl.from_parts(**{**database_url(ledger).params, "password": PASSWORD}).text()
        command = [str(Path(sys.executable).parent / "ackstore"), "--database-url", secret_url, "airflow",
                   "--port", str(port), "--spark-port", str(spark_port), "--home", str(home),
                   "--metadata-database", metadata_database, "--metrics-port", str(metrics_port),
                   "--http-port", str(http_port), "--airflow-statsd", statsd.address]
        log = open(tmp_path / "ackstore-airflow.log", "w")
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_for("Airflow's API answering", 300, lambda: health(url) or server.poll() is not None)
            assert server.poll() is None, (tmp_path / "ackstore-airflow.log").read_text()[-3000:]
            standalone_pid = int((home / "standalone.pid").read_text())
            local = LocalAirflow(home=home, ledger_url=ledger, metadata_url="", port=port)
            with pytest.raises(urllib.error.HTTPError, match="401"):  # a login is needed
                api(url, "", f"/dags/{DAG}")
            token = local.access_token()  # the admin's, with the password generated on first start
            wait_for("the DAG parsed", 120, lambda: _dag_known(url, token))
            api(url, token, f"/dags/{DAG}", {"is_paused": False}, method="PATCH")

            run = wait_for("a scheduled run that succeeded", 360, lambda: _succeeded_scheduled_run(url, token))
            assert run["run_type"] == "scheduled"
            assert comparable_ledger(ledger) == comparable_ledger(reference)
            engine = make_engine(ledger)
            with engine.connect() as conn:
                steps = conn.exec_driver_sql(
                    "SELECT step FROM pipeline_runs WHERE run_id = %(r)s ORDER BY id", {"r": run["dag_run_id"]}
                ).scalars().all()
            engine.dispose()
            assert steps == list(pipeline.STEPS)  # the scheduled run's id is the pipeline's run id
            _scrape_the_ledgers_metrics(metrics_port, ledger)
            # Ditto's HTTP API answers; the machine's server asks no password, so it proves nobody (decisions #134)
            whoami = httpx.get(f"http://127.0.0.1:{http_port}/api/2/whoami", auth=("postgres", "any"), timeout=30)
            assert (whoami.status_code, whoami.json()["error"]) == (401, "gateway:authentication.failed")
            assert "did not ask for this login's password" in whoami.json()["message"]
            api(url, token, f"/dags/{DAG}", {"is_paused": True}, method="PATCH")
            _look_at_the_ledger_page(url, token, ledger)
            airflow_processes = session_processes(standalone_pid)
            assert airflow_processes, "Airflow's processes should be running"
        finally:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(240)
            finally:
                if server.poll() is None:
                    os.killpg(server.pid, signal.SIGKILL)
                log.close()
                statsd.close()
                drop_database(ADMIN_URL, metadata_database)
        assert server.returncode == 0, (tmp_path / "ackstore-airflow.log").read_text()[-3000:]
        task_logs = [path for path in (home / "logs").rglob("*.log") if "task_id=" in str(path)]
        assert {path.parent.name for path in task_logs} == {"task_id=reconcile"}
        logged = "".join(path.read_text(errors="replace") for path in task_logs)
        assert all(f"{step} run {run['dag_run_id']}" in logged for step in pipeline.STEPS)  # a line per step
        for path in [*task_logs, home / "standalone.log", home / "http.log", tmp_path / "ackstore-airflow.log"]:
            shown = path.read_text(errors="replace")
            assert PASSWORD not in shown and quote(PASSWORD, safe="") not in shown, path
        printed = (tmp_path / "ackstore-airflow.log").read_text()
        assert "ackstore airflow: stopped" in printed
        assert f"Metrics:     http://127.0.0.1:{metrics_port}/metrics" in printed  # in the banner
        assert f"HTTP API:    http://127.0.0.1:{http_port}/api/2/" in printed
        _airflows_statsd_packets(statsd.lines)
        wait_for("every Airflow process gone", 60, lambda: not session_processes(standalone_pid))
        assert health(url) is None
        assert not _listening(spark_port)  # the Spark Connect server is stopped too
        assert not _listening(metrics_port)  # and the exporter
        assert not _listening(http_port)  # and the HTTP API


def _scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """The exporter's samples: by name, then by sorted labels."""
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for (name, labels), value in scrape(f"http://127.0.0.1:{port}/metrics", timeout=60).items():
        found.setdefault(name, {})[labels] = value
    return found


def _scrape_the_ledgers_metrics(port: int, ledger: str) -> None:
    """``ackstore airflow``'s exporter reads the ledger on each scrape: what the scheduled run left
    (every signal counted, a pass and a seal), then one more signal submitted, counted at once."""
    engine = make_engine(ledger)
    with engine.connect() as conn:
        signals, run_ended = conn.exec_driver_sql(
            "SELECT (SELECT count(*) FROM signals), "
            "(SELECT extract(epoch FROM max(finished_at)) FROM pipeline_runs WHERE step = 'seal')").one()
    found = _scrape(port)
    assert found["ackstore_ledger_up"] == {(): 1.0}
    received = found["ackstore_signals_stored_total"]
    assert sum(received.values()) == signals > 0
    assert found["ackstore_pipeline_last_success_timestamp_seconds"][()] >= float(run_ended)  # or a later run's
    assert found["ackstore_seal_last_number"][()] >= 1 and sum(found["ackstore_requests_decided_total"].values()) > 0
    answer = AckStore(engine, Settings()).submit({
        "topic": "org.acme/scraped-1/things/twin/commands/modify", "path": "/attributes/n", "value": 1,
        "headers": {"correlation-id": "scraped-1"}})
    engine.dispose()
    assert answer["status"] == 202, answer
    again = _scrape(port)["ackstore_signals_stored_total"]
    assert sum(again.values()) == signals + 1
    api_twin = (("channel", "twin"), ("source", "api"))
    assert again[api_twin] == received.get(api_twin, 0) + 1, again


class StatsdListener:
    """A UDP socket standing for a StatsD daemon: a thread keeps every line received (a packet may
    carry several), so a few minutes of Airflow's metrics never fill the socket's buffer."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.5)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.lines: list[str] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stopped.is_set():
            try:
                self.lines += self.sock.recv(65536).decode(errors="replace").splitlines()
            except TimeoutError:
                continue

    def close(self) -> list[str]:
        self._stopped.set()
        self._thread.join(5)
        self.sock.close()
        return self.lines


def _airflows_statsd_packets(lines: list[str]) -> None:
    """Airflow's own metrics arrived, every one named under the prefix ``airflow.``: the
    scheduler's heartbeat among them, and the DAG run's."""
    assert lines, "no StatsD packet from Airflow"
    assert all(line.startswith("airflow.") for line in lines), [line for line in lines if not line.startswith("airflow.")][:5]
    names = {line.split(":", 1)[0] for line in lines}
    assert "airflow.scheduler_heartbeat" in names, sorted(names)[:40]
    assert any(name.startswith("airflow.dagrun.duration.success") for name in names), sorted(names)[:80]


def test_a_metrics_port_in_use_stops_it_before_airflow_starts(tmp_path: Path) -> None:
    metadata_database = f"ackstore_airflow_busy_{os.getpid()}"
    with socket.socket() as busy, scratch_database(ADMIN_URL, "busy") as ledger:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        try:
            done = subprocess.run([str(Path(sys.executable).parent / "ackstore"), "--database-url", ledger, "airflow",
                                   "--port", str(free_port()), "--home", str(tmp_path / "airflow"),
                                   "--metadata-database", metadata_database, "--metrics-port", str(port)],
                                  capture_output=True, text=True, timeout=120)
        finally:
            drop_database(ADMIN_URL, metadata_database)
    assert done.returncode == 1, done.stdout + done.stderr
    answer = json.loads(done.stdout[done.stdout.index("\n{") + 1:])  # Ditto's shape, after its first line
    assert (answer["status"], answer["error"]) == (409, "ackstore:metrics.address.taken"), answer
    assert f"127.0.0.1:{port}" in answer["message"] and "--metrics-port" in answer["description"]
    assert "standalone started" not in done.stdout and "Traceback" not in done.stderr
    assert not (tmp_path / "airflow" / "standalone.pid").exists()


def _dag_known(url: str, token: str) -> bool:
    try:
        return api(url, token, f"/dags/{DAG}")["dag_id"] == DAG
    except OSError:
        return False


def _succeeded_scheduled_run(url: str, token: str) -> dict[str, Any] | None:
    runs = api(url, token, f"/dags/{DAG}/dagRuns?run_type=scheduled&order_by=-run_after&limit=5")["dag_runs"]
    failed = [run for run in runs if run["state"] == "failed"]
    assert not failed, failed
    return next((run for run in runs if run["state"] == "success"), None)


ARTIFACTS = Path(os.environ.get("ACKSTORE_TEST_ARTIFACTS", ROOT / "build"))


def _look_at_the_ledger_page(url: str, token: str, ledger: str) -> None:
    """The Ledger page in a real browser, inside Airflow's UI (/plugin/ledger), logged in with
    the token /auth/token gave (the cookie Airflow's UI keeps it in): a screenshot is saved as an
    artifact, and the page's text shows the ledger's sources and counts."""
    engine = make_engine(ledger)
    with engine.begin() as conn:  # a connector that said it runs 10 minutes ago, and no more: down
        conn.exec_driver_sql("INSERT INTO connections (id, owner_login, claimed_at, seen_at) "
                             "VALUES ('plant-gone', NULL, now(), now() - interval '10 minutes')")
    with engine.connect() as conn:
        now = datetime.now(timezone.utc)
        marks = reports.watermarks(conn, reports.Window(now - timedelta(hours=24), now), 100)
        settled = reports.settlement(conn)
    engine.dispose()
    assert marks and settled, "the scheduled run should have left signals and settlements"
    frame = "document.querySelector('iframe') && document.querySelector('iframe').contentDocument"
    with Browser() as browser:
        browser.open(f"{url}/plugin/ledger")  # without a login: Airflow's login page, not the ledger
        assert "Settlement status" not in browser.wait_for("document.readyState === 'complete' && document.body.innerText")
        browser.set_cookie(url, "_token", token)
        browser.open(f"{url}/plugin/ledger")
        text = browser.wait_for(f"{frame} && {frame}.body && {frame}.body.innerText.includes('Open work') "
                                f"&& {frame}.body.innerText")
        time.sleep(1)  # the chart and the frame's layout settle
        browser.screenshot(ARTIFACTS / "ledger-page.png")
        assert "Ledger" in browser.evaluate("document.body.innerText")  # the nav entry, in Airflow's own UI
        # the strip as a status, in the browser's own rendering: the connector that is down is
        # listed, red, and the ledger's status is critical (issue 50)
        colours = browser.evaluate(
            f"(() => {{ const d = {frame}; const line = [...d.querySelectorAll('#health-connectors li')]"
            f".find(li => li.innerText.startsWith('plant-gone')); return [d.getElementById('status').className, "
            f"getComputedStyle(d.getElementById('status')).color, line && line.className, "
            f"line && getComputedStyle(line).color]; }})()")
    assert colours == ["critical", "rgb(197, 48, 48)", "critical", "rgb(197, 48, 48)"], colours
    assert "plant-gone: down: not heard from for 10m" in text, text
    for mark in marks:
        assert f"{mark['source']}\t{mark['signals']}\t{mark['settled']}\t{mark['unsettled']}" in text, text
    for row in settled:
        assert f"{row['source']}\t{row['status']}" in text, text
    _look_at_a_dead_letter(url, token, ledger)


DEAD_LETTER = "dl-browser-1"


def _look_at_a_dead_letter(url: str, token: str, ledger: str) -> None:
    """A carried-out dead-letter is "dead-lettered", never settled, on the page in the browser:
    its search's title, the unsettled list after its source's watermark, the watermark's count —
    the state show gives (docs/signal-states.md)."""
    engine = make_engine(ledger)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "WITH s AS (INSERT INTO signals (source, source_message_id, correlation_id, api, channel, kind, action, "
            "thing_id, topic, path, value, headers, requested_acks, response_required, timeout_ms, deadline_at) "
            "VALUES ('plant-dl', 'm1', %(c)s, 'connectivity', 'live', 'live-message', 'alarm', 'org.acme:dl', "
            "'org.acme/dl/things/live/messages/alarm', '/outbox/messages/alarm', '1', '{}', '{}', false, 0, now()) "
            "RETURNING id), r AS (INSERT INTO request_results (signal_id, attempt, status, headers, cause, batch_id) "
            "SELECT id, 1, 503, '{}', 'response', 0 FROM s RETURNING signal_id) "
            "INSERT INTO settlements (signal_id, attempt, decision, carried_out_at) "
            "SELECT signal_id, 1, 'dead-letter', now() FROM r", {"c": DEAD_LETTER})
    engine.dispose()
    assert AckStore(make_engine(ledger), Settings()).show(DEAD_LETTER)["state"] == "dead-lettered"
    with Browser() as browser:
        browser.set_cookie(url, "_token", token)
        browser.open(f"{url}/ackstore/ledger/?correlation_id={DEAD_LETTER}")
        text = browser.wait_for("document.readyState === 'complete' && document.body.innerText.includes('Open work') "
                                "&& document.body.innerText")
        title = browser.evaluate("document.getElementById('signal-title').innerText")
    assert title.startswith(DEAD_LETTER) and "— dead-lettered" in title, title
    assert "plant-dl\t1\t0\t1" in text, text  # its source's watermark: 1 signal, 0 settled, 1 not
    assert f"{DEAD_LETTER}\t" in text and "dead-lettered" in text.split("Not settled")[1], text


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize(("ledger", "expected"), [
    ("postgresql://127.0.0.1:5432/ackstore", "ackstore_airflow"),  # the embedded server's, as before
    ("postgresql://127.0.0.1:5432/plant_ledger", "plant_ledger_airflow"),
    ("postgresql://user@db.example:6543/other", "other_airflow"),
])
def test_airflows_metadata_database_is_named_after_its_ledger(ledger: str, expected: str) -> None:
    """Issue 50: every `make airflow` on one server shared `ackstore_airflow`; two ledgers' Airflows
    mixed their DAG runs. Now each ledger's is its own."""
    from ackstore.local_airflow import MAX_IDENTIFIER_BYTES, metadata_database_for

    assert metadata_database_for(ledger) == expected
    odd = [metadata_database_for(f"postgresql://127.0.0.1/{name}") for name in ("plant-a", "plant_a", "l" * 70, "l" * 71)]
    assert len(set(odd)) == 4, odd  # never two ledgers on one name
    assert all(len(name.encode()) <= MAX_IDENTIFIER_BYTES and name.endswith("_airflow")
               and name.replace("_", "").isalnum() for name in odd), odd


def test_a_new_metadata_database_beside_the_earlier_shared_one_says_how_to_keep_its_history(capsys) -> None:
    """Issue 50's review: a ledger not named `ackstore` had its Airflow metadata in `ackstore_airflow`
    before; after the upgrade `make airflow` makes `<ledger>_airflow`, empty. It leaves the earlier
    one as it is (another ledger may have used it) and says, once, how to take it over — a step
    that works: the history is there under the new name."""
    import shlex

    from sqlalchemy import text

    from ackstore.local_airflow import _ensure_database, metadata_database_for

    suffix = f"{os.getpid()}_{time.monotonic_ns() % 10**6}"
    earlier, ledger = f"earlier_airflow_{suffix}", f"plant_{suffix}"
    name = metadata_database_for(f"postgresql://127.0.0.1/{ledger}")
    admin = make_engine(ADMIN_URL).execution_options(isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{earlier}"'))
        history = make_engine(database_url(ADMIN_URL).with_database(earlier).text())
        with history.begin() as conn:
            conn.execute(text("CREATE TABLE dag_run (id int)"))  # its history
        history.dispose()  # Airflow stopped: nobody is connected to it
        url = database_url(ADMIN_URL).with_database(ledger).text()
        _ensure_database(url, name, earlier)
        said = capsys.readouterr().out
        assert f"now {name}" in said and f"ALTER DATABASE {earlier} RENAME TO" in said, said
        _ensure_database(url, name, earlier)  # made before: nothing said
        assert capsys.readouterr().out == ""
        step = shlex.split(said.split("then psql -d postgres ", 1)[1].split("; or run", 1)[0])
        for flag, statement in zip(step[::2], step[1::2]):  # the step, as psql would run it
            assert flag == "-c"
            with admin.connect() as conn:
                conn.execute(text(statement))
        kept = make_engine(database_url(ADMIN_URL).with_database(name).text())
        with kept.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM dag_run")).scalar_one() == 0  # the earlier one's table
        kept.dispose()
    finally:
        for database in (earlier, name):
            drop_database(ADMIN_URL, database)

