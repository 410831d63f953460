"""Reading the archive (issue 28, decisions #102): the facts a prefix of seals moved out, as the
archive job wrote them (jobs/archive.py: ``<root>/<table>/dt=…/range=…/``, Parquet, timestamps as
microseconds, jsonb as its text), read with pyarrow — for `verify`, `show` and the reports.
"""

from __future__ import annotations

from typing import Any, Iterator

from sqlalchemy import Connection

from ackstore.ledger.named_sql import ledger_statement

PARTITION_COLUMNS = ("dt", "range", "seal")


def location_of(conn: Connection, seal: int) -> str | None:
    """Where the archive holding ``seal`` is, or None when the seal is hot."""
    return conn.execute(ledger_statement("archive", "location_of"), {"seal": seal}).scalar()


def archived_rows(location: str, table: str, after_seq: int, upto_seq: int) -> Iterator[dict[str, Any]]:
    """The archived rows of ``table`` numbered (after_seq, upto_seq], each with its columns alone."""
    import pyarrow.dataset as ds

    yield from filtered_rows(location, table, (ds.field("seq") > after_seq) & (ds.field("seq") <= upto_seq))


def filtered_rows(location: str, table: str, where: Any) -> list[dict[str, Any]]:
    """The archived rows of ``table`` that ``where`` (a pyarrow expression) holds, as stored
    (timestamps as microseconds, jsonb as its text), without the partition columns."""
    import pyarrow.dataset as ds

    try:
        dataset = ds.dataset(_local(location) + f"/{table}", format="parquet", partitioning="hive")
    except FileNotFoundError:  # no seal of the archive held a row of this table
        return []
    if not dataset.files:  # written with no row
        return []
    columns = [name for name in dataset.schema.names if name not in PARTITION_COLUMNS]
    return dataset.to_table(filter=where, columns=columns).to_pylist()


def _local(location: str) -> str:
    """A local path of the archive's root (``file:`` URIs too); pyarrow reads no Hadoop URI."""
    if location.startswith("file://"):
        return location[len("file://"):]
    if "://" in location:
        raise ValueError(f"the archive at {location} is read through Spark, not here")
    return location



