"""A connector's own metrics, scraped from its ``--metrics-port``, and the twin commands the
metrics tests send it (each with a message id of its own)."""

from __future__ import annotations

import subprocess
import urllib.error

from tests.support.broker import wait_for
from tests.support import ledger
from tests.support.scraped import Samples
from tests.support.scraped import scrape as scraped


def scrape(port: int) -> Samples:
    """Every sample the connector serves, by name and labels."""
    return scraped(f"http://127.0.0.1:{port}/metrics", timeout=10)


def served(port: int, process: subprocess.Popen) -> Samples:
    """The first scrape that answers (the connector opens its port as it starts)."""
    def attempt() -> Samples | None:
        assert process.poll() is None, "the connector exited"
        try:
            return scrape(port)
        except (urllib.error.URLError, ConnectionError):
            return None
    return wait_for(attempt, timeout=30, what="the metrics served")


def thing_modify(n: int, **headers) -> dict:
    """The n-th command of a metrics test, with a message id of its own."""
    return ledger.thing_modify(n, thing="org.acme/metrics-", message_id=f"m-{n}", **headers)
