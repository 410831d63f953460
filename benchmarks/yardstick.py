"""The raw-PostgreSQL yardstick (``benchmarks/yardstick.sql``, a copy of the team's shared one):
the naive rows N QoS-1 twin commands need, written server-side in one transaction.

The script is written for psql; this runs it without psql, as psql would: ``:n`` is replaced by
the number (a textual substitution, like psql's variables), meta-commands (``\\timing``,
``\\echo``) are skipped, and the statements between the ``=== timed section`` and
``=== end timed section`` markers are timed.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from ackstore.ledger.database import make_engine

SCRIPT = Path(__file__).resolve().parent / "yardstick.sql"


def statements(n: int) -> list[tuple[bool, str]]:
    """(timed, statement) in the script's order, with ``:n`` replaced by ``n``."""
    if not isinstance(n, int) or n < 10:
        raise ValueError("the yardstick needs at least 10 commands (it writes n / 10 things)")
    out: list[tuple[bool, str]] = []
    timed = False
    buffer: list[str] = []
    for line in SCRIPT.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("\\"):
            if stripped.startswith("\\echo") and "timed section" in stripped:
                timed = "end timed section" not in stripped
            continue
        if stripped.startswith("--") or not stripped:
            continue
        buffer.append(re.sub(r":n\b", str(n), line))
        if stripped.endswith(";"):
            out.append((timed, "\n".join(buffer)))
            buffer = []
    return out


def run(url: str, n: int) -> float:
    """Seconds the timed section took at ``n`` commands, in the database at ``url``."""
    engine = make_engine(url)
    elapsed = 0.0
    try:
        connection = engine.raw_connection()
        try:
            connection.autocommit = True  # the script holds its own BEGIN / COMMIT, as under psql
            with connection.cursor() as cursor:
                for timed, sql in statements(n):
                    started = time.perf_counter()
                    cursor.execute(sql)
                    if timed:
                        elapsed += time.perf_counter() - started
        finally:
            connection.close()
    finally:
        engine.dispose()
    return elapsed
