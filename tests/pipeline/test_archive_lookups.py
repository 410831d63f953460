"""History stays answerable (issue 28, decisions #103): for generated ledgers, `show` of every
archived signal and every windowed report over a window reaching into the archive give what they
gave before the archive — read from the Parquet and the hot rows in a private PostgreSQL.

Each ledger: a random mix of API commands (labels, custom acks in time and late, things, hand-outs
to a subscriber), then messages of a broker connection whose settlements are not carried out
(they stay hot: windows hold hot and archived signals), through
the pipeline, sealed, then archived with a retention of 0 days; windows cut at random signals.
"""

from __future__ import annotations

import random
import time
from datetime import timedelta
from pathlib import Path
from typing import Iterator

import pytest
from sqlalchemy import Engine, text

from ackstore.ledger import archive_lookups
from ackstore.ledger.database import make_engine, scratch_database
from ackstore.ledger.named_sql import ledger_statement
from ackstore.ledger.reports import Window
from ackstore.ledger.schema import SEALED_TABLES
from ackstore.ledger.store import AckStore
from jobs import archive, pipeline
from jobs.settings import PipelineSettings
from tests.conftest import ADMIN_URL
from tests.support.archive_settings import settings_for
from tests.support.ledger import ack_message, twin_command
from tests.support.reports_asked import reports_over

SEEDS = (7, 28)


def generated(url: str, spark, seed: int) -> list[str]:
    """A ledger made of ``seed``'s random choices; the correlation ids of its signals."""
    from ackstore.ledger import migrate

    rng = random.Random(seed)
    engine = make_engine(url)
    migrate.upgrade(engine)
    store = AckStore(engine)
    store.declare("app", ["app:done", "app:audit"])
    ids, late = [], []
    for t in range(3):
        assert store.submit(twin_command("create", thing=f"org.acme/t{t}", path="/", value={},
                                         correlation_id=f"s{seed}-create-{t}"))["status"] == 202
        ids.append(f"s{seed}-create-{t}")
    for n in range(rng.randint(5, 9)):
        custom = rng.sample(["app:done", "app:audit"], rng.randint(1 if n == 0 else 0, 2))  # one to hand out
        labels = rng.sample(["twin-persisted", "search-persisted"], rng.randint(1, 2)) + custom
        thing = f"org.acme/t{rng.randint(0, 2)}"
        cid = f"s{seed}-{n}"
        assert store.submit(twin_command("modify", thing=thing, path="/attributes/n", value=n, correlation_id=cid,
                                         requested_acks=labels, timeout="6s"))["status"] == 202
        deadline = time.monotonic() + 6
        ids.append(cid)
        for label in custom:
            if rng.random() < 0.5:
                status = rng.choice([200, 200, 400, 500])
                assert store.acknowledge("app", ack_message(cid, label, status, thing=thing)) == {"status": 204}
            else:
                late.append((cid, label, thing))
    run = lambda: pipeline.run(spark, PipelineSettings(database_url=url, partitions=2))  # noqa: E731
    run()  # applies the changes; what waits for a custom ack waits for its deadline
    assert store.pull("app", max=rng.randint(2, 4))  # hand-outs of persisted changes: `show` prints them
    time.sleep(max(0.0, deadline - time.monotonic()))
    run()  # decides by the deadline: 408s
    for cid, label, thing in late:  # after the decision: late acks
        store.acknowledge("app", ack_message(cid, label, 200, thing=thing))
    run()
    # Then messages of a broker connection: decided and validated, their settlements not carried
    # out (no fact number yet) — they and every later seal stay hot.
    for n in range(rng.randint(1, 3)):
        cid = f"s{seed}-broker-{n}"
        assert store.submit(twin_command("modify", thing=f"org.acme/t{n % 3}", path="/attributes/b", value=n,
                                         correlation_id=cid), api="connectivity", source="amqp-orders",
                            source_message_id=cid)["status"] == 202
        ids.append(cid)
    run()
    engine.dispose()
    return ids


def windows(engine: Engine, seed: int) -> list[Window]:
    """The whole history, and two windows cut at random signals' times."""
    with engine.connect() as conn:
        times = [row[0] for row in conn.execute(text("SELECT received_at FROM signals ORDER BY received_at"))]
    rng = random.Random(seed)
    cuts = sorted(rng.sample(times, 2))
    return [Window(times[0] - timedelta(seconds=1), times[-1] + timedelta(seconds=1)),
            Window(cuts[0], cuts[1] + timedelta(microseconds=1)),
            Window(cuts[1], times[-1] + timedelta(hours=1))]


def assert_facts_of_finds_what_signal_facts_names(engine: Engine, ids: list[str]) -> None:
    """archive_lookups.facts_of spells signal_facts (sealing.sql) as look-ups, for the archive's rows too:
    over the hot ledger it finds every fact signal_facts names (a validation pass or search mark
    between them may come along), of every fact table."""
    facts = {table.name for table in SEALED_TABLES}
    tables = set()
    with engine.connect() as conn:
        for cid in ids:
            named = set(conn.execute(ledger_statement("seals", "facts_of_signal"), {"correlation_id": cid}).all())
            found = archive_lookups.facts_of(archive_lookups.Hot(conn), cid)
            looked_up = {(table, row["seq"]) for table, rows in found.items() if table in facts for row in rows}
            assert named <= looked_up, (cid, sorted(named - looked_up, key=str))
            tables |= {table for table, _ in named}
    assert tables == facts  # not vacuous: every fact table is some signal's


@pytest.fixture(params=SEEDS, ids=[f"seed{seed}" for seed in SEEDS])
def ledger(request, spark) -> Iterator[tuple[Engine, list[str], int]]:
    with scratch_database(ADMIN_URL, "history") as url:
        ids = generated(url, spark, request.param)
        engine = make_engine(url)
        yield engine, ids, request.param
        engine.dispose()


def test_show_and_every_windowed_report_are_the_same_after_archiving(ledger, tmp_path: Path, spark) -> None:
    engine, ids, seed = ledger
    store = AckStore(engine)
    asked = windows(engine, seed)
    shown_before = {cid: store.show(cid) for cid in ids}
    reports_before = [reports_over(store, window) for window in asked]
    assert all(shown_before.values()) and any(rows for found in reports_before for rows in found.values())
    assert any(shown["deliveries"] for shown in shown_before.values())  # hand-outs go with their signals
    assert_facts_of_finds_what_signal_facts_names(engine, ids)

    stats = archive.run(spark, settings_for(engine, tmp_path / "archive"))
    hot = {cid for cid in ids if "-broker-" in cid}
    with engine.connect() as conn:
        still = set(conn.execute(text("SELECT correlation_id FROM signals")).scalars())
        carried = conn.execute(text("SELECT count(*) FROM settlements WHERE seq IS NULL")).scalar_one()
    assert still == hot and carried == len(hot), stats  # the broker's wait, hot; all else left

    for cid in ids:
        after = store.show(cid)
        assert after is not None, cid
        where = after.pop("archived", None)
        if cid in hot:
            assert where is None, cid
        else:
            assert where["seal"] >= 1 and where["archive"] == 1 and where["location"] == str(tmp_path / "archive")
        assert after == shown_before[cid], cid
    assert store.show(f"s{seed}-unknown") is None
    for window, before in zip(asked, reports_before):
        assert reports_over(store, window) == before, window
