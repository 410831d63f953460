"""A ledger written by the stored form — every fact a row, before issue 52 derives what follows from
other facts — kept as data, and every answer its readers gave for it.

``tests/support/data/ledger_0028.json`` holds every row of every table of that ledger (migration
0028's head) and the answers of :func:`answers`, written by ``tests/support/ledger_0028_build.py`` on
the code of that form (commit f640f37 or any up to the first migration that derives a fact). A
form that derives facts must answer the same for it, whether it migrates the old rows or reads
them as they are: tests/pipeline/test_ledger_0028.py asks today's code.

Beside :func:`tests.support.old_ledger.answers` (results, show, reports, search, events, things)
it holds what the later issues added: the ``request_answers`` view, the windowed reports (read as
``ackstore report`` reads them, the archive too), the seals ``verify`` recomputes and the proof of
inclusion of every fact of every signal.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import text

from ackstore.ledger import reports, verify
from ackstore.ledger.store import AckStore
from tests.support import old_ledger
from tests.support.reports_asked import reports_over

FIXTURE = Path(__file__).resolve().parent / "data" / "ledger_0028.json"
REVISION = "0028"

# Every signal the ledger holds was received in it; the windowed reports read it whole.
EVERYTHING = reports.Window(datetime(2000, 1, 1, tzinfo=timezone.utc), datetime(2100, 1, 1, tzinfo=timezone.utc))


def answers(store: AckStore) -> dict[str, Any]:
    """Everything a reader answers for the ledger that must not change with the stored form."""
    with store.engine.connect() as conn:
        correlation_ids = list(conn.execute(text("SELECT correlation_id FROM signals ORDER BY id")).scalars())
        request_answers = [dict(row) for row in conn.execute(text(
            "SELECT * FROM request_answers ORDER BY signal_id, attempt")).mappings()]
        proofs = {cid: _proof(verify.prove(conn, cid)) for cid in correlation_ids}
    checked = verify.verify(store.engine, None)
    return old_ledger.plain({
        **old_ledger.answers(store),
        "request_answers": request_answers,
        "reports": reports_over(store, EVERYTHING, bucket=timedelta(days=1)),
        "verify": {"seals": checked.seals, "unsealed": checked.unsealed,
                   "findings": [finding.line() for finding in checked.findings]},
        "proofs": proofs,
    })


def _proof(found: tuple[list[verify.Inclusion], list[str]] | None) -> Any:
    if found is None:
        return None
    inclusions, unsealed = found  # in no set order (signal_facts is a union): in the order of their numbers
    return {"inclusions": [{"table": i.table, "key": i.key, "seq": i.seq, "seal": i.seal.number, "index": i.index,
                            "leaf": i.leaf.hex(), "checks": i.checks()} for i in sorted(inclusions, key=_seq)],
            "unsealed": sorted(unsealed)}


def _seq(inclusion: verify.Inclusion) -> int:
    return inclusion.seq


def fixture() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())
