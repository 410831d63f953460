"""The archive job (issue 28, decisions #102): history that is settled, validated, sealed and older
than the retention leaves the hot tables for Parquet — whole seals, a prefix of them at a time.

1. **plan**: the seals after the archived prefix sealed before the retention began, cut before
   the first seal holding a fact of a signal that is not done (``signal_archivable``) or has a
   fact past the prefix (a signal's facts leave together: ``signal_facts``).
2. **write**: each fact table's rows of the prefix, as Parquet under ``<root>/<table>/``,
   partitioned by the day its seal was made and the prefix (``dt=YYYY-MM-DD/range=F-L``),
   timestamps as microseconds since 1970 and jsonb as its text (the canonical values). A re-run
   overwrites exactly those partitions.
3. **manifest**: per day, ``<root>/_manifests/dt=…/range=F-L/``: its seals (number, hash, root,
   rows per table) and the rows per table.
4. **read back**: the Parquet rows of each seal give its leaves again (ackstore.rules.canonical),
   their tree must have the seal's root — else nothing is deleted.
5. **delete**: one transaction records the archive (``archives``) and deletes the prefix's rows
   and leaves; the triggers allow a sealed row to go only so.

kill -9 anywhere: before 5 commits, the rows are hot and the partitions a re-run overwrites; after,
they are archived. Every row is hot or archived, once.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Iterator

from sqlalchemy import delete

from ackstore import faults
from ackstore.ledger.schema import SEALED_TABLES, deliveries
from ackstore.ledger.seals import FACT_TYPES, column_types
from ackstore.rules import canonical, merkle
from ackstore.rules.settings import retention_days
from jobs.settings import PipelineSettings
from jobs.sql import statement
from jobs.step import Step

JOB = "archive"
MANIFESTS = "_manifests"
DELIVERY_TYPES = column_types(deliveries)
LEAVES = "seal long, seq long, fact_table string, leaf binary"


@dataclass(frozen=True)
class Prefix:
    """The seals first..last: the facts numbered (after_seq, upto_seq]."""

    first_seal: int
    last_seal: int
    after_seq: int
    upto_seq: int

    @property
    def range(self) -> str:
        return f"{self.first_seal}-{self.last_seal}"


def run(spark: Any, settings: PipelineSettings) -> dict[str, Any]:
    retention = retention_days(settings.retention_days)  # before the lock and any work
    step = Step(JOB, settings, ())
    with step.locked():
        step.stats.update(seals=0, rows=0)
        prefix = plan(step, retention)
        if prefix is None:
            return step.record()
        sealed = seals_of(step, prefix)
        counts = {table: sum(seal["counts"][table] for seal in sealed) for table in FACT_TYPES}
        root = recorded_root(settings.archive_root)
        step.timed("write", lambda: write(spark, step, prefix, root, counts))
        faults.checkpoint("archive:written")
        write_manifests(spark, prefix, sealed, root)
        faults.checkpoint("archive:manifest")
        step.timed("read_back", lambda: read_back(spark, prefix, sealed, root, counts))
        handouts = handouts_read_back(spark, step, prefix, root)
        faults.checkpoint("archive:read_back")
        with step.deferrable():  # a login holding a lock on an archived row: the next run deletes them
            step.timed("delete", lambda: move_out(step, prefix, root, counts, handouts))
            step.stats.update(seals=prefix.last_seal - prefix.first_seal + 1, rows=sum(counts.values()),
                              first_seal=prefix.first_seal, last_seal=prefix.last_seal)
        return step.record()


def plan(step: Step, retention_days: float) -> Prefix | None:
    """The prefix of seals that may leave now, or None."""
    with step.engine.connect() as conn:
        found = conn.execute(statement(JOB, "candidates"), {"retention_seconds": retention_days * 86_400}).one()
        prefix = Prefix(*found) if found.first_seal is not None else None
        while prefix is not None:  # cutting the prefix may leave a signal straddling the new end: again
            blocked = conn.execute(statement(JOB, "blocked_from"), _interval(prefix)).scalar()
            if blocked is None:
                return prefix
            cut = conn.execute(statement(JOB, "prefix"), {"last_seal": prefix.last_seal, "blocked_from": blocked}).one()
            prefix = Prefix(*cut) if cut.first_seal is not None else None
    return None


def seals_of(step: Step, prefix: Prefix) -> list[dict[str, Any]]:
    with step.engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(statement(JOB, "seals_of"), _interval(prefix))]


def rows_query(table: str, prefix: Prefix) -> str:
    """A fact table's rows of the prefix as the archive holds them — timestamps as microseconds,
    jsonb as its text — with the seal that holds each and that seal's day. The numbers are the
    ledger's own, read back as integers: no text of anyone's reaches this SQL."""
    return _archived_query(table, FACT_TYPES[table], "", prefix)


def handouts_query(prefix: Prefix) -> str:
    """The hand-outs (deliveries) of the prefix's signals, with the signal's number as ``seq``
    and its seal: they are deleted with their signal, and `show` prints them. Not facts (a lease
    changes while it runs; by now the signal is settled and they do not), so in no seal; the key
    the tokens were made with stays behind: nothing reads it once the signal is settled."""
    types = {name: kind for name, kind in DELIVERY_TYPES.items() if name != "token_key"}
    return _archived_query("deliveries", types, "JOIN signals n ON n.id = t.signal_id", prefix, numbered_by="n.seq")


def _archived_query(table: str, types: dict[str, str], joined: str, prefix: Prefix, numbered_by: str = "t.seq") -> str:
    columns = [f"{_micros(f't.{name}')} AS {name}" if kind == "timestamptz"
               else f"t.{name}::text AS {name}" if kind == "jsonb" else f"t.{name}"
               for name, kind in types.items() if name != "seq"]
    return (f"SELECT {', '.join(columns)}, {numbered_by} AS seq, z.number AS seal, "
            f"to_char(z.sealed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS dt FROM {table} t {joined} "
            f"CROSS JOIN LATERAL (SELECT s.number, s.sealed_at FROM seals s WHERE s.upto_seq >= {numbered_by} "
            f"ORDER BY s.upto_seq LIMIT 1) z "
            f"WHERE {numbered_by} > {int(prefix.after_seq)} AND {numbered_by} <= {int(prefix.upto_seq)}")


def _micros(column: str) -> str:
    """A timestamp as the archive keeps it: microseconds since 1970; -infinity and infinity as
    canonical.INFINITE_MICROS (extract gives them as infinite numbers, which no bigint holds)."""
    infinite = " ".join(f"WHEN {column} = '{name}' THEN CAST('{micros}' AS bigint)"
                        for name, micros in canonical.INFINITE_MICROS.items())
    return f"CASE {infinite} ELSE (extract(epoch FROM {column}) * 1000000)::bigint END"


def write(spark: Any, step: Step, prefix: Prefix, root: str, counts: dict[str, int]) -> None:
    from pyspark.sql import functions as F

    queries = {table: rows_query(table, prefix) for table, rows in counts.items() if rows}
    if counts["signals"]:
        queries["deliveries"] = handouts_query(prefix)
    for table, query in queries.items():
        frame = step.postgres.read(spark, query, partition_column="seq",
                                   bounds=(prefix.after_seq + 1, prefix.upto_seq), partitions=step.settings.partitions)
        (frame.withColumn("range", F.lit(prefix.range)).write.mode("overwrite")
         .option("partitionOverwriteMode", "dynamic").partitionBy("dt", "range").parquet(f"{root}/{table}"))


def recorded_root(location: str) -> str:
    """The archive's root as ``archives`` records it: a local path made absolute (its readers run
    anywhere), a URI as given."""
    if "://" in location or location.startswith("file:"):
        return location.rstrip("/")
    return os.path.abspath(location)


def handouts_read_back(spark: Any, step: Step, prefix: Prefix, root: str) -> int:
    """How many hand-outs of the prefix were archived: all there are, or ArchiveMismatch (nothing
    deleted)."""
    with step.engine.connect() as conn:
        expected = conn.execute(statement(JOB, "handouts"), _interval(prefix)).scalar_one()
    found = 0
    if expected:
        found = (spark.read.parquet(f"{root}/deliveries").where(f"range = '{prefix.range}'").count())
    if found != expected:
        raise ArchiveMismatch(f"deliveries: {found} archived hand-outs of seals {prefix.range}, {expected} in the "
                              f"ledger: nothing is deleted")
    return found


def write_manifests(spark: Any, prefix: Prefix, sealed: list[dict[str, Any]], root: str) -> None:
    """One manifest per day of the prefix: its seals and how many rows of each table."""
    for day in sorted({seal["dt"] for seal in sealed}):
        seals = [seal for seal in sealed if seal["dt"] == day]
        manifest = {"dt": day, "range": prefix.range, "seals": [_seal_entry(seal) for seal in seals],
                    "rows": {table: sum(seal["counts"][table] for seal in seals) for table in FACT_TYPES}}
        (spark.createDataFrame([(json.dumps(manifest, sort_keys=True),)], "value string").coalesce(1)
         .write.mode("overwrite").text(f"{root}/{MANIFESTS}/dt={day}/range={prefix.range}"))


def read_back(spark: Any, prefix: Prefix, sealed: list[dict[str, Any]], root: str, counts: dict[str, int]) -> None:
    """The Parquet rows of every seal of the prefix give its root again, or ArchiveMismatch."""
    leaves = None
    for table, rows in counts.items():
        if not rows:
            continue
        days = sorted({seal["dt"] for seal in sealed if seal["counts"][table]})  # the partitions written
        paths = [f"{root}/{table}/dt={day}/range={prefix.range}" for day in days]
        frame = spark.read.option("basePath", f"{root}/{table}").parquet(*paths).drop("dt", "range")
        types = FACT_TYPES[table]
        found = frame.mapInArrow(lambda batches, table=table, types=types: _leaves(batches, table, types), LEAVES)
        leaves = found if leaves is None else leaves.unionByName(found)
    roots = {} if leaves is None else {
        row["seal"]: row for row in leaves.groupBy("seal").applyInPandas(_root, "seal long, leaves long, root string,"
                                                                             " counts string").collect()}
    for seal in sealed:
        got = roots.get(seal["number"])
        expected = (seal["leaves"], seal["root"], {t: n for t, n in seal["counts"].items() if n})
        actual = (got["leaves"], got["root"], json.loads(got["counts"])) if got else (0, merkle.EMPTY_ROOT.hex(), {})
        if actual != expected:
            raise ArchiveMismatch(f"seal {seal['number']}: the archived rows give {actual[0]} leaves and root "
                                  f"{actual[1]}, the seal {expected[0]} and {expected[1]}: nothing is deleted")


def move_out(step: Step, prefix: Prefix, root: str, counts: dict[str, int], handouts: int) -> None:
    """Record the archive and delete what it holds, in one transaction — the hand-outs its signals
    take with them too: a hand-out made since they were archived stops it (the re-run takes it)."""
    params = {**_interval(prefix), "location": root, "counts": json.dumps(counts)}
    with step.transaction() as conn:
        now = conn.execute(statement(JOB, "handouts"), params).scalar_one()
        if now != handouts:
            raise ArchiveMismatch(f"deliveries: {now} hand-outs of seals {prefix.range} now, {handouts} archived: "
                                  f"nothing is deleted")
        conn.execute(statement(JOB, "record"), params)
        for n, table in enumerate(SEALED_TABLES):
            gone = conn.execute(delete(table).where(table.c.seq > prefix.after_seq, table.c.seq <= prefix.upto_seq))
            if gone.rowcount != counts[table.name]:
                raise ArchiveMismatch(f"{table.name}: {gone.rowcount} rows in the prefix, {counts[table.name]} sealed")
            if n == 0:
                faults.checkpoint("archive:deleting")
        conn.execute(statement(JOB, "delete_leaves"), params)


class ArchiveMismatch(RuntimeError):
    """The archive does not hold what the seals say: nothing was deleted."""


def _interval(prefix: Prefix) -> dict[str, int]:
    return {"first_seal": prefix.first_seal, "last_seal": prefix.last_seal, "after_seq": prefix.after_seq,
            "upto_seq": prefix.upto_seq}


def _seal_entry(seal: dict[str, Any]) -> dict[str, Any]:
    return {key: seal[key] for key in ("number", "after_seq", "upto_seq", "leaves", "root", "hash", "counts")}


def _leaves(batches: Iterator[Any], table: str, types: dict[str, str]) -> Iterator[Any]:
    """In Spark's Python workers: each archived row's leaf, with its seal and number."""
    import pyarrow as pa

    for batch in batches:
        rows = batch.to_pylist()
        seals = [row.pop("seal") for row in rows]
        yield pa.RecordBatch.from_pydict({
            "seal": seals, "seq": [row["seq"] for row in rows], "fact_table": [table] * len(rows),
            "leaf": [merkle.leaf_hash(canonical.encode_row(table, row, types)) for row in rows]})


def _root(group: Any) -> Any:
    """In Spark's Python workers: one seal's root from its archived leaves (pandas in and out)."""
    import pandas as pd

    ordered = group.sort_values(["seq", "fact_table", "leaf"])
    counts = ordered["fact_table"].value_counts().to_dict()
    return pd.DataFrame({"seal": [int(group["seal"].iloc[0])], "leaves": [len(ordered)],
                         "root": [merkle.root([bytes(leaf) for leaf in ordered["leaf"]]).hex()],
                         "counts": [json.dumps({table: int(n) for table, n in counts.items()})]})
