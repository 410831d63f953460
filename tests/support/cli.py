"""The ``ackstore`` command line run as a real subprocess: its exit status and its answer (JSON
when it printed JSON, else its text)."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def run(*args: str, url: str | None = None, stdin: bytes | None = None, env: dict | None = None) -> tuple[int, object]:
    command = [sys.executable, "-m", "ackstore.cli"]
    if url:
        command += ["--database-url", url]
    completed = subprocess.run(
        [*command, *args], input=stdin, capture_output=True, timeout=120, env={**os.environ, **(env or {})}
    )
    output = completed.stdout.decode()
    try:
        return completed.returncode, json.loads(output)
    except json.JSONDecodeError:
        return completed.returncode, output + completed.stderr.decode()
