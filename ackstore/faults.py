"""Fault injection for the crash tests: ``ACKSTORE_FAULT=<step>:<point>`` kills the process there
(a pipeline step, or the connector: ``connector:isolating``).

A real ``SIGKILL`` of ourselves: no cleanup, no ``finally``, exactly what a machine
failure or the OOM killer does between two statements.
"""

from __future__ import annotations

import os
import signal

FAULT_VARIABLE = "ACKSTORE_FAULT"


def checkpoint(name: str) -> None:
    if os.environ.get(FAULT_VARIABLE) == name:
        os.kill(os.getpid(), signal.SIGKILL)
