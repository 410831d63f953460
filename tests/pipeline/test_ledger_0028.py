"""The ledger the stored form wrote (tests/support/data/ledger_0028.json: every kind of signal,
attempt, ack and settlement, sealed, with work pending at every step) answers every reader as it
did then, once upgraded to today's schema: results, show, the reports, ``request_answers``, the
seals ``verify`` recomputes, every proof of inclusion. Issue 52 derives facts that follow from
others instead of storing them; whether a new form migrates the old rows or reads them as they
are, these answers may not move, a fact changed under a seal is still found, and the pending work
completes on today's code without changing what was decided — then it archives and answers the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from sqlalchemy import Engine, text

from ackstore.ledger import migrate, settlements, verify
from ackstore.ledger.database import make_engine, scratch_database
from ackstore.ledger.store import AckStore
from ackstore.rules.settings import Settings
from tests.conftest import ADMIN_URL
from tests.support.archive_settings import settings_for
from tests.support.ledger_0028 import REVISION, answers, fixture
from tests.support.old_ledger import load, plain


@pytest.fixture(scope="module")
def kept() -> dict[str, Any]:
    return fixture()


@pytest.fixture
def ledger(kept: dict[str, Any]) -> Iterator[Engine]:
    """A database holding the kept ledger's rows as they were written, upgraded to today's schema."""
    with scratch_database(ADMIN_URL, "ledger_0028") as url:
        engine = make_engine(url)
        migrate.upgrade(engine, REVISION)
        load(engine, kept, triggers=False)
        migrate.upgrade(engine)
        yield engine
        engine.dispose()


def test_the_kept_ledger_is_sealed_with_work_pending_and_every_proof_checked_then(kept: dict[str, Any]) -> None:
    """What the other tests lean on: the ledger has seals, facts not sealed yet, pending work."""
    then = kept["answers"]
    assert then["verify"]["seals"] >= 2 and then["verify"]["unsealed"] > 0 and then["verify"]["findings"] == []
    inclusions = [i for proof in then["proofs"].values() for i in proof["inclusions"]]
    assert inclusions and all(i["checks"] for i in inclusions)
    assert {row["cause"] for row in then["request_answers"]} >= {"acks", "deadline", "error", "response", "accepted"}
    assert all(kept["rows"][queue] for queue in ("queue_apply", "queue_index", "queue_decide", "queue_settle"))


def test_every_answer_is_unchanged(ledger: Engine, kept: dict[str, Any]) -> None:
    now = answers(AckStore(ledger, Settings()))
    assert sorted(now) == sorted(kept["answers"])
    for question, answer in kept["answers"].items():
        assert now[question] == answer, question


def test_a_fact_changed_under_its_seal_is_found(ledger: Engine) -> None:
    with ledger.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))  # past the sealed_stay trigger
        changed = conn.execute(text(
            "UPDATE request_results SET status = status + 1 WHERE seq = ("
            " SELECT min(r.seq) FROM request_results r WHERE r.seq <= (SELECT max(upto_seq) FROM seals))"
            " RETURNING signal_id")).scalar_one()
    found = verify.verify(ledger, None)
    assert not found.ok and any("request_results" in f.line() for f in found.findings), (changed, found.findings)


@pytest.mark.spark
def test_the_pending_work_completes_keeps_what_was_decided_and_archives(
    ledger: Engine, kept: dict[str, Any], spark, tmp_path: Path
) -> None:
    from jobs import archive, pipeline
    from jobs.settings import PipelineSettings

    then = kept["answers"]
    settings = PipelineSettings(database_url=ledger.url.render_as_string(hide_password=False), partitions=2,
                                rules=Settings(max_attempts=2))
    pipeline.run(spark, settings)
    store = AckStore(ledger, Settings())
    after = answers(store)
    assert all(result is not None for result in after["results"].values()), "every request decided"
    for cid, result in then["results"].items():
        if result is not None:
            assert after["results"][cid] == result, cid
    assert after["verify"]["findings"] == [] and after["verify"]["seals"] > then["verify"]["seals"]
    sealed_then = {(cid, i["table"], i["seq"]): i for cid, proof in then["proofs"].items()
                   for i in proof["inclusions"]}
    sealed_now = {(cid, i["table"], i["seq"]): i for cid, proof in after["proofs"].items()
                  for i in proof["inclusions"]}
    assert sealed_then.items() <= sealed_now.items(), "a fact sealed then is proved as it was"

    with ledger.begin() as conn:  # as the connector of the kept connection would, then a pass seals them
        settlements.record_latest(conn, conn.execute(text(
            "SELECT signal_id FROM settlements WHERE carried_out_at IS NULL")).scalars().all())
    pipeline.run(spark, settings)
    after = answers(store)
    moved = archive.run(spark, settings_for(ledger, tmp_path / "archive"))
    assert moved["seals"] >= 1
    archived = answers(store)  # the windowed reports read the archive as well
    assert archived["verify"]["findings"] == []
    assert archived["reports"] == after["reports"]
    shown = plain({cid: store.stored_signal(cid) for cid in after["show"]})  # show too, signal by signal
    where = {cid: signal.pop("archived", None) for cid, signal in shown.items()}
    assert any(where.values()), "some signals were archived"
    assert shown == after["show"]
