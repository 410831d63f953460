"""docs/metrics.md's tables: the metrics an operator is promised. The exporter, the alert rules and
the dashboard are each held to them."""

from __future__ import annotations

import re
from tests.support.paths import ROOT

METRICS_DOC = ROOT / "docs" / "metrics.md"
ROW = re.compile(r"^\| `(ackstore_[a-z_]+)` \| (\w+) \|", re.MULTILINE)


def documented(section: str | None = None) -> dict[str, str]:
    """Each documented metric's type, by name: all of them, or those of the section whose heading
    starts with ``section`` (e.g. "The ledger's exporter", "Each connector's")."""
    text = METRICS_DOC.read_text()
    if section is not None:
        text = text.split(f"\n## {section}", 1)[1].split("\n## ", 1)[0]
    return dict(ROW.findall(text))


def series_names() -> set[str]:
    """Every series name the documented metrics give (a histogram's with its suffixes)."""
    names: set[str] = set()
    for name, kind in documented().items():
        names.add(name)
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names
