"""Reading the archive (issue 28, decisions #102): the facts a prefix of seals moved out, as the
archive job wrote them (jobs/archive.py: ``<root>/<table>/dt=…/range=…/``, Parquet, timestamps as
microseconds, jsonb as its text), read with pyarrow — for `verify`, `show` and the reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator
from urllib.parse import unquote, urlparse

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

    root = Path(local_path(location))
    if not root.is_dir():  # an archive the ledger records is gone: never read as empty
        raise FileNotFoundError(f"the archive at {location} is not there: its rows cannot be read")
    if not (root / table).is_dir():  # no seal of the archive held a row of this table
        return []
    dataset = ds.dataset(str(root / table), format="parquet", partitioning="hive")
    if not dataset.files:  # written with no row
        return []
    columns = [name for name in dataset.schema.names if name not in PARTITION_COLUMNS]
    return dataset.to_table(filter=where, columns=columns).to_pylist()


def local_path(location: str) -> str:
    """The local path of an archive's root: a path, or a ``file:`` URI in any of its forms
    (``file:/x``, ``file:///x``, ``file://localhost/x``, percent-encoded); pyarrow here reads no
    Hadoop URI (``s3a://…``: read it through Spark)."""
    parsed = urlparse(location)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        return unquote(parsed.path)
    if parsed.scheme and len(parsed.scheme) > 1:  # (a Windows drive letter is no scheme)
        raise ValueError(f"the archive at {location} is read through Spark, not here")
    return location
