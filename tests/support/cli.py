"""The ``ackstore`` command line run as a real subprocess: its exit status and its answer (JSON
when it printed JSON, else its text) — and, for :func:`run_measured`, the most memory it held."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
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
    the most memory the process held (its maximum resident set, in bytes, as the kernel counted it).

    The command runs as the child of a small launcher (:data:`_LAUNCHER`), which reports what
    ``wait4`` says of it: Linux counts into a process's maximum resident set what its parent held
    when it forked, so a command forked from the test's own process (hundreds of MB once it ran
    Spark) would seem to hold that much."""
    report, reported = os.pipe()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen([sys.executable, "-S", "-c", _LAUNCHER, str(reported), *prefix, *_command(args, url)],
                                   stdin=stdin or subprocess.DEVNULL, stdout=out, stderr=err,
                                   env={**os.environ, **(env or {})}, preexec_fn=_bounded, pass_fds=(reported,),
                                   start_new_session=True)
        os.close(reported)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the launcher and the command
            process.wait()
            os.close(report)
            raise
        with os.fdopen(report, "rb") as said:
            status, max_rss_kib = (int(word) for word in said.read().split())
        out.seek(0)
        err.seek(0)
        return os.waitstatus_to_exitcode(status), _answer(out.read(), err.read()), max_rss_kib * 1024


# Forks and execs the command, waits for it, and writes its wait status and maximum resident set
# (KiB) to the descriptor given first. Its own few MB are all the command starts with.
_LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.close(int(sys.argv[1]))
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
os.write(int(sys.argv[1]), f"{status} {usage.ru_maxrss}".encode())
"""


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
