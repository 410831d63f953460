"""The HTTP front door as a process of its own (``ackstore serve`` on a free port), for the tests
that speak to it as Ditto's clients do."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import httpx
import pytest
from sqlalchemy import Engine
from websockets.sync.client import ClientConnection, connect

from tests.support.paths import ROOT

ACKSTORE = str(Path(sys.executable).parent / "ackstore")
_RUNNING = re.compile(r"running on (http://[^ ]+)")


@dataclass
class DoorProcess:
    url: str
    process: subprocess.Popen
    log: list[str] = field(default_factory=list)

    def client(self, login: str, password: str = "any", **options) -> httpx.Client:
        return httpx.Client(base_url=self.url, auth=(login, password), timeout=90, **options)

    def socket(self, login: str | None, password: str = "any", query: str = "", **options) -> ClientConnection:
        """A WebSocket to ``/ws/2`` (``?query``), with ``login``'s Basic credentials (None: none)."""
        given = {} if login is None else {
            "authorization": "Basic " + base64.b64encode(f"{login}:{password}".encode()).decode()}
        url = self.url.replace("http://", "ws://", 1) + "/ws/2" + (f"?{query}" if query else "")
        return connect(url, additional_headers=given, open_timeout=30, **options)


@contextmanager
def running_door(database_url: str, *, trusting: bool = True, arguments: Sequence[str] = (),
                 environment: Mapping[str, str] | None = None) -> Iterator[DoorProcess]:
    """``ackstore serve`` for ``database_url`` (the door's own login), stopped by its PID after;
    ``trusting`` for the machine's server, which asks no password (decisions #134); ``arguments``
    more of serve's, ``environment`` added to the process's."""
    trust = ["--trusting-database"] if trusting else []
    process = subprocess.Popen([ACKSTORE, "--database-url", database_url, "serve", "--listen", "127.0.0.1:0", *trust,
                                *arguments], cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                               env={**os.environ, **(environment or {})})
    log: list[str] = []
    found: list[str] = []

    def drain() -> None:
        for line in process.stderr:
            log.append(line)
            match = _RUNNING.search(line)
            if match:
                found.append(match.group(1))

    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + 60
    while not found:
        assert process.poll() is None and time.monotonic() < deadline, "".join(log)
        time.sleep(0.05)
    try:
        yield DoorProcess(found[0], process, log)
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        print("".join(log[-50:]), file=sys.stderr)


@pytest.fixture(scope="module")
def door(database_url: str, migrated_engine: Engine) -> Iterator[DoorProcess]:
    """``ackstore serve`` on the tests' own (trusting) server, its ledger migrated: one a module."""
    with running_door(database_url) as process:
        yield process
