"""A real browser for the tests: Debian's Chromium, headless, driven over the DevTools protocol
(a websocket; no driver or browser download). Installed with apt when missing, as
scripts/bootstrap.sh does."""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from jobs.spark import free_port

CHROMIUM = "chromium"


def ensure_chromium() -> str:
    """The path of Debian's Chromium, installed with apt first if the machine lacks it."""
    found = shutil.which(CHROMIUM)
    if found is None:
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        subprocess.run([*sudo, "apt-get", "update", "-qq"], check=True, timeout=600)
        subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", CHROMIUM], check=True, timeout=1200,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        found = shutil.which(CHROMIUM)
    assert found, "Debian's chromium did not install"
    return found


class Browser:
    """One headless Chromium with one page; ``with Browser() as page:`` stops it after."""

    def __init__(self, width: int = 1400, height: int = 1100) -> None:
        self.size = (width, height)
        self._ids = itertools.count(1)

    def __enter__(self) -> "Browser":
        from websockets.sync.client import connect

        self._profile = tempfile.mkdtemp(prefix="ackstore-chromium-")
        port = free_port()
        self._process = subprocess.Popen(
            [ensure_chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", f"--remote-debugging-port={port}", f"--user-data-dir={self._profile}",
             f"--window-size={self.size[0]},{self.size[1]}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as answer:
                    pages = [t for t in json.load(answer) if t["type"] == "page"]
                if pages:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "Chromium's DevTools did not answer"
            time.sleep(0.3)
        self._socket = connect(pages[0]["webSocketDebuggerUrl"], max_size=64 * 2**20, open_timeout=30)
        self.call("Page.enable")
        self.call("Network.enable")
        return self

    def __exit__(self, *exc: Any) -> None:
        self._socket.close()
        self._process.terminate()
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(30)
        shutil.rmtree(self._profile, ignore_errors=True)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (events that arrive meanwhile are skipped)."""
        number = next(self._ids)
        self._socket.send(json.dumps({"id": number, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv(timeout=120))
            if message.get("id") == number:
                assert "error" not in message, (method, message["error"])
                return message["result"]

    def set_cookie(self, url: str, name: str, value: str) -> None:
        self.call("Network.setCookie", url=url, name=name, value=value, path="/")

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"]
        return result.get("value")

    def wait_for(self, expression: str, seconds: float = 90) -> Any:
        """Poll a JavaScript expression until it is truthy; its value."""
        deadline = time.monotonic() + seconds
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            assert time.monotonic() < deadline, f"not within {seconds:.0f} s: {expression}"
            time.sleep(0.5)

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path
