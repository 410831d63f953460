"""Reading the archive (issue 28, decisions #102): the facts a prefix of seals moved out, as the
archive job wrote them (jobs/archive.py: ``<root>/<table>/dt=…/range=…/``, Parquet, timestamps as
microseconds, jsonb as its text), read with pyarrow — for `verify`, `show` and the reports.
"""

from __future__ import annotations

from typing import Any, Iterator

from sqlalchemy import Connection

from ackstore.ledger.named_sql import ledger_statement
from ackstore.ledger.seals import FACT_TYPES

PARTITION_COLUMNS = ("dt", "range", "seal")


def location_of(conn: Connection, seal: int) -> str | None:
    """Where the archive holding ``seal`` is, or None when the seal is hot."""
    return conn.execute(ledger_statement("archive", "location_of"), {"seal": seal}).scalar()


def archived_rows(location: str, table: str, after_seq: int, upto_seq: int) -> Iterator[dict[str, Any]]:
    """The archived rows of ``table`` numbered (after_seq, upto_seq], each with its columns alone."""
    import pyarrow.dataset as ds

    path = _local(location) + f"/{table}"
    try:
        dataset = ds.dataset(path, format="parquet", partitioning="hive")
    except FileNotFoundError:  # no seal of the archive held a row of this table
        return
    found = dataset.to_table(filter=(ds.field("seq") > after_seq) & (ds.field("seq") <= upto_seq),
                             columns=list(FACT_TYPES[table]))
    yield from found.to_pylist()


def _local(location: str) -> str:
    """A local path of the archive's root (``file:`` URIs too); pyarrow reads no Hadoop URI."""
    if location.startswith("file://"):
        return location[len("file://"):]
    if "://" in location:
        raise ValueError(f"the archive at {location} is read through Spark, not here")
    return location



