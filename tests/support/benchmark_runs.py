"""Running a benchmark (``python -m benchmarks.…``) from the project's root, as `make` would."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import ROOT


def runs(module: str, args: list[str], expected: str) -> None:
    """``python -m module args`` ends well and prints ``expected``."""
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert expected in done.stdout
