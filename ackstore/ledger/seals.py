"""Sealing the ledger (issue 28, decisions #101): every fact numbered since the last seal becomes
a leaf of the next seal's Merkle tree, and the seal chains to the one before.

The leaves are computed in PostgreSQL (the view ``fact_leaves``: SHA-256 of each row's canonical
bytes, ackstore.rules.canonical) and stored with the seal (``seal_leaves``); the tree's root and
the seal's hash are computed here (ackstore.rules.merkle). ``ackstore verify`` recomputes every
leaf from the rows in Python, never trusting the database's own functions.
"""

from __future__ import annotations

import json
import logging
import struct
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterator, Sequence

from sqlalchemy import BigInteger, Boolean, Connection, Engine, Integer, SmallInteger, Table, Text, cast
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TIMESTAMP
from sqlalchemy.exc import OperationalError

from ackstore import faults
from ackstore.ledger import failures
from ackstore.ledger.copying import copy_in_binary, copy_out
from ackstore.ledger.named_sql import ledger_sql, ledger_statement
from ackstore.ledger.schema import SEALED_TABLES
from ackstore.rules import errors, merkle
from ackstore.rules.settings import METRIC_SOURCES

LEAVES_PER_CHUNK = 65_536  # 2 MiB of hashes per seal_leaves row
log = logging.getLogger("ackstore.seal")


def column_types(table: Table) -> dict[str, str]:
    """A fact table's columns with their canonical types (ackstore.rules.canonical.OIDS), from
    its declaration: the one list of what a leaf holds besides the view fact_leaves."""
    kinds = ((SmallInteger, "int2"), (BigInteger, "int8"), (Integer, "int4"), (Boolean, "bool"), (Text, "text"),
             (JSONB, "jsonb"), (TIMESTAMP, "timestamptz"))
    types: dict[str, str] = {}
    for column in table.columns:
        if isinstance(column.type, ARRAY) and isinstance(column.type.item_type, Text):
            types[column.name] = "text[]"
            continue
        types[column.name] = next(name for kind, name in kinds if isinstance(column.type, kind))
    return types


FACT_TYPES = {table.name: column_types(table) for table in SEALED_TABLES}


def canonical_columns(table: Table, leave_out: Sequence[str] = ()) -> list[Any]:
    """A table's columns as their canonical values read them (ackstore.rules.canonical): jsonb as
    its text — what verify rebuilds leaves from, what the archive holds, and what archive_lookups loads."""
    return [cast(column, Text).label(column.name) if isinstance(column.type, JSONB) else column
            for column in table.columns if column.name not in leave_out]


@dataclass(frozen=True)
class Seal:
    """One seal: the facts numbered (after_seq, upto_seq], how many of each table, the root of
    their tree, and the chain."""

    number: int
    after_seq: int
    upto_seq: int
    counts: dict[str, int]
    leaves: int
    root: bytes
    previous: bytes
    hash: bytes
    sealed_at: datetime

    @classmethod
    def from_row(cls, row: Any) -> "Seal":
        values = dict(row._mapping)
        for name in ("root", "previous", "hash"):
            values[name] = bytes(values[name])
        return cls(**values)

    def expected_hash(self) -> bytes:
        """What this seal's hash must be, from its own fields."""
        return merkle.seal_hash(self.previous, self.number, self.counts, self.root)

    def head(self) -> dict[str, Any]:
        """The seal as an exported head (ackstore.ledger.heads): JSON, hashes in hex."""
        return {"number": self.number, "after_seq": self.after_seq, "upto_seq": self.upto_seq,
                "counts": self.counts, "leaves": self.leaves, "root": self.root.hex(),
                "previous": self.previous.hex(), "hash": self.hash.hex(), "sealed_at": self.sealed_at.isoformat()}


def position(engine: Engine) -> int | None:
    """The last fact number a seal may cover now, once the writers in flight have ended; None when
    one stayed open past the lock timeout (the next run seals what it wrote)."""
    try:
        with engine.begin() as conn:
            conn.execute(ledger_statement("seals", "patient_lock"))
            return conn.execute(ledger_statement("seals", "position")).scalar_one()
    except OperationalError as error:
        if failures.sqlstate(error) != failures.LOCK_NOT_AVAILABLE:
            raise
        log.warning("seal deferred: a transaction writing facts stayed open past the lock timeout")
        return None


