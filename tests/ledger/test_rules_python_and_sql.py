"""The spec's words named once in SQL (ackstore/ledger/sql/objects/rules.sql) are Python's words,
and no statement spells them out again."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from ackstore.rules import mqtt
from ackstore.rules.acks import BUILTIN_ISSUER, Disposition
from ackstore.rules.labels import BUILTIN_LABELS, LIVE_RESPONSE, SEARCH_PERSISTED, TWIN_PERSISTED
from ackstore.rules.settlement import Settlement, carried_out_as_allowed, labels_to_request_again, shared_source
from tests.support.paths import ROOT



@pytest.mark.parametrize(("function", "python"), [
    ("counted()", Disposition.COUNTED.value),
    ("twin_persisted()", TWIN_PERSISTED),
    ("search_persisted()", SEARCH_PERSISTED),
    ("live_response()", LIVE_RESPONSE),
])
def test_each_named_word_is_pythons(migrated_engine: Engine, function: str, python: str) -> None:
    with migrated_engine.connect() as conn:
        assert conn.execute(text(f"SELECT {function}")).scalar_one() == python


def test_the_builtin_labels_are_pythons(migrated_engine: Engine) -> None:
    with migrated_engine.connect() as conn:
        assert set(conn.execute(text("SELECT builtin_labels()")).scalar_one()) == BUILTIN_LABELS


@pytest.mark.parametrize(("cause", "judged"), [("deadline", True), ("error", True), ("acks", False),
                                               ("response", False), ("accepted", False)])
def test_which_decisions_a_deadline_judged(migrated_engine: Engine, cause: str, judged: bool) -> None:
    with migrated_engine.connect() as conn:
        assert conn.execute(text("SELECT judged_by_deadline(:c)"), {"c": cause}).scalar_one() is judged


def test_the_builtin_issuer_is_pythons(migrated_engine: Engine) -> None:
    with migrated_engine.connect() as conn:
        assert conn.execute(text("SELECT builtin_issuer()")).scalar_one() == BUILTIN_ISSUER


DECISIONS = [s.value for s in Settlement]


@pytest.mark.parametrize("decision", DECISIONS)
@pytest.mark.parametrize("instead", [None, *DECISIONS])
def test_what_a_transport_may_do_instead_is_pythons(migrated_engine: Engine, decision: str, instead: str | None) -> None:
    """Every pair: SQL's carried_out_as_allowed agrees with Python's, and MQTT's choice is allowed."""
    with migrated_engine.connect() as conn:
        allowed = conn.execute(text("SELECT carried_out_as_allowed(:d, :i)"), {"d": decision, "i": instead}).scalar_one()
    assert allowed is carried_out_as_allowed(decision, instead)
    for reconnects in (True, False):
        assert carried_out_as_allowed(decision, mqtt.carried_out_as(decision, reconnects))


@pytest.mark.parametrize("source", ["api", "cli", "plant-a", "API", ""])
def test_the_shared_sources_are_pythons(migrated_engine: Engine, source: str) -> None:
    with migrated_engine.connect() as conn:
        assert conn.execute(text("SELECT shared_source(:s)"), {"s": source}).scalar_one() is shared_source(source)


LABELS = ["twin-persisted", "search-persisted", "live-response", "c:a", "c:b"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requested=st.lists(st.sampled_from(LABELS), unique=True, max_size=5),
       statuses=st.dictionaries(st.sampled_from(LABELS), st.sampled_from([100, 200, 204, 299, 300, 404, 408, 412, 424,
                                                                          500, 503])))
def test_what_a_redelivery_requests_again_is_pythons(migrated_engine: Engine, requested: list, statuses: dict) -> None:
    """open_next_attempt holds its caller to SQL's labels_to_request_again: Python's, in order."""
    with migrated_engine.connect() as conn:
        again = conn.execute(text("SELECT labels_to_request_again(CAST(:r AS text[]), CAST(:s AS jsonb))"),
                             {"r": requested, "s": json.dumps(statuses)}).scalar_one()
    assert tuple(again) == labels_to_request_again(requested, statuses)


def test_a_named_word_folds_into_a_literal_where_an_index_needs_it(migrated_engine: Engine) -> None:
    """The partial unique index over counted acks still serves, and arbitrates, `= counted()`."""
    with migrated_engine.connect() as conn:
        conn.execute(text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(conn.execute(text(
            "EXPLAIN SELECT 1 FROM acks WHERE signal_id = 1 AND attempt = 1 AND label = 'x' "
            "AND disposition = counted()")).scalars())
        conn.rollback()
    assert "uq_acks_counted_signal_attempt_label" in plan


def _live_sql() -> dict[Path, str]:
    """Every statement and current definition the project runs (not the migrations' history)."""
    files = [*(ROOT / "ackstore").rglob("*.sql"), *(ROOT / "jobs").rglob("*.sql"), *(ROOT / "ackstore").rglob("*.py"),
             *(ROOT / "jobs").rglob("*.py"), *(ROOT / "dags").rglob("*.py")]
    return {path: path.read_text() for path in files if "superseded" not in path.parts}


@pytest.mark.parametrize("literal", ["'counted'", "'twin-persisted'", "'search-persisted'", "'live-response'",
                                     "('deadline', 'error')"])
def test_a_word_is_spelled_in_one_place(literal: str) -> None:
    found = [f"{path.relative_to(ROOT)}:{n}" for path, source in _live_sql().items()
             for n, line in enumerate(source.splitlines(), 1) if literal in line]
    assert found == [f"ackstore/ledger/sql/objects/rules.sql:{_line_of(literal)}"], found


def _line_of(literal: str) -> int:
    lines = (ROOT / "ackstore/ledger/sql/objects/rules.sql").read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if literal in line and not line.startswith("--"))


def test_no_statement_spells_the_builtin_labels_as_a_list() -> None:
    pattern = re.compile(r"ARRAY\['(twin|search|live)-")
    assert [path.name for path, source in _live_sql().items() if pattern.search(source)] == []


def test_refresh_statistics_knows_every_table_it_is_asked_for() -> None:
    """Its allow-list (objects/pipeline.sql) names tables that exist, and every table a step asks
    it to refresh: a table a merge newly writes must be added there, or the step fails at run time."""
    from ackstore.ledger import objects
    from ackstore.ledger.schema import metadata

    allowed = set(re.findall(r"'(\w+)'", objects.current()["refresh_statistics"].ddl.split("ARRAY[", 1)[1].split("]")[0]))
    assert allowed and allowed <= set(metadata.tables)
    asked = {name for path in (ROOT / "jobs").glob("*.py")
             for call in re.findall(r"refresh_statistics\([^)]*\)", path.read_text(), re.S)
             for name in re.findall(r"\b(stage_\w+|queue_\w+|search_\w+|command_responses|things|acks|"
                                    r"request_results|settlements)\b", call)}
    assert asked <= allowed, asked - allowed
