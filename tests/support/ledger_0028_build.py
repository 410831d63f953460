"""Build ``tests/support/data/ledger_0028.json``: a ledger written by the stored form (every fact a
row), with every kind of signal, attempt, ack and settlement, sealed, work pending at every step,
and every answer its readers gave (:func:`tests.support.ledger_0028.answers`).

It must run on the code of that form (commit f640f37, or any up to the first migration that
derives a fact), not on a later one:

    git worktree add /tmp/ackstore-0028 f640f37
    cp tests/support/ledger_0028.py tests/support/ledger_0028_build.py tests/support/old_ledger.py \
       tests/support/old_ledger_build.py tests/support/reports_asked.py /tmp/ackstore-0028/tests/support/
    cd /tmp/ackstore-0028 && <this repository>/.venv/bin/python -m tests.support.ledger_0028_build
    cp /tmp/ackstore-0028/tests/support/data/ledger_0028.json <this repository>/tests/support/data/

The signals are those of ``tests/support/old_ledger_build.py`` (the suite's own tests' kinds),
with a seal after each full pass. Its longest deadline is 20 minutes after it was built: every
test that completes its pending work runs long after, so each waiting request is decided then.
"""

from __future__ import annotations

from tests.support.ledger_0028 import FIXTURE, REVISION, answers
from tests.support.old_ledger_build import write_fixture


def main() -> None:
    write_fixture(FIXTURE, REVISION, answers)


if __name__ == "__main__":
    main()
