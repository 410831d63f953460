"""The auditor's independent verifier (auditor/verify_export.py), run on an ``ackstore export`` of
a ledger in a Python of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sqlalchemy import Engine

from ackstore.ledger.export import export
from tests.support.paths import ROOT

AUDITOR = ROOT / "auditor" / "verify_export.py"


def independent(engine: Engine, tmp_path: Path, heads_file: Path, *key: str) -> subprocess.CompletedProcess:
    """`ackstore export` of the ledger, then the auditor's verifier on it, in a Python of its own
    with no path to the project (-I: isolated)."""
    export(engine, tmp_path / "export")
    return subprocess.run([sys.executable, "-I", str(AUDITOR), str(tmp_path / "export"), str(heads_file), *key],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
