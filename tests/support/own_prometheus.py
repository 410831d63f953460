"""A Prometheus a test owns: its own port on 127.0.0.1, its own data folder and configuration in a
temporary folder — never the machine's (nothing runs one; Debian's ``prometheus`` package only
provides the binary, scripts/bootstrap.sh installs it).

It runs the machine's ``prometheus`` in the foreground as our child, in a process group of its
own, scraping the targets the test gives (job name → ``host:port`` list) every second and
evaluating its rules every second: the project's alert rules (deploy/prometheus/alerts.yml) by
default, or a variant of them with shorter ``for:`` durations (:func:`rules_with_for`), so that a
test sees an alert fire in seconds. ``stop`` is SIGTERM to our child and a wait (SIGKILL to its
group if it does not end) — by its PID, never by name.

    with OwnPrometheus({"ackstore-ledger": [f"127.0.0.1:{port}"]}, rules=rules_with_for("0s")) as prometheus:
        prometheus.wait_for_series("ackstore_ledger_up == 1")
        prometheus.wait_for_alert("AckstoreValidationFailing")
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, TypeVar

import yaml

from tests.support.own_postgres import OwnChildServer, free_port
from tests.support.paths import ROOT

SERVER = Path(shutil.which("prometheus") or "/usr/bin/prometheus")
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"

T = TypeVar("T")


class PrometheusError(RuntimeError):
    """An API answer with status "error": ``error_type`` is Prometheus's errorType (``bad_data`` for
    an expression that does not parse)."""

    def __init__(self, error_type: str, error: str) -> None:
        super().__init__(f"{error_type}: {error}")
        self.error_type = error_type
        self.error = error


def rules_with_for(durations: str | dict[str, str], source: Path = ALERTS) -> str:
    """The rules of ``source`` (YAML text) with their ``for:`` replaced: one duration for every rule
    (``"0s"``: an alert fires on the first evaluation that finds it), or per alert name (the
    others keep theirs). Nothing else changes: the expressions are the project's."""
    document = yaml.safe_load(source.read_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            duration = durations if isinstance(durations, str) else durations.get(rule["alert"])
            if duration is not None:
                rule["for"] = duration
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


class OwnPrometheus(OwnChildServer):
    """``start`` (waits for ``/-/ready``), ``stop`` (SIGTERM by PID, SIGKILL if it lingers),
    ``close`` (stop, remove the folder); ``query``, ``alerts``, ``targets``, ``wait_until``,
    ``wait_for_series``, ``wait_for_alert``.

    ``targets``: job name → ``["host:port", …]`` scraped at ``/metrics``; ``rules``: the rules
    file's text (None: deploy/prometheus/alerts.yml as it is; ``""``: no rules at all)."""

    name = "prometheus"

    def __init__(self, targets: dict[str, list[str]] | None = None, rules: str | None = None,
                 interval: str = "1s") -> None:
        if not SERVER.exists():
            raise RuntimeError(f"no {SERVER}: install Debian's prometheus package (scripts/bootstrap.sh)")
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="ackstore-own-prometheus-"))
        self.data = self.root / "data"
        self.log = self.root / "server.out"
        self.rules = self.root / "alerts.yml"
        self.rules.write_text(ALERTS.read_text() if rules is None else rules)
        self.config = self.root / "prometheus.yml"
        self.config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
            "rule_files": [str(self.rules)] if self.rules.read_text().strip() else [],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(hosts)}]}
                               for job, hosts in (targets or {}).items()],
        }, sort_keys=False))
        self._process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    # --- the process -------------------------------------------------------------------------

    def start(self, timeout: float = 60) -> None:
        """Start it; when its port was taken meanwhile (a free port is only free when it is
        picked), on another."""
        for _ in range(3):
            if self._start(timeout):
                return
            self.port = free_port()
        if not self._start(timeout):
            raise RuntimeError(f"prometheus found no free port: {self.log_tail()}")

    def _start(self, timeout: float) -> bool:
        written = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "a") as out:
            self._process = subprocess.Popen(
                [str(SERVER), f"--config.file={self.config}", f"--storage.tsdb.path={self.data}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=info"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.root)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                said = self.log.read_text()[written:]
                self._process = None
                if "address already in use" in said:
                    return False
                raise RuntimeError(f"prometheus exited: {said[-3000:]}")
            if self.ready():
                return True
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"prometheus was not ready on {self.port} in {timeout} s: {self.log_tail()}")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                return answer.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def close(self) -> None:
        try:
            self.stop()
        finally:
            self.kill()
            shutil.rmtree(self.root, ignore_errors=True)

    # --- the API -----------------------------------------------------------------------------

    def api(self, path: str, **parameters: str) -> Any:
        """``GET /api/v1/<path>``: its ``data``, or :class:`PrometheusError` for status "error"
        (Prometheus answers those with 4xx/5xx and the same JSON body)."""
        url = f"{self.url}/api/v1/{path}"
        if parameters:
            url += "?" + urllib.parse.urlencode(parameters)
        try:
            with urllib.request.urlopen(url, timeout=30) as answer:
                body = json.load(answer)
        except urllib.error.HTTPError as error:
            try:
                body = json.loads(error.read())
            except ValueError:
                raise error from None
        if body.get("status") != "success":
            raise PrometheusError(body.get("errorType", ""), body.get("error", ""))
        return body["data"]

    def query(self, expression: str) -> list[dict]:
        """An instant query now: its result (for a vector: ``[{"metric": {…}, "value": [t, "v"]}, …]``)."""
        data = self.api("query", query=expression)
        return data["result"] if data["resultType"] in ("vector", "matrix") else [{"metric": {}, "value": data["result"]}]

    def values(self, expression: str) -> dict[tuple, float]:
        """An instant query's samples as {its labels as sorted (name, value) pairs: value}."""
        return {tuple(sorted(s["metric"].items())): float(s["value"][1]) for s in self.query(expression)}

    def alerts(self, state: str | None = None) -> list[dict]:
        """``/api/v1/alerts``: the active alerts (``pending`` or ``firing``), of ``state`` when given."""
        return [a for a in self.api("alerts")["alerts"] if state is None or a["state"] == state]

    def targets(self) -> list[dict]:
        return self.api("targets")["activeTargets"]

    # --- waiting -----------------------------------------------------------------------------

    def wait_until(self, probe: Callable[[], T], timeout: float = 30, what: str = "the condition",
                   interval: float = 0.2) -> T:
        """``probe()`` until it returns something true, which is returned; AssertionError naming
        ``what`` (and the last value) after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            last = probe()
            if last:
                return last
            if time.monotonic() >= deadline:
                raise AssertionError(f"{what} not met in {timeout} s (last: {last!r}); prometheus: {self.log_tail(1000)}")
            time.sleep(interval)

    def wait_for_series(self, expression: str, timeout: float = 30) -> list[dict]:
        """An instant query of ``expression`` until it returns at least one series."""
        return self.wait_until(lambda: self.query(expression), timeout, f"a series of {expression!r}")

    def wait_for_alert(self, name: str, state: str = "firing", timeout: float = 30) -> list[dict]:
        """The alerts named ``name`` in ``state``, once there is at least one."""
        return self.wait_until(lambda: [a for a in self.alerts(state) if a["labels"].get("alertname") == name],
                               timeout, f"alert {name} {state}")