def seal(engine: Engine, upto: int | None = None, *, one_core: bool = False,
         metric_sources: int = METRIC_SOURCES) -> Seal | None:
    """Seal every fact numbered since the last seal up to ``upto`` (a :func:`position`; default:
    one taken now), in one transaction — on ``one_core`` beside a step that keeps the other busy,
    else on every core — and add what the facts count to the metrics' totals, the sources past the
    first ``metric_sources`` connections as 'other' (decisions #127); the new seal, or None when nothing was numbered since
    (or a writer's transaction stayed open past the lock timeout: the next run seals it). Safe
    to run anywhere, any time, killed at any point: the position is taken first (after in-flight
    writers end), then the seal is written whole or not at all."""
    upto = position(engine) if upto is None else upto
    if upto is None:
        return None
    faults.checkpoint("seal:positioned")
    with engine.begin() as conn:
        conn.execute(ledger_statement("seals", "one_sealer"))
        last = latest(conn)
        after = last.upto_seq if last else 0
        if upto <= after:
            return None
        number = last.number + 1 if last else 1
        conn.exec_driver_sql(ledger_sql("seals", "sealing_settings"))
        if one_core:
            conn.execute(ledger_statement("seals", "one_core"))
        interval = {"after_seq": after, "upto_seq": upto}
        hashes = _binary_column(copy_out(conn, ledger_sql("seals", "leaves_in_order"), interval))
        found = conn.execute(ledger_statement("seals", "counts"), interval)
        counts = {table.name: 0 for table in SEALED_TABLES} | {row.fact_table: row.facts for row in found}
        if sum(counts.values()) != len(hashes):
            raise RuntimeError(f"seal {number}: {len(hashes)} leaves, {sum(counts.values())} facts counted")
        faults.checkpoint("seal:leaves_computed")
        conn.execute(ledger_statement("seals", "roll_up_without_jit"))
        conn.execute(ledger_statement("seals", "roll_up_metrics"), {**interval, "cap": metric_sources})
        # after the roll-up, which reads those awaited before; the new ones are kept only if their facts may still come
        conn.execute(ledger_statement("seals", "forget_awaited_facts"), interval)
        conn.execute(ledger_statement("seals", "await_facts"), interval)
        copy_in_binary(conn, ledger_sql("seals", "store_leaves"), _chunk_rows(number, hashes))
        root = merkle.root(hashes)
        previous = last.hash if last else merkle.GENESIS
        chained = merkle.seal_hash(previous, number, counts, root)
        sealed_at = conn.execute(ledger_statement("seals", "insert"), {
            "number": number, "after_seq": after, "upto_seq": upto, "counts": json.dumps(counts),
            "leaves": len(hashes), "root": root, "previous": previous, "hash": chained,
        }).scalar_one()
    return Seal(number, after, upto, counts, len(hashes), root, previous, chained, sealed_at)


def latest(conn: Connection) -> Seal | None:
    row = conn.execute(ledger_statement("seals", "latest")).one_or_none()
    return Seal.from_row(row) if row else None


def check_range(first: int, last: int | None) -> None:
    """The 400 unless seals ``first``..``last`` (None: to the newest) is a range a reader may ask
    for: numbers of 1 or more, the first not after the last (issue 50: ``verify --from 10 --to 1``
    checked no seal and answered verified)."""
    if first < 1 or last is not None and (last < 1 or first > last):
        raise errors.seal_range_invalid(first, last)


def between(conn: Connection, first: int, last: int) -> Iterator[Seal]:
    """The seals numbered first..last, in order."""
    for row in conn.execute(ledger_statement("seals", "between"), {"first": first, "last": last}):
        yield Seal.from_row(row)


def covering(conn: Connection, seq: int) -> Seal | None:
    """The seal that covers fact number ``seq``, if it is sealed."""
    row = conn.execute(ledger_statement("seals", "covering"), {"seq": seq}).one_or_none()
    found = Seal.from_row(row) if row else None
    return found if found and found.after_seq < seq else None


def stored_leaves(conn: Connection, number: int) -> list[bytes]:
    """Seal ``number``'s leaf hashes as stored, in order."""
    return split_leaves(conn.execute(ledger_statement("seals", "leaves"), {"seal": number}).scalars())


# PostgreSQL's binary COPY: a signature, flags and a header extension length, then per row the
# number of fields and each field's length and bytes, then -1.
COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
COPY_TRAILER = struct.pack(">h", -1)


def _binary_column(copied: bytes) -> list[bytes]:
    """The values of a binary COPY of one column of 32-byte values."""
    width = 2 + 4 + merkle.HASH_BYTES  # one field, its length, the value
    body = len(copied) - len(COPY_HEADER) - len(COPY_TRAILER)
    if body < 0 or body % width or not copied.startswith(COPY_HEADER):
        raise ValueError("not a binary COPY of 32-byte values")
    start = len(COPY_HEADER)
    return [copied[i + 6:i + width] for i in range(start, start + body, width)]


def _chunk_rows(number: int, hashes: list[bytes]) -> bytes:
    """A binary COPY of seal_leaves rows: LEAVES_PER_CHUNK hashes each."""
    rows = [COPY_HEADER]
    for chunk, start in enumerate(range(0, len(hashes), LEAVES_PER_CHUNK)):
        leaves = b"".join(hashes[start:start + LEAVES_PER_CHUNK])
        rows.append(struct.pack(">hiqiii", 3, 8, number, 4, chunk, len(leaves)) + leaves)
    rows.append(COPY_TRAILER)
    return b"".join(rows)


def split_leaves(chunks: Sequence[bytes] | Iterator[bytes]) -> list[bytes]:
    """32-byte hashes out of concatenated chunks."""
    size = merkle.HASH_BYTES
    hashes: list[bytes] = []
    for chunk in chunks:
        data = bytes(chunk)
        hashes += [data[i:i + size] for i in range(0, len(data), size)]
    return hashes
