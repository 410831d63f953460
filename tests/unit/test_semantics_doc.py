"""Every section id the code cites (``B.5``, ``A.2.10``, …) resolves in docs/semantics.md."""

from __future__ import annotations

import re
from pathlib import Path
from tests.support.paths import ROOT

CITED = re.compile(r"\b([AB]\.\d+(?:\.\d+)?)\b")
HEADING = re.compile(r"^#{2,4} ([AB]\.\d+(?:\.\d+)?) \S", re.MULTILINE)
SOURCES = ("ackstore", "jobs", "dags", "migrations", "benchmarks", "tests", "docs", "README.md")


def _cited() -> dict[str, set[str]]:
    where: dict[str, set[str]] = {}
    for top in SOURCES:
        path = ROOT / top
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.suffix in (".py", ".sql", ".md")]
        for file in files:
            if file.name == "semantics.md" or "__pycache__" in file.parts:
                continue
            for section in CITED.findall(file.read_text(encoding="utf-8")):
                where.setdefault(section, set()).add(str(file.relative_to(ROOT)))
    return where


def test_every_cited_section_is_in_the_document() -> None:
    documented = set(HEADING.findall((ROOT / "docs" / "semantics.md").read_text(encoding="utf-8")))
    cited = _cited()
    assert len(cited) > 20, "the scan found the citations"
    missing = {section: sorted(files) for section, files in cited.items() if section not in documented}
    assert missing == {}


def test_each_section_points_to_where_ditto_has_it() -> None:
    text = (ROOT / "docs" / "semantics.md").read_text(encoding="utf-8")
    sections = re.split(r"^#{2,4} (?=[AB]\.\d)", text, flags=re.MULTILINE)[1:]
    grouping = ("A.2 ", "B.4 ")  # headings over subsections only
    assert sections and all("*Ditto:*" in section for section in sections if not section.startswith(grouping))
