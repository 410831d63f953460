"""`ackstore export`: the sealed facts and their seals as files, for the independent verifier
(``auditor/verify_export.py``, standard-library Python an auditor runs on their own machine).

    export.json   {"from": N, "to": M or null}         the seals asked for (null: up to the newest)
    tables.json   {table: {column: type}}              the canonical types (ackstore.rules.canonical)
    seals.jsonl   one seal per line, as its head       (ackstore.ledger.seals.Seal.head)
    rows.jsonl    one fact per line, seal by seal in leaf order:
                  {"seal": n, "table": t, "leaf": the sealed leaf (hex), "row": {column: value}}

A value is JSON: a timestamp as microseconds since 1970, a jsonb value as its jsonb text, a
text[] as a list. The rows are the ledger's as it holds them now, hot or archived; "leaf" is what
the seal's stored leaves say the row was (trusted only as far as their root is the seal's) — for
an archived seal, whose leaves are not kept, the row's own leaf, which its root alone checks.
Rows are what is stored, so a request result's body may hold derived entries as nulls (decisions
#141), and a plain response's body and headers may both be NULL (#143, cause "response" with NULL
headers: not "no body"): what its requester was told follows from the command's response, its
search mark and its signal, all here.
"""

from __future__ import annotations

import json
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine

from ackstore.ledger import archive_reader, seals
from ackstore.ledger.verify import Fact, facts_in_order
from ackstore.rules import errors
from ackstore.rules.canonical import micros


def export(engine: Engine, target: str | Path, first: int = 1, last: int | None = None) -> dict[str, int]:
    """Write seals ``first``..``last`` (default: all) and their facts under the directory ``target``
    (as given: "" is no directory, never ``Path("")``, the working folder); how many seals and rows."""
    seals.check_range(first, last)
    directory = _check_target(target)
    (directory / "export.json").write_text(json.dumps({"from": first, "to": last}) + "\n")
    (directory / "tables.json").write_text(json.dumps(seals.FACT_TYPES, indent=2, sort_keys=True) + "\n")
    written = {"seals": 0, "rows": 0}
    with engine.connect() as conn, open(directory / "seals.jsonl", "w") as seal_lines, \
            open(directory / "rows.jsonl", "w") as row_lines:
        newest = seals.latest(conn)
        for seal in seals.between(conn, first, last if last is not None else (newest.number if newest else 0)):
            seal_lines.write(json.dumps(seal.head(), sort_keys=True) + "\n")
            archive = archive_reader.location_of(conn, seal.number)
            facts = _facts(conn, seal, archive)
            # An archived seal keeps no leaves: its rows' own stand in, the root alone checks them.
            stored = [fact.leaf for fact in facts] if archive else seals.stored_leaves(conn, seal.number)
            for position, fact in enumerate(facts):
                sealed = stored[position].hex() if position < len(stored) else None
                line = {"seal": seal.number, "table": fact.table, "leaf": sealed,
                        "row": _json_values(fact.row)}
                row_lines.write(json.dumps(line, sort_keys=True, ensure_ascii=False) + "\n")
            written["seals"] += 1
            written["rows"] += len(facts)
    return written


def _check_target(target: str | Path) -> Path:
    """Make the directory ``target`` (with its parents) and write a file in it, or raise
    ``ledger:export.directory.invalid`` saying why — before a row is read. A name that is empty or
    blank is none (issue 50: ``export ''`` wrote into the working folder)."""
    if not str(target).strip():
        raise errors.export_directory_invalid(str(target), "it names no directory (the name is empty or blank)")
    directory = Path(target)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()  # a read-only mount lets mkdir pass
    except FileExistsError:  # mkdir's answer for a file, a device (/dev/null), a socket
        raise errors.export_directory_invalid(str(directory), "it exists and is not a directory") from None
    except NotADirectoryError:
        raise errors.export_directory_invalid(str(directory), "a part of its path is not a directory") from None
    except OSError as error:  # permission denied, a read-only file system, a name too long
        raise errors.export_directory_invalid(str(directory), (error.strerror or str(error)).lower()) from None
    return directory


def _facts(conn: Connection, seal: seals.Seal, archive: str | None) -> list[Fact]:
    """A seal's facts, or ``ledger:archive.unavailable`` when its archive cannot be read: an
    export never leaves an archived seal's rows out."""
    try:
        return facts_in_order(conn, seal, archive)
    except archive_reader.ArchiveUnreadable as error:
        raise errors.archive_unreadable(archive or "", str(error)) from None


def _json_values(row: dict[str, Any]) -> dict[str, Any]:
    return {name: micros(value) if isinstance(value, datetime) else value for name, value in row.items()}
