"""Spark's workers stage rows with COPY (jobs/spark.py): every value a ledger may hold comes back
as it went in — NULL apart from an empty string and from the text 'null', quotes, commas, line
breaks, backslashes, any Unicode PostgreSQL stores — whether the rows come from a DataFrame
(``Postgres.append``) or are COPYed out, mapped and COPYed in by one task (``stage_in_tasks``)."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from jobs.spark import Postgres

pytestmark = pytest.mark.spark

COLUMNS = (("id", "int64"), ("label", "string"), ("flag", "bool_"))
TRICKY = [None, "", "null", "NULL", "\\N", '"', '""', "a,b", 'say "hi", then go', "line\nbreak", "cr\r\nlf",
          "tab\tbed", "back\\slash", " spaced ", "ü ☃ 𝄞", "'single'", "#", "--", "t", "f"]
TEXT = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)))


@pytest.fixture
def tables(engine: Engine) -> Iterator[Engine]:
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE staged_source (id bigint PRIMARY KEY, label text, flag boolean)"))
        conn.execute(text("CREATE TABLE staged_target (id bigint, label text, flag boolean, run_id text)"))
    yield engine
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE staged_source, staged_target"))


def _rows(values: list[str | None]) -> list[tuple[int, str | None, bool | None]]:
    return [(i, value, None if i % 3 == 2 else i % 2 == 0) for i, value in enumerate(values)]


def _staged(engine: Engine) -> list[tuple[Any, ...]]:
    with engine.begin() as conn:
        staged = conn.execute(text("SELECT id, label, flag, run_id FROM staged_target ORDER BY id")).all()
        conn.execute(text("TRUNCATE staged_target"))
    return [tuple(row) for row in staged]


def _through_a_task(spark, engine: Engine, url: str, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE staged_source"))
        if rows:
            conn.execute(text("INSERT INTO staged_source VALUES (:id, :label, :flag)"),
                         [{"id": i, "label": label, "flag": flag} for i, label, flag in rows])
    reads = ["SELECT id, label, flag FROM staged_source WHERE id % 2 = 0",
             "SELECT id, label, flag FROM staged_source WHERE id % 2 = 1"]
    Postgres.from_database_url(url).stage_in_tasks(spark, reads, COLUMNS, {"staged_target": lambda batches: batches},
                                                   "run-1")
    return _staged(engine)


def test_every_tricky_value_comes_back_from_a_task(spark, tables: Engine, database_url: str) -> None:
    rows = _rows(TRICKY)
    assert _through_a_task(spark, tables, database_url, rows) == [(*row, "run-1") for row in rows]


def test_a_task_with_nothing_to_read_stages_nothing(spark, tables: Engine, database_url: str) -> None:
    assert _through_a_task(spark, tables, database_url, []) == []


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.none(), TEXT), min_size=1, max_size=200))
def test_any_text_comes_back_from_a_task(spark, tables: Engine, database_url: str, values) -> None:
    rows = _rows(values)
    assert _through_a_task(spark, tables, database_url, rows) == [(*row, "run-1") for row in rows]


def test_every_tricky_value_comes_back_from_a_dataframe(spark, tables: Engine, database_url: str) -> None:
    from pyspark.sql import functions as F

    rows = _rows(TRICKY)
    frame = spark.createDataFrame(rows, "id bigint, label string, flag boolean").withColumn("run_id", F.lit("run-2"))
    assert Postgres.from_database_url(database_url).append(frame.repartition(3), "staged_target") == len(rows)
    assert _staged(tables) == [(*row, "run-2") for row in rows]
