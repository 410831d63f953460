"""A FIFO that never ends: its writer writes until the reader goes away (issue 50's bounded reads)."""

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
