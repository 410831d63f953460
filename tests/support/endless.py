"""FIFOs for issue 50's bounded reads: one that never ends (its writer writes until the reader goes away),
one no process writes to."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def endless_fifo(folder: Path, chunk: bytes = b" " * 65536) -> str:
    """The path of a FIFO made in ``folder`` whose writer, a daemon thread, writes ``chunk`` for
    as long as someone reads it."""
    path = folder / "endless.fifo"
    os.mkfifo(path)

    def write() -> None:
        try:
            with open(path, "wb") as fifo:
                while True:
                    fifo.write(chunk)
        except OSError:  # BrokenPipeError: the reader stopped reading, as it should
            pass

    threading.Thread(target=write, daemon=True).start()
    return str(path)


def silent_fifo(folder: Path, patience_s: float = 10.0) -> str:
    """The path of a FIFO made in ``folder`` that no process writes to: opening it to read waits
    for a writer, for ever, unless the reader asks not to. After ``patience_s`` a writer opens it
    and closes it at once, writing nothing, so that a reader still waiting fails its test rather
    than hangs it."""
    path = folder / "silent.fifo"
    os.mkfifo(path)

    def release_a_waiting_reader() -> None:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # ENXIO: no reader waits, as none should
            pass

    timer = threading.Timer(patience_s, release_a_waiting_reader)
    timer.daemon = True
    timer.start()
    return str(path)
