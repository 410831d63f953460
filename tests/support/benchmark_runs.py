"""Running a benchmark (``python -m benchmarks.…``) from the project's root, as `make` would."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import ROOT


def runs(module: str, args: list[str], expected: str | tuple[str, ...]) -> None:
    """``python -m module args`` ends well and prints ``expected`` (each of them, for a tuple)."""
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    for each in (expected,) if isinstance(expected, str) else expected:
        assert each in done.stdout, f"{each!r} not in:\n{done.stdout[-3000:]}"
