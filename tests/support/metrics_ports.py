"""The addresses no metrics server can serve on — a port another process listens on, ports past
0 … 65 535, an address no machine has, one that is not this machine's — and the answer each gets
(issue 50): Ditto's shape, exit 1, never a traceback. Used by the ledger's exporter's tests and the
connectors'."""

from __future__ import annotations

import json
import socket
import subprocess
from contextlib import contextmanager
from typing import Iterator

TAKEN, INVALID = (409, "ackstore:metrics.address.taken"), (400, "ackstore:metrics.address.invalid")


@contextmanager
def unservable() -> Iterator[list[tuple[str, str, tuple[int, str]]]]:
    """(port, host, the answer's status and error) for each address, a port held taken meanwhile."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield [(str(taken.getsockname()[1]), "127.0.0.1", TAKEN), ("-1", "127.0.0.1", INVALID),
               ("70000", "127.0.0.1", INVALID), ("0", "256.0.0.1", INVALID),
               ("0", "192.0.2.254", INVALID)]  # TEST-NET-1: not this machine's


def assert_answered(done: subprocess.CompletedProcess, port: str, expected: tuple[int, str]) -> None:
    """The command exited 1 with Ditto's answer ``expected`` naming the port, and no traceback."""
    assert done.returncode == 1, (port, done.stdout, done.stderr)
    answer = json.loads(done.stdout)
    assert (answer["status"], answer["error"]) == expected, answer
    assert port in answer["message"] and answer["description"] and "Traceback" not in done.stderr
