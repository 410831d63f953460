"""The ``ackstore`` command line run as a real subprocess: its exit status and its answer (JSON
when it printed JSON, else its text) — and, for :func:`run_measured`, the most memory it held."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import IO

# A bound no ackstore command comes near (the CLI with its imports holds some 100 MB): a command
# that reads without a cap dies of MemoryError here instead of filling the shared machine.
ADDRESS_SPACE_BYTES = 2 * 1024 ** 3


def run(*args: str, url: str | None = None, stdin: bytes | None = None, env: dict | None = None,
        cwd: str | None = None) -> tuple[int, object]:
    completed = subprocess.run(
        _command(args, url), input=stdin, capture_output=True, timeout=120, env={**os.environ, **(env or {})}, cwd=cwd
    )
    return completed.returncode, _answer(completed.stdout, completed.stderr)


def run_measured(*args: str, url: str | None = None, stdin: IO[bytes] | None = None, env: dict | None = None,
                 prefix: tuple[str, ...] = (), timeout: float = 60) -> tuple[int, object, int]:
    """:func:`run`, standard input from a file (``/dev/zero``, say), the address space bounded; also
    the most memory the process held (its maximum resident set, in bytes, as the kernel counted it)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen([*prefix, *_command(args, url)], stdin=stdin or subprocess.DEVNULL, stdout=out,
                                   stderr=err, env={**os.environ, **(env or {})}, preexec_fn=_bounded)
        try:
            _, status, usage = _wait4(process, timeout)
        finally:
            if process.returncode is None and process.poll() is None:
                process.kill()
                process.wait()
        out.seek(0)
        err.seek(0)
        return os.waitstatus_to_exitcode(status), _answer(out.read(), err.read()), usage.ru_maxrss * 1024


def without_read_override() -> tuple[str, ...]:
    """A prefix that runs a command without root's power to read any file (CAP_DAC_OVERRIDE,
    CAP_DAC_READ_SEARCH), so that a file without read permission is one for it; none for another user."""
    if os.geteuid() != 0:
        return ()
    return (shutil.which("setpriv") or "setpriv", "--bounding-set", "-dac_override,-dac_read_search")


def _command(args: tuple[str, ...], url: str | None) -> list[str]:
    return [sys.executable, "-m", "ackstore.cli", *(["--database-url", url] if url else []), *args]


def _answer(stdout: bytes, stderr: bytes) -> object:
    output = stdout.decode()
    try:
        return json.loads(output)
    except json.JSONDecodeError:
        return output + stderr.decode()


def _bounded() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))


def _wait4(process: subprocess.Popen, timeout: float):  # type: ignore[no-untyped-def]
    """os.wait4 of the process (its own rusage, not every child's), or TimeoutExpired after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            return pid, status, usage
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(process.args, timeout)
        time.sleep(0.02)
