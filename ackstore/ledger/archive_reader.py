"""Reading the archive (issue 28, decisions #102): the facts a prefix of seals moved out, as the
archive job wrote them (jobs/archive.py: ``<root>/<table>/dt=…/range=…/``, Parquet, timestamps as
microseconds, jsonb as its text), read with pyarrow — for `verify`, `show` and the reports — and
its manifests (``<root>/_manifests/dt=…/range=…/``), which `verify` holds the seals to.

An archive that cannot be read — its root gone, a file in it that is no Parquet — raises
ArchiveUnreadable naming the file: never read as empty, never pyarrow's error alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator
from urllib.parse import unquote, urlparse

from sqlalchemy import Connection

from ackstore.ledger.named_sql import ledger_statement

PARTITION_COLUMNS = ("dt", "range", "seal")
MANIFESTS = "_manifests"  # where jobs/archive.py writes them, beside the tables' folders
HIDDEN = ("_", ".")  # names pyarrow and Spark skip (_SUCCESS, .crc files, _temporary)


class ArchiveUnreadable(Exception):
    """An archive the ledger records that cannot be read, and which file (of ``table``'s rows,
    when it is one)."""

    def __init__(self, why: str, table: str | None = None) -> None:
        super().__init__(why)
        self.table = table


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
    import pyarrow as pa
    import pyarrow.dataset as ds

    folder = root_of(location) / table
    if not folder.is_dir():  # no seal of the archive held a row of this table
        return []
    try:
        dataset = ds.dataset(str(folder), format="parquet", partitioning="hive")
        if not dataset.files:  # written with no row
            return []
        columns = [name for name in dataset.schema.names if name not in PARTITION_COLUMNS]
        return dataset.to_table(filter=where, columns=columns).to_pylist()
    except (pa.ArrowException, OSError) as error:
        raise ArchiveUnreadable(_unreadable_file(folder, error), table) from None


def manifest_files(location: str) -> list[Path]:
    """The manifests the archive job wrote under ``location``: a text file of one JSON line in each
    ``_manifests/dt=…/range=…/`` folder (none when the folder is gone: the caller knows which
    seals they should record)."""
    found = manifests_folder(location).glob("dt=*/range=*/*")
    return sorted(path for path in found if path.is_file() and not path.name.startswith(HIDDEN))


def manifests_folder(location: str) -> Path:
    return root_of(location) / MANIFESTS


def root_of(location: str) -> Path:
    """The local folder of the archive at ``location``, or ArchiveUnreadable: an archive the
    ledger records that is gone is never read as empty."""
    try:
        root = Path(local_path(location))
    except ValueError as error:
        raise ArchiveUnreadable(str(error)) from None
    if not root.is_dir():
        raise ArchiveUnreadable(f"the archive at {location} is not there: its rows cannot be read")
    return root


def _unreadable_file(folder: Path, error: Exception) -> str:
    """Which file under ``folder`` pyarrow cannot read, and why: the first whose footer does not
    read (the scan's own error names it too, but in words that vary by version and step)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for path in sorted(folder.rglob("*")):
        if not path.is_file() or any(part.startswith(HIDDEN) for part in path.relative_to(folder).parts):
            continue
        try:
            pq.read_metadata(path)
        except (pa.ArrowException, OSError) as bad:
            return f"the file {path} cannot be read as Parquet ({_reason(bad)})"
    return f"a file under {folder} cannot be read ({_reason(error)})"


def _reason(error: Exception) -> str:
    """pyarrow's reason without the path it begins with (the message names the file already)."""
    return str(error).rsplit("': ", 1)[-1].strip()


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
